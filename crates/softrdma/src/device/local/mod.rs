//! The same-host path: packets between two processes that share a device (see
//! [`super::share`]) move through shared-memory rings ([`crate::datapath::shm`]) instead of
//! UDP and the owner's forwarding.
//!
//! # The design
//! Each process that shares a device listens on an abstract `SOCK_SEQPACKET` socket of
//! its own, `@softrdma/UID/IP/ep/ID`, where `ID` is a random 64-bit endpoint it states in
//! its hello to the owner. When a QP is given a destination QPN on the device's own
//! address, the thread that modifies it ([`Local::look_up`], from `Device::modified`, with
//! no lock held) asks the owner which endpoint holds that QPN
//! ([`super::share::Share::holder`]), connects there, checks the peer's uid, creates a
//! ring and passes its memfd and eventfd ([`Msg::Ring`](super::share::msg::Msg::Ring)),
//! as the kernel's modify resolves a RoCE destination's neighbour. From then on every
//! packet to a QPN of that process goes into that ring, in the order it was built, from
//! the QP's first: the UDP path is never used for it, so the two paths cannot reorder one
//! QP's packets. No send waits for the owner: a send that finds no route (a UD QP's
//! first datagrams to a new peer, or a QP the CM moved under its own lock, whose lookup
//! the resolver thread makes, [`super::resolver`]) takes the UDP path through the owner
//! meanwhile. The other
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
//! The connections exist to be watched: when one hangs up without a [`Msg::Bye`](super::share::msg::Msg::Bye) first
//! (the peer was killed), the progress thread hands the device the QPNs it routed to that
//! peer, and the device moves its QPs connected to them to ERROR at once
//! ([`softrdma_proto::QueuePair::peer_gone`]) instead of after the retry budget. A device
//! closed on purpose says bye on each connection first.
//!
//! # Threads and locks
//! `routes` is taken per send batch that goes to the device's own address (by whichever
//! thread flushes it); a route's ring has its own lock, taken per packet under `routes`.
//! A send that finds no route takes `wanted` under `routes`, and goes on by UDP; the
//! resolver thread's lookup takes `lookup`, and under it, one at a time, `routes`, the
//! owner (a request of at most [`super::share::ANSWER_TIMEOUT`] under share's control
//! lock), `conns` (a connect) and `routes` again. `incoming` is taken by the thread that
//! holds the device's receive state, and by the progress thread to add or drop a ring.
//! `conns` is the progress thread's, and the sender's for the moment it adds a
//! connection. No QP lock is taken under any of them.
//!
//! # Layout
//! - this file: [`Local`], its setup, and what the device asks of it in passing;
//! - `conn`: the connections to peer processes (connect, accept, take a ring, bye, hang
//!   up) and their poll events;
//! - `routes`: the routes from destination QPNs to rings, the divert of a send batch, the
//!   ACK boxes;
//! - `incoming`: the rings peers fill, drained by the receive path;
//! - `grants`: the asks and answers for placement grants, over the connections.
//!
//! `grants` imports `conn`, `conn` imports `routes` and `incoming`, and those two import
//! nothing of the others.

mod conn;
mod grants;
mod incoming;
mod routes;

pub(crate) use conn::{BASE, LISTEN};
pub(crate) use routes::{Draining, NoWait, Then, Want};

use super::place::{Granted, Placements};
use crate::datapath::socket::Forgotten;
use crate::sync::{Lock, Rank};
use conn::Conn;
use incoming::Incoming;
use nix::sys::socket::{self as ns, AddressFamily, Backlog, SockFlag, SockType};
use routes::Routes;
use softrdma_wire::ROCE_V2_PORT;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

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
    /// One lookup at a time (see `Local::resolve`): taken around asking the owner and
    /// connecting, with no lock of the send path held.
    lookup: Lock<()>,
    /// The QPNs sends found no route for, for the resolver thread (see
    /// `device::resolver`), and whether that thread runs; `any_wanted`: there are some.
    wanted: Lock<routes::Wanted>,
    any_wanted: AtomicBool,
    /// For tests: how long each lookup waits before it asks, as a slow owner would make it
    /// (`DeviceOptions::route_lookup_delay`).
    lookup_delay: std::time::Duration,
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

impl Local {
    /// Binds a fresh endpoint's name and listens on it; `None` if that cannot be done
    /// (the device then shares through the owner only).
    pub(crate) fn bind(
        addr: IpAddr,
        scope_id: u32,
        cma: bool,
        granted: Arc<Granted>,
        lookup_delay: std::time::Duration,
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
            match ns::bind(l.as_raw_fd(), &conn::name(addr, scope_id, ep)) {
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
            lookup: Lock::new(Rank::LocalLookup, ()),
            wanted: Lock::new(Rank::LocalWanted, routes::Wanted::default()),
            any_wanted: AtomicBool::new(false),
            lookup_delay,
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
}
