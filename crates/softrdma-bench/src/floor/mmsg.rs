//! The baselines' socket calls beyond `std`: `sendmmsg` of GSO sends with a UDP_SEGMENT
//! control message, `recvmmsg` of GRO receives, and `recvmsg` with the sender's address and
//! the UDP_GRO segment size.
//!
//! softrdma's datapath has its own (`datapath/batch/`, `datapath/socket.rs`), private to
//! that crate. This copy is separate on purpose: the bench measures the kernel's floor with
//! the least code that reaches it, so that the floor does not move when softrdma's datapath
//! does, and this crate does not depend on `softrdma`. Calls only libc and nix.

use nix::sys::socket::MsgFlags;
use std::net::UdpSocket;

/// One receive the way softrdma's device makes it: `recvmsg` with room for the sender's
/// address and the UDP_GRO segment size (`cmsg`: space for one `int`). Returns the bytes,
/// the sender, and the segment size (0 if not joined).
#[allow(clippy::ptr_arg)] // nix's `recvmsg` takes the control buffer as a `Vec`.
pub(super) fn recvmsg_roce(
    s: &UdpSocket,
    buf: &mut [u8],
    cmsg: &mut Vec<u8>,
    flags: MsgFlags,
) -> nix::Result<(usize, Option<nix::sys::socket::SockaddrStorage>, usize)> {
    use nix::sys::socket::{ControlMessageOwned, SockaddrStorage, recvmsg};
    let mut iov = [std::io::IoSliceMut::new(buf)];
    let m = recvmsg::<SockaddrStorage>(
        std::os::fd::AsRawFd::as_raw_fd(s),
        &mut iov,
        Some(cmsg),
        flags,
    )?;
    let mut seg = 0;
    for c in m.cmsgs()? {
        if let ControlMessageOwned::UdpGroSegments(n) = c {
            seg = n.max(0) as usize;
        }
    }
    Ok((m.bytes, m.address, seg))
}

/// GSO sends per `sendmmsg` (and GRO receives per `recvmmsg`) in the plain blaster.
const MMSG: usize = 8;
/// `CMSG_SPACE` of a `u16` (UDP_SEGMENT's value), rounded up as the kernel aligns it.
const CMSG_U16: usize = 24;

/// MMSG GSO sends of the same buffer, ready for one `sendmmsg` each time.
pub(super) struct SendMmsg {
    iov: Box<[nix::libc::iovec; MMSG]>,
    cmsg: Box<[[u64; CMSG_U16 / 8]; MMSG]>,
    hdrs: Box<[nix::libc::mmsghdr; MMSG]>,
}

// SAFETY: the raw pointers point into the boxes the struct owns (and the caller's buffer,
// which outlives every send); nothing is shared.
unsafe impl Send for SendMmsg {}

impl SendMmsg {
    /// MMSG sends of all of `buf` each, cut into `seg`-byte GSO segments.
    pub(super) fn new(buf: &[u8], seg: u16) -> Self {
        let mut me = Self {
            iov: Box::new(
                [nix::libc::iovec {
                    iov_base: buf.as_ptr() as *mut _,
                    iov_len: buf.len(),
                }; MMSG],
            ),
            cmsg: Box::new([[0u64; CMSG_U16 / 8]; MMSG]),
            hdrs: Box::new(zeroed_hdrs()),
        };
        for i in 0..MMSG {
            let p = me.cmsg[i].as_mut_ptr().cast::<nix::libc::cmsghdr>();
            // SAFETY: the slot is 24 bytes, 8-aligned: room for a cmsghdr (16 bytes) and the
            // u16 after it.
            unsafe {
                (*p).cmsg_level = nix::libc::SOL_UDP;
                (*p).cmsg_type = nix::libc::UDP_SEGMENT;
                (*p).cmsg_len = nix::libc::CMSG_LEN(2) as _;
                *nix::libc::CMSG_DATA(p).cast::<u16>() = seg;
            }
            let h = &mut me.hdrs[i].msg_hdr;
            h.msg_iov = &mut me.iov[i];
            h.msg_iovlen = 1;
            h.msg_control = p.cast();
            h.msg_controllen = CMSG_U16 as _;
        }
        me
    }

    /// One `sendmmsg`; the messages sent.
    pub(super) fn send(&mut self, s: &UdpSocket) -> std::io::Result<usize> {
        let fd = std::os::fd::AsRawFd::as_raw_fd(s);
        // SAFETY: every header points at an iovec and control buffer this struct owns, and
        // the iovecs at the buffer given to `new`, which the caller keeps alive.
        let n = unsafe { nix::libc::sendmmsg(fd, self.hdrs.as_mut_ptr(), MMSG as u32, 0) };
        if n < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }
}

/// Zeroed message headers.
fn zeroed_hdrs() -> [nix::libc::mmsghdr; MMSG] {
    // SAFETY: mmsghdr is plain data, for which all zeros is a valid (empty) value.
    unsafe { std::mem::zeroed() }
}

/// MMSG receive buffers of 64 KiB (a GRO super-datagram each), for one `recvmmsg` each time.
pub(super) struct RecvMmsg {
    bufs: Vec<u8>,
    iov: Box<[nix::libc::iovec; MMSG]>,
    hdrs: Box<[nix::libc::mmsghdr; MMSG]>,
}

impl RecvMmsg {
    /// MMSG empty slots.
    pub(super) fn new() -> Self {
        let mut bufs = vec![0u8; MMSG * 65536];
        let base = bufs.as_mut_ptr();
        let iov = Box::new(std::array::from_fn(|i| nix::libc::iovec {
            // SAFETY: `i * 65536` is inside `bufs`, which has MMSG slots of 65536 bytes.
            iov_base: unsafe { base.add(i * 65536) }.cast(),
            iov_len: 65536,
        }));
        let mut me = Self {
            bufs,
            iov,
            hdrs: Box::new(zeroed_hdrs()),
        };
        for i in 0..MMSG {
            me.hdrs[i].msg_hdr.msg_iov = &mut me.iov[i];
            me.hdrs[i].msg_hdr.msg_iovlen = 1;
        }
        me
    }

    /// One blocking `recvmmsg` (the socket's read timeout bounds it): the bytes received in
    /// datagrams of more than one byte, and whether the 1-byte end marker came.
    pub(super) fn recv(&mut self, s: &UdpSocket) -> std::io::Result<(usize, bool)> {
        let fd = std::os::fd::AsRawFd::as_raw_fd(s);
        // SAFETY: every header points at an iovec this struct owns, and each iovec at a
        // 64 KiB slot of `self.bufs`, which lives as long as `self`.
        let n = unsafe {
            nix::libc::recvmmsg(
                fd,
                self.hdrs.as_mut_ptr(),
                MMSG as u32,
                nix::libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        debug_assert!(!self.bufs.is_empty());
        let lens = self.hdrs[..n as usize].iter().map(|h| h.msg_len as usize);
        let end = lens.clone().any(|l| l == 1);
        Ok((lens.filter(|&l| l > 1).sum(), end))
    }
}
