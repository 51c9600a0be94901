//! A stub libmlx5.so.1 (mlx5 direct verbs): every symbol and version node that perftest, libfabric and pyverbs import
//! from the real library (they are BIND_NOW, and perftest and libfabric have DT_NEEDED on it),
//! each failing as its C contract says: EOPNOTSUPP for an int (errno set too), NULL with
//! errno EOPNOTSUPP for a pointer, -1 for a size, false for a bool, nothing for void. No
//! softrdma device is an mlx5 device, so callers take their generic verbs paths.
//!
//! The symbol list is the union of those imports on Debian 12 (`objdump -T`), with each
//! function's return type from rdma-core 44's headers.

softrdma_stub_gen::stubs! {
    "MLX5_1.0" int: mlx5dv_query_device;
    "MLX5_1.1" ptr: mlx5dv_create_cq;
    "MLX5_1.2" int: mlx5dv_init_obj;
    "MLX5_1.3" ptr: mlx5dv_create_qp;
    "MLX5_1.4" int: mlx5dv_get_clock_info;
    "MLX5_1.6" int: mlx5dv_destroy_flow_matcher;
    "MLX5_1.6" ptr: mlx5dv_create_flow mlx5dv_create_flow_matcher;
    "MLX5_1.7" int: mlx5dv_devx_general_cmd mlx5dv_devx_obj_destroy mlx5dv_devx_obj_modify mlx5dv_devx_obj_query mlx5dv_devx_query_eqn mlx5dv_devx_umem_dereg;
    "MLX5_1.7" ptr: mlx5dv_create_flow_action_packet_reformat mlx5dv_devx_alloc_uar mlx5dv_devx_obj_create mlx5dv_devx_umem_reg mlx5dv_open_device;
    "MLX5_1.7" void: mlx5dv_devx_free_uar;
    "MLX5_1.8" int: mlx5dv_devx_qp_modify mlx5dv_devx_qp_query;
    "MLX5_1.8" bool: mlx5dv_is_supported;
    "MLX5_1.10" int: mlx5dv_destroy_mkey mlx5dv_dr_action_destroy mlx5dv_dr_domain_destroy mlx5dv_dr_domain_sync mlx5dv_dr_matcher_destroy mlx5dv_dr_rule_destroy mlx5dv_dr_table_destroy;
    "MLX5_1.10" ptr: mlx5dv_create_mkey mlx5dv_dr_action_create_dest_ibv_qp mlx5dv_dr_action_create_dest_table mlx5dv_dr_action_create_dest_vport mlx5dv_dr_action_create_drop mlx5dv_dr_action_create_flow_counter mlx5dv_dr_action_create_modify_header mlx5dv_dr_action_create_packet_reformat mlx5dv_dr_action_create_tag mlx5dv_dr_domain_create mlx5dv_dr_matcher_create mlx5dv_dr_rule_create mlx5dv_dr_table_create mlx5dv_qp_ex_from_ibv_qp_ex;
    "MLX5_1.11" int: mlx5dv_devx_subscribe_devx_event;
    "MLX5_1.11" ptr: mlx5dv_devx_create_event_channel;
    "MLX5_1.11" void: mlx5dv_devx_destroy_event_channel;
    "MLX5_1.11" ssize: mlx5dv_devx_get_event;
    "MLX5_1.12" int: mlx5dv_dump_dr_domain;
    "MLX5_1.12" ptr: mlx5dv_alloc_var;
    "MLX5_1.12" void: mlx5dv_free_var;
    "MLX5_1.13" ptr: mlx5dv_pp_alloc;
    "MLX5_1.13" void: mlx5dv_pp_free;
    "MLX5_1.14" int: mlx5dv_modify_qp_lag_port mlx5dv_query_qp_lag_port;
    "MLX5_1.14" ptr: mlx5dv_dr_action_create_default_miss;
    "MLX5_1.15" ptr: mlx5dv_dr_action_create_dest_devx_tir;
    "MLX5_1.16" ptr: mlx5dv_dr_action_create_dest_array mlx5dv_dr_action_create_flow_sampler;
    "MLX5_1.17" int: mlx5dv_modify_qp_sched_elem mlx5dv_modify_qp_udp_sport mlx5dv_sched_leaf_destroy mlx5dv_sched_leaf_modify mlx5dv_sched_node_destroy mlx5dv_sched_node_modify;
    "MLX5_1.17" ptr: mlx5dv_dr_action_create_pop_vlan mlx5dv_dr_action_create_push_vlan mlx5dv_sched_leaf_create mlx5dv_sched_node_create;
    "MLX5_1.18" int: mlx5dv_reserved_qpn_alloc mlx5dv_reserved_qpn_dealloc;
    "MLX5_1.19" int: _mlx5dv_query_port;
    "MLX5_1.19" ptr: mlx5dv_devx_umem_reg_ex mlx5dv_dm_map_op_addr;
    "MLX5_1.20" int: _mlx5dv_mkey_check mlx5dv_map_ah_to_qp mlx5dv_qp_cancel_posted_send_wrs;
    "MLX5_1.20" void: mlx5dv_dr_domain_allow_duplicate_rules;
    "MLX5_1.21" int: mlx5dv_crypto_login mlx5dv_crypto_login_query_state mlx5dv_crypto_logout mlx5dv_dci_stream_id_reset mlx5dv_dek_destroy mlx5dv_dek_query mlx5dv_dr_matcher_set_layout mlx5dv_vfio_get_events_fd mlx5dv_vfio_process_events;
    "MLX5_1.21" ptr: mlx5dv_dek_create mlx5dv_dr_action_create_dest_ib_port mlx5dv_get_vfio_device_list;
    "MLX5_1.23" int: mlx5dv_devx_destroy_eq mlx5dv_devx_free_msi_vector;
    "MLX5_1.23" ptr: mlx5dv_devx_alloc_msi_vector mlx5dv_devx_create_eq;
    "MLX5_1.24" int: mlx5dv_crypto_login_destroy mlx5dv_crypto_login_query;
    "MLX5_1.24" ptr: mlx5dv_crypto_login_create;
}
