//! The send side: turning send WRs into request packets (rxe's `rxe_req.c`) and acting on
//! ACKs, NAKs, READ responses, atomic ACKs and timers (rxe's `rxe_comp.c`).

use super::rtt::RttEstimator;
use super::*;
use crate::memory::{Access, MemError};
use softrdma_wire::{
    AtomicEthRepr, BthRepr, DethRepr, ExtHeaders, IethRepr, ImmDtRepr, NakCode, Opcode, RethRepr,
    Syndrome,
};

/// A send WR on the send queue.
#[derive(Debug)]
pub(crate) struct SendWqe {
    pub wr: SendWr,
    pub len: u64,
    /// PSNs the message consumes: packets for SEND/WRITE, response packets for READ, 1 for
    /// atomics.
    pub npkts: u32,
    /// Assigned when the first packet is sent.
    pub first_psn: Option<Psn>,
    pub signaled: bool,
    /// READ: bytes received in order so far.
    pub read_done: u64,
    /// READ: responses placed ahead of `read_done`: bit `i` is the response PSN `i + 1`
    /// after the next one expected.
    pub read_ahead: u128,
    /// Held for the host to place once every WR before it completed (see
    /// `QueuePair::post_send_placed`): not sent while held.
    pub held: bool,
}

/// The requester and completer state.
#[derive(Debug, Default)]
pub(crate) struct Requester {
    pub sq: VecDeque<SendWqe>,
    /// The WQE and packet to send next (go-back-N rewinds these).
    pub send_idx: usize,
    pub send_pkt: u32,
    /// The PSN the next new WQE starts at.
    pub next_psn: Psn,
    /// Oldest unacknowledged PSN.
    pub una: Psn,
    /// One past the highest PSN ever sent.
    pub sent_hwm: Psn,
    pub retry_left: u8,
    pub rnr_left: u8,
    pub retx_deadline: Option<Instant>,
    pub rnr_until: Option<Instant>,
    pub noack_pkts: u32,
    /// READs and atomics sent and not completed.
    pub rd_outstanding: u32,
    pub drain_reported: bool,
    /// Unacknowledged PSNs allowed in flight, between [`MIN_WINDOW`] and
    /// [`MAX_UNACKED_PSNS`]: the congestion window (see the module documentation of `qp`).
    /// It shrinks for timeouts and for losses that come with queueing delay, since a
    /// go-back-N pass into a full queue only fills it further; rxe has no such limit.
    pub window: i32,
    /// The round-trip estimate that times probes and tells congestion from a lossy link.
    pub rtt: RttEstimator,
    /// Packets in flight that asked for an ACK, oldest first, for round-trip samples: one
    /// past the last PSN each covers, when it left, and whether it was its first
    /// transmission. A resent packet's ACK may answer an earlier copy (Karn's rule), so its
    /// sample is only a lower bound: it can show a queue, not set the estimate. Its newest
    /// entry also says whether an ACK is already asked for in the window.
    pub timed: VecDeque<(Psn, Instant, bool)>,
    /// When the silence a tail-loss probe waits out began (the last packet sent, the last
    /// progress or the last probe), if anything is outstanding. The probe's deadline is
    /// worked out from it when asked for, so that a round trip learnt meanwhile (by another
    /// QP of the path, say) brings it forward.
    pub probe_from: Option<Instant>,
    /// Probes sent since the last progress; each doubles the wait for the next.
    pub probes_unanswered: u32,
    /// A probe is out: only the packet at `una` may be sent until something answers it.
    pub probing: bool,
    /// When the last probe went out.
    pub probe_sent: Option<Instant>,
    /// Until `una` reaches this PSN, the window is not shrunk again: one reduction per loss
    /// episode, however many packets of one window were lost.
    pub recover: Option<Psn>,
    /// The last go-back-N: the PSN it went back to, and when.
    pub rewound: Option<(Psn, Instant)>,
    /// PSNs acknowledged towards the window's next step up while a queue builds.
    pub grow_credit: i32,
    /// The window before the last cut for loss: growth while a queue builds heads back
    /// there quickly, then slows (as BIC and CUBIC do).
    pub w_max: i32,
    /// When the window was last cut for queueing delay.
    pub last_cut: Option<Instant>,
    /// Selective repair: one PSN to send again next, ahead of the send pointers, which stay
    /// where they are (see [`QueuePair::retry`]).
    pub repair: Option<Psn>,
    /// The selective repair under way: until `una` reaches this PSN (the highest sent when
    /// it began), every ACK that moves `una` without reaching it has the next missing PSN
    /// sent again (a partial ACK, as in NewReno, RFC 6582).
    pub sel_recover: Option<Psn>,
    /// Whether the responder keeps the packets that come after a gap (softrdma does) or
    /// drops them (rxe does, as IBTA 9.7.5.2.1 describes): `None` until an answer tells.
    /// Only a responder that keeps them is repaired selectively; one that drops them needs
    /// everything after the gap again (go-back-N).
    pub peer_keeps: Option<bool>,
    /// While `peer_keeps` is unknown: the PSN sent again alone whose answer will tell.
    pub keep_test: Option<Psn>,
    /// Answers that stopped exactly at the PSN sent again. A responder that keeps packets
    /// gives one when two packets in a row were lost; two make the verdict "drops them".
    pub dropped_votes: u8,
    /// The packet being built asks for an ACK whatever its place (a selective repair).
    pub force_ack: bool,
    /// When the last selective repair, unanswered, is sent again: it asked for an ACK, so
    /// two round trips of silence mean it (or its answer) was lost, and the responder,
    /// which sent its one NAK for the gap already, will not say so. Sending it once more
    /// costs one packet, so this waits neither for the peer's ACK delay nor for a probe.
    pub repair_at: Option<Instant>,
    /// Repairs sent again since the last progress; each doubles the wait for the next.
    pub repair_tries: u32,
}

/// Most packets asking for an ACK that are timed at once: a window asks at least twice, and
/// a window of one-packet messages once per message.
const MAX_TIMED: usize = 32;

/// Unanswered probes double the wait for the next one up to 2^this: a probe lost in a full
/// queue must not leave its QP silent until the ACK timeout, and a dead peer costs one packet
/// per 16 probe timeouts until the timeouts, which still run, end it.
const MAX_PROBE_BACKOFF: u32 = 4;

/// The smallest in-flight window.
pub const MIN_WINDOW: i32 = 4;

/// Why the requester goes back to its oldest unacknowledged PSN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Loss {
    /// The local ACK timeout expired: a retry in the IBTA sense.
    Timeout,
    /// The responder said so (a sequence NAK) or a later response implied it (a READ
    /// response beyond the expected PSN, or an ACK beyond an unanswered READ or atomic).
    /// `progressed`: the same packet also acknowledged something.
    Detected {
        /// The report moved `una` forward.
        progressed: bool,
    },
}

/// What an acknowledgement up to a PSN did.
#[derive(Debug, PartialEq, Eq)]
enum Acked {
    /// The PSN was never sent: ignore the packet.
    Ghost,
    /// Done; the packet may be processed further.
    Done,
    /// A READ or atomic it covers had lost its response: retransmission was started instead.
    Retried,
}

impl Requester {
    pub fn start(&mut self, psn: Psn, attrs: &Attrs) {
        self.next_psn = psn;
        self.una = psn;
        self.sent_hwm = psn;
        self.retry_left = attrs.retry_cnt;
        self.rnr_left = attrs.rnr_retry;
        self.window = MAX_UNACKED_PSNS;
        self.probing = false;
        self.probe_sent = None;
        self.probe_from = None;
        self.probes_unanswered = 0;
        self.recover = None;
        self.rewound = None;
        self.timed.clear();
        self.grow_credit = 0;
        self.w_max = 0;
        self.last_cut = None;
        self.repair = None;
        self.sel_recover = None;
        self.peer_keeps = None;
        self.keep_test = None;
        self.dropped_votes = 0;
        self.repair_at = None;
        self.repair_tries = 0;
    }

    pub fn push(&mut self, wr: SendWr, len: u64, signaled: bool, mtu: Mtu) {
        let npkts = if wr.op.is_atomic() {
            1
        } else {
            len.div_ceil(mtu.bytes() as u64).max(1) as u32
        };
        self.sq.push_back(SendWqe {
            wr,
            len,
            npkts,
            first_psn: None,
            signaled,
            read_done: 0,
            read_ahead: 0,
            held: false,
        });
        self.drain_reported = false;
    }

    pub fn reset_pointers(&mut self) {
        self.send_idx = 0;
        self.send_pkt = 0;
        self.rd_outstanding = 0;
        self.una = self.next_psn;
        self.sent_hwm = self.next_psn;
    }

    pub fn is_drained(&self) -> bool {
        self.sq.front().is_none_or(|w| w.first_psn.is_none())
    }

    /// Points the send pointers at PSN `p` (go-back-N).
    fn rewind(&mut self, p: Psn, mtu: u64) {
        for (i, w) in self.sq.iter_mut().enumerate() {
            let Some(first) = w.first_psn else {
                self.send_idx = i;
                self.send_pkt = 0;
                return;
            };
            let off = p.diff(first);
            if off >= 0 && (off as u32) < w.npkts {
                self.send_idx = i;
                self.send_pkt = off as u32;
                if matches!(w.wr.op, SendOp::Read { .. }) {
                    let to = u64::from(self.send_pkt) * mtu;
                    if to < w.read_done {
                        w.read_done = to;
                        w.read_ahead = 0;
                    }
                }
                return;
            }
        }
        self.send_idx = self.sq.len();
        self.send_pkt = 0;
    }

    /// The PSN the send pointers are at, if that WQE has started.
    fn send_psn(&self) -> Option<Psn> {
        let w = self.sq.get(self.send_idx)?;
        Some(w.first_psn?.add(self.send_pkt))
    }

    /// A loss: the window halves on a timeout; a detected loss while a queue builds (or
    /// before any round trip is known) cuts it once per loss episode, in proportion to how
    /// far the delay is over its target (by half at most; with no sample yet, by half): a
    /// loss with a queue about to overflow halves the window, one beside a small standing
    /// queue (a receiver slower than its sender, a reordering link) trims it.
    fn shrink_for_loss(&mut self, timeout: bool) {
        let in_episode = self.recover.is_some_and(|p| self.una.diff(p) < 0);
        let kept = if timeout {
            0.5
        } else if !in_episode && self.rtt.queueing() {
            self.delay_cut().unwrap_or(0.5)
        } else {
            return;
        };
        self.w_max = self.window;
        self.cut_window(kept);
        self.recover = Some(self.sent_hwm);
    }

    /// The share of the window to keep for the queueing delay (as Swift scales its
    /// decrease): less the further the delay is over its target, half at most; `None` while
    /// it is not over.
    fn delay_cut(&self) -> Option<f64> {
        self.rtt.over_target().map(|o| (1.0 - 0.8 * o).max(0.5))
    }

    /// Keeps `kept` of the window, and at least [`MIN_WINDOW`].
    fn cut_window(&mut self, kept: f64) {
        self.window = ((f64::from(self.window) * kept) as i32).max(MIN_WINDOW);
    }

    /// Goes back to `una` (go-back-N): what is in flight is sent again, and timed again as
    /// it is; a selective repair under way ends.
    fn go_back_n(&mut self, now: Instant, mtu: u64) {
        self.end_repair();
        self.timed.clear();
        self.rewound = Some((self.una, now));
        self.rewind(self.una, mtu);
    }

    /// Starts (or goes on with) a selective repair at `p`: that PSN alone is sent again,
    /// asking for an ACK, and the answer says how far the responder got with the packets it
    /// kept, and so what to send next.
    fn start_repair(&mut self, p: Psn, now: Instant) {
        self.repair = Some(p);
        self.rewound = Some((p, now));
        self.sel_recover = Some(self.sent_hwm);
        // The packets after the gap are answered only once it is filled: their round trips
        // would show a queue that is not there.
        self.timed.clear();
        if self.peer_keeps.is_none() && p.next() != self.sent_hwm {
            self.keep_test = Some(p);
        }
    }

    /// Whether PSN `p` is a packet of a SEND or WRITE that has been sent.
    fn sends_or_writes(&self, p: Psn) -> bool {
        self.sq.iter().any(|w| {
            w.first_psn.is_some_and(|f| {
                let off = p.diff(f);
                off >= 0 && (off as u32) < w.npkts && !w.wr.op.is_read_or_atomic()
            })
        })
    }

    /// Ends a selective repair (a go-back-N, a timeout or an RNR NAK takes over).
    fn end_repair(&mut self) {
        self.repair = None;
        self.sel_recover = None;
        self.keep_test = None;
        self.repair_at = None;
    }

    /// PSNs that may be unacknowledged now: the window, or one while a probe is out.
    fn limit(&self) -> i32 {
        if self.probing { 1 } else { self.window }
    }

    /// The PSN the next packet sent will carry: the send pointers', or the next new one.
    fn send_point(&self) -> Psn {
        self.send_psn().unwrap_or(self.next_psn)
    }

    /// True when a loss reported at `e` (a sequence NAK's PSN, the first missing READ
    /// response, or the first PSN a partial ACK leaves unacknowledged) is already being
    /// repaired: the last repair (a go-back-N or a selective one) went back to `e` itself
    /// and has sent it again less than a round trip ago, so this is a late or duplicated
    /// report of the same gap, and acting on it would send the same packets once more. A
    /// report of another PSN, or of the same one a round trip later (the repair itself was
    /// lost), is news and is acted on at once: waiting for a probe costs more than a
    /// needless pass.
    fn repairing(&self, e: Psn, now: Instant) -> bool {
        let Some((r, t)) = self.rewound else {
            return false;
        };
        let rtt = self.rtt.srtt().unwrap_or(super::rtt::MIN_PTO);
        e == r && self.send_point().diff(e) > 0 && now.since(t) < rtt
    }
}

/// The `len` bytes of a send's data at `offset` as one range of memory (its key and first
/// address), when they lie inside one SGE.
fn within_one_sge(payload: &Payload, mut offset: u64, len: u64) -> Option<Sge> {
    let Payload::Sges(sges) = payload else {
        return None;
    };
    for s in sges {
        let l = u64::from(s.length);
        if offset < l {
            return (offset + len <= l).then_some(Sge {
                addr: s.addr + offset,
                length: len as u32,
                lkey: s.lkey,
            });
        }
        offset -= l;
    }
    None
}

/// Reads `out.len()` bytes of a send's data starting at `offset`.
pub(crate) fn gather(
    mem: &dyn Memory,
    pd: Pd,
    payload: &Payload,
    mut offset: u64,
    out: &mut [u8],
) -> Result<(), MemError> {
    match payload {
        Payload::Inline(v) => {
            let o = offset as usize;
            out.copy_from_slice(&v[o..o + out.len()]);
            Ok(())
        }
        Payload::Sges(sges) => {
            let mut at = 0;
            for s in sges {
                if at == out.len() {
                    break;
                }
                let l = u64::from(s.length);
                if offset >= l {
                    offset -= l;
                    continue;
                }
                let n = ((l - offset) as usize).min(out.len() - at);
                mem.read(
                    pd,
                    s.lkey,
                    s.addr + offset,
                    &mut out[at..at + n],
                    Access::LocalRead,
                )?;
                at += n;
                offset = 0;
            }
            Ok(())
        }
    }
}

/// Why a scatter failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScatterError {
    /// The data does not fit in the SGEs.
    TooLong,
    /// An SGE was refused.
    Mem(MemError),
}

/// Writes `data` into the SGEs starting at byte `offset` of the list.
pub(crate) fn scatter(
    mem: &dyn Memory,
    pd: Pd,
    sges: &[Sge],
    mut offset: u64,
    data: &[u8],
) -> Result<(), ScatterError> {
    let mut at = 0;
    for s in sges {
        if at == data.len() {
            break;
        }
        let l = u64::from(s.length);
        if offset >= l {
            offset -= l;
            continue;
        }
        let n = ((l - offset) as usize).min(data.len() - at);
        mem.write(
            pd,
            s.lkey,
            s.addr + offset,
            &data[at..at + n],
            Access::LocalWrite,
        )
        .map_err(ScatterError::Mem)?;
        at += n;
        offset = 0;
    }
    if at < data.len() {
        Err(ScatterError::TooLong)
    } else {
        Ok(())
    }
}

fn send_write_opcode(op: SendOp, first: bool, last: bool) -> u8 {
    match (op, first, last) {
        (SendOp::Write { .. } | SendOp::WriteWithImm { .. }, true, false) => 0x06,
        (SendOp::Write { .. } | SendOp::WriteWithImm { .. }, false, false) => 0x07,
        (SendOp::Write { .. }, false, true) => 0x08,
        (SendOp::WriteWithImm { .. }, false, true) => 0x09,
        (SendOp::Write { .. }, true, true) => 0x0A,
        (SendOp::WriteWithImm { .. }, true, true) => 0x0B,
        (_, true, false) => 0x00,
        (_, false, false) => 0x01,
        (SendOp::SendWithImm(_), false, true) => 0x03,
        (SendOp::SendWithInv(_), false, true) => 0x16,
        (_, false, true) => 0x02,
        (SendOp::SendWithImm(_), true, true) => 0x05,
        (SendOp::SendWithInv(_), true, true) => 0x17,
        (_, true, true) => 0x04,
    }
}

impl QueuePair {
    fn mtu(&self) -> u64 {
        self.attrs.mtu.bytes() as u64
    }

    fn ack_timeout(&self) -> Option<Duration> {
        ack_timeout(self.attrs.timeout)
    }

    fn ack_timeout_at(&self, now: Instant) -> Option<Instant> {
        self.ack_timeout().map(|d| now.add(d))
    }

    pub(crate) fn requester_transmit(
        &mut self,
        now: Instant,
        buf: &mut Vec<u8>,
        at: usize,
    ) -> Option<Transmit> {
        if let Some(p) = self.req.repair.take()
            && let Some(t) = self.transmit_repair(now, buf, at, p)
        {
            return Some(t);
        }
        self.transmit_next(now, buf, at)
    }

    /// Sends PSN `p` (a SEND or WRITE packet) again, alone and asking for an ACK; the send
    /// pointers stay where they are. Nothing when `p` is acknowledged by now, or when the
    /// pointers are about to send it anyway.
    #[inline(never)]
    fn transmit_repair(
        &mut self,
        now: Instant,
        buf: &mut Vec<u8>,
        at: usize,
        p: Psn,
    ) -> Option<Transmit> {
        if p.diff(self.req.una) < 0 || p.diff(self.req.send_point()) >= 0 {
            return None;
        }
        let saved = (self.req.send_idx, self.req.send_pkt);
        self.req.rewind(p, self.mtu());
        self.req.force_ack = true;
        let t = self.transmit_next(now, buf, at);
        self.req.force_ack = false;
        if self.state != QpState::Error {
            (self.req.send_idx, self.req.send_pkt) = saved;
        }
        if t.is_some() {
            let rtt = self.req.rtt.srtt().unwrap_or(super::rtt::MIN_PTO);
            let backoff = 1 << self.req.repair_tries.min(MAX_PROBE_BACKOFF);
            let wait = (2 * rtt).max(super::rtt::MIN_PTO) * backoff;
            self.req.repair_at = Some(now.add(wait));
        }
        t
    }

    /// Whether a loss reported at `p` can be repaired selectively: the responder is not
    /// known to drop what follows a gap, no go-back-N pass is under way, and `p` is a SEND
    /// or WRITE packet (a READ or atomic is re-issued from `p` on).
    fn selective_ok(&self, p: Psn) -> bool {
        let r = &self.req;
        r.peer_keeps != Some(false)
            && r.send_point() == r.sent_hwm
            && p.diff(r.sent_hwm) < 0
            && r.sends_or_writes(p)
    }

    /// The next packet at the send pointers. Inlined in its callers: the per-packet path.
    #[inline(always)]
    fn transmit_next(&mut self, now: Instant, buf: &mut Vec<u8>, at: usize) -> Option<Transmit> {
        if !matches!(self.state, QpState::Rts | QpState::Sqd) || self.req.rnr_until.is_some() {
            return None;
        }
        let rc = self.cfg.qp_type == QpType::Rc;
        let mtu = self.mtu();
        let idx = self.req.send_idx;
        let w = self.req.sq.get(idx)?;
        if w.first_psn.is_none() {
            if self.state == QpState::Sqd || w.held {
                return None;
            }
            if rc {
                let is_rd = w.wr.op.is_read_or_atomic();
                // max_rd_atomic 0 would stall a READ forever; treat it as 1.
                let limit = u32::from(self.attrs.max_rd_atomic.max(1));
                if is_rd && self.req.rd_outstanding >= limit {
                    return None;
                }
                if w.wr.flags.contains(SendFlags::FENCE) && self.req.rd_outstanding > 0 {
                    return None;
                }
            }
            let first = self.req.next_psn;
            if rc && first.diff(self.req.una) >= self.req.limit() {
                return None;
            }
            let npkts = w.npkts;
            let is_rd = w.wr.op.is_read_or_atomic();
            self.req.sq[idx].first_psn = Some(first);
            self.req.next_psn = first.add(npkts);
            if is_rd {
                self.req.rd_outstanding += 1;
            }
        }
        let w = &self.req.sq[idx];
        let first = w.first_psn?;
        let psn = first.add(self.req.send_pkt);
        let limit = self.req.limit();
        if rc && psn.diff(self.req.una) >= limit {
            return None;
        }
        let own = self.cfg.qpn;
        let (dst, dqpn, src, tclass) = match (&w.wr.ud, self.cfg.qp_type) {
            (Some(ud), QpType::Ud) => (ud.ip, ud.qpn, ud.src, ud.traffic_class),
            _ => (
                self.attrs.av.dst,
                self.attrs.dest_qpn,
                self.attrs.av.src,
                self.attrs.av.traffic_class,
            ),
        };
        let base = match self.cfg.qp_type {
            QpType::Rc => 0x00,
            QpType::Uc => 0x20,
            QpType::Ud => 0x60,
        };
        let mut ext = ExtHeaders::default();
        let mut solicited = false;
        let (offset, n, opcode, last, ack_req);
        match w.wr.op {
            SendOp::Read { remote_addr, rkey } => {
                offset = u64::from(self.req.send_pkt) * mtu;
                ext.reth = Some(RethRepr {
                    va: remote_addr.wrapping_add(offset),
                    rkey,
                    len: (w.len - offset) as u32,
                });
                (n, opcode, last, ack_req) = (0, 0x0C, true, true);
            }
            SendOp::CompareSwap {
                remote_addr,
                rkey,
                compare,
                swap,
            } => {
                ext.atomic_eth = Some(AtomicEthRepr {
                    va: remote_addr,
                    rkey,
                    swap_add: swap,
                    compare,
                });
                (offset, n, opcode, last, ack_req) = (0, 0, 0x13, true, true);
            }
            SendOp::FetchAdd {
                remote_addr,
                rkey,
                add,
            } => {
                ext.atomic_eth = Some(AtomicEthRepr {
                    va: remote_addr,
                    rkey,
                    swap_add: add,
                    compare: 0,
                });
                (offset, n, opcode, last, ack_req) = (0, 0, 0x14, true, true);
            }
            op => {
                offset = u64::from(self.req.send_pkt) * mtu;
                n = (w.len - offset).min(mtu) as usize;
                let is_first = self.req.send_pkt == 0;
                last = offset + n as u64 == w.len;
                if self.cfg.qp_type == QpType::Ud {
                    opcode = if matches!(op, SendOp::SendWithImm(_)) {
                        0x65
                    } else {
                        0x64
                    };
                    let ud = w.wr.ud.unwrap_or(UdDest {
                        src,
                        ip: dst,
                        qpn: dqpn,
                        qkey: 0,
                        traffic_class: tclass,
                    });
                    let qkey = if ud.qkey & 0x8000_0000 != 0 {
                        self.attrs.qkey
                    } else {
                        ud.qkey
                    };
                    ext.deth = Some(DethRepr { qkey, src_qp: own });
                } else {
                    opcode = base | send_write_opcode(op, is_first, last);
                }
                if let (true, SendOp::Write { remote_addr, rkey })
                | (
                    true,
                    SendOp::WriteWithImm {
                        remote_addr, rkey, ..
                    },
                ) = (is_first, op)
                {
                    ext.reth = Some(RethRepr {
                        va: remote_addr,
                        rkey,
                        len: w.len as u32,
                    });
                }
                if last {
                    match op {
                        SendOp::SendWithImm(imm) | SendOp::WriteWithImm { imm, .. } => {
                            ext.imm_dt = Some(ImmDtRepr { imm })
                        }
                        SendOp::SendWithInv(rkey) => ext.ieth = Some(IethRepr { rkey }),
                        _ => {}
                    }
                    solicited = w.wr.flags.contains(SendFlags::SOLICITED);
                }
                // IBTA 9.7.5.1: the responder may coalesce ACKs, so only a packet that asks
                // is sure to be answered: a window's last packet always asks (else a window
                // filled in the middle of a message waits for the ACK timeout), as does a
                // probe; and the window is ACKed at least twice over, so that ACKs keep it
                // moving.
                let interval = ((self.req.window / 2) as u32).clamp(1, MAX_PKT_PER_ACK);
                // Whether a packet before this one, still unanswered and not to be sent
                // again, asked: the newest entry of the timed ring, which a go-back-N or a
                // probe empties and an ACK of it pops.
                let asked = self.req.timed.back().is_some_and(|&(end, _, _)| {
                    end.diff(self.req.una) > 0 && end.sub(1).diff(psn) < 0
                });
                ack_req = rc
                    && (last
                        || self.req.probing
                        || self.req.force_ack
                        || (psn.next().diff(self.req.una) >= limit && !asked)
                        || self.req.noack_pkts + 1 >= interval);
            }
        }
        let bth = BthRepr {
            solicited,
            ack_req,
            ..BthRepr::new(Opcode(opcode), dqpn, psn)
        };
        let sport = match (self.cfg.udp_sport, self.cfg.qp_type) {
            (Some(p), _) => p,
            (None, QpType::Ud) => softrdma_wire::rxe_udp_sport(own, dqpn),
            (None, _) => self.attrs.av.udp_sport(own, dqpn),
        };
        let (mem, pd) = (&*self.mem, self.cfg.pd);
        let payload = &w.wr.payload;
        let fill = |out: &mut [u8]| gather(mem, pd, payload, offset, out);
        let source = match within_one_sge(payload, offset, n as u64) {
            Some(sge) => PayloadSource::Range {
                mem,
                pd,
                key: sge.lkey,
                addr: sge.addr,
                access: Access::LocalRead,
            },
            None => PayloadSource::Fill(fill),
        };
        let result = emit_packet(
            buf,
            at,
            bth,
            ext,
            n,
            source,
            src,
            dst,
            sport,
            (!self.icrc_owed).then(|| &mut **self.icrc.get_or_insert_with(Default::default)),
        );
        let t = match result {
            Ok(t) => Transmit {
                traffic_class: tclass,
                ..t
            },
            Err(_) => {
                buf.truncate(at);
                self.local_send_error(WcStatus::LocProtErr);
                return None;
            }
        };
        // Bookkeeping for the packet that goes out. A READ request occupies the PSNs of all
        // the responses it asks for.
        let is_read = matches!(self.req.sq[idx].wr.op, SendOp::Read { .. });
        let end = if is_read {
            first.add(self.req.sq[idx].npkts)
        } else {
            psn.next()
        };
        if psn.diff(self.req.sent_hwm) < 0 {
            self.counters.retransmits += 1;
        }
        if rc && ack_req {
            // A READ is timed to its first response, which comes a round trip after the
            // request whatever the READ's length.
            let fresh = psn.diff(self.req.sent_hwm) >= 0;
            let t = &mut self.req.timed;
            if t.len() == MAX_TIMED {
                t.pop_front();
            }
            t.push_back((if is_read { psn.next() } else { end }, now, fresh));
        }
        if end.diff(self.req.sent_hwm) > 0 {
            self.req.sent_hwm = end;
        }
        if rc && !self.req.probing {
            // Silence for a probe timeout after the last packet sent means its ACK, or
            // the NAK it caused, or the packet itself was lost.
            self.req.probe_from = Some(now);
        }
        self.req.noack_pkts = if ack_req { 0 } else { self.req.noack_pkts + 1 };
        if is_read && self.req.sq[idx].read_done != offset {
            self.req.sq[idx].read_done = offset;
            self.req.sq[idx].read_ahead = 0;
        }
        if rc && self.req.retx_deadline.is_none() {
            self.req.retx_deadline = self.ack_timeout_at(now);
        }
        if last || self.req.sq[idx].wr.op.is_read_or_atomic() {
            self.req.send_idx += 1;
            self.req.send_pkt = 0;
        } else {
            self.req.send_pkt += 1;
        }
        if !rc && last {
            // UC and UD complete a WR once it is on the wire.
            self.complete_front(WcStatus::Success);
        }
        Some(t)
    }

    /// A gather failed: the WR fails; RC goes to ERROR, UC and UD to SQE.
    fn local_send_error(&mut self, status: WcStatus) {
        self.complete_front(status);
        if self.cfg.qp_type == QpType::Rc {
            self.enter_error(None);
        } else {
            self.state = QpState::Sqe;
            self.flush_send_queue();
        }
    }

    /// The peer QP is known to be gone (its process on this host died, which the
    /// same-host path sees at once): what its retries would end in, without waiting for
    /// them. An RC QP with a request on the wire fails that WR with RETRY_EXC_ERR, as the
    /// last retry would (IBTA 9.7.5.2.1); any connected QP then goes to ERROR and flushes
    /// the rest. A UD QP has no one peer and is left alone; so is a QP not yet connected.
    pub fn peer_gone(&mut self) {
        if self.cfg.qp_type == QpType::Ud
            || !matches!(
                self.state,
                QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
            )
        {
            return;
        }
        if self.cfg.qp_type == QpType::Rc
            && self.req.sq.front().is_some_and(|w| w.first_psn.is_some())
        {
            self.complete_front(WcStatus::RetryExcErr);
        }
        self.enter_error(None);
    }

    /// Completes the oldest send WR.
    pub(super) fn complete_front(&mut self, status: WcStatus) {
        let Some(w) = self.req.sq.pop_front() else {
            return;
        };
        if self.req.send_idx > 0 {
            self.req.send_idx -= 1;
        } else {
            self.req.send_pkt = 0;
        }
        if w.first_psn.is_some() && w.wr.op.is_read_or_atomic() {
            self.req.rd_outstanding = self.req.rd_outstanding.saturating_sub(1);
        }
        match status {
            WcStatus::RetryExcErr => self.counters.retry_exceeded += 1,
            WcStatus::RnrRetryExcErr => self.counters.rnr_retry_exceeded += 1,
            _ => {}
        }
        if w.signaled || status != WcStatus::Success {
            let byte_len = if status == WcStatus::Success {
                w.len as u32
            } else {
                0
            };
            self.completions
                .push_back(self.send_wc(&w.wr, status, byte_len));
        }
    }

    /// Forward progress (`una` moved up from `old_una`): retry budgets refill, the timers
    /// restart, a probe is answered, a round trip is sampled, and the window grows: by the
    /// PSNs acknowledged (at most doubling) while no queue builds; while one does, once a
    /// window's worth of them, by half the way back to the window the last loss cut (a
    /// random loss costs a few round trips, not one round trip per PSN of the cut), and by
    /// one once it is back there.
    fn progress(&mut self, now: Instant, old_una: Psn) {
        let timeout = self.ack_timeout();
        let mtu = self.mtu();
        let r = &mut self.req;
        r.retry_left = self.attrs.retry_cnt;
        r.rnr_left = self.attrs.rnr_retry;
        // A probe's answer that stops short of what was sent tells of packets lost: what
        // follows is a go-back-N from there, and a loss for the window. But an ACK that
        // comes sooner after the probe than any round trip took is no answer to it: the
        // responder sent it before the probe came (a slow peer's late ACK, which is what
        // the probe was waiting for). It moves `una`, and the probe stays out, with nothing
        // sent again, until its answer tells.
        let short = r.probing && r.una.diff(r.sent_hwm) < 0;
        let stale = short
            && r.probe_sent
                .zip(r.rtt.min())
                .is_some_and(|(t, m)| now.since(t) < m);
        let probe_found_loss = short && !stale;
        r.probing = stale;
        r.probes_unanswered = 0;
        r.repair_tries = 0;
        r.repair_at = None;
        let mut newest = None;
        while let Some(&(end, sent, fresh)) = r.timed.front()
            && r.una.diff(end) >= 0
        {
            newest = Some((sent, fresh));
            r.timed.pop_front();
        }
        match newest {
            Some((sent, true)) => r.rtt.sample(now.since(sent)),
            // Karn's rule has no sample come from a resent packet, but a QP whose first
            // windows all lost packets would then have no estimate, and its probes would
            // wait a quarter of the ACK timeout (17 ms at ibv_rc_pingpong's 14): an answer
            // to a resend, short of the real round trip at worst, is a far better start.
            Some((sent, false)) if r.rtt.srtt().is_none() => r.rtt.sample(now.since(sent)),
            Some((sent, false)) => r.rtt.sample_lower_bound(now.since(sent)),
            None => {}
        }
        if r.recover.is_some_and(|p| r.una.diff(p) >= 0) {
            r.recover = None;
        }
        let acked = r.una.diff(old_una).max(1);
        if r.rtt.queueing() {
            // A queue is building: grow by a step a round trip, and cut at most once
            // a round trip in proportion to how far the delay is over its target (as Swift
            // does), so that the queue drains before it overflows.
            r.grow_credit += acked;
            if r.grow_credit >= r.window {
                r.grow_credit -= r.window;
                // Half the way back to where the last loss cut it from, at least one.
                let step = ((r.w_max - r.window) / 2).max(1);
                r.window += step;
            }
            let rtt = r.rtt.srtt().unwrap_or(super::rtt::INITIAL_PTO);
            if let Some(kept) = r.delay_cut()
                && r.recover.is_some()
                && r.last_cut.is_none_or(|t| now.since(t) >= rtt)
            {
                r.cut_window(kept);
                r.last_cut = Some(now);
            }
        } else {
            // No queue: back to the full window quickly, at most doubling per ACK.
            r.window += acked.min(r.window);
        }
        r.window = r.window.min(MAX_UNACKED_PSNS);
        if let Some(rec) = r.sel_recover {
            if r.una.diff(rec) >= 0 {
                r.end_repair();
            } else {
                // A partial ACK: the responder ran what it kept up to the next gap.
                let mut go_back = false;
                if let Some(t) = r.keep_test
                    && r.una.diff(t) > 0
                {
                    r.keep_test = None;
                    if r.una == t.next() {
                        r.dropped_votes = r.dropped_votes.saturating_add(1);
                        if r.dropped_votes >= 2 {
                            r.peer_keeps = Some(false);
                        }
                        go_back = true;
                    } else {
                        r.peer_keeps = Some(true);
                    }
                }
                if go_back {
                    // The responder dropped what followed the gap: all of it again.
                    r.go_back_n(now, mtu);
                } else if !r.repairing(r.una, now) {
                    if r.sends_or_writes(r.una) {
                        r.start_repair(r.una, now);
                    } else {
                        // A READ or atomic at the gap: its responses may still be on their
                        // way, and its own rules re-issue it when they are not.
                        r.end_repair();
                    }
                }
            }
        }
        if probe_found_loss {
            r.shrink_for_loss(false);
            r.rewound = Some((r.una, now));
        }
        let idle = r.una == r.sent_hwm;
        r.retx_deadline = if idle {
            None
        } else {
            timeout.map(|d| now.add(d))
        };
        r.probe_from = (!idle).then_some(now);
        if stale {
            // Undo the probe's go-back-N: nothing is known to be lost.
            let hwm = r.sent_hwm;
            r.rewind(hwm, mtu);
        }
        if let Some(sp) = self.req.send_psn() {
            if sp.diff(self.req.una) < 0 {
                self.req.rewind(self.req.una, self.mtu());
            }
        }
    }

    /// Repairs from the oldest unacknowledged PSN: selectively (that PSN alone) when the
    /// loss was reported and the responder keeps what follows a gap, else go-back-N. A
    /// timeout spends one retry; a detected loss spends one only when it came with no
    /// progress (as rxe counts its sequence-NAK retries), so a responder that NAKs one PSN
    /// forever still ends. With no retry left, the oldest WR fails with RETRY_EXC_ERR and the
    /// QP goes to ERROR. A `retry_cnt` of 7 retries without limit: that is rxe's rule, not
    /// IBTA's (whose only unlimited count is an `rnr_retry` of 7), kept so that softrdma and
    /// rxe behave alike. The window halves on a timeout; a detected loss while a queue builds
    /// cuts it once per loss episode, in proportion to the queueing delay: random loss on an
    /// idle link must not collapse it.
    fn retry(&mut self, now: Instant, why: Loss) {
        if !matches!(why, Loss::Detected { progressed: true }) {
            if self.req.retry_left == 0 {
                self.complete_front(WcStatus::RetryExcErr);
                self.enter_error(None);
                return;
            }
            if self.attrs.retry_cnt != 7 {
                self.req.retry_left -= 1;
            }
        }
        self.req.shrink_for_loss(why == Loss::Timeout);
        self.req.probing = false;
        let una = self.req.una;
        if why != Loss::Timeout && self.selective_ok(una) {
            // IBTA 9.7.5.2.1 has the requester resend from the NAK's PSN; a responder that
            // kept what followed needs only the PSNs it is missing, which its answers tell.
            self.req.start_repair(una, now);
            return;
        }
        let mtu = self.mtu();
        self.req.go_back_n(now, mtu);
        if why == Loss::Timeout {
            self.req.retx_deadline = None;
        }
    }

    /// Everything up to and including `p` is acknowledged (IBTA vol. 1, 9.7.5.1: an ACK or
    /// NAK implicitly acknowledges all earlier PSNs).
    fn ack_until(&mut self, now: Instant, p: Psn) -> Acked {
        if p.diff(self.req.sent_hwm) >= 0 {
            return Acked::Ghost;
        }
        if p.diff(self.req.una) < 0 {
            return Acked::Done;
        }
        let mtu = self.mtu();
        let old_una = self.req.una;
        while let Some(w) = self.req.sq.front() {
            let Some(first) = w.first_psn else { break };
            if first.add(w.npkts - 1).diff(p) > 0 {
                break;
            }
            let lost_response = match w.wr.op {
                SendOp::Read { .. } => w.read_done < w.len,
                SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. } => true,
                _ => false,
            };
            if lost_response {
                // IBTA 9.7.5.1: an ACK of a later PSN implies that every earlier one was
                // answered, so the READ's or atomic's missing responses were lost: re-issue
                // it from its first missing response (IBTA 9.4.4 lets a retried READ ask for
                // only the rest; an atomic is answered again from the responder's saved result).
                let resume = first.add((w.read_done / mtu) as u32);
                let progressed = resume.diff(old_una) > 0;
                self.req.una = resume;
                if progressed {
                    self.progress(now, old_una);
                }
                if !self.req.repairing(resume, now) {
                    self.retry(now, Loss::Detected { progressed });
                }
                return Acked::Retried;
            }
            self.complete_front(WcStatus::Success);
        }
        // A READ response acknowledges the PSNs before its READ, but of the READ's own
        // only those whose responses came.
        let mut una = p.next();
        if let Some(w) = self.req.sq.front()
            && let (SendOp::Read { .. }, Some(first)) = (w.wr.op, w.first_psn)
            && p.diff(first) >= 0
        {
            let resume = first.add((w.read_done / mtu) as u32);
            if resume.diff(una) < 0 {
                una = resume;
            }
        }
        if una.diff(self.req.una) > 0 {
            self.req.una = una;
            self.progress(now, old_una);
        }
        Acked::Done
    }

    /// A positive ACK of every request up to `psn` that the responder's host passed in
    /// memory rather than in a packet (see [`QueuePair::carry_ack`]): handled as an ACK
    /// packet's AETH would be, with the same checks of the PSN against what is
    /// outstanding, so a stale, repeated or forged one changes nothing it could not.
    pub fn ack_from_memory(&mut self, now: Instant, psn: Psn) {
        if self.cfg.qp_type != QpType::Rc || !matches!(self.state, QpState::Rts | QpState::Sqd) {
            self.counters.dropped += 1;
            return;
        }
        self.counters.rcvd_packets += 1;
        self.ack_until(now, psn);
        if self.state == QpState::Sqd {
            self.check_drained();
        }
    }

    pub(crate) fn handle_response(&mut self, now: Instant, pkt: &IbPacket<&[u8]>) {
        let p = pkt.bth().psn();
        let old_una = self.req.una;
        let in_window = p.diff(self.req.una) >= 0 && p.diff(self.req.sent_hwm) < 0;
        match pkt.info().operation {
            softrdma_wire::Operation::Acknowledge => {
                let Some(aeth) = pkt.aeth() else { return };
                match aeth.syndrome() {
                    Syndrome::Ack { .. } => {
                        self.ack_until(now, p);
                    }
                    Syndrome::RnrNak { timer } => {
                        if !in_window || self.ack_until(now, p.sub(1)) != Acked::Done {
                            return;
                        }
                        self.counters.rnr_naks_rcvd += 1;
                        if self.attrs.rnr_retry != 7 {
                            if self.req.rnr_left == 0 {
                                self.complete_front(WcStatus::RnrRetryExcErr);
                                self.enter_error(None);
                                return;
                            }
                            self.req.rnr_left -= 1;
                        }
                        self.req.end_repair();
                        self.req.rewind(p, self.mtu());
                        self.req.rnr_until = Some(now.add(rnr_delay(timer)));
                        self.req.retx_deadline = None;
                        self.req.probe_from = None;
                        self.req.probing = false;
                    }
                    Syndrome::Nak(NakCode::PsnSequenceError) => {
                        if in_window && self.ack_until(now, p.sub(1)) == Acked::Done {
                            self.counters.seq_naks_rcvd += 1;
                            // IBTA 9.7.5.2.1: resend from the NAK's PSN, at once, unless
                            // that is already under way (a late NAK of the same gap).
                            if !self.req.repairing(p, now) {
                                let progressed = self.req.una != old_una;
                                self.retry(now, Loss::Detected { progressed });
                            }
                        }
                    }
                    Syndrome::Nak(code) => {
                        if !in_window || self.ack_until(now, p.sub(1)) != Acked::Done {
                            return;
                        }
                        let status = match code {
                            NakCode::InvalidRequest => WcStatus::RemInvReqErr,
                            NakCode::RemoteAccessError => WcStatus::RemAccessErr,
                            NakCode::RemoteOperationalError => WcStatus::RemOpErr,
                            NakCode::InvalidRdRequest => WcStatus::RemInvRdReqErr,
                            NakCode::PsnSequenceError | NakCode::Reserved(_) => {
                                WcStatus::BadRespErr
                            }
                        };
                        self.complete_front(status);
                        self.enter_error(None);
                    }
                    Syndrome::Reserved(_) => {}
                }
            }
            softrdma_wire::Operation::ReadResponse
                if in_window && self.ack_until(now, p.sub(1)) == Acked::Done =>
            {
                self.read_response(now, p, pkt, old_una);
            }
            softrdma_wire::Operation::AtomicAcknowledge
                if in_window && self.ack_until(now, p.sub(1)) == Acked::Done =>
            {
                self.atomic_ack(now, p, pkt);
            }
            _ => {}
        }
    }

    fn read_response(&mut self, now: Instant, p: Psn, pkt: &IbPacket<&[u8]>, old_una: Psn) {
        let mtu = self.mtu();
        let Some(w) = self.req.sq.front() else { return };
        let (SendOp::Read { .. }, Some(first)) = (w.wr.op, w.first_psn) else {
            return;
        };
        let expected = first.add((w.read_done / mtu) as u32);
        let ahead = p.diff(expected);
        if ahead < 0 || p.diff(first) >= w.npkts as i32 {
            return;
        }
        let data = pkt.payload();
        let n = data.len() as u64;
        // Judge the packet by where its PSN falls in the whole READ, not by which request
        // (original or re-issued) produced it: every response for a PSN carries the same
        // bytes. A re-issued READ may start a response sequence at any packet.
        let j = p.diff(first) as u64;
        let last = j + 1 == u64::from(w.npkts);
        let size_ok = if last { n == w.len - j * mtu } else { n == mtu };
        let ok = size_ok
            && match pkt.info().position {
                softrdma_wire::Position::First => !last,
                softrdma_wire::Position::Middle => j > 0 && !last,
                softrdma_wire::Position::Last => j > 0 && last,
                softrdma_wire::Position::Only => last,
            };
        if !ok {
            self.complete_front(WcStatus::BadRespErr);
            self.enter_error(None);
            return;
        }
        let Payload::Sges(sges) = &w.wr.payload else {
            return;
        };
        let bit = (ahead as u32)
            .checked_sub(1)
            .and_then(|i| 1u128.checked_shl(i))
            .unwrap_or(0);
        let place = ahead == 0 || (bit != 0 && w.read_ahead & bit == 0);
        if place && scatter(&*self.mem, self.cfg.pd, sges, j * mtu, data).is_err() {
            self.complete_front(WcStatus::LocProtErr);
            self.enter_error(None);
            return;
        }
        if ahead > 0 {
            // The responses between were lost (or are late). This one is placed where it
            // belongs and remembered, so that the gap, once filled, completes it.
            self.req.sq[0].read_ahead |= bit;
            // IBTA 9.4.4: re-issue the READ for the rest, at once, unless that is already
            // under way (this is a later response of the same lost sequence).
            if !self.req.repairing(expected, now) {
                self.req.una = expected;
                let progressed = expected != old_una;
                self.retry(now, Loss::Detected { progressed });
            }
            return;
        }
        let w = &mut self.req.sq[0];
        w.read_done += n;
        // Responses placed ahead of this one, now in order.
        let mut k = j;
        loop {
            let next_placed = w.read_ahead & 1 != 0;
            w.read_ahead >>= 1;
            if !next_placed {
                break;
            }
            k += 1;
            w.read_done += if k + 1 == u64::from(w.npkts) {
                w.len - k * mtu
            } else {
                mtu
            };
        }
        let done = w.read_done == w.len;
        let before = self.req.una;
        self.req.una = first.add(k as u32 + 1);
        self.progress(now, before);
        if done {
            self.complete_front(WcStatus::Success);
        }
    }

    fn atomic_ack(&mut self, now: Instant, p: Psn, pkt: &IbPacket<&[u8]>) {
        let Some(w) = self.req.sq.front() else { return };
        if !w.wr.op.is_atomic() || w.first_psn != Some(p) {
            return;
        }
        let Some(orig) = pkt.atomic_ack_eth().map(|a| a.orig()) else {
            return;
        };
        let Payload::Sges(sges) = &w.wr.payload else {
            return;
        };
        if scatter(&*self.mem, self.cfg.pd, sges, 0, &orig.to_ne_bytes()).is_err() {
            self.complete_front(WcStatus::LocProtErr);
            self.enter_error(None);
            return;
        }
        let before = self.req.una;
        self.req.una = p.next();
        self.progress(now, before);
        self.complete_front(WcStatus::Success);
    }

    pub(crate) fn requester_timeout(&mut self, now: Instant) {
        if self.req.rnr_until.is_some_and(|t| t <= now) {
            self.req.rnr_until = None;
        }
        if self.req.repair_at.is_some_and(|t| t <= now) {
            self.req.repair_at = None;
            if self.req.sel_recover.is_some() && self.req.rnr_until.is_none() {
                self.req.repair_tries += 1;
                let una = self.req.una;
                self.req.start_repair(una, now);
            }
        }
        let outstanding =
            self.req.una != self.req.sent_hwm && matches!(self.state, QpState::Rts | QpState::Sqd);
        if self.req.retx_deadline.is_some_and(|t| t <= now) {
            self.req.retx_deadline = None;
            if outstanding {
                self.counters.timeouts += 1;
                self.retry(now, Loss::Timeout);
            }
            return;
        }
        if self.probe_deadline().is_some_and(|t| t <= now) {
            self.req.probe_from = None;
            if outstanding && self.req.rnr_until.is_none() {
                self.probe(now);
            }
        }
    }

    /// When the next tail-loss probe is due: a probe timeout after the silence began,
    /// doubled for each probe left unanswered, and never after the ACK timeout.
    pub(crate) fn probe_deadline(&self) -> Option<Instant> {
        let from = self.req.probe_from?;
        let cap = self.ack_timeout();
        let backoff = 1u32 << self.req.probes_unanswered.min(MAX_PROBE_BACKOFF);
        let wait = self.req.rtt.pto(cap).saturating_mul(backoff);
        Some(from.add(cap.map_or(wait, |c| wait.min(c))))
    }

    /// A tail-loss probe: the packet at `una` again, asking for an ACK, and nothing else
    /// until something answers it. It is never ahead of the responder's expected PSN, so
    /// the responder always answers (IBTA 9.7.5.1.3: a duplicate is ACKed again, a READ
    /// re-executed, an atomic answered from its saved result), and the answer tells where
    /// the responder stands: everything after that is sent again, as after a sequence NAK.
    /// It costs no retry: `retry_cnt` counts local ACK timeouts, which keep running.
    fn probe(&mut self, now: Instant) {
        self.counters.probes += 1;
        let r = &mut self.req;
        r.probing = true;
        r.timed.clear();
        r.probes_unanswered += 1;
        r.probe_from = Some(now);
        r.probe_sent = Some(now);
        r.end_repair();
        let una = r.una;
        self.req.rewind(una, self.mtu());
    }
}
