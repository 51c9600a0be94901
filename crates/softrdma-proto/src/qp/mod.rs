//! One queue pair: requester, completer and responder of RC, UC and UD, with no I/O.
//!
//! See the crate documentation for the calling contract.
//!
//! # Layout
//! This file holds [`QueuePair`] itself: its state, creation, attribute changes, the
//! dispatch of packets and timeouts to the roles, and the output queues. The roles are one
//! file each, as rxe splits them: `requester.rs` (`rxe_req.c`: the send queue, its window,
//! request packets), `completer.rs` (`rxe_comp.c`: ACKs, NAKs, READ and atomic responses,
//! retries and probes, send completions) and `responder.rs` (`rxe_resp.c`). Beside them:
//! `post.rs` (the posting verbs), `emit.rs` (packet building and the ICRC), `sge.rs`
//! (gather and scatter), `srq.rs`, `config.rs` and `rtt.rs`.
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
mod config;
mod emit;
mod post;
mod requester;
mod responder;
pub mod rtt;
mod sge;
mod srq;

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

pub use config::{QpCaps, QpConfig};
pub use emit::{LEND_MIN_BYTES, Lent, Transmit, icrc_for, icrc_pair, same_ip};
pub(crate) use emit::{PayloadSource, emit_packet};
pub use post::{Placing, PostError};
pub(crate) use requester::Requester;
pub use responder::REORDER_PSNS;
pub(crate) use responder::Responder;
pub use srq::Srq;

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
