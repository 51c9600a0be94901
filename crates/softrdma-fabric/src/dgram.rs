//! The datagram endpoint (`FI_EP_DGRAM`): unreliable, unordered messages of at most one
//! path MTU, over one UD QP. Peers are named by IP address and port, as the other
//! endpoints' are: the endpoint listens on its port through softrdma's connection
//! manager in the UDP port space, and a send to a new peer first asks the peer's CM for
//! its QP and Q_Key (SIDR, IBTA 12.11), then goes, as later sends to it do, straight to
//! that QP. Sends to a peer being resolved wait; a peer that cannot be resolved fails
//! them (`FI_EIO`).
//!
//! Receives land in the endpoint's own slots (a UD receive starts with the 40 bytes of
//! the GRH), and are copied into the program's buffers in the order these were posted; a
//! datagram that finds no buffer waits in its slot while slots last, and the device drops
//! what finds no slot, as UD does.
//!
//! Threads and locks: the endpoint's state is behind one lock (`FabricEp`), taken by each
//! call, by the progress that a bound CQ's read drives and by the progress thread (`auto`);
//! under it, the address vector's and the CQs' locks and softrdma's own.

use crate::Map;
use crate::addr::AddressVector;
use crate::auto::{Auto, DeviceCq, Driven};
use crate::buf::{Buf, Registered};
use crate::counter::{CountOf, Counter, Counters};
use crate::cq::{Completion, CompletionQueue, Progress, errno, flags};
use crate::domain::Domain;
use crate::error::{FabricError, Result};
use crate::matching::FiAddr;
use softrdma::cm::{CmEvent, CmEventKind, CmId, ConnParam, EventChannel, PortSpace};
use softrdma::sync::{Guard, Lock, Rank};
use softrdma::{
    AccessFlags, MemoryRegion, QpCaps, QpInitAttr, QpType, QueuePair, RecvWr, SendFlags, SendOp,
    SendWr,
};
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Weak};

/// Bytes of GRH before a UD receive's payload.
const GRH: usize = 40;
/// Receive slots, and send WRs at once.
const SLOTS: usize = 256;

/// A datagram endpoint (`fid_ep` of type `FI_EP_DGRAM`).
pub struct DgramEndpoint {
    /// Stopped and joined first, before the state's descriptors close.
    _auto: Auto,
    st: Arc<Lock<State>>,
    addr: SocketAddr,
    max: usize,
}

impl std::fmt::Debug for DgramEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DgramEndpoint")
            .field("addr", &self.addr)
            .finish()
    }
}

/// A peer, by its address.
enum Peer {
    /// Its QP is being asked for; these sends wait.
    Resolving { _id: CmId, queued: Vec<Out> },
    /// Where its datagrams go.
    Ready(softrdma_proto::UdDest),
}

/// A send of the user's.
struct Out {
    context: u64,
    buf: Buf,
    data: Option<u32>,
    silent: bool,
}

/// What a posted WR is.
enum Wr {
    /// Receive slot `n`.
    Slot(usize),
    /// A send, its buffer registered (none for an empty one).
    Send {
        context: u64,
        reg: Option<Registered>,
        silent: bool,
    },
}

struct State {
    dom: Arc<Domain>,
    vcq: DeviceCq,
    chan: EventChannel,
    qp: Arc<QueuePair>,
    _listener: CmId,
    av: Arc<AddressVector>,
    tx_cq: Arc<CompletionQueue>,
    rx_cq: Arc<CompletionQueue>,
    /// The counters bound to it.
    cntrs: Counters,
    peers: Map<SocketAddr, Peer>,
    /// Resolving IDs' peers, by the number each ID carries.
    resolving: Map<usize, SocketAddr>,
    next_id: usize,
    slots: Vec<MemoryRegion>,
    /// Slots holding a datagram no receive has taken yet: slot, length, immediate.
    arrived: VecDeque<(usize, usize, Option<u32>)>,
    /// Receives posted and not yet filled.
    recvs: VecDeque<(u64, Buf)>,
    wrs: Map<u64, Wr>,
    next_wr: u64,
    max: usize,
    app_reads: u64,
}

impl DgramEndpoint {
    /// An endpoint on `domain`'s device, on `port` (0 picks one), its peers in `av`, its
    /// sends completing to `tx_cq` and its receives to `rx_cq`.
    pub fn open(
        domain: &Arc<Domain>,
        port: u16,
        av: Arc<AddressVector>,
        tx_cq: Arc<CompletionQueue>,
        rx_cq: Arc<CompletionQueue>,
    ) -> Result<Self> {
        let ctx = domain.ctx();
        let max = ctx.active_mtu().bytes();
        let vcq = DeviceCq::new(ctx, 2 * SLOTS)?;
        let init = QpInitAttr {
            cap: QpCaps {
                max_send_wr: SLOTS as u32,
                max_recv_wr: SLOTS as u32,
                ..QpCaps::default()
            },
            ..QpInitAttr::new(QpType::Ud, &vcq.cq)
        };
        let qp = Arc::new(domain.pd().create_qp(init)?);
        let chan = EventChannel::new()?;
        let listener = CmId::new(&chan, ctx, PortSpace::Udp)?;
        listener.bind_addr(SocketAddr::new(domain.ip(), port))?;
        listener.attach_qp(&qp)?;
        listener.listen(128)?;
        let addr = listener
            .local_addr()
            .unwrap_or(SocketAddr::new(domain.ip(), port));
        let mut slots = Vec::with_capacity(SLOTS);
        for _ in 0..SLOTS {
            slots.push(
                domain
                    .pd()
                    .register_zeroed(GRH + max, AccessFlags::LOCAL_WRITE)?,
            );
        }
        let (cm_fd, cq_fd) = (chan.fd(), vcq.fd());
        let st = Arc::new(Lock::new(
            Rank::FabricEp,
            State {
                dom: domain.clone(),
                vcq,
                chan,
                qp,
                _listener: listener,
                av,
                tx_cq: tx_cq.clone(),
                rx_cq: rx_cq.clone(),
                cntrs: Counters::default(),
                peers: Map::default(),
                resolving: Map::default(),
                next_id: 1,
                slots,
                arrived: VecDeque::new(),
                recvs: VecDeque::new(),
                wrs: Map::default(),
                next_wr: 1,
                max,
                app_reads: 0,
            },
        ));
        {
            let mut s = st.lock();
            for n in 0..SLOTS {
                s.post_slot(n)?;
            }
        }
        let auto = crate::auto::start(&st, (&tx_cq, &rx_cq), (cm_fd, cq_fd))?;
        Ok(Self {
            _auto: auto,
            st,
            addr,
            max,
        })
    }

    fn st(&self) -> Guard<'_, State> {
        self.st.lock()
    }

    /// Counts the completions of the kinds `of` names on `cntr` (`fi_ep_bind` of a
    /// `fid_cntr`), those that write no CQ entry too; reading `cntr` drives this
    /// endpoint's progress. A kind bound again counts on the new counter.
    pub fn bind_counter(&self, cntr: &Arc<Counter>, of: CountOf) {
        self.st().cntrs.set(cntr, of);
        let weak: Weak<dyn Progress> = Arc::downgrade(&self.st) as Weak<_>;
        cntr.bind(weak);
    }

    /// The endpoint's address, for its peers' address vectors (`fi_getname`).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The largest datagram: one path MTU.
    pub fn max_msg(&self) -> usize {
        self.max
    }

    /// Sends `buf` to `dest` (`fi_send`; with `data`, 32 bits of remote CQ data; with
    /// `silent`, no completion).
    pub fn send(
        &self,
        dest: FiAddr,
        buf: impl Into<Buf>,
        data: Option<u32>,
        silent: bool,
        context: u64,
    ) -> Result<()> {
        let buf = buf.into();
        if buf.len() > self.max {
            return Err(FabricError::Invalid {
                what: "fi_send",
                why: format!("{} bytes is over the datagram size {}", buf.len(), self.max),
            });
        }
        let mut st = self.st();
        let peer = st.av.lookup(dest)?;
        let out = Out {
            context,
            buf,
            data,
            silent,
        };
        match st.peers.get_mut(&peer) {
            Some(Peer::Ready(d)) => {
                let d = *d;
                st.post_send(d, out);
            }
            Some(Peer::Resolving { queued, .. }) => queued.push(out),
            None => st.resolve(peer, out)?,
        }
        Ok(())
    }

    /// Posts a receive into `buf` (`fi_recv`): the next datagram that comes lands in it
    /// (cut to its length: `FI_ETRUNC`).
    pub fn recv(&self, buf: impl Into<Buf>, context: u64) -> Result<()> {
        let mut st = self.st();
        st.recvs.push_back((context, buf.into()));
        st.deliver();
        Ok(())
    }
}

impl State {
    fn wr_id(&mut self) -> u64 {
        let w = self.next_wr;
        self.next_wr += 1;
        w
    }

    fn post_slot(&mut self, n: usize) -> Result<()> {
        let w = self.wr_id();
        let sge = self.slots[n].sge(0, (GRH + self.max) as u32);
        self.qp.post_recv(RecvWr {
            wr_id: w,
            sg_list: softrdma_proto::sg![sge],
        })?;
        self.wrs.insert(w, Wr::Slot(n));
        Ok(())
    }

    /// Asks `peer`'s CM for its QP (SIDR); `out` waits for the answer.
    fn resolve(&mut self, peer: SocketAddr, out: Out) -> Result<()> {
        let id = CmId::new(&self.chan, self.dom.ctx(), PortSpace::Udp)?;
        let n = self.next_id;
        self.next_id += 1;
        id.set_user(n);
        id.resolve_addr(Some(SocketAddr::new(self.dom.ip(), 0)), peer)?;
        self.resolving.insert(n, peer);
        self.peers.insert(
            peer,
            Peer::Resolving {
                _id: id,
                queued: vec![out],
            },
        );
        Ok(())
    }

    fn post_send(&mut self, dest: softrdma_proto::UdDest, out: Out) {
        let len = out.buf.len();
        let pd = self.dom.pd();
        let reg = (len > 0).then(|| out.buf.register(pd, len, AccessFlags::LOCAL_WRITE));
        let reg = match reg.transpose() {
            Ok(r) => r,
            Err(_) => {
                let f = flags::SEND | flags::MSG;
                self.cntrs.report(
                    &self.tx_cq,
                    Completion::of(out.context, f, Vec::new().into(), 0, errno::EIO),
                );
                return;
            }
        };
        let w = self.wr_id();
        let op = match out.data {
            Some(imm) => SendOp::SendWithImm(imm),
            None => SendOp::Send,
        };
        let (payload, flags) = match &reg {
            Some(r) => (
                softrdma::Payload::Sges(softrdma_proto::sg![r.mr.sge(0, len as u32)]),
                SendFlags::SIGNALED,
            ),
            None => (
                softrdma::Payload::Inline(Vec::new()),
                SendFlags::SIGNALED | SendFlags::INLINE,
            ),
        };
        let r = self.qp.post_send(SendWr {
            wr_id: w,
            op,
            payload,
            flags,
            ud: Some(dest),
        });
        let wr = Wr::Send {
            context: out.context,
            reg,
            silent: out.silent,
        };
        match r {
            Ok(()) => {
                self.wrs.insert(w, wr);
            }
            Err(_) => self.sent(wr, errno::EIO),
        }
    }

    /// A send's end: its completion, unless silent and well (then its count only: a
    /// counter is how an inject's sender knows it is done).
    fn sent(&mut self, wr: Wr, error: i32) {
        let Wr::Send {
            context,
            reg,
            silent,
        } = wr
        else {
            return;
        };
        let f = flags::SEND | flags::MSG;
        if silent && error == 0 {
            self.cntrs.count(f, false);
            return;
        }
        let len = match &reg {
            Some(r) if error == 0 => r.mr.len(),
            _ => 0,
        };
        let buf = reg.map_or_else(|| Vec::new().into(), Registered::back);
        self.cntrs
            .report(&self.tx_cq, Completion::of(context, f, buf, len, error));
    }

    /// Fills posted receives from the datagrams waiting in slots, oldest first.
    fn deliver(&mut self) {
        while !self.recvs.is_empty() && !self.arrived.is_empty() {
            let (Some((context, mut buf)), Some((n, len, imm))) =
                (self.recvs.pop_front(), self.arrived.pop_front())
            else {
                return;
            };
            let got = len.min(buf.len());
            let read = self.slots[n].read(GRH, &mut buf[..got]);
            let _ = self.post_slot(n);
            let error = match (read, len > got) {
                (Err(_), _) => errno::EIO,
                (Ok(()), true) => errno::ETRUNC,
                (Ok(()), false) => 0,
            };
            let data = imm.map(u64::from);
            let cq_data = if data.is_some() {
                flags::REMOTE_CQ_DATA
            } else {
                0
            };
            let f = flags::RECV | flags::MSG | cq_data;
            self.cntrs.report(
                &self.rx_cq,
                Completion {
                    data,
                    olen: len - got,
                    ..Completion::of(context, f, buf, got, error)
                },
            );
        }
    }

    /// Handles every device completion that waits ([`crate::auto::drain`]).
    fn device_completions(&mut self) {
        crate::auto::drain(self, |s| &mut s.vcq, Self::device_completion);
        self.deliver();
    }

    /// One device completion.
    fn device_completion(&mut self, wc: softrdma::Completion) {
        let Some(wr) = self.wrs.remove(&wc.wr_id) else {
            return;
        };
        let ok = wc.status == softrdma::WcStatus::Success;
        match wr {
            Wr::Slot(n) if ok && (wc.byte_len as usize) >= GRH => {
                let imm = wc
                    .wc_flags
                    .contains(softrdma::WcFlags::WITH_IMM)
                    .then_some(wc.imm_data);
                self.arrived.push_back((n, wc.byte_len as usize - GRH, imm));
            }
            Wr::Slot(n) if ok => {
                let _ = self.post_slot(n);
            }
            Wr::Slot(_) => {}
            wr => self.sent(wr, if ok { 0 } else { errno::EIO }),
        }
    }

    fn cm_event(&mut self, ev: CmEvent) {
        if ev.kind == CmEventKind::ConnectRequest {
            // A peer asks for this endpoint's QP: answer with it.
            if ev.id.attach_qp(&self.qp).is_err() || ev.id.accept(&ConnParam::default()).is_err() {
                let _ = ev.id.reject(&[]);
            }
            return;
        }
        let Some(&peer) = self.resolving.get(&ev.id.user()) else {
            return;
        };
        let r = match ev.kind {
            CmEventKind::AddrResolved => ev.id.resolve_route().map_err(FabricError::from),
            CmEventKind::RouteResolved => ev
                .id
                .connect(&ConnParam::default())
                .map_err(FabricError::from),
            CmEventKind::Established => {
                self.resolved(peer, ev.ud.map(|u| (u.qp_num, u.qkey)));
                return;
            }
            CmEventKind::Rejected { .. }
            | CmEventKind::Unreachable
            | CmEventKind::Unresolved { .. } => {
                self.resolved(peer, None);
                return;
            }
            _ => Ok(()),
        };
        if r.is_err() {
            self.resolved(peer, None);
        }
    }

    /// `peer`'s QP and Q_Key came (or did not): its waiting sends go (or fail).
    fn resolved(&mut self, peer: SocketAddr, qp: Option<(u32, u32)>) {
        self.resolving.retain(|_, p| *p != peer);
        let queued = match self.peers.remove(&peer) {
            Some(Peer::Resolving { queued, .. }) => queued,
            _ => Vec::new(),
        };
        let dest = qp.and_then(|(qpn, qkey)| self.dest(peer.ip(), qpn, qkey));
        let Some(dest) = dest else {
            for out in queued {
                let f = flags::SEND | flags::MSG;
                self.cntrs.report(
                    &self.tx_cq,
                    Completion::of(out.context, f, out.buf, 0, errno::EIO),
                );
            }
            return;
        };
        self.peers.insert(peer, Peer::Ready(dest));
        for out in queued {
            self.post_send(dest, out);
        }
    }

    /// Where datagrams to QP `qpn` at `ip` go.
    fn dest(&self, ip: IpAddr, qpn: u32, qkey: u32) -> Option<softrdma_proto::UdDest> {
        let gid = match ip {
            IpAddr::V4(v4) => v4.to_ipv6_mapped(),
            IpAddr::V6(v6) => v6,
        };
        let ah = self.dom.pd().create_ah(gid, 0).ok()?;
        Some(ah.dest(softrdma::Qpn::new(qpn), qkey))
    }
}

impl Driven for State {
    fn app_reads(&self) -> u64 {
        self.app_reads
    }

    fn note_app_read(&mut self) {
        self.app_reads = self.app_reads.wrapping_add(1);
    }

    fn device_cq(&self) -> Option<&DeviceCq> {
        Some(&self.vcq)
    }

    fn progress_all(&mut self) {
        self.device_completions();
        while let Some(ev) = self.chan.try_event() {
            self.cm_event(ev);
        }
    }
}
