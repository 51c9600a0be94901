//! The UDP header that carries RoCE v2 (destination port 4791, IBTA Annex A17).

use crate::error::{Error, Layer, Result};
use crate::macros::be;

/// The UDP destination port of RoCE v2 (IANA). It lives with the UDP header, which the
/// ICRC's pseudo-header rebuilds, so that the ICRC needs nothing of the RoCE frame.
pub const ROCE_V2_PORT: u16 = 4791;

/// Byte ranges of the UDP header fields.
pub mod field {
    use core::ops::Range;
    /// Source port.
    pub const SRC_PORT: Range<usize> = 0..2;
    /// Destination port.
    pub const DST_PORT: Range<usize> = 2..4;
    /// Length of header and payload.
    pub const LEN: Range<usize> = 4..6;
    /// Checksum; RoCE v2 senders such as rxe send 0.
    pub const CHECKSUM: Range<usize> = 6..8;
    /// Header length.
    pub const HEADER_LEN: usize = 8;
}

header_view!(
    /// A view of a UDP header.
    UdpHeader,
    field::HEADER_LEN,
    Layer::Udp
);

be_accessors!(UdpHeader {
    /// Source port.
    src_port: u16 = field::SRC_PORT;
    /// Destination port.
    dst_port: u16 = field::DST_PORT;
    /// Length of header and payload.
    len: u16 = field::LEN;
    /// Checksum.
    checksum: u16 = field::CHECKSUM;
});

impl<T: AsRef<[u8]>> UdpHeader<T> {
    /// True when the length field is zero (always malformed).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Checks the length field against `datagram`, the IP payload, and returns the UDP payload.
    pub fn payload<'a>(&self, datagram: &'a [u8]) -> Result<&'a [u8]> {
        let len = usize::from(self.len());
        if len < field::HEADER_LEN || len != datagram.len() {
            return Err(Error::LengthMismatch {
                layer: Layer::Udp,
                expected: datagram.len(),
                actual: len,
            });
        }
        Ok(&datagram[field::HEADER_LEN..])
    }
}

/// The fields of a UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Checksum as sent; 0 means none, which is what rxe sends over IPv4 and IPv6.
    pub checksum: u16,
}

impl UdpRepr {
    /// Reads a checked header.
    pub fn parse<T: AsRef<[u8]>>(h: &UdpHeader<T>) -> Self {
        Self {
            src_port: h.src_port(),
            dst_port: h.dst_port(),
            checksum: h.checksum(),
        }
    }

    /// Writes the header into `buf[..8]` for `payload_len` bytes of payload; the caller has
    /// checked that the length fits in 16 bits.
    pub fn emit(&self, buf: &mut [u8], payload_len: usize) {
        be::set_u16(buf, field::SRC_PORT.start, self.src_port);
        be::set_u16(buf, field::DST_PORT.start, self.dst_port);
        be::set_u16(
            buf,
            field::LEN.start,
            (field::HEADER_LEN + payload_len) as u16,
        );
        be::set_u16(buf, field::CHECKSUM.start, self.checksum);
    }
}
