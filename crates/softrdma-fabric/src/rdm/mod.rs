//! The reliable-datagram endpoint (`FI_EP_RDM`): reliable and connectionless to its user,
//! over RC connections that it makes on the first send to a peer and keeps (through
//! softrdma's connection manager, to the peer's IP address and port), and that peers make
//! to it. Messages and tagged messages (`fi_send`, `fi_tsend`, `fi_inject`, with remote CQ
//! data), matched by `matching`, speak the protocol of `wire`: eager up to
//! [`EAGER_MAX`] bytes, by rendezvous (the receiver READs the sender's buffer, no copy on
//! either side) above.
//!
//! Opens on a [`Domain`] (a softrdma device, shared with the domain's other endpoints and
//! its regions) and owns its connections, the posted receives and the messages that came
//! unexpected. `conn` handles the connection events, `progress` the device's completions,
//! `rma` the RMA and atomic verbs, `multi` the multi-receive buffers, and `count` the
//! completions' way to their CQs and counters; the crate's `auto` runs the progress
//! thread.
//!
//! Threads and locks: the endpoint's state is behind one lock (`FabricEp`, softrdma's
//! ranked type), taken by each call, by the progress that a bound CQ's read drives, and by
//! the progress thread; under it, the address vector's and the CQ's entries' locks and
//! softrdma's own (a post, a poll, a CM verb), all of higher rank. Every call
//! returns without waiting for the network.

mod conn;
mod count;
mod multi;
mod progress;
mod rma;

pub(crate) use rma::rkey;
pub use rma::{AtomicOp, RmaOpts};
pub(crate) use rma::{atomic_op, no_data};

use crate::Map;
use crate::addr::AddressVector;
use crate::buf::{Buf, Registered};
use crate::cq::{Completion, CompletionQueue, errno, flags};
use crate::domain::Domain;
use crate::error::{FabricError, Result};
use crate::matching::{Accepts, FI_ADDR_UNSPEC, FiAddr, Matcher};
use crate::wire::{HEADER_LEN, Header, Op};
use softrdma::cm::{CmId, EventChannel, PortSpace};
use softrdma::sync::{Guard, Lock, Rank};
use softrdma::{AccessFlags, MemoryRegion, QueuePair};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;

/// The largest message sent eagerly (in the SEND that carries its header); larger ones go
/// by rendezvous.
pub const EAGER_MAX: usize = 8192;
/// Receive slots posted on each connection (the sender's RNR retries wait for more).
const SLOTS: usize = 64;
/// A slot's size: a header and the largest eager payload.
const SLOT_LEN: usize = HEADER_LEN + EAGER_MAX;
/// SENDs up to this size (header included) go inline: copied at the post, with no
/// registration (an RTS, a FIN, a small message).
const INLINE_MAX: usize = 256;

/// A reliable-datagram endpoint (`fid_ep` of type `FI_EP_RDM`).
pub struct Endpoint {
    /// Stopped and joined first, before the state's descriptors close.
    _auto: crate::auto::Auto,
    st: Arc<Lock<State>>,
    addr: SocketAddr,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("addr", &self.addr)
            .finish()
    }
}

/// A receive posted and not yet matched.
struct Recv {
    context: u64,
    buf: Buf,
    tagged: bool,
    /// The multi-receive buffer it stands for (`multi`), whose memory the state keeps.
    multi: Option<multi::Part>,
}

/// A message that came before a receive that takes it.
enum Arrived {
    /// An eager message: its slot's bytes (header first).
    Eager { hdr: Header, slot: Vec<u8> },
    /// A rendezvous request, from connection `conn`.
    Rts { hdr: Header, conn: usize },
}

/// A receive's completion flags: of a tagged message or not, carrying remote CQ data or
/// not.
fn recv_flags(tagged: bool, data: bool) -> u64 {
    let kind = if tagged { flags::TAGGED } else { flags::MSG };
    let data = if data { flags::REMOTE_CQ_DATA } else { 0 };
    flags::RECV | kind | data
}

impl Arrived {
    fn header(&self) -> &Header {
        match self {
            Arrived::Eager { hdr, .. } | Arrived::Rts { hdr, .. } => hdr,
        }
    }
}

/// What a posted device WR is, by its ID.
enum Wr {
    /// Receive slot `slot` of connection `conn`.
    Slot { conn: usize, slot: usize },
    /// An eager send of the user's: `buf` goes back in its completion.
    Send {
        context: u64,
        flags: u64,
        buf: Buf,
        inject: bool,
    },
    /// The request to send of rendezvous message `msg_id`: its failure fails the send.
    Rts { msg_id: u64 },
    /// A FIN, or a WRITEDATA after a WRITE: nothing to complete.
    Fin,
    /// An RMA WRITE or READ of the user's, from or into `reg`, which goes back in its
    /// completion (none with `silent`).
    Rma {
        context: u64,
        flags: u64,
        reg: Registered,
        silent: bool,
    },
    /// A rendezvous READ into a receive's buffer (registered as `reg` meanwhile).
    Read {
        recv: Recv,
        reg: Registered,
        conn: usize,
        hdr: Header,
        src: FiAddr,
    },
}

/// What a queued send WR carries.
enum Out {
    /// Bytes of the protocol's (a header, an eager message): inline or parked in the QP.
    Bytes(Vec<u8>),
    /// The user's memory its WR registered (an RMA).
    Registered,
}

/// A send waiting for its connection: `out` goes as `op` (a SEND of the protocol's, or
/// the user's RMA).
struct Queued {
    out: Out,
    op: softrdma::SendOp,
    wr: Wr,
}

/// A rendezvous send, its buffer registered for the peer's READ until the FIN.
struct RndvOut {
    context: u64,
    flags: u64,
    mr: Registered,
    /// No completion (`FI_SELECTIVE_COMPLETION` without `FI_COMPLETION`).
    silent: bool,
    /// The connection its RTS went on: if that connection is lost, so is the FIN.
    conn: usize,
}

/// One RC connection to a peer endpoint.
struct Conn {
    /// Its CM ID (dropping it, or `lost`, ends the connection); gone, with its QP, once
    /// the connection has failed and drained (`retire`).
    id: Option<CmId>,
    qp: Option<Arc<QueuePair>>,
    /// Its receive slots, registered once and posted again after each is emptied.
    slots: Vec<MemoryRegion>,
    /// How many of them are posted (kept until each completes or flushes, so that what
    /// one received before the connection ended is still read).
    posted_slots: usize,
    /// Signaled send WRs posted on it and not yet completed.
    in_flight: usize,
    /// The peer endpoint's address (what it listens on).
    peer: SocketAddr,
    ready: bool,
    failed: bool,
    queued: VecDeque<Queued>,
}

struct State {
    dom: Arc<Domain>,
    vcq: crate::auto::DeviceCq,
    chan: EventChannel,
    _listener: CmId,
    me: SocketAddr,
    av: Arc<AddressVector>,
    /// Where sends and the endpoint's own RMA complete (`FI_TRANSMIT`).
    tx_cq: Arc<CompletionQueue>,
    /// Where receives and peers' writes with data complete (`FI_RECV`).
    rx_cq: Arc<CompletionQueue>,
    /// The counters bound to it, by what they count.
    cntrs: crate::counter::Counters,
    conns: Vec<Conn>,
    by_peer: Map<SocketAddr, usize>,
    /// Each peer endpoint's number, as matching knows its sources: given when a message
    /// from it comes or a receive names it, and kept. A message is matched by who sent
    /// it, not by its address vector entry, which may come later than the message
    /// (Open MPI's ranks insert each other at different times): the entry is looked up
    /// when the receive completes.
    peer_ids: Map<SocketAddr, FiAddr>,
    peer_addrs: Vec<SocketAddr>,
    by_qpn: Map<u32, usize>,
    matcher: Matcher<Recv, Arrived>,
    /// Multi-receive buffers, by number.
    multis: Map<u64, multi::Multi>,
    next_multi: u64,
    /// Messages taken out of matching by a peek with `FI_CLAIM`, by its context, with
    /// their senders.
    claimed: Map<u64, (FiAddr, Arrived)>,
    wrs: Map<u64, Wr>,
    next_wr: u64,
    rndv_out: Map<u64, RndvOut>,
    next_msg: u64,
    /// Receive slots emptied and not yet posted again, with their connections (see
    /// `repost_later`).
    repost: Vec<(usize, usize)>,
    /// Headers a peer sent that this endpoint could not parse (dropped).
    bad_headers: u64,
    /// How many times the program has read a CQ this endpoint is bound to (see `auto`).
    app_reads: u64,
    /// Whether the program's last read brought device completions (see `app_progress`).
    app_productive: bool,
}

/// Options of a send.
#[derive(Debug, Clone, Copy, Default)]
pub struct SendOpts {
    /// Send tagged, with this tag (`fi_tsend`).
    pub tag: Option<u64>,
    /// Remote CQ data for the receiver's completion (`fi_senddata`).
    pub data: Option<u64>,
    /// No completion for this send: `fi_inject`, or a send without `FI_COMPLETION` on an
    /// endpoint bound with `FI_SELECTIVE_COMPLETION`. The buffer is not given back.
    pub inject: bool,
}

impl Endpoint {
    /// An endpoint on `addr` (an IP address softrdma can open a device on, and a port to
    /// listen on; port 0 picks one), on a domain of its own, its completions to `cq`,
    /// its peers in `av`.
    pub fn open(
        addr: SocketAddr,
        av: Arc<AddressVector>,
        cq: Arc<CompletionQueue>,
    ) -> Result<Self> {
        Self::open_split(addr, av, cq.clone(), cq)
    }

    /// As [`Endpoint::open`], with sends completing to `tx_cq` and receives to `rx_cq`
    /// (`fi_ep_bind` with `FI_TRANSMIT` and `FI_RECV` apart).
    pub fn open_split(
        addr: SocketAddr,
        av: Arc<AddressVector>,
        tx_cq: Arc<CompletionQueue>,
        rx_cq: Arc<CompletionQueue>,
    ) -> Result<Self> {
        Self::open_on(&Domain::open(addr.ip())?, addr.port(), av, tx_cq, rx_cq)
    }

    /// An endpoint on `domain`'s device, listening on `port` (0 picks one), its sends
    /// completing to `tx_cq` and its receives to `rx_cq` (`fi_endpoint`, then
    /// `fi_ep_bind` and `fi_enable`). Regions of the domain are good on it.
    pub fn open_on(
        domain: &Arc<Domain>,
        port: u16,
        av: Arc<AddressVector>,
        tx_cq: Arc<CompletionQueue>,
        rx_cq: Arc<CompletionQueue>,
    ) -> Result<Self> {
        let ctx = domain.ctx();
        let addr = SocketAddr::new(domain.ip(), port);
        let vcq = crate::auto::DeviceCq::new(ctx, 4096)?;
        let chan = EventChannel::new()?;
        let listener = CmId::new(&chan, ctx, PortSpace::Tcp)?;
        listener.bind_addr(addr)?;
        listener.listen(128)?;
        let me = listener.local_addr().unwrap_or(addr);
        // What the progress thread sleeps on; both stay open as long as the state does.
        let (cm_fd, cq_fd) = (chan.fd(), vcq.fd());
        let st = Arc::new(Lock::new(
            Rank::FabricEp,
            State {
                dom: domain.clone(),
                vcq,
                chan,
                _listener: listener,
                me,
                av,
                tx_cq: tx_cq.clone(),
                rx_cq: rx_cq.clone(),
                cntrs: crate::counter::Counters::default(),
                conns: Vec::new(),
                by_peer: Map::default(),
                peer_ids: Map::default(),
                peer_addrs: Vec::new(),
                by_qpn: Map::default(),
                matcher: Matcher::default(),
                claimed: Map::default(),
                multis: Map::default(),
                next_multi: 1,
                wrs: Map::default(),
                next_wr: 1,
                rndv_out: Map::default(),
                next_msg: 1,
                repost: Vec::with_capacity(SLOTS),
                bad_headers: 0,
                app_reads: 0,
                app_productive: false,
            },
        ));
        let auto = crate::auto::start(&st, (&tx_cq, &rx_cq), (cm_fd, cq_fd))?;
        Ok(Self {
            _auto: auto,
            st,
            addr: me,
        })
    }

    /// The endpoint's address, for its peers' address vectors (`fi_getname`).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn st(&self) -> Guard<'_, State> {
        self.st.lock()
    }

    /// Sends `buf` to `dest` (`fi_send`, `fi_tsend`, `fi_senddata`, `fi_inject` by
    /// `opts`); its completion gives `buf` back.
    pub fn send(
        &self,
        dest: FiAddr,
        buf: impl Into<Buf>,
        context: u64,
        opts: SendOpts,
    ) -> Result<()> {
        self.st().send(dest, buf.into(), context, opts)
    }

    /// Posts a receive of an untagged message into `buf` (`fi_recv`), from `src` only
    /// unless it is `FI_ADDR_UNSPEC`.
    pub fn recv(&self, buf: impl Into<Buf>, src: FiAddr, context: u64) -> Result<()> {
        let a = Accepts {
            tagged: false,
            tag: 0,
            ignore: 0,
            src,
        };
        self.st().post_recv(a, buf.into(), context)
    }

    /// Posts a receive of a tagged message whose tag agrees with `tag` outside `ignore`
    /// (`fi_trecv`).
    pub fn trecv(
        &self,
        buf: impl Into<Buf>,
        src: FiAddr,
        tag: u64,
        ignore: u64,
        context: u64,
    ) -> Result<()> {
        let a = Accepts {
            tagged: true,
            tag,
            ignore,
            src,
        };
        self.st().post_recv(a, buf.into(), context)
    }

    /// Looks for a message that a receive with `tagged`, `tag`, `ignore` and `src` would
    /// take, among those that wait unexpected (`fi_trecvmsg` with `FI_PEEK`): a
    /// completion with its length, tag, data and source and no bytes, or an `ENOMSG`
    /// error entry. With `claim` (`FI_CLAIM`), the message is taken out of matching and
    /// kept for [`Endpoint::recv_claimed`] with the same `context`.
    pub fn peek(
        &self,
        tagged: bool,
        (src, tag, ignore): (FiAddr, u64, u64),
        context: u64,
        claim: bool,
    ) -> Result<()> {
        let mut st = self.st();
        let a = Accepts {
            tagged,
            tag,
            ignore,
            src: st.matching_src(src)?,
        };
        let found = if claim {
            st.matcher.claim(&a).map(|(o, m)| {
                let hdr = *m.header();
                st.claimed.insert(context, (o.src, m));
                (o.src, hdr)
            })
        } else {
            st.matcher.peek(&a).map(|(o, m)| (o.src, *m.header()))
        };
        let c = match found {
            Some((src, hdr)) => Completion {
                context,
                flags: recv_flags(tagged, hdr.data.is_some()),
                len: hdr.len as usize,
                buf: Vec::new().into(),
                data: hdr.data,
                tag: hdr.tag,
                src: st.source(src),
                error: 0,
                olen: 0,
                offset: 0,
            },
            None => Completion::of(
                context,
                recv_flags(tagged, false),
                Vec::new().into(),
                0,
                errno::ENOMSG,
            ),
        };
        st.rx_cq.push(c);
        Ok(())
    }

    /// Receives into `buf` the message a peek with `claim` took for `context`
    /// (`FI_CLAIM`), or drops it with `discard` (`FI_DISCARD`, a completion with no
    /// bytes).
    pub fn recv_claimed(&self, buf: impl Into<Buf>, context: u64, discard: bool) -> Result<()> {
        let mut st = self.st();
        let (src, m) = st.claimed.remove(&context).ok_or(FabricError::Invalid {
            what: "fi_trecvmsg(FI_CLAIM)",
            why: format!("no message was claimed with context {context:#x}"),
        })?;
        let tagged = m.header().tagged;
        let r = Recv {
            context,
            buf: buf.into(),
            tagged,
            multi: None,
        };
        if discard {
            let c = Completion::of(context, recv_flags(tagged, false), r.buf, 0, 0);
            st.complete_rx(c);
            // A rendezvous message's sender waits for its FIN.
            if let Arrived::Rts { hdr, conn } = m {
                st.send_fin(conn, hdr.msg_id);
            }
        } else {
            st.deliver(r, src, m);
        }
        Ok(())
    }

    /// Takes back the oldest posted receive with `context` (`fi_cancel`): it completes
    /// with `ECANCELED`, its buffer back. False if none waits.
    pub fn cancel(&self, context: u64) -> bool {
        let mut st = self.st();
        match st.matcher.cancel(|r| r.context == context) {
            Some(Recv { multi: Some(p), .. }) => {
                st.cancel_multi(p.id());
                true
            }
            Some(r) => {
                let flags = recv_flags(r.tagged, false);
                st.complete_rx(Completion::of(r.context, flags, r.buf, 0, errno::ECANCELED));
                true
            }
            None => false,
        }
    }

    /// How many receives are posted and not yet matched, and how many messages came
    /// before a receive that takes them and wait.
    pub fn pending(&self) -> (usize, usize) {
        self.st().matcher.lens()
    }

    /// How many peer headers this endpoint dropped as malformed.
    pub fn bad_headers(&self) -> u64 {
        self.st().bad_headers
    }

    /// Its connections: how many hold a QP (made, being made, or ended and still
    /// draining), and how many ended ones were let go (their QP and CM ID gone, a few
    /// words kept each).
    pub fn connections(&self) -> (usize, usize) {
        let st = self.st();
        let live = st.conns.iter().filter(|c| c.id.is_some()).count();
        (live, st.conns.len() - live)
    }
}

impl Drop for Endpoint {
    /// Closes every connection (`fi_close`), so that each peer hears of it now, by a DREQ,
    /// instead of waiting on a connection nobody answers (a rendezvous send for its FIN).
    /// What waits is handled first, so that the ACKs of what this endpoint received go
    /// out before the DREQs (a peer whose last send landed here would otherwise see it
    /// flushed).
    fn drop(&mut self) {
        let mut st = self.st();
        st.progress_all();
        st.dom.ctx().flush_acks();
        for c in 0..st.conns.len() {
            st.lost(c);
        }
    }
}

impl crate::auto::Driven for State {
    fn app_reads(&self) -> u64 {
        self.app_reads
    }

    fn note_app_read(&mut self) {
        self.app_reads = self.app_reads.wrapping_add(1);
    }

    fn device_cq(&self) -> Option<&crate::auto::DeviceCq> {
        Some(&self.vcq)
    }

    fn progress_all(&mut self) {
        State::progress_all(self);
    }

    /// The read right after one that brought completions leaves the device alone (its
    /// connection events are still handled). A program that reads its CQ until it is
    /// empty before it answers (Open MPI's progress loop) would otherwise poll the device
    /// once more, find nothing, and make it send the ACK it holds for the message just
    /// received alone, instead of in the same send as the answer: two packets a turn
    /// instead of one. The device's own timers send a held ACK in time if no answer comes.
    fn app_progress(&mut self) {
        self.flush_reposts();
        if std::mem::take(&mut self.app_productive) {
            if self.cm_events() {
                self.device_completions();
            }
            return;
        }
        let n = self.device_completions();
        if self.cm_events() {
            self.device_completions();
        }
        self.app_productive = n > 0;
    }
}

impl State {
    /// The number matching knows peer `addr` by.
    fn peer_id(&mut self, addr: SocketAddr) -> FiAddr {
        if let Some(&id) = self.peer_ids.get(&addr) {
            return id;
        }
        let id = self.peer_addrs.len() as FiAddr;
        self.peer_addrs.push(addr);
        self.peer_ids.insert(addr, id);
        id
    }

    /// The source a receive names (an AV entry, or `FI_ADDR_UNSPEC`) as matching knows
    /// it.
    fn matching_src(&mut self, src: FiAddr) -> Result<FiAddr> {
        if src == FI_ADDR_UNSPEC {
            return Ok(src);
        }
        let addr = self.av.lookup(src)?;
        Ok(self.peer_id(addr))
    }

    /// The address vector's entry for the peer matching knows as `id` (`FI_ADDR_UNSPEC`
    /// when it has none).
    fn source(&self, id: FiAddr) -> FiAddr {
        usize::try_from(id)
            .ok()
            .and_then(|i| self.peer_addrs.get(i))
            .map_or(FI_ADDR_UNSPEC, |a| self.av.index_of(a))
    }

    fn wr_id(&mut self) -> u64 {
        let w = self.next_wr;
        self.next_wr += 1;
        w
    }

    fn send(&mut self, dest: FiAddr, buf: Buf, context: u64, opts: SendOpts) -> Result<()> {
        use crate::cq::flags;
        let peer = self.av.lookup(dest)?;
        // Before the buffer is taken: a send that cannot start gives it back unused.
        let c = self.conn_to(peer)?;
        let kind = if opts.tag.is_some() {
            flags::TAGGED
        } else {
            flags::MSG
        };
        let msg_id = self.next_msg;
        self.next_msg += 1;
        let mut hdr = Header {
            op: Op::Eager,
            tagged: opts.tag.is_some(),
            tag: opts.tag.unwrap_or(0),
            data: opts.data,
            len: buf.len() as u64,
            msg_id,
        };
        let q = if buf.len() <= EAGER_MAX {
            Queued {
                out: Out::Bytes(hdr.with_payload(&buf)),
                op: softrdma::SendOp::Send,
                wr: Wr::Send {
                    context,
                    flags: flags::SEND | kind,
                    buf,
                    inject: opts.inject,
                },
            }
        } else {
            if opts.inject {
                return Err(FabricError::Invalid {
                    what: "fi_inject",
                    why: format!("{} bytes is over the inject size {EAGER_MAX}", buf.len()),
                });
            }
            let len = buf.len();
            let mr = buf.register(self.dom.pd(), len, AccessFlags::REMOTE_READ)?;
            hdr.op = Op::Rts {
                addr: mr.mr.addr(),
                rkey: mr.mr.rkey(),
            };
            self.rndv_out.insert(
                msg_id,
                RndvOut {
                    context,
                    flags: flags::SEND | kind,
                    mr,
                    silent: opts.inject,
                    conn: c,
                },
            );
            Queued {
                out: Out::Bytes(hdr.emit().to_vec()),
                op: softrdma::SendOp::Send,
                wr: Wr::Rts { msg_id },
            }
        };
        self.enqueue(c, q);
        Ok(())
    }

    /// Posts `q` on connection `c` once it is established (now, if it is).
    fn enqueue(&mut self, c: usize, q: Queued) {
        if self.conns[c].ready {
            self.post(c, q);
        } else {
            self.conns[c].queued.push_back(q);
        }
    }

    /// Posts `q` on connection `c`'s QP; a post that fails completes in error.
    fn post(&mut self, c: usize, q: Queued) {
        let w = self.wr_id();
        let Some(qp) = self.conns[c].qp.clone() else {
            self.fail(q.wr, crate::cq::errno::EIO);
            return;
        };
        // An inline SEND whose completion nobody waits for (an inject, a FIN) goes
        // unsignaled: the device reports it only if it fails.
        let mut silent = matches!(q.wr, Wr::Fin | Wr::Send { inject: true, .. });
        let r = match q.out {
            Out::Bytes(b) if matches!(q.op, softrdma::SendOp::Send) && b.len() <= INLINE_MAX => qp
                .post_send(softrdma::SendWr {
                    wr_id: w,
                    op: q.op,
                    payload: softrdma::Payload::Inline(b),
                    flags: if silent {
                        softrdma::SendFlags::INLINE
                    } else {
                        softrdma::SendFlags::SIGNALED | softrdma::SendFlags::INLINE
                    },
                    ud: None,
                }),
            Out::Bytes(b) => {
                // Its buffer is parked in the QP until its completion takes it back.
                silent = false;
                qp.post_send_owned(w, q.op, softrdma::SendFlags::SIGNALED, None, b)
            }
            Out::Registered => {
                silent = false;
                let Wr::Rma { reg, .. } = &q.wr else {
                    unreachable!("only an RMA carries registered memory")
                };
                let sge = reg.mr.sge(0, reg.mr.len() as u32);
                qp.post_send(softrdma::SendWr {
                    wr_id: w,
                    op: q.op,
                    payload: softrdma::Payload::Sges(softrdma_proto::sg![sge]),
                    flags: softrdma::SendFlags::SIGNALED,
                    ud: None,
                })
            }
        };
        match r {
            Ok(()) if silent => {
                if let Wr::Send { flags, .. } = q.wr {
                    self.counted(flags, false);
                }
            }
            Ok(()) => {
                self.conns[c].in_flight += 1;
                self.wrs.insert(w, q.wr);
            }
            Err(_) => self.fail(q.wr, crate::cq::errno::EIO),
        }
    }

    fn post_recv(&mut self, mut a: Accepts, buf: Buf, context: u64) -> Result<()> {
        a.src = self.matching_src(a.src)?;
        let r = Recv {
            context,
            buf,
            tagged: a.tagged,
            multi: None,
        };
        if let Some((r, o, m)) = self.matcher.post(a, r) {
            self.deliver(r, o.src, m);
        }
        Ok(())
    }
}
