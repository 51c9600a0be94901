//! `softrdma sim` as a user runs it.

use serde_json::Value;
use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_softrdma"));
    cmd.arg("sim").args(args);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(cmd.output()));
    rx.recv_timeout(std::time::Duration::from_secs(120))
        .expect("softrdma sim ends within 120 s")
        .expect("softrdma runs")
}

fn json(args: &[&str]) -> (Option<i32>, Value) {
    let mut a = vec!["--json"];
    a.extend_from_slice(args);
    let o = run(&a);
    let line = String::from_utf8(o.stdout).unwrap();
    let v: Value = serde_json::from_str(line.trim())
        .unwrap_or_else(|e| panic!("{e}: {line:?} {}", String::from_utf8_lossy(&o.stderr)));
    (o.status.code(), v)
}

#[test]
fn rc_under_faults_is_exactly_once_and_verified() {
    let (code, v) = json(&[
        "--ops",
        "300",
        "--loss",
        "0.1",
        "--dup",
        "0.05",
        "--reorder",
        "0.05",
        "--corrupt",
        "0.01",
        "--seed",
        "42",
    ]);
    assert_eq!(code, Some(0), "{v}");
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "posted",
            "ok",
            "errors",
            "data_verified",
            "packets_sent",
            "retransmits",
            "timeouts",
            "probes",
            "seq_naks",
            "sim_time_us",
            "goodput_bytes_per_s",
            "lossless_us",
            "slowdown",
            "queue_drops",
            "link_utilization"
        ]
    );
    assert_eq!(v["posted"], 300);
    assert_eq!(v["ok"], 300);
    assert_eq!(v["errors"], serde_json::json!({}));
    assert_eq!(v["data_verified"], true);
    assert!(v["retransmits"].as_u64().unwrap() > 0);
    assert!(v["seq_naks"].as_u64().unwrap() > 0);
    assert!(v["slowdown"].as_f64().unwrap() > 1.0, "{v}");
    assert!(v["goodput_bytes_per_s"].as_f64().unwrap() > 0.0);
    assert_eq!(v["link_utilization"], serde_json::Value::Null);
}

/// The congestion goal: 16 RC QPs write 1 MiB messages through one 25 Gb/s link
/// with a 256-packet queue; every op completes and goodput is at least 80 % of the link.
#[test]
fn sixteen_qps_share_a_congested_link() {
    let (code, v) = json(&[
        "--op",
        "write",
        "--ops",
        "32",
        "--qps",
        "16",
        "--size",
        "1048576",
        "--timeout",
        "14",
        "--link-gbps",
        "25",
        "--queue-pkts",
        "256",
    ]);
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["ok"], 32);
    assert!(
        v["queue_drops"].as_u64().unwrap() > 0,
        "the queue overflowed: {v}"
    );
    let u = v["link_utilization"].as_f64().unwrap();
    assert!(u >= 0.8, "goodput {u} of the link: {v}");
}

#[test]
fn same_seed_same_run() {
    let a = json(&["--ops", "100", "--loss", "0.2", "--seed", "9"]);
    let b = json(&["--ops", "100", "--loss", "0.2", "--seed", "9"]);
    assert_eq!(a, b);
    let c = json(&["--ops", "100", "--loss", "0.2", "--seed", "10"]);
    assert_ne!(a.1["packets_sent"], c.1["packets_sent"]);
}

#[test]
fn partition_fails_with_retry_exc_err_then_flushes() {
    let (code, v) = json(&["--ops", "200", "--partition-at-us", "30"]);
    assert_eq!(code, Some(0), "{v}");
    let errors = v["errors"].as_object().unwrap();
    assert!(errors["RETRY_EXC_ERR"].as_u64().unwrap() >= 1);
    let failed: u64 = errors.values().map(|n| n.as_u64().unwrap()).sum();
    assert!(v["ok"].as_u64().unwrap() + failed >= 200);
}

#[test]
fn uc_and_ud_runs_check_whole_messages() {
    for t in ["uc", "ud"] {
        let (code, v) = json(&[
            "--transport",
            t,
            "--ops",
            "200",
            "--loss",
            "0.1",
            "--size",
            "1:1024",
        ]);
        assert_eq!(code, Some(0), "{t}: {v}");
        assert_eq!(v["data_verified"], true);
    }
}

#[test]
fn bad_flags_are_refused() {
    for args in [
        &["--transport", "ud", "--op", "write"][..],
        &["--transport", "uc", "--op", "atomic"],
        &["--mtu", "1000"],
        &["--loss", "1.5"],
        &["--size", "9:3"],
    ] {
        let o = run(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(!o.stderr.is_empty());
    }
}
