//! N turns of an 8-byte RC WRITE through two bare QPs, with no endpoint: the engine's part
//! of [`endpoint_turns`](../endpoint_turns.rs) (post, build the WRITE, handle it, build the
//! ACK, handle it, complete), so that `bench/instructions.sh` can tell the engine's cost
//! from the endpoint's (receive checks, demultiplexing, timers).
//!
//! `cargo run --release -p softrdma-proto --example engine_turns -- N`

#[path = "shared/turns.rs"]
mod turns;

use softrdma_proto::endpoint::{Lookup, QpCell};
use softrdma_proto::*;
use softrdma_wire::IbPacket;
use turns::{IP_A, IP_B, QA, QB};

/// Hands every packet `from` wants to send to `to`.
fn pump(from: &mut QueuePair, to: &mut QueuePair, now: Instant, buf: &mut Vec<u8>) {
    let (src, dst) = if from.qpn().value() == QA {
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
    let turns = turns::turns();
    // The simulator only set the pair up; the turns drive the two QPs directly.
    let (hosts, ka, kb) = turns::pair();
    let (ca, cb) = (
        hosts[0].ep.qps.get(QA).expect("A's QP"),
        hosts[1].ep.qps.get(QB).expect("B's QP"),
    );
    let (mut qa, mut qb) = (ca.lock_qp(), cb.lock_qp());
    let mut buf = Vec::with_capacity(4200);
    let mut done = 0;
    for i in 0..turns {
        let now = Instant::from_nanos(1_000_000 + i * 10_000);
        let wr = turns::write(i, ka, kb);
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
