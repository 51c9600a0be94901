//! Whole RoCE v2 packets: IP, UDP and the InfiniBand part, with the ICRC.
//!
//! [`RoceFrame`] parses from the IP header (what a raw socket sees) or from the Ethernet header
//! (what a capture holds). [`RoceRepr`] builds a packet and fills in the ICRC.

use crate::error::{Error, Layer, NotRoceReason, Result};
use crate::ethernet::{ETHERTYPE_IPV4, ETHERTYPE_IPV6, EthernetRepr};
use crate::icrc;
use crate::ip::{Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr, PROTO_UDP, ipv4_field, ipv6_field};
use crate::packet::{ICRC_LEN, IbPacket, IbRepr};
use crate::udp::{UdpHeader, UdpRepr, field as udp_field};
use core::net::IpAddr;

pub use crate::udp::ROCE_V2_PORT;

/// The IP layer of a RoCE v2 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpRepr {
    /// IPv4.
    V4(Ipv4Repr),
    /// IPv6.
    V6(Ipv6Repr),
}

impl IpRepr {
    /// Source address.
    pub fn src(&self) -> IpAddr {
        match self {
            IpRepr::V4(r) => IpAddr::V4(r.src),
            IpRepr::V6(r) => IpAddr::V6(r.src),
        }
    }
    /// Destination address.
    pub fn dst(&self) -> IpAddr {
        match self {
            IpRepr::V4(r) => IpAddr::V4(r.dst),
            IpRepr::V6(r) => IpAddr::V6(r.dst),
        }
    }
    /// Header length (20 or 40).
    pub fn header_len(&self) -> usize {
        match self {
            IpRepr::V4(_) => ipv4_field::LEN,
            IpRepr::V6(_) => ipv6_field::LEN,
        }
    }
    /// The header rxe sends from `src` to `dst`: IPv4 with DF, TTL 64 and ID 0 (what Linux
    /// gives an unconnected DF socket), or IPv6 with hop limit 64 and flow label 0. Addresses
    /// of different families, or an IPv4-mapped IPv6 address on one side only, are not
    /// allowed: `None`.
    pub fn for_addrs(src: IpAddr, dst: IpAddr) -> Option<Self> {
        match (src, dst) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => Some(IpRepr::V4(Ipv4Repr {
                src,
                dst,
                tos: 0,
                ident: 0,
                dont_frag: true,
                ttl: 64,
                protocol: PROTO_UDP,
                payload_len: 0,
            })),
            (IpAddr::V6(src), IpAddr::V6(dst)) => Some(IpRepr::V6(Ipv6Repr {
                src,
                dst,
                traffic_class: 0,
                flow_label: 0,
                next_header: PROTO_UDP,
                hop_limit: 64,
                payload_len: 0,
            })),
            _ => None,
        }
    }
}

/// A checked RoCE v2 packet: the IP header, UDP header and InfiniBand part, borrowed.
#[derive(Debug, Clone, Copy)]
pub struct RoceFrame<'a> {
    ip_header: &'a [u8],
    ip: IpRepr,
    udp: UdpHeader<&'a [u8]>,
    ib: IbPacket<&'a [u8]>,
}

impl<'a> RoceFrame<'a> {
    /// Parses an Ethernet frame. Frames that are not IPv4/IPv6 UDP to port 4791 are
    /// [`Error::NotRoce`].
    pub fn parse_ethernet(frame: &'a [u8]) -> Result<Self> {
        let (eth, payload) = EthernetRepr::parse(frame)?;
        match eth.ethertype {
            ETHERTYPE_IPV4 | ETHERTYPE_IPV6 => Self::parse_ip(payload),
            t => Err(Error::NotRoce(NotRoceReason::EtherType(t))),
        }
    }

    /// Parses a packet that starts with its IPv4 or IPv6 header.
    ///
    /// Traffic that is recognisably not RoCE v2 (another protocol or UDP port) is
    /// [`Error::NotRoce`] even when it is truncated or fragmented, so that callers can skip it;
    /// every other error means a damaged RoCE v2 packet.
    pub fn parse_ip(packet: &'a [u8]) -> Result<Self> {
        Error::check_len(Layer::Ipv4, ipv4_field::LEN, packet.len())?;
        classify(packet)?;
        let version = packet[0] >> 4;
        let (ip_header, ip, datagram) = match version {
            4 => {
                let p = Ipv4Packet::new_checked(packet)?;
                if p.protocol() != PROTO_UDP {
                    return Err(Error::NotRoce(NotRoceReason::IpProtocol(p.protocol())));
                }
                let (hl, total) = (p.header_len(), usize::from(p.total_len()));
                (
                    &packet[..hl],
                    IpRepr::V4(Ipv4Repr::parse(&p)),
                    &packet[hl..total],
                )
            }
            6 => {
                let p = Ipv6Packet::new_checked(packet)?;
                if p.next_header() != PROTO_UDP {
                    return Err(Error::NotRoce(NotRoceReason::IpProtocol(p.next_header())));
                }
                let total = ipv6_field::LEN + usize::from(p.payload_len());
                let repr = IpRepr::V6(Ipv6Repr::parse(&p));
                (
                    &packet[..ipv6_field::LEN],
                    repr,
                    &packet[ipv6_field::LEN..total],
                )
            }
            v => return Err(Error::NotRoce(NotRoceReason::IpVersion(v))),
        };
        let udp = UdpHeader::new_checked(datagram)?;
        if udp.dst_port() != ROCE_V2_PORT {
            return Err(Error::NotRoce(NotRoceReason::UdpPort(udp.dst_port())));
        }
        let ib = IbPacket::new_checked(udp.payload(datagram)?)?;
        let udp = UdpHeader::new_unchecked(&datagram[..udp_field::HEADER_LEN]);
        Ok(Self {
            ip_header,
            ip,
            udp,
            ib,
        })
    }

    /// The IP layer.
    pub fn ip(&self) -> &IpRepr {
        &self.ip
    }

    /// The raw IP header.
    pub fn ip_header(&self) -> &'a [u8] {
        self.ip_header
    }

    /// The UDP header.
    pub fn udp(&self) -> UdpHeader<&'a [u8]> {
        self.udp
    }

    /// The InfiniBand part.
    pub fn ib(&self) -> &IbPacket<&'a [u8]> {
        &self.ib
    }

    /// The ICRC recomputed from the packet's bytes.
    pub fn computed_icrc(&self) -> u32 {
        // Every part was length-checked when the frame was parsed, so this cannot fail.
        icrc::compute(
            self.ip_header,
            self.udp.into_inner(),
            self.ib.without_icrc(),
        )
        .unwrap_or(!self.ib.icrc())
    }

    /// True when the ICRC on the wire matches the packet.
    pub fn icrc_ok(&self) -> bool {
        self.computed_icrc() == self.ib.icrc()
    }
}

/// Rejects, before any length or fragment checks, what is visibly not RoCE v2: a protocol
/// other than UDP, or a UDP destination port other than 4791 where the UDP header is present.
fn classify(packet: &[u8]) -> Result<()> {
    let (proto, udp_at, first_fragment) = match packet[0] >> 4 {
        4 => {
            let flags = u16::from_be_bytes([packet[6], packet[7]]);
            let ihl = usize::from(packet[0] & 0x0F) * 4;
            if ihl < ipv4_field::LEN {
                return Ok(());
            }
            (packet[9], ihl, flags & 0x1FFF == 0)
        }
        6 if packet.len() >= ipv6_field::LEN => (packet[6], ipv6_field::LEN, true),
        _ => return Ok(()),
    };
    if proto != PROTO_UDP && proto != crate::ip::PROTO_IPV6_FRAGMENT {
        return Err(Error::NotRoce(NotRoceReason::IpProtocol(proto)));
    }
    if proto == PROTO_UDP && first_fragment && packet.len() >= udp_at + 4 {
        let port = u16::from_be_bytes([packet[udp_at + 2], packet[udp_at + 3]]);
        if port != ROCE_V2_PORT {
            return Err(Error::NotRoce(NotRoceReason::UdpPort(port)));
        }
    }
    Ok(())
}

/// The plain form of a whole RoCE v2 packet, from the IP header on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RoceRepr<'a> {
    /// The IP header; its payload length and protocol are derived on emit.
    pub ip: IpRepr,
    /// The UDP header; the destination port is normally [`ROCE_V2_PORT`].
    pub udp: UdpRepr,
    /// The InfiniBand part.
    pub ib: IbRepr<'a>,
}

impl<'a> RoceRepr<'a> {
    /// Reads a checked frame.
    pub fn parse(frame: &'a RoceFrame<'a>) -> Result<Self> {
        Ok(Self {
            ip: frame.ip,
            udp: UdpRepr::parse(&frame.udp),
            ib: IbRepr::parse(&frame.ib)?,
        })
    }

    /// Bytes the packet occupies from the IP header to the ICRC.
    pub fn buffer_len(&self) -> usize {
        self.ip.header_len() + udp_field::HEADER_LEN + self.ib.buffer_len()
    }

    /// Writes the packet, ICRC included, into the start of `buf` and returns its length.
    /// Fails, without panicking, on an invalid InfiniBand part, a packet too long for its IP
    /// length field, or a short buffer.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let len = self.buffer_len();
        let ip_len = self.ip.header_len();
        let udp_payload = self.ib.buffer_len();
        let limit = match self.ip {
            IpRepr::V4(_) => usize::from(u16::MAX),
            IpRepr::V6(_) => usize::from(u16::MAX) + ip_len,
        };
        if len > limit {
            return Err(Error::LengthMismatch {
                layer: Layer::Payload,
                expected: limit,
                actual: len,
            });
        }
        Error::check_len(Layer::Payload, len, buf.len())?;
        let buf = &mut buf[..len];
        let (ip_buf, rest) = buf.split_at_mut(ip_len);
        let (udp_buf, ib_buf) = rest.split_at_mut(udp_field::HEADER_LEN);
        self.ib.emit(ib_buf)?;
        match self.ip {
            IpRepr::V4(mut r) => {
                r.payload_len = udp_field::HEADER_LEN + udp_payload;
                r.protocol = PROTO_UDP;
                r.emit(ip_buf);
            }
            IpRepr::V6(mut r) => {
                r.payload_len = udp_field::HEADER_LEN + udp_payload;
                r.next_header = PROTO_UDP;
                r.emit(ip_buf);
            }
        }
        self.udp.emit(udp_buf, udp_payload);
        let body = ib_buf.len() - ICRC_LEN;
        let crc = icrc::compute(ip_buf, udp_buf, &ib_buf[..body])?;
        ib_buf[body..].copy_from_slice(&crc.to_le_bytes());
        Ok(len)
    }
}
