//! SEND ping-pong turns between two processes' worth of one device in one thread, for
//! counting instructions by hand (callgrind at two turn counts; the difference is what the
//! extra turns cost). Each turn is perftest's send_lat step, both ways: post a receive,
//! SEND 8 bytes, poll the SEND's completion and the peer's message. The two ends share the
//! device on 127.0.88.1, so their packets take the same-host ring.
//!
//! Not in `bench/instructions.sh`: under callgrind this loop polls about 170 times a SEND
//! before the peer's message or its ACK shows (4,000 turns, one run; the progress threads
//! were nearly idle), so most of what it counts is empty polls whose number depends on
//! timing. Why a SEND's entry takes that long to show in one thread is not yet known; the
//! WRITE turns of `path_turns --one` do not wait so.
//!
//! With `--empty POLLS` it instead polls one end's empty CQ that many times after one turn
//! (a same-host ring open): what a busy poller pays per poll while it waits, which is also
//! what a message that lands during a poll waits on average (half a poll).
//!
//! `cargo run --release -p softrdma --example send_turns -- TURNS`
//! `cargo run --release -p softrdma --example send_turns -- --empty POLLS`

#[path = "shared/ends.rs"]
mod ends;

use ends::{End, connect, end};
use softrdma::*;
use std::time::{Duration, Instant};

/// Polls `e`'s CQ until `n` completions came, for at most ten seconds.
fn wait(e: &End, n: usize) -> Result<()> {
    // Kept between calls, and the clock read seldom: both would be counted with the path.
    thread_local! {
        static WCS: std::cell::RefCell<Vec<Completion>> =
            std::cell::RefCell::new(Vec::with_capacity(8));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = 0;
    let mut spins = 0u32;
    WCS.with_borrow_mut(|wcs| {
        while got < n {
            wcs.clear();
            e.cq.poll_into(n - got, wcs);
            for c in wcs.iter() {
                assert_eq!(c.status, WcStatus::Success, "{c:?}");
                got += 1;
            }
            spins += 1;
            if spins % 4096 == 0 {
                assert!(Instant::now() < deadline, "{got} of {n} completions");
            }
        }
    });
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
    let args: Vec<String> = std::env::args().collect();
    let empty = args.get(1).is_some_and(|a| a == "--empty");
    let turns: u64 = args
        .get(if empty { 2 } else { 1 })
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    let a = end("turns", "127.0.88.1", 4096, AccessFlags::LOCAL_WRITE)?;
    let b = end("turns", "127.0.88.1", 4096, AccessFlags::LOCAL_WRITE)?;
    connect(&a, &b)?;
    recv(&a, 0)?;
    recv(&b, 0)?;
    if empty {
        send(&a, 1)?;
        wait(&b, 1)?;
        let mut wcs = Vec::with_capacity(8);
        for _ in 0..turns {
            wcs.clear();
            a.cq.poll_into(8, &mut wcs);
            // a's SEND completes once b's ACK comes: at most that one.
            assert!(wcs.len() <= 1, "{wcs:?}");
        }
        println!("{turns} empty polls");
        return Ok(());
    }
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
