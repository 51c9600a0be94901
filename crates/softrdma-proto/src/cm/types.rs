//! The agent's public vocabulary: where a connection stands, what the consumer hears, what
//! a verb can refuse, the configuration, the counters, and the timing constants and the
//! encoding of CM timeouts.
//!
//! Owns only data types; calls nothing in the agent.

use softrdma_wire::cm::{RejRepr, RepRepr, ReqRepr, SidrRepRepr, SidrReqRepr};
use std::time::Duration;

/// How long after a listener goes a REQ for its service is dropped rather than rejected:
/// a program that listens again on the same port (perftest's `-R` does, between its
/// parameter exchange and its data connections) gets the requester's resend instead of
/// failing it; after that, nobody listening gets IBTA's REJ at once.
pub const RELISTEN_GRACE: Duration = Duration::from_secs(2);

/// The requester's side of [`RELISTEN_GRACE`]: a REQ that a peer rejects as "invalid
/// service ID" while a connection of ours to that peer is up, or less than that grace
/// after one ended, is sent again this much later (while resends are left) instead of
/// failing at once. Programs that make one connection after another to a peer tell the
/// next port over another channel and listen on it only then: perftest's `-R` client
/// connects its data QPs the moment its parameter connection is up, and qperf's server
/// sends each test's port before it listens. Linux's slower address resolution usually
/// hides those races, ours does not (and against rxe in an emulated VM, neither does
/// Linux's: qperf's tests failed one run in three there). A REQ to a peer we have not
/// been connected to lately is sent again only [`COLD_REJ_RESENDS`] times, so that a
/// port nobody listens on is reported rejected within a few hundred milliseconds.
pub const REJ_RETRY_WAIT: Duration = Duration::from_millis(100);

/// How often a REQ rejected as "invalid service ID" by a peer we were not connected to
/// lately is sent again, [`REJ_RETRY_WAIT`] apart: the first test of a qperf run meets
/// the same race as the later ones, with no connection before it to tell.
pub const COLD_REJ_RESENDS: u8 = 2;

/// A connection's (or a SIDR request's) local communication ID.
pub type CommId = u32;

/// 4.096 µs × 2^`code` (IBTA 12.6.5: the encoding of every CM timeout field), capped at
/// code 31.
pub fn cm_timeout(code: u8) -> Duration {
    Duration::from_nanos(4096u64 << code.min(31))
}

/// Where a connection stands (IBTA 12.9.6, figures 141-143).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmState {
    /// Active: REQ sent, waiting for REP.
    ReqSent,
    /// Active: the peer sent MRA for our REQ.
    MraReqRcvd,
    /// Active: REP received; the consumer readies its QP and sends RTU.
    RepRcvd,
    /// Active: we sent MRA for the REP.
    MraRepSent,
    /// Passive: REQ received; the consumer accepts or rejects.
    ReqRcvd,
    /// Passive: we sent MRA for the REQ.
    MraReqSent,
    /// Passive: REP sent, waiting for RTU.
    RepSent,
    /// Passive: the peer sent MRA for our REP.
    MraRepRcvd,
    /// Connected.
    Established,
    /// We sent DREQ, waiting for DREP.
    DreqSent,
    /// The peer sent DREQ; the consumer answers with `disconnect`.
    DreqRcvd,
    /// The connection is over; its IDs wait before they may be reused.
    TimeWait,
}

/// Counters of the agent's traffic, for `softrdma link show -s` and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CmCounters {
    /// MADs sent (first sends and resends).
    pub sent: u64,
    /// MADs resent after a timeout.
    pub retransmitted: u64,
    /// MADs received that parsed.
    pub received: u64,
    /// MADs that did not parse (dropped).
    pub malformed: u64,
    /// MADs that parsed but fit no connection or not its state (dropped or answered).
    pub unexpected: u64,
    /// Duplicates of a message already handled (answered with the last reply, if any).
    pub duplicates: u64,
    /// Exchanges given up after the last retry.
    pub timeouts: u64,
}

/// What the consumer hears.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmEvent<A> {
    /// A REQ for a service we listen on (the connection is in [`CmState::ReqRcvd`]).
    ReqReceived {
        /// The new connection.
        id: CommId,
        /// The peer.
        from: A,
        /// The request.
        req: Box<ReqRepr>,
    },
    /// A REP for our REQ (the connection is in [`CmState::RepRcvd`]).
    RepReceived {
        /// The connection.
        id: CommId,
        /// The reply.
        rep: Box<RepRepr>,
    },
    /// The passive side got the RTU (or was told by
    /// [`CmAgent::establish`](super::CmAgent::establish)).
    Established {
        /// The connection.
        id: CommId,
        /// The RTU's private data (zeros when established without one).
        private_data: Box<[u8]>,
    },
    /// The peer rejected the connection, or it timed out (reason TIMEOUT).
    Rejected {
        /// The connection.
        id: CommId,
        /// The REJ received (or the one sent, on a timeout).
        rej: Box<RejRepr>,
    },
    /// The peer needs longer to answer.
    MraReceived {
        /// The connection.
        id: CommId,
    },
    /// The peer asks to disconnect (the connection is in [`CmState::DreqRcvd`]).
    DreqReceived {
        /// The connection.
        id: CommId,
        /// The DREQ's private data.
        private_data: Box<[u8]>,
    },
    /// The peer answered our DREQ (or never did: `timed_out`); the connection is in
    /// TIMEWAIT.
    Disconnected {
        /// The connection.
        id: CommId,
        /// Whether the DREP never came.
        timed_out: bool,
    },
    /// A sent message went unanswered through every retry.
    Timeout {
        /// The connection.
        id: CommId,
        /// The message that went unanswered.
        message: &'static str,
    },
    /// TIMEWAIT is over: the connection is gone and its ID free.
    TimewaitExit {
        /// The connection.
        id: CommId,
    },
    /// A SIDR_REQ for a service we listen on; answer with
    /// [`CmAgent::sidr_reply`](super::CmAgent::sidr_reply).
    SidrReqReceived {
        /// The request's handle here.
        id: CommId,
        /// The peer.
        from: A,
        /// The request.
        req: Box<SidrReqRepr>,
    },
    /// The answer to our SIDR_REQ.
    SidrRepReceived {
        /// The request.
        id: CommId,
        /// The reply.
        rep: Box<SidrRepRepr>,
    },
}

/// A verb the agent refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CmError {
    /// No such connection.
    #[error("no CM connection with ID {0:#x}")]
    UnknownId(CommId),
    /// The verb does not apply in the connection's state.
    #[error("{verb} is not allowed in CM state {state:?} (connection {id:#x})")]
    WrongState {
        /// The connection.
        id: CommId,
        /// Its state.
        state: CmState,
        /// The verb.
        verb: &'static str,
    },
    /// More private data than the message carries.
    #[error("{len} bytes of private data do not fit a {message} ({max} at most)")]
    PrivateDataTooLong {
        /// The message.
        message: &'static str,
        /// Bytes given.
        len: usize,
        /// Bytes allowed.
        max: usize,
    },
    /// Somebody already listens on the service ID.
    #[error("service ID {0:#018x} is already listened on")]
    AddressInUse(u64),
}

/// The agent's settings.
#[derive(Debug, Clone, Copy)]
pub struct CmConfig {
    /// The CA GUID our messages carry.
    pub ca_guid: u64,
    /// The subnet's packet lifetime (one way): added twice to every response timeout and
    /// once to TIMEWAIT.
    pub packet_lifetime: Duration,
    /// The response timeout code for the SIDR_REQs we send, 4.096 µs × 2^n (a connection's
    /// messages wait as long as its REQ says).
    pub response_timeout: u8,
    /// How often a SIDR_REQ is resent before giving up (a connection's messages are resent
    /// as often as its REQ says).
    pub max_retries: u8,
    /// Our CA's ACK delay code, for TIMEWAIT.
    pub ack_delay: u8,
}

impl Default for CmConfig {
    fn default() -> Self {
        Self {
            ca_guid: 0,
            packet_lifetime: Duration::from_millis(1),
            // 4.096 µs × 2^16 = 268 ms.
            response_timeout: 16,
            max_retries: 15,
            ack_delay: 15,
        }
    }
}
