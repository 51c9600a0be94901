//! Queue pairs (plain and extended, with the `ibv_wr_*` builders), shared receive queues,
//! and the post verbs.
//!
//! `ibv_post_send` turns each `ibv_send_wr` into a [`SendWr`] and hands the chain to the
//! Rust QP in one call (one QP lock, one engine pass, as few system calls as the kernel
//! allows); the SGEs name the application's registered memory, which the device reads when
//! each packet is built. An `IBV_SEND_INLINE` payload is copied at post time, as on a NIC.

use crate::abi::*;
use crate::cq::SoftCq;
use crate::device::{OfContext, SoftContext, live, own, to_destroy};
use crate::ffi::{Failed, Object, Ret, Users, Verb, entry};
use crate::mr::{SoftAh, SoftPd, next_handle};
use softrdma::{
    AccessFlags, AddressVector, Mtu, Payload, QpAttr, QpCaps, QpInitAttr, QpState, QpType, RecvWr,
    SendFlags, SendOp, SendWr, Sge, SharedReceiveQueue,
};
use softrdma::{Psn, Qpn};
use std::ffi::{c_int, c_void};
use std::net::IpAddr;
use std::ptr::null_mut;
use std::sync::Mutex;

/// A QP: the public `ibv_qp_ex` (whose prefix is the `ibv_qp`), then softrdma's.
#[repr(C)]
pub(crate) struct SoftQp {
    pub qp: ibv_qp_ex,
    /// Shared with the connection manager, which holds it weakly (`rdma_create_qp`) to
    /// move it to RTR and RTS as the connection forms.
    pub inner: std::sync::Arc<softrdma::QueuePair>,
    caps: ibv_qp_cap,
    sq_sig_all: bool,
    /// The WRs an `ibv_wr_start` ... `ibv_wr_complete` batch has built, and the first error.
    batch: Mutex<(Vec<SendWr>, c_int)>,
}

// SAFETY: repr(C), the public struct first (an `ibv_qp_ex`, which begins with the
// `ibv_qp`).
unsafe impl Object for SoftQp {
    type C = ibv_qp;
    const WHAT: &'static str = "QP";
}

// SAFETY: `ibv_qp` begins with its context.
unsafe impl OfContext for SoftQp {}

/// An SRQ: the public struct, then softrdma's.
#[repr(C)]
pub(crate) struct SoftSrq {
    pub srq: ibv_srq,
    pub inner: SharedReceiveQueue,
    attr: Mutex<ibv_srq_attr>,
    /// QPs that take receives from it.
    users: Users,
}

// SAFETY: repr(C), the public struct first.
unsafe impl Object for SoftSrq {
    type C = ibv_srq;
    const WHAT: &'static str = "SRQ";
}

// SAFETY: `ibv_srq` begins with its context.
unsafe impl OfContext for SoftSrq {}

fn qp_type(t: c_int) -> Option<QpType> {
    match t {
        IBV_QPT_RC => Some(QpType::Rc),
        IBV_QPT_UC => Some(QpType::Uc),
        IBV_QPT_UD => Some(QpType::Ud),
        _ => None,
    }
}

fn qp_state(s: c_int) -> Option<QpState> {
    Some(match s {
        IBV_QPS_RESET => QpState::Reset,
        IBV_QPS_INIT => QpState::Init,
        IBV_QPS_RTR => QpState::Rtr,
        IBV_QPS_RTS => QpState::Rts,
        IBV_QPS_SQD => QpState::Sqd,
        IBV_QPS_SQE => QpState::Sqe,
        IBV_QPS_ERR => QpState::Error,
        _ => return None,
    })
}

fn mtu(m: c_int) -> Option<Mtu> {
    Some(match m {
        1 => Mtu::M256,
        2 => Mtu::M512,
        3 => Mtu::M1024,
        4 => Mtu::M2048,
        5 => Mtu::M4096,
        _ => return None,
    })
}

struct Create {
    pd: *mut ibv_pd,
    qp_context: *mut c_void,
    send_cq: *mut ibv_cq,
    recv_cq: *mut ibv_cq,
    srq: *mut ibv_srq,
    cap: ibv_qp_cap,
    qp_type: c_int,
    sq_sig_all: bool,
}

fn create(v: Verb, c: Create) -> Result<*mut SoftQp, Failed> {
    v.ensure(
        !c.pd.is_null() && !c.send_cq.is_null() && !c.recv_cq.is_null(),
        libc::EINVAL,
        &"NULL PD or CQ",
    )?;
    // SAFETY: a PD the caller got from this library.
    let pd = unsafe { own::<SoftPd>(v, c.pd) }?;
    let Some(t) = qp_type(c.qp_type) else {
        return v.err(
            libc::EOPNOTSUPP,
            &format_args!("QP type {}: softrdma has RC, UC and UD", c.qp_type),
        );
    };
    // SAFETY: live CQs and (if any) SRQ of the caller's.
    let (scq, rcq, srq) = unsafe {
        (
            SoftCq::from_ptr(c.send_cq),
            SoftCq::from_ptr(c.recv_cq),
            c.srq.cast::<SoftSrq>().as_ref(),
        )
    };
    let caps = QpCaps {
        // A QP may have no send queue in IB; the engine wants room for one WR.
        max_send_wr: c.cap.max_send_wr.max(1),
        max_recv_wr: if srq.is_some() { 0 } else { c.cap.max_recv_wr },
        max_send_sge: c.cap.max_send_sge.max(1),
        max_recv_sge: c.cap.max_recv_sge.max(1),
        max_inline_data: c.cap.max_inline_data,
    };
    let init = QpInitAttr {
        qp_type: t,
        send_cq: scq.inner.clone(),
        recv_cq: rcq.inner.clone(),
        cap: caps,
        sq_sig_all: c.sq_sig_all,
        srq: srq.map(|s| s.inner.clone()),
    };
    let inner = std::sync::Arc::new(v.check(pd.inner.create_qp(init))?);
    pd.users.add();
    scq.users.add();
    rcq.users.add();
    if let Some(s) = srq {
        s.users.add();
    }
    let ctx = pd.pd.context;
    let qpn = inner.qp_num().value();
    let actual = ibv_qp_cap {
        max_send_wr: caps.max_send_wr,
        max_recv_wr: caps.max_recv_wr,
        max_send_sge: caps.max_send_sge,
        max_recv_sge: caps.max_recv_sge,
        max_inline_data: caps.max_inline_data,
    };
    // SAFETY: ibv_qp_ex is pointers, ints, Option<fn> and pthread objects: all-zero is
    // valid for the first three; the pthread objects are initialised below.
    let mut q: ibv_qp_ex = unsafe { std::mem::zeroed() };
    let b = &mut q.qp_base;
    b.context = ctx;
    b.qp_context = c.qp_context;
    b.pd = c.pd;
    b.send_cq = c.send_cq;
    b.recv_cq = c.recv_cq;
    b.srq = c.srq;
    b.handle = next_handle();
    b.qp_num = qpn;
    b.state = 0;
    b.qp_type = c.qp_type;
    b.mutex = libc::PTHREAD_MUTEX_INITIALIZER;
    b.cond = libc::PTHREAD_COND_INITIALIZER;
    set_builders(&mut q);
    let soft = SoftQp {
        qp: q,
        inner,
        caps: actual,
        sq_sig_all: c.sq_sig_all,
        batch: Mutex::new((Vec::new(), 0)),
    }
    .into_c();
    // SAFETY: live context.
    let sc = unsafe { SoftContext::from_ptr(ctx) };
    sc.qps
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(qpn, soft as usize);
    Ok(soft.cast())
}

/// `ibv_create_qp`: the caps actually given are written back to `attr.cap`.
pub unsafe extern "C" fn ibv_create_qp(
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    entry("ibv_create_qp", Ret::NULL, |v| {
        v.ensure(!attr.is_null(), libc::EINVAL, &"NULL attr")?;
        // SAFETY: the caller's attr.
        let a = unsafe { &mut *attr };
        let c = Create {
            pd,
            qp_context: a.qp_context,
            send_cq: a.send_cq,
            recv_cq: a.recv_cq,
            srq: a.srq,
            cap: a.cap,
            qp_type: a.qp_type,
            sq_sig_all: a.sq_sig_all != 0,
        };
        let q = create(v, c)?;
        // SAFETY: just created.
        a.cap = unsafe { (*q).caps };
        Ok(q.cast())
    })
}

/// The `ibv_wr_*` operations softrdma carries (`enum ibv_qp_create_send_ops_flags`):
/// WRITE, WRITE with immediate, SEND, SEND with immediate, READ, both atomics, and SEND
/// with invalidate. Not local invalidate, memory-window binds, TSO or ATOMIC_WRITE.
const SEND_OPS_SUPPORTED: u64 = 0x7f | (1 << 9);

/// `verbs_context.create_qp_ex` (`ibv_create_qp_ex`).
pub(crate) unsafe extern "C" fn create_qp_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    entry("ibv_create_qp_ex", Ret::NULL, |v| {
        v.ensure(
            !ctx.is_null() && !attr.is_null(),
            libc::EINVAL,
            &"NULL argument",
        )?;
        // SAFETY: a context the caller got from this library.
        unsafe { own::<SoftContext>(v, ctx) }?;
        // SAFETY: the caller's attr.
        let a = unsafe { &mut *attr };
        const PD: u32 = IBV_QP_INIT_ATTR_PD;
        const CREATE_FLAGS: u32 = IBV_QP_INIT_ATTR_CREATE_FLAGS;
        const SEND_OPS_FLAGS: u32 = IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        v.ensure(
            a.comp_mask & !(PD | CREATE_FLAGS | SEND_OPS_FLAGS) == 0,
            libc::EOPNOTSUPP,
            &format_args!(
                "comp_mask {:#x}: XRC, RSS and TSO are not implemented",
                a.comp_mask
            ),
        )?;
        v.ensure(
            a.comp_mask & PD != 0,
            libc::EINVAL,
            &"no PD (IBV_QP_INIT_ATTR_PD)",
        )?;
        v.ensure(
            a.comp_mask & CREATE_FLAGS == 0 || a.create_flags == 0,
            libc::EOPNOTSUPP,
            &format_args!("create_flags {:#x}", a.create_flags),
        )?;
        v.ensure(
            a.comp_mask & SEND_OPS_FLAGS == 0 || a.send_ops_flags & !SEND_OPS_SUPPORTED == 0,
            libc::EOPNOTSUPP,
            &format_args!("send_ops_flags {:#x}", a.send_ops_flags),
        )?;
        let c = Create {
            pd: a.pd,
            qp_context: a.qp_context,
            send_cq: a.send_cq,
            recv_cq: a.recv_cq,
            srq: a.srq,
            cap: a.cap,
            qp_type: a.qp_type,
            sq_sig_all: a.sq_sig_all != 0,
        };
        let q = create(v, c)?;
        // SAFETY: just created.
        unsafe {
            a.cap = (*q).caps;
            (*q).qp.comp_mask = 0;
        }
        Ok(q.cast())
    })
}

/// `ibv_qp_to_qp_ex`: every QP of softrdma is extended.
pub unsafe extern "C" fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
    qp.cast()
}

/// `ibv_destroy_qp`.
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    entry("ibv_destroy_qp", Ret::ERRNO, |v| {
        // SAFETY: NULL or a QP the caller got from this library.
        if unsafe { to_destroy::<SoftQp>(v, qp) }?.is_none() {
            return Ok(0);
        }
        // SAFETY: from create's box, freed once; the PD, CQs and SRQ it counts are alive.
        let q = unsafe { SoftQp::free(qp) };
        let b = &q.qp.qp_base;
        // SAFETY: as above.
        unsafe {
            SoftContext::from_ptr(b.context)
                .qps
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&b.qp_num);
            SoftPd::from_ptr(b.pd).users.remove();
            SoftCq::from_ptr(b.send_cq).users.remove();
            SoftCq::from_ptr(b.recv_cq).users.remove();
            if let Some(s) = b.srq.cast::<SoftSrq>().as_ref() {
                s.users.remove();
            }
        }
        drop(q);
        Ok(0)
    })
}

/// Writes `o` to the caller's `ibv_qp_attr` up to `rate_limit`, which is not written:
/// programs built against rdma-core 12 and older pass a struct that ends before it, and
/// rdma-core never fills it in a query either.
///
/// # Safety
/// `attr` points to a writable `ibv_qp_attr` of at least that old size.
pub(crate) unsafe fn write_qp_attr(attr: *mut ibv_qp_attr, o: &ibv_qp_attr) {
    let n = std::mem::offset_of!(ibv_qp_attr, rate_limit);
    // SAFETY: `n` bytes of `o` into the caller's struct, which has them (per the contract).
    unsafe {
        std::ptr::copy_nonoverlapping((o as *const ibv_qp_attr).cast::<u8>(), attr.cast::<u8>(), n)
    };
}

/// The local address of GID `index` of the context's table: the device's one address,
/// whichever GID names it (the packets' IP source, which their ICRC covers).
fn gid_addr(soft: &SoftContext, index: usize) -> Option<IpAddr> {
    (index < soft.ctx.gids().len()).then(|| soft.ctx.addr())
}

/// `ibv_modify_qp`: the attributes `mask` names, checked by the engine against the
/// transition table of IBTA 11.2.5.2 (EINVAL for one it does not allow).
pub unsafe extern "C" fn ibv_modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
) -> c_int {
    entry("ibv_modify_qp", Ret::ERRNO, |v| {
        v.ensure(
            !qp.is_null() && !attr.is_null(),
            libc::EINVAL,
            &"NULL argument",
        )?;
        // SAFETY: a QP the caller got from this library.
        let q = unsafe { own::<SoftQp>(v, qp) }?;
        // SAFETY: the caller's attr.
        let a = unsafe { &*attr };
        let has = |bit: c_int| mask & bit != 0;
        // The attributes up to IBV_QP_DEST_QPN, and a rate limit of 0 (none).
        let known = (IBV_QP_DEST_QPN << 1) - 1;
        v.ensure(
            mask & !known & !IBV_QP_RATE_LIMIT == 0
                && !(has(IBV_QP_RATE_LIMIT) && a.rate_limit != 0),
            libc::EOPNOTSUPP,
            &format_args!(
                "attr_mask {:#x}: rate limits are not implemented",
                mask as u32
            ),
        )?;
        let bad = |what: &str| v.fail(libc::EINVAL, &format_args!("invalid {what}"));
        let mut r = QpAttr::default();
        if has(IBV_QP_STATE) {
            r.state = Some(qp_state(a.qp_state).ok_or_else(|| bad("qp_state"))?);
        }
        if has(IBV_QP_CUR_STATE) {
            r.cur_state = Some(qp_state(a.cur_qp_state).ok_or_else(|| bad("cur_qp_state"))?);
        }
        if has(IBV_QP_EN_SQD_ASYNC_NOTIFY) {
            r.en_sqd_async_notify = Some(a.en_sqd_async_notify != 0);
        }
        if has(IBV_QP_ACCESS_FLAGS) {
            let f = AccessFlags::from_bits(a.qp_access_flags & 0xf);
            r.access_flags = Some(f.ok_or_else(|| bad("qp_access_flags"))?);
        }
        if has(IBV_QP_PKEY_INDEX) {
            r.pkey_index = Some(a.pkey_index);
        }
        if has(IBV_QP_PORT) {
            r.port = Some(a.port_num);
        }
        if has(IBV_QP_QKEY) {
            r.qkey = Some(a.qkey);
        }
        if has(IBV_QP_AV) {
            // SAFETY: the QP's live context.
            let soft = unsafe { SoftContext::from_ptr(q.qp.qp_base.context) };
            let (dgid, sgid_index) = crate::mr::ah_path(v, &a.ah_attr, soft)?;
            let src = gid_addr(soft, sgid_index).ok_or_else(|| bad("ah_attr.grh.sgid_index"))?;
            r.av = Some(AddressVector {
                src,
                dst: soft.ctx.gid_addr(dgid),
                flow_label: a.ah_attr.grh.flow_label & 0xf_ffff,
                traffic_class: a.ah_attr.grh.traffic_class,
            });
        }
        if has(IBV_QP_PATH_MTU) {
            r.path_mtu = Some(mtu(a.path_mtu).ok_or_else(|| bad("path_mtu"))?);
        }
        if has(IBV_QP_TIMEOUT) {
            r.timeout = Some(a.timeout);
        }
        if has(IBV_QP_RETRY_CNT) {
            r.retry_cnt = Some(a.retry_cnt);
        }
        if has(IBV_QP_RNR_RETRY) {
            r.rnr_retry = Some(a.rnr_retry);
        }
        if has(IBV_QP_RQ_PSN) {
            r.rq_psn = Some(Psn::new(a.rq_psn & 0xff_ffff));
        }
        if has(IBV_QP_MAX_QP_RD_ATOMIC) {
            r.max_rd_atomic = Some(a.max_rd_atomic);
        }
        v.ensure(
            !has(IBV_QP_ALT_PATH) && !has(IBV_QP_PATH_MIG_STATE),
            libc::EINVAL,
            &"alternate paths and path migration are not supported on RoCE",
        )?;
        if has(IBV_QP_MIN_RNR_TIMER) {
            r.min_rnr_timer = Some(a.min_rnr_timer);
        }
        if has(IBV_QP_SQ_PSN) {
            r.sq_psn = Some(Psn::new(a.sq_psn & 0xff_ffff));
        }
        if has(IBV_QP_MAX_DEST_RD_ATOMIC) {
            r.max_dest_rd_atomic = Some(a.max_dest_rd_atomic);
        }
        if has(IBV_QP_CAP) {
            return Err(bad("IBV_QP_CAP (the caps are fixed at creation)"));
        }
        if has(IBV_QP_DEST_QPN) {
            r.dest_qpn = Some(Qpn::new(a.dest_qp_num & 0xff_ffff));
        }
        v.check(q.inner.modify(&r))?;
        if let Some(s) = r.state {
            // SAFETY: the caller's live QP; `state` is the field callers read.
            unsafe { (*qp).state = s as c_int };
        }
        Ok(0)
    })
}

fn gid_of(ip: IpAddr) -> ibv_gid {
    ibv_gid {
        raw: crate::mr::gid_of_ip(ip).octets(),
    }
}

/// `ibv_query_qp`: every attribute in force (whatever `mask` asks), and the creation
/// attributes.
pub unsafe extern "C" fn ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
    init: *mut ibv_qp_init_attr,
) -> c_int {
    entry("ibv_query_qp", Ret::ERRNO, |v| {
        v.ensure(
            !qp.is_null() && !attr.is_null() && !init.is_null(),
            libc::EINVAL,
            &"NULL argument",
        )?;
        // As rdma-core's ibv_cmd_query_qp: IBV_QP_RATE_LIMIT and later bits cannot be
        // queried (their fields may lie past the caller's struct).
        v.ensure(
            mask & !(IBV_QP_RATE_LIMIT - 1) == 0,
            libc::EOPNOTSUPP,
            &format_args!("attr_mask {mask:#x} asks for IBV_QP_RATE_LIMIT or later"),
        )?;
        // SAFETY: live QP.
        let q = unsafe { SoftQp::from_ptr(qp) };
        let b = &q.qp.qp_base;
        // SAFETY: live context.
        let soft = unsafe { SoftContext::from_ptr(b.context) };
        let r = q.inner.query();
        let (mut o, _) = to_ibv_qp_attr(&r, soft);
        o.cap = q.caps;
        // SAFETY: the caller's writable structs.
        unsafe {
            write_qp_attr(attr, &o);
            let i = &mut *init;
            i.qp_context = b.qp_context;
            i.send_cq = b.send_cq;
            i.recv_cq = b.recv_cq;
            i.srq = b.srq;
            i.cap = q.caps;
            i.qp_type = b.qp_type;
            i.sq_sig_all = c_int::from(q.sq_sig_all);
        }
        Ok(0)
    })
}

/// `attr` as C's `ibv_qp_attr`, with the `IBV_QP_*` mask of the attributes it sets
/// (unset ones read as their defaults: the state RESET, the device's MTU, port 1).
pub(crate) fn to_ibv_qp_attr(r: &QpAttr, soft: &SoftContext) -> (ibv_qp_attr, c_int) {
    let mut m = 0;
    let mut bit = |set: bool, b: c_int| {
        if set {
            m |= b;
        }
    };
    bit(r.state.is_some(), IBV_QP_STATE);
    bit(r.access_flags.is_some(), IBV_QP_ACCESS_FLAGS);
    bit(r.pkey_index.is_some(), IBV_QP_PKEY_INDEX);
    bit(r.port.is_some(), IBV_QP_PORT);
    bit(r.qkey.is_some(), IBV_QP_QKEY);
    bit(r.av.is_some(), IBV_QP_AV);
    bit(r.path_mtu.is_some(), IBV_QP_PATH_MTU);
    bit(r.timeout.is_some(), IBV_QP_TIMEOUT);
    bit(r.retry_cnt.is_some(), IBV_QP_RETRY_CNT);
    bit(r.rnr_retry.is_some(), IBV_QP_RNR_RETRY);
    bit(r.rq_psn.is_some(), IBV_QP_RQ_PSN);
    bit(r.max_rd_atomic.is_some(), IBV_QP_MAX_QP_RD_ATOMIC);
    bit(r.min_rnr_timer.is_some(), IBV_QP_MIN_RNR_TIMER);
    bit(r.sq_psn.is_some(), IBV_QP_SQ_PSN);
    bit(r.max_dest_rd_atomic.is_some(), IBV_QP_MAX_DEST_RD_ATOMIC);
    bit(r.dest_qpn.is_some(), IBV_QP_DEST_QPN);
    {
        let mut o = ibv_qp_attr::default();
        let state = r.state.unwrap_or(QpState::Reset);
        o.qp_state = state as c_int;
        o.cur_qp_state = state as c_int;
        o.path_mtu = r.path_mtu.unwrap_or(soft.ctx.active_mtu()) as c_int;
        o.path_mig_state = 0; // IBV_MIG_MIGRATED: there is no alternate path
        o.qkey = r.qkey.unwrap_or(0);
        o.rq_psn = r.rq_psn.map_or(0, |p| p.value());
        o.sq_psn = r.sq_psn.map_or(0, |p| p.value());
        o.dest_qp_num = r.dest_qpn.map_or(0, |n| n.value());
        o.qp_access_flags = r.access_flags.map_or(0, |f| f.bits());
        if let Some(av) = r.av {
            o.ah_attr = ibv_ah_attr {
                grh: ibv_global_route {
                    dgid: gid_of(av.dst),
                    flow_label: av.flow_label,
                    sgid_index: soft.gid_index(av.src).unwrap_or(0) as u8,
                    hop_limit: 1,
                    traffic_class: av.traffic_class,
                },
                is_global: 1,
                port_num: 1,
                ..Default::default()
            };
        }
        o.pkey_index = r.pkey_index.unwrap_or(0);
        o.en_sqd_async_notify = u8::from(r.en_sqd_async_notify.unwrap_or(false));
        o.max_rd_atomic = r.max_rd_atomic.unwrap_or(0);
        o.max_dest_rd_atomic = r.max_dest_rd_atomic.unwrap_or(0);
        o.min_rnr_timer = r.min_rnr_timer.unwrap_or(0);
        o.port_num = r.port.unwrap_or(1);
        o.timeout = r.timeout.unwrap_or(0);
        o.retry_cnt = r.retry_cnt.unwrap_or(0);
        o.rnr_retry = r.rnr_retry.unwrap_or(0);
        (o, m)
    }
}

/// The SGEs of a WR.
///
/// # Safety
/// `sg` must point at `n` SGEs (or `n` is 0).
unsafe fn sges(sg: *const ibv_sge, n: c_int, max: u32) -> Result<softrdma::SgList, c_int> {
    // Checked before the list is read: a count past the queue's limit (garbage, or a
    // program's bug) must not make this read past the caller's array.
    if n < 0 || n as u32 > max || (n > 0 && sg.is_null()) {
        return Err(libc::EINVAL);
    }
    if n == 0 {
        return Ok(softrdma::SgList::new());
    }
    // SAFETY: per the contract.
    let s = unsafe { std::slice::from_raw_parts(sg, n as usize) };
    Ok(s.iter()
        .map(|e| Sge {
            addr: e.addr,
            length: e.length,
            lkey: e.lkey,
        })
        .collect())
}

/// The bytes an inline send carries, copied from the SGEs' addresses (whose keys an
/// inline send does not need).
///
/// # Safety
/// Each SGE must name `length` readable bytes at `addr`.
unsafe fn inline(s: &[Sge], max: u32) -> Result<Vec<u8>, c_int> {
    // The length is checked before anything is read or allocated, as rxe and mlx5 check
    // it against the QP's max_inline_data.
    let total: u64 = s.iter().map(|e| u64::from(e.length)).sum();
    if total > u64::from(max) {
        return Err(libc::EINVAL);
    }
    let mut v = Vec::with_capacity(total as usize);
    // An empty SGE may have a NULL address (UCX posts them), which no slice may have.
    for e in s.iter().filter(|e| e.length > 0) {
        // SAFETY: per the contract (the C API's: an inline send reads the caller's memory
        // during the post).
        v.extend_from_slice(unsafe {
            std::slice::from_raw_parts(e.addr as *const u8, e.length as usize)
        });
    }
    Ok(v)
}

/// The [`SendWr`] of an `ibv_send_wr`.
///
/// # Safety
/// `w` and what it points at must be valid, as the C API requires.
unsafe fn send_wr(q: &SoftQp, w: &ibv_send_wr) -> Result<SendWr, c_int> {
    // SAFETY: per the contract.
    let s = unsafe { sges(w.sg_list, w.num_sge, q.caps.max_send_sge) }?;
    let flags = SendFlags::from_bits_truncate(w.send_flags & 0xf);
    // SAFETY: the union member the opcode names.
    let (rdma, atomic) = unsafe { (w.wr.rdma, w.wr.atomic) };
    let imm = u32::from_be(w.imm_data);
    let op = match w.opcode {
        0 => SendOp::Write {
            remote_addr: rdma.remote_addr,
            rkey: rdma.rkey,
        },
        1 => SendOp::WriteWithImm {
            remote_addr: rdma.remote_addr,
            rkey: rdma.rkey,
            imm,
        },
        2 => SendOp::Send,
        3 => SendOp::SendWithImm(imm),
        4 => SendOp::Read {
            remote_addr: rdma.remote_addr,
            rkey: rdma.rkey,
        },
        5 => SendOp::CompareSwap {
            remote_addr: atomic.remote_addr,
            rkey: atomic.rkey,
            compare: atomic.compare_add,
            swap: atomic.swap,
        },
        6 => SendOp::FetchAdd {
            remote_addr: atomic.remote_addr,
            rkey: atomic.rkey,
            add: atomic.compare_add,
        },
        9 => SendOp::SendWithInv(w.imm_data),
        _ => return Err(libc::EINVAL),
    };
    let payload = if flags.contains(SendFlags::INLINE) && !op.is_read_or_atomic() {
        // SAFETY: per the contract.
        Payload::Inline(unsafe { inline(&s, q.caps.max_inline_data) }?)
    } else {
        Payload::Sges(s)
    };
    let ud = if q.qp.qp_base.qp_type == IBV_QPT_UD {
        // SAFETY: the UD member, for a UD QP.
        let ud = unsafe { w.wr.ud };
        if ud.ah.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: a live AH of the caller's.
        let ah = unsafe { SoftAh::from_ptr(ud.ah) };
        Some(
            ah.inner
                .dest(Qpn::new(ud.remote_qpn & 0xff_ffff), ud.remote_qkey),
        )
    } else {
        None
    };
    Ok(SendWr {
        wr_id: w.wr_id,
        op,
        payload,
        flags,
        ud,
    })
}

/// Names the WR a post stopped at in the caller's `bad`, if it gave one.
///
/// # Safety
/// `bad` is NULL or the caller's writable out-pointer.
unsafe fn set_bad<W>(bad: *mut *mut W, wr: *mut W) {
    if !bad.is_null() {
        // SAFETY: per the contract.
        unsafe { *bad = wr };
    }
}

/// The QP or SRQ a post is on ([`own`]): a parent's in a forked child is refused, `bad`
/// naming the first WR.
///
/// # Safety
/// `p` is a live object of this library; `bad` NULL or the caller's writable out-pointer.
unsafe fn poster<'a, O: OfContext, W>(
    v: Verb,
    p: *mut O::C,
    wr: *mut W,
    bad: *mut *mut W,
) -> Result<&'a O, Failed> {
    // SAFETY: per the contract.
    match unsafe { own::<O>(v, p) } {
        Ok(o) => Ok(o),
        Err(f) => {
            // SAFETY: per the contract.
            unsafe { set_bad(bad, wr) };
            Err(f)
        }
    }
}

/// `ctx->ops.post_send` (`ibv_post_send`).
pub(crate) unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> c_int {
    entry("ibv_post_send", Ret::ERRNO, |v| {
        // SAFETY: a QP the caller got from this library, and its out-pointer.
        let q = unsafe { poster::<SoftQp, _>(v, qp, wr, bad) }?;
        if wr.is_null() {
            return Ok(0);
        }
        // SAFETY: the caller's WR.
        let first = unsafe { &*wr };
        if first.next.is_null() {
            // The common case, one WR: no list.
            // SAFETY: the caller's WR, as the C API requires.
            let r = unsafe { send_wr(q, first) }
                .and_then(|w| v.check(q.inner.post_send(w)).map_err(Failed::errno));
            if let Err(errno) = r {
                // SAFETY: the caller's out-pointer.
                unsafe { set_bad(bad, wr) };
                return v.err(errno, &"WR refused");
            }
            return Ok(0);
        }
        let mut ptrs = Vec::new();
        let mut wrs = Vec::new();
        let mut broken = None;
        let mut p = wr;
        while !p.is_null() {
            // SAFETY: the caller's chain.
            let w = unsafe { &*p };
            // SAFETY: as the C API requires.
            match unsafe { send_wr(q, w) } {
                Ok(s) => {
                    wrs.push(s);
                    ptrs.push(p);
                }
                Err(errno) => {
                    broken = Some((p, errno));
                    break;
                }
            }
            p = w.next;
        }
        if let Err((i, e)) = q.inner.post_send_list(wrs) {
            // SAFETY: the caller's out-pointer.
            unsafe { set_bad(bad, ptrs[i]) };
            return Err(v.error(&e));
        }
        match broken {
            Some((p, errno)) => {
                // SAFETY: the caller's out-pointer.
                unsafe { set_bad(bad, p) };
                v.err(errno, &"WR refused (opcode, SGEs or AH)")
            }
            None => Ok(0),
        }
    })
}

/// The [`RecvWr`]s of a chain, each handed to `post` in order; the first failure sets
/// `bad`.
///
/// # Safety
/// The chain must be valid, as the C API requires.
unsafe fn post_recv_chain(
    v: Verb,
    max_sge: u32,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
    post: impl Fn(RecvWr) -> softrdma::Result<()>,
) -> Result<c_int, Failed> {
    let mut p = wr;
    while !p.is_null() {
        // SAFETY: per the contract.
        let w = unsafe { &*p };
        // SAFETY: per the contract.
        let r = match unsafe { sges(w.sg_list, w.num_sge, max_sge) } {
            Ok(s) => v.check(post(RecvWr {
                wr_id: w.wr_id,
                sg_list: s,
            })),
            Err(errno) => v.err(errno, &"bad sg_list"),
        };
        if let Err(f) = r {
            // SAFETY: the caller's out-pointer.
            unsafe { set_bad(bad, p) };
            return Err(f);
        }
        p = w.next;
    }
    Ok(0)
}

/// `ctx->ops.post_recv` (`ibv_post_recv`).
pub(crate) unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    entry("ibv_post_recv", Ret::ERRNO, |v| {
        // SAFETY: a QP the caller got from this library, and its out-pointer.
        let q = unsafe { poster::<SoftQp, _>(v, qp, wr, bad) }?;
        // SAFETY: as the C API requires.
        unsafe { post_recv_chain(v, q.caps.max_recv_sge, wr, bad, |w| q.inner.post_recv(w)) }
    })
}

/// `ctx->ops.post_srq_recv` (`ibv_post_srq_recv`).
pub(crate) unsafe extern "C" fn post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    entry("ibv_post_srq_recv", Ret::ERRNO, |v| {
        // SAFETY: an SRQ the caller got from this library, and its out-pointer.
        let s = unsafe { poster::<SoftSrq, _>(v, srq, wr, bad) }?;
        let max = s.attr.lock().unwrap_or_else(|e| e.into_inner()).max_sge;
        // SAFETY: as the C API requires.
        unsafe { post_recv_chain(v, max, wr, bad, |w| s.inner.post_recv(w)) }
    })
}

fn new_srq(
    v: Verb,
    pd: *mut ibv_pd,
    srq_context: *mut c_void,
    attr: &mut ibv_srq_attr,
) -> Result<*mut ibv_srq, Failed> {
    // SAFETY: NULL or a PD the caller got from this library.
    let spd = unsafe { live::<SoftPd>(v, pd) }?;
    let inner = v.check(spd.inner.create_srq(attr.max_wr, attr.max_sge.max(1)))?;
    if attr.srq_limit > 0 {
        inner.arm_limit(attr.srq_limit);
    }
    spd.users.add();
    attr.max_sge = attr.max_sge.max(1);
    // SAFETY: pointers, ints and pthread objects (initialised below).
    let mut s: ibv_srq = unsafe { std::mem::zeroed() };
    s.context = spd.pd.context;
    s.srq_context = srq_context;
    s.pd = pd;
    s.handle = next_handle();
    s.mutex = libc::PTHREAD_MUTEX_INITIALIZER;
    s.cond = libc::PTHREAD_COND_INITIALIZER;
    let ctx = s.context;
    let p = SoftSrq {
        srq: s,
        inner,
        attr: Mutex::new(*attr),
        users: Users::default(),
    }
    .into_c();
    // SAFETY: the PD's live context.
    unsafe { SoftContext::from_ptr(ctx) }
        .srqs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(p as usize);
    Ok(p)
}

/// `ibv_create_srq`.
pub unsafe extern "C" fn ibv_create_srq(
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> *mut ibv_srq {
    entry("ibv_create_srq", Ret::NULL, |v| {
        v.ensure(!attr.is_null(), libc::EINVAL, &"NULL attr")?;
        // SAFETY: the caller's attr.
        let a = unsafe { &mut *attr };
        new_srq(v, pd, a.srq_context, &mut a.attr)
    })
}

/// `verbs_context.create_srq_ex`: basic SRQs (XRC and tag matching are not implemented).
pub(crate) unsafe extern "C" fn create_srq_ex(
    _ctx: *mut ibv_context,
    attr: *mut ibv_srq_init_attr_ex,
) -> *mut ibv_srq {
    entry("ibv_create_srq_ex", Ret::NULL, |v| {
        v.ensure(!attr.is_null(), libc::EINVAL, &"NULL attr")?;
        // SAFETY: the caller's attr.
        let a = unsafe { &mut *attr };
        const TYPE: u32 = IBV_SRQ_INIT_ATTR_TYPE;
        const PD: u32 = IBV_SRQ_INIT_ATTR_PD;
        v.ensure(
            a.comp_mask & !(TYPE | PD) == 0
                && (a.comp_mask & TYPE == 0 || a.srq_type == IBV_SRQT_BASIC),
            libc::EOPNOTSUPP,
            &"XRC and tag-matching SRQs are not implemented",
        )?;
        v.ensure(a.comp_mask & PD != 0, libc::EINVAL, &"no PD")?;
        new_srq(v, a.pd, a.srq_context, &mut a.attr)
    })
}

/// `verbs_context.get_srq_num`: XRC only.
pub(crate) unsafe extern "C" fn get_srq_num(_srq: *mut ibv_srq, _num: *mut u32) -> c_int {
    entry("ibv_get_srq_num", Ret::ERRNO, |v| {
        v.err(libc::EOPNOTSUPP, &"XRC is not implemented")
    })
}

/// `ibv_modify_srq`: arming the limit (`IBV_SRQ_LIMIT`); resizing (`IBV_SRQ_MAX_WR`) is not
/// implemented.
pub unsafe extern "C" fn ibv_modify_srq(
    srq: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
    mask: c_int,
) -> c_int {
    entry("ibv_modify_srq", Ret::ERRNO, |v| {
        v.ensure(
            !srq.is_null() && !attr.is_null(),
            libc::EINVAL,
            &"NULL argument",
        )?;
        // SAFETY: an SRQ the caller got from this library.
        let s = unsafe { own::<SoftSrq>(v, srq) }?;
        // SAFETY: the caller's attr.
        let a = unsafe { &*attr };
        v.ensure(
            mask & IBV_SRQ_MAX_WR == 0,
            libc::EOPNOTSUPP,
            &"resizing an SRQ is not implemented",
        )?;
        if mask & IBV_SRQ_LIMIT != 0 {
            let mut mine = s.attr.lock().unwrap_or_else(|e| e.into_inner());
            v.ensure(
                a.srq_limit <= mine.max_wr,
                libc::EINVAL,
                &"srq_limit above max_wr",
            )?;
            mine.srq_limit = a.srq_limit;
            s.inner.arm_limit(a.srq_limit);
        }
        Ok(0)
    })
}

/// `ibv_query_srq`.
pub unsafe extern "C" fn ibv_query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    entry("ibv_query_srq", Ret::ERRNO, |v| {
        v.ensure(
            !srq.is_null() && !attr.is_null(),
            libc::EINVAL,
            &"NULL argument",
        )?;
        // SAFETY: live SRQ; the caller's attr.
        unsafe {
            *attr = *SoftSrq::from_ptr(srq)
                .attr
                .lock()
                .unwrap_or_else(|e| e.into_inner())
        };
        Ok(0)
    })
}

/// `ibv_destroy_srq`: EBUSY while QPs use it.
pub unsafe extern "C" fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
    entry("ibv_destroy_srq", Ret::ERRNO, |v| {
        // SAFETY: NULL or an SRQ the caller got from this library.
        let Some(s) = unsafe { to_destroy::<SoftSrq>(v, srq) }? else {
            return Ok(0);
        };
        v.ensure(s.users.count() == 0, libc::EBUSY, &"QPs still use the SRQ")?;
        // SAFETY: the SRQ's live context.
        unsafe { SoftContext::from_ptr(s.srq.context) }
            .srqs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|&x| x != srq as usize);
        // SAFETY: from new_srq's box, freed once; its PD is alive (counted).
        let s = unsafe { SoftSrq::free(srq) };
        // SAFETY: as above.
        unsafe { SoftPd::from_ptr(s.srq.pd) }.users.remove();
        Ok(0)
    })
}

// The `ibv_wr_*` builders of an extended QP. Each appends to or edits the QP's batch;
// `ibv_wr_complete` posts the batch as one chain.

fn qpx<'a>(qp: *mut ibv_qp_ex) -> &'a SoftQp {
    // SAFETY: the builders are called on a live QP of ours.
    unsafe { SoftQp::from_ptr(qp.cast()) }
}

fn push(qp: *mut ibv_qp_ex, op: SendOp) {
    entry("ibv_wr_*", Ret::VOID, |_| {
        let q = qpx(qp);
        let wr = SendWr {
            wr_id: q.qp.wr_id,
            op,
            payload: Payload::Sges(softrdma::sg![]),
            flags: SendFlags::from_bits_truncate(q.qp.wr_flags & 0xf),
            ud: None,
        };
        q.batch.lock().unwrap_or_else(|e| e.into_inner()).0.push(wr);
        Ok(())
    })
}

fn edit(qp: *mut ibv_qp_ex, f: impl FnOnce(&mut SendWr)) {
    entry("ibv_wr_set_*", Ret::VOID, |_| {
        let mut b = qpx(qp).batch.lock().unwrap_or_else(|e| e.into_inner());
        let (wrs, err) = &mut *b;
        match wrs.last_mut() {
            Some(w) => f(w),
            None => *err = libc::EINVAL,
        }
        Ok(())
    })
}

unsafe extern "C" fn wr_start(qp: *mut ibv_qp_ex) {
    entry("ibv_wr_start", Ret::VOID, |_| {
        *qpx(qp).batch.lock().unwrap_or_else(|e| e.into_inner()) = (Vec::new(), 0);
        Ok(())
    })
}

unsafe extern "C" fn wr_complete(qp: *mut ibv_qp_ex) -> c_int {
    entry("ibv_wr_complete", Ret::ERRNO, |v| {
        // SAFETY: a QP the caller got from this library.
        let q = unsafe { own::<SoftQp>(v, qp.cast()) }?;
        let (wrs, err) = std::mem::take(&mut *q.batch.lock().unwrap_or_else(|e| e.into_inner()));
        v.ensure(err == 0, err, &"a builder call had no WR to apply to")?;
        q.inner.post_send_list(wrs).map_err(|(_, e)| v.error(&e))?;
        Ok(0)
    })
}

unsafe extern "C" fn wr_abort(qp: *mut ibv_qp_ex) {
    // SAFETY: forwarded.
    unsafe { wr_start(qp) }
}

unsafe extern "C" fn wr_send(qp: *mut ibv_qp_ex) {
    push(qp, SendOp::Send)
}
unsafe extern "C" fn wr_send_imm(qp: *mut ibv_qp_ex, imm: u32) {
    push(qp, SendOp::SendWithImm(u32::from_be(imm)))
}
unsafe extern "C" fn wr_send_inv(qp: *mut ibv_qp_ex, rkey: u32) {
    push(qp, SendOp::SendWithInv(rkey))
}
unsafe extern "C" fn wr_rdma_write(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    push(qp, SendOp::Write { remote_addr, rkey })
}
unsafe extern "C" fn wr_rdma_write_imm(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, imm: u32) {
    push(
        qp,
        SendOp::WriteWithImm {
            remote_addr,
            rkey,
            imm: u32::from_be(imm),
        },
    )
}
unsafe extern "C" fn wr_rdma_read(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    push(qp, SendOp::Read { remote_addr, rkey })
}
unsafe extern "C" fn wr_atomic_cmp_swp(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    compare: u64,
    swap: u64,
) {
    push(
        qp,
        SendOp::CompareSwap {
            remote_addr,
            rkey,
            compare,
            swap,
        },
    )
}
unsafe extern "C" fn wr_atomic_fetch_add(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    add: u64,
) {
    push(
        qp,
        SendOp::FetchAdd {
            remote_addr,
            rkey,
            add,
        },
    )
}
unsafe extern "C" fn wr_set_sge(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    edit(qp, |w| {
        w.payload = Payload::Sges(softrdma::sg![Sge { addr, length, lkey }])
    })
}
/// Fails the batch being built (its `ibv_wr_complete` returns EINVAL).
fn refuse_in_batch(qp: *mut ibv_qp_ex) {
    entry("ibv_wr_set_*", Ret::VOID, |_| {
        qpx(qp).batch.lock().unwrap_or_else(|e| e.into_inner()).1 = libc::EINVAL;
        Ok(())
    })
}
unsafe extern "C" fn wr_set_sge_list(qp: *mut ibv_qp_ex, n: usize, list: *const ibv_sge) {
    let max = qpx(qp).caps.max_send_sge;
    // SAFETY: the caller's `n` SGEs.
    match unsafe { sges(list, n.min(c_int::MAX as usize) as c_int, max) } {
        Ok(s) => edit(qp, |w| w.payload = Payload::Sges(s)),
        Err(_) => refuse_in_batch(qp),
    }
}
unsafe extern "C" fn wr_set_inline_data(qp: *mut ibv_qp_ex, addr: *mut c_void, length: usize) {
    let s = [Sge {
        addr: addr as u64,
        length: length.min(u32::MAX as usize) as u32,
        lkey: 0,
    }];
    let max = if length > u32::MAX as usize {
        0
    } else {
        qpx(qp).caps.max_inline_data
    };
    // SAFETY: the caller's `length` bytes at `addr`, read now as the API says.
    match unsafe { inline(&s, max) } {
        Ok(data) => edit(qp, |w| w.payload = Payload::Inline(data)),
        Err(_) => refuse_in_batch(qp),
    }
}
unsafe extern "C" fn wr_set_inline_data_list(
    qp: *mut ibv_qp_ex,
    n: usize,
    list: *const ibv_data_buf,
) {
    let caps = qpx(qp).caps;
    // No more buffers than a WR has SGEs, checked before the list is read.
    if n > caps.max_send_sge as usize || (n > 0 && list.is_null()) {
        return refuse_in_batch(qp);
    }
    let bufs = if n == 0 {
        &[][..]
    } else {
        // SAFETY: the caller's `n` buffers.
        unsafe { std::slice::from_raw_parts(list, n) }
    };
    let s: softrdma::SgList = bufs
        .iter()
        .map(|b| Sge {
            addr: b.addr as u64,
            length: b.length.min(u32::MAX as usize) as u32,
            lkey: 0,
        })
        .collect();
    let too_long = bufs.iter().any(|b| b.length > u32::MAX as usize);
    let max = if too_long { 0 } else { caps.max_inline_data };
    // SAFETY: the caller's buffers, read now.
    match unsafe { inline(&s, max) } {
        Ok(data) => edit(qp, |w| w.payload = Payload::Inline(data)),
        Err(_) => refuse_in_batch(qp),
    }
}
unsafe extern "C" fn wr_set_ud_addr(qp: *mut ibv_qp_ex, ah: *mut ibv_ah, qpn: u32, qkey: u32) {
    if ah.is_null() {
        edit(qp, |_| {});
        return;
    }
    // SAFETY: a live AH of the caller's.
    let dest = unsafe { SoftAh::from_ptr(ah) }
        .inner
        .dest(Qpn::new(qpn & 0xff_ffff), qkey);
    edit(qp, |w| w.ud = Some(dest))
}

fn set_builders(q: &mut ibv_qp_ex) {
    q.wr_start = Some(wr_start);
    q.wr_complete = Some(wr_complete);
    q.wr_abort = Some(wr_abort);
    q.wr_send = Some(wr_send);
    q.wr_send_imm = Some(wr_send_imm);
    q.wr_send_inv = Some(wr_send_inv);
    q.wr_rdma_write = Some(wr_rdma_write);
    q.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    q.wr_rdma_read = Some(wr_rdma_read);
    q.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    q.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    q.wr_set_sge = Some(wr_set_sge);
    q.wr_set_sge_list = Some(wr_set_sge_list);
    q.wr_set_inline_data = Some(wr_set_inline_data);
    q.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    q.wr_set_ud_addr = Some(wr_set_ud_addr);
}

/// The SRQ whose limit event has just been raised: armed by the application, and
/// disarmed since (the engine disarms a limit as it raises its event). Its limit then
/// reads 0, as IBTA 11.5.2.4 has it after the event.
pub(crate) fn srq_that_reached_its_limit(soft: &SoftContext) -> *mut ibv_srq {
    let srqs = soft.srqs.lock().unwrap_or_else(|e| e.into_inner());
    for &p in srqs.iter() {
        // SAFETY: a live SRQ of this context (destroy removes it from the list first).
        let s = unsafe { &*(p as *const SoftSrq) };
        let mut a = s.attr.lock().unwrap_or_else(|e| e.into_inner());
        if a.srq_limit > 0 && !s.inner.limit_armed() {
            a.srq_limit = 0;
            return p as *mut ibv_srq;
        }
    }
    null_mut()
}

/// The QP with number `qpn` of a context, for an async event.
pub(crate) fn qp_by_num(soft: &SoftContext, qpn: u32) -> *mut ibv_qp {
    soft.qps
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&qpn)
        .map_or(null_mut(), |p| *p as *mut ibv_qp)
}

/// `ibv_attach_mcast` and `ibv_detach_mcast`: `lid` is the group's MLID, which RoCE does
/// not use (the GID names the group).
fn mcast(v: Verb, qp: *mut ibv_qp, gid: *const ibv_gid, attach: bool) -> Result<c_int, Failed> {
    v.ensure(
        !qp.is_null() && !gid.is_null(),
        libc::EINVAL,
        &"NULL argument",
    )?;
    // SAFETY: a QP the caller got from this library.
    let q = unsafe { own::<SoftQp>(v, qp) }?;
    // SAFETY: the caller's GID.
    let g = std::net::Ipv6Addr::from(unsafe { (*gid).raw });
    v.check(if attach {
        q.inner.attach_mcast(g)
    } else {
        q.inner.detach_mcast(g)
    })?;
    Ok(0)
}

/// `ibv_attach_mcast` (see [`softrdma::QueuePair::attach_mcast`]).
pub unsafe extern "C" fn ibv_attach_mcast(
    qp: *mut ibv_qp,
    gid: *const ibv_gid,
    _lid: u16,
) -> c_int {
    entry("ibv_attach_mcast", Ret::ERRNO, |v| mcast(v, qp, gid, true))
}

/// `ibv_detach_mcast`.
pub unsafe extern "C" fn ibv_detach_mcast(
    qp: *mut ibv_qp,
    gid: *const ibv_gid,
    _lid: u16,
) -> c_int {
    entry("ibv_detach_mcast", Ret::ERRNO, |v| mcast(v, qp, gid, false))
}
