//! Service ID resolution for UD: ServiceIDResReq and ServiceIDResReqResp (IBTA 12.11).
//!
//! Owns the SIDR_REQ and SIDR_REP layouts and the SIDR status codes; builds on
//! [`super::fields`].

use super::codec::{Be, Bits, Bytes, InfoAt};
use super::fields::{Info, PrivateData};
use super::private_len;

/// ServiceIDResReq: resolve a service ID to a UD QPN and Q_Key (IBTA 12.11.1, table 119).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SidrReqRepr {
    /// The requester's ID for this request.
    pub request_id: u32,
    /// Partition key.
    pub pkey: u16,
    /// The service asked for.
    pub service_id: u64,
    /// Private data (with rdma_cm's IP CM header first).
    pub private_data: PrivateData<{ private_len::SIDR_REQ }>,
}

impl SidrReqRepr {
    cm_layout!("a SIDR_REQ" {
        request_id: Be::<4>(0),
        pkey: Be::<2>(4),
        service_id: Be::<8>(8),
        private_data: Bytes(16),
    });
}

/// SIDR_REP status codes (IBTA 12.11.2, table 121).
pub mod sidr_status {
    /// The QPN and Q_Key are valid.
    pub const VALID: u8 = 0;
    /// Nobody serves the service ID.
    pub const SERVICE_ID_NOT_SUPPORTED: u8 = 1;
    /// The service rejected the request (private data says why).
    pub const REJECTED: u8 = 2;
    /// No QP available.
    pub const NO_QP: u8 = 3;
    /// Redirection.
    pub const REDIRECT: u8 = 4;
    /// Unsupported class version.
    pub const UNSUPPORTED_VERSION: u8 = 5;
}

/// ServiceIDResReqResp (IBTA 12.11.2, table 120).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SidrRepRepr {
    /// The request answered.
    pub request_id: u32,
    /// The status (see [`sidr_status`]).
    pub status: u8,
    /// Additional information.
    pub info: Info,
    /// The UD QPN serving the service (24 bits).
    pub qpn: u32,
    /// The service ID.
    pub service_id: u64,
    /// The Q_Key to send to the QP with.
    pub qkey: u32,
    /// Private data.
    pub private_data: PrivateData<{ private_len::SIDR_REP }>,
}

impl SidrRepRepr {
    cm_layout!("a SIDR_REP" {
        request_id: Be::<4>(0),
        status: Be::<1>(4),
        info: InfoAt {
            len: Bits(5, 0, 8),
            data: 24,
            name: "SIDR_REP additional information length",
        },
        qpn: Be::<3>(8),
        service_id: Be::<8>(12),
        qkey: Be::<4>(20),
        private_data: Bytes(96),
    });
}
