//! The receive path: draining the socket and the same-host rings, and handing each
//! datagram to its QP through the endpoint's receive checks (or to the process it belongs
//! to, on a shared device). Whoever holds the receive state drains: the progress thread,
//! or an application thread busy-polling a CQ (see [`super::poller`]).
//!
//! Owns: [`RxState`] and the drain (`drain`, `recv_some`, `receive`, `publish`,
//! `service_touched`), and `lose_peer`, the same-host peer's death as the receive side
//! learns it. May call: the datapath, the same-host path ([`super::local`]), the sharing
//! ([`super::share`]), the send side ([`super::tx`]) and the ACK policy ([`super::acks`]).
//!
//! Threads and locks: a drain runs with `Rx` held; under it the QP table's read lock
//! (a lookup per QP change), then each touched QP's lock, and what a service takes below
//! that. `lose_peer` runs on the progress thread with no lock held, and asks the owner
//! without a QP's lock.

use super::Device;
use super::poller::UdpPace;
use super::qp::QpShared;
use super::{local, share};
use crate::datapath::socket::{self as sys, RecvBatch};
use softrdma_proto::Instant;
use softrdma_proto::endpoint::{Counter, Receiver, RxOutcome};
use std::net::SocketAddr;

/// The receive state: what a drain needs, held by whichever thread drains (behind the
/// device's `rx` lock).
pub(super) struct RxState {
    /// The receive checks, QPN demultiplexing and ACK coalescing (the device core's, shared
    /// with the simulator).
    pub(super) rx: Receiver<QpShared>,
    pub(super) batch: RecvBatch,
    /// Datagrams to ask for in an application thread's next receive call.
    pub(super) want: usize,
    /// Where the multicast groups' datagrams are received (empty until a group is joined).
    pub(super) group_buf: Vec<u8>,
    /// While rings are open, how often an application thread reads the socket (see
    /// [`UdpPace`]).
    pub(super) udp: UdpPace,
    /// The ACKs same-host responders left in the rings' boxes, (QPN, PSN), for the drain
    /// to apply (see [`Local::ack`](local::Local::ack)).
    pub(super) acks: Vec<(u32, u32)>,
}

impl Device {
    /// Receives and handles what is waiting. An application thread (`app`) makes one
    /// receive call and defers the ACKs; the progress thread, woken by an edge-triggered
    /// poll, empties the socket and sends at once.
    /// `app`: an application thread drains (it returns after one batch). `defer`: the
    /// progress thread drains while application threads post sends: its ACKs are deferred
    /// as a poller's are, to ride with their next request. Without that, a peer that waits
    /// for the ACK of its WRITE gets it alone, before the WRITE that answers, and then
    /// spins on memory while that WRITE waits for a progress thread (perftest's
    /// `ib_write_lat`: the two ends spin on memory, not on their CQs).
    pub(super) fn drain(&self, st: &mut RxState, app: bool, defer: bool) -> bool {
        let _drains = local::Draining::enter();
        let mut any = false;
        let RxState {
            rx,
            batch,
            want,
            udp,
            acks,
            ..
        } = st;
        loop {
            let ask = if app { *want } else { sys::RX_BATCH };
            let mut ringed = false;
            let got = self.recv_some(batch, ask, app, udp, &mut ringed, acks);
            // One datagram is asked for while they come one at a time (a ping-pong); a full
            // batch means more are queued.
            *want = match got {
                Ok(n) if n == ask => sys::RX_BATCH,
                _ => 1,
            };
            let n = match got {
                Ok(n) if n > 0 => n,
                _ if !acks.is_empty() => 0,
                _ => return any,
            };
            any = true;
            // One clock reading per batch: the packets of a batch arrived together.
            let now = self.now();
            for i in 0..n {
                match batch.get(i) {
                    // GRO coalesced equal segments (the last may be shorter).
                    (data, Some(from), false, seg) if seg > 0 => {
                        for d in data.chunks(seg) {
                            self.receive(rx, d, from, now, ringed);
                        }
                    }
                    (data, Some(from), false, _) => self.receive(rx, data, from, now, ringed),
                    _ => {
                        self.counters.add(Counter::RcvdMalformed, 1);
                    }
                }
            }
            // Behind the packets read with them (the ring's order), the ACKs that came in
            // memory.
            for (qpn, psn) in acks.drain(..) {
                rx.ack_from_memory(self, now, qpn, softrdma_wire::Psn::new(psn));
            }
            self.publish(rx.take_counts());
            // The QPs that received, serviced once after the whole batch: their responses
            // (ACKs above all) coalesce, and leave in one system call instead of one each
            // (IBTA 9.7.5.1: an ACK acknowledges every request before it, so one will do).
            self.service_touched(rx, now);
            if app {
                self.defer_acks(now);
                return any;
            }
            if defer {
                self.defer_acks(now);
            } else {
                self.flush_batch(true);
            }
            // With rings open the sources are read in turn: go on until both are empty.
            if n < sys::RX_BATCH && !self.local.as_ref().is_some_and(|l| l.has_rings()) {
                return any;
            }
        }
    }

    /// Receives up to `ask` packets from the socket or the same-host rings. An application
    /// thread (`app`) reads the rings, and the socket when its [`UdpPace`] says; the
    /// progress thread reads the socket and, when it is empty, the rings. `ringed` is set
    /// when the packets came from the rings.
    fn recv_some(
        &self,
        batch: &mut RecvBatch,
        ask: usize,
        app: bool,
        pace: &mut UdpPace,
        ringed: &mut bool,
        acks: &mut Vec<(u32, u32)>,
    ) -> std::io::Result<usize> {
        let Some(l) = self.local.as_ref().filter(|l| l.has_rings()) else {
            return self.datapath.recv(batch, ask);
        };
        let app_due = app && pace.due(self.now().as_nanos());
        if !app || app_due {
            let got = self.datapath.recv(batch, ask);
            let any = matches!(got, Ok(1..));
            if app_due {
                pace.found(any);
            }
            if any {
                return got;
            }
        }
        // Whatever the rings hold, however few were asked for: reading more costs no
        // system call, and the packets of one turn (an ACK and the answer behind it) are
        // then handled, and their QP serviced, in one pass instead of one pass each.
        let (n, bad) = l.recv(batch, sys::RX_BATCH, acks);
        if bad > 0 {
            self.counters.add(Counter::RcvdMalformed, bad as u64);
        }
        *ringed = true;
        Ok(n)
    }

    /// A same-host peer died (endpoint `ep`; `sent_to`: the QPNs this process sent to
    /// there): every QP of this device connected to a QP of that process goes to ERROR
    /// now, as its retries would have taken it, and hands out its completions (see
    /// [`local`]). A QP that never sent to its peer (a server still waiting for the first
    /// message) is found by asking the owner who holds its peer's QPN: the dead process
    /// (the owner has not seen it go yet). A QP whose peer the owner no longer knows, or
    /// cannot be asked about, is left to its retries.
    pub(super) fn lose_peer(&self, share: &share::Share, ep: u64, sent_to: &[u32]) {
        let sent_to: std::collections::HashSet<u32> = sent_to.iter().copied().collect();
        for s in self.qp_list() {
            let a = s.qp.lock().query();
            let (Some(q), Some(av)) = (a.dest_qpn, a.av) else {
                continue;
            };
            if !softrdma_proto::qp::same_ip(av.dst, self.addr) {
                continue;
            }
            // Asked without the QP's lock: a member's question waits for its owner.
            // Only a positive answer counts: a new owner that has not yet heard from its
            // members says "nobody" of live QPNs.
            let gone = sent_to.contains(&q.value())
                || share
                    .holder(q.value())
                    .is_ok_and(|h| h == share::Holder::At(ep));
            if gone {
                let mut qp = s.qp.lock();
                qp.peer_gone();
                self.service(&s, &mut qp);
            }
        }
        self.flush_batch(true);
    }

    /// Hands one received datagram to its QP through the receive path (`ringed`: it came
    /// through a same-host ring, so no ICRC is checked).
    fn receive(
        &self,
        rx: &mut Receiver<QpShared>,
        data: &[u8],
        from: SocketAddr,
        now: Instant,
        ringed: bool,
    ) {
        if let Some(s) = &self.share {
            match share::classify(data, ringed) {
                share::Kind::Probe { index, nonce } => {
                    // The device's owner asks which socket of the group this is.
                    if s.saw_probe(index, nonce) {
                        self.wake();
                    }
                    return;
                }
                // Another process's MAD that the group gave this member: its owner routes
                // it.
                share::Kind::Mad if s.misdelivered_mad(data) && s.hand_back(data, from) => {
                    self.counters.add(Counter::HandedBackPkts, 1);
                    return;
                }
                // A ring's packets are this process's: their producer found the QPN's
                // holder before it wrote them (see `local`).
                share::Kind::Mad | share::Kind::Qp(_) if s.forwarding() => {
                    if let Some(sent) = s.forward(data, from) {
                        // Another process's QP: it gets the datagram as it came.
                        let c = if sent {
                            Counter::ForwardedPkts
                        } else {
                            Counter::ForwardErr
                        };
                        self.counters.add(c, 1);
                        return;
                    }
                }
                _ => {}
            }
        }
        if ringed {
            rx.datagram_from_memory(self, now, self.addr, from.ip(), from.port(), data);
        } else if let RxOutcome::UnknownQpn { .. } =
            rx.datagram(self, now, self.addr, from.ip(), from.port(), data)
            && let Some(s) = &self.share
            && s.hand_back(data, from)
        {
            // Not lost: the owner routes it where it belongs.
            self.counters.add(Counter::HandedBackPkts, 1);
        }
    }

    /// Adds a receive batch's counts to the device's counters (zeros are not added: each
    /// add is a locked instruction).
    pub(super) fn publish(&self, c: softrdma_proto::endpoint::RxCounts) {
        for (counter, n) in c.by_counter() {
            self.counters.add(counter, n);
        }
    }

    /// Services the QPs a receive reached (see [`Device::drain`]).
    pub(super) fn service_touched(&self, rx: &mut Receiver<QpShared>, now: Instant) {
        for shared in rx.touched() {
            let mut qp = shared.qp.lock();
            self.service_at(&shared, &mut qp, now);
            // What arrived may have armed a timer (a probe after a window's last
            // ACK-asking packet was answered, say).
            self.enter_timer(&mut qp);
        }
    }
}
