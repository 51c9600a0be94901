//! The common MAD header (IBTA vol. 1, 13.4.2) that starts every management datagram, as
//! carried to QP1 by connection management (chapter 12).
//!
//! rdma_cm runs IB CM MADs as UD SEND_ONLY packets to QP1 with Q_Key 0x80010000; this module
//! decodes the 24-byte header of such a payload and names the CM attributes.

use crate::error::{Error, Layer, Result};
use crate::macros::be;

/// Byte ranges of the MAD header fields.
pub mod field {
    use core::ops::Range;
    /// Base version (1).
    pub const BASE_VERSION: usize = 0;
    /// Management class.
    pub const MGMT_CLASS: usize = 1;
    /// Class version.
    pub const CLASS_VERSION: usize = 2;
    /// Method (bit 7: response).
    pub const METHOD: usize = 3;
    /// Status.
    pub const STATUS: Range<usize> = 4..6;
    /// Class-specific.
    pub const CLASS_SPECIFIC: Range<usize> = 6..8;
    /// Transaction ID.
    pub const TID: Range<usize> = 8..16;
    /// Attribute ID.
    pub const ATTR_ID: Range<usize> = 16..18;
    /// Attribute modifier.
    pub const ATTR_MOD: Range<usize> = 20..24;
    /// Header length.
    pub const LEN: usize = 24;
}

/// Management class of communication management.
pub const CLASS_CM: u8 = 0x07;

/// The fields of a MAD header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MadHeader {
    /// Base version.
    pub base_version: u8,
    /// Management class.
    pub mgmt_class: u8,
    /// Class version.
    pub class_version: u8,
    /// Method.
    pub method: u8,
    /// Status.
    pub status: u16,
    /// Class-specific field.
    pub class_specific: u16,
    /// Transaction ID.
    pub tid: u64,
    /// Attribute ID.
    pub attr_id: u16,
    /// Attribute modifier.
    pub attr_mod: u32,
}

impl MadHeader {
    /// Parses the header at the start of a MAD.
    pub fn parse(mad: &[u8]) -> Result<Self> {
        Error::check_len(Layer::Mad, field::LEN, mad.len())?;
        Ok(Self {
            base_version: mad[field::BASE_VERSION],
            mgmt_class: mad[field::MGMT_CLASS],
            class_version: mad[field::CLASS_VERSION],
            method: mad[field::METHOD],
            status: be::u16(mad, field::STATUS.start),
            class_specific: be::u16(mad, field::CLASS_SPECIFIC.start),
            tid: be::u64(mad, field::TID.start),
            attr_id: be::u16(mad, field::ATTR_ID.start),
            attr_mod: be::u32(mad, field::ATTR_MOD.start),
        })
    }

    /// Name of the management class.
    pub fn class_name(&self) -> &'static str {
        match self.mgmt_class {
            0x01 => "SubnMgmt",
            0x81 => "SubnMgmtDirectedRoute",
            0x03 => "SubnAdm",
            0x04 => "Performance",
            0x05 => "BaseboardMgmt",
            0x06 => "DeviceMgmt",
            CLASS_CM => "CM",
            0x08 => "SNMP",
            0x09..=0x0F => "VendorSpecific",
            0x30..=0x4F => "VendorSpecificRange2",
            _ => "Unknown",
        }
    }

    /// Name of the method (IBTA vol. 1, 13.4.5).
    pub fn method_name(&self) -> &'static str {
        match self.method {
            0x01 => "Get",
            0x02 => "Set",
            0x03 => "Send",
            0x05 => "Trap",
            0x06 => "Report",
            0x07 => "TrapRepress",
            0x81 => "GetResp",
            0x86 => "ReportResp",
            _ => "Unknown",
        }
    }

    /// Name of the attribute; for the CM class the message names of IBTA vol. 1, 12.6.
    pub fn attr_name(&self) -> &'static str {
        match (self.mgmt_class, self.attr_id) {
            (_, 0x0001) => "ClassPortInfo",
            (CLASS_CM, 0x0010) => "ConnectRequest",
            (CLASS_CM, 0x0011) => "MsgRcptAck",
            (CLASS_CM, 0x0012) => "ConnectReject",
            (CLASS_CM, 0x0013) => "ConnectReply",
            (CLASS_CM, 0x0014) => "ReadyToUse",
            (CLASS_CM, 0x0015) => "DisconnectRequest",
            (CLASS_CM, 0x0016) => "DisconnectReply",
            (CLASS_CM, 0x0017) => "ServiceIDResReq",
            (CLASS_CM, 0x0018) => "ServiceIDResReqResp",
            (CLASS_CM, 0x0019) => "LoadAlternatePath",
            (CLASS_CM, 0x001A) => "AlternatePathResponse",
            _ => "Unknown",
        }
    }
}
