//! IPv4 and IPv6 headers, as far as RoCE v2 needs them.
//!
//! RoCE v2 (IBTA Annex A17) carries the InfiniBand transport in UDP over IPv4 or IPv6 without
//! fragmentation. The parsers accept IPv4 options (the ICRC covers them) but not IPv6 extension
//! headers: a fragment header is [`Error::Fragmented`], any other next header is not RoCE.

use crate::error::{Error, Layer, NotRoceReason, Result};
use crate::macros::be;
use core::net::{Ipv4Addr, Ipv6Addr};

/// IP protocol number of UDP.
pub const PROTO_UDP: u8 = 17;
/// IPv6 next-header value of a fragment header.
pub const PROTO_IPV6_FRAGMENT: u8 = 44;

/// Byte ranges of the IPv4 header fields.
pub mod ipv4_field {
    use core::ops::Range;
    /// Version and header length in 32-bit words.
    pub const VER_IHL: usize = 0;
    /// DSCP and ECN (type of service).
    pub const TOS: usize = 1;
    /// Total length.
    pub const TOTAL_LEN: Range<usize> = 2..4;
    /// Identification.
    pub const IDENT: Range<usize> = 4..6;
    /// Flags (DF 0x4000, MF 0x2000) and fragment offset.
    pub const FLAGS_FRAG: Range<usize> = 6..8;
    /// Time to live.
    pub const TTL: usize = 8;
    /// Protocol.
    pub const PROTOCOL: usize = 9;
    /// Header checksum.
    pub const CHECKSUM: Range<usize> = 10..12;
    /// Source address.
    pub const SRC: Range<usize> = 12..16;
    /// Destination address.
    pub const DST: Range<usize> = 16..20;
    /// Header length without options.
    pub const LEN: usize = 20;
}

const DF: u16 = 0x4000;
const MF: u16 = 0x2000;
const FRAG_OFFSET: u16 = 0x1FFF;

/// An IPv4 header, the first `header_len()` bytes of which are checked to be present.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Checks version, header length, total length and fragmentation, then wraps the buffer,
    /// which may extend past the total length (Ethernet padding).
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        Error::check_len(Layer::Ipv4, ipv4_field::LEN, b.len())?;
        let p = Self { buffer };
        if p.version() != 4 {
            return Err(Error::NotRoce(NotRoceReason::IpVersion(p.version())));
        }
        let hl = p.header_len();
        if hl < ipv4_field::LEN {
            return Err(Error::LengthMismatch {
                layer: Layer::Ipv4,
                expected: ipv4_field::LEN,
                actual: hl,
            });
        }
        Error::check_len(Layer::Ipv4, hl, p.buffer.as_ref().len())?;
        let total = usize::from(p.total_len());
        if total < hl {
            return Err(Error::LengthMismatch {
                layer: Layer::Ipv4,
                expected: hl,
                actual: total,
            });
        }
        Error::check_len(Layer::Ipv4, total, p.buffer.as_ref().len())?;
        if p.more_fragments() || p.frag_offset() != 0 {
            return Err(Error::Fragmented);
        }
        Ok(p)
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// IP version (4).
    pub fn version(&self) -> u8 {
        self.b()[ipv4_field::VER_IHL] >> 4
    }
    /// Header length in bytes.
    pub fn header_len(&self) -> usize {
        usize::from(self.b()[ipv4_field::VER_IHL] & 0x0F) * 4
    }
    /// Type of service (DSCP and ECN).
    pub fn tos(&self) -> u8 {
        self.b()[ipv4_field::TOS]
    }
    /// Total length.
    pub fn total_len(&self) -> u16 {
        be::u16(self.b(), ipv4_field::TOTAL_LEN.start)
    }
    /// Identification.
    pub fn ident(&self) -> u16 {
        be::u16(self.b(), ipv4_field::IDENT.start)
    }
    /// Don't fragment.
    pub fn dont_frag(&self) -> bool {
        be::u16(self.b(), ipv4_field::FLAGS_FRAG.start) & DF != 0
    }
    /// More fragments.
    pub fn more_fragments(&self) -> bool {
        be::u16(self.b(), ipv4_field::FLAGS_FRAG.start) & MF != 0
    }
    /// Fragment offset in 8-byte units.
    pub fn frag_offset(&self) -> u16 {
        be::u16(self.b(), ipv4_field::FLAGS_FRAG.start) & FRAG_OFFSET
    }
    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.b()[ipv4_field::TTL]
    }
    /// Protocol.
    pub fn protocol(&self) -> u8 {
        self.b()[ipv4_field::PROTOCOL]
    }
    /// Header checksum as sent.
    pub fn checksum(&self) -> u16 {
        be::u16(self.b(), ipv4_field::CHECKSUM.start)
    }
    /// True when the header checksum is right.
    pub fn verify_checksum(&self) -> bool {
        checksum(self.header()) == 0
    }
    /// Source address.
    pub fn src(&self) -> Ipv4Addr {
        Ipv4Addr::from_bits(be::u32(self.b(), ipv4_field::SRC.start))
    }
    /// Destination address.
    pub fn dst(&self) -> Ipv4Addr {
        Ipv4Addr::from_bits(be::u32(self.b(), ipv4_field::DST.start))
    }
    /// The header, options included.
    pub fn header(&self) -> &[u8] {
        &self.b()[..self.header_len()]
    }
    /// The payload, up to the total length (without Ethernet padding).
    pub fn payload(&self) -> &[u8] {
        &self.b()[self.header_len()..usize::from(self.total_len())]
    }
}

/// The Internet checksum (RFC 1071) of `data`: zero when `data` includes a correct checksum.
pub fn checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

/// The fields of an IPv4 header without options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Repr {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Type of service (DSCP << 2 | ECN).
    pub tos: u8,
    /// Identification. Linux gives 0 to DF packets from unconnected UDP sockets; rxe counts.
    pub ident: u16,
    /// Don't fragment; RoCE senders set it.
    pub dont_frag: bool,
    /// Time to live.
    pub ttl: u8,
    /// Protocol.
    pub protocol: u8,
    /// Bytes after the header.
    pub payload_len: usize,
}

impl Ipv4Repr {
    /// Reads a checked header. Options are dropped.
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv4Packet<T>) -> Self {
        Self {
            src: p.src(),
            dst: p.dst(),
            tos: p.tos(),
            ident: p.ident(),
            dont_frag: p.dont_frag(),
            ttl: p.ttl(),
            protocol: p.protocol(),
            payload_len: p.payload().len(),
        }
    }

    /// Writes the 20-byte header with its checksum into `buf[..20]`. The caller has checked
    /// that the total length fits in 16 bits.
    pub fn emit(&self, buf: &mut [u8]) {
        let b = &mut buf[..ipv4_field::LEN];
        b[ipv4_field::VER_IHL] = 0x45;
        b[ipv4_field::TOS] = self.tos;
        be::set_u16(
            b,
            ipv4_field::TOTAL_LEN.start,
            (ipv4_field::LEN + self.payload_len) as u16,
        );
        be::set_u16(b, ipv4_field::IDENT.start, self.ident);
        be::set_u16(
            b,
            ipv4_field::FLAGS_FRAG.start,
            if self.dont_frag { DF } else { 0 },
        );
        b[ipv4_field::TTL] = self.ttl;
        b[ipv4_field::PROTOCOL] = self.protocol;
        be::set_u16(b, ipv4_field::CHECKSUM.start, 0);
        b[ipv4_field::SRC].copy_from_slice(&self.src.octets());
        b[ipv4_field::DST].copy_from_slice(&self.dst.octets());
        let c = checksum(b);
        be::set_u16(b, ipv4_field::CHECKSUM.start, c);
    }
}

/// Byte ranges of the IPv6 header fields.
pub mod ipv6_field {
    use core::ops::Range;
    /// Version, traffic class and flow label.
    pub const VER_TC_FL: Range<usize> = 0..4;
    /// Payload length.
    pub const PAYLOAD_LEN: Range<usize> = 4..6;
    /// Next header.
    pub const NEXT_HEADER: usize = 6;
    /// Hop limit.
    pub const HOP_LIMIT: usize = 7;
    /// Source address.
    pub const SRC: Range<usize> = 8..24;
    /// Destination address.
    pub const DST: Range<usize> = 24..40;
    /// Header length.
    pub const LEN: usize = 40;
}

/// A checked IPv6 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Checks version and payload length, then wraps the buffer, which may extend past the
    /// payload (Ethernet padding).
    pub fn new_checked(buffer: T) -> Result<Self> {
        Error::check_len(Layer::Ipv6, ipv6_field::LEN, buffer.as_ref().len())?;
        let p = Self { buffer };
        if p.version() != 6 {
            return Err(Error::NotRoce(NotRoceReason::IpVersion(p.version())));
        }
        let total = ipv6_field::LEN + usize::from(p.payload_len());
        Error::check_len(Layer::Ipv6, total, p.buffer.as_ref().len())?;
        if p.next_header() == PROTO_IPV6_FRAGMENT {
            return Err(Error::Fragmented);
        }
        Ok(p)
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    fn word0(&self) -> u32 {
        be::u32(self.b(), ipv6_field::VER_TC_FL.start)
    }
    /// IP version (6).
    pub fn version(&self) -> u8 {
        (self.word0() >> 28) as u8
    }
    /// Traffic class.
    pub fn traffic_class(&self) -> u8 {
        (self.word0() >> 20) as u8
    }
    /// Flow label, 20 bits.
    pub fn flow_label(&self) -> u32 {
        self.word0() & 0xF_FFFF
    }
    /// Payload length.
    pub fn payload_len(&self) -> u16 {
        be::u16(self.b(), ipv6_field::PAYLOAD_LEN.start)
    }
    /// Next header.
    pub fn next_header(&self) -> u8 {
        self.b()[ipv6_field::NEXT_HEADER]
    }
    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.b()[ipv6_field::HOP_LIMIT]
    }
    /// Source address.
    pub fn src(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.b()[ipv6_field::SRC]);
        Ipv6Addr::from(a)
    }
    /// Destination address.
    pub fn dst(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.b()[ipv6_field::DST]);
        Ipv6Addr::from(a)
    }
    /// The 40-byte header.
    pub fn header(&self) -> &[u8] {
        &self.b()[..ipv6_field::LEN]
    }
    /// The payload, up to the payload length.
    pub fn payload(&self) -> &[u8] {
        &self.b()[ipv6_field::LEN..ipv6_field::LEN + usize::from(self.payload_len())]
    }
}

/// The fields of an IPv6 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Repr {
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label, 20 bits.
    pub flow_label: u32,
    /// Next header.
    pub next_header: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Bytes after the header.
    pub payload_len: usize,
}

impl Ipv6Repr {
    /// Reads a checked header.
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv6Packet<T>) -> Self {
        Self {
            src: p.src(),
            dst: p.dst(),
            traffic_class: p.traffic_class(),
            flow_label: p.flow_label(),
            next_header: p.next_header(),
            hop_limit: p.hop_limit(),
            payload_len: usize::from(p.payload_len()),
        }
    }

    /// Writes the 40-byte header into `buf[..40]`. The caller has checked that the payload
    /// length fits in 16 bits.
    pub fn emit(&self, buf: &mut [u8]) {
        let b = &mut buf[..ipv6_field::LEN];
        let w0 =
            (6u32 << 28) | (u32::from(self.traffic_class) << 20) | (self.flow_label & 0xF_FFFF);
        be::set_u32(b, ipv6_field::VER_TC_FL.start, w0);
        be::set_u16(b, ipv6_field::PAYLOAD_LEN.start, self.payload_len as u16);
        b[ipv6_field::NEXT_HEADER] = self.next_header;
        b[ipv6_field::HOP_LIMIT] = self.hop_limit;
        b[ipv6_field::SRC].copy_from_slice(&self.src.octets());
        b[ipv6_field::DST].copy_from_slice(&self.dst.octets());
    }
}
