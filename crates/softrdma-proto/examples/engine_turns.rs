//! N turns of an 8-byte RC WRITE through two bare QPs, with no endpoint: the engine's part
//! of [`endpoint_turns`](../endpoint_turns.rs) (post, build the WRITE, handle it, build the
//! ACK, handle it, complete), so that `bench/instructions.sh` can tell the engine's cost
//! from the endpoint's (receive checks, demultiplexing, timers).
//!
//! `cargo run --release -p softrdma-proto --example engine_turns -- N`

use softrdma_proto::endpoint::{Lookup, QpCell};
use softrdma_proto::sim::{ConnectOpts, LinkFaults, Sim};
use softrdma_proto::*;
use softrdma_wire::IbPacket;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

const IP_A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
const IP_B: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));

/// Hands every packet `from` wants to send to `to`.
fn pump(from: &mut QueuePair, to: &mut QueuePair, now: Instant, buf: &mut Vec<u8>) {
    let (src, dst) = if from.qpn().value() == 0x11 {
        (IP_A, IP_B)
    } else {
        (IP_B, IP_A)
    };
    while let Some(t) = from.poll_transmit(now, buf) {
        let p = IbPacket::new_checked(&buf[..t.len]).expect("the engine's packets parse");
        to.handle_packet(now, src, dst, &p);
    }
}

fn main() {
    let turns: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    let all = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let (mem_a, mem_b) = (Arc::new(SimMemory::new(0xA)), Arc::new(SimMemory::new(0xB)));
    let ka = mem_a.register(Pd(1), 0x1000, 4096, all);
    let kb = mem_b.register(Pd(1), 0x1000, 4096, all);
    // The simulator only sets the pair up; the turns drive the two QPs directly.
    let mut sim = Sim::new(1, LinkFaults::default(), 1);
    sim.add_endpoint(IP_A, mem_a);
    sim.add_endpoint(IP_B, mem_b);
    sim.connect(0, 0x11, 1, 0x22, ConnectOpts::default());
    let (ca, cb) = (
        sim.endpoints[0].ep.qps.get(0x11).expect("A's QP"),
        sim.endpoints[1].ep.qps.get(0x22).expect("B's QP"),
    );
    let (mut qa, mut qb) = (ca.lock_qp(), cb.lock_qp());
    let mut buf = Vec::with_capacity(4200);
    let mut done = 0;
    for i in 0..turns {
        let now = Instant::from_nanos(1_000_000 + i * 10_000);
        let wr = SendWr {
            wr_id: i,
            op: SendOp::Write {
                remote_addr: 0x1000,
                rkey: kb,
            },
            payload: Payload::Sges(vec![Sge {
                addr: 0x1000,
                length: 8,
                lkey: ka,
            }]),
            flags: SendFlags::SIGNALED,
            ud: None,
        };
        qa.post_send(wr).expect("posted");
        pump(&mut qa, &mut qb, now, &mut buf);
        pump(&mut qb, &mut qa, now, &mut buf);
        while let Some(wc) = qa.poll_completion() {
            assert_eq!(wc.status, WcStatus::Success);
            done += 1;
        }
    }
    assert_eq!(done, turns, "every WRITE completed");
    println!("{turns} turns");
}
