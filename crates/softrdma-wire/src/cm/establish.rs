//! Connection establishment: ConnectRequest, ConnectReply and ReadyToUse (IBTA 12.6.5,
//! 12.6.8, 12.6.9).
//!
//! Owns the REQ and REP layouts and the RTU alias; builds on [`super::fields`].

use super::codec::{Be, Bits, Bytes, Checked, Path, Transport};
use super::disconnect::IdsRepr;
use super::fields::{PathRepr, PrivateData, TransportService};
use super::private_len;

cm_message! {
    /// ConnectRequest (IBTA 12.6.5, table 106). Its default is all zeros (an RC REQ with no
    /// path), for building one field by field.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct ReqRepr("a REQ") {
        /// The sender's communication ID.
        local_comm_id: u32 = Be::<4>(0),
        /// The service asked for.
        service_id: u64 = Be::<8>(8),
        /// The sender's CA GUID.
        local_ca_guid: u64 = Be::<8>(16),
        /// The sender's Q_Key (RD only; 0 otherwise).
        local_qkey: u32 = Be::<4>(28),
        /// The sender's QPN (24 bits).
        local_qpn: u32 = Be::<3>(32),
        /// RDMA READs and atomics the sender will answer at once.
        responder_resources: u8 = Be::<1>(35),
        /// The sender's EECN (RD only, 24 bits).
        local_eecn: u32 = Be::<3>(36),
        /// RDMA READs and atomics the sender will have outstanding.
        initiator_depth: u8 = Be::<1>(39),
        /// The remote EECN (RD only, 24 bits).
        remote_eecn: u32 = Be::<3>(40),
        /// How long the sender may take to answer CM messages (5 bits, 4.096 µs × 2^n).
        remote_cm_response_timeout: u8 = Bits(43, 3, 5),
        /// RC, UC or XRC.
        transport: TransportService = Transport,
        /// Whether the sender's receive queue is flow controlled end to end.
        end_to_end_flow_control: bool = Bits(43, 0, 1),
        /// Starting PSN (24 bits). Linux's rdma_cm puts here the first PSN the sender's
        /// receive queue expects, which the receiver's requests then start at: in
        /// `rping.pcap` the passive side sends from the REQ's PSN and the active side from the
        /// REP's.
        starting_psn: u32 = Be::<3>(44),
        /// How long the receiver may take to answer (5 bits, 4.096 µs × 2^n).
        local_cm_response_timeout: u8 = Bits(47, 3, 5),
        /// Transport retry count (3 bits).
        retry_count: u8 = Bits(47, 0, 3),
        /// Partition key.
        pkey: u16 = Be::<2>(48),
        /// Path MTU (IBTA code: 1 = 256 ... 5 = 4096).
        // 0 is reserved; 5 (4096 bytes) is the largest.
        path_mtu: u8 = Checked(Bits(50, 4, 4), 1..=5, "REQ path packet payload MTU"),
        /// RD only.
        rdc_exists: bool = Bits(50, 3, 1),
        /// RNR retry count (3 bits; 7 = infinite).
        rnr_retry_count: u8 = Bits(50, 0, 3),
        /// How often the sender resends a CM message before giving up (4 bits).
        max_cm_retries: u8 = Bits(51, 4, 4),
        /// Whether the sender's QP takes its receives from an SRQ.
        srq: bool = Bits(51, 3, 1),
        /// The primary path.
        primary: PathRepr = Path::req(52),
        /// The alternate path (all zero when there is none).
        alternate: PathRepr = Path::req(96),
        /// Whether the sender supports the alternate-path protocol's SAP.
        sap_supported: bool = Bits(139, 2, 1),
        /// Private data (with rdma_cm's IP CM header first: see
        /// [`IpCmHeader`](super::IpCmHeader)).
        private_data: PrivateData<{ private_len::REQ }> = Bytes(140),
    }
}

cm_message! {
    /// ConnectReply (IBTA 12.6.8, table 110). Its default is all zeros, for building one
    /// field by field.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct RepRepr("a REP") {
        /// The sender's communication ID.
        local_comm_id: u32 = Be::<4>(0),
        /// The REQ sender's communication ID.
        remote_comm_id: u32 = Be::<4>(4),
        /// The sender's Q_Key (RD only).
        local_qkey: u32 = Be::<4>(8),
        /// The sender's QPN (24 bits).
        local_qpn: u32 = Be::<3>(12),
        /// The sender's EECN (RD only, 24 bits).
        local_eecn: u32 = Be::<3>(16),
        /// Starting PSN (24 bits). Linux's rdma_cm puts here the first PSN the sender's
        /// receive queue expects, which the receiver's requests then start at: in
        /// `rping.pcap` the passive side sends from the REQ's PSN and the active side from the
        /// REP's.
        starting_psn: u32 = Be::<3>(20),
        /// RDMA READs and atomics the sender will answer at once.
        responder_resources: u8 = Be::<1>(24),
        /// RDMA READs and atomics the sender will have outstanding.
        initiator_depth: u8 = Be::<1>(25),
        /// The sender's CA ACK delay (5 bits, 4.096 µs × 2^n).
        target_ack_delay: u8 = Bits(26, 3, 5),
        /// Whether the alternate path was accepted (2 bits: 0 accepted, 1 rejected, 2
        /// unsupported).
        // 3 is reserved.
        failover_accepted: u8 = Checked(Bits(26, 1, 2), 0..=2, "REP failover accepted"),
        /// Whether the sender's receive queue is flow controlled end to end.
        end_to_end_flow_control: bool = Bits(26, 0, 1),
        /// RNR retry count for the REQ sender's requests (3 bits).
        rnr_retry_count: u8 = Bits(27, 5, 3),
        /// Whether the sender's QP takes its receives from an SRQ.
        srq: bool = Bits(27, 4, 1),
        /// The sender's CA GUID.
        local_ca_guid: u64 = Be::<8>(28),
        /// Private data.
        private_data: PrivateData<{ private_len::REP }> = Bytes(36),
    }
}

/// ReadyToUse.
pub type RtuRepr = IdsRepr<{ private_len::RTU }>;
