//! The fabric's completion queue (`fid_cq`, `FI_CQ_FORMAT_TAGGED`): what an endpoint's
//! operations came to, in order, with the error entries among them. Reading it drives the
//! endpoints bound to it (manual progress, as libfabric's `FI_PROGRESS_MANUAL`): their
//! connection events and their device completions are handled in [`CompletionQueue::read`].
//!
//! A queue made with [`CompletionQueue::with_fd`] has a descriptor (`FI_WAIT_FD`) that
//! polls readable while entries wait: the endpoints' progress threads add entries while
//! the program sleeps in `poll(2)` on it. [`CompletionQueue::try_wait`] is `fi_trywait`.
//!
//! Threads and locks: `FabricCqEntries` around the entries (and the descriptor's count,
//! written under it, so that it is readable exactly while entries wait) and `FabricCqBound`
//! around the list of bound endpoints (softrdma's ranked locks, see its crate docs); an endpoint's
//! progress takes its own lock (`FabricEp`), then the entries', never the other way round,
//! and the list is let go before any endpoint's progress runs.

use crate::buf::Buf;
use crate::matching::{FI_ADDR_UNSPEC, FiAddr};
use crate::ready::Ready;
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
    /// A multi-receive buffer's last completion: the buffer is released
    /// (`FI_MULTI_RECV`).
    pub const MULTI_RECV: u64 = 1 << 16;
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
    /// Where in a multi-receive buffer the message starts (0 otherwise).
    pub offset: usize,
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
            offset: 0,
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
    /// An eventfd, readable while entries wait (`with_fd`).
    fd: Option<Ready>,
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
            fd: None,
        })
    }

    /// An empty queue with a descriptor that polls readable while entries wait
    /// (`FI_WAIT_FD`; [`CompletionQueue::fd`]).
    pub fn with_fd() -> std::io::Result<Arc<Self>> {
        Ok(Arc::new(Self {
            entries: Lock::new(Rank::FabricCqEntries, VecDeque::new()),
            bound: Lock::new(Rank::FabricCqBound, Vec::new()),
            fd: Some(Ready::new()?),
        }))
    }

    /// The descriptor of a queue made [`CompletionQueue::with_fd`] (`FI_GETWAIT`): poll it
    /// for reading; it stays readable while entries wait.
    pub fn fd(&self) -> Option<std::os::fd::RawFd> {
        self.fd.as_ref().map(Ready::fd)
    }

    /// Drives the bound endpoints; true when no entry waits, so that the program may
    /// sleep on the descriptor (`fi_trywait`: false is `-FI_EAGAIN`).
    pub fn try_wait(&self) -> bool {
        self.drive();
        self.entries.lock().is_empty()
    }

    /// Makes the descriptor say whether `q` has entries. Called with the entries' lock
    /// held, after each change.
    fn signal(&self, q: &VecDeque<Completion>) {
        if let Some(r) = &self.fd {
            r.set(!q.is_empty());
        }
    }

    pub(crate) fn bind(&self, ep: Weak<dyn Progress>) {
        self.bound.lock().push(ep);
    }

    pub(crate) fn push(&self, c: Completion) {
        let mut q = self.entries.lock();
        q.push_back(c);
        if q.len() == 1 {
            self.signal(&q);
        }
    }

    /// Drives the bound endpoints, then takes up to `max` entries, oldest first
    /// (`fi_cq_read`; error entries come in their place, not apart as `fi_cq_readerr`'s).
    pub fn read(&self, max: usize) -> Vec<Completion> {
        self.drive();
        let mut q = self.entries.lock();
        let n = max.min(q.len());
        let got = q.drain(..n).collect();
        if q.is_empty() && n > 0 {
            self.signal(&q);
        }
        got
    }

    /// Drives the bound endpoints, then takes up to `max` entries that are not errors,
    /// oldest first, stopping at the first error entry (`fi_cq_read`); whether an error
    /// entry is next comes with them (`-FI_EAVAIL`, for [`CompletionQueue::read_error`]).
    pub fn read_ok(&self, max: usize) -> (Vec<Completion>, bool) {
        let mut got = Vec::new();
        let (_, error_next) = self.read_ok_each(max, |c| got.push(c));
        (got, error_next)
    }

    /// [`CompletionQueue::read_ok`] without a vector: each entry taken goes to `each`,
    /// oldest first, under the queue's lock (so `each` must not touch this queue); how
    /// many were taken, and whether an error entry is next. A C caller's `fi_cq_read`
    /// copies them straight into its array.
    pub fn read_ok_each(&self, max: usize, mut each: impl FnMut(Completion)) -> (usize, bool) {
        self.drive();
        let mut q = self.entries.lock();
        let mut n = 0;
        while n < max
            && let Some(c) = q.pop_front()
        {
            if c.error != 0 {
                // It stops the read, and stays at the head for fi_cq_readerr.
                q.push_front(c);
                break;
            }
            each(c);
            n += 1;
        }
        if q.is_empty() && n > 0 {
            self.signal(&q);
        }
        let error_next = q.front().is_some_and(|c| c.error != 0);
        (n, error_next)
    }

    /// Takes the error entry at the head, if one is there (`fi_cq_readerr`).
    pub fn read_error(&self) -> Option<Completion> {
        let mut q = self.entries.lock();
        let c = q.pop_front()?;
        if c.error == 0 {
            q.push_front(c);
            return None;
        }
        if q.is_empty() {
            self.signal(&q);
        }
        Some(c)
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
        // Taken out of the lock before they run (an endpoint's progress pushes entries
        // here); a CQ has one or two endpoints bound, which fit without an allocation.
        let eps: smallvec::SmallVec<[Arc<dyn Progress>; 4]> =
            self.bound.lock().iter().filter_map(Weak::upgrade).collect();
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
