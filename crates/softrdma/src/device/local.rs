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
//! sender; a process's own QPs reach each other the same way (a ring to itself).
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

use super::share::{self, Holder, Share, msg::Msg, msg::VERSION};
use crate::datapath::batch::SendBatch;
use crate::datapath::shm::{self, Consumer, Producer};
use crate::datapath::socket::{Forgotten, RecvBatch};
use nix::sys::socket::{self as ns, AddressFamily, Backlog, MsgFlags, SockFlag, SockType};
use softrdma_wire::ROCE_V2_PORT;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The progress thread's token for the endpoint's listener.
pub(crate) const LISTEN: mio::Token = mio::Token(5);
/// The same-host path's tokens start here: `BASE + 2k` is connection `k`, `BASE + 2k + 1`
/// its ring's eventfd.
pub(crate) const BASE: usize = 1 << 40;
/// How long a route stays cached: well inside the QPN quarantine, so that a QPN drawn
/// again for another process (after its quarantine) is looked up again.
const ROUTE_FOR: Duration = Duration::from_secs(60);
/// How long a failed lookup stays cached (its packets take the UDP path meanwhile).
const NO_ROUTE_FOR: Duration = Duration::from_secs(1);
/// How long a sender waits for room in a full ring before it drops the packet (as a
/// full socket buffer would): a receiver that polls drains it long before.
const FULL_WAIT: Duration = Duration::from_millis(1);

/// A ring this process fills, and the connection it was passed over.
struct Outgoing {
    ring: Mutex<Producer>,
    ep: u64,
}

/// A ring a peer fills, drained by the receive path.
struct Incoming {
    ring: Consumer,
    token: usize,
}

/// A connection, as the progress thread watches it.
enum Conn {
    /// Accepted; its ring has not come yet.
    Accepted { fd: OwnedFd, pid: i32 },
    /// A peer's ring comes over it (the peer's endpoint, and whether it said bye).
    In { fd: OwnedFd, ep: u64, bye: bool },
    /// Our ring went over it.
    Out { fd: OwnedFd, ep: u64, bye: bool },
}

#[derive(Default)]
struct Routes {
    /// Each destination QPN looked up: the ring to its process (`None`: UDP), and until
    /// when the answer holds (the progress thread drops answers past it, see
    /// [`Local::expire`], so that a send reads no clock).
    by_qpn: HashMap<u32, (Option<Arc<Outgoing>>, Instant)>,
    /// The ring to each peer endpoint.
    by_ep: HashMap<u64, Arc<Outgoing>>,
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
    routes: Mutex<Routes>,
    incoming: Mutex<(Vec<Incoming>, usize)>,
    /// Whether `incoming` has any (read on every poll, without the lock).
    any_in: AtomicBool,
    conns: Mutex<HashMap<usize, Conn>>,
    next: AtomicUsize,
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
    pub(crate) fn bind(addr: IpAddr, scope_id: u32) -> Option<Local> {
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
            routes: Mutex::new(Routes::default()),
            incoming: Mutex::new((Vec::new(), 0)),
            any_in: AtomicBool::new(false),
            conns: Mutex::new(HashMap::new()),
            next: AtomicUsize::new(0),
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
        let mut routes = self.routes.lock().unwrap_or_else(|e| e.into_inner());
        // The ring written last: each ring is woken once it has its packets (a batch
        // mostly goes to one).
        let mut last: Option<Arc<Outgoing>> = None;
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
            if let Some(l) = &last
                && !Arc::ptr_eq(l, &out)
            {
                l.ring.lock().unwrap_or_else(|e| e.into_inner()).wake();
            }
            let mut ring = out.ring.lock().unwrap_or_else(|e| e.into_inner());
            let live: Vec<_> = pieces.iter().copied().filter(|p| p.1 > 0).collect();
            if !ring.push(&live, sport) {
                // Full: wake the reader and give it a moment, as a blocking socket would.
                let until = Instant::now() + FULL_WAIT;
                loop {
                    ring.wake();
                    std::thread::yield_now();
                    if ring.push(&live, sport) {
                        sent += 1;
                        break;
                    }
                    if Instant::now() >= until {
                        dropped += 1;
                        break;
                    }
                }
            } else {
                sent += 1;
            }
            drop(ring);
            last = Some(out);
            true
        });
        drop(routes);
        if let Some(l) = last {
            l.ring.lock().unwrap_or_else(|e| e.into_inner()).wake();
        }
        (sent, dropped)
    }

    /// The ring to QPN `qpn`'s process, looked up (and connected) if need be.
    fn route(&self, routes: &mut Routes, share: &Share, qpn: u32) -> Option<Arc<Outgoing>> {
        if let Some((r, _)) = routes.by_qpn.get(&qpn) {
            return r.clone();
        }
        let now = Instant::now();
        // An owner that cannot answer is going (or just went): this packet takes UDP, and
        // nothing is cached, so the next one asks again (the progress thread, which would
        // carry on as owner, may be this thread: waiting here could not help).
        let ep = match share.holder(qpn) {
            Ok(Holder::At(ep)) => Some(ep),
            Err(()) => return None,
            Ok(_) => None,
        };
        let out = ep.and_then(|ep| match routes.by_ep.get(&ep) {
            Some(o) => Some(o.clone()),
            None => {
                let o = self.connect(ep)?;
                routes.by_ep.insert(ep, o.clone());
                Some(o)
            }
        });
        let hold = if out.is_some() {
            ROUTE_FOR
        } else {
            NO_ROUTE_FOR
        };
        routes.by_qpn.insert(qpn, (out.clone(), now + hold));
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
        if let Err(e) = share::same_user(&fd) {
            eprintln!("softrdma: {}: not using a same-host ring: {e}", self.addr);
            return None;
        }
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
        let mut conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        registry
            .register(
                &mut mio::unix::SourceFd(&fd.as_raw_fd()),
                mio::Token(token),
                mio::Interest::READABLE,
            )
            .ok()?;
        conns.insert(token, Conn::Out { fd, ep, bye: false });
        share::log(format_args!(
            "{}: pid {} opened a same-host ring to endpoint {ep:016x}",
            self.addr,
            std::process::id()
        ));
        Some(Arc::new(Outgoing {
            ring: Mutex::new(ring),
            ep,
        }))
    }

    /// Drops the route answers that are past their time (the progress thread, now and
    /// then): the next send to those QPNs looks them up again.
    pub(crate) fn expire(&self) {
        let now = Instant::now();
        let mut routes = self.routes.lock().unwrap_or_else(|e| e.into_inner());
        routes.by_qpn.retain(|_, (_, until)| *until > now);
    }

    /// Receives up to `want` packets from the rings into `batch` (from slot 0), taking
    /// the rings in turn; how many came, and how many entries were malformed.
    pub(crate) fn recv(&self, batch: &mut RecvBatch, want: usize) -> (usize, usize) {
        let mut g = self.incoming.lock().unwrap_or_else(|e| e.into_inner());
        let (rings, turn) = &mut *g;
        let (mut got, mut bad) = (0, 0);
        let n = rings.len();
        let mut broken = None;
        for k in 0..n {
            if got == want {
                break;
            }
            let i = (*turn + k) % n;
            match rings[i].ring.recv(batch, got, want - got) {
                Ok((g, b)) => {
                    got += g;
                    bad += b;
                }
                Err(e) => {
                    eprintln!("softrdma: {}: dropping a same-host ring: {e}", self.addr);
                    broken = Some(i);
                }
            }
        }
        *turn = turn.wrapping_add(1);
        if let Some(i) = broken {
            rings.swap_remove(i);
            self.any_in.store(!rings.is_empty(), Ordering::Relaxed);
        }
        (got, bad)
    }

    /// Before the progress thread sleeps: asks every ring for a wake-up; true if a
    /// packet already waits.
    pub(crate) fn arm(&self) -> bool {
        let g = self.incoming.lock().unwrap_or_else(|e| e.into_inner());
        let mut any = false;
        for r in &g.0 {
            any |= r.ring.arm();
        }
        any
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
    pub(crate) fn event(&self, token: mio::Token, closed: bool) -> Option<(u64, Vec<u32>)> {
        let registry = self.registry.get()?;
        if token == LISTEN {
            self.accept(registry);
            return None;
        }
        let t = token.0;
        if (t - BASE) % 2 == 1 {
            let g = self.incoming.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(r) = g.0.iter().find(|r| r.token + 1 == t) {
                r.ring.clear_wake();
            }
            return None;
        }
        let mut conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        let conn = conns.get_mut(&t)?;
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
                (Conn::In { bye, .. } | Conn::Out { bye, .. }, Ok(Msg::Bye)) => *bye = true,
                (Conn::Accepted { pid, .. }, Ok(Msg::Ring { .. })) => {
                    let pid = *pid;
                    match self.take_ring(registry, t, &rec, fds) {
                        Ok(ep) => {
                            let Some(Conn::Accepted { fd, .. }) = conns.remove(&t) else {
                                unreachable!("matched above");
                            };
                            conns.insert(t, Conn::In { fd, ep, bye: false });
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
                    gone = true;
                    break;
                }
            }
        }
        if !gone {
            return None;
        }
        let conn = conns.remove(&t).expect("looked up above");
        drop(conns);
        let (fd, ep, bye) = match conn {
            Conn::Accepted { fd, .. } => (fd, 0, true),
            Conn::In { fd, ep, bye } | Conn::Out { fd, ep, bye } => (fd, ep, bye),
        };
        let _ = registry.deregister(&mut mio::unix::SourceFd(&fd.as_raw_fd()));
        {
            let mut g = self.incoming.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(i) = g.0.iter().position(|r| r.token == t) {
                let r = g.0.swap_remove(i);
                let _ = registry.deregister(&mut mio::unix::SourceFd(&r.ring.wake_fd()));
            }
            self.any_in.store(!g.0.is_empty(), Ordering::Relaxed);
        }
        if ep == 0 {
            return None;
        }
        // Either connection to a peer going means the peer is going: its QPNs are
        // looked up again from now on (the owner will not know them).
        let mut routes = self.routes.lock().unwrap_or_else(|e| e.into_inner());
        routes.by_ep.remove(&ep);
        let mut lost = Vec::new();
        routes.by_qpn.retain(|q, (r, _)| match r {
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
            if bye { "closed" } else { "died" },
            lost.len()
        ));
        (!bye).then_some((ep, lost))
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
                self.conns
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(t, Conn::Accepted { fd, pid });
            }
        }
    }

    /// Checks a peer's ring record and maps its ring; the peer's endpoint.
    fn take_ring(
        &self,
        registry: &mio::Registry,
        token: usize,
        rec: &[u8],
        mut fds: Vec<OwnedFd>,
    ) -> Result<u64, String> {
        let Ok(Msg::Ring {
            version,
            ep,
            slots,
            slot_size,
            ..
        }) = Msg::decode(rec)
        else {
            return Err("not a ring record".into());
        };
        if version != VERSION || slots != shm::SLOTS || slot_size != shm::SLOT_SIZE {
            return Err(format!(
                "version {version} with {slots} slots of {slot_size} bytes, not version \
                 {VERSION} with {} of {}",
                shm::SLOTS,
                shm::SLOT_SIZE
            ));
        }
        if fds.len() != 2 || ep == 0 {
            return Err(format!("{} descriptors, endpoint {ep:x}", fds.len()));
        }
        let wake = fds.pop().expect("two");
        let memfd = fds.pop().expect("two");
        let ring = Consumer::open(memfd, wake, self.addr).map_err(|e| e.to_string())?;
        registry
            .register(
                &mut mio::unix::SourceFd(&ring.wake_fd()),
                mio::Token(token + 1),
                mio::Interest::READABLE,
            )
            .map_err(|e| e.to_string())?;
        let mut g = self.incoming.lock().unwrap_or_else(|e| e.into_inner());
        g.0.push(Incoming { ring, token });
        self.any_in.store(true, Ordering::Relaxed);
        Ok(ep)
    }

    /// The device closes on purpose: says so on every connection, so that its peers do
    /// not take the hang-up for a crash.
    pub(crate) fn bye(&self) {
        let conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        for c in conns.values() {
            if let Conn::In { fd, .. } | Conn::Out { fd, .. } = c {
                let _ = share::send(fd.as_raw_fd(), &Msg::Bye, &[]);
            }
        }
    }
}
