//! Batched datagram I/O: `recvmmsg(2)` and `sendmmsg(2)`, which move many packets per system
//! call. std and mio offer one datagram per call; this is the FFI they lack, kept small.

use std::mem::MaybeUninit;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::RawFd;

/// Datagrams per system call.
pub const BATCH: usize = 64;
/// Room for one datagram: the largest RoCE packet (4096 bytes of payload plus headers) with
/// space to spare; anything longer is truncated and then rejected as malformed.
pub const SLOT: usize = 4608;

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
}

impl Default for RecvBatch {
    fn default() -> Self {
        Self {
            bufs: vec![0; BATCH * SLOT],
            // SAFETY: all-zero sockaddr_storage is valid.
            addrs: vec![unsafe { MaybeUninit::zeroed().assume_init() }; BATCH],
            lens: vec![0; BATCH],
            truncated: vec![false; BATCH],
        }
    }
}

impl RecvBatch {
    /// Datagram `i` of the last batch: its bytes, sender, and whether it was cut short.
    pub fn get(&self, i: usize) -> (&[u8], Option<SocketAddr>, bool) {
        (
            &self.bufs[i * SLOT..i * SLOT + self.lens[i]],
            from_storage(&self.addrs[i]),
            self.truncated[i],
        )
    }
}

/// Receives up to [`BATCH`] datagrams without blocking; returns how many.
pub fn recv_batch(fd: RawFd, b: &mut RecvBatch) -> std::io::Result<usize> {
    let mut iov: Vec<libc::iovec> = (0..BATCH)
        .map(|i| libc::iovec {
            iov_base: b.bufs[i * SLOT..].as_mut_ptr().cast(),
            iov_len: SLOT,
        })
        .collect();
    // SAFETY: all-zero mmsghdr is valid; every pointer set below points into `iov` and
    // `b.addrs`, which outlive the call.
    let mut msgs: Vec<libc::mmsghdr> = (0..BATCH)
        .map(|_| unsafe { MaybeUninit::zeroed().assume_init() })
        .collect();
    for (i, m) in msgs.iter_mut().enumerate() {
        m.msg_hdr.msg_name = (&mut b.addrs[i] as *mut libc::sockaddr_storage).cast();
        m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        m.msg_hdr.msg_iov = &mut iov[i];
        m.msg_hdr.msg_iovlen = 1;
    }
    // SAFETY: `msgs` holds BATCH valid headers whose buffers stay alive for the call.
    let n = unsafe {
        libc::recvmmsg(
            fd,
            msgs.as_mut_ptr(),
            BATCH as u32,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    for (i, m) in msgs.iter().take(n as usize).enumerate() {
        b.lens[i] = (m.msg_len as usize).min(SLOT);
        b.truncated[i] = m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
    }
    Ok(n as usize)
}

/// Packets waiting to be sent together.
#[derive(Default)]
pub struct SendBatch {
    data: Vec<u8>,
    pkts: Vec<(usize, usize, SocketAddr)>,
}

impl SendBatch {
    /// Adds a packet.
    pub fn push(&mut self, bytes: &[u8], dst: SocketAddr) {
        let at = self.data.len();
        self.data.extend_from_slice(bytes);
        self.pkts.push((at, bytes.len(), dst));
    }

    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.pkts.is_empty()
    }

    /// Sends everything in as few calls as the kernel allows. Returns (sent, failed).
    pub fn flush(&mut self, fd: RawFd) -> (usize, usize) {
        let (mut sent, mut failed) = (0, 0);
        let mut start = 0;
        while start < self.pkts.len() {
            let chunk = &self.pkts[start..(start + BATCH).min(self.pkts.len())];
            let mut names: Vec<(libc::sockaddr_storage, libc::socklen_t)> =
                chunk.iter().map(|p| to_storage(p.2)).collect();
            let mut iov: Vec<libc::iovec> = chunk
                .iter()
                .map(|p| libc::iovec {
                    iov_base: self.data[p.0..].as_mut_ptr().cast(),
                    iov_len: p.1,
                })
                .collect();
            // SAFETY: as in `recv_batch`: zeroed headers pointing into live vectors.
            let mut msgs: Vec<libc::mmsghdr> = (0..chunk.len())
                .map(|_| unsafe { MaybeUninit::zeroed().assume_init() })
                .collect();
            for (i, m) in msgs.iter_mut().enumerate() {
                m.msg_hdr.msg_name = (&mut names[i].0 as *mut libc::sockaddr_storage).cast();
                m.msg_hdr.msg_namelen = names[i].1;
                m.msg_hdr.msg_iov = &mut iov[i];
                m.msg_hdr.msg_iovlen = 1;
            }
            // SAFETY: `msgs` holds valid headers for the whole call.
            let n = unsafe { libc::sendmmsg(fd, msgs.as_mut_ptr(), msgs.len() as u32, 0) };
            if n <= 0 {
                // The first packet of the chunk could not go (a full buffer, an unreachable
                // address): drop it; retransmission recovers what matters.
                failed += 1;
                start += 1;
            } else {
                sent += n as usize;
                start += n as usize;
            }
        }
        self.data.clear();
        self.pkts.clear();
        (sent, failed)
    }
}
