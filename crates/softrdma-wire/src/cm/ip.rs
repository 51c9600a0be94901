//! The IP addressing of IBTA Annex A11 that rdma_cm puts in CM messages: port spaces, IP
//! service IDs and the header at the start of a REQ's or SIDR_REQ's private data.
//!
//! Owns those encodings; builds on [`super::fields`].

use super::fields::{array, bad};
use crate::error::{Error, Layer, Result};
use crate::macros::be;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// rdma_cm's port spaces (the third byte of an IP CM service ID; librdmacm's
/// `enum rdma_port_space` holds these with 0x01 above them).
pub mod port_space {
    /// RDMA_PS_IPOIB.
    pub const IPOIB: u16 = 0x0002;
    /// RDMA_PS_IB (any QP type, one service per port).
    pub const IB: u16 = 0x013F;
    /// RDMA_PS_TCP (RC, connected).
    pub const TCP: u16 = 0x0106;
    /// RDMA_PS_UDP (UD, through SIDR).
    pub const UDP: u16 = 0x0111;
}

/// The prefix of IP CM service IDs (IBTA Annex A11.2.1: 0x0000000001 in the top 40 bits).
pub const IP_SERVICE_PREFIX: u64 = 0x0000_0000_0100_0000;

/// The service ID rdma_cm uses for `port` in `ps` (IBTA Annex A11.2.1: prefix, the
/// protocol byte, the port).
pub fn ip_service_id(ps: u16, port: u16) -> u64 {
    IP_SERVICE_PREFIX | u64::from(ps & 0xFF) << 16 | u64::from(port)
}

/// The protocol byte and port of an IP CM service ID; `None` if it lacks the prefix.
pub fn parse_ip_service_id(id: u64) -> Option<(u8, u16)> {
    (id & 0xFFFF_FFFF_FF00_0000 == IP_SERVICE_PREFIX).then_some(((id >> 16) as u8, id as u16))
}

/// The header rdma_cm puts first in a REQ's and a SIDR_REQ's private data (IBTA Annex
/// A11.6, the CM REQ private data format): the IP addresses and source port of the
/// connection, so that the passive side need not resolve GIDs back to addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpCmHeader {
    /// Major (top four bits) and minor version: 0.
    pub version: u8,
    /// The source port.
    pub src_port: u16,
    /// The source address.
    pub src: IpAddr,
    /// The destination address.
    pub dst: IpAddr,
}

impl IpCmHeader {
    /// The header's length (the rest of the private data is the consumer's).
    pub const LEN: usize = 36;

    /// Parses the header at the start of `pd`.
    pub fn parse(pd: &[u8]) -> Result<Self> {
        Error::check_len(Layer::Cm, Self::LEN, pd.len())?;
        let version = pd[0];
        if version >> 4 != 0 {
            return Err(bad("IP CM major version", u64::from(version >> 4)));
        }
        let addr = |at: usize| -> IpAddr {
            let a = array::<16>(pd, at);
            match pd[1] >> 4 {
                4 => IpAddr::V4(Ipv4Addr::new(a[12], a[13], a[14], a[15])),
                _ => IpAddr::V6(Ipv6Addr::from(a)),
            }
        };
        match pd[1] >> 4 {
            4 | 6 => {}
            v => return Err(bad("IP CM IP version", u64::from(v))),
        }
        Ok(Self {
            version,
            src_port: be::u16(pd, 2),
            src: addr(4),
            dst: addr(20),
        })
    }

    /// Writes the header into the first [`Self::LEN`] bytes of `pd`. The two addresses
    /// must be of one family; an IPv4 address is written in the last four bytes of its
    /// 16 (Annex A11.6), with zeros before it.
    pub fn emit(&self, pd: &mut [u8]) {
        let pd = &mut pd[..Self::LEN];
        pd.fill(0);
        pd[0] = self.version;
        pd[1] = if self.src.is_ipv4() { 4 << 4 } else { 6 << 4 };
        be::set_u16(pd, 2, self.src_port);
        for (at, a) in [(4, self.src), (20, self.dst)] {
            match a {
                IpAddr::V4(v4) => pd[at + 12..at + 16].copy_from_slice(&v4.octets()),
                IpAddr::V6(v6) => pd[at..at + 16].copy_from_slice(&v6.octets()),
            }
        }
    }
}
