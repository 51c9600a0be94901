//! Connection establishment: ConnectRequest, ConnectReply and ReadyToUse (IBTA 12.6.5,
//! 12.6.8, 12.6.9).
//!
//! Owns the REQ and REP layouts and the RTU alias; builds on [`super::fields`].

use super::fields::{
    IdsRepr, PathRepr, PrivateData, TransportService, bad, blank, blank_with_ids, ids,
};
use super::{DATA_LEN, private_len};
use crate::error::{Error, Layer, Result};
use crate::macros::be;

/// The largest IBTA path MTU code (4096 bytes); 0 is reserved.
const MTU_CODES: core::ops::RangeInclusive<u8> = 1..=5;

/// ConnectRequest (IBTA 12.6.5, table 106). Its default is all zeros (an RC REQ with no
/// path), for building one field by field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
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
    /// Private data (with rdma_cm's IP CM header first: see
    /// [`IpCmHeader`](super::IpCmHeader)).
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
        let d = blank(d);
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

/// ConnectReply (IBTA 12.6.8, table 110). Its default is all zeros, for building one
/// field by field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
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
        let (local_comm_id, remote_comm_id) = ids(d)?;
        let failover = (d[26] >> 1) & 0x3;
        if failover == 3 {
            return Err(bad("REP failover accepted", 3));
        }
        Ok(Self {
            local_comm_id,
            remote_comm_id,
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
        let d = blank_with_ids(d, self.local_comm_id, self.remote_comm_id);
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

/// ReadyToUse.
pub type RtuRepr = IdsRepr<{ private_len::RTU }>;
