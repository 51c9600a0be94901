//! The connection manager: rdma_cm's event channels and IDs over the IB CM protocol, which
//! travels in MADs to and from QP1 of the device (`softrdma_proto::cm` is the protocol;
//! `softrdma_wire::cm` its messages), so that it talks to Linux's rdma_cm on rxe.
//!
//! Connecting by IP address alone:
//!
//! * passive: [`CmId::new`], [`CmId::bind_addr`], [`CmId::listen`]; a
//!   [`CmEventKind::ConnectRequest`] brings a new [`CmId`], which gets a QP
//!   ([`CmId::create_qp`]) and [`CmId::accept`]s; [`CmEventKind::Established`] follows.
//! * active: [`CmId::resolve_addr`], [`CmId::resolve_route`], [`CmId::create_qp`],
//!   [`CmId::connect`]; [`CmEventKind::Established`] once the peer accepted (the QP is then
//!   in RTS), or [`CmEventKind::Rejected`] / [`CmEventKind::Unreachable`].
//! * either side: [`CmId::disconnect`]; the other sees [`CmEventKind::Disconnected`].
//!
//! The QP is moved through INIT, RTR and RTS here, with the PSNs, QPNs, MTU and RDMA
//! resources the REQ and REP carry: each side's message names the first PSN its receive
//! queue expects (as Linux's rdma_cm does; see `rping.pcap`).
//!
//! # Threads and locks
//! Each device with a CM ID open has one CM agent (a `softrdma_proto::cm::CmAgent`, behind
//! one mutex) and one thread, `softrdma-cm`, that sleeps on QP1's completion channel, a
//! wake-up eventfd and a timerfd set to the agent's next deadline. The agent and its
//! thread outlive the device's last ID by [`LINGER`] while the application still holds the
//! context (a program that connects again finds them), and go at once when it does not.
//! A MAD is mostly handled without that thread: QP1's channel has an inline consumer
//! (`device::cq`), so the thread that received the MAD (the progress thread, or a busy
//! poller) runs the agent at the end of its receive pass, once it holds no device lock,
//! if the agent's mutex is free; otherwise the channel wakes the CM thread. A thread that
//! waits for a CM event first receives for it itself for [`CM_SPIN`] (a handshake's turn
//! on one host), then gives the sockets back to the progress threads and blocks. Whoever
//! runs the agent brings the timerfd forward when the agent's next deadline moved earlier,
//! so a verb wakes no thread. The CM thread takes only the completions the progress
//! thread placed (it never receives itself, which would take the socket from the progress
//! thread). Verbs run the agent under its mutex on the caller's thread and send what it
//! produces there; no lock is held across user code or a blocking call. Events go to each
//! ID's [`EventChannel`], a queue behind a mutex with an eventfd that [`EventChannel::fd`]
//! gives for `poll(2)`, readable while events wait.
//! Lock order: the agent's mutex, then an ID's, then the device's (a QP modify or post).
//!
//! # A device shared by processes
//! Each process runs its own agent behind the device's one QP1 (see `device::share`): the
//! process that reads the port forwards each MAD to the agent it names, a REQ to the
//! listener of its service (listens are registered with it) and every other message to
//! the process whose slot its communication ID ends in (each agent draws its IDs so).
//! Two processes never listen on one service of a device.
//!
//! UD QPs (port space UDP, or IB with a UD QP) are found rather than connected: `connect`
//! sends a SIDR_REQ (IBTA 12.11) for the peer's service, and the passive side's `accept`
//! answers with its QPN and the Q_Key of rdma_cm's UD QPs, [`RDMA_UDP_QKEY`]; the active
//! side's [`CmEventKind::Established`] carries them in [`CmEvent::ud`]. A UD QP is in RTS
//! from `create_qp` on, as librdmacm leaves it.
//!
//! Multicast: [`CmId::join_multicast`] on a UD ID joins an IP multicast group on the
//! device's interface (RoCE v2 needs no subnet manager) and attaches the ID's QP;
//! the [`CmEventKind::MulticastJoin`] event carries the QPN and Q_Key of a send to it.

use crate::device::Device;
use crate::error::{Error, Result};
use crate::sync::{Lock, Rank};
use crate::verbs::context::Context;
use crate::verbs::cq::{CompletionChannel, CompletionQueue};
use crate::verbs::qp::{ProtectionDomain, QpInitAttr, QueuePair};
use softrdma_proto::cm::{CmAgent, CmConfig, CmEvent as AgentEvent, CommId};
use softrdma_proto::{
    AccessFlags, AddressVector, Instant, Mtu, Payload, QpAttr, QpCaps, QpState, QpType, RecvWr,
    SendFlags, SendOp, SendWr, UdDest, WcOpcode, WcStatus,
};
use softrdma_wire::cm::{
    self as wire, CmMad, GSI_QKEY, GSI_QPN, IpCmHeader, PathRepr, PrivateData, RepRepr, ReqRepr,
    SidrReqRepr, TransportService, rej_reason,
};
use softrdma_wire::{Psn, Qpn};
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// rdma_cm's port spaces (`enum rdma_port_space`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortSpace {
    /// RDMA_PS_TCP: reliable connections.
    Tcp,
    /// RDMA_PS_UDP: datagrams (not yet).
    Udp,
    /// RDMA_PS_IB: any QP type.
    Ib,
}

impl PortSpace {
    /// The value librdmacm uses.
    pub fn code(self) -> u16 {
        match self {
            PortSpace::Tcp => wire::port_space::TCP,
            PortSpace::Udp => wire::port_space::UDP,
            PortSpace::Ib => wire::port_space::IB,
        }
    }
}

/// What a connect or accept offers (`struct rdma_conn_param`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnParam {
    /// Private data for the peer: at most 56 bytes in a connect (the REQ's 92 less the IP
    /// CM header), 196 in an accept.
    pub private_data: Vec<u8>,
    /// RDMA READs and atomics this side answers at once.
    pub responder_resources: u8,
    /// RDMA READs and atomics this side has outstanding.
    pub initiator_depth: u8,
    /// Transport retries (0-7).
    pub retry_count: u8,
    /// RNR retries (0-7; 7 is infinite).
    pub rnr_retry_count: u8,
    /// The QP the connection is for when the ID has none attached (`conn_param.qp_num`:
    /// a QP the program made itself and moves through its states with
    /// [`CmId::init_qp_attr`]); ignored when the ID has a QP.
    pub qp_num: Option<Qpn>,
    /// Whether that QP takes its receives from an SRQ (`conn_param.srq`).
    pub srq: bool,
}

impl Default for ConnParam {
    fn default() -> Self {
        Self {
            private_data: Vec::new(),
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            qp_num: None,
            srq: false,
        }
    }
}

/// The QP number and SRQ bit a REQ or REP announces: the attached QP's, else the
/// program's own QP's from `param` (as librdmacm passes `id->qp ? id->qp->qp_num :
/// conn_param->qp_num`); EINVAL with neither.
fn announced_qp(
    verb: &'static str,
    qp: Option<&QueuePair>,
    param: &ConnParam,
) -> Result<(u32, bool)> {
    match (qp, param.qp_num) {
        (Some(q), _) => Ok((q.qp_num().value(), q.has_srq())),
        (None, Some(n)) => Ok((n.value(), param.srq)),
        (None, None) => Err(cm_err(
            verb,
            libc::EINVAL,
            "the ID has no QP (rdma_create_qp first) and the parameters name none (qp_num)".into(),
        )),
    }
}

/// The Q_Key of rdma_cm's UD QPs in the UDP port space (`RDMA_UDP_QKEY` of
/// `<rdma/rdma_cma.h>`), which a SIDR_REP announces.
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;

/// The response timeout our REQs carry, both ways: 4.096 µs × 2^17 = 537 ms.
const RESPONSE_TIMEOUT: u8 = 17;
/// How often a REQ, REP or DREQ of ours is resent: with [`RESPONSE_TIMEOUT`], a peer that
/// never answers is reported unreachable after 7 × 539 ms, 3.8 s.
const MAX_CM_RETRIES: u8 = 6;
/// The ACK timeout our QPs get and our REQs announce (4.096 µs × 2^14 = 67 ms, as
/// `ibv_rc_pingpong`'s).
const ACK_TIMEOUT: u8 = 14;
/// Receive buffers kept posted on QP1 (a UD receive starts with its 40-byte GRH area),
/// so that a burst of MADs (cmtime's 1,000 connections, or their DREQs, at once) waits
/// in the queue instead of being dropped and resent half a second later. Four times
/// Linux's `IB_MAD_QP_RECV_SIZE`: a receive pass places a whole burst before the agent
/// reposts, where Linux's MAD layer reposts in softirq as it goes. With 512, a
/// 1,000-connection cmtime on one host lost a burst in every run (its connect or
/// disconnect step 545-562 ms instead of 14-43 ms). 600 KB per device a process runs
/// the CM on.
const GSI_RECVS: u64 = 2048;
const GSI_BUF: usize = 40 + wire::MAD_LEN;
/// WR IDs of QP1's sends start here; below are its receives.
const SEND_WR_BASE: u64 = 1 << 32;

/// What happened to an ID (`enum rdma_cm_event_type`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmEventKind {
    /// `resolve_addr` found the local device.
    AddrResolved,
    /// `resolve_route` made the path.
    RouteResolved,
    /// A peer asks to connect: the event's `id` is the new connection's.
    ConnectRequest,
    /// The peer accepted, and this ID has no QP: answer with [`CmId::establish`].
    ConnectResponse,
    /// The connection is up.
    Established,
    /// The peer rejected the connection (IBTA reject reason; 28 is the consumer's own).
    Rejected {
        /// The reject reason.
        reason: u16,
    },
    /// The peer never answered.
    Unreachable,
    /// The peer answered our SIDR_REQ with a SIDR_REP whose status is not "valid"
    /// (`softrdma_wire::cm::sidr_status`): rdma_cm reports it as UNREACHABLE with that
    /// status.
    Unresolved {
        /// The SIDR_REP's status.
        status: u8,
    },
    /// The connection is down.
    Disconnected,
    /// The connection's IDs may be reused.
    TimewaitExit,
    /// The ID joined a multicast group ([`CmId::join_multicast`]): the event's
    /// [`CmEvent::ud`] gives the QPN (0xFFFFFF) and Q_Key that a send to the group takes.
    MulticastJoin {
        /// The group's address.
        group: IpAddr,
    },
}

/// The QPN a UD send to a multicast group is addressed to (what rdma_cm's
/// MULTICAST_JOIN event gives as `param.ud.qp_num`).
pub const MULTICAST_QPN: u32 = 0xFF_FFFF;

/// What the peer's REQ or REP said of the connection (`rdma_cm_event.param.conn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PeerParam {
    /// RDMA READs and atomics the peer answers at once.
    pub responder_resources: u8,
    /// RDMA READs and atomics the peer has outstanding.
    pub initiator_depth: u8,
    /// Its transport retry count (a REQ's).
    pub retry_count: u8,
    /// Its RNR retry count.
    pub rnr_retry_count: u8,
    /// Whether its QP takes receives from an SRQ.
    pub srq: bool,
    /// Its QP number.
    pub qp_num: u32,
}

/// Where a UD peer's QP is (`rdma_cm_event.param.ud`): send to the ID's peer address
/// with these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdParam {
    /// The peer's QP number.
    pub qp_num: u32,
    /// The Q_Key to send with.
    pub qkey: u32,
}

/// One event (`struct rdma_cm_event`).
#[derive(Debug, Clone)]
pub struct CmEvent {
    /// For an established UD ID (the SIDR_REP's answer): the peer's QP and Q_Key.
    pub ud: Option<UdParam>,
    /// For a connect request and an established active connection: what the peer's REQ
    /// or REP said.
    pub peer: Option<PeerParam>,
    /// What happened.
    pub kind: CmEventKind,
    /// The ID it happened to.
    pub id: CmId,
    /// For a connect request: the listening ID.
    pub listen_id: Option<CmId>,
    /// The peer's private data (connect request, response, established, rejected,
    /// disconnected), zero-padded as the message carried it.
    pub private_data: Vec<u8>,
}

/// Where an ID's events go (`struct rdma_event_channel`).
#[derive(Debug, Clone)]
pub struct EventChannel {
    inner: Arc<Chan>,
}

#[derive(Debug)]
struct Chan {
    q: Lock<VecDeque<CmEvent>>,
    /// How many events `q` holds, written under its lock: a spinning waiter reads this
    /// instead of taking the lock.
    queued: std::sync::atomic::AtomicUsize,
    efd: OwnedFd,
}

impl Chan {
    fn push(&self, ev: CmEvent) {
        let mut q = self.q.lock();
        q.push_back(ev);
        self.queued.store(q.len(), Ordering::Release);
        drop(q);
        write_eventfd(&self.efd);
    }
}

fn eventfd(verb: &'static str, flags: libc::c_int) -> Result<OwnedFd> {
    // SAFETY: eventfd takes no pointers; the result is checked before use.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | flags) };
    if fd < 0 {
        return Err(Error::io(verb)(std::io::Error::last_os_error()));
    }
    // SAFETY: `fd` is a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Waits until one of `fds` is readable or `timeout` passes (`None`: for ever).
fn wait_readable(fds: &[RawFd], timeout: Option<Duration>) {
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = timeout.map_or(-1, |t| t.as_millis().clamp(1, i32::MAX as u128) as i32);
    // SAFETY: `p` holds `p.len()` valid pollfd entries.
    unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, ms) };
}

fn drain_eventfd(fd: RawFd) {
    let mut b = [0u8; 8];
    // SAFETY: reads at most 8 bytes into `b`; the descriptor is non-blocking, or poll
    // just said it is readable.
    unsafe { libc::read(fd, b.as_mut_ptr().cast(), 8) };
}

impl EventChannel {
    /// The oldest event, if any (the caller has read the descriptor). The descriptor is
    /// made readable again while more wait, so that a caller that polls it before each
    /// `rdma_get_cm_event` finds them all.
    fn pop(&self) -> Option<CmEvent> {
        let mut q = self.inner.q.lock();
        let ev = q.pop_front();
        self.inner.queued.store(q.len(), Ordering::Release);
        // The descriptor may be blocking: it is read only when readable, and under the
        // queue's lock, so that two threads never both read one count.
        let fd = self.fd();
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no wait.
        if unsafe { libc::poll(&mut p, 1, 0) } == 1 {
            drain_eventfd(fd);
        }
        if !q.is_empty() {
            write_eventfd(&self.inner.efd);
        }
        ev
    }

    /// A new channel (`rdma_create_event_channel`).
    pub fn new() -> Result<Self> {
        Ok(Self {
            inner: Arc::new(Chan {
                q: Lock::new(Rank::CmEvents, VecDeque::new()),
                queued: std::sync::atomic::AtomicUsize::new(0),
                // Blocking, as librdmacm's descriptor is: a program that wants
                // rdma_get_cm_event not to wait sets O_NONBLOCK itself (libfabric does),
                // and the C layer reads that flag. Drained only when poll says it is
                // readable (see `pop`).
                efd: eventfd("rdma_create_event_channel", 0)?,
            }),
        })
    }

    /// The descriptor that is readable while events wait (for `poll(2)`).
    pub fn fd(&self) -> RawFd {
        self.inner.efd.as_raw_fd()
    }

    /// The next event (`rdma_get_cm_event`), waiting at most `timeout` (`None`: for ever).
    pub fn get_event(&self, timeout: Option<Duration>) -> Option<CmEvent> {
        let end = timeout.map(|t| std::time::Instant::now() + t);
        loop {
            if let Some(ev) = self.pop() {
                return Some(ev);
            }
            let left = match end {
                Some(e) => {
                    let now = std::time::Instant::now();
                    if now >= e {
                        return None;
                    }
                    Some(e - now)
                }
                None => None,
            };
            if left != Some(Duration::ZERO) {
                if let Some(ev) = self.spin(left) {
                    return Some(ev);
                }
                release_pollers();
            }
            wait_readable(&[self.fd()], left);
        }
    }
}

/// How long a thread that waits for a CM event receives for it itself before it blocks
/// (see [`EventChannel::spin`]): the turn of a handshake on one host (a REQ's REP, a REP's
/// RTU), which then costs neither the progress thread's wake-up nor this thread's.
const CM_SPIN: Duration = Duration::from_micros(100);

impl EventChannel {
    /// Receives on each CM device's socket for up to [`CM_SPIN`] (at most `left`), as a
    /// busy CQ poller does: the MAD that brings the event is then read on this thread, the
    /// agent runs here on it (QP1's inline consumer), and the event is taken without a
    /// wake-up. An event that does not come within the spin is waited for as before.
    fn spin(&self, left: Option<Duration>) -> Option<CmEvent> {
        let devs = cm_devices();
        if devs.is_empty() {
            return None;
        }
        let until = std::time::Instant::now() + left.map_or(CM_SPIN, |l| l.min(CM_SPIN));
        loop {
            for d in &devs {
                d.poll_socket();
            }
            if self.inner.queued.load(Ordering::Acquire) > 0 {
                if let Some(ev) = self.pop() {
                    return Some(ev);
                }
            }
            if std::time::Instant::now() >= until {
                return None;
            }
            std::hint::spin_loop();
        }
    }
}

/// The devices with a CM in this process.
fn cm_devices() -> Vec<Arc<Device>> {
    CORES
        .lock()
        .iter()
        .filter_map(|c| c.dev.upgrade())
        .collect()
}

/// This thread is about to block for a CM event: each device with a CM gives its socket
/// back to its progress thread now, as a thread that blocks for a completion does
/// (`Poller::app_sleeps`). A thread that polled a CQ just before (to take the last
/// connection's completion) would otherwise keep the socket for the poller's grace, and
/// the MAD that brings the event would wait that long for anyone to read it.
fn release_pollers() {
    for d in cm_devices() {
        crate::device::cq::Poller::app_sleeps(&*d);
    }
}

/// A connection-manager ID (`struct rdma_cm_id`): a listener, or one connection.
#[derive(Clone)]
pub struct CmId {
    inner: Arc<IdInner>,
}

impl std::fmt::Debug for CmId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.inner.st.lock();
        f.debug_struct("CmId")
            .field("local", &st.local)
            .field("peer", &st.peer)
            .field("comm", &st.comm)
            .finish()
    }
}

struct IdInner {
    /// Where its events go (changed by [`CmId::migrate`]).
    chan: Lock<Arc<Chan>>,
    ctx: Context,
    core: Arc<Core>,
    /// Declared after `core`, so dropped after it: see [`LastLook`].
    _last_look: LastLook,
    ps: PortSpace,
    st: Lock<IdState>,
    /// The ID's line in `softrdma res show cm_id`.
    res: Arc<crate::device::res::CmIdEntry>,
    /// See [`CmId::user`].
    user: std::sync::atomic::AtomicUsize,
}

/// Wakes the CM thread when an ID's hold on its core has gone and the thread may be the
/// core's last holder (see `serve`), so that it starts its linger. Dropped after the ID's
/// `Arc<Core>`: a wake-up before the count fell would find the ID still there, and the
/// thread would sleep on with nothing to wake it.
struct LastLook {
    core: Weak<Core>,
    wake: Arc<OwnedFd>,
}

impl LastLook {
    fn of(core: &Arc<Core>) -> Self {
        Self {
            core: Arc::downgrade(core),
            wake: core.wake.clone(),
        }
    }
}

impl Drop for LastLook {
    fn drop(&mut self) {
        if self.core.strong_count() <= 1 {
            write_eventfd(&self.wake);
        }
    }
}

/// Adds one to an eventfd (which wakes its reader).
fn write_eventfd(fd: &OwnedFd) {
    let one = 1u64.to_ne_bytes();
    // SAFETY: an eventfd takes an 8-byte write from a valid buffer.
    unsafe { libc::write(fd.as_raw_fd(), one.as_ptr().cast(), 8) };
}

/// An ID's QP: made by [`CmId::create_qp`] and held, or the caller's and only known.
enum QpRef {
    Owned(Arc<QueuePair>),
    Attached(Weak<QueuePair>),
}

impl QpRef {
    fn get(&self) -> Option<Arc<QueuePair>> {
        match self {
            QpRef::Owned(q) => Some(q.clone()),
            QpRef::Attached(w) => w.upgrade(),
        }
    }
}

#[derive(Default)]
struct IdState {
    /// Where it stands, in the kernel's `enum rdma_cm_state` words as `rdma res` shows
    /// them (`IDLE` when empty).
    state: &'static str,
    local: Option<SocketAddr>,
    peer: Option<SocketAddr>,
    listening: Option<u64>,
    comm: Option<CommId>,
    qp: Option<QpRef>,
    /// The REQ this passive ID answers, or the one this active ID sent.
    req: Option<Box<ReqRepr>>,
    /// The REP received (active, without a QP, until `establish`).
    rep: Option<Box<RepRepr>>,
    /// The SIDR_REQ this passive UD ID answers.
    sidr: Option<Box<SidrReqRepr>>,
    /// The service its `bind_addr` announced to the agent (see [`CmId::bind_addr`]).
    bound: Option<u64>,
    /// The first PSN this passive ID's receive queue expects: drawn when the REQ comes
    /// (`passive`), so that `init_qp_attr` can give it before the accept announces it.
    rq_psn: u32,
    passive: bool,
    param: Option<ConnParam>,
    /// The multicast groups joined, each with whether it was joined to send only (its QP
    /// is then not attached).
    groups: Vec<(IpAddr, bool)>,
    /// [`CmId::set_tos`].
    tos: u8,
    /// [`CmId::set_ack_timeout`].
    ack_timeout: Option<u8>,
}

impl IdInner {
    fn chan(&self) -> Arc<Chan> {
        self.chan.lock().clone()
    }
}

impl Drop for IdInner {
    /// The ID's listen and connection end here, and what that sends (a DREP for a DREQ
    /// received, a REJ, a DREQ) leaves before the drop returns: a program that destroys
    /// its ID and exits (qperf's server after each test) must not leave its peer
    /// resending a DREQ for seconds, so the drop waits while the CM thread holds the
    /// agent. Only when this thread holds an agent itself (the last handle went while an
    /// event was dispatched) do they end in the CM thread's next pass instead.
    fn drop(&mut self) {
        let st = self.st.get_mut();
        if st.listening.is_none() && st.comm.is_none() && st.bound.is_none() {
            return;
        }
        let ended = Ended {
            listening: st.listening,
            comm: st.comm,
            bound: st.bound,
        };
        // A thread that holds no agent waits for this one (the CM thread holds it only
        // for a pass); one that holds an agent leaves the end to the CM thread.
        let cs = if AgentGuard::held_here() {
            self.core.try_agent()
        } else {
            Some(self.core.agent())
        };
        match cs {
            Some(mut cs) => {
                self.core.end(&mut cs, ended);
                self.core.settle(&mut cs);
            }
            None => {
                self.core.dropped.lock().push(ended);
                self.core.wake();
            }
        }
    }
}

impl CmId {
    /// A new ID on `ctx`'s device whose events go to `chan` (`rdma_create_id`).
    pub fn new(chan: &EventChannel, ctx: &Context, ps: PortSpace) -> Result<Self> {
        let core = Core::of(ctx)?;
        Ok(Self::with_core(chan.inner.clone(), ctx.clone(), core, ps))
    }

    fn with_core(chan: Arc<Chan>, ctx: Context, core: Arc<Core>, ps: PortSpace) -> Self {
        let res = ctx.dev().res.add_cm_id();
        let id = Self {
            inner: Arc::new(IdInner {
                chan: Lock::new(Rank::CmIdChannel, chan),
                ctx,
                _last_look: LastLook::of(&core),
                core,
                ps,
                st: Lock::new(Rank::CmId, IdState::default()),
                res,
                user: std::sync::atomic::AtomicUsize::new(0),
            }),
        };
        id.set_state("IDLE");
        id
    }

    fn st(&self) -> crate::sync::Guard<'_, IdState> {
        self.inner.st.lock()
    }

    /// Moves the ID to `state` and publishes its line for `res show cm_id`.
    fn set_state(&self, state: &'static str) {
        let line = {
            let mut st = self.st();
            st.state = state;
            let mut line = String::new();
            if let Some(qp) = st.qp.as_ref().and_then(QpRef::get) {
                line.push_str(&format!(
                    "lqpn {} qp-type {} ",
                    qp.qp_num().value(),
                    match qp.qp_type() {
                        QpType::Ud => "UD",
                        QpType::Uc => "UC",
                        QpType::Rc => "RC",
                    }
                ));
            }
            line.push_str(&format!(
                "state {state} ps {}",
                match self.inner.ps {
                    PortSpace::Tcp => "TCP",
                    PortSpace::Udp => "UDP",
                    PortSpace::Ib => "IB",
                }
            ));
            if let Some(a) = st.local {
                line.push_str(&format!(" src-addr {a}"));
            }
            if let Some(a) = st.peer {
                line.push_str(&format!(" dst-addr {a}"));
            }
            line
        };
        *self.inner.res.fields.lock() = line;
        self.inner.ctx.dev().res_changed();
    }

    fn event(&self, kind: CmEventKind, private_data: Vec<u8>) {
        self.inner.chan().push(CmEvent {
            kind,
            id: self.clone(),
            listen_id: None,
            private_data,
            peer: None,
            ud: None,
        });
    }

    /// The local address (after bind, resolve or a connect request).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.st().local
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.st().peer
    }

    /// The ID's QP, once made.
    pub fn qp(&self) -> Option<Arc<QueuePair>> {
        self.st().qp.as_ref().and_then(QpRef::get)
    }

    /// The device context the ID is on.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// Binds to `addr`, which must be this device's address or unspecified; port 0 picks
    /// one (`rdma_bind_addr`). Until the ID listens, a REQ for the port is dropped rather
    /// than rejected (see `softrdma_proto::cm::CmAgent::bind`).
    pub fn bind_addr(&self, addr: SocketAddr) -> Result<()> {
        self.bind_to(addr)?;
        let port = self.local_addr().expect("bound").port();
        let sid = wire::ip_service_id(self.inner.ps.code(), port);
        let mut cs = self.inner.core.agent();
        cs.agent.bind(sid);
        self.st().bound = Some(sid);
        Ok(())
    }

    /// Binds the ID's address and port, as [`Self::bind_addr`] does for an address the
    /// caller chose; an active ID's own port is bound so, with no service expected on it.
    fn bind_to(&self, addr: SocketAddr) -> Result<()> {
        let dev = self.inner.ctx.addr();
        if !addr.ip().is_unspecified() && addr.ip().to_canonical() != dev {
            return Err(cm_err(
                "rdma_bind_addr",
                libc::EADDRNOTAVAIL,
                format!(
                    "{} is not the address of device {} ({dev})",
                    addr.ip(),
                    self.inner.ctx.name()
                ),
            ));
        }
        let port = if addr.port() == 0 {
            rand::random_range(32768..61000)
        } else {
            addr.port()
        };
        self.st().local = Some(SocketAddr::new(dev, port));
        self.set_state("ADDR_BOUND");
        Ok(())
    }

    /// Takes connection requests on the bound port (`rdma_listen`).
    pub fn listen(&self, _backlog: i32) -> Result<()> {
        let local = match self.local_addr() {
            Some(l) => l,
            None => {
                self.bind_addr(SocketAddr::new(self.inner.ctx.addr(), 0))?;
                self.local_addr().expect("bound")
            }
        };
        let sid = wire::ip_service_id(self.inner.ps.code(), local.port());
        let mut core = self.inner.core.agent();
        // A listener this process dropped a moment ago no longer holds the port (a
        // program that listens again on it: perftest's -R).
        self.inner.core.reap(&mut core);
        let in_use = |whose: &str| {
            cm_err(
                "rdma_listen",
                libc::EADDRINUSE,
                format!("{whose} listens on port {} already", local.port()),
            )
        };
        if core.listeners.contains_key(&sid) {
            return Err(in_use("an ID of this process"));
        }
        // The device's QP1 takes REQs for every process: its reader learns which one
        // listens on the service.
        if !self.inner.ctx.dev().cm_listen(sid)? {
            return Err(in_use("another process of the device"));
        }
        core.agent
            .listen(sid)
            .map_err(|e| cm_err("rdma_listen", libc::EADDRINUSE, e.to_string()))?;
        core.listeners.insert(sid, Arc::downgrade(&self.inner));
        self.st().listening = Some(sid);
        self.set_state("LISTEN");
        Ok(())
    }

    /// Resolves `dst` to this device's port and the peer's GID (`rdma_resolve_addr`): on
    /// RoCE the GID is the address, so this completes at once, with an
    /// [`CmEventKind::AddrResolved`] event.
    pub fn resolve_addr(&self, src: Option<SocketAddr>, dst: SocketAddr) -> Result<()> {
        // A multicast group is resolved without a port, to be joined (mckey).
        if dst.ip().is_unspecified() || (dst.port() == 0 && !dst.ip().to_canonical().is_multicast())
        {
            return Err(cm_err(
                "rdma_resolve_addr",
                libc::EINVAL,
                format!("{dst} is not an address and port to connect to"),
            ));
        }
        let ours = self.inner.ctx.addr();
        if ours.to_canonical().is_ipv4() != dst.ip().to_canonical().is_ipv4() {
            // A RoCE v2 device sends from its address's family only: without this the REQ
            // could not leave, and the caller would wait for UNREACHABLE.
            return Err(cm_err(
                "rdma_resolve_addr",
                libc::ENETUNREACH,
                format!(
                    "device {} is on {ours}, which cannot reach {}: give a source address \
                     of the destination's family",
                    self.inner.ctx.dev().name,
                    dst.ip()
                ),
            ));
        }
        if self.local_addr().is_none() {
            self.bind_to(src.unwrap_or(SocketAddr::new(ours, 0)))?;
        }
        self.st().peer = Some(SocketAddr::new(dst.ip().to_canonical(), dst.port()));
        self.set_state("ADDR_RESOLVED");
        self.event(CmEventKind::AddrResolved, vec![]);
        Ok(())
    }

    /// Makes the path to the resolved peer (`rdma_resolve_route`): a RoCE v2 path needs no
    /// query, so this completes at once, with a [`CmEventKind::RouteResolved`] event.
    pub fn resolve_route(&self) -> Result<()> {
        if self.peer_addr().is_none() {
            return Err(cm_err(
                "rdma_resolve_route",
                libc::EINVAL,
                "the address is not resolved yet (rdma_resolve_addr first)".into(),
            ));
        }
        self.set_state("ROUTE_RESOLVED");
        self.event(CmEventKind::RouteResolved, vec![]);
        Ok(())
    }

    /// Creates the ID's QP on `pd` (`rdma_create_qp`): an RC QP in the TCP or IB port
    /// space, moved to INIT (the connection brings it to RTS); a UD QP in the UDP or IB
    /// port space, moved to RTS at once with [`RDMA_UDP_QKEY`].
    pub fn create_qp(&self, pd: &ProtectionDomain, init: QpInitAttr) -> Result<Arc<QueuePair>> {
        self.check_qp_type(init.qp_type)?;
        let qp = Arc::new(pd.create_qp(init)?);
        ready(&qp)?;
        self.set_qp(Some(QpRef::Owned(qp.clone())));
        Ok(qp)
    }

    /// Makes `qp` the ID's QP (a QP the caller created and keeps: the ID holds it weakly,
    /// and the CM moves it to RTR and RTS as the connection forms), moving it to INIT (RC)
    /// or RTS (UD) if it is in RESET (`rdma_create_qp` of librdmacm, whose QP is the
    /// library's own).
    pub fn attach_qp(&self, qp: &Arc<QueuePair>) -> Result<()> {
        self.check_qp_type(qp.qp_type())?;
        if qp.query().state == Some(QpState::Reset) {
            ready(qp)?;
        }
        self.set_qp(Some(QpRef::Attached(Arc::downgrade(qp))));
        Ok(())
    }

    /// Whether a QP of type `t` fits the ID's port space (rdma_cm's rule: TCP is RC, UDP
    /// is UD, IB takes either).
    fn check_qp_type(&self, t: QpType) -> Result<()> {
        let fits = match self.inner.ps {
            PortSpace::Tcp => t == QpType::Rc,
            PortSpace::Udp => t == QpType::Ud,
            PortSpace::Ib => t != QpType::Uc,
        };
        if fits {
            return Ok(());
        }
        Err(cm_err(
            "rdma_create_qp",
            libc::EINVAL,
            format!(
                "a {t:?} QP does not fit an ID of port space {:?} (TCP takes RC, UDP takes UD)",
                self.inner.ps
            ),
        ))
    }

    /// Whether the ID finds a UD peer (SIDR) rather than connecting: the UDP port space,
    /// or the IB one with a UD QP.
    fn is_ud(&self) -> bool {
        match self.inner.ps {
            PortSpace::Udp => true,
            PortSpace::Tcp => false,
            PortSpace::Ib => self.qp().is_some_and(|q| q.qp_type() == QpType::Ud),
        }
    }

    /// Forgets the ID's QP (`rdma_destroy_qp`).
    pub fn detach_qp(&self) {
        self.set_qp(None);
    }

    /// Sets the ID's QP and publishes its line again (the QPN shows in it).
    fn set_qp(&self, qp: Option<QpRef>) {
        let state = {
            let mut st = self.st();
            st.qp = qp;
            st.state
        };
        self.set_state(state);
    }

    /// The attributes that move the ID's QP to `state` (`rdma_init_qp_attr`), for a
    /// caller that moves its own QP: INIT (RC: port, P_Key index and every remote access;
    /// UD: and [`RDMA_UDP_QKEY`]); RTR and RTS once the connection's parameters are known
    /// (a passive ID from its connect request on, an active one from the peer's REP on;
    /// a UD QP needs none).
    pub fn init_qp_attr(&self, state: QpState) -> Result<QpAttr> {
        let verb = "rdma_init_qp_attr";
        let ud = self.is_ud();
        let (local, peer) = (self.inner.ctx.addr(), self.peer_addr());
        let conn = {
            let st = self.st();
            match (&st.req, &st.rep, st.listening) {
                (Some(req), Some(rep), _) => Some(active_conn(
                    req,
                    rep,
                    st.param.as_ref().unwrap_or(&ConnParam::default()),
                    self.inner.ctx.active_mtu(),
                )),
                (Some(req), None, None) if st.passive => {
                    let param = st.param.clone().unwrap_or(ConnParam {
                        responder_resources: req.initiator_depth,
                        initiator_depth: req.responder_resources,
                        ..ConnParam::default()
                    });
                    drop(st);
                    self.passive_conn_opt(&param)
                }
                _ => None,
            }
        };
        match (state, ud) {
            (QpState::Init, _) => Ok(QpAttr {
                state: Some(QpState::Init),
                pkey_index: Some(0),
                port: Some(1),
                qkey: ud.then_some(RDMA_UDP_QKEY),
                access_flags: (!ud).then_some(ALL_ACCESS),
                ..Default::default()
            }),
            (QpState::Rtr | QpState::Rts, true) => Ok(QpAttr {
                state: Some(state),
                sq_psn: (state == QpState::Rts).then_some(Psn::new(0)),
                ..Default::default()
            }),
            (QpState::Rtr | QpState::Rts, false) => {
                let (Some(c), Some(peer)) = (conn, peer) else {
                    return Err(cm_err(
                        verb,
                        libc::EINVAL,
                        format!(
                            "{state:?} needs the connection's parameters: a connect \
                             request, or the peer's reply"
                        ),
                    ));
                };
                Ok(if state == QpState::Rtr {
                    rtr_attr(local, peer.ip(), &c)
                } else {
                    rts_attr(&c)
                })
            }
            (other, _) => Err(cm_err(
                verb,
                libc::EINVAL,
                format!("{other:?}: only INIT, RTR and RTS have attributes to give"),
            )),
        }
    }

    /// [`Self::passive_conn`] for the request this passive ID holds, if it holds one.
    fn passive_conn_opt(&self, param: &ConnParam) -> Option<Conn> {
        let req = self.st().req.clone()?;
        Some(self.passive_conn(&req, param))
    }

    /// The passive side's connection: it sends from the REQ's PSN and expects its own
    /// (see the module docs).
    fn passive_conn(&self, req: &ReqRepr, param: &ConnParam) -> Conn {
        let (rq_psn, ack_timeout) = {
            let st = self.st();
            (st.rq_psn, st.ack_timeout)
        };
        Conn {
            dest_qpn: req.local_qpn,
            rq_psn,
            sq_psn: req.starting_psn,
            mtu: mtu_min(req.path_mtu, self.inner.ctx.active_mtu()),
            timeout: ack_timeout.unwrap_or(req.primary.local_ack_timeout).max(1),
            retry: req.retry_count,
            rnr_retry: param.rnr_retry_count.min(7),
            rd_atomic: param.initiator_depth.min(req.responder_resources).max(1),
            dest_rd_atomic: param.responder_resources.max(1),
            tclass: req.primary.traffic_class,
        }
    }

    /// Sends the ID's events from now on to `chan` (`rdma_migrate_id`); events already
    /// queued stay where they are.
    pub fn migrate(&self, chan: &EventChannel) {
        *self.inner.chan.lock() = chan.inner.clone();
    }

    /// A number the caller keeps with the ID (the C library's own object), 0 until set.
    pub fn user(&self) -> usize {
        self.inner.user.load(Ordering::Relaxed)
    }

    /// Sets [`CmId::user`].
    pub fn set_user(&self, v: usize) {
        self.inner.user.store(v, Ordering::Relaxed);
    }

    /// The port space the ID was made in.
    pub fn port_space(&self) -> PortSpace {
        self.inner.ps
    }

    /// Asks the resolved peer to connect (`rdma_connect`); a UD ID asks for the peer's
    /// QP instead (a SIDR_REQ).
    pub fn connect(&self, param: &ConnParam) -> Result<()> {
        if self.is_ud() {
            return self.resolve_service(param);
        }
        let verb = "rdma_connect";
        let (local, peer, pd) = self.request::<{ wire::private_len::REQ }>(
            verb,
            &param.private_data,
            ("a connect", "the ID is connecting or connected"),
        )?;
        let qp = self.qp();
        let (local_qpn, srq) = announced_qp(verb, qp.as_deref(), param)?;
        let req = ReqRepr {
            local_comm_id: 0,
            service_id: wire::ip_service_id(self.inner.ps.code(), peer.port()),
            local_ca_guid: 0,
            local_qkey: 0,
            local_qpn,
            responder_resources: param.responder_resources,
            local_eecn: 0,
            initiator_depth: param.initiator_depth,
            remote_eecn: 0,
            remote_cm_response_timeout: RESPONSE_TIMEOUT,
            transport: TransportService::Rc,
            end_to_end_flow_control: false,
            // What our receive queue expects first (see the module docs).
            starting_psn: random_psn(),
            local_cm_response_timeout: RESPONSE_TIMEOUT,
            retry_count: param.retry_count.min(7),
            pkey: 0xFFFF,
            path_mtu: self.inner.ctx.active_mtu() as u8,
            rdc_exists: false,
            rnr_retry_count: param.rnr_retry_count.min(7),
            max_cm_retries: MAX_CM_RETRIES,
            // IBTA 12.6.5: whether the sender's QP takes its receives from an SRQ (the
            // REP's bit says the same of the acceptor's, IBTA 12.6.8).
            srq,
            primary: {
                let st = self.st();
                path(local.ip(), peer.ip(), st.tos, st.ack_timeout)
            },
            alternate: PathRepr::default(),
            sap_supported: false,
            private_data: PrivateData(pd),
        };
        let core = &self.inner.core;
        let mut cs = core.agent();
        let id = cs.agent.connect(core.now(), peer.ip(), req);
        cs.ids.insert(id, Arc::downgrade(&self.inner));
        {
            let mut st = self.st();
            st.comm = Some(id);
            st.req = Some(Box::new(req));
            st.param = Some(param.clone());
        }
        self.set_state("CONNECT");
        core.settle(&mut cs);
        Ok(())
    }

    /// What a REQ or SIDR_REQ of this ID needs: its address, its resolved peer's, and the
    /// private data of `N` bytes with the IP CM header (Annex A11.6) before `user`. Errors
    /// name `verb`: `user` longer than the message carries (`what.0` names the message),
    /// a route not resolved, or a request already under way (`what.1` says so).
    fn request<const N: usize>(
        &self,
        verb: &'static str,
        user: &[u8],
        what: (&str, &str),
    ) -> Result<(SocketAddr, SocketAddr, [u8; N])> {
        let user_max = N - IpCmHeader::LEN;
        if user.len() > user_max {
            return Err(cm_err(
                verb,
                libc::EINVAL,
                format!(
                    "{} bytes of private data; {} carries {user_max}",
                    user.len(),
                    what.0
                ),
            ));
        }
        let st = self.st();
        let (Some(local), Some(peer)) = (st.local, st.peer) else {
            return Err(cm_err(
                verb,
                libc::EINVAL,
                "the route is not resolved yet".into(),
            ));
        };
        if st.comm.is_some() {
            return Err(cm_err(verb, libc::EISCONN, what.1.into()));
        }
        let mut pd = [0u8; N];
        IpCmHeader {
            version: 0,
            src_port: local.port(),
            src: local.ip(),
            dst: peer.ip(),
        }
        .emit(&mut pd);
        pd[IpCmHeader::LEN..IpCmHeader::LEN + user.len()].copy_from_slice(user);
        Ok((local, peer, pd))
    }

    /// Asks the peer's service for its UD QP (the UD `rdma_connect`): a SIDR_REQ with the
    /// IP CM header and `param`'s private data; [`CmEventKind::Established`] brings the
    /// answer.
    fn resolve_service(&self, param: &ConnParam) -> Result<()> {
        let (_, peer, pd) = self.request::<{ wire::private_len::SIDR_REQ }>(
            "rdma_connect",
            &param.private_data,
            ("a UD connect", "the ID is resolving its peer already"),
        )?;
        let req = SidrReqRepr {
            request_id: 0,
            pkey: 0xFFFF,
            service_id: wire::ip_service_id(self.inner.ps.code(), peer.port()),
            private_data: PrivateData(pd),
        };
        let core = &self.inner.core;
        let mut cs = core.agent();
        let id = cs.agent.sidr_request(core.now(), peer.ip(), req);
        cs.ids.insert(id, Arc::downgrade(&self.inner));
        self.st().comm = Some(id);
        self.set_state("CONNECT");
        core.settle(&mut cs);
        Ok(())
    }

    /// Answers the SIDR_REQ this passive UD ID was made for with `status` (and, when
    /// valid, its QP and [`RDMA_UDP_QKEY`]).
    fn answer_sidr(&self, verb: &'static str, status: u8, private_data: &[u8]) -> Result<()> {
        let pd = PrivateData::from_slice(private_data).ok_or_else(|| {
            cm_err(
                verb,
                libc::EINVAL,
                format!(
                    "{} bytes of private data; a UD answer carries {}",
                    private_data.len(),
                    wire::private_len::SIDR_REP
                ),
            )
        })?;
        let valid = status == wire::sidr_status::VALID;
        let (id, qp) = {
            let st = self.st();
            (st.comm, st.qp.as_ref().and_then(QpRef::get))
        };
        let Some(id) = id else {
            return Err(cm_err(verb, libc::EINVAL, "the ID holds no request".into()));
        };
        let qpn = match qp {
            Some(q) => q.qp_num().value(),
            None if valid => {
                return Err(cm_err(
                    verb,
                    libc::EINVAL,
                    "the ID has no QP (rdma_create_qp first)".into(),
                ));
            }
            None => 0,
        };
        let rep = wire::SidrRepRepr {
            request_id: 0,
            status,
            info: Default::default(),
            qpn: if valid { qpn } else { 0 },
            service_id: 0,
            qkey: if valid { RDMA_UDP_QKEY } else { 0 },
            private_data: pd,
        };
        let core = &self.inner.core;
        let mut cs = core.agent();
        cs.agent
            .sidr_reply(core.now(), id, rep)
            .map_err(|e| cm_err(verb, libc::EINVAL, e.to_string()))?;
        // The agent keeps the answer for duplicates; the ID is done with the exchange.
        cs.ids.remove(&id);
        {
            let mut st = self.st();
            st.comm = None;
            st.sidr = None;
        }
        self.set_state(if valid { "CONNECT" } else { "IDLE" });
        core.settle(&mut cs);
        Ok(())
    }

    /// Accepts the connection request this ID was made for (`rdma_accept`): its QP goes
    /// to RTS, and the REP carries `param`. A UD ID answers its SIDR_REQ with its QP.
    pub fn accept(&self, param: &ConnParam) -> Result<()> {
        let verb = "rdma_accept";
        if self.st().sidr.is_some() {
            return self.answer_sidr(verb, wire::sidr_status::VALID, &param.private_data);
        }
        let (id, req, peer, qp) = {
            let st = self.st();
            let (Some(id), Some(req), Some(peer)) = (st.comm, st.req.clone(), st.peer) else {
                return Err(cm_err(
                    verb,
                    libc::EINVAL,
                    "the ID holds no connection request".into(),
                ));
            };
            (id, req, peer, st.qp.as_ref().and_then(QpRef::get))
        };
        let (local_qpn, srq) = announced_qp(verb, qp.as_deref(), param)?;
        let pd = PrivateData::from_slice(&param.private_data).ok_or_else(|| {
            cm_err(
                verb,
                libc::EINVAL,
                format!(
                    "{} bytes of private data; an accept carries {}",
                    param.private_data.len(),
                    wire::private_len::REP
                ),
            )
        })?;
        let conn = self.passive_conn(&req, param);
        let rq_psn = conn.rq_psn;
        // The program's own QP it moves itself, with init_qp_attr's values (these).
        if let Some(qp) = &qp {
            to_rts(qp, self.inner.ctx.addr(), peer.ip(), conn)?;
        }
        let rep = RepRepr {
            local_comm_id: 0,
            remote_comm_id: 0,
            local_qkey: 0,
            local_qpn,
            local_eecn: 0,
            starting_psn: rq_psn,
            responder_resources: param.responder_resources,
            initiator_depth: param.initiator_depth,
            target_ack_delay: crate::config::limits::LOCAL_CA_ACK_DELAY as u8,
            failover_accepted: 0,
            end_to_end_flow_control: false,
            rnr_retry_count: param.rnr_retry_count.min(7),
            srq,
            local_ca_guid: 0,
            private_data: pd,
        };
        let core = &self.inner.core;
        let mut cs = core.agent();
        cs.agent
            .accept(core.now(), id, rep)
            .map_err(|e| cm_err(verb, libc::EINVAL, e.to_string()))?;
        self.st().param = Some(param.clone());
        self.set_state("CONNECT");
        core.settle(&mut cs);
        Ok(())
    }

    /// Rejects the connection request this ID was made for (`rdma_reject`), with the
    /// consumer's reason (28) and `private_data` (at most 148 bytes).
    pub fn reject(&self, private_data: &[u8]) -> Result<()> {
        self.reject_for(rej_reason::CONSUMER_DEFINED, private_data)
    }

    /// Rejects the connection request with `reason` (a REJ reason code, such as
    /// `rej_reason::VENDOR_OPTION_NOT_SUPPORTED` for `rdma_reject_ece`).
    pub fn reject_for(&self, reason: u16, private_data: &[u8]) -> Result<()> {
        if self.st().sidr.is_some() {
            return self.answer_sidr("rdma_reject", wire::sidr_status::REJECTED, private_data);
        }
        self.agent_verb("rdma_reject", |a, now, id| {
            a.reject(now, id, reason, private_data)
        })
    }

    /// Sends the RTU after a [`CmEventKind::ConnectResponse`] (`rdma_establish`).
    pub fn establish(&self) -> Result<()> {
        self.agent_verb("rdma_establish", |a, _, id| a.ready_to_use(id, &[]))
    }

    /// Sets the type of service of the ID's connection (`RDMA_OPTION_ID_TOS`), before it
    /// connects: the REQ's path carries it as its traffic class, which the peer's packets
    /// take (softrdma's own leave with the device's).
    pub fn set_tos(&self, tos: u8) {
        self.st().tos = tos;
    }

    /// Sets the ACK timeout (4.096 µs × 2^`timeout`) of the ID's RC QP
    /// (`RDMA_OPTION_ID_ACK_TIMEOUT`), before it connects or accepts: it replaces the
    /// default 14 (67 ms) on the active side, and the REQ's on the passive side. EINVAL
    /// past 31, the field's width.
    pub fn set_ack_timeout(&self, timeout: u8) -> Result<()> {
        if timeout > 31 {
            return Err(cm_err(
                "rdma_set_option",
                libc::EINVAL,
                format!("ACK timeout {timeout}: the field holds 0 to 31"),
            ));
        }
        self.st().ack_timeout = Some(timeout);
        Ok(())
    }

    /// Tells the CM of an event seen on the ID's QP (`rdma_notify`): only
    /// [`NotifyEvent::CommEstablished`], traffic that arrived on a passive ID's QP before
    /// the peer's RTU did, which then stands in for the RTU (IBTA 12.9.6.2), with an
    /// [`CmEventKind::Established`] event. Nothing happens on an established ID.
    pub fn notify(&self, event: NotifyEvent) -> Result<()> {
        match event {
            NotifyEvent::CommEstablished => {
                self.agent_verb("rdma_notify", |a, _, id| a.establish(id))
            }
        }
    }

    /// Joins the multicast group `group` (`rdma_join_multicast`): an ID of the UDP or IB
    /// port space whose address is bound or resolved (and not yet routed: rdma_cm's
    /// rule), on a device of the group's family. On RoCE v2 the group is an IP multicast
    /// group (its GID an IPv4 group's mapped address, or the IPv6 group itself), joined
    /// on the device's interface, so no subnet manager is asked. The ID's QP, if it has
    /// one, is attached to the group unless `send_only`, and a
    /// [`CmEventKind::MulticastJoin`] event follows, whose [`CmEvent::ud`] gives what a
    /// send to the group takes.
    pub fn join_multicast(&self, group: IpAddr, send_only: bool) -> Result<()> {
        let verb = "rdma_join_multicast";
        let group = group.to_canonical();
        let dev = self.inner.ctx.addr();
        let bad = |why: String| Err(cm_err(verb, libc::EINVAL, why));
        if self.inner.ps == PortSpace::Tcp || self.qp().is_some_and(|q| q.qp_type() != QpType::Ud) {
            return bad(
                "only a UD ID (port space UDP, or IB with a UD QP) joins a multicast group".into(),
            );
        }
        if !group.is_multicast() {
            return bad(format!("{group} is not a multicast address"));
        }
        if group.is_ipv4() != dev.to_canonical().is_ipv4() {
            return bad(format!(
                "device {} is on {dev}, which cannot join the group {group}",
                self.inner.ctx.name()
            ));
        }
        let state = self.st().state;
        if !matches!(state, "ADDR_BOUND" | "ADDR_RESOLVED") {
            return bad(format!(
                "the ID is {state}: bind or resolve its address first (and join before \
                 resolving the route)"
            ));
        }
        if self.st().groups.iter().any(|(g, _)| *g == group) {
            return Err(cm_err(
                verb,
                libc::EADDRINUSE,
                format!("the ID has joined {group} already"),
            ));
        }
        if !send_only && let Some(qp) = self.qp() {
            qp.attach_mcast(gid_of(group)).map_err(|e| {
                if group.is_ipv6() && e.errno() == libc::EOPNOTSUPP {
                    // Linux's loopback interface carries no IPv6 multicast (`lo` is not
                    // marked for it): the device cannot carry the group.
                    cm_err(
                        verb,
                        libc::EOPNOTSUPP,
                        format!(
                            "device {} is on {dev}, whose interface carries no IPv6 \
                             multicast ({e}); use an IPv4 device, or one on an interface \
                             with multicast",
                            self.inner.ctx.name()
                        ),
                    )
                } else {
                    e
                }
            })?;
        }
        self.st().groups.push((group, send_only));
        self.inner.chan().push(CmEvent {
            kind: CmEventKind::MulticastJoin { group },
            id: self.clone(),
            listen_id: None,
            private_data: vec![],
            peer: None,
            ud: Some(UdParam {
                qp_num: MULTICAST_QPN,
                qkey: RDMA_UDP_QKEY,
            }),
        });
        Ok(())
    }

    /// Leaves the multicast group `group` (`rdma_leave_multicast`): the ID's QP is
    /// detached from it. EADDRNOTAVAIL if the ID did not join it.
    pub fn leave_multicast(&self, group: IpAddr) -> Result<()> {
        let group = group.to_canonical();
        let joined = {
            let mut st = self.st();
            let at = st.groups.iter().position(|(g, _)| *g == group);
            at.map(|i| st.groups.remove(i))
        };
        let Some((_, send_only)) = joined else {
            return Err(cm_err(
                "rdma_leave_multicast",
                libc::EADDRNOTAVAIL,
                format!("the ID has not joined {group}"),
            ));
        };
        if !send_only && let Some(qp) = self.qp() {
            // A QP attached elsewhere, or detached by its owner, has nothing to undo.
            let _ = qp.detach_mcast(gid_of(group));
        }
        Ok(())
    }

    /// Ends the connection (`rdma_disconnect`): its QP goes to ERROR (its WRs flush), and
    /// the peer gets a DREQ, or the DREP for its own.
    pub fn disconnect(&self) -> Result<()> {
        if let Some(qp) = self.qp() {
            let _ = qp.modify(&QpAttr {
                state: Some(QpState::Error),
                ..Default::default()
            });
        }
        self.agent_verb("rdma_disconnect", |a, now, id| a.disconnect(now, id, &[]))?;
        self.set_state("DISCONNECT");
        Ok(())
    }

    fn agent_verb(
        &self,
        verb: &'static str,
        f: impl FnOnce(
            &mut CmAgent<IpAddr>,
            Instant,
            CommId,
        ) -> std::result::Result<(), softrdma_proto::cm::CmError>,
    ) -> Result<()> {
        let Some(id) = self.st().comm else {
            return Err(cm_err(
                verb,
                libc::EINVAL,
                "the ID has no connection".into(),
            ));
        };
        let core = &self.inner.core;
        let mut cs = core.agent();
        f(&mut cs.agent, core.now(), id).map_err(|e| cm_err(verb, libc::EINVAL, e.to_string()))?;
        core.settle(&mut cs);
        Ok(())
    }
}

/// The GID of an IP address (an IPv4 address's is its mapped form).
fn gid_of(ip: IpAddr) -> std::net::Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// The QP events a program may pass on to the CM (`rdma_notify`'s `enum ibv_event_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotifyEvent {
    /// IBV_EVENT_COMM_EST: the QP received before the connection was established.
    CommEstablished,
}

fn cm_err(verb: &'static str, errno: i32, why: String) -> Error {
    Error::Cm { verb, errno, why }
}

fn random_psn() -> u32 {
    rand::random::<u32>() & 0xFF_FFFF
}

/// Moves a new QP to where rdma_cm leaves it: an RC QP to INIT (the connection brings it
/// to RTS), a UD QP through to RTS with [`RDMA_UDP_QKEY`] (it needs no peer).
fn ready(qp: &QueuePair) -> Result<()> {
    if qp.qp_type() != QpType::Ud {
        return to_init(qp);
    }
    qp.modify(&QpAttr {
        state: Some(QpState::Init),
        pkey_index: Some(0),
        port: Some(1),
        qkey: Some(RDMA_UDP_QKEY),
        ..Default::default()
    })?;
    qp.modify(&QpAttr {
        state: Some(QpState::Rtr),
        ..Default::default()
    })?;
    qp.modify(&QpAttr {
        state: Some(QpState::Rts),
        sq_psn: Some(Psn::new(0)),
        ..Default::default()
    })
}

/// The access rights rdma_cm gives its QPs: every remote one.
const ALL_ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_ATOMIC);

/// Moves a new QP to INIT with every remote access right, as rdma_cm's QPs get.
fn to_init(qp: &QueuePair) -> Result<()> {
    qp.modify(&QpAttr {
        state: Some(QpState::Init),
        pkey_index: Some(0),
        port: Some(1),
        access_flags: Some(ALL_ACCESS),
        ..Default::default()
    })
}

/// A RoCE v2 path between two addresses: GIDs are the addresses (IPv4-mapped), LIDs the
/// permissive 0xFFFF as rxe sends them, hop limit 64, with the ID's type of service and
/// ACK timeout (ours by default).
fn path(local: IpAddr, remote: IpAddr, tos: u8, ack_timeout: Option<u8>) -> PathRepr {
    PathRepr {
        local_lid: 0xFFFF,
        remote_lid: 0xFFFF,
        local_gid: gid_of(local).octets(),
        remote_gid: gid_of(remote).octets(),
        hop_limit: 64,
        traffic_class: tos,
        local_ack_timeout: ack_timeout.unwrap_or(ACK_TIMEOUT),
        ..PathRepr::default()
    }
}

fn mtu_min(code: u8, ours: Mtu) -> Mtu {
    [Mtu::M256, Mtu::M512, Mtu::M1024, Mtu::M2048, Mtu::M4096]
        .into_iter()
        .find(|m| *m as u8 == code)
        .map_or(ours, |m| m.min(ours))
}

/// What a connected QP is brought to RTS with.
struct Conn {
    dest_qpn: u32,
    rq_psn: u32,
    sq_psn: u32,
    mtu: Mtu,
    timeout: u8,
    retry: u8,
    rnr_retry: u8,
    rd_atomic: u8,
    dest_rd_atomic: u8,
    /// The traffic class of the REQ's primary path, which both sides' QPs send with.
    tclass: u8,
}

/// The active side's connection: it sends from the REP's PSN and expects its REQ's, and
/// waits for ACKs as long as its REQ announced.
fn active_conn(req: &ReqRepr, rep: &RepRepr, param: &ConnParam, ours: Mtu) -> Conn {
    Conn {
        dest_qpn: rep.local_qpn,
        rq_psn: req.starting_psn,
        sq_psn: rep.starting_psn,
        mtu: mtu_min(req.path_mtu, ours),
        timeout: req.primary.local_ack_timeout.max(1),
        retry: param.retry_count,
        rnr_retry: rep.rnr_retry_count,
        rd_atomic: param.initiator_depth.min(rep.responder_resources).max(1),
        dest_rd_atomic: param.responder_resources.max(1),
        tclass: req.primary.traffic_class,
    }
}

/// The move to RTR.
fn rtr_attr(local: IpAddr, peer: IpAddr, c: &Conn) -> QpAttr {
    QpAttr {
        state: Some(QpState::Rtr),
        av: Some(AddressVector {
            src: local,
            dst: peer,
            flow_label: 0,
            traffic_class: c.tclass,
        }),
        path_mtu: Some(c.mtu),
        dest_qpn: Some(Qpn::new(c.dest_qpn)),
        rq_psn: Some(Psn::new(c.rq_psn)),
        max_dest_rd_atomic: Some(c.dest_rd_atomic),
        min_rnr_timer: Some(12),
        ..Default::default()
    }
}

/// The move to RTS.
fn rts_attr(c: &Conn) -> QpAttr {
    QpAttr {
        state: Some(QpState::Rts),
        sq_psn: Some(Psn::new(c.sq_psn)),
        timeout: Some(c.timeout),
        retry_cnt: Some(c.retry.min(7)),
        rnr_retry: Some(c.rnr_retry),
        max_rd_atomic: Some(c.rd_atomic),
        ..Default::default()
    }
}

fn to_rts(qp: &QueuePair, local: IpAddr, peer: IpAddr, c: Conn) -> Result<()> {
    qp.modify(&rtr_attr(local, peer, &c))?;
    qp.modify(&rts_attr(&c))
}

/// What a dropped ID leaves for the agent to end (see `IdInner`'s drop).
struct Ended {
    listening: Option<u64>,
    comm: Option<CommId>,
    bound: Option<u64>,
}

/// A device's CM: its agent, QP1, and the thread that serves them.
struct Core {
    ctx: Context,
    /// QP1's receive completions, whose channel wakes the CM thread or runs the agent
    /// inline (see `inline_service`).
    cq: CompletionQueue,
    /// QP1's send completions, apart from its receives' so that a MAD sent does not wake
    /// anyone: emptied before each send.
    send_cq: CompletionQueue,
    chan: CompletionChannel,
    qp: QueuePair,
    /// QP1's receive buffers, one region of [`GSI_RECVS`] slots of [`GSI_BUF`] bytes.
    bufs: crate::verbs::mr::MemoryRegion,
    st: Lock<CoreSt>,
    /// Listens and connections of IDs dropped, for the thread to end (see `IdInner`'s
    /// drop).
    dropped: Lock<Vec<Ended>>,
    wake: Arc<OwnedFd>,
    /// Whether the core still serves: cleared by the CM thread as it leaves, under this
    /// lock, which a receiving thread holds while it runs the agent inline (see
    /// `inline_service`), so that the last hold on the core never goes on a thread that
    /// the core's drop would have to join (the progress thread).
    gate: Arc<Lock<bool>>,
    /// The CM thread's alarm: set to the agent's next deadline by whoever runs the agent
    /// and finds that deadline earlier than the one set, so that a verb that arms a timer
    /// (a connect's REQ resend) need not wake the thread to have it sleep less.
    timer: nix::sys::timerfd::TimerFd,
    /// When [`Core::timer`] goes off (nanoseconds on [`Core::now`], `u64::MAX` for
    /// never), written with it under the agent's mutex.
    sleep_until: AtomicU64,
    epoch: std::time::Instant,
    next_send: AtomicU64,
}

struct CoreSt {
    agent: CmAgent<IpAddr>,
    ids: HashMap<CommId, Weak<IdInner>>,
    listeners: HashMap<u64, Weak<IdInner>>,
}

/// The device's CM agent and QP1 held up with no ID open: in a process that owns a shared
/// device (`softrdma service`), so that MADs that name no process's agent still get the
/// answer IBTA gives (a REJ for a REQ nobody listens for, a DREP for an unknown DREQ)
/// instead of a requester's timeout.
pub struct CmPort {
    _core: Arc<Core>,
}

impl CmPort {
    /// Starts (or joins) the agent of `ctx`'s device.
    pub fn open(ctx: &Context) -> Result<CmPort> {
        Ok(CmPort {
            _core: Core::of(ctx)?,
        })
    }
}

/// At `exit(3)`, every connection of the process ends as destroying its ID would end it
/// (a DREQ for an established one, a REJ for one that forms): a program that exits
/// without `rdma_disconnect` (qperf's server, after each test) must not leave its peer
/// resending a DREQ to nobody for seconds, which is what the kernel spares programs on
/// Linux by closing their IDs when their file closes. A `kill -9` still leaves the peers
/// to their timeouts.
extern "C" fn at_exit() {
    // On a thread of its own: this one's thread-locals (the device's send batch) may be
    // gone already, as exit(3) runs their destructors first.
    let _ = std::thread::Builder::new()
        .name("softrdma-exit".into())
        .spawn(end_all)
        .map(|t| t.join());
}

/// How long the exit waits for an agent that another thread holds.
const EXIT_WAIT: Duration = Duration::from_secs(1);

/// Ends every connection of every core (see [`at_exit`]).
fn end_all() {
    let cores: Vec<Arc<Core>> = CORES
        .lock()
        .iter()
        .filter_map(|c| c.core.upgrade())
        .collect();
    for core in cores {
        // The CM thread holds the agent for a pass at a time: wait it out, but not for
        // ever, since the thread that called exit(3) may hold it (from a signal handler)
        // and waits for this one.
        let until = std::time::Instant::now() + EXIT_WAIT;
        let cs = loop {
            match core.try_agent() {
                Some(cs) => break Some(cs),
                None if std::time::Instant::now() >= until => break None,
                None => std::thread::sleep(Duration::from_millis(1)),
            }
        };
        if let Some(mut cs) = cs {
            let now = core.now();
            cs.agent.destroy_all(now);
            while let Some((to, mad)) = cs.agent.poll_transmit() {
                core.send(to, &mad);
            }
        }
    }
}

thread_local! {
    /// How many agents' mutexes this thread holds (see [`AgentGuard`]).
    static HOLDS_AGENT: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// A held agent mutex, counted in [`HOLDS_AGENT`] while it is held: a thread that holds
/// none may wait for one (an ID's drop, which must send its DREP before it returns),
/// while one that holds an agent already (the last handle of an ID dropped while an event
/// is dispatched) must not, for the agents' mutexes are not ordered.
struct AgentGuard<'a>(crate::sync::Guard<'a, CoreSt>);

impl<'a> AgentGuard<'a> {
    fn new(g: crate::sync::Guard<'a, CoreSt>) -> Self {
        HOLDS_AGENT.with(|h| h.set(h.get() + 1));
        Self(g)
    }

    /// Whether this thread holds an agent's mutex.
    fn held_here() -> bool {
        HOLDS_AGENT.with(|h| h.get() > 0)
    }
}

impl Drop for AgentGuard<'_> {
    fn drop(&mut self) {
        HOLDS_AGENT.with(|h| h.set(h.get().saturating_sub(1)));
    }
}

impl std::ops::Deref for AgentGuard<'_> {
    type Target = CoreSt;
    fn deref(&self) -> &CoreSt {
        &self.0
    }
}

impl std::ops::DerefMut for AgentGuard<'_> {
    fn deref_mut(&mut self) -> &mut CoreSt {
        &mut self.0
    }
}

/// The cores by device, so that every ID on a device shares one agent and one QP1. A core
/// leaves the list only under its lock (see `serve`), so that an ID made meanwhile either
/// finds it with its thread still serving, or makes a new one.
static CORES: Lock<Vec<CoreEntry>> = Lock::new(Rank::CmCores, Vec::new());

/// One device's core in [`CORES`].
struct CoreEntry {
    /// The `Arc<Device>`'s address.
    key: usize,
    core: Weak<Core>,
    /// Its device, reached without holding the core up (see [`release_pollers`]).
    dev: Weak<Device>,
}

/// How long a core outlives its last ID while its context is still the application's:
/// a program that connects, disconnects and connects again (perftest `-R`, which makes
/// a new connection for its data after its parameter exchange, or one connection after
/// another) would otherwise make QP1, its receives and the CM thread again each time,
/// about 100 µs of each connection's setup. On Linux the CM is always there.
const LINGER: Duration = Duration::from_secs(1);

impl Core {
    fn of(ctx: &Context) -> Result<Arc<Core>> {
        let key = Arc::as_ptr(ctx.dev()) as usize;
        let mut cores = CORES.lock();
        cores.retain(|c| c.core.strong_count() > 0);
        if let Some(c) = cores
            .iter()
            .find(|c| c.key == key)
            .and_then(|c| c.core.upgrade())
        {
            return Ok(c);
        }
        // The device's previous core may still be going: its last handle went on the CM
        // thread, which drops it (and QP1 with it) a moment later. QP1 is this process's
        // alone, so it is free again within that moment.
        let deadline = std::time::Instant::now() + Duration::from_secs(1);
        let before = ctx.handles();
        let core = loop {
            match Core::new(ctx) {
                Err(Error::Cm {
                    errno: libc::EBUSY, ..
                }) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                r => break Arc::new(r?),
            }
        };
        // The context's handles the core holds itself (its own, its PD's, CQ's, QP's...):
        // more than these, and the application still has the device.
        let own = ctx.handles().saturating_sub(before);
        cores.push(CoreEntry {
            key,
            core: Arc::downgrade(&core),
            dev: Arc::downgrade(ctx.dev()),
        });
        static AT_EXIT: std::sync::Once = std::sync::Once::new();
        // SAFETY: atexit takes a function that lives as long as the program.
        AT_EXIT.call_once(|| unsafe {
            libc::atexit(at_exit);
        });
        let (weak, gate, wake) = (Arc::downgrade(&core), core.gate.clone(), core.wake.clone());
        let _ = core
            .chan
            .inner
            .inline
            .set(Box::new(move || inline_service(&weak, &gate, &wake)));
        // Receive passes on the device open a scope for the consumer from now on.
        ctx.dev().inline_consumers.store(true, Ordering::Relaxed);
        let held = core.clone();
        std::thread::Builder::new()
            .name("softrdma-cm".into())
            .spawn(move || serve(held, own))
            .map_err(Error::io("rdma_create_id"))?;
        Ok(core)
    }

    fn new(ctx: &Context) -> Result<Core> {
        let pd = ctx.alloc_pd();
        let chan = ctx.create_comp_channel()?;
        let cq = ctx.create_cq(4 * GSI_RECVS as usize, Some(&chan))?;
        let send_cq = ctx.create_cq(512, None)?;
        let qp = pd.create_gsi_qp(QpInitAttr {
            cap: QpCaps {
                max_send_wr: 256,
                max_recv_wr: GSI_RECVS as u32,
                max_send_sge: 1,
                max_recv_sge: 1,
                // A MAD goes inline: no region per send.
                max_inline_data: wire::MAD_LEN as u32,
            },
            sq_sig_all: true,
            send_cq: send_cq.clone(),
            ..QpInitAttr::new(QpType::Ud, &cq)
        })?;
        qp.connect(
            Psn::new(0),
            &crate::verbs::qp::Peer {
                addr: ctx.addr(),
                qpn: Qpn::new(GSI_QPN),
                psn: Psn::new(0),
            },
            &crate::verbs::qp::ConnectAttr {
                qkey: GSI_QKEY,
                ..Default::default()
            },
        )?;
        let bufs = pd.register(
            vec![0; GSI_RECVS as usize * GSI_BUF],
            AccessFlags::LOCAL_WRITE,
        )?;
        for i in 0..GSI_RECVS {
            post_gsi_recv(&qp, &bufs, i)?;
        }
        cq.req_notify(false)?;
        let seed = rand::random::<u64>();
        let mut agent = CmAgent::new(
            CmConfig {
                ca_guid: ctx.node_guid(),
                ack_delay: crate::config::limits::LOCAL_CA_ACK_DELAY as u8,
                ..CmConfig::default()
            },
            seed,
        );
        // The device's other processes run agents of their own behind the same QP1.
        agent.set_id_tag(ctx.dev().cm_tag());
        Ok(Core {
            ctx: ctx.clone(),
            cq,
            send_cq,
            chan,
            qp,
            bufs,
            st: Lock::new(
                Rank::CmAgent,
                CoreSt {
                    agent,
                    ids: HashMap::new(),
                    listeners: HashMap::new(),
                },
            ),
            dropped: Lock::new(Rank::CmDropped, Vec::new()),
            wake: Arc::new(eventfd("rdma_create_id", libc::EFD_NONBLOCK)?),
            gate: Arc::new(Lock::new(Rank::CmGate, true)),
            timer: nix::sys::timerfd::TimerFd::new(
                nix::sys::timerfd::ClockId::CLOCK_MONOTONIC,
                nix::sys::timerfd::TimerFlags::TFD_NONBLOCK
                    | nix::sys::timerfd::TimerFlags::TFD_CLOEXEC,
            )
            .map_err(|e| Error::io("rdma_create_id")(e.into()))?,
            sleep_until: AtomicU64::new(u64::MAX),
            epoch: std::time::Instant::now(),
            next_send: AtomicU64::new(SEND_WR_BASE),
        })
    }

    fn now(&self) -> Instant {
        Instant::from_nanos(self.epoch.elapsed().as_nanos() as u64)
    }

    /// The agent's state, once its mutex is free.
    fn agent(&self) -> AgentGuard<'_> {
        AgentGuard::new(self.st.lock())
    }

    /// The agent's state if its mutex is free now (`None` while another holder, this
    /// thread included, has it).
    fn try_agent(&self) -> Option<AgentGuard<'_>> {
        self.st.try_lock().map(AgentGuard::new)
    }

    fn wake(&self) {
        write_eventfd(&self.wake);
    }

    /// Sends what the agent produced and hands out its events ([`Core::flush`]), and
    /// brings the CM thread's alarm forward to the agent's next deadline if that is
    /// earlier: the thread sleeps on, and wakes only when a timer is due.
    fn settle(&self, cs: &mut CoreSt) {
        self.flush(cs);
        self.set_alarm(cs, false);
    }

    /// Sets [`Core::timer`] to the agent's next deadline: when it comes before the one
    /// set, or (`always`, the CM thread after its pass) whenever it differs.
    fn set_alarm(&self, cs: &CoreSt, always: bool) {
        use nix::sys::timerfd::{Expiration, TimerSetTimeFlags};
        let next = cs.agent.poll_timeout().map_or(u64::MAX, |t| t.as_nanos());
        let set = self.sleep_until.load(Ordering::Relaxed);
        if next >= set && !(always && next != set) {
            return;
        }
        self.sleep_until.store(next, Ordering::Relaxed);
        let r = if next == u64::MAX {
            self.timer.unset()
        } else {
            // Relative, and never zero, which would disarm it.
            let d = Duration::from_nanos(next.saturating_sub(self.now().as_nanos()).max(1));
            self.timer.set(
                Expiration::OneShot(nix::sys::time::TimeSpec::from_duration(d)),
                TimerSetTimeFlags::empty(),
            )
        };
        if r.is_err() {
            // The thread looks at the deadline itself.
            self.wake();
        }
    }

    /// Hands the agent what QP1 received and runs its timers; [`Core::flush`] or
    /// [`Core::settle`] then sends and dispatches what came of it.
    fn service(&self, cs: &mut CoreSt) {
        self.reap(cs);
        let mut armed = false;
        loop {
            let wcs = self.cq.poll_placed(64);
            if wcs.is_empty() {
                if armed {
                    break;
                }
                // Completions that came between the last poll and the arm are read again.
                let _ = self.cq.req_notify(false);
                armed = true;
                continue;
            }
            for wc in wcs {
                if wc.opcode != WcOpcode::Recv || wc.wr_id >= GSI_RECVS {
                    continue;
                }
                let mut buf = [0u8; GSI_BUF];
                if wc.status == WcStatus::Success
                    && wc.byte_len as usize >= GSI_BUF
                    && self
                        .bufs
                        .read(wc.wr_id as usize * GSI_BUF, &mut buf)
                        .is_ok()
                    && let Some(src) = grh_source(&buf)
                {
                    let now = self.now();
                    cs.agent.handle_mad(now, src, &buf[40..]);
                }
                // A flushed receive (the QP is going) is not posted again.
                if wc.status == WcStatus::Success {
                    let _ = post_gsi_recv(&self.qp, &self.bufs, wc.wr_id);
                }
            }
        }
        cs.agent.handle_timeout(self.now());
    }

    /// Ends the listens and connections of IDs dropped since (see `IdInner`'s drop).
    fn reap(&self, cs: &mut CoreSt) {
        let dropped = std::mem::take(&mut *self.dropped.lock());
        for ended in dropped {
            self.end(cs, ended);
        }
    }

    /// Ends a dropped ID's listen and connection (see `IdInner`'s drop).
    fn end(
        &self,
        cs: &mut CoreSt,
        Ended {
            listening,
            comm,
            bound,
        }: Ended,
    ) {
        if let Some(sid) = bound.filter(|b| Some(*b) != listening) {
            cs.agent.unbind(sid);
        }
        if let Some(sid) = listening {
            cs.agent.unlisten(self.now(), sid);
            cs.listeners.remove(&sid);
            self.ctx.dev().cm_unlisten(sid);
        }
        if let Some(c) = comm {
            cs.agent.destroy(self.now(), c);
            cs.ids.remove(&c);
        }
    }

    /// Sends what the agent produced and hands its events to the IDs, until both are done
    /// (an event may make the agent send: the RTU after a REP).
    fn flush(&self, cs: &mut CoreSt) {
        loop {
            let mut any = false;
            while let Some((to, mad)) = cs.agent.poll_transmit() {
                any = true;
                self.send(to, &mad);
            }
            while let Some(ev) = cs.agent.poll_event() {
                any = true;
                self.dispatch(cs, ev);
            }
            if !any {
                return;
            }
        }
    }

    fn send(&self, to: IpAddr, mad: &CmMad) {
        if !self.send_cq.is_empty() {
            // Each MAD's completion (QP1's sends are all signalled), which nobody awaits.
            let _ = self.send_cq.poll_placed(usize::MAX);
        }
        let wr = self.next_send.fetch_add(1, Ordering::Relaxed);
        let dest = UdDest {
            src: self.ctx.addr(),
            ip: to,
            qpn: Qpn::new(GSI_QPN),
            qkey: GSI_QKEY,
            traffic_class: 0,
        };
        // A full send queue loses the MAD, as a lost packet would: the agent resends.
        let _ = self.qp.post_send(SendWr {
            wr_id: wr,
            op: SendOp::Send,
            payload: Payload::Inline(mad.to_bytes().to_vec()),
            flags: SendFlags::SIGNALED | SendFlags::INLINE,
            ud: Some(dest),
        });
    }

    fn dispatch(&self, cs: &mut CoreSt, ev: AgentEvent<IpAddr>) {
        let now = self.now();
        let id_of = |cs: &CoreSt, c: CommId| cs.ids.get(&c).and_then(Weak::upgrade);
        match ev {
            AgentEvent::ReqReceived { id, from, req } => {
                let listener = cs.listeners.get(&req.service_id).and_then(Weak::upgrade);
                let (Some(l), Ok(ip)) = (listener, IpCmHeader::parse(req.private_data.as_bytes()))
                else {
                    let _ = cs.agent.reject(now, id, rej_reason::CONSUMER_DEFINED, &[]);
                    return;
                };
                let local = l.st.lock().local;
                let conn = CmId::with_core(l.chan(), l.ctx.clone(), l.core.clone(), l.ps);
                {
                    let mut st = conn.st();
                    st.local = local;
                    st.peer = Some(SocketAddr::new(from, ip.src_port));
                    st.comm = Some(id);
                    st.req = Some(req.clone());
                    st.rq_psn = random_psn();
                    st.passive = true;
                }
                conn.set_state("CONNECT");
                cs.ids.insert(id, Arc::downgrade(&conn.inner));
                conn.inner.chan().push(CmEvent {
                    kind: CmEventKind::ConnectRequest,
                    id: conn.clone(),
                    listen_id: Some(CmId { inner: l }),
                    private_data: req.private_data.as_bytes()[IpCmHeader::LEN..].to_vec(),
                    ud: None,
                    peer: Some(PeerParam {
                        responder_resources: req.responder_resources,
                        initiator_depth: req.initiator_depth,
                        retry_count: req.retry_count,
                        rnr_retry_count: req.rnr_retry_count,
                        srq: req.srq,
                        qp_num: req.local_qpn,
                    }),
                });
            }
            AgentEvent::RepReceived { id, rep } => {
                let Some(inner) = id_of(cs, id) else {
                    return;
                };
                let cid = CmId { inner };
                let (qp, req, param, peer) = {
                    let st = cid.st();
                    (
                        st.qp.as_ref().and_then(QpRef::get),
                        st.req.clone(),
                        st.param.clone(),
                        st.peer,
                    )
                };
                // Kept for `init_qp_attr`, and for `establish` without a QP.
                cid.st().rep = Some(rep.clone());
                let (Some(qp), Some(req), Some(param), Some(peer)) = (qp, req, param, peer) else {
                    cid.event(
                        CmEventKind::ConnectResponse,
                        rep.private_data.as_bytes().to_vec(),
                    );
                    return;
                };
                let r = to_rts(
                    &qp,
                    self.ctx.addr(),
                    peer.ip(),
                    active_conn(&req, &rep, &param, self.ctx.active_mtu()),
                );
                if r.is_err() {
                    let _ = cs.agent.reject(now, id, rej_reason::CONSUMER_DEFINED, &[]);
                    cid.event(CmEventKind::Unreachable, vec![]);
                    return;
                }
                let _ = cs.agent.ready_to_use(id, &[]);
                cid.inner.chan().push(CmEvent {
                    kind: CmEventKind::Established,
                    id: cid.clone(),
                    listen_id: None,
                    private_data: rep.private_data.as_bytes().to_vec(),
                    ud: None,
                    peer: Some(PeerParam {
                        responder_resources: rep.responder_resources,
                        initiator_depth: rep.initiator_depth,
                        retry_count: 0,
                        rnr_retry_count: rep.rnr_retry_count,
                        srq: rep.srq,
                        qp_num: rep.local_qpn,
                    }),
                });
            }
            AgentEvent::Established { id, private_data } => {
                if let Some(inner) = id_of(cs, id) {
                    CmId { inner }.event(CmEventKind::Established, private_data.into_vec());
                }
            }
            AgentEvent::Rejected { id, rej } => {
                if let Some(inner) = cs.ids.remove(&id).and_then(|w| w.upgrade()) {
                    let cid = CmId { inner };
                    cid.st().comm = None;
                    cid.set_state("IDLE");
                    cid.event(
                        CmEventKind::Rejected { reason: rej.reason },
                        rej.private_data.as_bytes().to_vec(),
                    );
                }
            }
            AgentEvent::Timeout { id, .. } => {
                if let Some(inner) = id_of(cs, id) {
                    let cid = CmId { inner };
                    if cs.agent.state(id).is_none() {
                        cs.ids.remove(&id);
                        cid.st().comm = None;
                    }
                    cid.event(CmEventKind::Unreachable, vec![]);
                }
            }
            AgentEvent::DreqReceived { id, private_data } => {
                if let Some(inner) = id_of(cs, id) {
                    let cid = CmId { inner };
                    cid.set_state("DISCONNECT");
                    cid.event(CmEventKind::Disconnected, private_data.into_vec());
                }
            }
            AgentEvent::Disconnected { id, .. } => {
                if let Some(inner) = id_of(cs, id) {
                    let cid = CmId { inner };
                    cid.set_state("DISCONNECT");
                    cid.event(CmEventKind::Disconnected, vec![]);
                }
            }
            AgentEvent::TimewaitExit { id } => {
                if let Some(inner) = cs.ids.remove(&id).and_then(|w| w.upgrade()) {
                    let cid = CmId { inner };
                    cid.st().comm = None;
                    cid.set_state("IDLE");
                    cid.event(CmEventKind::TimewaitExit, vec![]);
                }
            }
            AgentEvent::MraReceived { .. } => {}
            AgentEvent::SidrReqReceived { id, from, req } => {
                let listener = cs.listeners.get(&req.service_id).and_then(Weak::upgrade);
                let (Some(l), Ok(ip)) = (listener, IpCmHeader::parse(req.private_data.as_bytes()))
                else {
                    // IBTA 12.11.2: nobody here serves it (or it lacks rdma_cm's header).
                    let _ = cs.agent.sidr_reply(
                        now,
                        id,
                        wire::SidrRepRepr {
                            request_id: 0,
                            status: wire::sidr_status::SERVICE_ID_NOT_SUPPORTED,
                            info: Default::default(),
                            qpn: 0,
                            service_id: 0,
                            qkey: 0,
                            private_data: PrivateData::default(),
                        },
                    );
                    return;
                };
                let local = l.st.lock().local;
                let conn = CmId::with_core(l.chan(), l.ctx.clone(), l.core.clone(), l.ps);
                {
                    let mut st = conn.st();
                    st.local = local;
                    st.peer = Some(SocketAddr::new(from, ip.src_port));
                    st.comm = Some(id);
                    st.sidr = Some(req.clone());
                }
                conn.set_state("CONNECT");
                cs.ids.insert(id, Arc::downgrade(&conn.inner));
                conn.inner.chan().push(CmEvent {
                    kind: CmEventKind::ConnectRequest,
                    id: conn.clone(),
                    listen_id: Some(CmId { inner: l }),
                    private_data: req.private_data.as_bytes()[IpCmHeader::LEN..].to_vec(),
                    peer: None,
                    ud: None,
                });
            }
            AgentEvent::SidrRepReceived { id, rep } => {
                let Some(inner) = cs.ids.remove(&id).and_then(|w| w.upgrade()) else {
                    return;
                };
                let cid = CmId { inner };
                cid.st().comm = None;
                if rep.status != wire::sidr_status::VALID {
                    cid.set_state("IDLE");
                    cid.event(
                        CmEventKind::Unresolved { status: rep.status },
                        rep.private_data.as_bytes().to_vec(),
                    );
                    return;
                }
                cid.set_state("CONNECT");
                cid.inner.chan().push(CmEvent {
                    kind: CmEventKind::Established,
                    id: cid.clone(),
                    listen_id: None,
                    private_data: rep.private_data.as_bytes().to_vec(),
                    peer: None,
                    ud: Some(UdParam {
                        qp_num: rep.qpn,
                        qkey: rep.qkey,
                    }),
                });
            }
        }
    }
}

/// Posts QP1's receive `slot` of `bufs`.
fn post_gsi_recv(qp: &QueuePair, bufs: &crate::verbs::mr::MemoryRegion, slot: u64) -> Result<()> {
    qp.post_recv(RecvWr {
        wr_id: slot,
        sg_list: softrdma_proto::sg![bufs.sge(slot * GSI_BUF as u64, GSI_BUF as u32)],
    })
}

/// The source address of a UD receive, from its GRH area (an IPv6 header, or an IPv4
/// header in its last 20 bytes, as rxe writes it).
fn grh_source(buf: &[u8]) -> Option<IpAddr> {
    let grh = buf.get(..40)?;
    if grh[0] >> 4 == 6 {
        let mut a = [0u8; 16];
        a.copy_from_slice(&grh[8..24]);
        Some(IpAddr::from(a).to_canonical())
    } else {
        Some(IpAddr::from([grh[32], grh[33], grh[34], grh[35]]))
    }
}

/// QP1's channel's inline consumer (see `device::cq`): runs the agent on the thread that
/// received the MAD, at the end of its pass, instead of waking the CM thread for it: a
/// connection's handshake then costs no wake-up beyond the application's own. False (the
/// channel is then signalled, and the CM thread does it) while another thread holds the
/// agent. The core is held only under `gate`, so that the CM thread, which checks under
/// it whether it holds the core alone, never leaves the last hold to this thread.
fn inline_service(core: &Weak<Core>, gate: &Lock<bool>, wake: &OwnedFd) -> bool {
    let Some(serving) = gate.try_lock() else {
        return false;
    };
    // Looked at before the core is taken up: once the CM thread has cleared it, its own
    // hold may be on its way out, and a hold taken now could be the last.
    if !*serving {
        // The core is going: there is nobody to hand the MAD to.
        return true;
    }
    let Some(c) = core.upgrade() else {
        return true;
    };
    let ran = match c.try_agent() {
        Some(mut cs) => {
            c.service(&mut cs);
            c.settle(&mut cs);
            true
        }
        None => false,
    };
    drop(c);
    if core.strong_count() <= 1 {
        // The IDs went while this thread held the core: the thread's look at who holds it
        // found this hold (see `LastLook`).
        write_eventfd(wake);
    }
    drop(serving);
    ran
}

/// The CM thread: serves the core until nothing but this thread holds it, and then, while
/// the application still holds the context, for [`LINGER`] more (an ID made meanwhile
/// takes it up again). `own` is how many of the context's handles the core holds itself.
fn serve(c: Arc<Core>, own: usize) {
    let (cq_fd, wake_fd) = (c.chan.fd(), c.wake.as_raw_fd());
    let timer_fd = c.timer.as_fd().as_raw_fd();
    let mut alone_since: Option<std::time::Instant> = None;
    loop {
        drain_eventfd(wake_fd);
        // A timerfd reads as an eventfd does: 8 bytes, the expiry count.
        drain_eventfd(timer_fd);
        // The channel's event is consumed so that its descriptor rearms.
        let _ = c.chan.get_cq_event(Some(Duration::ZERO));
        {
            let mut cs = c.agent();
            c.service(&mut cs);
            c.flush(&mut cs);
            c.set_alarm(&cs, true);
        }
        // The agent's timers wake the thread through its alarm; only the linger is timed
        // here.
        let mut next = None;
        if Arc::strong_count(&c) == 1 {
            let since = *alone_since.get_or_insert_with(std::time::Instant::now);
            let left = LINGER.saturating_sub(since.elapsed());
            if c.ctx.handles() <= own || left.is_zero() {
                // Under the list's lock, so that no ID takes the core up meanwhile.
                // Under the gate too: a receiving thread that runs the agent holds the core
                // meanwhile, and is counted.
                let mut cores = CORES.lock();
                let mut serving = c.gate.lock();
                if Arc::strong_count(&c) == 1 {
                    *serving = false;
                    cores.retain(|e| !std::ptr::eq(e.core.as_ptr(), Arc::as_ptr(&c)));
                    drop(serving);
                    drop(cores);
                    return;
                }
            }
            next = Some(left);
        } else {
            alone_since = None;
        }
        wait_readable(&[cq_fd, wake_fd, timer_fd], next);
    }
}
