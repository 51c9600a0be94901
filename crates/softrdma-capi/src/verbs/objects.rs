//! The C objects of libibverbs other than the context, as rxe's `rxe_verbs.h` defines its
//! objects apart from their verbs: each a `#[repr(C)]` box whose first field is the
//! public struct the application holds (so that its pointer is the box's), then softrdma's
//! object. A PD, a channel, a CQ and an SRQ count what depends on them (`users`): their
//! destroy verbs refuse with EBUSY while any is alive.

use super::context::OfContext;
use crate::abi::*;
use crate::ffi::{Object, Users};
use softrdma::sync::Lock;
use softrdma::{
    AddressHandle, Completion, CompletionChannel, CompletionQueue, MemoryRegion, ProtectionDomain,
    SendWr, SharedReceiveQueue,
};
use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

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

// SAFETY: repr(C), the public struct first.
unsafe impl Object for SoftPd {
    type C = ibv_pd;
    const WHAT: &'static str = "PD";
}

// SAFETY: `ibv_pd` begins with its context.
unsafe impl OfContext for SoftPd {}

/// An MR: the public `ibv_mr`, then softrdma's region (dropping it deregisters).
#[repr(C)]
pub(crate) struct SoftMr {
    pub mr: ibv_mr,
    pub inner: MemoryRegion,
}

// SAFETY: repr(C), the public struct first.
unsafe impl Object for SoftMr {
    type C = ibv_mr;
    const WHAT: &'static str = "MR";
}

// SAFETY: `ibv_mr` begins with its context.
unsafe impl OfContext for SoftMr {}

/// An AH: the public `ibv_ah`, then softrdma's.
#[repr(C)]
pub(crate) struct SoftAh {
    pub ah: ibv_ah,
    pub inner: AddressHandle,
}

// SAFETY: repr(C), the public struct first.
unsafe impl Object for SoftAh {
    type C = ibv_ah;
    const WHAT: &'static str = "AH";
}

// SAFETY: `ibv_ah` begins with its context.
unsafe impl OfContext for SoftAh {}

/// A completion channel: the public struct, then softrdma's channel (an eventfd).
#[repr(C)]
pub(crate) struct SoftChannel {
    pub ch: ibv_comp_channel,
    pub inner: CompletionChannel,
    /// CQs that report to it.
    pub users: Users,
}

// SAFETY: repr(C), the public struct first.
unsafe impl Object for SoftChannel {
    type C = ibv_comp_channel;
    const WHAT: &'static str = "channel";
}

// SAFETY: `ibv_comp_channel` begins with its context.
unsafe impl OfContext for SoftChannel {}

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

// SAFETY: repr(C), the public struct first (an `ibv_cq_ex`, which begins with the
// `ibv_cq`).
unsafe impl Object for SoftCq {
    type C = ibv_cq;
    const WHAT: &'static str = "CQ";
}

// SAFETY: `ibv_cq` begins with its context.
unsafe impl OfContext for SoftCq {}

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
    /// What `ibv_query_srq` reports. Its lock is held while a limit is armed in the
    /// engine and while the limit's event resets it to 0, so that the two do not cross.
    pub attr: Lock<ibv_srq_attr>,
    /// QPs that take receives from it.
    pub users: Users,
}

// SAFETY: repr(C), the public struct first.
unsafe impl Object for SoftSrq {
    type C = ibv_srq;
    const WHAT: &'static str = "SRQ";
}

// SAFETY: `ibv_srq` begins with its context.
unsafe impl OfContext for SoftSrq {}
