//! Building the packets a QP sends: what the owner gets back ([`Transmit`], with a payload
//! left in registered memory as [`Lent`]), the writing of headers, payload, pad and ICRC
//! into the caller's buffer, and the ICRC's view of the IP addresses.
//!
//! Owns the packet layout on the send path, shared by the requester and the responder;
//! calls [`crate::Memory`] to copy or lend payloads and `softrdma_wire` to emit headers.

use super::*;

/// A packet the engine wants sent. The InfiniBand part (BTH through ICRC) is in the buffer
/// passed to [`QueuePair::poll_transmit`]; its ICRC is computed for an IP header with
/// identification 0, DF set and TTL 64 (IPv4) or flow label 0 and hop limit 64 (IPv6), and a
/// UDP checksum of 0: what Linux sends for an unconnected UDP socket with DF set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Transmit {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// UDP source port (rxe's function of the two QPNs).
    pub src_port: u16,
    /// Bytes in the buffer: the whole packet or, when `lent`, all of it but the payload.
    pub len: usize,
    /// The payload, when it stays in registered memory for the sender to take from there
    /// (a zero-copy send; see [`Memory::lend`]).
    pub lent: Option<Lent>,
    /// The ICRC is left to the sender (zero in the packet; see
    /// [`QueuePair::owe_icrc`]): it computes it, for an IPv4 ID of 0, if the packet goes
    /// on a wire.
    pub icrc_owed: bool,
    /// The IP header's TOS (IPv4) or traffic class (IPv6) byte: the address vector's
    /// traffic class. The ICRC masks it (IBTA 7.8.1, with Annex A17's IP rules), so the
    /// sender sets it without touching the packet.
    pub traffic_class: u8,
}

impl Transmit {
    /// The packet's length on the wire (BTH through ICRC).
    pub fn wire_len(&self) -> usize {
        self.len + self.lent.map_or(0, |l| l.len as usize)
    }

    /// The packet whole, from the buffer it was built in and, when `lent`, the payload's
    /// bytes taken from the region (which the caller reads: the engine holds no pointers).
    pub fn whole(&self, buf: &[u8], payload: &[u8]) -> Vec<u8> {
        match &self.lent {
            None => buf[..self.len].to_vec(),
            Some(l) => {
                let at = usize::from(l.at);
                [&buf[..at], payload, &buf[at..self.len]].concat()
            }
        }
    }
}

/// A payload a packet carries from registered memory instead of from the buffer: the packet
/// is the buffer's first `at` bytes (the headers), then `len` bytes of region `key` at
/// `addr`, then the rest of the buffer (the pad and the ICRC, which covers the payload).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Lent {
    /// The region's key (the L_Key of a send, the R_Key of a READ response).
    pub key: u32,
    /// Where the payload starts.
    pub addr: u64,
    /// Its length.
    pub len: u32,
    /// Where it goes in the packet: after this many bytes of the buffer.
    pub at: u16,
}

/// Payloads shorter than this are copied into the packet even where the memory lends them:
/// a copy of less than a KiB costs less than a lent payload's extra pieces in the system
/// call and the sender's look-up of its region.
pub const LEND_MIN_BYTES: usize = 1024;

/// Where a packet's payload comes from.
pub(crate) enum PayloadSource<'a, F> {
    /// Written into the packet by the closure.
    Fill(F),
    /// One range of registered memory: lent (left in place) if the memory lends it and it is
    /// at least [`LEND_MIN_BYTES`] long, copied otherwise.
    Range {
        mem: &'a dyn crate::Memory,
        pd: crate::Pd,
        key: u32,
        addr: u64,
        access: crate::Access,
    },
}

/// IP equality that treats an IPv4 address and its IPv4-mapped IPv6 form as the same, since
/// RoCE v2 GIDs carry IPv4 addresses mapped.
pub fn same_ip(a: IpAddr, b: IpAddr) -> bool {
    a.to_canonical() == b.to_canonical()
}

/// Writes one packet into `buf` at `at` (growing `buf` if needed, never shrinking it):
/// headers from `bth` and `ext`, `payload_len` bytes from `source`, pad, and the ICRC for
/// the IP and UDP headers Linux would put around it. A lent payload is left out of `buf`
/// (see [`Lent`]); the ICRC covers it all the same.
#[allow(clippy::too_many_arguments)]
pub(crate) fn emit_packet<F>(
    buf: &mut Vec<u8>,
    at: usize,
    mut bth: softrdma_wire::BthRepr,
    ext: softrdma_wire::ExtHeaders,
    payload_len: usize,
    source: PayloadSource<'_, F>,
    src: IpAddr,
    dst: IpAddr,
    src_port: u16,
    mut icrc: Option<&mut softrdma_wire::icrc::IcrcPrefixes>,
) -> Result<Transmit, crate::MemError>
where
    F: FnOnce(&mut [u8]) -> Result<(), crate::MemError>,
{
    use softrdma_wire::packet::{ICRC_LEN, pad_for};
    let pad = usize::from(pad_for(payload_len));
    bth.pad_count = pad as u8;
    let hdr = softrdma_wire::IbRepr {
        bth,
        ext,
        payload: &[],
    };
    debug_assert!(
        hdr.check().is_ok(),
        "the engine built a bad header: {hdr:?}"
    );
    let hlen = softrdma_wire::Bth::<&[u8]>::LEN + bth.opcode.info().map_or(0, |i| i.headers_len());
    let (s, d) = icrc_pair(src, dst);
    let owed = icrc.is_none();
    if let PayloadSource::Range {
        mem,
        pd,
        key,
        addr,
        access,
    } = source
        && payload_len >= LEND_MIN_BYTES
        && mem.lends()
    {
        let in_buf = hlen + pad + ICRC_LEN;
        if buf.len() < at + in_buf {
            buf.resize(at + in_buf, 0);
        }
        let pkt = &mut buf[at..at + in_buf];
        let _ = hdr.emit_headers(payload_len, &mut pkt[..hlen]);
        let (head, tail) = pkt.split_at_mut(hlen);
        // The ICRC over the payload where it lies: the one pass over its bytes this side
        // makes (the kernel's copy into the socket buffer is the other).
        let (crc, lent) = match &mut icrc {
            Some(icrc) => icrc
                .compute_for_parts(s, d, src_port, head, payload_len + pad, |r| {
                    let lent = mem.lend(pd, key, addr, payload_len as u64, access, &mut |b| {
                        r.update(b)
                    });
                    r.update(&[0; 3][..pad]);
                    lent
                })
                .unwrap_or((0, Ok(false))),
            // Owed: the region is still checked and its payload lent.
            None => (
                0,
                mem.lend(pd, key, addr, payload_len as u64, access, &mut |_| {}),
            ),
        };
        if lent? {
            tail[..pad].fill(0);
            tail[pad..].copy_from_slice(&crc.to_le_bytes());
            return Ok(Transmit {
                src,
                dst,
                src_port,
                len: in_buf,
                lent: Some(Lent {
                    key,
                    addr,
                    len: payload_len as u32,
                    at: hlen as u16,
                }),
                icrc_owed: owed,
                traffic_class: 0,
            });
        }
    }
    let total = hlen + payload_len + pad + ICRC_LEN;
    // Reuse the buffer without zeroing it: the headers are written whole, the payload is
    // overwritten whole (on a 4 KiB packet zeroing cost as much as the copy), and the pad
    // and ICRC are written below.
    if buf.len() < at + total {
        buf.resize(at + total, 0);
    }
    let pkt = &mut buf[at..at + total];
    // The engine builds its headers from the opcode table, so they always match the opcode;
    // a failure here is a bug (the debug assertion above, and the tests, catch it).
    let _ = hdr.emit_headers(payload_len, &mut pkt[..hlen]);
    pkt[hlen + payload_len..hlen + payload_len + pad].fill(0);
    let out = &mut pkt[hlen..hlen + payload_len];
    match source {
        PayloadSource::Fill(fill) => fill(out)?,
        PayloadSource::Range {
            mem,
            pd,
            key,
            addr,
            access,
        } => mem.read(pd, key, addr, out, access)?,
    }
    let body = total - ICRC_LEN;
    let owed = icrc.is_none();
    let crc = icrc.map_or(0, |i| {
        i.compute_for(s, d, src_port, &pkt[..body]).unwrap_or(0)
    });
    pkt[body..].copy_from_slice(&crc.to_le_bytes());
    Ok(Transmit {
        src,
        dst,
        src_port,
        len: total,
        lent: None,
        icrc_owed: owed,
        traffic_class: 0,
    })
}

/// The ICRC of `ib` (BTH through pad) sent from `src` to `dst` by an unconnected DF socket.
/// IPv4-mapped IPv6 addresses count as IPv4; a mixed pair is sent as IPv6.
pub fn icrc_for(src: IpAddr, dst: IpAddr, src_port: u16, ib: &[u8]) -> u32 {
    let (src, dst) = icrc_pair(src, dst);
    softrdma_wire::icrc::compute_for(src, dst, src_port, ib).unwrap_or(0)
}

/// The addresses as the ICRC sees them: IPv4 when both are IPv4 (or IPv4-mapped), IPv6
/// otherwise.
pub fn icrc_pair(src: IpAddr, dst: IpAddr) -> (IpAddr, IpAddr) {
    // Two IPv4 addresses, the common case, as they are: called three times a packet, the
    // canonical forms cost about 50 instructions a call.
    if let (IpAddr::V4(_), IpAddr::V4(_)) = (src, dst) {
        return (src, dst);
    }
    match (src.to_canonical(), dst.to_canonical()) {
        (s @ IpAddr::V4(_), d @ IpAddr::V4(_)) => (s, d),
        _ => (to_v6(src), to_v6(dst)),
    }
}

fn to_v6(a: IpAddr) -> IpAddr {
    match a {
        IpAddr::V4(v4) => IpAddr::V6(v4.to_ipv6_mapped()),
        v6 => v6,
    }
}
