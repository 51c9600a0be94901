//! The soft RoCE v2 device: the engine's QPs, the region table, the timer queue, the
//! receive path of the sans-I/O endpoint, a datapath beneath (`crate::datapath`: the UDP
//! driver by default, which receives on `IP:4791` and sends from connected sockets), and
//! one progress thread that receives, runs timers and retransmits. The device knows no
//! socket; it hands its datapath whole batches.
//!
//! Contract: whoever holds the receive state drains the socket: the progress thread, or an
//! application thread busy-polling a CQ (the progress thread then stops watching the socket
//! until the polls have stopped for [`APP_POLL_GRACE`](poller::APP_POLL_GRACE)). ACKs produced by an application
//! thread's drain are deferred until that thread's next send (which carries them in the same
//! system call), its next poll (or, while a QP has sends outstanding, the first poll
//! [`POLL_HOLD`](acks::POLL_HOLD) on), or the progress thread's pass, at most about a millisecond after the
//! last poll: far inside any ACK timeout, so a requester never retransmits for it. The
//! progress thread defers its own drains' ACKs the same way while the application sends,
//! for at most [`ACK_HOLD`](acks::ACK_HOLD). Everything else a drain produces leaves before the drain
//! returns.
//!
//! Timers (retransmission, probes, RNR waits, packets the fault injector holds back) are run
//! by whichever thread finds them due: the progress thread, or a busy poller, which compares
//! the earliest deadline with the clock on each empty poll. While pollers spin on every
//! core, the progress thread may wait milliseconds for a CPU; the timers must not.
//!
//! # Layout
//! This file holds the [`Device`] struct, its clock, and the narrow API the verbs and the
//! CM use: identity, counters, the sharing glue, and the QP table with its generation
//! protocol. Each role of the device is a child module that adds methods to `Device`
//! (reading its private fields, which no file outside `device` sees). The children import
//! one another downward only, in this order:
//!
//! - `open`: building the device and its driver stack, starting its progress thread.
//! - `mcast`: the multicast groups and their receive pass.
//! - `progress`: the progress thread's loop and pass, its poll's tokens.
//! - `rx`: the receive path (the drain and its receive state).
//! - `acks`: the ACK deferral policy and its tunables.
//! - `poller`: the hand-off of the socket to busy-polling application threads.
//! - `tx`: the per-thread send batches, a QP's service, WRITE placement.
//! - `timers`: arming and running the timers.
//!
//! Beneath them, the parts with state of their own: `cq`, `events`, `handoff`, `local`,
//! `place`, `qp`, `regions`, `res`, `share`, `stats`.

mod acks;
pub(crate) mod cq;
pub(crate) mod events;
pub(crate) mod handoff;
pub(crate) mod local;
mod mcast;
mod open;
pub(crate) mod place;
mod poller;
mod progress;
pub(crate) mod qp;
pub(crate) mod regions;
pub(crate) mod res;
mod resolver;
mod rx;
pub(crate) mod share;
pub mod stats;
mod timers;
mod tx;

pub(crate) use acks::PEER_ACK_DELAY;
#[cfg(test)]
pub(crate) use acks::POLL_HOLD;

use crate::counters::DeviceCounters;
use crate::datapath::Datapath;
use crate::datapath::batch::SendBatch;
use crate::error::Result;
use crate::sync::{Lock, RwLock};
use mio::Waker;
use qp::QpShared;
use regions::MrTable;
use softrdma_proto::endpoint::timers::TimerQueue;
use softrdma_proto::endpoint::{Counter, Lookup, QpCell, QpTable};
use softrdma_proto::{Instant, Mtu, Pd};
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

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
    qps: RwLock<QpTable<QpShared>>,
    /// The PDs and CQs, and whether the published list is stale (see [`res`]).
    pub(crate) res: res::Resources,
    /// The smallest round trip to each destination, shared by the QPs that go there (see
    /// [`softrdma_proto::qp::rtt::PathRtt`]).
    paths: Lock<std::collections::HashMap<IpAddr, Arc<softrdma_proto::qp::rtt::PathRtt>>>,
    /// Moves on whenever a QP leaves `qps`, which makes receivers look their QP up again.
    qps_gen: AtomicU64,
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
    /// [`APP_POLL_GRACE`](poller::APP_POLL_GRACE) by itself, and a wake-up per held-back packet or probe would make
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
    /// the progress thread sends it at the latest [`ACK_HOLD`](acks::ACK_HOLD) later.
    deferred_at: AtomicU64,
    /// `app_polls + 1` when a poller said it is about to block (`Poller::app_sleeps`): the
    /// pollers count as gone until the count moves again.
    app_released: AtomicU64,
    /// Counters of QPs already destroyed.
    retired: Lock<softrdma_proto::QpCounters>,
    /// How many QPs keep a poller's socket (see [`Poller::polled`](cq::Poller::polled)): those that await
    /// completions, whose peers never wrote their memory, or whose peers answered their
    /// last send with a WRITE.
    awaiting: AtomicUsize,
    /// How many QPs have send WRs outstanding: while any has, a poller holds the ACKs it
    /// deferred for the application's next request (see [`Device::poll_rx`]).
    requesting: AtomicUsize,
    /// Set once an application thread polls while no QP awaits anything: it watches for
    /// WRITEs by polling too, and keeps the socket (see [`Poller::polled`](cq::Poller::polled)).
    idle_poller: AtomicBool,
    /// Whether a channel of the device's CQs has an inline consumer (the CM's QP1): only
    /// then do receive passes open a scope for it (see [`Device::inline_scope`]).
    inline_consumers: AtomicBool,
    /// The multicast groups QPs are attached to (by the group's IP address, the form its
    /// GID takes on the wire), each with its members' QPNs.
    groups: Lock<std::collections::HashMap<IpAddr, Vec<u32>>>,
    /// Whether `groups` has any: the progress pass looks at the groups' sockets only then.
    grouped: AtomicBool,
    /// The progress thread's poll, for the groups' sockets.
    registry: mio::Registry,
    /// Receive state; whoever holds it drains the socket (the progress thread, or an
    /// application thread polling a CQ, which saves two context switches per message).
    rx: Lock<rx::RxState>,
    /// ACKs produced while an application thread drained the socket, held until that thread
    /// next sends (they then leave in the same system call, behind its request: one UDP GSO
    /// send on loopback) or next polls, or until the progress thread runs. See
    /// [`Device::poll_rx`].
    /// Whether it holds anything is the gate's `deferred`, read without the lock on every
    /// poll.
    deferred: Lock<SendBatch>,
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
    pub(super) fn system() -> Self {
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
    /// The device's time now (see [`Clock`]).
    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// A PD number not yet handed out on this device.
    pub fn alloc_pd(&self) -> Pd {
        Pd(self.next_pd.fetch_add(1, Ordering::Relaxed))
    }

    /// Wakes the progress thread (a wake-up that fails leaves it to its next timeout).
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

    /// Whether this device carries packets through same-host rings, where its QPs build
    /// them without an ICRC (see [`softrdma_proto::QueuePair::owe_icrc`]).
    pub(crate) fn has_rings_path(&self) -> bool {
        self.local.is_some()
    }

    /// The UDP source port the device's packets leave from.
    pub fn port(&self) -> u16 {
        self.datapath.port()
    }

    /// The round-trip record of the path to `dst`, which every QP going there shares.
    pub fn path_rtt(&self, dst: IpAddr) -> Arc<softrdma_proto::qp::rtt::PathRtt> {
        let mut paths = self.paths.lock();
        paths.entry(dst.to_canonical()).or_default().clone()
    }

    /// The name this device's counter and resource files go under ([`stats::key`]).
    pub(crate) fn stats_key(&self) -> String {
        stats::key(&self.name, self.addr)
    }

    /// Whether same-host peers may map this device's regions (see [`place`]).
    pub(crate) fn shares_memory(&self) -> bool {
        self.local.as_ref().is_some_and(|l| l.cma())
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
}

/// The QP table: a QP enters it when the verbs create it and leaves it when they destroy
/// it; the receive path looks QPNs up in it through [`Lookup`], caching what it found
/// until the table's generation moves. Every method takes the table's lock (`QpTable`)
/// for its own call only, and the QP's lock (`Qp`) under it at most.
impl Device {
    /// Whether QPN `qpn` belongs to a QP of this process on the device now.
    pub(crate) fn has_qp(&self, qpn: u32) -> bool {
        self.qps.read().contains(qpn)
    }

    /// Enters the QP that `make` builds under QPN `qpn` and returns it. `make` runs under
    /// the table's write lock, so a lookup of the QPN made meanwhile waits for the QP
    /// rather than misses it; it must take no device lock.
    pub(crate) fn insert_qp(
        &self,
        qpn: u32,
        make: impl FnOnce() -> Arc<QpShared>,
    ) -> Arc<QpShared> {
        let mut qps = self.qps.write();
        let shared = make();
        qps.insert(qpn, shared.clone());
        shared
    }

    /// Takes QPN `qpn`'s QP out of the table (it is being destroyed).
    pub(crate) fn remove_qp(&self, qpn: u32) {
        let mut qps = self.qps.write();
        // The generation moves first, under the write lock: a receiver that sees the new
        // one looks the QPN up again (after the removal, since the lookup waits for this
        // lock); one that saw the old one handled its packet before the QP went.
        self.qps_gen.fetch_add(1, Ordering::Release);
        qps.remove(qpn);
    }

    /// Adds a destroyed QP's last counters to the device's (see [`Device::hw_counters`]).
    /// Takes `Retired` alone.
    pub(crate) fn retire_counters(&self, c: softrdma_proto::QpCounters) {
        *self.retired.lock() += c;
    }

    /// Every QP of this device now, taken out of the table so that no lock is held while
    /// the caller works on them.
    pub(crate) fn qp_list(&self) -> Vec<Arc<QpShared>> {
        self.qps.read().values().cloned().collect()
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
