//! The answers that put a connection on hold or refuse it: MsgRcptAck and ConnectReject
//! (IBTA 12.6.6, 12.6.7), with the reference to the message they answer and the reject
//! reasons.
//!
//! Owns the MRA and REJ layouts; builds on [`super::fields`].

use super::codec::{Be, Bits, Bytes, Codec, InfoAt};
use super::fields::{Info, PrivateData, bad};
use super::private_len;
use crate::error::Result;

/// Which message an MRA or REJ refers to (IBTA 12.6.6 and 12.6.7: 2 bits; MRA: 0 REQ, 1
/// REP, 2 LAP; REJ: 0 REQ, 1 REP, 2 other).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageRef {
    /// A REQ.
    Req,
    /// A REP.
    Rep,
    /// A LAP (MRA) or another message (REJ).
    Other,
}

impl MessageRef {
    fn parse(field: &'static str, b: u8) -> Result<Self> {
        match b >> 6 {
            0 => Ok(MessageRef::Req),
            1 => Ok(MessageRef::Rep),
            2 => Ok(MessageRef::Other),
            v => Err(bad(field, u64::from(v))),
        }
    }

    fn code(self) -> u8 {
        match self {
            MessageRef::Req => 0,
            MessageRef::Rep => 1,
            MessageRef::Other => 2,
        }
    }
}

/// The message an MRA or REJ refers to, in the top two bits of byte `.0`; `.1` names
/// the field in errors.
struct RefAt(usize, &'static str);

impl Codec<MessageRef> for RefAt {
    fn get(&self, d: &[u8]) -> Result<MessageRef> {
        MessageRef::parse(self.1, d[self.0])
    }
    fn put(&self, d: &mut [u8], v: &MessageRef) {
        d[self.0] = (d[self.0] & 0x3F) | v.code() << 6;
    }
}

cm_message! {
    /// MsgRcptAck: "I got your message; my answer will take longer" (IBTA 12.6.6, table 107).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct MraRepr("an MRA") {
        /// The sender's communication ID.
        local_comm_id: u32 = Be::<4>(0),
        /// The receiver's communication ID.
        remote_comm_id: u32 = Be::<4>(4),
        /// The message acknowledged.
        message: MessageRef = RefAt(8, "MRA message MRAed"),
        /// How much longer the answer may take (5 bits, 4.096 µs × 2^n), on top of the packet
        /// lifetime.
        service_timeout: u8 = Bits(9, 3, 5),
        /// Private data.
        private_data: PrivateData<{ private_len::MRA }> = Bytes(10),
    }
}

/// Reject reasons (IBTA 12.6.7.2, table 109) that this stack sends or acts on; any other
/// value parses as itself.
pub mod rej_reason {
    /// No QP available.
    pub const NO_QP: u16 = 1;
    /// No EEC available.
    pub const NO_EEC: u16 = 2;
    /// No resources available.
    pub const NO_RESOURCES: u16 = 3;
    /// Timeout (the sender gave up waiting; ARI: the sender's CA GUID).
    pub const TIMEOUT: u16 = 4;
    /// Unsupported request.
    pub const UNSUPPORTED_REQUEST: u16 = 5;
    /// Invalid communication ID.
    pub const INVALID_COMM_ID: u16 = 6;
    /// Invalid communication instance.
    pub const INVALID_COMM_INSTANCE: u16 = 7;
    /// Invalid service ID (nobody listens for it).
    pub const INVALID_SERVICE_ID: u16 = 8;
    /// Invalid transport service type.
    pub const INVALID_TRANSPORT_TYPE: u16 = 9;
    /// Stale connection (the QPN or communication ID is still in use or in TIMEWAIT).
    pub const STALE_CONNECTION: u16 = 10;
    /// RDC does not exist.
    pub const RDC_NOT_EXIST: u16 = 11;
    /// Invalid primary GID.
    pub const INVALID_PRIMARY_GID: u16 = 12;
    /// Invalid primary LID.
    pub const INVALID_PRIMARY_LID: u16 = 13;
    /// Invalid primary SL.
    pub const INVALID_PRIMARY_SL: u16 = 14;
    /// Invalid primary traffic class.
    pub const INVALID_PRIMARY_TRAFFIC_CLASS: u16 = 15;
    /// Invalid primary hop limit.
    pub const INVALID_PRIMARY_HOP_LIMIT: u16 = 16;
    /// Invalid primary packet rate.
    pub const INVALID_PRIMARY_PACKET_RATE: u16 = 17;
    /// Invalid alternate GID.
    pub const INVALID_ALT_GID: u16 = 18;
    /// Port redirection.
    pub const PORT_REDIRECT: u16 = 24;
    /// Invalid path MTU.
    pub const INVALID_MTU: u16 = 26;
    /// Insufficient responder resources.
    pub const INSUFFICIENT_RESP_RESOURCES: u16 = 27;
    /// Consumer reject (rdma_reject; the private data says why).
    pub const CONSUMER_DEFINED: u16 = 28;
    /// Invalid RNR retry count.
    pub const INVALID_RNR_RETRY: u16 = 29;
    /// Duplicate local communication ID.
    pub const DUPLICATE_LOCAL_COMM_ID: u16 = 30;
    /// Unsupported class version.
    pub const INVALID_CLASS_VERSION: u16 = 31;
    /// Invalid primary flow label.
    pub const INVALID_FLOW_LABEL: u16 = 32;
    /// Invalid alternate flow label.
    pub const INVALID_ALT_FLOW_LABEL: u16 = 33;
    /// Vendor option not supported: the consumer rejects the peer's ECE options
    /// (`rdma_reject_ece`; `IB_CM_REJ_VENDOR_OPTION_NOT_SUPPORTED`).
    pub const VENDOR_OPTION_NOT_SUPPORTED: u16 = 35;
}

/// ConnectReject (IBTA 12.6.7, table 108).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RejRepr {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The receiver's communication ID (0 if the sender never learnt it).
    pub remote_comm_id: u32,
    /// The message rejected.
    pub message: MessageRef,
    /// Why (see [`rej_reason`]).
    pub reason: u16,
    /// Additional reject information (7-bit length).
    pub ari: Info,
    /// Private data.
    pub private_data: PrivateData<{ private_len::REJ }>,
}

impl RejRepr {
    // Listed in the order parsing checks them: the ARI length before the message
    // rejected, which fields come first in the struct.
    cm_layout!("a REJ" {
        local_comm_id: Be::<4>(0),
        remote_comm_id: Be::<4>(4),
        ari: InfoAt {
            len: Bits(9, 1, 7),
            data: 12,
            name: "REJ reject info length",
        },
        message: RefAt(8, "REJ message rejected"),
        reason: Be::<2>(10),
        private_data: Bytes(84),
    });
}
