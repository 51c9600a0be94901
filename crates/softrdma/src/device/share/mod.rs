//! One device, many processes: every process of a user that opens a device on an address
//! shares its GID and its one UDP port 4791, as every process shares `rxe0` on Linux.
//!
//! # The design
//! One of the processes that have the device open is its **owner**: it alone reads
//! `IP:4791` (no SO_REUSEADDR, which would let another user take the port; SO_REUSEPORT,
//! whose group the kernel opens to sockets of the same uid only), and it listens on the
//! abstract UNIX socket `@softrdma/UID/IP`. Every other process is a **member**: it
//! connects there, gets a slot its QPNs carry, and joins the port's group with a socket
//! of its own, to which the kernel steers its datagrams ([`steer`]); what is not steered
//! the owner forwards it through a datagram socket pair of their own, each framed with its
//! sender's address ([`crate::datapath::socket::send_framed`]). Every process
//! runs its own engines and sends from its own sockets, as before; only the receive side
//! is shared. Between two processes of the device, packets go through shared-memory rings
//! instead (see [`super::local`]); the owner only tells a sender which process holds a QPN
//! (`Locate`).
//!
//! - **QPNs** are unique across the processes: the owner draws them at random (24 bits)
//!   for itself and for its members, and a freed or dead process's QPN is not drawn again
//!   for [`control::QUARANTINE`], longer than any peer's retries last.
//! - **Alone, nothing changes**: a process with no members reads the port itself, with no
//!   hop, no steering program and no lookup; the owner's receive path consults the route
//!   table only while it has members.
//! - **No setup step, no separate service**: the first open becomes the owner, and the
//!   role goes with the last process that has the device open. A library (the drop-in
//!   `libibverbs.so.1`, or a Rust program) cannot count on finding a service binary, and a
//!   service spawned from a library would be a process nobody asked for; `softrdma
//!   service` holds the role by hand and logs what happens to it.
//! - **When the owner goes** (closes the device, exits, or is killed), its members see the
//!   control connection close. Each has kept a duplicate of the port's socket since it
//!   joined, so the socket, and the datagrams queued in it, outlive the owner: the first
//!   member to bind the abstract name becomes the owner and reads the port; the others
//!   connect to it and register their QPNs again. The owner holds only state its members
//!   can rebuild.
//! - **When a member goes**, the owner sees its connection close and frees its QPNs into
//!   quarantine; datagrams for them are then unknown-QPN drops, and remote peers time out
//!   as they would against rxe.
//! - **Security**: both ends check `SO_PEERCRED` (same effective uid, or the connection is
//!   closed at once with a line that names the other's uid and pid); the abstract name is
//!   per network namespace, as the port is; descriptors travel only by `SCM_RIGHTS`; every
//!   record is parsed and checked ([`msg`]) and a bad one closes its connection.
//!
//! # The files
//! - [`control`]: the control plane with no I/O (who holds which QPN, the draw and its
//!   quarantine, slots, probe rounds, registrations, CM listens): it takes records and
//!   returns actions, and is tested and fuzzed without processes.
//! - `owner`: the owner's loop, which feeds it its members' records and carries out its
//!   actions; `member`: joining, slots, and carrying on when the owner goes.
//! - `classify`: what a received datagram is (a probe, a ring's packet, a MAD, another
//!   QPN's), from its bytes alone.
//! - `forward`: what the receive path forwards, holds or hands back, and the routing
//!   tables it reads; `sock`: the sockets and records between the processes;
//!   [`msg`]: the records' codec; [`steer`]: the kernel's steering program.
//! - This file: [`Share`], the device's face of it, and the one retry path of a member's
//!   requests over a change of owner (`Share::ask`).
//!
//! # Threads and locks
//! The control plane (`ctl`) is one mutex, taken by QP creation and destruction and CM
//! listens (a member's request waits for its answer under it, at most
//! [`ANSWER_TIMEOUT`]; if the owner went meanwhile, the lock is let go while the progress
//! thread carries on, and the request is made again) and by the progress thread for
//! control events; no other device lock is held under it, except the routing tables'
//! write locks and the held REQs' lock. The route table (`routes`) is read per forwarded
//! datagram, under the receive state's lock; `forwarding` is read, without a lock, per
//! received datagram. A probe the receive path sees goes into `probes` (a mutex taken for
//! probes only), and the progress thread reports it under the control lock.

mod classify;
mod control;
mod forward;
mod member;
pub(crate) mod msg;
mod owner;
mod sock;
pub(crate) mod steer;

use crate::datapath::socket::Forgotten;
use crate::datapath::udp::{PortBind, RxPort};
pub(crate) use crate::error::ShareError;
use crate::sync::{Guard, Lock, Rank, RwLock};
pub(crate) use classify::{Kind, classify};
pub(crate) use control::fuzz::drive as fuzz_control;
use control::{Control, MemberId};
pub(crate) use forward::dest_qpn;
use member::{Slots, slot_join};
use msg::Msg;
use nix::sys::socket::{self as ns, Backlog};
use sock::{Joined, io, join, listen, request, watch};
pub(crate) use sock::{recv, same_user, send};
use std::collections::HashMap;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long a member waits for its owner's answer, and for an owner to appear.
pub(crate) const ANSWER_TIMEOUT: Duration = Duration::from_secs(2);
/// The progress thread's token for the owner's listener.
pub(crate) const LISTEN: mio::Token = mio::Token(3);
/// The progress thread's token for a member's connection to its owner.
pub(crate) const OWNER: mio::Token = mio::Token(4);
/// The progress thread's token for a steered member's forwarding socket.
pub(crate) const SPILL: mio::Token = mio::Token(6);
/// The owner's tokens for its members' connections start here.
const MEMBER_BASE: usize = 1 << 20;
/// The owner's tokens for its ends of its members' forwarding pairs start here (a member's
/// is this plus its connection's token).
const HANDBACK_BASE: usize = 1 << 30;
/// The socket buffer of a forwarding socket pair: a window of datagrams in flight.
const FORWARD_BUF: i32 = 4 << 20;
/// Whether `softrdma service` asked for a log of the sharing on stderr.
static VERBOSE: AtomicBool = AtomicBool::new(false);

/// Turns the log of owner and member events on stderr on (`softrdma service`).
pub fn set_verbose(on: bool) {
    VERBOSE.store(on, Ordering::Relaxed);
}

/// Writes a line of the sharing log on stderr: under `softrdma service`, or in any process
/// with `SOFTRDMA_DEBUG_SHARE` set (to follow owners and members in programs under test).
pub(crate) fn log(what: std::fmt::Arguments<'_>) {
    if VERBOSE.load(Ordering::Relaxed) || std::env::var_os("SOFTRDMA_DEBUG_SHARE").is_some() {
        eprintln!("softrdma service: {what}");
    }
}

/// What [`Share::ask`] returns: the control lock, and the owner's pid with its answer
/// (`None`: this process is no member).
type Asked<'a> = (Guard<'a, Ctl>, Option<(u32, Msg)>);

/// A member's connection, as its owner holds it (the rest of what it knows of the
/// member is the control plane's).
struct Conn {
    conn: OwnedFd,
    /// Its end of the forwarding pair, once it said hello.
    data: Option<Arc<OwnedFd>>,
}

/// What this process is to the device, with the descriptors each role holds.
enum Role {
    /// Reads the port alone and will not share (`SOFTRDMA_SHARE=0`).
    Alone,
    /// Reads the port and forwards to its members.
    Owner {
        listener: Forgotten,
        conns: HashMap<MemberId, Conn>,
        next: usize,
    },
    /// Forwarded to by `owner_pid`, over `conn`.
    Member { conn: OwnedFd, owner_pid: u32 },
}

/// The control lock's contents: the role and its descriptors, and the control plane.
struct Ctl {
    role: Role,
    /// A member's duplicate of the port's socket, to carry on as owner with (an owner's
    /// is the one its `RxPort` reads).
    port: Option<Forgotten>,
    /// A member's socket in the steering group, which its `RxPort` reads.
    steering: Option<RawFd>,
    /// Who holds what (see [`control`]).
    core: Control,
}

/// A device's part in sharing (see the module docs).
pub(crate) struct Share {
    addr: IpAddr,
    scope_id: u32,
    /// This process's same-host endpoint (see `device::local`; 0: none).
    ep: u64,
    /// What the receive path reads.
    pub(crate) rx: Arc<RxPort>,
    /// Owner: each member's QPN, with that member's end of its forwarding pair.
    routes: RwLock<softrdma_proto::endpoint::check::KeyMap<Arc<OwnedFd>>>,
    /// Whether `routes` has any.
    forwarding: AtomicBool,
    /// Owner: where QP1's MADs for members go (see [`forward::CmRoutes`]); `cm_forwarding`: there
    /// are some.
    cm: RwLock<forward::CmRoutes>,
    cm_forwarding: AtomicBool,
    /// Owner: REQs dropped once for a service nobody listened on, by requester (address
    /// and communication ID), with when (see [`Share::hold_first_req`]).
    held_reqs: Lock<HashMap<(IpAddr, u32), Instant>>,
    /// Owner: the REQs held for a service nobody listened on, kept for a listener that
    /// comes within `forward::HELD_REQ_WAIT`: by requester, the service, when the first came, and
    /// the latest datagram with its sender.
    waiting_reqs: Lock<HashMap<(IpAddr, u32), forward::WaitingReq>>,
    /// Whether members may be steered (`SOFTRDMA_STEER`).
    steer: bool,
    /// Probes the receive path saw, for the progress thread to report (see [`steer`]);
    /// `probed`: there are some. `again`: the owner has a probe round to make.
    probes: Lock<Vec<(u32, u64)>>,
    probed: AtomicBool,
    again: AtomicBool,
    ctl: Lock<Ctl>,
}

/// Who holds a QPN (see [`Share::holder`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Holder {
    /// No process of the device.
    Nobody,
    /// A process with no same-host endpoint (`SOFTRDMA_SHM=0`).
    NoEndpoint,
    /// The process with this endpoint.
    At(u64),
}

/// What a control event changed, for the device to apply.
pub(crate) enum Change {
    /// Nothing the device must act on.
    None,
    /// The receiving socket changed (a member became the owner, or joined a new one):
    /// re-register the descriptor the progress thread watches. `took_over`: this process
    /// became the owner after the owner with that pid went (its QPNs are to be
    /// quarantined, see [`Share::quarantine`]).
    Rx { old: RawFd, took_over: Option<u32> },
}

/// Binds `addr:4791` for the device's receive path (see `Udp`).
pub(crate) type BindPort<'a> = &'a dyn Fn(PortBind) -> crate::error::Result<OwnedFd>;

impl Share {
    /// Joins the device on `addr`: as its member if an owner answers, as its owner
    /// otherwise (binding the port with `bind_port`), or alone when `exclusive`.
    /// `ep`: this process's same-host endpoint, which the owner tells whoever locates
    /// its QPNs (0: none).
    /// `steer`: members may have their datagrams steered to them (see [`steer`]).
    pub(crate) fn attach(
        addr: IpAddr,
        scope_id: u32,
        exclusive: bool,
        steer: bool,
        ep: u64,
        bind_port: BindPort<'_>,
    ) -> crate::error::Result<Share> {
        let share = |role, rx, port, slots: Slots, steering| Share {
            addr,
            scope_id,
            ep,
            rx: Arc::new(rx),
            routes: RwLock::new(Rank::ShareRoutes, Default::default()),
            forwarding: AtomicBool::new(false),
            cm: RwLock::new(Rank::ShareCm, forward::CmRoutes::default()),
            cm_forwarding: AtomicBool::new(false),
            held_reqs: Lock::new(Rank::ShareHeldReqs, HashMap::new()),
            waiting_reqs: Lock::new(Rank::ShareWaitingReqs, HashMap::new()),
            steer,
            probes: Lock::new(Rank::ShareProbes, Vec::new()),
            probed: AtomicBool::new(false),
            again: AtomicBool::new(false),
            ctl: Lock::new(
                Rank::ShareCtl,
                Ctl {
                    role,
                    port,
                    steering,
                    core: Control::new(ep, steer, slots.mine, slots.owner),
                },
            ),
        };
        if exclusive {
            let port = Forgotten::new(bind_port(PortBind::Alone)?);
            return Ok(share(
                Role::Alone,
                RxPort::new(port, false),
                None,
                Slots::default(),
                None,
            ));
        }
        let err = |e: ShareError| crate::error::Error::Share { addr, source: e };
        let deadline = Instant::now() + ANSWER_TIMEOUT;
        loop {
            match join(addr, scope_id, ep).map_err(err)? {
                Joined::Member {
                    conn,
                    owner_pid,
                    data,
                    port,
                } => {
                    let port = Forgotten::new(port);
                    let (slots, steered) =
                        slot_join(conn.as_raw_fd(), owner_pid, 0, steer, bind_port);
                    log(format_args!(
                        "{addr}: pid {} joined owner pid {owner_pid} as slot {}{}",
                        std::process::id(),
                        slots.mine,
                        if steered.is_some() { ", steered" } else { "" }
                    ));
                    let data = Forgotten::new(data);
                    let (rx, steering) = match steered {
                        Some(sock) => {
                            let sock = Forgotten::new(sock);
                            let raw = sock.raw();
                            let rx = RxPort::new(sock, false);
                            rx.set_spill(Some(data), slots.mine);
                            (rx, Some(raw))
                        }
                        None => (RxPort::new(data, true), None),
                    };
                    return Ok(share(
                        Role::Member { conn, owner_pid },
                        rx,
                        Some(port),
                        slots,
                        steering,
                    ));
                }
                Joined::Nobody => {}
            }
            // Nobody answers: become the owner, if no other process just did.
            match listen(addr, scope_id).map_err(err)? {
                Some(listener) => {
                    let listener = Forgotten::new(listener);
                    let port = match bind_port(PortBind::Group) {
                        Ok(p) => Forgotten::new(p),
                        // A member of the owner that just went still holds its duplicate
                        // of the port, and is about to take the name (which this holds)
                        // or to exit: let go of the name and look again.
                        Err(crate::error::Error::AddrInUse { .. }) if Instant::now() < deadline => {
                            drop(listener);
                            std::thread::sleep(Duration::from_millis(5));
                            continue;
                        }
                        Err(crate::error::Error::AddrInUse { .. }) => {
                            return Err(err(ShareError::Foreign(addr)));
                        }
                        Err(e) => return Err(e),
                    };
                    ns::listen(&listener.0, Backlog::new(128).expect("within SOMAXCONN"))
                        .map_err(io("listen"))
                        .map_err(err)?;
                    log(format_args!(
                        "{addr}: pid {} owns the device",
                        std::process::id()
                    ));
                    return Ok(share(
                        Role::Owner {
                            listener,
                            conns: HashMap::new(),
                            next: 0,
                        },
                        RxPort::new(port, false),
                        None,
                        Slots::default(),
                        None,
                    ));
                }
                None if Instant::now() < deadline => {
                    // Another process bound the name and is about to listen.
                    std::thread::sleep(Duration::from_millis(2));
                }
                None => {
                    return Err(err(ShareError::Owner {
                        pid: 0,
                        what: format!(
                            "holds the name @softrdma/UID/{addr} but did not listen in {ANSWER_TIMEOUT:?}"
                        ),
                    }));
                }
            }
        }
    }

    /// The progress thread's registrations: the listener (owner) or the connection to
    /// the owner (member).
    pub(crate) fn register(&self, r: &mio::Registry) -> std::io::Result<()> {
        let ctl = self.ctl.lock();
        match &ctl.role {
            Role::Alone => Ok(()),
            Role::Owner { listener, .. } => watch(r, listener.raw(), LISTEN),
            Role::Member { conn, .. } => {
                if let Some(fd) = self.rx.spill() {
                    watch(r, fd, SPILL)?;
                }
                watch(r, conn.as_raw_fd(), OWNER)
            }
        }
    }

    /// The receive path saw a probe (see [`steer`]): the progress thread reports it.
    /// Returns whether it should be woken for that.
    pub(crate) fn saw_probe(&self, index: u32, nonce: u64) -> bool {
        if !self.steer {
            return false;
        }
        let mut p = self.probes.lock();
        // Anyone may send probes to the port: a flood is not kept.
        if p.len() < 64 {
            p.push((index, nonce));
        }
        self.probed.store(true, Ordering::Release);
        true
    }

    /// The low byte of this process's CM communication IDs: its slot, by which the
    /// owner tells whose a MAD is (see [`forward::CmRoutes`]).
    pub(crate) fn cm_tag(&self) -> u8 {
        self.ctl.lock().core.my_slot()
    }

    /// Asks the owner `m` and returns the control lock with its answer, if this process
    /// is a member; with `None` if it owns the device or has it alone, for the caller to
    /// do the work here. The one retry path over a change of owner: when the owner goes
    /// (an exiting program still answered this process's hello a moment ago), the
    /// progress thread carries on as owner or joins the next one, and the request is made
    /// again once the role has moved on, within [`ANSWER_TIMEOUT`] in all.
    fn ask(&self, m: &Msg) -> Result<Asked<'_>, ShareError> {
        let deadline = Instant::now() + ANSWER_TIMEOUT;
        loop {
            let ctl = self.ctl.lock();
            let Role::Member { conn, owner_pid } = &ctl.role else {
                return Ok((ctl, None));
            };
            let pid = *owner_pid;
            match request(conn.as_raw_fd(), pid, m) {
                Ok(a) => return Ok((ctl, Some((pid, a)))),
                Err(ShareError::Owner { .. }) if Instant::now() < deadline => {
                    drop(ctl);
                    self.await_next_owner(pid, deadline)?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Waits until the owner with `pid` is followed (this process owns the device, or is
    /// another's member), at most until `deadline`.
    fn await_next_owner(&self, pid: u32, deadline: Instant) -> Result<(), ShareError> {
        loop {
            std::thread::sleep(Duration::from_millis(5));
            let moved = match &self.ctl.lock().role {
                Role::Member { owner_pid, .. } => *owner_pid != pid,
                _ => true,
            };
            if moved {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(ShareError::Owner {
                    pid,
                    what: format!("went, and no owner followed it within {ANSWER_TIMEOUT:?}"),
                });
            }
        }
    }

    /// Makes this process the listener of CM service `sid` on the device: `Ok(false)` if
    /// another process of the device listens on it, an error if the owner could not be
    /// asked.
    pub(crate) fn cm_listen(&self, sid: u64) -> crate::error::Result<bool> {
        let err = |source| crate::error::Error::Share {
            addr: self.addr,
            source,
        };
        let (mut ctl, answer) = self.ask(&Msg::CmListen(sid)).map_err(err)?;
        match answer {
            Some((_, Msg::CmListened(true))) => {
                ctl.core.listened(sid);
                Ok(true)
            }
            Some((_, Msg::CmListened(false))) => Ok(false),
            Some((pid, other)) => Err(err(ShareError::Owner {
                pid,
                what: format!("answered a CM listen with {other:?}"),
            })),
            None => {
                self.evict_dead_listener(&mut ctl, sid);
                Ok(ctl.core.listen_here(sid))
            }
        }
    }

    /// This process no longer listens on CM service `sid`.
    pub(crate) fn cm_unlisten(&self, sid: u64) {
        let mut ctl = self.ctl.lock();
        if !ctl.core.unlisten(Instant::now(), sid) {
            return;
        }
        if let Role::Member { conn, .. } = &ctl.role {
            // No answer comes; if the owner is gone the new one never hears of it.
            let _ = send(conn.as_raw_fd(), &Msg::CmUnlisten(sid), &[]);
        }
    }

    /// A new QPN for a QP of this process: unique among the device's processes, random,
    /// never 0 or 1, and not one freed within [`control::QUARANTINE`].
    pub(crate) fn alloc_qpn(&self) -> crate::error::Result<u32> {
        let err = |source| crate::error::Error::Share {
            addr: self.addr,
            source,
        };
        let (mut ctl, answer) = self.ask(&Msg::Alloc).map_err(err)?;
        match answer {
            Some((_, Msg::Qpn(q))) if q > 1 && q <= 0xFF_FFFF => {
                ctl.core.got(q);
                Ok(q)
            }
            Some((pid, other)) => Err(err(ShareError::Owner {
                pid,
                what: format!("answered a QPN request with {other:?}"),
            })),
            None => Ok(ctl.core.draw_mine(Instant::now(), &mut rand::rng())),
        }
    }

    /// Who holds QPN `qpn` on this device (this process included), and its same-host
    /// endpoint if it has one. A member asks its owner (a request under the control lock,
    /// as a QPN draw is); the owner and a process alone look it up. An error if the owner
    /// could not be asked: the caller sends by UDP meanwhile, so this does not wait for a
    /// new owner as [`Share::ask`] does.
    pub(crate) fn holder(&self, qpn: u32) -> Result<Holder, ()> {
        let ctl = self.ctl.lock();
        let ep = match &ctl.role {
            Role::Member { conn, owner_pid } => {
                match request(conn.as_raw_fd(), *owner_pid, &Msg::Locate(qpn)) {
                    Ok(Msg::Located(ep)) => ep,
                    _ => return Err(()),
                }
            }
            _ => ctl.core.endpoint_of(qpn),
        };
        Ok(match ep {
            0 => Holder::Nobody,
            u64::MAX => Holder::NoEndpoint,
            ep => Holder::At(ep),
        })
    }

    /// QPN `qpn` of this process is destroyed.
    pub(crate) fn free_qpn(&self, qpn: u32) {
        let mut ctl = self.ctl.lock();
        let member = matches!(ctl.role, Role::Member { .. });
        if !ctl.core.free_mine(Instant::now(), qpn, !member) {
            return;
        }
        if let Role::Member { conn, .. } = &ctl.role {
            // No answer comes; if the owner is gone the new one never hears of it.
            let _ = send(conn.as_raw_fd(), &Msg::Free(qpn), &[]);
        }
    }

    /// Whether QPN `qpn` is this process's (no request: every process knows its own).
    pub(crate) fn is_mine(&self, qpn: u32) -> bool {
        self.ctl.lock().core.is_mine(qpn)
    }

    /// Quarantines QPNs that a process which went held (a dead owner's, which no member
    /// registers again), so that none is drawn anew while its remote peers still retry.
    pub(crate) fn quarantine(&self, qpns: &[u32]) -> usize {
        self.ctl.lock().core.quarantine(Instant::now(), qpns)
    }

    /// Whether this process owns the device (or has it alone), and how many other
    /// processes it forwards to.
    pub(crate) fn members(&self) -> (bool, usize) {
        let ctl = self.ctl.lock();
        match &ctl.role {
            Role::Alone => (true, 0),
            Role::Owner { .. } => (true, ctl.core.member_count()),
            Role::Member { .. } => (false, 0),
        }
    }
}
