//! Communication management messages (IBTA vol. 1, 12.6): REQ, MRA, REJ, REP, RTU, DREQ,
//! DREP, LAP, APR, SIDR_REQ and SIDR_REP, carried in 256-byte MADs of the CM class to QP1,
//! and the IP addressing of Annex A11 that rdma_cm puts in them (the service ID and the
//! private-data header).
//!
//! A CM MAD is the 24-byte common header ([`crate::mad`]) and 232 bytes of message. Each
//! message is a plain repr struct ([`ReqRepr`], ...) with `parse` over those 232 bytes and
//! `emit` into them; [`CmMad`] does the whole MAD. Field positions are the byte and bit
//! offsets of IBTA vol. 1 tables 106-120, counted from the start of the message (after the
//! MAD header), most significant bit first.
//!
//! Parsing checks the encoding: the MAD header is a CM Send of class version 2, the
//! attribute is a CM message, and no field holds a value the spec reserves (a transport
//! service type of RD, a path MTU code outside 256-4096, a `message rejected` of 3, an
//! additional-information length beyond its field). What a value means for a connection
//! (does the QPN exist, does the GID belong to the sender) is the state machine's to check.
//! Reserved bits are ignored on receive and sent as zero, as IBTA 13.4.3 asks of
//! management datagrams.

use crate::error::{Error, Layer, Result};
use crate::macros::be;
use crate::mad::{CLASS_CM, MadHeader};
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The length of every CM MAD (IBTA 13.4.2: MADs are 256 bytes).
pub const MAD_LEN: usize = 256;
/// The message part of a CM MAD, after the 24-byte common header.
pub const DATA_LEN: usize = MAD_LEN - crate::mad::field::LEN;
/// The class version of the CM class this module speaks (IBTA 12.6.1: 2).
pub const CM_CLASS_VERSION: u8 = 2;
/// The only MAD method CM messages use (IBTA 12.6.1: every CM message is a `Send`).
pub const METHOD_SEND: u8 = 0x03;
/// The QP the General Services Interface listens on.
pub const GSI_QPN: u32 = 1;
/// The Q_Key of QP1 (IBTA 10.2.5: the well-known GSI Q_Key).
pub const GSI_QKEY: u32 = 0x8001_0000;

/// Attribute IDs of the CM messages (IBTA vol. 1, 12.6.2, table 104).
pub mod attr {
    /// ConnectRequest.
    pub const REQ: u16 = 0x0010;
    /// MsgRcptAck.
    pub const MRA: u16 = 0x0011;
    /// ConnectReject.
    pub const REJ: u16 = 0x0012;
    /// ConnectReply.
    pub const REP: u16 = 0x0013;
    /// ReadyToUse.
    pub const RTU: u16 = 0x0014;
    /// DisconnectRequest.
    pub const DREQ: u16 = 0x0015;
    /// DisconnectReply.
    pub const DREP: u16 = 0x0016;
    /// ServiceIDResReq.
    pub const SIDR_REQ: u16 = 0x0017;
    /// ServiceIDResReqResp.
    pub const SIDR_REP: u16 = 0x0018;
    /// LoadAlternatePath.
    pub const LAP: u16 = 0x0019;
    /// AlternatePathResponse.
    pub const APR: u16 = 0x001A;
}

/// The bytes of private data each message carries (IBTA vol. 1, 12.6, tables 106-120).
pub mod private_len {
    /// REQ.
    pub const REQ: usize = 92;
    /// MRA.
    pub const MRA: usize = 222;
    /// REJ.
    pub const REJ: usize = 148;
    /// REP.
    pub const REP: usize = 196;
    /// RTU.
    pub const RTU: usize = 224;
    /// DREQ.
    pub const DREQ: usize = 220;
    /// DREP.
    pub const DREP: usize = 224;
    /// LAP.
    pub const LAP: usize = 168;
    /// APR.
    pub const APR: usize = 148;
    /// SIDR_REQ.
    pub const SIDR_REQ: usize = 216;
    /// SIDR_REP.
    pub const SIDR_REP: usize = 136;
}

/// The longest additional reject or response information (REJ ARI, APR and SIDR_REP
/// additional information: 72 bytes).
pub const INFO_LEN: usize = 72;

/// A message's private data: always the field's full size on the wire, zero-padded (the
/// wire carries no length; rdma_cm users agree on one).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PrivateData<const N: usize>(pub [u8; N]);

impl<const N: usize> PrivateData<N> {
    /// `data` followed by zeros; `None` if it is longer than the field.
    pub fn from_slice(data: &[u8]) -> Option<Self> {
        let mut a = [0u8; N];
        a.get_mut(..data.len())?.copy_from_slice(data);
        Some(Self(a))
    }

    /// The field's bytes.
    pub fn as_bytes(&self) -> &[u8; N] {
        &self.0
    }

    fn read(d: &[u8], at: usize) -> Self {
        let mut a = [0u8; N];
        a.copy_from_slice(&d[at..at + N]);
        Self(a)
    }
}

impl<const N: usize> Default for PrivateData<N> {
    fn default() -> Self {
        Self([0; N])
    }
}

impl<const N: usize> core::fmt::Debug for PrivateData<N> {
    /// The bytes up to the last non-zero one, in hex: the padding says nothing.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let used = self.0.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        write!(f, "PrivateData<{N}>[")?;
        for b in &self.0[..used] {
            write!(f, "{b:02x}")?;
        }
        f.write_str("]")
    }
}

/// Additional information (REJ ARI, APR, SIDR_REP): its length field and the 72 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Info {
    /// How many of the bytes count (at most [`INFO_LEN`]).
    pub len: u8,
    /// The field.
    pub data: PrivateData<INFO_LEN>,
}

impl Info {
    /// The bytes that count.
    pub fn bytes(&self) -> &[u8] {
        &self.data.0[..usize::from(self.len).min(INFO_LEN)]
    }
}

/// What a REQ asks for (IBTA 12.6.5, transport service type, with the extended transport
/// type of the XRC annex).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransportService {
    /// Reliable connection.
    Rc,
    /// Unreliable connection.
    Uc,
    /// XRC (transport type 3 with extended transport type 1).
    Xrc,
}

impl TransportService {
    fn code(self) -> (u8, u8) {
        match self {
            TransportService::Rc => (0, 0),
            TransportService::Uc => (1, 0),
            TransportService::Xrc => (3, 1),
        }
    }
}

/// A path as a REQ or LAP describes it (IBTA 12.6.5: the primary and alternate path
/// fields). On RoCE the LIDs are 0xFFFF (the permissive LID; rxe sends that) and the GIDs
/// are the IP addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PathRepr {
    /// Local port LID.
    pub local_lid: u16,
    /// Remote port LID.
    pub remote_lid: u16,
    /// Local port GID.
    pub local_gid: [u8; 16],
    /// Remote port GID.
    pub remote_gid: [u8; 16],
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Packet rate (6 bits, IBTA's static rate code).
    pub packet_rate: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Service level (4 bits).
    pub sl: u8,
    /// Whether the remote port is on the local subnet.
    pub subnet_local: bool,
    /// Local ACK timeout (5 bits, 4.096 µs × 2^n).
    pub local_ack_timeout: u8,
}

impl PathRepr {
    /// Parses the 44 bytes of a REQ's path at `at` (the LAP orders its fields otherwise).
    fn read_req(d: &[u8], at: usize) -> Self {
        Self {
            local_lid: be::u16(d, at),
            remote_lid: be::u16(d, at + 2),
            local_gid: gid(d, at + 4),
            remote_gid: gid(d, at + 20),
            flow_label: be::u32(d, at + 36) >> 12,
            packet_rate: d[at + 39] & 0x3F,
            traffic_class: d[at + 40],
            hop_limit: d[at + 41],
            sl: d[at + 42] >> 4,
            subnet_local: d[at + 42] & 0x08 != 0,
            local_ack_timeout: d[at + 43] >> 3,
        }
    }

    fn write_req(&self, d: &mut [u8], at: usize) {
        be::set_u16(d, at, self.local_lid);
        be::set_u16(d, at + 2, self.remote_lid);
        d[at + 4..at + 20].copy_from_slice(&self.local_gid);
        d[at + 20..at + 36].copy_from_slice(&self.remote_gid);
        be::set_u32(
            d,
            at + 36,
            (self.flow_label & 0xF_FFFF) << 12 | u32::from(self.packet_rate & 0x3F),
        );
        d[at + 40] = self.traffic_class;
        d[at + 41] = self.hop_limit;
        d[at + 42] = (self.sl & 0xF) << 4 | u8::from(self.subnet_local) << 3;
        d[at + 43] = (d[at + 43] & 0x07) | (self.local_ack_timeout & 0x1F) << 3;
    }
}

fn gid(d: &[u8], at: usize) -> [u8; 16] {
    let mut g = [0u8; 16];
    g.copy_from_slice(&d[at..at + 16]);
    g
}

/// A field whose value the spec reserves.
fn bad(field: &'static str, value: u64) -> Error {
    Error::ReservedValue {
        layer: Layer::Cm,
        field,
        value,
    }
}

/// The largest IBTA path MTU code (4096 bytes); 0 is reserved.
const MTU_CODES: core::ops::RangeInclusive<u8> = 1..=5;

/// ConnectRequest (IBTA 12.6.5, table 106).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReqRepr {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The service asked for.
    pub service_id: u64,
    /// The sender's CA GUID.
    pub local_ca_guid: u64,
    /// The sender's Q_Key (RD only; 0 otherwise).
    pub local_qkey: u32,
    /// The sender's QPN (24 bits).
    pub local_qpn: u32,
    /// RDMA READs and atomics the sender will answer at once.
    pub responder_resources: u8,
    /// The sender's EECN (RD only, 24 bits).
    pub local_eecn: u32,
    /// RDMA READs and atomics the sender will have outstanding.
    pub initiator_depth: u8,
    /// The remote EECN (RD only, 24 bits).
    pub remote_eecn: u32,
    /// How long the sender may take to answer CM messages (5 bits, 4.096 µs × 2^n).
    pub remote_cm_response_timeout: u8,
    /// RC, UC or XRC.
    pub transport: TransportService,
    /// Whether the sender's receive queue is flow controlled end to end.
    pub end_to_end_flow_control: bool,
    /// Starting PSN (24 bits). Linux's rdma_cm puts here the first PSN the sender's
    /// receive queue expects, which the receiver's requests then start at: in
    /// `rping.pcap` the passive side sends from the REQ's PSN and the active side from the
    /// REP's.
    pub starting_psn: u32,
    /// How long the receiver may take to answer (5 bits, 4.096 µs × 2^n).
    pub local_cm_response_timeout: u8,
    /// Transport retry count (3 bits).
    pub retry_count: u8,
    /// Partition key.
    pub pkey: u16,
    /// Path MTU (IBTA code: 1 = 256 ... 5 = 4096).
    pub path_mtu: u8,
    /// RD only.
    pub rdc_exists: bool,
    /// RNR retry count (3 bits; 7 = infinite).
    pub rnr_retry_count: u8,
    /// How often the sender resends a CM message before giving up (4 bits).
    pub max_cm_retries: u8,
    /// Whether the sender's QP takes its receives from an SRQ.
    pub srq: bool,
    /// The primary path.
    pub primary: PathRepr,
    /// The alternate path (all zero when there is none).
    pub alternate: PathRepr,
    /// Whether the sender supports the alternate-path protocol's SAP.
    pub sap_supported: bool,
    /// Private data (with rdma_cm's IP CM header first: see [`IpCmHeader`]).
    pub private_data: PrivateData<{ private_len::REQ }>,
}

impl ReqRepr {
    /// Parses a REQ's 232 bytes.
    pub fn parse(d: &[u8]) -> Result<Self> {
        Error::check_len(Layer::Cm, DATA_LEN, d.len())?;
        let ts = (d[43] >> 1) & 0x3;
        let ext = d[51] & 0x7;
        let transport = match (ts, ext) {
            (0, _) => TransportService::Rc,
            (1, _) => TransportService::Uc,
            (3, 1) => TransportService::Xrc,
            (2, _) => return Err(bad("REQ transport service type (RD)", 2)),
            (_, e) => return Err(bad("REQ extended transport type", u64::from(e))),
        };
        let path_mtu = d[50] >> 4;
        if !MTU_CODES.contains(&path_mtu) {
            return Err(bad("REQ path packet payload MTU", u64::from(path_mtu)));
        }
        Ok(Self {
            local_comm_id: be::u32(d, 0),
            service_id: be::u64(d, 8),
            local_ca_guid: be::u64(d, 16),
            local_qkey: be::u32(d, 28),
            local_qpn: be::u24(d, 32),
            responder_resources: d[35],
            local_eecn: be::u24(d, 36),
            initiator_depth: d[39],
            remote_eecn: be::u24(d, 40),
            remote_cm_response_timeout: d[43] >> 3,
            transport,
            end_to_end_flow_control: d[43] & 1 != 0,
            starting_psn: be::u24(d, 44),
            local_cm_response_timeout: d[47] >> 3,
            retry_count: d[47] & 0x7,
            pkey: be::u16(d, 48),
            path_mtu,
            rdc_exists: d[50] & 0x08 != 0,
            rnr_retry_count: d[50] & 0x7,
            max_cm_retries: d[51] >> 4,
            srq: d[51] & 0x08 != 0,
            primary: PathRepr::read_req(d, 52),
            alternate: PathRepr::read_req(d, 96),
            sap_supported: d[139] & 0x04 != 0,
            private_data: PrivateData::read(d, 140),
        })
    }

    /// Writes the REQ into the first 232 bytes of `d` (reserved bits zero).
    pub fn emit(&self, d: &mut [u8]) {
        let d = &mut d[..DATA_LEN];
        d.fill(0);
        let (ts, ext) = self.transport.code();
        be::set_u32(d, 0, self.local_comm_id);
        be::set_u64(d, 8, self.service_id);
        be::set_u64(d, 16, self.local_ca_guid);
        be::set_u32(d, 28, self.local_qkey);
        be::set_u24(d, 32, self.local_qpn);
        d[35] = self.responder_resources;
        be::set_u24(d, 36, self.local_eecn);
        d[39] = self.initiator_depth;
        be::set_u24(d, 40, self.remote_eecn);
        d[43] = (self.remote_cm_response_timeout & 0x1F) << 3
            | ts << 1
            | u8::from(self.end_to_end_flow_control);
        be::set_u24(d, 44, self.starting_psn);
        d[47] = (self.local_cm_response_timeout & 0x1F) << 3 | (self.retry_count & 0x7);
        be::set_u16(d, 48, self.pkey);
        d[50] = (self.path_mtu & 0xF) << 4
            | u8::from(self.rdc_exists) << 3
            | (self.rnr_retry_count & 0x7);
        d[51] = (self.max_cm_retries & 0xF) << 4 | u8::from(self.srq) << 3 | ext;
        self.primary.write_req(d, 52);
        self.alternate.write_req(d, 96);
        d[139] |= u8::from(self.sap_supported) << 2;
        d[140..].copy_from_slice(&self.private_data.0);
    }
}

/// Which message an MRA or REJ refers to (IBTA 12.6.6 and 12.6.7: 2 bits; MRA: 0 REQ, 1
/// REP, 2 LAP; REJ: 0 REQ, 1 REP, 2 other).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageRef {
    /// A REQ.
    Req,
    /// A REP.
    Rep,
    /// A LAP (MRA) or another message (REJ).
    Other,
}

impl MessageRef {
    fn parse(field: &'static str, b: u8) -> Result<Self> {
        match b >> 6 {
            0 => Ok(MessageRef::Req),
            1 => Ok(MessageRef::Rep),
            2 => Ok(MessageRef::Other),
            v => Err(bad(field, u64::from(v))),
        }
    }

    fn code(self) -> u8 {
        match self {
            MessageRef::Req => 0,
            MessageRef::Rep => 1,
            MessageRef::Other => 2,
        }
    }
}

/// MsgRcptAck: "I got your message; my answer will take longer" (IBTA 12.6.6, table 107).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MraRepr {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The receiver's communication ID.
    pub remote_comm_id: u32,
    /// The message acknowledged.
    pub message: MessageRef,
    /// How much longer the answer may take (5 bits, 4.096 µs × 2^n), on top of the packet
    /// lifetime.
    pub service_timeout: u8,
    /// Private data.
    pub private_data: PrivateData<{ private_len::MRA }>,
}

impl MraRepr {
    /// Parses an MRA's 232 bytes.
    pub fn parse(d: &[u8]) -> Result<Self> {
        Error::check_len(Layer::Cm, DATA_LEN, d.len())?;
        Ok(Self {
            local_comm_id: be::u32(d, 0),
            remote_comm_id: be::u32(d, 4),
            message: MessageRef::parse("MRA message MRAed", d[8])?,
            service_timeout: d[9] >> 3,
            private_data: PrivateData::read(d, 10),
        })
    }

    /// Writes the MRA into the first 232 bytes of `d`.
    pub fn emit(&self, d: &mut [u8]) {
        let d = &mut d[..DATA_LEN];
        d.fill(0);
        be::set_u32(d, 0, self.local_comm_id);
        be::set_u32(d, 4, self.remote_comm_id);
        d[8] = self.message.code() << 6;
        d[9] = (self.service_timeout & 0x1F) << 3;
        d[10..].copy_from_slice(&self.private_data.0);
    }
}

/// Reject reasons (IBTA 12.6.7.2, table 109) that this stack sends or acts on; any other
/// value parses as itself.
pub mod rej_reason {
    /// No QP available.
    pub const NO_QP: u16 = 1;
    /// No EEC available.
    pub const NO_EEC: u16 = 2;
    /// No resources available.
    pub const NO_RESOURCES: u16 = 3;
    /// Timeout (the sender gave up waiting; ARI: the sender's CA GUID).
    pub const TIMEOUT: u16 = 4;
    /// Unsupported request.
    pub const UNSUPPORTED_REQUEST: u16 = 5;
    /// Invalid communication ID.
    pub const INVALID_COMM_ID: u16 = 6;
    /// Invalid communication instance.
    pub const INVALID_COMM_INSTANCE: u16 = 7;
    /// Invalid service ID (nobody listens for it).
    pub const INVALID_SERVICE_ID: u16 = 8;
    /// Invalid transport service type.
    pub const INVALID_TRANSPORT_TYPE: u16 = 9;
    /// Stale connection (the QPN or communication ID is still in use or in TIMEWAIT).
    pub const STALE_CONNECTION: u16 = 10;
    /// RDC does not exist.
    pub const RDC_NOT_EXIST: u16 = 11;
    /// Invalid primary GID.
    pub const INVALID_PRIMARY_GID: u16 = 12;
    /// Invalid primary LID.
    pub const INVALID_PRIMARY_LID: u16 = 13;
    /// Invalid primary SL.
    pub const INVALID_PRIMARY_SL: u16 = 14;
    /// Invalid primary traffic class.
    pub const INVALID_PRIMARY_TRAFFIC_CLASS: u16 = 15;
    /// Invalid primary hop limit.
    pub const INVALID_PRIMARY_HOP_LIMIT: u16 = 16;
    /// Invalid primary packet rate.
    pub const INVALID_PRIMARY_PACKET_RATE: u16 = 17;
    /// Invalid alternate GID.
    pub const INVALID_ALT_GID: u16 = 18;
    /// Port redirection.
    pub const PORT_REDIRECT: u16 = 24;
    /// Invalid path MTU.
    pub const INVALID_MTU: u16 = 26;
    /// Insufficient responder resources.
    pub const INSUFFICIENT_RESP_RESOURCES: u16 = 27;
    /// Consumer reject (rdma_reject; the private data says why).
    pub const CONSUMER_DEFINED: u16 = 28;
    /// Invalid RNR retry count.
    pub const INVALID_RNR_RETRY: u16 = 29;
    /// Duplicate local communication ID.
    pub const DUPLICATE_LOCAL_COMM_ID: u16 = 30;
    /// Unsupported class version.
    pub const INVALID_CLASS_VERSION: u16 = 31;
    /// Invalid primary flow label.
    pub const INVALID_FLOW_LABEL: u16 = 32;
    /// Invalid alternate flow label.
    pub const INVALID_ALT_FLOW_LABEL: u16 = 33;
    /// Vendor option not supported: the consumer rejects the peer's ECE options
    /// (`rdma_reject_ece`; `IB_CM_REJ_VENDOR_OPTION_NOT_SUPPORTED`).
    pub const VENDOR_OPTION_NOT_SUPPORTED: u16 = 35;
}

/// ConnectReject (IBTA 12.6.7, table 108).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RejRepr {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The receiver's communication ID (0 if the sender never learnt it).
    pub remote_comm_id: u32,
    /// The message rejected.
    pub message: MessageRef,
    /// Why (see [`rej_reason`]).
    pub reason: u16,
    /// Additional reject information (7-bit length).
    pub ari: Info,
    /// Private data.
    pub private_data: PrivateData<{ private_len::REJ }>,
}

impl RejRepr {
    /// Parses a REJ's 232 bytes.
    pub fn parse(d: &[u8]) -> Result<Self> {
        Error::check_len(Layer::Cm, DATA_LEN, d.len())?;
        let len = d[9] >> 1;
        if usize::from(len) > INFO_LEN {
            return Err(bad("REJ reject info length", u64::from(len)));
        }
        Ok(Self {
            local_comm_id: be::u32(d, 0),
            remote_comm_id: be::u32(d, 4),
            message: MessageRef::parse("REJ message rejected", d[8])?,
            reason: be::u16(d, 10),
            ari: Info {
                len,
                data: PrivateData::read(d, 12),
            },
            private_data: PrivateData::read(d, 84),
        })
    }

    /// Writes the REJ into the first 232 bytes of `d`.
    pub fn emit(&self, d: &mut [u8]) {
        let d = &mut d[..DATA_LEN];
        d.fill(0);
        be::set_u32(d, 0, self.local_comm_id);
        be::set_u32(d, 4, self.remote_comm_id);
        d[8] = self.message.code() << 6;
        d[9] = self.ari.len.min(INFO_LEN as u8) << 1;
        be::set_u16(d, 10, self.reason);
        d[12..84].copy_from_slice(&self.ari.data.0);
        d[84..].copy_from_slice(&self.private_data.0);
    }
}

/// ConnectReply (IBTA 12.6.8, table 110).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RepRepr {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The REQ sender's communication ID.
    pub remote_comm_id: u32,
    /// The sender's Q_Key (RD only).
    pub local_qkey: u32,
    /// The sender's QPN (24 bits).
    pub local_qpn: u32,
    /// The sender's EECN (RD only, 24 bits).
    pub local_eecn: u32,
    /// Starting PSN (24 bits). Linux's rdma_cm puts here the first PSN the sender's
    /// receive queue expects, which the receiver's requests then start at: in
    /// `rping.pcap` the passive side sends from the REQ's PSN and the active side from the
    /// REP's.
    pub starting_psn: u32,
    /// RDMA READs and atomics the sender will answer at once.
    pub responder_resources: u8,
    /// RDMA READs and atomics the sender will have outstanding.
    pub initiator_depth: u8,
    /// The sender's CA ACK delay (5 bits, 4.096 µs × 2^n).
    pub target_ack_delay: u8,
    /// Whether the alternate path was accepted (2 bits: 0 accepted, 1 rejected, 2
    /// unsupported).
    pub failover_accepted: u8,
    /// Whether the sender's receive queue is flow controlled end to end.
    pub end_to_end_flow_control: bool,
    /// RNR retry count for the REQ sender's requests (3 bits).
    pub rnr_retry_count: u8,
    /// Whether the sender's QP takes its receives from an SRQ.
    pub srq: bool,
    /// The sender's CA GUID.
    pub local_ca_guid: u64,
    /// Private data.
    pub private_data: PrivateData<{ private_len::REP }>,
}

impl RepRepr {
    /// Parses a REP's 232 bytes.
    pub fn parse(d: &[u8]) -> Result<Self> {
        Error::check_len(Layer::Cm, DATA_LEN, d.len())?;
        let failover = (d[26] >> 1) & 0x3;
        if failover == 3 {
            return Err(bad("REP failover accepted", 3));
        }
        Ok(Self {
            local_comm_id: be::u32(d, 0),
            remote_comm_id: be::u32(d, 4),
            local_qkey: be::u32(d, 8),
            local_qpn: be::u24(d, 12),
            local_eecn: be::u24(d, 16),
            starting_psn: be::u24(d, 20),
            responder_resources: d[24],
            initiator_depth: d[25],
            target_ack_delay: d[26] >> 3,
            failover_accepted: failover,
            end_to_end_flow_control: d[26] & 1 != 0,
            rnr_retry_count: d[27] >> 5,
            srq: d[27] & 0x10 != 0,
            local_ca_guid: be::u64(d, 28),
            private_data: PrivateData::read(d, 36),
        })
    }

    /// Writes the REP into the first 232 bytes of `d`.
    pub fn emit(&self, d: &mut [u8]) {
        let d = &mut d[..DATA_LEN];
        d.fill(0);
        be::set_u32(d, 0, self.local_comm_id);
        be::set_u32(d, 4, self.remote_comm_id);
        be::set_u32(d, 8, self.local_qkey);
        be::set_u24(d, 12, self.local_qpn);
        be::set_u24(d, 16, self.local_eecn);
        be::set_u24(d, 20, self.starting_psn);
        d[24] = self.responder_resources;
        d[25] = self.initiator_depth;
        d[26] = (self.target_ack_delay & 0x1F) << 3
            | (self.failover_accepted & 0x3) << 1
            | u8::from(self.end_to_end_flow_control);
        d[27] = (self.rnr_retry_count & 0x7) << 5 | u8::from(self.srq) << 4;
        be::set_u64(d, 28, self.local_ca_guid);
        d[36..].copy_from_slice(&self.private_data.0);
    }
}

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

/// ReadyToUse.
pub type RtuRepr = IdsRepr<{ private_len::RTU }>;
/// DisconnectReply.
pub type DrepRepr = IdsRepr<{ private_len::DREP }>;

impl<const N: usize> IdsRepr<N> {
    /// Parses the message's 232 bytes.
    pub fn parse(d: &[u8]) -> Result<Self> {
        Error::check_len(Layer::Cm, DATA_LEN, d.len())?;
        Ok(Self {
            local_comm_id: be::u32(d, 0),
            remote_comm_id: be::u32(d, 4),
            private_data: PrivateData::read(d, 8),
        })
    }

    /// Writes the message into the first 232 bytes of `d`.
    pub fn emit(&self, d: &mut [u8]) {
        let d = &mut d[..DATA_LEN];
        d.fill(0);
        be::set_u32(d, 0, self.local_comm_id);
        be::set_u32(d, 4, self.remote_comm_id);
        d[8..8 + N].copy_from_slice(&self.private_data.0);
    }
}

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
        Error::check_len(Layer::Cm, DATA_LEN, d.len())?;
        Ok(Self {
            local_comm_id: be::u32(d, 0),
            remote_comm_id: be::u32(d, 4),
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
        let d = &mut d[..DATA_LEN];
        d.fill(0);
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
        Error::check_len(Layer::Cm, DATA_LEN, d.len())?;
        let len = d[8];
        if usize::from(len) > INFO_LEN {
            return Err(bad("APR additional information length", u64::from(len)));
        }
        Ok(Self {
            local_comm_id: be::u32(d, 0),
            remote_comm_id: be::u32(d, 4),
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
        let d = &mut d[..DATA_LEN];
        d.fill(0);
        be::set_u32(d, 0, self.local_comm_id);
        be::set_u32(d, 4, self.remote_comm_id);
        d[8] = self.info.len.min(INFO_LEN as u8);
        d[9] = self.status;
        d[12..84].copy_from_slice(&self.info.data.0);
        d[84..].copy_from_slice(&self.private_data.0);
    }
}

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
        let d = &mut d[..DATA_LEN];
        d.fill(0);
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
        let d = &mut d[..DATA_LEN];
        d.fill(0);
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

/// rdma_cm's port spaces (the third byte of an IP CM service ID; librdmacm's
/// `enum rdma_port_space` holds these with 0x01 above them).
pub mod port_space {
    /// RDMA_PS_IPOIB.
    pub const IPOIB: u16 = 0x0002;
    /// RDMA_PS_IB (any QP type, one service per port).
    pub const IB: u16 = 0x013F;
    /// RDMA_PS_TCP (RC, connected).
    pub const TCP: u16 = 0x0106;
    /// RDMA_PS_UDP (UD, through SIDR).
    pub const UDP: u16 = 0x0111;
}

/// The prefix of IP CM service IDs (IBTA Annex A11.2.1: 0x0000000001 in the top 40 bits).
pub const IP_SERVICE_PREFIX: u64 = 0x0000_0000_0100_0000;

/// The service ID rdma_cm uses for `port` in `ps` (IBTA Annex A11.2.1: prefix, the
/// protocol byte, the port).
pub fn ip_service_id(ps: u16, port: u16) -> u64 {
    IP_SERVICE_PREFIX | u64::from(ps & 0xFF) << 16 | u64::from(port)
}

/// The protocol byte and port of an IP CM service ID; `None` if it lacks the prefix.
pub fn parse_ip_service_id(id: u64) -> Option<(u8, u16)> {
    (id & 0xFFFF_FFFF_FF00_0000 == IP_SERVICE_PREFIX).then_some(((id >> 16) as u8, id as u16))
}

/// The header rdma_cm puts first in a REQ's and a SIDR_REQ's private data (IBTA Annex
/// A11.6, the CM REQ private data format): the IP addresses and source port of the
/// connection, so that the passive side need not resolve GIDs back to addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpCmHeader {
    /// Major (top four bits) and minor version: 0.
    pub version: u8,
    /// The source port.
    pub src_port: u16,
    /// The source address.
    pub src: IpAddr,
    /// The destination address.
    pub dst: IpAddr,
}

impl IpCmHeader {
    /// The header's length (the rest of the private data is the consumer's).
    pub const LEN: usize = 36;

    /// Parses the header at the start of `pd`.
    pub fn parse(pd: &[u8]) -> Result<Self> {
        Error::check_len(Layer::Cm, Self::LEN, pd.len())?;
        let version = pd[0];
        if version >> 4 != 0 {
            return Err(bad("IP CM major version", u64::from(version >> 4)));
        }
        let addr = |at: usize| -> IpAddr {
            let a = gid(pd, at);
            match pd[1] >> 4 {
                4 => IpAddr::V4(Ipv4Addr::new(a[12], a[13], a[14], a[15])),
                _ => IpAddr::V6(Ipv6Addr::from(a)),
            }
        };
        match pd[1] >> 4 {
            4 | 6 => {}
            v => return Err(bad("IP CM IP version", u64::from(v))),
        }
        Ok(Self {
            version,
            src_port: be::u16(pd, 2),
            src: addr(4),
            dst: addr(20),
        })
    }

    /// Writes the header into the first [`Self::LEN`] bytes of `pd`. The two addresses
    /// must be of one family; an IPv4 address is written in the last four bytes of its
    /// 16 (Annex A11.6), with zeros before it.
    pub fn emit(&self, pd: &mut [u8]) {
        let pd = &mut pd[..Self::LEN];
        pd.fill(0);
        pd[0] = self.version;
        pd[1] = if self.src.is_ipv4() { 4 << 4 } else { 6 << 4 };
        be::set_u16(pd, 2, self.src_port);
        for (at, a) in [(4, self.src), (20, self.dst)] {
            match a {
                IpAddr::V4(v4) => pd[at + 12..at + 16].copy_from_slice(&v4.octets()),
                IpAddr::V6(v6) => pd[at..at + 16].copy_from_slice(&v6.octets()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req() -> ReqRepr {
        ReqRepr {
            local_comm_id: 0x0cf1_e317,
            service_id: ip_service_id(port_space::TCP, 7174),
            local_ca_guid: 0x5054_00ff_fe77_0003,
            local_qkey: 0,
            local_qpn: 0x1e,
            responder_resources: 1,
            local_eecn: 0,
            initiator_depth: 1,
            remote_eecn: 0,
            remote_cm_response_timeout: 20,
            transport: TransportService::Rc,
            end_to_end_flow_control: false,
            starting_psn: 0x95cb62,
            local_cm_response_timeout: 20,
            retry_count: 7,
            pkey: 0xFFFF,
            path_mtu: 3,
            rdc_exists: false,
            rnr_retry_count: 7,
            max_cm_retries: 15,
            srq: false,
            primary: PathRepr {
                local_lid: 0xFFFF,
                remote_lid: 0xFFFF,
                flow_label: 0x992,
                hop_limit: 64,
                local_ack_timeout: 19,
                ..PathRepr::default()
            },
            alternate: PathRepr::default(),
            sap_supported: false,
            private_data: PrivateData::default(),
        }
    }

    #[test]
    fn every_message_round_trips_through_a_mad() {
        let msgs = [
            CmMessage::Req(req()),
            CmMessage::Rep(RepRepr {
                local_comm_id: 1,
                remote_comm_id: 2,
                local_qkey: 0,
                local_qpn: 0xABCDEF,
                local_eecn: 0,
                starting_psn: 0x123456,
                responder_resources: 4,
                initiator_depth: 3,
                target_ack_delay: 15,
                failover_accepted: 2,
                end_to_end_flow_control: true,
                rnr_retry_count: 7,
                srq: true,
                local_ca_guid: 9,
                private_data: PrivateData::from_slice(b"hello").unwrap(),
            }),
            CmMessage::Rej(RejRepr {
                local_comm_id: 1,
                remote_comm_id: 2,
                message: MessageRef::Req,
                reason: rej_reason::CONSUMER_DEFINED,
                ari: Info {
                    len: 3,
                    data: PrivateData::from_slice(&[1, 2, 3]).unwrap(),
                },
                private_data: PrivateData::from_slice(&[7; 148]).unwrap(),
            }),
            CmMessage::Mra(MraRepr {
                local_comm_id: 5,
                remote_comm_id: 6,
                message: MessageRef::Rep,
                service_timeout: 31,
                private_data: PrivateData::default(),
            }),
            CmMessage::Rtu(RtuRepr {
                local_comm_id: 1,
                remote_comm_id: 2,
                private_data: PrivateData::from_slice(&[0xAA; 224]).unwrap(),
            }),
            CmMessage::Dreq(DreqRepr {
                local_comm_id: 1,
                remote_comm_id: 2,
                remote_qpn: 0xFFFFFF,
                private_data: PrivateData::default(),
            }),
            CmMessage::Drep(DrepRepr {
                local_comm_id: 1,
                remote_comm_id: 2,
                private_data: PrivateData::default(),
            }),
            CmMessage::Lap(LapRepr {
                local_comm_id: 1,
                remote_comm_id: 2,
                remote_qpn: 3,
                remote_cm_response_timeout: 17,
                alternate: PathRepr {
                    flow_label: 0xFFFFF,
                    traffic_class: 0xAB,
                    sl: 15,
                    subnet_local: true,
                    local_ack_timeout: 31,
                    packet_rate: 63,
                    ..PathRepr::default()
                },
                private_data: PrivateData::default(),
            }),
            CmMessage::Apr(AprRepr {
                local_comm_id: 1,
                remote_comm_id: 2,
                status: ap_status::UNSUPPORTED,
                info: Info::default(),
                private_data: PrivateData::default(),
            }),
            CmMessage::SidrReq(SidrReqRepr {
                request_id: 77,
                pkey: 0xFFFF,
                service_id: ip_service_id(port_space::UDP, 7174),
                private_data: PrivateData::default(),
            }),
            CmMessage::SidrRep(SidrRepRepr {
                request_id: 77,
                status: sidr_status::VALID,
                info: Info::default(),
                qpn: 0x42,
                service_id: ip_service_id(port_space::UDP, 7174),
                qkey: 0x1234_5678,
                private_data: PrivateData::default(),
            }),
        ];
        for msg in msgs {
            let mad = CmMad {
                tid: 0x0000_0002_17e3_f10c,
                attr_mod: 0,
                msg,
            };
            let bytes = mad.to_bytes();
            assert_eq!(CmMad::parse(&bytes), Ok(mad), "{}", msg.name());
        }
    }

    #[test]
    fn reserved_values_are_named() {
        let mut b = CmMad {
            tid: 1,
            attr_mod: 0,
            msg: CmMessage::Req(req()),
        }
        .to_bytes();
        // Transport service type RD.
        b[24 + 43] = (b[24 + 43] & !0x06) | 2 << 1;
        let e = CmMad::parse(&b).unwrap_err();
        assert!(e.to_string().contains("REQ transport service type"), "{e}");
        // Path MTU 0.
        let mut b = CmMad {
            tid: 1,
            attr_mod: 0,
            msg: CmMessage::Req(ReqRepr {
                path_mtu: 0,
                ..req()
            }),
        }
        .to_bytes();
        assert!(
            CmMad::parse(&b)
                .unwrap_err()
                .to_string()
                .contains("path packet payload MTU")
        );
        b[2] = 1;
        assert!(
            CmMad::parse(&b)
                .unwrap_err()
                .to_string()
                .contains("class version")
        );
        assert!(matches!(
            CmMad::parse(&b[..255]),
            Err(Error::Truncated { .. })
        ));
    }

    #[test]
    fn service_ids_and_the_ip_header() {
        assert_eq!(
            ip_service_id(port_space::TCP, 7174),
            0x0000_0000_0106_1c06,
            "the REQ of rping.pcap"
        );
        assert_eq!(
            parse_ip_service_id(0x0000_0000_0106_1c06),
            Some((0x06, 7174))
        );
        assert_eq!(parse_ip_service_id(0x1000_0000_0106_1c06), None);
        for (src, dst) in [
            (IpAddr::from([10, 77, 0, 3]), IpAddr::from([10, 77, 0, 2])),
            (
                IpAddr::from(Ipv6Addr::LOCALHOST),
                IpAddr::from(Ipv6Addr::LOCALHOST),
            ),
        ] {
            let h = IpCmHeader {
                version: 0,
                src_port: 0xd249,
                src,
                dst,
            };
            let mut pd = [0u8; private_len::REQ];
            h.emit(&mut pd);
            assert_eq!(IpCmHeader::parse(&pd), Ok(h));
        }
    }
}
