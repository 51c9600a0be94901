//! A deterministic network simulator for queue pairs.
//!
//! Endpoints (an IP address, a [`SimMemory`] and some QPs) exchange packets over links that
//! lose, duplicate, reorder, corrupt and delay them, all decided by one seeded RNG, in
//! simulated time. The same seed gives the same run, packet for packet. Every run is bounded
//! in steps, so a livelock fails fast with [`SimError::StepLimit`] instead of hanging.
//!
//! Each host is an [`Endpoint`], the device core the soft device runs: the same QP table,
//! receive checks and timer queue. Corruption flips one bit of the InfiniBand part; the
//! receiving endpoint checks the ICRC as the soft device does and drops the packet, so
//! corruption must never reach a QP.

use crate::endpoint::{Endpoint, RxOutcome};
use crate::memory::SimMemory;
use crate::qp::QpConfig;
use crate::qp::rtt::PathRtt;
use crate::qp::{QueuePair, same_ip};
use crate::state::QpAttr;
use crate::types::{AddressVector, Instant, QpState, QpType};
use core::time::Duration;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use softrdma_wire::{IbPacket, Psn, Qpn};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::IpAddr;
use std::sync::{Arc, MutexGuard};

pub use crate::faults::{FRAME_OVERHEAD, LinkFaults, LinkRate};

/// What a scripted test decides for one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Let the link faults decide.
    Pass,
    /// Lose it.
    Drop,
    /// Deliver it twice.
    Duplicate,
    /// Hold it back by this much on top of the link delay.
    Delay(Duration),
}

/// A packet as the script sees it.
#[derive(Debug)]
pub struct PacketMeta<'a> {
    /// Sending endpoint.
    pub from: usize,
    /// Number of the packet among all sent, from 0.
    pub index: u64,
    /// The InfiniBand part.
    pub packet: &'a IbPacket<&'a [u8]>,
}

/// A test's hook into the network.
pub type Script = Box<dyn FnMut(&PacketMeta<'_>) -> Verdict + Send>;

/// What happened in a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct SimStats {
    /// Packets the QPs sent.
    pub packets_sent: u64,
    /// Packets handed to a QP.
    pub delivered: u64,
    /// Packets lost (link loss or script).
    pub lost: u64,
    /// Extra copies delivered.
    pub duplicated: u64,
    /// Packets held back to reorder them.
    pub reordered: u64,
    /// Packets with a flipped bit.
    pub corrupted: u64,
    /// Packets the receiver dropped for a bad ICRC.
    pub icrc_drops: u64,
    /// Packets the receiver could not parse.
    pub malformed_drops: u64,
    /// Packets for an address or QPN nobody has.
    pub unroutable: u64,
    /// Packets sent with a lent payload (taken from the sender's memory as it sent).
    pub lent: u64,
    /// Packets not sent because their lent payload's region went away first.
    pub lent_gone: u64,
    /// Packets lost to the partition.
    pub partitioned: u64,
    /// Packets dropped because the link's queue was full.
    pub queue_drops: u64,
    /// Timer expiries handled.
    pub timers: u64,
    /// Steps taken.
    pub steps: u64,
}

/// Why a run stopped early.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    /// The step budget ran out: a livelock, or a budget too small for the workload.
    #[error("simulation exceeded {steps} steps at t = {now_us} us")]
    StepLimit {
        /// Steps taken.
        steps: u64,
        /// Simulated time in microseconds.
        now_us: u64,
    },
}

/// One simulated host: an [`Endpoint`] (the same device core the soft device runs) and its
/// registered memory.
pub struct Host {
    /// Its registered memory.
    pub mem: Arc<SimMemory>,
    /// Its QPs, receive path and timers.
    pub ep: Endpoint,
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct InFlight {
    at: Instant,
    seq: u64,
    to: usize,
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    bytes: Vec<u8>,
}

/// The simulator.
pub struct Sim {
    /// Simulated time.
    pub now: Instant,
    /// Hosts, by the index [`Sim::add_endpoint`] gave.
    pub endpoints: Vec<Host>,
    /// Faults on every link without its own entry in `links`.
    pub faults: LinkFaults,
    /// Faults of particular (from, to) links, overriding `faults`.
    pub links: std::collections::HashMap<(usize, usize), LinkFaults>,
    /// Statistics so far.
    pub stats: SimStats,
    /// Step budget.
    pub max_steps: u64,
    script: Option<Script>,
    rng: ChaCha8Rng,
    queue: BinaryHeap<Reverse<InFlight>>,
    seq: u64,
    buf: Vec<u8>,
    /// Latest arrival scheduled on each (from, to) link: links are FIFO unless a packet is
    /// deliberately reordered.
    link_tail: std::collections::HashMap<(usize, usize), Instant>,
    /// When each packet in each rated link's queue finishes leaving, oldest first.
    link_queue: std::collections::HashMap<(usize, usize), std::collections::VecDeque<Instant>>,
    /// The round-trip record each (from, to) pair of endpoints shares among its QPs.
    paths: std::collections::HashMap<(usize, usize), Arc<PathRtt>>,
    /// Packets a flush collected, kept to spare an allocation per step.
    outbox: Vec<(usize, IpAddr, IpAddr, u16, Vec<u8>)>,
}

impl Sim {
    /// A simulator with no endpoints, `faults` on every link, and a budget of `max_steps`.
    pub fn new(seed: u64, faults: LinkFaults, max_steps: u64) -> Self {
        Self {
            now: Instant::ZERO,
            endpoints: Vec::new(),
            faults,
            links: std::collections::HashMap::new(),
            stats: SimStats::default(),
            max_steps,
            script: None,
            rng: ChaCha8Rng::seed_from_u64(seed),
            queue: BinaryHeap::new(),
            seq: 0,
            buf: Vec::with_capacity(4200),
            link_tail: std::collections::HashMap::new(),
            link_queue: std::collections::HashMap::new(),
            paths: std::collections::HashMap::new(),
            outbox: Vec::new(),
        }
    }

    /// Adds an endpoint and returns its index.
    pub fn add_endpoint(&mut self, ip: IpAddr, mem: Arc<SimMemory>) -> usize {
        self.endpoints.push(Host {
            mem,
            ep: Endpoint::new(ip),
        });
        self.endpoints.len() - 1
    }

    /// Installs a script that sees every packet before the link faults do.
    pub fn set_script(&mut self, script: Script) {
        self.script = Some(script);
    }

    /// The QP with number `qpn` on endpoint `ep`, locked (it is serviced at the next step).
    pub fn qp(&mut self, ep: usize, qpn: u32) -> MutexGuard<'_, QueuePair> {
        self.endpoints[ep]
            .ep
            .qp(qpn)
            .expect("the QP exists on that endpoint")
    }

    /// Every QP of every endpoint, locked one at a time, for `f` to read.
    pub fn for_each_qp(&self, mut f: impl FnMut(&QueuePair)) {
        for h in &self.endpoints {
            h.ep.for_each_qp(&mut f);
        }
    }

    /// Collects every packet the QPs want to send and puts it on the wire.
    pub fn flush(&mut self) {
        let now = self.now;
        let mut out = std::mem::take(&mut self.outbox);
        for (ep, host) in self.endpoints.iter_mut().enumerate() {
            let (mem, stats, buf) = (&host.mem, &mut self.stats, &mut self.buf);
            host.ep.service(|qp| {
                while let Some(t) = qp.poll_transmit(now, buf) {
                    let bytes = match &t.lent {
                        None => t.whole(buf, &[]),
                        // The sender takes a lent payload from the region as it sends.
                        Some(l) => match mem.lent_bytes(l) {
                            Some(payload) => {
                                stats.lent += 1;
                                t.whole(buf, &payload)
                            }
                            None => {
                                stats.lent_gone += 1;
                                continue;
                            }
                        },
                    };
                    out.push((ep, t.src, t.dst, t.src_port, bytes));
                }
            });
        }
        for (ep, src, dst, sport, bytes) in out.drain(..) {
            self.send(ep, src, dst, sport, bytes);
        }
        self.outbox = out;
    }

    fn send(&mut self, from: usize, src: IpAddr, dst: IpAddr, sport: u16, mut bytes: Vec<u8>) {
        self.stats.packets_sent += 1;
        let index = self.stats.packets_sent - 1;
        let Some(to) = self.endpoints.iter().position(|e| same_ip(e.ep.ip, dst)) else {
            self.stats.unroutable += 1;
            return;
        };
        let verdict = match (&mut self.script, IbPacket::new_checked(&bytes[..])) {
            (Some(script), Ok(packet)) => script(&PacketMeta {
                from,
                index,
                packet: &packet,
            }),
            _ => Verdict::Pass,
        };
        let f = self.links.get(&(from, to)).copied().unwrap_or(self.faults);
        if f.partition_at.is_some_and(|t| self.now >= t) {
            self.stats.partitioned += 1;
            return;
        }
        if verdict == Verdict::Drop || f.lost(&mut self.rng) {
            self.stats.lost += 1;
            return;
        }
        // A rated link: the packet waits for those before it to leave, or is dropped if the
        // queue is full; it then arrives its wire time plus the delay after it started.
        let mut left = self.now;
        if let Some(rate) = f.rate {
            let q = self.link_queue.entry((from, to)).or_default();
            while q.front().is_some_and(|&t| t <= self.now) {
                q.pop_front();
            }
            if q.len() >= rate.queue_pkts.max(1) {
                self.stats.queue_drops += 1;
                return;
            }
            let start = q.back().copied().unwrap_or(self.now).max(self.now);
            left = start.add(rate.wire_time(bytes.len()));
            q.push_back(left);
        }
        let copies = if verdict == Verdict::Duplicate || f.duplicated(&mut self.rng) {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        for c in 0..copies {
            let mut b = if c + 1 == copies {
                std::mem::take(&mut bytes)
            } else {
                bytes.clone()
            };
            if f.corrupted(&mut self.rng, &mut b) {
                self.stats.corrupted += 1;
            }
            let (mut delay, held) = f.copy_delay(&mut self.rng);
            if let Verdict::Delay(d) = verdict {
                delay += d;
            }
            let mut at = left.add(delay);
            if held {
                self.stats.reordered += 1;
            } else {
                // Jitter never reorders a link by itself.
                let tail = self.link_tail.entry((from, to)).or_insert(Instant::ZERO);
                at = at.max(*tail);
                *tail = at;
            }
            self.seq += 1;
            self.queue.push(Reverse(InFlight {
                at,
                seq: self.seq,
                to,
                src,
                dst,
                sport,
                bytes: b,
            }));
        }
    }

    fn deliver(&mut self, p: InFlight) {
        let now = self.now;
        // The receiving endpoint checks the packet as the soft device does, with the same
        // code: it parses, its ICRC verifies, its QPN exists.
        let ep = &mut self.endpoints[p.to].ep;
        debug_assert!(same_ip(ep.ip, p.dst));
        match ep.handle_datagram(now, p.src, p.sport, &p.bytes) {
            RxOutcome::Delivered { .. } => self.stats.delivered += 1,
            RxOutcome::Malformed => self.stats.malformed_drops += 1,
            RxOutcome::BadIcrc => self.stats.icrc_drops += 1,
            RxOutcome::UnknownQpn { .. } => self.stats.unroutable += 1,
        }
    }

    fn next_timer(&mut self) -> Option<Instant> {
        self.endpoints
            .iter_mut()
            .filter_map(|h| h.ep.poll_timeout())
            .min()
    }

    /// Advances to the next event (a delivery or a timer) and handles it. Returns false when
    /// nothing is left to happen.
    pub fn step(&mut self) -> Result<bool, SimError> {
        self.flush();
        let next_pkt = self.queue.peek().map(|r| r.0.at);
        let next_timer = self.next_timer();
        let Some(t) = [next_pkt, next_timer].into_iter().flatten().min() else {
            return Ok(false);
        };
        self.stats.steps += 1;
        if self.stats.steps > self.max_steps {
            return Err(SimError::StepLimit {
                steps: self.max_steps,
                now_us: self.now.as_nanos() / 1000,
            });
        }
        self.now = self.now.max(t);
        if next_pkt == Some(t) {
            if let Some(Reverse(p)) = self.queue.pop() {
                self.deliver(p);
            }
        } else {
            let now = self.now;
            for h in &mut self.endpoints {
                self.stats.timers += h.ep.handle_timeout(now) as u64;
            }
        }
        self.flush();
        Ok(true)
    }

    /// Steps until nothing is left to happen.
    pub fn run(&mut self) -> Result<(), SimError> {
        while self.step()? {}
        Ok(())
    }

    /// Steps until `done` holds (checked after each step) or nothing is left to happen.
    pub fn run_until(&mut self, mut done: impl FnMut(&mut Sim) -> bool) -> Result<bool, SimError> {
        loop {
            if done(self) {
                return Ok(true);
            }
            if !self.step()? {
                return Ok(done(self));
            }
        }
    }
}

/// How [`Sim::connect`] sets up a pair of QPs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectOpts {
    /// Transport.
    pub qp_type: crate::QpType,
    /// Path MTU.
    pub mtu: crate::Mtu,
    /// Local ACK timeout exponent.
    pub timeout: u8,
    /// Transport retries (7: unlimited, as rxe).
    pub retry_cnt: u8,
    /// RNR retries (7: unlimited).
    pub rnr_retry: u8,
    /// RNR timer code the responders send.
    pub min_rnr_timer: u8,
    /// Outstanding READs/atomics, both directions.
    pub max_rd_atomic: u8,
    /// First PSN of the first QP's send queue (the second's is this plus 0x1000).
    pub sq_psn: u32,
    /// Q_Key for UD.
    pub qkey: u32,
    /// Remote access rights of both QPs.
    pub access: crate::AccessFlags,
    /// Queue limits.
    pub caps: crate::QpCaps,
}

impl Default for ConnectOpts {
    fn default() -> Self {
        use crate::AccessFlags as A;
        Self {
            qp_type: crate::QpType::Rc,
            mtu: crate::Mtu::M1024,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            max_rd_atomic: 16,
            sq_psn: 0x10_0000,
            qkey: 0x1111_1111,
            access: A::LOCAL_WRITE | A::REMOTE_WRITE | A::REMOTE_READ | A::REMOTE_ATOMIC,
            caps: crate::QpCaps::default(),
        }
    }
}

impl ConnectOpts {
    /// What a QP of these options is created with: number `qpn`, protection domain 1, its
    /// own receive queue, and a completion only for the WRs that ask for one.
    pub fn qp_config(&self, qpn: Qpn) -> QpConfig {
        QpConfig {
            qpn,
            qp_type: self.qp_type,
            pd: crate::Pd(1),
            caps: self.caps,
            sq_sig_all: false,
            srq: None,
            port_mtu: self.mtu,
            udp_sport: None,
        }
    }

    /// The modify steps from RESET to RTS of a QP of these options, as `ibv_modify_qp`
    /// takes them: RC and UC connected to QP `dest` along `av`, expecting `rq_psn`; UD
    /// with its Q_Key only; every transport sending from `sq_psn`, and RC alone with the
    /// timers, retries and READ/atomic depths.
    pub fn ladder(&self, av: AddressVector, dest: Qpn, rq_psn: Psn, sq_psn: Psn) -> [QpAttr; 3] {
        let ud = self.qp_type == QpType::Ud;
        let rc = self.qp_type == QpType::Rc;
        [
            QpAttr {
                state: Some(QpState::Init),
                pkey_index: Some(0),
                port: Some(1),
                access_flags: (!ud).then_some(self.access),
                qkey: ud.then_some(self.qkey),
                ..Default::default()
            },
            QpAttr {
                state: Some(QpState::Rtr),
                av: (!ud).then_some(av),
                path_mtu: (!ud).then_some(self.mtu),
                dest_qpn: (!ud).then_some(dest),
                rq_psn: (!ud).then_some(rq_psn),
                max_dest_rd_atomic: rc.then_some(self.max_rd_atomic),
                min_rnr_timer: rc.then_some(self.min_rnr_timer),
                ..Default::default()
            },
            QpAttr {
                state: Some(QpState::Rts),
                sq_psn: Some(sq_psn),
                timeout: rc.then_some(self.timeout),
                retry_cnt: rc.then_some(self.retry_cnt),
                rnr_retry: rc.then_some(self.rnr_retry),
                max_rd_atomic: rc.then_some(self.max_rd_atomic),
                ..Default::default()
            },
        ]
    }

    /// A QP created with `cfg` over `mem` and taken to RTS by [`ConnectOpts::ladder`].
    pub fn rts_qp(
        &self,
        cfg: QpConfig,
        mem: Arc<dyn crate::Memory>,
        av: AddressVector,
        dest: Qpn,
        rq_psn: Psn,
        sq_psn: Psn,
    ) -> QueuePair {
        let mut qp = QueuePair::new(cfg, mem);
        for step in &self.ladder(av, dest, rq_psn, sq_psn) {
            qp.modify(step)
                .expect("the ladder follows the modify rules");
        }
        qp
    }
}

impl Sim {
    /// Creates QP `qpn_a` on endpoint `a` and `qpn_b` on endpoint `b`, in protection domain
    /// 1 of each, and brings both to RTS connected to each other (UD: to RTS, unconnected).
    pub fn connect(&mut self, a: usize, qpn_a: u32, b: usize, qpn_b: u32, o: ConnectOpts) {
        self.connect_with_srq(a, qpn_a, b, qpn_b, o, None);
    }

    /// [`Sim::connect`], with the second QP receiving from `srq_b`.
    pub fn connect_with_srq(
        &mut self,
        a: usize,
        qpn_a: u32,
        b: usize,
        qpn_b: u32,
        o: ConnectOpts,
        srq_b: Option<crate::Srq>,
    ) {
        let ends = [
            (a, qpn_a, b, qpn_b, o.sq_psn, o.sq_psn + 0x1000),
            (b, qpn_b, a, qpn_a, o.sq_psn + 0x1000, o.sq_psn),
        ];
        for (me, qpn, peer, peer_qpn, sq_psn, rq_psn) in ends {
            let mut cfg = o.qp_config(Qpn::new(qpn));
            if me == b && qpn == qpn_b {
                cfg.srq = srq_b.clone();
            }
            let av = crate::AddressVector {
                src: self.endpoints[me].ep.ip,
                dst: self.endpoints[peer].ep.ip,
                flow_label: 0,
                traffic_class: 0,
            };
            let mem: Arc<dyn crate::Memory> = self.endpoints[me].mem.clone();
            let mut qp = o.rts_qp(
                cfg,
                mem,
                av,
                Qpn::new(peer_qpn),
                Psn::new(rq_psn),
                Psn::new(sq_psn),
            );
            let path = self.paths.entry((me, peer)).or_default();
            qp.share_path_rtt(path.clone());
            self.endpoints[me].ep.insert(qp);
        }
    }
}
