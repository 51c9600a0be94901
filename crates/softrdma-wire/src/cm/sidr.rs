//! Service ID resolution for UD: ServiceIDResReq and ServiceIDResReqResp (IBTA 12.11).
//!
//! Owns the SIDR_REQ and SIDR_REP layouts and the SIDR status codes; builds on
//! [`super::fields`].

use super::fields::{INFO_LEN, Info, PrivateData, bad, blank};
use super::{DATA_LEN, private_len};
use crate::error::{Error, Layer, Result};
use crate::macros::be;

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
    /// Parses a SIDR_REQ's 232 bytes.
    pub fn parse(d: &[u8]) -> Result<Self> {
        Error::check_len(Layer::Cm, DATA_LEN, d.len())?;
        Ok(Self {
            request_id: be::u32(d, 0),
            pkey: be::u16(d, 4),
            service_id: be::u64(d, 8),
            private_data: PrivateData::read(d, 16),
        })
    }

    /// Writes the SIDR_REQ into the first 232 bytes of `d`.
    pub fn emit(&self, d: &mut [u8]) {
        let d = blank(d);
        be::set_u32(d, 0, self.request_id);
        be::set_u16(d, 4, self.pkey);
        be::set_u64(d, 8, self.service_id);
        d[16..].copy_from_slice(&self.private_data.0);
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
    /// Parses a SIDR_REP's 232 bytes.
    pub fn parse(d: &[u8]) -> Result<Self> {
        Error::check_len(Layer::Cm, DATA_LEN, d.len())?;
        let len = d[5];
        if usize::from(len) > INFO_LEN {
            return Err(bad(
                "SIDR_REP additional information length",
                u64::from(len),
            ));
        }
        Ok(Self {
            request_id: be::u32(d, 0),
            status: d[4],
            info: Info {
                len,
                data: PrivateData::read(d, 24),
            },
            qpn: be::u24(d, 8),
            service_id: be::u64(d, 12),
            qkey: be::u32(d, 20),
            private_data: PrivateData::read(d, 96),
        })
    }

    /// Writes the SIDR_REP into the first 232 bytes of `d`.
    pub fn emit(&self, d: &mut [u8]) {
        let d = blank(d);
        be::set_u32(d, 0, self.request_id);
        d[4] = self.status;
        d[5] = self.info.len.min(INFO_LEN as u8);
        be::set_u24(d, 8, self.qpn);
        be::set_u64(d, 12, self.service_id);
        be::set_u32(d, 20, self.qkey);
        d[24..96].copy_from_slice(&self.info.data.0);
        d[96..].copy_from_slice(&self.private_data.0);
    }
}
