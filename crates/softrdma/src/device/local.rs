//! The same-host path: packets between two processes that share a device (see
//! [`super::share`]) move through shared-memory rings ([`crate::datapath::shm`]) instead of
//! UDP and the owner's forwarding.
//!
//! # The design
//! Each process that shares a device listens on an abstract `SOCK_SEQPACKET` socket of
//! its own, `@softrdma/UID/IP/ep/ID`, where `ID` is a random 64-bit endpoint it states in
//! its hello to the owner. When a thread first sends to a QPN on the device's own
//! address, [`Local::divert`] asks the owner which endpoint holds that QPN
//! ([`super::share::Share::holder`]), connects there, checks the peer's uid, creates a
//! ring and passes its memfd and eventfd ([`Msg::Ring`]). From then on every packet to a
//! QPN of that process goes into that ring, in the order it was built; the UDP path is
//! never used for it again, so the two paths cannot reorder one QP's packets. The other
//! process's progress thread accepts the connection, checks the ring, and its receive
//! path drains the ring as it drains the socket: each entry is copied out and handed to
//! the same receive checks a datagram gets. So the process that owns a memory region is
//! the one that checks every key, range and access right against it, and writes it; a
//! peer never writes another's memory.
//!
//! Each direction between two processes is one ring and one connection, created by its
//! sender; a process's own QPs reach each other the same way (a ring to itself). An RC
//! responder's positive ACKs to a QP that a ring already reaches go in that ring's ACK
//! boxes instead ([`Local::ack`]): no ACK packet is built, pushed, parsed or dispatched,
//! which was most of what RC cost over UC on this path; the requester's receive path
//! applies each once it has read the packets sent before it (IBTA 9.7.5.1.1 lets one ACK
//! stand for every request up to its PSN). NAKs, READ responses and atomic ACKs stay
//! packets.
//!
//! # Crashes
//! The connections exist to be watched: when one hangs up without a [`Msg::Bye`] first
//! (the peer was killed), the progress thread hands the device the QPNs it routed to that
//! peer, and the device moves its QPs connected to them to ERROR at once
//! ([`softrdma_proto::QueuePair::peer_gone`]) instead of after the retry budget. A device
//! closed on purpose says bye on each connection first.
//!
//! # Threads and locks
//! `routes` is taken per send batch that goes to the device's own address (by whichever
//! thread flushes it); a route's ring has its own lock, taken per packet under `routes`.
//! A first send to a QPN resolves it under `routes`: a request to the owner (at most
//! [`super::share::ANSWER_TIMEOUT`]) and a connect. `incoming` is taken by the thread that
//! holds the device's receive state, and by the progress thread to add or drop a ring.
//! `conns` is the progress thread's, and the sender's for the moment it adds a
//! connection. No QP lock is taken under any of them.

use super::place::{self, Grant, Granted, Placements, Table};
use super::share::{self, Holder, Share, msg::Msg, msg::VERSION};
use crate::datapath::batch::SendBatch;
use crate::datapath::shm::{self, Consumer, Producer};
use crate::datapath::socket::{Forgotten, RecvBatch};
use crate::sync::{Lock, Rank};
use nix::sys::socket::{self as ns, AddressFamily, Backlog, MsgFlags, SockFlag, SockType};
use softrdma_wire::ROCE_V2_PORT;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// The progress thread's token for the endpoint's listener.
pub(crate) const LISTEN: mio::Token = mio::Token(5);
/// The same-host path's tokens start here: `BASE + 2k` is connection `k`, `BASE + 2k + 1`
/// its ring's eventfd.
pub(crate) const BASE: usize = 1 << 40;
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

/// Why a peer's offered ring was refused (and its connection closed): each names what the
/// hostile or broken peer sent.
#[derive(Debug, thiserror::Error)]
enum RingRefused {
    /// The record is not a ring record.
    #[error("not a ring record")]
    NotRing,
    /// Another protocol version, or another ring layout.
    #[error(
        "version {version} with {slots} slots of {slot_size} bytes, not version {VERSION} \
         with {} of {}",
        shm::SLOTS,
        shm::SLOT_SIZE
    )]
    Layout {
        /// The peer's protocol version.
        version: u32,
        /// Its ring's slots.
        slots: u32,
        /// Its slots' size.
        slot_size: u32,
    },
    /// Not the ring's memfd and eventfd, or no endpoint.
    #[error("{n} descriptors, endpoint {ep:x}")]
    Descriptors {
        /// How many descriptors came.
        n: usize,
        /// The endpoint the peer named.
        ep: u64,
    },
    /// The ring's memory or eventfd does not hold up.
    #[error("{0}")]
    Open(#[source] shm::RingError),
    /// The progress thread could not watch the ring's eventfd.
    #[error("watching the ring: {0}")]
    Register(#[source] std::io::Error),
}

/// A ring this process fills, and the connection it was passed over.
struct Outgoing {
    ring: Lock<Producer>,
    ep: u64,
    /// The connection's token.
    token: usize,
}

/// A ring a peer fills, drained by the receive path.
struct Incoming {
    ring: Consumer,
    token: usize,
    /// The connection it came over (valid while `token` is in `conns`).
    conn: std::os::fd::RawFd,
    /// Its connection is gone: it is dropped once the receive path finds it empty, so
    /// that what the peer published before it went is still delivered.
    closing: bool,
}

/// A connection, as the progress thread watches it.
enum Conn {
    /// Accepted; its ring has not come yet.
    Accepted { fd: Forgotten, pid: i32 },
    /// A peer's ring comes over it (the peer's endpoint, and whether the connection ends
    /// in order: a bye either way, or a refusal), with the placement table of the grants
    /// made to it, once it asked for one (see [`super::place`]).
    In {
        fd: Forgotten,
        ep: u64,
        bye: Ending,
        pid: i32,
        table: Option<Arc<Table>>,
    },
    /// Our ring went over it.
    Out {
        fd: Forgotten,
        ep: u64,
        bye: Ending,
        pid: i32,
    },
}

/// What a poll event on the same-host path asks of the device.
#[derive(Default)]
pub(crate) struct Happened {
    /// A peer died: its endpoint, and the QPNs this process sent to there.
    pub died: Option<(u64, Vec<u32>)>,
    /// Peers' asks to place WRITEs: (connection, QPN, R_Key).
    pub asks: Vec<(usize, u32, u32)>,
}

/// How a connection to a peer ends.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Ending {
    /// No word yet: a hang-up now means the peer died.
    Open,
    /// A bye (from the peer, or ours): the peer closes, or this process dropped the
    /// connection on purpose.
    Bye,
    /// The peer refused our ring: its QPNs take the UDP path from now on.
    Refused,
}

/// One destination QPN's route.
struct Route {
    /// The ring to its process; `None`: the UDP path.
    ring: Option<Arc<Outgoing>>,
    /// Until when the answer holds unless used (the progress thread looks, see
    /// [`Local::expire`], so that a send reads no clock).
    until: Instant,
    /// Whether a packet took it since the last look: a route in use is kept.
    used: bool,
    /// Whether use keeps it (a ring, or a holder with no endpoint; not "nobody").
    sticky: bool,
}

#[derive(Default)]
struct Routes {
    /// Each destination QPN looked up.
    by_qpn: softrdma_proto::endpoint::check::KeyMap<Route>,
    /// The ring to each peer endpoint.
    by_ep: HashMap<u64, Arc<Outgoing>>,
    /// Endpoints that refused a ring: reached over UDP.
    refused: std::collections::HashSet<u64>,
}

/// A device's same-host path (see the module docs).
pub(crate) struct Local {
    addr: IpAddr,
    scope_id: u32,
    /// This process's endpoint.
    pub(crate) ep: u64,
    listener: Forgotten,
    /// The UDP port this device's packets leave from, stamped on each ring entry (the
    /// ICRC covers it).
    sport: AtomicU16,
    registry: OnceLock<mio::Registry>,
    routes: Lock<Routes>,
    incoming: Lock<(Vec<Incoming>, usize)>,
    /// Whether `incoming` has any (read on every poll, without the lock).
    any_in: AtomicBool,
    /// Whether this process opened a ring to any peer (read on every send, without a
    /// lock).
    any_out: AtomicBool,
    conns: Lock<HashMap<usize, Conn>>,
    next: AtomicUsize,
    /// Whether WRITEs may be placed by cross-memory copy (see [`super::place`]).
    cma: bool,
    /// The grants this process holds from its peers.
    placements: Lock<Placements>,
    /// The grants this process issued (the region table's), revoked with a connection.
    granted: Arc<Granted>,
}

/// A connection's descriptor.
fn fd_raw(c: &Conn) -> std::os::fd::RawFd {
    match c {
        Conn::Accepted { fd, .. } | Conn::In { fd, .. } | Conn::Out { fd, .. } => fd.as_raw_fd(),
    }
}

/// The abstract name of endpoint `ep` on the device at `addr`.
fn name(addr: IpAddr, scope_id: u32, ep: u64) -> ns::UnixAddr {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let n = if scope_id != 0 {
        format!("softrdma/{uid}/{addr}%{scope_id}/ep/{ep:016x}")
    } else {
        format!("softrdma/{uid}/{addr}/ep/{ep:016x}")
    };
    ns::UnixAddr::new_abstract(n.as_bytes()).expect("the name is far shorter than sun_path")
}

impl Local {
    /// Binds a fresh endpoint's name and listens on it; `None` if that cannot be done
    /// (the device then shares through the owner only).
    pub(crate) fn bind(
        addr: IpAddr,
        scope_id: u32,
        cma: bool,
        granted: Arc<Granted>,
    ) -> Option<Local> {
        let l = ns::socket(
            AddressFamily::Unix,
            SockType::SeqPacket,
            SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
            None,
        )
        .ok()?;
        let ep = loop {
            let ep = rand::random::<u64>();
            if ep == 0 {
                continue;
            }
            match ns::bind(l.as_raw_fd(), &name(addr, scope_id, ep)) {
                Ok(()) => break ep,
                Err(nix::Error::EADDRINUSE) => continue,
                Err(_) => return None,
            }
        };
        ns::listen(&l, Backlog::new(128).expect("within SOMAXCONN")).ok()?;
        Some(Local {
            addr,
            scope_id,
            ep,
            listener: Forgotten::new(l),
            sport: AtomicU16::new(0),
            registry: OnceLock::new(),
            routes: Lock::new(Rank::LocalRoutes, Routes::default()),
            incoming: Lock::new(Rank::LocalIncoming, (Vec::new(), 0)),
            any_in: AtomicBool::new(false),
            any_out: AtomicBool::new(false),
            conns: Lock::new(Rank::LocalConns, HashMap::new()),
            next: AtomicUsize::new(0),
            cma,
            placements: Lock::new(Rank::LocalPlacements, Placements::default()),
            granted,
        })
    }

    /// Starts: packets leave from UDP port `sport`, and the progress thread's poll
    /// (`registry`) watches the listener and every connection.
    pub(crate) fn start(&self, registry: &mio::Registry, sport: u16) -> std::io::Result<()> {
        self.sport.store(sport, Ordering::Relaxed);
        let r = registry.try_clone()?;
        r.register(
            &mut mio::unix::SourceFd(&self.listener.raw()),
            LISTEN,
            mio::Interest::READABLE,
        )?;
        let _ = self.registry.set(r);
        Ok(())
    }

    /// Whether `dst` is this device's own port: a packet there may go through a ring.
    #[inline]
    pub(crate) fn is_local(&self, dst: SocketAddr) -> bool {
        dst.port() == ROCE_V2_PORT && softrdma_proto::qp::same_ip(dst.ip(), self.addr)
    }

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

    /// The ring to QPN `qpn`'s process, looked up (and connected) if need be.
    fn route(&self, routes: &mut Routes, share: &Share, qpn: u32) -> Option<Arc<Outgoing>> {
        if let Some(r) = routes.by_qpn.get_mut(&qpn) {
            r.used = true;
            return r.ring.clone();
        }
        let now = Instant::now();
        // An owner that cannot answer is going (or just went): this packet takes UDP, and
        // nothing is cached, so the next one asks again (the progress thread, which would
        // carry on as owner, may be this thread: waiting here could not help).
        let (ep, sticky) = match share.holder(qpn) {
            Ok(Holder::At(ep)) if !routes.refused.contains(&ep) => (Some(ep), true),
            Ok(Holder::At(_) | Holder::NoEndpoint) => (None, true),
            Ok(Holder::Nobody) => (None, false),
            Err(()) => return None,
        };
        let out = ep.and_then(|ep| match routes.by_ep.get(&ep) {
            Some(o) => Some(o.clone()),
            None => {
                let o = self.connect(ep)?;
                routes.by_ep.insert(ep, o.clone());
                Some(o)
            }
        });
        let hold = if sticky { ROUTE_FOR } else { NO_ROUTE_FOR };
        routes.by_qpn.insert(
            qpn,
            Route {
                ring: out.clone(),
                until: now + hold,
                used: false,
                sticky,
            },
        );
        out
    }

    /// Connects to endpoint `ep` and passes it a new ring.
    fn connect(&self, ep: u64) -> Option<Arc<Outgoing>> {
        let registry = self.registry.get()?;
        let fd = ns::socket(
            AddressFamily::Unix,
            SockType::SeqPacket,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .ok()?;
        // A peer whose backlog is full (its progress thread hung) costs at most this.
        ns::setsockopt(
            &fd,
            ns::sockopt::SendTimeout,
            &nix::sys::time::TimeVal::new(0, 100_000),
        )
        .ok()?;
        ns::connect(fd.as_raw_fd(), &name(self.addr, self.scope_id, ep)).ok()?;
        let pid = match share::same_user(&fd) {
            Ok(pid) => pid,
            Err(e) => {
                eprintln!("softrdma: {}: not using a same-host ring: {e}", self.addr);
                return None;
            }
        };
        let ring = Producer::create()
            .map_err(|e| eprintln!("softrdma: {}: no same-host ring: {e}", self.addr))
            .ok()?;
        let hello = Msg::Ring {
            version: VERSION,
            ep: self.ep,
            sport: self.sport.load(Ordering::Relaxed),
            slots: shm::SLOTS,
            slot_size: shm::SLOT_SIZE,
        };
        share::send(fd.as_raw_fd(), &hello, &ring.fds()).ok()?;
        let _ = nix::fcntl::fcntl(
            &fd,
            nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
        );
        let token = BASE + 2 * self.next.fetch_add(1, Ordering::Relaxed);
        // Registered under the lock the progress thread takes for its events, so that a
        // hang-up reported at once finds the connection (the poll is edge-triggered).
        let mut conns = self.conns.lock();
        registry
            .register(
                &mut mio::unix::SourceFd(&fd.as_raw_fd()),
                mio::Token(token),
                mio::Interest::READABLE,
            )
            .ok()?;
        conns.insert(
            token,
            Conn::Out {
                fd: Forgotten::new(fd),
                ep,
                bye: Ending::Open,
                pid,
            },
        );
        self.any_out.store(true, Ordering::Relaxed);
        share::log(format_args!(
            "{}: pid {} opened a same-host ring to endpoint {ep:016x}",
            self.addr,
            std::process::id()
        ));
        Some(Arc::new(Outgoing {
            ring: Lock::new(Rank::LocalRing, ring),
            ep,
            token,
        }))
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

    /// Receives up to `want` packets from the rings into `batch` (from slot 0), taking
    /// the rings in turn, and into `acks` the ACKs their boxes hold (see
    /// [`Local::ack`]); how many packets came, and how many entries were malformed.
    pub(crate) fn recv(
        &self,
        batch: &mut RecvBatch,
        want: usize,
        acks: &mut Vec<(u32, u32)>,
    ) -> (usize, usize) {
        let mut g = self.incoming.lock();
        let (rings, turn) = &mut *g;
        let (mut got, mut bad) = (0, 0);
        let n = rings.len();
        // Rings to drop: those found empty after their connection went, and broken ones
        // (whose connections are then closed, below).
        let mut done = false;
        let mut broken = Vec::new();
        // The ring to start at turns with each call, so that none starves the others; a
        // division once per call, not per ring (this runs on every empty poll).
        let mut i = if n > 1 { *turn % n } else { 0 };
        for _ in 0..n {
            if got == want {
                break;
            }
            let r = &mut rings[i];
            i = if i + 1 == n { 0 } else { i + 1 };
            match r.ring.recv(batch, got, want - got) {
                Ok((g, b)) => {
                    got += g;
                    bad += b;
                    // Behind the entries just read, the ACKs left since.
                    r.ring.acks(acks);
                    done |= r.closing && g + b == 0;
                }
                Err(e) => {
                    eprintln!("softrdma: {}: dropping a same-host ring: {e}", self.addr);
                    broken.push((r.token, r.conn));
                    r.closing = true;
                    done = true;
                }
            }
        }
        *turn = turn.wrapping_add(1);
        if done {
            let registry = self.registry.get();
            rings.retain(|r| {
                let keep =
                    !r.closing || (r.ring.pending() && !broken.iter().any(|b| b.0 == r.token));
                if !keep && let Some(reg) = registry {
                    let _ = reg.deregister(&mut mio::unix::SourceFd(&r.ring.wake_fd()));
                }
                keep
            });
            self.any_in.store(!rings.is_empty(), Ordering::Relaxed);
        }
        drop(g);
        for (token, fd) in broken {
            self.hang_up(token, fd);
        }
        (got, bad)
    }

    /// Ends connection `token` (descriptor `fd`) on purpose: says bye, so the peer does not
    /// take it for a crash, and shuts it down; the hang-up that follows tears it down.
    fn hang_up(&self, token: usize, fd: std::os::fd::RawFd) {
        let mut conns = self.conns.lock();
        if let Some(Conn::In { bye, .. } | Conn::Out { bye, .. }) = conns.get_mut(&token) {
            *bye = Ending::Bye;
            let _ = share::send(fd, &Msg::Bye, &[]);
            let _ = ns::shutdown(fd, ns::Shutdown::Both);
        }
    }

    /// Before the progress thread sleeps: asks every ring for a wake-up; true if a
    /// packet already waits.
    pub(crate) fn arm(&self) -> bool {
        let g = self.incoming.lock();
        let mut any = false;
        for r in &g.0 {
            any |= r.ring.arm();
        }
        any
    }

    /// Whether WRITEs may be placed (`DeviceOptions::cma`).
    pub(crate) fn cma(&self) -> bool {
        self.cma
    }

    /// Whether any route to a peer's ring exists (a send looks for a grant only then).
    #[inline]
    pub(crate) fn has_routes(&self) -> bool {
        self.cma && self.any_out.load(Ordering::Relaxed)
    }

    /// Whether any ring is open (the receive path looks at them only then).
    #[inline]
    pub(crate) fn has_rings(&self) -> bool {
        self.any_in.load(Ordering::Relaxed)
    }

    /// Handles a poll event of the same-host path (`token` is [`LISTEN`] or at least
    /// [`BASE`]). When a peer died (its connection hung up with no bye first): its
    /// endpoint and the QPNs this process sent to there, for the device to put its QPs
    /// connected to that peer into ERROR.
    pub(crate) fn event(&self, token: mio::Token, closed: bool) -> Happened {
        let mut happened = Happened::default();
        let Some(registry) = self.registry.get() else {
            return happened;
        };
        if token == LISTEN {
            self.accept(registry);
            return happened;
        }
        let t = token.0;
        if (t - BASE) % 2 == 1 {
            let g = self.incoming.lock();
            if let Some(r) = g.0.iter().find(|r| r.token + 1 == t) {
                r.ring.clear_wake();
            }
            return happened;
        }
        let mut conns = self.conns.lock();
        let Some(conn) = conns.get_mut(&t) else {
            return happened;
        };
        let fd = match conn {
            Conn::Accepted { fd, .. } | Conn::In { fd, .. } | Conn::Out { fd, .. } => {
                fd.as_raw_fd()
            }
        };
        let mut gone = closed;
        let mut got = Vec::new();
        loop {
            match share::recv(fd, MsgFlags::MSG_DONTWAIT) {
                Ok(Some(x)) => got.push(x),
                Err(nix::Error::EAGAIN) => break,
                Err(nix::Error::EINTR) => {}
                Ok(None) | Err(_) => {
                    gone = true;
                    break;
                }
            }
        }
        // What came before a hang-up still counts (a ring, then a bye).
        for (rec, fds) in got {
            let conn = conns.get_mut(&t).expect("looked up above");
            match (&mut *conn, Msg::decode(&rec)) {
                (Conn::In { bye, .. } | Conn::Out { bye, .. }, Ok(Msg::Bye)) => {
                    if *bye == Ending::Open {
                        *bye = Ending::Bye;
                    }
                }
                (Conn::Out { bye, .. }, Ok(Msg::Refused { .. })) => *bye = Ending::Refused,
                (Conn::In { .. }, Ok(Msg::Place { qpn, rkey })) => {
                    happened.asks.push((t, qpn, rkey));
                }
                (Conn::Out { ep, pid, .. }, Ok(Msg::Placed { qpn, rkey, grant })) => {
                    let grant = (grant != Grant::REFUSED).then_some(grant);
                    let r = self
                        .placements
                        .lock()
                        .answer(*ep, *pid, qpn, rkey, grant, fds);
                    if let Err(e) = r {
                        eprintln!(
                            "softrdma: {}: closing a same-host connection: {e}",
                            self.addr
                        );
                        let _ = share::send(fd_raw(conn), &self.refusal(), &[]);
                        gone = true;
                        break;
                    }
                }
                (Conn::Accepted { pid, .. }, Ok(Msg::Ring { .. })) => {
                    let pid = *pid;
                    match self.take_ring(registry, t, fd, &rec, fds) {
                        Ok(ep) => {
                            let Some(Conn::Accepted { fd, .. }) = conns.remove(&t) else {
                                unreachable!("matched above");
                            };
                            conns.insert(
                                t,
                                Conn::In {
                                    fd,
                                    ep,
                                    bye: Ending::Open,
                                    pid,
                                    table: None,
                                },
                            );
                            share::log(format_args!(
                                "{}: pid {pid} opened a same-host ring to pid {}",
                                self.addr,
                                std::process::id()
                            ));
                        }
                        Err(e) => {
                            eprintln!(
                                "softrdma: {}: refused a same-host ring from pid {pid}: {e}",
                                self.addr
                            );
                            // Said, so that the sender takes the UDP path instead of
                            // taking the hang-up for this process's death.
                            let _ = share::send(fd, &self.refusal(), &[]);
                            gone = true;
                            break;
                        }
                    }
                }
                (_, m) => {
                    eprintln!(
                        "softrdma: {}: closing a same-host connection: unexpected {m:?}",
                        self.addr
                    );
                    let _ = share::send(fd, &self.refusal(), &[]);
                    gone = true;
                    break;
                }
            }
        }
        if !gone {
            return happened;
        }
        let Some((ep, ending)) = self.close(registry, &mut conns, t) else {
            return happened;
        };
        // One connection to a peer ending ends the others to it (the pair is closed in
        // order, both ways): a ring with no connection behind it would stay mapped.
        let others: Vec<usize> = conns
            .iter()
            .filter(
                |(_, c)| matches!(c, Conn::In { ep: e, .. } | Conn::Out { ep: e, .. } if *e == ep),
            )
            .map(|(k, _)| *k)
            .collect();
        for k in others {
            if let Some(Conn::In { fd, .. } | Conn::Out { fd, .. }) = conns.get(&k)
                && ending != Ending::Open
            {
                let _ = share::send(fd.as_raw_fd(), &Msg::Bye, &[]);
            }
            self.close(registry, &mut conns, k);
        }
        drop(conns);
        // Either connection to a peer going means the peer is going: its QPNs are
        // looked up again from now on (the owner will not know them).
        let mut routes = self.routes.lock();
        routes.by_ep.remove(&ep);
        if ending == Ending::Refused {
            routes.refused.insert(ep);
        }
        let mut lost = Vec::new();
        routes.by_qpn.retain(|q, r| match &r.ring {
            Some(o) if o.ep == ep => {
                lost.push(*q);
                false
            }
            _ => true,
        });
        drop(routes);
        share::log(format_args!(
            "{}: endpoint {ep:016x} {}; {} peer QPNs",
            self.addr,
            match ending {
                Ending::Open => "died",
                Ending::Bye => "closed",
                Ending::Refused => "refused a ring",
            },
            lost.len()
        ));
        happened.died = (ending == Ending::Open).then_some((ep, lost));
        happened
    }

    /// The placement table for the peer on connection `token`, made on its first ask.
    pub(crate) fn table_for(&self, token: usize) -> Option<Arc<Table>> {
        let mut conns = self.conns.lock();
        let Some(Conn::In { pid, table, .. }) = conns.get_mut(&token) else {
            return None;
        };
        if table.is_none() {
            *table = Table::create(*pid);
        }
        table.clone()
    }

    /// Answers the ask for (`qpn`, `rkey`) on connection `token` with `grant` (made in
    /// `table`), or with a refusal. A grant that can no longer be said (the connection
    /// went meanwhile) is revoked.
    pub(crate) fn answer(
        &self,
        token: usize,
        qpn: u32,
        rkey: u32,
        grant: Option<Grant>,
        table: &Arc<Table>,
        memfd: Option<std::os::fd::RawFd>,
    ) {
        let conns = self.conns.lock();
        let m = Msg::Placed {
            qpn,
            rkey,
            grant: grant.unwrap_or(Grant::REFUSED),
        };
        let said = match conns.get(&token) {
            Some(Conn::In { fd, .. }) => {
                // The table, and the region's memory when it is shareable.
                let fds: Vec<_> = match grant {
                    Some(_) => std::iter::once(table.shm.fd()).chain(memfd).collect(),
                    None => Vec::new(),
                };
                share::send(fd.as_raw_fd(), &m, &fds).is_ok()
            }
            _ => false,
        };
        drop(conns);
        if !said && grant.is_some() {
            self.granted.revoke_table(table);
        }
    }

    /// Places a WRITE of the `local` pieces at `remote_addr` of QPN `qpn`'s process
    /// through `rkey`, under the grant `p` it holds for them ([`Local::granted`]): a plain
    /// copy into a mapped region, a cross-memory copy otherwise (see [`super::place`]).
    /// Anything but `Done` (the grant was revoked, the range is outside it, or the kernel
    /// refused): the WRITE then takes the ring.
    pub(crate) fn place(
        &self,
        p: &place::Placement,
        qpn: u32,
        rkey: u32,
        remote_addr: u64,
        local: &[(*const u8, usize)],
    ) -> place::Placed {
        place::write(&self.placements, p, qpn, rkey, remote_addr, local)
    }

    /// The grant to place WRITEs to QPN `qpn` through `rkey`, if one is held (none when
    /// placement is off). If none is, one is asked for (once in a while).
    pub(crate) fn granted(&self, qpn: u32, rkey: u32) -> Option<Arc<place::Placement>> {
        if !self.cma {
            return None;
        }
        let held = self.placements.lock().held(qpn, rkey);
        if held.is_none() {
            self.ask(qpn, rkey);
        }
        held
    }

    /// Asks QPN `qpn`'s process for a grant through `rkey`, if a ring reaches it and it
    /// was not asked lately.
    fn ask(&self, qpn: u32, rkey: u32) {
        let out = {
            let routes = self.routes.lock();
            routes.by_qpn.get(&qpn).and_then(|r| r.ring.clone())
        };
        let Some(out) = out else {
            return;
        };
        if !self.placements.lock().should_ask(qpn, rkey) {
            return;
        }
        let conns = self.conns.lock();
        if let Some(Conn::Out { fd, .. }) = conns.get(&out.token) {
            let _ = share::send(fd.as_raw_fd(), &Msg::Place { qpn, rkey }, &[]);
        }
    }

    /// What this process says when it refuses a peer's ring or record.
    fn refusal(&self) -> Msg {
        Msg::Refused {
            version: VERSION,
            pid: std::process::id(),
            ep: self.ep,
        }
    }

    /// Drops connection `t`; its ring, if one came over it, is drained first (see
    /// [`Incoming::closing`]). The peer's endpoint and how the connection ended; `None`
    /// for one that never carried a ring.
    fn close(
        &self,
        registry: &mio::Registry,
        conns: &mut HashMap<usize, Conn>,
        t: usize,
    ) -> Option<(u64, Ending)> {
        let (fd, ep, ending) = match conns.remove(&t)? {
            Conn::Accepted { fd, .. } => (fd, 0, Ending::Bye),
            Conn::In {
                fd, ep, bye, table, ..
            } => {
                if let Some(table) = table {
                    self.granted.revoke_table(&table);
                }
                (fd, ep, bye)
            }
            Conn::Out { fd, ep, bye, .. } => {
                self.placements.lock().forget(ep);
                (fd, ep, bye)
            }
        };
        let _ = registry.deregister(&mut mio::unix::SourceFd(&fd.as_raw_fd()));
        let mut g = self.incoming.lock();
        if let Some(i) = g.0.iter().position(|r| r.token == t) {
            if g.0[i].ring.pending() {
                g.0[i].closing = true;
            } else {
                let r = g.0.swap_remove(i);
                let _ = registry.deregister(&mut mio::unix::SourceFd(&r.ring.wake_fd()));
            }
        }
        self.any_in.store(!g.0.is_empty(), Ordering::Relaxed);
        (ep != 0).then_some((ep, ending))
    }

    /// Accepts every waiting connection (checking the peer's uid).
    fn accept(&self, registry: &mio::Registry) {
        loop {
            let fd = match ns::accept4(
                self.listener.raw(),
                SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
            ) {
                // SAFETY: accept4 returned a new descriptor that nothing else owns.
                Ok(fd) => unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) },
                Err(nix::Error::EINTR) => continue,
                Err(_) => return,
            };
            let pid = match share::same_user(&fd) {
                Ok(pid) => pid,
                Err(e) => {
                    eprintln!(
                        "softrdma: {}: refused a same-host connection: {e}",
                        self.addr
                    );
                    continue;
                }
            };
            let t = BASE + 2 * self.next.fetch_add(1, Ordering::Relaxed);
            if registry
                .register(
                    &mut mio::unix::SourceFd(&fd.as_raw_fd()),
                    mio::Token(t),
                    mio::Interest::READABLE,
                )
                .is_ok()
            {
                self.conns.lock().insert(
                    t,
                    Conn::Accepted {
                        fd: Forgotten::new(fd),
                        pid,
                    },
                );
            }
        }
    }

    /// Checks a peer's ring record and maps its ring; the peer's endpoint.
    fn take_ring(
        &self,
        registry: &mio::Registry,
        token: usize,
        conn: std::os::fd::RawFd,
        rec: &[u8],
        mut fds: Vec<OwnedFd>,
    ) -> Result<u64, RingRefused> {
        let Ok(Msg::Ring {
            version,
            ep,
            slots,
            slot_size,
            ..
        }) = Msg::decode(rec)
        else {
            return Err(RingRefused::NotRing);
        };
        if version != VERSION || slots != shm::SLOTS || slot_size != shm::SLOT_SIZE {
            return Err(RingRefused::Layout {
                version,
                slots,
                slot_size,
            });
        }
        if fds.len() != 2 || ep == 0 {
            return Err(RingRefused::Descriptors { n: fds.len(), ep });
        }
        let wake = fds.pop().expect("two");
        let memfd = fds.pop().expect("two");
        let ring = Consumer::open(memfd, wake, self.addr).map_err(RingRefused::Open)?;
        registry
            .register(
                &mut mio::unix::SourceFd(&ring.wake_fd()),
                mio::Token(token + 1),
                mio::Interest::READABLE,
            )
            .map_err(RingRefused::Register)?;
        let mut g = self.incoming.lock();
        g.0.push(Incoming {
            ring,
            token,
            conn,
            closing: false,
        });
        self.any_in.store(true, Ordering::Relaxed);
        Ok(ep)
    }

    /// The device closes on purpose: says so on every connection, so that its peers do
    /// not take the hang-up for a crash.
    pub(crate) fn bye(&self) {
        let conns = self.conns.lock();
        for c in conns.values() {
            if let Conn::In { fd, .. } | Conn::Out { fd, .. } = c {
                let _ = share::send(fd.as_raw_fd(), &Msg::Bye, &[]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Context, DeviceOptions, Mtu};

    /// A connection to the endpoint of the device opened at `127.0.78.last`, as a peer
    /// process would make it (with a 10 s bound on each read), and the device.
    fn peer_of(last: u8) -> (Context, OwnedFd) {
        let addr = IpAddr::from([127, 0, 78, last]);
        let ctx = Context::open_with(
            &format!("l{last}"),
            addr,
            Mtu::M1024,
            DeviceOptions::default(),
        )
        .expect("device opens");
        let ep = ctx
            .dev()
            .local
            .as_ref()
            .expect("a shared device has an endpoint")
            .ep;
        let fd = ns::socket(
            AddressFamily::Unix,
            SockType::SeqPacket,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .unwrap();
        ns::setsockopt(
            &fd,
            ns::sockopt::ReceiveTimeout,
            &nix::sys::time::TimeVal::new(10, 0),
        )
        .unwrap();
        ns::connect(fd.as_raw_fd(), &name(addr, 0, ep)).unwrap();
        (ctx, fd)
    }

    fn ring_record(version: u32) -> Msg {
        Msg::Ring {
            version,
            ep: 7,
            sport: 49152,
            slots: shm::SLOTS,
            slot_size: shm::SLOT_SIZE,
        }
    }

    /// The records the device sends on `fd` until it hangs up.
    fn answers(fd: &OwnedFd) -> Vec<Msg> {
        let mut got = Vec::new();
        while let Some((rec, _)) = share::recv(fd.as_raw_fd(), MsgFlags::empty()).unwrap() {
            got.push(Msg::decode(&rec).unwrap());
        }
        got
    }

    /// A ring the device cannot take (here: another protocol version, and no memory) is
    /// refused in words before the hang-up, so that its sender takes the UDP path instead
    /// of taking the hang-up for this process's death and failing its QPs.
    #[test]
    fn a_ring_it_cannot_take_is_refused_in_words() {
        let (_ctx, fd) = peer_of(31);
        share::send(fd.as_raw_fd(), &ring_record(VERSION + 1), &[]).unwrap();
        let got = answers(&fd);
        assert!(
            matches!(
                got[..],
                [Msg::Refused {
                    version: VERSION,
                    ..
                }]
            ),
            "{got:?}"
        );
    }

    /// A ring whose producer publishes an impossible index is dropped, and its
    /// connection ended in order (a bye, then the hang-up), not left registered.
    #[test]
    fn a_broken_ring_ends_its_connection_with_a_bye() {
        let (_ctx, fd) = peer_of(32);
        let ring = Producer::create().unwrap();
        share::send(fd.as_raw_fd(), &ring_record(VERSION), &ring.fds()).unwrap();
        ring.publish_raw(10_000);
        ring.wake();
        let got = answers(&fd);
        assert!(matches!(got[..], [Msg::Bye]), "{got:?}");
    }

    /// A child forked by a process with same-host connections holds none of them (each
    /// is `/dev/null` there), so that a parent's death is seen by its peers however long
    /// the child lives.
    #[test]
    fn a_forked_child_keeps_no_ring_connection() {
        let (ctx, fd) = peer_of(33);
        let ring = Producer::create().unwrap();
        share::send(fd.as_raw_fd(), &ring_record(VERSION), &ring.fds()).unwrap();
        let local = ctx.dev().local.as_ref().unwrap();
        // The device's progress thread accepts the connection and takes the ring.
        let deadline = Instant::now() + Duration::from_secs(10);
        let fds = loop {
            let conns = local.conns.lock();
            let fds: Vec<i32> = conns
                .values()
                .filter(|c| matches!(c, Conn::In { .. }))
                .map(fd_raw)
                .collect();
            if !fds.is_empty() {
                break fds;
            }
            drop(conns);
            assert!(Instant::now() < deadline, "the ring was never taken");
            std::thread::yield_now();
        };
        let paths: Vec<std::ffi::CString> = fds
            .iter()
            .map(|f| std::ffi::CString::new(format!("/proc/self/fd/{f}")).unwrap())
            .collect();
        // SAFETY: the child makes only async-signal-safe calls (readlink, _exit) on memory
        // prepared before the fork.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let mut buf = [0u8; 64];
            for p in &paths {
                // SAFETY: a NUL-terminated path and a buffer that outlives the call.
                let n = unsafe { libc::readlink(p.as_ptr(), buf.as_mut_ptr().cast(), 64) };
                if n != 9 || &buf[..9] != b"/dev/null" {
                    // SAFETY: ends the child at once.
                    unsafe { libc::_exit(1) };
                }
            }
            // SAFETY: as above.
            unsafe { libc::_exit(0) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child kept a ring connection ({status:#x})"
        );
    }
}
