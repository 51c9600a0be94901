//! `softrdma`'s six-steps example (`crates/softrdma/examples/six_steps.rs`) on the fabric
//! API: the same two loopback devices and the same 1,100 bytes, plus a 1 MiB message, with
//! no QP, PSN or connection to manage by hand. Each endpoint connects to the other the
//! first time it sends.
//!
//! `cargo run -p softrdma-fabric --example six_steps`

use softrdma_fabric::*;
use std::sync::Arc;
use std::time::Duration;

/// Sends a message and a 1 MiB message from one endpoint to the other and checks both.
pub fn main() -> Result<()> {
    let mut ends = Vec::new();
    for addr in ["127.0.0.4:7500", "127.0.0.5:7500"] {
        let (av, cq) = (Arc::new(AddressVector::new()), CompletionQueue::new());
        let ep = Endpoint::open(addr.parse().unwrap(), av.clone(), cq.clone())?;
        println!("{addr}: endpoint at {}", ep.addr());
        ends.push((ep, av, cq));
    }
    let (a, b) = (&ends[0], &ends[1]);
    // The peer's address goes in the address vector (it would travel out of band).
    let to_b = a.1.insert(b.0.addr());

    b.0.recv(vec![0; 1100], FI_ADDR_UNSPEC, 7)?;
    b.0.recv(vec![0; 1 << 20], FI_ADDR_UNSPEC, 8)?;
    let big: Vec<u8> = (0..1 << 20).map(|i| i as u8).collect();
    a.0.send(to_b, b"hello, RDMA".repeat(100), 1, SendOpts::default())?;
    a.0.send(to_b, big.clone(), 2, SendOpts::default())?;

    let sent = a.2.wait(2, Duration::from_secs(10));
    let got = b.2.wait(2, Duration::from_secs(10));
    for (name, c) in sent
        .iter()
        .map(|c| ("sender", c))
        .chain(got.iter().map(|c| ("receiver", c)))
    {
        println!(
            "{name}: context {} flags {:#x} ({} bytes), error {}",
            c.context, c.flags, c.len, c.error
        );
        assert_eq!(c.error, 0);
    }
    assert_eq!(
        (sent.len(), got.len()),
        (2, 2),
        "completions did not arrive"
    );
    assert_eq!(got[0].buf, b"hello, RDMA".repeat(100));
    assert!(got[1].buf == big, "1 MiB arrived whole");
    println!(
        "receiver's message begins: {:?}",
        String::from_utf8_lossy(&got[0].buf[..22])
    );
    Ok(())
}
