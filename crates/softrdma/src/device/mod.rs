//! The soft RoCE v2 device: the engine's QPs, the region table, the timer queue, the
//! receive path of the sans-I/O endpoint, a datapath beneath (`crate::datapath`: the UDP
//! driver by default, which receives on `IP:4791` and sends from connected sockets), and
//! one progress thread that receives, runs timers and retransmits. The device knows no
//! socket; it hands its datapath whole batches.
//!
//! Contract: whoever holds the receive state drains the socket: the progress thread, or an
//! application thread busy-polling a CQ (the progress thread then stops watching the socket
//! until the polls have stopped for [`APP_POLL_GRACE`]). ACKs produced by an application
//! thread's drain are deferred until that thread's next send (which carries them in the same
//! system call), its next poll (or, while a QP has sends outstanding, the first poll
//! [`POLL_HOLD`] on), or the progress thread's pass, at most about a millisecond after the
//! last poll: far inside any ACK timeout, so a requester never retransmits for it. The
//! progress thread defers its own drains' ACKs the same way while the application sends,
//! for at most [`ACK_HOLD`]. Everything else a drain produces leaves before the drain
//! returns.
//!
//! Timers (retransmission, probes, RNR waits, packets the fault injector holds back) are run
//! by whichever thread finds them due: the progress thread, or a busy poller, which compares
//! the earliest deadline with the clock on each empty poll. While pollers spin on every
//! core, the progress thread may wait milliseconds for a CPU; the timers must not.

pub(crate) mod cq;
pub(crate) mod events;
pub(crate) mod handoff;
pub(crate) mod local;
pub(crate) mod place;
pub(crate) mod qp;
pub(crate) mod regions;
pub(crate) mod res;
pub(crate) mod share;
pub mod stats;

use crate::config::DeviceOptions;
use crate::counters::DeviceCounters;
use crate::datapath::batch::SendBatch;
use crate::datapath::faults::Faulty;
use crate::datapath::pcap::{Capture, Captured};
use crate::datapath::socket::{self as sys, RecvBatch};
use crate::datapath::tx::TxOptions;
use crate::datapath::udp::Udp;
use crate::datapath::{Datapath, Sent};
use crate::error::{Error, Result};
use crate::sync::{Lock, Rank, RwLock};
use cq::CqInner;
use mio::{Events, Interest, Poll, Token, Waker};
use qp::QpShared;
use regions::MrTable;
use softrdma_proto::endpoint::timers::TimerQueue;
use softrdma_proto::endpoint::{Counter, Lookup, QpCell, QpTable, Receiver, RxOutcome};
use softrdma_proto::{AsyncEvent, Instant, Mtu, Pd, WcOpcode};
use softrdma_wire::{Opcode, ROCE_V2_PORT};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

const SOCKET: Token = Token(0);
/// How long the progress thread keeps polling without sleeping after it last found work:
/// the next packet of a burst usually follows within microseconds, and a wake-up from sleep
/// costs more than that. Not in a process that may run on one CPU only (`taskset -c 0`)
/// while its application threads post sends: they may spin on memory that this thread
/// writes (perftest's latency tests), on that CPU, and its spin would keep them from
/// seeing it (see [`one_cpu`]).
const SPIN: Duration = Duration::from_micros(20);

/// How long after an application thread last drained the socket the progress thread leaves
/// the socket to it (and so the longest an ACK it deferred can wait).
const APP_POLL_GRACE: Duration = Duration::from_micros(200);

/// The longest the progress thread holds a deferred ACK for an application's next send:
/// within [`PEER_ACK_DELAY`], the slack a soft requester allows a deferred ACK. A
/// ping-pong turn that the scheduler slowed past it would otherwise get its ACK alone,
/// and fall into the slow pattern the deferral avoids (see `Device::drain`).
const ACK_HOLD: Duration = Duration::from_micros(800);
/// The longest a poller holds deferred ACKs for its application's next request (see
/// `Device::hold_deferred`): a ping-pong's turn, with room for a preemption, far inside
/// [`ACK_HOLD`].
pub(crate) const POLL_HOLD: Duration = Duration::from_micros(50);
/// How long after an application's last send the progress thread goes on deferring ACKs
/// (see `Device::drain`): long enough to span a ping-pong turn that the scheduler slowed
/// (milliseconds on a busy machine), short next to any requester's timeout. An ACK itself
/// is held at most [`ACK_HOLD`].
const SENDER_WINDOW: Duration = Duration::from_millis(10);
/// How long a soft device may hold an ACK back: [`APP_POLL_GRACE`], then the progress
/// thread's next pass, with room for the scheduler. A requester waits this much longer
/// before it probes for a lost tail, so that a deferred ACK is not taken for a lost one.
pub(crate) const PEER_ACK_DELAY: Duration = Duration::from_millis(1);
const WAKE: Token = Token(1);
/// The progress thread's token for the multicast groups' sockets.
const GROUP: Token = Token(2);
/// The next device's id (see `Device::id`).
static NEXT_DEVICE: AtomicU64 = AtomicU64::new(0);

pub(crate) struct Device {
    pub name: String,
    pub addr: IpAddr,
    /// IPv6 scope (interface index) of a link-local address; 0 otherwise.
    pub scope_id: u32,
    pub mtu: Mtu,
    /// Where packets leave and arrive: the UDP driver, wrapped in the fault injector and
    /// the pcap writer when they are asked for (see [`crate::datapath`]).
    datapath: Box<dyn Datapath>,
    /// [`Datapath::holds`], read once at creation: whether a send needs the clock.
    holds: bool,
    /// The device's part in sharing it with this user's other processes (see [`share`]):
    /// which process reads the port, the forwarding routes, the QPN draw. `None` on a
    /// test rig.
    share: Option<share::Share>,
    /// The same-host path: rings to and from the other processes on the device (see
    /// [`local`]). `None` when the device is not shared, when `SOFTRDMA_SHM=0` forces
    /// the UDP path, and when faults or a capture apply (they act on UDP packets).
    local: Option<local::Local>,
    /// Tells devices apart for the per-thread send batches.
    id: u64,
    pub mrs: Arc<MrTable>,
    pub qps: RwLock<QpTable<QpShared>>,
    /// The PDs and CQs, and whether the published list is stale (see [`res`]).
    pub(crate) res: res::Resources,
    /// The smallest round trip to each destination, shared by the QPs that go there (see
    /// [`softrdma_proto::qp::rtt::PathRtt`]).
    paths: Lock<std::collections::HashMap<IpAddr, Arc<softrdma_proto::qp::rtt::PathRtt>>>,
    /// Moves on whenever a QP leaves `qps`, which makes receivers look their QP up again.
    pub qps_gen: AtomicU64,
    next_pd: AtomicU32,
    waker: Waker,
    /// The device's clock (see [`Clock`]).
    clock: Clock,
    pub counters: Arc<DeviceCounters>,
    pub events: Arc<events::AsyncEvents>,
    shutdown: AtomicBool,
    /// The progress thread's wake-up time against the deadlines other threads arm, whether
    /// busy pollers run the timers, and whether ACKs are deferred (see [`handoff`], whose
    /// loom models check it). Its earliest deadline (of any QP timer or held-back packet,
    /// nanoseconds on `now()`) is lowered by whoever arms one and recomputed by each timer
    /// pass ([`Device::run_timers`]). An application thread busy-polling a CQ compares it
    /// with the clock on each empty poll and runs the due timers itself: while pollers spin
    /// on every core, a woken progress thread may wait a scheduler slice (milliseconds) for
    /// a CPU, and a probe or held packet would wait with it. While they poll, arming a
    /// timer does not wake the progress thread: it wakes at least every
    /// [`APP_POLL_GRACE`] by itself, and a wake-up per held-back packet or probe would make
    /// it compete for the CPUs the pollers (of this process and its peers) spin on.
    gate: handoff::WakeGate,
    /// Held by the thread running the timers, so that two do not run the same pass.
    sweeping: Lock<()>,
    /// The QPs' deadlines (see [`softrdma_proto::endpoint::timers`]): a QP enters one only
    /// when it is earlier than the one it has, so this lock is taken about once per
    /// deadline a QP arms from idle, not once per packet; idle QPs have no entry.
    timers: Lock<TimerQueue>,
    /// Tests starve the progress thread with this (it then does nothing but sleep).
    #[cfg(test)]
    pub(crate) progress_paused: AtomicBool,
    /// QPs the timer passes have locked, for the tests that check idle QPs cost nothing.
    #[cfg(test)]
    pub(crate) timer_visits: AtomicU64,
    /// How many times application threads have drained the socket themselves (busy-polling
    /// a CQ). While this keeps moving the progress thread stops watching the socket: waking
    /// it for packets that the poller receives anyway would cost a context switch per packet
    /// on small machines. A count, not a deadline, so that a poll need not read the clock.
    app_polls: AtomicU64,
    /// How many sends application threads have posted (a count, as `app_polls`): while it
    /// moves, the progress thread defers the ACKs of what it receives too, so that they
    /// ride with the application's next request (see `drain`).
    app_sends: AtomicU64,
    /// When the oldest deferred ACK was deferred (device nanoseconds; `u64::MAX`: none):
    /// the progress thread sends it at the latest [`ACK_HOLD`] later.
    deferred_at: AtomicU64,
    /// `app_polls + 1` when a poller said it is about to block (`Poller::app_sleeps`): the
    /// pollers count as gone until the count moves again.
    app_released: AtomicU64,
    /// Counters of QPs already destroyed.
    pub retired: Lock<softrdma_proto::QpCounters>,
    /// How many QPs keep a poller's socket (see [`Poller::polled`]): those that await
    /// completions, whose peers never wrote their memory, or whose peers answered their
    /// last send with a WRITE.
    awaiting: AtomicUsize,
    /// How many QPs have send WRs outstanding: while any has, a poller holds the ACKs it
    /// deferred for the application's next request (see [`Device::poll_rx`]).
    requesting: AtomicUsize,
    /// Set once an application thread polls while no QP awaits anything: it watches for
    /// WRITEs by polling too, and keeps the socket (see [`Poller::polled`]).
    idle_poller: AtomicBool,
    /// Whether a channel of the device's CQs has an inline consumer (the CM's QP1): only
    /// then do receive passes open a scope for it (see [`Device::inline_scope`]).
    pub(crate) inline_consumers: AtomicBool,
    /// The multicast groups QPs are attached to (by the group's IP address, the form its
    /// GID takes on the wire), each with its members' QPNs.
    groups: Lock<std::collections::HashMap<IpAddr, Vec<u32>>>,
    /// Whether `groups` has any: the progress pass looks at the groups' sockets only then.
    grouped: AtomicBool,
    /// The progress thread's poll, for the groups' sockets.
    registry: mio::Registry,
    /// Receive state; whoever holds it drains the socket (the progress thread, or an
    /// application thread polling a CQ, which saves two context switches per message).
    rx: Lock<RxState>,
    /// ACKs produced while an application thread drained the socket, held until that thread
    /// next sends (they then leave in the same system call, behind its request: one UDP GSO
    /// send on loopback) or next polls, or until the progress thread runs. See
    /// [`Device::poll_rx`].
    /// Whether it holds anything is the gate's `deferred`, read without the lock on every
    /// poll.
    deferred: Lock<SendBatch>,
}

struct RxState {
    /// The receive checks, QPN demultiplexing and ACK coalescing (the device core's, shared
    /// with the simulator).
    rx: Receiver<QpShared>,
    batch: RecvBatch,
    /// Datagrams to ask for in an application thread's next receive call.
    want: usize,
    /// Where the multicast groups' datagrams are received (empty until a group is joined).
    group_buf: Vec<u8>,
    /// While rings are open, how often an application thread reads the socket (see
    /// [`UdpPace`]).
    udp: UdpPace,
    /// The ACKs same-host responders left in the rings' boxes, (QPN, PSN), for the drain
    /// to apply (see [`Local::ack`]).
    acks: Vec<(u32, u32)>,
}

/// While same-host rings are open, an application thread's drain reads the socket at most
/// this often while datagrams come (the progress thread reads both on each pass).
const UDP_EVERY: Duration = Duration::from_micros(5);

/// The longest an application thread's drain goes without reading the socket while rings
/// are open: what a datagram that arrives after a quiet spell may wait, far inside the ACK
/// timeouts programs set (IBTA 9.7.6.1.3: 4.096 µs × 2^timeout; perftest's 14 is 67 ms).
const UDP_EVERY_MAX: Duration = Duration::from_micros(128);

/// Empty reads of the socket at [`UDP_EVERY`] before the pace slows: 40 µs without a
/// datagram, longer than a loopback or LAN round trip, so a UDP ping-pong beside the rings
/// keeps the fast pace.
const UDP_PATIENCE: u32 = 8;

/// When an application thread's drain reads the socket while same-host rings are open. A
/// read is a system call, and an empty `recvmmsg` cost 1.2 µs on a KVM guest (AMD EPYC,
/// measured): read every [`UDP_EVERY`], it was a quarter of a same-host SEND ping-pong's
/// CPU. It starts at that pace, and after [`UDP_PATIENCE`]
/// empty reads doubles its interval per empty read up to [`UDP_EVERY_MAX`]; a datagram
/// brings the fast pace back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct UdpPace {
    /// When the socket was last read (device nanoseconds).
    at: u64,
    /// Empty reads in a row.
    empty: u32,
}

impl UdpPace {
    const fn new() -> Self {
        Self { at: 0, empty: 0 }
    }

    /// The interval now.
    fn every(&self) -> u64 {
        let base = UDP_EVERY.as_nanos() as u64;
        let doublings = self.empty.saturating_sub(UDP_PATIENCE).min(16);
        (base << doublings).min(UDP_EVERY_MAX.as_nanos() as u64)
    }

    /// Whether the socket is due at `now`; if so the read is counted as made now.
    fn due(&mut self, now: u64) -> bool {
        let due = now.saturating_sub(self.at) >= self.every();
        if due {
            self.at = now;
        }
        due
    }

    /// What the read found.
    fn found(&mut self, any: bool) {
        self.empty = if any { 0 } else { self.empty.saturating_add(1) };
    }
}

thread_local! {
    /// Packets a thread has produced and not yet handed to the kernel: one batch per device
    /// it sends on, by the device's send path id (see [`Device::with_batch`]).
    static SEND_BATCHES: std::cell::RefCell<Vec<(u64, SendBatch)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// A device's clock.
pub(crate) enum Clock {
    /// The TSC where it is invariant (a read costs about 9 ns here against 24 for
    /// `clock_gettime`, and a ping-pong turn reads it twice), scaled to nanoseconds from the
    /// raw reading `epoch` at creation: the device's time 0.
    Tsc {
        /// The clock.
        clock: quanta::Clock,
        /// Its raw reading at time 0.
        epoch: u64,
    },
    /// Time that moves only when a test moves it (nanoseconds): timers fire exactly when
    /// the test says, on a device with no progress thread.
    #[cfg(test)]
    Manual(Arc<AtomicU64>),
}

impl Clock {
    /// The system's clock, from now.
    fn system() -> Self {
        let clock = quanta::Clock::new();
        Clock::Tsc {
            epoch: clock.raw(),
            clock,
        }
    }

    fn now(&self) -> Instant {
        match self {
            Clock::Tsc { clock, epoch } => {
                Instant::from_nanos(clock.delta_as_nanos(*epoch, clock.raw()))
            }
            #[cfg(test)]
            Clock::Manual(t) => Instant::from_nanos(t.load(Ordering::SeqCst)),
        }
    }
}

impl Device {
    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    pub fn alloc_pd(&self) -> Pd {
        Pd(self.next_pd.fetch_add(1, Ordering::Relaxed))
    }

    pub fn wake(&self) {
        let _ = self.waker.wake();
    }

    /// A resource was created, destroyed or changed: the progress thread publishes the
    /// list soon (see [`res`]).
    pub(crate) fn res_changed(&self) {
        if self.res.changed() {
            self.wake();
        }
    }

    /// Runs `f` on this thread's send batch for this device. Each device a thread uses has
    /// a batch of its own, so a batch never carries one device's packets out of another's
    /// sockets, whatever order a thread's calls into two devices come in. Every entry point
    /// flushes its batch before it returns, so the batches of devices that have closed are
    /// empty, and are dropped once a thread has used many devices.
    pub(crate) fn with_batch<R>(&self, f: impl FnOnce(&mut SendBatch) -> R) -> R {
        SEND_BATCHES.with(|all| {
            let mut all = all.borrow_mut();
            let id = self.id;
            let i = match all.iter().position(|(d, _)| *d == id) {
                Some(i) => i,
                None => {
                    if all.len() >= 8 {
                        all.retain(|(_, b)| !b.is_empty());
                    }
                    all.push((id, SendBatch::default()));
                    all.len() - 1
                }
            };
            f(&mut all[i].1)
        })
    }

    /// Sends the packets this thread has batched, in as few system calls as possible, and
    /// the deferred ACKs behind them when there were any (`with_deferred`: always).
    pub fn flush_batch(&self, with_deferred: bool) {
        self.with_batch(|b| {
            if (with_deferred || !b.is_empty()) && self.gate.deferred(false) {
                let mut d = self.deferred.lock();
                b.append(&mut d);
                // Cleared under the lock: a poller that defers more appends under it, and
                // sets the flag again after.
                self.gate.deferred(true);
                self.deferred_at.store(u64::MAX, Ordering::Relaxed);
            }
            if b.is_empty() {
                return;
            }
            if let (Some(l), Some(s)) = (&self.local, &self.share) {
                let (sent, dropped) = l.divert(b, s);
                self.counters.add(Counter::SentPkts, sent as u64);
                self.counters.add(Counter::SendErr, dropped as u64);
                if b.is_empty() {
                    return;
                }
            }
            // What the rings did not take goes on a wire, with its ICRC.
            b.settle_icrc();
            let now = if self.holds { self.now().as_nanos() } else { 0 };
            let sent = self.datapath.send(b, now);
            self.count_sent(sent);
        });
    }

    /// Counts a send, and makes sure the packets it held back leave in time.
    fn count_sent(&self, s: Sent) {
        for (c, n) in [
            (Counter::SendCalls, s.calls),
            (Counter::SentPkts, s.sent),
            (Counter::SendErr, s.failed),
        ] {
            self.counters.add(c, n as u64);
        }
        if let Some(t) = s.held_until {
            self.timer_armed(Instant::from_nanos(t));
        }
    }

    /// Whether this device carries packets through same-host rings, where its QPs build
    /// them without an ICRC (see [`softrdma_proto::QueuePair::owe_icrc`]).
    pub(crate) fn has_rings_path(&self) -> bool {
        self.local.is_some()
    }

    /// The UDP source port the device's packets leave from.
    pub fn port(&self) -> u16 {
        self.datapath.port()
    }

    /// Records a timer's deadline, and wakes the progress thread if it is earlier than the
    /// thread will wake by itself: either this sees the thread's new wake-up time, or the
    /// thread sees this deadline ([`handoff::WakeGate`]).
    pub fn timer_armed(&self, deadline: Instant) {
        if self.gate.arm(deadline.as_nanos()) {
            self.wake();
        }
    }

    /// Enters the QP's deadline in the timer queue if it is earlier than the entry it has
    /// (see [`softrdma_proto::QueuePair::timer_to_enter`]), and wakes whoever must run it.
    /// Called, with the QP locked, after everything that may arm one of its timers.
    pub fn enter_timer(&self, qp: &mut softrdma_proto::QueuePair) {
        if let Some(t) = qp.timer_to_enter() {
            self.timers.lock().push(t, qp.qpn().value());
            self.timer_armed(t);
        }
    }

    /// The round-trip record of the path to `dst`, which every QP going there shares.
    pub fn path_rtt(&self, dst: IpAddr) -> Arc<softrdma_proto::qp::rtt::PathRtt> {
        let mut paths = self.paths.lock();
        paths.entry(dst.to_canonical()).or_default().clone()
    }

    /// The device's counters with rxe's names (see [`stats`]): its own, and the QPs' summed
    /// over the live and the destroyed ones.
    pub fn hw_counters(&self) -> Vec<(&'static str, u64)> {
        let mut q = *self.retired.lock();
        for s in self.qps.read().values() {
            q += s.qp.lock().counters();
        }
        Counter::hw(|c| self.counters.get(c), &q)
    }

    /// Drains the socket if no other thread is doing so. Returns true if it received anything.
    ///
    /// The ACKs this produces are deferred: an application polling for a message usually
    /// answers it, and its answer then carries them out in the same system call (IBTA vol. 1,
    /// 9.7.5.1 lets a responder coalesce and delay ACKs within the requester's timeout). A
    /// ping-pong over RC thus costs one send per turn, as over UC, instead of two. Whatever
    /// is still deferred leaves at this thread's next poll, its next post of a send, or when
    /// the progress thread takes the socket back ([`APP_POLL_GRACE`] after the last poll).
    pub fn poll_rx(&self) -> bool {
        if self.awaiting.load(Ordering::Relaxed) == 0 {
            // A poll with nothing awaited: this application polls while it waits for
            // WRITEs, so it receives them itself (see `Poller::polled`).
            self.idle_poller.store(true, Ordering::Relaxed);
        }
        self.poll_socket()
    }

    /// A receive scope for the inline consumers of the device's channels (see
    /// [`cq::Inline`]), on a device that has any: a device with no CM pays nothing for it
    /// on its busy polls.
    fn inline_scope(&self) -> Option<cq::Inline> {
        self.inline_consumers
            .load(Ordering::Relaxed)
            .then(cq::Inline::enter)
    }

    /// [`Device::poll_rx`] for a thread that waits for something other than a CQ (a CM
    /// event): it is not taken for an application that watches memory for WRITEs.
    pub(crate) fn poll_socket(&self) -> bool {
        // Dropped last: an inline consumer of what this poll placed runs with no lock held.
        let _inline = self.inline_scope();
        match self.rx.try_lock() {
            Some(mut st) => {
                // This thread's batch is empty (every entry point flushes its own before it
                // returns): only deferred ACKs may wait, and most polls find none.
                if self.gate.deferred(false) && !self.hold_deferred() {
                    self.flush_batch(true);
                }
                // Only a change matters to the progress thread, so two pollers that race
                // and count one poll instead of two are fine, and a plain store spares a
                // locked instruction on every poll.
                let polls = self.app_polls.load(Ordering::Relaxed);
                self.app_polls
                    .store(polls.wrapping_add(1), Ordering::Relaxed);
                let got = self.drain(&mut st, true, true);
                drop(st);
                self.run_due_timers() || got
            }
            // Another thread receives (the progress thread, which may have lost its CPU in
            // the middle): the timers need not wait for it as well.
            None => self.run_due_timers(),
        }
    }

    /// Whether a poller keeps the deferred ACKs for the application's next request rather
    /// than send them alone now: while a QP has sends outstanding, for at most
    /// [`POLL_HOLD`]. In a ping-pong over WRITEs (perftest's `ib_write_lat`) the poller
    /// drains the peer's WRITE before the ACK of its own that came with it; sent alone, the
    /// ACK for that WRITE would give the peer its completion before the next WRITE arrives,
    /// and the peer would then wait for it by watching memory, with its progress thread to
    /// receive it. Held, it rides with the next WRITE, which the peer's poller drains
    /// itself. A poller that waits for receives only (the peer streams to it) sends its
    /// ACKs at each poll.
    fn hold_deferred(&self) -> bool {
        if !self.gate.deferred(false) || self.requesting.load(Ordering::Relaxed) == 0 {
            return false;
        }
        let at = self.deferred_at.load(Ordering::Relaxed);
        at != u64::MAX && self.now().as_nanos() < at.saturating_add(POLL_HOLD.as_nanos() as u64)
    }

    /// A poller's part in the timers: [`Device::run_timers`] if one is due. The progress
    /// thread may be waiting for a CPU that this poller holds. True if it ran them.
    fn run_due_timers(&self) -> bool {
        let now = self.now();
        let due = now.as_nanos() >= self.gate.next_timer();
        if due {
            self.run_timers(now);
        }
        due
    }

    /// Fires the QP timers due at `now` (and services those QPs), sends the held-back
    /// packets that are due, and records when the next timer is due. Skipped when another
    /// thread is doing it. Visits only the QPs whose timer entries came due: an idle QP
    /// costs nothing here. Takes the timer queue's lock per entry (not across a QP's), then
    /// that QP's lock.
    fn run_timers(&self, now: Instant) {
        let Some(_sweeping) = self.sweeping.try_lock() else {
            return;
        };
        // Deadlines armed from here on are recorded beside what this pass finds, and any
        // armed before are in the queue this pass reads.
        self.gate.start_pass();
        // What the datapath held back (the fault injector) and is due leaves first.
        let released = self.datapath.release(now.as_nanos());
        let mut next = released.held_until.map(Instant::from_nanos);
        self.count_sent(Sent {
            held_until: None,
            ..released
        });
        // Each entry once, and the entries the pass itself makes a few times over: a QP
        // whose handled timeout left its deadline due would otherwise hold the pass for
        // ever; what is left goes at the next pass.
        let mut budget = self.timers.lock().len() + 64;
        while budget > 0 {
            budget -= 1;
            let due = self.timers.lock().pop_due(now);
            let Some((at, qpn)) = due else { break };
            softrdma_proto::endpoint::fire_entry(self, at, qpn, now, |shared, qp| {
                #[cfg(test)]
                self.timer_visits.fetch_add(1, Ordering::Relaxed);
                self.service_at(shared, qp, now);
                self.enter_timer(qp);
            });
        }
        // Deferred ACKs stay deferred: whoever runs the timers sends them by its own rule
        // (a poller at its next poll, the progress thread after its pass).
        self.flush_batch(false);
        if let Some((t, _)) = self.timers.lock().peek() {
            next = Some(next.map_or(t, |n| n.min(t)));
        }
        if let Some(t) = next {
            // Through `timer_armed`: the progress thread may have read `next_timer` while
            // this pass had it cleared.
            self.timer_armed(t);
        }
    }

    /// Receives and handles what is waiting. An application thread (`app`) makes one
    /// receive call and defers the ACKs; the progress thread, woken by an edge-triggered
    /// poll, empties the socket and sends at once.
    /// `app`: an application thread drains (it returns after one batch). `defer`: the
    /// progress thread drains while application threads post sends: its ACKs are deferred
    /// as a poller's are, to ride with their next request. Without that, a peer that waits
    /// for the ACK of its WRITE gets it alone, before the WRITE that answers, and then
    /// spins on memory while that WRITE waits for a progress thread (perftest's
    /// `ib_write_lat`: the two ends spin on memory, not on their CQs).
    fn drain(&self, st: &mut RxState, app: bool, defer: bool) -> bool {
        let _drains = local::Draining::enter();
        let mut any = false;
        let RxState {
            rx,
            batch,
            want,
            udp,
            acks,
            ..
        } = st;
        loop {
            let ask = if app { *want } else { sys::RX_BATCH };
            let mut ringed = false;
            let got = self.recv_some(batch, ask, app, udp, &mut ringed, acks);
            // One datagram is asked for while they come one at a time (a ping-pong); a full
            // batch means more are queued.
            *want = match got {
                Ok(n) if n == ask => sys::RX_BATCH,
                _ => 1,
            };
            let n = match got {
                Ok(n) if n > 0 => n,
                _ if !acks.is_empty() => 0,
                _ => return any,
            };
            any = true;
            // One clock reading per batch: the packets of a batch arrived together.
            let now = self.now();
            for i in 0..n {
                match batch.get(i) {
                    // GRO coalesced equal segments (the last may be shorter).
                    (data, Some(from), false, seg) if seg > 0 => {
                        for d in data.chunks(seg) {
                            self.receive(rx, d, from, now, ringed);
                        }
                    }
                    (data, Some(from), false, _) => self.receive(rx, data, from, now, ringed),
                    _ => {
                        self.counters.add(Counter::RcvdMalformed, 1);
                    }
                }
            }
            // Behind the packets read with them (the ring's order), the ACKs that came in
            // memory.
            for (qpn, psn) in acks.drain(..) {
                rx.ack_from_memory(self, now, qpn, softrdma_wire::Psn::new(psn));
            }
            self.publish(rx.take_counts());
            // The QPs that received, serviced once after the whole batch: their responses
            // (ACKs above all) coalesce, and leave in one system call instead of one each
            // (IBTA 9.7.5.1: an ACK acknowledges every request before it, so one will do).
            self.service_touched(rx, now);
            if app {
                self.defer_acks(now);
                return any;
            }
            if defer {
                self.defer_acks(now);
            } else {
                self.flush_batch(true);
            }
            // With rings open the sources are read in turn: go on until both are empty.
            if n < sys::RX_BATCH && !self.local.as_ref().is_some_and(|l| l.has_rings()) {
                return any;
            }
        }
    }

    /// Receives up to `ask` packets from the socket or the same-host rings. An application
    /// thread (`app`) reads the rings, and the socket when its [`UdpPace`] says; the
    /// progress thread reads the socket and, when it is empty, the rings. `ringed` is set
    /// when the packets came from the rings.
    fn recv_some(
        &self,
        batch: &mut RecvBatch,
        ask: usize,
        app: bool,
        pace: &mut UdpPace,
        ringed: &mut bool,
        acks: &mut Vec<(u32, u32)>,
    ) -> std::io::Result<usize> {
        let Some(l) = self.local.as_ref().filter(|l| l.has_rings()) else {
            return self.datapath.recv(batch, ask);
        };
        let app_due = app && pace.due(self.now().as_nanos());
        if !app || app_due {
            let got = self.datapath.recv(batch, ask);
            let any = matches!(got, Ok(1..));
            if app_due {
                pace.found(any);
            }
            if any {
                return got;
            }
        }
        // Whatever the rings hold, however few were asked for: reading more costs no
        // system call, and the packets of one turn (an ACK and the answer behind it) are
        // then handled, and their QP serviced, in one pass instead of one pass each.
        let (n, bad) = l.recv(batch, sys::RX_BATCH, acks);
        if bad > 0 {
            self.counters.add(Counter::RcvdMalformed, bad as u64);
        }
        *ringed = true;
        Ok(n)
    }

    /// A same-host peer died (endpoint `ep`; `sent_to`: the QPNs this process sent to
    /// there): every QP of this device connected to a QP of that process goes to ERROR
    /// now, as its retries would have taken it, and hands out its completions (see
    /// [`local`]). A QP that never sent to its peer (a server still waiting for the first
    /// message) is found by asking the owner who holds its peer's QPN: the dead process
    /// (the owner has not seen it go yet). A QP whose peer the owner no longer knows, or
    /// cannot be asked about, is left to its retries.
    fn lose_peer(&self, share: &share::Share, ep: u64, sent_to: &[u32]) {
        let sent_to: std::collections::HashSet<u32> = sent_to.iter().copied().collect();
        for s in self.qp_list() {
            let a = s.qp.lock().query();
            let (Some(q), Some(av)) = (a.dest_qpn, a.av) else {
                continue;
            };
            if !softrdma_proto::qp::same_ip(av.dst, self.addr) {
                continue;
            }
            // Asked without the QP's lock: a member's question waits for its owner.
            // Only a positive answer counts: a new owner that has not yet heard from its
            // members says "nobody" of live QPNs.
            let gone = sent_to.contains(&q.value())
                || share
                    .holder(q.value())
                    .is_ok_and(|h| h == share::Holder::At(ep));
            if gone {
                let mut qp = s.qp.lock();
                qp.peer_gone();
                self.service(&s, &mut qp);
            }
        }
        self.flush_batch(true);
    }

    /// Hands one received datagram to its QP through the receive path (`ringed`: it came
    /// through a same-host ring, so no ICRC is checked).
    fn receive(
        &self,
        rx: &mut Receiver<QpShared>,
        data: &[u8],
        from: SocketAddr,
        now: Instant,
        ringed: bool,
    ) {
        if let Some(s) = &self.share
            && let Some((index, nonce)) = share::steer::parse_probe(data)
        {
            // The device's owner asks which socket of the group this is.
            if s.saw_probe(index, nonce) {
                self.wake();
            }
            return;
        }
        if !ringed
            && let Some(s) = &self.share
            && share::dest_qpn(data) == Some(softrdma_wire::cm::GSI_QPN)
            && s.misdelivered_mad(data)
            && s.hand_back(data, from)
        {
            // Another process's MAD that the group gave this member: its owner routes it.
            self.counters.add(Counter::HandedBackPkts, 1);
            return;
        }
        // A ring's packets are this process's: their producer found the QPN's holder
        // before it wrote them (see `local`).
        if !ringed
            && let Some(s) = &self.share
            && s.forwarding()
            && let Some(sent) = s.forward(data, from)
        {
            // Another process's QP: it gets the datagram as it came.
            let c = if sent {
                Counter::ForwardedPkts
            } else {
                Counter::ForwardErr
            };
            self.counters.add(c, 1);
            return;
        }
        if ringed {
            rx.datagram_from_memory(self, now, self.addr, from.ip(), from.port(), data);
        } else if let RxOutcome::UnknownQpn { .. } =
            rx.datagram(self, now, self.addr, from.ip(), from.port(), data)
            && let Some(s) = &self.share
            && s.hand_back(data, from)
        {
            // Not lost: the owner routes it where it belongs.
            self.counters.add(Counter::HandedBackPkts, 1);
        }
    }

    /// A QPN for a new QP: random, and unique among the processes that share the device
    /// (see [`share`]).
    pub(crate) fn alloc_qpn(&self, taken: impl Fn(u32) -> bool) -> Result<u32> {
        match &self.share {
            Some(s) => s.alloc_qpn(),
            None => Ok(loop {
                let n = rand::random::<u32>() & 0xFF_FFFF;
                if n > 1 && !taken(n) {
                    break n;
                }
            }),
        }
    }

    /// QPN `qpn` is free again (its QP is destroyed).
    pub(crate) fn free_qpn(&self, qpn: u32) {
        // QP1 is the GSI's, never drawn.
        if qpn > 1
            && let Some(s) = &self.share
        {
            s.free_qpn(qpn);
        }
    }

    /// The low byte of this process's CM communication IDs on the device: what tells the
    /// port's reader whose a MAD for QP1 is (see `share::CmRoutes`).
    pub(crate) fn cm_tag(&self) -> u8 {
        self.share.as_ref().map_or(0, |s| s.cm_tag())
    }

    /// Makes this process the device's listener on CM service `sid`: `Ok(false)` if
    /// another process of the device listens on it.
    pub(crate) fn cm_listen(&self, sid: u64) -> Result<bool> {
        self.share.as_ref().map_or(Ok(true), |s| s.cm_listen(sid))
    }

    /// This process no longer listens on CM service `sid`.
    pub(crate) fn cm_unlisten(&self, sid: u64) {
        if let Some(s) = &self.share {
            s.cm_unlisten(sid);
        }
    }

    /// Whether this process reads the port (it owns the device, or has it alone), and how
    /// many other processes it forwards to.
    pub(crate) fn sharing(&self) -> (bool, usize) {
        self.share.as_ref().map_or((true, 0), |s| s.members())
    }

    /// Adds a receive batch's counts to the device's counters (zeros are not added: each
    /// add is a locked instruction).
    fn publish(&self, c: softrdma_proto::endpoint::RxCounts) {
        for (counter, n) in c.by_counter() {
            self.counters.add(counter, n);
        }
    }

    /// Moves this thread's batch to the deferred ACKs if it holds nothing else (RC
    /// ACKNOWLEDGE packets: READ responses and atomic ACKs carry what a requester waits
    /// for); otherwise sends it, deferred ACKs included.
    fn defer_acks(&self, now: Instant) {
        // None: nothing to send; Some(false): more than ACKs, to send now.
        let deferred = self.with_batch(|b| {
            if b.is_empty() {
                return None;
            }
            if !b.first_bytes().all(|op| op == Opcode::RC_ACKNOWLEDGE.0) {
                return Some(false);
            }
            let mut d = self.deferred.lock();
            d.append(b);
            let _ = self.deferred_at.compare_exchange(
                u64::MAX,
                now.as_nanos(),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            Some(true)
        });
        match deferred {
            None => {}
            Some(true) => {
                // Should this thread stop polling, the progress thread sends them: make sure
                // it wakes in time. It reads the flag after publishing when it will wake, and
                // this reads that time after setting the flag: one of the two sees the other
                // (the loom model `deferred_acks_are_never_left_behind`).
                self.gate.set_deferred();
                self.timer_armed(now.add(APP_POLL_GRACE));
            }
            Some(false) => self.flush_batch(true),
        }
    }

    /// Builds the QP's packets in place at the end of this thread's batch (the datapath
    /// sends them, or with fault injection drops or holds some back, at the flush).
    fn transmit(&self, qp: &mut softrdma_proto::QueuePair, now: Instant) {
        // Most services (a completion handed out, a receive posted) send nothing: they
        // skip the batch and the engine's pass.
        if !qp.may_transmit() {
            return;
        }
        let dst_of = |ip: IpAddr| match ip.to_canonical() {
            // Link-local peers are reached through the device's interface.
            IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80 => SocketAddr::V6(
                std::net::SocketAddrV6::new(v6, ROCE_V2_PORT, 0, self.scope_id),
            ),
            ip => SocketAddr::new(ip, ROCE_V2_PORT),
        };
        // Packets are built in place, at the end of this thread's batch.
        self.with_batch(|b| {
            // A positive ACK to a same-host requester goes in its ring's ACK box instead of
            // a packet, when nothing of this thread's is still unsent to keep order with.
            if b.is_empty()
                && let Some(l) = &self.local
            {
                while qp
                    .carry_ack(|q, dst, p| l.is_local(dst_of(dst)) && l.ack(q.value(), p.value()))
                {
                }
            }
            while qp.may_transmit()
                && let Some(queued) = b.push_with(&*self.mrs, |buf, at| {
                    let t = qp.poll_transmit_at(now, buf, at)?;
                    let owed = t.icrc_owed.then_some((t.src, t.src_port));
                    Some((t.len, dst_of(t.dst), t.lent, owed, t.traffic_class))
                })
            {
                if !queued {
                    self.counters.add(Counter::SendErr, 1);
                }
            }
        });
    }

    /// Puts what the QP wants to send in this thread's batch (sent by
    /// [`Device::flush_batch`]) and hands out its completions and events. Called with the QP
    /// locked, by whichever thread touched it.
    pub fn service(&self, shared: &QpShared, qp: &mut softrdma_proto::QueuePair) {
        self.service_at(shared, qp, self.now());
    }

    /// [`Device::service`] at `now`, a clock reading the caller already has. It may be a
    /// little older than one another thread used for this QP: the engine's time arithmetic
    /// saturates, and a timer set a microsecond early is still microseconds inside its
    /// millisecond-scale timeout. (A clock read costs about 10 ns.)
    fn service_at(&self, shared: &QpShared, qp: &mut softrdma_proto::QueuePair, now: Instant) {
        // A held WRITE comes to the front when the ACK of the WR before it completed it.
        self.place_held(qp);
        self.transmit(qp, now);
        while let Some(wc) = qp.poll_completion() {
            let cq: &Arc<CqInner> = match wc.opcode {
                WcOpcode::Recv | WcOpcode::RecvRdmaWithImm => &shared.recv_cq,
                _ => &shared.send_cq,
            };
            if !matches!(
                wc.status,
                softrdma_proto::WcStatus::Success | softrdma_proto::WcStatus::WrFlushErr
            ) {
                *shared.last_error.lock() = Some(wc.status);
            }
            cq.push(wc);
        }
        if let Some(first) = qp.poll_event() {
            let rest = std::iter::from_fn(|| qp.poll_event());
            self.events.push(std::iter::once(first).chain(rest));
        }
        self.note_awaits(shared, qp);
        if shared.granted.load(Ordering::Relaxed) && !receives(qp.state()) {
            // It can no longer take WRITEs: no peer may place one.
            shared.granted.store(false, Ordering::Relaxed);
            self.mrs.granted.revoke_qpn(qp.qpn().value());
        }
    }

    /// Records whether the QP awaits completions and has requests outstanding, which
    /// decide who receives (see `Poller::polled`). A QP whose peer answered its last send
    /// with a WRITE keeps the socket with its poller: the application, having its
    /// completion, finds its memory written and posts again at once.
    pub(crate) fn note_awaits(&self, shared: &QpShared, qp: &softrdma_proto::QueuePair) {
        self.set_awaits(
            shared,
            qp.awaits_completions() || !qp.written() || qp.answered(),
            qp.sends_outstanding(),
        );
    }

    /// The name this device's counter and resource files go under ([`stats::key`]).
    pub(crate) fn stats_key(&self) -> String {
        stats::key(&self.name, self.addr)
    }

    /// Whether same-host peers may map this device's regions (see [`place`]).
    pub(crate) fn shares_memory(&self) -> bool {
        self.local.as_ref().is_some_and(|l| l.cma())
    }

    /// Posts a send WR on `qp` (its lock held): a WRITE to a same-host peer that granted
    /// its range may be placed in the peer's memory instead of sent (see [`place`]).
    pub(crate) fn post_send(
        &self,
        qp: &mut softrdma_proto::QueuePair,
        wr: softrdma_proto::SendWr,
    ) -> std::result::Result<(), softrdma_proto::PostError> {
        let Some(l) = self.local.as_ref().filter(|l| l.has_routes()) else {
            return qp.post_send(wr);
        };
        let (pd, sig_all) = (qp.pd(), qp.sq_sig_all());
        qp.post_send_placed(wr, |wr, dqpn, dst, idle| {
            use softrdma_proto::Placing;
            let softrdma_proto::SendOp::Write { rkey, .. } = wr.op else {
                return Placing::Wire;
            };
            if !l.is_local(SocketAddr::new(dst, softrdma_wire::ROCE_V2_PORT)) {
                return Placing::Wire;
            }
            let big = wr.payload.len() >= PLACE_ALWAYS;
            let signaled = sig_all || wr.flags.contains(softrdma_proto::SendFlags::SIGNALED);
            // Through a mapped region a placed WRITE is a plain copy, always worth it; by
            // cross-memory copy a small one costs a system call, more than its ring entry:
            // it is placed only where it is waited for (a signaled one on an idle QP, a
            // latency test), not in a stream.
            let Some(grant) = l.granted(dqpn.value(), rkey) else {
                return Placing::Wire;
            };
            match (idle, grant.mapped() || big || (idle && signaled)) {
                (true, true) if self.place(l, pd, wr, dqpn.value(), &grant) => Placing::Done,
                (false, true) => Placing::Hold,
                _ => Placing::Wire,
            }
        })
        .map(drop)
    }

    /// Places the WRITE `wr` of a QP of PD `pd` in the memory of QPN `dqpn`'s process,
    /// under the grant `p` that process gave (see [`place`]): true if it is there.
    fn place(
        &self,
        l: &local::Local,
        pd: Pd,
        wr: &softrdma_proto::SendWr,
        dqpn: u32,
        p: &place::Placement,
    ) -> bool {
        let softrdma_proto::SendOp::Write { remote_addr, rkey } = wr.op else {
            return false;
        };
        let placed = match &wr.payload {
            softrdma_proto::Payload::Inline(v) => {
                l.place(p, dqpn, rkey, remote_addr, &[(v.as_ptr(), v.len())])
            }
            // One SGE, as nearly every WRITE has: its region stays registered meanwhile.
            softrdma_proto::Payload::Sges(s) if s.len() == 1 => {
                let s = s[0];
                self.mrs
                    .with_local(pd, s.lkey, s.addr, u64::from(s.length), |at, n| {
                        l.place(p, dqpn, rkey, remote_addr, &[(at, n)])
                    })
                    .unwrap_or(place::Placed::NotNow)
            }
            _ => place::Placed::NotNow,
        };
        if placed == place::Placed::Refused {
            self.counters.add(Counter::PlaceRefused, 1);
        }
        placed == place::Placed::Done
    }

    /// Places the held WRITEs of `qp` whose turn has come (see
    /// `softrdma_proto::QueuePair::post_send_placed`), or releases them to the wire.
    fn place_held(&self, qp: &mut softrdma_proto::QueuePair) {
        let Some(l) = &self.local else {
            return;
        };
        let pd = qp.pd();
        while let Some((wr, dqpn, _)) = qp.held_front() {
            let softrdma_proto::SendOp::Write { rkey, .. } = wr.op else {
                break;
            };
            let placed = l
                .granted(dqpn.value(), rkey)
                .is_some_and(|p| self.place(l, pd, wr, dqpn.value(), &p));
            qp.complete_held(placed);
        }
    }

    /// Answers a same-host peer's ask (on connection `token`) to place WRITEs to QP `qpn`
    /// through `rkey`: granted if the receive path would take such a WRITE (see
    /// [`place`]), refused otherwise.
    fn answer_place(&self, l: &local::Local, token: usize, qpn: u32, rkey: u32) {
        let Some(table) = l.table_for(token) else {
            return;
        };
        // The region granted, kept until the answer (with its memfd) is sent.
        let mut region = None;
        let grant = Lookup::get(self, qpn).and_then(|shared| {
            // Issued under the QP's lock: a modify that follows revokes it.
            let qp = shared.qp.lock();
            let a = qp.query();
            // RC only: what a UC sender places could overtake its earlier WRITEs in the
            // ring (see `QueuePair::post_send_placed`).
            let ok = qp.qp_type() == softrdma_proto::QpType::Rc
                && receives(qp.state())
                && a.access_flags
                    .is_some_and(|f| f.contains(softrdma_proto::AccessFlags::REMOTE_WRITE))
                && a.av
                    .is_some_and(|av| softrdma_proto::qp::same_ip(av.dst, self.addr));
            if !ok {
                return None;
            }
            let pd = qp.pd();
            let g = self.mrs.granted.issue(&table, qpn, rkey, || {
                region = self.mrs.get(rkey).filter(|m| {
                    m.pd == pd && m.access.contains(softrdma_proto::AccessFlags::REMOTE_WRITE)
                });
                region.clone()
            })?;
            shared.granted.store(true, Ordering::Relaxed);
            Some(g)
        });
        let memfd = region.as_ref().and_then(|m| m.shared_fd());
        l.answer(token, qpn, rkey, grant, &table, memfd);
    }

    /// After `ibv_modify_qp` on `shared` (QPN `qpn`): grants to it are revoked unless it
    /// still takes WRITEs with the same rights.
    pub(crate) fn modified(&self, shared: &QpShared, qpn: u32, attr: &softrdma_proto::QpAttr) {
        if !shared.granted.load(Ordering::Relaxed) {
            return;
        }
        let state = shared.qp.lock().state();
        if attr.access_flags.is_some() || !receives(state) {
            shared.granted.store(false, Ordering::Relaxed);
            self.mrs.granted.revoke_qpn(qpn);
        }
    }

    /// Records whether `shared`'s QP keeps a poller's socket (see [`Poller::polled`]) and
    /// whether it has sends outstanding; its lock is held, so the flags and the counts move
    /// together.
    pub(crate) fn set_awaits(&self, shared: &QpShared, awaits: bool, requests: bool) {
        for (flag, count, on) in [
            (&shared.awaits, &self.awaiting, awaits),
            (&shared.requests, &self.requesting, requests),
        ] {
            if flag.load(Ordering::Relaxed) != on {
                flag.store(on, Ordering::Relaxed);
                if on {
                    count.fetch_add(1, Ordering::Relaxed);
                } else {
                    count.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
    }
}

/// The size from which a WRITE to a same-host peer is placed whenever it was granted,
/// waiting for the WRs before it if need be: one cross-memory copy instead of a packet per
/// 4 KiB through the ring, each copied four times.
const PLACE_ALWAYS: u64 = 16384;

/// Whether a QP in `state` takes incoming requests: from RTR on, until ERROR or RESET
/// (its receive queue works in SQD and SQE too).
fn receives(state: softrdma_proto::QpState) -> bool {
    use softrdma_proto::QpState::*;
    matches!(state, Rtr | Rts | Sqd | Sqe)
}

fn progress(dev: Arc<Device>, mut poll: Poll, mut socket_registered: bool) {
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
struct SocketRef(std::os::fd::RawFd);

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

impl QpCell for QpShared {
    fn lock_qp(&self) -> impl std::ops::DerefMut<Target = softrdma_proto::QueuePair> + '_ {
        self.qp.lock()
    }
}

impl Lookup<QpShared> for Device {
    fn generation(&self) -> u64 {
        self.qps_gen.load(Ordering::Acquire)
    }
    fn get(&self, qpn: u32) -> Option<Arc<QpShared>> {
        self.qps.read().get(qpn)
    }
    fn members(&self, group: IpAddr, out: &mut Vec<Arc<QpShared>>) {
        // The table first: a QP's lock (attach, detach) is taken before the groups'.
        let qps = self.qps.read();
        let groups = self.groups.lock();
        let Some(qpns) = groups.get(&group) else {
            return;
        };
        out.extend(qpns.iter().filter_map(|q| qps.get(*q)));
    }
}

impl Device {
    /// Every QP of this device now, taken out of the table so that no lock is held while
    /// the caller works on them.
    pub(crate) fn qp_list(&self) -> Vec<Arc<QpShared>> {
        self.qps.read().values().cloned().collect()
    }

    /// Opens the device `name` on `addr` (IPv6 scope `scope_id`): binds `addr:4791`, makes
    /// the sending path, and starts the progress thread, which runs until [`Device::close`].
    pub(crate) fn open(
        name: &str,
        addr: IpAddr,
        scope_id: u32,
        mtu: Mtu,
        opts: DeviceOptions,
    ) -> Result<(Arc<Device>, std::thread::JoinHandle<()>)> {
        let counters = Arc::new(DeviceCounters::default());
        let bind = |how| Udp::bind_port(addr, scope_id, opts.gso, how);
        let mrs = Arc::new(MrTable::new(opts.zero_copy));
        let local = (opts.share && opts.shm && opts.faults.is_none() && opts.pcap.is_none())
            .then(|| local::Local::bind(addr, scope_id, opts.cma, mrs.granted.clone()))
            .flatten();
        let ep = local.as_ref().map_or(0, |l| l.ep);
        let share = share::Share::attach(addr, scope_id, !opts.share, opts.steer, ep, &bind)?;
        let udp = Udp::open(
            share.rx.clone(),
            addr,
            scope_id,
            TxOptions {
                // A capture records every packet it sends with IP ID 0, which only the
                // unconnected socket sends.
                connect: opts.connected && opts.pcap.is_none(),
                gso: opts.gso,
                gso_everywhere: opts.gso_everywhere,
            },
            counters.clone(),
        )?;
        // The wrappers, innermost first: a capture records what the faults let out.
        let captured: Box<dyn Datapath> = match &opts.pcap {
            Some(p) => Box::new(Captured::new(udp, addr, Capture::create(p)?)),
            None => Box::new(udp),
        };
        if let Some(f) = &opts.faults {
            // The device applies the per-packet faults; a link's rate and a partition are
            // the simulator's, and silently ignoring them would mislead.
            let sim_only = [
                (f.rate.is_some(), "rate"),
                (f.partition_at.is_some(), "partition_at"),
            ];
            if let Some((_, what)) = sim_only.iter().find(|(set, _)| *set) {
                return Err(Error::Faults {
                    spec: format!("{f:?}"),
                    source: softrdma_proto::faults::FaultsError::SimulatorOnly(what),
                });
            }
        }
        let datapath: Box<dyn Datapath> = match opts.faults {
            Some(f) => Box::new(Faulty::new(captured, f)),
            None => captured,
        };
        let (dev, poll) = Self::assemble(
            name,
            addr,
            scope_id,
            mtu,
            mrs,
            datapath,
            Some(share),
            local,
            Clock::system(),
            counters,
        )?;
        if let Some(s) = &dev.share {
            s.register(poll.registry())
                .map_err(Error::io("ibv_open_device: poll"))?;
        }
        if let Some(l) = &dev.local {
            l.start(poll.registry(), dev.port())
                .map_err(Error::io("ibv_open_device: poll"))?;
        }
        let d = dev.clone();
        let thread = std::thread::Builder::new()
            .name(format!("softrdma-{name}"))
            .spawn(move || progress(d, poll, true))
            .map_err(Error::io("ibv_open_device: progress thread"))?;
        Ok((dev, thread))
    }

    /// The device itself, over `datapath`, with its
    /// progress thread's poll (the thread is the caller's to start).
    #[allow(clippy::too_many_arguments)]
    fn assemble(
        name: &str,
        addr: IpAddr,
        scope_id: u32,
        mtu: Mtu,
        mrs: Arc<MrTable>,
        datapath: Box<dyn Datapath>,
        share: Option<share::Share>,
        local: Option<local::Local>,
        clock: Clock,
        counters: Arc<DeviceCounters>,
    ) -> Result<(Arc<Device>, Poll)> {
        let holds = datapath.holds();
        let poll = Poll::new().map_err(Error::io("ibv_open_device: poll"))?;
        if let Some(fd) = datapath.readable_fd() {
            poll.registry()
                .register(&mut SocketRef(fd), SOCKET, Interest::READABLE)
                .map_err(Error::io("ibv_open_device: poll"))?;
        }
        let waker =
            Waker::new(poll.registry(), WAKE).map_err(Error::io("ibv_open_device: poll"))?;
        let registry = poll
            .registry()
            .try_clone()
            .map_err(Error::io("ibv_open_device: poll"))?;
        let dev = Arc::new(Device {
            name: name.to_owned(),
            addr,
            scope_id,
            mtu,
            datapath,
            holds,
            share,
            local,
            id: NEXT_DEVICE.fetch_add(1, Ordering::Relaxed),
            mrs,
            qps: RwLock::new(Rank::QpTable, QpTable::default()),
            res: {
                // Published once at open too: `res show` counts the processes.
                let r = res::Resources::default();
                r.changed();
                r
            },
            paths: Lock::new(Rank::Paths, std::collections::HashMap::new()),
            qps_gen: AtomicU64::new(0),
            next_pd: AtomicU32::new(1),
            waker,
            clock,
            counters,
            events: {
                let e = Arc::new(events::AsyncEvents::new());
                e.push([AsyncEvent::PortActive(1)]);
                e
            },
            shutdown: AtomicBool::new(false),
            gate: handoff::WakeGate::new(),
            sweeping: Lock::new(Rank::Sweeping, ()),
            timers: Lock::new(Rank::Timers, TimerQueue::default()),
            #[cfg(test)]
            progress_paused: AtomicBool::new(false),
            #[cfg(test)]
            timer_visits: AtomicU64::new(0),
            app_polls: AtomicU64::new(0),
            app_released: AtomicU64::new(0),
            app_sends: AtomicU64::new(0),
            deferred_at: AtomicU64::new(u64::MAX),
            retired: Lock::new(Rank::Retired, softrdma_proto::QpCounters::default()),
            rx: Lock::new(
                Rank::Rx,
                RxState {
                    rx: Receiver::default(),
                    batch: RecvBatch::default(),
                    want: 1,
                    group_buf: Vec::new(),
                    udp: UdpPace::new(),
                    acks: Vec::new(),
                },
            ),
            deferred: Lock::new(Rank::Deferred, SendBatch::default()),
            groups: Lock::new(Rank::Groups, std::collections::HashMap::new()),
            grouped: AtomicBool::new(false),
            awaiting: AtomicUsize::new(0),
            requesting: AtomicUsize::new(0),
            idle_poller: AtomicBool::new(false),
            inline_consumers: AtomicBool::new(false),
            registry,
        });
        Ok((dev, poll))
    }

    /// A device over `datapath` on a clock the test moves, with no progress thread: the
    /// test's own calls (posts, polls) do all the work, so what happens is decided by the
    /// test alone, with no sockets or sleeps.
    #[cfg(test)]
    pub(crate) fn rig(
        name: &str,
        addr: IpAddr,
        datapath: Box<dyn Datapath>,
        clock: Arc<AtomicU64>,
    ) -> Arc<Device> {
        let counters = Arc::new(DeviceCounters::default());
        let (dev, _poll) = Self::assemble(
            name,
            addr,
            0,
            Mtu::M1024,
            Arc::new(MrTable::new(false)),
            datapath,
            None,
            None,
            Clock::Manual(clock),
            counters,
        )
        .expect("a rig needs no socket");
        dev
    }

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

    /// Attaches QP `qpn` to the multicast group at IP address `group` (the first member
    /// joins the group on the device's interface). Attaching twice is attaching once.
    /// ENOMEM past the device's limits (`max_mcast_grp`, `max_mcast_qp_attach`,
    /// `max_total_mcast_qp_attach`), as rxe.
    pub(crate) fn attach(&self, qpn: u32, group: IpAddr) -> std::io::Result<()> {
        use crate::config::limits::{
            MAX_MCAST_GRP, MAX_MCAST_QP_ATTACH, MAX_TOTAL_MCAST_QP_ATTACH,
        };
        let full = || std::io::Error::from_raw_os_error(libc::ENOMEM);
        let mut groups = self.groups.lock();
        let total: usize = groups.values().map(Vec::len).sum();
        if let Some(m) = groups.get_mut(&group) {
            if !m.contains(&qpn) {
                if m.len() >= MAX_MCAST_QP_ATTACH as usize
                    || total >= MAX_TOTAL_MCAST_QP_ATTACH as usize
                {
                    return Err(full());
                }
                m.push(qpn);
            }
            return Ok(());
        }
        if groups.len() >= MAX_MCAST_GRP as usize || total >= MAX_TOTAL_MCAST_QP_ATTACH as usize {
            return Err(full());
        }
        if let Some(fd) = self.datapath.join(group)? {
            let r = self
                .registry
                .register(&mut SocketRef(fd), GROUP, Interest::READABLE);
            if let Err(e) = r {
                self.datapath.leave(group);
                return Err(e);
            }
        }
        groups.insert(group, vec![qpn]);
        self.grouped.store(true, Ordering::Release);
        Ok(())
    }

    /// Detaches QP `qpn` from `group`; false if it was not attached. The last member
    /// leaves the group.
    pub(crate) fn detach(&self, qpn: u32, group: IpAddr) -> bool {
        let mut groups = self.groups.lock();
        let Some(m) = groups.get_mut(&group) else {
            return false;
        };
        let Some(i) = m.iter().position(|q| *q == qpn) else {
            return false;
        };
        m.swap_remove(i);
        if m.is_empty() {
            groups.remove(&group);
            // Closing the socket takes it out of the poll too.
            self.datapath.leave(group);
            self.grouped.store(!groups.is_empty(), Ordering::Release);
        }
        true
    }

    /// Detaches QP `qpn` from every group (it is being destroyed).
    pub(crate) fn detach_all(&self, qpn: u32) {
        let joined: Vec<IpAddr> = self
            .groups
            .lock()
            .iter()
            .filter(|(_, m)| m.contains(&qpn))
            .map(|(g, _)| *g)
            .collect();
        for g in joined {
            self.detach(qpn, g);
        }
    }

    /// Receives what waits for the multicast groups and hands each datagram to the
    /// group's members, then services them as [`Device::drain`] does. True if anything
    /// came.
    fn drain_groups(&self, defer: bool) -> bool {
        let mut st = self.rx.lock();
        let RxState { rx, group_buf, .. } = &mut *st;
        // The largest UDP datagram.
        group_buf.resize(65536, 0);
        let now = self.now();
        let n = self
            .datapath
            .recv_groups(group_buf, &mut |group, from, data| {
                rx.datagram(self, now, group, from.ip(), from.port(), data);
            });
        if n == 0 {
            return false;
        }
        self.publish(rx.take_counts());
        self.service_touched(rx, now);
        if defer {
            self.defer_acks(now);
        } else {
            self.flush_batch(true);
        }
        true
    }

    /// Services the QPs a receive reached (see [`Device::drain`]).
    fn service_touched(&self, rx: &mut Receiver<QpShared>, now: Instant) {
        for shared in rx.touched() {
            let mut qp = shared.qp.lock();
            self.service_at(&shared, &mut qp, now);
            // What arrived may have armed a timer (a probe after a window's last
            // ACK-asking packet was answered, say).
            self.enter_timer(&mut qp);
        }
    }

    /// Notes an application's send (see `app_sends`).
    pub(crate) fn note_send(&self) {
        let n = self.app_sends.load(Ordering::Relaxed);
        self.app_sends.store(n.wrapping_add(1), Ordering::Relaxed);
    }

    /// Whether the pollers gave the socket back (`Poller::app_sleeps`) since they last
    /// polled.
    #[cfg(test)]
    pub(crate) fn pollers_released(&self) -> bool {
        self.app_released.load(Ordering::Relaxed)
            == self.app_polls.load(Ordering::Relaxed).wrapping_add(1)
    }

    /// Stops the progress thread, which sends what is still held back first.
    pub(crate) fn close(&self) {
        if let Some(l) = &self.local {
            l.bye();
        }
        self.shutdown.store(true, Ordering::Release);
        self.wake();
    }
}

impl cq::Poller for Device {
    fn poll_rx(&self) -> bool {
        Device::poll_rx(self)
    }

    fn polled(&self) {
        if self.awaiting.load(Ordering::Relaxed) == 0 && !self.idle_poller.load(Ordering::Relaxed) {
            self.app_sleeps();
        }
    }

    fn app_blocks(&self, watching: bool) {
        self.flush_batch(true);
        if !watching {
            self.app_sleeps();
        }
    }

    fn rx_fd(&self) -> Option<std::os::fd::RawFd> {
        self.datapath.readable_fd()
    }

    fn receive_blocked(&self) -> bool {
        self.poll_socket()
    }

    fn app_sleeps(&self) {
        let polls = self.app_polls.load(Ordering::Relaxed);
        // Stored as count + 1, so that 0 means "never released".
        if self
            .app_released
            .swap(polls.wrapping_add(1), Ordering::Relaxed)
            != polls.wrapping_add(1)
        {
            self.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pace of a poller's socket reads beside open rings: fast while datagrams come and
    /// for a few empty reads after, then slower per empty read up to its cap, and fast again
    /// at the next datagram.
    #[test]
    fn a_pollers_socket_reads_slow_down_while_none_comes() {
        let us = |n: u64| n * 1000;
        let every = UDP_EVERY.as_nanos() as u64;
        let mut p = UdpPace::new();
        let mut t = us(1000);
        assert!(p.due(t));
        assert!(!p.due(t + every - 1), "not before the interval");
        for _ in 0..UDP_PATIENCE {
            p.found(false);
            assert_eq!(p.every(), every, "patient at first");
        }
        p.found(false);
        assert_eq!(p.every(), 2 * every);
        for _ in 0..40 {
            p.found(false);
        }
        assert_eq!(p.every(), UDP_EVERY_MAX.as_nanos() as u64, "capped");
        t += us(50);
        assert!(!p.due(t), "a quiet socket is read less often");
        t += UDP_EVERY_MAX.as_nanos() as u64;
        assert!(p.due(t));
        p.found(true);
        assert_eq!(p.every(), every, "a datagram brings the fast pace back");
        assert!(p.due(t + every));
    }

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
