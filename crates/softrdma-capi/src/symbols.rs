//! Which version node each exported symbol belongs to: a `.symver` directive per symbol,
//! binding it to `name@@NODE` in the cdylib (the nodes are defined in `libibverbs.map`).
//! The lists are rdma-core 44's default versions (`objdump -T`), which BIND_NOW callers
//! check at load time; `tests/symbols.rs` compares the built library with the system's.
//!
//! Unit tests link this crate into an executable, where a versioned definition has no
//! version script to live in, so the directives are left out there.

macro_rules! symver {
    ($($node:literal: $($name:ident)*;)*) => {
        /// Every exported symbol with its node, for the tests.
        #[cfg_attr(not(test), allow(dead_code))]
        pub(crate) const EXPORTS: &[(&str, &str)] = &[$($(($node, stringify!($name)),)*)*];
        #[cfg(not(test))]
        std::arch::global_asm!($($(concat!(".symver ", stringify!($name), ", ", stringify!($name), "@@", $node),)*)*);
    };
}

symver! {
    "IBVERBS_1.0":
        ibv_copy_path_rec_from_kern ibv_copy_path_rec_to_kern ibv_copy_qp_attr_from_kern
        ibv_create_comp_channel ibv_destroy_comp_channel ibv_get_sysfs_path ibv_rate_to_mult
        ibv_read_sysfs_file mult_to_ibv_rate;
    "IBVERBS_1.1":
        ibv_ack_async_event ibv_ack_cq_events ibv_alloc_pd ibv_attach_mcast ibv_close_device
        ibv_copy_ah_attr_from_kern ibv_create_ah ibv_create_ah_from_wc ibv_create_cq
        ibv_create_qp ibv_create_srq ibv_dealloc_pd ibv_dereg_mr ibv_destroy_ah ibv_destroy_cq
        ibv_destroy_qp ibv_destroy_srq ibv_detach_mcast ibv_dofork_range ibv_dontfork_range
        ibv_event_type_str ibv_fork_init ibv_free_device_list ibv_get_async_event
        ibv_get_cq_event ibv_get_device_guid ibv_get_device_list ibv_get_device_name
        ibv_init_ah_from_wc ibv_modify_qp ibv_modify_srq ibv_node_type_str ibv_open_device
        ibv_port_state_str ibv_query_device ibv_query_gid ibv_query_pkey ibv_query_port
        ibv_query_qp ibv_query_srq ibv_rate_to_mbps ibv_reg_mr ibv_rereg_mr ibv_resize_cq
        ibv_resolve_eth_l2_from_gid ibv_wc_status_str mbps_to_ibv_rate;
    "IBVERBS_1.5": ibv_get_pkey_index;
    "IBVERBS_1.6": ibv_qp_to_qp_ex;
    "IBVERBS_1.7": ibv_reg_mr_iova;
    "IBVERBS_1.8": ibv_reg_mr_iova2;
    "IBVERBS_1.9": ibv_get_device_index;
    "IBVERBS_1.10":
        ibv_import_device ibv_import_mr ibv_import_pd ibv_query_ece ibv_set_ece ibv_unimport_mr
        ibv_unimport_pd;
    "IBVERBS_1.11": _ibv_query_gid_ex _ibv_query_gid_table;
    "IBVERBS_1.12": ibv_reg_dmabuf_mr;
    "IBVERBS_1.13": ibv_import_dm ibv_is_fork_initialized ibv_unimport_dm;
    "IBVERBS_1.14": ibv_query_qp_data_in_order;
    "IBVERBS_PRIVATE_34": ibv_query_gid_type;
    "RDMACM_1.0":
        raccept rbind rclose rconnect rdma_accept rdma_ack_cm_event rdma_bind_addr rdma_connect
        rdma_create_ep rdma_create_event_channel rdma_create_id rdma_create_qp rdma_create_qp_ex
        rdma_create_srq rdma_create_srq_ex rdma_destroy_ep rdma_destroy_event_channel
        rdma_destroy_id rdma_destroy_qp rdma_destroy_srq rdma_disconnect rdma_event_str
        rdma_free_devices rdma_freeaddrinfo rdma_get_cm_event rdma_get_devices rdma_get_dst_port
        rdma_get_request rdma_get_src_port rdma_getaddrinfo rdma_join_multicast
        rdma_leave_multicast rdma_listen rdma_migrate_id rdma_notify rdma_reject
        rdma_resolve_addr rdma_resolve_route rdma_set_option rfcntl rgetpeername rgetsockname
        rgetsockopt riomap riounmap riowrite rlisten rpoll rread rreadv rrecv rrecvfrom rrecvmsg
        rselect rsend rsendmsg rsendto rsetsockopt rshutdown rsocket rwrite rwritev;
    "RDMACM_1.1": rdma_join_multicast_ex;
    "RDMACM_1.2": rdma_establish rdma_init_qp_attr;
    "RDMACM_1.3": rdma_get_remote_ece rdma_reject_ece rdma_set_local_ece;
}

#[cfg(test)]
mod tests {
    use super::EXPORTS;

    #[test]
    fn each_symbol_is_listed_once_under_a_node_the_version_script_defines() {
        let map = include_str!("../libibverbs.map");
        let mut seen = std::collections::HashSet::new();
        for (node, name) in EXPORTS {
            assert!(seen.insert(*name), "{name} is listed twice");
            assert!(
                map.contains(&format!("{node} {{")),
                "{node} (of {name}) is not in libibverbs.map"
            );
        }
    }
}
