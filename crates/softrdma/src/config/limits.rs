//! The device's limits in one table, as rxe keeps them in `rxe_param.h`: what
//! `ibv_query_device` and `ibv_query_port` report, and what the verbs check requests
//! against.

use softrdma_proto::Mtu;
use std::net::IpAddr;

/// Largest CQ (rxe's `RXE_MAX_CQE`).
pub const MAX_CQE: usize = 32767;

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
        max_qp: 1048560,
        max_qp_wr: 1048576,
        max_sge: 32,
        max_sge_rd: 32,
        max_cq: 1048576,
        max_cqe: MAX_CQE as u32,
        max_mr: 524287,
        max_pd: 1048576,
        max_qp_rd_atom: 128,
        max_qp_init_rd_atom: 128,
        max_res_rd_atom: 258048,
        atomic_cap: "ATOMIC_HCA",
        max_srq: 917503,
        max_srq_wr: 1048576,
        max_srq_sge: 27,
        max_pkeys: 64,
        local_ca_ack_delay: 15,
        max_inline_data: 256,
        phys_port_cnt: 1,
        max_ah: 32767,
        max_msg_sz: softrdma_proto::qp::MAX_MSG_SIZE,
    }
}

/// The attributes of port 1 of a device with active MTU `active_mtu` (`ibv_query_port`).
pub fn port_attr(active_mtu: Mtu) -> PortAttr {
    PortAttr {
        state: "PORT_ACTIVE",
        max_mtu: Mtu::M4096,
        active_mtu,
        gid_tbl_len: 1024,
        lid: 0,
        sm_lid: 0,
        link_layer: "Ethernet",
    }
}
