//! The device's asynchronous events (`ibv_get_async_event`): a queue, and an eventfd that is
//! readable while the queue holds an event, so that C callers can `poll` and `epoll` the
//! context's `async_fd` as they do a kernel device's.
//!
//! The queue's lock is a leaf (taken last, after a QP's or a CQ's); the eventfd is written
//! and read without it held.

use softrdma_proto::AsyncEvent;
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Mutex;

/// Asynchronous events, oldest first, with a descriptor that says there are some.
pub(crate) struct AsyncEvents {
    queue: Mutex<VecDeque<AsyncEvent>>,
    fd: Option<OwnedFd>,
}

impl AsyncEvents {
    /// An empty queue. Without an eventfd (the process is out of descriptors) events are
    /// still queued; only the descriptor is missing, and `fd` says so.
    pub(crate) fn new() -> Self {
        // SAFETY: eventfd takes no pointers; the result is checked before use.
        // Blocking, as a kernel device's async_fd is (C callers set O_NONBLOCK themselves
        // if they want it); `pop` reads it only when poll says it is readable.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        Self {
            queue: Mutex::new(VecDeque::new()),
            // SAFETY: `fd` is a new descriptor that nothing else owns.
            fd: (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) }),
        }
    }

    /// Queues `events` and makes the descriptor readable.
    pub(crate) fn push(&self, events: impl IntoIterator<Item = AsyncEvent>) {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let before = q.len();
        q.extend(events);
        let added = q.len() > before;
        drop(q);
        if added {
            self.signal();
        }
    }

    /// The oldest event, if any. The descriptor stays readable while more remain.
    pub(crate) fn pop(&self) -> Option<AsyncEvent> {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let e = q.pop_front();
        // Drain the counter under the lock, then set it again if events remain: a push
        // that races this takes the lock after us and signals anew.
        if let Some(fd) = self.fd() {
            if readable(fd) {
                let mut v: u64 = 0;
                // SAFETY: reading 8 bytes into a valid u64 from our eventfd, which is
                // readable, so this does not block.
                unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
            }
        }
        let more = !q.is_empty();
        drop(q);
        if more {
            self.signal();
        }
        e
    }

    /// The descriptor that is readable while an event waits.
    pub(crate) fn fd(&self) -> Option<RawFd> {
        self.fd.as_ref().map(AsRawFd::as_raw_fd)
    }

    fn signal(&self) {
        if let Some(fd) = &self.fd {
            let one: u64 = 1;
            // SAFETY: writing 8 bytes from a valid u64 to our eventfd.
            unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
        }
    }
}

/// Whether `fd` can be read without blocking.
pub(crate) fn readable(fd: RawFd) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no wait.
    unsafe { libc::poll(&mut p, 1, 0) == 1 }
}

#[cfg(test)]
mod tests {
    use super::*;

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
