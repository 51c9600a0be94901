//! The timer queue: the QPs that have a deadline, earliest first, and none of those that
//! do not.
//!
//! A QP's deadline moves on almost every packet (each ACK pushes the retransmission timer
//! out), and a queue that followed every move would cost a heap operation per packet. So
//! entries are lazy: a QP enters its deadline only when it is earlier than the entry it
//! already has ([`crate::QueuePair::timer_to_enter`]); an entry that comes due is checked
//! against the QP ([`crate::QueuePair::timer_entry_due`]), which fires, re-enters its real
//! (later) deadline, or finds the entry stale. A QP with no deadline has no entry, so 10,000
//! idle QPs cost nothing per wake-up; one with a deadline costs at most one early wake-up
//! per deadline it entered.
//!
//! One deadline can move earlier without an input to its QP: a QP with no round-trip sample
//! of its own times its tail-loss probe from the path's smallest round trip, which other
//! QPs to the same destination lower ([`crate::qp::rtt::PathRtt`]). Such a QP keeps the
//! entry it made, so its probe goes at the time computed when it last had an input, no
//! later; the lower figure takes effect at its next input. (The sweep this queue replaced
//! would have found it on the next pass.)

use crate::types::Instant;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Deadlines by QPN, earliest first (see the module docs).
#[derive(Debug, Default)]
pub struct TimerQueue {
    heap: BinaryHeap<Reverse<(u64, u32)>>,
}

impl TimerQueue {
    /// Enters `at` for the QP numbered `qpn`.
    pub fn push(&mut self, at: Instant, qpn: u32) {
        self.heap.push(Reverse((at.as_nanos(), qpn)));
    }

    /// The earliest entry: a lower bound on every entered QP's deadline as of that QP's
    /// last input (see [`crate::QueuePair::timer_to_enter`]).
    pub fn peek(&self) -> Option<(Instant, u32)> {
        self.heap
            .peek()
            .map(|Reverse((at, qpn))| (Instant::from_nanos(*at), *qpn))
    }

    /// Takes the earliest entry if it is due at `now`.
    pub fn pop_due(&mut self, now: Instant) -> Option<(Instant, u32)> {
        let (at, _) = self.peek()?;
        if at > now {
            return None;
        }
        self.heap
            .pop()
            .map(|Reverse((at, qpn))| (Instant::from_nanos(at), qpn))
    }

    /// Takes the earliest entry, due or not.
    pub fn pop(&mut self) -> Option<(Instant, u32)> {
        self.heap
            .pop()
            .map(|Reverse((at, qpn))| (Instant::from_nanos(at), qpn))
    }

    /// Entries held (live and stale).
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_come_due_earliest_first_and_not_before_their_time() {
        let mut q = TimerQueue::default();
        q.push(Instant::from_nanos(30), 3);
        q.push(Instant::from_nanos(10), 1);
        q.push(Instant::from_nanos(20), 2);
        assert_eq!(q.peek(), Some((Instant::from_nanos(10), 1)));
        assert_eq!(q.pop_due(Instant::from_nanos(9)), None);
        assert_eq!(
            q.pop_due(Instant::from_nanos(25)),
            Some((Instant::from_nanos(10), 1))
        );
        assert_eq!(
            q.pop_due(Instant::from_nanos(25)),
            Some((Instant::from_nanos(20), 2))
        );
        assert_eq!(q.pop_due(Instant::from_nanos(25)), None);
        assert_eq!(q.len(), 1);
    }
}
