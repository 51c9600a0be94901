//! `<infiniband/verbs.h>`: the structs of libibverbs that cross the boundary.

use std::ffi::{c_char, c_int, c_uint, c_void};

/// `union ibv_gid`: 16 bytes, network order.
#[repr(C, align(8))]
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub struct ibv_gid {
    pub raw: [u8; 16],
}

/// Two reserved words that rdma-core's own `struct verbs_device` keeps before the public
/// part (`_ibv_device_ops`).
#[repr(C)]
pub struct ibv_device {
    pub _ops: [*mut c_void; 2],
    pub node_type: c_int,
    pub transport_type: c_int,
    pub name: [c_char; 64],
    pub dev_name: [c_char; 64],
    pub dev_path: [c_char; 256],
    pub ibdev_path: [c_char; 256],
}

pub type PollCq = unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int;
pub type ReqNotifyCq = unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int;
pub type PostSend =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int;
pub type PostRecv =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;
pub type PostSrqRecv =
    unsafe extern "C" fn(*mut ibv_srq, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;
pub type AllocMw = unsafe extern "C" fn(*mut ibv_pd, c_int) -> *mut ibv_mw;
pub type BindMw = unsafe extern "C" fn(*mut ibv_qp, *mut ibv_mw, *mut c_void) -> c_int;
pub type DeallocMw = unsafe extern "C" fn(*mut ibv_mw) -> c_int;

/// `struct ibv_context_ops`: 32 slots, of which the header's inline verbs call six; the
/// others are `_compat_*` placeholders, NULL here as in rdma-core.
#[repr(C)]
pub struct ibv_context_ops {
    pub _compat0: [*mut c_void; 7],
    pub alloc_mw: Option<AllocMw>,
    pub bind_mw: Option<BindMw>,
    pub dealloc_mw: Option<DeallocMw>,
    pub _compat_create_cq: *mut c_void,
    pub poll_cq: Option<PollCq>,
    pub req_notify_cq: Option<ReqNotifyCq>,
    pub _compat1: [*mut c_void; 7],
    pub post_srq_recv: Option<PostSrqRecv>,
    pub _compat2: [*mut c_void; 4],
    pub post_send: Option<PostSend>,
    pub post_recv: Option<PostRecv>,
    pub _compat3: [*mut c_void; 5],
}

#[repr(C)]
pub struct ibv_context {
    pub device: *mut ibv_device,
    pub ops: ibv_context_ops,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    pub mutex: libc::pthread_mutex_t,
    pub abi_compat: *mut c_void,
}

pub type QueryPort = unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr, usize) -> c_int;
pub type CreateCqEx =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex;
pub type QueryDeviceEx =
    unsafe extern "C" fn(*mut ibv_context, *const c_void, *mut ibv_device_attr_ex, usize) -> c_int;
pub type CreateQpEx =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_init_attr_ex) -> *mut ibv_qp;
pub type CreateSrqEx =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_srq_init_attr_ex) -> *mut ibv_srq;
pub type AdviseMr = unsafe extern "C" fn(*mut ibv_pd, c_int, u32, *mut ibv_sge, u32) -> c_int;
pub type QueryRtValues = unsafe extern "C" fn(*mut ibv_context, *mut ibv_values_ex) -> c_int;
pub type GetSrqNum = unsafe extern "C" fn(*mut ibv_srq, *mut u32) -> c_int;

/// `struct verbs_context`: the extended ops live before the `ibv_context` the application
/// holds, found through `abi_compat == -1` and `sz`.
#[repr(C)]
pub struct verbs_context {
    pub query_port: Option<QueryPort>,
    pub advise_mr: Option<AdviseMr>,
    pub _ops0: [*mut c_void; 22],
    pub query_rt_values: Option<QueryRtValues>,
    pub create_cq_ex: Option<CreateCqEx>,
    pub priv_: *mut c_void,
    pub query_device_ex: Option<QueryDeviceEx>,
    pub _ops1: [*mut c_void; 5],
    pub create_qp_ex: Option<CreateQpEx>,
    pub get_srq_num: Option<GetSrqNum>,
    pub create_srq_ex: Option<CreateSrqEx>,
    pub _ops2: [*mut c_void; 2],
    pub _abi_placeholder3: u64,
    pub sz: usize,
    pub context: ibv_context,
}

#[repr(C)]
pub struct ibv_values_ex {
    pub comp_mask: u32,
    pub raw_clock: libc::timespec,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device_attr {
    pub fw_ver: [c_char; 64],
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: c_uint,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    pub atomic_cap: c_int,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

/// `struct ibv_device_attr_ex`: the legacy attributes, then the extended capabilities, of
/// which softrdma has the completion clock; the others stay raw (zero) bytes here.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device_attr_ex {
    pub orig_attr: ibv_device_attr,
    pub comp_mask: u32,
    pub odp_general_caps: u64,
    pub odp_rc_caps: u32,
    pub odp_uc_caps: u32,
    pub odp_ud_caps: u32,
    pub completion_timestamp_mask: u64,
    /// kHz.
    pub hca_core_clock: u64,
    pub device_cap_flags_ex: u64,
    pub _rest: [u32; 27],
    pub phys_port_cnt_ex: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_port_attr {
    pub state: c_int,
    pub max_mtu: c_int,
    pub active_mtu: c_int,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_gid_entry {
    pub gid: ibv_gid,
    pub gid_index: u32,
    pub port_num: u32,
    pub gid_type: u32,
    pub ndev_ifindex: u32,
}

#[repr(C)]
pub struct ibv_pd {
    pub context: *mut ibv_context,
    pub handle: u32,
}

#[repr(C)]
pub struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

#[repr(C)]
pub struct ibv_mw {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub rkey: u32,
    pub handle: u32,
    pub type_: c_int,
}

#[repr(C)]
pub struct ibv_comp_channel {
    pub context: *mut ibv_context,
    pub fd: c_int,
    pub refcnt: c_int,
}

#[repr(C)]
pub struct ibv_cq {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
}

pub type CqExFn<T> = unsafe extern "C" fn(*mut ibv_cq_ex) -> T;

/// `struct ibv_cq_ex`: an `ibv_cq`, then the current completion's status and WR ID (read
/// directly by callers), then the lazy poll functions.
#[repr(C)]
pub struct ibv_cq_ex {
    pub cq: ibv_cq,
    pub comp_mask: u32,
    pub status: c_int,
    pub wr_id: u64,
    pub start_poll: Option<unsafe extern "C" fn(*mut ibv_cq_ex, *mut c_void) -> c_int>,
    pub next_poll: Option<CqExFn<c_int>>,
    pub end_poll: Option<CqExFn<()>>,
    pub read_opcode: Option<CqExFn<c_int>>,
    pub read_vendor_err: Option<CqExFn<u32>>,
    pub read_byte_len: Option<CqExFn<u32>>,
    pub read_imm_data: Option<CqExFn<u32>>,
    pub read_qp_num: Option<CqExFn<u32>>,
    pub read_src_qp: Option<CqExFn<u32>>,
    pub read_wc_flags: Option<CqExFn<c_uint>>,
    pub read_slid: Option<CqExFn<u32>>,
    pub read_sl: Option<CqExFn<u8>>,
    pub read_dlid_path_bits: Option<CqExFn<u8>>,
    pub read_completion_ts: Option<CqExFn<u64>>,
    pub read_cvlan: Option<CqExFn<u16>>,
    pub read_flow_tag: Option<CqExFn<u32>>,
    pub read_tm_info: Option<unsafe extern "C" fn(*mut ibv_cq_ex, *mut c_void)>,
    pub read_completion_wallclock_ns: Option<CqExFn<u64>>,
}

#[repr(C)]
pub struct ibv_cq_init_attr_ex {
    pub cqe: u32,
    pub cq_context: *mut c_void,
    pub channel: *mut ibv_comp_channel,
    pub comp_vector: u32,
    pub wc_flags: u64,
    pub comp_mask: u32,
    pub flags: u32,
    pub parent_domain: *mut ibv_pd,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_wc {
    pub wr_id: u64,
    pub status: c_int,
    pub opcode: c_int,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// `imm_data` (network order) or `invalidated_rkey`.
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: c_uint,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_global_route {
    pub dgid: ibv_gid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

#[repr(C)]
pub struct ibv_ah {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub handle: u32,
}

#[repr(C)]
pub struct ibv_grh {
    pub version_tclass_flow: u32,
    pub paylen: u16,
    pub next_hdr: u8,
    pub hop_limit: u8,
    pub sgid: ibv_gid,
    pub dgid: ibv_gid,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_srq_attr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

#[repr(C)]
pub struct ibv_srq_init_attr {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
}

/// `struct ibv_srq_init_attr_ex` up to the fields softrdma reads.
#[repr(C)]
pub struct ibv_srq_init_attr_ex {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
    pub comp_mask: u32,
    pub srq_type: c_int,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut c_void,
    pub cq: *mut ibv_cq,
    pub tm_cap: [u32; 2],
}

#[repr(C)]
pub struct ibv_srq {
    pub context: *mut ibv_context,
    pub srq_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub handle: u32,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub events_completed: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
}

#[repr(C)]
pub struct ibv_qp_init_attr_ex {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
    pub comp_mask: u32,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut c_void,
    pub create_flags: u32,
    pub max_tso_header: u16,
    pub rwq_ind_tbl: *mut c_void,
    /// `struct ibv_rx_hash_conf`: function, key length, key pointer, fields mask.
    pub rx_hash_conf: [u64; 3],
    pub source_qpn: u32,
    pub send_ops_flags: u64,
}

impl ibv_qp_init_attr_ex {
    /// The attributes that `ibv_qp_init_attr` has too, which begin this struct.
    pub fn basic(&self) -> ibv_qp_init_attr {
        ibv_qp_init_attr {
            qp_context: self.qp_context,
            send_cq: self.send_cq,
            recv_cq: self.recv_cq,
            srq: self.srq,
            cap: self.cap,
            qp_type: self.qp_type,
            sq_sig_all: self.sq_sig_all,
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_qp_attr {
    pub qp_state: c_int,
    pub cur_qp_state: c_int,
    pub path_mtu: c_int,
    pub path_mig_state: c_int,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: c_uint,
    pub cap: ibv_qp_cap,
    pub ah_attr: ibv_ah_attr,
    pub alt_ah_attr: ibv_ah_attr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

#[repr(C)]
pub struct ibv_qp {
    pub context: *mut ibv_context,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub handle: u32,
    pub qp_num: u32,
    pub state: c_int,
    pub qp_type: c_int,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub events_completed: u32,
}

type QpExFn<A> = Option<A>;

/// `struct ibv_qp_ex`: an `ibv_qp`, the WR fields the application writes, and the
/// `ibv_wr_*` builders.
#[repr(C)]
pub struct ibv_qp_ex {
    pub qp_base: ibv_qp,
    pub comp_mask: u64,
    pub wr_id: u64,
    pub wr_flags: c_uint,
    pub wr_atomic_cmp_swp: QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u64, u64)>,
    pub wr_atomic_fetch_add: QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u64)>,
    pub wr_bind_mw: QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex, *mut ibv_mw, u32, *const c_void)>,
    pub wr_local_inv: QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
    pub wr_rdma_read: QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64)>,
    pub wr_rdma_write: QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64)>,
    pub wr_rdma_write_imm: QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u32)>,
    pub wr_send: QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex)>,
    pub wr_send_imm: QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
    pub wr_send_inv: QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
    pub wr_send_tso: QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex, *mut c_void, u16, u16)>,
    pub wr_set_ud_addr: QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex, *mut ibv_ah, u32, u32)>,
    pub wr_set_xrc_srqn: QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
    pub wr_set_inline_data: QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex, *mut c_void, usize)>,
    pub wr_set_inline_data_list:
        QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex, usize, *const ibv_data_buf)>,
    pub wr_set_sge: QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u32)>,
    pub wr_set_sge_list: QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex, usize, *const ibv_sge)>,
    pub wr_start: QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex)>,
    pub wr_complete: QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex) -> c_int>,
    pub wr_abort: QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex)>,
    pub wr_atomic_write: QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, *const c_void)>,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_data_buf {
    pub addr: *mut c_void,
    pub length: usize,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_rdma {
    pub remote_addr: u64,
    pub rkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_atomic {
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub rkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_ud {
    pub ah: *mut ibv_ah,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_wr_union {
    pub rdma: ibv_rdma,
    pub atomic: ibv_atomic,
    pub ud: ibv_ud,
}

#[repr(C)]
pub struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub opcode: c_int,
    pub send_flags: c_uint,
    /// `imm_data` (network order) or `invalidate_rkey`.
    pub imm_data: u32,
    pub wr: ibv_wr_union,
    pub xrc_remote_srqn: u32,
    /// `bind_mw` or `tso`.
    pub _bind_or_tso: [u64; 6],
}

#[repr(C)]
pub struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_event_element {
    pub cq: *mut ibv_cq,
    pub qp: *mut ibv_qp,
    pub srq: *mut ibv_srq,
    pub port_num: c_int,
}

#[repr(C)]
pub struct ibv_async_event {
    pub element: ibv_event_element,
    pub event_type: c_int,
}

/// `struct ibv_ece`: the Enhanced Connection Establishment options of a QP or a
/// connection.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_ece {
    pub vendor_id: u32,
    pub options: u32,
    pub comp_mask: u32,
}

/// The first word after the public `ibv_device`, where rdma-core's `struct verbs_device`
/// keeps its driver ops: the real libmlx5 and libefa entry points read it, so it is NULL.
pub const VERBS_DEVICE_OPS_OFFSET: usize = 664;

// The figures of rdma-core 44 on x86_64 (c-abi.md §2); `super::tests` checks them again
// against the installed headers.
assert_layout! {
    ibv_gid = 16;
    ibv_device = 664 { node_type: 16, name: 24, dev_name: 88, dev_path: 152, ibdev_path: 408 };
    ibv_context_ops = 256;
    ibv_context = 328 {
        ops.alloc_mw: 64, ops.dealloc_mw: 80, ops.poll_cq: 96, ops.req_notify_cq: 104,
        ops.post_srq_recv: 168, ops.post_send: 208, ops.post_recv: 216,
        cmd_fd: 264, async_fd: 268, num_comp_vectors: 272, mutex: 280, abi_compat: 320,
    };
    verbs_context = 648 {
        advise_mr: 8, create_cq_ex: 200, priv_: 208, query_device_ex: 216, create_qp_ex: 264,
        get_srq_num: 272, create_srq_ex: 280, sz: 312, context: 320, query_rt_values: 192,
    };
    ibv_device_attr = 232 {
        vendor_id: 96, max_qp: 108, atomic_cap: 164, max_pkeys: 224, phys_port_cnt: 227,
    };
    ibv_device_attr_ex = 400 {
        odp_general_caps: 240, odp_ud_caps: 256, phys_port_cnt_ex: 396,
        completion_timestamp_mask: 264, hca_core_clock: 272,
    };
    ibv_values_ex = 24;
    ibv_port_attr = 52 { pkey_tbl_len: 32, active_width: 43, link_layer: 46, port_cap_flags2: 48 };
    ibv_gid_entry = 32;
    ibv_pd = 16;
    ibv_mr = 48 { lkey: 36, rkey: 40 };
    ibv_comp_channel = 16 { fd: 8 };
    ibv_cq = 128 { cqe: 28, comp_events_completed: 120 };
    ibv_cq_ex = 288 { status: 132, wr_id: 136, start_poll: 144, read_completion_wallclock_ns: 280 };
    ibv_cq_init_attr_ex = 56;
    ibv_wc = 48 { qp_num: 28, wc_flags: 36, dlid_path_bits: 45 };
    ibv_sge = 16;
    ibv_global_route = 24;
    ibv_ah_attr = 32;
    ibv_ah = 24;
    ibv_grh = 40;
    ibv_srq = 128 { events_completed: 120 };
    ibv_qp_cap = 20;
    ibv_qp_init_attr = 64;
    ibv_qp_init_attr_ex = 136 { comp_mask: 60, pd: 64, send_ops_flags: 128 };
    ibv_qp_attr = 144 {
        dest_qp_num: 28, ah_attr: 56, alt_ah_attr: 88, port_num: 129, rnr_retry: 132,
        rate_limit: 136,
    };
    ibv_qp = 160 { qp_num: 52, events_completed: 152 };
    ibv_qp_ex = 352 {
        wr_flags: 176, wr_send: 240, wr_set_sge: 304, wr_start: 320, wr_atomic_write: 344,
    };
    ibv_send_wr = 128 { imm_data: 36, wr: 40, xrc_remote_srqn: 72 };
    ibv_recv_wr = 32;
    ibv_async_event = 16;
    ibv_srq_init_attr = 24;
    ibv_ece = 12;
}
