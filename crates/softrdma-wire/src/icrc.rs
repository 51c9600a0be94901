//! The invariant CRC of RoCE v2 (IBTA vol. 1, 7.8.1, and Annex A17 for the IP/UDP rules).
//!
//! CRC-32 (IEEE 802.3: reflected, initial value and final XOR all ones) over, in order:
//!
//! 1. eight bytes of 0xFF, standing in for the InfiniBand LRH;
//! 2. the IP header with the fields routers may change set to ones: IPv4 TOS, TTL and header
//!    checksum; IPv6 traffic class, flow label and hop limit;
//! 3. the UDP header with the checksum set to ones;
//! 4. the BTH with byte 4 (FECN, BECN, reserved) set to ones;
//! 5. the extension headers, payload and pad.
//!
//! The value goes on the wire little-endian (`crc.to_le_bytes()`); Wireshark shows the wire
//! bytes read big-endian as "Invariant CRC". Verified against 339 rxe packets.

use crate::bth::field as bth_field;
use crate::error::{Error, Layer, NotRoceReason, Result};
use crate::ip::{ipv4_field, ipv6_field};
use crate::udp::field as udp_field;

/// Bytes of all ones that stand in for the LRH.
const LRH_ONES: [u8; 8] = [0xFF; 8];
/// Longest IPv4 header (IHL 15).
const MAX_IPV4_HEADER: usize = 60;

/// Computes the ICRC of a packet from its IP header (IPv4 with any options, or the 40-byte IPv6
/// header), its 8-byte UDP header, and its InfiniBand part without the ICRC.
///
/// Fails if the IP header is neither a whole IPv4 nor a whole IPv6 header, or if either of the
/// other parts is too short.
pub fn compute(ip_header: &[u8], udp_header: &[u8], ib: &[u8]) -> Result<u32> {
    Error::check_len(Layer::Udp, udp_field::HEADER_LEN, udp_header.len())?;
    Error::check_len(Layer::Bth, bth_field::LEN, ib.len())?;
    let mut h = crc32fast::Hasher::new();
    h.update(&LRH_ONES);
    let mut ip = [0u8; MAX_IPV4_HEADER];
    let version = ip_header.first().map_or(0, |b| b >> 4);
    match version {
        4 => {
            let len = ip_header.len();
            if !(ipv4_field::LEN..=MAX_IPV4_HEADER).contains(&len) {
                return Err(Error::LengthMismatch {
                    layer: Layer::Ipv4,
                    expected: ipv4_field::LEN,
                    actual: len,
                });
            }
            let ip = &mut ip[..len];
            ip.copy_from_slice(ip_header);
            ip[ipv4_field::TOS] = 0xFF;
            ip[ipv4_field::TTL] = 0xFF;
            ip[ipv4_field::CHECKSUM].fill(0xFF);
            h.update(ip);
        }
        6 => {
            if ip_header.len() != ipv6_field::LEN {
                return Err(Error::LengthMismatch {
                    layer: Layer::Ipv6,
                    expected: ipv6_field::LEN,
                    actual: ip_header.len(),
                });
            }
            let ip = &mut ip[..ipv6_field::LEN];
            ip.copy_from_slice(ip_header);
            // Version stays; traffic class and flow label (the rest of the first word) are
            // ones.
            ip[0] |= 0x0F;
            ip[1..4].fill(0xFF);
            ip[ipv6_field::HOP_LIMIT] = 0xFF;
            h.update(ip);
        }
        v => return Err(Error::NotRoce(NotRoceReason::IpVersion(v))),
    }
    let mut udp = [0u8; udp_field::HEADER_LEN];
    udp.copy_from_slice(&udp_header[..udp_field::HEADER_LEN]);
    udp[udp_field::CHECKSUM].fill(0xFF);
    h.update(&udp);
    let mut bth = [0u8; bth_field::LEN];
    bth.copy_from_slice(&ib[..bth_field::LEN]);
    bth[bth_field::RESV8] = 0xFF;
    h.update(&bth);
    h.update(&ib[bth_field::LEN..]);
    Ok(h.finalize())
}

/// True when `byte` of an IPv4 RoCE packet (counted from the start of the IPv4 header, with a
/// 20-byte header) is covered by the ICRC. The ICRC trailer itself is not "covered".
pub fn ipv4_covers(byte: usize, packet_len: usize) -> bool {
    let udp_checksum = ipv4_field::LEN + udp_field::CHECKSUM.start;
    let bth_resv = ipv4_field::LEN + udp_field::HEADER_LEN + bth_field::RESV8;
    !(byte == ipv4_field::TOS
        || byte == ipv4_field::TTL
        || ipv4_field::CHECKSUM.contains(&byte)
        || (udp_checksum..udp_checksum + 2).contains(&byte)
        || byte == bth_resv
        || byte + crate::packet::ICRC_LEN >= packet_len)
}

/// The ICRC of `ib` (BTH through pad, without the ICRC) sent from `src` to `dst` by an
/// unconnected UDP socket with DF set: IPv4 identification 0, flags DF, UDP checksum 0 (what
/// Linux sends, and rxe accepts). Equal to [`compute`] over those headers, but builds only
/// the masked header bytes, once, instead of real headers to be masked. Mixed address
/// families are an error.
pub fn compute_for(
    src: core::net::IpAddr,
    dst: core::net::IpAddr,
    src_port: u16,
    ib: &[u8],
) -> Result<u32> {
    with_prefix(ib, |len| prefix_crc(src, dst, src_port, len))
}

/// The ICRC of `ib` (BTH through pad) after the CRC that `prefix` gives of what comes
/// before a BTH of a packet of its length: the one tail of [`compute_for`] and
/// [`IcrcPrefixes::compute_for`], whichever way they come by the prefix.
#[inline]
fn with_prefix(ib: &[u8], prefix: impl FnOnce(usize) -> Result<u32>) -> Result<u32> {
    Error::check_len(Layer::Bth, bth_field::LEN, ib.len())?;
    Ok(finish(prefix(ib.len())?, ib))
}

/// The CRC of what the ICRC covers before the BTH (LRH stand-in, masked IP and UDP headers)
/// for a packet whose InfiniBand part without ICRC is `ib_len` bytes.
fn prefix_crc(
    src: core::net::IpAddr,
    dst: core::net::IpAddr,
    src_port: u16,
    ib_len: usize,
) -> Result<u32> {
    use core::net::IpAddr;
    let udp_len = udp_field::HEADER_LEN + ib_len + crate::packet::ICRC_LEN;
    let mut hdr = [0xFFu8; 8 + 40 + 8];
    let ip_len = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let total = (ipv4_field::LEN + udp_len) as u16;
            let h = &mut hdr[8..8 + 20];
            h[0] = 0x45;
            h[2..4].copy_from_slice(&total.to_be_bytes());
            h[4..6].fill(0);
            h[6..8].copy_from_slice(&0x4000u16.to_be_bytes());
            h[9] = crate::ip::PROTO_UDP;
            h[12..16].copy_from_slice(&s.octets());
            h[16..20].copy_from_slice(&d.octets());
            20
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let h = &mut hdr[8..8 + 40];
            h[0] = 0x6F;
            h[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
            h[6] = crate::ip::PROTO_UDP;
            h[8..24].copy_from_slice(&s.octets());
            h[24..40].copy_from_slice(&d.octets());
            40
        }
        _ => return Err(Error::NotRoce(NotRoceReason::IpVersion(0))),
    };
    let u = &mut hdr[8 + ip_len..8 + ip_len + 8];
    u[0..2].copy_from_slice(&src_port.to_be_bytes());
    u[2..4].copy_from_slice(&crate::udp::ROCE_V2_PORT.to_be_bytes());
    u[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
    let mut h = crc32fast::Hasher::new();
    h.update(&hdr[..8 + ip_len + 8]);
    Ok(h.finalize())
}

/// The ICRC from the CRC of the part before the BTH and the InfiniBand part `ib` (at least a
/// BTH long): the BTH masked, then the rest.
fn finish(prefix: u32, ib: &[u8]) -> u32 {
    begin(prefix, ib).finalize()
}

/// The CRC so far from the CRC of the part before the BTH and `ib` (at least a BTH long):
/// the BTH masked, then the rest.
fn begin(prefix: u32, ib: &[u8]) -> crc32fast::Hasher {
    let mut bth = [0u8; bth_field::LEN];
    bth.copy_from_slice(&ib[..bth_field::LEN]);
    bth[bth_field::RESV8] = 0xFF;
    // A CRC-32 goes on from the value of what came before.
    let mut h = crc32fast::Hasher::new_with_initial(prefix);
    h.update(&bth);
    h.update(&ib[bth_field::LEN..]);
    h
}

/// [`compute_for`] with the CRC of each packet's fixed part remembered: the 36 (IPv4) or 56
/// (IPv6) bytes before the BTH depend only on the addresses, the source port and the length,
/// and a QP sends and receives a few lengths over and over. Small and direct-mapped: a miss
/// costs one [`compute_for`].
#[derive(Clone, Debug, Default)]
pub struct IcrcPrefixes {
    slots: [Option<PrefixSlot>; PREFIX_SLOTS],
}

/// Slots of an [`IcrcPrefixes`]: a ping-pong needs two lengths (its message and the ACK), a
/// stream a few more.
const PREFIX_SLOTS: usize = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PrefixSlot {
    src: core::net::IpAddr,
    dst: core::net::IpAddr,
    src_port: u16,
    ib_len: usize,
    crc: u32,
}

impl IcrcPrefixes {
    /// An empty cache.
    pub const fn new() -> Self {
        Self {
            slots: [None; PREFIX_SLOTS],
        }
    }

    /// Exactly what [`compute_for`] gives for the same arguments.
    pub fn compute_for(
        &mut self,
        src: core::net::IpAddr,
        dst: core::net::IpAddr,
        src_port: u16,
        ib: &[u8],
    ) -> Result<u32> {
        with_prefix(ib, |len| self.prefix(src, dst, src_port, len))
    }

    /// [`IcrcPrefixes::compute_for`] of a packet whose InfiniBand part is not in one piece:
    /// `head` (at least the BTH), then `rest_len` more bytes that `rest` feeds to the CRC in
    /// order. A sender that leaves the payload where it lies (a zero-copy send) checksums
    /// it there. Returns the ICRC and what `rest` returned; the ICRC is right only if `rest`
    /// fed exactly `rest_len` bytes.
    pub fn compute_for_parts<R>(
        &mut self,
        src: core::net::IpAddr,
        dst: core::net::IpAddr,
        src_port: u16,
        head: &[u8],
        rest_len: usize,
        rest: impl FnOnce(&mut RunningCrc) -> R,
    ) -> Result<(u32, R)> {
        Error::check_len(Layer::Bth, bth_field::LEN, head.len())?;
        let prefix = self.prefix(src, dst, src_port, head.len() + rest_len)?;
        let mut h = RunningCrc(begin(prefix, head));
        let r = rest(&mut h);
        Ok((h.0.finalize(), r))
    }

    /// The CRC of the part before the BTH, from the cache or computed into it.
    fn prefix(
        &mut self,
        src: core::net::IpAddr,
        dst: core::net::IpAddr,
        src_port: u16,
        ib_len: usize,
    ) -> Result<u32> {
        let i = (ib_len ^ usize::from(src_port) ^ (ib_len >> 3)) % PREFIX_SLOTS;
        let prefix = match &self.slots[i] {
            Some(s)
                if s.ib_len == ib_len && s.src_port == src_port && s.src == src && s.dst == dst =>
            {
                s.crc
            }
            _ => {
                let crc = prefix_crc(src, dst, src_port, ib_len)?;
                self.slots[i] = Some(PrefixSlot {
                    src,
                    dst,
                    src_port,
                    ib_len,
                    crc,
                });
                crc
            }
        };
        Ok(prefix)
    }
}

/// An ICRC being computed, fed the parts of a packet that [`IcrcPrefixes::compute_for_parts`]
/// does not hold.
pub struct RunningCrc(crc32fast::Hasher);

impl RunningCrc {
    /// Feeds the next `bytes` of the packet.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

/// The ICRC of `ib` as [`compute_for`] computes it, but for an IPv4 sender that set
/// identification `ident` (rxe and NICs number their packets).
pub fn compute_for_ipv4_ident(
    src: core::net::Ipv4Addr,
    dst: core::net::Ipv4Addr,
    ident: u16,
    src_port: u16,
    ib: &[u8],
) -> Result<u32> {
    // Flipping identification bits changes the CRC by a term that depends only on the
    // packet length (CRC-32 is affine), so build it from the ID-0 value and the basis.
    let base = compute_for(src.into(), dst.into(), src_port, ib)?;
    let basis = ipv4_ident_basis(ib.len());
    Ok((0..16)
        .filter(|i| ident & (1 << i) != 0)
        .fold(base, |c, i| c ^ basis[i]))
}

/// How each bit of the IPv4 identification changes the ICRC of a packet whose InfiniBand part
/// (without ICRC) is `ib_len` bytes: `basis[i]` is the XOR that bit `i` contributes. It
/// depends on nothing but the length, so a receiver can cache it per length.
pub fn ipv4_ident_basis(ib_len: usize) -> [u32; 16] {
    // CRC-32 is affine: crc(a) ^ crc(b) depends only on a ^ b for messages of one length. So
    // each basis vector is the CRC of a message that is zero but for one identification bit,
    // XOR the CRC of the all-zero message. The IPv4 header follows the 8-byte LRH stand-in.
    let crc_with_ident = |ident: u16| {
        let mut head = [0u8; 8 + ipv4_field::LEN + udp_field::HEADER_LEN];
        head[8 + ipv4_field::IDENT.start..8 + ipv4_field::IDENT.end]
            .copy_from_slice(&ident.to_be_bytes());
        let mut h = crc32fast::Hasher::new();
        h.update(&head);
        let zeros = [0u8; 256];
        let mut left = ib_len;
        while left > 0 {
            let n = left.min(zeros.len());
            h.update(&zeros[..n]);
            left -= n;
        }
        h.finalize()
    };
    let zero = crc_with_ident(0);
    core::array::from_fn(|i| crc_with_ident(1 << i) ^ zero)
}

/// The IPv4 identification that makes `wire` the ICRC of a packet whose ICRC with
/// identification 0 is `icrc_ident0`, given the [`ipv4_ident_basis`] for its length; `None`
/// if there is none, which means the packet is corrupt (a random corruption passes with
/// probability 2^-16).
pub fn solve_ipv4_ident(basis: &[u32; 16], icrc_ident0: u32, wire: u32) -> Option<u16> {
    // Gaussian elimination over GF(2): 16 vectors of 32 bits.
    let mut rows: [(u32, u16); 16] = core::array::from_fn(|i| (basis[i], 1u16 << i));
    let mut target = (icrc_ident0 ^ wire, 0u16);
    let mut rank = 0;
    for bit in (0..32).rev() {
        let Some(p) = (rank..16).find(|&r| rows[r].0 >> bit & 1 == 1) else {
            continue;
        };
        rows.swap(rank, p);
        let pivot = rows[rank];
        for (r, row) in rows.iter_mut().enumerate() {
            if r != rank && row.0 >> bit & 1 == 1 {
                row.0 ^= pivot.0;
                row.1 ^= pivot.1;
            }
        }
        if target.0 >> bit & 1 == 1 {
            target.0 ^= pivot.0;
            target.1 ^= pivot.1;
        }
        rank += 1;
    }
    (target.0 == 0).then_some(target.1)
}
