//! N turns of an 8-byte RC WRITE through two endpoints, with no sockets: post, transmit,
//! the responder's receive checks (parse, ICRC, QPN) and handling, its ACK, the requester's
//! receive of the ACK and the completion. `bench/instructions.sh` runs it under callgrind
//! at two values of N, and the difference divided by the extra turns is the instruction
//! count of one turn (two packets): exact, so it repeats on a noisy machine.
//!
//! `cargo run --release -p softrdma-proto --example endpoint_turns -- N`

#[path = "shared/turns.rs"]
mod turns;

use softrdma_proto::*;
use turns::{IP_A, IP_B, QA};

/// Takes the QP's one packet into `pkt` (bytes, UDP source port).
fn take(qp: &mut QueuePair, now: Instant, buf: &mut Vec<u8>, pkt: &mut (Vec<u8>, u16)) {
    while let Some(t) = qp.poll_transmit(now, buf) {
        pkt.0.clear();
        pkt.0.extend_from_slice(&buf[..t.len]);
        pkt.1 = t.src_port;
    }
}

fn main() {
    let turns = turns::turns();
    // The simulator only set the pair up; the turns drive its two endpoints directly.
    let (mut hosts, ka, kb) = turns::pair();
    let (ha, hb) = hosts.split_at_mut(1);
    let (a, b) = (&mut ha[0].ep, &mut hb[0].ep);
    let mut buf = Vec::with_capacity(4200);
    let mut pkt: (Vec<u8>, u16) = (Vec::with_capacity(4200), 0);
    let mut done = 0u64;
    for i in 0..turns {
        let now = Instant::from_nanos(1_000_000 + i * 10_000);
        let wr = turns::write(i, ka, kb);
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
