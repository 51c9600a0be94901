//! The timers: QP deadlines (retransmission, probes, RNR waits) and packets the datapath
//! holds back, run by whichever thread finds them due: the progress thread, or a busy
//! poller, which compares the earliest deadline with the clock on each empty poll. While
//! pollers spin on every core the progress thread may wait milliseconds for a CPU; the
//! timers must not.
//!
//! Owns: arming (`timer_armed`, `enter_timer`) and running (`run_due_timers`,
//! `run_timers`) against the device's `timers` queue and wake gate
//! ([`super::handoff::WakeGate`]). May call: the engine's `fire_entry`, the datapath's
//! `release`, and the device's service and send batches ([`super::tx`]).
//!
//! Threads and locks: any thread arms; `enter_timer` is called with the QP locked and
//! takes `Timers` under it. A pass holds `Sweeping` (*try*: one pass at a time), takes
//! `Timers` per entry (not across a QP's lock), then that QP's lock.

use super::Device;
use crate::datapath::Sent;
use softrdma_proto::Instant;
#[cfg(test)]
use std::sync::atomic::Ordering;

impl Device {
    /// Records a timer's deadline, and wakes the progress thread if it is earlier than the
    /// thread will wake by itself: either this sees the thread's new wake-up time, or the
    /// thread sees this deadline ([`handoff::WakeGate`](super::handoff::WakeGate)).
    pub fn timer_armed(&self, deadline: Instant) {
        if self.gate.arm(deadline.as_nanos()) {
            self.wake();
        }
    }

    /// Enters the QP's deadline in the timer queue if it is earlier than the entry it has
    /// (see [`softrdma_proto::QueuePair::timer_to_enter`]), and wakes whoever must run it.
    /// Called, with the QP locked, after everything that may arm one of its timers.
    pub fn enter_timer(&self, qp: &mut softrdma_proto::QueuePair) {
        if let Some(t) = qp.timer_to_enter() {
            self.timers.lock().push(t, qp.qpn().value());
            self.timer_armed(t);
        }
    }

    /// A poller's part in the timers: [`Device::run_timers`] if one is due. The progress
    /// thread may be waiting for a CPU that this poller holds. True if it ran them.
    pub(super) fn run_due_timers(&self) -> bool {
        let now = self.now();
        let due = now.as_nanos() >= self.gate.next_timer();
        if due {
            self.run_timers(now);
        }
        due
    }

    /// Fires the QP timers due at `now` (and services those QPs), sends the held-back
    /// packets that are due, and records when the next timer is due. Skipped when another
    /// thread is doing it. Visits only the QPs whose timer entries came due: an idle QP
    /// costs nothing here. Takes the timer queue's lock per entry (not across a QP's), then
    /// that QP's lock.
    pub(super) fn run_timers(&self, now: Instant) {
        let Some(_sweeping) = self.sweeping.try_lock() else {
            return;
        };
        // Deadlines armed from here on are recorded beside what this pass finds, and any
        // armed before are in the queue this pass reads.
        self.gate.start_pass();
        // What the datapath held back (the fault injector) and is due leaves first.
        let released = self.datapath.release(now.as_nanos());
        let mut next = released.held_until.map(Instant::from_nanos);
        self.count_sent(Sent {
            held_until: None,
            ..released
        });
        // Each entry once, and the entries the pass itself makes a few times over: a QP
        // whose handled timeout left its deadline due would otherwise hold the pass for
        // ever; what is left goes at the next pass.
        let mut budget = self.timers.lock().len() + 64;
        while budget > 0 {
            budget -= 1;
            let due = self.timers.lock().pop_due(now);
            let Some((at, qpn)) = due else { break };
            softrdma_proto::endpoint::fire_entry(self, at, qpn, now, |shared, qp| {
                #[cfg(test)]
                self.timer_visits.fetch_add(1, Ordering::Relaxed);
                self.service_at(shared, qp, now);
                self.enter_timer(qp);
            });
        }
        // Deferred ACKs stay deferred: whoever runs the timers sends them by its own rule
        // (a poller at its next poll, the progress thread after its pass).
        self.flush_batch(false);
        if let Some((t, _)) = self.timers.lock().peek() {
            next = Some(next.map_or(t, |n| n.min(t)));
        }
        if let Some(t) = next {
            // Through `timer_armed`: the progress thread may have read `next_timer` while
            // this pass had it cleared.
            self.timer_armed(t);
        }
    }
}
