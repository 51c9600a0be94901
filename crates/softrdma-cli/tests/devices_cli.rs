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

/// The stand-in for the system's libibverbs with one kernel device, `fake0`
/// (`tests/c/fake_kernel_verbs.c`), built as a shared library.
fn fake_kernel_verbs() -> PathBuf {
    common::need("gcc");
    let out = std::env::temp_dir().join(format!("softrdma-fake-verbs-{}.so", std::process::id()));
    let o = Command::new("gcc")
        .args(["-O2", "-Wall", "-Werror", "-shared", "-fPIC", "-o"])
        .arg(&out)
        .arg(common::c_test("fake_kernel_verbs.c"))
        .output()
        .unwrap();
    assert!(o.status.success(), "gcc: {}", common::text(&o));
    out
}

/// `softrdma devinfo` and `link show` list the kernel's devices after softrdma's own and
/// print their attributes, port and GID table through the library it loads at run time (here a
/// stand-in with one device); a verb on it says it is a kernel device; with the backend
/// off, or on this host's own rdma-core (no kernel devices here), only softrdma's are
/// listed and nothing is said; a library that is named but missing is said once.
#[test]
fn devinfo_lists_and_queries_kernel_devices_through_the_system_library() {
    let c = conf("kernel");
    std::fs::write(&c, "softrdma0 addr 127.0.0.1\n").unwrap();
    let fake = fake_kernel_verbs();
    let with = |lib: &Path, args: &[&str]| {
        wait(spawn(cmd(&c).env("SOFTRDMA_KERNEL_VERBS", lib).args(args)))
    };

    let o = with(&fake, &["devinfo", "-l"]);
    assert!(o.status.success(), "{}", common::text(&o));
    assert_eq!(stdout(&o), "2 HCAs found:\n\tsoftrdma0\n\tfake0\n");
    assert!(o.stderr.is_empty(), "{}", common::text(&o));

    let o = with(&fake, &["devinfo", "-v", "-d", "fake0"]);
    assert!(o.status.success(), "{}", common::text(&o));
    let t = stdout(&o);
    for want in [
        "hca_id:\tfake0",
        "\tfw_ver:\t\t\t\t9.8.7",
        "\tnode_guid:\t\t\t0011:2233:4455:6677",
        "\tmax_qp:\t\t\t\t1048560",
        "\tatomic_cap:\t\t\tATOMIC_HCA (1)",
        "\t\t\tstate:\t\t\tPORT_ACTIVE (4)",
        "\t\t\tmax_mtu:\t\t4096 (5)",
        "\t\t\tactive_mtu:\t\t1024 (3)",
        "\t\t\tlink_layer:\t\tEthernet",
        "\t\t\tmax_msg_sz:\t\t0x80000000",
        "\t\t\tGID[  0]:\t\tfe80::211:22ff:fe33:4455, RoCE v2",
        "\t\t\tGID[  1]:\t\t::ffff:10.99.0.7, RoCE v2",
    ] {
        assert!(t.lines().any(|l| l == want), "no {want:?} in:\n{t}");
    }
    assert!(!t.contains("GID[  2]"), "unset GIDs are not listed:\n{t}");

    // `link show` too, after softrdma's own (no sysfs for the stand-in: its physical
    // state and netdev are unknown).
    let o = with(&fake, &["link", "show", "fake0"]);
    assert!(o.status.success(), "{}", common::text(&o));
    assert_eq!(
        stdout(&o),
        "link fake0/1 state ACTIVE physical_state - netdev - addr 10.99.0.7 mtu - \
         active_mtu 1024 gid fe80::211:22ff:fe33:4455 gid ::ffff:10.99.0.7\n"
    );

    // A port the device does not have: ibv_devinfo's words and status, and why.
    let o = with(&fake, &["devinfo", "-d", "fake0", "-i", "2"]);
    assert_eq!(o.status.code(), Some(255), "{}", common::text(&o));
    assert!(
        common::text(&o).contains("ibv_query_port on the kernel device fake0"),
        "{}",
        common::text(&o)
    );

    // Verbs on a kernel device are refused by name, not as a missing device.
    let o = with(&fake, &["rc-pingpong", "-d", "fake0"]);
    assert!(!o.status.success());
    assert!(
        common::text(&o).contains("fake0 is a kernel RDMA device"),
        "{}",
        common::text(&o)
    );

    // In a process that has the drop-in loaded as its libibverbs.so.1 (a C program under
    // `softrdma exec`), the system's library is loaded apart from it (its own link-map
    // namespace), and lists the same.
    let env = wait(spawn(cmd(&c).arg("env")));
    let env = stdout(&env);
    let dir = env
        .strip_prefix("export LD_LIBRARY_PATH='")
        .and_then(|r| r.split([':', '\'']).next())
        .unwrap_or_else(|| panic!("{env}"));
    let o = wait(spawn(
        cmd(&c)
            .env("SOFTRDMA_KERNEL_VERBS", &fake)
            .env("LD_PRELOAD", Path::new(dir).join("libibverbs.so.1"))
            .env("LD_DEBUG", "files")
            .args(["devinfo", "-l"]),
    ));
    assert!(o.status.success(), "{}", common::text(&o));
    assert_eq!(stdout(&o), "2 HCAs found:\n\tsoftrdma0\n\tfake0\n");
    let debug = String::from_utf8_lossy(&o.stderr);
    assert!(
        debug
            .lines()
            .any(|l| l.contains(&format!("file={} [1]", fake.display()))),
        "not in a namespace of its own:\n{debug}"
    );

    // Off, and this host's own rdma-core: softrdma's device alone, not a word more.
    for o in [
        with(Path::new("0"), &["devinfo", "-l"]),
        wait(spawn(
            cmd(&c)
                .env_remove("SOFTRDMA_KERNEL_VERBS")
                .args(["devinfo", "-l"]),
        )),
    ] {
        assert!(o.status.success(), "{}", common::text(&o));
        assert_eq!(stdout(&o), "1 HCA found:\n\tsoftrdma0\n");
        assert!(o.stderr.is_empty(), "{}", common::text(&o));
    }

    // Named but missing: said once, and softrdma's devices still listed.
    let o = with(
        Path::new("/nonexistent/libibverbs.so.1"),
        &["devinfo", "-l"],
    );
    assert!(o.status.success(), "{}", common::text(&o));
    assert_eq!(stdout(&o), "1 HCA found:\n\tsoftrdma0\n");
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.contains("/nonexistent/libibverbs.so.1"), "{e}");
    let _ = std::fs::remove_file(fake);
    let _ = std::fs::remove_file(c);
}
