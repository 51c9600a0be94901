//! perftest's out-of-band exchange over TCP: the key messages that also serve as barriers,
//! the BW reports and the last `"done"`.
//!
//! The exchange (perftest's `perftest_communication.c`; the client writes first, the server
//! reads first, in every step): a 16-byte version string; the page size and cache line size
//! as 4-byte big-endian numbers; the MTU enum as a 2-byte string; then 108-byte key messages
//! `LID:OUT_READS:QPN:PSN:RKEY:VADDR:GID(16 bytes):SRQN:`, which also serve as barriers. BW
//! tests end with the client's report (size, iterations, peak, average, message rate, all
//! big-endian) and a last barrier followed by `"done"`.
//!
//! Owns the TCP connection ([`Oob`]) and the wire form of what crosses it; uses the flags
//! (`args`) to know which side it is and the result rows (`stats`) for the reports. A read
//! that waits more than 120 s is an error.

use super::args::PerfArgs;
use super::stats::Row;
use crate::error::CliError;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// The 108-byte key message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Keys {
    /// Always 0: RoCE has no LIDs.
    pub(super) lid: u16,
    /// READs and atomics this side lets the peer have outstanding.
    pub(super) out_reads: u16,
    /// The QP number.
    pub(super) qpn: u32,
    /// The first PSN this side sends.
    pub(super) psn: u32,
    /// The key of the buffer the peer writes into and reads from.
    pub(super) rkey: u32,
    /// The address of that buffer.
    pub(super) vaddr: u64,
    /// The GID (zeros: take the out-of-band peer's address).
    pub(super) gid: [u8; 16],
    /// The SRQ number (always 0: no SRQ).
    pub(super) srqn: u32,
}

impl Keys {
    fn wire(&self) -> [u8; 108] {
        let mut s = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid, self.out_reads, self.qpn, self.psn, self.rkey, self.vaddr
        );
        for b in self.gid {
            s.push_str(&format!("{b:02x}:"));
        }
        s.push_str(&format!("{:08x}:", self.srqn));
        let mut m = [0u8; 108];
        let n = s.len().min(107);
        m[..n].copy_from_slice(&s.as_bytes()[..n]);
        m
    }

    fn parse(m: &[u8; 108]) -> Result<Self, CliError> {
        let (text, f) = crate::oob::fields(m, "key message")?;
        if f.len() < 23 {
            return Err(CliError::Peer(format!(
                "key message {text:?} has {} fields",
                f.len()
            )));
        }
        let h = crate::oob::hex;
        let mut gid = [0u8; 16];
        for (i, g) in gid.iter_mut().enumerate() {
            *g = h(f[6 + i])? as u8;
        }
        Ok(Self {
            lid: h(f[0])? as u16,
            out_reads: h(f[1])? as u16,
            qpn: h(f[2])? as u32,
            psn: h(f[3])? as u32,
            rkey: h(f[4])? as u32,
            vaddr: h(f[5])?,
            gid,
            srqn: h(f[22])? as u32,
        })
    }
}

/// The out-of-band connection.
pub(super) struct Oob {
    /// The connection; its peer address stands in for a peer GID of zeros.
    pub(super) s: TcpStream,
    client: bool,
}

impl Oob {
    /// Both sides send `mine`; the client first.
    pub(super) fn xchg(&mut self, mine: &[u8]) -> Result<Vec<u8>, CliError> {
        let mut theirs = vec![0u8; mine.len()];
        let io = |source| CliError::Io {
            what: "out-of-band exchange failed".into(),
            source,
        };
        if self.client {
            self.s.write_all(mine).map_err(io)?;
            self.s.read_exact(&mut theirs).map_err(io)?;
        } else {
            self.s.read_exact(&mut theirs).map_err(io)?;
            self.s.write_all(mine).map_err(io)?;
        }
        Ok(theirs)
    }

    /// Exchanges key messages: perftest's barrier.
    pub(super) fn hand_shake(&mut self, me: &Keys) -> Result<Keys, CliError> {
        let m = self.xchg(&me.wire())?;
        let mut a = [0u8; 108];
        a.copy_from_slice(&m);
        Keys::parse(&a)
    }

    /// Connects to the server, or listens and accepts the client.
    pub(super) fn open(a: &PerfArgs) -> Result<Self, CliError> {
        match &a.host {
            Some(h) => {
                let s =
                    TcpStream::connect((h.as_str(), a.port)).map_err(|source| CliError::Io {
                        what: format!("Couldn't connect to {h}:{}", a.port),
                        source,
                    })?;
                Ok(Self::new(s, true))
            }
            None => {
                let l = crate::oob::listen(a.port)?;
                println!("\n************************************");
                println!("* Waiting for client to connect... *");
                println!("************************************");
                let (s, _) = l.accept().map_err(|source| CliError::Io {
                    what: "accept".into(),
                    source,
                })?;
                Ok(Self::new(s, false))
            }
        }
    }

    fn new(s: TcpStream, client: bool) -> Self {
        // Barriers are tiny messages that the other side waits for: no Nagle delay. A peer
        // that stops answering is an error, not a hang.
        let _ = s.set_nodelay(true);
        let _ = s.set_read_timeout(Some(Duration::from_secs(120)));
        Self { s, client }
    }

    /// BW reports both ways (perftest's `xchg_bw_reports`): size and iterations as big-endian
    /// 64-bit integers, then peak and average MB/s and Mpps as big-endian doubles. A side
    /// without a report of its own (the server of a one-way test) sends zeros.
    pub(super) fn xchg_report(&mut self, mine: Option<&Row>) -> Result<Row, CliError> {
        let mut out = [0u64; 5];
        if let Some(&Row::Bw {
            bytes,
            iters,
            peak,
            avg,
            rate,
        }) = mine
        {
            out = [
                bytes,
                iters,
                (peak / MB).to_bits(),
                (avg / MB).to_bits(),
                (rate / 1e6).to_bits(),
            ];
        }
        let mut f = [0u64; 5];
        for (v, o) in f.iter_mut().zip(out) {
            let got = self.xchg(&o.to_be_bytes())?;
            *v = u64::from_be_bytes(
                got.try_into()
                    .map_err(|_| CliError::Peer("short report".into()))?,
            );
        }
        let d = |i: usize| f64::from_bits(f[i]);
        Ok(Row::Bw {
            bytes: f[0],
            iters: f[1],
            peak: d(2) * MB,
            avg: d(3) * MB,
            rate: d(4) * 1e6,
        })
    }

    /// The final barrier and `"done"`.
    pub(super) fn close(&mut self, me: &Keys) -> Result<(), CliError> {
        self.hand_shake(me)?;
        let _ = self.s.write_all(b"done\0");
        Ok(())
    }
}

/// The perftest version this side announces.
pub(super) const VERSION: &str = "6.06";
/// The page size this side announces.
pub(super) const PAGE: u32 = 4096;
/// The cache line size this side announces.
pub(super) const CACHE_LINE: u32 = 64;
/// perftest's MB: 2^20 bytes.
const MB: f64 = 1048576.0;
