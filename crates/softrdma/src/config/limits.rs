//! The device's limits in one table, as rxe keeps them in `rxe_param.h`: what
//! `ibv_query_device` and `ibv_query_port` report, and what the verbs check requests
//! against.

use softrdma_proto::Mtu;
use std::net::IpAddr;

/// Largest CQ: a ConnectX-5's 4,194,303, not rxe's `RXE_MAX_CQE` of 32,767. libfabric's
/// `ofi_rxm` sizes its CQ for a universe of 256 peers (262,144 entries with its default
/// queue sizes) and fails on rxe's limit; a softrdma CQ grows as it fills, so a large
/// limit costs nothing until completions are queued.
pub const MAX_CQE: usize = 4_194_303;
/// QPs per device (`RXE_MAX_QP`).
pub const MAX_QP: u32 = 1048560;
/// Work requests per queue (`RXE_MAX_QP_WR`).
pub const MAX_QP_WR: u32 = 1048576;
/// SGEs per WR (`RXE_MAX_SGE`), and per READ (`RXE_MAX_SGE_RD`).
pub const MAX_SGE: u32 = 32;
/// CQs per device (`RXE_MAX_CQ`).
pub const MAX_CQ: u32 = 1048576;
/// Memory regions per device (`RXE_MAX_MR`).
pub const MAX_MR: u32 = 524287;
/// Protection domains per device (`RXE_MAX_PD`).
pub const MAX_PD: u32 = 1048576;
/// Outstanding READs and atomics per QP, each way (`RXE_MAX_QP_RD_ATOM`): the engine's
/// own limit on `max_rd_atomic`.
pub const MAX_QP_RD_ATOM: u32 = softrdma_proto::state::MAX_RD_ATOMIC as u32;
/// Responder resources for READs and atomics over the device (`RXE_MAX_RES_RD_ATOM`).
pub const MAX_RES_RD_ATOM: u32 = 258048;
/// SRQs per device (`RXE_MAX_SRQ`).
pub const MAX_SRQ: u32 = 917503;
/// WRs per SRQ (`RXE_MAX_SRQ_WR`).
pub const MAX_SRQ_WR: u32 = 1048576;
/// SGEs per SRQ WR (`RXE_MAX_SRQ_SGE`).
pub const MAX_SRQ_SGE: u32 = 27;
/// P_Keys in the table (`RXE_MAX_PKEYS`).
pub const MAX_PKEYS: u32 = 64;
/// The ACK delay the device advertises, as a 4.096 µs · 2^n code (`RXE_LOCAL_CA_ACK_DELAY`).
pub const LOCAL_CA_ACK_DELAY: u32 = 15;
/// Inline bytes per WR (`RXE_MAX_INLINE_DATA`).
pub const MAX_INLINE_DATA: u32 = 256;
/// Address handles per device (`RXE_MAX_AH`).
pub const MAX_AH: u32 = 32767;
/// GID table entries per port (`RXE_PORT_GID_TBL_LEN`).
pub const GID_TBL_LEN: u32 = 1024;
/// Multicast groups per device (`RXE_MAX_MCAST_GRP`).
pub const MAX_MCAST_GRP: u32 = 8192;
/// QPs attached to one multicast group (`RXE_MAX_MCAST_QP_ATTACH`).
pub const MAX_MCAST_QP_ATTACH: u32 = 56;
/// Multicast attachments per device (`RXE_MAX_TOT_MCAST_QP_ATTACH`).
pub const MAX_TOTAL_MCAST_QP_ATTACH: u32 = 0x70000;

/// Device limits (`struct ibv_device_attr`), modelled on rxe's `rxe_param.h`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct DeviceAttr {
    pub fw_ver: String,
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: u32,
    pub max_qp_wr: u32,
    pub max_sge: u32,
    pub max_sge_rd: u32,
    pub max_cq: u32,
    pub max_cqe: u32,
    pub max_mr: u32,
    pub max_pd: u32,
    pub max_qp_rd_atom: u32,
    pub max_qp_init_rd_atom: u32,
    pub max_res_rd_atom: u32,
    pub atomic_cap: &'static str,
    pub max_srq: u32,
    pub max_srq_wr: u32,
    pub max_srq_sge: u32,
    pub max_pkeys: u32,
    pub local_ca_ack_delay: u32,
    pub max_inline_data: u32,
    pub phys_port_cnt: u8,
    pub max_ah: u32,
    pub max_msg_sz: u64,
    pub max_mcast_grp: u32,
    pub max_mcast_qp_attach: u32,
    pub max_total_mcast_qp_attach: u32,
}

/// Port attributes (`struct ibv_port_attr`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct PortAttr {
    pub state: &'static str,
    pub max_mtu: Mtu,
    pub active_mtu: Mtu,
    pub gid_tbl_len: u32,
    pub lid: u16,
    pub sm_lid: u16,
    pub link_layer: &'static str,
}

/// The limits of a device on `addr` (`ibv_query_device`), without opening it.
pub fn device_attr(addr: IpAddr) -> DeviceAttr {
    let guid = super::node_guid(addr);
    DeviceAttr {
        fw_ver: "0.1.0".into(),
        node_guid: guid,
        sys_image_guid: guid,
        max_mr_size: u64::MAX,
        page_size_cap: 0xffff_f000,
        vendor_id: 0xffffff,
        vendor_part_id: 0,
        hw_ver: 0,
        max_qp: MAX_QP,
        max_qp_wr: MAX_QP_WR,
        max_sge: MAX_SGE,
        max_sge_rd: MAX_SGE,
        max_cq: MAX_CQ,
        max_cqe: MAX_CQE as u32,
        max_mr: MAX_MR,
        max_pd: MAX_PD,
        max_qp_rd_atom: MAX_QP_RD_ATOM,
        max_qp_init_rd_atom: MAX_QP_RD_ATOM,
        max_res_rd_atom: MAX_RES_RD_ATOM,
        atomic_cap: "ATOMIC_HCA",
        max_srq: MAX_SRQ,
        max_srq_wr: MAX_SRQ_WR,
        max_srq_sge: MAX_SRQ_SGE,
        max_pkeys: MAX_PKEYS,
        local_ca_ack_delay: LOCAL_CA_ACK_DELAY,
        max_inline_data: MAX_INLINE_DATA,
        phys_port_cnt: 1,
        max_ah: MAX_AH,
        max_msg_sz: softrdma_proto::qp::MAX_MSG_SIZE,
        max_mcast_grp: MAX_MCAST_GRP,
        max_mcast_qp_attach: MAX_MCAST_QP_ATTACH,
        max_total_mcast_qp_attach: MAX_TOTAL_MCAST_QP_ATTACH,
    }
}

/// The attributes of port 1 of a device with active MTU `active_mtu` (`ibv_query_port`).
pub fn port_attr(active_mtu: Mtu) -> PortAttr {
    PortAttr {
        state: "PORT_ACTIVE",
        max_mtu: Mtu::M4096,
        active_mtu,
        gid_tbl_len: GID_TBL_LEN,
        lid: 0,
        sm_lid: 0,
        link_layer: "Ethernet",
    }
}
