//! Disconnection: DisconnectRequest and DisconnectReply (IBTA 12.6.10, 12.6.11).
//!
//! Owns the DREQ layout and the DREP alias; builds on [`super::fields`].

use super::fields::{IdsRepr, PrivateData};
use super::{DATA_LEN, private_len};
use crate::error::{Error, Layer, Result};
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
        Error::check_len(Layer::Cm, DATA_LEN, d.len())?;
        Ok(Self {
            local_comm_id: be::u32(d, 0),
            remote_comm_id: be::u32(d, 4),
            remote_qpn: be::u24(d, 8),
            private_data: PrivateData::read(d, 12),
        })
    }

    /// Writes the DREQ into the first 232 bytes of `d`.
    pub fn emit(&self, d: &mut [u8]) {
        let d = &mut d[..DATA_LEN];
        d.fill(0);
        be::set_u32(d, 0, self.local_comm_id);
        be::set_u32(d, 4, self.remote_comm_id);
        be::set_u24(d, 8, self.remote_qpn);
        d[12..].copy_from_slice(&self.private_data.0);
    }
}
