//! Scripted scenarios for every timer and NAK path.

mod common;
use common::*;
use softrdma_proto::sim::{ConnectOpts, LinkFaults, Verdict};
use softrdma_proto::*;
use softrdma_wire::{Opcode, Operation};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

fn opts() -> ConnectOpts {
    ConnectOpts::default()
}

/// A pair connected with `o` over faultless links.
fn pair_with(o: ConnectOpts) -> Pair {
    pair(o, LinkFaults::default())
}

fn statuses(wcs: &[Completion]) -> Vec<(u64, WcStatus)> {
    wcs.iter().map(|w| (w.wr_id, w.status)).collect()
}

/// Posts receive WR `id` of `len` bytes at B's `BUF + off`.
fn recv_b(p: &mut Pair, id: u64, off: u64, len: u32) {
    let kb = p.key_b;
    p.qb().post_recv(recv(id, BUF + off, len, kb)).unwrap();
}

fn send(p: &mut Pair, id: u64, len: u32) {
    let ka = p.key_a;
    p.qa()
        .post_send(wr(id, SendOp::Send, sge(BUF, len, ka)))
        .unwrap();
}

/// A signaled WRITE of A's first `len` bytes to B's `BUF + off`.
fn write_wr(p: &Pair, id: u64, off: u64, len: u32) -> SendWr {
    let op = SendOp::Write {
        remote_addr: BUF + off,
        rkey: p.key_b,
    };
    wr(id, op, sge(BUF, len, p.key_a))
}

fn write(p: &mut Pair, id: u64, off: u64, len: u32) {
    let w = write_wr(p, id, off, len);
    p.qa().post_send(w).unwrap();
}

/// Posts a signaled READ of `len` bytes at B's `BUF + remote` into A's `BUF + local`.
fn read(p: &mut Pair, id: u64, remote: u64, local: u64, len: u32) {
    let op = SendOp::Read {
        remote_addr: BUF + remote,
        rkey: p.key_b,
    };
    let w = wr(id, op, sge(BUF + local, len, p.key_a));
    p.qa().post_send(w).unwrap();
}

// ---------------------------------------------------------------- RNR

fn rnr_run(rnr_retry: u8) -> Pair {
    let mut p = pair_with(ConnectOpts {
        rnr_retry,
        min_rnr_timer: 1, // 10 us
        ..opts()
    });
    send(&mut p, 1, 100);
    p
}

#[test]
fn rnr_retry_0_fails_at_the_first_rnr_nak() {
    let mut p = rnr_run(0);
    p.run();
    assert_eq!(statuses(&p.completions(A)), [(1, WcStatus::RnrRetryExcErr)]);
    assert_eq!(p.qa().counters().rnr_naks_rcvd, 1);
    assert_eq!(p.qb().counters().rnr_naks_sent, 1);
    assert_eq!(p.qa().state(), QpState::Error);
}

#[test]
fn rnr_retry_3_tries_three_more_times_after_the_timer() {
    let mut p = rnr_run(3);
    p.run();
    assert_eq!(statuses(&p.completions(A)), [(1, WcStatus::RnrRetryExcErr)]);
    assert_eq!(p.qa().counters().rnr_naks_rcvd, 4);
    // Three waits of the 10 us RNR timer.
    assert!(p.sim.now.as_nanos() >= 30_000, "{:?}", p.sim.now);
}

#[test]
fn rnr_retry_7_waits_forever_until_a_receive_is_posted() {
    let mut p = rnr_run(7);
    p.sim
        .run_until(|s| s.qp(A, QA).counters().rnr_naks_rcvd >= 20)
        .unwrap();
    assert!(p.completions(A).is_empty());
    recv_b(&mut p, 9, 0, 4096);
    p.run();
    assert_eq!(statuses(&p.completions(A)), [(1, WcStatus::Success)]);
    assert_eq!(statuses(&p.completions(B)), [(9, WcStatus::Success)]);
}

// ---------------------------------------------------------------- PSN sequence NAK

/// Ten WRITEs of four packets, each losing its second packet once, to a responder that keeps
/// the packets after a gap (softrdma's) or drops them (rxe's). Returns A's and B's counters.
fn second_packets_lost(keep_ahead: bool) -> (QpCounters, QpCounters) {
    let mut p = pair_with(opts());
    p.qb().set_keep_ahead(keep_ahead);
    let mut seen = std::collections::HashSet::new();
    // Each WRITE's second packet (PSN 1, 5, 9, ... after the first), its first time only.
    p.script_when(Verdict::Drop, move |m| {
        let psn = m.packet.bth().psn().value();
        m.from == A && psn.wrapping_sub(0x10_0000) % 4 == 1 && seen.insert(psn)
    });
    let data = pattern(5, 4000);
    p.fill_a(0, &data);
    for i in 0..10u64 {
        write(&mut p, i, 0x1000 * (i + 1), 4000);
        p.run();
        assert_eq!(statuses(&p.completions(A)), [(i, WcStatus::Success)]);
        assert_eq!(p.read_b(0x1000 * (i as usize + 1), 4000), data);
    }
    let a = p.qa().counters();
    (a, p.qb().counters())
}

#[test]
fn lost_packet_gets_one_sequence_nak_and_is_sent_again_alone() {
    let (a, b) = second_packets_lost(true);
    assert_eq!(b.seq_naks_sent, 10, "one NAK per gap");
    assert_eq!(
        b.out_of_sequence, 20,
        "packets 3 and 4 arrived early, and were kept"
    );
    assert_eq!(a.seq_naks_rcvd, 10);
    assert_eq!(
        (a.timeouts, a.probes),
        (0, 0),
        "the NAK, not a timer, recovered"
    );
    assert_eq!(a.retransmits, 10, "only the lost packet again: {a:?}");
    assert_eq!(b.duplicate_requests, 0, "{b:?}");
}

#[test]
fn a_responder_that_drops_what_follows_a_gap_gets_go_back_n() {
    let (a, b) = second_packets_lost(false);
    assert_eq!(b.seq_naks_sent, 10);
    assert_eq!((a.timeouts, a.probes), (0, 0), "{a:?}");
    // The first two losses try the lost packet alone, and the answer (an ACK of it, not
    // beyond) sends the two after it again; from then on go-back-N at once. Either way the
    // responder gets packets 2 to 4 again, and sees no duplicate.
    assert_eq!(a.retransmits, 30, "{a:?}");
    assert_eq!(b.duplicate_requests, 0, "{b:?}");
}

// ---------------------------------------------------------------- access errors

/// WR 1, the `op` made on the pair (given its keys and memory) with A's first `len` bytes,
/// fails with `want` at A and `event` at B, and both QPs end in the error state.
fn access_error(op: impl FnOnce(&Pair) -> SendOp, len: u32, want: WcStatus, event: AsyncEvent) {
    let mut p = pair(opts(), LinkFaults::default());
    let ka = p.key_a;
    let op = op(&p);
    p.qa().post_send(wr(1, op, sge(BUF, len, ka))).unwrap();
    p.qa()
        .post_send(wr(2, SendOp::Send, sge(BUF, 8, ka)))
        .unwrap();
    p.run();
    assert_eq!(
        statuses(&p.completions(A)),
        [(1, want), (2, WcStatus::WrFlushErr)],
        "{op:?}"
    );
    assert_eq!(p.qa().state(), QpState::Error);
    assert_eq!(p.qb().state(), QpState::Error);
    assert_eq!(p.qb().poll_event(), Some(event));
}

/// [`access_error`] where B's answer is a remote access error.
fn remote_access_error(op: impl FnOnce(&Pair) -> SendOp, len: u32) {
    let event = AsyncEvent::QpAccessError(softrdma_wire::Qpn::new(QB));
    access_error(op, len, WcStatus::RemAccessErr, event);
}

#[test]
fn bad_rkey_is_a_remote_access_error() {
    remote_access_error(
        |p| SendOp::Write {
            remote_addr: BUF,
            rkey: p.key_b ^ 0x100,
        },
        64,
    );
}

#[test]
fn out_of_bounds_is_a_remote_access_error() {
    let end = BUF + BUF_LEN as u64;
    remote_access_error(
        |p| SendOp::Read {
            remote_addr: end - 10,
            rkey: p.key_b,
        },
        100,
    );
}

#[test]
fn missing_access_flag_is_a_remote_access_error() {
    // A region B registered for reading only.
    let read_only = |p: &Pair| {
        p.mem_b
            .register(Pd(1), 0x900_0000, 4096, AccessFlags::REMOTE_READ)
    };
    remote_access_error(
        |p| SendOp::Write {
            remote_addr: 0x900_0000,
            rkey: read_only(p),
        },
        64,
    );
}

#[test]
fn misaligned_atomic_is_an_invalid_request() {
    let event = AsyncEvent::QpRequestError(softrdma_wire::Qpn::new(QB));
    let op = |p: &Pair| SendOp::FetchAdd {
        remote_addr: BUF + 4,
        rkey: p.key_b,
        add: 1,
    };
    access_error(op, 8, WcStatus::RemInvReqErr, event);
}

#[test]
fn message_longer_than_the_receive_buffer_is_an_invalid_request() {
    let mut p = pair_with(opts());
    recv_b(&mut p, 7, 0, 100);
    send(&mut p, 1, 200);
    p.run();
    assert_eq!(statuses(&p.completions(A)), [(1, WcStatus::RemInvReqErr)]);
    assert_eq!(statuses(&p.completions(B)), [(7, WcStatus::LocLenErr)]);
}

// ---------------------------------------------------------------- retry exhaustion

#[test]
fn retry_exhaustion_fails_with_retry_exc_err() {
    let mut p = pair_with(ConnectOpts {
        retry_cnt: 3,
        timeout: 8, // 1.05 ms
        ..opts()
    });
    p.script_when(Verdict::Drop, |m| m.from == A);
    send(&mut p, 1, 10);
    send(&mut p, 2, 10);
    p.run();
    assert_eq!(
        statuses(&p.completions(A)),
        [(1, WcStatus::RetryExcErr), (2, WcStatus::WrFlushErr)]
    );
    let c = p.qa().counters();
    assert_eq!(c.timeouts, 4, "the first timeout and three retries");
    assert_eq!(c.retry_exceeded, 1);
    let t = p.sim.now.as_nanos();
    assert!((4 * 1_048_576..5 * 1_048_576).contains(&t), "{t} ns");
}

// ---------------------------------------------------------------- duplicates

#[test]
fn duplicate_read_is_executed_again() {
    let mut p = pair_with(opts());
    let src = pattern(3, 3000);
    p.fill_b(0x5000, &src);
    // Lose the middle READ response the first time: the requester asks again for the rest.
    let dropped = p.script_once(Verdict::Drop, |m| {
        m.packet.bth().opcode() == Opcode::RC_RDMA_READ_RESPONSE_MIDDLE
    });
    read(&mut p, 1, 0x5000, 0x8000, 3000);
    p.run();
    assert!(dropped.load(Ordering::Relaxed));
    assert_eq!(statuses(&p.completions(A)), [(1, WcStatus::Success)]);
    assert_eq!(p.read_a(0x8000, 3000), src);
    assert_eq!(p.qb().counters().duplicate_requests, 1);
}

#[test]
fn duplicated_read_request_is_answered_twice_and_completes_once() {
    let mut p = pair_with(opts());
    p.fill_b(0x5000, &pattern(4, 2000));
    p.script_when(Verdict::Duplicate, |m| {
        m.packet.info().operation == Operation::ReadRequest
    });
    read(&mut p, 1, 0x5000, 0, 2000);
    p.run();
    assert_eq!(statuses(&p.completions(A)), [(1, WcStatus::Success)]);
    assert_eq!(p.read_a(0, 2000), pattern(4, 2000));
    assert_eq!(p.qb().counters().duplicate_requests, 1);
    assert_eq!(p.qb().counters().sent_packets, 4, "two responses, twice");
}

#[test]
fn duplicate_atomic_is_answered_from_the_saved_result() {
    for verdict in [Verdict::Drop, Verdict::Duplicate] {
        let mut p = pair_with(opts());
        p.fill_b(0x100, &40u64.to_ne_bytes());
        p.script_once(verdict, move |m| {
            let op = m.packet.info().operation;
            // Drop: lose the atomic ACK once, so the request is retransmitted.
            // Duplicate: deliver the request twice.
            match verdict {
                Verdict::Drop => op == Operation::AtomicAcknowledge,
                _ => op == Operation::FetchAdd,
            }
        });
        let (ka, kb) = (p.key_a, p.key_b);
        p.qa()
            .post_send(wr(
                1,
                SendOp::FetchAdd {
                    remote_addr: BUF + 0x100,
                    rkey: kb,
                    add: 2,
                },
                sge(BUF, 8, ka),
            ))
            .unwrap();
        p.run();
        assert_eq!(statuses(&p.completions(A)), [(1, WcStatus::Success)]);
        assert_eq!(p.read_a(0, 8), 40u64.to_ne_bytes(), "{verdict:?}");
        assert_eq!(
            p.read_b(0x100, 8),
            42u64.to_ne_bytes(),
            "{verdict:?}: executed once"
        );
        assert_eq!(p.qb().counters().duplicate_requests, 1);
    }
}

#[test]
fn duplicate_send_is_acknowledged_again_not_delivered_again() {
    let mut p = pair_with(opts());
    p.script_when(Verdict::Duplicate, |m| m.from == A);
    recv_b(&mut p, 1, 0, 100);
    recv_b(&mut p, 2, 100, 100);
    send(&mut p, 10, 50);
    p.run();
    assert_eq!(statuses(&p.completions(A)), [(10, WcStatus::Success)]);
    assert_eq!(statuses(&p.completions(B)), [(1, WcStatus::Success)]);
}

// ---------------------------------------------------------------- PSN wrap

#[test]
fn psns_wrap_at_2_24() {
    let mut p = pair_with(ConnectOpts {
        sq_psn: (1 << 24) - 3,
        mtu: Mtu::M256,
        ..opts()
    });
    // Lose the packet with PSN 0 once: the NAK and go-back-N cross the wrap.
    let lost = p.script_once(Verdict::Drop, |m| {
        m.from == A && m.packet.bth().psn().value() == 0
    });
    let data = pattern(8, 2000);
    p.fill_a(0, &data);
    write(&mut p, 1, 0x2000, 2000); // 8 packets: 2^24-3 .. 4
    p.fill_b(0x9000, &pattern(9, 600));
    read(&mut p, 2, 0x9000, 0x4000, 600);
    p.run();
    assert!(lost.load(Ordering::Relaxed));
    assert_eq!(
        statuses(&p.completions(A)),
        [(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    assert_eq!(p.read_b(0x2000, 2000), data);
    assert_eq!(p.read_a(0x4000, 600), pattern(9, 600));
    assert_eq!(p.qa().query().sq_psn.unwrap().value(), 8);
    assert_eq!(p.qb().query().rq_psn.unwrap().value(), 8);
}

// ---------------------------------------------------------------- ACKs

#[test]
fn ack_req_on_last_packet_and_every_64() {
    let mut p = pair_with(ConnectOpts {
        mtu: Mtu::M256,
        ..opts()
    });
    let acks = Arc::new(Mutex::new(Vec::new()));
    let a = acks.clone();
    p.sim.set_script(Box::new(move |m| {
        if m.from == A && m.packet.bth().ack_req() {
            a.lock().unwrap().push(m.index);
        }
        Verdict::Pass
    }));
    write(&mut p, 1, 0, 200 * 256); // 200 packets
    p.run();
    assert_eq!(statuses(&p.completions(A)), [(1, WcStatus::Success)]);
    let n = acks.lock().unwrap().len();
    // Packets 64, 128 and 192 (counted from 1) and the last: never more than 64 apart.
    assert_eq!(n, 4, "{:?}", acks.lock().unwrap());
}

#[test]
fn acks_are_coalesced() {
    // Drive the QPs by hand: B handles ten SENDs before it is polled, and answers with one
    // ACK for the last.
    let mut p = pair_with(opts());
    for i in 0..10 {
        recv_b(&mut p, i, i * 100, 100);
        send(&mut p, i, 10);
    }
    let now = Instant::ZERO;
    let mut buf = Vec::new();
    let mut pkts = Vec::new();
    while let Some(t) = p.qa().poll_transmit(now, &mut buf) {
        pkts.push((t, buf.clone()));
    }
    assert_eq!(pkts.len(), 10);
    for (t, bytes) in &pkts {
        let pkt = softrdma_wire::IbPacket::new_checked(&bytes[..]).unwrap();
        p.qb().handle_packet(now, t.src, t.dst, &pkt);
    }
    let t = p.qb().poll_transmit(now, &mut buf).expect("one ACK");
    let ack_bytes = buf[..t.len].to_vec();
    let ack = softrdma_wire::IbPacket::new_checked(&ack_bytes[..]).unwrap();
    assert_eq!(ack.bth().opcode(), Opcode::RC_ACKNOWLEDGE);
    let last_psn = softrdma_wire::IbPacket::new_checked(&pkts[9].1[..])
        .unwrap()
        .bth()
        .psn();
    assert_eq!(ack.bth().psn(), last_psn);
    assert_eq!(ack.aeth().unwrap().msn().value(), 10);
    assert!(p.qb().poll_transmit(now, &mut buf).is_none());
    assert_eq!(p.completions(B).len(), 10);
    // The one ACK completes all ten.
    p.qa().handle_packet(now, t.src, t.dst, &ack);
    assert_eq!(p.completions(A).len(), 10);
}

// ---------------------------------------------------------------- fence

fn fence_order(fence: bool) -> (u64, u64) {
    let mut p = pair_with(opts());
    let seen = Arc::new(Mutex::new((0u64, 0u64)));
    let s = seen.clone();
    p.sim.set_script(Box::new(move |m| {
        let mut s = s.lock().unwrap();
        match m.packet.bth().opcode() {
            Opcode::RC_RDMA_READ_RESPONSE_LAST => s.0 = m.index,
            Opcode::RC_RDMA_WRITE_ONLY => s.1 = m.index,
            _ => {}
        }
        Verdict::Pass
    }));
    read(&mut p, 1, 0, 0x1000, 4000);
    let mut w = write_wr(&p, 2, 0x8000, 64);
    if fence {
        w.flags |= SendFlags::FENCE;
    }
    p.qa().post_send(w).unwrap();
    p.run();
    assert_eq!(
        statuses(&p.completions(A)),
        [(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    *seen.lock().unwrap()
}

#[test]
fn fence_waits_for_the_read() {
    let (read_done, write) = fence_order(true);
    assert!(
        write > read_done,
        "fenced WRITE after the READ's last response"
    );
    let (read_done, write) = fence_order(false);
    assert!(
        write < read_done,
        "unfenced WRITE goes right after the READ request"
    );
}

#[test]
fn max_rd_atomic_limits_outstanding_reads() {
    let mut p = pair_with(ConnectOpts {
        max_rd_atomic: 2,
        ..opts()
    });
    let in_flight = Arc::new(Mutex::new((0i32, 0i32)));
    let f = in_flight.clone();
    p.sim.set_script(Box::new(move |m| {
        let mut f = f.lock().unwrap();
        match m.packet.bth().opcode() {
            Opcode::RC_RDMA_READ_REQUEST => f.0 += 1,
            Opcode::RC_RDMA_READ_RESPONSE_ONLY => f.0 -= 1,
            _ => {}
        }
        f.1 = f.1.max(f.0);
        Verdict::Pass
    }));
    for i in 0..6 {
        read(&mut p, i, 0, 0x1000 + i * 64, 64);
    }
    p.run();
    assert_eq!(p.completions(A).len(), 6);
    assert_eq!(in_flight.lock().unwrap().1, 2);
}

// ---------------------------------------------------------------- UC and UD

/// A UC pair whose link loses A's second packet.
fn uc_losing_the_second_packet() -> Pair {
    let mut p = pair_with(ConnectOpts {
        qp_type: QpType::Uc,
        ..opts()
    });
    p.script_when(Verdict::Drop, |m| m.from == A && m.index == 1);
    p
}

#[test]
fn uc_message_missing_a_packet_is_dropped_whole() {
    let mut p = uc_losing_the_second_packet();
    recv_b(&mut p, 5, 0, 4096);
    p.fill_a(0, &pattern(1, 3000));
    send(&mut p, 1, 3000); // 3 packets, the middle one lost
    write(&mut p, 2, 0x10_000, 3000); // 3 packets, all arrive
    send(&mut p, 3, 100);
    p.run();
    assert_eq!(
        statuses(&p.completions(A)),
        [
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::Success)
        ]
    );
    // The broken SEND completed nothing; its receive WR took the next SEND.
    let r = p.completions(B);
    assert_eq!(statuses(&r), [(5, WcStatus::Success)]);
    assert_eq!(r[0].byte_len, 100);
    assert_eq!(p.read_b(0x10_000, 3000), pattern(1, 3000));
}

#[test]
fn uc_write_missing_a_packet_leaves_memory_untouched() {
    let mut p = uc_losing_the_second_packet();
    p.fill_a(0, &pattern(2, 3000));
    write(&mut p, 1, 0x10_000, 3000);
    p.run();
    assert_eq!(p.read_b(0x10_000, 3000), vec![0; 3000]);
    let c = p.qb().counters();
    assert!(c.dropped + c.out_of_sequence > 0);
}

#[test]
fn ud_qkey_mismatch_is_dropped() {
    let o = ConnectOpts {
        qp_type: QpType::Ud,
        ..opts()
    };
    let mut p = pair(o, LinkFaults::default());
    let ka = p.key_a;
    recv_b(&mut p, 1, 0, 4096);
    for (id, qkey) in [(1, o.qkey ^ 1), (2, o.qkey), (3, 0x8000_0000)] {
        let mut w = wr(id, SendOp::Send, sge(BUF, 64, ka));
        w.ud = Some(UdDest {
            src: IP_A,
            ip: IP_B,
            qpn: softrdma_wire::Qpn::new(QB),
            qkey,
            traffic_class: 0,
        });
        p.qa().post_send(w).unwrap();
    }
    recv_b(&mut p, 2, 4096, 4096);
    p.run();
    assert_eq!(p.completions(A).len(), 3, "UD sends complete on the wire");
    // The wrong Q_Key is dropped; the right one and the QP's own (high bit) arrive.
    assert_eq!(
        statuses(&p.completions(B)),
        [(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    assert_eq!(p.qb().counters().dropped, 1);
}

// ---------------------------------------------------------------- posting rules

#[test]
fn posts_are_checked() {
    let mut p = pair_with(opts());
    let ka = p.key_a;
    let e = p
        .qa()
        .post_send(wr(
            1,
            SendOp::FetchAdd {
                remote_addr: BUF,
                rkey: 1,
                add: 1,
            },
            sge(BUF, 4, ka),
        ))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "post_send: invalid sg_list: an atomic needs one 8-byte SGE"
    );
    let mut u = pair_with(ConnectOpts {
        qp_type: QpType::Uc,
        ..opts()
    });
    let e = u
        .qa()
        .post_send(wr(
            1,
            SendOp::Read {
                remote_addr: BUF,
                rkey: 1,
            },
            sge(BUF, 4, ka),
        ))
        .unwrap_err();
    assert!(matches!(e, PostError::InvalidAttr { attr: "opcode", .. }));
    // A count past a limit names the request and the limit.
    let caps = QpCaps::default();
    let sges = vec![
        Sge {
            addr: BUF,
            length: 1,
            lkey: ka
        };
        caps.max_send_sge as usize + 1
    ];
    let e = p
        .qa()
        .post_send(wr(2, SendOp::Send, Payload::Sges(sges.into())))
        .unwrap_err();
    assert_eq!(
        e,
        PostError::OverLimit {
            verb: "post_send",
            attr: "num_sge",
            requested: u64::from(caps.max_send_sge) + 1,
            max: u64::from(caps.max_send_sge),
            limit: "cap.max_send_sge",
        }
    );
    // A local key the MR table does not know fails the WR when it is gathered.
    p.qa()
        .post_send(wr(3, SendOp::Send, sge(BUF, 64, 0xdead)))
        .unwrap();
    p.run();
    assert_eq!(statuses(&p.completions(A)), [(3, WcStatus::LocProtErr)]);
}

#[test]
fn errors_flush_receives_and_later_posts() {
    let mut p = pair_with(opts());
    recv_b(&mut p, 1, 0, 64);
    recv_b(&mut p, 2, 0, 64);
    p.qb()
        .modify(&QpAttr {
            state: Some(QpState::Error),
            ..Default::default()
        })
        .unwrap();
    recv_b(&mut p, 3, 0, 64);
    assert_eq!(
        statuses(&p.completions(B)),
        [
            (1, WcStatus::WrFlushErr),
            (2, WcStatus::WrFlushErr),
            (3, WcStatus::WrFlushErr)
        ]
    );
}

#[test]
fn unsignaled_wrs_complete_silently_but_errors_always_show() {
    let mut p = pair_with(opts());
    let (ka, kb) = (p.key_a, p.key_b);
    // The first WRITE succeeds, the second names a key B does not have.
    for (id, rkey) in [(1, kb), (2, kb ^ 0x100)] {
        let op = SendOp::Write {
            remote_addr: BUF,
            rkey,
        };
        let mut w = wr(id, op, sge(BUF, 8, ka));
        w.flags = SendFlags::empty();
        p.qa().post_send(w).unwrap();
    }
    p.run();
    assert_eq!(statuses(&p.completions(A)), [(2, WcStatus::RemAccessErr)]);
}

#[test]
fn srq_feeds_receives_and_fires_its_limit() {
    let mut p = pair_with(opts());
    // A second pair of QPs whose B side receives from an SRQ.
    let srq = Srq::new(16, 1);
    let (ka, kb) = (p.key_a, p.key_b);
    for i in 0..4 {
        srq.post_recv(recv(i, BUF + i * 128, 128, kb)).unwrap();
    }
    srq.arm_limit(3);
    p.sim
        .connect_with_srq(A, 0x33, B, 0x44, opts(), Some(srq.clone()));
    assert!(matches!(
        p.sim.qp(B, 0x44).post_recv(recv(9, BUF, 8, kb)),
        Err(PostError::HasSrq(0x44))
    ));
    for i in 1..=2 {
        p.sim
            .qp(A, 0x33)
            .post_send(wr(i, SendOp::Send, sge(BUF, 10, ka)))
            .unwrap();
    }
    p.run();
    let mut qb = p.sim.qp(B, 0x44);
    let r: Vec<_> = std::iter::from_fn(|| qb.poll_completion()).collect();
    assert_eq!(
        statuses(&r),
        [(0, WcStatus::Success), (1, WcStatus::Success)]
    );
    assert_eq!(qb.poll_event(), Some(AsyncEvent::SrqLimitReached));
    assert_eq!(qb.poll_event(), None, "the limit fires once");
    assert_eq!(srq.len(), 2);
}

// ---------------------------------------------------------------- gather lists, links, SQD

#[test]
fn scatter_gather_lists_span_packets() {
    let mut p = pair_with(ConnectOpts {
        mtu: Mtu::M256,
        ..opts()
    });
    let (ka, kb) = (p.key_a, p.key_b);
    let data = pattern(11, 1000);
    // Three uneven pieces on A, gathered into four packets.
    p.fill_a(0x100, &data[..300]);
    p.fill_a(0x900, &data[300..301]);
    p.fill_a(0x2000, &data[301..]);
    let sges = vec![
        Sge {
            addr: BUF + 0x100,
            length: 300,
            lkey: ka,
        },
        Sge {
            addr: BUF + 0x900,
            length: 1,
            lkey: ka,
        },
        Sge {
            addr: BUF + 0x2000,
            length: 699,
            lkey: ka,
        },
    ];
    // Two uneven pieces on B.
    p.qb()
        .post_recv(RecvWr {
            wr_id: 5,
            sg_list: softrdma_proto::sg![
                Sge {
                    addr: BUF + 0x4000,
                    length: 257,
                    lkey: kb,
                },
                Sge {
                    addr: BUF + 0x8000,
                    length: 800,
                    lkey: kb,
                },
            ],
        })
        .unwrap();
    p.qa()
        .post_send(wr(1, SendOp::Send, Payload::Sges(sges.into())))
        .unwrap();
    p.run();
    assert_eq!(statuses(&p.completions(A)), [(1, WcStatus::Success)]);
    assert_eq!(p.completions(B)[0].byte_len, 1000);
    assert_eq!(p.read_b(0x4000, 257), data[..257]);
    assert_eq!(p.read_b(0x8000, 743), data[257..]);
}

#[test]
fn faults_can_differ_per_link() {
    // Only B -> A loses everything: A's requests arrive, but no ACK ever comes back.
    let mut p = pair_with(ConnectOpts {
        retry_cnt: 1,
        timeout: 5,
        ..opts()
    });
    p.sim.links.insert(
        (B, A),
        LinkFaults {
            loss: 1.0,
            ..Default::default()
        },
    );
    write(&mut p, 1, 0, 64);
    p.run();
    assert_eq!(statuses(&p.completions(A)), [(1, WcStatus::RetryExcErr)]);
    let probes = p.qa().counters().probes;
    assert!(probes > 0);
    assert_eq!(
        p.qb().counters().duplicate_requests,
        1 + probes,
        "B saw the probes and the retry"
    );
}

#[test]
fn sqd_drains_then_resumes() {
    let mut p = pair_with(opts());
    write(&mut p, 1, 0, 3000);
    // Hand out the first packet, then ask for SQD with notification.
    let mut buf = Vec::new();
    assert!(p.qa().poll_transmit(Instant::ZERO, &mut buf).is_some());
    p.qa()
        .modify(&QpAttr {
            state: Some(QpState::Sqd),
            en_sqd_async_notify: Some(true),
            ..Default::default()
        })
        .unwrap();
    write(&mut p, 2, 0x1000, 100);
    // The sim lost nothing, but it never saw the first packet: recover by go-back-N.
    p.run();
    let wcs = p.completions(A);
    assert_eq!(
        statuses(&wcs),
        [(1, WcStatus::Success)],
        "WR 2 waits in SQD"
    );
    assert_eq!(
        p.qa().poll_event(),
        Some(AsyncEvent::SqDrained(softrdma_wire::Qpn::new(QA)))
    );
    p.qa()
        .modify(&QpAttr {
            state: Some(QpState::Rts),
            ..Default::default()
        })
        .unwrap();
    p.run();
    assert_eq!(statuses(&p.completions(A)), [(2, WcStatus::Success)]);
}

#[test]
fn packets_built_in_place_equal_packets_built_alone() {
    // Two identical pairs send the same WRITE: one builds its packets alone, the other
    // builds them back to back after a prefix, in a buffer longer than it needs.
    let mut alone = pair_with(opts());
    let mut in_place = pair_with(opts());
    write(&mut alone, 1, 0, 10_000);
    write(&mut in_place, 1, 0, 10_000);
    let now = Instant::ZERO;
    let mut buf = Vec::new();
    let mut want = Vec::new();
    while let Some(t) = alone.qa().poll_transmit(now, &mut buf) {
        assert_eq!(buf.len(), t.len);
        want.push(buf.clone());
    }
    let mut batch = vec![0xEEu8; 20_000];
    let prefix = 7;
    let mut at = prefix;
    let mut got = Vec::new();
    while let Some(t) = in_place.qa().poll_transmit_at(now, &mut batch, at) {
        got.push(batch[at..at + t.len].to_vec());
        at += t.len;
    }
    assert!(want.len() >= 3, "{} packets", want.len());
    assert_eq!(got, want);
    assert!(
        batch[..prefix].iter().all(|&b| b == 0xEE),
        "the prefix is left alone"
    );
    assert_eq!(batch.len(), 20_000, "the buffer is not shrunk");
}
