//! The routes from destination QPNs to the rings that reach their processes, and the
//! sending over them: a send batch's packets to this device's own address are diverted
//! into rings ([`Local::divert`]), and a responder's positive ACKs go in the rings' ACK
//! boxes ([`Local::ack`]). A QPN of another process with no route yet is looked up by the
//! resolver thread (`device::resolver`): [`Local::resolve`] asks the device's owner which
//! endpoint holds it ([`super::super::share::Share::holder`]) and connects there (see
//! `conn`); its packets take the UDP path until then. This process's own QPNs need no
//! lookup: they take the ring to this process, which the resolver thread connects once.
//! A QP's destination is looked up when the QP is given it (`Device::modified`), by the
//! thread that modifies it unless that thread may not wait ([`NoWait`]), before its first
//! packet; an idle QP connected to one of its own process keeps no route.
//!
//! May call: the sharing (the owner, for a QPN's holder) and the rings' producer ends.
//!
//! Threads and locks: any thread that flushes a batch, under `LocalRoutes`, then a
//! ring's `LocalRing` per packet, or `LocalWanted` for a QPN with no route; no send waits
//! for a lookup. A lookup (the modifying thread's, or the resolver thread's) takes
//! `LocalLookup` around it, and under it,
//! one after the other, `LocalRoutes`, the owner's `ShareCtl` (a request of up to
//! [`super::super::share::ANSWER_TIMEOUT`]), `LocalConns` (a connect), then `LocalRoutes`
//! again to add the route. The progress thread expires routes.

use super::super::share::{self, Holder, Share};
use super::Local;
use crate::datapath::batch::SendBatch;
use crate::datapath::shm::Producer;
use crate::sync::Lock;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How long a route stays cached once nothing uses it: well inside the QPN quarantine, so
/// that a QPN drawn again for another process (after its quarantine) is looked up again.
/// A route in use is kept for good, so that a QP's packets never switch between the UDP
/// path and a ring (UC and UD would lose or reorder messages at the switch).
const ROUTE_FOR: Duration = Duration::from_secs(60);
/// How long an answer of "nobody holds it" stays cached (its packets take the UDP path
/// meanwhile, where the owner drops them as it would any packet to an unknown QPN).
const NO_ROUTE_FOR: Duration = Duration::from_secs(1);
/// How long a sender waits for room in a full ring before it drops the packet (as a
/// full socket buffer would): a receiver that polls drains it long before, but one
/// descheduled on a busy host may not run for a scheduler slice or two (a UC or UD
/// message that loses a packet is lost: 1 ms lost some in CI-like load).
const FULL_WAIT: Duration = Duration::from_millis(10);

thread_local! {
    /// Whether this thread holds its device's receive state now (see [`Draining`]): the
    /// only thread that could drain a ring to its own process.
    static DRAINS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Whether this thread may not wait for a route lookup now (see [`NoWait`]).
    static NO_WAIT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks the current thread as one that holds a lock of its own (the CM's, as it moves a
/// QP on a peer's reply) and so may not wait for a route lookup, until dropped: a QP it
/// gives a destination has its route looked up by the resolver thread instead.
pub(crate) struct NoWait(bool);

impl NoWait {
    /// The current thread may not wait for a lookup from now on.
    pub(crate) fn enter() -> Self {
        Self(NO_WAIT.replace(true))
    }

    /// Whether the current thread may wait for a lookup.
    pub(crate) fn may_wait() -> bool {
        !NO_WAIT.get()
    }
}

impl Drop for NoWait {
    fn drop(&mut self) {
        NO_WAIT.set(self.0);
    }
}

/// Marks the current thread as the one that drains the device's rings, until dropped.
pub(crate) struct Draining(bool);

impl Draining {
    /// The current thread holds the device's receive state from now on.
    pub(crate) fn enter() -> Self {
        Self(DRAINS.replace(true))
    }
}

impl Drop for Draining {
    fn drop(&mut self) {
        DRAINS.set(self.0);
    }
}

/// A ring this process fills, and the connection it was passed over.
pub(super) struct Outgoing {
    pub(super) ring: Lock<Producer>,
    pub(super) ep: u64,
    /// The connection's token.
    pub(super) token: usize,
}

/// One destination QPN's route.
pub(super) struct Route {
    /// The ring to its process; `None`: the UDP path.
    pub(super) ring: Option<Arc<Outgoing>>,
    /// Until when the answer holds unless used (the progress thread looks, see
    /// [`Local::expire`], so that a send reads no clock).
    until: Instant,
    /// Whether a packet took it since the last look: a route in use is kept.
    used: bool,
    /// Whether use keeps it (a ring, or a holder with no endpoint; not "nobody").
    sticky: bool,
}

/// A lookup for the resolver thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Want {
    /// Which process holds this QPN, and a ring there.
    Qpn(u32),
    /// The ring to this process itself, for its own QPs' packets to each other.
    OwnRing,
}

/// What runs once a lookup is done (see [`Local::want_then`]).
pub(crate) type Then = Box<dyn FnOnce() + Send>;

/// The lookups waiting for the resolver thread.
#[derive(Default)]
pub(crate) struct Wanted {
    qpns: Vec<u32>,
    own_ring: bool,
    /// What waits for a lookup to be done, whatever it found.
    then: Vec<(Want, Then)>,
    /// Whether a resolver thread runs (it takes them until none is left).
    running: bool,
}

/// Where a send to the device's own address goes, by destination QPN and by peer
/// endpoint (behind `LocalRoutes`).
#[derive(Default)]
pub(super) struct Routes {
    /// Each destination QPN looked up.
    pub(super) by_qpn: softrdma_proto::endpoint::check::KeyMap<Route>,
    /// The ring to each peer endpoint.
    pub(super) by_ep: HashMap<u64, Arc<Outgoing>>,
    /// Endpoints that refused a ring: reached over UDP.
    pub(super) refused: std::collections::HashSet<u64>,
}

impl Local {
    /// Takes out of `batch` every packet whose QPN lives in a process of this host that
    /// a ring reaches, and puts it in that ring; the rest stay for UDP. Returns how many
    /// went into rings and how many were dropped (a ring that stayed full).
    pub(crate) fn divert(&self, batch: &mut SendBatch, share: &Share) -> (usize, usize) {
        if self.registry.get().is_none() {
            return (0, 0);
        }
        let sport = self.sport.load(Ordering::Relaxed);
        let mut routes = self.routes.lock();
        let (mut sent, mut dropped) = (0, 0);
        batch.divert(|pieces, dst| {
            if !self.is_local(dst) {
                return false;
            }
            // The first piece holds the headers.
            let (p, n) = pieces[0];
            // SAFETY: the first piece is valid for `n` bytes (the batch's contract).
            let h = unsafe { std::slice::from_raw_parts(p, n.min(8)) };
            let Some(qpn) = share::dest_qpn(h) else {
                return false;
            };
            let Some(out) = self.route(&mut routes, share, qpn) else {
                return false;
            };
            // The thread that drains this process's rings waits in vain for room in its
            // own ring: the packet is dropped at once, as by a full socket (RC resends).
            let wait = out.ep != self.ep || !DRAINS.get();
            let mut ring = out.ring.lock();
            if ring.push(pieces, sport) {
                sent += 1;
            } else if !wait {
                dropped += 1;
            } else {
                // Full: wake the reader and give it a moment, as a blocking socket would.
                let until = Instant::now() + FULL_WAIT;
                loop {
                    ring.wake();
                    std::thread::yield_now();
                    if ring.push(pieces, sport) {
                        sent += 1;
                        break;
                    }
                    if Instant::now() >= until {
                        dropped += 1;
                        break;
                    }
                }
            }
            // Woken under the lock of the push: a wake costs a fence and a load of a line
            // the reader rarely writes (and a system call only if it sleeps), less than
            // taking the lock again once per batch.
            ring.wake();
            true
        });
        drop(routes);
        (sent, dropped)
    }

    /// Leaves a positive ACK of `psn` for QPN `qpn` in the ACK box of the ring that
    /// already reaches `qpn`'s process, behind every packet sent there, and wakes its
    /// reader as a packet would (see [`crate::datapath::shm`]); the caller has no packet of
    /// the acknowledging QP left unsent. False if no ring reaches it yet (its first packet
    /// makes the route) or its box is another QP's: the ACK then goes as a packet. (Another
    /// thread may still hold this QP's READ responses unsent in its own batch: the ACK can
    /// then overtake them, as an ACK packet flushed by this thread first could, and the
    /// requester asks for the READ again as after a loss.)
    pub(crate) fn ack(&self, qpn: u32, psn: u32) -> bool {
        if !self.any_out.load(Ordering::Relaxed) {
            return false;
        }
        let out = {
            let mut routes = self.routes.lock();
            let Some(r) = routes.by_qpn.get_mut(&qpn) else {
                return false;
            };
            let Some(out) = r.ring.clone() else {
                return false;
            };
            r.used = true;
            out
        };
        let mut ring = out.ring.lock();
        if !ring.ack(qpn, psn) {
            return false;
        }
        ring.wake();
        true
    }

    /// The ring to QPN `qpn`'s process, if a lookup found one. A QPN of this process goes
    /// into the ring to itself, once that ring exists (no lookup: the sharing knows its
    /// own QPNs); another QPN never looked up is asked for (see [`Local::want`]). Either
    /// way, its packets take UDP meanwhile.
    fn route(&self, routes: &mut Routes, share: &Share, qpn: u32) -> Option<Arc<Outgoing>> {
        if let Some(r) = routes.by_qpn.get_mut(&qpn) {
            r.used = true;
            return r.ring.clone();
        }
        if !share.is_mine(qpn) {
            self.want(Want::Qpn(qpn));
            return None;
        }
        // A ring to itself that could not be made leaves its QPNs on UDP, as any refused
        // ring does.
        let own = match routes.by_ep.get(&self.ep) {
            Some(o) => Some(o.clone()),
            None if routes.refused.contains(&self.ep) => None,
            None => {
                self.want(Want::OwnRing);
                return None;
            }
        };
        routes.by_qpn.insert(
            qpn,
            Route {
                ring: own.clone(),
                until: Instant::now() + ROUTE_FOR,
                used: false,
                sticky: true,
            },
        );
        own
    }

    /// Asks for `w` to be looked up (by the resolver thread, which the progress thread
    /// starts when [`Local::wants_lookup`] says so).
    pub(crate) fn want(&self, w: Want) {
        let mut wanted = self.wanted.lock();
        match w {
            Want::OwnRing => wanted.own_ring = true,
            Want::Qpn(q) if !wanted.qpns.contains(&q) => wanted.qpns.push(q),
            Want::Qpn(_) => {}
        }
        self.any_wanted.store(!wanted.running, Ordering::Release);
    }

    /// As [`Local::want`], and runs `then` on the resolver thread once that lookup is
    /// done, whatever it found (a route, a refusal, nobody), with no lock held.
    pub(crate) fn want_then(&self, w: Want, then: Then) {
        self.wanted.lock().then.push((w, then));
        self.want(w);
    }

    /// Runs what waited for lookup `w`; the resolver thread calls it after each lookup.
    pub(crate) fn looked_up(&self, w: Want) {
        let done: Vec<Then> = {
            let mut wanted = self.wanted.lock();
            let (done, waiting) = std::mem::take(&mut wanted.then)
                .into_iter()
                .partition(|(x, _)| *x == w);
            wanted.then = waiting;
            done.into_iter().map(|(_, t)| t).collect()
        };
        for then in done {
            then();
        }
    }

    /// Gives up every lookup that waits (no thread can make them: their packets take
    /// UDP until the next want); what waited for them runs now.
    pub(crate) fn give_up_lookups(&self) {
        while self.next_wanted().is_some() {}
        let done = std::mem::take(&mut self.wanted.lock().then);
        for (_, then) in done {
            then();
        }
    }

    /// What to look up for a QP whose destination is QPN `qpn` on this device's own
    /// address (a QP given its destination, before its first packet): the ring to this
    /// process if `qpn` is its own, else `qpn`'s route; `None` if that exists already.
    pub(crate) fn wanted_for(&self, share: &Share, qpn: u32) -> Option<Want> {
        let routes = self.routes.lock();
        if routes.by_qpn.contains_key(&qpn) {
            return None;
        }
        if !share.is_mine(qpn) {
            return Some(Want::Qpn(qpn));
        }
        (!routes.by_ep.contains_key(&self.ep)).then_some(Want::OwnRing)
    }

    /// Whether lookups wait and no resolver thread runs (read per progress turn, without
    /// a lock).
    #[inline]
    pub(crate) fn wants_lookup(&self) -> bool {
        self.any_wanted.load(Ordering::Acquire)
    }

    /// Marks the resolver thread as running, if lookups wait and none runs; false if it
    /// need not be started.
    pub(crate) fn start_resolving(&self) -> bool {
        let mut w = self.wanted.lock();
        self.any_wanted.store(false, Ordering::Release);
        if w.running || (w.qpns.is_empty() && !w.own_ring) {
            return false;
        }
        w.running = true;
        true
    }

    /// The next lookup for the resolver thread; `None` (and the thread is marked as
    /// stopped, so that the next want starts another) when none waits.
    pub(crate) fn next_wanted(&self) -> Option<Want> {
        let mut w = self.wanted.lock();
        let next = if std::mem::take(&mut w.own_ring) {
            Some(Want::OwnRing)
        } else {
            w.qpns.pop().map(Want::Qpn)
        };
        if next.is_none() {
            w.running = false;
        }
        next
    }

    /// Carries out lookup `w` (the resolver thread's work): see [`Local::resolve`].
    pub(crate) fn look_up(&self, share: &Share, w: Want) {
        match w {
            Want::Qpn(q) => self.resolve(share, q),
            Want::OwnRing => {
                let _one = self.lookup.lock();
                if self.routes.lock().by_ep.contains_key(&self.ep) {
                    return;
                }
                match self.connect(self.ep) {
                    Some(o) => drop(self.add_ring(o)),
                    None => drop(self.routes.lock().refused.insert(self.ep)),
                }
            }
        }
    }

    /// Adds ring `o` to the routes by endpoint, if its connection still stands: it may
    /// have hung up (or been refused) since it was made, and its connection's end then
    /// took the routes to it away already, or will after this, under the routes' lock.
    /// Returns the routes, locked, and whether it was added.
    fn add_ring(&self, o: Arc<Outgoing>) -> (crate::sync::Guard<'_, Routes>, bool) {
        let mut routes = self.routes.lock();
        if !self.conns.lock().contains_key(&o.token) {
            return (routes, false);
        }
        routes.by_ep.entry(o.ep).or_insert(o);
        (routes, true)
    }

    /// Looks up QPN `qpn`'s process and connects a ring there if it has an endpoint, with
    /// no lock of the send path held while it asks the owner and connects; then routes
    /// `qpn` (see the module docs). A QPN already routed is left as it is.
    pub(crate) fn resolve(&self, share: &Share, qpn: u32) {
        if self.registry.get().is_none() {
            return;
        }
        let _one = self.lookup.lock();
        if self.routes.lock().by_qpn.contains_key(&qpn) {
            return;
        }
        if !self.lookup_delay.is_zero() {
            std::thread::sleep(self.lookup_delay);
        }
        let now = Instant::now();
        // An owner that cannot answer is going (or just went): the answer "UDP" is kept as
        // briefly as "nobody" is, so that sends meanwhile ask no lookup each, and the next
        // lookup finds the owner that follows.
        let (ep, sticky) = match share.holder(qpn) {
            Ok(Holder::At(ep)) => (Some(ep), true),
            Ok(Holder::NoEndpoint) => (None, true),
            Ok(Holder::Nobody) | Err(()) => (None, false),
        };
        let (ep, known) = {
            let routes = self.routes.lock();
            let ep = ep.filter(|ep| !routes.refused.contains(ep));
            (ep, ep.and_then(|ep| routes.by_ep.get(&ep).cloned()))
        };
        let out = match (ep, known) {
            (_, Some(o)) => Some(o),
            (Some(ep), None) => self.connect(ep),
            (None, None) => None,
        };
        let mut routes = match &out {
            Some(o) => match self.add_ring(o.clone()) {
                (routes, true) => routes,
                (_, false) => return,
            },
            None => self.routes.lock(),
        };
        let hold = if sticky { ROUTE_FOR } else { NO_ROUTE_FOR };
        routes.by_qpn.insert(
            qpn,
            Route {
                ring: out,
                until: now + hold,
                used: false,
                sticky,
            },
        );
    }

    /// Drops the route answers that are past their time and were not used since the
    /// last look (the progress thread, now and then): the next send to those QPNs looks
    /// them up again. A route in use is kept (see [`ROUTE_FOR`]).
    pub(crate) fn expire(&self) {
        let now = Instant::now();
        let mut routes = self.routes.lock();
        routes.by_qpn.retain(|_, r| {
            if r.until > now {
                return true;
            }
            if r.sticky && std::mem::take(&mut r.used) {
                r.until = now + ROUTE_FOR;
                return true;
            }
            false
        });
    }
}
