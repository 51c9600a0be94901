//! Steering: a member's datagrams from remote peers go straight to its own socket instead
//! of through its owner, which would cost a hop through a third process (on a busy host, a
//! wake-up and often a preemption per packet).
//!
//! The owner's `IP:4791` socket opens a SO_REUSEPORT group; a member that is granted a
//! *slot* (2..=254: QP1 and the multicast QPN end in 1 and 0xFF) joins the group with a
//! socket of its own. Every QPN the owner draws for that member carries the slot in its
//! low byte, and a classic BPF program attached to the group (unprivileged, unlike eBPF
//! on Debian; see `docs/shared-device.md` §1.3) maps the destination QPN's low byte to the
//! member's socket. The program returns an *index* into
//! the group, in join order, and the kernel moves the last socket into the hole a leaving
//! one makes; so the owner **probes**: it sends one marked datagram per index, each member
//! reports the index its socket received, and the program is rebuilt from the reports.
//! What the program does not map (the owner's QPNs, QP1, unknown or unprobed slots) goes to
//! the owner's socket, which forwards members' datagrams as before. A datagram that reaches
//! the wrong member in the moment between a change and its probe (a member died, and the
//! kernel moved the last socket into its index) is for a QPN of another slot: that member
//! hands it back to the owner over their forwarding pair, and the owner routes it as though
//! its own socket had received it (`RxPort::hand_back`), so UC and UD lose nothing there
//! either. A datagram for a QPN of the member's own slot that it does not have is for a
//! destroyed QP, and is dropped.
//!
//! Only the kernel's rules guard the group: a socket of another uid cannot join it, and a
//! plain bind (no SO_REUSEPORT) of the port fails for everyone.
//!
//! Everything here but [`attach`] and [`send_probe`] is pure.

use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;

/// A probe's first four bytes. As a BTH, opcode 0xFF is reserved (IBTA 9.2: no opcode of
/// any transport has all bits set), so no RoCE packet starts so.
pub(crate) const PROBE_MAGIC: [u8; 4] = [0xFF, b'S', b'R', b'P'];
/// A probe's length: magic, the index it asks for (big-endian, as the program loads it),
/// and the round's nonce.
pub(crate) const PROBE_LEN: usize = 16;

/// The datagram that asks the group for socket `index`, in round `nonce`.
pub(crate) fn probe(index: u32, nonce: u64) -> [u8; PROBE_LEN] {
    let mut p = [0u8; PROBE_LEN];
    p[..4].copy_from_slice(&PROBE_MAGIC);
    p[4..8].copy_from_slice(&index.to_be_bytes());
    p[8..].copy_from_slice(&nonce.to_be_bytes());
    p
}

/// The index and nonce of a probe; `None` if `d` is not one.
#[inline]
pub(crate) fn parse_probe(d: &[u8]) -> Option<(u32, u64)> {
    if d.len() != PROBE_LEN || d[..4] != PROBE_MAGIC {
        return None;
    }
    let index = u32::from_be_bytes(d[4..8].try_into().ok()?);
    let nonce = u64::from_be_bytes(d[8..].try_into().ok()?);
    Some((index, nonce))
}

// Classic BPF opcodes (linux/filter.h).
const LD_W_ABS: u16 = 0x20;
const LD_B_ABS: u16 = 0x30;
const JEQ_K: u16 = 0x15;
const RET_A: u16 = 0x16;
const RET_K: u16 = 0x06;

fn op(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// The group's program: a probe goes to the index it names; a datagram whose destination
/// QPN's low byte is a steered slot goes to that slot's socket (`routes`: slot, index);
/// everything else to `own`, the owner's socket. The program sees the UDP payload (the
/// kernel pulls the UDP header first), so the BTH is at offset 0; a datagram too short to
/// load from ends the program with 0, the first socket, which is the owner's.
pub(crate) fn program(own: u32, routes: &[(u8, u32)]) -> Vec<libc::sock_filter> {
    let mut p = vec![
        op(LD_W_ABS, 0, 0, 0),
        op(JEQ_K, 0, 2, u32::from_be_bytes(PROBE_MAGIC)),
        op(LD_W_ABS, 0, 0, 4),
        op(RET_A, 0, 0, 0),
        // IBTA 9.2: the BTH's destination QP is bytes 5..8; its low byte is the slot.
        op(LD_B_ABS, 0, 0, 7),
    ];
    for &(slot, index) in routes {
        p.push(op(JEQ_K, 0, 1, u32::from(slot)));
        p.push(op(RET_K, 0, 0, index));
    }
    p.push(op(RET_K, 0, 0, own));
    p
}

/// Attaches `prog` to the SO_REUSEPORT group of socket `fd` (it replaces the group's
/// program, whichever member set it).
pub(crate) fn attach(fd: RawFd, prog: &[libc::sock_filter]) -> io::Result<()> {
    // Built in a byte array: the kernel copies the whole struct, the padding after `len`
    // included, and memcheck rightly reports uninitialised bytes handed to a system call.
    // A zeroed `sock_fprog` is not enough: its padding may be left unwritten when the
    // compiler builds the value from its two fields.
    let len = u16::try_from(prog.len()).map_err(|_| io::Error::from_raw_os_error(libc::E2BIG))?;
    let mut raw = [0u8; std::mem::size_of::<libc::sock_fprog>()];
    raw[..2].copy_from_slice(&len.to_ne_bytes());
    let at = std::mem::offset_of!(libc::sock_fprog, filter);
    raw[at..at + std::mem::size_of::<usize>()]
        .copy_from_slice(&(prog.as_ptr() as usize).to_ne_bytes());
    // SAFETY: `raw` is a whole `sock_fprog` (its length, then at its offset a pointer to
    // `prog`, which outlives the call); the kernel copies the program and reads nothing
    // after returning.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            SO_ATTACH_REUSEPORT_CBPF,
            raw.as_ptr().cast(),
            raw.len() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `SO_ATTACH_REUSEPORT_CBPF` (asm-generic/socket.h; every architecture softrdma builds
/// for uses the generic number).
const SO_ATTACH_REUSEPORT_CBPF: libc::c_int = 51;

/// Sends probe `(index, nonce)` from socket `fd` to the group at `to`.
pub(crate) fn send_probe(fd: RawFd, to: SocketAddr, index: u32, nonce: u64) -> io::Result<()> {
    let p = probe(index, nonce);
    let to = nix::sys::socket::SockaddrStorage::from(to);
    nix::sys::socket::sendto(fd, &p, &to, nix::sys::socket::MsgFlags::MSG_DONTWAIT)
        .map(drop)
        .map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use std::time::Duration;

    #[test]
    fn a_probe_parses_back_and_nothing_else_does() {
        let p = probe(7, 0xDEAD_BEEF_0123_4567);
        assert_eq!(parse_probe(&p), Some((7, 0xDEAD_BEEF_0123_4567)));
        assert_eq!(parse_probe(&p[..15]), None);
        let mut bth = p;
        bth[0] = 0x04; // RC SEND_ONLY
        assert_eq!(parse_probe(&bth), None);
    }

    /// A group of real sockets on loopback (on a port of its own, not 4791): the program
    /// sends each QPN's datagram to its slot's socket, probes to the index they name, and
    /// everything else to the owner's.
    #[test]
    fn the_program_steers_by_slot_in_a_real_group() {
        let addr: SocketAddr = "127.0.93.1:0".parse().unwrap();
        let group = |port: u16| {
            let s =
                socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
            s.set_reuse_port(true).unwrap();
            s.bind(&SocketAddr::new(addr.ip(), port).into()).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            std::net::UdpSocket::from(s)
        };
        let first = group(0);
        let to = first.local_addr().unwrap();
        let socks = [first, group(to.port()), group(to.port())];
        attach(socks[0].as_raw_fd(), &program(0, &[(0x21, 2), (0x42, 1)])).unwrap();
        let bth = |qpn: u32| {
            let mut b = [0u8; 12];
            b[0] = 0x0A; // RC RDMA_WRITE_ONLY
            b[4..8].copy_from_slice(&qpn.to_be_bytes());
            b
        };
        for s in &socks {
            s.set_nonblocking(true).unwrap();
        }
        // Which sockets eight copies of `d` reach, each sent from a new source port (a
        // hash would spread them).
        let got = |d: &[u8]| {
            for _ in 0..8 {
                let t = std::net::UdpSocket::bind("127.0.93.1:0").unwrap();
                t.send_to(d, to).unwrap();
            }
            let mut who = Vec::new();
            let mut buf = [0u8; 64];
            while who.len() < 8 {
                let mut fds: Vec<libc::pollfd> = socks
                    .iter()
                    .map(|s| libc::pollfd {
                        fd: s.as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    })
                    .collect();
                // SAFETY: `fds` is a valid array of three pollfds for the call.
                let n = unsafe { libc::poll(fds.as_mut_ptr(), 3, 2000) };
                assert!(n > 0, "a datagram got lost: {who:?}");
                for (i, s) in socks.iter().enumerate() {
                    while let Ok(n) = s.recv(&mut buf) {
                        assert_eq!(&buf[..n], d);
                        who.push(i);
                    }
                }
            }
            who.sort();
            who.dedup();
            who
        };
        assert_eq!(got(&bth(0xAB_CD21)), vec![2]);
        assert_eq!(got(&bth(0x12_3442)), vec![1]);
        assert_eq!(got(&bth(0x12_3400)), vec![0], "the owner's slot");
        assert_eq!(got(&bth(0x00_0001)), vec![0], "QP1");
        assert_eq!(got(&[1, 2, 3]), vec![0], "too short to load");
        assert_eq!(got(&probe(1, 9)), vec![1]);
        assert_eq!(got(&probe(2, 9)), vec![2]);
    }
}
