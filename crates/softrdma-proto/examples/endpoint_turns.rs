//! N turns of an 8-byte RC WRITE through two endpoints, with no sockets: post, transmit,
//! the responder's receive checks (parse, ICRC, QPN) and handling, its ACK, the requester's
//! receive of the ACK and the completion. `bench/instructions.sh` runs it under callgrind
//! at two values of N, and the difference divided by the extra turns is the instruction
//! count of one turn (two packets): exact, so it repeats on a noisy machine.
//!
//! `cargo run --release -p softrdma-proto --example endpoint_turns -- N`

use softrdma_proto::sim::{ConnectOpts, LinkFaults, Sim};
use softrdma_proto::*;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

const IP_A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
const IP_B: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
const QA: u32 = 0x11;
const QB: u32 = 0x22;

/// Takes the QP's one packet into `pkt` (bytes, UDP source port).
fn take(qp: &mut QueuePair, now: Instant, buf: &mut Vec<u8>, pkt: &mut (Vec<u8>, u16)) {
    while let Some(t) = qp.poll_transmit(now, buf) {
        pkt.0.clear();
        pkt.0.extend_from_slice(&buf[..t.len]);
        pkt.1 = t.src_port;
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
    // The simulator only sets the pair up; the turns drive its two endpoints directly.
    let mut sim = Sim::new(1, LinkFaults::default(), 1);
    sim.add_endpoint(IP_A, mem_a);
    sim.add_endpoint(IP_B, mem_b);
    sim.connect(0, QA, 1, QB, ConnectOpts::default());
    let mut hosts = std::mem::take(&mut sim.endpoints);
    let (ha, hb) = hosts.split_at_mut(1);
    let (a, b) = (&mut ha[0].ep, &mut hb[0].ep);
    let mut buf = Vec::with_capacity(4200);
    let mut pkt: (Vec<u8>, u16) = (Vec::with_capacity(4200), 0);
    let mut done = 0u64;
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
        a.qp(QA).expect("A's QP").post_send(wr).expect("posted");
        a.service(|qp| take(qp, now, &mut buf, &mut pkt));
        b.handle_datagram(now, IP_A, pkt.1, &pkt.0);
        b.service(|qp| take(qp, now, &mut buf, &mut pkt));
        a.handle_datagram(now, IP_B, pkt.1, &pkt.0);
        a.service(|qp| {
            while let Some(wc) = qp.poll_completion() {
                assert_eq!(wc.status, WcStatus::Success);
                done += 1;
            }
        });
    }
    assert_eq!(done, turns, "every WRITE completed");
    println!("{turns} turns");
}
