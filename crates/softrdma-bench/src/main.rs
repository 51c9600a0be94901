//! `softrdma-bench`: softrdma against its peers on loopback, in one run, so that every figure
//! can be read as a ratio against the raw-UDP baseline measured minutes before it.
//!
//! `softrdma-bench compare` runs each pair of processes (server pinned to CPU 0, client to
//! CPU 1 where there are two), bounds each run in time, skips peers that are not installed
//! (saying so), and prints a markdown table. The raw-UDP baselines are subcommands of this
//! binary itself: a busy-poll ping-pong (both ends connected, no clock read in the spin) and
//! a GSO+GRO blaster with 4096-byte segments (eight GSO sends per `sendmmsg`, eight GRO
//! receives per `recvmmsg`), the best a user-space UDP transport can do on this kernel.
//! Each also runs as a RoCE endpoint must at the least (the address and segment size on receive, the ACK segment, the CRC over
//! every segment): the floors under softrdma's own figures.

mod error;
mod loss;

use clap::{Parser, Subcommand};
use error::BenchError;
use nix::sys::socket::{ControlMessage, MsgFlags, setsockopt, sockopt};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, IoSlice};
use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(about = "softrdma against raw UDP, iperf3, UCX and libfabric on loopback")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Runs every benchmark and prints the markdown table.
    Compare {
        /// The `softrdma` binary (default: next to this one).
        #[arg(long)]
        softrdma: Option<PathBuf>,
        /// Seconds per bandwidth run.
        #[arg(long, default_value_t = 3)]
        seconds: u64,
    },
    /// Goodput against loss rate on the soft device (a markdown table and, with `--svg`, a
    /// plot), and the loss-recovery goals, each against the lossless run of the same work.
    Loss {
        /// The `softrdma` binary (default: next to this one).
        #[arg(long)]
        softrdma: Option<PathBuf>,
        /// Seconds per bandwidth run.
        #[arg(long, default_value_t = 3)]
        seconds: u64,
        /// Where to write the plot of goodput against loss.
        #[arg(long)]
        svg: Option<PathBuf>,
        /// Runs of each measurement; the tables give their medians.
        #[arg(long, default_value_t = 5)]
        rounds: usize,
    },
    /// Raw UDP ping-pong, echo side: prints "ready", then echoes until `iters` came back.
    UdpPingpongServer {
        #[arg(long)]
        addr: SocketAddr,
        /// The client's address, which this end connects to.
        #[arg(long)]
        peer: SocketAddr,
        /// Round trips (at least one).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        iters: u64,
        #[command(flatten)]
        how: Turn,
    },
    /// Raw UDP ping-pong, timing side: prints `{"half_rtt_p50_us": ...}`.
    UdpPingpongClient {
        #[arg(long)]
        addr: SocketAddr,
        #[arg(long)]
        peer: SocketAddr,
        /// Round trips (at least one).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        iters: u64,
        #[command(flatten)]
        how: Turn,
    },
    /// GSO+GRO blaster, receiving side: prints "ready", then `{"bytes_per_sec": ...}`.
    UdpBlastRecv {
        #[arg(long)]
        addr: SocketAddr,
        /// Receive as a RoCE receiver must at the least: with the sender's address and the
        /// GRO segment size, checking each segment's trailing CRC-32 and copying its payload
        /// into a 1 MiB region (a socket cannot place it there by itself).
        #[arg(long)]
        roce: bool,
    },
    /// GSO+GRO blaster, sending side: 4096-byte segments, 15 per system call.
    UdpBlastSend {
        #[arg(long)]
        addr: SocketAddr,
        #[arg(long)]
        peer: SocketAddr,
        #[arg(long)]
        seconds: u64,
        /// Send as a RoCE sender must at the least: each 4096-byte payload taken in place
        /// from a 1 MiB region, behind a 12-byte header and followed by a CRC-32 of both (the
        /// ICRC's share of the work), as header / region / CRC pieces of one GSO send.
        #[arg(long)]
        roce: bool,
    },
}

/// How a ping-pong turn is sent.
#[derive(clap::Args, Clone, Copy)]
struct Turn {
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

/// A silent peer ends a baseline run instead of hanging it.
const QUIET: Duration = Duration::from_secs(2);
const SEG: usize = 4096;
/// The region a RoCE-like blaster sends from and receives into.
const REGION: usize = 1 << 20;
/// A RoCE-like blaster's header per segment (a BTH's length).
const HDR: usize = 12;

fn main() -> std::process::ExitCode {
    let r = match Cli::parse().cmd {
        Cmd::Compare { softrdma, seconds } => compare(softrdma, seconds),
        Cmd::Loss {
            softrdma,
            seconds,
            svg,
            rounds,
        } => softrdma_bin(softrdma).and_then(|sr| {
            let md = loss::run(&pinning(), &sr, seconds, rounds, svg.as_deref())?;
            println!("{md}");
            Ok(())
        }),
        Cmd::UdpPingpongServer {
            addr,
            peer,
            iters,
            how,
        } => udp_pingpong_server(addr, peer, iters, how),
        Cmd::UdpPingpongClient {
            addr,
            peer,
            iters,
            how,
        } => udp_pingpong_client(addr, peer, iters, how),
        Cmd::UdpBlastRecv { addr, roce } => udp_blast_recv(addr, roce),
        Cmd::UdpBlastSend {
            addr,
            peer,
            seconds,
            roce,
        } => udp_blast_send(addr, peer, seconds, roce),
    };
    match r {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("softrdma-bench: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// For `map_err`: a socket call's error ([`BenchError::Io`]).
fn io(what: &'static str) -> impl Fn(std::io::Error) -> BenchError {
    move |source| BenchError::Io { what, source }
}

/// For `map_err`: the error of a socket call made through nix ([`BenchError::Sys`]).
fn sys(what: &'static str) -> impl Fn(nix::errno::Errno) -> BenchError {
    move |source| BenchError::Sys { what, source }
}

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
fn spin_recv(s: &UdpSocket, buf: &mut [u8]) -> Result<usize, BenchError> {
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
fn spin_recv_roce(s: &UdpSocket, buf: &mut [u8]) -> Result<(usize, SocketAddr), BenchError> {
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

fn udp_pingpong_server(
    addr: SocketAddr,
    peer: SocketAddr,
    iters: u64,
    how: Turn,
) -> Result<(), BenchError> {
    let s = how.socket(addr)?;
    // Both ends connected: the kernel looks no route up per datagram, and a receive need
    // not return the sender's address.
    s.connect(peer).map_err(io("connect"))?;
    println!("ready");
    let mut buf = vec![0u8; 65536];
    let msg = vec![9u8; how.size];
    for _ in 0..iters {
        how.recv(&s, &mut buf)?;
        how.send(&s, &msg)?;
    }
    Ok(())
}

fn udp_pingpong_client(
    addr: SocketAddr,
    peer: SocketAddr,
    iters: u64,
    how: Turn,
) -> Result<(), BenchError> {
    let s = how.socket(addr)?;
    s.connect(peer).map_err(io("connect"))?;

    let msg = vec![7u8; how.size];
    let mut buf = vec![0u8; 65536];
    let mut half = Vec::with_capacity(iters as usize);
    for _ in 0..iters {
        let t = Instant::now();
        how.send(&s, &msg)?;
        how.recv(&s, &mut buf)?;
        half.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
    }
    half.sort_by(f64::total_cmp);
    println!(
        "{}",
        json!({ "half_rtt_p50_us": half[half.len() / 2], "iterations": iters })
    );
    Ok(())
}

fn udp_blast_recv(addr: SocketAddr, roce: bool) -> Result<(), BenchError> {
    let s = UdpSocket::bind(addr).map_err(io("bind"))?;
    setsockopt(&s, sockopt::UdpGroSegment, &true).map_err(sys("UDP_GRO"))?;
    // As root the buffer may exceed rmem_max; otherwise the kernel caps it.
    let _ = setsockopt(&s, sockopt::RcvBufForce, &(32 << 20))
        .or_else(|_| setsockopt(&s, sockopt::RcvBuf, &(32 << 20)));
    s.set_read_timeout(Some(QUIET)).map_err(io("timeout"))?;
    println!("ready");
    let mut buf = vec![0u8; 65536];
    let mut region = vec![0u8; REGION];
    let mut at = 0;
    let mut cmsg = nix::cmsg_space!(i32);
    let mut mmsg = RecvMmsg::new();
    let (mut first, mut last, mut bytes) = (None, Instant::now(), 0u64);
    loop {
        // The bytes of a receive, and whether the 1-byte end marker came.
        let got = if !roce {
            mmsg.recv(&s).map(Ok)
        } else {
            recvmsg_roce(&s, &mut buf, &mut cmsg, MsgFlags::empty())
                .map_err(std::io::Error::from)
                .map(|(n, _, seg)| {
                    if n > 1 {
                        check_and_place(&buf[..n], seg, &mut region, &mut at)?;
                    }
                    Ok::<(usize, bool), BenchError>(if n == 1 { (0, true) } else { (n, false) })
                })
        };
        let (n, end) = match got {
            Ok(r) => r?,
            Err(e) if first.is_some() && e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(source) => {
                return Err(BenchError::Io {
                    what: "recv",
                    source,
                });
            }
        };
        if end && n == 0 {
            break;
        }
        let now = Instant::now();
        // The first batch only starts the clock.
        if first.is_none() {
            first = Some(now);
        } else {
            bytes += n as u64;
        }
        last = now;
        if end {
            break;
        }
    }
    let secs = last
        .duration_since(first.unwrap_or(last))
        .as_secs_f64()
        .max(1e-9);
    println!(
        "{}",
        json!({ "bytes_per_sec": bytes as f64 / secs, "bytes": bytes })
    );
    Ok(())
}

/// One receive the way softrdma's device makes it: `recvmsg` with room for the sender's
/// address and the UDP_GRO segment size (`cmsg`: space for one `int`). Returns the bytes,
/// the sender, and the segment size (0 if not joined).
#[allow(clippy::ptr_arg)] // nix's `recvmsg` takes the control buffer as a `Vec`.
fn recvmsg_roce(
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

/// Checks each segment's trailing CRC-32 (over header and payload) and copies its payload
/// into `region` at `at`, wrapping around: what a RoCE receiver does at the least.
fn check_and_place(
    data: &[u8],
    seg: usize,
    region: &mut [u8],
    at: &mut usize,
) -> Result<(), BenchError> {
    let seg = if seg == 0 { data.len() } else { seg };
    for p in data.chunks(seg) {
        let Some(body_len) = p.len().checked_sub(4).filter(|n| *n >= HDR) else {
            return Err(BenchError::ShortSegment { len: p.len() });
        };
        let (body, crc) = p.split_at(body_len);
        if crc32fast::hash(body).to_le_bytes() != crc {
            return Err(BenchError::BadCrc);
        }
        let payload = &body[HDR..];
        let n = payload.len().min(region.len() - *at);
        region[*at..*at + n].copy_from_slice(&payload[..n]);
        *at = (*at + n) % region.len();
    }
    Ok(())
}

fn udp_blast_send(
    addr: SocketAddr,
    peer: SocketAddr,
    seconds: u64,
    roce: bool,
) -> Result<(), BenchError> {
    let s = UdpSocket::bind(addr).map_err(io("bind"))?;
    s.connect(peer).map_err(io("connect"))?;
    let buf = vec![0x5au8; SEG * 15];
    let region: Vec<u8> = (0..REGION).map(|i| i as u8).collect();
    let mut at = 0;
    let mut heads = [[0u8; HDR]; 15];
    let mut crcs = [[0u8; 4]; 15];
    let seg: u16 = if roce {
        (HDR + SEG + 4) as u16
    } else {
        SEG as u16
    };
    let end = Instant::now() + Duration::from_secs(seconds);
    if !roce {
        // The fastest blaster: MMSG GSO sends of 15 segments per system call.
        let _ = setsockopt(&s, sockopt::SndBufForce, &(32 << 20))
            .or_else(|_| setsockopt(&s, sockopt::SndBuf, &(32 << 20)));
        let mut m = SendMmsg::new(&buf, seg);
        while Instant::now() < end {
            match m.send(&s) {
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(nix::libc::ENOBUFS | nix::libc::EAGAIN | nix::libc::ECONNREFUSED)
                    ) => {}
                Err(source) => {
                    return Err(BenchError::Io {
                        what: "sendmmsg with UDP_SEGMENT",
                        source,
                    });
                }
            }
        }
    }
    while roce && Instant::now() < end {
        let mut pieces = [IoSlice::new(&[]); 45];
        let pieces: &[IoSlice] = if roce {
            let start = at;
            for k in 0..15 {
                let payload = &region[at..at + SEG];
                at = (at + SEG) % REGION;
                heads[k][..8].copy_from_slice(&(at as u64).to_be_bytes());
                let mut h = crc32fast::Hasher::new();
                h.update(&heads[k]);
                h.update(payload);
                crcs[k] = h.finalize().to_le_bytes();
            }
            for k in 0..15 {
                let payload = &region[(start + k * SEG) % REGION..][..SEG];
                pieces[3 * k] = IoSlice::new(&heads[k]);
                pieces[3 * k + 1] = IoSlice::new(payload);
                pieces[3 * k + 2] = IoSlice::new(&crcs[k]);
            }
            &pieces
        } else {
            pieces[0] = IoSlice::new(&buf);
            &pieces[..1]
        };
        let r = nix::sys::socket::sendmsg::<()>(
            std::os::fd::AsRawFd::as_raw_fd(&s),
            pieces,
            &[ControlMessage::UdpGsoSegments(&seg)],
            MsgFlags::empty(),
            None,
        );
        match r {
            Ok(_) | Err(nix::errno::Errno::ENOBUFS) | Err(nix::errno::Errno::EAGAIN) => {}
            Err(nix::errno::Errno::ECONNREFUSED) => {}
            Err(source) => {
                return Err(BenchError::Sys {
                    what: "sendmsg with UDP_SEGMENT",
                    source,
                });
            }
        }
    }
    // The end marker, a few times in case one is dropped.
    for _ in 0..8 {
        let _ = s.send(&[0]);
    }
    Ok(())
}

/// GSO sends per `sendmmsg` (and GRO receives per `recvmmsg`) in the plain blaster.
const MMSG: usize = 8;
/// `CMSG_SPACE` of a `u16` (UDP_SEGMENT's value), rounded up as the kernel aligns it.
const CMSG_U16: usize = 24;

/// MMSG GSO sends of the same buffer, ready for one `sendmmsg` each time.
struct SendMmsg {
    iov: Box<[nix::libc::iovec; MMSG]>,
    cmsg: Box<[[u64; CMSG_U16 / 8]; MMSG]>,
    hdrs: Box<[nix::libc::mmsghdr; MMSG]>,
}

// SAFETY: the raw pointers point into the boxes the struct owns (and the caller's buffer,
// which outlives every send); nothing is shared.
unsafe impl Send for SendMmsg {}

impl SendMmsg {
    fn new(buf: &[u8], seg: u16) -> Self {
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
    fn send(&mut self, s: &UdpSocket) -> std::io::Result<usize> {
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
struct RecvMmsg {
    bufs: Vec<u8>,
    iov: Box<[nix::libc::iovec; MMSG]>,
    hdrs: Box<[nix::libc::mmsghdr; MMSG]>,
}

impl RecvMmsg {
    fn new() -> Self {
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
    fn recv(&mut self, s: &UdpSocket) -> std::io::Result<(usize, bool)> {
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

/// One figure of the table.
struct Figure {
    what: String,
    /// Microseconds for latency, bytes per second for bandwidth, messages per second for rate.
    value: Option<f64>,
    kind: Kind,
    note: String,
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Lat,
    Bw,
    Rate,
}

/// Where each process of a pair runs.
struct Pin {
    server: Vec<String>,
    client: Vec<String>,
}

fn pinning() -> Pin {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let taskset = Command::new("taskset").arg("-V").output().is_ok();
    if cpus >= 2 && taskset {
        Pin {
            server: vec!["taskset".into(), "-c".into(), "0".into()],
            client: vec!["taskset".into(), "-c".into(), "1".into()],
        }
    } else {
        Pin {
            server: vec![],
            client: vec![],
        }
    }
}

fn command(prefix: &[String], argv: &[String], env: &[(&str, &str)]) -> Command {
    let mut all: Vec<String> = prefix.to_vec();
    all.extend(argv.iter().cloned());
    let mut c = Command::new(&all[0]);
    c.args(&all[1..]);
    for (k, v) in env {
        c.env(k, v);
    }
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Waits for a child with a limit, killing it past the limit.
fn finish(mut c: Child, limit: Duration) -> Result<String, BenchError> {
    let deadline = Instant::now() + limit;
    loop {
        match c.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() > deadline => {
                let _ = c.kill();
                let _ = c.wait();
                return Err(BenchError::TooLong(limit));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(BenchError::Wait(e)),
        }
    }
    let o = c.wait_with_output().map_err(BenchError::Wait)?;
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    if o.status.success() {
        Ok(text)
    } else {
        Err(BenchError::Child {
            status: o.status,
            stdout: text.trim().to_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).trim().to_owned(),
        })
    }
}

/// How the server of a pair tells that it is ready.
enum Ready {
    /// It prints this line.
    Line(&'static str),
    /// It listens on this TCP port.
    Tcp(u16),
}

/// Waits until the server is ready. A server that announces itself by a line gets its other
/// output forwarded through the returned channel.
fn wait_ready(
    server: &mut Child,
    ready: &Ready,
) -> Result<Option<mpsc::Receiver<String>>, BenchError> {
    match ready {
        Ready::Line(want) => {
            let out = server.stdout.take().ok_or(BenchError::NoStdout)?;
            let (tx_ready, rx_ready) = mpsc::channel();
            let (tx_rest, rx_rest) = mpsc::channel();
            let want = want.to_string();
            std::thread::spawn(move || {
                let mut r = BufReader::new(out);
                let mut line = String::new();
                let mut rest = String::new();
                while r.read_line(&mut line).is_ok_and(|n| n > 0) {
                    if line.trim() == want {
                        let _ = tx_ready.send(());
                    } else {
                        rest.push_str(&line);
                    }
                    line.clear();
                }
                let _ = tx_rest.send(rest);
            });
            rx_ready
                .recv_timeout(Duration::from_secs(15))
                .map_err(|_| BenchError::NotReady)?;
            Ok(Some(rx_rest))
        }
        Ready::Tcp(port) => {
            let deadline = Instant::now() + Duration::from_secs(15);
            while !listening(*port) {
                if Instant::now() > deadline {
                    return Err(BenchError::NotListening { port: *port });
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(None)
        }
    }
}

/// Whether a TCP socket listens on `port`, from /proc (no connection made).
fn listening(port: u16) -> bool {
    let want = format!(":{port:04X} ");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|t| {
            t.lines()
                .skip(1)
                .any(|l| l.split_whitespace().nth(3) == Some("0A") && l.contains(&want))
        })
    })
}

/// Runs a server and a client; returns (server stdout, client stdout).
fn pair(
    pin: &Pin,
    server: (&[String], &[(&str, &str)]),
    client: (&[String], &[(&str, &str)]),
    ready: Ready,
    limit: Duration,
) -> Result<(String, String), BenchError> {
    let spawn_failed = |program: &String| {
        let program = program.clone();
        move |source| BenchError::Spawn { program, source }
    };
    let mut s = command(&pin.server, server.0, server.1)
        .spawn()
        .map_err(spawn_failed(&server.0[0]))?;
    let rest = match wait_ready(&mut s, &ready) {
        Ok(r) => r,
        Err(e) => {
            let _ = s.kill();
            let _ = s.wait();
            return Err(e);
        }
    };
    let c = command(&pin.client, client.0, client.1)
        .spawn()
        .map_err(spawn_failed(&client.0[0]))?;
    let cout = finish(c, limit);
    let sout = finish(s, Duration::from_secs(10));
    let sout = match rest {
        Some(rx) => rx.recv_timeout(Duration::from_secs(5)).unwrap_or_default(),
        None => sout.unwrap_or_default(),
    };
    Ok((sout, cout?))
}

/// `softrdma CMD -p PORT` as a server on 127.0.0.2 and as its client on 127.0.0.3, with
/// `SOFTRDMA_FAULTS=faults` on both unless `faults` is empty (a device with faults sends
/// through the fault injector, not its own send path); returns the client's output.
fn softrdma_pair(
    pin: &Pin,
    sr: &str,
    cmd: &[&str],
    faults: &str,
    port: u16,
    limit: Duration,
) -> Result<String, BenchError> {
    let env = |addr| {
        let mut e = vec![("SOFTRDMA_ADDR", addr)];
        if !faults.is_empty() {
            e.push(("SOFTRDMA_FAULTS", faults));
        }
        e
    };
    softrdma_pair_env(
        pin,
        sr,
        cmd,
        (&env("127.0.0.2"), &env("127.0.0.3")),
        port,
        limit,
    )
}

/// A process's added environment.
type Env<'a> = &'a [(&'a str, &'a str)];

/// `softrdma CMD` as server and client (TCP `port`), each with its environment in `env`;
/// the client's output.
fn softrdma_pair_env(
    pin: &Pin,
    sr: &str,
    cmd: &[&str],
    env: (Env<'_>, Env<'_>),
    port: u16,
    limit: Duration,
) -> Result<String, BenchError> {
    let p = port.to_string();
    let mut a = vec![sr];
    a.extend(cmd);
    a.extend(["-p", &p]);
    let server = args(&a);
    a.push("127.0.0.1");
    let client = args(&a);
    let (_, c) = pair(
        pin,
        (&server, env.0),
        (&client, env.1),
        Ready::Tcp(port),
        limit,
    )?;
    Ok(c)
}

fn args(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn last_json(s: &str) -> Result<Value, BenchError> {
    s.lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .ok_or_else(|| BenchError::NoJson(s.to_owned()))
}

/// For `ok_or_else`: a figure missing from a child's output ([`BenchError::Output`]).
fn missing(what: &'static str) -> impl FnOnce() -> BenchError {
    move || BenchError::Output(what.into())
}

fn have(prog: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {prog} >/dev/null")])
        .status()
        .is_ok_and(|s| s.success())
}

/// The `softrdma` binary: `given`, or the one next to this one.
fn softrdma_bin(given: Option<PathBuf>) -> Result<String, BenchError> {
    let me = std::env::current_exe().map_err(BenchError::CurrentExe)?;
    let softrdma = given.unwrap_or_else(|| me.with_file_name("softrdma"));
    if !softrdma.exists() {
        return Err(BenchError::NoSoftrdma(softrdma));
    }
    Ok(softrdma.to_string_lossy().into_owned())
}

fn compare(softrdma: Option<PathBuf>, seconds: u64) -> Result<(), BenchError> {
    let me = std::env::current_exe().map_err(BenchError::CurrentExe)?;
    let me = me.to_string_lossy().into_owned();
    let sr = softrdma_bin(softrdma)?;
    let pin = pinning();
    let limit = Duration::from_secs(seconds * 4 + 60);
    let mut figs: Vec<Figure> = Vec::new();
    let mut add = |what: &str, kind: Kind, r: Result<f64, BenchError>| {
        let (value, note) = match r {
            Ok(v) => (Some(v), String::new()),
            Err(e) => (None, e.to_string().chars().take(120).collect()),
        };
        eprintln!(
            "  {what}: {}",
            value.map_or(format!("skipped ({note})"), |v| format!("{v:.3}"))
        );
        figs.push(Figure {
            what: what.into(),
            value,
            kind,
            note,
        });
    };

    // Raw UDP. Besides the baseline (connected socket, 8 B), the same ping-pong sent the way
    // a RoCE device must send it, with a softrdma 8 B WRITE's 40 bytes: the floor under
    // softrdma's UC and RC (with the ACK in the same GSO send) latency, in the same run.
    let pingpong = |port: u16, extra: &[&str]| -> Result<f64, BenchError> {
        let (srv, cli) = (
            format!("127.0.0.1:{port}"),
            format!("127.0.0.1:{}", port + 1),
        );
        let mut server = args(&[&me, "udp-pingpong-server", "--addr", &srv, "--peer", &cli]);
        let mut client = args(&[&me, "udp-pingpong-client", "--addr", &cli, "--peer", &srv]);
        for v in [&mut server, &mut client] {
            v.extend(args(&["--iters", "100000"]));
            v.extend(args(extra));
        }
        pair(
            &pin,
            (&server, &[]),
            (&client, &[]),
            Ready::Line("ready"),
            limit,
        )
        .and_then(|(_, c)| last_json(&c))
        .and_then(|v| {
            v["half_rtt_p50_us"]
                .as_f64()
                .ok_or_else(missing("no half_rtt"))
        })
    };
    add(
        "raw UDP busy-poll ping-pong 8 B, half RTT p50",
        Kind::Lat,
        pingpong(24001, &[]),
    );
    add(
        "UDP ping-pong as softrdma's device sends and receives (connected, recvmsg with address and GRO), 40 B: the UC floor",
        Kind::Lat,
        pingpong(24005, &["--roce", "--size", "40"]),
    );
    add(
        "the same with a 20 B ACK in the same GSO send: the RC floor",
        Kind::Lat,
        pingpong(24007, &["--roce", "--ack", "--size", "40"]),
    );
    let secs = seconds.to_string();
    let blast_as = |extra: &[&str]| {
        let mut recv = vec![me.as_str(), "udp-blast-recv", "--addr", "127.0.0.1:24003"];
        let mut send = vec![
            me.as_str(),
            "udp-blast-send",
            "--addr",
            "127.0.0.1:24004",
            "--peer",
            "127.0.0.1:24003",
            "--seconds",
            &secs,
        ];
        recv.extend(extra);
        send.extend(extra);
        pair(
            &pin,
            (&args(&recv), &[]),
            (&args(&send), &[]),
            Ready::Line("ready"),
            limit,
        )
        .and_then(|(s, _)| last_json(&s))
        .and_then(|v| v["bytes_per_sec"].as_f64().ok_or_else(missing("no rate")))
    };
    let blast = || blast_as(&[]);
    add("raw UDP GSO+GRO, 4096-byte segments", Kind::Bw, blast());
    add(
        "the same with what a RoCE endpoint cannot skip (a CRC-32 over each 4112-byte segment at both ends, payload sent from and copied into a 1 MiB region): the bandwidth floor",
        Kind::Bw,
        blast_as(&["--roce"]),
    );

    // softrdma perf.
    let perf = |test: &str, extra: &[&str], port: u16| -> Result<Value, BenchError> {
        let mut cmd = vec!["perf", test, "--json"];
        cmd.extend(extra);
        let c = softrdma_pair(&pin, &sr, &cmd, "", port, limit)?;
        let v = last_json(&c)?;
        Ok(v["results"][0].clone())
    };
    let lat = |v: Result<Value, BenchError>| {
        v.and_then(|x| {
            x["t_typical_us"]
                .as_f64()
                .ok_or_else(missing("no t_typical"))
        })
    };
    let bw = |v: Result<Value, BenchError>| {
        v.and_then(|x| {
            x["bw_avg_bytes_per_sec"]
                .as_f64()
                .ok_or_else(missing("no bw"))
        })
    };
    let write_lat = || lat(perf("write-lat", &["-s", "8", "-n", "20000"], 24010));
    let write_bw_1m = || bw(perf("write-bw", &["-s", "1048576", "-D", &secs], 24013));
    add("softrdma write-lat 8 B, t_typical", Kind::Lat, write_lat());
    // The same over UC, which has no ACKs: what the ACK on the critical path costs.
    add(
        "softrdma write-lat 8 B over UC, t_typical",
        Kind::Lat,
        lat(perf(
            "write-lat",
            &["-s", "8", "-n", "20000", "-c", "UC"],
            24015,
        )),
    );
    add(
        "softrdma send-lat 8 B, t_typical",
        Kind::Lat,
        lat(perf("send-lat", &["-s", "8", "-n", "20000"], 24011)),
    );
    add(
        "softrdma write-bw 64 KiB",
        Kind::Bw,
        bw(perf("write-bw", &["-s", "65536", "-D", &secs], 24012)),
    );
    let rate_8 = || {
        perf(
            "write-bw",
            &["-s", "8", "-D", &secs, "-t", "512", "-Q", "64"],
            24014,
        )
        .and_then(|x| {
            x["msg_rate_per_sec"]
                .as_f64()
                .ok_or_else(missing("no rate"))
        })
    };
    add("softrdma write-bw 1 MiB", Kind::Bw, write_bw_1m());
    add(
        "softrdma write-bw 8 B, message rate [msg/s]",
        Kind::Rate,
        rate_8(),
    );

    // The same-host path: both processes on one device (127.0.0.4), through its rings, and
    // with SOFTRDMA_SHM=0 through UDP and the owner's forwarding.
    // Writes are placed by cross-memory copy there unless SOFTRDMA_CMA=0.
    let same_host_cma = |test: &str, extra: &[&str], shm: &str, cma: &str, port: u16| {
        let mut cmd = vec!["perf", test, "--json"];
        cmd.extend(extra);
        let env = [
            ("SOFTRDMA_ADDR", "127.0.0.4"),
            ("SOFTRDMA_SHM", shm),
            ("SOFTRDMA_CMA", cma),
        ];
        softrdma_pair_env(&pin, &sr, &cmd, (&env, &env), port, limit)
            .and_then(|c| last_json(&c))
            .map(|v| v["results"][0].clone())
    };
    let same_host = |test: &str, extra: &[&str], shm: &str, port: u16| {
        same_host_cma(test, extra, shm, "1", port)
    };
    // With `--app-memory`, both ends register a heap buffer of their own, as C programs do,
    // which peers reach by cross-memory copy; without it, shareable memory they map.
    fn with<'a>(extra: &[&'a str], app: bool) -> Vec<&'a str> {
        let mut v = extra.to_vec();
        if app {
            v.push("--app-memory");
        }
        v
    }
    let same_lat_as = |app: bool| {
        lat(same_host(
            "write-lat",
            &with(&["-s", "8", "-n", "20000"], app),
            "1",
            24050,
        ))
    };
    let same_bw_1m_as = |app: bool| {
        bw(same_host(
            "write-bw",
            &with(&["-s", "1048576", "-m", "4096", "-D", &secs], app),
            "1",
            24052,
        ))
    };
    let same_rate_8_as = |app: bool| {
        same_host(
            "write-bw",
            &with(&["-s", "8", "-D", &secs, "-t", "512", "-Q", "64"], app),
            "1",
            24053,
        )
        .and_then(|x| {
            x["msg_rate_per_sec"]
                .as_f64()
                .ok_or_else(missing("no rate"))
        })
    };
    let (same_bw_1m, same_rate_8) = (|| same_bw_1m_as(false), || same_rate_8_as(false));
    add(
        "same host, one device (rings, SOFTRDMA_CMA=0): softrdma write-lat 8 B, t_typical",
        Kind::Lat,
        lat(same_host_cma(
            "write-lat",
            &["-s", "8", "-n", "20000"],
            "1",
            "0",
            24054,
        )),
    );
    add(
        "same host, one device (rings, SOFTRDMA_CMA=0): softrdma write-bw 1 MiB",
        Kind::Bw,
        bw(same_host_cma(
            "write-bw",
            &["-s", "1048576", "-m", "4096", "-D", &secs],
            "1",
            "0",
            24055,
        )),
    );
    for (shm, how) in [("1", "rings"), ("0", "SOFTRDMA_SHM=0, UDP")] {
        add(
            &format!("same host, one device ({how}): softrdma write-lat 8 B, t_typical"),
            Kind::Lat,
            lat(same_host(
                "write-lat",
                &["-s", "8", "-n", "20000"],
                shm,
                24050,
            )),
        );
    }
    add(
        "same host, one device (rings): softrdma send-lat 8 B, t_typical",
        Kind::Lat,
        lat(same_host(
            "send-lat",
            &["-s", "8", "-n", "20000"],
            "1",
            24051,
        )),
    );
    add(
        "same host, one device (rings): softrdma write-bw 1 MiB",
        Kind::Bw,
        same_bw_1m(),
    );
    add(
        "same host, one device (rings): softrdma write-bw 8 B, message rate [msg/s]",
        Kind::Rate,
        same_rate_8(),
    );
    add(
        "same host, one device (rings), application memory: softrdma write-lat 8 B, t_typical",
        Kind::Lat,
        same_lat_as(true),
    );
    add(
        "same host, one device (rings), application memory: softrdma write-bw 1 MiB",
        Kind::Bw,
        same_bw_1m_as(true),
    );
    add(
        "same host, one device (rings), application memory: softrdma write-bw 8 B, message rate [msg/s]",
        Kind::Rate,
        same_rate_8_as(true),
    );

    // A process that shares its device with another (here `softrdma service`, which owns
    // it) talking to a process on another device, against the lone processes of `softrdma
    // write-lat` above: steered its datagrams by the kernel (the default), and forwarded
    // by the owner (`SOFTRDMA_STEER=0`), which costs a hop through a third process.
    let member_lat = |steer: &'static str| -> Result<f64, BenchError> {
        let mut service = command(
            &[],
            &args(&[sr.as_str(), "service"]),
            &[("SOFTRDMA_ADDR", "127.0.0.6"), ("SOFTRDMA_STEER", steer)],
        )
        .spawn()
        .map_err(|source| BenchError::Spawn {
            program: "softrdma service".into(),
            source,
        })?;
        // Up once it says it owns the device.
        let up = service.stderr.take().map(|e| {
            let mut r = std::io::BufReader::new(e);
            let mut line = String::new();
            let ok =
                std::io::BufRead::read_line(&mut r, &mut line).is_ok() && line.contains("owns");
            std::thread::spawn(move || std::io::copy(&mut r, &mut std::io::sink()));
            ok
        });
        let r = if up == Some(true) {
            let cmd = ["perf", "write-lat", "--json", "-s", "8", "-n", "20000"];
            let env = (
                &[("SOFTRDMA_ADDR", "127.0.0.6"), ("SOFTRDMA_STEER", steer)][..],
                &[("SOFTRDMA_ADDR", "127.0.0.7")][..],
            );
            lat(softrdma_pair_env(&pin, &sr, &cmd, env, 24056, limit)
                .and_then(|c| last_json(&c))
                .map(|v| v["results"][0].clone()))
        } else {
            Err(BenchError::Output("softrdma service did not start".into()))
        };
        let _ = service.kill();
        let _ = service.wait();
        r
    };
    add(
        "a member of a shared device (steered) to another device: softrdma write-lat 8 B, t_typical",
        Kind::Lat,
        member_lat("1"),
    );
    add(
        "a member of a shared device (its owner forwards, SOFTRDMA_STEER=0) to another device: softrdma write-lat 8 B, t_typical",
        Kind::Lat,
        member_lat("0"),
    );

    // Unmodified perftest through the drop-in libibverbs (`softrdma exec`), both ends: the
    // figures perftest prints (t_typical; BW average in MB/s of 2^20 bytes; MsgRate in
    // Mpps).
    // Over UDP between two devices, and on one device (the same-host path), as the Rust
    // API's rows above.
    let perftest_at =
        |tool: &str, extra: &[&str], port: u16, one: bool| -> Result<Vec<f64>, BenchError> {
            let p = port.to_string();
            let mut a = vec![sr.as_str(), "exec", "--", tool];
            a.extend(extra);
            a.extend(["-p", &p]);
            let server = args(&a);
            a.push("127.0.0.1");
            let client = args(&a);
            let (s_addr, c_addr) = if one {
                ("127.0.0.4", "127.0.0.4")
            } else {
                ("127.0.0.2", "127.0.0.3")
            };
            let (_, c) = pair(
                &pin,
                (&server, &[("SOFTRDMA_ADDR", s_addr)]),
                (&client, &[("SOFTRDMA_ADDR", c_addr)]),
                Ready::Tcp(port),
                limit,
            )?;
            perftest_row(&c)
        };
    let pt_lat_at = |one: bool| {
        perftest_at("ib_write_lat", &["-s", "8", "-n", "20000"], 24050, one)
            .and_then(|r| r.get(4).copied().ok_or_else(missing("no t_typical")))
    };
    let pt_bw_at = |one: bool| {
        perftest_at("ib_write_bw", &["-s", "1048576", "-D", &secs], 24051, one).and_then(|r| {
            r.get(3)
                .map(|m| m * 1048576.0)
                .ok_or_else(missing("no BW average"))
        })
    };
    let pt_rate_at = |one: bool| {
        perftest_at(
            "ib_write_bw",
            &["-s", "8", "-D", &secs, "-t", "512", "-Q", "64"],
            24052,
            one,
        )
        .and_then(|r| r.get(4).map(|m| m * 1e6).ok_or_else(missing("no MsgRate")))
    };
    let (pt_lat, pt_bw, pt_rate) = (
        || pt_lat_at(false),
        || pt_bw_at(false),
        || pt_rate_at(false),
    );
    add(
        "drop-in: unmodified ib_write_lat 8 B, t_typical",
        Kind::Lat,
        pt_lat(),
    );
    add("drop-in: unmodified ib_write_bw 1 MiB", Kind::Bw, pt_bw());
    add(
        "drop-in: unmodified ib_write_bw 8 B -t 512 -Q 64, message rate [msg/s]",
        Kind::Rate,
        pt_rate(),
    );
    add(
        "drop-in, one device: unmodified ib_write_lat 8 B, t_typical",
        Kind::Lat,
        pt_lat_at(true),
    );
    add(
        "drop-in, one device: unmodified ib_write_bw 1 MiB",
        Kind::Bw,
        pt_bw_at(true),
    );
    add(
        "drop-in, one device: unmodified ib_write_bw 8 B -t 512 -Q 64, message rate [msg/s]",
        Kind::Rate,
        pt_rate_at(true),
    );

    // iperf3.
    let r = if have("iperf3") {
        pair(
            &pin,
            (
                &args(&["iperf3", "-s", "-1", "-p", "24020", "-B", "127.0.0.1"]),
                &[],
            ),
            (
                &args(&[
                    "iperf3",
                    "-c",
                    "127.0.0.1",
                    "-p",
                    "24020",
                    "-t",
                    &secs,
                    "-J",
                ]),
                &[],
            ),
            Ready::Tcp(24020),
            limit,
        )
        .and_then(|(_, c)| serde_json::from_str::<Value>(&c).map_err(BenchError::Json))
        .and_then(|v| {
            v["end"]["sum_received"]["bits_per_second"]
                .as_f64()
                .map(|b| b / 8.0)
                .ok_or_else(missing("no sum_received"))
        })
    } else {
        Err(BenchError::NotInstalled {
            program: "iperf3",
            hint: "",
        })
    };
    add("iperf3 TCP", Kind::Bw, r);

    // UCX: "Final:" iterations, latency 50%, avg, overall [us], bandwidth avg, overall [MiB/s].
    let ucx =
        |tls: &str, test: &str, size: &str, n: &str, port: u16| -> Result<Vec<f64>, BenchError> {
            if !have("ucx_perftest") {
                return Err(BenchError::NotInstalled {
                    program: "ucx_perftest",
                    hint: " (ucx-utils)",
                });
            }
            let p = port.to_string();
            let (_, c) = pair(
                &pin,
                (&args(&["ucx_perftest", "-p", &p]), &[("UCX_TLS", tls)]),
                (
                    &args(&[
                        "ucx_perftest",
                        "127.0.0.1",
                        "-p",
                        &p,
                        "-t",
                        test,
                        "-s",
                        size,
                        "-n",
                        n,
                    ]),
                    &[("UCX_TLS", tls)],
                ),
                Ready::Tcp(port),
                limit,
            )?;
            let line = c
                .lines()
                .find(|l| l.starts_with("Final:"))
                .ok_or_else(|| BenchError::Output(format!("no Final: line in {c:?}")))?;
            Ok(line
                .split_whitespace()
                .skip(1)
                .filter_map(|x| x.parse().ok())
                .collect())
        };
    for (name, tls, port) in [
        ("tcp", "tcp", 24030),
        ("shared memory", "posix,self", 24032),
        ("shared memory with CMA", "posix,cma,self", 24034),
    ] {
        // Latency: the p50 field; bandwidth: the overall MiB/s field, in bytes per second.
        for (test, port) in [("ucp_put_lat", port + 10), ("tag_lat", port)] {
            add(
                &format!("UCX {name} {test} 8 B, p50"),
                Kind::Lat,
                ucx(tls, test, "8", "100000", port)
                    .and_then(|v| v.get(1).copied().ok_or_else(missing("short line"))),
            );
        }
        for (test, port) in [("tag_bw", port + 11), ("ucp_put_bw", port + 1)] {
            add(
                &format!("UCX {name} {test} 1 MiB"),
                Kind::Bw,
                ucx(tls, test, "1048576", "5000", port)
                    .and_then(|v| v.get(5).copied().ok_or_else(missing("short line")))
                    .map(|mib| mib * 1048576.0),
            );
        }
    }

    // libfabric fi_pingpong: bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec. With
    // `over` (the server's and the client's device addresses), both ends run on softrdma
    // through `softrdma exec`.
    let fi_at = |prov: &str,
                 size: &str,
                 n: &str,
                 port: u16,
                 over: Option<(&str, &str)>|
     -> Result<Vec<String>, BenchError> {
        if !have("fi_pingpong") {
            return Err(BenchError::NotInstalled {
                program: "fi_pingpong",
                hint: " (libfabric-bin)",
            });
        }
        let p = port.to_string();
        let mut common = args(&["fi_pingpong", "-p", prov, "-e", "rdm", "-I", n, "-S", size]);
        if over.is_some() {
            common.splice(0..0, args(&[sr.as_str(), "exec", "--"]));
        }
        let server = [common.clone(), args(&["-B", &p])].concat();
        let client = [common, args(&["-P", &p, "127.0.0.1"])].concat();
        let (s_env, c_env) = match over {
            Some((s, c)) => (vec![("SOFTRDMA_ADDR", s)], vec![("SOFTRDMA_ADDR", c)]),
            None => (vec![], vec![]),
        };
        let (_, c) = pair(
            &pin,
            (&server, &s_env),
            (&client, &c_env),
            Ready::Tcp(port),
            limit,
        )?;
        let line = c.lines().last().unwrap_or_default();
        Ok(line.split_whitespace().map(str::to_owned).collect())
    };
    let fi = |prov: &str, size: &str, n: &str, port: u16| fi_at(prov, size, n, port, None);
    let field = |v: Result<Vec<String>, BenchError>, i: usize| -> Result<f64, BenchError> {
        v.and_then(|f| {
            f.get(i)
                .and_then(|x| x.parse().ok())
                .ok_or_else(|| BenchError::Output(format!("unexpected line {f:?}")))
        })
    };
    for (prov, port, big_n) in [
        ("tcp;ofi_rxm", 24040, "2000"),
        ("udp;ofi_rxd", 24042, "200"),
        ("shm", 24044, "2000"),
    ] {
        add(
            &format!("libfabric {prov} fi_pingpong 8 B"),
            Kind::Lat,
            field(fi(prov, "8", "50000", port), 6),
        );
        add(
            &format!("libfabric {prov} fi_pingpong 1 MiB"),
            Kind::Bw,
            field(fi(prov, "1048576", big_n, port + 1), 5).map(|mb| mb * 1e6),
        );
    }
    // libfabric's verbs provider with ofi_rxm over softrdma (the drop-in): on one device,
    // whose processes meet on the same-host path, and between two devices over UDP.
    for (what, port, over) in [
        ("one device", 24046, ("127.0.0.4", "127.0.0.4")),
        ("two devices", 24048, ("127.0.0.2", "127.0.0.3")),
    ] {
        add(
            &format!("libfabric verbs;ofi_rxm over softrdma, {what}: fi_pingpong 8 B"),
            Kind::Lat,
            field(fi_at("verbs;ofi_rxm", "8", "50000", port, Some(over)), 6),
        );
        add(
            &format!("libfabric verbs;ofi_rxm over softrdma, {what}: fi_pingpong 1 MiB"),
            Kind::Bw,
            field(
                fi_at("verbs;ofi_rxm", "1048576", "2000", port + 1, Some(over)),
                5,
            )
            .map(|mb| mb * 1e6),
        );
    }

    // The two ratio goals again, from back-to-back pairs: this machine drifts between
    // regimes (the raw ping-pong moves by half a microsecond from one minute to the next), so
    // a ratio of two figures taken minutes apart can swing either way. Each pair runs the
    // baseline and then softrdma, seconds apart; the verdict takes the median pair.
    let mut paired = Paired::default();
    for _ in 0..PAIRS {
        if let (Ok(b), Ok(l)) = (pingpong(24001, &[]), write_lat()) {
            paired.lat.push(l / b);
        }
        if let (Ok(b), Ok(w)) = (blast(), write_bw_1m()) {
            paired.bw.push(w / b);
            // The floor right after: softrdma against what any RoCE endpoint must do.
            if let Ok(f) = blast_as(&["--roce"]) {
                paired.floor.push(f / b);
                paired.bw_floor.push(w / f);
            }
        }
    }

    // The drop-in against the Rust API, each pair back to back.
    for _ in 0..PAIRS {
        if let (Ok(c), Ok(r)) = (pt_lat(), write_lat()) {
            paired.dropin_lat.push(c / r);
        }
        if let (Ok(c), Ok(r)) = (pt_bw(), write_bw_1m()) {
            paired.dropin_bw.push(c / r);
        }
        if let (Ok(c), Ok(r)) = (pt_rate(), rate_8()) {
            paired.dropin_rate.push(c / r);
        }
        // perftest's buffer is its own heap memory, so the Rust API's row registers its own
        // as well: the same placement (cross-memory copy) on both sides of the pair.
        if let (Ok(c), Ok(r)) = (pt_lat_at(true), same_lat_as(true)) {
            paired.one_lat.push(c / r);
        }
        if let (Ok(c), Ok(r)) = (pt_bw_at(true), same_bw_1m_as(true)) {
            paired.one_bw.push(c / r);
        }
        if let (Ok(c), Ok(r)) = (pt_rate_at(true), same_rate_8_as(true)) {
            paired.one_rate.push(c / r);
        }
        let one = Some(("127.0.0.4", "127.0.0.4"));
        if let (Ok(t), Ok(o)) = (
            field(fi("tcp;ofi_rxm", "8", "50000", 24040), 6),
            field(fi_at("verbs;ofi_rxm", "8", "50000", 24046, one), 6),
        ) {
            paired.fi_lat.push(t / o);
        }
    }

    // Connection setup through rdma_cm (`softrdma cm-setup`: 1,000 connections one after
    // another, each from rdma_resolve_addr until both ends are ESTABLISHED), server and
    // client on two devices.
    let cm_setup = || -> Result<Value, BenchError> {
        let base = [sr.as_str(), "cm-setup", "-c", "1000", "-p", "24040"];
        let server = args(&base);
        let mut client = base.to_vec();
        client.extend(["--json", "127.0.0.2"]);
        let (_, c) = pair(
            &pin,
            (&server, &[("SOFTRDMA_ADDR", "127.0.0.2")]),
            (&args(&client), &[("SOFTRDMA_ADDR", "127.0.0.3")]),
            Ready::Line("ready"),
            limit,
        )?;
        last_json(&c)
    };
    let cm = cm_setup();
    let cm_fig = |key: &'static str| {
        cm.as_ref()
            .map_err(|e| BenchError::Output(e.to_string()))
            .and_then(|v| v[key].as_f64().ok_or_else(missing(key)))
    };
    add(
        "softrdma rdma_cm connection setup (resolve_addr to ESTABLISHED at both ends), median",
        Kind::Lat,
        cm_fig("median_us"),
    );
    add(
        "the same, p99 over 1,000 connections",
        Kind::Lat,
        cm_fig("p99_us"),
    );

    print_table(&figs, &pin, seconds, &paired);
    Ok(())
}

/// Back-to-back pairs the goals are judged from.
const PAIRS: usize = 3;

/// Ratios of softrdma to its baseline, each from a pair of runs one right after the other.
#[derive(Default)]
struct Paired {
    /// RC write-lat 8 B over the raw ping-pong.
    lat: Vec<f64>,
    /// write-bw 1 MiB over the blaster.
    bw: Vec<f64>,
    /// The bandwidth floor over the same blaster run.
    floor: Vec<f64>,
    /// write-bw 1 MiB over the floor run right after it.
    bw_floor: Vec<f64>,
    /// Unmodified ib_write_lat 8 B through the drop-in over softrdma perf write-lat.
    dropin_lat: Vec<f64>,
    /// Unmodified ib_write_bw 1 MiB over softrdma perf write-bw.
    dropin_bw: Vec<f64>,
    /// Unmodified ib_write_bw 8 B message rate over softrdma perf's.
    dropin_rate: Vec<f64>,
    /// The same three with both ends on one device (the same-host path).
    one_lat: Vec<f64>,
    one_bw: Vec<f64>,
    one_rate: Vec<f64>,
    /// libfabric tcp;ofi_rxm fi_pingpong 8 B latency over verbs;ofi_rxm's on one softrdma
    /// device (how many times faster softrdma is).
    fi_lat: Vec<f64>,
}

/// The numbers of the row under perftest's (or `softrdma perf`'s) `#bytes` header.
fn perftest_row(out: &str) -> Result<Vec<f64>, BenchError> {
    let mut lines = out.lines().skip_while(|l| !l.contains("#bytes"));
    lines.next();
    lines
        .find(|l| !l.trim().is_empty())
        .map(|l| {
            l.split_whitespace()
                .filter_map(|f| f.parse().ok())
                .collect()
        })
        .filter(|v: &Vec<f64>| v.len() >= 4)
        .ok_or_else(|| BenchError::Output(format!("no result row in: {out}")))
}

/// The median of `v` (the upper one of an even count); `None` when empty.
pub(crate) fn median(v: &[f64]) -> Option<f64> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

/// The median of `v` and the list it came from, as the table prints them.
fn median_of(v: &[f64]) -> Option<(f64, String)> {
    let list = v
        .iter()
        .map(|r| format!("{r:.2}×"))
        .collect::<Vec<_>>()
        .join(", ");
    median(v).map(|m| (m, list))
}

fn print_table(figs: &[Figure], pin: &Pin, seconds: u64, paired: &Paired) {
    let base = |k: Kind| {
        figs.iter()
            .find(|f| f.kind == k && f.what.starts_with("raw UDP"))
            .and_then(|f| f.value)
    };
    let (lat0, bw0) = (base(Kind::Lat), base(Kind::Bw));
    println!();
    if pin.server.is_empty() {
        println!("Processes not pinned (fewer than 2 CPUs or no taskset).");
    } else {
        println!(
            "Server pinned to CPU 0 and client to CPU 1 (taskset); bandwidth runs {seconds} s."
        );
    }
    println!();
    println!("| Figure | Value | Ratio to raw UDP |");
    println!("|---|---:|---:|");
    for f in figs {
        let (val, ratio) = match (f.value, f.kind) {
            (None, _) => (format!("skipped: {}", f.note.replace('|', "/")), "".into()),
            (Some(v), Kind::Lat) => (
                format!("{v:.2} µs"),
                lat0.map_or(String::new(), |b| format!("{:.2}×", v / b)),
            ),
            (Some(v), Kind::Bw) => (
                format!("{:.2} GB/s", v / 1e9),
                bw0.map_or(String::new(), |b| format!("{:.2}×", v / b)),
            ),
            (Some(v), Kind::Rate) => (format!("{:.3} M/s", v / 1e6), String::new()),
        };
        println!("| {} | {val} | {ratio} |", f.what);
    }
    let get = |p: &str| {
        figs.iter()
            .find(|f| f.what.starts_with(p))
            .and_then(|f| f.value)
    };
    println!();
    println!("Goals (the two ratios: the median of {PAIRS} back-to-back pairs, each listed):");
    let verdict = |ok: bool| if ok { "met" } else { "missed" };
    match median_of(&paired.lat) {
        Some((m, list)) => println!(
            "- 8 B WRITE latency ≤ 1.3× raw UDP: {m:.2}× ({}; pairs {list}; in the table above {})",
            verdict(m <= 1.3),
            get("softrdma write-lat")
                .zip(lat0)
                .map_or("-".into(), |(l, b)| format!("{:.2}×", l / b)),
        ),
        None => println!("- 8 B WRITE latency: no pair completed"),
    }
    match median_of(&paired.bw) {
        Some((m, list)) => println!(
            "- 1 MiB WRITE bandwidth ≥ 0.8× raw UDP GSO+GRO: {m:.2}× ({}; pairs {list}; in the table above {})",
            verdict(m >= 0.8),
            get("softrdma write-bw 1 MiB")
                .zip(bw0)
                .map_or("-".into(), |(w, b)| format!("{:.2}×", w / b)),
        ),
        None => println!("- 1 MiB WRITE bandwidth: no pair completed"),
    }
    if let (Some(l), Some(f)) = (
        get("softrdma write-lat 8 B,"),
        get("the same with a 20 B ACK"),
    ) {
        println!(
            "- (for reference) RC write-lat against the RC floor of this run: {:.2}×",
            l / f
        );
    }
    if let (Some((f, flist)), Some((w, wlist))) =
        (median_of(&paired.floor), median_of(&paired.bw_floor))
    {
        let bound = if f < 0.8 {
            ", so no RoCE endpoint on this path reaches 0.8×"
        } else {
            ""
        };
        println!(
            "- (for reference) the bandwidth floor itself: {f:.2}× raw UDP (pairs {flist}){bound}; write-bw 1 MiB against it: {w:.2}× (pairs {wlist})"
        );
    }
    let within = |name: &str, v: &[f64], low: f64, high: f64| match median_of(v) {
        Some((m, list)) => println!(
            "- {name}: {m:.2}× ({}; pairs {list})",
            verdict(m >= low && m <= high)
        ),
        None => println!("- {name}: no pair completed"),
    };
    within(
        "drop-in ib_write_lat 8 B within 10 % of softrdma perf write-lat (t_typical)",
        &paired.dropin_lat,
        0.0,
        1.1,
    );
    within(
        "drop-in ib_write_bw 1 MiB within 5 % of softrdma perf write-bw",
        &paired.dropin_bw,
        0.95,
        f64::INFINITY,
    );
    within(
        "drop-in ib_write_bw 8 B -t 512 -Q 64 message rate within 10 % of softrdma perf's",
        &paired.dropin_rate,
        0.9,
        f64::INFINITY,
    );
    within(
        "one device: drop-in ib_write_lat 8 B within 10 % of softrdma perf write-lat (t_typical)",
        &paired.one_lat,
        0.0,
        1.1,
    );
    within(
        "one device: drop-in ib_write_bw 1 MiB within 5 % of softrdma perf write-bw",
        &paired.one_bw,
        0.95,
        f64::INFINITY,
    );
    within(
        "one device: drop-in ib_write_bw 8 B -t 512 -Q 64 message rate within 10 % of softrdma perf's",
        &paired.one_rate,
        0.9,
        f64::INFINITY,
    );
    // The same-host goals (issue 15), each against its peer from this run.
    let ratio = |name: &str, ours: &str, theirs: &str, goal: f64, higher: bool| match (
        get(ours),
        get(theirs),
    ) {
        (Some(a), Some(b)) if b > 0.0 => {
            let r = a / b;
            let ok = if higher { r >= goal } else { r <= goal };
            println!(
                "- {name}: {r:.2}× ({a:.3e} against {b:.3e}; {})",
                verdict(ok)
            );
        }
        _ => println!("- {name}: a figure is missing"),
    };
    ratio(
        "same-host write-lat 8 B ≤ 2× UCX posix ucp_put_lat",
        "same host, one device (rings): softrdma write-lat",
        "UCX shared memory ucp_put_lat",
        2.0,
        false,
    );
    ratio(
        "same-host write-bw 1 MiB, application memory, ≥ 0.6× UCX's best same-host tag_bw (posix with CMA)",
        "same host, one device (rings), application memory: softrdma write-bw 1 MiB",
        "UCX shared memory with CMA tag_bw",
        0.6,
        true,
    );
    ratio(
        "same-host write-bw 1 MiB, memory softrdma allocates, ≥ 0.8× UCX posix ucp_put_bw",
        "same host, one device (rings): softrdma write-bw 1 MiB",
        "UCX shared memory ucp_put_bw",
        0.8,
        true,
    );
    ratio(
        "two processes on one device, one talking to another device: latency ≤ 1.5× a lone process's",
        "a member of a shared device (steered) to another device",
        "softrdma write-lat 8 B, t_typical",
        1.5,
        false,
    );
    ratio(
        "same-host placed WRITEs against rings alone (SOFTRDMA_CMA=0), write-bw 1 MiB",
        "same host, one device (rings): softrdma write-bw 1 MiB",
        "same host, one device (rings, SOFTRDMA_CMA=0): softrdma write-bw 1 MiB",
        1.0,
        true,
    );
    ratio(
        "same-host rings against the same device over UDP, write-lat 8 B (lower is better)",
        "same host, one device (rings): softrdma write-lat",
        "same host, one device (SOFTRDMA_SHM=0, UDP): softrdma write-lat",
        1.0,
        false,
    );
    // The libfabric goal (issue 37), from back-to-back pairs: verbs;ofi_rxm on softrdma's
    // same-host path against libfabric's own tcp provider (tcp;ofi_rxm), 8 B latency.
    within(
        "libfabric verbs;ofi_rxm over softrdma (one device) ≥ 3× faster than libfabric tcp;ofi_rxm, fi_pingpong 8 B latency (tcp's over ours)",
        &paired.fi_lat,
        3.0,
        f64::INFINITY,
    );
    for (what, name, goal) in [
        (
            "write-lat 8 B ≤ 0.5 µs",
            "same host, one device (rings): softrdma write-lat",
            0.5,
        ),
        (
            "send-lat 8 B ≤ 0.6 µs",
            "same host, one device (rings): softrdma send-lat",
            0.6,
        ),
    ] {
        if let Some(us) = get(name) {
            println!("- same-host {what}: {us:.2} µs ({})", verdict(us <= goal));
        }
    }
    if let Some(r) = get("same host, one device (rings): softrdma write-bw 8 B") {
        println!(
            "- same-host 8 B WRITE message rate ≥ 5 M/s: {:.3} M/s ({})",
            r / 1e6,
            verdict(r >= 5e6)
        );
    }
    if let Some(r) = get("softrdma write-bw 8 B") {
        println!(
            "- 8 B WRITE message rate ≥ 1 M/s: {:.3} M/s ({})",
            r / 1e6,
            verdict(r >= 1e6)
        );
    }
}
