//! SEND ping-pong turns between two processes' worth of one device in one thread, for
//! counting instructions (bench/instructions.sh runs it under callgrind at two turn counts;
//! the difference is what one turn costs). Each turn is perftest's send_lat step, both
//! ways: post a receive, SEND 8 bytes, poll the SEND's completion and the peer's message.
//! The two ends share the device on 127.0.88.1, so their packets take the same-host ring.
//!
//! `cargo run --release -p softrdma --example send_turns -- TURNS`

#[path = "shared/ends.rs"]
mod ends;

use ends::{End, connect, end};
use softrdma::*;
use std::time::{Duration, Instant};

/// Polls `e`'s CQ until `n` completions came, for at most ten seconds.
fn wait(e: &End, n: usize) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = 0;
    while got < n {
        for c in e.cq.poll(n - got) {
            assert_eq!(c.status, WcStatus::Success, "{c:?}");
            got += 1;
        }
        assert!(Instant::now() < deadline, "{got} of {n} completions");
    }
    Ok(())
}

fn recv(e: &End, id: u64) -> Result<()> {
    e.qp.post_recv(RecvWr {
        wr_id: id,
        sg_list: softrdma_proto::sg![e.mr.sge(1024, 8)],
    })
}

fn send(e: &End, id: u64) -> Result<()> {
    e.qp.post_send(SendWr {
        wr_id: id,
        op: SendOp::Send,
        payload: Payload::Sges(softrdma_proto::sg![e.mr.sge(0, 8)]),
        flags: SendFlags::SIGNALED,
        ud: None,
    })
}

/// Runs the turns given as the first argument (default 1000).
pub fn main() -> Result<()> {
    let turns: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    let a = end("turns", "127.0.88.1", 4096, AccessFlags::LOCAL_WRITE)?;
    let b = end("turns", "127.0.88.1", 4096, AccessFlags::LOCAL_WRITE)?;
    connect(&a, &b)?;
    recv(&a, 0)?;
    recv(&b, 0)?;
    for i in 1..=turns {
        // a SENDs, b receives and answers: two completions on each side per turn, the
        // SEND's (its ACK rides with the peer's next SEND, as in perftest's send_lat) and
        // the peer's message.
        send(&a, i)?;
        wait(&b, if i == 1 { 1 } else { 2 })?;
        recv(&b, i)?;
        send(&b, i)?;
        wait(&a, 2)?;
        recv(&a, i)?;
    }
    println!("{turns} turns");
    Ok(())
}
