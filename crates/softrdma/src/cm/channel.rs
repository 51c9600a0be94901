//! The event channel (`struct rdma_event_channel`): a queue of [`CmEvent`]s behind a lock
//! with an eventfd readable while events wait, and the wait for the next event, which
//! first receives for it on this thread ([`CM_SPIN`]).
//!
//! Calls `fd` and the registry's devices (`registry::cm_devices`, `release_pollers`).
//! Locks: `CmEvents` (the queue; a leaf), and, while spinning, whatever a receive pass of
//! the device takes (with none of the CM's held).

use super::objects::{Chan, CmEvent};
use super::registry::{cm_devices, release_pollers};
use crate::error::Error;
use crate::error::Result;
use crate::eventfd;
use crate::sync::{Lock, Rank};
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Where an ID's events go (`struct rdma_event_channel`).
#[derive(Debug, Clone)]
pub struct EventChannel {
    pub(super) inner: Arc<Chan>,
}

impl Chan {
    pub(super) fn push(&self, ev: CmEvent) {
        let mut q = self.q.lock();
        q.push_back(ev);
        self.queued.store(q.len(), Ordering::Release);
        drop(q);
        eventfd::signal(self.efd.as_raw_fd());
    }
}

impl EventChannel {
    /// The oldest event, if any (the caller has read the descriptor). The descriptor is
    /// made readable again while more wait, so that a caller that polls it before each
    /// `rdma_get_cm_event` finds them all.
    pub(super) fn pop(&self) -> Option<CmEvent> {
        let mut q = self.inner.q.lock();
        let ev = q.pop_front();
        self.inner.queued.store(q.len(), Ordering::Release);
        // The descriptor may be blocking: it is read only when readable, and under the
        // queue's lock, so that two threads never both read one count.
        let fd = self.fd();
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no wait.
        if unsafe { libc::poll(&mut p, 1, 0) } == 1 {
            eventfd::drain(fd);
        }
        if !q.is_empty() {
            eventfd::signal(self.inner.efd.as_raw_fd());
        }
        ev
    }

    /// A new channel (`rdma_create_event_channel`).
    pub fn new() -> Result<Self> {
        Ok(Self {
            inner: Arc::new(Chan {
                q: Lock::new(Rank::CmEvents, VecDeque::new()),
                queued: std::sync::atomic::AtomicUsize::new(0),
                // Blocking, as librdmacm's descriptor is: a program that wants
                // rdma_get_cm_event not to wait sets O_NONBLOCK itself (libfabric does),
                // and the C layer reads that flag. Drained only when poll says it is
                // readable (see `pop`).
                efd: eventfd::new(false).map_err(Error::io("rdma_create_event_channel"))?,
            }),
        })
    }

    /// The descriptor that is readable while events wait (for `poll(2)`).
    pub fn fd(&self) -> RawFd {
        self.inner.efd.as_raw_fd()
    }

    /// The next event if one waits, without waiting, and without a system call when none
    /// does (for a thread that checks for events between polls of a CQ, as a progress
    /// loop does each turn).
    pub fn try_event(&self) -> Option<CmEvent> {
        if self.inner.queued.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.pop()
    }

    /// The next event (`rdma_get_cm_event`), waiting at most `timeout` (`None`: for ever).
    pub fn get_event(&self, timeout: Option<Duration>) -> Option<CmEvent> {
        let end = timeout.map(|t| std::time::Instant::now() + t);
        loop {
            if let Some(ev) = self.pop() {
                return Some(ev);
            }
            let left = match end {
                Some(e) => {
                    let now = std::time::Instant::now();
                    if now >= e {
                        return None;
                    }
                    Some(e - now)
                }
                None => None,
            };
            if left != Some(Duration::ZERO) {
                if let Some(ev) = self.spin(left) {
                    return Some(ev);
                }
                release_pollers();
            }
            eventfd::wait_readable(&[self.fd()], left);
        }
    }
}

/// How long a thread that waits for a CM event receives for it itself before it blocks
/// (see [`EventChannel::spin`]): the turn of a handshake on one host (a REQ's REP, a REP's
/// RTU), which then costs neither the progress thread's wake-up nor this thread's.
pub(super) const CM_SPIN: Duration = Duration::from_micros(100);

impl EventChannel {
    /// Receives on each CM device's socket for up to [`CM_SPIN`] (at most `left`), as a
    /// busy CQ poller does: the MAD that brings the event is then read on this thread, the
    /// agent runs here on it (QP1's inline consumer), and the event is taken without a
    /// wake-up. An event that does not come within the spin is waited for as before.
    pub(super) fn spin(&self, left: Option<Duration>) -> Option<CmEvent> {
        let devs = cm_devices();
        if devs.is_empty() {
            return None;
        }
        let until = std::time::Instant::now() + left.map_or(CM_SPIN, |l| l.min(CM_SPIN));
        loop {
            for d in &devs {
                d.poll_socket();
            }
            if self.inner.queued.load(Ordering::Acquire) > 0 {
                if let Some(ev) = self.pop() {
                    return Some(ev);
                }
            }
            if std::time::Instant::now() >= until {
                return None;
            }
            std::hint::spin_loop();
        }
    }
}
