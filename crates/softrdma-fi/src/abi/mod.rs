//! libfabric 1.17's ABI as a provider sees it (x86_64): the public structs a provider
//! fills or reads, and the constants it answers with. Written from the installed headers
//! (`/usr/include/rdma/*.h`); every size and offset is checked at compile time against
//! the figures measured from those headers (`docs/fabric-provider.md` §2.2).
//!
//! An ops table's slots are [`Slot`]s, untyped code pointers: each holds one of this
//! crate's `extern "C"` functions with the header's signature, or a stub of `stubs`.

#![allow(non_camel_case_types, missing_docs, dead_code)]

use std::ffi::{c_char, c_int, c_void};

/// One slot of an ops table: a function of the header's signature for it.
pub type Slot = *const c_void;
/// `fi_addr_t`.
pub type fi_addr_t = u64;

/// `FI_VERSION(major, minor)`.
pub const fn fi_version(major: u32, minor: u32) -> u32 {
    (major << 16) | minor
}

#[repr(C)]
pub struct fid {
    pub fclass: usize,
    pub context: *mut c_void,
    pub ops: *const fi_ops,
}

#[repr(C)]
pub struct fi_ops {
    pub size: usize,
    pub close: Slot,
    pub bind: Slot,
    pub control: Slot,
    pub ops_open: Slot,
    pub tostr: Slot,
    pub ops_set: Slot,
}

#[repr(C)]
pub struct fi_context {
    pub internal: [*mut c_void; 4],
}

#[repr(C)]
pub struct fi_provider {
    pub version: u32,
    pub fi_version: u32,
    pub context: fi_context,
    pub name: *const c_char,
    pub getinfo: Slot,
    pub fabric: Slot,
    pub cleanup: Slot,
}

#[repr(C)]
pub struct fi_info {
    pub next: *mut fi_info,
    pub caps: u64,
    pub mode: u64,
    pub addr_format: u32,
    pub src_addrlen: usize,
    pub dest_addrlen: usize,
    pub src_addr: *mut c_void,
    pub dest_addr: *mut c_void,
    pub handle: *mut fid,
    pub tx_attr: *mut fi_tx_attr,
    pub rx_attr: *mut fi_rx_attr,
    pub ep_attr: *mut fi_ep_attr,
    pub domain_attr: *mut fi_domain_attr,
    pub fabric_attr: *mut fi_fabric_attr,
    pub nic: *mut c_void,
}

#[repr(C)]
pub struct fi_fabric_attr {
    pub fabric: *mut c_void,
    pub name: *mut c_char,
    pub prov_name: *mut c_char,
    pub prov_version: u32,
    pub api_version: u32,
}

#[repr(C)]
pub struct fi_domain_attr {
    pub domain: *mut c_void,
    pub name: *mut c_char,
    pub threading: u32,
    pub control_progress: u32,
    pub data_progress: u32,
    pub resource_mgmt: u32,
    pub av_type: u32,
    pub mr_mode: c_int,
    pub mr_key_size: usize,
    pub cq_data_size: usize,
    pub cq_cnt: usize,
    pub ep_cnt: usize,
    pub tx_ctx_cnt: usize,
    pub rx_ctx_cnt: usize,
    pub max_ep_tx_ctx: usize,
    pub max_ep_rx_ctx: usize,
    pub max_ep_stx_ctx: usize,
    pub max_ep_srx_ctx: usize,
    pub cntr_cnt: usize,
    pub mr_iov_limit: usize,
    pub caps: u64,
    pub mode: u64,
    pub auth_key: *mut u8,
    pub auth_key_size: usize,
    pub max_err_data: usize,
    pub mr_cnt: usize,
    pub tclass: u32,
}

#[repr(C)]
pub struct fi_ep_attr {
    pub type_: u32,
    pub protocol: u32,
    pub protocol_version: u32,
    pub max_msg_size: usize,
    pub msg_prefix_size: usize,
    pub max_order_raw_size: usize,
    pub max_order_war_size: usize,
    pub max_order_waw_size: usize,
    pub mem_tag_format: u64,
    pub tx_ctx_cnt: usize,
    pub rx_ctx_cnt: usize,
    pub auth_key_size: usize,
    pub auth_key: *mut u8,
}

#[repr(C)]
pub struct fi_tx_attr {
    pub caps: u64,
    pub mode: u64,
    pub op_flags: u64,
    pub msg_order: u64,
    pub comp_order: u64,
    pub inject_size: usize,
    pub size: usize,
    pub iov_limit: usize,
    pub rma_iov_limit: usize,
    pub tclass: u32,
}

#[repr(C)]
pub struct fi_rx_attr {
    pub caps: u64,
    pub mode: u64,
    pub op_flags: u64,
    pub msg_order: u64,
    pub comp_order: u64,
    pub total_buffered_recv: usize,
    pub size: usize,
    pub iov_limit: usize,
}

#[repr(C)]
pub struct fi_ops_fabric {
    pub size: usize,
    pub domain: Slot,
    pub passive_ep: Slot,
    pub eq_open: Slot,
    pub wait_open: Slot,
    pub trywait: Slot,
    pub domain2: Slot,
}

#[repr(C)]
pub struct fid_fabric {
    pub fid: fid,
    pub ops: *const fi_ops_fabric,
    pub api_version: u32,
}

#[repr(C)]
pub struct fi_ops_domain {
    pub size: usize,
    pub av_open: Slot,
    pub cq_open: Slot,
    pub endpoint: Slot,
    pub scalable_ep: Slot,
    pub cntr_open: Slot,
    pub poll_open: Slot,
    pub stx_ctx: Slot,
    pub srx_ctx: Slot,
    pub query_atomic: Slot,
    pub query_collective: Slot,
    pub endpoint2: Slot,
}

#[repr(C)]
pub struct fi_ops_mr {
    pub size: usize,
    pub reg: Slot,
    pub regv: Slot,
    pub regattr: Slot,
}

#[repr(C)]
pub struct fid_domain {
    pub fid: fid,
    pub ops: *const fi_ops_domain,
    pub mr: *const fi_ops_mr,
}

#[repr(C)]
pub struct fid_mr {
    pub fid: fid,
    pub mem_desc: *mut c_void,
    pub key: u64,
}

#[repr(C)]
pub struct fi_av_attr {
    pub type_: u32,
    pub rx_ctx_bits: c_int,
    pub count: usize,
    pub ep_per_node: usize,
    pub name: *const c_char,
    pub map_addr: *mut c_void,
    pub flags: u64,
}

#[repr(C)]
pub struct fi_ops_av {
    pub size: usize,
    pub insert: Slot,
    pub insertsvc: Slot,
    pub insertsym: Slot,
    pub remove: Slot,
    pub lookup: Slot,
    pub straddr: Slot,
    pub av_set: Slot,
}

#[repr(C)]
pub struct fid_av {
    pub fid: fid,
    pub ops: *const fi_ops_av,
}

#[repr(C)]
pub struct fi_ops_ep {
    pub size: usize,
    pub cancel: Slot,
    pub getopt: Slot,
    pub setopt: Slot,
    pub tx_ctx: Slot,
    pub rx_ctx: Slot,
    pub rx_size_left: Slot,
    pub tx_size_left: Slot,
}

#[repr(C)]
pub struct fi_ops_cm {
    pub size: usize,
    pub setname: Slot,
    pub getname: Slot,
    pub getpeer: Slot,
    pub connect: Slot,
    pub listen: Slot,
    pub accept: Slot,
    pub reject: Slot,
    pub shutdown: Slot,
    pub join: Slot,
}

/// `fi_ops_msg`, `fi_ops_tagged` and `fi_ops_rma` share this shape: nine slots.
#[repr(C)]
pub struct fi_ops_xfer {
    pub size: usize,
    pub slots: [Slot; 9],
}

#[repr(C)]
pub struct fi_ops_atomic {
    pub size: usize,
    pub slots: [Slot; 13],
}

#[repr(C)]
pub struct fi_ops_collective {
    pub size: usize,
    pub slots: [Slot; 11],
}

#[repr(C)]
pub struct fid_ep {
    pub fid: fid,
    pub ops: *const fi_ops_ep,
    pub cm: *const fi_ops_cm,
    pub msg: *const fi_ops_xfer,
    pub rma: *const fi_ops_xfer,
    pub tagged: *const fi_ops_xfer,
    pub atomic: *const fi_ops_atomic,
    pub collective: *const fi_ops_collective,
}

#[repr(C)]
pub struct iovec {
    pub iov_base: *mut c_void,
    pub iov_len: usize,
}

#[repr(C)]
pub struct fi_msg {
    pub msg_iov: *const iovec,
    pub desc: *mut *mut c_void,
    pub iov_count: usize,
    pub addr: fi_addr_t,
    pub context: *mut c_void,
    pub data: u64,
}

#[repr(C)]
pub struct fi_msg_tagged {
    pub msg_iov: *const iovec,
    pub desc: *mut *mut c_void,
    pub iov_count: usize,
    pub addr: fi_addr_t,
    pub tag: u64,
    pub ignore: u64,
    pub context: *mut c_void,
    pub data: u64,
}

#[repr(C)]
pub struct fi_ops_cq {
    pub size: usize,
    pub read: Slot,
    pub readfrom: Slot,
    pub readerr: Slot,
    pub sread: Slot,
    pub sreadfrom: Slot,
    pub signal: Slot,
    pub strerror: Slot,
}

#[repr(C)]
pub struct fid_cq {
    pub fid: fid,
    pub ops: *const fi_ops_cq,
}

#[repr(C)]
pub struct fi_cq_attr {
    pub size: usize,
    pub flags: u64,
    pub format: u32,
    pub wait_obj: u32,
    pub signaling_vector: c_int,
    pub wait_cond: u32,
    pub wait_set: *mut c_void,
}

#[repr(C)]
pub struct fi_cq_tagged_entry {
    pub op_context: *mut c_void,
    pub flags: u64,
    pub len: usize,
    pub buf: *mut c_void,
    pub data: u64,
    pub tag: u64,
}

#[repr(C)]
pub struct fi_cq_err_entry {
    pub op_context: *mut c_void,
    pub flags: u64,
    pub len: usize,
    pub buf: *mut c_void,
    pub data: u64,
    pub tag: u64,
    pub olen: usize,
    pub err: c_int,
    pub prov_errno: c_int,
    pub err_data: *mut c_void,
    pub err_data_size: usize,
}

#[repr(C)]
pub struct fi_eq_attr {
    pub size: usize,
    pub flags: u64,
    pub wait_obj: u32,
    pub signaling_vector: c_int,
    pub wait_set: *mut c_void,
}

#[repr(C)]
pub struct fi_eq_err_entry {
    pub fid: *mut fid,
    pub context: *mut c_void,
    pub data: u64,
    pub err: c_int,
    pub prov_errno: c_int,
    pub err_data: *mut c_void,
    pub err_data_size: usize,
}

#[repr(C)]
pub struct fi_ops_eq {
    pub size: usize,
    pub read: Slot,
    pub readerr: Slot,
    pub write: Slot,
    pub sread: Slot,
    pub strerror: Slot,
}

#[repr(C)]
pub struct fid_eq {
    pub fid: fid,
    pub ops: *const fi_ops_eq,
}

/// Sizes and offsets measured from the 1.17 headers (`docs/fabric-provider.md` §2.2).
macro_rules! layout {
    ($($t:ident $size:literal { $($f:ident $off:literal)* })*) => {
        $(
            const _: () = assert!(size_of::<$t>() == $size);
            $(const _: () = assert!(std::mem::offset_of!($t, $f) == $off);)*
        )*
    };
}

layout! {
    fid 24 { fclass 0 context 8 ops 16 }
    fi_ops 56 { close 8 bind 16 control 24 ops_open 32 tostr 40 ops_set 48 }
    fi_provider 72 { fi_version 4 context 8 name 40 getinfo 48 fabric 56 cleanup 64 }
    fi_info 120 { caps 8 mode 16 addr_format 24 src_addrlen 32 dest_addrlen 40 src_addr 48
        dest_addr 56 handle 64 tx_attr 72 rx_attr 80 ep_attr 88 domain_attr 96
        fabric_attr 104 nic 112 }
    fi_fabric_attr 32 { name 8 prov_name 16 prov_version 24 api_version 28 }
    fi_domain_attr 192 { name 8 threading 16 control_progress 20 data_progress 24
        resource_mgmt 28 av_type 32 mr_mode 36 mr_key_size 40 cq_data_size 48 cq_cnt 56
        ep_cnt 64 tx_ctx_cnt 72 rx_ctx_cnt 80 max_ep_tx_ctx 88 max_ep_rx_ctx 96
        max_ep_stx_ctx 104 max_ep_srx_ctx 112 cntr_cnt 120 mr_iov_limit 128 caps 136
        mode 144 auth_key 152 auth_key_size 160 max_err_data 168 mr_cnt 176 tclass 184 }
    fi_ep_attr 96 { protocol 4 protocol_version 8 max_msg_size 16 msg_prefix_size 24
        max_order_raw_size 32 max_order_war_size 40 max_order_waw_size 48
        mem_tag_format 56 tx_ctx_cnt 64 rx_ctx_cnt 72 auth_key_size 80 auth_key 88 }
    fi_tx_attr 80 { mode 8 op_flags 16 msg_order 24 comp_order 32 inject_size 40 size 48
        iov_limit 56 rma_iov_limit 64 tclass 72 }
    fi_rx_attr 64 { mode 8 op_flags 16 msg_order 24 comp_order 32 total_buffered_recv 40
        size 48 iov_limit 56 }
    fi_ops_fabric 56 { domain 8 passive_ep 16 eq_open 24 wait_open 32 trywait 40 domain2 48 }
    fid_fabric 40 { ops 24 api_version 32 }
    fi_ops_domain 96 { av_open 8 cq_open 16 endpoint 24 scalable_ep 32 cntr_open 40
        poll_open 48 stx_ctx 56 srx_ctx 64 query_atomic 72 query_collective 80 endpoint2 88 }
    fi_ops_mr 32 { reg 8 regv 16 regattr 24 }
    fid_domain 40 { ops 24 mr 32 }
    fid_mr 40 { mem_desc 24 key 32 }
    fi_av_attr 48 { rx_ctx_bits 4 count 8 ep_per_node 16 name 24 map_addr 32 flags 40 }
    fi_ops_av 64 { insert 8 insertsvc 16 insertsym 24 remove 32 lookup 40 straddr 48 av_set 56 }
    fid_av 32 { ops 24 }
    fi_ops_ep 64 { cancel 8 getopt 16 setopt 24 tx_ctx 32 rx_ctx 40 rx_size_left 48
        tx_size_left 56 }
    fi_ops_cm 80 { setname 8 getname 16 getpeer 24 connect 32 listen 40 accept 48 reject 56
        shutdown 64 join 72 }
    fi_ops_xfer 80 { slots 8 }
    fi_ops_atomic 112 { slots 8 }
    fi_ops_collective 96 { slots 8 }
    fid_ep 80 { ops 24 cm 32 msg 40 rma 48 tagged 56 atomic 64 collective 72 }
    fi_msg 48 { desc 8 iov_count 16 addr 24 context 32 data 40 }
    fi_msg_tagged 64 { desc 8 iov_count 16 addr 24 tag 32 ignore 40 context 48 data 56 }
    fi_ops_cq 64 { read 8 readfrom 16 readerr 24 sread 32 sreadfrom 40 signal 48 strerror 56 }
    fid_cq 32 { ops 24 }
    fi_cq_attr 40 { flags 8 format 16 wait_obj 20 signaling_vector 24 wait_cond 28 wait_set 32 }
    fi_cq_tagged_entry 48 { flags 8 len 16 buf 24 data 32 tag 40 }
    fi_cq_err_entry 80 { olen 48 err 56 prov_errno 60 err_data 64 err_data_size 72 }
    fi_eq_attr 32 { flags 8 wait_obj 16 signaling_vector 20 wait_set 24 }
    fi_eq_err_entry 48 { context 8 data 16 err 24 prov_errno 28 err_data 32 err_data_size 40 }
    fi_ops_eq 48 { read 8 readerr 16 write 24 sread 32 strerror 40 }
    fid_eq 32 { ops 24 }
}

// Capabilities and operation flags (`fabric.h`).
pub const FI_MSG: u64 = 1 << 1;
pub const FI_RMA: u64 = 1 << 2;
pub const FI_TAGGED: u64 = 1 << 3;
pub const FI_ATOMIC: u64 = 1 << 4;
pub const FI_READ: u64 = 1 << 8;
pub const FI_WRITE: u64 = 1 << 9;
pub const FI_RECV: u64 = 1 << 10;
pub const FI_SEND: u64 = 1 << 11;
pub const FI_TRANSMIT: u64 = FI_SEND;
pub const FI_REMOTE_READ: u64 = 1 << 12;
pub const FI_REMOTE_WRITE: u64 = 1 << 13;
pub const FI_MULTI_RECV: u64 = 1 << 16;
pub const FI_REMOTE_CQ_DATA: u64 = 1 << 17;
pub const FI_PEEK: u64 = 1 << 19;
pub const FI_COMPLETION: u64 = 1 << 24;
pub const FI_INJECT: u64 = 1 << 25;
pub const FI_INJECT_COMPLETE: u64 = 1 << 26;
pub const FI_TRANSMIT_COMPLETE: u64 = 1 << 27;
pub const FI_DELIVERY_COMPLETE: u64 = 1 << 28;
pub const FI_LOCAL_COMM: u64 = 1 << 51;
pub const FI_REMOTE_COMM: u64 = 1 << 52;
pub const FI_SOURCE: u64 = 1 << 57;
pub const FI_DIRECTED_RECV: u64 = 1 << 59;
/// As a receive flag (bit 59 again): take the message a `FI_PEEK` found.
pub const FI_CLAIM: u64 = 1 << 59;
/// As a bind flag (bit 59 again).
pub const FI_SELECTIVE_COMPLETION: u64 = 1 << 59;
/// As a receive flag (bit 58): drop the message a `FI_PEEK` found.
pub const FI_DISCARD: u64 = 1 << 58;
// Modes.
pub const FI_CONTEXT: u64 = 1 << 59;
pub const FI_LOCAL_MR: u64 = 1 << 55;
// mr_mode bits.
pub const FI_MR_BASIC: c_int = 1;
pub const FI_MR_SCALABLE: c_int = 2;
pub const FI_MR_LOCAL: c_int = 4;
pub const FI_MR_VIRT_ADDR: c_int = 0x10;
pub const FI_MR_ALLOCATED: c_int = 0x20;
pub const FI_MR_PROV_KEY: c_int = 0x40;
// Address formats.
pub const FI_FORMAT_UNSPEC: u32 = 0;
pub const FI_SOCKADDR: u32 = 1;
pub const FI_SOCKADDR_IN: u32 = 2;
pub const FI_SOCKADDR_IN6: u32 = 3;
pub const FI_ADDR_UNSPEC: u64 = u64::MAX;
// Endpoint types.
pub const FI_EP_UNSPEC: u32 = 0;
pub const FI_EP_RDM: u32 = 3;
// AV types.
pub const FI_AV_UNSPEC: u32 = 0;
pub const FI_AV_MAP: u32 = 1;
pub const FI_AV_TABLE: u32 = 2;
// Progress, threading, resource management.
pub const FI_PROGRESS_UNSPEC: u32 = 0;
pub const FI_PROGRESS_AUTO: u32 = 1;
pub const FI_THREAD_SAFE: u32 = 1;
pub const FI_RM_ENABLED: u32 = 2;
// Orders.
pub const FI_ORDER_NONE: u64 = 0;
pub const FI_ORDER_SAS: u64 = 0x100;
// Classes.
pub const FI_CLASS_FABRIC: usize = 1;
pub const FI_CLASS_DOMAIN: usize = 2;
pub const FI_CLASS_EP: usize = 3;
pub const FI_CLASS_AV: usize = 11;
pub const FI_CLASS_MR: usize = 12;
pub const FI_CLASS_EQ: usize = 13;
pub const FI_CLASS_CQ: usize = 14;
// Control commands.
pub const FI_GETOPSFLAG: c_int = 2;
pub const FI_SETOPSFLAG: c_int = 3;
pub const FI_GETWAIT: c_int = 5;
pub const FI_ENABLE: c_int = 6;
// CQ formats and wait objects.
pub const FI_CQ_FORMAT_UNSPEC: u32 = 0;
pub const FI_CQ_FORMAT_CONTEXT: u32 = 1;
pub const FI_CQ_FORMAT_MSG: u32 = 2;
pub const FI_CQ_FORMAT_DATA: u32 = 3;
pub const FI_CQ_FORMAT_TAGGED: u32 = 4;
pub const FI_WAIT_NONE: u32 = 0;
pub const FI_WAIT_UNSPEC: u32 = 1;
pub const FI_WAIT_FD: u32 = 3;
pub const FI_WAIT_YIELD: u32 = 5;
// Endpoint options.
pub const FI_OPT_ENDPOINT: c_int = 0;
pub const FI_OPT_MIN_MULTI_RECV: c_int = 0;
// Errors (positive; the API returns their negatives).
pub const FI_EIO: c_int = 5;
pub const FI_EAGAIN: c_int = 11;
pub const FI_ENOMEM: c_int = 12;
pub const FI_EBUSY: c_int = 16;
pub const FI_EINVAL: c_int = 22;
pub const FI_ENOSYS: c_int = 38;
pub const FI_ENOMSG: c_int = 42;
pub const FI_ENODATA: c_int = 61;
pub const FI_EMSGSIZE: c_int = 90;
pub const FI_ENOPROTOOPT: c_int = 92;
pub const FI_EOPNOTSUPP: c_int = 95;
pub const FI_ECANCELED: c_int = 125;
pub const FI_EOTHER: c_int = 256;
pub const FI_ETOOSMALL: c_int = 257;
pub const FI_EOPBADSTATE: c_int = 258;
pub const FI_EAVAIL: c_int = 259;
pub const FI_EBADFLAGS: c_int = 260;
pub const FI_ENOCQ: c_int = 263;
pub const FI_ENOAV: c_int = 267;
pub const FI_ETIMEDOUT: c_int = 110;

/// An ops table as a `static`: its slots are code pointers, never written after start-up.
#[repr(transparent)]
pub struct Ops<T>(pub T);

// SAFETY: an ops table is immutable and holds only pointers to functions, which any
// thread may call.
unsafe impl<T> Sync for Ops<T> {}

pub const FI_CLASS_CNTR: usize = 15;
pub const FI_NOTIFY: u32 = 0;

mod cm;
mod rma;
pub use cm::*;
pub use rma::*;
