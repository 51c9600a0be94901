//! Alternate paths: LoadAlternatePath and AlternatePathResponse (IBTA 12.6.12, 12.6.13).
//! Parsed and emitted so that a LAP can be answered; this stack does not migrate paths.
//!
//! Owns the LAP and APR layouts and the APR status codes; builds on [`super::fields`].

use super::codec::{Be, Bits, Bytes, InfoAt, Path};
use super::fields::{Info, PathRepr, PrivateData};
use super::private_len;

cm_message! {
    /// LoadAlternatePath (IBTA 12.6.12, table 115). Parsed so that it can be answered: this
    /// stack does not migrate paths.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct LapRepr("a LAP") {
        /// The sender's communication ID.
        local_comm_id: u32 = Be::<4>(0),
        /// The receiver's communication ID.
        remote_comm_id: u32 = Be::<4>(4),
        /// The receiver's QPN (24 bits).
        remote_qpn: u32 = Be::<3>(12),
        /// How long the sender may take to answer (5 bits).
        remote_cm_response_timeout: u8 = Bits(15, 3, 5),
        /// The alternate path offered (only its LIDs, GIDs, flow label, traffic class, hop
        /// limit, packet rate, SL, subnet-local bit and ACK timeout).
        alternate: PathRepr = Path::lap(20),
        /// Private data.
        private_data: PrivateData<{ private_len::LAP }> = Bytes(64),
    }
}

/// APR status codes (IBTA 12.6.13, table 117) this stack sends.
pub mod ap_status {
    /// The alternate path was loaded.
    pub const LOADED: u8 = 0;
    /// Invalid communication ID.
    pub const INVALID_COMM_ID: u8 = 1;
    /// The alternate path is not supported: what a CA that cannot migrate paths answers a
    /// LAP with.
    pub const UNSUPPORTED: u8 = 2;
    /// The LAP was rejected.
    pub const REJECTED: u8 = 3;
}

cm_message! {
    /// AlternatePathResponse (IBTA 12.6.13, table 116).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct AprRepr("an APR") {
        /// The sender's communication ID.
        local_comm_id: u32 = Be::<4>(0),
        /// The receiver's communication ID.
        remote_comm_id: u32 = Be::<4>(4),
        /// The status (see [`ap_status`]).
        status: u8 = Be::<1>(9),
        /// Additional information.
        info: Info = InfoAt {
            len: Bits(8, 0, 8),
            data: 12,
            name: "APR additional information length",
        },
        /// Private data.
        private_data: PrivateData<{ private_len::APR }> = Bytes(84),
    }
}
