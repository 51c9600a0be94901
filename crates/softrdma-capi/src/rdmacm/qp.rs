//! The QP and SRQ of an ID: `rdma_create_qp` (a QP the connection manager moves through
//! its states as the connection forms), its SRQ, and `rdma_init_qp_attr` for a caller that
//! moves a QP of its own.

use super::device::default_pd;
use super::id::{IdC, destroy_own_cqs, made};
use crate::abi::*;
use crate::ffi::{Failed, Object, Ret, Verb, entry};
use crate::verbs::context::SoftContext;
use crate::verbs::objects::SoftQp;
use std::ffi::c_int;
use std::ptr::null_mut;

/// `rdma_create_qp`: a QP on `pd` (or the ID's PD) that the CM moves to RTS as the
/// connection forms; `attr.cap` gets what was given.
///
/// # Safety
/// `id` an ID of this library; `pd` NULL or a PD of this library; `attr` valid.
pub unsafe extern "C" fn rdma_create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> c_int {
    entry("rdma_create_qp", Ret::MINUS_ONE, |v| {
        // SAFETY: per the contract.
        let c = unsafe { IdC::from_ptr_mut(id) };
        let r = made(v, c)?;
        v.ensure(!attr.is_null(), libc::EINVAL, &"NULL attributes")?;
        // As librdmacm: no PD is the device's default PD, and a missing CQ is made for the
        // ID (cmtime gives neither).
        let pd = id_pd(c, pd);
        v.ensure(!pd.is_null(), libc::EINVAL, &"no PD")?;
        // SAFETY: the caller's attributes.
        let a = unsafe { &mut *attr };
        // As librdmacm: the ID's SRQ (rdma_create_srq), unless the caller names one.
        if a.srq.is_null() {
            a.srq = c.id.srq.cast();
        }
        for (send, cq, depth) in [
            (true, &mut a.send_cq, a.cap.max_send_wr),
            (false, &mut a.recv_cq, a.cap.max_recv_wr),
        ] {
            if cq.is_null() {
                // As librdmacm's ucma_create_cqs: each with a completion channel, and the
                // ID as its context (rdma_get_recv_comp asserts both).
                // SAFETY: the ID's context.
                let ch = unsafe { crate::verbs::cq::ibv_create_comp_channel(c.id.verbs) };
                if ch.is_null() {
                    destroy_own_cqs(c);
                    return Err(Failed::recorded());
                }
                c.own_cq_chans.push(ch);
                if send {
                    c.id.send_cq_channel = ch.cast();
                } else {
                    c.id.recv_cq_channel = ch.cast();
                }
                // SAFETY: the ID's context and the channel just made.
                let made = unsafe {
                    crate::verbs::cq::ibv_create_cq(
                        c.id.verbs,
                        depth.max(1) as c_int,
                        (c as *mut IdC).cast(),
                        ch,
                        0,
                    )
                };
                if made.is_null() {
                    destroy_own_cqs(c);
                    return Err(Failed::recorded());
                }
                c.own_cqs.push(made);
                *cq = made;
            }
        }

        // SAFETY: the PD and the caller's attributes.
        let qp = unsafe { crate::verbs::qp::ibv_create_qp(pd, attr) };
        if qp.is_null() {
            destroy_own_cqs(c);
            return Err(Failed::recorded());
        }
        // SAFETY: just made by this library.
        let soft = unsafe { SoftQp::from_ptr(qp) };
        if let Err(e) = r.attach_qp(&soft.inner) {
            let f = v.error(&e);
            // SAFETY: just made, not handed out.
            unsafe { crate::verbs::qp::ibv_destroy_qp(qp) };
            destroy_own_cqs(c);
            return Err(f);
        }
        c.id.qp = qp;
        c.id.pd = pd;
        // SAFETY: the caller's attributes, as ibv_create_qp left them.
        let a = unsafe { &*attr };
        c.id.send_cq = a.send_cq.cast();
        c.id.recv_cq = a.recv_cq.cast();
        c.id.qp_type = a.qp_type;
        Ok(0)
    })
}

/// `rdma_create_qp_ex`: as [`rdma_create_qp`], from the extended attributes (PD, CQs,
/// caps and type; nothing else is taken).
///
/// # Safety
/// `id` an ID of this library; `attr` valid.
pub unsafe extern "C" fn rdma_create_qp_ex(
    id: *mut rdma_cm_id,
    attr: *mut ibv_qp_init_attr_ex,
) -> c_int {
    entry("rdma_create_qp_ex", Ret::MINUS_ONE, |v| {
        // SAFETY: the caller's attributes.
        let a = unsafe { v.arg(attr, "attr") }?;
        let mut init = a.basic();
        let pd = if a.comp_mask & IBV_QP_INIT_ATTR_PD != 0 {
            a.pd
        } else {
            null_mut()
        };
        // SAFETY: per the contract.
        let rc = unsafe { rdma_create_qp(id, pd, &mut init) };
        a.cap = init.cap;
        Ok(rc)
    })
}

/// `rdma_destroy_qp`.
///
/// # Safety
/// `id` an ID of this library.
pub unsafe extern "C" fn rdma_destroy_qp(id: *mut rdma_cm_id) {
    entry("rdma_destroy_qp", Ret::VOID, |_| {
        // SAFETY: per the contract.
        let c = unsafe { IdC::from_ptr_mut(id) };
        if let Some(r) = c.rust.lock().as_ref() {
            r.detach_qp();
        }
        if !c.id.qp.is_null() {
            // SAFETY: the QP rdma_create_qp made, destroyed once.
            unsafe { crate::verbs::qp::ibv_destroy_qp(c.id.qp) };
            c.id.qp = null_mut();
        }
        destroy_own_cqs(c);
        Ok(())
    })
}

/// The PD a verb on the ID uses: the caller's, else the ID's, else the device's default
/// (librdmacm's order).
fn id_pd(c: &IdC, pd: *mut ibv_pd) -> *mut ibv_pd {
    match (pd.is_null(), c.id.pd.is_null()) {
        (false, _) => pd,
        (true, false) => c.id.pd,
        (true, true) => default_pd(c.id.verbs),
    }
}

/// `rdma_create_srq`: a basic SRQ on the ID's device, on `pd` (NULL: the ID's PD, or the
/// device's default as librdmacm's), which `rdma_create_qp` gives the ID's QP when its
/// attributes name none; `attr.attr` gets what was given.
///
/// # Safety
/// `id` an ID of this library; `pd` NULL or a PD of this library; `attr` valid.
pub unsafe extern "C" fn rdma_create_srq(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> c_int {
    entry("rdma_create_srq", Ret::MINUS_ONE, |v| {
        // SAFETY: per the contract.
        unsafe { create_srq(v, id, pd, v.arg(attr, "attributes")?) }
    })
}

/// `rdma_create_srq_ex`: [`rdma_create_srq`] from the extended attributes, which must
/// name the SRQ's type; only basic SRQs (XRC ones are EOPNOTSUPP, as `ibv_create_srq_ex`).
///
/// # Safety
/// `id` an ID of this library; `attr` valid, its PD NULL or one of this library's.
pub unsafe extern "C" fn rdma_create_srq_ex(
    id: *mut rdma_cm_id,
    attr: *mut ibv_srq_init_attr_ex,
) -> c_int {
    entry("rdma_create_srq_ex", Ret::MINUS_ONE, |v| {
        // SAFETY: the caller's attributes.
        let a = unsafe { v.arg(attr, "attributes") }?;
        v.ensure(
            a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE != 0,
            libc::EINVAL,
            &"no SRQ type (IBV_SRQ_INIT_ATTR_TYPE)",
        )?;
        v.ensure(
            a.srq_type == IBV_SRQT_BASIC,
            libc::EOPNOTSUPP,
            &format_args!("SRQ type {}: only basic SRQs", a.srq_type),
        )?;
        let pd = if a.comp_mask & IBV_SRQ_INIT_ATTR_PD != 0 {
            a.pd
        } else {
            null_mut()
        };
        let mut init = ibv_srq_init_attr {
            srq_context: a.srq_context,
            attr: a.attr,
        };
        // SAFETY: per the contract.
        let rc = unsafe { create_srq(v, id, pd, &mut init) };
        a.attr = init.attr;
        rc?;
        // SAFETY: per the contract.
        a.pd = unsafe { (*id).pd };
        a.comp_mask |= IBV_SRQ_INIT_ATTR_PD;
        Ok(0)
    })
}

/// The SRQ of both entry points.
///
/// # Safety
/// `id` an ID of this library; `pd` NULL or a PD of this library.
unsafe fn create_srq(
    v: Verb,
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: &mut ibv_srq_init_attr,
) -> Result<c_int, Failed> {
    // SAFETY: per the contract.
    let c = unsafe { IdC::from_ptr_mut(id) };
    made(v, c)?;
    v.ensure(
        c.id.srq.is_null(),
        libc::EEXIST,
        &"the ID has an SRQ already (rdma_destroy_srq first)",
    )?;
    let pd = id_pd(c, pd);
    v.ensure(!pd.is_null(), libc::EINVAL, &"no PD")?;
    // SAFETY: a PD of this library and the caller's attributes.
    let srq = unsafe { crate::verbs::srq::ibv_create_srq(pd, attr) };
    if srq.is_null() {
        return Err(Failed::recorded());
    }
    c.id.srq = srq.cast();
    if c.id.pd.is_null() {
        c.id.pd = pd;
    }
    Ok(0)
}

/// `rdma_destroy_srq`: destroys the SRQ `rdma_create_srq` made for the ID (its QP must
/// be gone first, as `ibv_destroy_srq` requires).
///
/// # Safety
/// `id` an ID of this library.
pub unsafe extern "C" fn rdma_destroy_srq(id: *mut rdma_cm_id) {
    entry("rdma_destroy_srq", Ret::VOID, |_| {
        // SAFETY: per the contract.
        let c = unsafe { IdC::from_ptr_mut(id) };
        if !c.id.srq.is_null() {
            // SAFETY: the SRQ rdma_create_srq made, destroyed once.
            unsafe { crate::verbs::srq::ibv_destroy_srq(c.id.srq.cast()) };
            c.id.srq = null_mut();
        }
        Ok(())
    })
}

/// `rdma_init_qp_attr`: the attributes (and mask) that move the ID's QP to
/// `qp_attr->qp_state` (INIT, RTR or RTS), for a caller that moves a QP of its own.
///
/// # Safety
/// `id` an ID of this library; `qp_attr` and `mask` valid.
pub unsafe extern "C" fn rdma_init_qp_attr(
    id: *mut rdma_cm_id,
    qp_attr: *mut ibv_qp_attr,
    mask: *mut c_int,
) -> c_int {
    entry("rdma_init_qp_attr", Ret::MINUS_ONE, |v| {
        v.non_null(&[id.cast(), qp_attr.cast(), mask.cast()])?;
        // SAFETY: per the contract.
        let c = unsafe { IdC::from_ptr(id) };
        let r = made(v, c)?;
        // SAFETY: the caller's attributes.
        let want = unsafe { (*qp_attr).qp_state };
        let state = match want {
            IBV_QPS_INIT => softrdma::QpState::Init,
            IBV_QPS_RTR => softrdma::QpState::Rtr,
            IBV_QPS_RTS => softrdma::QpState::Rts,
            s => return v.err(libc::EINVAL, &format_args!("QP state {s}")),
        };
        let a = v.check(r.init_qp_attr(state))?;
        // SAFETY: the ID's context is this library's.
        let soft = unsafe { SoftContext::from_ptr(c.id.verbs) };
        let (out, m) = crate::verbs::qp_attr::to_ibv_qp_attr(&a, soft);
        // SAFETY: the caller's writable attributes and mask.
        unsafe {
            crate::verbs::qp_attr::write_qp_attr(qp_attr, &out);
            *mask = m;
        }
        Ok(0)
    })
}
