//! ACK deferral: when the ACKs a drain produces are held back to ride with the
//! application's next request, and for how long. A responder may coalesce and delay ACKs
//! within the requester's timeout (IBTA 9.7.5.1); a ping-pong over RC then costs one send
//! per turn, as over UC, instead of two. The tunables live here, beside the policy that
//! reads them; [`PEER_ACK_DELAY`] is what a requester allows a soft peer for it.
//!
//! Owns: the policy (`defer_acks`, `hold_deferred`, `note_send`) and its tunables; the
//! state it reads and writes is the device's (`deferred`, `deferred_at`, `app_sends`,
//! `requesting` and the gate's `deferred` flag, see [`super::handoff`]). May call: the
//! device's send batches ([`super::tx`]) and its wake-up deadline ([`super::timers`]).
//!
//! Threads and locks: called by whichever thread drains (a poller or the progress thread)
//! and by application threads posting sends. Takes `Deferred` to move a batch of ACKs
//! into it, with no other device lock held; the rest are atomics.

use super::Device;
use super::poller::APP_POLL_GRACE;
use softrdma_proto::Instant;
use softrdma_wire::Opcode;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The longest the progress thread holds a deferred ACK for an application's next send:
/// within [`PEER_ACK_DELAY`], the slack a soft requester allows a deferred ACK. A
/// ping-pong turn that the scheduler slowed past it would otherwise get its ACK alone,
/// and fall into the slow pattern the deferral avoids (see `Device::drain`).
pub(super) const ACK_HOLD: Duration = Duration::from_micros(800);
/// The longest a poller holds deferred ACKs for its application's next request (see
/// `Device::hold_deferred`): a ping-pong's turn, with room for a preemption, far inside
/// [`ACK_HOLD`].
pub(crate) const POLL_HOLD: Duration = Duration::from_micros(50);
/// How long after an application's last send the progress thread goes on deferring ACKs
/// (see `Device::drain`): long enough to span a ping-pong turn that the scheduler slowed
/// (milliseconds on a busy machine), short next to any requester's timeout. An ACK itself
/// is held at most [`ACK_HOLD`].
pub(super) const SENDER_WINDOW: Duration = Duration::from_millis(10);
/// How long a soft device may hold an ACK back: [`APP_POLL_GRACE`], then the progress
/// thread's next pass, with room for the scheduler. A requester waits this much longer
/// before it probes for a lost tail, so that a deferred ACK is not taken for a lost one.
pub(crate) const PEER_ACK_DELAY: Duration = Duration::from_millis(1);

impl Device {
    /// Whether a poller keeps the deferred ACKs for the application's next request rather
    /// than send them alone now: while a QP has sends outstanding, for at most
    /// [`POLL_HOLD`]. In a ping-pong over WRITEs (perftest's `ib_write_lat`) the poller
    /// drains the peer's WRITE before the ACK of its own that came with it; sent alone, the
    /// ACK for that WRITE would give the peer its completion before the next WRITE arrives,
    /// and the peer would then wait for it by watching memory, with its progress thread to
    /// receive it. Held, it rides with the next WRITE, which the peer's poller drains
    /// itself. A poller that waits for receives only (the peer streams to it) sends its
    /// ACKs at each poll.
    pub(super) fn hold_deferred(&self) -> bool {
        if !self.gate.deferred(false) || self.requesting.load(Ordering::Relaxed) == 0 {
            return false;
        }
        let at = self.deferred_at.load(Ordering::Relaxed);
        at != u64::MAX && self.now().as_nanos() < at.saturating_add(POLL_HOLD.as_nanos() as u64)
    }

    /// Moves this thread's batch to the deferred ACKs if it holds nothing else (RC
    /// ACKNOWLEDGE packets: READ responses and atomic ACKs carry what a requester waits
    /// for); otherwise sends it, deferred ACKs included.
    pub(super) fn defer_acks(&self, now: Instant) {
        // None: nothing to send; Some(false): more than ACKs, to send now.
        let deferred = self.with_batch(|b| {
            if b.is_empty() {
                return None;
            }
            if !b.first_bytes().all(|op| op == Opcode::RC_ACKNOWLEDGE.0) {
                return Some(false);
            }
            let mut d = self.deferred.lock();
            d.append(b);
            let _ = self.deferred_at.compare_exchange(
                u64::MAX,
                now.as_nanos(),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            Some(true)
        });
        match deferred {
            None => {}
            Some(true) => {
                // Should this thread stop polling, the progress thread sends them: make sure
                // it wakes in time. It reads the flag after publishing when it will wake, and
                // this reads that time after setting the flag: one of the two sees the other
                // (the loom model `deferred_acks_are_never_left_behind`).
                self.gate.set_deferred();
                self.timer_armed(now.add(APP_POLL_GRACE));
            }
            Some(false) => self.flush_batch(true),
        }
    }

    /// Notes an application's send (see `app_sends`).
    pub(crate) fn note_send(&self) {
        let n = self.app_sends.load(Ordering::Relaxed);
        self.app_sends.store(n.wrapping_add(1), Ordering::Relaxed);
    }
}
