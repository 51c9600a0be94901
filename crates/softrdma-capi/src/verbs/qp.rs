//! Queue pairs: creation (every QP is an `ibv_qp_ex`, with its `ibv_wr_*` builders) and
//! destruction. Their attributes are in [`super::qp_attr`], their posts in [`super::post`].

use super::context::{SoftContext, own, to_destroy};
use super::objects::{SoftCq, SoftPd, SoftQp, SoftSrq, next_handle};
use super::qp_ex::set_builders;
use crate::abi::*;
use crate::ffi::{Failed, Object, Ret, Verb, entry};
use softrdma::sync::{Lock, Rank};
use softrdma::{QpCaps, QpInitAttr, QpType};
use std::ffi::c_int;
use std::ptr::null_mut;

fn qp_type(t: c_int) -> Option<QpType> {
    match t {
        IBV_QPT_RC => Some(QpType::Rc),
        IBV_QPT_UC => Some(QpType::Uc),
        IBV_QPT_UD => Some(QpType::Ud),
        _ => None,
    }
}

/// A QP on `pd` with the attributes `c` (of `ibv_create_qp`, or those of
/// `ibv_create_qp_ex` that it has too).
fn create(v: Verb, pd_ptr: *mut ibv_pd, c: &ibv_qp_init_attr) -> Result<*mut SoftQp, Failed> {
    v.ensure(
        !pd_ptr.is_null() && !c.send_cq.is_null() && !c.recv_cq.is_null(),
        libc::EINVAL,
        &"NULL PD or CQ",
    )?;
    // SAFETY: a PD the caller got from this library.
    let pd = unsafe { own::<SoftPd>(v, pd_ptr) }?;
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
            SoftSrq::from_nullable(c.srq),
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
        sq_sig_all: c.sq_sig_all != 0,
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
    b.pd = pd_ptr;
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
        sq_sig_all: c.sq_sig_all != 0,
        batch: Lock::new(Rank::CapiQpBatch, (Vec::new(), 0)),
    }
    .into_c();
    // SAFETY: live context.
    let sc = unsafe { SoftContext::from_ptr(ctx) };
    sc.qps.lock().insert(qpn, soft as usize);
    Ok(soft.cast())
}

/// `ibv_create_qp`: the caps actually given are written back to `attr.cap`.
pub unsafe extern "C" fn ibv_create_qp(
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    entry("ibv_create_qp", Ret::NULL, |v| {
        // SAFETY: the caller's attr.
        let a = unsafe { v.arg(attr, "attr") }?;
        let q = create(v, pd, a)?;
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
        v.non_null(&[ctx.cast(), attr.cast()])?;
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
        let q = create(v, a.pd, &a.basic())?;
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
                .remove(&b.qp_num);
            SoftPd::from_ptr(b.pd).users.remove();
            SoftCq::from_ptr(b.send_cq).users.remove();
            SoftCq::from_ptr(b.recv_cq).users.remove();
            if let Some(s) = SoftSrq::from_nullable(b.srq) {
                s.users.remove();
            }
        }
        drop(q);
        Ok(0)
    })
}

/// The QP with number `qpn` of a context, for an async event.
pub(crate) fn qp_by_num(soft: &SoftContext, qpn: u32) -> *mut ibv_qp {
    soft.qps
        .lock()
        .get(&qpn)
        .map_or(null_mut(), |p| *p as *mut ibv_qp)
}
