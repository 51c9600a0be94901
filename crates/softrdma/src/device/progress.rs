//! The progress thread: one per device, it receives (while no application thread
//! busy-polls), runs the timers, sends what pollers deferred, publishes the counters and
//! the resource list, and serves the sharing and same-host connections' events. It sleeps
//! on one epoll set, to the microsecond ([`wait`]).
//!
//! Owns: the loop ([`progress`]), one pass of it (`progress_pass`), its view of the busy
//! pollers ([`PollerWatch`]) and its poll's tokens. May call: everything below the device
//! that the loop drives: the receive path ([`super::rx`]), the timers, the send batches,
//! the multicast groups ([`super::mcast`]), the sharing ([`super::share`]), the same-host
//! path ([`super::local`]) and its resolver thread ([`super::resolver`], which it starts),
//! the counter and resource files.
//!
//! Threads and locks: the progress thread only (`progress_pass` too, and tests). A pass
//! takes `Rx` to drain, then what the timers and the flush take, one after the other;
//! the loop holds no lock while it waits.

use super::Device;
use super::acks::{ACK_HOLD, SENDER_WINDOW};
use super::poller::APP_POLL_GRACE;
use super::{local, res, share, stats};
use mio::{Events, Interest, Poll, Token};
use softrdma_proto::Instant;
use softrdma_proto::endpoint::Counter;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub(super) const SOCKET: Token = Token(0);
pub(super) const WAKE: Token = Token(1);
/// The progress thread's token for the multicast groups' sockets.
pub(super) const GROUP: Token = Token(2);

/// How long the progress thread keeps polling without sleeping after it last found work:
/// the next packet of a burst usually follows within microseconds, and a wake-up from sleep
/// costs more than that. Not in a process that may run on one CPU only (`taskset -c 0`)
/// while its application threads post sends: they may spin on memory that this thread
/// writes (perftest's latency tests), on that CPU, and its spin would keep them from
/// seeing it (see [`one_cpu`]).
const SPIN: Duration = Duration::from_micros(20);

/// The progress thread's body: runs until the device is closed (see `Device::close`),
/// holding the socket while no application thread busy-polls (`socket_registered`: it is
/// in `poll`'s set already).
pub(super) fn progress(dev: Arc<Device>, mut poll: Poll, mut socket_registered: bool) {
    // Whether application threads were posting sends at the last pass.
    let mut sending = false;
    let one_cpu = one_cpu();
    let mut events = Events::with_capacity(64);
    let mut ready = Vec::with_capacity(64);
    let mut published: (u64, std::time::Instant) = (u64::MAX, std::time::Instant::now());
    // The resource list as last published: the region table's generation, and when.
    let mut res_published: (u64, Option<std::time::Instant>) = (0, None);
    let mut last_work = std::time::Instant::now();
    let mut pollers = PollerWatch::default();
    // The application's send count when last seen, and when it last moved.
    let mut senders = (0u64, Instant::ZERO);
    loop {
        if dev.shutdown.load(Ordering::Acquire) {
            // Nothing already accepted is lost: what the fault injector holds back and the
            // ACKs pollers deferred leave now.
            let released = dev.datapath.release(u64::MAX);
            dev.count_sent(released);
            dev.flush_batch(true);
            stats::write(&dev.stats_key(), &dev.hw_counters());
            dev.datapath.flush_capture();
            return;
        }
        #[cfg(test)]
        if dev.progress_paused.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        // QPNs that sends found no same-host route for: looked up off this thread.
        if let Some(l) = &dev.local
            && l.wants_lookup()
        {
            super::resolver::kick(&dev);
        }
        // Publish the counters at most once a second while they change.
        let activity = dev.counters.get(Counter::SentPkts) + dev.counters.get(Counter::RcvdPkts);
        let mut res_due = dev.res.is_dirty() || dev.mrs.generation() != res_published.0;
        if activity != published.0 && published.1.elapsed() >= Duration::from_secs(1) {
            stats::write(&dev.stats_key(), &dev.hw_counters());
            published = (activity, std::time::Instant::now());
            if let Some(l) = &dev.local {
                l.expire();
            }
            // QP states and PSNs move with the traffic.
            res_due |= res_published.1.is_some();
        }
        if res_due && res_published.1.is_none_or(|t| t.elapsed() >= res::EVERY) {
            dev.res.take_dirty();
            res_published = (dev.mrs.generation(), Some(std::time::Instant::now()));
            res::write(&dev);
            res_due = false;
        }
        // Sleep until a packet, a wake-up (a new timer from another thread) or the next timer.
        let now = dev.now();
        // The last sweep's findings, and what was armed since.
        let timer = |t: u64| (t != u64::MAX).then(|| Instant::from_nanos(t));
        let mut next = timer(dev.gate.next_timer());
        let app_until = pollers.observe(
            dev.app_polls.load(Ordering::Relaxed),
            dev.app_released.load(Ordering::Relaxed),
            now,
        );
        let app_polling = app_until.is_some();
        if app_polling == socket_registered {
            // Hand the socket to the busy poller, or take it back once it has stopped.
            let r = match dev.datapath.readable_fd() {
                None => Ok(()),
                Some(fd) if app_polling => poll.registry().deregister(&mut SocketRef(fd)),
                Some(fd) => {
                    poll.registry()
                        .register(&mut SocketRef(fd), SOCKET, Interest::READABLE)
                }
            };
            if r.is_ok() {
                socket_registered = !app_polling;
                dev.gate.set_app_polling(app_polling);
            }
        }
        if let Some(t) = app_until {
            next = Some(next.map_or(t, |n| n.min(t)));
        }
        dev.datapath.flush_capture();
        if activity != published.0 {
            // Come back to publish once the second is up.
            let t = now.add(Duration::from_secs(1));
            next = Some(next.map_or(t, |n| n.min(t)));
        }
        if res_due {
            // A change the last write was too recent for.
            let t = now.add(res::EVERY);
            next = Some(next.map_or(t, |n| n.min(t)));
        }
        // A timer armed while `next` was worked out saw the old wake-up time and may not
        // have woken this thread: publishing the new one says what was armed meanwhile.
        let (wake_at, deferred) = dev
            .gate
            .publish_sleep(next.map_or(u64::MAX, |t| t.as_nanos()));
        let next = timer(wake_at);
        let mut timeout =
            next.map(|t| Duration::from_nanos(t.as_nanos().saturating_sub(now.as_nanos())));
        if deferred {
            // An application thread deferred ACKs (see `defer_acks`): send them at the
            // latest when its grace ends.
            timeout = Some(timeout.map_or(APP_POLL_GRACE, |t| t.min(APP_POLL_GRACE)));
        }
        if socket_registered
            && let Some(l) = &dev.local
            && l.arm()
        {
            // A same-host ring holds packets already (its producer saw it unarmed).
            timeout = Some(Duration::ZERO);
        }
        if let Some(d) = dev.share.as_ref().and_then(|s| s.tick()) {
            // A probe to report, or a probe round to make.
            timeout = Some(timeout.map_or(d, |t| t.min(d)));
        }
        if socket_registered && !(one_cpu && sending) && last_work.elapsed() < SPIN {
            // Work is pending: look again at once instead of sleeping.
            timeout = Some(Duration::ZERO);
        }
        if let Err(e) = wait(&mut poll, &mut events, &mut ready, timeout) {
            if e.kind() != std::io::ErrorKind::Interrupted {
                return;
            }
        }
        if let Some(share) = &dev.share {
            for &(t, closed) in &ready {
                if matches!(t, SOCKET | WAKE | GROUP) {
                    continue;
                }
                if let Some(l) = &dev.local
                    && (t == local::LISTEN || t.0 >= local::BASE)
                {
                    let happened = l.event(t, closed);
                    for (token, qpn, rkey) in happened.asks {
                        dev.answer_place(l, token, qpn, rkey);
                    }
                    if let Some((ep, sent_to)) = happened.died {
                        dev.lose_peer(share, ep, &sent_to);
                    }
                    continue;
                }
                let change = share.event(poll.registry(), t, closed);
                if let share::Change::Rx {
                    took_over: Some(pid),
                    ..
                } = change
                {
                    // A dead QP's number must not answer its old peers' retries: the dead
                    // owner's are known from what it last published.
                    let n = share.quarantine(&stats::qpns_of(&dev.stats_key(), pid));
                    share::log(format_args!(
                        "{}: {n} QPNs of owner pid {pid} quarantined",
                        dev.addr
                    ));
                }
                if let share::Change::Rx { old, .. } = change
                    && socket_registered
                {
                    // The port (or a new owner's forwarding socket) is read from now on.
                    let _ = poll.registry().deregister(&mut SocketRef(old));
                    if let Some(fd) = dev.datapath.readable_fd() {
                        let _ = poll.registry().register(
                            &mut SocketRef(fd),
                            SOCKET,
                            Interest::READABLE,
                        );
                    }
                }
            }
        }
        let sends = dev.app_sends.load(Ordering::Relaxed);
        let now = dev.now();
        if sends != senders.0 {
            senders = (sends, now);
        }
        sending = sends != 0 && now.as_nanos() < senders.1.add(SENDER_WINDOW).as_nanos();
        if dev.progress_pass(socket_registered, sending) {
            last_work = std::time::Instant::now();
        }
    }
}

impl Device {
    /// What the progress thread does after each wake-up: drain the socket if it holds it
    /// (`socket`), run the timers that are due, and send everything batched, the ACKs that
    /// pollers deferred included. True if it received anything.
    /// `defer`: application threads are posting sends (see `drain`); ACKs deferred
    /// longer than [`ACK_HOLD`] leave all the same.
    pub(crate) fn progress_pass(&self, socket: bool, defer: bool) -> bool {
        // Dropped last: an inline consumer (the CM's agent) of what this pass placed runs
        // here with no lock held, instead of waking its thread.
        let _inline = self.inline_scope();
        let mut got = false;
        if socket {
            let mut st = self.rx.lock();
            got = self.drain(&mut st, false, defer);
        }
        if self.grouped.load(Ordering::Acquire) {
            got |= self.drain_groups(defer);
        }
        let now = self.now();
        self.run_timers(now);
        let oldest = self.deferred_at.load(Ordering::Relaxed);
        let due = oldest != u64::MAX
            && now.as_nanos() >= oldest.saturating_add(ACK_HOLD.as_nanos() as u64);
        self.flush_batch(!defer || due);
        got
    }
}

/// Whether this thread may run on one CPU only (its affinity, which the process's
/// `taskset` set for every thread).
fn one_cpu() -> bool {
    // SAFETY: an all-zero cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid cpu_set_t of the size given; pid 0 is this thread.
    let ok = unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) } == 0;
    // SAFETY: `set` is initialised.
    ok && unsafe { libc::CPU_COUNT(&set) } == 1
}

/// The progress thread's view of the busy pollers: they count as active until a grace
/// after their poll count was last seen to move (a count, not a deadline, so that a poll
/// need not read the clock). While they are, the socket is theirs.
///
/// The grace starts at [`APP_POLL_GRACE`] and doubles each time the count is seen moving
/// again, up to [`POLL_WATCH_MAX`]: a short burst of polls (an application that polls a CQ
/// between two CM events) gives the socket back within two graces of its end, and a
/// poller that spins for seconds (a benchmark) wakes this thread about a thousand times a
/// second, not five thousand.
#[derive(Debug, Default)]
struct PollerWatch {
    /// The count when last seen.
    seen: u64,
    /// Until when (device nanoseconds) they count as active.
    until: u64,
    /// How many looks in a row found the count moved.
    streak: u32,
}

/// The longest grace a poller that keeps polling is given (see [`PollerWatch`]).
const POLL_WATCH_MAX: Duration = Duration::from_millis(1);

impl PollerWatch {
    /// Takes the pollers' count at `now`; `Some(until)` while they count as active.
    /// `released` is `count + 1` of a poller that said it blocks at that count: they are
    /// gone at once, until the count moves.
    fn observe(&mut self, polls: u64, released: u64, now: Instant) -> Option<Instant> {
        if polls != self.seen {
            self.seen = polls;
            let grace = (APP_POLL_GRACE * (1 << self.streak.min(3))).min(POLL_WATCH_MAX);
            self.streak = self.streak.saturating_add(1);
            self.until = now.add(grace).as_nanos();
        } else if self.until <= now.as_nanos() {
            self.streak = 0;
        }
        if released == polls.wrapping_add(1) {
            (self.until, self.streak) = (0, 0);
        }
        (self.until > now.as_nanos()).then(|| Instant::from_nanos(self.until))
    }
}

/// Whether `epoll_pwait2` is there to use (cleared at its first ENOSYS or EPERM).
static PWAIT2: AtomicBool = AtomicBool::new(true);

/// Waits on `poll`'s set for at most `timeout`, to the microsecond, and puts each ready
/// source's token in `ready` with whether its peer closed or failed.
///
/// mio's `Poll::poll` rounds a timeout up to whole milliseconds (epoll_wait's unit), which
/// made every sub-millisecond deadline of the progress thread a millisecond or more: a
/// poller's grace of 200 µs, a held ACK, a short retransmission timer. A connection's
/// MADs that came just after the application's last CQ poll waited that long for the
/// socket (rdma_cm setup took 2 ms instead of a few hundred µs). `epoll_pwait2` (Linux
/// 5.11) takes a timespec; where the kernel lacks it or a sandbox refuses it, the rounded
/// wait is used. The set is mio's, so tokens and readiness read as mio's events would.
fn wait(
    poll: &mut Poll,
    events: &mut Events,
    ready: &mut Vec<(Token, bool)>,
    timeout: Option<Duration>,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    ready.clear();
    if PWAIT2.load(Ordering::Relaxed) {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 64];
        let ts = timeout.map(|d| libc::timespec {
            tv_sec: d.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_nsec: d.subsec_nanos().into(),
        });
        let tsp = ts
            .as_ref()
            .map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: `evs` holds 64 writable entries, `tsp` is null or points to a timespec
        // that outlives the call, and a null signal mask leaves the mask alone.
        let n = unsafe {
            libc::syscall(
                libc::SYS_epoll_pwait2,
                poll.as_raw_fd(),
                evs.as_mut_ptr(),
                evs.len() as libc::c_int,
                tsp,
                std::ptr::null::<libc::sigset_t>(),
                0usize,
            )
        };
        if n >= 0 {
            for e in &evs[..n as usize] {
                let (f, data) = (e.events as libc::c_int, e.u64);
                // As mio reads them: hung up, or readable with the peer's end shut.
                let closed = f & (libc::EPOLLHUP | libc::EPOLLERR) != 0
                    || (f & libc::EPOLLIN != 0 && f & libc::EPOLLRDHUP != 0);
                ready.push((Token(data as usize), closed));
            }
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ENOSYS | libc::EPERM) => PWAIT2.store(false, Ordering::Relaxed),
            _ => return Err(e),
        }
    }
    poll.poll(events, timeout)?;
    ready.extend(
        events
            .iter()
            .map(|ev| (ev.token(), ev.is_read_closed() || ev.is_error())),
    );
    Ok(())
}

/// Lets the progress thread (de)register the device's socket, which the device owns.
pub(super) struct SocketRef(pub(super) std::os::fd::RawFd);

impl mio::event::Source for SocketRef {
    fn register(&mut self, r: &mio::Registry, t: Token, i: Interest) -> std::io::Result<()> {
        mio::unix::SourceFd(&self.0).register(r, t, i)
    }
    fn reregister(&mut self, r: &mio::Registry, t: Token, i: Interest) -> std::io::Result<()> {
        mio::unix::SourceFd(&self.0).reregister(r, t, i)
    }
    fn deregister(&mut self, r: &mio::Registry) -> std::io::Result<()> {
        mio::unix::SourceFd(&self.0).deregister(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hand-off of the socket: pollers count as active from their first poll until a
    /// grace after their count last moved, and no longer.
    #[test]
    fn pollers_hold_the_socket_until_a_grace_after_their_last_poll() {
        let mut w = PollerWatch::default();
        let at = |us: u64| Instant::from_nanos(us * 1000);
        let grace = APP_POLL_GRACE.as_micros() as u64;
        assert_eq!(w.observe(0, 0, at(10)), None, "no poll yet");
        assert_eq!(w.observe(5, 0, at(10)), Some(at(10 + grace)));
        assert_eq!(
            w.observe(9, 0, at(50)),
            Some(at(50 + 2 * grace)),
            "a poll extends it, by twice the grace for a poller seen moving twice"
        );
        assert_eq!(
            w.observe(9, 0, at(50 + 2 * grace - 1)),
            Some(at(50 + 2 * grace))
        );
        assert_eq!(
            w.observe(9, 0, at(50 + 2 * grace)),
            None,
            "the grace is over"
        );
        assert_eq!(
            w.observe(10, 0, at(5000)),
            Some(at(5000 + grace)),
            "and back, with the first grace again"
        );
        // A poller that keeps polling: the grace doubles up to its cap.
        let max = POLL_WATCH_MAX.as_micros() as u64;
        let mut t = 5000;
        for n in 11..20 {
            t += 10;
            let until = w.observe(n, 0, at(t)).expect("polling");
            assert!(until <= at(t + max), "capped at {max} us");
        }
        assert_eq!(w.observe(20, 0, at(t + 1)), Some(at(t + 1 + max)));
    }

    /// A poller that says it blocks gives the socket back at once, and takes it again with
    /// its next poll.
    #[test]
    fn a_poller_that_blocks_gives_the_socket_back_at_once() {
        let mut w = PollerWatch::default();
        let at = |us: u64| Instant::from_nanos(us * 1000);
        let grace = APP_POLL_GRACE.as_micros() as u64;
        assert_eq!(w.observe(7, 0, at(10)), Some(at(10 + grace)));
        assert_eq!(w.observe(7, 8, at(11)), None, "released at count 7");
        assert_eq!(w.observe(7, 8, at(12)), None, "still released");
        assert_eq!(
            w.observe(8, 8, at(13)),
            Some(at(13 + grace)),
            "polling again"
        );
    }
}
