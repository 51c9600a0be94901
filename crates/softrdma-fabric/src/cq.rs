//! The fabric's completion queue (`fid_cq`, `FI_CQ_FORMAT_TAGGED`): what an endpoint's
//! operations came to, in order, with the error entries among them. Reading it drives the
//! endpoints bound to it (manual progress, as libfabric's `FI_PROGRESS_MANUAL`): their
//! connection events and their device completions are handled in [`CompletionQueue::read`].
//!
//! Threads and locks: `FabricCqEntries` around the entries and `FabricCqBound` around the
//! list of bound endpoints (softrdma's ranked locks, see its crate docs); an endpoint's
//! progress takes its own lock (`FabricEp`), then the entries', never the other way round,
//! and the list is let go before any endpoint's progress runs.

use crate::buf::Buf;
use crate::matching::{FI_ADDR_UNSPEC, FiAddr};
use softrdma::sync::{Lock, Rank};
use std::collections::VecDeque;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// Completion flags: libfabric's values, so that a C face passes them through.
pub mod flags {
    /// A message (`fi_send`/`fi_recv`).
    pub const MSG: u64 = 1 << 1;
    /// RMA (`fi_read`, `fi_write`).
    pub const RMA: u64 = 1 << 2;
    /// A tagged message.
    pub const TAGGED: u64 = 1 << 3;
    /// An atomic (`fi_atomic`, `fi_fetch_atomic`, `fi_compare_atomic`).
    pub const ATOMIC: u64 = 1 << 4;
    /// An RMA READ.
    pub const READ: u64 = 1 << 8;
    /// An RMA WRITE.
    pub const WRITE: u64 = 1 << 9;
    /// A receive.
    pub const RECV: u64 = 1 << 10;
    /// A send.
    pub const SEND: u64 = 1 << 11;
    /// A peer's WRITE into this endpoint's memory.
    pub const REMOTE_WRITE: u64 = 1 << 13;
    /// The entry carries the sender's remote CQ data.
    pub const REMOTE_CQ_DATA: u64 = 1 << 17;
}

/// Error numbers of error entries: libfabric's.
pub mod errno {
    /// The message was longer than the buffer (`FI_ETRUNC`): `len` bytes landed of `olen`.
    pub const ETRUNC: i32 = 265;
    /// The operation was cancelled (`FI_ECANCELED`).
    pub const ECANCELED: i32 = 125;
    /// The peer could not be reached, or went (`FI_EIO`).
    pub const EIO: i32 = 5;
    /// No message waits that a peek takes (`FI_ENOMSG`).
    pub const ENOMSG: i32 = 42;
    /// The peer refused the access: a wrong key, or an address outside its region
    /// (`FI_EACCES`).
    pub const EACCES: i32 = 13;
}

/// One completed operation (`struct fi_cq_tagged_entry`), or an error entry
/// (`struct fi_cq_err_entry`) when `error` is not 0.
#[derive(Debug)]
pub struct Completion {
    /// The context the operation was posted with.
    pub context: u64,
    /// What it was ([`flags`]).
    pub flags: u64,
    /// Bytes received (the message's length), or sent.
    pub len: usize,
    /// The buffer the operation was given, back to its owner: a receive's holds the
    /// message in its first `len` bytes.
    pub buf: Buf,
    /// The sender's remote CQ data, on a receive that carried some.
    pub data: Option<u64>,
    /// A tagged receive's tag, as the sender sent it.
    pub tag: u64,
    /// A receive's sender (`FI_SOURCE`); `FI_ADDR_UNSPEC` when it is not in the address
    /// vector.
    pub src: FiAddr,
    /// 0, or the error ([`errno`]).
    pub error: i32,
    /// For `ETRUNC`, the message's whole length.
    pub olen: usize,
}

impl Completion {
    /// An entry with no data, tag or source (a send's, an RMA's, a cancel's).
    pub(crate) fn of(context: u64, flags: u64, buf: Buf, len: usize, error: i32) -> Self {
        Self {
            context,
            flags,
            len,
            buf,
            data: None,
            tag: 0,
            src: FI_ADDR_UNSPEC,
            error,
            olen: 0,
        }
    }
}

/// An endpoint that reading a CQ drives.
pub(crate) trait Progress: Send + Sync {
    /// Handles what is waiting: connection events and device completions.
    fn progress(&self);
}

/// A completion queue (`fid_cq`).
pub struct CompletionQueue {
    entries: Lock<VecDeque<Completion>>,
    bound: Lock<Vec<Weak<dyn Progress>>>,
}

impl std::fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletionQueue").finish_non_exhaustive()
    }
}

impl CompletionQueue {
    /// An empty queue.
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            entries: Lock::new(Rank::FabricCqEntries, VecDeque::new()),
            bound: Lock::new(Rank::FabricCqBound, Vec::new()),
        })
    }

    pub(crate) fn bind(&self, ep: Weak<dyn Progress>) {
        self.bound.lock().push(ep);
    }

    pub(crate) fn push(&self, c: Completion) {
        self.entries.lock().push_back(c);
    }

    /// Drives the bound endpoints, then takes up to `max` entries, oldest first
    /// (`fi_cq_read`; error entries come in their place, not apart as `fi_cq_readerr`'s).
    pub fn read(&self, max: usize) -> Vec<Completion> {
        self.drive();
        let mut q = self.entries.lock();
        let n = max.min(q.len());
        q.drain(..n).collect()
    }

    /// Drives the bound endpoints, then takes up to `max` entries that are not errors,
    /// oldest first, stopping at the first error entry (`fi_cq_read`); whether an error
    /// entry is next comes with them (`-FI_EAVAIL`, for [`CompletionQueue::read_error`]).
    pub fn read_ok(&self, max: usize) -> (Vec<Completion>, bool) {
        self.drive();
        let mut q = self.entries.lock();
        let n = q.iter().take(max).take_while(|c| c.error == 0).count();
        let got: Vec<_> = q.drain(..n).collect();
        let error_next = q.front().is_some_and(|c| c.error != 0);
        (got, error_next)
    }

    /// Takes the error entry at the head, if one is there (`fi_cq_readerr`).
    pub fn read_error(&self) -> Option<Completion> {
        let mut q = self.entries.lock();
        if q.front().is_some_and(|c| c.error != 0) {
            q.pop_front()
        } else {
            None
        }
    }

    /// How many entries wait, without driving anything.
    pub fn len(&self) -> usize {
        self.entries.lock().len()
    }

    /// Whether no entry waits, without driving anything.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds an entry of the caller's (`fi_cq_write`, `fi_cq_writeerr`).
    pub fn write(&self, c: Completion) {
        self.push(c);
    }

    fn drive(&self) {
        let eps: Vec<_> = self.bound.lock().iter().filter_map(Weak::upgrade).collect();
        for ep in eps {
            ep.progress();
        }
    }

    /// Reads until `n` entries came or `within` passed (`fi_cq_sread`, spinning).
    pub fn wait(&self, n: usize, within: Duration) -> Vec<Completion> {
        let end = Instant::now() + within;
        let mut got = Vec::new();
        while got.len() < n && Instant::now() < end {
            got.extend(self.read(n - got.len()));
            if got.len() < n {
                std::thread::yield_now();
            }
        }
        got
    }
}
