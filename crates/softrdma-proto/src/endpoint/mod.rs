//! The device core without I/O: what stands between a datagram and a QP, and between a QP's
//! deadlines and the clock. quinn-proto's `Endpoint` is the model.
//!
//! - [`QpTable`]: the QPs by number, and the QPN demultiplexing of every packet.
//! - [`Receiver`]: the receive checks of each datagram (it parses; its ICRC verifies, with
//!   the IPv4 identification recovered, see [`check`]; its QPN is known), the QP's handling
//!   of it, and the coalescing of responses: the QPs a batch of datagrams reached are
//!   serviced once, after the batch, so that one ACK answers all of a batch's requests
//!   (IBTA 9.7.5.1: an ACK acknowledges every request before it).
//! - [`timers::TimerQueue`]: the QPs' deadlines, which an idle QP has none of.
//! - [`Counter`]: every counter of a device, named once, as rxe's `hw_counters`.
//! - [`Endpoint`]: all of these for one owner, as the simulator drives them.
//!
//! # Contract
//! Nothing here reads a clock, touches a socket, starts a thread or uses `unsafe`: time is
//! the `now` the caller passes, and datagrams are bytes. Where the QPs live is the caller's
//! choice, through [`QpCell`]: the simulator keeps each behind a `Mutex` it alone uses; the
//! soft device keeps them behind its per-QP locks, with its receive state, QP table and timer
//! queue each behind a lock of its own, and drives the same [`Receiver`] and
//! [`timers::TimerQueue`] from whichever thread holds them. [`Receiver::datagram`] locks one
//! QP at a time and holds no lock of the caller's own beyond that.

pub mod check;
pub mod timers;

use crate::qp::QueuePair;
use crate::types::Instant;
use check::{IcrcCheck, IcrcOk, KeyMap};
use softrdma_wire::IbPacket;
use std::net::IpAddr;
use std::ops::DerefMut;
use std::sync::{Arc, Mutex, MutexGuard};

/// Where a QP lives: something that lends it out for one call at a time.
pub trait QpCell {
    /// Exclusive access to the QP until the guard is dropped.
    fn lock_qp(&self) -> impl DerefMut<Target = QueuePair> + '_;
}

impl QpCell for Mutex<QueuePair> {
    fn lock_qp(&self) -> impl DerefMut<Target = QueuePair> + '_ {
        // A panic under the lock leaves the QP as it was between two calls: keep going.
        Mutex::lock(self).unwrap_or_else(|e| e.into_inner())
    }
}

/// A QP table as the receive path reads it.
pub trait Lookup<C> {
    /// Moves on whenever a QP leaves the table, so that a receiver's memo of the last QP
    /// found is known to be stale.
    fn generation(&self) -> u64;
    /// The QP numbered `qpn`.
    fn get(&self, qpn: u32) -> Option<Arc<C>>;
    /// Adds to `out` the QPs attached to the multicast group `group` (its IP address, the
    /// GID's form on the wire). A table without multicast has none.
    fn members(&self, group: IpAddr, out: &mut Vec<Arc<C>>) {
        let _ = (group, out);
    }
}

/// The destination QPN of a multicast packet: InfiniBand's multicast QPN, 0xFFFFFF. The
/// packet goes to every QP attached to its destination group.
pub const MULTICAST_QPN: u32 = 0x00FF_FFFF;

/// The QPs by number.
pub struct QpTable<C> {
    map: KeyMap<Arc<C>>,
    generation: u64,
}

impl<C> Default for QpTable<C> {
    fn default() -> Self {
        Self {
            map: KeyMap::default(),
            generation: 0,
        }
    }
}

impl<C> QpTable<C> {
    /// Adds a QP; false (and nothing changed) if the number is taken.
    pub fn insert(&mut self, qpn: u32, qp: Arc<C>) -> bool {
        if self.map.contains_key(&qpn) {
            return false;
        }
        self.map.insert(qpn, qp);
        true
    }

    /// Removes the QP numbered `qpn`.
    pub fn remove(&mut self, qpn: u32) -> Option<Arc<C>> {
        let q = self.map.remove(&qpn);
        self.generation += 1;
        q
    }

    /// Whether `qpn` is taken.
    pub fn contains(&self, qpn: u32) -> bool {
        self.map.contains_key(&qpn)
    }

    /// Every QP, in no particular order.
    pub fn values(&self) -> impl Iterator<Item = &Arc<C>> {
        self.map.values()
    }

    /// How many QPs there are.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

impl<C> Lookup<C> for QpTable<C> {
    fn generation(&self) -> u64 {
        self.generation
    }
    fn get(&self, qpn: u32) -> Option<Arc<C>> {
        self.map.get(&qpn).cloned()
    }
}

/// Every counter of a device, named once: the device's own (what its datapath sends and
/// receives) and the ones summed over its QPs ([`crate::QpCounters`]), each with its rxe
/// `hw_counters` name where rxe has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Counter {
    /// Packets sent.
    SentPkts,
    /// Packets received and handed to a QP.
    RcvdPkts,
    /// Packets for a QPN the device does not have.
    RcvdUnknownQpn,
    /// Packets that did not parse.
    RcvdMalformed,
    /// Packets whose ICRC no IPv4 identification made right (corrupt).
    RcvdIcrcErr,
    /// IPv4 packets whose ICRC matched only with the sender's recovered IP ID.
    RcvdIcrcIpId,
    /// Sends the socket refused (buffer full); retransmission recovers them.
    SendErr,
    /// Batches handed to the kernel (`sendmmsg` calls, give or take a retry): with `SentPkts`,
    /// how well packets share system calls.
    SendCalls,
    /// Probes sent to learn where a connected socket's IPv4 identification counter stands: three
    /// per destination, and one after each failed send.
    IpIdProbes,
    /// Datagrams the device's owner received for another process that shares the device,
    /// and forwarded to it.
    ForwardedPkts,
    /// Datagrams for another process that its forwarding socket refused (it reads too
    /// slowly, or is gone); retransmission recovers them.
    ForwardErr,
    /// Datagrams a member of a shared device got for another process's QPN, by the
    /// kernel's mistake in the moment after a member died, and handed back to the owner
    /// (its receive path counted them in `rcvd_unknown_qpn` first).
    HandedBackPkts,
    /// RDMA WRITEs that a same-host peer's kernel would not let this process place by
    /// cross-memory copy (Yama, seccomp, another PID namespace): they took the ring.
    PlaceRefused,
    /// Duplicate requests received (summed over QPs).
    DuplicateRequest,
    /// Requests received ahead of the expected PSN.
    OutOfSeqRequest,
    /// RNR NAKs received.
    RcvdRnrErr,
    /// RNR NAKs sent.
    SendRnrErr,
    /// PSN-sequence NAKs received.
    RcvdSeqErr,
    /// WRs that failed with RETRY_EXC_ERR.
    RetryExceededErr,
    /// WRs that failed with RNR_RETRY_EXC_ERR.
    RetryRnrExceededErr,
    /// Local ACK timeouts.
    CompleterRetryErr,
    /// Tail-loss probes sent.
    TailLossProbes,
    /// RDMA WRITEs placed in a same-host peer's memory with no packet (summed over QPs).
    PlacedWrites,
}

// The slot of a device counter is its place in the declaration: DEVICE lists them first.
const _: () = {
    let mut i = 0;
    while i < Counter::DEVICE.len() {
        assert!(Counter::DEVICE[i] as usize == i);
        i += 1;
    }
};

impl Counter {
    /// The device's own counters, in the order of their slots
    /// ([`Counter::device_slot`]).
    pub const DEVICE: [Counter; 13] = [
        Counter::SentPkts,
        Counter::RcvdPkts,
        Counter::RcvdUnknownQpn,
        Counter::RcvdMalformed,
        Counter::RcvdIcrcErr,
        Counter::RcvdIcrcIpId,
        Counter::SendErr,
        Counter::SendCalls,
        Counter::IpIdProbes,
        Counter::ForwardedPkts,
        Counter::ForwardErr,
        Counter::HandedBackPkts,
        Counter::PlaceRefused,
    ];

    /// What `softrdma link show -s` and the counter files show, in the order `rdma
    /// statistic` prints rxe's, then softrdma's own.
    pub const HW: [Counter; 20] = [
        Counter::SentPkts,
        Counter::RcvdPkts,
        Counter::DuplicateRequest,
        Counter::OutOfSeqRequest,
        Counter::RcvdRnrErr,
        Counter::SendRnrErr,
        Counter::RcvdSeqErr,
        Counter::RetryExceededErr,
        Counter::RetryRnrExceededErr,
        Counter::CompleterRetryErr,
        Counter::SendErr,
        Counter::RcvdIcrcErr,
        Counter::RcvdUnknownQpn,
        Counter::RcvdMalformed,
        Counter::TailLossProbes,
        Counter::ForwardedPkts,
        Counter::ForwardErr,
        Counter::HandedBackPkts,
        Counter::PlacedWrites,
        Counter::PlaceRefused,
    ];

    /// Its name, as rxe's `hw_counters` (or in their style, for the ones rxe has not).
    pub const fn name(self) -> &'static str {
        match self {
            Counter::SentPkts => "sent_pkts",
            Counter::RcvdPkts => "rcvd_pkts",
            Counter::RcvdUnknownQpn => "rcvd_unknown_qpn",
            Counter::RcvdMalformed => "rcvd_malformed",
            Counter::RcvdIcrcErr => "rcvd_icrc_err",
            Counter::RcvdIcrcIpId => "rcvd_icrc_ip_id",
            Counter::SendErr => "send_err",
            Counter::SendCalls => "send_calls",
            Counter::IpIdProbes => "ip_id_probes",
            Counter::ForwardedPkts => "forwarded_pkts",
            Counter::ForwardErr => "forward_err",
            Counter::HandedBackPkts => "handed_back_pkts",
            Counter::PlaceRefused => "place_refused",
            Counter::DuplicateRequest => "duplicate_request",
            Counter::OutOfSeqRequest => "out_of_seq_request",
            Counter::RcvdRnrErr => "rcvd_rnr_err",
            Counter::SendRnrErr => "send_rnr_err",
            Counter::RcvdSeqErr => "rcvd_seq_err",
            Counter::RetryExceededErr => "retry_exceeded_err",
            Counter::RetryRnrExceededErr => "retry_rnr_exceeded_err",
            Counter::CompleterRetryErr => "completer_retry_err",
            Counter::TailLossProbes => "tail_loss_probes",
            Counter::PlacedWrites => "placed_writes",
        }
    }

    /// The slot of a device counter in [`Counter::DEVICE`]; `None` for one summed over QPs.
    pub const fn device_slot(self) -> Option<usize> {
        // The device's own counters are declared first, in DEVICE's order (checked below).
        let i = self as usize;
        if i < Counter::DEVICE.len() {
            Some(i)
        } else {
            None
        }
    }

    /// A counter summed over QPs, from their sum `q`; `None` for a device counter.
    pub fn from_qps(self, q: &crate::QpCounters) -> Option<u64> {
        Some(match self {
            Counter::DuplicateRequest => q.duplicate_requests,
            Counter::OutOfSeqRequest => q.out_of_sequence,
            Counter::RcvdRnrErr => q.rnr_naks_rcvd,
            Counter::SendRnrErr => q.rnr_naks_sent,
            Counter::RcvdSeqErr => q.seq_naks_rcvd,
            Counter::RetryExceededErr => q.retry_exceeded,
            Counter::RetryRnrExceededErr => q.rnr_retry_exceeded,
            Counter::CompleterRetryErr => q.timeouts,
            Counter::TailLossProbes => q.probes,
            Counter::PlacedWrites => q.placed_writes,
            _ => return None,
        })
    }

    /// Every counter of [`Counter::HW`] with its value: `device` gives the device's own,
    /// and `qps` (the sum over live and destroyed QPs) the rest.
    pub fn hw(
        device: impl Fn(Counter) -> u64,
        qps: &crate::QpCounters,
    ) -> Vec<(&'static str, u64)> {
        Counter::HW
            .iter()
            .map(|&c| (c.name(), c.from_qps(qps).unwrap_or_else(|| device(c))))
            .collect()
    }
}

/// Counts of the receive path, gathered per batch and added to the device's counters once
/// per batch (a shared counter's add is a locked instruction).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RxCounts {
    /// Packets handed to a QP.
    pub rcvd: u64,
    /// Packets that did not parse.
    pub malformed: u64,
    /// Packets whose ICRC no IPv4 identification made right.
    pub icrc_errors: u64,
    /// Packets whose ICRC matched with a recovered IPv4 identification.
    pub ip_ids: u64,
    /// Packets for a QPN nobody has.
    pub unknown_qpn: u64,
}

impl RxCounts {
    /// The counts with their [`Counter`]s.
    pub fn by_counter(&self) -> [(Counter, u64); 5] {
        [
            (Counter::RcvdPkts, self.rcvd),
            (Counter::RcvdMalformed, self.malformed),
            (Counter::RcvdIcrcErr, self.icrc_errors),
            (Counter::RcvdIcrcIpId, self.ip_ids),
            (Counter::RcvdUnknownQpn, self.unknown_qpn),
        ]
    }
}

/// What became of one datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxOutcome {
    /// Handed to its QP. `ident`: the IPv4 identification it carried (0 for IPv6).
    Delivered {
        /// IPv4 identification.
        ident: u16,
    },
    /// Not an InfiniBand packet (too short, or headers that do not parse).
    Malformed,
    /// The ICRC is wrong for every IPv4 identification: corrupt.
    BadIcrc,
    /// For a QPN this device does not have.
    UnknownQpn {
        /// IPv4 identification.
        ident: u16,
    },
}

impl RxOutcome {
    /// The IPv4 identification the datagram carried, as far as it is known (0 otherwise).
    pub fn ident(self) -> u16 {
        match self {
            RxOutcome::Delivered { ident } | RxOutcome::UnknownQpn { ident } => ident,
            _ => 0,
        }
    }
}

/// The receive path's state: the checks' memo, the last QP found, the QPs a batch reached.
pub struct Receiver<C> {
    check: IcrcCheck,
    /// The QP the last packet went to, with the table's generation then: packets come in
    /// runs to one QP, and this spares the table's lock and hash for each.
    last_qp: Option<(u64, u32, Arc<C>)>,
    /// The QPs the current batch reached, each once.
    touched: Vec<Arc<C>>,
    /// Scratch for a multicast packet's members.
    members: Vec<Arc<C>>,
    counts: RxCounts,
}

impl<C> Default for Receiver<C> {
    fn default() -> Self {
        Self {
            check: IcrcCheck::default(),
            last_qp: None,
            touched: Vec::new(),
            members: Vec::new(),
            counts: RxCounts::default(),
        }
    }
}

impl<C: QpCell> Receiver<C> {
    /// Checks one datagram, sent from `src`:`sport` to `local`, and hands it to its QP
    /// (found in `table`), which is then among [`Receiver::touched`]. A multicast packet
    /// (to [`MULTICAST_QPN`]; `local` is then the group's address) goes to every QP attached
    /// to the group, each of which applies its own checks (a UD QP, its Q_Key).
    pub fn datagram(
        &mut self,
        table: &impl Lookup<C>,
        now: Instant,
        local: IpAddr,
        src: IpAddr,
        sport: u16,
        data: &[u8],
    ) -> RxOutcome {
        self.datagram_checked(table, now, local, src, sport, data, true)
    }

    /// [`Receiver::datagram`] for a datagram that crossed no wire (a same-host ring in
    /// shared memory): its ICRC, which guards against corruption on a link (IBTA 7.8.1),
    /// is not checked; every other check is made.
    pub fn datagram_from_memory(
        &mut self,
        table: &impl Lookup<C>,
        now: Instant,
        local: IpAddr,
        src: IpAddr,
        sport: u16,
        data: &[u8],
    ) -> RxOutcome {
        self.datagram_checked(table, now, local, src, sport, data, false)
    }

    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn datagram_checked(
        &mut self,
        table: &impl Lookup<C>,
        now: Instant,
        local: IpAddr,
        src: IpAddr,
        sport: u16,
        data: &[u8],
        icrc: bool,
    ) -> RxOutcome {
        let Ok(pkt) = IbPacket::new_checked(data) else {
            self.counts.malformed += 1;
            return RxOutcome::Malformed;
        };
        let checked = if icrc {
            self.check.check(src, local, sport, data)
        } else {
            Some(IcrcOk::Direct)
        };
        let ident = match checked {
            None => {
                // rxe drops a bad ICRC silently; it is counted here.
                self.counts.icrc_errors += 1;
                return RxOutcome::BadIcrc;
            }
            Some(IcrcOk::Direct) => 0,
            Some(IcrcOk::Ident(i)) => {
                self.counts.ip_ids += 1;
                i
            }
        };
        let qpn = pkt.bth().dest_qp().value();
        if qpn == MULTICAST_QPN {
            table.members(local, &mut self.members);
            if self.members.is_empty() {
                self.counts.unknown_qpn += 1;
                return RxOutcome::UnknownQpn { ident };
            }
            self.counts.rcvd += 1;
            for cell in self.members.drain(..) {
                cell.lock_qp()
                    .handle_packet(now, src.to_canonical(), local, &pkt);
                push_once(&mut self.touched, &cell);
            }
            return RxOutcome::Delivered { ident };
        }
        let generation = table.generation();
        if !matches!(&self.last_qp, Some((g, n, _)) if *g == generation && *n == qpn) {
            self.last_qp = table.get(qpn).map(|q| (generation, qpn, q));
        }
        let Some((_, _, cell)) = &self.last_qp else {
            self.counts.unknown_qpn += 1;
            return RxOutcome::UnknownQpn { ident };
        };
        self.counts.rcvd += 1;
        cell.lock_qp()
            .handle_packet(now, src.to_canonical(), local, &pkt);
        push_once(&mut self.touched, cell);
        RxOutcome::Delivered { ident }
    }

    /// A positive ACK of `psn` for QP `qpn` that a same-host responder passed in memory
    /// (see [`QueuePair::ack_from_memory`]); the QP is then serviced with those the
    /// datagrams reached. False if no QP has that number.
    pub fn ack_from_memory(
        &mut self,
        table: &impl Lookup<C>,
        now: Instant,
        qpn: u32,
        psn: softrdma_wire::Psn,
    ) -> bool {
        let Some(cell) = table.get(qpn) else {
            self.counts.unknown_qpn += 1;
            return false;
        };
        cell.lock_qp().ack_from_memory(now, psn);
        push_once(&mut self.touched, &cell);
        true
    }
}

impl<C> Receiver<C> {
    /// Takes the QPs the datagrams since the last call reached, each once: the caller
    /// services each (transmit, completions, timer) after the batch.
    pub fn touched(&mut self) -> std::vec::Drain<'_, Arc<C>> {
        self.touched.drain(..)
    }

    /// Takes the counts gathered since the last call.
    pub fn take_counts(&mut self) -> RxCounts {
        std::mem::take(&mut self.counts)
    }

    /// Forgets the memo of the last QP (its table changed without a new generation).
    pub fn forget(&mut self) {
        self.last_qp = None;
    }
}

/// Adds `cell` to `list` unless it is there already (lists of the QPs to service, a few
/// long: a look along them is cheaper than a set).
fn push_once<C>(list: &mut Vec<Arc<C>>, cell: &Arc<C>) {
    if !list.iter().any(|c| Arc::ptr_eq(c, cell)) {
        list.push(cell.clone());
    }
}

/// Fires the timer entry `(at, qpn)` that came due at `now`: the QP handles its timeout if
/// its deadline is due, and `then` services it, under the same lock. `None` for a stale
/// entry, or a QP that is gone; otherwise whether its timeout was handled (false when its
/// deadline had moved later than the entry). Either way the caller enters the QP's next
/// deadline ([`QueuePair::timer_to_enter`]) in `then`.
pub fn fire_entry<C: QpCell>(
    table: &impl Lookup<C>,
    at: Instant,
    qpn: u32,
    now: Instant,
    then: impl FnOnce(&Arc<C>, &mut QueuePair),
) -> Option<bool> {
    let cell = table.get(qpn)?;
    let mut qp = cell.lock_qp();
    if !qp.timer_entry_due(at) {
        return None;
    }
    let due = qp.poll_timeout().is_some_and(|t| t <= now);
    if due {
        qp.handle_timeout(now);
    }
    then(&cell, &mut qp);
    Some(due)
}

/// The endpoint for one owner: a table, its receiver and timer queue. This is what the
/// simulator drives; the soft device drives the same parts behind locks of their own.
pub struct Endpoint {
    /// Its address.
    pub ip: IpAddr,
    /// Its QPs.
    pub qps: QpTable<Mutex<QueuePair>>,
    /// Its receive path.
    pub rx: Receiver<Mutex<QueuePair>>,
    /// Its QPs' deadlines.
    pub timers: timers::TimerQueue,
    /// QPs to service (transmit from) before anything else happens: those the last inputs
    /// reached.
    dirty: Vec<Arc<Mutex<QueuePair>>>,
}

impl Endpoint {
    /// An endpoint at `ip` with no QPs.
    pub fn new(ip: IpAddr) -> Self {
        Self {
            ip,
            qps: QpTable::default(),
            rx: Receiver::default(),
            timers: timers::TimerQueue::default(),
            dirty: Vec::new(),
        }
    }

    /// Adds a QP; it is serviced (and its deadline entered) at the next
    /// [`Endpoint::service`].
    pub fn insert(&mut self, qp: QueuePair) -> Arc<Mutex<QueuePair>> {
        let qpn = qp.qpn().value();
        let cell = Arc::new(Mutex::new(qp));
        self.qps.insert(qpn, cell.clone());
        self.dirty.push(cell.clone());
        cell
    }

    /// The QP numbered `qpn`, locked. It is serviced (and its deadline entered) at the next
    /// [`Endpoint::service`].
    pub fn qp(&mut self, qpn: u32) -> Option<MutexGuard<'_, QueuePair>> {
        let cell = self.qps.map.get(&qpn)?;
        push_once(&mut self.dirty, cell);
        Some(Mutex::lock(cell).unwrap_or_else(|e| e.into_inner()))
    }

    /// Every QP, locked one at a time, for `f` to read (a change must go through
    /// [`Endpoint::qp`], which has the QP serviced after it).
    pub fn for_each_qp(&self, mut f: impl FnMut(&QueuePair)) {
        for c in self.qps.values() {
            f(&c.lock_qp());
        }
    }

    /// Hands one datagram to its QP (see [`Receiver::datagram`]).
    pub fn handle_datagram(
        &mut self,
        now: Instant,
        src: IpAddr,
        sport: u16,
        data: &[u8],
    ) -> RxOutcome {
        let out = self.rx.datagram(&self.qps, now, self.ip, src, sport, data);
        let Self { rx, dirty, .. } = self;
        for t in rx.touched() {
            push_once(dirty, &t);
        }
        out
    }

    /// Fires the timers due at `now`; returns how many fired.
    pub fn handle_timeout(&mut self, now: Instant) -> usize {
        let mut fired = 0;
        while let Some((at, qpn)) = self.timers.pop_due(now) {
            let dirty = &mut self.dirty;
            let handled = fire_entry(&self.qps, at, qpn, now, |cell, _| push_once(dirty, cell));
            fired += usize::from(handled == Some(true));
        }
        fired
    }

    /// The earliest deadline of any QP, once the QPs the last inputs reached have been
    /// serviced ([`Endpoint::service`] enters their deadlines). Stale entries at the front
    /// are dropped, and a live one whose QP's deadline moved later is entered again at the
    /// real deadline, so the answer is exact.
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        loop {
            let (at, qpn) = self.timers.peek()?;
            let Some(cell) = self.qps.get(qpn) else {
                self.timers.pop();
                continue;
            };
            let mut qp = cell.lock_qp();
            if qp.poll_timeout() == Some(at) {
                return Some(at);
            }
            self.timers.pop();
            if qp.timer_entry_due(at) {
                if let Some(t) = qp.timer_to_enter() {
                    self.timers.push(t, qpn);
                }
            }
        }
    }

    /// Services the QPs the last inputs reached: `f` takes each one's packets (and
    /// completions, as it likes), and then its deadline is entered.
    pub fn service(&mut self, mut f: impl FnMut(&mut QueuePair)) {
        for cell in self.dirty.drain(..) {
            let mut qp = cell.lock_qp();
            f(&mut qp);
            if let Some(t) = qp.timer_to_enter() {
                self.timers.push(t, qp.qpn().value());
            }
        }
    }
}
