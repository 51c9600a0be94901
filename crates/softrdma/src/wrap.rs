//! Fault injection and packet capture, wrapped around the device's socket.
//!
//! * `SOFTRDMA_FAULTS="drop=0.01,dup=0.01,reorder=0.05,corrupt=0.001,delay_us=50"` applies to
//!   every packet the device sends: drop it, send it twice, hold it back so later packets
//!   overtake it, flip one bit (the receiver's ICRC check must catch it), or delay it.
//! * `SOFTRDMA_PCAP=FILE` writes every packet sent and received to FILE as classic pcap with
//!   synthesized Ethernet, IP and UDP headers. The IP identification is the one the packet
//!   had (0 for ours; recovered from the ICRC for rxe's), so every ICRC in the file verifies.

use crate::error::{Error, Result};
use rand::Rng;
use softrdma_wire::ROCE_V2_PORT;
use softrdma_wire::ethernet::{ETHERTYPE_IPV4, ETHERTYPE_IPV6, EthernetRepr};
use softrdma_wire::pcap::{LINKTYPE_ETHERNET, PcapWriter};
use softrdma_wire::roce::IpRepr;
use softrdma_wire::udp::UdpRepr;
use std::io::BufWriter;
use std::net::IpAddr;
use std::time::Duration;

/// Fault probabilities and delay.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Faults {
    /// Probability of dropping a packet.
    pub drop: f64,
    /// Probability of sending a packet twice.
    pub dup: f64,
    /// Probability of holding a packet back behind later ones.
    pub reorder: f64,
    /// Probability of flipping one bit.
    pub corrupt: f64,
    /// Delay of every packet.
    pub delay: Duration,
}

impl Faults {
    /// Parses `SOFTRDMA_FAULTS`' syntax.
    pub fn parse(s: &str) -> Result<Self> {
        let mut f = Faults::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let bad = |why: String| Error::attr("ibv_open_device", "SOFTRDMA_FAULTS", why);
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| bad(format!("{part:?} is not KEY=VALUE")))?;
            let num: f64 = v
                .parse()
                .map_err(|_| bad(format!("{k}={v:?}: not a number")))?;
            let prob = |x: f64| {
                if (0.0..=1.0).contains(&x) {
                    Ok(x)
                } else {
                    Err(bad(format!("{k}={x} is not a probability between 0 and 1")))
                }
            };
            match k {
                "drop" => f.drop = prob(num)?,
                "dup" => f.dup = prob(num)?,
                "reorder" => f.reorder = prob(num)?,
                "corrupt" => f.corrupt = prob(num)?,
                "delay_us" if num >= 0.0 => f.delay = Duration::from_secs_f64(num / 1e6),
                _ => {
                    return Err(bad(format!(
                        "unknown or invalid {k:?} (use drop, dup, reorder, corrupt, delay_us)"
                    )));
                }
            }
        }
        Ok(f)
    }

    /// Decides what happens to one packet: the copies to send, each with its extra delay
    /// (`None`: the packet is dropped), after corrupting `bytes` if so chosen.
    pub fn apply(&self, bytes: &mut [u8]) -> Vec<Duration> {
        let mut r = rand::rng();
        if r.random_bool(self.drop) {
            return Vec::new();
        }
        if !bytes.is_empty() && r.random_bool(self.corrupt) {
            let bit = r.random_range(0..bytes.len() * 8);
            bytes[bit / 8] ^= 1 << (bit % 8);
        }
        let copies = if r.random_bool(self.dup) { 2 } else { 1 };
        (0..copies)
            .map(|_| {
                let mut d = self.delay;
                if r.random_bool(self.reorder) {
                    // Held back long enough for later packets to pass it.
                    d += Duration::from_micros(r.random_range(20..200));
                }
                d
            })
            .collect()
    }
}

/// A pcap file of the device's traffic.
pub struct Capture {
    out: PcapWriter<BufWriter<std::fs::File>>,
    epoch: std::time::SystemTime,
    started: std::time::Instant,
}

impl Capture {
    /// Creates FILE.
    pub fn create(path: &str) -> Result<Self> {
        let f = std::fs::File::create(path).map_err(|e| Error::Io {
            verb: "SOFTRDMA_PCAP",
            source: e,
        })?;
        let out = PcapWriter::new(BufWriter::new(f), LINKTYPE_ETHERNET)
            .map_err(Error::io("SOFTRDMA_PCAP"))?;
        Ok(Self {
            out,
            epoch: std::time::SystemTime::now(),
            started: std::time::Instant::now(),
        })
    }

    /// Records one packet: the InfiniBand part `ib` between `src` and `dst` with IPv4
    /// identification `ident`.
    pub fn record(&mut self, src: IpAddr, dst: IpAddr, sport: u16, ident: u16, ib: &[u8]) {
        let (src, dst) = (src.to_canonical(), dst.to_canonical());
        let Some(mut ip) = IpRepr::for_addrs(src, dst) else {
            return;
        };
        let udp_len = 8 + ib.len();
        let ip_len = ip.header_len();
        let mut frame = vec![0u8; 14 + ip_len + udp_len];
        let mac = |a: IpAddr| {
            let o = match a {
                IpAddr::V4(v) => v.to_ipv6_mapped().octets(),
                IpAddr::V6(v) => v.octets(),
            };
            [0x02, 0x00, o[12], o[13], o[14], o[15]]
        };
        EthernetRepr {
            dst: mac(dst),
            src: mac(src),
            ethertype: if ip_len == 20 {
                ETHERTYPE_IPV4
            } else {
                ETHERTYPE_IPV6
            },
        }
        .emit(&mut frame);
        match &mut ip {
            IpRepr::V4(r) => {
                r.ident = ident;
                r.payload_len = udp_len;
                r.emit(&mut frame[14..]);
            }
            IpRepr::V6(r) => {
                r.payload_len = udp_len;
                r.emit(&mut frame[14..]);
            }
        }
        UdpRepr {
            src_port: sport,
            dst_port: ROCE_V2_PORT,
            checksum: 0,
        }
        .emit(&mut frame[14 + ip_len..], ib.len());
        frame[14 + ip_len + 8..].copy_from_slice(ib);
        let ts = self
            .epoch
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            + self.started.elapsed();
        let _ = self.out.write_packet(ts, &frame);
    }

    /// Writes buffered packets out.
    pub fn flush(&mut self) {
        let _ = self.out.flush_inner();
    }
}
