//! Ethernet II framing, with 802.1Q/802.1ad tags skipped.

use crate::error::{Error, Layer, Result};
use crate::macros::be;

/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86DD;
/// EtherType of an 802.1Q VLAN tag.
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// EtherType of an 802.1ad service tag.
pub const ETHERTYPE_QINQ: u16 = 0x88A8;

/// Byte ranges of the Ethernet header fields.
pub mod field {
    use core::ops::Range;
    /// Destination MAC.
    pub const DST: Range<usize> = 0..6;
    /// Source MAC.
    pub const SRC: Range<usize> = 6..12;
    /// EtherType (or a VLAN tag's TPID).
    pub const ETHERTYPE: Range<usize> = 12..14;
    /// Header length without tags.
    pub const LEN: usize = 14;
    /// Length of one VLAN tag.
    pub const TAG_LEN: usize = 4;
}

/// The addresses and type of an Ethernet frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EthernetRepr {
    /// Destination MAC.
    pub dst: [u8; 6],
    /// Source MAC.
    pub src: [u8; 6],
    /// EtherType of the payload (after any VLAN tags).
    pub ethertype: u16,
}

impl EthernetRepr {
    /// Parses the header, skipping up to two VLAN tags, and returns it with the payload.
    pub fn parse(frame: &[u8]) -> Result<(Self, &[u8])> {
        Error::check_len(Layer::Ethernet, field::LEN, frame.len())?;
        let mut dst = [0u8; 6];
        let mut src = [0u8; 6];
        dst.copy_from_slice(&frame[field::DST]);
        src.copy_from_slice(&frame[field::SRC]);
        let mut at = field::ETHERTYPE.start;
        let mut ethertype = be::u16(frame, at);
        for _ in 0..2 {
            if ethertype != ETHERTYPE_VLAN && ethertype != ETHERTYPE_QINQ {
                break;
            }
            at += field::TAG_LEN;
            Error::check_len(Layer::Ethernet, at + 2, frame.len())?;
            ethertype = be::u16(frame, at);
        }
        let repr = Self {
            dst,
            src,
            ethertype,
        };
        Ok((repr, &frame[at + 2..]))
    }

    /// Writes the untagged 14-byte header into `buf[..14]`.
    pub fn emit(&self, buf: &mut [u8]) {
        buf[field::DST].copy_from_slice(&self.dst);
        buf[field::SRC].copy_from_slice(&self.src);
        be::set_u16(buf, field::ETHERTYPE.start, self.ethertype);
    }
}
