//! The connections to peer processes on the same host: each carries one ring, offered by
//! its sender ([`Local::connect`]) and taken by the receiver's progress thread
//! ([`Local::event`]), and the placement asks and answers; it is watched so that a peer's
//! death (a hang-up with no bye first) fails the QPs connected to it at once.
//!
//! May call: the sharing's record I/O and peer checks, the rings ([`crate::datapath::shm`]),
//! the placement tables.
//!
//! Threads and locks: `LocalConns` is the progress thread's (events, accept, close), a
//! sender's for the moment it adds a connection, and the closing device's (bye). Under it
//! the progress thread takes `LocalPlacements` or `LocalIncoming`; it takes
//! `LocalRoutes` after releasing it.

use super::super::place::{Grant, Table};
use super::super::share::{self, msg::Msg, msg::VERSION};
use super::Local;
use super::incoming::Incoming;
use super::routes::Outgoing;
use crate::datapath::shm::{self, Consumer, Producer};
use crate::datapath::socket::Forgotten;
use crate::sync::{Lock, Rank};
use nix::sys::socket::{self as ns, AddressFamily, MsgFlags, SockFlag, SockType};
use std::collections::HashMap;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// The progress thread's token for the endpoint's listener.
pub(crate) const LISTEN: mio::Token = mio::Token(5);
/// The same-host path's tokens start here: `BASE + 2k` is connection `k`, `BASE + 2k + 1`
/// its ring's eventfd.
pub(crate) const BASE: usize = 1 << 40;

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
    Open(#[source] crate::datapath::shared_mem::ShmError),
    /// The progress thread could not watch the ring's eventfd.
    #[error("watching the ring: {0}")]
    Register(#[source] std::io::Error),
}

/// A connection, as the progress thread watches it.
pub(super) enum Conn {
    /// Accepted; its ring has not come yet.
    Accepted { fd: Forgotten, pid: i32 },
    /// A peer's ring comes over it (the peer's endpoint, and whether the connection ends
    /// in order: a bye either way, or a refusal), with the placement table of the grants
    /// made to it, once it asked for one (see [`super::super::place`]).
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
pub(super) enum Ending {
    /// No word yet: a hang-up now means the peer died.
    Open,
    /// A bye (from the peer, or ours): the peer closes, or this process dropped the
    /// connection on purpose.
    Bye,
    /// The peer refused our ring: its QPNs take the UDP path from now on.
    Refused,
}

/// A connection's descriptor.
pub(super) fn fd_raw(c: &Conn) -> std::os::fd::RawFd {
    match c {
        Conn::Accepted { fd, .. } | Conn::In { fd, .. } | Conn::Out { fd, .. } => fd.as_raw_fd(),
    }
}

/// The abstract name of endpoint `ep` on the device at `addr`.
pub(super) fn name(addr: IpAddr, scope_id: u32, ep: u64) -> ns::UnixAddr {
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
    /// Connects to endpoint `ep` and passes it a new ring.
    pub(super) fn connect(&self, ep: u64) -> Option<Arc<Outgoing>> {
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

    /// Ends connection `token` (descriptor `fd`) on purpose: says bye, so the peer does not
    /// take it for a crash, and shuts it down; the hang-up that follows tears it down.
    pub(super) fn hang_up(&self, token: usize, fd: std::os::fd::RawFd) {
        let mut conns = self.conns.lock();
        if let Some(Conn::In { bye, .. } | Conn::Out { bye, .. }) = conns.get_mut(&token) {
            *bye = Ending::Bye;
            let _ = share::send(fd, &Msg::Bye, &[]);
            let _ = ns::shutdown(fd, ns::Shutdown::Both);
        }
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
                        self.refuse(
                            fd_raw(conn),
                            format_args!("closing a same-host connection: {e}"),
                        );
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
                            // Said, so that the sender takes the UDP path instead of
                            // taking the hang-up for this process's death.
                            self.refuse(
                                fd,
                                format_args!("refused a same-host ring from pid {pid}: {e}"),
                            );
                            gone = true;
                            break;
                        }
                    }
                }
                (_, m) => {
                    self.refuse(
                        fd,
                        format_args!("closing a same-host connection: unexpected {m:?}"),
                    );
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

    /// Says why on stderr, then tells the peer on `fd` that this process refuses its
    /// ring or record; the caller closes the connection. The peer may be gone already,
    /// so a failed send is no error.
    fn refuse(&self, fd: RawFd, why: std::fmt::Arguments<'_>) {
        eprintln!("softrdma: {}: {why}", self.addr);
        let _ = share::send(fd, &self.refusal(), &[]);
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
    use std::time::{Duration, Instant};

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
