//! The device's side of completion queues and channels: where the device puts completions
//! (under the CQ's lock, taken after a QP's: see the lock order in `crate::device`), and
//! the eventfd a channel signals.
//!
//! A channel may have an inline consumer ([`ChannelInner::inline`]: the CM's agent, whose
//! thread would otherwise be woken for each MAD). A completion placed inside a receive
//! scope ([`Inline::enter`], which the progress thread and busy pollers take around a
//! pass) runs that consumer on the receiving thread when the scope ends, after the pass has
//! let go of every device lock; a consumer that cannot run now (its own lock is taken)
//! says so, and the channel is signalled as usual. Outside a scope the channel is always
//! signalled.

use crate::sync::Lock;
use softrdma_proto::{AsyncEvent, Completion, WcOpcode};
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

/// A device whose socket a CQ's poller may drain itself when the CQ is empty.
pub(crate) trait Poller: Send + Sync {
    /// Receives what is waiting, if no other thread is; true if anything arrived.
    fn poll_rx(&self) -> bool;
    /// The polling thread is about to block (in `get_cq_event`): the progress thread takes
    /// the socket back now, instead of a grace after the last poll, so that the packet the
    /// thread waits for is not held up by it.
    fn app_sleeps(&self);
    /// The polling thread blocks now (`get_cq_event`): besides [`Poller::app_sleeps`], the
    /// ACKs it deferred to ride along with its next send leave at once, since no send of
    /// its comes while it sleeps and its peer may be waiting for them (the send
    /// completion of an event-driven ping-pong).
    ///
    /// `watching`: the thread waits on the device's socket itself ([`Poller::rx_fd`]), so
    /// the socket stays with it as with a busy poller (one thread woken per datagram, not
    /// two: with both waking, a stream's receiver lost a quarter of its bandwidth).
    fn app_blocks(&self, watching: bool) {
        if !watching {
            self.app_sleeps();
        }
    }
    /// The descriptor a thread that blocks for a CQ event may wait on besides its
    /// channel's: the device's socket, readable when a datagram for it waits (see
    /// `CompletionChannel::get_cq_event`). Same-host rings are left to the progress
    /// thread: waiting on their wake-ups too gained nothing measurable.
    fn rx_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }
    /// Receives what waits on the socket [`Poller::rx_fd`] gave, for a thread blocked for
    /// a CQ event (not a poller that watches memory: see [`Poller::polled`]).
    fn receive_blocked(&self) -> bool {
        self.poll_rx()
    }
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
    pub(crate) state: Lock<CqState>,
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
        let mut s = self.state.lock();
        s.entries.retain(|wc| wc.qp_num != qpn);
        self.queued.store(s.entries.len(), Ordering::Release);
    }

    /// Adds a completion; on overflow the completion is lost and a CQ error event is raised,
    /// as on a NIC (`IBV_EVENT_CQ_ERR`), and nothing else is touched.
    pub fn push(self: &Arc<Self>, wc: Completion) {
        let mut s = self.state.lock();
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
                    ch.notify(self);
                }
            }
        }
    }
}

/// A channel's inline consumer: runs what the channel's event would have woken a thread
/// for, on the thread that placed the completion. False if it cannot run now; the
/// channel is then signalled instead.
pub(crate) type InlineConsumer = Box<dyn Fn() -> bool + Send + Sync>;

pub(crate) struct ChannelInner {
    pub(crate) fd: OwnedFd,
    pub(crate) ready: Lock<VecDeque<Weak<CqInner>>>,
    /// The devices of the CQs that report here, told when a waiter blocks.
    pub(crate) devices: Lock<Vec<Weak<dyn Poller>>>,
    /// The consumer run in place of a signal at the end of a receive scope (see the
    /// module's docs); set once.
    pub(crate) inline: std::sync::OnceLock<InlineConsumer>,
}

thread_local! {
    /// How deep this thread is in receive scopes ([`Inline`]).
    static SCOPES: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    /// The channels with an inline consumer that completions inside this thread's scope
    /// raised, with the CQ each came from (to signal if the consumer cannot run).
    static DEFERRED: std::cell::RefCell<Vec<(Arc<ChannelInner>, Weak<CqInner>)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// A receive scope: while one is open on a thread, a completion for a channel with an
/// inline consumer runs that consumer when the outermost scope closes (see the module's
/// docs). Open it before taking any device lock, so that it closes after they are let go.
pub(crate) struct Inline(Depth);

/// One level of [`SCOPES`], given back when dropped (a consumer that panics included).
struct Depth(());

impl Depth {
    fn enter() -> Self {
        SCOPES.with(|d| d.set(d.get() + 1));
        Depth(())
    }
}

impl Drop for Depth {
    fn drop(&mut self) {
        SCOPES.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

impl Inline {
    /// Opens a scope on this thread.
    pub(crate) fn enter() -> Self {
        Inline(Depth::enter())
    }
}

impl Drop for Inline {
    fn drop(&mut self) {
        if SCOPES.with(|d| d.get()) > 1 {
            return;
        }
        // Still inside while the consumers run: what they place is deferred behind them
        // and run by this loop, never by a nested one. And still the thread that drains
        // the device's rings: a send of theirs to this process must not wait for room.
        let _drains = super::local::Draining::enter();
        loop {
            let next = DEFERRED.with(|q| {
                let mut q = q.borrow_mut();
                (!q.is_empty()).then(|| q.remove(0))
            });
            let Some((ch, cq)) = next else { break };
            let ran = ch.inline.get().is_some_and(|f| f());
            if !ran {
                ch.signal(cq);
            }
        }
    }
}

impl ChannelInner {
    /// An armed CQ got its completion: its inline consumer runs at the end of this thread's
    /// receive scope, or, outside one, the channel is signalled.
    fn notify(self: &Arc<Self>, cq: &Arc<CqInner>) {
        if self.inline.get().is_some() && SCOPES.with(|d| d.get()) > 0 {
            DEFERRED.with(|q| {
                let mut q = q.borrow_mut();
                // One run takes every completion the channel's CQs hold.
                if !q.iter().any(|(c, _)| Arc::ptr_eq(c, self)) {
                    q.push((self.clone(), Arc::downgrade(cq)));
                }
            });
            return;
        }
        self.signal(Arc::downgrade(cq));
    }

    pub(crate) fn signal(&self, cq: Weak<CqInner>) {
        self.ready.lock().push_back(cq);
        crate::eventfd::signal(self.fd.as_raw_fd());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::Rank;
    use crate::verbs::cq::CompletionChannel;
    use softrdma_proto::{WcFlags, WcStatus};
    use softrdma_wire::Qpn;
    use std::sync::atomic::AtomicU64;

    struct NoDevice;
    impl Poller for NoDevice {
        fn poll_rx(&self) -> bool {
            false
        }
        fn app_sleeps(&self) {}
        fn polled(&self) {}
    }

    fn armed_cq(ch: &Arc<ChannelInner>) -> Arc<CqInner> {
        let none: Weak<dyn Poller> = Weak::<NoDevice>::new();
        Arc::new(CqInner {
            state: Lock::new(
                Rank::Cq,
                CqState {
                    armed: Some(false),
                    ..CqState::default()
                },
            ),
            queued: AtomicUsize::new(0),
            cap: AtomicUsize::new(16),
            channel: Some(ch.clone()),
            events: Arc::new(super::super::events::AsyncEvents::new()),
            overflowed: Default::default(),
            lost: Default::default(),
            device: none,
            user_data: AtomicU64::new(0),
        })
    }

    fn wc() -> Completion {
        Completion {
            wr_id: 7,
            status: WcStatus::Success,
            opcode: WcOpcode::Recv,
            byte_len: 0,
            imm_data: 0,
            invalidated_rkey: 0,
            qp_num: Qpn::new(1),
            src_qp: Qpn::new(1),
            wc_flags: WcFlags::empty(),
            solicited: false,
        }
    }

    fn readable(ch: &ChannelInner) -> bool {
        crate::eventfd::readable(ch.fd.as_raw_fd())
    }

    /// A channel with an inline consumer that counts its runs and answers `can`.
    fn channel(can: bool) -> (Arc<ChannelInner>, Arc<AtomicUsize>) {
        let ch = CompletionChannel::new().unwrap().inner;
        let runs = Arc::new(AtomicUsize::new(0));
        let r = runs.clone();
        let _ = ch.inline.set(Box::new(move || {
            r.fetch_add(1, Ordering::SeqCst);
            can
        }));
        (ch, runs)
    }

    #[test]
    fn a_completion_in_a_receive_scope_runs_the_consumer_when_the_scope_closes() {
        let (ch, runs) = channel(true);
        let cq = armed_cq(&ch);
        {
            let _outer = Inline::enter();
            {
                let _inner = Inline::enter();
                cq.push(wc());
            }
            assert_eq!(
                runs.load(Ordering::SeqCst),
                0,
                "not before the outermost scope"
            );
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert!(!readable(&ch), "the consumer ran: no event for a thread");
        assert_eq!(
            cq.queued.load(Ordering::SeqCst),
            1,
            "the completion waits in the CQ"
        );
    }

    #[test]
    fn outside_a_scope_or_when_the_consumer_cannot_run_the_channel_is_signalled() {
        let (ch, runs) = channel(true);
        armed_cq(&ch).push(wc());
        assert_eq!(runs.load(Ordering::SeqCst), 0);
        assert!(readable(&ch), "outside a scope: the channel's event");

        let (ch, runs) = channel(false);
        let cq = armed_cq(&ch);
        {
            let _scope = Inline::enter();
            cq.push(wc());
            assert!(!readable(&ch), "deferred to the scope's end");
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert!(
            readable(&ch),
            "the consumer could not run: the channel's event"
        );
        assert_eq!(ch.ready.lock().len(), 1, "naming the CQ");
    }
}
