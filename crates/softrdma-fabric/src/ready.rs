//! The descriptor of a queue opened with `FI_WAIT_FD` (a CQ's, an EQ's): an eventfd that
//! polls readable exactly while the queue holds entries, so that a program sleeps on it in
//! `poll(2)` beside its other descriptors.
//!
//! Threads and locks: none of its own; its queue sets it under the queue's lock after each
//! change that may have filled or emptied it, so the two never disagree for long.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// An eventfd whose count is 1 while its queue holds entries, 0 while it is empty.
pub(crate) struct Ready(OwnedFd);

impl Ready {
    /// A new one, not readable.
    pub(crate) fn new() -> std::io::Result<Self> {
        // SAFETY: eventfd has no memory preconditions; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a descriptor eventfd just returned, owned by nothing else.
        Ok(Self(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// The descriptor, to poll for reading.
    pub(crate) fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// Makes it say whether the queue has entries (`pending`).
    pub(crate) fn set(&self, pending: bool) {
        // Reset to 0 (a non-blocking read of an eventfd at 0 fails with EAGAIN), then 1
        // if entries wait.
        let mut n = 0u64;
        // SAFETY: an 8-byte read into `n` from its own eventfd.
        unsafe { libc::read(self.fd(), (&raw mut n).cast(), 8) };
        if pending {
            let one = 1u64;
            // SAFETY: an 8-byte write from `one` to its own eventfd.
            unsafe { libc::write(self.fd(), (&raw const one).cast(), 8) };
        }
    }
}
