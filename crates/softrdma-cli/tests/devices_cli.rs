//! `softrdma devinfo`, `link` and the rdma-core-compatible pingpongs, as processes.

mod common;

use common::{retry_connect, spawn, wait_for};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

fn conf(tag: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("softrdma-test-{tag}-{}.conf", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

fn cmd(config: &Path) -> Command {
    let mut c = common::softrdma();
    c.env("SOFTRDMA_CONFIG", config).env_remove("SOFTRDMA_ADDR");
    c
}

/// `softrdma ARGS` with the devices of `config`, within 60 s.
fn run(config: &Path, args: &[&str]) -> Output {
    wait(spawn(cmd(config).args(args)))
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn devinfo_has_ibv_devinfo_layout() {
    let c = conf("devinfo");
    let o = run(&c, &["devinfo"]);
    assert!(o.status.success());
    let s = stdout(&o);
    assert!(
        s.starts_with("hca_id:\tsoftrdma0\n\ttransport:\t\t\tInfiniBand (0)\n"),
        "{s}"
    );
    for f in [
        "node_guid:",
        "vendor_id:",
        "phys_port_cnt:",
        "state:\t\t\tPORT_ACTIVE (4)",
        "active_mtu:\t\t4096 (5)",
        "link_layer:\t\tEthernet",
    ] {
        assert!(s.contains(f), "{f} in\n{s}");
    }
    let o = run(&c, &["devinfo", "-v"]);
    let s = stdout(&o);
    assert!(s.contains("\tmax_qp_rd_atom:\t\t\t128\n"), "{s}");
    assert!(s.contains("\tmax_mcast_grp:\t\t\t8192\n"), "{s}");
    assert!(s.contains("GID[  1]:\t\t::ffff:127.0.0.1, RoCE v2"), "{s}");
    let o = run(&c, &["devinfo", "-d", "nope"]);
    assert!(!o.status.success());
}

#[test]
fn link_add_show_delete() {
    let c = conf("link");
    let run = |args: &[&str]| run(&c, args);
    assert!(
        run(&["link", "add", "lo0", "netdev", "lo"])
            .status
            .success()
    );
    assert!(
        run(&["link", "add", "a5", "addr", "127.0.0.5"])
            .status
            .success()
    );
    let dup = run(&["link", "add", "a5", "addr", "127.0.0.6"]);
    assert!(!dup.status.success());
    assert!(String::from_utf8_lossy(&dup.stderr).contains("already exists"));
    let bad = run(&["link", "add", "x", "netdev", "no-such-if0"]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("no-such-if0"));
    let s = stdout(&run(&["link", "show"]));
    assert!(
        s.contains("link lo0/1 state ACTIVE physical_state LINK_UP netdev lo addr 127.0.0.1"),
        "{s}"
    );
    assert!(
        s.contains("link a5/1 state ACTIVE") && s.contains("gid ::ffff:127.0.0.5"),
        "{s}"
    );
    let s = stdout(&run(&["devinfo", "-l"]));
    assert_eq!(s, "2 HCAs found:\n\tlo0\n\ta5\n");
    assert!(run(&["link", "delete", "lo0"]).status.success());
    assert!(!run(&["link", "delete", "lo0"]).status.success());
    assert_eq!(stdout(&run(&["devinfo", "-l"])), "1 HCA found:\n\ta5\n");
}

fn wait(child: std::process::Child) -> Output {
    wait_for(child, "softrdma", Duration::from_secs(60))
}

/// A server on 127.0.78.`a` and a client on 127.0.78.`b`, two processes.
fn pingpong(t: &str, a: u8, b: u8, extra: &[&str]) -> (Output, Output) {
    let c = conf(&format!("pp{a}"));
    std::fs::write(&c, format!("pp{a} addr 127.0.78.{a}\n")).unwrap();
    let port = format!("{}", 20000 + u16::from(a));
    let mut args = vec![
        format!("{t}-pingpong"),
        "-g".into(),
        "1".into(),
        "-p".into(),
        port.clone(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let server = spawn(cmd(&c).args(&args));
    let c2 = conf(&format!("pp{b}"));
    std::fs::write(&c2, format!("pp{b} addr 127.0.78.{b}\n")).unwrap();
    let client = retry_connect(
        || wait(spawn(cmd(&c2).args(&args).arg("127.0.0.1"))),
        Duration::from_secs(20),
    );
    (wait(server), client)
}

#[test]
fn pingpongs_between_two_processes_validate_data() {
    for (t, a, extra) in [
        ("rc", 10, vec!["-n", "200", "-s", "70000", "-c"]),
        ("uc", 12, vec!["-n", "200", "-s", "5000", "-c", "-e"]),
        ("ud", 14, vec!["-n", "200", "-s", "1000", "-c"]),
    ] {
        let (srv, cli) = pingpong(t, a, a + 1, &extra);
        let (s, c) = (stdout(&srv), stdout(&cli));
        assert!(
            srv.status.success() && cli.status.success(),
            "{t}:\n{s}{}\n{c}{}",
            String::from_utf8_lossy(&srv.stderr),
            String::from_utf8_lossy(&cli.stderr)
        );
        assert!(s.contains("200 iters in") && c.contains("200 iters in"));
        assert!(s.contains("remote address: LID 0x0000, QPN 0x"), "{s}");
        assert!(!s.contains("invalid data"));
    }
}

#[test]
fn demo_checks_every_operation() {
    let c = conf("demo");
    let o = run(&c, &["demo"]);
    let s = stdout(&o);
    assert!(
        o.status.success(),
        "{s}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    for op in [
        "SEND ",
        "RDMA WRITE ",
        "RDMA READ ",
        "FETCH_ADD ",
        "COMPARE_SWAP ",
    ] {
        assert!(
            s.lines().any(|l| l.contains(op) && l.contains(" ok ")),
            "{op}\n{s}"
        );
    }
    assert!(s.contains("latency") && s.contains("GB/s"));
    assert!(s.ends_with("all operations checked: ok\n"));
}
