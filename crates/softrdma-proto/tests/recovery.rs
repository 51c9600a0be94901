//! Loss recovery in round trips: every kind of loss a network inflicts on RC is repaired in a
//! few round trips, never by the local ACK timeout (67 ms at ibv_rc_pingpong's 14), and a
//! vanished peer still ends in RETRY_EXC_ERR. The link delay is 5 us, a round trip 10 us.

mod common;
use common::*;
use proptest::prelude::*;
use proptest::test_runner::RngSeed;
use softrdma_proto::sim::{ConnectOpts, LinkFaults, Verdict};
use softrdma_proto::workload::{OpMix, WorkloadConfig, lossless, run_workload};
use softrdma_proto::*;
use softrdma_wire::{Opcode, Operation};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const MTU: u32 = 1024;

fn opts() -> ConnectOpts {
    ConnectOpts {
        timeout: 14,
        ..ConnectOpts::default()
    }
}

fn write(p: &mut Pair, id: u64, off: u64, len: u32) {
    p.write_same_offset(id, off, len);
}

/// A pair that has already exchanged one WRITE, so that A has a round-trip sample (as any
/// QP has after its first message).
fn warm(faults: LinkFaults) -> Pair {
    let mut p = pair(opts(), faults);
    write(&mut p, 100, 0, 8);
    p.run();
    assert_eq!(p.completions(A)[0].status, WcStatus::Success);
    p
}

/// Runs the pair to the end and returns how long that took, in microseconds.
fn run_us(p: &mut Pair) -> u64 {
    let t0 = p.sim.now;
    p.run();
    p.sim.now.since(t0).as_micros() as u64
}

/// Drops the packets from `from` for which `pick` (given the packet's index among that
/// endpoint's packets from now on, and the packet) says so.
fn drop_where(
    p: &mut Pair,
    from: usize,
    mut pick: impl FnMut(u64, &softrdma_wire::IbPacket<&[u8]>) -> bool + Send + 'static,
) {
    let mut n = 0;
    p.script_when(Verdict::Drop, move |m| {
        if m.from != from {
            return false;
        }
        n += 1;
        pick(n - 1, m.packet)
    });
}

/// A pair whose requester gives up after `retry_cnt` retries of 1 ms timeouts, once its
/// first WRITE (ID 100) has gone through.
fn short_retries(retry_cnt: u8) -> Pair {
    let mut p = pair(
        ConnectOpts {
            retry_cnt,
            timeout: 8,
            ..ConnectOpts::default()
        },
        LinkFaults::default(),
    );
    write(&mut p, 100, 0, 8);
    p.run();
    p
}

fn check_write(p: &mut Pair, off: u64, len: usize) {
    assert_eq!(
        p.completions(A)
            .iter()
            .map(|w| w.status)
            .collect::<Vec<_>>(),
        [WcStatus::Success]
    );
    assert_eq!(p.read_b(off as usize, len), p.read_a(off as usize, len));
}

#[test]
fn tail_loss_is_probed_within_round_trips() {
    let mut p = warm(LinkFaults::default());
    p.fill_a(0x1000, &pattern(1, 4 * MTU as usize));
    // The last packet of the WRITE is lost: nothing follows it to cause a NAK.
    drop_where(&mut p, A, |i, _| i == 3);
    write(&mut p, 1, 0x1000, 4 * MTU);
    let us = run_us(&mut p);
    check_write(&mut p, 0x1000, 4 * MTU as usize);
    let c = p.qa().counters();
    assert_eq!((c.timeouts, c.probes), (0, 1), "{c:?}");
    assert!(us < 100, "{us} us: a probe, not the 67 ms timeout");
}

/// A new QP whose first window lost a packet has its round-trip estimate from the answer to
/// the resend (the window's own ACK-asking packets are answered only after the gap), so a
/// later tail loss is probed within round trips, not after a quarter of the ACK timeout.
#[test]
fn a_first_window_with_a_loss_still_times_the_probes() {
    let mut p = pair(opts(), LinkFaults::default());
    p.fill_a(0x1000, &pattern(7, 16 * MTU as usize));
    // The second packet of the first WRITE, and the only packet of the second, once each.
    drop_where(&mut p, A, |i, _| i == 1 || i == 17);
    write(&mut p, 1, 0x1000, 16 * MTU);
    p.run();
    check_write(&mut p, 0x1000, 16 * MTU as usize);
    write(&mut p, 2, 0x1000, 8);
    let us = run_us(&mut p);
    check_write(&mut p, 0x1000, 8);
    let c = p.qa().counters();
    assert_eq!((c.timeouts, c.probes), (0, 1), "{c:?}");
    assert!(us < 200, "{us} us: a probe timed by round trips, not 17 ms");
}

#[test]
fn a_lost_nak_is_probed() {
    let mut p = warm(LinkFaults::default());
    p.fill_a(0x1000, &pattern(2, 8 * MTU as usize));
    // A's third packet is lost, and so is B's NAK for it.
    let mut naks = 0;
    let mut n_a = 0;
    p.script_when(Verdict::Drop, move |m| {
        if m.from == A {
            n_a += 1;
            return n_a == 3;
        }
        let nak = m.packet.aeth().is_some_and(|a| !a.syndrome().is_ack());
        if nak {
            naks += 1;
        }
        nak && naks == 1
    });
    write(&mut p, 1, 0x1000, 8 * MTU);
    let us = run_us(&mut p);
    check_write(&mut p, 0x1000, 8 * MTU as usize);
    let a = p.qa().counters();
    let b = p.qb().counters();
    assert_eq!(a.timeouts, 0, "{a:?}");
    assert!(a.probes >= 1, "{a:?}");
    assert_eq!(b.seq_naks_sent, 1, "one NAK per gap: {b:?}");
    assert!(us < 150, "{us} us");
}

#[test]
fn a_lost_last_ack_is_probed() {
    let mut p = warm(LinkFaults::default());
    p.fill_a(0x1000, &pattern(3, 100));
    drop_where(&mut p, B, |i, _| i == 0);
    write(&mut p, 1, 0x1000, 100);
    let us = run_us(&mut p);
    check_write(&mut p, 0x1000, 100);
    let a = p.qa().counters();
    let b = p.qb().counters();
    assert_eq!((a.timeouts, a.probes, a.retransmits), (0, 1, 1), "{a:?}");
    assert_eq!(b.duplicate_requests, 1, "the probe is a duplicate: {b:?}");
    assert!(us < 100, "{us} us");
}

#[test]
fn a_lost_middle_read_response_is_asked_for_again_at_once() {
    let mut p = warm(LinkFaults::default());
    let data = pattern(4, 8 * MTU as usize);
    p.fill_b(0x2000, &data);
    let (ka, kb) = (p.key_a, p.key_b);
    p.qa()
        .post_send(wr(
            1,
            SendOp::Read {
                remote_addr: BUF + 0x2000,
                rkey: kb,
            },
            sge(BUF + 0x2000, 8 * MTU, ka),
        ))
        .unwrap();
    // The READ's third response is lost, once.
    let mut middles = 0;
    p.script_when(Verdict::Drop, move |m| {
        let middle = m.from == B && m.packet.bth().opcode() == Opcode::RC_RDMA_READ_RESPONSE_MIDDLE;
        if middle {
            middles += 1;
        }
        middle && middles == 2
    });
    let us = run_us(&mut p);
    assert_eq!(p.completions(A)[0].status, WcStatus::Success);
    assert_eq!(p.read_a(0x2000, data.len()), data);
    let a = p.qa().counters();
    assert_eq!(
        (a.timeouts, a.probes),
        (0, 0),
        "the next response told: {a:?}"
    );
    assert_eq!(a.retransmits, 1, "the READ, re-issued once: {a:?}");
    assert!(us < 60, "{us} us");
}

#[test]
fn a_lost_atomic_ack_is_answered_from_the_saved_result() {
    let mut p = warm(LinkFaults::default());
    p.fill_b(0x3000, &7u64.to_ne_bytes());
    let (ka, kb) = (p.key_a, p.key_b);
    p.qa()
        .post_send(wr(
            1,
            SendOp::FetchAdd {
                remote_addr: BUF + 0x3000,
                rkey: kb,
                add: 5,
            },
            sge(BUF + 0x3000, 8, ka),
        ))
        .unwrap();
    // Let the first atomic ACK go missing, then let everything pass.
    p.script_once(Verdict::Drop, |m| {
        m.from == B && m.packet.info().operation == Operation::AtomicAcknowledge
    });
    let us = run_us(&mut p);
    assert_eq!(p.completions(A)[0].status, WcStatus::Success);
    assert_eq!(
        p.read_a(0x3000, 8),
        7u64.to_ne_bytes(),
        "the original value"
    );
    assert_eq!(p.read_b(0x3000, 8), 12u64.to_ne_bytes(), "added once");
    let a = p.qa().counters();
    assert_eq!((a.timeouts, a.probes), (0, 1), "{a:?}");
    assert!(us < 100, "{us} us");
}

#[test]
fn a_reordered_window_costs_no_round_trip_and_no_storm() {
    let mut p = warm(LinkFaults::default());
    let len = 64 * MTU;
    p.fill_a(0x1000, &pattern(5, len as usize));
    // Two packets of the window arrive 20 us late, after everything sent behind them.
    let mut n = 0;
    p.sim.set_script(Box::new(move |m| {
        if m.from == A {
            n += 1;
            if n == 4 || n == 20 {
                return Verdict::Delay(Duration::from_micros(20));
            }
        }
        Verdict::Pass
    }));
    write(&mut p, 1, 0x1000, len);
    let us = run_us(&mut p);
    check_write(&mut p, 0x1000, len as usize);
    let a = p.qa().counters();
    let b = p.qb().counters();
    assert_eq!(a.timeouts, 0, "{a:?}");
    // One NAK per gap, each answered by at most one pass over the window.
    assert!(b.seq_naks_sent <= 2, "{b:?}");
    assert!(a.retransmits <= 2 * 64, "no storm: {a:?}");
    assert!(us < 60, "{us} us");
    // The window did not collapse: the next 64 packets go as fast as without reordering.
    let mut q = warm(LinkFaults::default());
    q.fill_a(0x1000, &pattern(5, len as usize));
    write(&mut q, 1, 0x1000, len);
    let clean = run_us(&mut q);
    p.sim.set_script(Box::new(|_| Verdict::Pass));
    write(&mut p, 2, 0x1000, len);
    let after = run_us(&mut p);
    assert!(after <= clean + 2, "{after} us after, {clean} us clean");
}

#[test]
fn a_window_smaller_than_the_ack_interval_never_stalls() {
    // ACK timeout 4 ms: a stall would show as a timeout.
    let mut p = pair(
        ConnectOpts {
            timeout: 10,
            ..ConnectOpts::default()
        },
        LinkFaults::default(),
    );
    // Everything A sends is lost until three timeouts have halved the window, and the
    // resend after the third is lost too: the fourth timeout halves it to 8, below the 64
    // packets of the AckReq interval, and its resend is the first to pass.
    let lost = Arc::new(Mutex::new(true));
    let l = lost.clone();
    p.script_when(Verdict::Drop, move |m| m.from == A && *l.lock().unwrap());
    let len = 100 * MTU;
    p.fill_a(0, &pattern(6, len as usize));
    write(&mut p, 1, 0, len);
    p.sim
        .run_until(|s| s.qp(A, QA).counters().timeouts >= 3)
        .unwrap();
    *lost.lock().unwrap() = false;
    p.sim
        .run_until(|s| s.qp(A, QA).counters().timeouts >= 4)
        .unwrap();
    let probes = p.qa().counters().probes;
    p.run();
    check_write(&mut p, 0, len as usize);
    let a = p.qa().counters();
    assert_eq!(a.timeouts, 4, "no timeout once packets pass: {a:?}");
    // Each full window asked for its ACK: nothing waited for a probe either.
    assert_eq!(a.probes, probes, "{probes} probes before, then {a:?}");
}

#[test]
fn a_vanished_peer_still_ends_after_retry_cnt_timeouts() {
    let mut p = short_retries(3);
    // Now B is gone.
    p.script_when(Verdict::Drop, |m| m.from == B);
    write(&mut p, 2, 0, 3000);
    write(&mut p, 3, 0, 8);
    p.run();
    let st: Vec<_> = p.completions(A).iter().map(|w| w.status).collect();
    assert_eq!(
        st,
        [
            WcStatus::Success,
            WcStatus::RetryExcErr,
            WcStatus::WrFlushErr
        ]
    );
    let a = p.qa().counters();
    assert_eq!(a.timeouts, 4, "the first timeout and three retries: {a:?}");
    assert!(a.probes > 0, "probes went out and did not count: {a:?}");
}

/// B receives A's WRITE, its ACK is lost, and B's QP is destroyed before A's probe comes
/// (the server of `ibv_rc_pingpong` exits as soon as it is done). B's farewell ACK completes
/// A's WRITE; without it A ends in RETRY_EXC_ERR.
#[test]
fn a_farewell_ack_completes_a_peer_whose_last_ack_was_lost() {
    for farewell in [false, true] {
        let mut p = short_retries(2);
        p.completions(A);
        // From now on B answers nothing but its farewell, and hears nothing after the WRITE.
        let (mut from_a, mut from_b) = (0, 0);
        p.script_when(Verdict::Drop, move |m| {
            let n = if m.from == A {
                &mut from_a
            } else {
                &mut from_b
            };
            *n += 1;
            *n == 1 && m.from == B || *n > 1 && m.from == A
        });
        let before = p.qb().counters().rcvd_packets;
        write(&mut p, 1, 0, 8);
        let got = p
            .sim
            .run_until(|s| s.qp(B, QB).counters().rcvd_packets > before)
            .unwrap();
        assert!(got);
        if farewell {
            p.qb().farewell_ack();
            p.sim.flush();
        }
        p.run();
        let st: Vec<_> = p.completions(A).iter().map(|w| w.status).collect();
        let want = if farewell {
            WcStatus::Success
        } else {
            WcStatus::RetryExcErr
        };
        assert_eq!(st, [want], "farewell: {farewell}");
    }
}

#[test]
fn uc_loses_one_message_and_goes_on() {
    let mut p = pair(
        ConnectOpts {
            qp_type: QpType::Uc,
            ..ConnectOpts::default()
        },
        LinkFaults::default(),
    );
    p.fill_a(0, &pattern(7, 8 * MTU as usize));
    drop_where(&mut p, A, |i, _| i == 2);
    write(&mut p, 1, 0, 4 * MTU);
    write(&mut p, 2, 4 * MTU as u64, 4 * MTU);
    p.run();
    let st: Vec<_> = p.completions(A).iter().map(|w| w.status).collect();
    assert_eq!(st, [WcStatus::Success, WcStatus::Success]);
    assert_eq!(
        p.read_b(0, 4 * MTU as usize),
        vec![0; 4 * MTU as usize],
        "dropped whole"
    );
    let second = (4 * MTU) as usize..(8 * MTU) as usize;
    assert_eq!(
        p.read_b(second.start, second.len()),
        p.read_a(second.start, second.len())
    );
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 12,
        rng_seed: RngSeed::Fixed(0x1055_0001),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Any mix of loss up to 5 %, reordering up to 5 % and duplication up to 1 % costs at
    /// most 10 times the same work without faults, and never a local ACK timeout.
    #[test]
    fn faults_cost_round_trips_not_timeouts(
        seed in any::<u64>(),
        loss in 0.0f64..0.05,
        reorder in 0.0f64..0.05,
        dup in 0.0f64..0.01,
        mix in prop_oneof![Just(OpMix::Mixed), Just(OpMix::Send), Just(OpMix::Read), Just(OpMix::Write)],
        size in 1u32..40_000,
    ) {
        let cfg = WorkloadConfig {
            ops: 60,
            qps: 1,
            mix,
            min_size: size / 2,
            max_size: size,
            seed,
            timeout: 14,
            faults: LinkFaults { loss, reorder, dup, ..Default::default() },
            max_steps: 5_000_000,
            ..Default::default()
        };
        let r = run_workload(&cfg).expect("bounded");
        prop_assert!(r.guarantees_met, "{:?}\n{:#?}", cfg, r);
        prop_assert_eq!(r.counters.timeouts, 0, "{:?}", r.counters);
        let base = run_workload(&lossless(&cfg)).expect("bounded");
        let slowdown = r.sim_time_ns as f64 / base.sim_time_ns as f64;
        prop_assert!(slowdown <= 10.0, "{:.1}x: {:?}\n{:?}", slowdown, cfg, r.counters);
    }
}

/// The goals, in the simulator: 200 WRITEs, SENDs, READs or a mix of 100,000 bytes
/// over one QP at MTU 1024 and timeout 14, against the same work without faults.
#[test]
fn the_loss_goals_hold_in_the_simulator() {
    for mix in [OpMix::Write, OpMix::Send, OpMix::Read, OpMix::Mixed] {
        for (faults, bound) in [
            (
                LinkFaults {
                    loss: 0.01,
                    ..Default::default()
                },
                3.0,
            ),
            (
                LinkFaults {
                    loss: 0.05,
                    ..Default::default()
                },
                10.0,
            ),
            (
                LinkFaults {
                    reorder: 0.05,
                    ..Default::default()
                },
                3.0,
            ),
        ] {
            let cfg = WorkloadConfig {
                mix,
                ops: 200,
                qps: 1,
                min_size: 100_000,
                max_size: 100_000,
                timeout: 14,
                faults: LinkFaults {
                    jitter: Duration::from_micros(1),
                    ..faults
                },
                max_steps: 20_000_000,
                ..Default::default()
            };
            let r = run_workload(&cfg).expect("bounded");
            assert!(r.guarantees_met, "{mix:?} {faults:?}: {:?}", r.problems);
            let base = run_workload(&lossless(&cfg)).expect("bounded");
            let slowdown = r.sim_time_ns as f64 / base.sim_time_ns as f64;
            assert!(slowdown <= bound, "{mix:?} {faults:?}: {slowdown:.2}x");
            assert_eq!(r.counters.timeouts, 0, "{mix:?} {faults:?}");
        }
    }
}

/// Idle QPs cost the timers nothing: with 10,000 connected, idle QPs beside a pair that
/// repairs losses, the timer queue only ever holds the busy pair's entries, and the run
/// takes as many steps and timer expiries as without them.
#[test]
fn ten_thousand_idle_qps_cost_the_timers_nothing() {
    let lossy = LinkFaults {
        loss: 0.05,
        ..Default::default()
    };
    let run = |idle: u32| {
        let mut p = pair(opts(), lossy);
        for i in 0..idle / 2 {
            p.sim.connect(A, 0x1000 + i, B, 0x10_0000 + i, opts());
        }
        write(&mut p, 1, 0, 64 * MTU);
        let mut most = 0;
        p.sim
            .run_until(|s| {
                let held = s.endpoints.iter().map(|h| h.ep.timers.len()).sum::<usize>();
                most = most.max(held);
                false
            })
            .expect("the run ends within its step budget");
        check_write(&mut p, 0, 64 * MTU as usize);
        (p.sim.stats.steps, p.sim.stats.timers, most)
    };
    let (steps, timers, most) = run(0);
    let (steps_idle, timers_idle, most_idle) = run(10_000);
    assert!(most_idle <= 4, "the timer queue held {most_idle} entries");
    assert_eq!((steps_idle, timers_idle, most_idle), (steps, timers, most));
}
