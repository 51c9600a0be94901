//! Disconnection: DisconnectRequest and DisconnectReply (IBTA 12.6.10, 12.6.11).
//!
//! Owns the DREQ layout and that of the messages that are only two communication IDs
//! (the DREP, and the RTU of `establish.rs`); builds on [`super::fields`].

use super::codec::{Be, Bytes};
use super::fields::PrivateData;
use super::private_len;

/// The messages that are two communication IDs and private data: RTU (IBTA 12.6.9, table
/// 111) and DREP (12.6.11, table 113).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IdsRepr<const N: usize> {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The receiver's communication ID.
    pub remote_comm_id: u32,
    /// Private data.
    pub private_data: PrivateData<N>,
}

impl<const N: usize> IdsRepr<N> {
    cm_layout!("the message" {
        local_comm_id: Be::<4>(0),
        remote_comm_id: Be::<4>(4),
        private_data: Bytes(8),
    });
}

/// DisconnectReply.
pub type DrepRepr = IdsRepr<{ private_len::DREP }>;

cm_message! {
    /// DisconnectRequest (IBTA 12.6.10, table 112).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct DreqRepr("a DREQ") {
        /// The sender's communication ID.
        local_comm_id: u32 = Be::<4>(0),
        /// The receiver's communication ID.
        remote_comm_id: u32 = Be::<4>(4),
        /// The receiver's QPN (24 bits).
        remote_qpn: u32 = Be::<3>(8),
        /// Private data.
        private_data: PrivateData<{ private_len::DREQ }> = Bytes(12),
    }
}
