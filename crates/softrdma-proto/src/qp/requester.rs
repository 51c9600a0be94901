//! The send side's requester (rxe's `rxe_req.c`): the send queue and its window, and turning
//! send WRs into request packets, first sends and repairs alike.
//!
//! Owns [`Requester`], the state the requester and the completer share (the send queue, the
//! PSN pointers, the window and the loss-recovery state), and the methods that move its
//! pointers. Calls [`super::sge`] to read payloads and the completer's `complete_front` to
//! finish a WR that fails or needs no ACK.

use super::rtt::RttEstimator;
use super::sge::{gather, within_one_sge};
use super::*;
use crate::memory::Access;
use softrdma_wire::{
    AtomicEthRepr, BthRepr, DethRepr, ExtHeaders, IethRepr, ImmDtRepr, Opcode, RethRepr,
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
pub(super) const MAX_PROBE_BACKOFF: u32 = 4;

/// The smallest in-flight window.
pub const MIN_WINDOW: i32 = 4;

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
    pub(super) fn rewind(&mut self, p: Psn, mtu: u64) {
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
    pub(super) fn send_psn(&self) -> Option<Psn> {
        let w = self.sq.get(self.send_idx)?;
        Some(w.first_psn?.add(self.send_pkt))
    }

    /// PSNs that may be unacknowledged now: the window, or one while a probe is out.
    fn limit(&self) -> i32 {
        if self.probing { 1 } else { self.window }
    }

    /// The PSN the next packet sent will carry: the send pointers', or the next new one.
    pub(super) fn send_point(&self) -> Psn {
        self.send_psn().unwrap_or(self.next_psn)
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
    pub(super) fn mtu(&self) -> u64 {
        self.attrs.mtu.bytes() as u64
    }

    pub(super) fn ack_timeout(&self) -> Option<Duration> {
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
}
