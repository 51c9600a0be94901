//! Shared set-up for the engine tests: two endpoints with registered memory and a connected
//! pair of QPs in the simulator.
#![allow(dead_code)]

use softrdma_proto::sim::{ConnectOpts, LinkFaults, PacketMeta, Sim, Verdict};
use softrdma_proto::*;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, MutexGuard};

pub const A: usize = 0;
pub const B: usize = 1;
pub const QA: u32 = 0x11;
pub const QB: u32 = 0x22;
pub const BUF: u64 = 0x10_0000;
pub const BUF_LEN: usize = 1 << 20;
pub const IP_A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
pub const IP_B: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));

pub struct Pair {
    pub sim: Sim,
    pub mem_a: Arc<SimMemory>,
    pub mem_b: Arc<SimMemory>,
    /// Key of a 1 MiB region at `BUF` on each side with every access right.
    pub key_a: u32,
    pub key_b: u32,
}

pub fn pair(opts: ConnectOpts, faults: LinkFaults) -> Pair {
    pair_seeded(opts, faults, 1)
}

pub fn pair_seeded(opts: ConnectOpts, faults: LinkFaults, seed: u64) -> Pair {
    let all = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC;
    let mem_a = Arc::new(SimMemory::new(0xA));
    let mem_b = Arc::new(SimMemory::new(0xB));
    let key_a = mem_a.register(Pd(1), BUF, BUF_LEN, all);
    let key_b = mem_b.register(Pd(1), BUF, BUF_LEN, all);
    let mut sim = Sim::new(seed, faults, 2_000_000);
    sim.add_endpoint(IP_A, mem_a.clone());
    sim.add_endpoint(IP_B, mem_b.clone());
    sim.connect(A, QA, B, QB, opts);
    Pair {
        sim,
        mem_a,
        mem_b,
        key_a,
        key_b,
    }
}

pub fn sge(addr: u64, length: u32, lkey: u32) -> Payload {
    Payload::Sges(softrdma_proto::sg![Sge { addr, length, lkey }])
}

pub fn wr(wr_id: u64, op: SendOp, payload: Payload) -> SendWr {
    SendWr::signaled(wr_id, op, payload)
}

pub fn recv(wr_id: u64, addr: u64, length: u32, lkey: u32) -> RecvWr {
    RecvWr {
        wr_id,
        sg_list: softrdma_proto::sg![Sge { addr, length, lkey }],
    }
}

impl Pair {
    pub fn qa(&mut self) -> MutexGuard<'_, QueuePair> {
        self.sim.qp(A, QA)
    }
    pub fn qb(&mut self) -> MutexGuard<'_, QueuePair> {
        self.sim.qp(B, QB)
    }
    pub fn run(&mut self) {
        self.sim.run().expect("the run ends within its step budget");
    }
    pub fn completions(&mut self, ep: usize) -> Vec<Completion> {
        let qpn = if ep == A { QA } else { QB };
        let mut qp = self.sim.qp(ep, qpn);
        std::iter::from_fn(|| qp.poll_completion()).collect()
    }
    /// Posts a signaled RDMA WRITE of A's `len` bytes at `off` to the same offset on B.
    pub fn write_same_offset(&mut self, id: u64, off: u64, len: u32) {
        let (ka, kb) = (self.key_a, self.key_b);
        let op = SendOp::Write {
            remote_addr: BUF + off,
            rkey: kb,
        };
        self.qa()
            .post_send(wr(id, op, sge(BUF + off, len, ka)))
            .unwrap();
    }
    /// Gives `verdict` to every packet `pick` chooses; the others pass.
    pub fn script_when(
        &mut self,
        verdict: Verdict,
        mut pick: impl FnMut(&PacketMeta<'_>) -> bool + Send + 'static,
    ) {
        self.sim.set_script(Box::new(
            move |m| {
                if pick(m) { verdict } else { Verdict::Pass }
            },
        ));
    }
    /// Gives `verdict` to the first packet `pick` chooses, and to no other; the flag it
    /// returns says whether that packet came.
    pub fn script_once(
        &mut self,
        verdict: Verdict,
        mut pick: impl FnMut(&PacketMeta<'_>) -> bool + Send + 'static,
    ) -> Arc<AtomicBool> {
        let fired = Arc::new(AtomicBool::new(false));
        let f = fired.clone();
        self.script_when(verdict, move |m| {
            !f.load(Ordering::Relaxed) && pick(m) && !f.swap(true, Ordering::Relaxed)
        });
        fired
    }
    pub fn fill_a(&self, offset: usize, data: &[u8]) {
        self.mem_a.fill(self.key_a, offset, data);
    }
    pub fn fill_b(&self, offset: usize, data: &[u8]) {
        self.mem_b.fill(self.key_b, offset, data);
    }
    pub fn read_a(&self, offset: usize, len: usize) -> Vec<u8> {
        self.mem_a.snapshot(self.key_a).unwrap()[offset..offset + len].to_vec()
    }
    pub fn read_b(&self, offset: usize, len: usize) -> Vec<u8> {
        self.mem_b.snapshot(self.key_b).unwrap()[offset..offset + len].to_vec()
    }
}

/// Bytes that differ per `seed` and position.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|j| {
            let x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)
                ^ (j as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            (x >> 29) as u8
        })
        .collect()
}

/// Runs `check` on every input of fuzz target `target`'s committed corpus (the fuzz targets
/// need nightly; these tests keep the corpus checked on stable), and asserts there are at
/// least ten.
pub fn replay_corpus(target: &str, mut check: impl FnMut(&[u8])) {
    let dir = format!("{}/../../fuzz/corpus/{target}", env!("CARGO_MANIFEST_DIR"));
    let mut n = 0;
    for e in std::fs::read_dir(dir).expect("the corpus is committed") {
        check(&std::fs::read(e.unwrap().path()).unwrap());
        n += 1;
    }
    assert!(n >= 10, "{n} inputs");
}

/// Proptest cases to run: `var` from the environment (a longer campaign), else `default`.
pub fn cases(var: &str, default: u32) -> u32 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
