//! One queue pair: requester, completer and responder of RC, UC and UD, with no I/O.
//!
//! See the crate documentation for the calling contract.
//!
//! # Loss recovery (RC)
//!
//! A lost or reordered packet costs about a round trip, never the local ACK timeout:
//!
//! * **AckReq.** The requester asks for an ACK on a message's last packet, at least every
//!   half window (at most every 64 packets), and on the packet that fills the window, so
//!   that a full window always has an ACK coming.
//! * **Sequence NAKs** start a repair at once; a late or duplicated NAK of the gap already
//!   being repaired (the same PSN, less than a round trip after the repair) is ignored, so a
//!   few reordered packets do not start a resend per NAK.
//! * **Selective repair.** A responder that keeps what follows a gap (softrdma's) needs only
//!   the missing PSNs again: the NAK's PSN goes out alone, asking for an ACK, and the
//!   answer, which covers what the responder ran from its kept packets, points at the next
//!   missing PSN, which goes out the same way (NewReno's partial ACKs, RFC 6582); a repair
//!   left unanswered for two round trips goes out again. A responder that drops what
//!   follows a gap (rxe's) answers with an ACK of the repaired packet alone: everything
//!   after it is sent again (go-back-N), and after two such answers every later loss goes
//!   straight to go-back-N. READs and atomics are always re-issued from the lost PSN on.
//! * **Tail-loss probes.** After a probe timeout of silence (two smoothed round trips, or one
//!   plus four deviations, plus the peer's ACK delay; see [`rtt`]) the packet at the oldest
//!   unacknowledged PSN goes out again, asking for an ACK, and nothing else until something
//!   answers it. The answer says where the responder stands. Probes back off and are not
//!   retries: `retry_cnt` still counts local ACK timeouts, which keep running, so a vanished
//!   peer ends in RETRY_EXC_ERR as before.
//! * **The responder** sends one sequence NAK per gap (IBTA) but keeps the packets that come
//!   ahead of it and executes them in order once the gap is filled; the requester places
//!   READ responses that come ahead of a lost one, so a lost response costs one re-issue.
//! * **The window** (at most 128 PSNs, as rxe) halves on a timeout; a detected loss cuts it
//!   only while the round trip shows a queue, once per loss episode, in proportion to how
//!   far the delay is over its target (by half at most); inside an episode it is also cut
//!   in proportion to the queueing delay, at most once a round trip. While a queue builds it
//!   grows once a round trip, by half the way back to where the last loss cut it from (as
//!   BIC does), then by one PSN. Random loss on an idle link does not shrink it; a
//!   congested link (the simulator's `LinkRate`) does.

mod completer;
mod requester;
mod responder;
pub mod rtt;
mod sge;

use crate::memory::{Memory, Pd};
use crate::state::{ModifyError, QpAttr, check_modify};
use crate::types::*;
use core::time::Duration;
use softrdma_wire::bth::DEFAULT_PKEY;
use softrdma_wire::packet::IbPacket;
use softrdma_wire::{Psn, Qpn};
use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};

pub(crate) use requester::Requester;
pub use responder::REORDER_PSNS;
pub(crate) use responder::Responder;

/// Most unacknowledged PSNs a requester keeps in flight (rxe's `RXE_MAX_UNACKED_PSNS`).
pub const MAX_UNACKED_PSNS: i32 = 128;
/// The requester sets AckReq at least this often (rxe's `RXE_MAX_PKT_PER_ACK`).
pub const MAX_PKT_PER_ACK: u32 = 64;
/// Largest message, as rxe's `max_msg_sz`.
pub const MAX_MSG_SIZE: u64 = 1 << 31;
/// Length of the GRH area at the start of every UD receive buffer.
pub const GRH_LEN: usize = 40;

/// The RNR NAK timer codes in microseconds (IBTA vol. 1, 9.7.5.2.8, table "Encoding for RNR
/// NAK Timer Field").
pub const RNR_TIMER_US: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840,
    5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122_880, 163_840, 245_760,
    327_680, 491_520,
];

/// The delay an RNR timer code stands for.
pub fn rnr_delay(code: u8) -> Duration {
    Duration::from_micros(RNR_TIMER_US[usize::from(code & 0x1F)].into())
}

/// The local ACK timeout for a timeout exponent: 4.096 µs × 2^timeout (IBTA vol. 1,
/// 9.7.6.1.3); `None` for 0, which means infinite.
pub fn ack_timeout(timeout: u8) -> Option<Duration> {
    (timeout != 0).then(|| Duration::from_nanos(4096u64 << timeout.min(31)))
}

/// Limits fixed when the QP is created (`struct ibv_qp_cap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QpCaps {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// SGEs per send WR.
    pub max_send_sge: u32,
    /// SGEs per receive WR.
    pub max_recv_sge: u32,
    /// Inline bytes per send WR.
    pub max_inline_data: u32,
}

impl Default for QpCaps {
    fn default() -> Self {
        Self {
            max_send_wr: 1024,
            max_recv_wr: 1024,
            max_send_sge: 32,
            max_recv_sge: 32,
            max_inline_data: 256,
        }
    }
}

/// Everything needed to create a QP.
#[derive(Debug, Clone)]
pub struct QpConfig {
    /// This QP's number.
    pub qpn: Qpn,
    /// Transport.
    pub qp_type: QpType,
    /// Protection domain of the QP; every MR it uses must be in it.
    pub pd: Pd,
    /// Queue limits.
    pub caps: QpCaps,
    /// Signal every send WR, not only those with [`SendFlags::SIGNALED`].
    pub sq_sig_all: bool,
    /// Take receive WRs from this SRQ instead of the QP's own receive queue.
    pub srq: Option<Srq>,
    /// The port's active MTU: the path MTU of UD QPs, and of RC/UC QPs until RTR sets one.
    pub port_mtu: Mtu,
    /// The UDP source port every packet is sent from, when the sender cannot choose it per
    /// connection (a device with one socket bound to 4791); `None` uses rxe's per-connection
    /// port. The ICRC covers it, so it must be the port the packet really leaves from.
    pub udp_sport: Option<u16>,
}

/// What the host does with a WRITE it may place itself (see
/// [`QueuePair::post_send_placed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placing {
    /// Placed in the target's memory: it completes at once.
    Done,
    /// To be placed once every earlier WR has completed.
    Hold,
    /// Sent as packets.
    Wire,
}

/// What the application did wrong when posting. The QP is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PostError {
    /// The QP is not in a state that accepts this post.
    #[error("{verb}: QP {qpn} is in state {state}")]
    InvalidState {
        /// `post_send` or `post_recv`.
        verb: &'static str,
        /// The QP.
        qpn: u32,
        /// Its state.
        state: QpState,
    },
    /// The queue already holds its maximum number of WRs.
    #[error("{verb}: the queue is full ({depth} WRs)")]
    QueueFull {
        /// `post_send` or `post_recv`.
        verb: &'static str,
        /// The depth it was created with.
        depth: u32,
    },
    /// A WR attribute that counts past the QP's limit (SGEs, inline bytes, message length).
    #[error("{verb}: {attr} = {requested} is over the limit of {max} ({limit})")]
    OverLimit {
        /// `post_send`, `post_recv` or `post_srq_recv`.
        verb: &'static str,
        /// The `ibv_send_wr`/`ibv_recv_wr` field.
        attr: &'static str,
        /// What the WR asks for.
        requested: u64,
        /// The most the QP takes.
        max: u64,
        /// Which limit that is (`cap.max_send_sge`, the path MTU, ...).
        limit: &'static str,
    },
    /// A WR attribute that is invalid whatever its size: an opcode this QP type has not,
    /// inline data for a READ or atomic, an atomic's SGE, a UD send without an address.
    #[error("{verb}: invalid {attr}: {why}")]
    InvalidAttr {
        /// `post_send` or `post_recv`.
        verb: &'static str,
        /// The `ibv_send_wr`/`ibv_recv_wr` field.
        attr: &'static str,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The QP receives through an SRQ; post to the SRQ.
    #[error("post_recv: QP {0} uses a shared receive queue")]
    HasSrq(u32),
}

/// A packet the engine wants sent. The InfiniBand part (BTH through ICRC) is in the buffer
/// passed to [`QueuePair::poll_transmit`]; its ICRC is computed for an IP header with
/// identification 0, DF set and TTL 64 (IPv4) or flow label 0 and hop limit 64 (IPv6), and a
/// UDP checksum of 0: what Linux sends for an unconnected UDP socket with DF set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Transmit {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// UDP source port (rxe's function of the two QPNs).
    pub src_port: u16,
    /// Bytes in the buffer: the whole packet or, when `lent`, all of it but the payload.
    pub len: usize,
    /// The payload, when it stays in registered memory for the sender to take from there
    /// (a zero-copy send; see [`Memory::lend`]).
    pub lent: Option<Lent>,
    /// The ICRC is left to the sender (zero in the packet; see
    /// [`QueuePair::owe_icrc`]): it computes it, for an IPv4 ID of 0, if the packet goes
    /// on a wire.
    pub icrc_owed: bool,
    /// The IP header's TOS (IPv4) or traffic class (IPv6) byte: the address vector's
    /// traffic class. The ICRC masks it (IBTA 7.8.1, with Annex A17's IP rules), so the
    /// sender sets it without touching the packet.
    pub traffic_class: u8,
}

impl Transmit {
    /// The packet's length on the wire (BTH through ICRC).
    pub fn wire_len(&self) -> usize {
        self.len + self.lent.map_or(0, |l| l.len as usize)
    }

    /// The packet whole, from the buffer it was built in and, when `lent`, the payload's
    /// bytes taken from the region (which the caller reads: the engine holds no pointers).
    pub fn whole(&self, buf: &[u8], payload: &[u8]) -> Vec<u8> {
        match &self.lent {
            None => buf[..self.len].to_vec(),
            Some(l) => {
                let at = usize::from(l.at);
                [&buf[..at], payload, &buf[at..self.len]].concat()
            }
        }
    }
}

/// A payload a packet carries from registered memory instead of from the buffer: the packet
/// is the buffer's first `at` bytes (the headers), then `len` bytes of region `key` at
/// `addr`, then the rest of the buffer (the pad and the ICRC, which covers the payload).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Lent {
    /// The region's key (the L_Key of a send, the R_Key of a READ response).
    pub key: u32,
    /// Where the payload starts.
    pub addr: u64,
    /// Its length.
    pub len: u32,
    /// Where it goes in the packet: after this many bytes of the buffer.
    pub at: u16,
}

/// Payloads shorter than this are copied into the packet even where the memory lends them:
/// a copy of less than a KiB costs less than a lent payload's extra pieces in the system
/// call and the sender's look-up of its region.
pub const LEND_MIN_BYTES: usize = 1024;

/// Where a packet's payload comes from.
pub(crate) enum PayloadSource<'a, F> {
    /// Written into the packet by the closure.
    Fill(F),
    /// One range of registered memory: lent (left in place) if the memory lends it and it is
    /// at least [`LEND_MIN_BYTES`] long, copied otherwise.
    Range {
        mem: &'a dyn crate::Memory,
        pd: crate::Pd,
        key: u32,
        addr: u64,
        access: crate::Access,
    },
}

/// Per-QP counters, the raw material of the device's `hw_counters`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct QpCounters {
    /// Packets handed out by `poll_transmit`.
    pub sent_packets: u64,
    /// Packets given to `handle_packet`.
    pub rcvd_packets: u64,
    /// Request packets sent again.
    pub retransmits: u64,
    /// Local ACK timeouts.
    pub timeouts: u64,
    /// Tail-loss probes sent (the oldest unacknowledged packet again, after a few round
    /// trips of silence; not a retry).
    pub probes: u64,
    /// Duplicate requests received.
    pub duplicate_requests: u64,
    /// Requests received ahead of the expected PSN.
    pub out_of_sequence: u64,
    /// PSN-sequence NAKs sent.
    pub seq_naks_sent: u64,
    /// PSN-sequence NAKs received.
    pub seq_naks_rcvd: u64,
    /// RNR NAKs sent.
    pub rnr_naks_sent: u64,
    /// RNR NAKs received.
    pub rnr_naks_rcvd: u64,
    /// WRs that failed with RETRY_EXC_ERR.
    pub retry_exceeded: u64,
    /// WRs that failed with RNR_RETRY_EXC_ERR.
    pub rnr_retry_exceeded: u64,
    /// Packets dropped: wrong state, address, transport, P_Key or Q_Key, or a UC message
    /// with a missing packet.
    pub dropped: u64,
    /// RDMA WRITEs the host placed in the target's memory itself, without packets (see
    /// [`QueuePair::post_send_placed`]).
    pub placed_writes: u64,
}

impl std::ops::AddAssign for QpCounters {
    /// Sums counters, as a device does over its QPs (live and destroyed).
    fn add_assign(&mut self, b: Self) {
        self.sent_packets += b.sent_packets;
        self.rcvd_packets += b.rcvd_packets;
        self.retransmits += b.retransmits;
        self.timeouts += b.timeouts;
        self.probes += b.probes;
        self.duplicate_requests += b.duplicate_requests;
        self.out_of_sequence += b.out_of_sequence;
        self.seq_naks_sent += b.seq_naks_sent;
        self.seq_naks_rcvd += b.seq_naks_rcvd;
        self.rnr_naks_sent += b.rnr_naks_sent;
        self.rnr_naks_rcvd += b.rnr_naks_rcvd;
        self.retry_exceeded += b.retry_exceeded;
        self.rnr_retry_exceeded += b.rnr_retry_exceeded;
        self.dropped += b.dropped;
        self.placed_writes += b.placed_writes;
    }
}

/// The attribute values in force.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Attrs {
    pub access: AccessFlags,
    pub qkey: u32,
    pub av: AddressVector,
    pub mtu: Mtu,
    pub dest_qpn: Qpn,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub sq_psn: Psn,
    pub rq_psn: Psn,
    pub sqd_notify: bool,
}

impl Default for Attrs {
    fn default() -> Self {
        let any = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
        Self {
            access: AccessFlags::empty(),
            qkey: 0,
            av: AddressVector {
                src: any,
                dst: any,
                flow_label: 0,
                traffic_class: 0,
            },
            mtu: Mtu::M1024,
            dest_qpn: Qpn::new(0),
            timeout: 0,
            retry_cnt: 0,
            rnr_retry: 0,
            min_rnr_timer: 0,
            max_rd_atomic: 0,
            max_dest_rd_atomic: 0,
            sq_psn: Psn::new(0),
            rq_psn: Psn::new(0),
            sqd_notify: false,
        }
    }
}

/// A shared receive queue. Cloning gives another handle to the same queue.
#[derive(Debug, Clone, Default)]
pub struct Srq(Arc<Mutex<SrqInner>>);

#[derive(Debug, Default)]
struct SrqInner {
    wrs: VecDeque<RecvWr>,
    max_wr: u32,
    max_sge: u32,
    limit: Option<u32>,
}

impl Srq {
    /// An SRQ of `max_wr` WRs with up to `max_sge` SGEs each.
    pub fn new(max_wr: u32, max_sge: u32) -> Self {
        Self(Arc::new(Mutex::new(SrqInner {
            wrs: VecDeque::new(),
            max_wr,
            max_sge,
            limit: None,
        })))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SrqInner> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Posts a receive WR.
    pub fn post_recv(&self, wr: RecvWr) -> Result<(), PostError> {
        let mut s = self.lock();
        if s.wrs.len() as u32 >= s.max_wr {
            return Err(PostError::QueueFull {
                verb: "post_srq_recv",
                depth: s.max_wr,
            });
        }
        if wr.sg_list.len() as u32 > s.max_sge {
            return Err(PostError::OverLimit {
                verb: "post_srq_recv",
                attr: "num_sge",
                requested: wr.sg_list.len() as u64,
                max: u64::from(s.max_sge),
                limit: "max_sge",
            });
        }
        s.wrs.push_back(wr);
        Ok(())
    }

    /// Arms the limit event: it fires once when fewer than `limit` WRs remain
    /// (`ibv_modify_srq` with `IBV_SRQ_LIMIT`).
    pub fn arm_limit(&self, limit: u32) {
        self.lock().limit = Some(limit);
    }

    /// Whether the limit is armed (it disarms when its event is raised).
    pub fn limit_armed(&self) -> bool {
        self.lock().limit.is_some()
    }

    /// WRs posted and not yet consumed.
    pub fn len(&self) -> usize {
        self.lock().wrs.len()
    }

    /// True when no WR is posted.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Takes the next WR; the second value is true when this crossed the armed limit.
    fn take(&self) -> Option<(RecvWr, bool)> {
        let mut s = self.lock();
        let wr = s.wrs.pop_front()?;
        let fired = match s.limit {
            Some(l) if (s.wrs.len() as u32) < l => {
                s.limit = None;
                true
            }
            _ => false,
        };
        Some((wr, fired))
    }

    /// Puts back a WR taken for a message that was then dropped.
    fn untake(&self, wr: RecvWr) {
        self.lock().wrs.push_front(wr);
    }
}

/// A queue pair.
pub struct QueuePair {
    pub(crate) cfg: QpConfig,
    pub(crate) mem: Arc<dyn Memory>,
    pub(crate) state: QpState,
    pub(crate) attrs: Attrs,
    pub(crate) req: Requester,
    pub(crate) resp: Responder,
    pub(crate) completions: VecDeque<Completion>,
    /// Made on the first event (most QPs never have one): boxed, 8 bytes in every QP
    /// instead of a deque's 32.
    #[expect(clippy::box_collection, reason = "lazily made, small when absent")]
    pub(crate) events: Option<Box<VecDeque<AsyncEvent>>>,
    pub(crate) counters: QpCounters,
    /// The CRCs of the fixed part of this QP's packets, per length: it sends a few lengths
    /// over and over to one peer.
    /// Made on the first packet: an idle QP (of a job with thousands) carries none.
    pub(crate) icrc: Option<Box<softrdma_wire::icrc::IcrcPrefixes>>,
    /// Whether packets leave without their ICRC (see [`QueuePair::owe_icrc`]).
    pub(crate) icrc_owed: bool,
    /// The deadline this QP last entered in its owner's timer queue and has not seen come
    /// due (see [`crate::endpoint::timers`]): never later than [`QueuePair::poll_timeout`]
    /// as of the QP's last input (a shared path minimum can lower that since).
    timer_entry: Option<Instant>,
}

impl core::fmt::Debug for QueuePair {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("QueuePair")
            .field("qpn", &self.cfg.qpn)
            .field("qp_type", &self.cfg.qp_type)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl QueuePair {
    /// A new QP in RESET that reaches memory only through `mem`.
    pub fn new(cfg: QpConfig, mem: Arc<dyn Memory>) -> Self {
        let attrs = Attrs {
            mtu: cfg.port_mtu,
            ..Attrs::default()
        };
        Self {
            cfg,
            mem,
            state: QpState::Reset,
            attrs,
            req: Requester::default(),
            resp: Responder::default(),
            completions: VecDeque::new(),
            events: None,
            counters: QpCounters::default(),
            icrc: None,
            icrc_owed: false,
            timer_entry: None,
        }
    }

    /// Whether the application may still get a completion from this QP without posting
    /// anything more: a send WR not yet done (signaled or not), a posted receive (or an
    /// SRQ, whose receives may come at any time), or a completion not yet taken. When no
    /// QP of a device awaits any, a thread that polled its CQ has no more reason to.
    pub fn awaits_completions(&self) -> bool {
        self.sends_outstanding()
            || !self.resp.rq.is_empty()
            || self.cfg.srq.is_some()
            || !self.completions.is_empty()
    }

    /// Whether send WRs are outstanding (posted and not yet complete).
    pub fn sends_outstanding(&self) -> bool {
        !self.req.sq.is_empty()
    }

    /// Whether a peer has written this QP's memory with an RDMA WRITE: its application may
    /// learn of what arrives by watching memory, not a CQ (perftest's latency tests do).
    pub fn written(&self) -> bool {
        self.resp.written
    }

    /// Whether a peer's RDMA WRITE has landed whole here since the application last posted
    /// a send. In a ping-pong over WRITEs (perftest's `ib_write_lat`) it is the answer to
    /// that send: an application that finds it while polling its CQ will find its memory
    /// written too, and post again, rather than wait for the next WRITE by watching memory.
    pub fn answered(&self) -> bool {
        self.resp.answered
    }

    /// The deadline to enter in the owner's timer queue, if any: the QP's next deadline when
    /// it is earlier than the entry it already has. Call after every input, as
    /// [`QueuePair::poll_timeout`]; a later deadline needs no new entry, since the old
    /// entry's coming due finds it ([`QueuePair::timer_entry_due`]).
    pub fn timer_to_enter(&mut self) -> Option<Instant> {
        let t = self.poll_timeout()?;
        if self.timer_entry.is_some_and(|e| e <= t) {
            return None;
        }
        self.timer_entry = Some(t);
        Some(t)
    }

    /// An entry for `at` came due in the owner's timer queue. True if it is this QP's live
    /// entry, which is then used up: the owner runs [`QueuePair::handle_timeout`] if
    /// [`QueuePair::poll_timeout`] is due, and enters what [`QueuePair::timer_to_enter`]
    /// gives. False for a stale entry (one that a earlier entry replaced), which the owner
    /// drops.
    pub fn timer_entry_due(&mut self, at: Instant) -> bool {
        if self.timer_entry == Some(at) {
            self.timer_entry = None;
            true
        } else {
            false
        }
    }

    /// Shares this QP's smallest round trip with the other QPs of `path` (those to the same
    /// destination from the same device), so that congestion control knows the path's
    /// delay when empty even if this QP never saw it so.
    pub fn share_path_rtt(&mut self, path: std::sync::Arc<rtt::PathRtt>) {
        self.req.rtt.share(path);
    }

    /// Tells the requester that the peer may hold an ACK back up to `d` (a soft device that
    /// defers ACKs to ride along with its application's answer), so that it waits that much
    /// longer before it probes for a lost tail. The default is no delay.
    pub fn set_peer_ack_delay(&mut self, d: Duration) {
        self.req.rtt.set_peer_ack_delay(d);
    }

    /// This QP's number.
    pub fn qpn(&self) -> Qpn {
        self.cfg.qpn
    }

    /// The protection domain it was created in.
    pub fn pd(&self) -> crate::Pd {
        self.cfg.pd
    }

    /// Whether every send WR completes with a completion (`sq_sig_all`).
    pub fn sq_sig_all(&self) -> bool {
        self.cfg.sq_sig_all
    }

    /// The transport.
    pub fn qp_type(&self) -> QpType {
        self.cfg.qp_type
    }

    /// Whether its receives come from a shared receive queue.
    pub fn has_srq(&self) -> bool {
        self.cfg.srq.is_some()
    }

    /// The current state.
    pub fn state(&self) -> QpState {
        self.state
    }

    /// Counters since creation.
    pub fn counters(&self) -> QpCounters {
        self.counters
    }

    /// The attributes in force (`ibv_query_qp`), every field set.
    pub fn query(&self) -> QpAttr {
        let a = &self.attrs;
        QpAttr {
            state: Some(self.state),
            cur_state: Some(self.state),
            en_sqd_async_notify: Some(a.sqd_notify),
            access_flags: Some(a.access),
            pkey_index: Some(0),
            port: Some(1),
            qkey: Some(a.qkey),
            av: Some(a.av),
            path_mtu: Some(a.mtu),
            timeout: Some(a.timeout),
            retry_cnt: Some(a.retry_cnt),
            rnr_retry: Some(a.rnr_retry),
            rq_psn: Some(self.resp.epsn),
            max_rd_atomic: Some(a.max_rd_atomic),
            min_rnr_timer: Some(a.min_rnr_timer),
            sq_psn: Some(self.req.next_psn),
            max_dest_rd_atomic: Some(a.max_dest_rd_atomic),
            dest_qpn: Some(a.dest_qpn),
        }
    }

    /// Modifies attributes and state under the IBTA rules of [`crate::state`].
    pub fn modify(&mut self, attr: &QpAttr) -> Result<(), ModifyError> {
        let to = check_modify(self.cfg.qp_type, self.state, attr)?;
        let a = &mut self.attrs;
        macro_rules! take {
            ($($f:ident => $g:ident),*) => { $(if let Some(v) = attr.$f { a.$g = v; })* };
        }
        take!(access_flags => access, qkey => qkey, av => av, path_mtu => mtu,
              dest_qpn => dest_qpn, timeout => timeout, retry_cnt => retry_cnt,
              rnr_retry => rnr_retry, min_rnr_timer => min_rnr_timer,
              max_rd_atomic => max_rd_atomic, max_dest_rd_atomic => max_dest_rd_atomic,
              sq_psn => sq_psn, rq_psn => rq_psn, en_sqd_async_notify => sqd_notify);
        let from = self.state;
        match to {
            QpState::Reset => {
                self.req = Requester::default();
                self.resp = Responder::default();
                self.completions.clear();
                self.events = None;
                self.attrs = Attrs {
                    mtu: self.cfg.port_mtu,
                    ..Attrs::default()
                };
            }
            QpState::Error if from != QpState::Error => self.enter_error(None),
            QpState::Rtr if from == QpState::Init => {
                self.resp.epsn = self.attrs.rq_psn;
            }
            QpState::Rts if from == QpState::Rtr => {
                self.req.start(self.attrs.sq_psn, &self.attrs);
            }
            _ => {}
        }
        if let Some(p) = attr.rq_psn {
            self.resp.epsn = p;
        }
        if let Some(p) = attr.sq_psn {
            if from != QpState::Rtr {
                self.req.start(p, &self.attrs);
            }
        }
        if to != QpState::Error {
            self.state = to;
        }
        if to == QpState::Sqd {
            self.check_drained();
        }
        Ok(())
    }

    /// Posts a send WR.
    pub fn post_send(&mut self, wr: SendWr) -> Result<(), PostError> {
        const VERB: &str = "post_send";
        self.resp.answered = false;
        let bad = |attr, why| {
            Err(PostError::InvalidAttr {
                verb: VERB,
                attr,
                why,
            })
        };
        let over = |attr, requested: u64, max: u64, limit| {
            Err(PostError::OverLimit {
                verb: VERB,
                attr,
                requested,
                max,
                limit,
            })
        };
        match self.state {
            QpState::Rts | QpState::Sqd | QpState::Error | QpState::Sqe => {}
            state => {
                return Err(PostError::InvalidState {
                    verb: VERB,
                    qpn: self.cfg.qpn.value(),
                    state,
                });
            }
        }
        if self.req.sq.len() as u32 >= self.cfg.caps.max_send_wr {
            return Err(PostError::QueueFull {
                verb: VERB,
                depth: self.cfg.caps.max_send_wr,
            });
        }
        let t = self.cfg.qp_type;
        let op_ok = match wr.op {
            SendOp::Send | SendOp::SendWithImm(_) => true,
            SendOp::Write { .. } | SendOp::WriteWithImm { .. } => t != QpType::Ud,
            SendOp::SendWithInv(_)
            | SendOp::Read { .. }
            | SendOp::CompareSwap { .. }
            | SendOp::FetchAdd { .. } => t == QpType::Rc,
        };
        if !op_ok {
            return bad("opcode", "not supported by this QP type");
        }
        match &wr.payload {
            Payload::Sges(s) if s.len() as u32 > self.cfg.caps.max_send_sge => {
                let max = u64::from(self.cfg.caps.max_send_sge);
                return over("num_sge", s.len() as u64, max, "cap.max_send_sge");
            }
            Payload::Inline(v) if v.len() as u32 > self.cfg.caps.max_inline_data => {
                let max = u64::from(self.cfg.caps.max_inline_data);
                return over("sg_list", v.len() as u64, max, "cap.max_inline_data");
            }
            Payload::Inline(_) if wr.op.is_read_or_atomic() => {
                return bad("send_flags", "READ and atomics cannot be inline");
            }
            _ => {}
        }
        let len = wr.payload.len();
        if len > MAX_MSG_SIZE {
            return over("sg_list", len, MAX_MSG_SIZE, "max_msg_sz");
        }
        if wr.op.is_atomic()
            && !matches!(&wr.payload, Payload::Sges(s) if s.len() == 1 && s[0].length == 8)
        {
            return bad("sg_list", "an atomic needs one 8-byte SGE");
        }
        if t == QpType::Ud {
            if wr.ud.is_none() {
                return bad("wr.ud", "a UD send needs an address handle");
            }
            if len > self.attrs.mtu.bytes() as u64 {
                return over(
                    "sg_list",
                    len,
                    self.attrs.mtu.bytes() as u64,
                    "the path MTU",
                );
            }
        }
        let signaled = self.cfg.sq_sig_all || wr.flags.contains(SendFlags::SIGNALED);
        if self.state == QpState::Error {
            self.completions
                .push_back(self.send_wc(&wr, WcStatus::WrFlushErr, 0));
            return Ok(());
        }
        self.req.push(wr, len, signaled, self.attrs.mtu);
        Ok(())
    }

    /// [`QueuePair::post_send`], for a host that can place an RDMA WRITE in the target's
    /// memory itself (two processes of one host). Once the WR has passed every check of
    /// `post_send`, and if it is a WRITE without immediate data (whose receive completion
    /// only the wire can make) on an RC QP in RTS, `place` is asked what to do with
    /// it, given its destination QPN and address and whether the send queue is empty
    /// (every earlier WR completed):
    /// - [`Placing::Done`] (only when empty): the host placed it; it completes at once, as
    ///   its ACK would have completed it;
    /// - [`Placing::Hold`]: it waits in the queue, unsent, until every WR before it has
    ///   completed; then [`QueuePair::held_front`] hands it to the host, which places it
    ///   or sends it ([`QueuePair::complete_held`]);
    /// - [`Placing::Wire`]: it is posted as `post_send` posts it.
    ///
    /// The order of a QP's operations holds: a WRITE is placed only when every earlier WR
    /// is complete, so none can land after it, and every later one waits behind it. Only
    /// on RC, where a completion means the responder has executed the WR: a UC WR
    /// completes as it leaves, so an earlier UC WRITE could still land after a placed one.
    /// Returns what was done.
    pub fn post_send_placed(
        &mut self,
        wr: SendWr,
        place: impl FnOnce(&SendWr, Qpn, IpAddr, bool) -> Placing,
    ) -> Result<Placing, PostError> {
        self.resp.answered = false;
        let placeable = self.state == QpState::Rts
            && self.cfg.qp_type == QpType::Rc
            && matches!(wr.op, SendOp::Write { .. })
            && (self.req.sq.len() as u32) < self.cfg.caps.max_send_wr;
        // The checks of `post_send` that a WRITE on a QP in RTS can fail.
        let fits = match &wr.payload {
            Payload::Sges(s) => s.len() as u32 <= self.cfg.caps.max_send_sge,
            Payload::Inline(v) => v.len() as u32 <= self.cfg.caps.max_inline_data,
        };
        let len = wr.payload.len();
        if !placeable || !fits || len == 0 || len > MAX_MSG_SIZE {
            return self.post_send(wr).map(|()| Placing::Wire);
        }
        let idle = self.req.sq.is_empty();
        match place(&wr, self.attrs.dest_qpn, self.attrs.av.dst, idle) {
            Placing::Done if idle => {
                if self.cfg.sq_sig_all || wr.flags.contains(SendFlags::SIGNALED) {
                    self.completions
                        .push_back(self.send_wc(&wr, WcStatus::Success, len as u32));
                }
                self.counters.placed_writes += 1;
                Ok(Placing::Done)
            }
            Placing::Hold => {
                self.post_send(wr)?;
                if let Some(w) = self.req.sq.back_mut() {
                    w.held = true;
                }
                Ok(Placing::Hold)
            }
            _ => self.post_send(wr).map(|()| Placing::Wire),
        }
    }

    /// The held WRITE (see [`QueuePair::post_send_placed`]) that every WR before it
    /// completed, if there is one now, with its destination QPN and address: the host
    /// places or sends it, and says which with [`QueuePair::complete_held`].
    pub fn held_front(&self) -> Option<(&SendWr, Qpn, IpAddr)> {
        let w = self.req.sq.front()?;
        (w.held && w.first_psn.is_none() && self.state == QpState::Rts).then_some((
            &w.wr,
            self.attrs.dest_qpn,
            self.attrs.av.dst,
        ))
    }

    /// The host placed the WR [`QueuePair::held_front`] gave (`placed`): it completes;
    /// or it did not: it is sent as any other.
    pub fn complete_held(&mut self, placed: bool) {
        let Some(w) = self.req.sq.front_mut() else {
            return;
        };
        if !w.held || w.first_psn.is_some() {
            return;
        }
        if placed {
            self.complete_front(WcStatus::Success);
            self.counters.placed_writes += 1;
        } else {
            w.held = false;
        }
    }

    /// Posts a receive WR.
    pub fn post_recv(&mut self, wr: RecvWr) -> Result<(), PostError> {
        const VERB: &str = "post_recv";
        if self.cfg.srq.is_some() {
            return Err(PostError::HasSrq(self.cfg.qpn.value()));
        }
        if self.state == QpState::Reset {
            return Err(PostError::InvalidState {
                verb: VERB,
                qpn: self.cfg.qpn.value(),
                state: self.state,
            });
        }
        if self.resp.rq.len() as u32 >= self.cfg.caps.max_recv_wr {
            return Err(PostError::QueueFull {
                verb: VERB,
                depth: self.cfg.caps.max_recv_wr,
            });
        }
        if wr.sg_list.len() as u32 > self.cfg.caps.max_recv_sge {
            return Err(PostError::OverLimit {
                verb: VERB,
                attr: "num_sge",
                requested: wr.sg_list.len() as u64,
                max: u64::from(self.cfg.caps.max_recv_sge),
                limit: "cap.max_recv_sge",
            });
        }
        if self.state == QpState::Error {
            self.completions
                .push_back(self.recv_wc(wr.wr_id, WcStatus::WrFlushErr));
            return Ok(());
        }
        self.resp.rq.push_back(wr);
        Ok(())
    }

    /// The next completion, in the order the QP generated them.
    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.completions.pop_front()
    }

    /// Queues an asynchronous event.
    pub(crate) fn event(&mut self, e: AsyncEvent) {
        self.events.get_or_insert_default().push_back(e);
    }

    /// The next asynchronous event.
    pub fn poll_event(&mut self) -> Option<AsyncEvent> {
        self.events.as_mut()?.pop_front()
    }

    /// When [`QueuePair::handle_timeout`] must next be called, if ever.
    pub fn poll_timeout(&self) -> Option<Instant> {
        [
            self.req.retx_deadline,
            self.req.rnr_until,
            self.req.repair_at,
            self.probe_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Fires the timers due at `now`: RNR waits end, an unanswered selective repair goes out
    /// again, a tail-loss probe goes out after a few round trips of silence, and an expired
    /// local ACK timeout retransmits or, with retries exhausted, fails the oldest WR with
    /// RETRY_EXC_ERR.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.requester_timeout(now);
    }

    /// The next packet to send, written into `buf` (from its start; the packet is
    /// `buf[..len]`, and `buf.len() == len` after), or `None` when there is nothing to send
    /// now. Responses go before new requests. `buf` is not cleared first: a buffer reused
    /// across calls keeps its room, so a payload that overwrites the old one need not be
    /// zeroed before.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        let t = self.poll_transmit_at(now, buf, 0)?;
        buf.truncate(t.len);
        Some(t)
    }

    /// Builds this QP's packets with no ICRC (zero in its place, and
    /// [`Transmit::icrc_owed`] set), for a sender that carries some of them where none is
    /// needed (shared memory between two processes of a host crosses no link; IBTA 7.8.1)
    /// and computes it for the others. Off by default: every packet is built whole.
    pub fn owe_icrc(&mut self, on: bool) {
        self.icrc_owed = on;
    }

    /// False only when [`QueuePair::poll_transmit`] would give nothing now: no response
    /// waits, no repair is due, and the send pointers are at the end of the send queue (or
    /// the QP cannot send). A host may then skip the call, and its buffer work, on a QP it
    /// services after every input; true says nothing more than "call it".
    pub fn may_transmit(&self) -> bool {
        self.resp.has_responses()
            || self.req.repair.is_some()
            || (matches!(self.state, QpState::Rts | QpState::Sqd)
                && self.req.rnr_until.is_none()
                && self.req.send_idx < self.req.sq.len())
    }

    /// [`QueuePair::poll_transmit`], writing the packet at `buf[at..at + len]` instead: what
    /// `buf` holds before `at` stays, `buf` grows when it is too short, and it never shrinks.
    /// A sender that lays its packets back to back in one buffer builds them in place (no
    /// copy), and a buffer kept across batches is never zeroed twice.
    pub fn poll_transmit_at(
        &mut self,
        now: Instant,
        buf: &mut Vec<u8>,
        at: usize,
    ) -> Option<Transmit> {
        #[cfg(debug_assertions)]
        let may = self.may_transmit();
        let t = match self.responder_transmit(buf, at) {
            Some(t) => Some(t),
            None => self.requester_transmit(now, buf, at),
        };
        // Every test (the simulator's, the property tests', the fuzzers') checks the
        // promise hosts rely on to skip this call.
        #[cfg(debug_assertions)]
        debug_assert!(
            may || t.is_none(),
            "may_transmit said no, and a packet came"
        );
        let t = t?;
        self.counters.sent_packets += 1;
        Some(t)
    }

    /// Handles a received packet. `src` and `dst` are its IP addresses; the caller has
    /// demultiplexed it to this QP by destination QPN and, where it could, verified the ICRC.
    /// Packets that do not belong (wrong state, address, transport, P_Key) are dropped and
    /// counted; they never change the QP.
    pub fn handle_packet(&mut self, now: Instant, src: IpAddr, dst: IpAddr, pkt: &IbPacket<&[u8]>) {
        self.counters.rcvd_packets += 1;
        let info = pkt.info();
        let transport_ok = matches!(
            (info.transport, self.cfg.qp_type),
            (softrdma_wire::Transport::Rc, QpType::Rc)
                | (softrdma_wire::Transport::Uc, QpType::Uc)
                | (softrdma_wire::Transport::Ud, QpType::Ud)
        );
        let state_ok = matches!(
            self.state,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        );
        // P_Key: full or limited membership of the default partition.
        let pkey_ok = pkt.bth().pkey() & 0x7FFF == DEFAULT_PKEY & 0x7FFF;
        // rxe drops RC/UC packets whose addresses are not the connection's.
        let addr_ok = self.cfg.qp_type == QpType::Ud
            || (same_ip(src, self.attrs.av.dst) && same_ip(dst, self.attrs.av.src));
        if !(transport_ok && state_ok && pkey_ok && addr_ok) {
            self.counters.dropped += 1;
            return;
        }
        if info.is_response {
            if matches!(self.state, QpState::Rts | QpState::Sqd) {
                self.handle_response(now, pkt);
            } else {
                self.counters.dropped += 1;
            }
        } else {
            self.handle_request(src, dst, pkt);
        }
        if self.state == QpState::Sqd {
            self.check_drained();
        }
    }

    pub(crate) fn send_wc(&self, wr: &SendWr, status: WcStatus, byte_len: u32) -> Completion {
        Completion {
            opcode: wr.op.wc_opcode(),
            byte_len,
            ..self.recv_wc(wr.wr_id, status)
        }
    }

    /// A completion of this QP with nothing but its WR and status filled in (a receive's
    /// opcode); callers add what their completion carries.
    pub(crate) fn recv_wc(&self, wr_id: u64, status: WcStatus) -> Completion {
        Completion {
            wr_id,
            status,
            opcode: WcOpcode::Recv,
            byte_len: 0,
            imm_data: 0,
            invalidated_rkey: 0,
            qp_num: self.cfg.qpn,
            src_qp: Qpn::new(0),
            wc_flags: WcFlags::empty(),
            solicited: false,
        }
    }

    /// Moves to ERROR: the failed WR (if any) was already completed by the caller; every
    /// other outstanding send and receive WR completes with WR_FLUSH_ERR, in order.
    pub(crate) fn enter_error(&mut self, event: Option<AsyncEvent>) {
        if self.state == QpState::Error {
            return;
        }
        self.state = QpState::Error;
        if let Some(e) = event {
            self.event(e);
        }
        self.flush_send_queue();
        let mut flushed = Vec::new();
        if let Some(wr) = self.resp.take_current_recv() {
            flushed.push(wr.wr_id);
        }
        flushed.extend(self.resp.rq.drain(..).map(|w| w.wr_id));
        for id in flushed {
            self.completions
                .push_back(self.recv_wc(id, WcStatus::WrFlushErr));
        }
        self.req.retx_deadline = None;
        self.req.rnr_until = None;
        self.req.probe_from = None;
        self.resp.drop_kept();
    }

    /// Flushes every send WR still queued (UC/UD SQE, or ERROR).
    pub(crate) fn flush_send_queue(&mut self) {
        let wqes: Vec<_> = self.req.sq.drain(..).collect();
        for w in wqes {
            self.completions
                .push_back(self.send_wc(&w.wr, WcStatus::WrFlushErr, 0));
        }
        self.req.reset_pointers();
    }

    fn check_drained(&mut self) {
        if self.state == QpState::Sqd && self.req.is_drained() && !self.req.drain_reported {
            self.req.drain_reported = true;
            if self.attrs.sqd_notify {
                self.event(AsyncEvent::SqDrained(self.cfg.qpn));
            }
        }
    }
}

/// IP equality that treats an IPv4 address and its IPv4-mapped IPv6 form as the same, since
/// RoCE v2 GIDs carry IPv4 addresses mapped.
pub fn same_ip(a: IpAddr, b: IpAddr) -> bool {
    a.to_canonical() == b.to_canonical()
}

/// Writes one packet into `buf` at `at` (growing `buf` if needed, never shrinking it):
/// headers from `bth` and `ext`, `payload_len` bytes from `source`, pad, and the ICRC for
/// the IP and UDP headers Linux would put around it. A lent payload is left out of `buf`
/// (see [`Lent`]); the ICRC covers it all the same.
#[allow(clippy::too_many_arguments)]
pub(crate) fn emit_packet<F>(
    buf: &mut Vec<u8>,
    at: usize,
    mut bth: softrdma_wire::BthRepr,
    ext: softrdma_wire::ExtHeaders,
    payload_len: usize,
    source: PayloadSource<'_, F>,
    src: IpAddr,
    dst: IpAddr,
    src_port: u16,
    mut icrc: Option<&mut softrdma_wire::icrc::IcrcPrefixes>,
) -> Result<Transmit, crate::MemError>
where
    F: FnOnce(&mut [u8]) -> Result<(), crate::MemError>,
{
    use softrdma_wire::packet::{ICRC_LEN, pad_for};
    let pad = usize::from(pad_for(payload_len));
    bth.pad_count = pad as u8;
    let hdr = softrdma_wire::IbRepr {
        bth,
        ext,
        payload: &[],
    };
    debug_assert!(
        hdr.check().is_ok(),
        "the engine built a bad header: {hdr:?}"
    );
    let hlen = softrdma_wire::Bth::<&[u8]>::LEN + bth.opcode.info().map_or(0, |i| i.headers_len());
    let (s, d) = icrc_pair(src, dst);
    let owed = icrc.is_none();
    if let PayloadSource::Range {
        mem,
        pd,
        key,
        addr,
        access,
    } = source
        && payload_len >= LEND_MIN_BYTES
        && mem.lends()
    {
        let in_buf = hlen + pad + ICRC_LEN;
        if buf.len() < at + in_buf {
            buf.resize(at + in_buf, 0);
        }
        let pkt = &mut buf[at..at + in_buf];
        let _ = hdr.emit_headers(payload_len, &mut pkt[..hlen]);
        let (head, tail) = pkt.split_at_mut(hlen);
        // The ICRC over the payload where it lies: the one pass over its bytes this side
        // makes (the kernel's copy into the socket buffer is the other).
        let (crc, lent) = match &mut icrc {
            Some(icrc) => icrc
                .compute_for_parts(s, d, src_port, head, payload_len + pad, |r| {
                    let lent = mem.lend(pd, key, addr, payload_len as u64, access, &mut |b| {
                        r.update(b)
                    });
                    r.update(&[0; 3][..pad]);
                    lent
                })
                .unwrap_or((0, Ok(false))),
            // Owed: the region is still checked and its payload lent.
            None => (
                0,
                mem.lend(pd, key, addr, payload_len as u64, access, &mut |_| {}),
            ),
        };
        if lent? {
            tail[..pad].fill(0);
            tail[pad..].copy_from_slice(&crc.to_le_bytes());
            return Ok(Transmit {
                src,
                dst,
                src_port,
                len: in_buf,
                lent: Some(Lent {
                    key,
                    addr,
                    len: payload_len as u32,
                    at: hlen as u16,
                }),
                icrc_owed: owed,
                traffic_class: 0,
            });
        }
    }
    let total = hlen + payload_len + pad + ICRC_LEN;
    // Reuse the buffer without zeroing it: the headers are written whole, the payload is
    // overwritten whole (on a 4 KiB packet zeroing cost as much as the copy), and the pad
    // and ICRC are written below.
    if buf.len() < at + total {
        buf.resize(at + total, 0);
    }
    let pkt = &mut buf[at..at + total];
    // The engine builds its headers from the opcode table, so they always match the opcode;
    // a failure here is a bug (the debug assertion above, and the tests, catch it).
    let _ = hdr.emit_headers(payload_len, &mut pkt[..hlen]);
    pkt[hlen + payload_len..hlen + payload_len + pad].fill(0);
    let out = &mut pkt[hlen..hlen + payload_len];
    match source {
        PayloadSource::Fill(fill) => fill(out)?,
        PayloadSource::Range {
            mem,
            pd,
            key,
            addr,
            access,
        } => mem.read(pd, key, addr, out, access)?,
    }
    let body = total - ICRC_LEN;
    let owed = icrc.is_none();
    let crc = icrc.map_or(0, |i| {
        i.compute_for(s, d, src_port, &pkt[..body]).unwrap_or(0)
    });
    pkt[body..].copy_from_slice(&crc.to_le_bytes());
    Ok(Transmit {
        src,
        dst,
        src_port,
        len: total,
        lent: None,
        icrc_owed: owed,
        traffic_class: 0,
    })
}

/// The ICRC of `ib` (BTH through pad) sent from `src` to `dst` by an unconnected DF socket.
/// IPv4-mapped IPv6 addresses count as IPv4; a mixed pair is sent as IPv6.
pub fn icrc_for(src: IpAddr, dst: IpAddr, src_port: u16, ib: &[u8]) -> u32 {
    let (src, dst) = icrc_pair(src, dst);
    softrdma_wire::icrc::compute_for(src, dst, src_port, ib).unwrap_or(0)
}

/// The addresses as the ICRC sees them: IPv4 when both are IPv4 (or IPv4-mapped), IPv6
/// otherwise.
pub fn icrc_pair(src: IpAddr, dst: IpAddr) -> (IpAddr, IpAddr) {
    match (src.to_canonical(), dst.to_canonical()) {
        (s @ IpAddr::V4(_), d @ IpAddr::V4(_)) => (s, d),
        _ => (to_v6(src), to_v6(dst)),
    }
}

fn to_v6(a: IpAddr) -> IpAddr {
    match a {
        IpAddr::V4(v4) => IpAddr::V6(v4.to_ipv6_mapped()),
        v6 => v6,
    }
}
