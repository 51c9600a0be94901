//! `udp-pingpong-server` and `udp-pingpong-client`: the raw-UDP ping-pong, both ends
//! connected, the client timing each round trip; with `--roce` (and `--ack`), sent and
//! received the way softrdma's device does, the floor under its UC (and RC) latency.
//!
//! Owns the ping-pong's flags ([`Ends`], [`Turn`]); calls `spin` to receive.

use super::spin::{spin_recv, spin_recv_roce};
use crate::error::{BenchError, io, sys};
use nix::sys::socket::{ControlMessage, MsgFlags, setsockopt, sockopt};
use serde_json::json;
use std::io::IoSlice;
use std::net::{SocketAddr, UdpSocket};
use std::time::Instant;

/// How a ping-pong turn is sent.
#[derive(clap::Args, Clone, Copy)]
pub(crate) struct Turn {
    /// Bytes per message.
    #[arg(long, default_value_t = 8)]
    size: usize,
    /// Send and receive as softrdma's device does: both sides connected (softrdma learns the
    /// IPv4 IDs a connected socket numbers its packets with, and patches its ICRCs for them),
    /// receiving with UDP_GRO through `recvmsg` with the sender's address and the GRO
    /// control message (which a RoCE receiver needs: the address for the ICRC, the segment
    /// size to split what GRO joined).
    #[arg(long)]
    roce: bool,
    /// Add a 20-byte ACK behind each message in the same GSO send (an RC turn).
    #[arg(long)]
    ack: bool,
}

impl Turn {
    /// Bytes that arrive per turn.
    fn bytes(&self) -> usize {
        self.size + if self.ack { ACK_LEN } else { 0 }
    }

    fn socket(&self, addr: SocketAddr) -> Result<UdpSocket, BenchError> {
        let s = UdpSocket::bind(addr).map_err(io("bind"))?;
        if self.roce {
            setsockopt(&s, sockopt::UdpGroSegment, &true).map_err(sys("UDP_GRO"))?;
        }
        s.set_nonblocking(true).map_err(io("nonblocking"))?;
        Ok(s)
    }

    /// Sends one turn to the connected peer.
    fn send(&self, s: &UdpSocket, msg: &[u8]) -> Result<(), BenchError> {
        if !self.ack {
            // One datagram: the plainest send there is.
            return s.send(msg).map(drop).map_err(io("send"));
        }
        let seg = msg.len() as u16;
        let ack = [0u8; ACK_LEN];
        let (iov, cmsg): (&[IoSlice], &[ControlMessage]) = if self.ack {
            (
                &[IoSlice::new(msg), IoSlice::new(&ack)],
                &[ControlMessage::UdpGsoSegments(&seg)],
            )
        } else {
            (&[IoSlice::new(msg)], &[])
        };
        nix::sys::socket::sendmsg::<()>(
            std::os::fd::AsRawFd::as_raw_fd(s),
            iov,
            cmsg,
            MsgFlags::empty(),
            None,
        )
        .map_err(sys("send"))?;
        Ok(())
    }

    /// Receives one turn on a connected socket.
    fn recv(&self, s: &UdpSocket, buf: &mut [u8]) -> Result<(), BenchError> {
        let mut got = 0;
        loop {
            got += if self.roce {
                spin_recv_roce(s, buf)?.0
            } else {
                spin_recv(s, buf)?
            };
            if got >= self.bytes() {
                return Ok(());
            }
        }
    }
}

/// An RC ACK: BTH, AETH and ICRC.
const ACK_LEN: usize = 20;

/// The flags both ends of the ping-pong take.
#[derive(clap::Args)]
pub(crate) struct Ends {
    /// This end's address.
    #[arg(long)]
    addr: SocketAddr,
    /// The other end's address, which this end connects to.
    #[arg(long)]
    peer: SocketAddr,
    /// Round trips (at least one).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    iters: u64,
    #[command(flatten)]
    how: Turn,
}

impl Ends {
    /// This end's socket, connected to the peer, with a message of `fill` bytes to send
    /// and a buffer to receive into. Both ends connected: the kernel looks no route up per
    /// datagram, and a receive need not return the sender's address.
    fn open(&self, fill: u8) -> Result<(UdpSocket, Vec<u8>, Vec<u8>), BenchError> {
        let s = self.how.socket(self.addr)?;
        s.connect(self.peer).map_err(io("connect"))?;
        Ok((s, vec![fill; self.how.size], vec![0u8; 65536]))
    }
}

/// `udp-pingpong-server`: prints "ready", then echoes `iters` turns from `peer`.
pub(crate) fn udp_pingpong_server(e: Ends) -> Result<(), BenchError> {
    let (s, msg, mut buf) = e.open(9)?;
    println!("ready");
    for _ in 0..e.iters {
        e.how.recv(&s, &mut buf)?;
        e.how.send(&s, &msg)?;
    }
    Ok(())
}

/// `udp-pingpong-client`: sends `iters` turns to `peer`, and prints the median half
/// round trip as JSON.
pub(crate) fn udp_pingpong_client(e: Ends) -> Result<(), BenchError> {
    let (s, msg, mut buf) = e.open(7)?;
    let mut half = Vec::with_capacity(e.iters as usize);
    for _ in 0..e.iters {
        let t = Instant::now();
        e.how.send(&s, &msg)?;
        e.how.recv(&s, &mut buf)?;
        half.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
    }
    half.sort_by(f64::total_cmp);
    println!(
        "{}",
        json!({ "half_rtt_p50_us": half[half.len() / 2], "iterations": e.iters })
    );
    Ok(())
}
