//! The IB communication manager as a pure state machine (IBTA vol. 1, chapter 12): the
//! connection states of 12.9.6 for both the active and the passive side, service ID
//! resolution (SIDR, 12.11), message retransmission with the timeouts the messages carry,
//! duplicate detection, MRA, REJ, and TIMEWAIT.
//!
//! # Calling contract
//! A [`CmAgent`] serves one port's QP1: every CM MAD that arrives there goes to
//! [`CmAgent::handle_mad`], whatever connection it belongs to. It has no sockets, clock or
//! threads. `A` is the caller's name for a peer (the address its MADs came from and go to).
//!
//! * **Inputs.** The consumer's verbs ([`CmAgent::connect`], [`CmAgent::listen`],
//!   [`CmAgent::accept`], [`CmAgent::reject`], [`CmAgent::ready_to_use`],
//!   [`CmAgent::establish`], [`CmAgent::disconnect`], [`CmAgent::mra`],
//!   [`CmAgent::sidr_request`], [`CmAgent::sidr_reply`], [`CmAgent::destroy`]),
//!   [`CmAgent::handle_mad`] and [`CmAgent::handle_timeout`].
//! * **Outputs.** [`CmAgent::poll_transmit`] (MADs to send, with their peer),
//!   [`CmAgent::poll_event`] (what the consumer must hear) and [`CmAgent::poll_timeout`]
//!   (when `handle_timeout` is next due). Drain them after every input.
//! * **Time** is an [`Instant`] passed in; it must not go backwards.
//! * Nothing here panics on any MAD. A MAD that does not parse is counted in
//!   [`CmCounters::malformed`] and dropped; one that parses but fits no connection, or not
//!   its state, is counted in [`CmCounters::unexpected`] and dropped (or answered, where
//!   12.9.6 says so: a REJ for a REQ nobody listens for, the last reply again for a
//!   duplicate).
//!
//! # Timing
//! A sent REQ, REP, DREQ or SIDR_REQ is resent when its answer is late: after the
//! response timeout the message carries (4.096 µs × 2^n, IBTA 12.7.26 and 12.7.27) plus
//! twice the packet lifetime, up to `max_cm_retries` times; then the consumer hears
//! [`CmEvent::Timeout`] (a REQ or REP that went unanswered is also rejected with reason
//! TIMEOUT, as 12.9.6 asks). An MRA stretches the wait by its service timeout. A connection
//! that ends passes through TIMEWAIT for the packet lifetime and the peer's ACK delay, so that
//! its QPN and communication ID are not reused while packets may still be in flight.
//!
//! # Layout
//! This file holds the agent (its records of connections and SIDR requests, the listener
//! registry, ID drawing, the MAD dispatch and the output queues) and the helpers every
//! role uses. The roles are one file each, all methods of [`CmAgent`]: `connect.rs`
//! (establishment, both sides: REQ, REP, RTU, MRA, REJ, LAP), `disconnect.rs` (DREQ,
//! DREP, destruction, TIMEWAIT), `sidr.rs` (service ID resolution) and `timers.rs`
//! (resends, give-ups, TIMEWAIT exit). `types.rs` is the public vocabulary they share.

mod connect;
mod disconnect;
mod sidr;
mod timers;
mod types;

pub use types::{
    COLD_REJ_RESENDS, CmConfig, CmCounters, CmError, CmEvent, CmState, CommId, REJ_RETRY_WAIT,
    RELISTEN_GRACE, cm_timeout,
};

use crate::types::Instant;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use softrdma_wire::cm::{
    self, CmMad, CmMessage, DreqRepr, IdsRepr, MessageRef, MraRepr, PrivateData, RejRepr, RepRepr,
    ReqRepr, SidrRepRepr, SidrReqRepr, ap_status, rej_reason, sidr_status,
};
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::time::Duration;

/// One connection.
#[derive(Debug)]
struct Conn<A> {
    peer: A,
    state: CmState,
    active: bool,
    tid: u64,
    remote_comm_id: u32,
    remote_ca_guid: u64,
    local_qpn: u32,
    remote_qpn: u32,
    /// The message that is resent on a timeout or on a duplicate of what it answered.
    last: Option<CmMad>,
    /// When the timer fires, and how many resends are left.
    deadline: Option<Instant>,
    retries_left: u8,
    /// Resends per message: the REQ's max CM retries, for both sides.
    max_retries: u8,
    /// The wait between resends: for the active side the REQ's remote response timeout,
    /// for the passive side its local one (the time the active side said it needs to
    /// answer), each with twice the packet lifetime.
    timeout: Duration,
}

/// A SIDR request we sent, or answered.
#[derive(Debug)]
struct Sidr<A> {
    peer: A,
    active: bool,
    request_id: u32,
    last: CmMad,
    deadline: Option<Instant>,
    retries_left: u8,
}

/// The communication manager of one port (see the module docs).
#[derive(Debug)]
pub struct CmAgent<A> {
    config: CmConfig,
    rng: ChaCha8Rng,
    conns: HashMap<CommId, Conn<A>>,
    /// Connections by the peer's CA GUID and communication ID: how a REQ is known for a
    /// duplicate (IBTA 12.9.6.1: the pair names the peer's connection).
    by_remote: HashMap<(u64, u32), CommId>,
    sidrs: HashMap<CommId, Sidr<A>>,
    /// SIDR requests we answered, by peer and request ID.
    sidr_by_remote: HashMap<(A, u32), CommId>,
    listening: BTreeSet<u64>,
    /// Services whose listener went, and when (see [`RELISTEN_GRACE`]).
    unlistened: HashMap<u64, Instant>,
    /// Services bound by a consumer that does not listen on them yet (see
    /// [`CmAgent::bind`]).
    bound: HashSet<u64>,
    /// Peers to which a connection of ours last ended, and when (see [`REJ_RETRY_WAIT`]).
    ended: HashMap<A, Instant>,
    timers: BTreeSet<(Instant, CommId)>,
    /// The low byte of every ID this agent draws (see [`CmAgent::set_id_tag`]).
    tag: u8,
    out: VecDeque<(A, CmMad)>,
    events: VecDeque<CmEvent<A>>,
    counters: CmCounters,
}

impl<A: Copy + Eq + Hash + core::fmt::Debug> CmAgent<A> {
    /// An agent with nothing open; `seed` draws its communication IDs and transaction IDs.
    pub fn new(config: CmConfig, seed: u64) -> Self {
        Self {
            config,
            rng: ChaCha8Rng::seed_from_u64(seed),
            conns: HashMap::new(),
            by_remote: HashMap::new(),
            sidrs: HashMap::new(),
            sidr_by_remote: HashMap::new(),
            listening: BTreeSet::new(),
            unlistened: HashMap::new(),
            bound: HashSet::new(),
            ended: HashMap::new(),
            timers: BTreeSet::new(),
            tag: 0,
            out: VecDeque::new(),
            events: VecDeque::new(),
            counters: CmCounters::default(),
        }
    }

    /// The counters so far.
    pub fn counters(&self) -> CmCounters {
        self.counters
    }

    /// A connection's state.
    pub fn state(&self, id: CommId) -> Option<CmState> {
        self.conns.get(&id).map(|c| c.state)
    }

    /// Whether this side sent the connection's REQ (the active side), as `res show`
    /// says.
    pub fn is_active(&self, id: CommId) -> Option<bool> {
        self.conns.get(&id).map(|c| c.active)
    }

    /// Connections and SIDR requests alive (TIMEWAIT included): what `res show` lists.
    pub fn len(&self) -> usize {
        self.conns.len() + self.sidrs.len()
    }

    /// Whether nothing is alive.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Takes REQs and SIDR_REQs for `service_id` from now on.
    pub fn listen(&mut self, service_id: u64) -> Result<(), CmError> {
        if !self.listening.insert(service_id) {
            return Err(CmError::AddressInUse(service_id));
        }
        self.bound.remove(&service_id);
        self.unlistened.remove(&service_id);
        Ok(())
    }

    /// A consumer bound `service_id` and will likely listen on it: until it does (or
    /// [`Self::unbind`]s), a REQ for it is dropped rather than rejected, so that the
    /// requester's resend finds the listener (rdma_cm programs bind, tell their peer the
    /// port, then listen).
    pub fn bind(&mut self, service_id: u64) {
        self.bound.insert(service_id);
    }

    /// The consumer that bound `service_id` let it go without listening.
    pub fn unbind(&mut self, service_id: u64) {
        self.bound.remove(&service_id);
    }

    /// Takes no more requests for `service_id` (connections made stay). For
    /// [`RELISTEN_GRACE`] after, a REQ for it is dropped rather than rejected.
    pub fn unlisten(&mut self, now: Instant, service_id: u64) {
        if self.listening.remove(&service_id) {
            self.unlistened.insert(service_id, now);
        }
    }

    /// Makes every communication ID and SIDR request ID drawn from now on end in `tag`:
    /// where several agents share one port (one per process of a shared device), the
    /// port's reader tells whose a MAD is by the ID it names. The other 24 bits stay
    /// random.
    pub fn set_id_tag(&mut self, tag: u8) {
        self.tag = tag;
    }

    /// A fresh communication ID: random but for its tag, non-zero, not in use.
    fn new_id(&mut self) -> CommId {
        loop {
            let id: u32 = self.rng.random::<u32>() & !0xFF | u32::from(self.tag);
            if id != 0 && !self.conns.contains_key(&id) && !self.sidrs.contains_key(&id) {
                return id;
            }
        }
    }

    fn send(&mut self, to: A, mad: CmMad) {
        self.counters.sent += 1;
        self.out.push_back((to, mad));
    }

    /// Sends `msg` to connection `id`'s peer in its transaction, and keeps it as the last
    /// message sent, which a duplicate of the message it answers (or a timeout) sends again.
    fn send_kept(&mut self, id: CommId, msg: CmMessage) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        let m = mad(c.tid, msg);
        c.last = Some(m);
        let peer = c.peer;
        self.send(peer, m);
    }

    /// Moves connection `id` to `state` on a message it waited for (or one that stands in
    /// for it): its resend timer stops, and the consumer hears `event`.
    fn advance(&mut self, id: CommId, state: CmState, event: CmEvent<A>) {
        if let Some(c) = self.conns.get_mut(&id) {
            c.state = state;
        }
        self.arm(id, None);
        self.events.push_back(event);
    }

    /// [`Self::send_kept`], and waits for the answer: the timer sends it again, up to the
    /// connection's retries.
    fn send_awaiting(&mut self, now: Instant, id: CommId, msg: CmMessage) {
        self.send_kept(id, msg);
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        c.retries_left = c.max_retries;
        let timeout = c.timeout;
        self.arm(id, Some(now.add(timeout)));
    }

    fn conn(&mut self, id: CommId) -> Result<&mut Conn<A>, CmError> {
        self.conns.get_mut(&id).ok_or(CmError::UnknownId(id))
    }

    fn wrong(id: CommId, state: CmState, verb: &'static str) -> CmError {
        CmError::WrongState { id, state, verb }
    }

    /// A REJ of connection `id` in its state. IBTA 12.6.7.1: the message rejected is the
    /// REQ or REP we hold unanswered, and "other" otherwise; a REJ of a REQ carries no
    /// local ID (its sender never learnt ours; Linux sends 0 too).
    fn rej_mad(&self, c: &Conn<A>, id: CommId, reason: u16) -> CmMad {
        let message = match c.state {
            CmState::ReqRcvd | CmState::MraReqSent => MessageRef::Req,
            CmState::RepRcvd | CmState::MraRepSent => MessageRef::Rep,
            _ => MessageRef::Other,
        };
        let mut ari = cm::Info::default();
        if reason == rej_reason::TIMEOUT {
            // IBTA 12.6.7.2: a TIMEOUT reject carries the sender's CA GUID.
            ari.len = 8;
            ari.data.0[..8].copy_from_slice(&self.config.ca_guid.to_be_bytes());
        }
        mad(
            c.tid,
            CmMessage::Rej(RejRepr {
                local_comm_id: if c.state == CmState::ReqRcvd { 0 } else { id },
                remote_comm_id: c.remote_comm_id,
                message,
                reason,
                ari,
                private_data: PrivateData::default(),
            }),
        )
    }

    fn forget(&mut self, id: CommId) {
        self.arm(id, None);
        if let Some(c) = self.conns.remove(&id)
            && c.remote_comm_id != 0
            && self.by_remote.get(&(c.remote_ca_guid, c.remote_comm_id)) == Some(&id)
        {
            self.by_remote.remove(&(c.remote_ca_guid, c.remote_comm_id));
        }
    }

    /// One MAD from `from` (the UD payload of a packet to QP1).
    pub fn handle_mad(&mut self, now: Instant, from: A, data: &[u8]) {
        let mad = match CmMad::parse(data) {
            Ok(m) => m,
            Err(_) => {
                self.counters.malformed += 1;
                return;
            }
        };
        self.counters.received += 1;
        match mad.msg {
            CmMessage::Req(req) => self.on_req(now, from, mad.tid, req),
            CmMessage::Rep(rep) => self.on_rep(from, rep),
            CmMessage::Rtu(rtu) => self.on_rtu(from, rtu),
            CmMessage::Rej(rej) => self.on_rej(now, from, rej),
            CmMessage::Mra(mra) => self.on_mra(now, from, mra),
            CmMessage::Dreq(dreq) => self.on_dreq(now, from, mad.tid, dreq),
            CmMessage::Drep(drep) => self.on_drep(now, from, drep),
            CmMessage::Lap(lap) => self.on_lap(from, mad.tid, lap),
            CmMessage::Apr(_) => self.counters.unexpected += 1,
            CmMessage::SidrReq(req) => self.on_sidr_req(now, from, mad.tid, req),
            CmMessage::SidrRep(rep) => self.on_sidr_rep(from, rep),
        }
    }

    /// The connection a message from `from` addressed to our `local` ID belongs to, if
    /// the peer's ID matches (`remote` 0 before we learnt it).
    fn mine(&mut self, from: A, local: u32, remote: u32) -> Option<CommId> {
        let ok = self.conns.get(&local).is_some_and(|c| {
            c.peer == from && (c.remote_comm_id == remote || c.remote_comm_id == 0)
        });
        if !ok {
            self.counters.unexpected += 1;
        }
        ok.then_some(local)
    }

    /// The next MAD to send, with its peer.
    pub fn poll_transmit(&mut self) -> Option<(A, CmMad)> {
        self.out.pop_front()
    }

    /// The next event for the consumer.
    pub fn poll_event(&mut self) -> Option<CmEvent<A>> {
        self.events.pop_front()
    }
}

/// A DREP with no private data for connection `id`, in its transaction.
fn bare_drep<A>(c: &Conn<A>, id: CommId) -> CmMad {
    mad(
        c.tid,
        CmMessage::Drep(IdsRepr {
            local_comm_id: id,
            remote_comm_id: c.remote_comm_id,
            private_data: PrivateData::default(),
        }),
    )
}

/// `msg` in transaction `tid`, with the attribute modifier 0 that every CM message has.
fn mad(tid: u64, msg: CmMessage) -> CmMad {
    CmMad {
        tid,
        attr_mod: 0,
        msg,
    }
}

/// `data` as the private data of `message`, or the error naming its size.
fn private<const N: usize>(data: &[u8], message: &'static str) -> Result<PrivateData<N>, CmError> {
    PrivateData::from_slice(data).ok_or(CmError::PrivateDataTooLong {
        message,
        len: data.len(),
        max: N,
    })
}
