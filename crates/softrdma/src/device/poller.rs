//! The hand-off of the socket to application threads that busy-poll a CQ: a poller that
//! finds its CQ empty drains the socket itself (saving two context switches per message),
//! and the progress thread stops watching the socket until the polls have stopped for
//! [`APP_POLL_GRACE`]. Beside the rings of the same-host path, a poller reads the socket
//! at the pace of a [`UdpPace`].
//!
//! Owns: the device's [`cq::Poller`] implementation, `poll_rx`/`poll_socket`, and the
//! counts that decide who receives (`awaiting`, `requesting`, `idle_poller`, `app_polls`,
//! `app_released`; their fields are the device's). May call: the receive path
//! ([`super::rx`]), the ACK policy ([`super::acks`]), the timers ([`super::timers`]) and
//! the send batches ([`super::tx`]).
//!
//! Threads and locks: application threads. A poll takes `Rx` with *try* only (the
//! progress thread, or another poller, may hold it) and drains under it; the counts are
//! atomics, moved under the QP's lock where a QP's flag moves with them.

use super::Device;
use super::cq;
use super::qp::QpShared;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How long after an application thread last drained the socket the progress thread leaves
/// the socket to it (and so the longest an ACK it deferred can wait).
pub(super) const APP_POLL_GRACE: Duration = Duration::from_micros(200);

/// While same-host rings are open, an application thread's drain reads the socket at most
/// this often while datagrams come (the progress thread reads both on each pass).
const UDP_EVERY: Duration = Duration::from_micros(5);

/// The longest an application thread's drain goes without reading the socket while rings
/// are open: what a datagram that arrives after a quiet spell may wait, far inside the ACK
/// timeouts programs set (IBTA 9.7.6.1.3: 4.096 µs × 2^timeout; perftest's 14 is 67 ms).
const UDP_EVERY_MAX: Duration = Duration::from_micros(128);

/// Empty reads of the socket at [`UDP_EVERY`] before the pace slows: 40 µs without a
/// datagram, longer than a loopback or LAN round trip, so a UDP ping-pong beside the rings
/// keeps the fast pace.
const UDP_PATIENCE: u32 = 8;

/// When an application thread's drain reads the socket while same-host rings are open. A
/// read is a system call, and an empty `recvmmsg` cost 1.2 µs on a KVM guest (AMD EPYC,
/// measured): read every [`UDP_EVERY`], it was a quarter of a same-host SEND ping-pong's
/// CPU. It starts at that pace, and after [`UDP_PATIENCE`]
/// empty reads doubles its interval per empty read up to [`UDP_EVERY_MAX`]; a datagram
/// brings the fast pace back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct UdpPace {
    /// When the socket was last read (device nanoseconds).
    at: u64,
    /// Empty reads in a row.
    empty: u32,
}

impl UdpPace {
    pub(super) const fn new() -> Self {
        Self { at: 0, empty: 0 }
    }

    /// The interval now.
    fn every(&self) -> u64 {
        let base = UDP_EVERY.as_nanos() as u64;
        let doublings = self.empty.saturating_sub(UDP_PATIENCE).min(16);
        (base << doublings).min(UDP_EVERY_MAX.as_nanos() as u64)
    }

    /// Whether the socket is due at `now`; if so the read is counted as made now.
    pub(super) fn due(&mut self, now: u64) -> bool {
        let due = now.saturating_sub(self.at) >= self.every();
        if due {
            self.at = now;
        }
        due
    }

    /// What the read found.
    pub(super) fn found(&mut self, any: bool) {
        self.empty = if any { 0 } else { self.empty.saturating_add(1) };
    }
}

impl Device {
    /// Drains the socket if no other thread is doing so. Returns true if it received anything.
    ///
    /// The ACKs this produces are deferred: an application polling for a message usually
    /// answers it, and its answer then carries them out in the same system call (IBTA vol. 1,
    /// 9.7.5.1 lets a responder coalesce and delay ACKs within the requester's timeout). A
    /// ping-pong over RC thus costs one send per turn, as over UC, instead of two. Whatever
    /// is still deferred leaves at this thread's next poll, its next post of a send, or when
    /// the progress thread takes the socket back ([`APP_POLL_GRACE`] after the last poll).
    pub fn poll_rx(&self) -> bool {
        if self.awaiting.load(Ordering::Relaxed) == 0 {
            // A poll with nothing awaited: this application polls while it waits for
            // WRITEs, so it receives them itself (see `Poller::polled`).
            self.idle_poller.store(true, Ordering::Relaxed);
        }
        self.poll_socket()
    }

    /// A receive scope for the inline consumers of the device's channels (see
    /// [`cq::Inline`]), on a device that has any: a device with no CM pays nothing for it
    /// on its busy polls.
    pub(super) fn inline_scope(&self) -> Option<cq::Inline> {
        self.inline_consumers
            .load(Ordering::Relaxed)
            .then(cq::Inline::enter)
    }

    /// A channel of the device's CQs now has an inline consumer (the CM's QP1): receive
    /// passes open a scope for it from now on (see [`Device::inline_scope`]).
    pub(crate) fn inline_consumer_added(&self) {
        self.inline_consumers.store(true, Ordering::Relaxed);
    }

    /// [`Device::poll_rx`] for a thread that waits for something other than a CQ (a CM
    /// event): it is not taken for an application that watches memory for WRITEs.
    pub(crate) fn poll_socket(&self) -> bool {
        // Dropped last: an inline consumer of what this poll placed runs with no lock held.
        let _inline = self.inline_scope();
        match self.rx.try_lock() {
            Some(mut st) => {
                // This thread's batch is empty (every entry point flushes its own before it
                // returns): only deferred ACKs may wait, and most polls find none.
                if self.gate.deferred(false) && !self.hold_deferred() {
                    self.flush_batch(true);
                }
                // Only a change matters to the progress thread, so two pollers that race
                // and count one poll instead of two are fine, and a plain store spares a
                // locked instruction on every poll.
                let polls = self.app_polls.load(Ordering::Relaxed);
                self.app_polls
                    .store(polls.wrapping_add(1), Ordering::Relaxed);
                let got = self.drain(&mut st, true, true);
                drop(st);
                self.run_due_timers() || got
            }
            // Another thread receives (the progress thread, which may have lost its CPU in
            // the middle): the timers need not wait for it as well.
            None => self.run_due_timers(),
        }
    }

    /// Records whether the QP awaits completions and has requests outstanding, which
    /// decide who receives (see `Poller::polled`). A QP whose peer answered its last send
    /// with a WRITE keeps the socket with its poller: the application, having its
    /// completion, finds its memory written and posts again at once.
    pub(crate) fn note_awaits(&self, shared: &QpShared, qp: &softrdma_proto::QueuePair) {
        self.set_awaits(
            shared,
            qp.awaits_completions() || !qp.written() || qp.answered(),
            qp.sends_outstanding(),
        );
    }

    /// Records whether `shared`'s QP keeps a poller's socket (see [`Poller::polled`](cq::Poller::polled)) and
    /// whether it has sends outstanding; its lock is held, so the flags and the counts move
    /// together.
    pub(crate) fn set_awaits(&self, shared: &QpShared, awaits: bool, requests: bool) {
        for (flag, count, on) in [
            (&shared.awaits, &self.awaiting, awaits),
            (&shared.requests, &self.requesting, requests),
        ] {
            if flag.load(Ordering::Relaxed) != on {
                flag.store(on, Ordering::Relaxed);
                if on {
                    count.fetch_add(1, Ordering::Relaxed);
                } else {
                    count.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Whether the pollers gave the socket back (`Poller::app_sleeps`) since they last
    /// polled.
    #[cfg(test)]
    pub(crate) fn pollers_released(&self) -> bool {
        self.app_released.load(Ordering::Relaxed)
            == self.app_polls.load(Ordering::Relaxed).wrapping_add(1)
    }
}

impl cq::Poller for Device {
    fn poll_rx(&self) -> bool {
        Device::poll_rx(self)
    }

    fn polled(&self) {
        if self.awaiting.load(Ordering::Relaxed) == 0 && !self.idle_poller.load(Ordering::Relaxed) {
            self.app_sleeps();
        }
    }

    fn app_blocks(&self, watching: bool) {
        self.flush_batch(true);
        if !watching {
            self.app_sleeps();
        }
    }

    fn rx_fd(&self) -> Option<std::os::fd::RawFd> {
        self.datapath.readable_fd()
    }

    fn receive_blocked(&self) -> bool {
        self.poll_socket()
    }

    fn app_sleeps(&self) {
        let polls = self.app_polls.load(Ordering::Relaxed);
        // Stored as count + 1, so that 0 means "never released".
        if self
            .app_released
            .swap(polls.wrapping_add(1), Ordering::Relaxed)
            != polls.wrapping_add(1)
        {
            self.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pace of a poller's socket reads beside open rings: fast while datagrams come and
    /// for a few empty reads after, then slower per empty read up to its cap, and fast again
    /// at the next datagram.
    #[test]
    fn a_pollers_socket_reads_slow_down_while_none_comes() {
        let us = |n: u64| n * 1000;
        let every = UDP_EVERY.as_nanos() as u64;
        let mut p = UdpPace::new();
        let mut t = us(1000);
        assert!(p.due(t));
        assert!(!p.due(t + every - 1), "not before the interval");
        for _ in 0..UDP_PATIENCE {
            p.found(false);
            assert_eq!(p.every(), every, "patient at first");
        }
        p.found(false);
        assert_eq!(p.every(), 2 * every);
        for _ in 0..40 {
            p.found(false);
        }
        assert_eq!(p.every(), UDP_EVERY_MAX.as_nanos() as u64, "capped");
        t += us(50);
        assert!(!p.due(t), "a quiet socket is read less often");
        t += UDP_EVERY_MAX.as_nanos() as u64;
        assert!(p.due(t));
        p.found(true);
        assert_eq!(p.every(), every, "a datagram brings the fast pace back");
        assert!(p.due(t + every));
    }
}
