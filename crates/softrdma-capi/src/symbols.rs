//! Which version node each exported symbol belongs to: a `.symver` directive per symbol,
//! binding it to `name@@NODE` in the cdylib (the nodes are defined in `libibverbs.map`).
//!
//! The assembler binds `name@@NODE` only to a definition in the same object, and rustc
//! copies a module's `global_asm!` into every codegen unit that holds part of the module,
//! so a directive beside its function holds only in a one-unit build (which a published
//! crate cannot ask for: its profile does not travel with it). Each symbol is therefore
//! defined here, by a naked function whose own assembly carries the directive and jumps
//! to the Rust function of the same name; the Rust functions themselves are not
//! exported, and Rust code calls them directly.
//! The lists are rdma-core 44's default versions (`objdump -T`), which BIND_NOW callers
//! check at load time; `tests/symbols.rs` compares the built library with the system's.
//!
//! Unit tests link this crate into an executable, where a versioned definition has no
//! version script to live in, so the directives are left out there.

// The trampolines are x86_64 assembly, as the ABI facts of the whole crate are
// (`crate::abi`): another target gets this line rather than an assembler error.
#[cfg(not(target_arch = "x86_64"))]
compile_error!("softrdma-capi is the C ABI of rdma-core on x86_64 Linux, and builds there only");

macro_rules! symver {
    ($($node:literal: $($($path:ident)::+)*;)*) => {
        /// Every exported symbol with its node, for the tests.
        #[cfg_attr(not(test), allow(dead_code))]
        pub(crate) const EXPORTS: &[(&str, &str)] = &[$($(($node, name!($($path)::+)),)*)*];

        /// The exported symbols: one naked function per symbol, whose assembly defines
        /// the symbol, binds it to its node and jumps to the Rust function (a tail call,
        /// so every argument register and the return address pass through untouched).
        #[cfg(not(test))]
        mod exported {
            $($(export!($node; []; $($path)::+);)*)*
        }

        /// Unit tests link no version script: the same jumps, unexported and unversioned,
        /// so that each Rust function stays referenced as in the library.
        #[cfg(test)]
        #[allow(dead_code)]
        mod exported {
            $($(export!(test; []; $($path)::+);)*)*
        }
    };
}

/// The name of the function at a path (its last segment), as a string.
macro_rules! name {
    ($name:ident) => { stringify!($name) };
    ($head:ident :: $($rest:tt)+) => { name!($($rest)+) };
}

/// The naked function of one symbol, from the path of the Rust function it jumps to
/// (`verbs::pd::ibv_alloc_pd`): the segments before the last are gathered in `[...]`,
/// the last one names the symbol.
macro_rules! export {
    ($node:tt; [$($m:ident)*]; $head:ident :: $($rest:tt)+) => {
        export!($node; [$($m)* $head]; $($rest)+);
    };
    (test; [$($m:ident)*]; $name:ident) => {
        #[unsafe(naked)]
        pub unsafe extern "C" fn $name() {
            std::arch::naked_asm!("jmp {f}", f = sym crate::$($m::)*$name)
        }
    };
    ($node:literal; [$($m:ident)*]; $name:ident) => {
        #[doc = concat!("`", stringify!($name), "`, version ", $node, ".")]
        // SAFETY: the body is one jump to the Rust function of the same name,
        // which has the C signature callers use: a tail call that leaves every
        // argument register, the stack and the return address as the caller set
        // them (no exported function is variadic).
        #[unsafe(naked)]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name() {
            std::arch::naked_asm!(
                concat!(".symver ", stringify!($name), ", ", stringify!($name), "@@", $node),
                "jmp {f}",
                f = sym crate::$($m::)*$name,
            )
        }
    };
}

symver! {
    "IBVERBS_1.0": verbs::unsupported::ibv_copy_path_rec_from_kern
        verbs::unsupported::ibv_copy_path_rec_to_kern
        verbs::unsupported::ibv_copy_qp_attr_from_kern verbs::cq::ibv_create_comp_channel
        verbs::cq::ibv_destroy_comp_channel verbs::sysfs::ibv_get_sysfs_path
        verbs::strings::ibv_rate_to_mult verbs::sysfs::ibv_read_sysfs_file
        verbs::strings::mult_to_ibv_rate;
    "IBVERBS_1.1": verbs::async_event::ibv_ack_async_event verbs::cq::ibv_ack_cq_events
        verbs::pd::ibv_alloc_pd verbs::mcast::ibv_attach_mcast verbs::device::ibv_close_device
        verbs::unsupported::ibv_copy_ah_attr_from_kern verbs::ah::ibv_create_ah
        verbs::ah::ibv_create_ah_from_wc verbs::cq::ibv_create_cq verbs::qp::ibv_create_qp
        verbs::srq::ibv_create_srq verbs::pd::ibv_dealloc_pd verbs::mr::ibv_dereg_mr
        verbs::ah::ibv_destroy_ah verbs::cq::ibv_destroy_cq verbs::qp::ibv_destroy_qp
        verbs::srq::ibv_destroy_srq verbs::mcast::ibv_detach_mcast verbs::fork::ibv_dofork_range
        verbs::fork::ibv_dontfork_range verbs::strings::ibv_event_type_str
        verbs::fork::ibv_fork_init verbs::device::ibv_free_device_list
        verbs::async_event::ibv_get_async_event verbs::cq::ibv_get_cq_event
        verbs::device::ibv_get_device_guid verbs::device::ibv_get_device_list
        verbs::device::ibv_get_device_name verbs::ah::ibv_init_ah_from_wc
        verbs::qp_attr::ibv_modify_qp verbs::srq::ibv_modify_srq
        verbs::strings::ibv_node_type_str verbs::device::ibv_open_device
        verbs::strings::ibv_port_state_str verbs::query::ibv_query_device
        verbs::query::ibv_query_gid verbs::query::ibv_query_pkey verbs::query::ibv_query_port
        verbs::qp_attr::ibv_query_qp verbs::srq::ibv_query_srq verbs::strings::ibv_rate_to_mbps
        verbs::mr::ibv_reg_mr verbs::mr::ibv_rereg_mr verbs::cq::ibv_resize_cq
        verbs::unsupported::ibv_resolve_eth_l2_from_gid verbs::strings::ibv_wc_status_str
        verbs::strings::mbps_to_ibv_rate;
    "IBVERBS_1.5": verbs::query::ibv_get_pkey_index;
    "IBVERBS_1.6": verbs::qp::ibv_qp_to_qp_ex;
    "IBVERBS_1.7": verbs::mr::ibv_reg_mr_iova;
    "IBVERBS_1.8": verbs::mr::ibv_reg_mr_iova2;
    "IBVERBS_1.9": verbs::device::ibv_get_device_index;
    "IBVERBS_1.10": verbs::unsupported::ibv_import_device verbs::unsupported::ibv_import_mr
        verbs::unsupported::ibv_import_pd verbs::unsupported::ibv_query_ece
        verbs::unsupported::ibv_set_ece verbs::unsupported::ibv_unimport_mr
        verbs::unsupported::ibv_unimport_pd;
    "IBVERBS_1.11": verbs::query::_ibv_query_gid_ex verbs::query::_ibv_query_gid_table;
    "IBVERBS_1.12": verbs::unsupported::ibv_reg_dmabuf_mr;
    "IBVERBS_1.13": verbs::unsupported::ibv_import_dm verbs::fork::ibv_is_fork_initialized
        verbs::unsupported::ibv_unimport_dm;
    "IBVERBS_1.14": verbs::unsupported::ibv_query_qp_data_in_order;
    "IBVERBS_PRIVATE_34": verbs::query::ibv_query_gid_type;
    "RDMACM_1.0": rdmacm::unsupported::raccept rdmacm::unsupported::rbind
        rdmacm::unsupported::rclose rdmacm::unsupported::rconnect rdmacm::conn::rdma_accept
        rdmacm::event::rdma_ack_cm_event rdmacm::conn::rdma_bind_addr rdmacm::conn::rdma_connect
        rdmacm::ep::rdma_create_ep rdmacm::id::rdma_create_event_channel
        rdmacm::id::rdma_create_id rdmacm::qp::rdma_create_qp rdmacm::qp::rdma_create_qp_ex
        rdmacm::qp::rdma_create_srq rdmacm::qp::rdma_create_srq_ex rdmacm::ep::rdma_destroy_ep
        rdmacm::id::rdma_destroy_event_channel rdmacm::id::rdma_destroy_id
        rdmacm::qp::rdma_destroy_qp rdmacm::qp::rdma_destroy_srq rdmacm::conn::rdma_disconnect
        rdmacm::event::rdma_event_str rdmacm::device::rdma_free_devices
        rdmacm::addrinfo::rdma_freeaddrinfo rdmacm::event::rdma_get_cm_event
        rdmacm::device::rdma_get_devices rdmacm::conn::rdma_get_dst_port
        rdmacm::ep::rdma_get_request rdmacm::conn::rdma_get_src_port
        rdmacm::addrinfo::rdma_getaddrinfo rdmacm::mcast::rdma_join_multicast
        rdmacm::mcast::rdma_leave_multicast rdmacm::conn::rdma_listen
        rdmacm::ep::rdma_migrate_id rdmacm::conn::rdma_notify rdmacm::conn::rdma_reject
        rdmacm::conn::rdma_resolve_addr rdmacm::conn::rdma_resolve_route
        rdmacm::conn::rdma_set_option rdmacm::unsupported::rfcntl
        rdmacm::unsupported::rgetpeername rdmacm::unsupported::rgetsockname
        rdmacm::unsupported::rgetsockopt rdmacm::unsupported::riomap
        rdmacm::unsupported::riounmap rdmacm::unsupported::riowrite rdmacm::unsupported::rlisten
        rdmacm::unsupported::rpoll rdmacm::unsupported::rread rdmacm::unsupported::rreadv
        rdmacm::unsupported::rrecv rdmacm::unsupported::rrecvfrom rdmacm::unsupported::rrecvmsg
        rdmacm::unsupported::rselect rdmacm::unsupported::rsend rdmacm::unsupported::rsendmsg
        rdmacm::unsupported::rsendto rdmacm::unsupported::rsetsockopt
        rdmacm::unsupported::rshutdown rdmacm::unsupported::rsocket rdmacm::unsupported::rwrite
        rdmacm::unsupported::rwritev;
    "RDMACM_1.1": rdmacm::mcast::rdma_join_multicast_ex;
    "RDMACM_1.2": rdmacm::conn::rdma_establish rdmacm::qp::rdma_init_qp_attr;
    "RDMACM_1.3": rdmacm::conn::rdma_get_remote_ece rdmacm::conn::rdma_reject_ece
        rdmacm::conn::rdma_set_local_ece;
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
