//! The descriptors the CM sleeps on: eventfds (an event channel's, the CM thread's
//! wake-up) and `poll(2)` over them. System calls only; no lock.

use crate::error::{Error, Result};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

pub(super) fn eventfd(verb: &'static str, flags: libc::c_int) -> Result<OwnedFd> {
    // SAFETY: eventfd takes no pointers; the result is checked before use.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | flags) };
    if fd < 0 {
        return Err(Error::io(verb)(std::io::Error::last_os_error()));
    }
    // SAFETY: `fd` is a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Waits until one of `fds` is readable or `timeout` passes (`None`: for ever).
pub(super) fn wait_readable(fds: &[RawFd], timeout: Option<Duration>) {
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = timeout.map_or(-1, |t| t.as_millis().clamp(1, i32::MAX as u128) as i32);
    // SAFETY: `p` holds `p.len()` valid pollfd entries.
    unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, ms) };
}

pub(super) fn drain_eventfd(fd: RawFd) {
    let mut b = [0u8; 8];
    // SAFETY: reads at most 8 bytes into `b`; the descriptor is non-blocking, or poll
    // just said it is readable.
    unsafe { libc::read(fd, b.as_mut_ptr().cast(), 8) };
}

/// Adds one to an eventfd (which wakes its reader).
pub(super) fn write_eventfd(fd: &OwnedFd) {
    let one = 1u64.to_ne_bytes();
    // SAFETY: an eventfd takes an 8-byte write from a valid buffer.
    unsafe { libc::write(fd.as_raw_fd(), one.as_ptr().cast(), 8) };
}
