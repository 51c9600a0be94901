//! The device's asynchronous events (`ibv_get_async_event`): a queue, and an eventfd that is
//! readable while the queue holds an event, so that C callers can `poll` and `epoll` the
//! context's `async_fd` as they do a kernel device's.
//!
//! Each open of a device by a C program (`ibv_open_device`) has its own `async_fd`, as
//! with rdma-core, where each context is its own file: programs key their handlers by the
//! descriptor (UCX's async handlers fail on a second context that shares the first's
//! number, and Open MPI's `osc ucx` opens a second). So the device's queue fans out to
//! subscribers ([`AsyncEvents::subscribe`]), each a queue with its own eventfd; what a
//! subscriber keeps of an event about an object is its own business (the C layer drops the
//! events of other contexts' objects, as the kernel never sends them).
//!
//! The queues' locks are leaves (taken last, after a QP's or a CQ's), and the subscriber
//! list's lock is taken before any queue's; the eventfd is written and read without a
//! queue's lock held.

use crate::eventfd;
use crate::sync::{Lock, Rank};
use softrdma_proto::AsyncEvent;
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Weak};

/// The most events a queue keeps: a program that never reads its events (the Rust API's
/// device-wide queue, when only C contexts read theirs) loses the oldest, not memory.
const MAX_QUEUED: usize = 4096;

/// A device's asynchronous events: its own queue (the Rust API's, [`AsyncEvents::pop`])
/// and its subscribers'.
pub(crate) struct AsyncEvents {
    main: AsyncEventQueue,
    subs: Lock<Vec<Weak<AsyncEventQueue>>>,
}

impl AsyncEvents {
    /// A device's queue, with no subscribers.
    pub(crate) fn new() -> Self {
        Self {
            main: AsyncEventQueue::new(),
            subs: Lock::new(Rank::AsyncSubs, Vec::new()),
        }
    }

    /// A new queue that receives every event from now on, starting with `first`.
    pub(crate) fn subscribe(&self, first: &[AsyncEvent]) -> Arc<AsyncEventQueue> {
        let q = Arc::new(AsyncEventQueue::new());
        q.push(first.iter().copied());
        let mut subs = self.subs.lock();
        subs.retain(|s| s.strong_count() > 0);
        subs.push(Arc::downgrade(&q));
        q
    }

    /// Queues `events` on the device's queue and every subscriber's.
    pub(crate) fn push(&self, events: impl IntoIterator<Item = AsyncEvent>) {
        let events: Vec<AsyncEvent> = events.into_iter().collect();
        if events.is_empty() {
            return;
        }
        let subs = self.subs.lock();
        for s in subs.iter().filter_map(Weak::upgrade) {
            s.push(events.iter().copied());
        }
        drop(subs);
        self.main.push(events);
    }

    /// The device queue's oldest event.
    pub(crate) fn pop(&self) -> Option<AsyncEvent> {
        self.main.pop()
    }

    /// The device queue's descriptor.
    pub(crate) fn fd(&self) -> Option<RawFd> {
        self.main.fd()
    }
}

/// Asynchronous events, oldest first, with a descriptor that is readable while there are
/// some (a context's `async_fd`).
pub struct AsyncEventQueue {
    queue: Lock<VecDeque<AsyncEvent>>,
    fd: Option<OwnedFd>,
}

impl std::fmt::Debug for AsyncEventQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncEventQueue")
            .field("fd", &self.fd())
            .finish()
    }
}

impl AsyncEventQueue {
    /// An empty queue. Without an eventfd (the process is out of descriptors) events are
    /// still queued; only the descriptor is missing, and `fd` says so.
    pub(crate) fn new() -> Self {
        Self {
            queue: Lock::new(Rank::AsyncQueue, VecDeque::new()),
            // Blocking, as a kernel device's async_fd is; `pop` reads it only when poll
            // says it is readable.
            fd: eventfd::new(false).ok(),
        }
    }

    /// Queues `events` and makes the descriptor readable.
    fn push(&self, events: impl IntoIterator<Item = AsyncEvent>) {
        let mut q = self.queue.lock();
        let before = q.len();
        q.extend(events);
        let over = q.len().saturating_sub(MAX_QUEUED);
        q.drain(..over);
        let added = q.len() > before;
        drop(q);
        if added {
            self.signal();
        }
    }

    /// The oldest event, if any. The descriptor stays readable while more remain.
    pub fn pop(&self) -> Option<AsyncEvent> {
        let mut q = self.queue.lock();
        let e = q.pop_front();
        // Drain the counter under the lock, then set it again if events remain: a push
        // that races this takes the lock after us and signals anew.
        if let Some(fd) = self.fd() {
            if eventfd::readable(fd) {
                eventfd::drain(fd);
            }
        }
        let more = !q.is_empty();
        drop(q);
        if more {
            self.signal();
        }
        e
    }

    /// The descriptor that is readable while an event waits; `None` if the process had
    /// no descriptor to spare when the queue was made.
    pub fn fd(&self) -> Option<RawFd> {
        self.fd.as_ref().map(AsRawFd::as_raw_fd)
    }

    fn signal(&self) {
        if let Some(fd) = self.fd() {
            eventfd::signal(fd);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eventfd::readable;

    #[test]
    fn the_descriptor_is_readable_exactly_while_events_wait() {
        let q = AsyncEvents::new();
        let fd = q.fd().expect("an eventfd");
        assert!(!readable(fd));
        q.push([AsyncEvent::PortActive(1), AsyncEvent::CqError]);
        assert!(readable(fd));
        assert_eq!(q.pop(), Some(AsyncEvent::PortActive(1)));
        assert!(readable(fd), "one event is left");
        assert_eq!(q.pop(), Some(AsyncEvent::CqError));
        assert!(!readable(fd));
        assert_eq!(q.pop(), None);
    }
}
