//! One CM message of any kind ([`CmMessage`]), whom it is for, and the whole MAD
//! ([`CmMad`]): the dispatch from attribute ID to message layout and back.
//!
//! Owns the MAD header checks of the CM class; calls every message file's `parse` and
//! `emit`, and [`crate::mad`] for the common header.

use super::alt_path::{AprRepr, LapRepr};
use super::disconnect::{DrepRepr, DreqRepr};
use super::establish::{RepRepr, ReqRepr, RtuRepr};
use super::fields::bad;
use super::mra_rej::{MraRepr, RejRepr};
use super::sidr::{SidrRepRepr, SidrReqRepr};
use super::{CM_CLASS_VERSION, MAD_LEN, METHOD_SEND, attr};
use crate::error::{Error, Layer, Result};
use crate::macros::be;
use crate::mad::{CLASS_CM, MadHeader};

/// Whom on a port a CM message is for (see [`CmMessage::addressee`]): what lets one
/// port's MADs reach the right one of several agents behind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Addressee {
    /// The listener of this service ID.
    Service(u64),
    /// The holder of this local communication ID (or SIDR request ID).
    Comm(u32),
}

/// One CM message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmMessage {
    /// ConnectRequest.
    Req(ReqRepr),
    /// MsgRcptAck.
    Mra(MraRepr),
    /// ConnectReject.
    Rej(RejRepr),
    /// ConnectReply.
    Rep(RepRepr),
    /// ReadyToUse.
    Rtu(RtuRepr),
    /// DisconnectRequest.
    Dreq(DreqRepr),
    /// DisconnectReply.
    Drep(DrepRepr),
    /// LoadAlternatePath.
    Lap(LapRepr),
    /// AlternatePathResponse.
    Apr(AprRepr),
    /// ServiceIDResReq.
    SidrReq(SidrReqRepr),
    /// ServiceIDResReqResp.
    SidrRep(SidrRepRepr),
}

impl CmMessage {
    /// The attribute ID the message travels under.
    pub fn attr_id(&self) -> u16 {
        match self {
            CmMessage::Req(_) => attr::REQ,
            CmMessage::Mra(_) => attr::MRA,
            CmMessage::Rej(_) => attr::REJ,
            CmMessage::Rep(_) => attr::REP,
            CmMessage::Rtu(_) => attr::RTU,
            CmMessage::Dreq(_) => attr::DREQ,
            CmMessage::Drep(_) => attr::DREP,
            CmMessage::Lap(_) => attr::LAP,
            CmMessage::Apr(_) => attr::APR,
            CmMessage::SidrReq(_) => attr::SIDR_REQ,
            CmMessage::SidrRep(_) => attr::SIDR_REP,
        }
    }

    /// The message's name as IBTA writes it.
    pub fn name(&self) -> &'static str {
        match self {
            CmMessage::Req(_) => "REQ",
            CmMessage::Mra(_) => "MRA",
            CmMessage::Rej(_) => "REJ",
            CmMessage::Rep(_) => "REP",
            CmMessage::Rtu(_) => "RTU",
            CmMessage::Dreq(_) => "DREQ",
            CmMessage::Drep(_) => "DREP",
            CmMessage::Lap(_) => "LAP",
            CmMessage::Apr(_) => "APR",
            CmMessage::SidrReq(_) => "SIDR_REQ",
            CmMessage::SidrRep(_) => "SIDR_REP",
        }
    }

    /// Whom on the receiving port the message is for: the listener of a service (a REQ
    /// or SIDR_REQ), or the holder of one of the port's communication IDs (every other
    /// message names the receiver's ID: the remote communication ID, or a SIDR_REP's
    /// request ID). `None` when that ID is 0, which no sender can mean: every message
    /// after a REQ answers one whose (non-zero) ID it echoes.
    pub fn addressee(&self) -> Option<Addressee> {
        let comm = |id: u32| (id != 0).then_some(Addressee::Comm(id));
        match self {
            CmMessage::Req(m) => Some(Addressee::Service(m.service_id)),
            CmMessage::SidrReq(m) => Some(Addressee::Service(m.service_id)),
            CmMessage::SidrRep(m) => comm(m.request_id),
            CmMessage::Mra(m) => comm(m.remote_comm_id),
            CmMessage::Rej(m) => comm(m.remote_comm_id),
            CmMessage::Rep(m) => comm(m.remote_comm_id),
            CmMessage::Rtu(m) => comm(m.remote_comm_id),
            CmMessage::Dreq(m) => comm(m.remote_comm_id),
            CmMessage::Drep(m) => comm(m.remote_comm_id),
            CmMessage::Lap(m) => comm(m.remote_comm_id),
            CmMessage::Apr(m) => comm(m.remote_comm_id),
        }
    }

    /// Parses the 232 bytes of a message of attribute `attr_id`.
    pub fn parse(attr_id: u16, d: &[u8]) -> Result<Self> {
        Ok(match attr_id {
            attr::REQ => CmMessage::Req(ReqRepr::parse(d)?),
            attr::MRA => CmMessage::Mra(MraRepr::parse(d)?),
            attr::REJ => CmMessage::Rej(RejRepr::parse(d)?),
            attr::REP => CmMessage::Rep(RepRepr::parse(d)?),
            attr::RTU => CmMessage::Rtu(RtuRepr::parse(d)?),
            attr::DREQ => CmMessage::Dreq(DreqRepr::parse(d)?),
            attr::DREP => CmMessage::Drep(DrepRepr::parse(d)?),
            attr::LAP => CmMessage::Lap(LapRepr::parse(d)?),
            attr::APR => CmMessage::Apr(AprRepr::parse(d)?),
            attr::SIDR_REQ => CmMessage::SidrReq(SidrReqRepr::parse(d)?),
            attr::SIDR_REP => CmMessage::SidrRep(SidrRepRepr::parse(d)?),
            other => return Err(bad("CM attribute ID", u64::from(other))),
        })
    }

    /// Writes the message into the first 232 bytes of `d`.
    pub fn emit(&self, d: &mut [u8]) {
        match self {
            CmMessage::Req(m) => m.emit(d),
            CmMessage::Mra(m) => m.emit(d),
            CmMessage::Rej(m) => m.emit(d),
            CmMessage::Rep(m) => m.emit(d),
            CmMessage::Rtu(m) => m.emit(d),
            CmMessage::Dreq(m) => m.emit(d),
            CmMessage::Drep(m) => m.emit(d),
            CmMessage::Lap(m) => m.emit(d),
            CmMessage::Apr(m) => m.emit(d),
            CmMessage::SidrReq(m) => m.emit(d),
            CmMessage::SidrRep(m) => m.emit(d),
        }
    }
}

/// A whole CM MAD: the transaction ID and attribute modifier of its header, and the
/// message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmMad {
    /// Transaction ID: the requester's, echoed in every message of the exchange.
    pub tid: u64,
    /// Attribute modifier (0 for every message here; kept as received).
    pub attr_mod: u32,
    /// The message.
    pub msg: CmMessage,
}

impl CmMad {
    /// Parses a MAD (a UD payload to QP1): a CM-class `Send` of class version 2 whose
    /// attribute is a CM message. Extra bytes past 256 (none on the wire) are ignored.
    pub fn parse(mad: &[u8]) -> Result<Self> {
        let h = MadHeader::parse(mad)?;
        Error::check_len(Layer::Cm, MAD_LEN, mad.len())?;
        if h.base_version != 1 {
            return Err(bad("MAD base version", u64::from(h.base_version)));
        }
        if h.mgmt_class != CLASS_CM {
            return Err(bad(
                "MAD management class (not CM)",
                u64::from(h.mgmt_class),
            ));
        }
        if h.class_version != CM_CLASS_VERSION {
            return Err(bad("CM class version", u64::from(h.class_version)));
        }
        if h.method != METHOD_SEND {
            return Err(bad("CM MAD method (not Send)", u64::from(h.method)));
        }
        let data = &mad[crate::mad::field::LEN..MAD_LEN];
        Ok(Self {
            tid: h.tid,
            attr_mod: h.attr_mod,
            msg: CmMessage::parse(h.attr_id, data)?,
        })
    }

    /// Writes the 256-byte MAD into `mad` (which must hold [`MAD_LEN`] bytes).
    pub fn emit(&self, mad: &mut [u8]) {
        let mad = &mut mad[..MAD_LEN];
        let (h, d) = mad.split_at_mut(crate::mad::field::LEN);
        h.fill(0);
        h[crate::mad::field::BASE_VERSION] = 1;
        h[crate::mad::field::MGMT_CLASS] = CLASS_CM;
        h[crate::mad::field::CLASS_VERSION] = CM_CLASS_VERSION;
        h[crate::mad::field::METHOD] = METHOD_SEND;
        be::set_u64(h, crate::mad::field::TID.start, self.tid);
        be::set_u16(h, crate::mad::field::ATTR_ID.start, self.msg.attr_id());
        be::set_u32(h, crate::mad::field::ATTR_MOD.start, self.attr_mod);
        self.msg.emit(d);
    }

    /// The MAD as bytes.
    pub fn to_bytes(&self) -> [u8; MAD_LEN] {
        let mut b = [0u8; MAD_LEN];
        self.emit(&mut b);
        b
    }
}
