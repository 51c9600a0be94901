//! Completion queues (`struct ibv_cq`) and completion channels (`struct ibv_comp_channel`).

use crate::device::cq::{ChannelInner, CqInner, CqState, Poller};
use crate::error::{Error, Result};
use crate::sync::{Lock, Rank};
use crate::verbs::context::Context;
use softrdma_proto::Completion;
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

impl Context {
    /// Creates a completion channel.
    pub fn create_comp_channel(&self) -> Result<CompletionChannel> {
        CompletionChannel::new()
    }

    /// Creates a completion queue of `cqe` entries.
    pub fn create_cq(
        &self,
        cqe: usize,
        channel: Option<&CompletionChannel>,
    ) -> Result<CompletionQueue> {
        let dev = self.dev();
        let cq = CompletionQueue::new(
            cqe,
            channel,
            dev.events.clone(),
            Arc::downgrade(&(dev.clone() as Arc<dyn Poller>)),
        )?;
        dev.res.add_cq(&cq.inner);
        dev.res_changed();
        Ok(cq)
    }
}

/// A completion queue (`struct ibv_cq`).
#[derive(Clone)]
pub struct CompletionQueue {
    pub(crate) inner: Arc<CqInner>,
}

impl std::fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletionQueue")
            .field("cqe", &self.inner.cap.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl CompletionQueue {
    pub(crate) fn new(
        cqe: usize,
        channel: Option<&CompletionChannel>,
        events: Arc<crate::device::events::AsyncEvents>,
        device: Weak<dyn Poller>,
    ) -> Result<Self> {
        if let Some(ch) = channel {
            let mut devs = ch.inner.devices.lock();
            devs.retain(|d| d.strong_count() > 0);
            if !devs.iter().any(|d| d.ptr_eq(&device)) {
                devs.push(device.clone());
            }
        }
        if cqe == 0 || cqe > crate::config::MAX_CQE {
            return Err(Error::OutOfRange {
                verb: "ibv_create_cq",
                attr: "cqe",
                requested: cqe as u64,
                min: 1,
                max: crate::config::MAX_CQE as u64,
            });
        }
        Ok(Self {
            inner: Arc::new(CqInner {
                state: Lock::new(Rank::Cq, CqState::default()),
                queued: AtomicUsize::new(0),
                cap: AtomicUsize::new(cqe),
                channel: channel.map(|c| c.inner.clone()),
                events,
                overflowed: false.into(),
                lost: 0.into(),
                device,
                user_data: 0.into(),
            }),
        })
    }

    /// Changes how many completions the CQ holds (`ibv_resize_cq`): not fewer than it holds
    /// now, nor more than the device's limit.
    pub fn resize(&self, cqe: usize) -> Result<()> {
        let s = self.inner.state.lock();
        let min = s.entries.len().max(1);
        Error::check_range(
            "ibv_resize_cq",
            "cqe",
            cqe as u64,
            min as u64,
            crate::config::MAX_CQE as u64,
        )?;
        self.inner.cap.store(cqe, Ordering::Relaxed);
        Ok(())
    }

    /// How many completions the CQ holds at most.
    pub fn capacity(&self) -> usize {
        self.inner.cap.load(Ordering::Relaxed)
    }

    /// Attaches a word of the caller's to the CQ, which every handle to it (such as one
    /// that [`CompletionChannel::get_cq_event`] returns) gives back: the C ABI keeps its
    /// `struct ibv_cq` here.
    pub fn set_user_data(&self, data: u64) {
        self.inner.user_data.store(data, Ordering::Release);
    }

    /// The word [`CompletionQueue::set_user_data`] attached (0 if none).
    pub fn user_data(&self) -> u64 {
        self.inner.user_data.load(Ordering::Acquire)
    }

    /// Takes up to `max` completions, oldest first (`ibv_poll_cq`). When there are none, the
    /// polling thread receives whatever packets are waiting itself, as a NIC's poller would
    /// find them already placed, instead of waiting for the progress thread to be scheduled.
    pub fn poll(&self, max: usize) -> Vec<Completion> {
        let mut got = Vec::new();
        self.poll_into(max, &mut got);
        got
    }

    /// [`CompletionQueue::poll`] into `out` (appended to), as `ibv_poll_cq` fills the
    /// caller's array: how many came. A loop that keeps `out` allocates nothing per poll.
    pub fn poll_into(&self, max: usize, out: &mut Vec<Completion>) -> usize {
        let got = if self.is_empty() {
            0
        } else {
            self.placed_into(max, out)
        };
        if max == 0 {
            return 0;
        }
        if got > 0 {
            self.inner.polled();
            return got;
        }
        // One upgrade of the weak reference, kept for `polled`.
        match self.inner.device.upgrade() {
            Some(dev) if dev.poll_rx() => {
                let got = self.placed_into(max, out);
                if got > 0 {
                    dev.polled();
                }
                got
            }
            _ => 0,
        }
    }

    /// Takes up to `max` completions that the device has already placed, without receiving
    /// on the polling thread's behalf: for a consumer that its channel wakes once the
    /// progress thread has received (the CM's thread). A poll that receives takes the
    /// socket from the progress thread for a poller's grace, and the next MAD, which nobody
    /// then polls for, would wait that grace out.
    pub(crate) fn poll_placed(&self, max: usize) -> Vec<Completion> {
        let mut got = Vec::new();
        self.placed_into(max, &mut got);
        got
    }

    /// [`CompletionQueue::poll_placed`] into `out`: how many came.
    fn placed_into(&self, max: usize, out: &mut Vec<Completion>) -> usize {
        let mut s = self.inner.state.lock();
        let n = max.min(s.entries.len());
        out.extend(s.entries.drain(..n));
        self.inner.queued.store(s.entries.len(), Ordering::Release);
        n
    }

    /// Takes the oldest completion, if any (as `poll(1)`, without a vector per call: a
    /// latency loop polls one at a time).
    pub fn poll_one(&self) -> Option<Completion> {
        let take = || {
            let mut s = self.inner.state.lock();
            let wc = s.entries.pop_front();
            self.inner.queued.store(s.entries.len(), Ordering::Release);
            wc
        };
        if !self.is_empty()
            && let Some(wc) = take()
        {
            self.inner.polled();
            return Some(wc);
        }
        // One upgrade of the weak reference per poll, kept for `polled`: each costs two
        // locked instructions.
        let dev = self.inner.device.upgrade()?;
        if !dev.poll_rx() {
            return None;
        }
        let wc = take()?;
        dev.polled();
        Some(wc)
    }

    /// A lending iterator over up to `max` completions: each [`Polled::next`] lends the next
    /// one until the following call, without copying the batch out. No lock is held between
    /// calls, so the loop body may post, poll other CQs, or create and destroy QPs (the
    /// device locks a QP, then its CQ, to complete a WR; a UC or UD send completes as it
    /// leaves, inside `post_send`).
    pub fn poll_lending(&self, max: usize) -> Polled<'_> {
        let dev = if self.is_empty() {
            let dev = self.inner.device.upgrade();
            if let Some(d) = &dev {
                d.poll_rx();
            }
            dev
        } else {
            None
        };
        Polled {
            cq: &self.inner,
            left: max,
            cur: None,
            lent: false,
            dev,
        }
    }

    /// Iterates over the completions available now, taking each as it is yielded.
    pub fn iter(&self) -> impl Iterator<Item = Completion> + '_ {
        std::iter::from_fn(|| self.poll_one())
    }

    /// Asks for one event on the CQ's channel at the next completion (`ibv_req_notify_cq`);
    /// with `solicited_only`, only at the next solicited receive or error completion.
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        if self.inner.channel.is_none() {
            return Err(Error::NoChannel);
        }
        let mut s = self.inner.state.lock();
        s.armed = Some(solicited_only);
        s.last_arm = solicited_only;
        Ok(())
    }

    /// True once a completion was lost because the CQ was full.
    pub fn overflowed(&self) -> bool {
        self.inner
            .overflowed
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Completions lost because the CQ was full.
    pub fn lost(&self) -> u64 {
        self.inner.lost.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Completions waiting.
    pub fn len(&self) -> usize {
        self.inner.queued.load(Ordering::Acquire)
    }

    /// True when no completion waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A completion channel (`struct ibv_comp_channel`): a pollable file descriptor that becomes
/// readable when an armed CQ gets a completion.
#[derive(Clone)]
pub struct CompletionChannel {
    pub(crate) inner: Arc<ChannelInner>,
}

impl std::fmt::Debug for CompletionChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletionChannel")
            .field("fd", &self.fd())
            .finish()
    }
}

impl CompletionChannel {
    pub(crate) fn new() -> Result<Self> {
        // Blocking, as a kernel channel's descriptor is: `get_cq_event` reads only after
        // poll says readable.
        let fd = crate::eventfd::new(false).map_err(|source| Error::Io {
            verb: "ibv_create_comp_channel",
            source,
        })?;
        Ok(Self {
            inner: Arc::new(ChannelInner {
                fd,
                ready: Lock::new(Rank::CqReady, VecDeque::new()),
                devices: Lock::new(Rank::CqPollers, Vec::new()),
                inline: std::sync::OnceLock::new(),
            }),
        })
    }

    /// The descriptor to poll for readability.
    pub fn fd(&self) -> RawFd {
        self.inner.fd.as_raw_fd()
    }

    /// Waits for the next CQ event (`ibv_get_cq_event`): the CQ that got a completion, or
    /// `None` after `timeout` (`None` waits forever).
    pub fn get_cq_event(&self, timeout: Option<Duration>) -> Result<Option<CompletionQueue>> {
        self.wait_cq_event(timeout, false)
    }

    /// [`CompletionChannel::get_cq_event`] that returns [`Error::Io`] with
    /// [`std::io::ErrorKind::Interrupted`] when a signal interrupts the wait, as `read(2)`
    /// on a kernel channel does, instead of waiting on: C callers check their flags then
    /// (qperf ends its timed loops from a SIGALRM handler).
    pub fn get_cq_event_interruptible(
        &self,
        timeout: Option<Duration>,
    ) -> Result<Option<CompletionQueue>> {
        self.wait_cq_event(timeout, true)
    }

    fn wait_cq_event(
        &self,
        timeout: Option<Duration>,
        interruptible: bool,
    ) -> Result<Option<CompletionQueue>> {
        let deadline = timeout.map(|t| std::time::Instant::now() + t);
        // Sockets that reported an error and no datagram: not watched again in this wait,
        // which would otherwise spin on them (the progress thread deals with them).
        let mut unwatched: Vec<RawFd> = Vec::new();
        loop {
            // Popped in a statement of its own: in an `if let` scrutinee the guard would
            // live through the body, which takes the CQ's lock, and a completion takes
            // the CQ's lock before the ready list (found by the rank check).
            let next = self.inner.ready.lock().pop_front();
            if let Some(w) = next {
                if let Some(inner) = w.upgrade() {
                    let mut s = inner.state.lock();
                    if s.entries.is_empty() && s.armed.is_none() {
                        // A stale event: the completion that raised it was taken by a poll
                        // after the arm (here the poll itself may have received it), so
                        // the caller has seen it. Its arm is still owed: arm again, under
                        // the CQ's lock, so a completion cannot slip between.
                        // Callers that take an event to mean a completion waits
                        // (`ibv_rc_pingpong -e -t`) would otherwise fail.
                        s.armed = Some(s.last_arm);
                        continue;
                    }
                    drop(s);
                    return Ok(Some(CompletionQueue { inner }));
                }
                continue;
            }
            let ms = match deadline {
                None => -1,
                Some(d) => {
                    // Rounded up: a wait that has time left blocks (and so first lets the
                    // device's ACKs go, see `app_blocks`).
                    let left = d.saturating_duration_since(std::time::Instant::now());
                    left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
                }
            };
            let mut pfds = vec![libc::pollfd {
                fd: self.fd(),
                events: libc::POLLIN,
                revents: 0,
            }];
            // The devices whose sockets this wait watches, in the order of `pfds[1..]`.
            let mut watched = Vec::new();
            if ms != 0 {
                // This thread stops polling until the event: the ACKs it deferred leave
                // now, and a device whose socket it cannot watch hands it to its progress
                // thread at once.
                let devs = crate::sync::upgraded(&self.inner.devices.lock());
                // And wait on the devices' sockets too: a datagram wakes this thread,
                // which receives it and makes the completion it waits for itself, instead
                // of waiting for the progress thread to wake and then wake it (one
                // wake-up per packet instead of two).
                for d in devs {
                    let fd = d.rx_fd().filter(|fd| !unwatched.contains(fd));
                    d.app_blocks(fd.is_some());
                    if let Some(fd) = fd {
                        pfds.push(libc::pollfd {
                            fd,
                            events: libc::POLLIN,
                            revents: 0,
                        });
                        watched.push(d);
                    }
                }
            }
            // SAFETY: `pfds` holds `pfds.len()` valid pollfd entries for the call.
            let r = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
            if r < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted && !interruptible {
                    continue;
                }
                return Err(Error::Io {
                    verb: "ibv_get_cq_event",
                    source: e,
                });
            }
            if r == 0 {
                return Ok(None);
            }
            for (p, d) in pfds[1..].iter().zip(&watched) {
                if p.revents & libc::POLLIN != 0 {
                    // Whichever thread gets the socket first receives; the others find it
                    // taken or empty, and wait again.
                    d.receive_blocked();
                } else if p.revents != 0 {
                    unwatched.push(p.fd);
                }
            }
            if pfds[0].revents != 0 {
                // Readable, so the blocking read cannot block.
                crate::eventfd::drain(self.fd());
            }
        }
    }
}

/// Completions lent one at a time by [`CompletionQueue::poll_lending`].
pub struct Polled<'a> {
    cq: &'a CqInner,
    left: usize,
    cur: Option<Completion>,
    /// Whether it lent any.
    lent: bool,
    /// The device, when the poll had to reach it (its CQ was empty): kept for `polled`,
    /// so that a poll upgrades the CQ's weak reference once, not twice.
    dev: Option<Arc<dyn Poller>>,
}

impl Drop for Polled<'_> {
    fn drop(&mut self) {
        if self.lent {
            match &self.dev {
                Some(d) => d.polled(),
                None => self.cq.polled(),
            }
        }
    }
}

impl Polled<'_> {
    /// The next completion, valid until the next call. Takes the CQ's lock for the moment it
    /// takes the completion out, never across the caller's code.
    #[allow(clippy::should_implement_trait)] // a lending iterator cannot be an Iterator
    pub fn next(&mut self) -> Option<&Completion> {
        if self.left == 0 || self.cq.queued.load(Ordering::Acquire) == 0 {
            self.cur = None;
            return None;
        }
        self.left -= 1;
        let mut s = self.cq.state.lock();
        self.cur = s.entries.pop_front();
        self.cq.queued.store(s.entries.len(), Ordering::Release);
        drop(s);
        self.lent |= self.cur.is_some();
        self.cur.as_ref()
    }
}
