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
//! sender's address ([`sys::send_framed`]). Every process
//! runs its own engines and sends from its own sockets, as before; only the receive side
//! is shared. Between two processes of the device, packets go through shared-memory rings
//! instead (see [`super::local`]); the owner only tells a sender which process holds a QPN
//! (`Locate`).
//!
//! - **QPNs** are unique across the processes: the owner draws them at random (24 bits)
//!   for itself and for its members, and a freed or dead process's QPN is not drawn again
//!   for [`QUARANTINE`], longer than any peer's retries last.
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
//! # Threads and locks
//! The control plane (`ctl`) is one mutex, taken by QP creation and destruction (a
//! member's request waits for its answer under it, at most [`ANSWER_TIMEOUT`]) and by the
//! progress thread for control events; no other device lock is held under it, except the
//! route table's write lock. The route table (`routes`) is read per forwarded datagram,
//! under the receive state's lock; `forwarding` is read, without a lock, per received
//! datagram. A probe the receive path sees goes into `probes` (a mutex taken for probes
//! only), and the progress thread reports it under the control lock.

pub(crate) mod msg;
pub(crate) mod steer;

use crate::datapath::socket::{self as sys, Forgotten};
use crate::datapath::udp::{PortBind, RxPort};
use crate::sync::{Lock, Rank, RwLock};
use msg::{MAX_QPNS, Msg, VERSION};
use nix::sys::socket::{
    self as ns, AddressFamily, Backlog, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag,
    SockType, UnixAddr,
};
use softrdma_proto::cm::RELISTEN_GRACE;
use softrdma_wire::IbPacket;
use softrdma_wire::cm::{Addressee, CmMad, CmMessage, GSI_QPN};
use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{IoSlice, IoSliceMut};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long a freed QPN stays out of the draw: longer than the retries of any peer that
/// still sends to it (7 retries of a 4 s timeout, the longest that rdma-core tools set,
/// take half a minute; a QP left at timeout 31 retries for hours and nothing could honour
/// that in a 24-bit space), so a dead process's QPN is not handed to a new QP while its
/// old peers' packets may still arrive.
pub(crate) const QUARANTINE: Duration = Duration::from_secs(120);
/// How many quarantined QPNs are kept at most (the oldest leave first).
const QUARANTINE_MAX: usize = 1 << 16;
/// How long a member takes REQs for a service it stopped listening on: longer than its
/// owner forwards them to it ([`RELISTEN_GRACE`], counted from when the owner heard of
/// it, a moment later), so that a REQ the owner forwards is never handed back.
const MEMBER_GRACE: Duration = Duration::from_secs(3);
/// How long an owner remembers a REQ it dropped once (see `Share::hold_first_req`):
/// longer than any requester waits to resend it.
const HELD_REQ_MEMORY: Duration = Duration::from_secs(30);
/// The most REQs an owner remembers having dropped once (see `Share::hold_first_req`).
const HELD_REQS_MAX: usize = 4096;
/// How long an owner keeps a REQ for a service nobody listens on yet, to hand it to the
/// member that listens on it meanwhile (see `Share::hold_first_req`).
const HELD_REQ_WAIT: Duration = Duration::from_secs(1);
/// The most REQs an owner keeps waiting for a listener at once.
const WAITING_REQS_MAX: usize = 256;
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
/// How long after a change of the group the owner probes it once more: a member that
/// died leaves the group when its process is torn down, which may be after its
/// connection closed.
const PROBE_AGAIN: Duration = Duration::from_millis(100);
/// The owner's own reports of probes, among its members' tokens.
const OWN: usize = usize::MAX;

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

/// What went wrong while joining a shared device.
#[derive(Debug, thiserror::Error)]
pub enum ShareError {
    /// `IP:4791` is bound by something that is not this user's softrdma.
    #[error("{0}:4791 is held by something that does not answer as a softrdma device owner")]
    Foreign(IpAddr),
    /// The owner speaks another protocol version.
    #[error(
        "the device's owner (pid {pid}) speaks sharing protocol v{theirs}, this library v{ours}: \
         close the programs of the other softrdma version, or give this one its own address \
         with SOFTRDMA_ADDR=127.0.0.N"
    )]
    Version {
        /// The owner's pid.
        pid: u32,
        /// Its version.
        theirs: u32,
        /// Ours.
        ours: u32,
    },
    /// The owner's socket belongs to another user.
    #[error(
        "the device's control socket is held by uid {uid} (pid {pid}), not by this user: \
         refusing to share a device with another user"
    )]
    OtherUser {
        /// Their uid.
        uid: u32,
        /// Their pid.
        pid: i32,
    },
    /// The owner did not answer in time, or answered nonsense.
    #[error("the device's owner (pid {pid}) {what}")]
    Owner {
        /// The owner's pid.
        pid: u32,
        /// What it did.
        what: String,
    },
    /// A system call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The error.
        source: std::io::Error,
    },
}

impl ShareError {
    /// The errno a C caller sees.
    pub fn errno(&self) -> i32 {
        match self {
            ShareError::Foreign(_) => libc::EADDRINUSE,
            ShareError::Version { .. } => libc::EPROTO,
            ShareError::OtherUser { .. } => libc::EACCES,
            ShareError::Owner { .. } => libc::ETIMEDOUT,
            ShareError::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
        }
    }
}

fn io(what: &'static str) -> impl Fn(nix::Error) -> ShareError {
    move |e| ShareError::Io {
        what,
        source: std::io::Error::from(e),
    }
}

/// A member's connection, as its owner holds it.
struct Member {
    conn: OwnedFd,
    pid: i32,
    /// Its end of the forwarding pair, once it said hello.
    data: Option<Arc<OwnedFd>>,
    /// Its QPNs.
    qpns: HashSet<u32>,
    /// Its same-host endpoint (0: none).
    ep: u64,
    /// The slot its QPNs carry (0: none; see [`steer`]), and whether its socket is in the
    /// group.
    slot: u8,
    steering: bool,
    /// It said it leaves (its socket leaves the group).
    left: bool,
}

/// The owner's view of the steering group (see [`steer`]).
#[derive(Default)]
struct Rounds {
    /// Each granted slot's member.
    slots: HashMap<u8, usize>,
    /// The current probing round's nonce; the index each member's socket (or the
    /// owner's, [`OWN`]) received last, and who reported in this round.
    nonce: u64,
    seen: HashMap<usize, u32>,
    this_round: HashSet<usize>,
    /// Members that reported two indexes in one round (a probe the kernel hashed): not
    /// steered until the next round.
    ambiguous: HashSet<usize>,
    /// When to probe once more.
    again: Option<Instant>,
    /// The program attached last: the owner's index and the routes.
    installed: Option<(u32, Vec<(u8, u32)>)>,
}

enum Role {
    /// Reads the port alone and will not share (`SOFTRDMA_SHARE=0`).
    Alone,
    /// Reads the port and forwards to its members.
    Owner {
        listener: Forgotten,
        members: HashMap<usize, Member>,
        next: usize,
    },
    /// Forwarded to by `owner_pid`, over `conn`.
    Member { conn: OwnedFd, owner_pid: u32 },
}

struct Ctl {
    role: Role,
    /// This process's QPNs.
    mine: HashSet<u32>,
    /// Owner: every member's QPN, with the member's token.
    theirs: HashMap<u32, usize>,
    /// Freed QPNs, oldest first, with when they may be drawn again.
    quarantine: VecDeque<(u32, Instant)>,
    quarantined: HashSet<u32>,
    /// A member's duplicate of the port's socket, to carry on as owner with (an owner's
    /// is the one its `RxPort` reads).
    port: Option<Forgotten>,
    /// The slot this process's QPNs carry (see [`steer`]; an owner that started as one
    /// has 0), and a member's socket in the steering group, which its `RxPort` reads.
    my_slot: u8,
    steering: Option<RawFd>,
    /// Member: the owner's slot, which its QPNs carry.
    owner_slot: u8,
    /// Owner: the steering group.
    rounds: Rounds,
    /// Slots out of use until then: those of owners that went, whose newest QPNs may be
    /// in no file a successor can read (see [`Share::quarantine`]), so that no QPN of
    /// theirs is drawn again while its peers retry.
    retired: VecDeque<(u8, Instant)>,
    /// The CM service IDs this process listens on (told again to a new owner), and those
    /// it stopped listening on, with when (see [`Share::misdelivered_mad`]).
    my_listens: HashSet<u64>,
    unlistened: HashMap<u64, Instant>,
}

/// The owner's routes for QP1's MADs (see `crate::cm`): the port has one QP1, and each
/// process of the device runs its own CM agent behind it. The owner reads the MADs (the
/// steering program sends QP1 to it) and forwards each to the process it names: a REQ or
/// SIDR_REQ to the listener of its service ID, every other message to the process whose
/// slot its communication ID carries in its low byte (each agent draws its IDs so).
/// What names no member is the owner's own agent's.
#[derive(Default)]
struct CmRoutes {
    /// Each member's slot, with its end of its forwarding pair.
    by_slot: HashMap<u8, Arc<OwnedFd>>,
    /// Members' listens by service ID.
    by_service: HashMap<u64, CmListen>,
}

/// A REQ an owner keeps for a listener to come (see `Share::hold_first_req`).
struct WaitingReq {
    /// Its service.
    sid: u64,
    /// When the requester's first REQ came.
    first: Instant,
    /// The latest datagram, and its sender.
    from: SocketAddr,
    data: Vec<u8>,
}

/// A member's listen on a CM service, as its owner holds it.
struct CmListen {
    member: usize,
    data: Arc<OwnedFd>,
    /// When the member stopped listening: for [`RELISTEN_GRACE`] after, REQs for the
    /// service still go to it, whose agent drops them so that a program that listens
    /// again (perftest's `-R`) gets the requester's resend instead of a reject.
    ended: Option<Instant>,
}

impl CmListen {
    fn live(&self) -> bool {
        self.ended.is_none_or(|t| t.elapsed() < RELISTEN_GRACE)
    }
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
    /// Owner: where QP1's MADs for members go (see [`CmRoutes`]); `cm_forwarding`: there
    /// are some.
    cm: RwLock<CmRoutes>,
    cm_forwarding: AtomicBool,
    /// Owner: REQs dropped once for a service nobody listened on, by requester (address
    /// and communication ID), with when (see [`Share::hold_first_req`]).
    held_reqs: Lock<HashMap<(IpAddr, u32), Instant>>,
    /// Owner: the REQs held for a service nobody listened on, kept for a listener that
    /// comes within [`HELD_REQ_WAIT`]: by requester, the service, when the first came, and
    /// the latest datagram with its sender.
    waiting_reqs: Lock<HashMap<(IpAddr, u32), WaitingReq>>,
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

/// The abstract socket name of the device on `addr`.
fn name(addr: IpAddr, scope_id: u32) -> UnixAddr {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let n = if scope_id != 0 {
        format!("softrdma/{uid}/{addr}%{scope_id}")
    } else {
        format!("softrdma/{uid}/{addr}")
    };
    UnixAddr::new_abstract(n.as_bytes()).expect("the name is far shorter than sun_path")
}

fn seqpacket() -> Result<OwnedFd, ShareError> {
    ns::socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(io("socket(AF_UNIX, SOCK_SEQPACKET)"))
}

/// Checks that the process at the other end of `fd` has our effective uid.
pub(crate) fn same_user(fd: &OwnedFd) -> Result<i32, ShareError> {
    let cred = ns::getsockopt(fd, ns::sockopt::PeerCredentials).map_err(io("SO_PEERCRED"))?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    if cred.uid() != unsafe { libc::geteuid() } {
        return Err(ShareError::OtherUser {
            uid: cred.uid(),
            pid: cred.pid(),
        });
    }
    Ok(cred.pid())
}

pub(crate) fn send(fd: RawFd, m: &Msg, fds: &[RawFd]) -> nix::Result<()> {
    let b = m.encode();
    let cm = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage] = if fds.is_empty() { &[] } else { &cm };
    ns::sendmsg::<()>(fd, &[IoSlice::new(&b)], cmsgs, MsgFlags::MSG_NOSIGNAL, None).map(drop)
}

/// One record and the descriptors that came with it; `Ok(None)` at end of stream.
pub(crate) fn recv(fd: RawFd, flags: MsgFlags) -> nix::Result<Option<(Vec<u8>, Vec<OwnedFd>)>> {
    let mut buf = vec![0u8; 8 + 4 * MAX_QPNS];
    // Room for as many descriptors as one message can carry (the kernel's SCM_MAX_FD),
    // so the kernel never truncates: it would install those that fit, and nix refuses to
    // read a truncated control buffer, which would leak them. Extra ones are closed.
    let mut space = nix::cmsg_space!([RawFd; 253]);
    let (n, fds) = {
        let mut iov = [IoSliceMut::new(&mut buf)];
        let m = ns::recvmsg::<()>(
            fd,
            &mut iov,
            Some(&mut space),
            flags | MsgFlags::MSG_CMSG_CLOEXEC,
        )?;
        let mut fds = Vec::new();
        for c in m.cmsgs()? {
            if let ControlMessageOwned::ScmRights(r) = c {
                // SAFETY: the kernel just installed these descriptors for us; nothing else
                // owns them.
                fds.extend(r.into_iter().map(|f| unsafe { OwnedFd::from_raw_fd(f) }));
            }
        }
        (m.bytes, fds)
    };
    if n == 0 {
        return Ok(None);
    }
    buf.truncate(n);
    Ok(Some((buf, fds)))
}

/// The destination QP of a RoCE packet (its BTH first); `None` if it is too short.
pub(crate) fn dest_qpn(packet: &[u8]) -> Option<u32> {
    // IBTA 9.2: the BTH's destination QP is bytes 5..8.
    let q = packet.get(5..8)?;
    Some(u32::from_be_bytes([0, q[0], q[1], q[2]]))
}

/// Binds `addr:4791` for the device's receive path (see `Udp`).
pub(crate) type BindPort<'a> = &'a dyn Fn(PortBind) -> crate::error::Result<OwnedFd>;

/// What a member learned of the slots: its own, and its owner's.
#[derive(Debug, Clone, Copy, Default)]
struct Slots {
    mine: u8,
    owner: u8,
}

/// Asks the owner (at the other end of `conn`) for a slot, `want` or any, and, if
/// `steer` and the owner agrees, joins the steering group with a socket of our own
/// (`None`: the member stays forwarded: no slot, no agreement, or a socket that could not
/// join).
fn slot_join(
    conn: RawFd,
    owner: u32,
    want: u8,
    steer: bool,
    bind_port: BindPort<'_>,
) -> (Slots, Option<OwnedFd>) {
    let (slots, join) = match request(conn, owner, &Msg::Steer(want)) {
        Ok(Msg::Slot {
            slot,
            owner: theirs,
            join,
        }) if want == 0 || slot == want => (
            Slots {
                mine: slot,
                owner: theirs,
            },
            join && slot != 0,
        ),
        Ok(Msg::Slot { owner: theirs, .. }) => (
            Slots {
                mine: 0,
                owner: theirs,
            },
            false,
        ),
        _ => (Slots::default(), false),
    };
    if !(steer && join) {
        return (slots, None);
    }
    let Ok(sock) = bind_port(PortBind::Join) else {
        return (slots, None);
    };
    if send(conn, &Msg::Steering(slots.mine), &[]).is_err() {
        return (slots, None);
    }
    // The owner probes the group at once: answering the probe here, instead of from the
    // progress thread once something reads the socket, steers this process's first
    // packets too. Nothing else reaches the socket before the program names its slot.
    if let Some((index, nonce)) = await_probe(sock.as_raw_fd(), PROBE_WAIT) {
        let _ = send(conn, &Msg::Probed { index, nonce }, &[]);
    }
    (slots, Some(sock))
}

/// How long a joining member waits for its first probe.
const PROBE_WAIT: Duration = Duration::from_millis(200);

/// The first probe that reaches non-blocking socket `fd` within `wait`; anything else that
/// arrives meanwhile is dropped.
fn await_probe(fd: RawFd, wait: Duration) -> Option<(u32, u64)> {
    let deadline = Instant::now() + wait;
    let mut buf = [0u8; 64];
    loop {
        let left = deadline.checked_duration_since(Instant::now())?;
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: `p` is one valid pollfd for the call.
        let n = unsafe { libc::poll(&mut p, 1, left.as_millis().max(1) as libc::c_int) };
        if n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return None;
        }
        while let Ok(len) = ns::recv(fd, &mut buf, MsgFlags::MSG_DONTWAIT) {
            if let Some(p) = steer::parse_probe(&buf[..len.min(buf.len())]) {
                return Some(p);
            }
        }
    }
}

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
            cm: RwLock::new(Rank::ShareCm, CmRoutes::default()),
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
                    mine: HashSet::new(),
                    theirs: HashMap::new(),
                    quarantine: VecDeque::new(),
                    quarantined: HashSet::new(),
                    port,
                    my_slot: slots.mine,
                    owner_slot: slots.owner,
                    steering,
                    rounds: Rounds::default(),
                    retired: VecDeque::new(),
                    my_listens: HashSet::new(),
                    unlistened: HashMap::new(),
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
                            members: HashMap::new(),
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
            Role::Owner { listener, .. } => r.register(
                &mut mio::unix::SourceFd(&listener.raw()),
                LISTEN,
                mio::Interest::READABLE,
            ),
            Role::Member { conn, .. } => {
                if let Some(fd) = self.rx.spill() {
                    r.register(
                        &mut mio::unix::SourceFd(&fd),
                        SPILL,
                        mio::Interest::READABLE,
                    )?;
                }
                r.register(
                    &mut mio::unix::SourceFd(&conn.as_raw_fd()),
                    OWNER,
                    mio::Interest::READABLE,
                )
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

    /// The progress thread's part in steering, at each of its turns: reports the probes
    /// the receive path saw (a member tells its owner; the owner notes its own index),
    /// and makes a due probe round (owner). Returns how soon it wants to run again.
    pub(crate) fn tick(&self) -> Option<Duration> {
        let probed = self.probed.swap(false, Ordering::AcqRel);
        if !probed && !self.again.load(Ordering::Relaxed) {
            return None;
        }
        let seen = std::mem::take(&mut *self.probes.lock());
        let mut ctl = self.ctl.lock();
        for (index, nonce) in seen {
            match &ctl.role {
                Role::Member { conn, .. } => {
                    let _ = send(conn.as_raw_fd(), &Msg::Probed { index, nonce }, &[]);
                }
                Role::Owner { .. } => self.probed_at(&mut ctl, OWN, index, nonce),
                Role::Alone => {}
            }
        }
        let wait = match ctl.rounds.again {
            Some(at) if matches!(ctl.role, Role::Owner { .. }) => {
                let now = Instant::now();
                if now >= at {
                    ctl.rounds.again = None;
                    self.probe_round(&mut ctl, false, false);
                    ctl.rounds.again.map(|a| a.saturating_duration_since(now))
                } else {
                    Some(at - now)
                }
            }
            _ => None,
        };
        self.again
            .store(ctl.rounds.again.is_some(), Ordering::Relaxed);
        wait
    }

    /// Probes every index the group should have (owner): the port's socket and each
    /// steered member's. `changed`: the group just changed, so it is probed once more a
    /// little later; `moved`: a socket left it, so what the last rounds found no longer
    /// holds.
    fn probe_round(&self, ctl: &mut Ctl, changed: bool, moved: bool) {
        let n = match &ctl.role {
            Role::Owner { members, .. } => members.values().filter(|m| m.steering).count(),
            _ => return,
        };
        let r = &mut ctl.rounds;
        r.nonce = rand::random();
        if moved {
            r.seen.clear();
        }
        r.this_round.clear();
        r.ambiguous.clear();
        if changed {
            r.again = Some(Instant::now() + PROBE_AGAIN);
            self.again.store(true, Ordering::Relaxed);
        }
        let to = crate::datapath::udp::roce_port(self.addr, self.scope_id);
        // Only indexes that exist: the kernel hashes a probe for one past the end to any
        // socket, which would report it as its own.
        for i in 0..=n as u32 {
            let _ = steer::send_probe(self.rx.get().0, to, i, r.nonce);
        }
    }

    /// A socket (member `t`'s, or the owner's: [`OWN`]) received the probe for `index`
    /// (owner): the program is rebuilt from what this round has found so far.
    fn probed_at(&self, ctl: &mut Ctl, t: usize, index: u32, nonce: u64) {
        let r = &mut ctl.rounds;
        if nonce != r.nonce {
            return;
        }
        if !r.this_round.insert(t) && r.seen.get(&t) != Some(&index) {
            r.ambiguous.insert(t);
        }
        r.seen.insert(t, index);
        self.install(ctl);
    }

    /// Attaches the program that this round's findings make, if it changed (owner).
    fn install(&self, ctl: &mut Ctl) {
        let Role::Owner { members, .. } = &ctl.role else {
            return;
        };
        let r = &mut ctl.rounds;
        let own = match r.seen.get(&OWN) {
            Some(&i) if !r.ambiguous.contains(&OWN) => i,
            _ => 0,
        };
        let mut routes: Vec<(u8, u32)> = members
            .iter()
            .filter(|(t, m)| m.steering && !r.ambiguous.contains(t))
            .filter_map(|(t, m)| Some((m.slot, *r.seen.get(t)?)))
            .collect();
        routes.sort_unstable();
        let want = (own, routes);
        if r.installed.as_ref() == Some(&want) {
            return;
        }
        match steer::attach(self.rx.get().0, &steer::program(want.0, &want.1)) {
            Ok(()) => {
                log(format_args!(
                    "{}: steering program: owner at {}, slots {:?}",
                    self.addr, want.0, want.1
                ));
                r.installed = Some(want);
            }
            Err(e) => eprintln!("softrdma: {}: cannot steer members: {e}", self.addr),
        }
    }

    /// Whether a received datagram may be another process's (read per datagram).
    #[inline]
    pub(crate) fn forwarding(&self) -> bool {
        self.forwarding.load(Ordering::Relaxed) || self.cm_forwarding.load(Ordering::Relaxed)
    }

    /// A datagram from `from` for no QP of this process: a steered member hands it back
    /// to its owner if the group gave it here by mistake (see [`RxPort::hand_back`]).
    /// Returns whether it did.
    pub(crate) fn hand_back(&self, data: &[u8], from: SocketAddr) -> bool {
        dest_qpn(data).is_some_and(|q| self.rx.hand_back(q, data, from))
    }

    /// Forwards `data` from `from` to the member whose QPN it is addressed to; false if
    /// it is not a member's (the device handles it).
    pub(crate) fn forward(&self, data: &[u8], from: SocketAddr) -> Option<bool> {
        let qpn = dest_qpn(data)?;
        if qpn == GSI_QPN {
            return self.forward_mad(data, from);
        }
        let routes = self.routes.read();
        let fd = routes.get(&qpn)?;
        Some(sys::send_framed(fd.as_raw_fd(), from, data).is_ok())
    }

    /// Forwards a MAD for QP1 to the member it names (see [`CmRoutes`]); `None` if it is
    /// for this process's agent, or does not parse (the agent counts it).
    fn forward_mad(&self, data: &[u8], from: SocketAddr) -> Option<bool> {
        if !self.cm_forwarding.load(Ordering::Relaxed) {
            return None;
        }
        let packet = IbPacket::new_checked(data).ok()?;
        let mad = CmMad::parse(packet.payload()).ok()?;
        let to = mad.msg.addressee()?;
        let fd = {
            let cm = self.cm.read();
            match to {
                Addressee::Comm(id) => cm.by_slot.get(&(id as u8)).cloned(),
                Addressee::Service(sid) => cm
                    .by_service
                    .get(&sid)
                    .filter(|l| l.live())
                    .map(|l| l.data.clone()),
            }
        };
        match (fd, to) {
            (Some(fd), _) => Some(sys::send_framed(fd.as_raw_fd(), from, data).is_ok()),
            // Dropped, not rejected: the requester resends, and finds the listener.
            (None, Addressee::Service(sid)) if self.hold_first_req(sid, &mad, from, data) => {
                Some(true)
            }
            (None, _) => None,
        }
    }

    /// Whether to drop a REQ (or SIDR_REQ) for service `sid`, which no process of the
    /// device listens on, rather than reject it (owner): the first one from a requester
    /// is dropped when the device has members, and its resend is rejected. A program may
    /// tell its peer the port before it listens (qperf's server does), and a member's
    /// listen takes a round trip through the owner: the peer's REQ may overtake it, and
    /// rejecting it would fail a connection that Linux, whose listen is a system call,
    /// makes. The REQ waits [`HELD_REQ_WAIT`] for a member to listen, and is handed to it
    /// the moment it does (`Share::deliver_waiting`), with no resend to wait for (rxe's
    /// come 6 s apart); resends within that time wait with it. A later resend finds the
    /// listener, or gets the reject.
    fn hold_first_req(&self, sid: u64, mad: &CmMad, from: SocketAddr, data: &[u8]) -> bool {
        let requester = match mad.msg {
            CmMessage::Req(r) => r.local_comm_id,
            CmMessage::SidrReq(r) => r.request_id,
            _ => return false,
        };
        {
            let ctl = self.ctl.lock();
            let Role::Owner { members, .. } = &ctl.role else {
                return false;
            };
            if members.is_empty() || ctl.my_listens.contains(&sid) {
                return false;
            }
        }
        let mut held = self.held_reqs.lock();
        held.retain(|_, t| t.elapsed() < HELD_REQ_MEMORY);
        if held.len() >= HELD_REQS_MAX {
            // A flood of REQs for services nobody serves: reject them at once rather than
            // remember each.
            return false;
        }
        let key = (from.ip(), requester);
        let first = match held.entry(key) {
            std::collections::hash_map::Entry::Occupied(o) => *o.get(),
            std::collections::hash_map::Entry::Vacant(v) => *v.insert(Instant::now()),
        };
        drop(held);
        if first.elapsed() >= HELD_REQ_WAIT {
            return false;
        }
        let mut waiting = self.waiting_reqs.lock();
        waiting.retain(|_, w| w.first.elapsed() < HELD_REQ_WAIT);
        if waiting.len() < WAITING_REQS_MAX || waiting.contains_key(&key) {
            let w = WaitingReq {
                sid,
                first,
                from,
                data: data.to_vec(),
            };
            let again = waiting.insert(key, w).is_some();
            log(format_args!(
                "{}: a REQ from {from} for CM service {sid:#x}, where nobody listens, \
                 waits for a listener{}",
                self.addr,
                if again { " (a resend)" } else { "" }
            ));
        }
        true
    }

    /// Hands the REQs waiting for service `sid` (see [`Share::hold_first_req`]) to the
    /// member that now listens on it, through its forwarding socket `fd` (owner).
    fn deliver_waiting(&self, sid: u64, fd: RawFd) {
        let mut waiting = self.waiting_reqs.lock();
        waiting.retain(|_, w| w.first.elapsed() < HELD_REQ_WAIT);
        let keys: Vec<_> = waiting
            .iter()
            .filter(|(_, w)| w.sid == sid)
            .map(|(k, _)| *k)
            .collect();
        for k in keys {
            if let Some(WaitingReq { from, data, .. }) = waiting.remove(&k) {
                let sent = sys::send_framed(fd, from, &data).is_ok();
                log(format_args!(
                    "{}: a REQ from {from} held for CM service {sid:#x} handed to its new \
                     listener: {sent}",
                    self.addr
                ));
            }
        }
    }

    /// The low byte of this process's CM communication IDs: its slot, by which the
    /// owner tells whose a MAD is (see [`CmRoutes`]).
    pub(crate) fn cm_tag(&self) -> u8 {
        self.ctl.lock().my_slot
    }

    /// Makes this process the listener of CM service `sid` on the device: `Ok(false)` if
    /// another process of the device listens on it, an error if the owner could not be
    /// asked.
    pub(crate) fn cm_listen(&self, sid: u64) -> crate::error::Result<bool> {
        let mut ctl = self.ctl.lock();
        let ours = match &ctl.role {
            Role::Member { conn, owner_pid } => {
                let pid = *owner_pid;
                match request(conn.as_raw_fd(), pid, &Msg::CmListen(sid)) {
                    Ok(Msg::CmListened(ok)) => ok,
                    other => {
                        return Err(crate::error::Error::Share {
                            addr: self.addr,
                            source: ShareError::Owner {
                                pid,
                                what: format!("answered a CM listen with {other:?}"),
                            },
                        });
                    }
                }
            }
            _ => {
                self.evict_dead_listener(&ctl.role, sid);
                let cm = self.cm.read();
                cm.by_service.get(&sid).is_none_or(|l| l.ended.is_some())
            }
        };
        if ours {
            ctl.my_listens.insert(sid);
        }
        Ok(ours)
    }

    /// This process no longer listens on CM service `sid`.
    pub(crate) fn cm_unlisten(&self, sid: u64) {
        let mut ctl = self.ctl.lock();
        if !ctl.my_listens.remove(&sid) {
            return;
        }
        ctl.unlistened.retain(|_, t| t.elapsed() < MEMBER_GRACE);
        ctl.unlistened.insert(sid, Instant::now());
        if let Role::Member { conn, .. } = &ctl.role {
            // No answer comes; if the owner is gone the new one never hears of it.
            let _ = send(conn.as_raw_fd(), &Msg::CmUnlisten(sid), &[]);
        }
    }

    /// Forgets the listen on `sid` of a member whose process is gone though its hang-up is
    /// not served yet (owner): a program that exits and is run again at once (qperf's
    /// server, forked per test) must find its port free, as the kernel frees a dead
    /// process's port when its file closes.
    fn evict_dead_listener(&self, role: &Role, sid: u64) {
        let Role::Owner { members, .. } = role else {
            return;
        };
        let holder = {
            let cm = self.cm.read();
            cm.by_service.get(&sid).map(|l| l.member)
        };
        let Some(h) = holder else {
            return;
        };
        let gone = members.get(&h).is_none_or(|m| {
            let mut p = libc::pollfd {
                fd: m.conn.as_raw_fd(),
                events: libc::POLLRDHUP,
                revents: 0,
            };
            // SAFETY: one valid pollfd; no wait.
            let n = unsafe { libc::poll(&mut p, 1, 0) };
            n == 1 && p.revents & (libc::POLLHUP | libc::POLLRDHUP) != 0
        });
        if gone {
            log(format_args!(
                "{}: member {h} is gone: its listen on CM service {sid:#x} ends",
                self.addr
            ));
            self.cm_routes(|cm| {
                cm.by_service.remove(&sid);
            });
        }
    }

    /// Whether a MAD for QP1 that this steered member's socket got belongs to another
    /// process: the steering program sends QP1 to the owner, but in the moment after a
    /// member left the group, before the owner probed it again, the kernel may give the
    /// owner's datagrams to a member (see [`steer`]). Such a MAD (one for a service this
    /// process neither listens on nor left within [`MEMBER_GRACE`], or for a
    /// communication ID of another slot) goes back to the owner, who routes it; what the
    /// owner forwards here is always this process's by the same rules, so nothing
    /// circles. False for an owner, a process alone, and a MAD that does not parse (the
    /// agent counts those).
    pub(crate) fn misdelivered_mad(&self, data: &[u8]) -> bool {
        if self.rx.spill().is_none() {
            return false;
        }
        let Some(to) = IbPacket::new_checked(data)
            .ok()
            .and_then(|p| CmMad::parse(p.payload()).ok())
            .and_then(|m| m.msg.addressee())
        else {
            return false;
        };
        let ctl = self.ctl.lock();
        match to {
            Addressee::Comm(id) => id as u8 != ctl.my_slot,
            Addressee::Service(sid) => {
                !ctl.my_listens.contains(&sid)
                    && ctl
                        .unlistened
                        .get(&sid)
                        .is_none_or(|t| t.elapsed() >= MEMBER_GRACE)
            }
        }
    }

    /// Changes the owner's CM routes with `f`.
    fn cm_routes(&self, f: impl FnOnce(&mut CmRoutes)) {
        let mut cm = self.cm.write();
        f(&mut cm);
        let any = !cm.by_slot.is_empty() || !cm.by_service.is_empty();
        self.cm_forwarding.store(any, Ordering::Relaxed);
    }

    /// A new QPN for a QP of this process: unique among the device's processes, random,
    /// never 0 or 1, and not one freed within [`QUARANTINE`].
    pub(crate) fn alloc_qpn(&self) -> crate::error::Result<u32> {
        let deadline = Instant::now() + ANSWER_TIMEOUT;
        let mut ctl = self.ctl.lock();
        let qpn = match &ctl.role {
            Role::Member { conn, owner_pid } => {
                let pid = *owner_pid;
                let fd = conn.as_raw_fd();
                let answer = match request(fd, pid, &Msg::Alloc) {
                    Ok(a) => a,
                    // The owner went (an exiting program still answered this process's
                    // hello a moment ago): the progress thread carries on as owner or
                    // joins the next one; ask again once the role has moved on.
                    Err(ShareError::Owner { .. }) if Instant::now() < deadline => {
                        drop(ctl);
                        loop {
                            std::thread::sleep(Duration::from_millis(5));
                            let moved = match &self.ctl.lock().role {
                                Role::Member { owner_pid, .. } => *owner_pid != pid,
                                _ => true,
                            };
                            if moved {
                                return self.alloc_qpn();
                            }
                            if Instant::now() >= deadline {
                                return Err(crate::error::Error::Share {
                                    addr: self.addr,
                                    source: ShareError::Owner {
                                        pid,
                                        what: format!(
                                            "went, and no owner followed it within \
                                             {ANSWER_TIMEOUT:?}"
                                        ),
                                    },
                                });
                            }
                        }
                    }
                    Err(e) => {
                        return Err(crate::error::Error::Share {
                            addr: self.addr,
                            source: e,
                        });
                    }
                };
                match answer {
                    Msg::Qpn(q) if q > 1 && q <= 0xFF_FFFF => q,
                    other => {
                        return Err(crate::error::Error::Share {
                            addr: self.addr,
                            source: ShareError::Owner {
                                pid,
                                what: format!("answered a QPN request with {other:?}"),
                            },
                        });
                    }
                }
            }
            _ => {
                let slot = ctl.my_slot;
                ctl.draw(slot)
            }
        };
        ctl.mine.insert(qpn);
        Ok(qpn)
    }

    /// Who holds QPN `qpn` on this device (this process included), and its same-host
    /// endpoint if it has one. A member asks its owner (a request under the control lock,
    /// as a QPN draw is); the owner and a process alone look it up. An error if the owner
    /// could not be asked.
    pub(crate) fn holder(&self, qpn: u32) -> Result<Holder, ()> {
        let ctl = self.ctl.lock();
        let ep = match &ctl.role {
            Role::Member { conn, owner_pid } => {
                match request(conn.as_raw_fd(), *owner_pid, &Msg::Locate(qpn)) {
                    Ok(Msg::Located(ep)) => ep,
                    _ => return Err(()),
                }
            }
            _ => ctl.endpoint_of(self.ep, qpn),
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
        if !ctl.mine.remove(&qpn) {
            return;
        }
        match &ctl.role {
            Role::Member { conn, .. } => {
                // No answer comes; if the owner is gone the new one never hears of it.
                let _ = send(conn.as_raw_fd(), &Msg::Free(qpn), &[]);
            }
            _ => ctl.retire(qpn),
        }
    }

    /// Quarantines QPNs that a process which went held (a dead owner's, which no member
    /// registers again), so that none is drawn anew while its remote peers still retry.
    pub(crate) fn quarantine(&self, qpns: &[u32]) -> usize {
        let mut ctl = self.ctl.lock();
        let mut n = 0;
        for &q in qpns {
            if !ctl.in_use(q) {
                ctl.retire(q);
                n += 1;
            }
        }
        n
    }

    /// Whether this process owns the device (or has it alone), and how many other
    /// processes it forwards to.
    pub(crate) fn members(&self) -> (bool, usize) {
        let ctl = self.ctl.lock();
        match &ctl.role {
            Role::Alone => (true, 0),
            Role::Owner { members, .. } => (true, members.len()),
            Role::Member { .. } => (false, 0),
        }
    }

    /// Handles a control event of the progress thread's poll: `token` is [`LISTEN`],
    /// [`OWNER`] or a member's. `closed`: the poll saw the other end hang up.
    pub(crate) fn event(&self, r: &mio::Registry, token: mio::Token, closed: bool) -> Change {
        if token == SPILL {
            // Read by the next receive, without the control lock.
            self.rx.spilled();
            return Change::None;
        }
        if token.0 >= HANDBACK_BASE {
            // What a member handed back: read by the next receive, with the port.
            self.rx.handed();
            return Change::None;
        }
        let mut ctl = self.ctl.lock();
        match token {
            LISTEN => {
                self.accept(&mut ctl, r);
                Change::None
            }
            OWNER => {
                let gone = closed || {
                    let Role::Member { conn, .. } = &ctl.role else {
                        return Change::None;
                    };
                    // Readable with no request waiting: only an end of stream (or a record
                    // no request asked for, which is a broken owner) makes that.
                    matches!(
                        recv(
                            conn.as_raw_fd(),
                            MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_PEEK
                        ),
                        Ok(None) | Err(nix::Error::ECONNRESET)
                    )
                };
                if gone {
                    self.carry_on(&mut ctl, r)
                } else {
                    Change::None
                }
            }
            mio::Token(t) if t >= MEMBER_BASE => {
                self.serve(&mut ctl, r, t, closed);
                Change::None
            }
            _ => Change::None,
        }
    }

    /// Accepts every waiting member (owner).
    fn accept(&self, ctl: &mut Ctl, r: &mio::Registry) {
        let Role::Owner {
            listener,
            members,
            next,
        } = &mut ctl.role
        else {
            return;
        };
        loop {
            let fd = match ns::accept4(
                listener.raw(),
                SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
            ) {
                // SAFETY: accept4 returned a new descriptor that nothing else owns.
                Ok(fd) => unsafe { OwnedFd::from_raw_fd(fd) },
                Err(nix::Error::EINTR) => continue,
                Err(_) => return,
            };
            let pid = match same_user(&fd) {
                Ok(pid) => pid,
                Err(e) => {
                    // Said once, to whoever watches the owner; the connection just closes.
                    eprintln!("softrdma: {}: refused a connection: {e}", self.addr);
                    continue;
                }
            };
            let t = MEMBER_BASE + *next;
            *next += 1;
            if r.register(
                &mut mio::unix::SourceFd(&fd.as_raw_fd()),
                mio::Token(t),
                mio::Interest::READABLE,
            )
            .is_err()
            {
                continue;
            }
            members.insert(
                t,
                Member {
                    conn: fd,
                    pid,
                    data: None,
                    qpns: HashSet::new(),
                    ep: 0,
                    slot: 0,
                    steering: false,
                    left: false,
                },
            );
        }
    }

    /// Reads a member's requests and answers them (owner); a member that hung up, or
    /// sent what does not parse, is dropped with its QPNs.
    fn serve(&self, ctl: &mut Ctl, r: &mio::Registry, t: usize, closed: bool) {
        let mut drop_it = closed;
        loop {
            if drop_it {
                break;
            }
            let Role::Owner { members, .. } = &mut ctl.role else {
                return;
            };
            let Some(m) = members.get_mut(&t) else {
                return;
            };
            let fd = m.conn.as_raw_fd();
            let (rec, mut fds) = match recv(fd, MsgFlags::MSG_DONTWAIT) {
                Ok(Some(x)) => x,
                Err(nix::Error::EAGAIN) | Err(nix::Error::EINTR) => return,
                Ok(None) | Err(_) => {
                    drop_it = true;
                    continue;
                }
            };
            let msg = match Msg::decode(&rec) {
                Ok(msg) => msg,
                Err(e) => {
                    eprintln!(
                        "softrdma: {}: dropping member pid {}: {e}",
                        self.addr, m.pid
                    );
                    drop_it = true;
                    continue;
                }
            };
            let ready = m.data.is_some();
            let its_slot = m.slot;
            match (msg, ready) {
                (
                    Msg::Hello {
                        version,
                        pid: _,
                        ep,
                    },
                    false,
                ) => {
                    let me = std::process::id();
                    if version != VERSION || fds.len() != 1 {
                        let _ = send(
                            fd,
                            &Msg::Refused {
                                version: VERSION,
                                pid: me,
                                ep: 0,
                            },
                            &[],
                        );
                        drop_it = true;
                        continue;
                    }
                    let data = fds.pop().expect("one descriptor");
                    let _ = sys::set_int_opt(
                        data.as_raw_fd(),
                        libc::SOL_SOCKET,
                        libc::SO_SNDBUF,
                        FORWARD_BUF,
                    );
                    let welcome = Msg::Welcome {
                        version: VERSION,
                        pid: me,
                        ep: self.ep,
                    };
                    // An owner reads the port itself: its receive socket is the one to share.
                    if send(fd, &welcome, &[self.rx.get().0]).is_err() {
                        drop_it = true;
                        continue;
                    }
                    log(format_args!("{}: member pid {} joined", self.addr, m.pid));
                    let data = Arc::new(data);
                    // What the member hands back comes in on its pair.
                    if r.register(
                        &mut mio::unix::SourceFd(&data.as_raw_fd()),
                        mio::Token(HANDBACK_BASE + t - MEMBER_BASE),
                        mio::Interest::READABLE,
                    )
                    .is_ok()
                    {
                        self.rx.set_handback(&data, true);
                    }
                    m.data = Some(data);
                    m.ep = ep;
                }
                (Msg::Locate(q), true) => {
                    let ep = ctl.endpoint_of(self.ep, q);
                    if send(fd, &Msg::Located(ep), &[]).is_err() {
                        drop_it = true;
                    }
                }
                (Msg::Alloc, true) => {
                    let q = ctl.draw(its_slot);
                    ctl.theirs.insert(q, t);
                    let Role::Owner { members, .. } = &mut ctl.role else {
                        return;
                    };
                    let m = members.get_mut(&t).expect("looked up above");
                    m.qpns.insert(q);
                    let data = m.data.clone().expect("ready");
                    self.route(q, Some(data));
                    if send(fd, &Msg::Qpn(q), &[]).is_err() {
                        drop_it = true;
                    }
                }
                (Msg::Free(q), true) => {
                    if m.qpns.remove(&q) {
                        ctl.theirs.remove(&q);
                        self.route(q, None);
                        ctl.retire(q);
                    }
                }
                (Msg::Register(list), true) => {
                    let data = m.data.clone().expect("ready");
                    let mut taken = Vec::new();
                    let mut got = Vec::new();
                    for q in list {
                        if q <= 1 || q > 0xFF_FFFF || ctl.in_use(q) {
                            taken.push(q);
                        } else {
                            got.push(q);
                        }
                    }
                    for q in &got {
                        ctl.theirs.insert(*q, t);
                        self.route(*q, Some(data.clone()));
                        // Its QPNs carry the slot it had under the owner that went: no
                        // one else gets that slot.
                        let slot = *q as u8;
                        if slot != 0
                            && slot != ctl.my_slot
                            && *ctl.rounds.slots.entry(slot).or_insert(t) == t
                        {
                            let data = data.clone();
                            self.cm_routes(|cm| {
                                cm.by_slot.insert(slot, data);
                            });
                        }
                    }
                    let Role::Owner { members, .. } = &mut ctl.role else {
                        return;
                    };
                    members
                        .get_mut(&t)
                        .expect("looked up above")
                        .qpns
                        .extend(got);
                    if send(fd, &Msg::Registered(taken), &[]).is_err() {
                        drop_it = true;
                    }
                }
                (Msg::Steer(want), true) => {
                    // Every member gets a slot its QPNs carry; only with steering on may its
                    // socket join the group.
                    let slot = ctl.grant_slot(t, want);
                    if slot != 0 {
                        if self.steer {
                            // The group gets its program before the member's socket joins
                            // it: without one the kernel would hash other processes'
                            // datagrams to it.
                            self.install(ctl);
                        }
                        let Role::Owner { members, .. } = &mut ctl.role else {
                            return;
                        };
                        let m = members.get_mut(&t).expect("looked up above");
                        m.slot = slot;
                        let data = m.data.clone().expect("ready");
                        self.cm_routes(|cm| {
                            cm.by_slot.insert(slot, data);
                        });
                    }
                    let answer = Msg::Slot {
                        slot,
                        owner: ctl.my_slot,
                        join: self.steer,
                    };
                    if send(fd, &answer, &[]).is_err() {
                        drop_it = true;
                    }
                }
                (Msg::Steering(slot), true) => {
                    if self.steer && slot != 0 && its_slot == slot {
                        m.steering = true;
                        log(format_args!(
                            "{}: member pid {} steered as slot {slot}",
                            self.addr, m.pid
                        ));
                        self.probe_round(ctl, true, false);
                    }
                }
                (Msg::Leave, true) => {
                    // Its socket leaves the group next, and the last one takes its index:
                    // until the group is probed again, every member is forwarded to.
                    if m.steering {
                        m.steering = false;
                        m.left = true;
                        // Reports of the round under way name indexes from before the move:
                        // none counts now.
                        ctl.rounds.nonce = rand::random();
                        ctl.rounds.seen.clear();
                        self.install(ctl);
                    }
                    if send(fd, &Msg::Left, &[]).is_err() {
                        drop_it = true;
                    }
                }
                (Msg::Probed { index, nonce }, true) => {
                    if m.steering {
                        self.probed_at(ctl, t, index, nonce);
                    }
                }
                (Msg::CmListen(sid), true) => {
                    let data = m.data.clone().expect("ready");
                    // Valid while `data` lives: in the route, or dropped after the hand-over.
                    let keep = data.clone();
                    let data_fd = keep.as_raw_fd();
                    self.evict_dead_listener(&ctl.role, sid);
                    let mine = ctl.my_listens.contains(&sid);
                    let mut ok = false;
                    self.cm_routes(|cm| {
                        let taken = cm
                            .by_service
                            .get(&sid)
                            .is_some_and(|l| l.member != t && l.ended.is_none());
                        if !mine && !taken {
                            ok = true;
                            cm.by_service.insert(
                                sid,
                                CmListen {
                                    member: t,
                                    data,
                                    ended: None,
                                },
                            );
                        }
                    });
                    log(format_args!(
                        "{}: member {t} listens on CM service {sid:#x}: {ok}",
                        self.addr
                    ));
                    if ok {
                        self.deliver_waiting(sid, data_fd);
                    }
                    if send(fd, &Msg::CmListened(ok), &[]).is_err() {
                        drop_it = true;
                    }
                }
                (Msg::CmUnlisten(sid), true) => self.cm_routes(|cm| {
                    if let Some(l) = cm.by_service.get_mut(&sid)
                        && l.member == t
                    {
                        l.ended = Some(Instant::now());
                    }
                }),
                (other, _) => {
                    eprintln!(
                        "softrdma: {}: dropping member pid {}: unexpected {other:?}",
                        self.addr, m.pid
                    );
                    drop_it = true;
                }
            }
        }
        // The member is gone: its QPNs go into quarantine.
        let Role::Owner { members, .. } = &mut ctl.role else {
            return;
        };
        let Some(m) = members.remove(&t) else {
            return;
        };
        let _ = r.deregister(&mut mio::unix::SourceFd(&m.conn.as_raw_fd()));
        if let Some(d) = &m.data {
            let _ = r.deregister(&mut mio::unix::SourceFd(&d.as_raw_fd()));
            self.rx.set_handback(d, false);
        }
        log(format_args!(
            "{}: member pid {} left, {} QPNs quarantined",
            self.addr,
            m.pid,
            m.qpns.len()
        ));
        for q in m.qpns {
            ctl.theirs.remove(&q);
            self.route(q, None);
            ctl.retire(q);
        }
        ctl.rounds.slots.retain(|_, owner| *owner != t);
        ctl.rounds.seen.remove(&t);
        // Its MADs now go to this process's agent, which rejects REQs for its services
        // and answers a DREQ for one of its connections, as for any unknown one.
        self.cm_routes(|cm| {
            cm.by_service.retain(|_, l| l.member != t);
            if let Some(d) = &m.data {
                cm.by_slot.retain(|_, fd| !Arc::ptr_eq(fd, d));
            }
        });
        // A member that left on purpose said so first (`Leave`); one that died did not.
        if m.steering || m.left {
            // Its socket left the group, and the last one took its index.
            self.probe_round(ctl, true, true);
            self.install(ctl);
        }
    }

    /// Adds (or with `None` removes) a member's route.
    fn route(&self, qpn: u32, data: Option<Arc<OwnedFd>>) {
        let mut routes = self.routes.write();
        match data {
            Some(d) => {
                routes.insert(qpn, d);
            }
            None => {
                routes.remove(&qpn);
            }
        }
        self.forwarding.store(!routes.is_empty(), Ordering::Relaxed);
    }

    /// The owner went: become the owner, or join whoever did (member).
    fn carry_on(&self, ctl: &mut Ctl, r: &mio::Registry) -> Change {
        let Role::Member { conn, owner_pid } = &ctl.role else {
            return Change::None;
        };
        let _ = r.deregister(&mut mio::unix::SourceFd(&conn.as_raw_fd()));
        let old_owner = *owner_pid;
        let deadline = Instant::now() + ANSWER_TIMEOUT;
        let (old, _) = self.rx.get();
        loop {
            match join(self.addr, self.scope_id, self.ep) {
                Ok(Joined::Member {
                    conn,
                    owner_pid,
                    data,
                    port,
                }) => {
                    // Tell the new owner which QPNs are ours.
                    let mine: Vec<u32> = ctl.mine.iter().copied().collect();
                    for chunk in mine.chunks(MAX_QPNS) {
                        match request(conn.as_raw_fd(), owner_pid, &Msg::Register(chunk.into())) {
                            Ok(Msg::Registered(taken)) if taken.is_empty() => {}
                            Ok(Msg::Registered(taken)) => eprintln!(
                                "softrdma: {}: QPNs {taken:x?} are another process's now; \
                                 their packets go there",
                                self.addr
                            ),
                            _ => {}
                        }
                    }
                    // And which CM services.
                    for sid in &ctl.my_listens {
                        if !matches!(
                            request(conn.as_raw_fd(), owner_pid, &Msg::CmListen(*sid)),
                            Ok(Msg::CmListened(true))
                        ) {
                            eprintln!(
                                "softrdma: {}: CM service {sid:#x} is another process's now",
                                self.addr
                            );
                        }
                    }
                    let _ = r.register(
                        &mut mio::unix::SourceFd(&conn.as_raw_fd()),
                        OWNER,
                        mio::Interest::READABLE,
                    );
                    log(format_args!(
                        "{}: owner pid {old_owner} went; pid {} joined owner pid {owner_pid}",
                        self.addr,
                        std::process::id()
                    ));
                    let port = Forgotten::new(port);
                    let data = Forgotten::new(data);
                    if let Some(fd) = self.rx.spill() {
                        let _ = r.deregister(&mut mio::unix::SourceFd(&fd));
                    }
                    // A member keeps its slot, which its QPNs carry, and a steered one its
                    // socket in the group, if the new owner agrees.
                    let slot = ctl.my_slot;
                    let kept = match request(conn.as_raw_fd(), owner_pid, &Msg::Steer(slot)) {
                        Ok(Msg::Slot {
                            slot: s,
                            owner,
                            join,
                        }) => {
                            ctl.owner_slot = owner;
                            s == slot && join && slot != 0 && ctl.steering.is_some()
                        }
                        _ => false,
                    } && send(conn.as_raw_fd(), &Msg::Steering(slot), &[]).is_ok();
                    if kept {
                        let raw = data.raw();
                        self.rx.set_spill(Some(data), slot);
                        let _ = r.register(
                            &mut mio::unix::SourceFd(&raw),
                            SPILL,
                            mio::Interest::READABLE,
                        );
                    } else {
                        if let Some(fd) = ctl.steering.take() {
                            sys::hollow(fd);
                        }
                        self.rx.set_spill(None, 0);
                        self.rx.set(data, true);
                    }
                    ctl.role = Role::Member { conn, owner_pid };
                    ctl.port = Some(port);
                    return Change::Rx {
                        old,
                        took_over: None,
                    };
                }
                Ok(Joined::Nobody) => {}
                // A new owner in the middle of taking over may fail one try; the
                // deadline below bounds the retries.
                Err(e) if Instant::now() >= deadline => {
                    eprintln!("softrdma: {}: lost the device's owner: {e}", self.addr);
                    return Change::None;
                }
                Err(_) => {}
            }
            if let Ok(Some(listener)) = listen(self.addr, self.scope_id) {
                let listener = Forgotten::new(listener);
                let Some(port) = ctl.port.take() else {
                    return Change::None;
                };
                if ns::listen(&listener.0, Backlog::new(128).expect("within SOMAXCONN")).is_err() {
                    ctl.port = Some(port);
                    return Change::None;
                }
                let _ = r.register(
                    &mut mio::unix::SourceFd(&listener.raw()),
                    LISTEN,
                    mio::Interest::READABLE,
                );
                log(format_args!(
                    "{}: owner pid {old_owner} went; pid {} owns the device",
                    self.addr,
                    std::process::id()
                ));
                ctl.role = Role::Owner {
                    listener,
                    members: HashMap::new(),
                    next: 0,
                };
                // The port is read from now on, and the group's program sends everything
                // to it until the members, steered again, are probed; then this process's
                // socket leaves the group.
                if let Some(fd) = self.rx.spill() {
                    let _ = r.deregister(&mut mio::unix::SourceFd(&fd));
                }
                self.rx.set_spill(None, 0);
                self.rx.set(port, false);
                ctl.rounds = Rounds::default();
                let gone = ctl.owner_slot;
                ctl.retire_slot(gone);
                self.install(ctl);
                if let Some(fd) = ctl.steering.take() {
                    sys::hollow(fd);
                }
                // Members that connected before the listener was watched are waiting.
                self.accept(ctl, r);
                return Change::Rx {
                    old,
                    took_over: Some(old_owner),
                };
            }
            if Instant::now() >= deadline {
                eprintln!(
                    "softrdma: {}: the device's owner went and no process took its place",
                    self.addr
                );
                return Change::None;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        // The socket leaves the group before the owner sees the connection close, so that
        // its probe round finds the group as it is; and after the owner's program stopped
        // steering to members, so that the socket that takes its index gets no datagram
        // of another's (a UC or UD one would be lost).
        let ctl = self.ctl.get_mut();
        if let Some(fd) = ctl.steering.take() {
            if let Role::Member { conn, owner_pid } = &ctl.role {
                let _ = request(conn.as_raw_fd(), *owner_pid, &Msg::Leave);
            }
            sys::hollow(fd);
        }
    }
}

impl Ctl {
    /// The endpoint of whichever process holds QPN `q` (owner; `me`: its own): 0 if
    /// none does, `u64::MAX` if one without an endpoint does (see [`Msg::Located`]).
    fn endpoint_of(&self, me: u64, q: u32) -> u64 {
        let ep = |e: u64| if e == 0 { u64::MAX } else { e };
        if self.mine.contains(&q) {
            return ep(me);
        }
        match (&self.role, self.theirs.get(&q)) {
            (Role::Owner { members, .. }, Some(t)) => members.get(t).map_or(0, |m| ep(m.ep)),
            _ => 0,
        }
    }

    /// Whether `q` is anyone's, or quarantined.
    fn in_use(&mut self, q: u32) -> bool {
        self.expire();
        self.mine.contains(&q) || self.theirs.contains_key(&q) || self.quarantined.contains(&q)
    }

    /// Draws a free QPN for the process whose slot is `slot` (owner, alone): 16 random
    /// bits above the slot (see [`steer`]). Should that slot's numbers run out, any free
    /// QPN that no steered slot claims will do: the owner's socket receives it and
    /// forwards.
    fn draw(&mut self, slot: u8) -> u32 {
        self.expire();
        let tries = if self.is_retired(slot) { 0 } else { 1 << 17 };
        for _ in 0..tries {
            let q = rand::random::<u32>() & 0xFF_FF00 | u32::from(slot);
            if q > 1 && !self.in_use(q) {
                return q;
            }
        }
        loop {
            let q = rand::random::<u32>() & 0xFF_FFFF;
            let claimed = self.rounds.slots.contains_key(&(q as u8)) || self.is_retired(q as u8);
            if q > 1 && q != 0xFF_FFFF && !claimed && !self.in_use(q) {
                return q;
            }
        }
    }

    /// A steering slot for member `t` (owner): `want` if it is free or already `t`'s,
    /// otherwise (or for `want` 0) any free one; 0 if none is.
    fn grant_slot(&mut self, t: usize, want: u8) -> u8 {
        self.expire();
        let free = |s: u8, c: &Ctl| {
            // 0 is the first owner's; QP1 (the GSI, whose MADs the owner serves) and the
            // multicast QPN end in 1 and 0xFF.
            !matches!(s, 0 | 1 | 0xFF)
                && s != c.my_slot
                && !c.is_retired(s)
                && c.rounds.slots.get(&s).is_none_or(|o| *o == t)
        };
        let slot = if want != 0 {
            free(want, self).then_some(want)
        } else {
            // From a random start, so that a slot freed a moment ago is not the next one.
            let start = rand::random::<u8>();
            (0..=255u8)
                .map(|i| start.wrapping_add(i))
                .find(|&s| free(s, self) && !self.rounds.slots.contains_key(&s))
        };
        match slot {
            Some(s) => {
                self.rounds.slots.insert(s, t);
                s
            }
            None => 0,
        }
    }

    /// Takes slot `s` out of use for [`QUARANTINE`] (an owner that went had it).
    fn retire_slot(&mut self, s: u8) {
        self.retired.retain(|r| r.0 != s);
        self.retired.push_back((s, Instant::now() + QUARANTINE));
    }

    /// Puts a freed QPN into quarantine.
    fn retire(&mut self, q: u32) {
        if self.quarantine.len() >= QUARANTINE_MAX
            && let Some((old, _)) = self.quarantine.pop_front()
        {
            self.quarantined.remove(&old);
        }
        self.quarantine.push_back((q, Instant::now() + QUARANTINE));
        self.quarantined.insert(q);
    }

    /// Ends the quarantines and slot retirements that are over.
    fn expire(&mut self) {
        let now = Instant::now();
        while let Some(&(q, until)) = self.quarantine.front() {
            if until > now {
                break;
            }
            self.quarantine.pop_front();
            self.quarantined.remove(&q);
        }
        while self.retired.front().is_some_and(|r| r.1 <= now) {
            self.retired.pop_front();
        }
    }

    /// Whether slot `s` is retired (see [`Ctl::retire_slot`]).
    fn is_retired(&self, s: u8) -> bool {
        self.retired.iter().any(|r| r.0 == s)
    }
}

enum Joined {
    /// Nobody listens on the name.
    Nobody,
    Member {
        conn: OwnedFd,
        owner_pid: u32,
        data: OwnedFd,
        port: OwnedFd,
    },
}

/// Connects to the device's owner and says hello.
fn join(addr: IpAddr, scope_id: u32, ep: u64) -> Result<Joined, ShareError> {
    let conn = seqpacket()?;
    // A hung owner's full backlog would block the connect (and a send) for ever: both
    // wait at most this long.
    ns::setsockopt(
        &conn,
        ns::sockopt::SendTimeout,
        &nix::sys::time::TimeVal::new(ANSWER_TIMEOUT.as_secs() as i64, 0),
    )
    .map_err(io("SO_SNDTIMEO"))?;
    match ns::connect(conn.as_raw_fd(), &name(addr, scope_id)) {
        Ok(()) => {}
        Err(nix::Error::ECONNREFUSED) | Err(nix::Error::ENOENT) => return Ok(Joined::Nobody),
        Err(e) => return Err(io("connect to the device's owner")(e)),
    }
    let pid = same_user(&conn)?;
    let (mine, theirs) = ns::socketpair(
        AddressFamily::Unix,
        SockType::Datagram,
        None,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
    )
    .map_err(io("socketpair"))?;
    let _ = sys::set_int_opt(
        mine.as_raw_fd(),
        libc::SOL_SOCKET,
        libc::SO_RCVBUF,
        FORWARD_BUF,
    );
    ns::setsockopt(
        &conn,
        ns::sockopt::ReceiveTimeout,
        &nix::sys::time::TimeVal::new(ANSWER_TIMEOUT.as_secs() as i64, 0),
    )
    .map_err(io("SO_RCVTIMEO"))?;
    let hello = Msg::Hello {
        version: VERSION,
        pid: std::process::id(),
        ep,
    };
    match send(conn.as_raw_fd(), &hello, &[theirs.as_raw_fd()]) {
        Ok(()) => {}
        // It closed as we came (going, or refusing a connection it could not watch):
        // whoever holds the name next will answer.
        Err(nix::Error::ECONNRESET) | Err(nix::Error::EPIPE) => return Ok(Joined::Nobody),
        Err(e) => return Err(io("hello to the device's owner")(e)),
    }
    drop(theirs);
    let owner = pid as u32;
    let (rec, mut fds) = match recv(conn.as_raw_fd(), MsgFlags::empty()) {
        Ok(Some(x)) => x,
        // It closed as we came: it is going; whoever follows it will answer.
        Ok(None) | Err(nix::Error::ECONNRESET) => return Ok(Joined::Nobody),
        Err(nix::Error::EAGAIN) => {
            return Err(ShareError::Owner {
                pid: owner,
                what: format!("did not answer a hello in {ANSWER_TIMEOUT:?}"),
            });
        }
        Err(e) => return Err(io("the owner's welcome")(e)),
    };
    match Msg::decode(&rec) {
        Ok(Msg::Welcome { version, .. }) if version == VERSION && fds.len() == 1 => {
            Ok(Joined::Member {
                conn,
                owner_pid: owner,
                data: mine,
                port: fds.pop().expect("one descriptor"),
            })
        }
        Ok(Msg::Welcome { version, .. }) | Ok(Msg::Refused { version, .. }) => {
            Err(ShareError::Version {
                pid: owner,
                theirs: version,
                ours: VERSION,
            })
        }
        Ok(other) => Err(ShareError::Owner {
            pid: owner,
            what: format!("answered a hello with {other:?}"),
        }),
        Err(e) => Err(ShareError::Owner {
            pid: owner,
            what: format!("answered a hello with a bad record: {e}"),
        }),
    }
}

/// Binds the device's abstract name; `None` if another process holds it.
fn listen(addr: IpAddr, scope_id: u32) -> Result<Option<OwnedFd>, ShareError> {
    let l = ns::socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        None,
    )
    .map_err(io("socket(AF_UNIX, SOCK_SEQPACKET)"))?;
    match ns::bind(l.as_raw_fd(), &name(addr, scope_id)) {
        Ok(()) => Ok(Some(l)),
        Err(nix::Error::EADDRINUSE) => Ok(None),
        Err(e) => Err(io("bind the device's name")(e)),
    }
}

/// A request and its answer, on a member's (blocking, timed) connection.
fn request(fd: RawFd, owner: u32, m: &Msg) -> Result<Msg, ShareError> {
    let lost = |what: String| ShareError::Owner { pid: owner, what };
    send(fd, m, &[]).map_err(|e| lost(format!("is gone ({e})")))?;
    match recv(fd, MsgFlags::empty()) {
        Ok(Some((rec, _))) => {
            Msg::decode(&rec).map_err(|e| lost(format!("answered with a bad record: {e}")))
        }
        Ok(None) => Err(lost("closed the connection".into())),
        Err(nix::Error::EAGAIN) => Err(lost(format!("did not answer in {ANSWER_TIMEOUT:?}"))),
        Err(e) => Err(lost(format!("is gone ({e})"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctl(my_slot: u8) -> Ctl {
        Ctl {
            role: Role::Alone,
            mine: HashSet::new(),
            theirs: HashMap::new(),
            quarantine: VecDeque::new(),
            quarantined: HashSet::new(),
            port: None,
            my_slot,
            steering: None,
            owner_slot: 0,
            rounds: Rounds::default(),
            retired: VecDeque::new(),
            my_listens: HashSet::new(),
            unlistened: HashMap::new(),
        }
    }

    /// Every slot but 0, 1 (QP1's), 0xFF (the multicast QPN's), the owner's own and a
    /// retired one is granted once, each to its member; then none is left.
    #[test]
    fn slots_are_granted_once_and_never_a_retired_one() {
        let mut c = ctl(7);
        c.retire_slot(42);
        assert_eq!(c.grant_slot(500, 1), 0, "QP1's slot");
        assert_eq!(c.grant_slot(500, 0xFF), 0, "the multicast QPN's slot");
        let granted: Vec<u8> = (0..251).map(|t| c.grant_slot(t, 0)).collect();
        assert_eq!(c.grant_slot(999, 0), 0, "none left");
        assert_eq!(
            c.grant_slot(999, 42),
            0,
            "a retired slot is refused by name too"
        );
        // A member asking again for its own slot (after a change of owner) keeps it.
        assert_eq!(c.grant_slot(3, granted[3]), granted[3]);
        let mut got = granted;
        got.sort_unstable();
        let want: Vec<u8> = (2..=254).filter(|s| ![7, 42].contains(s)).collect();
        assert_eq!(got, want);
    }

    /// QPNs carry their process's slot in their low byte, and none is drawn with a
    /// retired slot (a gone owner's, whose newest QPNs no file may list).
    #[test]
    fn qpns_carry_their_slot_and_never_a_retired_one() {
        let mut c = ctl(9);
        for _ in 0..1000 {
            assert_eq!(c.draw(9) & 0xFF, 9);
        }
        c.retire_slot(0);
        c.rounds.slots.insert(5, 1);
        for _ in 0..1000 {
            let q = c.draw(0);
            assert!(q > 1 && ![0, 5].contains(&(q & 0xFF)), "{q:#x}");
        }
    }
}
