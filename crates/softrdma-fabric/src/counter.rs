//! Completion counters (`fid_cntr`): how many operations of the kinds an endpoint bound
//! it for have completed, and how many of them failed. Every completion counts, those
//! that write no CQ entry too (an inject, a send without `FI_COMPLETION` on an endpoint
//! bound with `FI_SELECTIVE_COMPLETION`): a counter is how such a program knows its
//! operations are done. Reading a counter drives the endpoints bound to it, as a CQ's
//! read does.
//!
//! Threads and locks: the two numbers are atomics; the list of bound endpoints is behind
//! `FabricCqBound` (the rank of every list of bound endpoints), let go before any
//! endpoint's progress runs.

use crate::cq::{Completion, CompletionQueue, Progress, flags};
use softrdma::sync::{Lock, Rank};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// What an endpoint counts on a counter (`fi_ep_bind`'s flags for a `fid_cntr`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CountOf {
    /// Sends and tagged sends (`FI_SEND`).
    pub send: bool,
    /// Receives (`FI_RECV`).
    pub recv: bool,
    /// RMA reads and fetching atomics (`FI_READ`).
    pub read: bool,
    /// RMA writes and atomics that fetch nothing (`FI_WRITE`).
    pub write: bool,
}

/// The counters bound to an endpoint, by what they count (any endpoint type's).
#[derive(Default)]
pub(crate) struct Counters {
    send: Option<Arc<Counter>>,
    recv: Option<Arc<Counter>>,
    read: Option<Arc<Counter>>,
    write: Option<Arc<Counter>>,
}

impl Counters {
    /// Counts a completion with flags `f` on the counter bound for its kind, if any.
    pub(crate) fn count(&self, f: u64, error: bool) {
        let c = if f & flags::RECV != 0 {
            &self.recv
        } else if f & flags::SEND != 0 {
            &self.send
        } else if f & flags::READ != 0 {
            &self.read
        } else if f & flags::WRITE != 0 {
            &self.write
        } else {
            &None
        };
        if let Some(c) = c {
            c.count(error);
        }
    }

    /// Counts the kinds `of` names on `cntr` from now on (a kind bound again counts on
    /// the new counter).
    pub(crate) fn set(&mut self, cntr: &Arc<Counter>, of: CountOf) {
        for (on, slot) in [
            (of.send, &mut self.send),
            (of.recv, &mut self.recv),
            (of.read, &mut self.read),
            (of.write, &mut self.write),
        ] {
            if on {
                *slot = Some(cntr.clone());
            }
        }
    }

    /// Puts `c` in `cq`, counted.
    pub(crate) fn report(&self, cq: &CompletionQueue, c: Completion) {
        self.count(c.flags, c.error != 0);
        cq.push(c);
    }
}

/// How a [`Counter::wait`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited {
    /// The count reached the threshold.
    Reached,
    /// An operation completed in error first (`-FI_EAVAIL`).
    Failed,
    /// The time passed first (`-FI_ETIMEDOUT`).
    TimedOut,
}

/// A completion counter.
pub struct Counter {
    value: AtomicU64,
    errors: AtomicU64,
    bound: Lock<Vec<Weak<dyn Progress>>>,
}

impl std::fmt::Debug for Counter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Counter")
            .field("value", &self.value.load(Ordering::Relaxed))
            .field("errors", &self.errors.load(Ordering::Relaxed))
            .finish()
    }
}

impl Counter {
    /// A counter at 0 with no errors (`fi_cntr_open`).
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            value: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            bound: Lock::new(Rank::FabricCqBound, Vec::new()),
        })
    }

    pub(crate) fn bind(&self, ep: Weak<dyn Progress>) {
        self.bound.lock().push(ep);
    }

    /// One more operation completed: well, or with an error.
    pub(crate) fn count(&self, error: bool) {
        let n = if error { &self.errors } else { &self.value };
        n.fetch_add(1, Ordering::AcqRel);
    }

    fn drive(&self) {
        let eps: Vec<_> = self.bound.lock().iter().filter_map(Weak::upgrade).collect();
        for ep in eps {
            ep.progress();
        }
    }

    /// Drives the bound endpoints, then the count of operations that completed well
    /// (`fi_cntr_read`).
    pub fn read(&self) -> u64 {
        self.drive();
        self.value.load(Ordering::Acquire)
    }

    /// The count of operations that completed in error (`fi_cntr_readerr`).
    pub fn read_errors(&self) -> u64 {
        self.drive();
        self.errors.load(Ordering::Acquire)
    }

    /// Adds `n` to the count (`fi_cntr_add`).
    pub fn add(&self, n: u64) {
        self.value.fetch_add(n, Ordering::AcqRel);
    }

    /// Sets the count (`fi_cntr_set`).
    pub fn set(&self, n: u64) {
        self.value.store(n, Ordering::Release);
    }

    /// Adds `n` to the error count (`fi_cntr_adderr`).
    pub fn add_errors(&self, n: u64) {
        self.errors.fetch_add(n, Ordering::AcqRel);
    }

    /// Sets the error count (`fi_cntr_seterr`).
    pub fn set_errors(&self, n: u64) {
        self.errors.store(n, Ordering::Release);
    }

    /// Waits until the count reaches `threshold`, an error is counted after the call
    /// began, or `within` passes (`fi_cntr_wait`, spinning on the bound endpoints'
    /// progress).
    pub fn wait(&self, threshold: u64, within: Duration) -> Waited {
        // A wait too long to add to now has no end.
        let end = Instant::now().checked_add(within);
        let errors = self.errors.load(Ordering::Acquire);
        loop {
            if self.read() >= threshold {
                return Waited::Reached;
            }
            if self.errors.load(Ordering::Acquire) != errors {
                return Waited::Failed;
            }
            if end.is_some_and(|end| Instant::now() >= end) {
                return Waited::TimedOut;
            }
            std::thread::yield_now();
        }
    }
}
