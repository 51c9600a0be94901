//! The send side's completer (rxe's `rxe_comp.c`): acting on ACKs, NAKs, READ responses,
//! atomic ACKs and the requester's timers, and completing send WRs.
//!
//! Owns what an answer or a timeout does to the [`Requester`]'s state: acknowledgement,
//! forward progress and the window's growth, retries (go-back-N or selective repair), RNR
//! waits, tail-loss probes. Calls [`super::sge`] to place READ and atomic results, and the
//! requester's pointer methods to send again.

use super::requester::{MAX_PROBE_BACKOFF, MIN_WINDOW, Requester};
use super::sge::scatter;
use super::*;
use softrdma_wire::{NakCode, Syndrome};

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

impl QueuePair {
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
