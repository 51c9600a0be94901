//! The device's side of completion queues and channels: where the device puts completions
//! (under the CQ's lock, taken after a QP's: see the lock order in `crate::device`), and
//! the eventfd a channel signals.

use softrdma_proto::{AsyncEvent, Completion, WcOpcode};
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// A device whose socket a CQ's poller may drain itself when the CQ is empty.
pub(crate) trait Poller: Send + Sync {
    /// Receives what is waiting, if no other thread is; true if anything arrived.
    fn poll_rx(&self) -> bool;
    /// The polling thread is about to block (in `get_cq_event`): the progress thread takes
    /// the socket back now, instead of a grace after the last poll, so that the packet the
    /// thread waits for is not held up by it.
    fn app_sleeps(&self);
    /// A poll returned completions. If no QP of the device awaits any more, and each has
    /// had its memory written by its peer but not since its last send, the thread will
    /// most likely wait for the next WRITE by watching memory, not by polling: the socket
    /// goes back to the progress thread at once (as [`Poller::app_sleeps`]), so that the
    /// WRITE need not wait for the poll's grace to run out (perftest's latency tests spin
    /// on memory after their CQ poll). A QP whose answer (a WRITE since its last send)
    /// came before the completion keeps the socket: its application finds its memory
    /// written and posts again. A QP that reads, or is never written, keeps the socket with its poller, which
    /// comes back at once: handing the socket over and back costs two wake-ups. So does an
    /// application that has polled while nothing was awaited: it watches for WRITEs by
    /// polling, and receives them itself.
    fn polled(&self);
}

#[derive(Default)]
pub(crate) struct CqState {
    pub(crate) entries: VecDeque<Completion>,
    /// Armed by `req_notify`: `Some(solicited_only)`.
    pub(crate) armed: Option<bool>,
    /// How the CQ was last armed, to arm it again when its event turns out stale (see
    /// `CompletionChannel::get_cq_event`).
    pub(crate) last_arm: bool,
}

pub(crate) struct CqInner {
    pub(crate) state: Mutex<CqState>,
    /// How many completions `state` holds, written under its lock: a poller of an empty CQ
    /// (a busy loop's every turn but one) reads this instead of taking the lock.
    pub(crate) queued: AtomicUsize,
    /// Entries it holds at most (`ibv_resize_cq` changes it).
    pub(crate) cap: AtomicUsize,
    pub(crate) channel: Option<Arc<ChannelInner>>,
    pub(crate) events: Arc<super::events::AsyncEvents>,
    pub(crate) overflowed: std::sync::atomic::AtomicBool,
    pub(crate) lost: std::sync::atomic::AtomicU64,
    /// The device whose socket a poller may drain itself when the CQ is empty.
    pub(crate) device: Weak<dyn Poller>,
    /// The application's word (`CompletionQueue::set_user_data`).
    pub(crate) user_data: std::sync::atomic::AtomicU64,
}

impl CqInner {
    /// A poll returned completions (see [`Poller::polled`]).
    pub fn polled(&self) {
        if let Some(dev) = self.device.upgrade() {
            dev.polled();
        }
    }

    /// Takes QP `qpn`'s completions out (a move of that QP to RESET).
    pub fn discard_qp(&self, qpn: softrdma_wire::Qpn) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.entries.retain(|wc| wc.qp_num != qpn);
        self.queued.store(s.entries.len(), Ordering::Release);
    }

    /// Adds a completion; on overflow the completion is lost and a CQ error event is raised,
    /// as on a NIC (`IBV_EVENT_CQ_ERR`), and nothing else is touched.
    pub fn push(self: &Arc<Self>, wc: Completion) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.entries.len() >= self.cap.load(Ordering::Relaxed) {
            self.lost.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if !self
                .overflowed
                .swap(true, std::sync::atomic::Ordering::SeqCst)
            {
                self.events.push([AsyncEvent::CqError]);
            }
            return;
        }
        let solicited = matches!(wc.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm)
            && wc.solicited
            || wc.status != softrdma_proto::WcStatus::Success;
        s.entries.push_back(wc);
        self.queued.store(s.entries.len(), Ordering::Release);
        if let Some(only_solicited) = s.armed {
            if !only_solicited || solicited {
                s.armed = None;
                drop(s);
                if let Some(ch) = &self.channel {
                    ch.signal(Arc::downgrade(self));
                }
            }
        }
    }
}

pub(crate) struct ChannelInner {
    pub(crate) fd: OwnedFd,
    pub(crate) ready: Mutex<VecDeque<Weak<CqInner>>>,
    /// The devices of the CQs that report here, told when a waiter blocks.
    pub(crate) devices: Mutex<Vec<Weak<dyn Poller>>>,
}

impl ChannelInner {
    pub(crate) fn signal(&self, cq: Weak<CqInner>) {
        self.ready
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(cq);
        let one: u64 = 1;
        // SAFETY: writing 8 bytes from a valid u64 to an eventfd we own.
        unsafe {
            libc::write(
                self.fd.as_raw_fd(),
                (&one as *const u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
    }
}
