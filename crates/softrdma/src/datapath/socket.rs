//! The UDP driver's system calls: `recvmmsg(2)`, which moves many datagrams per call, with
//! UDP GRO (one receive of many coalesced segments, `UDP_GRO`); socket options; and the
//! transmit-timestamp probes that learn a connected socket's IPv4 identification (see
//! [`super::tx`]). std and mio offer one datagram per call; this is the FFI they lack, kept
//! small. Sending is [`super::batch`]'s.

use std::mem::MaybeUninit;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// Datagrams per system call.
pub const BATCH: usize = 64;
/// Receive slots per system call; each can hold a GRO super-datagram.
pub const RX_BATCH: usize = 16;
/// Room for one received datagram: with GRO, up to 64 KiB of coalesced segments.
pub const SLOT: usize = 65536;
/// Most segments in one GSO send (the kernel's `UDP_MAX_SEGMENTS`).
pub(crate) const GSO_MAX_SEGS: usize = 64;
/// Most bytes in one GSO send (a UDP datagram's limit, minus room for headers).
pub(crate) const GSO_MAX_BYTES: usize = 65000;
pub(crate) const SOL_UDP: i32 = 17;
pub(crate) const UDP_SEGMENT: i32 = 103;
const UDP_GRO: i32 = 104;
/// Control-message space for one `u16` or `int`.
pub(crate) const CMSG_LEN: usize = 32;
/// Pieces (iovecs) per send call: a packet with a lent payload is up to three (headers,
/// payload, pad and ICRC), and one call carries whole messages only. (The kernel allows
/// 1024 per message, `UIO_MAXIOV`.)
pub(crate) const IOV_PER_CALL: usize = 1024;

/// Sets an `int` socket option.
pub(crate) fn set_int_opt(fd: RawFd, level: i32, name: i32, value: i32) -> std::io::Result<()> {
    // SAFETY: a valid socket descriptor and a pointer to an int that outlives the call.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Asks the kernel to coalesce received segments (`UDP_GRO`); false if it cannot.
pub fn enable_gro(fd: RawFd) -> bool {
    set_int_opt(fd, SOL_UDP, UDP_GRO, 1).is_ok()
}

pub(crate) fn to_storage(a: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data for which all zeros is valid.
    let mut ss: libc::sockaddr_storage = unsafe { MaybeUninit::zeroed().assume_init() };
    let len = match a {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*v4.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

fn from_storage(ss: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match i32::from(ss.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let sin: &libc::sockaddr_in = unsafe { &*(ss as *const libc::sockaddr_storage).cast() };
            let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            Some(SocketAddr::new(IpAddr::V4(ip), u16::from_be(sin.sin_port)))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let sin6: &libc::sockaddr_in6 =
                unsafe { &*(ss as *const libc::sockaddr_storage).cast() };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::V6(std::net::SocketAddrV6::new(
                ip,
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// Receive buffers for [`recv_batch`].
pub struct RecvBatch {
    bufs: Vec<u8>,
    addrs: Vec<libc::sockaddr_storage>,
    lens: Vec<usize>,
    truncated: Vec<bool>,
    cmsgs: Vec<[u64; CMSG_LEN / 8]>,
    segs: Vec<usize>,
}

impl Default for RecvBatch {
    fn default() -> Self {
        Self {
            bufs: vec![0; RX_BATCH * SLOT],
            // SAFETY: all-zero sockaddr_storage is valid.
            addrs: vec![unsafe { MaybeUninit::zeroed().assume_init() }; RX_BATCH],
            lens: vec![0; RX_BATCH],
            truncated: vec![false; RX_BATCH],
            cmsgs: vec![[0; CMSG_LEN / 8]; RX_BATCH],
            segs: vec![0; RX_BATCH],
        }
    }
}

impl RecvBatch {
    #[cfg(test)]
    /// Puts `data` from `from` in slot `i`, as a receive would: a driver that is not a
    /// socket fills the batch with this. `data` longer than a slot is cut short.
    pub(crate) fn set(&mut self, i: usize, data: &[u8], from: SocketAddr) {
        let n = data.len().min(SLOT);
        self.bufs[i * SLOT..i * SLOT + n].copy_from_slice(&data[..n]);
        self.lens[i] = n;
        self.truncated[i] = n < data.len();
        self.addrs[i] = to_storage(from).0;
        self.segs[i] = 0;
    }

    /// Fills slot `i` as a receive from `from` would: `write(buf)` puts the packet at the
    /// start of the slot's buffer and says how long it is (the same-host ring's entries
    /// come in this way, each copied out of shared memory before anything reads it).
    pub(crate) fn fill(
        &mut self,
        i: usize,
        from: SocketAddr,
        write: impl FnOnce(&mut [u8]) -> usize,
    ) {
        let n = write(&mut self.bufs[i * SLOT..(i + 1) * SLOT]).min(SLOT);
        self.lens[i] = n;
        self.truncated[i] = false;
        self.addrs[i] = to_storage(from).0;
        self.segs[i] = 0;
    }

    /// Datagram `i` of the last batch: its bytes, sender, whether it was cut short, and the
    /// segment size when GRO coalesced several datagrams into it (0 otherwise).
    pub fn get(&self, i: usize) -> (&[u8], Option<SocketAddr>, bool, usize) {
        (
            &self.bufs[i * SLOT..i * SLOT + self.lens[i]],
            from_storage(&self.addrs[i]),
            self.truncated[i],
            self.segs[i],
        )
    }
}

/// `recvmmsg(2)` of up to `want` datagrams into `msgs`, without blocking: how many came,
/// or -1 with errno set.
///
/// # Safety
/// The first `want` headers of `msgs` are initialised, and every buffer they point to stays
/// alive and unaliased for the call.
unsafe fn recv_mmsg(
    fd: RawFd,
    msgs: &mut [MaybeUninit<libc::mmsghdr>; RX_BATCH],
    want: usize,
) -> i32 {
    // SAFETY: the caller's promise; `want <= RX_BATCH` bounds the vector.
    unsafe {
        libc::recvmmsg(
            fd,
            msgs.as_mut_ptr().cast::<libc::mmsghdr>(),
            want.min(RX_BATCH) as u32,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    }
}

/// Receives up to `want` (at most [`RX_BATCH`]) datagrams without blocking; returns how
/// many. Asking for one when one is expected saves the kernel a second, empty, look at the
/// queue: a quarter of a microsecond of a ping-pong's half round trip on loopback.
pub fn recv_batch(fd: RawFd, b: &mut RecvBatch, want: usize) -> std::io::Result<usize> {
    let want = want.clamp(1, RX_BATCH);
    // Only the headers asked for are written: an empty poll should cost the system call and
    // little else, since a busy poller makes millions of them.
    let mut iov = [const { MaybeUninit::<libc::iovec>::uninit() }; RX_BATCH];
    let mut msgs = [const { MaybeUninit::<libc::mmsghdr>::uninit() }; RX_BATCH];
    for i in 0..want {
        let io = iov[i].write(libc::iovec {
            iov_base: b.bufs[i * SLOT..].as_mut_ptr().cast(),
            iov_len: SLOT,
        });
        // SAFETY: all-zero mmsghdr is valid; every pointer set below points into `iov`,
        // `b.addrs` and `b.cmsgs`, which outlive the call.
        let m = msgs[i].write(unsafe { MaybeUninit::zeroed().assume_init() });
        m.msg_hdr.msg_name = (&mut b.addrs[i] as *mut libc::sockaddr_storage).cast();
        m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        m.msg_hdr.msg_iov = io;
        m.msg_hdr.msg_iovlen = 1;
        m.msg_hdr.msg_control = b.cmsgs[i].as_mut_ptr().cast();
        m.msg_hdr.msg_controllen = CMSG_LEN;
    }
    let n = if want == 1 {
        // One datagram (a ping-pong's turn) comes through `recvmsg`, which spares
        // `recvmmsg`'s loop and copies of the message vector: about 50 ns a call.
        // SAFETY: the first header was written above and its buffers stay alive for the call.
        let r = unsafe {
            let m = msgs[0].assume_init_mut();
            let r = libc::recvmsg(fd, &mut m.msg_hdr, libc::MSG_DONTWAIT);
            if r >= 0 {
                m.msg_len = r as u32;
            }
            r
        };
        if r < 0 { r as i32 } else { 1 }
    } else {
        // SAFETY: the first `want` headers of `msgs` were written above and their buffers
        // stay alive for the call.
        unsafe { recv_mmsg(fd, &mut msgs, want) }
    };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    for (i, m) in msgs.iter().take(n as usize).enumerate() {
        // SAFETY: `n <= want`, and the first `want` headers were written.
        let m = unsafe { m.assume_init_ref() };
        b.lens[i] = (m.msg_len as usize).min(SLOT);
        b.truncated[i] = m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
        b.segs[i] = 0;
        // SAFETY: the kernel filled `msg_control` with `msg_controllen` bytes of control
        // messages; the CMSG macros walk exactly those.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&m.msg_hdr);
            while !c.is_null() {
                if (*c).cmsg_level == SOL_UDP && (*c).cmsg_type == UDP_GRO {
                    let v = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<i32>());
                    b.segs[i] = v.max(0) as usize;
                }
                c = libc::CMSG_NXTHDR(&m.msg_hdr, c);
            }
        }
    }
    Ok(n as usize)
}

/// Bytes of the sender's address in front of each datagram on a forwarding socket (see
/// [`send_framed`]): the start of a `sockaddr_storage`, room for a `sockaddr_in6`.
pub(crate) const FRAME: usize = 32;

/// Sends the datagram `data` that came from `from` on `fd`, a local datagram socket, framed
/// as [`recv_framed`] reads it: the address as the kernel would have written it, then the
/// bytes. Never blocks; an error (a full queue: the reader is slow or gone) is the caller's
/// to count.
pub(crate) fn send_framed(fd: RawFd, from: SocketAddr, data: &[u8]) -> std::io::Result<()> {
    let (ss, _) = to_storage(from);
    let iov = [
        libc::iovec {
            iov_base: (&ss as *const libc::sockaddr_storage).cast_mut().cast(),
            iov_len: FRAME,
        },
        libc::iovec {
            iov_base: data.as_ptr().cast_mut().cast(),
            iov_len: data.len(),
        },
    ];
    // SAFETY: all-zero msghdr is valid; it points at `iov`, whose buffers are only read and
    // outlive the call.
    let r = unsafe {
        let mut m: libc::msghdr = MaybeUninit::zeroed().assume_init();
        m.msg_iov = iov.as_ptr().cast_mut();
        m.msg_iovlen = 2;
        libc::sendmsg(fd, &m, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
    };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// [`recv_batch`] for a forwarding socket: each datagram carries its sender's address in
/// front ([`send_framed`]), which lands where a UDP receive puts the sender's. A datagram
/// shorter than the frame, or framing another family, comes out with no sender (the device
/// counts it malformed).
pub fn recv_framed(fd: RawFd, b: &mut RecvBatch, want: usize) -> std::io::Result<usize> {
    let want = want.clamp(1, RX_BATCH);
    let mut iov = [const { MaybeUninit::<[libc::iovec; 2]>::uninit() }; RX_BATCH];
    let mut msgs = [const { MaybeUninit::<libc::mmsghdr>::uninit() }; RX_BATCH];
    for i in 0..want {
        let io = iov[i].write([
            libc::iovec {
                iov_base: (&mut b.addrs[i] as *mut libc::sockaddr_storage).cast(),
                iov_len: FRAME,
            },
            libc::iovec {
                iov_base: b.bufs[i * SLOT..].as_mut_ptr().cast(),
                iov_len: SLOT,
            },
        ]);
        // SAFETY: all-zero mmsghdr is valid; its iovecs point into `b`, which outlives the
        // call.
        let m = msgs[i].write(unsafe { MaybeUninit::zeroed().assume_init() });
        m.msg_hdr.msg_iov = io.as_mut_ptr();
        m.msg_hdr.msg_iovlen = 2;
    }
    // SAFETY: the first `want` headers were written above and their buffers stay alive.
    let n = unsafe { recv_mmsg(fd, &mut msgs, want) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    for (i, m) in msgs.iter().take(n as usize).enumerate() {
        // SAFETY: `n <= want`, and the first `want` headers were written.
        let m = unsafe { m.assume_init_ref() };
        let len = m.msg_len as usize;
        if len < FRAME {
            b.addrs[i].ss_family = 0;
        }
        b.lens[i] = len.saturating_sub(FRAME).min(SLOT);
        b.truncated[i] = m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
        b.segs[i] = 0;
    }
    Ok(n as usize)
}

/// `SOF_TIMESTAMPING_TX_SCHED`: a transmit timestamp when the packet reaches the device's
/// queue, which every device has (loopback included), unlike driver timestamps.
const SOF_TIMESTAMPING_TX_SCHED: u32 = 1 << 8;

/// Sends a probe of `len` zero bytes from `fd` to `dst` (as GSO segments of `seg` bytes when
/// `seg > 0`) and asks for its transmit timestamp, which brings the packet back, headers and
/// all, on `fd`'s error queue: see [`sent_ipv4_ident`].
pub fn send_probe(fd: RawFd, dst: SocketAddr, len: usize, seg: u16) -> std::io::Result<()> {
    let mut data = [0u8; 64];
    let len = len.min(data.len());
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: len,
    };
    let (mut name, namelen) = to_storage(dst);
    let mut ctl = [0u64; 8];
    // SAFETY: all-zero msghdr is valid; its pointers are set to locals that outlive the call.
    let mut m: libc::msghdr = unsafe { MaybeUninit::zeroed().assume_init() };
    m.msg_name = (&mut name as *mut libc::sockaddr_storage).cast();
    m.msg_namelen = namelen;
    m.msg_iov = &mut iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl.as_mut_ptr().cast();
    // SAFETY: two control messages (an int and a u16) fit in `ctl`'s 64 bytes; the length is
    // set to both before CMSG_NXTHDR walks to the second, and every write stays inside `ctl`.
    unsafe {
        let one = libc::CMSG_SPACE(4) as usize;
        m.msg_controllen = one
            + if seg > 0 {
                libc::CMSG_SPACE(2) as usize
            } else {
                0
            };
        let c = libc::CMSG_FIRSTHDR(&m);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SO_TIMESTAMPING;
        (*c).cmsg_len = libc::CMSG_LEN(4) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u32>(), SOF_TIMESTAMPING_TX_SCHED);
        if seg > 0 {
            let c = libc::CMSG_NXTHDR(&m, c);
            (*c).cmsg_level = SOL_UDP;
            (*c).cmsg_type = UDP_SEGMENT;
            (*c).cmsg_len = libc::CMSG_LEN(2) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg);
        }
    }
    // SAFETY: `m` points to live buffers for the duration of the call.
    if unsafe { libc::sendmsg(fd, &m, 0) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The IPv4 identification of the packet that `fd` sent from `src` to `dst` with `len` bytes
/// of UDP payload and a transmit timestamp request ([`send_probe`]): read from the copy the
/// kernel queues on `fd`'s error queue. Waits at most `timeout` for it.
pub fn sent_ipv4_ident(
    fd: RawFd,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    len: usize,
    timeout: std::time::Duration,
) -> std::io::Result<u16> {
    let deadline = std::time::Instant::now() + timeout;
    let mut buf = [0u8; 256];
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let n = sent_copy(fd, &mut buf, left)?;
        if let Some(at) = find_ipv4(&buf[..n], src, dst, 20 + 8 + len) {
            return Ok(u16::from_be_bytes([buf[at + 4], buf[at + 5]]));
        }
        // Something else on the error queue (an older probe's copy): look at the next.
    }
}

/// The next copy of a sent packet on `fd`'s error queue (what a transmit timestamp brings
/// back: the packet from its link-layer header on), into `buf`; its length, cut to `buf`'s.
/// Waits at most `timeout`.
pub fn sent_copy(
    fd: RawFd,
    buf: &mut [u8],
    timeout: std::time::Duration,
) -> std::io::Result<usize> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let mut p = libc::pollfd {
            fd,
            events: 0, // POLLERR is always reported
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut p, 1, left.as_millis().min(1000) as i32) };
        if r <= 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "no copy of a sent packet came back on the error queue",
            ));
        }
        let mut ctl = [0u64; 32];
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: all-zero msghdr is valid; its pointers are set to buffers that outlive the
        // call.
        let mut m: libc::msghdr = unsafe { MaybeUninit::zeroed().assume_init() };
        m.msg_iov = &mut iov;
        m.msg_iovlen = 1;
        m.msg_control = ctl.as_mut_ptr().cast();
        m.msg_controllen = std::mem::size_of_val(&ctl);
        // SAFETY: `m` points to live buffers for the duration of the call.
        let n = unsafe { libc::recvmsg(fd, &mut m, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
        if n >= 0 {
            return Ok((n as usize).min(buf.len()));
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::WouldBlock || left.is_zero() {
            return Err(e);
        }
    }
}

/// Where the IPv4 header of a UDP packet from `src` to `dst`, `total` bytes long, starts in
/// `copy`. The link-layer header before it depends on the device (14 bytes on loopback and
/// Ethernet, none on a tun), so the header is found by what it must say.
pub fn find_ipv4(copy: &[u8], src: Ipv4Addr, dst: Ipv4Addr, total: usize) -> Option<usize> {
    (0..=copy.len().saturating_sub(20).min(64)).find(|&o| {
        let h = &copy[o..];
        h.len() >= 20
            && h[0] == 0x45
            && usize::from(u16::from_be_bytes([h[2], h[3]])) == total
            && h[9] == 17
            && h[12..16] == src.octets()
            && h[16..20] == dst.octets()
    })
}

/// Reads and drops every datagram waiting on `fd`.
pub fn discard(fd: RawFd) {
    let mut buf = [0u8; 64];
    for _ in 0..256 {
        // SAFETY: a valid descriptor and a buffer that outlives the call.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
        if n < 0 {
            break;
        }
    }
}

/// Descriptors that a child this process forks must not keep: a child that holds the
/// device's name would keep every member waiting on a listener nobody accepts on, one
/// that holds the port would keep its datagrams from whoever owns the device next, and one
/// that holds a same-host ring's connection would hide its parent's death from the peer.
/// (A child that execs closes them anyway: they are close-on-exec.) A fixed table, since
/// the fork handler may take no lock: a process with more than this many such
/// descriptors leaves the rest to its children.
static FORGET: [std::sync::atomic::AtomicI32; 1024] =
    [const { std::sync::atomic::AtomicI32::new(-1) }; 1024];

/// A descriptor that a forked child does not keep: in the child it becomes `/dev/null`
/// (see [`FORGET`]), so that the number stays taken and closing it later closes nothing
/// else.
pub(crate) struct Forgotten(pub(crate) OwnedFd);

impl Forgotten {
    pub(crate) fn new(fd: OwnedFd) -> Self {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            extern "C" fn child() {
                // SAFETY: open, dup2 and close are async-signal-safe, as a fork child
                // handler must be; the path is a NUL-terminated literal.
                unsafe {
                    let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
                    if null < 0 {
                        return;
                    }
                    for s in &FORGET {
                        let fd = s.load(std::sync::atomic::Ordering::Relaxed);
                        if fd >= 0 {
                            libc::dup3(null, fd, libc::O_CLOEXEC);
                        }
                    }
                    libc::close(null);
                }
            }
            // SAFETY: registers a handler that only replaces descriptors.
            unsafe { libc::pthread_atfork(None, None, Some(child)) };
        });
        let raw = fd.as_raw_fd();
        for s in &FORGET {
            if s.compare_exchange(
                -1,
                raw,
                std::sync::atomic::Ordering::Relaxed,
                std::sync::atomic::Ordering::Relaxed,
            )
            .is_ok()
            {
                break;
            }
        }
        Self(fd)
    }

    pub(crate) fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// Closes what descriptor `fd` refers to while keeping the number taken (it becomes
/// `/dev/null`): a thread that read the number just before reads nothing, never another
/// file opened meanwhile. A socket so closed leaves its SO_REUSEPORT group at once.
pub(crate) fn hollow(fd: RawFd) {
    // SAFETY: open, dup3 and close take no pointers but the NUL-terminated literal; dup3
    // replaces `fd` atomically, and a failure leaves it as it was.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        if null >= 0 {
            libc::dup3(null, fd, libc::O_CLOEXEC);
            libc::close(null);
        }
    }
}

impl AsRawFd for Forgotten {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

impl Drop for Forgotten {
    fn drop(&mut self) {
        let raw = self.0.as_raw_fd();
        for s in &FORGET {
            let _ = s.compare_exchange(
                raw,
                -1,
                std::sync::atomic::Ordering::Relaxed,
                std::sync::atomic::Ordering::Relaxed,
            );
        }
    }
}

/// The interface an IPv6 device at `addr` sends and joins its multicast groups on: its
/// scope for a link-local address, else the interface that holds the address (`::1` is on
/// `lo`), so that a group never follows the default route off the host; 0 (the kernel's
/// choice) when no interface holds it.
pub(crate) fn v6_interface(addr: std::net::Ipv6Addr, scope_id: u32) -> u32 {
    if scope_id != 0 {
        return scope_id;
    }
    let Ok(ifaces) = nix::ifaddrs::getifaddrs() else {
        return 0;
    };
    ifaces
        .filter(|i| {
            i.address
                .as_ref()
                .and_then(|a| a.as_sockaddr_in6())
                .is_some_and(|a| a.ip() == addr)
        })
        .find_map(|i| nix::net::if_::if_nametoindex(i.interface_name.as_str()).ok())
        .unwrap_or(0)
}
