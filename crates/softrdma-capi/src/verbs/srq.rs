//! Shared receive queues: basic SRQs with their limit event (XRC and tag matching are not
//! implemented).

use super::context::{SoftContext, live, own, to_destroy};
use super::objects::{SoftPd, SoftSrq, next_handle};
use crate::abi::*;
use crate::ffi::{Failed, Object, Ret, Users, Verb, entry};
use softrdma::sync::{Lock, Rank};
use std::ffi::{c_int, c_void};
use std::ptr::null_mut;

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
        attr: Lock::new(Rank::CapiSrqAttr, *attr),
        users: Users::default(),
    }
    .into_c();
    // SAFETY: the PD's live context.
    unsafe { SoftContext::from_ptr(ctx) }
        .srqs
        .lock()
        .push(p as usize);
    Ok(p)
}

/// `ibv_create_srq`.
pub unsafe extern "C" fn ibv_create_srq(
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> *mut ibv_srq {
    entry("ibv_create_srq", Ret::NULL, |v| {
        // SAFETY: the caller's attr.
        let a = unsafe { v.arg(attr, "attr") }?;
        new_srq(v, pd, a.srq_context, &mut a.attr)
    })
}

/// `verbs_context.create_srq_ex`: basic SRQs (XRC and tag matching are not implemented).
pub(crate) unsafe extern "C" fn create_srq_ex(
    _ctx: *mut ibv_context,
    attr: *mut ibv_srq_init_attr_ex,
) -> *mut ibv_srq {
    entry("ibv_create_srq_ex", Ret::NULL, |v| {
        // SAFETY: the caller's attr.
        let a = unsafe { v.arg(attr, "attr") }?;
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
        v.non_null(&[srq.cast(), attr.cast()])?;
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
            let mut mine = s.attr.lock();
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
        v.non_null(&[srq.cast(), attr.cast()])?;
        // SAFETY: live SRQ; the caller's attr.
        unsafe { *attr = *SoftSrq::from_ptr(srq).attr.lock() };
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
        s.users.ensure_none(v, "QPs still use the SRQ")?;
        // SAFETY: the SRQ's live context.
        unsafe { SoftContext::from_ptr(s.srq.context) }
            .srqs
            .lock()
            .retain(|&x| x != srq as usize);
        // SAFETY: from new_srq's box, freed once; its PD is alive (counted).
        let s = unsafe { SoftSrq::free(srq) };
        // SAFETY: as above.
        unsafe { SoftPd::from_ptr(s.srq.pd) }.users.remove();
        Ok(0)
    })
}

/// The SRQ whose limit event has just been raised: armed by the application, and
/// disarmed since (the engine disarms a limit as it raises its event). Its limit then
/// reads 0, as IBTA 11.5.2.4 has it after the event.
pub(crate) fn srq_that_reached_its_limit(soft: &SoftContext) -> *mut ibv_srq {
    let srqs = soft.srqs.lock();
    for &p in srqs.iter() {
        // SAFETY: a live SRQ of this context (destroy removes it from the list first).
        let s = unsafe { SoftSrq::from_ptr(p as *mut ibv_srq) };
        let mut a = s.attr.lock();
        if a.srq_limit > 0 && !s.inner.limit_armed() {
            a.srq_limit = 0;
            return p as *mut ibv_srq;
        }
    }
    null_mut()
}
