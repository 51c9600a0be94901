//! The send side: each thread's batch of packets per device, flushed in as few system
//! calls as possible (through the same-host rings first, then the datapath), and the
//! service of a QP (what it sends, its completions and events). A WRITE to a same-host
//! peer that granted its range is placed in the peer's memory instead of sent (see
//! [`super::place`]); this file decides when, and answers a peer's asks for grants.
//!
//! Owns: the per-thread send batches, `flush_batch`, `count_sent`, `transmit`,
//! `service`, `post_send` and the placement of WRITEs. May call: the datapath, the
//! same-host path ([`super::local`]), placement ([`super::place`]), the CQs
//! ([`super::cq`]) and the region table.
//!
//! Threads and locks: any thread. `service` and `post_send` run with the QP's lock held
//! and take a CQ's lock per completion and `LocalRoutes` to divert (under it a ring's, or,
//! for a QPN with no route yet, share's control lock and `LocalWanted`: no lookup runs
//! here, see `device::resolver`); a flush takes `Deferred` to send the held ACKs with its
//! batch, then what the datapath takes. The batches are thread-local: no lock.

use super::Device;
use super::cq::CqInner;
use super::qp::QpShared;
use super::share::Share;
use super::{local, place};
use crate::datapath::Sent;
use crate::datapath::batch::SendBatch;
use softrdma_proto::endpoint::{Counter, Lookup};
use softrdma_proto::{Instant, Pd, WcOpcode};
use softrdma_wire::ROCE_V2_PORT;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering;

thread_local! {
    /// Packets a thread has produced and not yet handed to the kernel: one batch per device
    /// it sends on, by the device's send path id (see [`Device::with_batch`]).
    static SEND_BATCHES: std::cell::RefCell<Vec<(u64, SendBatch)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

impl Device {
    /// Runs `f` on this thread's send batch for this device. Each device a thread uses has
    /// a batch of its own, so a batch never carries one device's packets out of another's
    /// sockets, whatever order a thread's calls into two devices come in. Every entry point
    /// flushes its batch before it returns, so the batches of devices that have closed are
    /// empty, and are dropped once a thread has used many devices.
    pub(crate) fn with_batch<R>(&self, f: impl FnOnce(&mut SendBatch) -> R) -> R {
        SEND_BATCHES.with(|all| {
            let mut all = all.borrow_mut();
            let id = self.id;
            let i = match all.iter().position(|(d, _)| *d == id) {
                Some(i) => i,
                None => {
                    if all.len() >= 8 {
                        all.retain(|(_, b)| !b.is_empty());
                    }
                    all.push((id, SendBatch::default()));
                    all.len() - 1
                }
            };
            f(&mut all[i].1)
        })
    }

    /// Sends the packets this thread has batched, in as few system calls as possible, and
    /// the deferred ACKs behind them when there were any (`with_deferred`: always).
    pub fn flush_batch(&self, with_deferred: bool) {
        self.with_batch(|b| {
            if (with_deferred || !b.is_empty()) && self.gate.deferred(false) {
                let mut d = self.deferred.lock();
                b.append(&mut d);
                // Cleared under the lock: a poller that defers more appends under it, and
                // sets the flag again after.
                self.gate.deferred(true);
                self.deferred_at.store(u64::MAX, Ordering::Relaxed);
            }
            if b.is_empty() {
                return;
            }
            if let (Some(l), Some(s)) = (&self.local, &self.share) {
                let (sent, dropped) = l.divert(b, s);
                self.counters.add(Counter::SentPkts, sent as u64);
                self.counters.add(Counter::SendErr, dropped as u64);
                if l.wants_lookup() {
                    // A QPN with no route yet: the progress thread starts its lookup.
                    self.wake();
                }
                if b.is_empty() {
                    return;
                }
            }
            // What the rings did not take goes on a wire, with its ICRC.
            b.settle_icrc();
            let now = if self.holds { self.now().as_nanos() } else { 0 };
            let sent = self.datapath.send(b, now);
            self.count_sent(sent);
        });
    }

    /// Counts a send, and makes sure the packets it held back leave in time.
    pub(super) fn count_sent(&self, s: Sent) {
        for (c, n) in [
            (Counter::SendCalls, s.calls),
            (Counter::SentPkts, s.sent),
            (Counter::SendErr, s.failed),
        ] {
            self.counters.add(c, n as u64);
        }
        if let Some(t) = s.held_until {
            self.timer_armed(Instant::from_nanos(t));
        }
    }

    /// Builds the QP's packets in place at the end of this thread's batch (the datapath
    /// sends them, or with fault injection drops or holds some back, at the flush).
    fn transmit(&self, qp: &mut softrdma_proto::QueuePair, now: Instant) {
        // Most services (a completion handed out, a receive posted) send nothing: they
        // skip the batch and the engine's pass.
        if !qp.may_transmit() {
            return;
        }
        let dst_of = |ip: IpAddr| match ip.to_canonical() {
            // Link-local peers are reached through the device's interface.
            IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80 => SocketAddr::V6(
                std::net::SocketAddrV6::new(v6, ROCE_V2_PORT, 0, self.scope_id),
            ),
            ip => SocketAddr::new(ip, ROCE_V2_PORT),
        };
        // Packets are built in place, at the end of this thread's batch.
        self.with_batch(|b| {
            // A positive ACK to a same-host requester goes in its ring's ACK box instead of
            // a packet, when nothing of this thread's is still unsent to keep order with.
            if b.is_empty()
                && let Some(l) = &self.local
            {
                while qp
                    .carry_ack(|q, dst, p| l.is_local(dst_of(dst)) && l.ack(q.value(), p.value()))
                {
                }
            }
            while qp.may_transmit()
                && let Some(queued) = b.push_with(&*self.mrs, |buf, at| {
                    let t = qp.poll_transmit_at(now, buf, at)?;
                    let owed = t.icrc_owed.then_some((t.src, t.src_port));
                    Some((t.len, dst_of(t.dst), t.lent, owed, t.traffic_class))
                })
            {
                if !queued {
                    self.counters.add(Counter::SendErr, 1);
                }
            }
        });
    }

    /// Puts what the QP wants to send in this thread's batch (sent by
    /// [`Device::flush_batch`]) and hands out its completions and events. Called with the QP
    /// locked, by whichever thread touched it.
    pub fn service(&self, shared: &QpShared, qp: &mut softrdma_proto::QueuePair) {
        self.service_at(shared, qp, self.now());
    }

    /// [`Device::service`] at `now`, a clock reading the caller already has. It may be a
    /// little older than one another thread used for this QP: the engine's time arithmetic
    /// saturates, and a timer set a microsecond early is still microseconds inside its
    /// millisecond-scale timeout. (A clock read costs about 10 ns.)
    pub(super) fn service_at(
        &self,
        shared: &QpShared,
        qp: &mut softrdma_proto::QueuePair,
        now: Instant,
    ) {
        // A held WRITE comes to the front when the ACK of the WR before it completed it.
        self.place_held(qp);
        self.transmit(qp, now);
        while let Some(wc) = qp.poll_completion() {
            let cq: &Arc<CqInner> = match wc.opcode {
                WcOpcode::Recv | WcOpcode::RecvRdmaWithImm => &shared.recv_cq,
                _ => &shared.send_cq,
            };
            if !matches!(
                wc.status,
                softrdma_proto::WcStatus::Success | softrdma_proto::WcStatus::WrFlushErr
            ) {
                *shared.last_error.lock() = Some(wc.status);
            }
            cq.push(wc);
        }
        if let Some(first) = qp.poll_event() {
            let rest = std::iter::from_fn(|| qp.poll_event());
            self.events.push(std::iter::once(first).chain(rest));
        }
        self.note_awaits(shared, qp);
        if shared.granted.load(Ordering::Relaxed) && !receives(qp.state()) {
            // It can no longer take WRITEs: no peer may place one.
            shared.granted.store(false, Ordering::Relaxed);
            self.mrs.granted.revoke_qpn(qp.qpn().value());
        }
    }

    /// Posts a send WR on `qp` (its lock held): a WRITE to a same-host peer that granted
    /// its range may be placed in the peer's memory instead of sent (see [`place`]).
    pub(crate) fn post_send(
        &self,
        qp: &mut softrdma_proto::QueuePair,
        wr: softrdma_proto::SendWr,
    ) -> std::result::Result<(), softrdma_proto::PostError> {
        let Some(l) = self.local.as_ref().filter(|l| l.has_routes()) else {
            return qp.post_send(wr);
        };
        let (pd, sig_all) = (qp.pd(), qp.sq_sig_all());
        qp.post_send_placed(wr, |wr, dqpn, dst, idle| {
            use softrdma_proto::Placing;
            let softrdma_proto::SendOp::Write { rkey, .. } = wr.op else {
                return Placing::Wire;
            };
            if !l.is_local(SocketAddr::new(dst, softrdma_wire::ROCE_V2_PORT)) {
                return Placing::Wire;
            }
            let big = wr.payload.len() >= PLACE_ALWAYS;
            let signaled = sig_all || wr.flags.contains(softrdma_proto::SendFlags::SIGNALED);
            // Through a mapped region a placed WRITE is a plain copy, always worth it; by
            // cross-memory copy a small one costs a system call, more than its ring entry:
            // it is placed only where it is waited for (a signaled one on an idle QP, a
            // latency test), not in a stream.
            let Some(grant) = l.granted(dqpn.value(), rkey) else {
                return Placing::Wire;
            };
            match (idle, grant.mapped() || big || (idle && signaled)) {
                (true, true) if self.place(l, pd, wr, dqpn.value(), &grant) => Placing::Done,
                (false, true) => Placing::Hold,
                _ => Placing::Wire,
            }
        })
        .map(drop)
    }

    /// Places the WRITE `wr` of a QP of PD `pd` in the memory of QPN `dqpn`'s process,
    /// under the grant `p` that process gave (see [`place`]): true if it is there.
    fn place(
        &self,
        l: &local::Local,
        pd: Pd,
        wr: &softrdma_proto::SendWr,
        dqpn: u32,
        p: &place::Placement,
    ) -> bool {
        let softrdma_proto::SendOp::Write { remote_addr, rkey } = wr.op else {
            return false;
        };
        let placed = match &wr.payload {
            softrdma_proto::Payload::Inline(v) => {
                l.place(p, dqpn, rkey, remote_addr, &[(v.as_ptr(), v.len())])
            }
            // One SGE, as nearly every WRITE has: its region stays registered meanwhile.
            softrdma_proto::Payload::Sges(s) if s.len() == 1 => {
                let s = s[0];
                self.mrs
                    .with_local(pd, s.lkey, s.addr, u64::from(s.length), |at, n| {
                        l.place(p, dqpn, rkey, remote_addr, &[(at, n)])
                    })
                    .unwrap_or(place::Placed::NotNow)
            }
            _ => place::Placed::NotNow,
        };
        if placed == place::Placed::Refused {
            self.counters.add(Counter::PlaceRefused, 1);
        }
        placed == place::Placed::Done
    }

    /// Places the held WRITEs of `qp` whose turn has come (see
    /// `softrdma_proto::QueuePair::post_send_placed`), or releases them to the wire.
    fn place_held(&self, qp: &mut softrdma_proto::QueuePair) {
        let Some(l) = &self.local else {
            return;
        };
        let pd = qp.pd();
        while let Some((wr, dqpn, _)) = qp.held_front() {
            let softrdma_proto::SendOp::Write { rkey, .. } = wr.op else {
                break;
            };
            let placed = l
                .granted(dqpn.value(), rkey)
                .is_some_and(|p| self.place(l, pd, wr, dqpn.value(), &p));
            qp.complete_held(placed);
        }
    }

    /// Answers a same-host peer's ask (on connection `token`) to place WRITEs to QP `qpn`
    /// through `rkey`: granted if the receive path would take such a WRITE (see
    /// [`place`]), refused otherwise.
    pub(super) fn answer_place(&self, l: &local::Local, token: usize, qpn: u32, rkey: u32) {
        let Some(table) = l.table_for(token) else {
            return;
        };
        // The region granted, kept until the answer (with its memfd) is sent.
        let mut region = None;
        let grant = Lookup::get(self, qpn).and_then(|shared| {
            // Issued under the QP's lock: a modify that follows revokes it.
            let qp = shared.qp.lock();
            let a = qp.query();
            // RC only: what a UC sender places could overtake its earlier WRITEs in the
            // ring (see `QueuePair::post_send_placed`).
            let ok = qp.qp_type() == softrdma_proto::QpType::Rc
                && receives(qp.state())
                && a.access_flags
                    .is_some_and(|f| f.contains(softrdma_proto::AccessFlags::REMOTE_WRITE))
                && a.av
                    .is_some_and(|av| softrdma_proto::qp::same_ip(av.dst, self.addr));
            if !ok {
                return None;
            }
            let pd = qp.pd();
            let g = self.mrs.granted.issue(&table, qpn, rkey, || {
                region = self.mrs.get(rkey).filter(|m| {
                    m.pd == pd && m.access.contains(softrdma_proto::AccessFlags::REMOTE_WRITE)
                });
                region
                    .clone()
                    .map(|m| m as Arc<dyn super::place::Grantable>)
            })?;
            shared.granted.store(true, Ordering::Relaxed);
            Some(g)
        });
        let memfd = region.as_ref().and_then(|m| m.shared_fd());
        l.answer(token, qpn, rkey, grant, &table, memfd);
    }

    /// After `ibv_modify_qp` on `shared` (QPN `qpn`): grants to it are revoked unless it
    /// still takes WRITEs with the same rights.
    pub(crate) fn modified(&self, shared: &QpShared, qpn: u32, attr: &softrdma_proto::QpAttr) {
        // A QP given a destination on this host: its route is looked up now, so that its
        // first packet finds it and never takes another path than the ones after it. The
        // verb waits for the lookup, holding no lock (the QP's is released), as the kernel's
        // modify resolves a RoCE destination's neighbour; a thread that holds a lock of its
        // own (the CM's, see `local::NoWait`) leaves it to the resolver thread instead.
        if let (Some(q), Some(av)) = (attr.dest_qpn, attr.av)
            && let Some((l, s, w)) = self.route_wanted(av.dst, q.value())
        {
            if local::NoWait::may_wait() {
                l.look_up(s, w);
            } else {
                l.want(w);
                self.wake();
            }
        }
        if !shared.granted.load(Ordering::Relaxed) {
            return;
        }
        let state = shared.qp.lock().state();
        if attr.access_flags.is_some() || !receives(state) {
            shared.granted.store(false, Ordering::Relaxed);
            self.mrs.granted.revoke_qpn(qpn);
        }
    }

    /// The same-host lookup that QPN `qpn` at `dst` still needs, with what makes it;
    /// `None` if `dst` is not this device's shared address or the route exists.
    fn route_wanted(&self, dst: IpAddr, qpn: u32) -> Option<(&local::Local, &Share, local::Want)> {
        let (l, s) = (self.local.as_ref()?, self.share.as_ref()?);
        if !l.is_local(SocketAddr::new(dst, ROCE_V2_PORT)) {
            return None;
        }
        Some((l, s, l.wanted_for(s, qpn)?))
    }

    /// Runs `then` once a send to QPN `qpn` at `dst` would take its same-host route: now if
    /// it needs none or has it, else on the resolver thread after the lookup (which this
    /// asks for), whatever it found. For a thread that may not wait for the lookup (see
    /// `local::NoWait`) but must not let a QP send before it: the CM holds an active
    /// side's ESTABLISHED until then, so that no packet of the QP takes the UDP path
    /// before its route exists and then a ring (a UC message would be lost at the switch).
    pub(crate) fn when_routed(&self, dst: IpAddr, qpn: u32, then: local::Then) {
        match self.route_wanted(dst, qpn) {
            Some((l, _, w)) => {
                l.want_then(w, then);
                self.wake();
            }
            None => then(),
        }
    }
}

/// The size from which a WRITE to a same-host peer is placed whenever it was granted,
/// waiting for the WRs before it if need be: one cross-memory copy instead of a packet per
/// 4 KiB through the ring, each copied four times.
const PLACE_ALWAYS: u64 = 16384;

/// Whether a QP in `state` takes incoming requests: from RTR on, until ERROR or RESET
/// (its receive queue works in SQD and SQE too).
fn receives(state: softrdma_proto::QpState) -> bool {
    use softrdma_proto::QpState::*;
    matches!(state, Rtr | Rts | Sqd | Sqe)
}
