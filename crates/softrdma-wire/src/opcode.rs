//! BTH opcodes and the table that says what each one carries.
//!
//! The top three bits of the opcode select the transport (RC 0x00, UC 0x20, RD 0x40, UD 0x60,
//! CNP 0x80) and the low five the operation (IBTA vol. 1, 9.2.1, table "OpCode field"). The
//! table covers every RC, UC and UD opcode, including FLUSH and ATOMIC WRITE (IBTA 1.5 memory
//! placement extensions), and the RoCE v2 congestion notification packet (Annex A17, congestion notification).
//! RD is not spoken by softrdma (nor by Linux) and is reported as unknown.

use crate::error::{Error, Result};
use core::fmt;

/// The transport service an opcode belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable connection.
    Rc,
    /// Unreliable connection.
    Uc,
    /// Unreliable datagram.
    Ud,
    /// RoCE v2 congestion notification packet.
    Cnp,
}

impl Transport {
    /// The opcode's top three bits for this transport.
    pub const fn base(self) -> u8 {
        match self {
            Transport::Rc => 0x00,
            Transport::Uc => 0x20,
            Transport::Ud => 0x60,
            Transport::Cnp => 0x80,
        }
    }

    /// Short upper-case name as in opcode names ("RC", "UC", "UD", "CNP").
    pub const fn name(self) -> &'static str {
        match self {
            Transport::Rc => "RC",
            Transport::Uc => "UC",
            Transport::Ud => "UD",
            Transport::Cnp => "CNP",
        }
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The operation an opcode performs, independent of transport and position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// SEND (with or without immediate data or invalidate).
    Send,
    /// RDMA WRITE (with or without immediate data).
    Write,
    /// RDMA READ request.
    ReadRequest,
    /// RDMA READ response.
    ReadResponse,
    /// ACKNOWLEDGE (ACK or NAK, by AETH syndrome).
    Acknowledge,
    /// ATOMIC ACKNOWLEDGE.
    AtomicAcknowledge,
    /// CMP_SWAP.
    CompareSwap,
    /// FETCH_ADD.
    FetchAdd,
    /// FLUSH.
    Flush,
    /// ATOMIC WRITE.
    AtomicWrite,
    /// Congestion notification.
    Cnp,
}

/// Where a packet sits inside its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Position {
    /// First packet of a multi-packet message.
    First,
    /// Middle packet of a multi-packet message.
    Middle,
    /// Last packet of a multi-packet message.
    Last,
    /// The whole message in one packet.
    Only,
}

/// An extension header that may follow the BTH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Header {
    /// RDMA Extended Transport Header, 16 bytes.
    Reth,
    /// ACK Extended Transport Header, 4 bytes.
    Aeth,
    /// Atomic Extended Transport Header, 28 bytes.
    AtomicEth,
    /// Atomic ACK Extended Transport Header, 8 bytes.
    AtomicAckEth,
    /// Datagram Extended Transport Header, 8 bytes.
    Deth,
    /// Immediate data, 4 bytes.
    ImmDt,
    /// Invalidate Extended Transport Header, 4 bytes.
    Ieth,
    /// FLUSH Extended Transport Header, 4 bytes.
    Feth,
}

impl Header {
    /// Length of the header in bytes.
    #[allow(clippy::len_without_is_empty)] // a header is never empty
    pub const fn len(self) -> usize {
        match self {
            Header::Reth => 16,
            Header::Aeth => 4,
            Header::AtomicEth => 28,
            Header::AtomicAckEth => 8,
            Header::Deth => 8,
            Header::ImmDt | Header::Ieth | Header::Feth => 4,
        }
    }

    /// The error layer of this header.
    pub const fn layer(self) -> crate::Layer {
        use crate::Layer;
        match self {
            Header::Reth => Layer::Reth,
            Header::Aeth => Layer::Aeth,
            Header::AtomicEth => Layer::AtomicEth,
            Header::AtomicAckEth => Layer::AtomicAckEth,
            Header::Deth => Layer::Deth,
            Header::ImmDt => Layer::ImmDt,
            Header::Ieth => Layer::Ieth,
            Header::Feth => Layer::Feth,
        }
    }
}

/// How much payload an opcode carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PayloadKind {
    /// No payload at all (and no pad).
    None,
    /// Any amount, padded to a multiple of 4.
    Variable,
    /// Exactly this many bytes (ATOMIC WRITE: 8; CNP: 16 reserved bytes).
    Fixed(usize),
}

/// Everything the table knows about one opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OpcodeInfo {
    /// The opcode byte.
    pub opcode: u8,
    /// Name as in Linux `ib_pack.h` without the `IB_OPCODE_` prefix, e.g. `RC_SEND_ONLY`.
    pub name: &'static str,
    /// Human name in Wireshark's style, e.g. `RC Send Only`.
    pub display: &'static str,
    /// Transport service.
    pub transport: Transport,
    /// Operation.
    pub operation: Operation,
    /// Position in the message.
    pub position: Position,
    /// Extension headers after the BTH, in wire order.
    pub headers: &'static [Header],
    /// Payload carried.
    pub payload: PayloadKind,
    /// True for a response (ACK, atomic ACK, READ response), false for a request.
    pub is_response: bool,
    /// True when the responder must answer the message this packet belongs to (every RC
    /// request); UC, UD and responses are never acknowledged.
    pub needs_ack: bool,
    /// True when the packet carries immediate data.
    pub has_immediate: bool,
    /// True when the packet carries an R_Key to invalidate.
    pub has_invalidate: bool,
}

impl OpcodeInfo {
    /// Total length of the extension headers.
    pub fn headers_len(&self) -> usize {
        self.headers.iter().map(|h| h.len()).sum()
    }

    /// True when the opcode starts a message (first or only).
    pub const fn starts_message(&self) -> bool {
        matches!(self.position, Position::First | Position::Only)
    }

    /// True when the opcode ends a message (last or only).
    pub const fn ends_message(&self) -> bool {
        matches!(self.position, Position::Last | Position::Only)
    }
}

use Header as H;
use Operation as Op;
use PayloadKind as P;
use Position::*;

const NO_HDR: &[Header] = &[];

#[allow(clippy::too_many_arguments)]
const fn e(
    opcode: u8,
    name: &'static str,
    display: &'static str,
    operation: Operation,
    position: Position,
    headers: &'static [Header],
    payload: PayloadKind,
) -> OpcodeInfo {
    let transport = match opcode >> 5 {
        0 => Transport::Rc,
        1 => Transport::Uc,
        3 => Transport::Ud,
        _ => Transport::Cnp,
    };
    let is_response = matches!(
        operation,
        Op::ReadResponse | Op::Acknowledge | Op::AtomicAcknowledge
    );
    OpcodeInfo {
        opcode,
        name,
        display,
        transport,
        operation,
        position,
        headers,
        payload,
        is_response,
        needs_ack: matches!(transport, Transport::Rc) && !is_response,
        has_immediate: {
            let mut i = 0;
            let mut found = false;
            while i < headers.len() {
                if matches!(headers[i], H::ImmDt) {
                    found = true;
                }
                i += 1;
            }
            found
        },
        has_invalidate: matches!(headers, [H::Ieth]),
    }
}

/// Every opcode softrdma knows, in opcode order.
pub static OPCODES: &[OpcodeInfo] = &OPCODES_ARRAY;

#[rustfmt::skip]
const OPCODES_ARRAY: [OpcodeInfo; 40] = [
    e(0x00, "RC_SEND_FIRST", "RC Send First", Op::Send, First, NO_HDR, P::Variable),
    e(0x01, "RC_SEND_MIDDLE", "RC Send Middle", Op::Send, Middle, NO_HDR, P::Variable),
    e(0x02, "RC_SEND_LAST", "RC Send Last", Op::Send, Last, NO_HDR, P::Variable),
    e(0x03, "RC_SEND_LAST_WITH_IMMEDIATE", "RC Send Last Immediate", Op::Send, Last, &[H::ImmDt], P::Variable),
    e(0x04, "RC_SEND_ONLY", "RC Send Only", Op::Send, Only, NO_HDR, P::Variable),
    e(0x05, "RC_SEND_ONLY_WITH_IMMEDIATE", "RC Send Only Immediate", Op::Send, Only, &[H::ImmDt], P::Variable),
    e(0x06, "RC_RDMA_WRITE_FIRST", "RC RDMA Write First", Op::Write, First, &[H::Reth], P::Variable),
    e(0x07, "RC_RDMA_WRITE_MIDDLE", "RC RDMA Write Middle", Op::Write, Middle, NO_HDR, P::Variable),
    e(0x08, "RC_RDMA_WRITE_LAST", "RC RDMA Write Last", Op::Write, Last, NO_HDR, P::Variable),
    e(0x09, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", "RC RDMA Write Last Immediate", Op::Write, Last, &[H::ImmDt], P::Variable),
    e(0x0A, "RC_RDMA_WRITE_ONLY", "RC RDMA Write Only", Op::Write, Only, &[H::Reth], P::Variable),
    e(0x0B, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", "RC RDMA Write Only Immediate", Op::Write, Only, &[H::Reth, H::ImmDt], P::Variable),
    e(0x0C, "RC_RDMA_READ_REQUEST", "RC RDMA Read Request", Op::ReadRequest, Only, &[H::Reth], P::None),
    e(0x0D, "RC_RDMA_READ_RESPONSE_FIRST", "RC RDMA Read Response First", Op::ReadResponse, First, &[H::Aeth], P::Variable),
    e(0x0E, "RC_RDMA_READ_RESPONSE_MIDDLE", "RC RDMA Read Response Middle", Op::ReadResponse, Middle, NO_HDR, P::Variable),
    e(0x0F, "RC_RDMA_READ_RESPONSE_LAST", "RC RDMA Read Response Last", Op::ReadResponse, Last, &[H::Aeth], P::Variable),
    e(0x10, "RC_RDMA_READ_RESPONSE_ONLY", "RC RDMA Read Response Only", Op::ReadResponse, Only, &[H::Aeth], P::Variable),
    e(0x11, "RC_ACKNOWLEDGE", "RC Acknowledge", Op::Acknowledge, Only, &[H::Aeth], P::None),
    e(0x12, "RC_ATOMIC_ACKNOWLEDGE", "RC Atomic Acknowledge", Op::AtomicAcknowledge, Only, &[H::Aeth, H::AtomicAckEth], P::None),
    e(0x13, "RC_COMPARE_SWAP", "RC Compare Swap", Op::CompareSwap, Only, &[H::AtomicEth], P::None),
    e(0x14, "RC_FETCH_ADD", "RC Fetch Add", Op::FetchAdd, Only, &[H::AtomicEth], P::None),
    e(0x16, "RC_SEND_LAST_WITH_INVALIDATE", "RC Send Last Invalidate", Op::Send, Last, &[H::Ieth], P::Variable),
    e(0x17, "RC_SEND_ONLY_WITH_INVALIDATE", "RC Send Only Invalidate", Op::Send, Only, &[H::Ieth], P::Variable),
    e(0x1C, "RC_FLUSH", "RC Flush", Op::Flush, Only, &[H::Feth, H::Reth], P::None),
    e(0x1D, "RC_ATOMIC_WRITE", "RC Atomic Write", Op::AtomicWrite, Only, &[H::Reth], P::Fixed(8)),
    e(0x20, "UC_SEND_FIRST", "UC Send First", Op::Send, First, NO_HDR, P::Variable),
    e(0x21, "UC_SEND_MIDDLE", "UC Send Middle", Op::Send, Middle, NO_HDR, P::Variable),
    e(0x22, "UC_SEND_LAST", "UC Send Last", Op::Send, Last, NO_HDR, P::Variable),
    e(0x23, "UC_SEND_LAST_WITH_IMMEDIATE", "UC Send Last Immediate", Op::Send, Last, &[H::ImmDt], P::Variable),
    e(0x24, "UC_SEND_ONLY", "UC Send Only", Op::Send, Only, NO_HDR, P::Variable),
    e(0x25, "UC_SEND_ONLY_WITH_IMMEDIATE", "UC Send Only Immediate", Op::Send, Only, &[H::ImmDt], P::Variable),
    e(0x26, "UC_RDMA_WRITE_FIRST", "UC RDMA Write First", Op::Write, First, &[H::Reth], P::Variable),
    e(0x27, "UC_RDMA_WRITE_MIDDLE", "UC RDMA Write Middle", Op::Write, Middle, NO_HDR, P::Variable),
    e(0x28, "UC_RDMA_WRITE_LAST", "UC RDMA Write Last", Op::Write, Last, NO_HDR, P::Variable),
    e(0x29, "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", "UC RDMA Write Last Immediate", Op::Write, Last, &[H::ImmDt], P::Variable),
    e(0x2A, "UC_RDMA_WRITE_ONLY", "UC RDMA Write Only", Op::Write, Only, &[H::Reth], P::Variable),
    e(0x2B, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", "UC RDMA Write Only Immediate", Op::Write, Only, &[H::Reth, H::ImmDt], P::Variable),
    e(0x64, "UD_SEND_ONLY", "UD Send Only", Op::Send, Only, &[H::Deth], P::Variable),
    e(0x65, "UD_SEND_ONLY_WITH_IMMEDIATE", "UD Send Only Immediate", Op::Send, Only, &[H::Deth, H::ImmDt], P::Variable),
    e(0x81, "CNP", "CNP", Op::Cnp, Only, NO_HDR, P::Fixed(16)),
];

/// Opcode byte to position in [`OPCODES`] plus one (0: unknown), so that a lookup on the
/// packet path is one load.
static INDEX: [u8; 256] = {
    let mut idx = [0u8; 256];
    let mut i = 0;
    while i < OPCODES_ARRAY.len() {
        idx[OPCODES_ARRAY[i].opcode as usize] = (i + 1) as u8;
        i += 1;
    }
    idx
};

/// A BTH opcode byte. Any value can be held; [`Opcode::info`] says whether it is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Opcode(pub u8);

macro_rules! opcode_consts {
    ($($name:ident = $v:expr;)*) => {
        impl Opcode {
            $(
                #[doc = concat!("`", stringify!($name), "` (", stringify!($v), ").")]
                pub const $name: Opcode = Opcode($v);
            )*
        }
    };
}

opcode_consts! {
    RC_SEND_FIRST = 0x00; RC_SEND_MIDDLE = 0x01; RC_SEND_LAST = 0x02;
    RC_SEND_LAST_WITH_IMMEDIATE = 0x03; RC_SEND_ONLY = 0x04; RC_SEND_ONLY_WITH_IMMEDIATE = 0x05;
    RC_RDMA_WRITE_FIRST = 0x06; RC_RDMA_WRITE_MIDDLE = 0x07; RC_RDMA_WRITE_LAST = 0x08;
    RC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x09; RC_RDMA_WRITE_ONLY = 0x0A;
    RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x0B; RC_RDMA_READ_REQUEST = 0x0C;
    RC_RDMA_READ_RESPONSE_FIRST = 0x0D; RC_RDMA_READ_RESPONSE_MIDDLE = 0x0E;
    RC_RDMA_READ_RESPONSE_LAST = 0x0F; RC_RDMA_READ_RESPONSE_ONLY = 0x10;
    RC_ACKNOWLEDGE = 0x11; RC_ATOMIC_ACKNOWLEDGE = 0x12; RC_COMPARE_SWAP = 0x13;
    RC_FETCH_ADD = 0x14; RC_SEND_LAST_WITH_INVALIDATE = 0x16; RC_SEND_ONLY_WITH_INVALIDATE = 0x17;
    RC_FLUSH = 0x1C; RC_ATOMIC_WRITE = 0x1D;
    UC_SEND_FIRST = 0x20; UC_SEND_MIDDLE = 0x21; UC_SEND_LAST = 0x22;
    UC_SEND_LAST_WITH_IMMEDIATE = 0x23; UC_SEND_ONLY = 0x24; UC_SEND_ONLY_WITH_IMMEDIATE = 0x25;
    UC_RDMA_WRITE_FIRST = 0x26; UC_RDMA_WRITE_MIDDLE = 0x27; UC_RDMA_WRITE_LAST = 0x28;
    UC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x29; UC_RDMA_WRITE_ONLY = 0x2A;
    UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x2B;
    UD_SEND_ONLY = 0x64; UD_SEND_ONLY_WITH_IMMEDIATE = 0x65;
    CNP = 0x81;
}

impl Opcode {
    /// The table entry, or `None` for reserved, RD and unknown opcodes.
    #[inline]
    pub fn info(self) -> Option<&'static OpcodeInfo> {
        match INDEX[usize::from(self.0)] {
            0 => None,
            i => Some(&OPCODES_ARRAY[usize::from(i) - 1]),
        }
    }

    /// The table entry, or the error that says why there is none: an operation that exists on
    /// another of RC, UC and UD is [`Error::OpcodeNotValidForTransport`], anything else
    /// [`Error::UnknownOpcode`].
    pub fn checked_info(self) -> Result<&'static OpcodeInfo> {
        if let Some(info) = self.info() {
            return Ok(info);
        }
        let transport_known = matches!(self.0 >> 5, 0 | 1 | 3);
        let op_exists_elsewhere = OPCODES
            .iter()
            .any(|i| i.transport != Transport::Cnp && i.opcode & 0x1F == self.0 & 0x1F);
        if transport_known && op_exists_elsewhere {
            Err(Error::OpcodeNotValidForTransport(self.0))
        } else {
            Err(Error::UnknownOpcode(self.0))
        }
    }

    /// Name as in `ib_pack.h` (`RC_SEND_ONLY`), or `UNKNOWN`.
    pub fn name(self) -> &'static str {
        self.info().map_or("UNKNOWN", |i| i.name)
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.info() {
            Some(i) => f.write_str(i.name),
            None => write!(f, "UNKNOWN({:#04x})", self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_and_consistent() {
        for w in OPCODES.windows(2) {
            assert!(w[0].opcode < w[1].opcode);
        }
        for i in OPCODES {
            assert_eq!(Opcode(i.opcode).info(), Some(i));
            assert!(i.name.starts_with(i.transport.name()));
            assert_eq!(i.transport.base(), i.opcode & 0xE0);
        }
        assert_eq!(OPCODES.len(), 40);
    }

    #[test]
    fn classifies_unknown_opcodes() {
        assert_eq!(
            Opcode(0x2C).checked_info(),
            Err(Error::OpcodeNotValidForTransport(0x2C))
        );
        assert_eq!(
            Opcode(0x66).checked_info(),
            Err(Error::OpcodeNotValidForTransport(0x66))
        );
        assert_eq!(Opcode(0x15).checked_info(), Err(Error::UnknownOpcode(0x15)));
        assert_eq!(Opcode(0x44).checked_info(), Err(Error::UnknownOpcode(0x44)));
        assert_eq!(Opcode(0xFF).checked_info(), Err(Error::UnknownOpcode(0xFF)));
    }

    #[test]
    fn properties() {
        let w = Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE.info().unwrap();
        assert!(w.has_immediate && w.needs_ack && !w.is_response);
        assert_eq!(w.headers_len(), 20);
        let a = Opcode::RC_ATOMIC_ACKNOWLEDGE.info().unwrap();
        assert!(a.is_response && !a.needs_ack);
        assert!(!Opcode::UC_SEND_ONLY.info().unwrap().needs_ack);
        assert!(
            Opcode::RC_SEND_ONLY_WITH_INVALIDATE
                .info()
                .unwrap()
                .has_invalidate
        );
    }
}
