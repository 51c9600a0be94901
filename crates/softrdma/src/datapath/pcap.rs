//! The pcap writer: `SOFTRDMA_PCAP=FILE` writes every packet the device sends and receives
//! to FILE as classic pcap with synthesized Ethernet, IP and UDP headers. The IP
//! identification is the one the packet had (0 for ours; recovered from the ICRC for rxe's),
//! so every ICRC in the file verifies.

use crate::error::{Error, Result};
use softrdma_wire::ROCE_V2_PORT;
use softrdma_wire::ethernet::{ETHERTYPE_IPV4, ETHERTYPE_IPV6, EthernetRepr};
use softrdma_wire::pcap::{LINKTYPE_ETHERNET, PcapWriter};
use softrdma_wire::roce::IpRepr;
use softrdma_wire::udp::UdpRepr;
use std::io::BufWriter;
use std::net::IpAddr;

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
