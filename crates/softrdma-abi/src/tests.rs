//! Rust's layouts and constants against the installed rdma-core headers.

use super::*;
use std::mem::{offset_of, size_of};

/// Sizes and offsets, as `(C type, C field or "", value)`.
type Figures = Vec<(&'static str, &'static str, usize)>;

/// Pushes onto `$v` the size of the C type `$c` (Rust's `$t`), then the offset of each
/// field named, which has the same name in C.
macro_rules! s {
    ($v:ident, $c:literal, $t:ty $(, $f:ident)*) => {
        $v.push(($c, "", size_of::<$t>()));
        $($v.push(($c, stringify!($f), offset_of!($t, $f)));)*
    };
}

/// Pushes onto `v` the offsets of fields of the C type `c` that Rust names otherwise
/// (the members of C's nested structs and unions, flattened or reached through one).
fn renamed(v: &mut Figures, c: &'static str, fields: &[(&'static str, usize)]) {
    v.extend(fields.iter().map(|&(field, offset)| (c, field, offset)));
}

/// Rust's size and offsets of each struct.
fn figures() -> Figures {
    let mut v = Vec::new();
    s!(
        v,
        "struct ibv_device",
        ibv_device,
        node_type,
        transport_type,
        name,
        dev_name,
        dev_path,
        ibdev_path
    );
    s!(
        v,
        "struct ibv_context_ops",
        ibv_context_ops,
        alloc_mw,
        bind_mw,
        dealloc_mw,
        poll_cq,
        req_notify_cq,
        post_srq_recv,
        post_send,
        post_recv
    );
    s!(
        v,
        "struct ibv_context",
        ibv_context,
        device,
        ops,
        cmd_fd,
        async_fd,
        num_comp_vectors,
        mutex,
        abi_compat
    );
    s!(
        v,
        "struct verbs_context",
        verbs_context,
        query_port,
        advise_mr,
        query_rt_values,
        create_cq_ex,
        query_device_ex,
        create_qp_ex,
        get_srq_num,
        create_srq_ex,
        sz,
        context
    );
    s!(
        v,
        "struct ibv_device_attr",
        ibv_device_attr,
        fw_ver,
        node_guid,
        sys_image_guid,
        max_mr_size,
        page_size_cap,
        vendor_id,
        vendor_part_id,
        hw_ver,
        max_qp,
        max_qp_wr,
        device_cap_flags,
        max_sge,
        max_sge_rd,
        max_cq,
        max_cqe,
        max_mr,
        max_pd,
        max_qp_rd_atom,
        max_ee_rd_atom,
        max_res_rd_atom,
        max_qp_init_rd_atom,
        max_ee_init_rd_atom,
        atomic_cap,
        max_ee,
        max_rdd,
        max_mw,
        max_raw_ipv6_qp,
        max_raw_ethy_qp,
        max_mcast_grp,
        max_mcast_qp_attach,
        max_total_mcast_qp_attach,
        max_ah,
        max_fmr,
        max_map_per_fmr,
        max_srq,
        max_srq_wr,
        max_srq_sge,
        max_pkeys,
        local_ca_ack_delay,
        phys_port_cnt
    );
    s!(
        v,
        "struct ibv_device_attr_ex",
        ibv_device_attr_ex,
        orig_attr,
        comp_mask,
        completion_timestamp_mask,
        hca_core_clock,
        device_cap_flags_ex,
        phys_port_cnt_ex
    );
    renamed(
        &mut v,
        "struct ibv_device_attr_ex",
        &[
            (
                "odp_caps.general_caps",
                offset_of!(ibv_device_attr_ex, odp_general_caps),
            ),
            (
                "odp_caps.per_transport_caps.rc_odp_caps",
                offset_of!(ibv_device_attr_ex, odp_rc_caps),
            ),
            (
                "odp_caps.per_transport_caps.uc_odp_caps",
                offset_of!(ibv_device_attr_ex, odp_uc_caps),
            ),
            (
                "odp_caps.per_transport_caps.ud_odp_caps",
                offset_of!(ibv_device_attr_ex, odp_ud_caps),
            ),
        ],
    );
    s!(
        v,
        "struct ibv_values_ex",
        ibv_values_ex,
        comp_mask,
        raw_clock
    );
    s!(
        v,
        "struct ibv_port_attr",
        ibv_port_attr,
        state,
        max_mtu,
        active_mtu,
        gid_tbl_len,
        port_cap_flags,
        max_msg_sz,
        bad_pkey_cntr,
        qkey_viol_cntr,
        pkey_tbl_len,
        lid,
        sm_lid,
        lmc,
        max_vl_num,
        sm_sl,
        subnet_timeout,
        init_type_reply,
        active_width,
        active_speed,
        phys_state,
        link_layer,
        flags,
        port_cap_flags2
    );
    s!(
        v,
        "struct ibv_gid_entry",
        ibv_gid_entry,
        gid,
        gid_index,
        port_num,
        gid_type,
        ndev_ifindex
    );
    s!(v, "struct ibv_pd", ibv_pd, context, handle);
    s!(
        v,
        "struct ibv_mr",
        ibv_mr,
        context,
        pd,
        addr,
        length,
        handle,
        lkey,
        rkey
    );
    s!(v, "struct ibv_mw", ibv_mw, context, pd, rkey, handle);
    s!(
        v,
        "struct ibv_comp_channel",
        ibv_comp_channel,
        context,
        fd,
        refcnt
    );
    s!(
        v,
        "struct ibv_cq",
        ibv_cq,
        context,
        channel,
        cq_context,
        handle,
        cqe,
        mutex,
        cond,
        comp_events_completed,
        async_events_completed
    );
    s!(
        v,
        "struct ibv_cq_ex",
        ibv_cq_ex,
        comp_mask,
        status,
        wr_id,
        start_poll,
        next_poll,
        end_poll,
        read_opcode,
        read_vendor_err,
        read_byte_len,
        read_imm_data,
        read_qp_num,
        read_src_qp,
        read_wc_flags,
        read_slid,
        read_sl,
        read_dlid_path_bits,
        read_completion_ts,
        read_cvlan,
        read_flow_tag,
        read_tm_info,
        read_completion_wallclock_ns
    );
    s!(
        v,
        "struct ibv_cq_init_attr_ex",
        ibv_cq_init_attr_ex,
        cqe,
        cq_context,
        channel,
        comp_vector,
        wc_flags,
        comp_mask,
        flags,
        parent_domain
    );
    s!(
        v,
        "struct ibv_wc",
        ibv_wc,
        wr_id,
        status,
        opcode,
        vendor_err,
        byte_len,
        imm_data,
        qp_num,
        src_qp,
        wc_flags,
        pkey_index,
        slid,
        sl,
        dlid_path_bits
    );
    s!(v, "struct ibv_sge", ibv_sge, addr, length, lkey);
    s!(
        v,
        "struct ibv_global_route",
        ibv_global_route,
        dgid,
        flow_label,
        sgid_index,
        hop_limit,
        traffic_class
    );
    s!(
        v,
        "struct ibv_ah_attr",
        ibv_ah_attr,
        grh,
        dlid,
        sl,
        src_path_bits,
        static_rate,
        is_global,
        port_num
    );
    s!(v, "struct ibv_ah", ibv_ah, context, pd, handle);
    s!(
        v,
        "struct ibv_grh",
        ibv_grh,
        version_tclass_flow,
        paylen,
        next_hdr,
        hop_limit,
        sgid,
        dgid
    );
    s!(
        v,
        "struct ibv_srq_attr",
        ibv_srq_attr,
        max_wr,
        max_sge,
        srq_limit
    );
    s!(
        v,
        "struct ibv_srq_init_attr",
        ibv_srq_init_attr,
        srq_context,
        attr
    );
    s!(
        v,
        "struct ibv_srq_init_attr_ex",
        ibv_srq_init_attr_ex,
        srq_context,
        attr,
        comp_mask,
        srq_type,
        pd,
        xrcd,
        cq
    );
    s!(
        v,
        "struct ibv_srq",
        ibv_srq,
        context,
        srq_context,
        pd,
        handle,
        mutex,
        cond,
        events_completed
    );
    s!(
        v,
        "struct ibv_qp_cap",
        ibv_qp_cap,
        max_send_wr,
        max_recv_wr,
        max_send_sge,
        max_recv_sge,
        max_inline_data
    );
    // `ibv_qp_init_attr_ex` begins with the fields of `ibv_qp_init_attr` (which
    // `ibv_qp_init_attr_ex::basic` copies), at the same offsets.
    macro_rules! qp_init_attr {
        ($c:literal, $t:ty $(, $f:ident)*) => {
            s!(v, $c, $t, qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all $(, $f)*)
        };
    }
    qp_init_attr!("struct ibv_qp_init_attr", ibv_qp_init_attr);
    qp_init_attr!(
        "struct ibv_qp_init_attr_ex",
        ibv_qp_init_attr_ex,
        comp_mask,
        pd,
        xrcd,
        create_flags,
        max_tso_header,
        rwq_ind_tbl,
        rx_hash_conf,
        source_qpn,
        send_ops_flags
    );
    s!(
        v,
        "struct ibv_qp_attr",
        ibv_qp_attr,
        qp_state,
        cur_qp_state,
        path_mtu,
        path_mig_state,
        qkey,
        rq_psn,
        sq_psn,
        dest_qp_num,
        qp_access_flags,
        cap,
        ah_attr,
        alt_ah_attr,
        pkey_index,
        alt_pkey_index,
        en_sqd_async_notify,
        sq_draining,
        max_rd_atomic,
        max_dest_rd_atomic,
        min_rnr_timer,
        port_num,
        timeout,
        retry_cnt,
        rnr_retry,
        alt_port_num,
        alt_timeout,
        rate_limit
    );
    s!(
        v,
        "struct ibv_qp",
        ibv_qp,
        context,
        qp_context,
        pd,
        send_cq,
        recv_cq,
        srq,
        handle,
        qp_num,
        state,
        qp_type,
        mutex,
        cond,
        events_completed
    );
    s!(
        v,
        "struct ibv_qp_ex",
        ibv_qp_ex,
        qp_base,
        comp_mask,
        wr_id,
        wr_flags,
        wr_atomic_cmp_swp,
        wr_atomic_fetch_add,
        wr_bind_mw,
        wr_local_inv,
        wr_rdma_read,
        wr_rdma_write,
        wr_rdma_write_imm,
        wr_send,
        wr_send_imm,
        wr_send_inv,
        wr_send_tso,
        wr_set_ud_addr,
        wr_set_xrc_srqn,
        wr_set_inline_data,
        wr_set_inline_data_list,
        wr_set_sge,
        wr_set_sge_list,
        wr_start,
        wr_complete,
        wr_abort,
        wr_atomic_write
    );
    s!(v, "struct ibv_data_buf", ibv_data_buf, addr, length);
    s!(
        v,
        "struct ibv_send_wr",
        ibv_send_wr,
        wr_id,
        next,
        sg_list,
        num_sge,
        opcode,
        send_flags,
        imm_data,
        wr
    );
    let wr = offset_of!(ibv_send_wr, wr);
    renamed(
        &mut v,
        "struct ibv_send_wr",
        &[
            ("wr.rdma.rkey", wr + offset_of!(ibv_rdma, rkey)),
            (
                "wr.atomic.compare_add",
                wr + offset_of!(ibv_atomic, compare_add),
            ),
            ("wr.atomic.swap", wr + offset_of!(ibv_atomic, swap)),
            ("wr.atomic.rkey", wr + offset_of!(ibv_atomic, rkey)),
            ("wr.ud.remote_qpn", wr + offset_of!(ibv_ud, remote_qpn)),
            ("wr.ud.remote_qkey", wr + offset_of!(ibv_ud, remote_qkey)),
            (
                "qp_type.xrc.remote_srqn",
                offset_of!(ibv_send_wr, xrc_remote_srqn),
            ),
        ],
    );
    s!(
        v,
        "struct ibv_recv_wr",
        ibv_recv_wr,
        wr_id,
        next,
        sg_list,
        num_sge
    );
    s!(
        v,
        "struct ibv_async_event",
        ibv_async_event,
        element,
        event_type
    );
    s!(v, "struct ibv_ece", ibv_ece, vendor_id, options, comp_mask);
    rdmacm_figures(&mut v);
    v
}

/// [`figures`] of `<rdma/rdma_cma.h>`.
fn rdmacm_figures(v: &mut Figures) {
    s!(v, "struct rdma_event_channel", rdma_event_channel, fd);
    s!(v, "struct rdma_ib_addr", rdma_ib_addr, sgid, dgid, pkey);
    s!(v, "struct rdma_addr", rdma_addr);
    renamed(
        v,
        "struct rdma_addr",
        &[
            ("src_storage", offset_of!(rdma_addr, src)),
            ("dst_storage", offset_of!(rdma_addr, dst)),
            ("addr.ibaddr", offset_of!(rdma_addr, ib)),
        ],
    );
    s!(
        v,
        "struct rdma_route",
        rdma_route,
        addr,
        path_rec,
        num_paths
    );
    s!(
        v,
        "struct rdma_cm_id",
        rdma_cm_id,
        verbs,
        channel,
        context,
        qp,
        route,
        ps,
        port_num,
        event,
        send_cq_channel,
        send_cq,
        recv_cq_channel,
        recv_cq,
        srq,
        pd,
        qp_type
    );
    s!(
        v,
        "struct rdma_conn_param",
        rdma_conn_param,
        private_data,
        private_data_len,
        responder_resources,
        initiator_depth,
        flow_control,
        retry_count,
        rnr_retry_count,
        srq,
        qp_num
    );
    s!(
        v,
        "struct rdma_ud_param",
        rdma_ud_param,
        private_data,
        private_data_len,
        ah_attr,
        qp_num,
        qkey
    );
    s!(
        v,
        "struct rdma_cm_event",
        rdma_cm_event,
        id,
        listen_id,
        event,
        status,
        param
    );
    s!(
        v,
        "struct rdma_addrinfo",
        rdma_addrinfo,
        ai_flags,
        ai_family,
        ai_qp_type,
        ai_port_space,
        ai_src_len,
        ai_dst_len,
        ai_src_addr,
        ai_dst_addr,
        ai_src_canonname,
        ai_dst_canonname,
        ai_route_len,
        ai_route,
        ai_connect_len,
        ai_connect,
        ai_next
    );
    s!(
        v,
        "struct rdma_cm_join_mc_attr_ex",
        rdma_cm_join_mc_attr_ex,
        comp_mask,
        join_flags,
        addr
    );
}

/// Every constant of [`super::consts`], as `(C name, value)`.
fn constants() -> Vec<(&'static str, i64)> {
    macro_rules! c {
        ($($n:ident)*) => { vec![$((stringify!($n), i64::from($n)),)*] };
    }
    c![
        IBV_PORT_NOP IBV_PORT_DOWN IBV_PORT_INIT IBV_PORT_ARMED IBV_PORT_ACTIVE
        IBV_PORT_ACTIVE_DEFER IBV_ATOMIC_NONE IBV_ATOMIC_HCA IBV_ATOMIC_GLOB
        IBV_LINK_LAYER_UNSPECIFIED IBV_LINK_LAYER_INFINIBAND IBV_LINK_LAYER_ETHERNET
        IBV_GID_TYPE_IB IBV_GID_TYPE_ROCE_V1 IBV_GID_TYPE_ROCE_V2
        IBV_WR_RDMA_WRITE IBV_WR_RDMA_WRITE_WITH_IMM IBV_WR_SEND IBV_WR_SEND_WITH_IMM
        IBV_WR_RDMA_READ IBV_WR_ATOMIC_CMP_AND_SWP IBV_WR_ATOMIC_FETCH_AND_ADD
        IBV_WR_SEND_WITH_INV
        IBV_QPT_RC IBV_QPT_UC IBV_QPT_UD IBV_QPT_XRC_SEND IBV_QPT_XRC_RECV
        IBV_QPS_RESET IBV_QPS_INIT IBV_QPS_RTR IBV_QPS_RTS IBV_QPS_SQD IBV_QPS_SQE IBV_QPS_ERR
        IBV_QP_STATE IBV_QP_CUR_STATE IBV_QP_EN_SQD_ASYNC_NOTIFY IBV_QP_ACCESS_FLAGS
        IBV_QP_PKEY_INDEX IBV_QP_PORT IBV_QP_QKEY IBV_QP_AV IBV_QP_PATH_MTU IBV_QP_TIMEOUT
        IBV_QP_RETRY_CNT IBV_QP_RNR_RETRY IBV_QP_RQ_PSN IBV_QP_MAX_QP_RD_ATOMIC IBV_QP_ALT_PATH
        IBV_QP_MIN_RNR_TIMER IBV_QP_SQ_PSN IBV_QP_MAX_DEST_RD_ATOMIC IBV_QP_PATH_MIG_STATE
        IBV_QP_CAP IBV_QP_DEST_QPN IBV_QP_RATE_LIMIT
        IBV_QP_INIT_ATTR_PD IBV_QP_INIT_ATTR_CREATE_FLAGS IBV_QP_INIT_ATTR_SEND_OPS_FLAGS
        IBV_SRQ_MAX_WR IBV_SRQ_LIMIT IBV_SRQT_BASIC IBV_SRQ_INIT_ATTR_TYPE IBV_SRQ_INIT_ATTR_PD
        IBV_WC_GRH
        IBV_EVENT_CQ_ERR IBV_EVENT_QP_FATAL IBV_EVENT_QP_REQ_ERR IBV_EVENT_QP_ACCESS_ERR
        IBV_EVENT_COMM_EST IBV_EVENT_SQ_DRAINED IBV_EVENT_PORT_ACTIVE
        IBV_EVENT_SRQ_LIMIT_REACHED IBV_EVENT_QP_LAST_WQE_REACHED
        RDMA_CM_EVENT_ADDR_RESOLVED RDMA_CM_EVENT_ROUTE_RESOLVED RDMA_CM_EVENT_CONNECT_REQUEST
        RDMA_CM_EVENT_CONNECT_RESPONSE RDMA_CM_EVENT_UNREACHABLE RDMA_CM_EVENT_REJECTED
        RDMA_CM_EVENT_ESTABLISHED RDMA_CM_EVENT_DISCONNECTED RDMA_CM_EVENT_MULTICAST_JOIN
        RDMA_CM_EVENT_TIMEWAIT_EXIT
        RDMA_PS_IPOIB RDMA_PS_TCP RDMA_PS_UDP RDMA_PS_IB
        RDMA_OPTION_ID RDMA_OPTION_ID_TOS RDMA_OPTION_ID_REUSEADDR RDMA_OPTION_ID_AFONLY
        RDMA_OPTION_ID_ACK_TIMEOUT RDMA_MAX_RESP_RES RDMA_MAX_INIT_DEPTH
        RAI_PASSIVE RAI_NUMERICHOST AF_IB
        RDMA_CM_JOIN_MC_ATTR_ADDRESS RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS
        RDMA_CM_JOIN_MC_ATTR_RESERVED RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER
        RDMA_MC_JOIN_FLAG_RESERVED
    ]
}

/// Compiles a C file of `_Static_assert`s with Rust's figures and constants against the
/// installed rdma-core headers (Debian's `libibverbs-dev` and `librdmacm-dev`): a struct
/// laid out differently, or a constant of another value, fails the compile, naming it.
/// Skipped, saying so, where the headers or a compiler are missing (`scripts/test`
/// installs them, so CI always runs it).
#[test]
fn every_struct_and_constant_matches_the_installed_rdma_core_headers() {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    for header in [
        "/usr/include/infiniband/verbs.h",
        "/usr/include/rdma/rdma_cma.h",
    ] {
        if !std::path::Path::new(header).is_file() {
            eprintln!(
                "SKIPPED: {header} is missing (apt-get install libibverbs-dev librdmacm-dev)"
            );
            return;
        }
    }
    let mut c = String::from(
        "#include <stddef.h>\n#include <infiniband/verbs.h>\n#include <infiniband/ib.h>\n\
         #include <rdma/rdma_cma.h>\n",
    );
    for (ty, field, v) in figures() {
        if field.is_empty() {
            c += &format!("_Static_assert(sizeof({ty}) == {v}, \"sizeof({ty}) is not {v}\");\n");
        } else {
            c += &format!(
                "_Static_assert(offsetof({ty}, {field}) == {v}, \"offsetof({ty}, {field}) is not {v}\");\n"
            );
        }
    }
    for (name, v) in constants() {
        c += &format!("_Static_assert({name} == {v}, \"{name} is not {v}\");\n");
    }
    let dir = std::env::temp_dir().join(format!("softrdma-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("layout.c");
    std::fs::write(&src, c).unwrap();
    let out = std::process::Command::new(&cc)
        .args(["-fsyntax-only", "-Wall", "-Werror"])
        .arg(&src)
        .output();
    let _ = std::fs::remove_dir_all(&dir);
    match out {
        Ok(o) => assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => panic!("{cc}: {e} (install gcc)"),
    }
}
