//! The CM's objects and how they hold one another: an ID ([`CmId`], its `IdInner` and
//! `IdRecord`) holds its host (`Core`) and the queue it reports to (`Chan`); the host's
//! agent state (`CoreSt`) knows its IDs weakly; an event ([`CmEvent`]) carries an ID. The
//! types are defined together here because they refer to one another; what each does is
//! in the file of its role (`id`, `host`, `channel`, ...).
//!
//! Definitions only, but for `LastLook`'s drop, which writes an eventfd. The locks
//! declared here, by rank: `CmAgent` (`Core::st`), `CmGate` (`Core::gate`), `CmId`
//! (`IdInner::st`), `CmIdChannel` (`IdInner::chan`), `CmDropped` (`Core::dropped`),
//! `CmEvents` (`Chan::q`).

use super::dev::ResLine;
use super::types::{CmEventKind, ConnParam, PeerParam, PortSpace, UdParam};
use crate::eventfd;
use crate::sync::Lock;
use crate::verbs::context::Context;
use crate::verbs::cq::{CompletionChannel, CompletionQueue};
use crate::verbs::qp::QueuePair;
use softrdma_proto::cm::{CmAgent, CommId};
use softrdma_proto::cma::IdState;
use softrdma_wire::cm::{RepRepr, ReqRepr, SidrReqRepr};
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::os::fd::OwnedFd;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Weak};

/// A connection-manager ID (`struct rdma_cm_id`): a listener, or one connection.
#[derive(Clone)]
pub struct CmId {
    pub(super) inner: Arc<IdInner>,
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

pub(super) struct IdInner {
    /// Where its events go (changed by [`CmId::migrate`]).
    pub(super) chan: Lock<Arc<Chan>>,
    pub(super) ctx: Context,
    pub(super) core: Arc<Core>,
    /// Declared after `core`, so dropped after it: see [`LastLook`].
    pub(super) _last_look: LastLook,
    pub(super) ps: PortSpace,
    pub(super) st: Lock<IdRecord>,
    /// The ID's line in `softrdma res show cm_id`.
    pub(super) res: Arc<ResLine>,
    /// See [`CmId::user`].
    pub(super) user: std::sync::atomic::AtomicUsize,
}

/// Wakes the CM thread when an ID's hold on its core has gone and the thread may be the
/// core's last holder (see `serve`), so that it starts its linger. Dropped after the ID's
/// `Arc<Core>`: a wake-up before the count fell would find the ID still there, and the
/// thread would sleep on with nothing to wake it.
pub(super) struct LastLook {
    pub(super) core: Weak<Core>,
    pub(super) wake: Arc<OwnedFd>,
}

impl LastLook {
    pub(super) fn of(core: &Arc<Core>) -> Self {
        Self {
            core: Arc::downgrade(core),
            wake: core.wake.clone(),
        }
    }
}

impl Drop for LastLook {
    fn drop(&mut self) {
        if self.core.strong_count() <= 1 {
            eventfd::signal(self.wake.as_raw_fd());
        }
    }
}

/// An ID's QP: made by [`CmId::create_qp`] and held, or the caller's and only known.
pub(super) enum QpRef {
    Owned(Arc<QueuePair>),
    Attached(Weak<QueuePair>),
}

impl QpRef {
    pub(super) fn get(&self) -> Option<Arc<QueuePair>> {
        match self {
            QpRef::Owned(q) => Some(q.clone()),
            QpRef::Attached(w) => w.upgrade(),
        }
    }
}

#[derive(Default)]
pub(super) struct IdRecord {
    /// Where it stands (see `softrdma_proto::cma`): moved only by `CmId::moved`, which
    /// publishes its `res show` line.
    pub(super) state: IdState,
    pub(super) local: Option<SocketAddr>,
    pub(super) peer: Option<SocketAddr>,
    pub(super) listening: Option<u64>,
    pub(super) comm: Option<CommId>,
    pub(super) qp: Option<QpRef>,
    /// The REQ this passive ID answers, or the one this active ID sent.
    pub(super) req: Option<Box<ReqRepr>>,
    /// The REP received (active, without a QP, until `establish`).
    pub(super) rep: Option<Box<RepRepr>>,
    /// The SIDR_REQ this passive UD ID answers.
    pub(super) sidr: Option<Box<SidrReqRepr>>,
    /// The service its `bind_addr` announced to the agent (see [`CmId::bind_addr`]).
    pub(super) bound: Option<u64>,
    /// The first PSN this passive ID's receive queue expects: drawn when the REQ comes
    /// (`passive`), so that `init_qp_attr` can give it before the accept announces it.
    pub(super) rq_psn: u32,
    pub(super) passive: bool,
    pub(super) param: Option<ConnParam>,
    /// The multicast groups joined, each with whether it was joined to send only (its QP
    /// is then not attached).
    pub(super) groups: Vec<(IpAddr, bool)>,
    /// [`CmId::set_tos`].
    pub(super) tos: u8,
    /// [`CmId::set_ack_timeout`].
    pub(super) ack_timeout: Option<u8>,
    /// The ID's events held back while its ESTABLISHED waits for the QP's same-host route
    /// (see `dispatch`): `Some` from then until that event is posted, so that the program
    /// sees them in the order they happened.
    pub(super) held: Option<Vec<CmEvent>>,
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

#[derive(Debug)]
pub(super) struct Chan {
    pub(super) q: Lock<VecDeque<CmEvent>>,
    /// How many events `q` holds, written under its lock: a spinning waiter reads this
    /// instead of taking the lock.
    pub(super) queued: std::sync::atomic::AtomicUsize,
    pub(super) efd: OwnedFd,
}

/// What a dropped ID leaves for the agent to end (see `IdInner`'s drop).
pub(super) struct Ended {
    pub(super) listening: Option<u64>,
    pub(super) comm: Option<CommId>,
    pub(super) bound: Option<u64>,
}

/// A device's CM: its agent, QP1, and the thread that serves them.
pub(super) struct Core {
    pub(super) ctx: Context,
    /// QP1's receive completions, whose channel wakes the CM thread or runs the agent
    /// inline (see `inline_service`).
    pub(super) cq: CompletionQueue,
    /// QP1's send completions, apart from its receives' so that a MAD sent does not wake
    /// anyone: emptied before each send.
    pub(super) send_cq: CompletionQueue,
    pub(super) chan: CompletionChannel,
    pub(super) qp: QueuePair,
    /// QP1's receive buffers, one region of [`GSI_RECVS`] slots of [`GSI_BUF`] bytes.
    pub(super) bufs: crate::verbs::mr::MemoryRegion,
    pub(super) st: Lock<CoreSt>,
    /// Listens and connections of IDs dropped, for the thread to end (see `IdInner`'s
    /// drop).
    pub(super) dropped: Lock<Vec<Ended>>,
    pub(super) wake: Arc<OwnedFd>,
    /// Whether the core still serves: cleared by the CM thread as it leaves, under this
    /// lock, which a receiving thread holds while it runs the agent inline (see
    /// `inline_service`), so that the last hold on the core never goes on a thread that
    /// the core's drop would have to join (the progress thread).
    pub(super) gate: Arc<Lock<bool>>,
    /// The CM thread's alarm: set to the agent's next deadline by whoever runs the agent
    /// and finds that deadline earlier than the one set, so that a verb that arms a timer
    /// (a connect's REQ resend) need not wake the thread to have it sleep less.
    pub(super) timer: nix::sys::timerfd::TimerFd,
    /// When [`Core::timer`] goes off (nanoseconds on [`Core::now`], `u64::MAX` for
    /// never), written with it under the agent's mutex.
    pub(super) sleep_until: AtomicU64,
    pub(super) epoch: std::time::Instant,
    pub(super) next_send: AtomicU64,
}

pub(super) struct CoreSt {
    pub(super) agent: CmAgent<IpAddr>,
    pub(super) ids: HashMap<CommId, Weak<IdInner>>,
    pub(super) listeners: HashMap<u64, Weak<IdInner>>,
}
