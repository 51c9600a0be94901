//! The IB communication manager as a pure state machine (IBTA vol. 1, chapter 12): the
//! connection states of 12.9.6 for both the active and the passive side, service ID
//! resolution (SIDR, 12.11), message retransmission with the timeouts the messages carry,
//! duplicate detection, MRA, REJ, and TIMEWAIT.
//!
//! # Calling contract
//! A [`CmAgent`] serves one port's QP1: every CM MAD that arrives there goes to
//! [`CmAgent::handle_mad`], whatever connection it belongs to. It has no sockets, clock or
//! threads. `A` is the caller's name for a peer (the address its MADs came from and go to).
//!
//! * **Inputs.** The consumer's verbs ([`CmAgent::connect`], [`CmAgent::listen`],
//!   [`CmAgent::accept`], [`CmAgent::reject`], [`CmAgent::ready_to_use`],
//!   [`CmAgent::establish`], [`CmAgent::disconnect`], [`CmAgent::mra`],
//!   [`CmAgent::sidr_request`], [`CmAgent::sidr_reply`], [`CmAgent::destroy`]),
//!   [`CmAgent::handle_mad`] and [`CmAgent::handle_timeout`].
//! * **Outputs.** [`CmAgent::poll_transmit`] (MADs to send, with their peer),
//!   [`CmAgent::poll_event`] (what the consumer must hear) and [`CmAgent::poll_timeout`]
//!   (when `handle_timeout` is next due). Drain them after every input.
//! * **Time** is an [`Instant`] passed in; it must not go backwards.
//! * Nothing here panics on any MAD. A MAD that does not parse is counted in
//!   [`CmCounters::malformed`] and dropped; one that parses but fits no connection, or not
//!   its state, is counted in [`CmCounters::unexpected`] and dropped (or answered, where
//!   12.9.6 says so: a REJ for a REQ nobody listens for, the last reply again for a
//!   duplicate).
//!
//! # Timing
//! A sent REQ, REP, DREQ or SIDR_REQ is resent when its answer is late: after the
//! response timeout the message carries (4.096 µs × 2^n, IBTA 12.7.26 and 12.7.27) plus
//! twice the packet lifetime, up to `max_cm_retries` times; then the consumer hears
//! [`CmEvent::Timeout`] (a REQ or REP that went unanswered is also rejected with reason
//! TIMEOUT, as 12.9.6 asks). An MRA stretches the wait by its service timeout. A connection
//! that ends passes through TIMEWAIT for the packet lifetime and the peer's ACK delay, so that
//! its QPN and communication ID are not reused while packets may still be in flight.

use crate::types::Instant;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use softrdma_wire::cm::{
    self, CmMad, CmMessage, DreqRepr, IdsRepr, MessageRef, MraRepr, PrivateData, RejRepr, RepRepr,
    ReqRepr, SidrRepRepr, SidrReqRepr, ap_status, rej_reason, sidr_status,
};
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::hash::Hash;
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
    /// The passive side got the RTU (or was told by [`CmAgent::establish`]).
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
    /// A SIDR_REQ for a service we listen on; answer with [`CmAgent::sidr_reply`].
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

/// One connection.
#[derive(Debug)]
struct Conn<A> {
    peer: A,
    state: CmState,
    active: bool,
    tid: u64,
    remote_comm_id: u32,
    remote_ca_guid: u64,
    local_qpn: u32,
    remote_qpn: u32,
    /// The message that is resent on a timeout or on a duplicate of what it answered.
    last: Option<CmMad>,
    /// When the timer fires, and how many resends are left.
    deadline: Option<Instant>,
    retries_left: u8,
    /// Resends per message: the REQ's max CM retries, for both sides.
    max_retries: u8,
    /// The wait between resends: for the active side the REQ's remote response timeout,
    /// for the passive side its local one (the time the active side said it needs to
    /// answer), each with twice the packet lifetime.
    timeout: Duration,
}

/// A SIDR request we sent, or answered.
#[derive(Debug)]
struct Sidr<A> {
    peer: A,
    active: bool,
    request_id: u32,
    last: CmMad,
    deadline: Option<Instant>,
    retries_left: u8,
}

/// The communication manager of one port (see the module docs).
#[derive(Debug)]
pub struct CmAgent<A> {
    config: CmConfig,
    rng: ChaCha8Rng,
    conns: HashMap<CommId, Conn<A>>,
    /// Connections by the peer's CA GUID and communication ID: how a REQ is known for a
    /// duplicate (IBTA 12.9.6.1: the pair names the peer's connection).
    by_remote: HashMap<(u64, u32), CommId>,
    sidrs: HashMap<CommId, Sidr<A>>,
    /// SIDR requests we answered, by peer and request ID.
    sidr_by_remote: HashMap<(A, u32), CommId>,
    listening: BTreeSet<u64>,
    /// Services whose listener went, and when (see [`RELISTEN_GRACE`]).
    unlistened: HashMap<u64, Instant>,
    /// Services bound by a consumer that does not listen on them yet (see
    /// [`CmAgent::bind`]).
    bound: HashSet<u64>,
    /// Peers to which a connection of ours last ended, and when (see [`REJ_RETRY_WAIT`]).
    ended: HashMap<A, Instant>,
    timers: BTreeSet<(Instant, CommId)>,
    /// The low byte of every ID this agent draws (see [`CmAgent::set_id_tag`]).
    tag: u8,
    out: VecDeque<(A, CmMad)>,
    events: VecDeque<CmEvent<A>>,
    counters: CmCounters,
}

impl<A: Copy + Eq + Hash + core::fmt::Debug> CmAgent<A> {
    /// An agent with nothing open; `seed` draws its communication IDs and transaction IDs.
    pub fn new(config: CmConfig, seed: u64) -> Self {
        Self {
            config,
            rng: ChaCha8Rng::seed_from_u64(seed),
            conns: HashMap::new(),
            by_remote: HashMap::new(),
            sidrs: HashMap::new(),
            sidr_by_remote: HashMap::new(),
            listening: BTreeSet::new(),
            unlistened: HashMap::new(),
            bound: HashSet::new(),
            ended: HashMap::new(),
            timers: BTreeSet::new(),
            tag: 0,
            out: VecDeque::new(),
            events: VecDeque::new(),
            counters: CmCounters::default(),
        }
    }

    /// The counters so far.
    pub fn counters(&self) -> CmCounters {
        self.counters
    }

    /// A connection's state.
    pub fn state(&self, id: CommId) -> Option<CmState> {
        self.conns.get(&id).map(|c| c.state)
    }

    /// Whether this side sent the connection's REQ (the active side), as `res show`
    /// says.
    pub fn is_active(&self, id: CommId) -> Option<bool> {
        self.conns.get(&id).map(|c| c.active)
    }

    /// Connections and SIDR requests alive (TIMEWAIT included): what `res show` lists.
    pub fn len(&self) -> usize {
        self.conns.len() + self.sidrs.len()
    }

    /// Whether nothing is alive.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Takes REQs and SIDR_REQs for `service_id` from now on.
    pub fn listen(&mut self, service_id: u64) -> Result<(), CmError> {
        if !self.listening.insert(service_id) {
            return Err(CmError::AddressInUse(service_id));
        }
        self.bound.remove(&service_id);
        self.unlistened.remove(&service_id);
        Ok(())
    }

    /// A consumer bound `service_id` and will likely listen on it: until it does (or
    /// [`Self::unbind`]s), a REQ for it is dropped rather than rejected, so that the
    /// requester's resend finds the listener (rdma_cm programs bind, tell their peer the
    /// port, then listen).
    pub fn bind(&mut self, service_id: u64) {
        self.bound.insert(service_id);
    }

    /// The consumer that bound `service_id` let it go without listening.
    pub fn unbind(&mut self, service_id: u64) {
        self.bound.remove(&service_id);
    }

    /// Takes no more requests for `service_id` (connections made stay). For
    /// [`RELISTEN_GRACE`] after, a REQ for it is dropped rather than rejected.
    pub fn unlisten(&mut self, now: Instant, service_id: u64) {
        if self.listening.remove(&service_id) {
            self.unlistened.insert(service_id, now);
        }
    }

    /// Makes every communication ID and SIDR request ID drawn from now on end in `tag`:
    /// where several agents share one port (one per process of a shared device), the
    /// port's reader tells whose a MAD is by the ID it names. The other 24 bits stay
    /// random.
    pub fn set_id_tag(&mut self, tag: u8) {
        self.tag = tag;
    }

    /// A fresh communication ID: random but for its tag, non-zero, not in use.
    fn new_id(&mut self) -> CommId {
        loop {
            let id: u32 = self.rng.random::<u32>() & !0xFF | u32::from(self.tag);
            if id != 0 && !self.conns.contains_key(&id) && !self.sidrs.contains_key(&id) {
                return id;
            }
        }
    }

    fn send(&mut self, to: A, mad: CmMad) {
        self.counters.sent += 1;
        self.out.push_back((to, mad));
    }

    fn arm(&mut self, id: CommId, at: Option<Instant>) {
        let old = match self.conns.get_mut(&id) {
            Some(c) => core::mem::replace(&mut c.deadline, at),
            None => match self.sidrs.get_mut(&id) {
                Some(s) => core::mem::replace(&mut s.deadline, at),
                None => return,
            },
        };
        if let Some(t) = old {
            self.timers.remove(&(t, id));
        }
        if let Some(t) = at {
            self.timers.insert((t, id));
        }
    }

    /// The wait for an answer to a message that allows `code`.
    fn wait_for(&self, code: u8) -> Duration {
        cm_timeout(code) + 2 * self.config.packet_lifetime
    }

    /// Sends `req` (its `local_comm_id` and `local_ca_guid` are filled in here) to `peer`
    /// and waits for the REP; returns the new connection's ID.
    pub fn connect(&mut self, now: Instant, peer: A, mut req: ReqRepr) -> CommId {
        let id = self.new_id();
        req.local_comm_id = id;
        req.local_ca_guid = self.config.ca_guid;
        // IBTA 13.4.6.4: the requester picks a transaction ID unique among its own.
        let tid = u64::from(self.rng.random::<u32>()) << 32 | u64::from(id);
        let mad = CmMad {
            tid,
            attr_mod: 0,
            msg: CmMessage::Req(req),
        };
        let timeout = self.wait_for(req.remote_cm_response_timeout);
        self.conns.insert(
            id,
            Conn {
                peer,
                state: CmState::ReqSent,
                active: true,
                tid,
                remote_comm_id: 0,
                remote_ca_guid: 0,
                local_qpn: req.local_qpn,
                remote_qpn: 0,
                last: Some(mad),
                deadline: None,
                retries_left: req.max_cm_retries,
                max_retries: req.max_cm_retries,
                timeout,
            },
        );
        self.send(peer, mad);
        self.arm(id, Some(now.add(timeout)));
        id
    }

    /// How long a connection stays in TIMEWAIT (IBTA 12.9.6.3: long enough for every
    /// packet of the connection to leave the fabric): a round trip's packet lifetime and
    /// the CA's ACK delay.
    fn timewait(&self) -> Duration {
        2 * self.config.packet_lifetime + cm_timeout(self.config.ack_delay)
    }

    fn conn(&mut self, id: CommId) -> Result<&mut Conn<A>, CmError> {
        self.conns.get_mut(&id).ok_or(CmError::UnknownId(id))
    }

    fn wrong(id: CommId, state: CmState, verb: &'static str) -> CmError {
        CmError::WrongState { id, state, verb }
    }

    /// Passive side: answers the REQ of connection `id` with `rep` (its communication IDs
    /// and CA GUID are filled in here) and waits for the RTU.
    pub fn accept(&mut self, now: Instant, id: CommId, mut rep: RepRepr) -> Result<(), CmError> {
        let guid = self.config.ca_guid;
        let c = self.conn(id)?;
        if !matches!(c.state, CmState::ReqRcvd | CmState::MraReqSent) {
            return Err(Self::wrong(id, c.state, "accept"));
        }
        rep.local_comm_id = id;
        rep.remote_comm_id = c.remote_comm_id;
        rep.local_ca_guid = guid;
        c.local_qpn = rep.local_qpn;
        let mad = CmMad {
            tid: c.tid,
            attr_mod: 0,
            msg: CmMessage::Rep(rep),
        };
        c.state = CmState::RepSent;
        c.last = Some(mad);
        c.retries_left = c.max_retries;
        let (peer, timeout) = (c.peer, c.timeout);
        self.send(peer, mad);
        self.arm(id, Some(now.add(timeout)));
        Ok(())
    }

    /// Rejects connection `id` (a REQ received, or a REP received) with `reason` and
    /// private data; the connection ends (TIMEWAIT if the peer may have connected a QP).
    pub fn reject(
        &mut self,
        now: Instant,
        id: CommId,
        reason: u16,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let pd = private(private_data, "REJ")?;
        let c = self.conn(id)?;
        let message = match c.state {
            CmState::ReqRcvd | CmState::MraReqSent => MessageRef::Req,
            CmState::RepRcvd | CmState::MraRepSent => MessageRef::Rep,
            s => return Err(Self::wrong(id, s, "reject")),
        };
        let rej = RejRepr {
            // A REQ's sender never learns our ID: Linux sends 0 here too.
            local_comm_id: if message == MessageRef::Req { 0 } else { id },
            remote_comm_id: c.remote_comm_id,
            message,
            reason,
            ari: Default::default(),
            private_data: pd,
        };
        let (peer, tid) = (c.peer, c.tid);
        self.send(
            peer,
            CmMad {
                tid,
                attr_mod: 0,
                msg: CmMessage::Rej(rej),
            },
        );
        if message == MessageRef::Rep {
            self.enter_timewait(now, id);
        } else {
            self.forget(id);
        }
        Ok(())
    }

    /// Active side: the QP is ready; sends the RTU and the connection is established.
    pub fn ready_to_use(&mut self, id: CommId, private_data: &[u8]) -> Result<(), CmError> {
        let pd = private(private_data, "RTU")?;
        let c = self.conn(id)?;
        if !matches!(c.state, CmState::RepRcvd | CmState::MraRepSent) {
            return Err(Self::wrong(id, c.state, "ready_to_use"));
        }
        let mad = CmMad {
            tid: c.tid,
            attr_mod: 0,
            msg: CmMessage::Rtu(IdsRepr {
                local_comm_id: id,
                remote_comm_id: c.remote_comm_id,
                private_data: pd,
            }),
        };
        c.state = CmState::Established;
        // Kept to answer a duplicate REP (our RTU was lost).
        c.last = Some(mad);
        let peer = c.peer;
        self.send(peer, mad);
        self.arm(id, None);
        Ok(())
    }

    /// Passive side: traffic arrived on the QP before the RTU did (IBTA 12.9.6.2: the
    /// communication-established event stands in for it).
    pub fn establish(&mut self, id: CommId) -> Result<(), CmError> {
        let c = self.conn(id)?;
        match c.state {
            CmState::RepSent | CmState::MraRepRcvd => {
                c.state = CmState::Established;
                self.arm(id, None);
                self.events.push_back(CmEvent::Established {
                    id,
                    private_data: Box::new([]),
                });
                Ok(())
            }
            CmState::Established => Ok(()),
            s => Err(Self::wrong(id, s, "establish")),
        }
    }

    /// Asks the peer for more time: an MRA for the REQ we hold (passive) or the REP
    /// (active), with `service_timeout` (4.096 µs × 2^n) on top of the packet lifetime.
    pub fn mra(&mut self, id: CommId, service_timeout: u8) -> Result<(), CmError> {
        let c = self.conn(id)?;
        let (message, next) = match c.state {
            CmState::ReqRcvd | CmState::MraReqSent => (MessageRef::Req, CmState::MraReqSent),
            CmState::RepRcvd | CmState::MraRepSent => (MessageRef::Rep, CmState::MraRepSent),
            s => return Err(Self::wrong(id, s, "mra")),
        };
        let mad = CmMad {
            tid: c.tid,
            attr_mod: 0,
            msg: CmMessage::Mra(MraRepr {
                local_comm_id: id,
                remote_comm_id: c.remote_comm_id,
                message,
                service_timeout,
                private_data: PrivateData::default(),
            }),
        };
        c.state = next;
        c.last = Some(mad);
        let peer = c.peer;
        self.send(peer, mad);
        Ok(())
    }

    /// Starts or answers a disconnection: from ESTABLISHED sends DREQ and waits for DREP;
    /// from DREQ_RCVD sends DREP and enters TIMEWAIT; in DREQ_SENT and TIMEWAIT does
    /// nothing. Before the connection is established it is rejected instead (as
    /// rdma_disconnect does).
    pub fn disconnect(
        &mut self,
        now: Instant,
        id: CommId,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let c = self.conn(id)?;
        match c.state {
            // The RTU was lost: the peer may use the QP already.
            CmState::Established | CmState::RepSent | CmState::MraRepRcvd => {
                let mad = CmMad {
                    tid: c.tid,
                    attr_mod: 0,
                    msg: CmMessage::Dreq(DreqRepr {
                        local_comm_id: id,
                        remote_comm_id: c.remote_comm_id,
                        remote_qpn: c.remote_qpn,
                        private_data: private(private_data, "DREQ")?,
                    }),
                };
                c.state = CmState::DreqSent;
                c.last = Some(mad);
                c.retries_left = c.max_retries;
                let (peer, timeout) = (c.peer, c.timeout);
                self.send(peer, mad);
                self.arm(id, Some(now.add(timeout)));
                Ok(())
            }
            CmState::DreqRcvd => {
                let mad = CmMad {
                    tid: c.tid,
                    attr_mod: 0,
                    msg: CmMessage::Drep(IdsRepr {
                        local_comm_id: id,
                        remote_comm_id: c.remote_comm_id,
                        private_data: private(private_data, "DREP")?,
                    }),
                };
                c.last = Some(mad);
                let peer = c.peer;
                self.send(peer, mad);
                self.enter_timewait(now, id);
                Ok(())
            }
            CmState::ReqRcvd | CmState::MraReqSent | CmState::RepRcvd | CmState::MraRepSent => {
                self.reject(now, id, rej_reason::CONSUMER_DEFINED, private_data)
            }
            // Already ending (both ends disconnected, or the peer's DREQ was answered):
            // nothing more to send, as Linux's rdma_disconnect then returns 0 too.
            CmState::DreqSent | CmState::TimeWait => Ok(()),
            s => Err(Self::wrong(id, s, "disconnect")),
        }
    }

    /// Destroys every connection and SIDR request, each as [`Self::destroy`] does (the
    /// process that runs the agent is going: its peers hear it now, not after their
    /// timeouts).
    pub fn destroy_all(&mut self, now: Instant) {
        let ids: Vec<CommId> = self
            .conns
            .keys()
            .chain(self.sidrs.keys())
            .copied()
            .collect();
        for id in ids {
            self.destroy(now, id);
        }
    }

    /// Drops a connection at once, whatever its state (the consumer destroyed its ID): a
    /// connection still being set up is rejected (TIMEOUT, as the kernel's CM does for a
    /// destroyed ID), an established one gets a DREQ that is not waited for.
    pub fn destroy(&mut self, now: Instant, id: CommId) {
        if let Some(s) = self.sidrs.remove(&id) {
            if let Some(t) = s.deadline {
                self.timers.remove(&(t, id));
            }
            if !s.active {
                self.sidr_by_remote.remove(&(s.peer, s.request_id));
            }
            return;
        }
        let Some(c) = self.conns.get(&id) else {
            return;
        };
        match c.state {
            CmState::ReqSent
            | CmState::MraReqRcvd
            | CmState::ReqRcvd
            | CmState::MraReqSent
            | CmState::RepRcvd
            | CmState::MraRepSent
            | CmState::RepSent
            | CmState::MraRepRcvd => {
                // As Linux's CM does for a destroyed ID: TIMEOUT while our REQ waits,
                // consumer-defined otherwise.
                let reason = if matches!(c.state, CmState::ReqSent | CmState::MraReqRcvd) {
                    rej_reason::TIMEOUT
                } else {
                    rej_reason::CONSUMER_DEFINED
                };
                let mad = self.rej_mad(c, id, reason);
                let peer = c.peer;
                self.send(peer, mad);
            }
            CmState::Established => {
                let _ = self.disconnect(now, id, &[]);
            }
            CmState::DreqRcvd => {
                let _ = self.disconnect(now, id, &[]);
            }
            CmState::DreqSent | CmState::TimeWait => {}
        }
        self.forget(id);
    }

    /// A REJ of connection `id` in its state. IBTA 12.6.7.1: the message rejected is the
    /// REQ or REP we hold unanswered, and "other" otherwise; a REJ of a REQ carries no
    /// local ID (its sender never learnt ours; Linux sends 0 too).
    fn rej_mad(&self, c: &Conn<A>, id: CommId, reason: u16) -> CmMad {
        let message = match c.state {
            CmState::ReqRcvd | CmState::MraReqSent => MessageRef::Req,
            CmState::RepRcvd | CmState::MraRepSent => MessageRef::Rep,
            _ => MessageRef::Other,
        };
        let mut ari = cm::Info::default();
        if reason == rej_reason::TIMEOUT {
            // IBTA 12.6.7.2: a TIMEOUT reject carries the sender's CA GUID.
            ari.len = 8;
            ari.data.0[..8].copy_from_slice(&self.config.ca_guid.to_be_bytes());
        }
        CmMad {
            tid: c.tid,
            attr_mod: 0,
            msg: CmMessage::Rej(RejRepr {
                local_comm_id: if c.state == CmState::ReqRcvd { 0 } else { id },
                remote_comm_id: c.remote_comm_id,
                message,
                reason,
                ari,
                private_data: PrivateData::default(),
            }),
        }
    }

    fn forget(&mut self, id: CommId) {
        self.arm(id, None);
        if let Some(c) = self.conns.remove(&id)
            && c.remote_comm_id != 0
            && self.by_remote.get(&(c.remote_ca_guid, c.remote_comm_id)) == Some(&id)
        {
            self.by_remote.remove(&(c.remote_ca_guid, c.remote_comm_id));
        }
    }

    fn enter_timewait(&mut self, now: Instant, id: CommId) {
        let at = now.add(self.timewait());
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        c.state = CmState::TimeWait;
        if c.active {
            let peer = c.peer;
            self.ended.retain(|_, t| now.since(*t) < RELISTEN_GRACE);
            self.ended.insert(peer, now);
        }
        self.arm(id, Some(at));
    }

    /// Sends a SIDR_REQ for `req.service_id` to `peer` (its request ID is filled in here)
    /// and waits for the SIDR_REP.
    pub fn sidr_request(&mut self, now: Instant, peer: A, mut req: SidrReqRepr) -> CommId {
        let id = self.new_id();
        req.request_id = id;
        let tid = u64::from(self.rng.random::<u32>()) << 32 | u64::from(id);
        let mad = CmMad {
            tid,
            attr_mod: 0,
            msg: CmMessage::SidrReq(req),
        };
        self.sidrs.insert(
            id,
            Sidr {
                peer,
                active: true,
                request_id: id,
                last: mad,
                deadline: None,
                retries_left: self.config.max_retries,
            },
        );
        self.send(peer, mad);
        let t = now.add(self.wait_for(self.config.response_timeout));
        self.arm(id, Some(t));
        id
    }

    /// Answers the SIDR_REQ `id` with `rep` (its request and service IDs are filled in).
    /// The answer is kept to resend for a duplicate until TIMEWAIT's length has passed.
    pub fn sidr_reply(
        &mut self,
        now: Instant,
        id: CommId,
        mut rep: SidrRepRepr,
    ) -> Result<(), CmError> {
        let wait = self.timewait();
        let s = self.sidrs.get_mut(&id).ok_or(CmError::UnknownId(id))?;
        if s.active {
            return Err(CmError::UnknownId(id));
        }
        let CmMessage::SidrReq(req) = s.last.msg else {
            // Already answered.
            return Err(CmError::UnknownId(id));
        };
        rep.request_id = s.request_id;
        rep.service_id = req.service_id;
        s.last = CmMad {
            tid: s.last.tid,
            attr_mod: 0,
            msg: CmMessage::SidrRep(rep),
        };
        let (peer, mad) = (s.peer, s.last);
        self.send(peer, mad);
        self.arm(id, Some(now.add(wait)));
        Ok(())
    }

    /// One MAD from `from` (the UD payload of a packet to QP1).
    pub fn handle_mad(&mut self, now: Instant, from: A, data: &[u8]) {
        let mad = match CmMad::parse(data) {
            Ok(m) => m,
            Err(_) => {
                self.counters.malformed += 1;
                return;
            }
        };
        self.counters.received += 1;
        match mad.msg {
            CmMessage::Req(req) => self.on_req(now, from, mad.tid, req),
            CmMessage::Rep(rep) => self.on_rep(from, rep),
            CmMessage::Rtu(rtu) => self.on_rtu(from, rtu),
            CmMessage::Rej(rej) => self.on_rej(now, from, rej),
            CmMessage::Mra(mra) => self.on_mra(now, from, mra),
            CmMessage::Dreq(dreq) => self.on_dreq(now, from, mad.tid, dreq),
            CmMessage::Drep(drep) => self.on_drep(now, from, drep),
            CmMessage::Lap(lap) => self.on_lap(from, mad.tid, lap),
            CmMessage::Apr(_) => self.counters.unexpected += 1,
            CmMessage::SidrReq(req) => self.on_sidr_req(now, from, mad.tid, req),
            CmMessage::SidrRep(rep) => self.on_sidr_rep(from, rep),
        }
    }

    /// The connection a message from `from` addressed to our `local` ID belongs to, if
    /// the peer's ID matches (`remote` 0 before we learnt it).
    fn mine(&mut self, from: A, local: u32, remote: u32) -> Option<CommId> {
        let ok = self.conns.get(&local).is_some_and(|c| {
            c.peer == from && (c.remote_comm_id == remote || c.remote_comm_id == 0)
        });
        if !ok {
            self.counters.unexpected += 1;
        }
        ok.then_some(local)
    }

    fn on_req(&mut self, now: Instant, from: A, tid: u64, req: ReqRepr) {
        if let Some(&id) = self.by_remote.get(&(req.local_ca_guid, req.local_comm_id)) {
            // IBTA 12.9.6.1: a REQ we have seen. Answer with what we last sent for it.
            self.counters.duplicates += 1;
            let Some(c) = self.conns.get(&id) else {
                return;
            };
            match (c.state, c.last) {
                (CmState::MraReqSent | CmState::RepSent | CmState::MraRepRcvd, Some(last)) => {
                    let peer = c.peer;
                    self.send(peer, last);
                }
                (CmState::TimeWait, _) => {
                    // The old connection is over; the peer's REQ is stale.
                    // Message rejected "other" (the state's), as Linux sends it: the REQ is
                    // not one this connection is answering.
                    let mad = self.rej_mad(c, id, rej_reason::STALE_CONNECTION);
                    let peer = c.peer;
                    self.send(peer, mad);
                }
                // The consumer has not answered yet, or the connection is up.
                _ => {}
            }
            return;
        }
        if !self.listening.contains(&req.service_id) {
            self.counters.unexpected += 1;
            self.unlistened
                .retain(|_, at| now.since(*at) < RELISTEN_GRACE);
            if self.unlistened.contains_key(&req.service_id) {
                // Its listener has just gone, and programs listen again on the same port
                // for their next connection (perftest's -R: one for the parameters, one
                // per QP): the REQ's resend will find the new one.
                return;
            }
            if self.bound.contains(&req.service_id) {
                // Bound and about to listen: a program may tell its peer the port between
                // the two (qperf's server does); the REQ's resend finds the listener.
                return;
            }
            // IBTA 12.6.7.2: nobody serves the service ID.
            let mad = CmMad {
                tid,
                attr_mod: 0,
                msg: CmMessage::Rej(RejRepr {
                    local_comm_id: 0,
                    remote_comm_id: req.local_comm_id,
                    message: MessageRef::Req,
                    reason: rej_reason::INVALID_SERVICE_ID,
                    ari: Default::default(),
                    private_data: PrivateData::default(),
                }),
            };
            self.send(from, mad);
            return;
        }
        let id = self.new_id();
        self.conns.insert(
            id,
            Conn {
                peer: from,
                state: CmState::ReqRcvd,
                active: false,
                tid,
                remote_comm_id: req.local_comm_id,
                remote_ca_guid: req.local_ca_guid,
                local_qpn: 0,
                remote_qpn: req.local_qpn,
                last: None,
                deadline: None,
                retries_left: 0,
                max_retries: req.max_cm_retries,
                timeout: self.wait_for(req.local_cm_response_timeout),
            },
        );
        self.by_remote
            .insert((req.local_ca_guid, req.local_comm_id), id);
        self.events.push_back(CmEvent::ReqReceived {
            id,
            from,
            req: Box::new(req),
        });
    }

    fn on_rep(&mut self, from: A, rep: RepRepr) {
        let Some(id) = self.mine(from, rep.remote_comm_id, rep.local_comm_id) else {
            return;
        };
        let c = self.conns.get_mut(&id).expect("mine checked it");
        match c.state {
            CmState::ReqSent | CmState::MraReqRcvd => {
                c.state = CmState::RepRcvd;
                c.remote_comm_id = rep.local_comm_id;
                c.remote_ca_guid = rep.local_ca_guid;
                c.remote_qpn = rep.local_qpn;
                self.by_remote
                    .insert((rep.local_ca_guid, rep.local_comm_id), id);
                self.arm(id, None);
                self.events.push_back(CmEvent::RepReceived {
                    id,
                    rep: Box::new(rep),
                });
            }
            // Our RTU (or MRA) was lost: send it again.
            CmState::Established | CmState::MraRepSent if c.remote_comm_id == rep.local_comm_id => {
                self.counters.duplicates += 1;
                if let Some(last) = c.last {
                    let peer = c.peer;
                    self.send(peer, last);
                }
            }
            CmState::RepRcvd => self.counters.duplicates += 1,
            _ => self.counters.unexpected += 1,
        }
    }

    fn on_rtu(&mut self, from: A, rtu: cm::RtuRepr) {
        let Some(id) = self.mine(from, rtu.remote_comm_id, rtu.local_comm_id) else {
            return;
        };
        let c = self.conns.get_mut(&id).expect("mine checked it");
        match c.state {
            CmState::RepSent | CmState::MraRepRcvd => {
                c.state = CmState::Established;
                self.arm(id, None);
                self.events.push_back(CmEvent::Established {
                    id,
                    private_data: Box::new(rtu.private_data.0),
                });
            }
            CmState::Established => self.counters.duplicates += 1,
            _ => self.counters.unexpected += 1,
        }
    }

    fn on_rej(&mut self, now: Instant, from: A, rej: RejRepr) {
        // A REJ for a REQ may come before the peer had an ID for us to match.
        let Some(id) = self.mine(from, rej.remote_comm_id, rej.local_comm_id) else {
            return;
        };
        let c = self.conns.get_mut(&id).expect("mine checked it");
        let connected_qp = match c.state {
            CmState::ReqSent | CmState::MraReqRcvd | CmState::ReqRcvd | CmState::MraReqSent => {
                false
            }
            CmState::RepRcvd | CmState::MraRepSent | CmState::RepSent | CmState::MraRepRcvd => true,
            // A REJ after the connection was up is not in 12.9.6's tables.
            _ => {
                self.counters.unexpected += 1;
                return;
            }
        };
        let peer = c.peer;
        let cold_resends_left = c.max_retries.saturating_sub(c.retries_left) < COLD_REJ_RESENDS;
        let relistening = c.active
            && !connected_qp
            && rej.reason == rej_reason::INVALID_SERVICE_ID
            && c.retries_left > 0
            && (cold_resends_left
                || self
                    .ended
                    .get(&peer)
                    .is_some_and(|t| now.since(*t) < RELISTEN_GRACE)
                || self.conns.values().any(|o| {
                    o.active
                        && o.peer == peer
                        && matches!(o.state, CmState::Established | CmState::TimeWait)
                }));
        let c = self.conns.get_mut(&id).expect("mine checked it");
        if relistening {
            // The timer resends the REQ (see REJ_RETRY_WAIT).
            c.state = CmState::ReqSent;
            self.arm(id, Some(now.add(REJ_RETRY_WAIT)));
            return;
        }
        self.events.push_back(CmEvent::Rejected {
            id,
            rej: Box::new(rej),
        });
        if connected_qp {
            self.enter_timewait(now, id);
        } else {
            self.forget(id);
        }
    }

    fn on_mra(&mut self, now: Instant, from: A, mra: MraRepr) {
        let Some(id) = self.mine(from, mra.remote_comm_id, mra.local_comm_id) else {
            return;
        };
        let lifetime = self.config.packet_lifetime;
        let c = self.conns.get_mut(&id).expect("mine checked it");
        let next = match (c.state, mra.message) {
            (CmState::ReqSent, MessageRef::Req) => CmState::MraReqRcvd,
            (CmState::RepSent, MessageRef::Rep) => CmState::MraRepRcvd,
            (CmState::MraReqRcvd | CmState::MraRepRcvd, _) => {
                self.counters.duplicates += 1;
                return;
            }
            _ => {
                self.counters.unexpected += 1;
                return;
            }
        };
        if c.remote_comm_id == 0 {
            c.remote_comm_id = mra.local_comm_id;
        }
        c.state = next;
        // IBTA 12.6.6: the answer comes within the service timeout and the packet lifetime;
        // no resend meanwhile.
        let wait = cm_timeout(mra.service_timeout) + 2 * lifetime;
        self.arm(id, Some(now.add(wait)));
        self.events.push_back(CmEvent::MraReceived { id });
    }

    fn on_dreq(&mut self, now: Instant, from: A, tid: u64, dreq: DreqRepr) {
        let Some(id) = self.mine(from, dreq.remote_comm_id, dreq.local_comm_id) else {
            // IBTA 12.9.6.4: a DREQ for a connection we no longer have is answered, so
            // that the peer leaves DREQ_SENT at once.
            if !self.conns.contains_key(&dreq.remote_comm_id) {
                let mad = CmMad {
                    tid,
                    attr_mod: 0,
                    msg: CmMessage::Drep(IdsRepr {
                        local_comm_id: dreq.remote_comm_id,
                        remote_comm_id: dreq.local_comm_id,
                        private_data: PrivateData::default(),
                    }),
                };
                self.send(from, mad);
            }
            return;
        };
        let c = self.conns.get_mut(&id).expect("mine checked it");
        if dreq.remote_qpn != c.local_qpn {
            // IBTA 12.6.10: the DREQ names our QP; one that names another is not ours.
            self.counters.unexpected += 1;
            return;
        }
        match c.state {
            CmState::Established | CmState::RepSent | CmState::MraRepRcvd => {
                c.state = CmState::DreqRcvd;
                self.arm(id, None);
                self.events.push_back(CmEvent::DreqReceived {
                    id,
                    private_data: Box::new(dreq.private_data.0),
                });
            }
            // Both ends disconnected at once: answer, and the DREP we wait for is moot.
            CmState::DreqSent => {
                let mad = bare_drep(c, id);
                let peer = c.peer;
                self.send(peer, mad);
                self.events.push_back(CmEvent::Disconnected {
                    id,
                    timed_out: false,
                });
                self.enter_timewait(now, id);
            }
            CmState::TimeWait => {
                // Our DREP was lost.
                self.counters.duplicates += 1;
                if let Some(
                    last @ CmMad {
                        msg: CmMessage::Drep(_),
                        ..
                    },
                ) = c.last
                {
                    let peer = c.peer;
                    self.send(peer, last);
                } else {
                    let mad = bare_drep(c, id);
                    let peer = c.peer;
                    self.send(peer, mad);
                }
            }
            CmState::DreqRcvd => self.counters.duplicates += 1,
            _ => self.counters.unexpected += 1,
        }
    }

    fn on_drep(&mut self, now: Instant, from: A, drep: cm::DrepRepr) {
        let Some(id) = self.mine(from, drep.remote_comm_id, drep.local_comm_id) else {
            return;
        };
        match self.conns.get(&id).map(|c| c.state) {
            Some(CmState::DreqSent) => {
                self.events.push_back(CmEvent::Disconnected {
                    id,
                    timed_out: false,
                });
                self.enter_timewait(now, id);
            }
            Some(CmState::TimeWait) => self.counters.duplicates += 1,
            _ => self.counters.unexpected += 1,
        }
    }

    /// IBTA 12.8.2: a CA that cannot load an alternate path answers a LAP with an APR
    /// whose status says so; softrdma does not migrate paths.
    fn on_lap(&mut self, from: A, tid: u64, lap: cm::LapRepr) {
        let Some(id) = self.mine(from, lap.remote_comm_id, lap.local_comm_id) else {
            return;
        };
        let c = &self.conns[&id];
        let status = if c.state == CmState::Established {
            ap_status::UNSUPPORTED
        } else {
            ap_status::REJECTED
        };
        let mad = CmMad {
            tid,
            attr_mod: 0,
            msg: CmMessage::Apr(cm::AprRepr {
                local_comm_id: id,
                remote_comm_id: c.remote_comm_id,
                status,
                info: Default::default(),
                private_data: PrivateData::default(),
            }),
        };
        let peer = c.peer;
        self.send(peer, mad);
    }

    fn on_sidr_req(&mut self, now: Instant, from: A, tid: u64, req: SidrReqRepr) {
        if let Some(&id) = self.sidr_by_remote.get(&(from, req.request_id)) {
            self.counters.duplicates += 1;
            let last = self.sidrs[&id].last;
            if matches!(last.msg, CmMessage::SidrRep(_)) {
                self.send(from, last);
            }
            return;
        }
        if !self.listening.contains(&req.service_id) {
            self.counters.unexpected += 1;
            let mad = CmMad {
                tid,
                attr_mod: 0,
                msg: CmMessage::SidrRep(SidrRepRepr {
                    request_id: req.request_id,
                    status: sidr_status::SERVICE_ID_NOT_SUPPORTED,
                    info: Default::default(),
                    qpn: 0,
                    service_id: req.service_id,
                    qkey: 0,
                    private_data: PrivateData::default(),
                }),
            };
            self.send(from, mad);
            return;
        }
        let id = self.new_id();
        self.sidrs.insert(
            id,
            Sidr {
                peer: from,
                active: false,
                request_id: req.request_id,
                last: CmMad {
                    tid,
                    attr_mod: 0,
                    msg: CmMessage::SidrReq(req),
                },
                deadline: None,
                retries_left: 0,
            },
        );
        self.sidr_by_remote.insert((from, req.request_id), id);
        // Forgotten if the consumer never answers.
        let t = now.add(self.wait_for(self.config.response_timeout) * 4);
        self.arm(id, Some(t));
        self.events.push_back(CmEvent::SidrReqReceived {
            id,
            from,
            req: Box::new(req),
        });
    }

    fn on_sidr_rep(&mut self, from: A, rep: SidrRepRepr) {
        let id = rep.request_id;
        match self.sidrs.get(&id) {
            Some(s) if s.active && s.peer == from => {
                self.arm(id, None);
                self.sidrs.remove(&id);
                self.events.push_back(CmEvent::SidrRepReceived {
                    id,
                    rep: Box::new(rep),
                });
            }
            _ => self.counters.unexpected += 1,
        }
    }

    /// The next instant [`Self::handle_timeout`] is due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.first().map(|&(t, _)| t)
    }

    /// Fires the timers due at `now`: resends, gives up, leaves TIMEWAIT.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(&(t, id)) = self.timers.first() {
            if t > now {
                break;
            }
            self.timers.remove(&(t, id));
            if let Some(c) = self.conns.get_mut(&id) {
                c.deadline = None;
                self.conn_timeout(now, id);
            } else if let Some(s) = self.sidrs.get_mut(&id) {
                s.deadline = None;
                self.sidr_timeout(now, id);
            }
        }
    }

    fn conn_timeout(&mut self, now: Instant, id: CommId) {
        let c = self.conns.get_mut(&id).expect("caller checked");
        if c.state == CmState::TimeWait {
            self.forget(id);
            self.events.push_back(CmEvent::TimewaitExit { id });
            return;
        }
        let waiting = matches!(
            c.state,
            CmState::ReqSent
                | CmState::MraReqRcvd
                | CmState::RepSent
                | CmState::MraRepRcvd
                | CmState::DreqSent
        );
        if !waiting {
            return;
        }
        // An MRA'd message was not resent meanwhile; its wait is over: resend it now.
        if c.retries_left > 0 {
            c.retries_left -= 1;
            c.state = match c.state {
                CmState::MraReqRcvd => CmState::ReqSent,
                CmState::MraRepRcvd => CmState::RepSent,
                s => s,
            };
            let (peer, last, timeout) = (c.peer, c.last, c.timeout);
            if let Some(last) = last {
                self.counters.retransmitted += 1;
                self.send(peer, last);
            }
            self.arm(id, Some(now.add(timeout)));
            return;
        }
        self.counters.timeouts += 1;
        match c.state {
            CmState::DreqSent => {
                self.events.push_back(CmEvent::Disconnected {
                    id,
                    timed_out: true,
                });
                self.enter_timewait(now, id);
            }
            state => {
                let message = if matches!(state, CmState::ReqSent | CmState::MraReqRcvd) {
                    "REQ"
                } else {
                    "REP"
                };
                // IBTA 12.9.6: the side that gives up says so with a TIMEOUT reject.
                let c = &self.conns[&id];
                let rej = self.rej_mad(c, id, rej_reason::TIMEOUT);
                let peer = c.peer;
                self.send(peer, rej);
                self.events.push_back(CmEvent::Timeout { id, message });
                if message == "REP" {
                    self.enter_timewait(now, id);
                } else {
                    self.forget(id);
                }
            }
        }
    }

    fn sidr_timeout(&mut self, now: Instant, id: CommId) {
        let wait = self.wait_for(self.config.response_timeout);
        let s = self.sidrs.get_mut(&id).expect("caller checked");
        if s.active && s.retries_left > 0 {
            s.retries_left -= 1;
            let (peer, last) = (s.peer, s.last);
            self.counters.retransmitted += 1;
            self.send(peer, last);
            self.arm(id, Some(now.add(wait)));
            return;
        }
        let s = self.sidrs.remove(&id).expect("present");
        if s.active {
            self.counters.timeouts += 1;
            self.events.push_back(CmEvent::Timeout {
                id,
                message: "SIDR_REQ",
            });
        } else {
            self.sidr_by_remote.remove(&(s.peer, s.request_id));
        }
    }

    /// The next MAD to send, with its peer.
    pub fn poll_transmit(&mut self) -> Option<(A, CmMad)> {
        self.out.pop_front()
    }

    /// The next event for the consumer.
    pub fn poll_event(&mut self) -> Option<CmEvent<A>> {
        self.events.pop_front()
    }
}

/// A DREP with no private data for connection `id`, in its transaction.
fn bare_drep<A>(c: &Conn<A>, id: CommId) -> CmMad {
    CmMad {
        tid: c.tid,
        attr_mod: 0,
        msg: CmMessage::Drep(IdsRepr {
            local_comm_id: id,
            remote_comm_id: c.remote_comm_id,
            private_data: PrivateData::default(),
        }),
    }
}

/// `data` as the private data of `message`, or the error naming its size.
fn private<const N: usize>(data: &[u8], message: &'static str) -> Result<PrivateData<N>, CmError> {
    PrivateData::from_slice(data).ok_or(CmError::PrivateDataTooLong {
        message,
        len: data.len(),
        max: N,
    })
}
