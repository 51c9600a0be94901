//! `softrdma perf` client against `softrdma perf` server, two processes on loopback, for every
//! test and every transport its flags allow; `--json` is checked for shape and sanity.

mod common;

use common::{retry_connect, spawn, text, wait_for};
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Child, Command, Output};
use std::time::Duration;

fn cmd(tag: &str, addr: &str) -> Command {
    let conf =
        std::env::temp_dir().join(format!("softrdma-perf-{tag}-{}.conf", std::process::id()));
    std::fs::write(&conf, format!("perf{tag} addr {addr}\n")).unwrap();
    let mut c = common::softrdma();
    c.env("SOFTRDMA_CONFIG", conf).env_remove("SOFTRDMA_ADDR");
    c
}

/// Waits for `child`, killing it after 90 s.
fn wait(child: Child) -> Output {
    wait_for(child, "softrdma perf", Duration::from_secs(90))
}

/// Runs `softrdma perf <args>` as a server on 127.0.79.`n` and a client on 127.0.79.`n+1`,
/// with TCP port 22000 + `n`.
fn perf(n: u8, args: &[&str]) -> (Output, Output) {
    let port = (22000 + u16::from(n)).to_string();
    let mut all: Vec<&str> = vec!["perf"];
    all.extend(args);
    all.extend(["-p", &port, "--json"]);
    let server = spawn(cmd(&format!("s{n}"), &format!("127.0.79.{n}")).args(&all));
    let client = retry_connect(
        || {
            wait(spawn(
                cmd(&format!("c{n}"), &format!("127.0.79.{}", n + 1))
                    .args(&all)
                    .arg("127.0.0.1"),
            ))
        },
        Duration::from_secs(30),
    );
    (wait(server), client)
}

/// The JSON line, checked for shape and sanity.
fn results(o: &Output, test: &str) -> Vec<Value> {
    let s = String::from_utf8_lossy(&o.stdout);
    let line = s.lines().last().unwrap_or_default();
    let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {s}"));
    assert_eq!(v["test"], test, "{s}");
    let r = v["results"].as_array().expect("results").clone();
    for x in &r {
        assert!(x["bytes"].as_u64().unwrap() > 0, "{x}");
        assert!(x["iterations"].as_u64().unwrap() > 0, "{x}");
        if test.ends_with("-bw") {
            let avg = x["bw_avg_bytes_per_sec"].as_f64().unwrap();
            let peak = x["bw_peak_bytes_per_sec"].as_f64().unwrap();
            assert!(avg > 0.0 && peak >= avg, "{x}");
            assert!(x["msg_rate_per_sec"].as_f64().unwrap() > 0.0, "{x}");
        } else {
            let f = |k: &str| x[k].as_f64().unwrap_or_else(|| panic!("{k} in {x}"));
            assert!(f("t_min_us") > 0.0, "{x}");
            assert!(f("t_min_us") <= f("t_typical_us"), "{x}");
            assert!(f("t_typical_us") <= f("t_max_us"), "{x}");
            assert!(
                f("t_min_us") <= f("t_avg_us") && f("t_avg_us") <= f("t_max_us"),
                "{x}"
            );
            assert!(
                f("p99_us") <= f("p999_us") && f("p999_us") <= f("t_max_us"),
                "{x}"
            );
            assert!(f("t_stdev_us") >= 0.0, "{x}");
        }
    }
    r
}

/// Both sides of a test spin on their CQs: two pairs at once on a 2-core machine would measure
/// the scheduler, so the pairs take turns.
static ONE_PAIR: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs one test both ways and checks both sides; returns the client's results.
fn check(n: u8, test: &str, args: &[&str]) -> Vec<Value> {
    let _turn = ONE_PAIR.lock().unwrap_or_else(|e| e.into_inner());
    let mut all = vec![test];
    all.extend(args);
    let (srv, cli) = perf(n, &all);
    let ctx = format!(
        "{all:?}\n-- server:\n{}\n-- client:\n{}",
        text(&srv),
        text(&cli)
    );
    assert!(srv.status.success() && cli.status.success(), "{ctx}");
    let out = String::from_utf8_lossy(&cli.stdout);
    assert!(out.contains(" local address: LID 0000 QPN 0x"), "{ctx}");
    assert!(out.contains(" remote address: LID 0000 QPN 0x"), "{ctx}");
    assert!(
        out.contains(" GID: 00:00:00:00:00:00:00:00:00:00:255:255:127:00:79:"),
        "{ctx}"
    );
    let c = results(&cli, test);
    assert!(!c.is_empty(), "{ctx}");
    let s = results(&srv, test);
    match test {
        // The server of a one-sided BW test prints the client's report of the last size.
        // (Its figures travel in perftest's units, MB/s and Mpps: equal up to rounding.)
        "write-bw" | "read-bw" | "atomic-bw" => {
            assert_eq!(s.len(), 1, "{ctx}");
            let (s, c) = (&s[0], &c[c.len() - 1]);
            assert_eq!(s["bytes"], c["bytes"], "{ctx}");
            assert_eq!(s["iterations"], c["iterations"], "{ctx}");
            for k in [
                "bw_peak_bytes_per_sec",
                "bw_avg_bytes_per_sec",
                "msg_rate_per_sec",
            ] {
                let (x, y) = (s[k].as_f64().unwrap(), c[k].as_f64().unwrap());
                assert!((x - y).abs() <= y * 1e-9, "{k}: {x} vs {y}\n{ctx}");
            }
        }
        // Only the client measures READ and atomic latency.
        "read-lat" | "atomic-lat" => assert!(s.is_empty(), "{ctx}"),
        _ => assert_eq!(s.len(), c.len(), "{ctx}"),
    }
    c
}

#[test]
fn bandwidth_tests_over_every_transport() {
    let r = check(10, "write-bw", &["-n", "300", "-s", "65536"]);
    assert_eq!(r[0]["bytes"], 65536);
    assert_eq!(r[0]["iterations"], 300);
    check(
        12,
        "write-bw",
        &["-n", "300", "-s", "5000", "-c", "UC", "-t", "16", "-Q", "4"],
    );
    check(14, "read-bw", &["-n", "300", "-s", "10000"]);
    let r = check(16, "atomic-bw", &["-n", "300"]);
    assert_eq!(r[0]["bytes"], 8);
    check(18, "atomic-bw", &["-n", "300", "-A", "CMP_AND_SWAP"]);
    let r = check(20, "send-bw", &["-n", "300", "-s", "3000"]);
    assert_eq!(r[0]["iterations"], 300);
    check(22, "send-bw", &["-n", "300", "-s", "3000", "-c", "UC"]);
    // Several QPs: iterations are per QP, as perftest counts them.
    for (n, test, conn) in [
        (26, "write-bw", "RC"),
        (28, "read-bw", "RC"),
        (30, "send-bw", "UC"),
        (32, "atomic-bw", "RC"),
    ] {
        let r = check(n, test, &["-n", "200", "-s", "2048", "-q", "3", "-c", conn]);
        assert_eq!(r[0]["iterations"], 200, "{test}");
    }
    // Bidirectional: both sides send and print the sum of both reports.
    for (n, test, conn) in [
        (34, "write-bw", "RC"),
        (36, "read-bw", "RC"),
        (38, "atomic-bw", "RC"),
        (74, "send-bw", "RC"),
        (76, "send-bw", "UC"),
    ] {
        let r = check(n, test, &["-n", "300", "-s", "4096", "-b", "-c", conn]);
        assert_eq!(r[0]["iterations"], 300, "{test}");
    }
    // UD without -s: one MTU.
    let r = check(24, "send-bw", &["-n", "300", "-c", "UD", "-t", "32"]);
    assert_eq!(r[0]["bytes"], 4096);
}

#[test]
fn latency_tests_over_every_transport() {
    for (n, test, extra) in [
        (40, "write-lat", vec![]),
        (42, "write-lat", vec!["-c", "UC", "-s", "300"]),
        (44, "read-lat", vec!["-s", "64"]),
        (46, "atomic-lat", vec![]),
        (48, "atomic-lat", vec!["-A", "CMP_AND_SWAP"]),
        (50, "send-lat", vec![]),
        (52, "send-lat", vec!["-c", "UC", "-s", "5000"]),
        (54, "send-lat", vec!["-c", "UD", "-s", "1024"]),
    ] {
        let mut args = vec!["-n", "200"];
        args.extend(extra);
        let r = check(n, test, &args);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0]["iterations"], 200);
    }
}

#[test]
fn all_sizes_timed_runs_and_plots() {
    let svg: PathBuf =
        std::env::temp_dir().join(format!("softrdma-perf-{}.svg", std::process::id()));
    let svg_s = svg.to_string_lossy().into_owned();
    let r = check(60, "write-bw", &["-a", "-n", "8", "--plot", &svg_s]);
    let sizes: Vec<u64> = r.iter().map(|x| x["bytes"].as_u64().unwrap()).collect();
    assert_eq!(sizes, (1..=23).map(|i| 1u64 << i).collect::<Vec<_>>());
    let plot = std::fs::read_to_string(&svg).expect("the client drew the plot");
    assert!(
        plot.starts_with("<svg") && plot.contains("<polyline"),
        "{plot}"
    );
    let r = check(62, "send-lat", &["-a", "-n", "5"]);
    assert_eq!(r.len(), 23);
    // Timed runs: -n (5) must not be what counts.
    let r = check(64, "read-lat", &["-D", "1", "-n", "5"]);
    assert!(r[0]["iterations"].as_u64().unwrap() > 10);
    let r = check(66, "read-bw", &["-D", "1", "-s", "4096", "-n", "5"]);
    assert!(r[0]["iterations"].as_u64().unwrap() > 10);
    for (n, test) in [(68, "write-lat"), (70, "send-lat"), (72, "send-bw")] {
        let r = check(n, test, &["-D", "1", "-s", "64", "-n", "5"]);
        assert!(r[0]["iterations"].as_u64().unwrap() > 10, "{test}");
    }
}

#[test]
fn misuse_is_refused_by_name() {
    for (args, want) in [
        (vec!["read-bw", "-c", "UC"], "read-bw does not run over UC"),
        (
            vec!["atomic-lat", "-c", "UD"],
            "atomic-lat does not run over UD",
        ),
        (vec!["write-lat", "-q", "2"], "bandwidth tests only"),
        (vec!["write-bw", "-q", "0"], "-q 0 is out of range"),
        (vec!["send-lat", "-b"], "-b is for the bandwidth tests"),
        (vec!["send-lat", "-D", "0"], "-D must be at least 1 second"),
        (vec!["write-bw", "-n", "0"], "-n must be at least 1"),
        (vec!["write-bw", "-i", "2"], "port 2 does not exist"),
    ] {
        let mut all = vec!["perf"];
        all.extend(&args);
        let o = wait(spawn(cmd("misuse", "127.0.79.90").args(&all)));
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && e.contains(want), "{args:?}: {e}");
    }
}
