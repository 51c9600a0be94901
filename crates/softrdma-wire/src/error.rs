//! The one error type of the wire layer.
//!
//! Every way a byte string can fail to be a RoCE v2 packet maps onto one variant, which carries
//! just enough to say what was wrong and where.

use core::fmt;

/// Result of parsing or checking wire data.
pub type Result<T> = core::result::Result<T, Error>;

/// The layer or header an error refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Layer {
    /// Ethernet II header (and any 802.1Q tags).
    Ethernet,
    /// IPv4 header.
    Ipv4,
    /// IPv6 header.
    Ipv6,
    /// UDP header.
    Udp,
    /// Base Transport Header.
    Bth,
    /// RDMA Extended Transport Header.
    Reth,
    /// ACK Extended Transport Header.
    Aeth,
    /// Atomic Extended Transport Header.
    AtomicEth,
    /// Atomic ACK Extended Transport Header.
    AtomicAckEth,
    /// Datagram Extended Transport Header.
    Deth,
    /// Immediate data.
    ImmDt,
    /// Invalidate Extended Transport Header.
    Ieth,
    /// FLUSH Extended Transport Header.
    Feth,
    /// Payload and pad.
    Payload,
    /// Invariant CRC.
    Icrc,
    /// Management datagram header.
    Mad,
    /// Communication management message.
    Cm,
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Layer::Ethernet => "Ethernet header",
            Layer::Ipv4 => "IPv4 header",
            Layer::Ipv6 => "IPv6 header",
            Layer::Udp => "UDP header",
            Layer::Bth => "BTH",
            Layer::Reth => "RETH",
            Layer::Aeth => "AETH",
            Layer::AtomicEth => "AtomicETH",
            Layer::AtomicAckEth => "AtomicAckETH",
            Layer::Deth => "DETH",
            Layer::ImmDt => "ImmDt",
            Layer::Ieth => "IETH",
            Layer::Feth => "FETH",
            Layer::Payload => "payload",
            Layer::Icrc => "ICRC",
            Layer::Mad => "MAD header",
            Layer::Cm => "CM message",
        })
    }
}

/// Why a frame is not RoCE v2 at all (as opposed to a malformed RoCE v2 packet).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NotRoceReason {
    /// The EtherType is neither IPv4 nor IPv6.
    EtherType(u16),
    /// The IP version nibble is neither 4 nor 6.
    IpVersion(u8),
    /// The IP payload is not UDP.
    IpProtocol(u8),
    /// The UDP destination port is not 4791.
    UdpPort(u16),
}

impl fmt::Display for NotRoceReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotRoceReason::EtherType(t) => write!(f, "EtherType {t:#06x} is not IPv4 or IPv6"),
            NotRoceReason::IpVersion(v) => write!(f, "IP version {v} is not 4 or 6"),
            NotRoceReason::IpProtocol(p) => write!(f, "IP protocol {p} is not UDP"),
            NotRoceReason::UdpPort(p) => write!(f, "UDP destination port {p} is not 4791"),
        }
    }
}

/// What is wrong with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The buffer ends before the header or payload does.
    #[error("truncated {layer}: need {need} bytes, have {have}")]
    Truncated {
        /// Where the data ran out.
        layer: Layer,
        /// Bytes needed.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// The opcode is reserved, or belongs to a transport this stack does not speak (RD).
    #[error("reserved or unknown opcode {0:#04x}")]
    UnknownOpcode(u8),
    /// The operation exists, but not for the transport in the opcode's top three bits
    /// (for example an RDMA READ on UC).
    #[error("opcode {0:#04x} is not valid for its transport")]
    OpcodeNotValidForTransport(u8),
    /// The BTH pad count exceeds the bytes after the headers.
    #[error("pad count {pad} is larger than the {payload}-byte payload")]
    PadTooLarge {
        /// BTH PadCnt.
        pad: u8,
        /// Bytes between the last header and the ICRC.
        payload: usize,
    },
    /// The BTH transport header version is not 0 (IBTA vol. 1, 9.2, BTH TVer).
    #[error("transport header version {0} is not 0")]
    BadVersion(u8),
    /// A length field disagrees with the bytes present, or an opcode with a fixed payload
    /// (or none) carries another amount.
    #[error("length mismatch in {layer}: expected {expected} bytes, found {actual}")]
    LengthMismatch {
        /// The header whose length field (or the opcode whose payload size) is violated.
        layer: Layer,
        /// What the header or opcode says.
        expected: usize,
        /// What is there.
        actual: usize,
    },
    /// The frame is not RoCE v2.
    #[error("not RoCE v2: {0}")]
    NotRoce(NotRoceReason),
    /// The IP packet is a fragment; RoCE v2 never fragments.
    #[error("fragmented IP packet")]
    Fragmented,
    /// A field holds a value the spec reserves or this stack cannot take.
    #[error("{layer}: {field} {value:#x} is reserved or unsupported")]
    ReservedValue {
        /// Where.
        layer: Layer,
        /// The field, with the message it belongs to.
        field: &'static str,
        /// What it held.
        value: u64,
    },
}

impl Error {
    /// Builds [`Error::Truncated`] unless `have >= need`.
    pub(crate) fn check_len(layer: Layer, need: usize, have: usize) -> Result<()> {
        if have < need {
            Err(Error::Truncated { layer, need, have })
        } else {
            Ok(())
        }
    }
}
