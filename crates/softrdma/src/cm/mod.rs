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
//! thread outlive the device's last ID by [`LINGER`](thread::LINGER) while the application still holds the
//! context (a program that connects again finds them), and go at once when it does not.
//! A MAD is mostly handled without that thread: QP1's channel has an inline consumer
//! (`device::cq`), so the thread that received the MAD (the progress thread, or a busy
//! poller) runs the agent at the end of its receive pass, once it holds no device lock,
//! if the agent's mutex is free; otherwise the channel wakes the CM thread. A thread that
//! waits for a CM event first receives for it itself for [`CM_SPIN`](channel::CM_SPIN) (a handshake's turn
//! on one host), then gives the sockets back to the progress threads and blocks. Whoever
//! runs the agent brings the timerfd forward when the agent's next deadline moved earlier,
//! so a verb wakes no thread. The CM thread takes only the completions the progress
//! thread placed (it never receives itself, which would take the socket from the progress
//! thread). Verbs run the agent under its mutex on the caller's thread and send what it
//! produces there; no lock is held across user code or a blocking call. Events go to each
//! ID's [`EventChannel`], a queue behind a mutex with an eventfd that [`EventChannel::fd`]
//! gives for `poll(2)`, readable while events wait.
//! Lock order: the agent's mutex, then an ID's, then the device's (a QP modify or post).
//! By rank (see the crate's table): `CmCores`, `CmAgent`, `CmGate`, `CmId`,
//! `CmIdChannel`, `CmDropped`, `CmEvents`; each file's docs say which it takes.
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
//!
//! # The device
//! The CM reaches the device through the verbs (QP1, its CQs, its region) and, for what
//! the verbs do not give, through one narrow interface: `cm::dev`, a module of
//! `pub(crate)` functions and handles (the device's identity, the shared device's
//! listener registry and ID tag, QP1's inline consumer, a receive pass and the pollers'
//! hand-back, an ID's `res show` line). No other file of `cm` names `crate::device`.
//!
//! # Files
//! Imports go one way, with no cycle: the verbs on an ID (`addr`, `qp`, `conn`, `sidr`,
//! `mcast`) use `id` and the policy (`qp_attr`); the host (`host`) uses `agent`, `gsi`,
//! `thread`, `exit` and `registry`; all of them use `objects`, where the types that refer
//! to one another are defined; `types` and `fd` are at the bottom. A file calls another's
//! methods on those types without importing it (`Core::flush` hands events to
//! `dispatch`, for one).
//!
//! - `types`: the public data types (port spaces, parameters, event kinds).
//! - `objects`: the ID, the host, the event queue and the event, defined together.
//! - `fd`: eventfds and `poll(2)`.
//! - `dev`: the CM's narrow interface to the device (see below).
//! - `channel`: the event channel and the wait for an event.
//! - `id`: the ID's verbs of its own: creation, accessors, options, and what its drop ends.
//! - `res`: an ID's `res show cm_id` line.
//! - `addr`: bind, listen, resolve address and route.
//! - `qp`: an ID's QP and `rdma_init_qp_attr`.
//! - `qp_attr`: the QP-attribute policy (pure but for the modifies).
//! - `conn`: connect, accept, reject, establish, notify, disconnect.
//! - `sidr`: UD peers found by SIDR, both sides.
//! - `mcast`: multicast joins.
//! - `host`: the per-device agent host: starting it, running its agent, its alarm.
//! - `registry`: the hosts by device.
//! - `agent`: the counted guard of a held agent.
//! - `gsi`: QP1's receives and sends.
//! - `dispatch`: the agent's connection events, turned into ID events.
//! - `thread`: the CM thread and QP1's inline consumer.
//! - `exit`: the end of every connection at `exit(3)`.

mod addr;
mod agent;
mod channel;
mod conn;
mod dev;
mod dispatch;
mod exit;
mod gsi;
mod host;
mod id;
mod mcast;
mod objects;
mod qp;
mod qp_attr;
mod registry;
mod res;
mod sidr;
mod thread;
mod types;

pub use channel::EventChannel;
pub use exit::exiting;
pub use host::CmPort;
pub use objects::{CmEvent, CmId};
pub use types::{
    CmEventKind, ConnParam, MULTICAST_QPN, NotifyEvent, PeerParam, PortSpace, RDMA_UDP_QKEY,
    UdParam,
};
