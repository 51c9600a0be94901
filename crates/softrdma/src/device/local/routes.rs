//! The routes from destination QPNs to the rings that reach their processes, and the
//! sending over them: a send batch's packets to this device's own address are diverted
//! into rings ([`Local::divert`]), and a responder's positive ACKs go in the rings' ACK
//! boxes ([`Local::ack`]). A QPN with no route yet is looked up by the resolver thread
//! (`device::resolver`): [`Local::resolve`] asks the device's owner which endpoint holds
//! it ([`super::super::share::Share::holder`]) and connects there (see `conn`); its
//! packets take the UDP path until then. A QP's own destination is looked up as soon as
//! the QP is given it (`Device::modified`), before its first packet.
//!
//! May call: the sharing (the owner, for a QPN's holder) and the rings' producer ends.
//!
//! Threads and locks: any thread that flushes a batch, under `LocalRoutes`, then a
//! ring's `LocalRing` per packet, or `LocalWanted` for a QPN with no route; no send waits
//! for a lookup. The resolver thread takes `LocalLookup` around a lookup, and under it,
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

/// The QPNs sends found no route for, waiting for the resolver thread.
#[derive(Default)]
pub(crate) struct Wanted {
    qpns: Vec<u32>,
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
    pub(crate) fn divert(&self, batch: &mut SendBatch) -> (usize, usize) {
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
            let Some(out) = self.route(&mut routes, qpn) else {
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

    /// The ring to QPN `qpn`'s process, if a lookup found one; a QPN never looked up is
    /// asked for (see [`Local::want`]) and its packets take UDP meanwhile.
    fn route(&self, routes: &mut Routes, qpn: u32) -> Option<Arc<Outgoing>> {
        match routes.by_qpn.get_mut(&qpn) {
            Some(r) => {
                r.used = true;
                r.ring.clone()
            }
            None => {
                self.want(qpn);
                None
            }
        }
    }

    /// Asks for QPN `qpn`'s process to be looked up (by the resolver thread, which the
    /// progress thread starts when [`Local::wants_lookup`] says so).
    pub(crate) fn want(&self, qpn: u32) {
        let mut w = self.wanted.lock();
        if !w.qpns.contains(&qpn) {
            w.qpns.push(qpn);
        }
        self.any_wanted.store(!w.running, Ordering::Release);
    }

    /// Whether QPNs wait for a lookup and no resolver thread runs (read per progress
    /// turn, without a lock).
    #[inline]
    pub(crate) fn wants_lookup(&self) -> bool {
        self.any_wanted.load(Ordering::Acquire)
    }

    /// Marks the resolver thread as running, if QPNs wait and none runs; false if it
    /// need not be started.
    pub(crate) fn start_resolving(&self) -> bool {
        let mut w = self.wanted.lock();
        self.any_wanted.store(false, Ordering::Release);
        if w.running || w.qpns.is_empty() {
            return false;
        }
        w.running = true;
        true
    }

    /// The next QPN for the resolver thread; `None` (and the thread is marked as
    /// stopped, so that the next want starts another) when none waits.
    pub(crate) fn next_wanted(&self) -> Option<u32> {
        let mut w = self.wanted.lock();
        let q = w.qpns.pop();
        if q.is_none() {
            w.running = false;
        }
        q
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
        // An owner that cannot answer is going (or just went): nothing is cached, so the
        // next send asks again, by which time another owner answers.
        let (ep, sticky) = match share.holder(qpn) {
            Ok(Holder::At(ep)) => (Some(ep), true),
            Ok(Holder::NoEndpoint) => (None, true),
            Ok(Holder::Nobody) => (None, false),
            Err(()) => return,
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
        let mut routes = self.routes.lock();
        if let Some(o) = &out {
            // The ring may have hung up (or been refused) since: its connection's end
            // took the routes to it away already, or will after this, under this lock.
            if !self.conns.lock().contains_key(&o.token) {
                return;
            }
            routes.by_ep.entry(o.ep).or_insert_with(|| o.clone());
        }
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
