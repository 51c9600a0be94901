//! The classic six steps of an RDMA program, complete: open a device, allocate a protection
//! domain, create a completion queue, create a queue pair, register memory, post a send. Two
//! devices on loopback (127.0.0.4 and 127.0.0.5) are connected, and every completion printed.
//!
//! `cargo run -p softrdma --example six_steps`

use softrdma::*;

/// Runs the six steps on two loopback devices and checks what arrived.
pub fn main() -> Result<()> {
    // Two ends, each through the six steps.
    let mut ends = Vec::new();
    for addr in ["127.0.0.4", "127.0.0.5"] {
        // 1. Open a device.
        let ctx = Context::open_with(
            "example",
            addr.parse().unwrap(),
            Mtu::M4096,
            DeviceOptions::default(),
        )?;
        // 2. Allocate a protection domain.
        let pd = ctx.alloc_pd();
        // 3. Create a completion queue.
        let cq = ctx.create_cq(16, None)?;
        // 4. Create a queue pair.
        let qp = pd.create_qp(QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: cq.clone(),
            recv_cq: cq.clone(),
            cap: QpCaps::default(),
            sq_sig_all: true,
            srq: None,
        })?;
        // 5. Register memory.
        let mr = pd.register(
            b"hello, RDMA".repeat(100),
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )?;
        println!(
            "{addr}: QP {:#08x}, region at {:#x} (lkey/rkey {:#010x})",
            qp.qp_num().value(),
            mr.addr(),
            mr.lkey()
        );
        ends.push((ctx, pd, cq, qp, mr));
    }
    // Connect the two QPs (the addresses would normally travel out of band).
    let peer = |i: usize| Peer {
        addr: ends[i].0.addr(),
        qpn: ends[i].3.qp_num(),
        psn: Psn::new(100 * i as u32),
    };
    let attr = ConnectAttr {
        mtu: Mtu::M4096,
        ..Default::default()
    };
    ends[0].3.connect(Psn::new(0), &peer(1), &attr)?;
    ends[1].3.connect(Psn::new(100), &peer(0), &attr)?;

    let (a, b) = (&ends[0], &ends[1]);
    // The receiver posts a receive; then
    b.3.post_recv(RecvWr {
        wr_id: 7,
        sg_list: softrdma_proto::sg![b.4.sge(0, 1100)],
    })?;
    // 6. Post a send: a SEND of the first 11 bytes, and an RDMA WRITE of the rest.
    a.3.post_send(SendWr {
        wr_id: 1,
        op: SendOp::Send,
        payload: Payload::Sges(softrdma_proto::sg![a.4.sge(0, 11)]),
        flags: SendFlags::SIGNALED,
        ud: None,
    })?;
    a.3.post_send(SendWr {
        wr_id: 2,
        op: SendOp::Write {
            remote_addr: b.4.addr() + 11,
            rkey: b.4.rkey(),
        },
        payload: Payload::Sges(softrdma_proto::sg![a.4.sge(11, 1089)]),
        flags: SendFlags::SIGNALED,
        ud: None,
    })?;
    // Every completion, from both CQs.
    let mut seen = 0;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while seen < 3 {
        for (name, cq) in [("sender", &a.2), ("receiver", &b.2)] {
            for wc in cq.poll(4) {
                println!(
                    "{name}: wr_id {} {:?} {} ({} bytes)",
                    wc.wr_id, wc.opcode, wc.status, wc.byte_len
                );
                assert_eq!(wc.status, WcStatus::Success);
                seen += 1;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "completions did not arrive"
        );
    }
    let got = b.4.to_vec();
    println!(
        "receiver's memory begins: {:?}",
        String::from_utf8_lossy(&got[..22])
    );
    assert_eq!(&got[..1100], &b"hello, RDMA".repeat(100)[..]);
    Ok(())
}
