//! Alternate paths: LoadAlternatePath and AlternatePathResponse (IBTA 12.6.12, 12.6.13).
//! Parsed and emitted so that a LAP can be answered; this stack does not migrate paths.
//!
//! Owns the LAP and APR layouts and the APR status codes; builds on [`super::fields`].

use super::fields::{INFO_LEN, Info, PathRepr, PrivateData, bad, blank, blank_with_ids, gid, ids};
use super::private_len;
use crate::error::Result;
use crate::macros::be;

/// LoadAlternatePath (IBTA 12.6.12, table 115). Parsed so that it can be answered: this
/// stack does not migrate paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LapRepr {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The receiver's communication ID.
    pub remote_comm_id: u32,
    /// The receiver's QPN (24 bits).
    pub remote_qpn: u32,
    /// How long the sender may take to answer (5 bits).
    pub remote_cm_response_timeout: u8,
    /// The alternate path offered (only its LIDs, GIDs, flow label, traffic class, hop
    /// limit, packet rate, SL, subnet-local bit and ACK timeout).
    pub alternate: PathRepr,
    /// Private data.
    pub private_data: PrivateData<{ private_len::LAP }>,
}

impl LapRepr {
    /// Parses a LAP's 232 bytes.
    pub fn parse(d: &[u8]) -> Result<Self> {
        let (local_comm_id, remote_comm_id) = ids(d)?;
        Ok(Self {
            local_comm_id,
            remote_comm_id,
            remote_qpn: be::u24(d, 12),
            remote_cm_response_timeout: d[15] >> 3,
            alternate: PathRepr {
                local_lid: be::u16(d, 20),
                remote_lid: be::u16(d, 22),
                local_gid: gid(d, 24),
                remote_gid: gid(d, 40),
                flow_label: be::u32(d, 56) >> 12,
                traffic_class: d[59],
                hop_limit: d[60],
                packet_rate: d[61] & 0x3F,
                sl: d[62] >> 4,
                subnet_local: d[62] & 0x08 != 0,
                local_ack_timeout: d[63] >> 3,
            },
            private_data: PrivateData::read(d, 64),
        })
    }

    /// Writes the LAP into the first 232 bytes of `d`.
    pub fn emit(&self, d: &mut [u8]) {
        let d = blank(d);
        let a = &self.alternate;
        be::set_u32(d, 0, self.local_comm_id);
        be::set_u32(d, 4, self.remote_comm_id);
        be::set_u24(d, 12, self.remote_qpn);
        d[15] = (self.remote_cm_response_timeout & 0x1F) << 3;
        be::set_u16(d, 20, a.local_lid);
        be::set_u16(d, 22, a.remote_lid);
        d[24..40].copy_from_slice(&a.local_gid);
        d[40..56].copy_from_slice(&a.remote_gid);
        // The flow label's word is shared with the traffic class (byte 59).
        be::set_u32(d, 56, (a.flow_label & 0xF_FFFF) << 12);
        d[59] = a.traffic_class;
        d[60] = a.hop_limit;
        d[61] = a.packet_rate & 0x3F;
        d[62] = (a.sl & 0xF) << 4 | u8::from(a.subnet_local) << 3;
        d[63] = (a.local_ack_timeout & 0x1F) << 3;
        d[64..].copy_from_slice(&self.private_data.0);
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

/// AlternatePathResponse (IBTA 12.6.13, table 116).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AprRepr {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The receiver's communication ID.
    pub remote_comm_id: u32,
    /// The status (see [`ap_status`]).
    pub status: u8,
    /// Additional information.
    pub info: Info,
    /// Private data.
    pub private_data: PrivateData<{ private_len::APR }>,
}

impl AprRepr {
    /// Parses an APR's 232 bytes.
    pub fn parse(d: &[u8]) -> Result<Self> {
        let (local_comm_id, remote_comm_id) = ids(d)?;
        let len = d[8];
        if usize::from(len) > INFO_LEN {
            return Err(bad("APR additional information length", u64::from(len)));
        }
        Ok(Self {
            local_comm_id,
            remote_comm_id,
            status: d[9],
            info: Info {
                len,
                data: PrivateData::read(d, 12),
            },
            private_data: PrivateData::read(d, 84),
        })
    }

    /// Writes the APR into the first 232 bytes of `d`.
    pub fn emit(&self, d: &mut [u8]) {
        let d = blank_with_ids(d, self.local_comm_id, self.remote_comm_id);
        d[8] = self.info.len.min(INFO_LEN as u8);
        d[9] = self.status;
        d[12..84].copy_from_slice(&self.info.data.0);
        d[84..].copy_from_slice(&self.private_data.0);
    }
}
