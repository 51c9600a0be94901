//! `udp-blast-recv` and `udp-blast-send`: the GSO+GRO blaster, 4096-byte segments; with
//! `--roce`, each segment also framed, CRC'd, sent from and placed into a 1 MiB region as a
//! RoCE endpoint must at the least: the bandwidth floor.
//!
//! Calls `mmsg` for the batched system calls and `spin` for [`QUIET`].

use super::mmsg::{RecvMmsg, SendMmsg, recvmsg_roce};
use super::spin::QUIET;
use crate::error::{BenchError, io, sys};
use nix::sys::socket::{ControlMessage, MsgFlags, setsockopt, sockopt};
use serde_json::json;
use std::io::IoSlice;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

const SEG: usize = 4096;
/// The region a RoCE-like blaster sends from and receives into.
const REGION: usize = 1 << 20;
/// A RoCE-like blaster's header per segment (a BTH's length).
const HDR: usize = 12;

/// `udp-blast-recv`: prints "ready", receives until the end marker or a quiet peer, and
/// prints the bytes per second after the first batch as JSON.
pub(crate) fn udp_blast_recv(addr: SocketAddr, roce: bool) -> Result<(), BenchError> {
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

/// `udp-blast-send`: blasts `peer` for `seconds`, then sends the end marker.
pub(crate) fn udp_blast_send(
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
