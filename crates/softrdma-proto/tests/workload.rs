//! Random operation mixes under random faults, checked against the model.

use proptest::prelude::*;
use softrdma_proto::sim::LinkFaults;
use softrdma_proto::workload::{OpMix, WorkloadConfig, run_workload};
use softrdma_proto::{Instant, Mtu, QpType};
use std::time::Duration;

fn run(cfg: WorkloadConfig) -> softrdma_proto::workload::WorkloadReport {
    let r = run_workload(&cfg).expect("the run ends within its step budget");
    assert!(r.guarantees_met, "{cfg:?}\n{r:#?}");
    r
}

#[test]
fn rc_mixed_without_faults() {
    let r = run(WorkloadConfig {
        ops: 400,
        ..Default::default()
    });
    assert_eq!((r.posted, r.ok, r.retransmits), (400, 400, 0));
    assert!(r.data_verified);
    // One side lends its payloads of a KiB and more, the other copies them.
    assert!(r.sim.lent > 0, "{:?}", r.sim);
    assert_eq!(r.sim.lent_gone, 0);
}

#[test]
fn lent_payloads_of_every_length_arrive_whole() {
    // Lengths of a KiB and more, most not a multiple of 4: lent payloads with pad bytes,
    // whose ICRC the sender computes over the region in place. A wrong one would be dropped
    // by the receiver and retransmitted.
    let r = run(WorkloadConfig {
        ops: 300,
        min_size: 1024,
        max_size: 9000,
        mtu: Mtu::M4096,
        seed: 11,
        retry_cnt: 1,
        // A correct run takes a few thousand steps; a broken ICRC ends in retries within
        // this budget instead of running on.
        max_steps: 200_000,
        ..Default::default()
    });
    assert_eq!((r.ok, r.retransmits, r.sim.icrc_drops), (300, 0, 0));
    assert!(r.sim.lent > 100, "{:?}", r.sim);
    assert!(r.data_verified);
}

#[test]
fn rc_mixed_under_heavy_faults() {
    let r = run(WorkloadConfig {
        ops: 300,
        faults: LinkFaults {
            loss: 0.2,
            dup: 0.1,
            reorder: 0.1,
            corrupt: 0.05,
            jitter: Duration::from_micros(3),
            ..Default::default()
        },
        seed: 7,
        ..Default::default()
    });
    assert_eq!(r.ok, 300);
    assert!(r.retransmits > 0);
    assert!(r.sim.icrc_drops > 0, "corruption is caught by the ICRC");
}

#[test]
fn uc_and_ud_deliver_whole_messages_only() {
    for transport in [QpType::Uc, QpType::Ud] {
        let r = run(WorkloadConfig {
            transport,
            ops: 300,
            faults: LinkFaults {
                loss: 0.1,
                dup: 0.05,
                reorder: 0.1,
                corrupt: 0.02,
                ..Default::default()
            },
            ..Default::default()
        });
        assert_eq!(
            r.ok, 300,
            "{transport:?}: every send completes on the requester"
        );
    }
}

#[test]
fn rc_partition_completes_every_wr() {
    let r = run(WorkloadConfig {
        ops: 200,
        retry_cnt: 3,
        faults: LinkFaults {
            partition_at: Some(Instant::from_nanos(10_000)),
            ..Default::default()
        },
        ..Default::default()
    });
    assert!(
        r.errors.get("RETRY_EXC_ERR").copied().unwrap_or(0) >= 1,
        "{r:?}"
    );
    assert!(r.ok < 200);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn rc_is_exactly_once_under_any_faults(
        seed in any::<u64>(),
        loss in 0.0f64..0.5,
        dup in 0.0f64..0.2,
        reorder in 0.0f64..0.3,
        corrupt in 0.0f64..0.1,
        mtu in prop_oneof![Just(Mtu::M256), Just(Mtu::M1024), Just(Mtu::M4096)],
        mix in prop_oneof![Just(OpMix::Mixed), Just(OpMix::Send), Just(OpMix::Read), Just(OpMix::Write), Just(OpMix::Atomic)],
        max_size in 1u32..9000,
    ) {
        let cfg = WorkloadConfig {
            ops: 60,
            qps: 2,
            mtu,
            mix,
            max_size,
            seed,
            faults: LinkFaults { loss, dup, reorder, corrupt, ..Default::default() },
            ..Default::default()
        };
        let r = run_workload(&cfg).expect("bounded");
        prop_assert!(r.guarantees_met, "{:?}\n{:#?}", cfg, r);
        prop_assert_eq!(r.ok, 60);
    }

    #[test]
    fn partition_ends_every_run(seed in any::<u64>(), at_us in 0u64..40, loss in 0.0f64..0.3) {
        let cfg = WorkloadConfig {
            ops: 60,
            retry_cnt: 2,
            seed,
            faults: LinkFaults {
                loss,
                partition_at: Some(Instant::from_nanos(at_us * 1000)),
                ..Default::default()
            },
            ..Default::default()
        };
        let r = run_workload(&cfg).expect("bounded");
        prop_assert!(r.guarantees_met, "{:?}\n{:#?}", cfg, r);
        prop_assert_eq!(r.posted, 60);
    }
}
