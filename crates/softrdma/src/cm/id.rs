//! The rdma_cm ID (`struct rdma_cm_id`, defined in `objects`): its creation, accessors
//! and options, the events it reports, and what its drop ends. The verbs on it are in the files of
//! their role (`addr`, `qp`, `conn`, `sidr`, `mcast`); its `res show` line in `res`.
//!
//! Calls the host (`host::Core`) for its agent. Locks: `CmId` (its state) and
//! `CmIdChannel` (where its events go), each alone; its drop takes `CmAgent` (or *try*s it
//! on a thread that holds one) and then `CmDropped`.

use super::agent::AgentGuard;
use super::channel::EventChannel;
use super::dev;
use super::objects::{Chan, CmEvent, CmId, Core, Ended, IdInner, IdRecord, LastLook, QpRef};
use super::types::{CmEventKind, PeerParam, PortSpace, UdParam};
use crate::error::{CmError, Error, Result};
use crate::sync::{Lock, Rank};
use crate::verbs::context::Context;
use crate::verbs::qp::QueuePair;
use softrdma_proto::cma::IdVerb;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

impl IdInner {
    pub(super) fn chan(&self) -> Arc<Chan> {
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

    pub(super) fn with_core(chan: Arc<Chan>, ctx: Context, core: Arc<Core>, ps: PortSpace) -> Self {
        let res = dev::add_res_line(&ctx);
        let id = Self {
            inner: Arc::new(IdInner {
                chan: Lock::new(Rank::CmIdChannel, chan),
                ctx,
                _last_look: LastLook::of(&core),
                core,
                ps,
                st: Lock::new(Rank::CmId, IdRecord::default()),
                res,
                user: std::sync::atomic::AtomicUsize::new(0),
            }),
        };
        id.publish(None);
        id
    }

    pub(super) fn st(&self) -> crate::sync::Guard<'_, IdRecord> {
        self.inner.st.lock()
    }

    /// Fails `verb` with [`CmError::WrongState`] unless the ID's state allows `v` (the
    /// kernel's rules, `softrdma_proto::cma::IdState::allows`).
    pub(super) fn may(&self, verb: &'static str, v: IdVerb) -> Result<()> {
        let state = self.st().state;
        if state.allows(v) {
            Ok(())
        } else {
            Err(Error::cm(verb, CmError::WrongState { state }))
        }
    }

    pub(super) fn event(&self, kind: CmEventKind, private_data: Vec<u8>) {
        self.event_with(kind, private_data, None, None);
    }

    /// Posts an event that carries the peer's connection parameters (an active side's
    /// ESTABLISHED) or a UD peer's QPN and Q_Key (a resolved SIDR).
    pub(super) fn event_with(
        &self,
        kind: CmEventKind,
        private_data: Vec<u8>,
        peer: Option<PeerParam>,
        ud: Option<UdParam>,
    ) {
        let ev = self.made(kind, private_data, peer, ud);
        // Under the ID's lock, so that an event cannot slip in between the held ones
        // as they are let go.
        let mut st = self.st();
        match &mut st.held {
            Some(held) => held.push(ev),
            None => self.inner.chan().push(ev),
        }
    }

    /// An event of this ID's.
    fn made(
        &self,
        kind: CmEventKind,
        private_data: Vec<u8>,
        peer: Option<PeerParam>,
        ud: Option<UdParam>,
    ) -> CmEvent {
        CmEvent {
            kind,
            id: self.clone(),
            listen_id: None,
            private_data,
            peer,
            ud,
        }
    }

    /// Holds the ID's events back from now on, until [`CmId::release_with`].
    pub(super) fn hold_events(&self) {
        self.st().held.get_or_insert_with(Vec::new);
    }

    /// Posts `kind` (as [`CmId::event_with`] would), then the events held back since
    /// [`CmId::hold_events`], in order, and stops holding them.
    pub(super) fn release_with(
        &self,
        kind: CmEventKind,
        private_data: Vec<u8>,
        peer: Option<PeerParam>,
        ud: Option<UdParam>,
    ) {
        let mut st = self.st();
        let held = st.held.take().unwrap_or_default();
        let chan = self.inner.chan();
        chan.push(self.made(kind, private_data, peer, ud));
        for ev in held {
            chan.push(ev);
        }
        drop(st);
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
            return Err(Error::cm(
                "rdma_set_option",
                CmError::AckTimeoutRange { timeout },
            ));
        }
        self.st().ack_timeout = Some(timeout);
        Ok(())
    }
}
