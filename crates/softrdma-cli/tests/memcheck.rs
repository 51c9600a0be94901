//! The drop-in under valgrind's memcheck: rdma-core's pingpong tools and perftest's latency
//! and bandwidth tools, the programs the drop-in tests run, each with one end under
//! memcheck (the server, and for two of them the client too), must show no invalid read or
//! write, no invalid free and no use of uninitialised memory whose stack passes through
//! the drop-in. (The libfabric programs are checked in tests/libfabric.rs.)

mod common;

use common::*;

/// Runs `tool` with `args` as a server on 127.0.`net`.2 and a client on 127.0.`net`.3,
/// TCP port `port`, with the server (`server_checked`) or the client under memcheck; the
/// checked side's output must be clean.
fn checked(net: u8, port: u16, tool: &str, args: &[&str], server_checked: bool) {
    need("valgrind");
    need(tool);
    let p = port.to_string();
    let mut a: Vec<&str> = args.to_vec();
    a.extend(["-p", &p]);
    let wrap = |checked: bool, extra: &[&str]| -> (String, Vec<String>) {
        let mut v: Vec<String> = Vec::new();
        if checked {
            v.extend(MEMCHECK[1..].iter().map(|s| s.to_string()));
            v.push(tool.to_string());
        }
        v.extend(a.iter().map(|s| s.to_string()));
        v.extend(extra.iter().map(|s| s.to_string()));
        let prog = if checked { MEMCHECK[0] } else { tool };
        (prog.to_string(), v)
    };
    let (sa, ca) = (format!("127.0.{net}.2"), format!("127.0.{net}.3"));
    let (sp, sv) = wrap(server_checked, &[]);
    let sv: Vec<&str> = sv.iter().map(String::as_str).collect();
    let what = format!("{tool} {}", args.join(" "));
    let mut s = Server(Some(spawn(&mut exec(&sa, &sp, &sv))));
    wait_listen(port, s.child());
    let (cp, cv) = wrap(!server_checked, &["127.0.0.1"]);
    let cv: Vec<&str> = cv.iter().map(String::as_str).collect();
    let c = wait(spawn(&mut exec(&ca, &cp, &cv)), &what);
    let (st, ct) = both_ok(&what, s, c);
    let side = if server_checked { "server" } else { "client" };
    assert_memcheck_clean(
        &format!("{what} ({side})"),
        if server_checked { &st } else { &ct },
    );
}

#[test]
fn rdma_core_pingpongs_under_memcheck() {
    let runs: [(&str, &[&str]); 5] = [
        ("ibv_rc_pingpong", &["-g", "1", "-n", "50", "-s", "65536"]),
        ("ibv_uc_pingpong", &["-g", "1", "-n", "50"]),
        ("ibv_ud_pingpong", &["-g", "1", "-n", "50"]),
        ("ibv_srq_pingpong", &["-g", "1", "-n", "50", "-q", "4"]),
        ("ibv_rc_pingpong", &["-g", "1", "-n", "50", "-e"]),
    ];
    for (i, (tool, args)) in runs.iter().enumerate() {
        checked(111, 23500 + i as u16, tool, args, true);
    }
    checked(
        111,
        23510,
        "ibv_rc_pingpong",
        &["-g", "1", "-n", "50"],
        false,
    );
}

#[test]
fn perftest_under_memcheck() {
    let runs: [(&str, &[&str]); 8] = [
        ("ib_send_lat", &["-n", "100"]),
        ("ib_write_lat", &["-n", "100"]),
        ("ib_read_lat", &["-n", "100"]),
        ("ib_atomic_lat", &["-n", "100"]),
        ("ib_send_bw", &["-n", "100"]),
        ("ib_write_bw", &["-n", "100", "-q", "2"]),
        ("ib_read_bw", &["-n", "100"]),
        ("ib_atomic_bw", &["-n", "100"]),
    ];
    for (i, (tool, args)) in runs.iter().enumerate() {
        checked(112, 23520 + i as u16, tool, args, true);
    }
    checked(112, 23540, "ib_write_bw", &["-n", "100"], false);
}

/// The filter the memcheck tests judge by keeps the drop-in's errors and only those.
#[test]
fn the_memcheck_filter_catches_the_drop_ins_errors() {
    let log = "==7== Invalid read of size 8\n==7==    at 0x1: clone (context.rs:30)\n==7==    by 0x2: ibv_alloc_pd (in libsoftrdma_capi.so)\n==7== \n==7== Invalid read of size 4\n==7==    at 0x3: vrb_foo (in libfabric.so.1)\n==7== \n";
    let e = drop_in_errors(log);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].contains("ibv_alloc_pd"));
}
