//! Batched datagram I/O: `recvmmsg(2)` and `sendmmsg(2)`, which move many packets per system
//! call, with UDP GSO (one send of many equal-sized segments, `UDP_SEGMENT`) and GRO (one
//! receive of many coalesced segments, `UDP_GRO`). std and mio offer one datagram per call;
//! this is the FFI they lack, kept small.

use std::mem::MaybeUninit;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::RawFd;

/// Datagrams per system call.
pub const BATCH: usize = 64;
/// Receive slots per system call; each can hold a GRO super-datagram.
pub const RX_BATCH: usize = 16;
/// Room for one received datagram: with GRO, up to 64 KiB of coalesced segments.
pub const SLOT: usize = 65536;
/// Most segments in one GSO send (the kernel's `UDP_MAX_SEGMENTS`).
const GSO_MAX_SEGS: usize = 64;
/// Most bytes in one GSO send (a UDP datagram's limit, minus room for headers).
const GSO_MAX_BYTES: usize = 65000;
const SOL_UDP: i32 = 17;
const UDP_SEGMENT: i32 = 103;
const UDP_GRO: i32 = 104;
/// Control-message space for one `u16` or `int`.
const CMSG_LEN: usize = 32;

/// `SOFTRDMA_GSO=always` uses GSO toward every destination, not only loopback.
fn gso_everywhere() -> bool {
    static ALWAYS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ALWAYS.get_or_init(|| std::env::var("SOFTRDMA_GSO").is_ok_and(|v| v == "always"))
}

/// Asks the kernel to coalesce received segments (`UDP_GRO`); false if it cannot.
pub fn enable_gro(fd: RawFd) -> bool {
    let one: i32 = 1;
    // SAFETY: a valid descriptor and a pointer to an int that outlives the call.
    unsafe {
        libc::setsockopt(
            fd,
            SOL_UDP,
            UDP_GRO,
            (&one as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        ) == 0
    }
}

fn to_storage(a: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
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
    // SAFETY: the first `want` headers of `msgs` were written above and their buffers stay
    // alive for the call.
    let n = unsafe {
        libc::recvmmsg(
            fd,
            msgs.as_mut_ptr().cast::<libc::mmsghdr>(),
            want as u32,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
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

/// One queued packet: where its bytes are in the batch, and where it goes.
#[derive(Clone, Copy)]
struct Queued {
    at: usize,
    len: usize,
    dst: SocketAddr,
}

/// Packets waiting to be sent together.
#[derive(Default)]
pub struct SendBatch {
    data: Vec<u8>,
    pkts: Vec<Queued>,
    /// Messages of the last flush, kept to spare allocations: (first packet, count, GSO size).
    groups: Vec<(usize, usize, usize)>,
}

impl SendBatch {
    /// Adds a packet.
    pub fn push(&mut self, bytes: &[u8], dst: SocketAddr) {
        let at = self.data.len();
        self.data.extend_from_slice(bytes);
        self.pkts.push(Queued {
            at,
            len: bytes.len(),
            dst,
        });
    }

    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.pkts.is_empty()
    }

    /// The first byte of every queued packet, in order.
    pub fn first_bytes(&self) -> impl Iterator<Item = u8> + '_ {
        self.pkts.iter().map(|p| self.data[p.at])
    }

    /// Moves every packet of `other` to the end of this batch.
    pub fn append(&mut self, other: &mut SendBatch) {
        let base = self.data.len();
        self.data.extend_from_slice(&other.data);
        self.pkts.extend(other.pkts.drain(..).map(|mut p| {
            p.at += base;
            p
        }));
        other.data.clear();
    }

    /// Sends everything in as few calls as the kernel allows: runs of equal-sized packets to
    /// one destination go as single GSO sends (the last of a run may be shorter), the rest
    /// as individual datagrams, all through `sendmmsg`. Returns (sent, failed).
    pub fn flush(&mut self, fd: RawFd, gso: &std::sync::atomic::AtomicBool) -> (usize, usize) {
        use std::sync::atomic::Ordering;
        let use_gso = gso.load(Ordering::Relaxed);
        let mut groups = std::mem::take(&mut self.groups);
        groups.clear();
        let mut i = 0;
        while i < self.pkts.len() {
            let p = self.pkts[i];
            let mut j = i + 1;
            let mut bytes = p.len;
            // GSO only where the segments stay in the kernel (loopback): through a bridge to
            // a VM's tap, Linux 6.1 delivered only the first segment of each burst.
            let gso_here = use_gso && (p.dst.ip().is_loopback() || gso_everywhere());
            while gso_here && j < self.pkts.len() && j - i < GSO_MAX_SEGS {
                let q = &self.pkts[j];
                let prev = &self.pkts[j - 1];
                if q.dst != p.dst || q.at != prev.at + prev.len || q.len > p.len {
                    break;
                }
                if bytes + q.len > GSO_MAX_BYTES {
                    break;
                }
                bytes += q.len;
                j += 1;
                if q.len < p.len {
                    break; // only the last segment may be shorter
                }
            }
            groups.push((i, j - i, if j - i > 1 { p.len } else { 0 }));
            i = j;
        }
        let (mut sent, mut failed) = (0, 0);
        let mut g = 0;
        while g < groups.len() {
            let chunk = &groups[g..(g + BATCH).min(groups.len())];
            match self.send_chunk(fd, chunk) {
                Ok(n) => {
                    sent += chunk.iter().take(n).map(|c| c.1).sum::<usize>();
                    g += n;
                }
                Err(e) => {
                    let no_gso = matches!(
                        e.raw_os_error(),
                        Some(libc::EINVAL | libc::EIO | libc::ENOPROTOOPT)
                    );
                    if chunk[0].2 > 0 && no_gso {
                        // No GSO here: send the rest one datagram at a time from now on.
                        gso.store(false, Ordering::Relaxed);
                        let first = chunk[0].0;
                        let rest: Vec<Queued> = self.pkts.drain(first..).collect();
                        let data = std::mem::take(&mut self.data);
                        self.pkts.clear();
                        for q in rest {
                            self.push(&data[q.at..q.at + q.len], q.dst);
                        }
                        self.groups = groups;
                        let (s2, f2) = self.flush(fd, gso);
                        return (sent + s2, failed + f2);
                    }
                    // The first message could not go (a full buffer, an unreachable address):
                    // drop it; retransmission recovers what matters.
                    failed += chunk[0].1;
                    g += 1;
                }
            }
        }
        self.data.clear();
        self.pkts.clear();
        self.groups = groups;
        (sent, failed)
    }

    /// One `sendmmsg` of `chunk` (at most [`BATCH`] messages) on `fd`; how many went.
    fn send_chunk(&mut self, fd: RawFd, chunk: &[(usize, usize, usize)]) -> std::io::Result<usize> {
        // Only the headers in use are written: zeroing all BATCH of them would cost a
        // small message more than its system call.
        let mut names = [const { MaybeUninit::<libc::sockaddr_storage>::uninit() }; BATCH];
        let mut iov = [const { MaybeUninit::<libc::iovec>::uninit() }; BATCH];
        let mut cmsgs = [const { MaybeUninit::<[u64; CMSG_LEN / 8]>::uninit() }; BATCH];
        let mut msgs = [const { MaybeUninit::<libc::mmsghdr>::uninit() }; BATCH];
        for (k, c) in chunk.iter().enumerate() {
            let first = &self.pkts[c.0];
            let last = &self.pkts[c.0 + c.1 - 1];
            let io = iov[k].write(libc::iovec {
                iov_base: self.data[first.at..].as_mut_ptr().cast(),
                iov_len: last.at + last.len - first.at,
            });
            // SAFETY: all-zero mmsghdr is valid.
            let m = msgs[k].write(unsafe { MaybeUninit::zeroed().assume_init() });
            m.msg_hdr.msg_iov = io;
            m.msg_hdr.msg_iovlen = 1;
            let (ss, len) = to_storage(first.dst);
            m.msg_hdr.msg_name = (names[k].write(ss) as *mut libc::sockaddr_storage).cast();
            m.msg_hdr.msg_namelen = len;
            let seg = c.2;
            if seg > 0 {
                m.msg_hdr.msg_control = cmsgs[k].write([0; CMSG_LEN / 8]).as_mut_ptr().cast();
                // SAFETY: CMSG_SPACE of a u16 fits in CMSG_LEN; the header and data are
                // written inside `cmsgs[k]`, which outlives the call.
                unsafe {
                    m.msg_hdr.msg_controllen = libc::CMSG_SPACE(2) as usize;
                    let c = libc::CMSG_FIRSTHDR(&m.msg_hdr);
                    (*c).cmsg_level = SOL_UDP;
                    (*c).cmsg_type = UDP_SEGMENT;
                    (*c).cmsg_len = libc::CMSG_LEN(2) as usize;
                    std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg as u16);
                }
            }
        }
        // SAFETY: the first `chunk.len()` headers of `msgs` were written above and point into
        // arrays and `self.data`, which live across the call.
        let n = unsafe {
            libc::sendmmsg(
                fd,
                msgs.as_mut_ptr().cast::<libc::mmsghdr>(),
                chunk.len() as u32,
                0,
            )
        };
        if n <= 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(n as usize)
    }
}
