//! Communication management messages (IBTA vol. 1, 12.6): REQ, MRA, REJ, REP, RTU, DREQ,
//! DREP, LAP, APR, SIDR_REQ and SIDR_REP, carried in 256-byte MADs of the CM class to QP1,
//! and the IP addressing of Annex A11 that rdma_cm puts in them (the service ID and the
//! private-data header).
//!
//! A CM MAD is the 24-byte common header ([`crate::mad`]) and 232 bytes of message. Each
//! message is a plain repr struct ([`ReqRepr`], ...) with `parse` over those 232 bytes and
//! `emit` into them; [`CmMad`] does the whole MAD. Field positions are the byte and bit
//! offsets of IBTA vol. 1 tables 106-120, counted from the start of the message (after the
//! MAD header), most significant bit first.
//!
//! Parsing checks the encoding: the MAD header is a CM Send of class version 2, the
//! attribute is a CM message, and no field holds a value the spec reserves (a transport
//! service type of RD, a path MTU code outside 256-4096, a `message rejected` of 3, an
//! additional-information length beyond its field). What a value means for a connection
//! (does the QPN exist, does the GID belong to the sender) is the state machine's to check.
//! Reserved bits are ignored on receive and sent as zero, as IBTA 13.4.3 asks of
//! management datagrams.
//!
//! # Layout
//! One file per group of messages, each owning its layouts: `establish.rs` (REQ, REP,
//! RTU), `mra_rej.rs` (MRA, REJ), `disconnect.rs` (DREQ, DREP), `alt_path.rs` (LAP, APR)
//! and `sidr.rs` (SIDR_REQ, SIDR_REP), over the shared fields of `fields.rs` and the
//! field encodings of `codec.rs`, in which each message states its layout once.
//! `message.rs` ties them to attribute IDs and the MAD header; `ip.rs` is Annex A11. This
//! file holds the constants all of them use and re-exports everything as `cm::*`.

// First, so that the messages' files below can use its `cm_layout!`.
#[macro_use]
mod codec;

mod alt_path;
mod disconnect;
mod establish;
mod fields;
mod ip;
mod message;
mod mra_rej;
mod sidr;

pub use alt_path::{AprRepr, LapRepr, ap_status};
pub use disconnect::{DrepRepr, DreqRepr, IdsRepr};
pub use establish::{RepRepr, ReqRepr, RtuRepr};
pub use fields::{INFO_LEN, Info, PathRepr, PrivateData, TransportService};
pub use ip::{IP_SERVICE_PREFIX, IpCmHeader, ip_service_id, parse_ip_service_id, port_space};
pub use message::{Addressee, CmMad, CmMessage};
pub use mra_rej::{MessageRef, MraRepr, RejRepr, rej_reason};
pub use sidr::{SidrRepRepr, SidrReqRepr, sidr_status};

/// The length of every CM MAD (IBTA 13.4.2: MADs are 256 bytes).
pub const MAD_LEN: usize = 256;
/// The message part of a CM MAD, after the 24-byte common header.
pub const DATA_LEN: usize = MAD_LEN - crate::mad::field::LEN;
/// The class version of the CM class this module speaks (IBTA 12.6.1: 2).
pub const CM_CLASS_VERSION: u8 = 2;
/// The only MAD method CM messages use (IBTA 12.6.1: every CM message is a `Send`).
pub const METHOD_SEND: u8 = 0x03;
/// The QP the General Services Interface listens on.
pub const GSI_QPN: u32 = 1;
/// The Q_Key of QP1 (IBTA 10.2.5: the well-known GSI Q_Key).
pub const GSI_QKEY: u32 = 0x8001_0000;

/// Declares, from one row a message, the CM messages' attribute IDs ([`attr`]) and the
/// bytes of private data each carries ([`private_len`]).
macro_rules! cm_messages {
    ($($name:ident = $id:literal, $private:literal, $long:literal;)*) => {
        /// Attribute IDs of the CM messages (IBTA vol. 1, 12.6.2, table 104).
        pub mod attr {
            $(
                #[doc = concat!($long, ".")]
                pub const $name: u16 = $id;
            )*
        }

        /// The bytes of private data each message carries (IBTA vol. 1, 12.6, tables
        /// 106-120).
        pub mod private_len {
            $(
                #[doc = concat!(stringify!($name), ".")]
                pub const $name: usize = $private;
            )*
        }
    };
}

cm_messages! {
    REQ = 0x0010, 92, "ConnectRequest";
    MRA = 0x0011, 222, "MsgRcptAck";
    REJ = 0x0012, 148, "ConnectReject";
    REP = 0x0013, 196, "ConnectReply";
    RTU = 0x0014, 224, "ReadyToUse";
    DREQ = 0x0015, 220, "DisconnectRequest";
    DREP = 0x0016, 224, "DisconnectReply";
    SIDR_REQ = 0x0017, 216, "ServiceIDResReq";
    SIDR_REP = 0x0018, 136, "ServiceIDResReqResp";
    LAP = 0x0019, 168, "LoadAlternatePath";
    APR = 0x001A, 148, "AlternatePathResponse";
}

#[cfg(test)]
mod tests;
