//! rdma-core's attribute structs, read into softrdma's own types (the same ones the soft
//! device reports), so that a program prints or checks a kernel device's limits as it does
//! a soft device's.

use crate::config::limits::{DeviceAttr, PortAttr};
use softrdma_abi::{
    IBV_ATOMIC_GLOB, IBV_ATOMIC_HCA, IBV_GID_TYPE_IB, IBV_GID_TYPE_ROCE_V1, IBV_GID_TYPE_ROCE_V2,
    IBV_LINK_LAYER_ETHERNET, ibv_device_attr, ibv_port_attr,
};
use softrdma_proto::Mtu;
use std::ffi::CStr;

/// A GID's type, as the kernel's GID table gives it (`enum ibv_gid_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GidType {
    /// InfiniBand.
    Ib,
    /// RoCE v1.
    RoceV1,
    /// RoCE v2 (the one softrdma speaks).
    RoceV2,
    /// The library cannot tell (rdma-core older than 30).
    Unknown,
}

impl GidType {
    pub(super) fn from_raw(t: u32) -> Self {
        match i32::try_from(t) {
            Ok(IBV_GID_TYPE_IB) => GidType::Ib,
            Ok(IBV_GID_TYPE_ROCE_V1) => GidType::RoceV1,
            Ok(IBV_GID_TYPE_ROCE_V2) => GidType::RoceV2,
            _ => GidType::Unknown,
        }
    }
}

/// `ibv_devinfo`'s names of `enum ibv_port_state`, by value (`IBV_PORT_NOP` to
/// `IBV_PORT_ACTIVE_DEFER`).
pub const PORT_STATES: [&str; 6] = [
    "PORT_NOP",
    "PORT_DOWN",
    "PORT_INIT",
    "PORT_ARMED",
    "PORT_ACTIVE",
    "PORT_ACTIVE_DEFER",
];

/// A count from a C `int` that is never negative on a sane device (0 where it is).
fn count(v: i32) -> u32 {
    u32::try_from(v).unwrap_or(0)
}

pub(super) fn device_attr(a: &ibv_device_attr) -> DeviceAttr {
    // SAFETY: `fw_ver` is a C string inside its 64 bytes; rdma-core zero-fills the rest,
    // and the struct was zeroed before, so a NUL is there.
    let fw = unsafe { CStr::from_ptr(a.fw_ver.as_ptr()) };
    DeviceAttr {
        fw_ver: fw.to_string_lossy().into_owned(),
        node_guid: u64::from_be(a.node_guid),
        sys_image_guid: u64::from_be(a.sys_image_guid),
        max_mr_size: a.max_mr_size,
        page_size_cap: a.page_size_cap,
        vendor_id: a.vendor_id,
        vendor_part_id: a.vendor_part_id,
        hw_ver: a.hw_ver,
        max_qp: count(a.max_qp),
        max_qp_wr: count(a.max_qp_wr),
        max_sge: count(a.max_sge),
        max_sge_rd: count(a.max_sge_rd),
        max_cq: count(a.max_cq),
        max_cqe: count(a.max_cqe),
        max_mr: count(a.max_mr),
        max_pd: count(a.max_pd),
        max_qp_rd_atom: count(a.max_qp_rd_atom),
        max_qp_init_rd_atom: count(a.max_qp_init_rd_atom),
        max_res_rd_atom: count(a.max_res_rd_atom),
        atomic_cap: match a.atomic_cap {
            IBV_ATOMIC_HCA => "ATOMIC_HCA",
            IBV_ATOMIC_GLOB => "ATOMIC_GLOB",
            _ => "ATOMIC_NONE",
        },
        max_srq: count(a.max_srq),
        max_srq_wr: count(a.max_srq_wr),
        max_srq_sge: count(a.max_srq_sge),
        max_pkeys: u32::from(a.max_pkeys),
        local_ca_ack_delay: u32::from(a.local_ca_ack_delay),
        // Not in the legacy struct; the extended query has no such field either.
        max_inline_data: 0,
        phys_port_cnt: a.phys_port_cnt,
        max_ah: count(a.max_ah),
        // Per port in rdma-core (`ibv_port_attr.max_msg_sz`); filled from port 1 by callers
        // that want it.
        max_msg_sz: 0,
        max_mcast_grp: count(a.max_mcast_grp),
        max_mcast_qp_attach: count(a.max_mcast_qp_attach),
        max_total_mcast_qp_attach: count(a.max_total_mcast_qp_attach),
    }
}

/// `None` for an MTU code outside 1 to 5.
pub(super) fn port_attr(a: &ibv_port_attr) -> Option<PortAttr> {
    let mtu = |code: i32| Mtu::from_bytes(128usize.checked_shl(u32::try_from(code).ok()?)?);
    Some(PortAttr {
        state: usize::try_from(a.state)
            .ok()
            .and_then(|s| PORT_STATES.get(s))
            .copied()
            .unwrap_or("PORT_INVALID"),
        max_mtu: mtu(a.max_mtu)?,
        active_mtu: mtu(a.active_mtu)?,
        gid_tbl_len: count(a.gid_tbl_len),
        lid: a.lid,
        sm_lid: a.sm_lid,
        link_layer: match i32::from(a.link_layer) {
            IBV_LINK_LAYER_ETHERNET => "Ethernet",
            _ => "InfiniBand",
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_rxe_port_reads_as_the_soft_devices_does() {
        let a = ibv_port_attr {
            state: 4,
            max_mtu: 5,
            active_mtu: 3,
            gid_tbl_len: 1024,
            link_layer: 2,
            ..Default::default()
        };
        let p = port_attr(&a).unwrap();
        assert_eq!(p.state, "PORT_ACTIVE");
        assert_eq!((p.max_mtu, p.active_mtu), (Mtu::M4096, Mtu::M1024));
        assert_eq!(p.link_layer, "Ethernet");
        assert_eq!(p.gid_tbl_len, 1024);
    }

    #[test]
    fn gid_types_follow_enum_ibv_gid_type() {
        assert_eq!(GidType::from_raw(0), GidType::Ib);
        assert_eq!(GidType::from_raw(1), GidType::RoceV1);
        assert_eq!(GidType::from_raw(2), GidType::RoceV2);
        assert_eq!(GidType::from_raw(3), GidType::Unknown);
        assert_eq!(GidType::from_raw(u32::MAX), GidType::Unknown);
    }

    #[test]
    fn a_port_with_a_bad_mtu_code_is_refused() {
        for bad in [0, 6, -1, 70] {
            let a = ibv_port_attr {
                state: 4,
                max_mtu: bad,
                active_mtu: 3,
                ..Default::default()
            };
            assert!(port_attr(&a).is_none(), "{bad}");
        }
        let a = ibv_port_attr {
            state: 99,
            max_mtu: 5,
            active_mtu: 5,
            ..Default::default()
        };
        assert_eq!(port_attr(&a).unwrap().state, "PORT_INVALID");
    }

    #[test]
    fn device_limits_convert_guids_from_network_order() {
        // SAFETY: ibv_device_attr is plain data; all zeroes is a valid value.
        let mut a: ibv_device_attr = unsafe { std::mem::zeroed() };
        a.node_guid = 0x0102_0304_0506_0708u64.to_be();
        a.max_qp = -5;
        a.atomic_cap = 1;
        a.fw_ver[..3].copy_from_slice(&[b'1' as _, b'.' as _, b'2' as _]);
        let d = device_attr(&a);
        assert_eq!(d.node_guid, 0x0102_0304_0506_0708);
        assert_eq!(d.max_qp, 0);
        assert_eq!(d.atomic_cap, "ATOMIC_HCA");
        assert_eq!(d.fw_ver, "1.2");
    }
}
