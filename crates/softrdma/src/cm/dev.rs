//! The CM's one door into the device: what the CM needs of `crate::device` that the verbs
//! do not give, as a module of functions (and two handles) that the rest of `cm` calls;
//! no other file of `cm` names `crate::device`. It covers the device's identity (one CM
//! host per device), the CM glue of a shared device (the listener registry and the tag of
//! this process's communication IDs), QP1's inline consumer, a receive pass and the
//! pollers' hand-back for a thread that waits for a CM event, an ID's `res show` line,
//! and the same-host route of a QP that the CM moves under its lock.
//!
//! Locks: none of its own. What each call takes is the device's: `ShareCtl` (listen,
//! unlisten, tag), `Rx` (*try*, a receive pass), `ResLists` then `ResFields` (an ID's
//! line), the QP's `Qp` (reading a moved QP's destination), then `LocalRoutes` and
//! `LocalWanted` (a route, or a lookup asked for).

use crate::device::Device;
use crate::device::cq::{InlineConsumer, Poller};
use crate::device::res::CmIdEntry;
use crate::error::Result;
use crate::verbs::context::Context;
use crate::verbs::cq::CompletionChannel;
use crate::verbs::qp::QueuePair;
use std::sync::{Arc, Weak};

/// A device the CM runs on, held up.
pub(crate) struct CmDevice(Arc<Device>);

/// A device the CM runs on, not held up (the host registry's).
pub(crate) struct WeakCmDevice(Weak<Device>);

/// An ID's line in `softrdma res show cm_id`, listed while it lives.
pub(crate) type ResLine = CmIdEntry;

/// Which device `ctx` is on: equal for every context of one device, for as long as it is
/// open.
pub(crate) fn key(ctx: &Context) -> usize {
    Arc::as_ptr(ctx.dev()) as usize
}

/// `ctx`'s device, not held up.
pub(crate) fn weak(ctx: &Context) -> WeakCmDevice {
    WeakCmDevice(Arc::downgrade(ctx.dev()))
}

impl WeakCmDevice {
    /// The device, if it is still open.
    pub(crate) fn upgrade(&self) -> Option<CmDevice> {
        self.0.upgrade().map(CmDevice)
    }
}

impl CmDevice {
    /// A receive pass for a thread that waits for a CM event (see `Device::poll_socket`).
    pub(crate) fn poll_socket(&self) {
        self.0.poll_socket();
    }

    /// This thread is about to block: the device's socket goes back to its progress
    /// thread (`Poller::app_sleeps`).
    pub(crate) fn app_sleeps(&self) {
        Poller::app_sleeps(&*self.0);
    }
}

/// Makes this process the device's listener on CM service `sid`: `Ok(false)` if another
/// process of the device listens on it.
pub(crate) fn listen(ctx: &Context, sid: u64) -> Result<bool> {
    ctx.dev().cm_listen(sid)
}

/// This process no longer listens on CM service `sid` of the device.
pub(crate) fn unlisten(ctx: &Context, sid: u64) {
    ctx.dev().cm_unlisten(sid);
}

/// The low byte of this process's CM communication IDs on the device.
pub(crate) fn id_tag(ctx: &Context) -> u8 {
    ctx.dev().cm_tag()
}

/// Makes `consumer` QP1's channel's inline consumer (set once), and has the device's
/// receive passes open a scope for it from now on.
pub(crate) fn set_inline_consumer(
    ctx: &Context,
    chan: &CompletionChannel,
    consumer: InlineConsumer,
) {
    let _ = chan.inner.inline.set(consumer);
    ctx.dev().inline_consumer_added();
}

/// A new ID's line, listed while the returned entry lives.
pub(crate) fn add_res_line(ctx: &Context) -> Arc<ResLine> {
    ctx.dev().res.add_cm_id()
}

/// Publishes `line` as an ID's fields; the progress thread writes the list soon.
pub(crate) fn publish(ctx: &Context, entry: &ResLine, line: String) {
    *entry.fields.lock() = line;
    ctx.dev().res_changed();
}

/// Runs `then` once `qp` (given its destination) would send over its same-host route: at
/// once if it needs none or has it, else on the device's resolver thread after the lookup,
/// with no lock held (see `Device::when_routed`).
pub(crate) fn when_routed(ctx: &Context, qp: &QueuePair, then: Box<dyn FnOnce() + Send>) {
    let q = qp.query();
    match (q.dest_qpn, q.av) {
        (Some(dest), Some(av)) => ctx.dev().when_routed(av.dst, dest.value(), then),
        _ => then(),
    }
}

/// Sends the ACKs the device holds back (deferred to ride with a later send), now: what
/// this side received before it disconnects is acknowledged before the DREQ leaves,
/// which would otherwise overtake them and fail the peer's sends that did arrive.
pub(crate) fn send_deferred_acks(ctx: &Context) {
    ctx.dev().flush_batch(true);
}

/// While the returned guard lives, a QP this thread moves has its same-host route looked
/// up by the device's resolver thread instead of this one: the CM moves an active QP to
/// RTS on the peer's REP under its agent's lock, which no lookup may wait under.
pub(crate) fn lookups_elsewhere() -> crate::device::local::NoWait {
    crate::device::local::NoWait::enter()
}
