//! Service ID resolution for UD: ServiceIDResReq and ServiceIDResReqResp (IBTA 12.11).
//!
//! Owns the SIDR_REQ and SIDR_REP layouts and the SIDR status codes; builds on
//! [`super::fields`].

use super::codec::{Be, Bits, Bytes, InfoAt};
use super::fields::{Info, PrivateData};
use super::private_len;

cm_message! {
    /// ServiceIDResReq: resolve a service ID to a UD QPN and Q_Key (IBTA 12.11.1, table 119).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct SidrReqRepr("a SIDR_REQ") {
        /// The requester's ID for this request.
        request_id: u32 = Be::<4>(0),
        /// Partition key.
        pkey: u16 = Be::<2>(4),
        /// The service asked for.
        service_id: u64 = Be::<8>(8),
        /// Private data (with rdma_cm's IP CM header first).
        private_data: PrivateData<{ private_len::SIDR_REQ }> = Bytes(16),
    }
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

cm_message! {
    /// ServiceIDResReqResp (IBTA 12.11.2, table 120).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct SidrRepRepr("a SIDR_REP") {
        /// The request answered.
        request_id: u32 = Be::<4>(0),
        /// The status (see [`sidr_status`]).
        status: u8 = Be::<1>(4),
        /// Additional information.
        info: Info = InfoAt {
            len: Bits(5, 0, 8),
            data: 24,
            name: "SIDR_REP additional information length",
        },
        /// The UD QPN serving the service (24 bits).
        qpn: u32 = Be::<3>(8),
        /// The service ID.
        service_id: u64 = Be::<8>(12),
        /// The Q_Key to send to the QP with.
        qkey: u32 = Be::<4>(20),
        /// Private data.
        private_data: PrivateData<{ private_len::SIDR_REP }> = Bytes(96),
    }
}
