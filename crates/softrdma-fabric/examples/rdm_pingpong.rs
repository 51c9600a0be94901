//! 8-byte ping-pong between two RDM endpoints (two loopback devices, one thread each):
//! the fabric layer's half round trip, to set beside `softrdma perf send-lat`.
//!
//! `cargo run --release -p softrdma-fabric --example rdm_pingpong -- [ITERATIONS]`

use softrdma_fabric::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn open(addr: &str) -> Result<(Endpoint, Arc<AddressVector>, Arc<CompletionQueue>)> {
    let (av, cq) = (Arc::new(AddressVector::new()), CompletionQueue::new());
    let ep = Endpoint::open(addr.parse().unwrap(), av.clone(), cq.clone())?;
    Ok((ep, av, cq))
}

/// Reads one completion, spinning; fails after 10 s.
fn one(cq: &CompletionQueue) -> Completion {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(c) = cq.read(1).pop() {
            assert_eq!(c.error, 0, "{c:?}");
            return c;
        }
        assert!(Instant::now() < end, "no completion");
    }
}

/// Runs `n` round trips of 8 bytes and prints the half round trip.
pub fn main() -> Result<()> {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000);
    let (a, av_a, cq_a) = open("127.0.0.4:7510")?;
    let (b, av_b, cq_b) = open("127.0.0.5:7510")?;
    let (to_b, to_a) = (av_a.insert(b.addr()), av_b.insert(a.addr()));
    let echo = std::thread::spawn(move || -> Result<()> {
        for _ in 0..n {
            b.recv(vec![0; 8], FI_ADDR_UNSPEC, 1)?;
            // Wait for the ping, then answer; the answer's own completion is read later.
            let mut buf = loop {
                let c = one(&cq_b);
                if c.flags & flags::RECV != 0 {
                    break c.buf.into_vec();
                }
            };
            buf.truncate(8);
            b.send(
                to_a,
                buf,
                2,
                SendOpts {
                    inject: true,
                    ..Default::default()
                },
            )?;
        }
        Ok(())
    });
    let mut t0 = Instant::now();
    for i in 0..n {
        if i == n / 10 {
            t0 = Instant::now(); // the first tenth warms up
        }
        a.recv(vec![0; 8], FI_ADDR_UNSPEC, 1)?;
        a.send(
            to_b,
            vec![7; 8],
            2,
            SendOpts {
                inject: true,
                ..Default::default()
            },
        )?;
        while one(&cq_a).flags & flags::RECV == 0 {}
    }
    let timed = n - n / 10;
    echo.join().expect("echo thread")?;
    let half = t0.elapsed().as_secs_f64() * 1e6 / timed as f64 / 2.0;
    println!("rdm 8 B ping-pong: {half:.2} µs half round trip ({timed} timed round trips)");
    Ok(())
}
