//! RoCE v2 on the wire.
//!
//! This crate turns bytes into RoCE v2 packets and back. It has no I/O, no clock and no unsafe
//! code, and it builds without `std` (disable the default `std` feature).
//!
//! # Layout
//! A RoCE v2 packet is `Ethernet | IPv4 or IPv6 | UDP (dst 4791) | BTH | extension headers |
//! payload | pad | ICRC`. Each header has two types, following smoltcp's `wire` module:
//!
//! * a **view** (`Bth<T>`, `Reth<T>`, ...) over any `T: AsRef<[u8]>`, with getters (and setters
//!   when `T: AsMut<[u8]>`) at fixed byte ranges, given as `const` ranges in each module's
//!   `field` submodule;
//! * a plain **repr** struct (`BthRepr`, `RethRepr`, ...) that can be parsed from a view and
//!   emitted into one.
//!
//! [`packet::IbPacket`] and [`packet::IbRepr`] do the same for the whole InfiniBand part (BTH to
//! ICRC) using the opcode table in [`opcode`]; [`roce::RoceFrame`] and [`roce::RoceRepr`] add the
//! IP and UDP layers and compute the [`icrc`].
//!
//! # Contract
//! * `new_checked` and every `parse` function accept any input and never panic: bad input is an
//!   [`Error`] that names what was wrong.
//! * Once a view has been checked, its getters never panic.
//! * `emit` into a buffer of at least the repr's `buffer_len()` never panics. Passing a shorter
//!   buffer to an `emit` is a caller bug and panics, as slice indexing does.
//! * Nothing here allocates.
#![cfg_attr(not(feature = "std"), no_std)]
#![forbid(unsafe_code)]

#[macro_use]
mod macros;

pub mod bth;
pub mod cm;
pub mod error;
pub mod ethernet;
pub mod ext;
pub mod icrc;
pub mod ip;
pub mod mad;
pub mod opcode;
pub mod packet;
pub mod pcap;
pub mod roce;
pub mod seq;
pub mod udp;

#[doc(hidden)]
pub mod fuzzing;

pub use bth::{Bth, BthRepr};
pub use error::{Error, Layer, NotRoceReason, Result};
pub use ext::{
    Aeth, AethRepr, AtomicAckEth, AtomicAckEthRepr, AtomicEth, AtomicEthRepr, Deth, DethRepr, Feth,
    FethRepr, Ieth, IethRepr, ImmDt, ImmDtRepr, NakCode, Reth, RethRepr, Syndrome,
};
pub use opcode::{Header, Opcode, OpcodeInfo, Operation, PayloadKind, Position, Transport};
pub use packet::{ExtHeaders, IbPacket, IbRepr};
pub use roce::{IpRepr, ROCE_V2_PORT, RoceFrame, RoceRepr};
pub use seq::{Msn, Psn, Qpn, flow_label_udp_sport, rdma_flow_label, rxe_udp_sport};
