//! Connection establishment: ConnectRequest, ConnectReply and ReadyToUse (IBTA 12.6.5,
//! 12.6.8, 12.6.9).
//!
//! Owns the REQ and REP layouts and the RTU alias; builds on [`super::fields`].

use super::codec::{Be, Bits, Bytes, Checked, Path, Transport};
use super::disconnect::IdsRepr;
use super::fields::{PathRepr, PrivateData, TransportService};
use super::private_len;

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
    cm_layout!("a REQ" {
        local_comm_id: Be::<4>(0),
        service_id: Be::<8>(8),
        local_ca_guid: Be::<8>(16),
        local_qkey: Be::<4>(28),
        local_qpn: Be::<3>(32),
        responder_resources: Be::<1>(35),
        local_eecn: Be::<3>(36),
        initiator_depth: Be::<1>(39),
        remote_eecn: Be::<3>(40),
        remote_cm_response_timeout: Bits(43, 3, 5),
        transport: Transport,
        end_to_end_flow_control: Bits(43, 0, 1),
        starting_psn: Be::<3>(44),
        local_cm_response_timeout: Bits(47, 3, 5),
        retry_count: Bits(47, 0, 3),
        pkey: Be::<2>(48),
        // 0 is reserved; 5 (4096 bytes) is the largest.
        path_mtu: Checked(Bits(50, 4, 4), 1..=5, "REQ path packet payload MTU"),
        rdc_exists: Bits(50, 3, 1),
        rnr_retry_count: Bits(50, 0, 3),
        max_cm_retries: Bits(51, 4, 4),
        srq: Bits(51, 3, 1),
        primary: Path::req(52),
        alternate: Path::req(96),
        sap_supported: Bits(139, 2, 1),
        private_data: Bytes(140),
    });
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
    cm_layout!("a REP" {
        local_comm_id: Be::<4>(0),
        remote_comm_id: Be::<4>(4),
        local_qkey: Be::<4>(8),
        local_qpn: Be::<3>(12),
        local_eecn: Be::<3>(16),
        starting_psn: Be::<3>(20),
        responder_resources: Be::<1>(24),
        initiator_depth: Be::<1>(25),
        target_ack_delay: Bits(26, 3, 5),
        // 3 is reserved.
        failover_accepted: Checked(Bits(26, 1, 2), 0..=2, "REP failover accepted"),
        end_to_end_flow_control: Bits(26, 0, 1),
        rnr_retry_count: Bits(27, 5, 3),
        srq: Bits(27, 4, 1),
        local_ca_guid: Be::<8>(28),
        private_data: Bytes(36),
    });
}

/// ReadyToUse.
pub type RtuRepr = IdsRepr<{ private_len::RTU }>;
