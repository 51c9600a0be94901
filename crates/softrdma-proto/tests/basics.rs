//! The four RC operations, UC and UD, without faults.

mod common;
use common::*;
use softrdma_proto::sim::{ConnectOpts, LinkFaults};
use softrdma_proto::*;

#[test]
fn rc_send_write_read_atomic() {
    let mut p = pair(ConnectOpts::default(), LinkFaults::default());
    let data = pattern(1, 3000);
    p.fill_a(0, &data);
    p.fill_b(0x8_0000, &pattern(2, 5000));
    let (ka, kb) = (p.key_a, p.key_b);
    p.qb().post_recv(recv(100, BUF + 0x1000, 4096, kb)).unwrap();
    p.qa()
        .post_send(wr(1, SendOp::SendWithImm(0xdead), sge(BUF, 3000, ka)))
        .unwrap();
    p.qa()
        .post_send(wr(
            2,
            SendOp::Write {
                remote_addr: BUF + 0x4_0000,
                rkey: kb,
            },
            sge(BUF, 3000, ka),
        ))
        .unwrap();
    p.qa()
        .post_send(wr(
            3,
            SendOp::Read {
                remote_addr: BUF + 0x8_0000,
                rkey: kb,
            },
            sge(BUF + 0x2_0000, 5000, ka),
        ))
        .unwrap();
    p.fill_b(0x9_0000, &7u64.to_ne_bytes());
    p.qa()
        .post_send(wr(
            4,
            SendOp::FetchAdd {
                remote_addr: BUF + 0x9_0000,
                rkey: kb,
                add: 5,
            },
            sge(BUF + 0x3_0000, 8, ka),
        ))
        .unwrap();
    p.qa()
        .post_send(wr(
            5,
            SendOp::CompareSwap {
                remote_addr: BUF + 0x9_0000,
                rkey: kb,
                compare: 12,
                swap: 99,
            },
            sge(BUF + 0x3_0008, 8, ka),
        ))
        .unwrap();
    p.run();
    let wcs = p.completions(A);
    let ids: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        ids,
        (1..=5).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>()
    );
    assert_eq!(wcs[2].opcode, WcOpcode::RdmaRead);
    assert_eq!(wcs[2].byte_len, 5000);
    let r = p.completions(B);
    assert_eq!(r.len(), 1);
    assert_eq!(
        (r[0].wr_id, r[0].byte_len, r[0].imm_data),
        (100, 3000, 0xdead)
    );
    assert!(r[0].wc_flags.contains(WcFlags::WITH_IMM));
    assert_eq!(p.read_b(0x1000, 3000), data);
    assert_eq!(p.read_b(0x4_0000, 3000), data);
    assert_eq!(p.read_a(0x2_0000, 5000), pattern(2, 5000));
    assert_eq!(p.read_a(0x3_0000, 8), 7u64.to_ne_bytes());
    assert_eq!(p.read_a(0x3_0008, 8), 12u64.to_ne_bytes());
    assert_eq!(p.read_b(0x9_0000, 8), 99u64.to_ne_bytes());
    // 3 SEND packets + 3 WRITE + 1 READ + 2 atomics, and 5 READ responses.
    let c = p.qa().counters();
    assert_eq!(c.retransmits, 0);
    assert_eq!(c.sent_packets, 9);
}

#[test]
fn uc_and_ud_deliver() {
    for qp_type in [QpType::Uc, QpType::Ud] {
        let o = ConnectOpts {
            qp_type,
            ..Default::default()
        };
        let mut p = pair(o, LinkFaults::default());
        let (ka, kb) = (p.key_a, p.key_b);
        p.fill_a(0, &pattern(9, 1000));
        p.qb().post_recv(recv(7, BUF, 2048, kb)).unwrap();
        let mut w = wr(1, SendOp::Send, sge(BUF, 1000, ka));
        w.ud = Some(UdDest {
            src: IP_A,
            ip: IP_B,
            qpn: softrdma_wire::Qpn::new(QB),
            qkey: o.qkey,
            traffic_class: 0,
        });
        p.qa().post_send(w).unwrap();
        p.run();
        assert_eq!(p.completions(A)[0].status, WcStatus::Success);
        let r = p.completions(B);
        assert_eq!(r.len(), 1, "{qp_type:?}");
        let grh = if qp_type == QpType::Ud { 40 } else { 0 };
        assert_eq!(r[0].byte_len as usize, 1000 + grh);
        assert_eq!(p.read_b(grh, 1000), pattern(9, 1000));
        if qp_type == QpType::Ud {
            assert!(r[0].wc_flags.contains(WcFlags::GRH));
            assert_eq!(r[0].src_qp.value(), QA);
            // The IPv4 header sits in the last 20 bytes of the GRH area, as rxe writes it.
            let grh = p.read_b(20, 20);
            assert_eq!(grh[0], 0x45);
            assert_eq!(&grh[12..16], &[10, 0, 0, 1]);
        }
    }
}
