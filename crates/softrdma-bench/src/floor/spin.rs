//! The busy-poll receive of the baselines: the fastest loop that can be written, with a
//! watch for a silent peer that reads the clock only now and then.
//!
//! Owns [`QUIET`] and the spin; calls `mmsg` for the RoCE-like `recvmsg`.

use super::mmsg::recvmsg_roce;
use crate::error::BenchError;
use nix::sys::socket::MsgFlags;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// A silent peer ends a baseline run instead of hanging it.
pub(super) const QUIET: Duration = Duration::from_secs(2);

/// Empty polls between two looks at the clock in a spin: a baseline's spin must be the
/// fastest loop that can be written, and a clock read per poll would slow it (and flatter
/// softrdma's ratio to it).
const SPINS_PER_CLOCK: u32 = 1 << 14;

/// A spin's watch for a silent peer: counts empty polls, and looks at the clock once per
/// [`SPINS_PER_CLOCK`] of them.
#[derive(Default)]
struct Quiet {
    spins: u32,
    deadline: Option<Instant>,
}

impl Quiet {
    /// One more empty poll; an error once the peer has been silent for [`QUIET`].
    fn empty_poll(&mut self) -> Result<(), BenchError> {
        self.spins = self.spins.wrapping_add(1);
        if self.spins % SPINS_PER_CLOCK == 0 {
            let d = *self.deadline.get_or_insert_with(|| Instant::now() + QUIET);
            if Instant::now() > d {
                return Err(BenchError::Quiet(QUIET));
            }
        }
        Ok(())
    }
}

/// Receives one datagram on a connected, non-blocking socket, spinning (busy poll) with no
/// clock read in the spin but one per [`SPINS_PER_CLOCK`] empty polls.
pub(super) fn spin_recv(s: &UdpSocket, buf: &mut [u8]) -> Result<usize, BenchError> {
    let mut quiet = Quiet::default();
    loop {
        match s.recv(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                quiet.empty_poll()?;
            }
            Err(source) => {
                return Err(BenchError::Io {
                    what: "recv",
                    source,
                });
            }
        }
    }
}

/// [`spin_recv`] the way softrdma's device receives one datagram: `recvmsg` with room for
/// the sender's address and a UDP_GRO control message.
pub(super) fn spin_recv_roce(
    s: &UdpSocket,
    buf: &mut [u8],
) -> Result<(usize, SocketAddr), BenchError> {
    let mut quiet = Quiet::default();
    // Made once and reused: the floor should cost the system call and little else.
    let mut cmsg = nix::cmsg_space!(i32);
    loop {
        match recvmsg_roce(s, buf, &mut cmsg, MsgFlags::MSG_DONTWAIT) {
            Ok((n, Some(from), _)) => {
                let from = from
                    .as_sockaddr_in()
                    .map(|a| SocketAddr::from(std::net::SocketAddrV4::from(*a)))
                    .or_else(|| {
                        from.as_sockaddr_in6()
                            .map(|a| SocketAddr::from(std::net::SocketAddrV6::from(*a)))
                    })
                    .ok_or(BenchError::NotIpAddress)?;
                return Ok((n, from));
            }
            Ok(_) | Err(nix::errno::Errno::EAGAIN) => {
                quiet.empty_poll()?;
            }
            Err(source) => {
                return Err(BenchError::Sys {
                    what: "recvmsg",
                    source,
                });
            }
        }
    }
}
