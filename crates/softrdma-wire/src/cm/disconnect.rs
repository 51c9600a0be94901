//! Disconnection: DisconnectRequest and DisconnectReply (IBTA 12.6.10, 12.6.11).
//!
//! Owns the DREQ layout and the DREP alias; builds on [`super::fields`].

use super::fields::{IdsRepr, PrivateData, blank_with_ids, ids};
use super::private_len;
use crate::error::Result;
use crate::macros::be;

/// DisconnectReply.
pub type DrepRepr = IdsRepr<{ private_len::DREP }>;

/// DisconnectRequest (IBTA 12.6.10, table 112).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DreqRepr {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The receiver's communication ID.
    pub remote_comm_id: u32,
    /// The receiver's QPN (24 bits).
    pub remote_qpn: u32,
    /// Private data.
    pub private_data: PrivateData<{ private_len::DREQ }>,
}

impl DreqRepr {
    /// Parses a DREQ's 232 bytes.
    pub fn parse(d: &[u8]) -> Result<Self> {
        let (local_comm_id, remote_comm_id) = ids(d)?;
        Ok(Self {
            local_comm_id,
            remote_comm_id,
            remote_qpn: be::u24(d, 8),
            private_data: PrivateData::read(d, 12),
        })
    }

    /// Writes the DREQ into the first 232 bytes of `d`.
    pub fn emit(&self, d: &mut [u8]) {
        let d = blank_with_ids(d, self.local_comm_id, self.remote_comm_id);
        be::set_u24(d, 8, self.remote_qpn);
        d[12..].copy_from_slice(&self.private_data.0);
    }
}
