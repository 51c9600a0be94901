//! The exported verbs softrdma does not implement, each failing as its C contract says
//! (EOPNOTSUPP for an int, NULL with errno EOPNOTSUPP for a pointer), so that callers that
//! probe for them (pyverbs, UCX, libfabric) take their fallback; and the kernel-struct
//! copies that only rdma-core's own librdmacm called, which have nothing to copy here.

use crate::abi::*;
use crate::ffi::{Ret, entry};
use std::ffi::{c_int, c_void};

macro_rules! unsupported_int {
    ($($name:ident($($a:ident: $t:ty),*);)*) => {$(
        #[doc = concat!("`", stringify!($name), "`: not implemented (EOPNOTSUPP).")]
        pub extern "C" fn $name($(_: $t),*) -> c_int {
            entry(stringify!($name), Ret::ERRNO, |v| v.err(libc::EOPNOTSUPP, &"not implemented"))
        }
    )*};
}

macro_rules! unsupported_ptr {
    ($($name:ident($($a:ident: $t:ty),*);)*) => {$(
        #[doc = concat!("`", stringify!($name), "`: not implemented (NULL, errno EOPNOTSUPP).")]
        pub extern "C" fn $name($(_: $t),*) -> *mut c_void {
            entry(stringify!($name), Ret::NULL, |v| v.err(libc::EOPNOTSUPP, &"not implemented"))
        }
    )*};
}

macro_rules! nothing {
    ($($name:ident($($a:ident: $t:ty),*);)*) => {$(
        #[doc = concat!("`", stringify!($name), "`: nothing to do here.")]
        pub extern "C" fn $name($(_: $t),*) {}
    )*};
}

unsupported_int! {
    ibv_resolve_eth_l2_from_gid(ctx: *mut ibv_context, attr: *mut c_void, mac: *mut u8, vid: *mut u16);
    ibv_query_ece(qp: *mut ibv_qp, ece: *mut c_void);
    ibv_set_ece(qp: *mut ibv_qp, ece: *mut c_void);
}

unsupported_ptr! {
    ibv_import_device(fd: c_int);
    ibv_import_pd(ctx: *mut ibv_context, handle: u32);
    ibv_import_mr(pd: *mut ibv_pd, handle: u32);
    ibv_import_dm(ctx: *mut ibv_context, handle: u32);
    ibv_reg_dmabuf_mr(pd: *mut ibv_pd, offset: u64, length: usize, iova: u64, fd: c_int, access: c_int);
}

nothing! {
    ibv_unimport_pd(pd: *mut ibv_pd);
    ibv_unimport_mr(mr: *mut ibv_mr);
    ibv_unimport_dm(dm: *mut c_void);
    ibv_copy_ah_attr_from_kern(dst: *mut c_void, src: *const c_void);
    ibv_copy_path_rec_from_kern(dst: *mut c_void, src: *const c_void);
    ibv_copy_path_rec_to_kern(dst: *mut c_void, src: *const c_void);
    ibv_copy_qp_attr_from_kern(dst: *mut c_void, src: *const c_void);
}

/// `ibv_query_qp_data_in_order`: 0, no promise beyond the transport's (the C default).
pub extern "C" fn ibv_query_qp_data_in_order(_qp: *mut ibv_qp, _op: c_int, _flags: u32) -> c_int {
    0
}
