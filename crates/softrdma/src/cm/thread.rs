//! Who runs a host's agent when no verb does: the CM thread (`softrdma-cm`), which sleeps
//! on QP1's completion channel, its wake-up eventfd and its alarm, and lingers after the
//! last ID ([`LINGER`]); and QP1's inline consumer, which runs the agent on the thread
//! that received the MAD.
//!
//! Locks: `CmGate` (*try* inline; taken by the thread as it leaves, under `CmCores`),
//! `CmAgent` (*try* inline), and what running the agent takes (see `host`).

use super::objects::Core;
use super::registry::CORES;
use crate::eventfd;
use crate::sync::Lock;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// QP1's channel's inline consumer (see `device::cq`): runs the agent on the thread that
/// received the MAD, at the end of its pass, instead of waking the CM thread for it: a
/// connection's handshake then costs no wake-up beyond the application's own. False (the
/// channel is then signalled, and the CM thread does it) while another thread holds the
/// agent. The core is held only under `gate`, so that the CM thread, which checks under
/// it whether it holds the core alone, never leaves the last hold to this thread.
pub(super) fn inline_service(core: &Weak<Core>, gate: &Lock<bool>, wake: &OwnedFd) -> bool {
    let Some(serving) = gate.try_lock() else {
        return false;
    };
    // Looked at before the core is taken up: once the CM thread has cleared it, its own
    // hold may be on its way out, and a hold taken now could be the last.
    if !*serving {
        // The core is going: there is nobody to hand the MAD to.
        return true;
    }
    let Some(c) = core.upgrade() else {
        return true;
    };
    let ran = match c.try_agent() {
        Some(mut cs) => {
            c.service(&mut cs);
            c.settle(&mut cs);
            true
        }
        None => false,
    };
    drop(c);
    if core.strong_count() <= 1 {
        // The IDs went while this thread held the core: the thread's look at who holds it
        // found this hold (see `LastLook`).
        eventfd::signal(wake.as_raw_fd());
    }
    drop(serving);
    ran
}

/// The CM thread: serves the core until nothing but this thread holds it, and then, while
/// the application still holds the context, for [`LINGER`] more (an ID made meanwhile
/// takes it up again). `own` is how many of the context's handles the core holds itself.
pub(super) fn serve(c: Arc<Core>, own: usize) {
    let (cq_fd, wake_fd) = (c.chan.fd(), c.wake.as_raw_fd());
    let timer_fd = c.timer.as_fd().as_raw_fd();
    let mut alone_since: Option<std::time::Instant> = None;
    loop {
        eventfd::drain(wake_fd);
        // A timerfd reads as an eventfd does: 8 bytes, the expiry count.
        eventfd::drain(timer_fd);
        // The channel's event is consumed so that its descriptor rearms.
        let _ = c.chan.get_cq_event(Some(Duration::ZERO));
        {
            let mut cs = c.agent();
            c.service(&mut cs);
            c.flush(&mut cs);
            c.set_alarm(&cs, true);
        }
        // The agent's timers wake the thread through its alarm; only the linger is timed
        // here.
        let mut next = None;
        if Arc::strong_count(&c) == 1 {
            let since = *alone_since.get_or_insert_with(std::time::Instant::now);
            let left = LINGER.saturating_sub(since.elapsed());
            if c.ctx.handles() <= own || left.is_zero() {
                // Under the list's lock, so that no ID takes the core up meanwhile.
                // Under the gate too: a receiving thread that runs the agent holds the core
                // meanwhile, and is counted.
                let mut cores = CORES.lock();
                let mut serving = c.gate.lock();
                if Arc::strong_count(&c) == 1 {
                    *serving = false;
                    cores.retain(|e| !std::ptr::eq(e.core.as_ptr(), Arc::as_ptr(&c)));
                    drop(serving);
                    drop(cores);
                    return;
                }
            }
            next = Some(left);
        } else {
            alone_since = None;
        }
        eventfd::wait_readable(&[cq_fd, wake_fd, timer_fd], next);
    }
}

/// How long a core outlives its last ID while its context is still the application's:
/// a program that connects, disconnects and connects again (perftest `-R`, which makes
/// a new connection for its data after its parameter exchange, or one connection after
/// another) would otherwise make QP1, its receives and the CM thread again each time,
/// about 100 µs of each connection's setup. On Linux the CM is always there.
pub(super) const LINGER: Duration = Duration::from_secs(1);
