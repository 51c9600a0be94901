//! Multicast on an ID: `rdma_join_multicast` (and `_ex`, with join flags) and
//! `rdma_leave_multicast`.

use super::event::complete;
use super::id::{IdC, made};
use crate::abi::*;
use crate::ffi::{Failed, Object, Ret, Verb, entry, from_sockaddr};
use std::ffi::{c_int, c_void};

/// `rdma_join_multicast`: joins the group at `addr` as a full member (see
/// `softrdma::cm::CmId::join_multicast`); a MULTICAST_JOIN event follows, whose
/// `param.ud.private_data` is `context`.
///
/// # Safety
/// `id` an ID of this library; `addr` a sockaddr.
pub unsafe extern "C" fn rdma_join_multicast(
    id: *mut rdma_cm_id,
    addr: *mut libc::sockaddr,
    context: *mut c_void,
) -> c_int {
    entry("rdma_join_multicast", Ret::MINUS_ONE, |v| {
        // SAFETY: per the contract.
        unsafe { join(v, id, addr, false, context) }
    })
}

/// `rdma_join_multicast_ex`: [`rdma_join_multicast`] with join flags (a send-only full
/// member's QP is not attached to the group).
///
/// # Safety
/// `id` an ID of this library; `attr` NULL or valid, its `addr` a sockaddr.
pub unsafe extern "C" fn rdma_join_multicast_ex(
    id: *mut rdma_cm_id,
    attr: *mut rdma_cm_join_mc_attr_ex,
    context: *mut c_void,
) -> c_int {
    entry("rdma_join_multicast_ex", Ret::MINUS_ONE, |v| {
        // SAFETY: the caller's attributes.
        let a = unsafe { v.arg(attr, "attributes") }?;
        v.ensure(
            a.comp_mask < RDMA_CM_JOIN_MC_ATTR_RESERVED,
            libc::EOPNOTSUPP,
            &format_args!("comp_mask {:#x}", a.comp_mask),
        )?;
        v.ensure(
            a.comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS != 0,
            libc::EINVAL,
            &"no address (RDMA_CM_JOIN_MC_ATTR_ADDRESS)",
        )?;
        v.ensure(
            a.comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS != 0
                && a.join_flags < RDMA_MC_JOIN_FLAG_RESERVED,
            libc::EINVAL,
            &format_args!("join flags {:#x}", a.join_flags),
        )?;
        // SAFETY: per the contract.
        unsafe {
            join(
                v,
                id,
                a.addr,
                a.join_flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER,
                context,
            )
        }
    })
}

/// The joins of both entry points.
///
/// # Safety
/// `id` an ID of this library; `addr` a sockaddr.
unsafe fn join(
    v: Verb,
    id: *mut rdma_cm_id,
    addr: *mut libc::sockaddr,
    send_only: bool,
    context: *mut c_void,
) -> Result<c_int, Failed> {
    // SAFETY: per the contract.
    let (c, a) = unsafe { (IdC::from_ptr_mut(id), from_sockaddr(addr)) };
    let Some(a) = a else {
        return v.err(libc::EINVAL, &"the group is not an IPv4 or IPv6 address");
    };
    let r = made(v, c)?;
    let group = a.ip().to_canonical();
    // Known before the event can be converted on another thread.
    c.groups.lock().push((group, context as usize));
    if let Err(f) = v.check(r.join_multicast(group, send_only)) {
        c.groups.lock().retain(|(g, _)| *g != group);
        return Err(f);
    }
    complete(v, c)?;
    Ok(0)
}

/// `rdma_leave_multicast`: the ID's QP is detached from the group; EADDRNOTAVAIL if it
/// was not joined.
///
/// # Safety
/// `id` an ID of this library; `addr` a sockaddr.
pub unsafe extern "C" fn rdma_leave_multicast(
    id: *mut rdma_cm_id,
    addr: *mut libc::sockaddr,
) -> c_int {
    entry("rdma_leave_multicast", Ret::MINUS_ONE, |v| {
        // SAFETY: per the contract.
        let (c, a) = unsafe { (IdC::from_ptr(id), from_sockaddr(addr)) };
        let Some(a) = a else {
            return v.err(libc::EINVAL, &"the group is not an IPv4 or IPv6 address");
        };
        let r = made(v, c)?;
        let group = a.ip().to_canonical();
        v.check(r.leave_multicast(group))?;
        c.groups.lock().retain(|(g, _)| *g != group);
        Ok(0)
    })
}
