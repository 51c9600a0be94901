//! The C objects of libibverbs other than the context, as rxe's `rxe_verbs.h` defines its
//! objects apart from their verbs: each a `#[repr(C)]` box whose first field is the
//! public struct the application holds (so that its pointer is the box's), then softrdma's
//! object. A PD, a channel, a CQ and an SRQ count what depends on them (`users`): their
//! destroy verbs refuse with EBUSY while any is alive.

use super::context::{OfContext, to_destroy};
use crate::abi::*;
use crate::ffi::{Failed, Object, Users, Verb, c_object};
use softrdma::sync::Lock;
use softrdma::{
    AddressHandle, Completion, CompletionChannel, CompletionQueue, MemoryRegion, ProtectionDomain,
    SendWr, SharedReceiveQueue,
};
use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// [`c_object!`] for a verbs object, and [`OfContext`]: its public struct begins with its
/// context's pointer (checked at compile time too).
macro_rules! verbs_object {
    ($obj:ty, $($first:ident).+: $c:ty, $what:literal) => {
        c_object!($obj, $($first).+: $c, $what);
        const _: () = assert!(::std::mem::offset_of!($c, context) == 0);
        const _: fn(&$c) -> &*mut ibv_context = |c| &c.context;
        // SAFETY: the public struct begins with its context's pointer (asserted above).
        unsafe impl OfContext for $obj {}
    };
}

/// Handles for the objects' `handle` fields (unique per process; nothing reads them but
/// tools that print them).
pub(crate) fn next_handle() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A PD: the public `ibv_pd`, then softrdma's.
#[repr(C)]
pub(crate) struct SoftPd {
    pub pd: ibv_pd,
    pub inner: ProtectionDomain,
    /// QPs, MRs, SRQs and AHs made in this PD and not yet destroyed.
    pub users: Users,
}

verbs_object!(SoftPd, pd: ibv_pd, "PD");

/// An MR: the public `ibv_mr`, then softrdma's region (dropping it deregisters).
#[repr(C)]
pub(crate) struct SoftMr {
    pub mr: ibv_mr,
    pub inner: MemoryRegion,
}

verbs_object!(SoftMr, mr: ibv_mr, "MR");

/// An AH: the public `ibv_ah`, then softrdma's.
#[repr(C)]
pub(crate) struct SoftAh {
    pub ah: ibv_ah,
    pub inner: AddressHandle,
}

verbs_object!(SoftAh, ah: ibv_ah, "AH");

/// A completion channel: the public struct, then softrdma's channel (an eventfd).
#[repr(C)]
pub(crate) struct SoftChannel {
    pub ch: ibv_comp_channel,
    pub inner: CompletionChannel,
    /// CQs that report to it.
    pub users: Users,
}

verbs_object!(SoftChannel, ch: ibv_comp_channel, "channel");

/// A CQ: the public `ibv_cq_ex`, then softrdma's.
#[repr(C)]
pub(crate) struct SoftCq {
    pub cq: ibv_cq_ex,
    pub inner: CompletionQueue,
    /// The completion an extended poll is on, with its timestamps (monotonic and wall
    /// clock, nanoseconds) when the CQ reports them.
    pub cur: Lock<Option<(Completion, u64, u64)>>,
    /// Whether the CQ reports timestamps (`IBV_WC_EX_WITH_COMPLETION_TIMESTAMP*`).
    pub stamps: bool,
    /// QPs that complete into it.
    pub users: Users,
    /// Whether its overflow was reported (`IBV_EVENT_CQ_ERR` names the CQ once).
    pub error_reported: AtomicBool,
    /// The `sl` of its UD receives (see `super::cq`).
    pub grh_sl: u8,
}

verbs_object!(SoftCq, cq.cq: ibv_cq, "CQ");

/// A QP: the public `ibv_qp_ex` (whose prefix is the `ibv_qp`), then softrdma's.
#[repr(C)]
pub(crate) struct SoftQp {
    pub qp: ibv_qp_ex,
    /// Shared with the connection manager, which holds it weakly (`rdma_create_qp`) to
    /// move it to RTR and RTS as the connection forms.
    pub inner: std::sync::Arc<softrdma::QueuePair>,
    pub caps: ibv_qp_cap,
    pub sq_sig_all: bool,
    /// The WRs an `ibv_wr_start` ... `ibv_wr_complete` batch has built, and the first error.
    pub batch: Lock<(Vec<SendWr>, c_int)>,
}

verbs_object!(SoftQp, qp.qp_base: ibv_qp, "QP");

/// An SRQ: the public struct, then softrdma's.
#[repr(C)]
pub(crate) struct SoftSrq {
    pub srq: ibv_srq,
    pub inner: SharedReceiveQueue,
    /// What `ibv_query_srq` reports. Its lock is held while a limit is armed in the
    /// engine and while the limit's event resets it to 0, so that the two do not cross.
    pub attr: Lock<ibv_srq_attr>,
    /// QPs that take receives from it.
    pub users: Users,
}

verbs_object!(SoftSrq, srq: ibv_srq, "SRQ");

/// The destroy verb of an object that its PD counts (an MR, an AH): frees `p` and
/// uncounts it, or leaves it be when it is a parent's (see [`to_destroy`]).
///
/// # Safety
/// `p` is NULL or a live object of this library, from its own [`Object::into_c`] box and
/// freed only here; `pd_of` names its PD, which is alive while it counts the object.
pub(crate) unsafe fn destroy_in_pd<O: OfContext>(
    v: Verb,
    p: *mut O::C,
    pd_of: fn(&O) -> *mut ibv_pd,
) -> Result<c_int, Failed> {
    // SAFETY: per the contract.
    if unsafe { to_destroy::<O>(v, p) }?.is_none() {
        return Ok(0);
    }
    // SAFETY: per the contract: the object's box, freed once.
    let o = unsafe { O::free(p) };
    // SAFETY: per the contract: its PD is alive.
    unsafe { SoftPd::from_ptr(pd_of(&o)) }.users.remove();
    // Dropped last, once its PD no longer counts it (an MR's drop deregisters it).
    drop(o);
    Ok(0)
}
