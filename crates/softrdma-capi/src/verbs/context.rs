//! The devices and their contexts, which every verb reaches its objects through.
//!
//! The device list is read once per process from softrdma's configuration (the config
//! file, or `softrdma0` on `$SOFTRDMA_ADDR` / 127.0.0.1) and lives until the process ends,
//! as rdma-core's does. Every context of one device in a process shares one soft device
//! (one UDP port): it is opened by the first `ibv_open_device` and closed by the last
//! `ibv_close_device`, under the device's `open` lock.
//!
//! Every object of a context begins with the context's pointer ([`OfContext`]), which is
//! how [`live`], [`own`] and [`to_destroy`] tell a parent's objects in a forked child (see
//! `super::fork`).

use super::fork::generation;
use crate::abi::*;
use crate::ffi::{Failed, Object, Verb, copy_cstr};
use softrdma::config::DeviceInfo;
use softrdma::sync::{Lock, Rank};
use std::collections::HashMap;
use std::ffi::c_void;
use std::net::IpAddr;
use std::ptr::null_mut;

/// One device of the list: the public `ibv_device`, the NULL word where rdma-core keeps
/// its driver ops (`VERBS_DEVICE_OPS_OFFSET`), then softrdma's own state.
#[repr(C)]
pub(crate) struct SoftDevice {
    pub dev: ibv_device,
    verbs_ops: *mut c_void,
    pub info: DeviceInfo,
    pub index: usize,
    /// The open soft device and how many contexts use it.
    pub(super) open: Lock<Option<(softrdma::Context, usize)>>,
}

// SAFETY: the raw pointers in `dev` are the NULL reserved words, never dereferenced; the
// rest is Sync on its own.
unsafe impl Sync for SoftDevice {}
// SAFETY: as above.
unsafe impl Send for SoftDevice {}

const _: () = assert!(std::mem::offset_of!(SoftDevice, verbs_ops) == VERBS_DEVICE_OPS_OFFSET);

/// The device lists of this process, one per generation, each leaked: a parent's
/// `ibv_device` pointers stay valid in a child.
static LISTS: Lock<Vec<(u32, &'static [SoftDevice])>> =
    Lock::new(Rank::CapiDeviceLists, Vec::new());

/// Every device of every generation.
fn all_devices() -> impl Iterator<Item = &'static SoftDevice> {
    let lists: Vec<&'static [SoftDevice]> = LISTS.lock().iter().map(|(_, l)| *l).collect();
    lists.into_iter().flatten()
}

/// The devices of this process (of its generation), made once per generation.
pub(crate) fn devices() -> &'static [SoftDevice] {
    super::fork::watch();
    let now = generation();
    let mut lists = LISTS.lock();
    if let Some((_, l)) = lists.iter().find(|(g, _)| *g == now) {
        return l;
    }
    let list: &'static [SoftDevice] = Vec::leak(make_devices());
    lists.push((now, list));
    list
}

fn make_devices() -> Vec<SoftDevice> {
    let infos = softrdma::config::devices().unwrap_or_else(|e| {
        eprintln!("softrdma: no devices: {e}");
        Vec::new()
    });
    infos
        .into_iter()
        .enumerate()
        .map(|(index, info)| {
            // SAFETY: ibv_device is plain data (ints, chars, NULL pointers): all-zero
            // bytes are a valid value.
            let mut dev: ibv_device = unsafe { std::mem::zeroed() };
            dev.node_type = 1; // IBV_NODE_CA
            dev.transport_type = 0; // IBV_TRANSPORT_IB, as rxe
            copy_cstr(&mut dev.name, &info.name);
            copy_cstr(&mut dev.dev_name, &format!("uverbs{index}"));
            copy_cstr(
                &mut dev.dev_path,
                &format!("/sys/class/infiniband_verbs/uverbs{index}"),
            );
            copy_cstr(
                &mut dev.ibdev_path,
                &format!("/sys/class/infiniband/{}", info.name),
            );
            SoftDevice {
                dev,
                verbs_ops: null_mut(),
                info,
                index,
                open: Lock::new(Rank::CapiDeviceOpen, None),
            }
        })
        .collect()
}

/// The device behind `dev`, if it is one of ours: in a forked child, the child's own
/// device of that name when `dev` is a parent's.
pub(crate) fn device(dev: *const ibv_device) -> Option<&'static SoftDevice> {
    let d = all_devices().find(|d| std::ptr::eq(&d.dev, dev))?;
    devices().iter().find(|c| c.info.name == d.info.name)
}

/// An open context: the `verbs_context` the application's `ibv_context *` points into,
/// then softrdma's state.
#[repr(C)]
pub(crate) struct SoftContext {
    pub vctx: verbs_context,
    pub ctx: softrdma::Context,
    /// This context's own asynchronous events and `async_fd` (as each rdma-core context
    /// has: programs key handlers by that descriptor).
    pub events: std::sync::Arc<softrdma::AsyncEventQueue>,
    pub dev: &'static SoftDevice,
    /// QPN → the `SoftQp` (as an address), to name the QP of an async event.
    pub qps: Lock<HashMap<u32, usize>>,
    /// The live CQs and SRQs (as addresses), to name the object of a CQ error or an SRQ
    /// limit event, whose engine events do not say which.
    pub cqs: Lock<Vec<usize>>,
    /// See `cqs`.
    pub srqs: Lock<Vec<usize>>,
    /// The process generation that opened it (see [`own`]).
    pub generation: u32,
}

// SAFETY: the application's `ibv_context *` is the `vctx.context` inside the box, which
// each method finds the box from.
unsafe impl Object for SoftContext {
    type C = ibv_context;
    const WHAT: &'static str = "context";

    fn into_c(self) -> *mut ibv_context {
        let soft = Box::into_raw(Box::new(self));
        // SAFETY: `soft` is a live allocation; the context lives inside it.
        unsafe { &raw mut (*soft).vctx.context }
    }

    unsafe fn from_ptr<'a>(ctx: *mut ibv_context) -> &'a SoftContext {
        // SAFETY: per the contract.
        unsafe { &*Self::container(ctx) }
    }

    unsafe fn from_ptr_mut<'a>(ctx: *mut ibv_context) -> &'a mut SoftContext {
        // SAFETY: per the contract.
        unsafe { &mut *Self::container(ctx) }
    }

    unsafe fn free(ctx: *mut ibv_context) -> Box<SoftContext> {
        // SAFETY: per the contract: the box into_c made.
        unsafe { Box::from_raw(Self::container(ctx)) }
    }
}

// SAFETY: a context is its own.
unsafe impl OfContext for SoftContext {
    unsafe fn context_of(ctx: *mut ibv_context) -> *mut ibv_context {
        ctx
    }
}

impl SoftContext {
    /// The `SoftContext` whose `vctx.context` field `ctx` points at (pointer arithmetic
    /// only; nothing is read).
    fn container(ctx: *mut ibv_context) -> *mut SoftContext {
        let off =
            std::mem::offset_of!(SoftContext, vctx) + std::mem::offset_of!(verbs_context, context);
        ctx.wrapping_byte_sub(off).cast()
    }

    /// The index of the table's GID of `ip` (IPv4 mapped), if it has one.
    pub(crate) fn gid_index(&self, ip: IpAddr) -> Option<usize> {
        let gid = gid_of_ip(ip);
        self.ctx.gids().iter().position(|g| *g == gid)
    }
}

/// The GID of an IP address, as RoCE v2 carries it: the kernel backend's mapping.
pub(crate) use softrdma::kernel::convert::gid_of_ip;

/// A verbs object of this library, made on a context: its public struct begins with the
/// context's pointer, as every verbs object's does (and a context is its own).
///
/// # Safety
/// [`OfContext::context_of`] finds the context of a live object.
pub(crate) unsafe trait OfContext: Object {
    /// The context `p` was made on.
    ///
    /// # Safety
    /// `p` is a live object of this library.
    unsafe fn context_of(p: *mut Self::C) -> *mut ibv_context {
        // SAFETY: per the contract and the trait's, it begins with its context's pointer.
        unsafe { *p.cast::<*mut ibv_context>() }
    }
}

/// Whether `p`, an object of this library (or NULL), was made before this process was
/// forked from its maker.
///
/// # Safety
/// `p` is NULL or a live object of this library.
unsafe fn inherited<O: OfContext>(p: *mut O::C) -> bool {
    let now = generation();
    if now == 0 || p.is_null() {
        return false;
    }
    // SAFETY: per the contract.
    let ctx = unsafe { O::context_of(p) };
    // SAFETY: a live context of ours.
    !ctx.is_null() && unsafe { SoftContext::from_ptr(ctx) }.generation != now
}

/// The answer of a verb on a parent's object in a forked child (see `super::fork`).
pub(crate) fn refuse_inherited(v: Verb) -> Failed {
    v.fail(
        libc::EPERM,
        &"the object belongs to the process this one was forked from; open the device again in this process",
    )
}

/// The caller's object `p`, for a verb on it: EINVAL when it is NULL, EPERM when it is a
/// parent's (see `super::fork`).
///
/// # Safety
/// `p` is NULL or a live object of this library.
pub(crate) unsafe fn live<'a, O: OfContext>(v: Verb, p: *mut O::C) -> Result<&'a O, Failed> {
    v.ensure(
        !p.is_null(),
        libc::EINVAL,
        &format_args!("NULL {}", O::WHAT),
    )?;
    // SAFETY: per the contract, and not NULL.
    unsafe { own(v, p) }
}

/// The caller's object `p`, for a verb on it: EPERM when it is a parent's. NULL is not
/// checked (the verb checked it, or, on a hot path, leaves it to the caller, as rdma-core).
///
/// # Safety
/// `p` is a live object of this library.
pub(crate) unsafe fn own<'a, O: OfContext>(v: Verb, p: *mut O::C) -> Result<&'a O, Failed> {
    // SAFETY: per the contract.
    if unsafe { inherited::<O>(p) } {
        return Err(refuse_inherited(v));
    }
    // SAFETY: per the contract.
    Ok(unsafe { O::from_ptr(p) })
}

/// The caller's object `p`, for a verb that destroys it: EINVAL when it is NULL; `None`
/// when it is a parent's, which the destroy leaves as it is (and succeeds, see
/// `super::fork`).
///
/// # Safety
/// `p` is NULL or a live object of this library.
pub(crate) unsafe fn to_destroy<'a, O: OfContext>(
    v: Verb,
    p: *mut O::C,
) -> Result<Option<&'a O>, Failed> {
    v.ensure(
        !p.is_null(),
        libc::EINVAL,
        &format_args!("NULL {}", O::WHAT),
    )?;
    // SAFETY: per the contract, and not NULL.
    if unsafe { inherited::<O>(p) } {
        return Ok(None);
    }
    // SAFETY: as above.
    Ok(Some(unsafe { O::from_ptr(p) }))
}
