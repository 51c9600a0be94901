//! Random operation mixes run in the simulator and checked against an independent model.
//!
//! Each of `qps` QP pairs connects endpoint A (10.0.0.1) to endpoint B (10.0.0.2). A posts
//! the operations; B receives, is written, read and updated. The model knows, without looking
//! at the engine, what every byte should be:
//!
//! * a SEND's data is a pattern of its (pair, op) numbers; RC delivers every SEND once and in
//!   order, UC delivers an in-order subset, UD any subset (datagrams may be reordered or
//!   duplicated on the network);
//! * a WRITE's data lands in its own slot (or the last writer's, when slots are reused);
//! * a READ returns B's read source, which nobody writes;
//! * atomics run on one counter per pair, in order, so each returns a predictable original
//!   value and the counter ends at a predictable value.
//!
//! `data_verified` is true only when every successful operation was checked this way.
//!
//! This file owns the configuration, the report, the model's layout and state, and the run
//! itself; `ops.rs` draws the operations and builds their WRs, `check.rs` checks what
//! completed against the model.

mod check;
mod ops;

use check::{check_requester, check_writes, continue_final, match_send};
use ops::{make_wr, pick_kind};

use crate::memory::{Pd, SimMemory};
use crate::sim::{ConnectOpts, LinkFaults, Sim, SimError, SimStats};
use crate::types::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use softrdma_wire::Qpn;
use std::collections::{BTreeMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

/// Which operations a workload posts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpMix {
    /// SENDs (half of them with immediate data).
    Send,
    /// RDMA WRITEs (half with immediate data).
    Write,
    /// RDMA READs.
    Read,
    /// FETCH_ADD and CMP_SWAP.
    Atomic,
    /// All of the above that the transport allows.
    Mixed,
}

/// A workload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WorkloadConfig {
    /// Transport.
    pub transport: QpType,
    /// Operations.
    pub mix: OpMix,
    /// Work requests over all QPs.
    pub ops: u64,
    /// Smallest message.
    pub min_size: u32,
    /// Largest message.
    pub max_size: u32,
    /// Path MTU.
    pub mtu: Mtu,
    /// QP pairs.
    pub qps: u32,
    /// Link faults.
    pub faults: LinkFaults,
    /// RNG seed for the workload and the network.
    pub seed: u64,
    /// Transport retries (7: unlimited).
    pub retry_cnt: u8,
    /// Local ACK timeout exponent.
    pub timeout: u8,
    /// Step budget.
    pub max_steps: u64,
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        Self {
            transport: QpType::Rc,
            mix: OpMix::Mixed,
            ops: 200,
            min_size: 1,
            max_size: 4096,
            mtu: Mtu::M1024,
            qps: 2,
            faults: LinkFaults::default(),
            seed: 1,
            retry_cnt: 7,
            timeout: 10,
            max_steps: 20_000_000,
        }
    }
}

impl WorkloadReport {
    /// Simulated time, in whole microseconds.
    pub fn sim_time_us(&self) -> u64 {
        self.sim_time_ns / 1000
    }

    /// Goodput: bytes of successful operations per simulated second.
    pub fn goodput_bps(&self) -> f64 {
        self.goodput_bytes as f64 * 1e9 / self.sim_time_ns.max(1) as f64
    }
}

/// The same work without loss, duplication, reordering, corruption or partition: the
/// lossless run a faulty one is measured against.
pub fn lossless(cfg: &WorkloadConfig) -> WorkloadConfig {
    WorkloadConfig {
        faults: LinkFaults {
            loss: 0.0,
            dup: 0.0,
            reorder: 0.0,
            corrupt: 0.0,
            partition_at: None,
            ..cfg.faults
        },
        ..*cfg
    }
}

/// The outcome of a workload.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadReport {
    /// Work requests posted.
    pub posted: u64,
    /// Work requests completed successfully (requester side).
    pub ok: u64,
    /// Error completions by status name, both sides.
    pub errors: BTreeMap<&'static str, u64>,
    /// Every successful operation matched the model.
    pub data_verified: bool,
    /// Packets sent.
    pub packets_sent: u64,
    /// Request packets sent again.
    pub retransmits: u64,
    /// Every QP's counters, both sides, summed: local ACK timeouts, probes, sequence NAKs.
    pub counters: crate::QpCounters,
    /// Bytes of the operations that completed successfully (8 per atomic).
    pub goodput_bytes: u64,
    /// Simulated time, in nanoseconds.
    pub sim_time_ns: u64,
    /// The simulator's statistics.
    pub sim: SimStats,
    /// The transport's guarantees held (see [`run_workload`]).
    pub guarantees_met: bool,
    /// What went wrong, if anything.
    pub problems: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Send,
    Write,
    Read,
    FetchAdd,
    CompareSwap,
}

#[derive(Debug, Clone)]
struct Op {
    kind: Kind,
    size: u32,
    imm: bool,
    /// Atomics: the expected original value.
    expect_orig: u64,
    add_or_swap: u64,
    compare: u64,
    slot: u64,
}

const SLOTS: u64 = 64;
const WINDOW: usize = 32;
const QPN_A: u32 = 0x100;
const QPN_B: u32 = 0x800;
const IP_A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
const IP_B: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));

/// The bytes of operation `op` of pair `pair`.
pub fn pattern(pair: u32, op: u64, len: usize) -> Vec<u8> {
    let seed = (u64::from(pair) << 40) ^ op.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (0..len)
        .map(|j| {
            let x = seed ^ (j as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            (x.wrapping_mul(0x94D0_49BB_1331_11EB) >> 56) as u8
        })
        .collect()
}

/// Per-pair memory layout: offsets into the one region each endpoint registers.
#[derive(Debug, Clone, Copy)]
struct Layout {
    stride: u64,
    per_pair: u64,
}

impl Layout {
    fn new(max: u32) -> Self {
        let stride = (u64::from(max) + 40).next_multiple_of(64);
        // src/target | read dest/source | recv buffers | atomics
        Self {
            stride,
            per_pair: 3 * SLOTS * stride + 8 * SLOTS + 64,
        }
    }
    fn data(&self, pair: u32, slot: u64) -> u64 {
        u64::from(pair) * self.per_pair + (slot % SLOTS) * self.stride
    }
    fn read(&self, pair: u32, slot: u64) -> u64 {
        self.data(pair, slot) + SLOTS * self.stride
    }
    fn recv(&self, pair: u32, slot: u64) -> u64 {
        self.data(pair, slot) + 2 * SLOTS * self.stride
    }
    fn atomic(&self, pair: u32, slot: u64) -> u64 {
        u64::from(pair) * self.per_pair + 3 * SLOTS * self.stride + 8 * (slot % SLOTS)
    }
    fn counter(&self, pair: u32) -> u64 {
        u64::from(pair) * self.per_pair + 3 * SLOTS * self.stride + 8 * SLOTS
    }
}

struct PairState {
    ops: Vec<Op>,
    next_post: usize,
    /// Requester completions expected, in order (RC) or as they come (UC/UD).
    outstanding: VecDeque<usize>,
    completed: Vec<bool>,
    succeeded: Vec<bool>,
    /// Indices of SEND ops, in order, and how far the receives have matched them.
    sends: Vec<usize>,
    matched: usize,
    delivered: Vec<u32>,
    free_recv_slots: Vec<u64>,
    counter: u64,
}

/// Runs a workload and checks it.
///
/// The guarantees: for RC without a partition, every operation completes successfully exactly
/// once, every SEND is received exactly once and in order, and memory equals the model. With
/// a partition, every work request completes (successfully, with RETRY_EXC_ERR, or flushed)
/// and the run ends. For UC and UD, every send completes successfully on the requester, and
/// whatever is received or written is whole and correct.
pub fn run_workload(cfg: &WorkloadConfig) -> Result<WorkloadReport, SimError> {
    run_workload_observed(cfg, &mut |_| {})
}

/// [`run_workload`], telling `progress` how many work requests have completed (with
/// success or an error) whenever that number grows; a front end draws it.
pub fn run_workload_observed(
    cfg: &WorkloadConfig,
    progress: &mut dyn FnMut(u64),
) -> Result<WorkloadReport, SimError> {
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x5EED);
    let mtu = cfg.mtu.bytes() as u32;
    let max = match cfg.transport {
        QpType::Ud => cfg.max_size.min(mtu),
        _ => cfg.max_size,
    }
    .max(cfg.min_size.min(mtu));
    let min = cfg.min_size.min(max);
    let layout = Layout::new(max);
    let all = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC;
    let region = layout.per_pair * u64::from(cfg.qps.max(1));
    let mem_a = Arc::new(SimMemory::new(0xA));
    let mem_b = Arc::new(SimMemory::new(0xB));
    // A lends its payloads (zero-copy sends, as the soft device's owned regions), B copies
    // them: every run takes both paths, in both directions (A's READ responses are lent).
    mem_a.set_lending(true);
    let key_a = mem_a.register(Pd(1), 0, region as usize, all);
    let key_b = mem_b.register(Pd(1), 0, region as usize, all);

    let mut sim = Sim::new(cfg.seed, cfg.faults, cfg.max_steps);
    let (a, b) = (
        sim.add_endpoint(IP_A, mem_a.clone()),
        sim.add_endpoint(IP_B, mem_b.clone()),
    );
    let opts = ConnectOpts {
        qp_type: cfg.transport,
        mtu: cfg.mtu,
        timeout: cfg.timeout,
        retry_cnt: cfg.retry_cnt,
        ..Default::default()
    };
    let qps = cfg.qps.max(1);
    let mut pairs = Vec::new();
    for i in 0..qps {
        sim.connect(a, QPN_A + i, b, QPN_B + i, opts);
        // B's read sources hold known data; nobody writes them.
        for s in 0..SLOTS {
            mem_b.fill(
                key_b,
                layout.read(i, s) as usize,
                &pattern(i, 1 << 40 | s, max as usize),
            );
        }
        let n = cfg.ops / u64::from(qps) + u64::from(u64::from(i) < cfg.ops % u64::from(qps));
        let mut ops = Vec::new();
        let mut counter = 0u64;
        for k in 0..n {
            let kind = pick_kind(cfg, &mut rng);
            let size = if matches!(kind, Kind::FetchAdd | Kind::CompareSwap) {
                8
            } else {
                rng.random_range(min..=max)
            };
            let mut op = Op {
                kind,
                size,
                imm: rng.random_bool(0.5),
                expect_orig: counter,
                add_or_swap: 0,
                compare: 0,
                slot: k,
            };
            match kind {
                Kind::FetchAdd => {
                    op.add_or_swap = rng.random_range(1..1000);
                    counter = counter.wrapping_add(op.add_or_swap);
                }
                Kind::CompareSwap => {
                    // Alternate hits and misses.
                    op.compare = if k % 2 == 0 { counter } else { counter ^ 1 };
                    op.add_or_swap = rng.random();
                    if op.compare == counter {
                        counter = op.add_or_swap;
                    }
                }
                _ => {}
            }
            ops.push(op);
        }
        let sends = (0..ops.len())
            .filter(|&j| ops[j].kind == Kind::Send)
            .collect();
        pairs.push(PairState {
            completed: vec![false; ops.len()],
            succeeded: vec![false; ops.len()],
            ops,
            next_post: 0,
            outstanding: VecDeque::new(),
            sends,
            matched: 0,
            delivered: Vec::new(),
            free_recv_slots: (0..SLOTS).rev().collect(),
            counter,
        });
    }

    let mut problems = Vec::new();
    let mut errors: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut ok = 0u64;
    let mut posted = 0u64;
    let grh = if cfg.transport == QpType::Ud { 40 } else { 0 };
    let mut reported = 0u64;
    loop {
        let before = (posted, ok, errors.values().sum::<u64>());
        if before.1 + before.2 > reported {
            reported = before.1 + before.2;
            progress(reported);
        }
        // Post while the window allows; keep receives posted on B.
        for (i, p) in pairs.iter_mut().enumerate() {
            let i = i as u32;
            while let Some(slot) = p.free_recv_slots.pop() {
                let r = RecvWr {
                    wr_id: slot,
                    sg_list: crate::sg![Sge {
                        addr: layout.recv(i, slot),
                        length: (u64::from(max) + grh) as u32,
                        lkey: key_b,
                    }],
                };
                if sim.qp(b, QPN_B + i).post_recv(r).is_err() {
                    p.free_recv_slots.push(slot);
                    break;
                }
            }
            while p.outstanding.len() < WINDOW && p.next_post < p.ops.len() {
                let k = p.next_post;
                let op = &p.ops[k];
                if matches!(op.kind, Kind::Send | Kind::Write) {
                    let data = pattern(i, k as u64, op.size as usize);
                    mem_a.fill(key_a, layout.data(i, op.slot) as usize, &data);
                }
                let wr = make_wr(cfg, &layout, i, k, op, key_a, key_b);
                match sim.qp(a, QPN_A + i).post_send(wr) {
                    Ok(()) => {
                        p.next_post += 1;
                        p.outstanding.push_back(k);
                        posted += 1;
                    }
                    Err(e) => {
                        problems.push(format!("pair {i}: post_send of op {k} failed: {e}"));
                        p.next_post = p.ops.len();
                    }
                }
            }
        }
        // Harvest completions.
        for (i, p) in pairs.iter_mut().enumerate() {
            let i = i as u32;
            while let Some(wc) = sim.qp(a, QPN_A + i).poll_completion() {
                let k = wc.wr_id as usize;
                if k >= p.ops.len() || p.completed[k] {
                    problems.push(format!("pair {i}: op {k} completed twice or unknown"));
                    continue;
                }
                p.completed[k] = true;
                p.outstanding.retain(|&x| x != k);
                if wc.status != WcStatus::Success {
                    *errors.entry(wc.status.name()).or_default() += 1;
                    continue;
                }
                ok += 1;
                p.succeeded[k] = true;
                check_requester(&mem_a, key_a, &layout, i, k, &p.ops[k], max, &mut problems);
            }
            while let Some(wc) = sim.qp(b, QPN_B + i).poll_completion() {
                if wc.status != WcStatus::Success {
                    *errors.entry(wc.status.name()).or_default() += 1;
                    if wc.status == WcStatus::WrFlushErr {
                        continue;
                    }
                }
                let slot = wc.wr_id;
                if wc.opcode == WcOpcode::Recv && wc.status == WcStatus::Success {
                    let got = mem_b.snapshot(key_b).unwrap_or_default();
                    let at = (layout.recv(i, slot) + grh) as usize;
                    let len = wc.byte_len as usize - grh as usize;
                    match_send(
                        cfg.transport,
                        p,
                        i,
                        &got[at..at + len],
                        wc.imm_data,
                        &mut problems,
                    );
                }
                p.free_recv_slots.push(slot);
            }
        }
        let all_done = pairs
            .iter()
            .all(|p| p.next_post == p.ops.len() && p.outstanding.is_empty());
        if all_done {
            if cfg.transport == QpType::Rc {
                // Receives for RC SENDs complete before the SENDs' ACKs: nothing is in flight.
                break;
            }
            // UC/UD: let whatever is still on the wire arrive.
            if !sim.step()? {
                continue_final(
                    &mut sim,
                    &mut pairs,
                    b,
                    &mem_b,
                    key_b,
                    &layout,
                    cfg,
                    grh,
                    &mut problems,
                    &mut errors,
                )?;
                break;
            }
            continue;
        }
        let progressed = before != (posted, ok, errors.values().sum::<u64>());
        if !sim.step()? && !progressed {
            problems.push("the run stalled with work outstanding".into());
            break;
        }
    }

    // Final memory: WRITE slots and atomic counters.
    let got_b = mem_b.snapshot(key_b).unwrap_or_default();
    for (i, p) in pairs.iter().enumerate() {
        let i = i as u32;
        check_writes(cfg.transport, p, i, &layout, &got_b, &mut problems);
        let c = layout.counter(i) as usize;
        let counter = u64::from_ne_bytes(got_b[c..c + 8].try_into().unwrap_or([0; 8]));
        let any_atomic = p
            .ops
            .iter()
            .any(|o| matches!(o.kind, Kind::FetchAdd | Kind::CompareSwap));
        let all_ok = p.completed.iter().all(|&c| c) && errors.is_empty();
        if any_atomic && all_ok && counter != p.counter {
            problems.push(format!(
                "pair {i}: counter {counter:#x}, model {:#x}",
                p.counter
            ));
        }
        if cfg.transport == QpType::Rc && all_ok && p.matched != p.sends.len() {
            problems.push(format!(
                "pair {i}: {} of {} SENDs received",
                p.matched,
                p.sends.len()
            ));
        }
    }
    let mut counters = crate::QpCounters::default();
    sim.for_each_qp(|q| counters += q.counters());
    let retransmits = counters.retransmits;
    let goodput_bytes = pairs
        .iter()
        .flat_map(|p| p.ops.iter().zip(&p.succeeded))
        .filter(|(_, ok)| **ok)
        .map(|(o, _)| u64::from(o.size))
        .sum();
    let every_wr_completed = pairs.iter().all(|p| p.completed.iter().all(|&c| c));
    if !every_wr_completed {
        problems.push("some work requests never completed".into());
    }
    let data_verified = problems.is_empty();
    let guarantees_met = data_verified
        && match (cfg.transport, cfg.faults.partition_at) {
            (QpType::Rc, None) => ok == cfg.ops && posted == cfg.ops,
            _ => true,
        };
    if !guarantees_met && problems.is_empty() {
        problems.push(format!("{ok} of {} operations succeeded", cfg.ops));
    }
    Ok(WorkloadReport {
        posted,
        ok,
        errors,
        data_verified,
        packets_sent: sim.stats.packets_sent,
        retransmits,
        counters,
        goodput_bytes,
        sim_time_ns: sim.now.as_nanos(),
        sim: sim.stats,
        guarantees_met,
        problems,
    })
}
