//! The devices of the connection manager: each opened once per process and kept open, as
//! librdmacm keeps its devices (`rdma_get_devices` lists them), and the choice of an ID's
//! device by its address.

use crate::abi::*;
use crate::ffi::{Ret, entry, null_terminated};
use softrdma::cm::CmId;
use softrdma::sync::{Lock, Rank};
use std::ffi::c_int;
use std::net::{IpAddr, Ipv6Addr};
use std::ptr::null_mut;

/// The context the CM keeps open for device `index` (opened on first use, never
/// closed: librdmacm keeps its devices open too).
pub(super) fn cm_context(index: usize) -> *mut ibv_context {
    static OPEN: Lock<Vec<(u32, usize, usize)>> = Lock::new(Rank::CapiCmContexts, Vec::new());
    let generation = crate::verbs::fork::generation();
    let mut open = OPEN.lock();
    if let Some((_, _, c)) = open
        .iter()
        .find(|(g, i, _)| *g == generation && *i == index)
    {
        return *c as *mut ibv_context;
    }
    let Some(d) = crate::verbs::context::devices().get(index) else {
        return null_mut();
    };
    // SAFETY: a device of this process's list.
    let ctx = unsafe { crate::verbs::device::ibv_open_device((&raw const d.dev).cast_mut()) };
    if !ctx.is_null() {
        open.push((generation, index, ctx as usize));
    }
    ctx
}

/// The device for an address: the one that has it; for 0.0.0.0 the first IPv4 device
/// (else the first); for `::` or no address, the first.
pub(super) fn device_for(ip: Option<IpAddr>) -> Option<usize> {
    let devs = crate::verbs::context::devices();
    match ip {
        Some(IpAddr::V4(v4)) if v4.is_unspecified() => devs
            .iter()
            .position(|d| d.info.addr.to_canonical().is_ipv4())
            .or((!devs.is_empty()).then_some(0)),
        Some(ip) if !ip.is_unspecified() => {
            let ip = ip.to_canonical();
            devs.iter().position(|d| d.info.addr == ip)
        }
        _ => (!devs.is_empty()).then_some(0),
    }
}

/// The address of the device an ID on `localhost` (127.0.0.1 or ::1) takes when no
/// device has that address: as Linux's `cma_bind_loopback` and `cma_resolve_loopback` give such an ID a
/// device of their choosing and connect it to itself, the first device on a loopback
/// address of the same family (then on any loopback address, then the first device).
/// libfabric's verbs provider binds `localhost` this way to find a device when the
/// program names no address, and pyverbs connects to its netdev's, lo's 127.0.0.1.
///
/// Only `localhost` itself: the rest of 127.0.0.0/8 names softrdma devices, which may be
/// another process's (each a host of its own), not this one.
pub(super) fn loopback_device(ip: IpAddr) -> Option<IpAddr> {
    let devs = crate::verbs::context::devices();
    let ip = ip.to_canonical();
    let localhost =
        ip == IpAddr::V4(std::net::Ipv4Addr::LOCALHOST) || ip == IpAddr::V6(Ipv6Addr::LOCALHOST);
    if !localhost || devs.iter().any(|d| d.info.addr.to_canonical() == ip) {
        return None;
    }
    let on_lo = |d: &&crate::verbs::context::SoftDevice| d.info.addr.to_canonical().is_loopback();
    let family = |d: &&crate::verbs::context::SoftDevice| {
        d.info.addr.to_canonical().is_ipv4() == ip.is_ipv4()
    };
    devs.iter()
        .find(|d| on_lo(d) && family(d))
        .or_else(|| devs.iter().find(|d| on_lo(d)))
        .or(devs.first())
        .map(|d| d.info.addr)
}

/// The context the CM keeps open for `id`'s device.
pub(super) fn context_of(id: &CmId) -> Option<*mut ibv_context> {
    let addr = id.context().addr();
    let i = crate::verbs::context::devices()
        .iter()
        .position(|d| d.info.addr == addr)?;
    let ctx = cm_context(i);
    (!ctx.is_null()).then_some(ctx)
}

/// The address of the device on the kernel's route to `dst` (see
/// `softrdma::config::route_device`); `None` when no device is on that route (or the
/// kernel has none to `dst`).
pub(super) fn route_source_device(dst: IpAddr) -> Option<IpAddr> {
    let devs = crate::verbs::context::devices();
    let infos: Vec<softrdma::config::DeviceInfo> = devs.iter().map(|d| d.info.clone()).collect();
    softrdma::config::route_device(&infos, dst).map(|i| infos[i].addr)
}

/// The PD the CM gives each context (`crate::verbs::pd::library_pd`): every ID on the device has
/// it as `id->pd` until a QP of the caller's PD replaces it, and QPs created without a PD
/// use it.
pub(super) fn default_pd(ctx: *mut ibv_context) -> *mut ibv_pd {
    crate::verbs::pd::library_pd(ctx)
}

/// `rdma_get_devices`: a NULL-terminated array of the contexts the connection manager
/// keeps open for each device (`id->verbs` of an ID on that device is the same pointer).
/// As with librdmacm, the contexts belong to the library and outlive the array: libfabric's
/// verbs provider frees the array and goes on using the contexts for its domains.
pub unsafe extern "C" fn rdma_get_devices(num: *mut c_int) -> *mut *mut crate::abi::ibv_context {
    entry("rdma_get_devices", Ret::NULL, |v| {
        let count = crate::verbs::context::devices().len();
        let open: Vec<_> = (0..count)
            .map(cm_context)
            .filter(|c| !c.is_null())
            .collect();
        let list = null_terminated(&open);
        if list.is_null() {
            return Err(v.quiet(libc::ENOMEM));
        }
        if !num.is_null() {
            // SAFETY: the caller's int.
            unsafe { *num = open.len() as c_int };
        }
        Ok(list)
    })
}

/// `rdma_free_devices`: frees the array of `rdma_get_devices`. The contexts in it stay
/// open (they are the connection manager's, as in librdmacm).
pub unsafe extern "C" fn rdma_free_devices(list: *mut *mut crate::abi::ibv_context) {
    entry("rdma_free_devices", Ret::VOID, |_| {
        // SAFETY: calloc'ed by rdma_get_devices (or NULL, which free ignores).
        unsafe { libc::free(list.cast()) };
        Ok(())
    })
}
