//! The connected endpoint (`FI_EP_MSG`): one RC connection through softrdma's connection
//! manager, made by [`MsgEndpoint::connect`] or by [`MsgEndpoint::accept`] of a passive
//! endpoint's request ([`PassiveEndpoint`]), its events on an [`EventQueue`]. Its
//! messages are the device's own SENDs into the receives the peer posted, in order, with
//! no header of the fabric layer's (as libfabric's verbs provider does): so a message may
//! be as long as the receive it lands in, and remote CQ data is the SEND's 32-bit
//! immediate. RMA and atomics go as on the RDM endpoint.
//!
//! Receives posted before the connection exists wait, and are posted on its QP once it
//! is made; sends wait for the connection to be established. A send longer than the
//! peer's receive ends the connection (IBTA 9.9.3.1.1: the responder's invalid request),
//! as on any RC QP.
//!
//! Owns its device context's share (its [`Domain`]), its CQ on the device, its CM ID and
//! QP. `progress` handles the device's completions and the connection events; a progress
//! thread (`auto`) runs it when the program does not.
//!
//! Threads and locks: the endpoint's state is behind one lock (`FabricEp`, as the RDM
//! endpoint's), taken by each call, by the progress that a bound CQ's read drives, and
//! by the progress thread; under it, the CQs' and the EQ's entries' locks and
//! softrdma's own.

mod passive;
mod progress;

pub use passive::PassiveEndpoint;

use crate::Map;
use crate::buf::{Buf, Registered};
use crate::counter::{CountOf, Counter, Counters};
use crate::cq::{Completion, CompletionQueue, Progress, flags};
use crate::domain::Domain;
use crate::eq::{ConnRequest, EventQueue};
use crate::error::{FabricError, Result};
use crate::rdm::{AtomicOp, RmaOpts};
use softrdma::cm::{CmId, EventChannel, PortSpace};
use softrdma::sync::{Guard, Lock, Rank};
use softrdma::{AccessFlags, QueuePair, SendOp};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Weak};

/// SENDs up to this size go inline (copied at the post, no registration).
const INLINE_MAX: usize = 256;
/// Work requests each direction of the QP takes at once.
const QUEUE: u32 = 1024;

/// A connected endpoint (`fid_ep` of type `FI_EP_MSG`).
pub struct MsgEndpoint {
    /// Stopped and joined first, before the state's descriptors close.
    _auto: crate::auto::Auto,
    st: Arc<Lock<State>>,
}

impl std::fmt::Debug for MsgEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MsgEndpoint").finish_non_exhaustive()
    }
}

/// Where the connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Neither `connect` nor `accept` yet.
    Idle,
    /// Asked for, not yet established.
    Connecting,
    /// Established.
    Connected,
    /// Ended, failed or refused: what is posted flushes, new posts are refused.
    Down,
}

/// What a posted device WR is, by its ID.
enum Wr {
    /// A send of the user's (its buffer registered, or copied inline).
    Send {
        context: u64,
        buf: Buf,
        reg: Option<Registered>,
        silent: bool,
    },
    /// A receive of the user's, its buffer registered.
    Recv {
        context: u64,
        reg: Option<Registered>,
    },
    /// An RMA or atomic of the user's.
    Rma {
        context: u64,
        flags: u64,
        reg: Registered,
        silent: bool,
    },
}

/// A send waiting for the connection.
struct Queued {
    op: SendOp,
    wr: Wr,
}

struct State {
    dom: Arc<Domain>,
    vcq: crate::auto::DeviceCq,
    chan: EventChannel,
    id: Option<CmId>,
    qp: Option<Arc<QueuePair>>,
    phase: Phase,
    eq: Arc<EventQueue>,
    tag: u64,
    tx_cq: Arc<CompletionQueue>,
    rx_cq: Arc<CompletionQueue>,
    /// The counters bound to it.
    cntrs: Counters,
    wrs: Map<u64, Wr>,
    next_wr: u64,
    /// Receives posted before the QP exists.
    early_recvs: VecDeque<(u64, Buf)>,
    /// Sends posted before the connection is established.
    queued: VecDeque<Queued>,
    /// What `connect` sends with its request.
    private_data: Vec<u8>,
    /// How many times the program has read a CQ this endpoint is bound to.
    app_reads: u64,
}

impl MsgEndpoint {
    /// An endpoint on `domain`, not yet connected (`fi_endpoint`, `fi_ep_bind` and
    /// `fi_enable`): its sends complete to `tx_cq`, its receives to `rx_cq`, its
    /// connection's events go to `eq` under `tag`.
    pub fn open(
        domain: &Arc<Domain>,
        eq: Arc<EventQueue>,
        tag: u64,
        tx_cq: Arc<CompletionQueue>,
        rx_cq: Arc<CompletionQueue>,
    ) -> Result<Self> {
        let ctx = domain.ctx();
        let vcq = crate::auto::DeviceCq::new(ctx, 2 * QUEUE as usize)?;
        let chan = EventChannel::new()?;
        let (cm_fd, cq_fd) = (chan.fd(), vcq.fd());
        let st = Arc::new(Lock::new(
            Rank::FabricEp,
            State {
                dom: domain.clone(),
                vcq,
                chan,
                id: None,
                qp: None,
                phase: Phase::Idle,
                eq,
                tag,
                tx_cq: tx_cq.clone(),
                rx_cq: rx_cq.clone(),
                cntrs: Counters::default(),
                wrs: Map::default(),
                next_wr: 1,
                early_recvs: VecDeque::new(),
                queued: VecDeque::new(),
                private_data: Vec::new(),
                app_reads: 0,
            },
        ));
        let auto = crate::auto::start(&st, (&tx_cq, &rx_cq), (cm_fd, cq_fd))?;
        Ok(Self { _auto: auto, st })
    }

    fn st(&self) -> Guard<'_, State> {
        self.st.lock()
    }

    /// Asks `peer` (a passive endpoint's address) for a connection, with `private_data`
    /// (at most [`crate::CONNECT_DATA_MAX`] bytes) (`fi_connect`); `Connected` or
    /// `Failed` comes on the EQ.
    pub fn connect(&self, peer: SocketAddr, private_data: &[u8]) -> Result<()> {
        let framed = crate::eq::frame(private_data, crate::eq::CONNECT_DATA_MAX, "fi_connect")?;
        let mut st = self.st();
        st.idle("fi_connect")?;
        let id = CmId::new(&st.chan, st.dom.ctx(), PortSpace::Tcp)?;
        id.resolve_addr(Some(SocketAddr::new(st.dom.ip(), 0)), peer)?;
        st.private_data = framed;
        st.id = Some(id);
        st.phase = Phase::Connecting;
        Ok(())
    }

    /// Accepts `req` (`fi_accept`), with `private_data` (at most
    /// [`crate::ACCEPT_DATA_MAX`] bytes) for the peer; `Connected` comes on the EQ.
    pub fn accept(&self, req: ConnRequest, private_data: &[u8]) -> Result<()> {
        let framed = crate::eq::frame(private_data, crate::eq::ACCEPT_DATA_MAX, "fi_accept")?;
        let mut st = self.st();
        st.idle("fi_accept")?;
        req.id.migrate(&st.chan);
        st.make_qp(&req.id)?;
        req.id.accept(&crate::domain::conn_param(framed))?;
        st.id = Some(req.id);
        st.phase = Phase::Connecting;
        Ok(())
    }

    /// Ends the connection (`fi_shutdown`): the peer sees `Shutdown`; what is posted
    /// flushes.
    pub fn shutdown(&self) -> Result<()> {
        let mut st = self.st();
        if let Some(id) = &st.id {
            let _ = id.disconnect();
        }
        st.down(false);
        Ok(())
    }

    /// Counts the completions of the kinds `of` names on `cntr` (`fi_ep_bind` of a
    /// `fid_cntr`), those that write no CQ entry too; reading `cntr` drives this
    /// endpoint's progress. A kind bound again counts on the new counter.
    pub fn bind_counter(&self, cntr: &Arc<Counter>, of: CountOf) {
        self.st().cntrs.set(cntr, of);
        let weak: Weak<dyn Progress> = Arc::downgrade(&self.st) as Weak<_>;
        cntr.bind(weak);
    }

    /// The local address of the connection (`fi_getname`), once asked for or accepted.
    pub fn addr(&self) -> Option<SocketAddr> {
        self.st().id.as_ref().and_then(CmId::local_addr)
    }

    /// The peer's address (`fi_getpeer`), once asked for or accepted.
    pub fn peer(&self) -> Option<SocketAddr> {
        self.st().id.as_ref().and_then(CmId::peer_addr)
    }

    /// Sends `buf` (`fi_send`; with `data`, `fi_senddata`, 32 bits of it; with
    /// `silent`, no completion: `fi_inject`, or selective completion).
    pub fn send(
        &self,
        buf: impl Into<Buf>,
        data: Option<u32>,
        silent: bool,
        context: u64,
    ) -> Result<()> {
        let buf = buf.into();
        let op = match data {
            Some(imm) => SendOp::SendWithImm(imm),
            None => SendOp::Send,
        };
        let mut st = self.st();
        st.usable("fi_send")?;
        // A small message is copied at the post; a larger one is sent from its buffer.
        let (buf, reg) = if buf.len() <= INLINE_MAX {
            (buf, None)
        } else {
            let r = buf.register(st.dom.pd(), usize::MAX, AccessFlags::LOCAL_WRITE)?;
            (Buf::from(Vec::new()), Some(r))
        };
        let q = Queued {
            op,
            wr: Wr::Send {
                context,
                buf,
                reg,
                silent,
            },
        };
        st.enqueue(q);
        Ok(())
    }

    /// Posts a receive into `buf` (`fi_recv`): the next message the peer sends lands in
    /// it.
    pub fn recv(&self, buf: impl Into<Buf>, context: u64) -> Result<()> {
        let mut st = self.st();
        if st.phase == Phase::Down {
            return Err(down("fi_recv"));
        }
        let buf = buf.into();
        if st.qp.is_none() {
            st.early_recvs.push_back((context, buf));
            return Ok(());
        }
        st.post_recv(context, buf)
    }

    /// Writes `buf` at `addr` of the peer's region `key` (`fi_write`); remote CQ data is
    /// not offered on this endpoint.
    pub fn write(
        &self,
        buf: impl Into<Buf>,
        (addr, key): (u64, u64),
        opts: RmaOpts,
        context: u64,
    ) -> Result<()> {
        if opts.data.is_some() {
            return Err(FabricError::Invalid {
                what: "fi_writedata",
                why: "a MSG endpoint's writes carry no remote CQ data".into(),
            });
        }
        let op = SendOp::Write {
            remote_addr: addr,
            rkey: crate::rdm::rkey(key, "fi_write")?,
        };
        let f = (flags::RMA | flags::WRITE, opts.silent);
        self.st().rma(buf.into(), op, f, context)
    }

    /// Reads `buf.len()` bytes at `addr` of the peer's region `key` into `buf`
    /// (`fi_read`).
    pub fn read(
        &self,
        buf: impl Into<Buf>,
        (addr, key): (u64, u64),
        opts: RmaOpts,
        context: u64,
    ) -> Result<()> {
        let op = SendOp::Read {
            remote_addr: addr,
            rkey: crate::rdm::rkey(key, "fi_read")?,
        };
        let f = (flags::RMA | flags::READ, opts.silent);
        self.st().rma(buf.into(), op, f, context)
    }
}

impl MsgEndpoint {
    /// Applies `op` to the 64-bit word at `addr` (8-byte aligned) of the peer's region
    /// `key` (`fi_atomic`, `fi_fetch_atomic`, `fi_compare_atomic`), as on the RDM endpoint:
    /// `result` (8 bytes) comes back in the completion holding the word's value before,
    /// for every op but [`AtomicOp::Add`], which completes as a write.
    pub fn atomic(
        &self,
        op: AtomicOp,
        (addr, key): (u64, u64),
        result: impl Into<Buf>,
        opts: RmaOpts,
        context: u64,
    ) -> Result<()> {
        crate::rdm::no_data(opts, "fi_atomic")?;
        let result = result.into();
        let (op, kind) = crate::rdm::atomic_op(op, (addr, key), &result)?;
        let f = (flags::ATOMIC | kind, opts.silent);
        self.st().rma(result, op, f, context)
    }
}

impl Drop for MsgEndpoint {
    /// Ends the connection (`fi_close`), so that the peer hears of it now.
    fn drop(&mut self) {
        let mut st = self.st();
        st.progress_all();
        st.dom.ctx().flush_acks();
        if let Some(id) = &st.id {
            let _ = id.disconnect();
        }
    }
}

fn down(what: &'static str) -> FabricError {
    FabricError::State {
        what,
        why: "the endpoint's connection has ended".into(),
    }
}

impl State {
    fn idle(&self, what: &'static str) -> Result<()> {
        match self.phase {
            Phase::Idle => Ok(()),
            _ => Err(FabricError::State {
                what,
                why: "the endpoint is already connecting or connected".into(),
            }),
        }
    }

    /// Whether sends may be posted: once `connect` or `accept` was called, until the
    /// connection ends.
    fn usable(&self, what: &'static str) -> Result<()> {
        match self.phase {
            Phase::Connecting | Phase::Connected => Ok(()),
            Phase::Idle => Err(FabricError::State {
                what,
                why: "the endpoint is not connected".into(),
            }),
            Phase::Down => Err(down(what)),
        }
    }

    fn wr_id(&mut self) -> u64 {
        let w = self.next_wr;
        self.next_wr += 1;
        w
    }

    /// Makes the QP on `id` and posts the receives that waited for it.
    fn make_qp(&mut self, id: &CmId) -> Result<()> {
        let init = softrdma::QpInitAttr {
            cap: softrdma::QpCaps {
                max_send_wr: QUEUE,
                max_recv_wr: QUEUE,
                max_inline_data: INLINE_MAX as u32,
                ..softrdma::QpCaps::default()
            },
            ..softrdma::QpInitAttr::new(softrdma::QpType::Rc, &self.vcq.cq)
        };
        self.qp = Some(id.create_qp(self.dom.pd(), init)?);
        while let Some((context, buf)) = self.early_recvs.pop_front() {
            self.post_recv(context, buf)?;
        }
        Ok(())
    }

    fn post_recv(&mut self, context: u64, buf: Buf) -> Result<()> {
        let qp = self.qp.clone().ok_or_else(|| down("fi_recv"))?;
        let len = buf.len();
        let reg = (len > 0)
            .then(|| buf.register(self.dom.pd(), len, AccessFlags::LOCAL_WRITE))
            .transpose()?;
        let sg_list = match &reg {
            Some(r) => softrdma_proto::sg![r.mr.sge(0, len as u32)],
            None => softrdma_proto::sg![],
        };
        let w = self.wr_id();
        qp.post_recv(softrdma::RecvWr { wr_id: w, sg_list })?;
        self.wrs.insert(w, Wr::Recv { context, reg });
        Ok(())
    }

    fn rma(
        &mut self,
        buf: Buf,
        op: SendOp,
        (flags, silent): (u64, bool),
        context: u64,
    ) -> Result<()> {
        self.usable("fi_write/fi_read")?;
        let len = buf.len();
        let reg = buf.register(self.dom.pd(), len, AccessFlags::LOCAL_WRITE)?;
        let q = Queued {
            op,
            wr: Wr::Rma {
                context,
                flags,
                reg,
                silent,
            },
        };
        self.enqueue(q);
        Ok(())
    }

    /// Posts `q` now if the connection is established, else keeps it until it is.
    fn enqueue(&mut self, q: Queued) {
        if self.phase == Phase::Connected {
            self.post(q);
        } else {
            self.queued.push_back(q);
        }
    }

    /// Posts `q` on the QP; a post that fails completes in error.
    fn post(&mut self, q: Queued) {
        let Some(qp) = self.qp.clone() else {
            self.fail(q.wr, crate::cq::errno::EIO);
            return;
        };
        let w = self.wr_id();
        let payload = match &q.wr {
            Wr::Send { reg: Some(r), .. } | Wr::Rma { reg: r, .. } => {
                softrdma::Payload::Sges(softrdma_proto::sg![r.mr.sge(0, r.mr.len() as u32)])
            }
            Wr::Send { buf, .. } => softrdma::Payload::Inline(buf.to_vec()),
            Wr::Recv { .. } => unreachable!("receives are not queued as sends"),
        };
        let inline = matches!(payload, softrdma::Payload::Inline(_));
        let mut flags = softrdma::SendFlags::SIGNALED;
        if inline {
            flags |= softrdma::SendFlags::INLINE;
        }
        let r = qp.post_send(softrdma::SendWr {
            wr_id: w,
            op: q.op,
            payload,
            flags,
            ud: None,
        });
        match r {
            Ok(()) => {
                self.wrs.insert(w, q.wr);
            }
            Err(_) => self.fail(q.wr, crate::cq::errno::EIO),
        }
    }

    /// What `wr` was for fails with `error` (its buffer back).
    fn fail(&mut self, wr: Wr, error: i32) {
        match wr {
            Wr::Send {
                context, buf, reg, ..
            } => {
                let buf = reg.map_or(buf, Registered::back);
                self.cntrs.report(
                    &self.tx_cq,
                    Completion::of(context, flags::SEND | flags::MSG, buf, 0, error),
                );
            }
            Wr::Rma {
                context,
                flags,
                reg,
                ..
            } => {
                self.cntrs.report(
                    &self.tx_cq,
                    Completion::of(context, flags, reg.back(), 0, error),
                );
            }
            Wr::Recv { context, reg } => {
                let buf = reg.map_or_else(|| Buf::from(Vec::new()), Registered::back);
                self.cntrs.report(
                    &self.rx_cq,
                    Completion::of(context, flags::RECV | flags::MSG, buf, 0, error),
                );
            }
        }
    }
}
