//! Multicast groups of a UD QP: `ibv_attach_mcast` and `ibv_detach_mcast`.

use super::context::own;
use super::objects::SoftQp;
use crate::abi::*;
use crate::ffi::{Failed, Ret, Verb, entry};
use std::ffi::c_int;

/// `ibv_attach_mcast` and `ibv_detach_mcast`: `lid` is the group's MLID, which RoCE does
/// not use (the GID names the group).
fn mcast(v: Verb, qp: *mut ibv_qp, gid: *const ibv_gid, attach: bool) -> Result<c_int, Failed> {
    v.non_null(&[qp.cast(), gid.cast()])?;
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
