//! The pcap writer: `SOFTRDMA_PCAP=FILE` writes every packet the device sends and receives
//! to FILE as classic pcap with synthesized Ethernet, IP and UDP headers. The IP
//! identification is the one the packet had (0 for ours; recovered from the ICRC for rxe's),
//! so every ICRC in the file verifies.

use super::batch::SendBatch;
use super::socket::RecvBatch;
use super::{Datapath, Sent};
use crate::error::{Error, Result};
use crate::sync::{Lock, Rank};
use softrdma_proto::endpoint::check::{IcrcCheck, IcrcOk};
use softrdma_wire::ROCE_V2_PORT;
use softrdma_wire::ethernet::{ETHERTYPE_IPV4, ETHERTYPE_IPV6, EthernetRepr};
use softrdma_wire::pcap::{LINKTYPE_ETHERNET, PcapWriter};
use softrdma_wire::roce::IpRepr;
use softrdma_wire::udp::UdpRepr;
use std::io::BufWriter;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::RawFd;

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
    pub fn record(
        &mut self,
        src: IpAddr,
        dst: IpAddr,
        sport: u16,
        (ident, tos): (u16, u8),
        ib: &[u8],
    ) {
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
                r.tos = tos;
                r.payload_len = udp_len;
                r.emit(&mut frame[14..]);
            }
            IpRepr::V6(r) => {
                r.traffic_class = tos;
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

/// A driver whose every packet, sent and received, is recorded to a pcap file. Received
/// IPv4 packets get the IP identification they carried, recovered from their ICRC (a check
/// of the capture's own, beside the device's), so every ICRC in the file verifies.
pub struct Captured<D> {
    inner: D,
    /// The device's address.
    addr: IpAddr,
    file: Lock<(Capture, IcrcCheck)>,
}

impl<D> Captured<D> {
    /// `inner`, recorded to `file`; `addr`: the device's address.
    pub(crate) fn new(inner: D, addr: IpAddr, file: Capture) -> Self {
        Self {
            inner,
            addr,
            file: Lock::new(Rank::Pcap, (file, IcrcCheck::default())),
        }
    }
}

impl<D: Datapath> Datapath for Captured<D> {
    fn port(&self) -> u16 {
        self.inner.port()
    }

    fn readable_fd(&self) -> Option<RawFd> {
        self.inner.readable_fd()
    }

    fn recv(&self, batch: &mut RecvBatch, want: usize) -> std::io::Result<usize> {
        let n = self.inner.recv(batch, want)?;
        let mut f = self.file.lock();
        let (file, check) = &mut *f;
        for i in 0..n {
            let (data, from, _, seg) = batch.get(i);
            let Some(from) = from else { continue };
            let seg = if seg == 0 { data.len().max(1) } else { seg };
            for d in data.chunks(seg) {
                let ident = check
                    .check(from.ip(), self.addr, from.port(), d)
                    .map_or(0, IcrcOk::ident);
                file.record(from.ip(), self.addr, from.port(), (ident, 0), d);
            }
        }
        Ok(n)
    }

    fn send(&self, batch: &mut SendBatch, now: u64) -> Sent {
        if !batch.is_empty() {
            let mut f = self.file.lock();
            let port = self.inner.port();
            for (bytes, dst, tos) in batch.packets() {
                f.0.record(self.addr, dst.ip(), port, (0, tos), &bytes);
            }
        }
        self.inner.send(batch, now)
    }

    fn release(&self, now: u64) -> Sent {
        self.inner.release(now)
    }

    fn join(&self, group: IpAddr) -> std::io::Result<Option<RawFd>> {
        self.inner.join(group)
    }

    fn leave(&self, group: IpAddr) {
        self.inner.leave(group)
    }

    fn recv_groups(&self, buf: &mut [u8], f: &mut dyn FnMut(IpAddr, SocketAddr, &[u8])) -> usize {
        self.inner.recv_groups(buf, &mut |group, from, d| {
            {
                let mut held = self.file.lock();
                let (file, check) = &mut *held;
                let ident = check
                    .check(from.ip(), group, from.port(), d)
                    .map_or(0, IcrcOk::ident);
                file.record(from.ip(), group, from.port(), (ident, 0), d);
            }
            f(group, from, d)
        })
    }

    fn flush_capture(&self) {
        self.file.lock().0.flush();
        self.inner.flush_capture();
    }

    fn holds(&self) -> bool {
        self.inner.holds()
    }
}
