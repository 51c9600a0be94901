//! eventfd(2), the counter every wake-up in the crate goes through (completion channels,
//! the async event queue, the CM's channels and thread, the same-host rings), and poll(2)
//! on such descriptors. System calls only: no lock, no state.
//!
//! Each call is one system call whose failure the callers cannot act on beyond what they
//! already do (a full counter means a wake-up is pending; an empty one means there was
//! none), so only [`new`] reports errors.

use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// A new eventfd, close-on-exec, with a count of 0; `nonblocking` as `EFD_NONBLOCK`.
/// Blocking ones are those a C program may read itself (a kernel device's channels are
/// blocking, and callers set `O_NONBLOCK` if they want it).
pub(crate) fn new(nonblocking: bool) -> std::io::Result<OwnedFd> {
    let flags = libc::EFD_CLOEXEC | if nonblocking { libc::EFD_NONBLOCK } else { 0 };
    // SAFETY: eventfd takes no pointers; the result is checked before use.
    let fd = unsafe { libc::eventfd(0, flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds one to the counter, which makes `fd` readable and wakes its reader. A full
/// counter (`EAGAIN`) has a wake-up pending already.
pub(crate) fn signal(fd: RawFd) {
    let one = 1u64.to_ne_bytes();
    // SAFETY: an eventfd takes an 8-byte write from a valid buffer.
    unsafe { libc::write(fd, one.as_ptr().cast(), one.len()) };
}

/// Reads the counter back to 0 and gives what it held (0 when nothing was read). The
/// caller makes sure this does not block: `fd` is non-blocking, or poll said readable.
pub(crate) fn drain(fd: RawFd) -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: reads at most 8 bytes into `b`.
    let n = unsafe { libc::read(fd, b.as_mut_ptr().cast(), b.len()) };
    if n == 8 { u64::from_ne_bytes(b) } else { 0 }
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

/// Waits until one of `fds` is readable or `timeout` passes (`None`: for ever).
pub(crate) fn wait_readable(fds: &[RawFd], timeout: Option<Duration>) {
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

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    #[test]
    fn a_signal_makes_it_readable_until_drained() {
        let fd = super::new(true).unwrap();
        let fd = fd.as_raw_fd();
        assert!(!super::readable(fd));
        assert_eq!(super::drain(fd), 0, "non-blocking and empty");
        super::signal(fd);
        super::signal(fd);
        assert!(super::readable(fd));
        super::wait_readable(&[fd], None);
        assert_eq!(super::drain(fd), 2);
        assert!(!super::readable(fd));
    }
}
