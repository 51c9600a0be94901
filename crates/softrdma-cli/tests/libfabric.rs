//! libfabric (Debian's 1.17, unmodified) over softrdma, through `softrdma exec`: its verbs
//! provider lists every endpoint type it offers on rxe, softrdma's native provider
//! (`softrdma`, `libsoftrdma-fi.so`, found through the `FI_PROVIDER_PATH` that `softrdma
//! exec` sets) lists its own, and `fi_pingpong` passes, with its data checked, over the
//! verbs provider's MSG, DGRAM, RDM through `ofi_rxd` and RDM through `ofi_rxm`, and over
//! the native provider's RDM, MSG and DGRAM and `ofi_rxm` and `ofi_rxd` layered on these,
//! both ends on one shared device and on two devices; all but the verbs MSG run with
//! their servers under valgrind's memcheck, which must find no invalid access in the
//! drop-in or the provider; and all run between two network namespaces over a veth pair
//! (libfabric's verbs MSG endpoints need an interface that is not loopback).
//!
//! Each test takes its own loopback addresses and `fi_pingpong` control port, so the tests
//! run in parallel. The control ports lie below Linux's ephemeral range (32768 to 60999):
//! a port inside it can be held, at any moment, by the local end of some other test's TCP
//! connection, and the server's bind then fails with EADDRINUSE.

mod common;

use common::*;
use std::process::Command;

/// The providers and endpoint types `fi_pingpong` runs: the four over the verbs
/// provider, softrdma's native RDM, MSG and DGRAM, and `ofi_rxm` and `ofi_rxd` layered
/// over the native MSG and DGRAM.
const KINDS: [(&str, &str); 9] = [
    ("verbs", "msg"),
    ("verbs", "dgram"),
    ("verbs;ofi_rxd", "rdm"),
    ("verbs;ofi_rxm", "rdm"),
    ("softrdma", "rdm"),
    ("softrdma", "msg"),
    ("softrdma;ofi_rxm", "rdm"),
    ("softrdma", "dgram"),
    ("softrdma;ofi_rxd", "rdm"),
];

/// Runs an `fi_pingpong` pair: the server (with `server_wrap` before it, such as valgrind)
/// on the device at `addrs.0`, the client on `addrs.1`, control port `port`, `size` (`all`
/// for every size) with data checks; the server's and client's outputs.
fn pingpong(
    addrs: (&str, &str),
    port: u16,
    (prov, ep): (&str, &str),
    (size, iters): (&str, &str),
    server_wrap: &[&str],
) -> (String, String) {
    let port = port.to_string();
    let common = ["-p", prov, "-e", ep, "-c", "-S", size, "-I", iters];
    let mut server: Vec<&str> = server_wrap.to_vec();
    server.extend(["fi_pingpong"].iter().chain(&common).chain(&["-B", &port]));
    let what = format!("fi_pingpong -p {prov} -e {ep}");
    let mut s = Server(Some(spawn(&mut exec(addrs.0, server[0], &server[1..]))));
    wait_listen(port.parse().unwrap(), s.child());
    // A MSG endpoint connects to the address given: the server's device's (its control
    // socket takes any address); the others reach it through localhost.
    let dst = if ep == "msg" { addrs.0 } else { "127.0.0.1" };
    let mut cargs = common.to_vec();
    cargs.extend(["-P", &port, dst]);
    let c = wait(spawn(&mut exec(addrs.1, "fi_pingpong", &cargs)), &what);
    let (st, ct) = both_ok(&format!("{what} ({} -> {})", addrs.1, addrs.0), s, c);
    // `-S all` ends with the largest size of the endpoint type: 4 KiB for DGRAM (one
    // MTU), 6 MiB for the others.
    let last = match (size, ep) {
        ("all", "dgram") => "4k ",
        ("all", _) => "6m ",
        _ => "",
    };
    assert!(
        ct.lines().any(|l| l.starts_with(last)),
        "{what}: the client did not reach {last}:\n{ct}"
    );
    (st, ct)
}

/// libfabric's verbs provider (libfabric 1.17, built into `libfabric.so.1`) finds the
/// device through the drop-in and lists every endpoint type of it.
#[test]
fn fi_info_lists_every_endpoint_type_of_the_verbs_provider() {
    let o = wait(
        spawn(&mut exec("127.0.91.2", "fi_info", &["-p", "verbs"])),
        "fi_info",
    );
    // As on rxe: MSG over RC, DGRAM over UD, and RDM through ofi_rxm and ofi_rxd.
    says_all(
        "fi_info -p verbs",
        &o,
        &[
            "provider: verbs",
            "FI_EP_MSG",
            "domain: softrdma0\n",
            "domain: softrdma0-dgram\n",
            "protocol: FI_PROTO_RDMA_CM_IB_RC",
            "protocol: FI_PROTO_IB_UD",
            "provider: verbs;ofi_rxm",
            "protocol: FI_PROTO_RXM",
            "provider: verbs;ofi_rxd",
            "protocol: FI_PROTO_RXD",
        ],
    );
}

/// The native provider is found, under its name, with its RDM, MSG and DGRAM endpoints on
/// the device, and `-p softrdma` gives it alone: libfabric layers `ofi_rxm` over its MSG
/// endpoints only when asked by name (`-p "softrdma;ofi_rxm"`).
#[test]
fn fi_info_lists_the_native_softrdma_provider() {
    let o = wait(
        spawn(&mut exec(
            "127.0.91.3",
            "fi_info",
            &["-p", "softrdma", "-v"],
        )),
        "fi_info",
    );
    says_all(
        "fi_info -p softrdma",
        &o,
        &[
            "prov_name: softrdma\n",
            "type: FI_EP_RDM",
            "type: FI_EP_MSG",
            "type: FI_EP_DGRAM",
            "name: softrdma0\n",
            "src_addr: fi_sockaddr_in://127.0.91.3:0",
            "FI_TAGGED",
            "mem_tag_format: 0xaaaaaaaaaaaaaaaa",
        ],
    );
    let t = text(&o);
    assert!(!t.contains("ofi_rx"), "{t}");
    let o = wait(
        spawn(&mut exec(
            "127.0.91.3",
            "fi_info",
            &["-p", "softrdma;ofi_rxm"],
        )),
        "fi_info -p softrdma;ofi_rxm",
    );
    says_all(
        "fi_info -p softrdma;ofi_rxm",
        &o,
        &["provider: softrdma;ofi_rxm", "type: FI_EP_RDM"],
    );
    let o = wait(
        spawn(&mut exec("127.0.91.3", "fi_info", &["-l"])),
        "fi_info -l",
    );
    says_all("fi_info -l", &o, &["softrdma:\n    version: 0.1"]);
}

/// Tagged messages over the native provider (`-m tagged`), every size checked.
#[test]
fn fi_pingpong_tagged_runs_over_the_native_provider() {
    let port = "27650";
    let common = [
        "-p", "softrdma", "-e", "rdm", "-m", "tagged", "-c", "-S", "all", "-I", "10",
    ];
    let server: Vec<&str> = common.iter().copied().chain(["-B", port]).collect();
    let mut s = Server(Some(spawn(&mut exec("127.0.98.2", "fi_pingpong", &server))));
    wait_listen(port.parse().unwrap(), s.child());
    let client: Vec<&str> = common
        .iter()
        .copied()
        .chain(["-P", port, "127.0.0.1"])
        .collect();
    let c = wait(
        spawn(&mut exec("127.0.98.3", "fi_pingpong", &client)),
        "fi_pingpong -m tagged",
    );
    let (_, ct) = both_ok("fi_pingpong -p softrdma -m tagged", s, c);
    assert!(ct.lines().any(|l| l.starts_with("6m ")), "{ct}");
}

#[test]
fn fi_pingpong_runs_on_one_shared_device() {
    for (i, kind) in KINDS.into_iter().enumerate() {
        pingpong(
            ("127.0.92.2", "127.0.92.2"),
            27610 + i as u16,
            kind,
            ("all", "10"),
            &[],
        );
    }
}

#[test]
fn fi_pingpong_runs_between_two_devices() {
    for (i, kind) in KINDS.into_iter().enumerate() {
        pingpong(
            ("127.0.93.2", "127.0.93.3"),
            27620 + i as u16,
            kind,
            ("all", "10"),
            &[],
        );
    }
}

#[test]
fn memcheck_finds_no_invalid_access_by_the_drop_in_under_libfabric() {
    need("valgrind");
    for (i, kind) in KINDS[1..].iter().enumerate() {
        let (st, _) = pingpong(
            ("127.0.94.2", "127.0.94.3"),
            27630 + i as u16,
            *kind,
            // Big enough to take several packets (DGRAM: one MTU) and, for rxm, its
            // rendezvous path; small enough for memcheck's pace.
            (if kind.1 == "dgram" { "4096" } else { "65536" }, "4"),
            &MEMCHECK,
        );
        assert_memcheck_clean(&format!("fi_pingpong -p {} -e {}", kind.0, kind.1), &st);
    }
}

/// libfabric's verbs provider opens and closes domains while another thread of the
/// program maps and unmaps memory, as the drop-in's own threads do through glibc's
/// allocator. libfabric's default MR cache monitor (`memhooks`) rewrites libc's `munmap`
/// and `madvise` under that thread at each first open and last close (the cause of the
/// `verbs;ofi_rxd` and `verbs;ofi_rxm` crashes CI saw); `softrdma exec` turns it off, and
/// the program must live through 300 domains.
#[test]
fn a_domain_opens_and_closes_under_a_thread_that_unmaps() {
    let bin = build_c_with(
        &c_test("fi_domain_churn.c"),
        "fi_domain_churn",
        &["-lfabric", "-lpthread"],
    );
    let mut c = exec(
        "127.0.92.4",
        bin.to_str().unwrap(),
        &["verbs;ofi_rxm", "300"],
    );
    c.env_remove("FI_MR_CACHE_MONITOR");
    let o = wait(spawn(&mut c), "fi_domain_churn");
    says_all("fi_domain_churn", &o, &["fi_domain_churn ok"]);
}

/// Two network namespaces joined by a veth pair (`ip netns`, made and removed by the
/// test), each end with an address of a private /24; `None` when this process may not
/// make them (not root).
struct Netns {
    names: Vec<String>,
}

impl Netns {
    fn pair(tag: &str, net: &str) -> Option<Self> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("NOTICE: not root: the network namespace test cannot run");
            return None;
        }
        let id = std::process::id() % 10000;
        let names: Vec<String> = ["a", "b"]
            .iter()
            .map(|s| format!("sr{tag}{id}{s}"))
            .collect();
        let ns = Self { names };
        let (a, b) = (&ns.names[0], &ns.names[1]);
        let (va, vb) = (format!("v{id}{tag}a"), format!("v{id}{tag}b"));
        for (i, n) in [a, b].iter().enumerate() {
            ip(&["netns", "add", n]);
            ip(&["-n", n, "link", "set", "lo", "up"]);
            let _ = i;
        }
        ip(&[
            "link", "add", &va, "netns", a, "type", "veth", "peer", "name", &vb, "netns", b,
        ]);
        for (n, v, host) in [(a, &va, 1), (b, &vb, 2)] {
            ip(&[
                "-n",
                n,
                "addr",
                "add",
                &format!("{net}.{host}/24"),
                "dev",
                v,
            ]);
            ip(&["-n", n, "link", "set", v, "up"]);
        }
        Some(ns)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

/// `softrdma exec` inside namespace `ns`, its device on `addr`, with a runtime directory
/// of that namespace's own (each namespace is a host of its own).
fn exec_in(ns: &str, addr: &str, program: &str, args: &[&str]) -> Command {
    need(program);
    let mut c = Command::new("ip");
    c.args([
        "netns",
        "exec",
        ns,
        env!("CARGO_BIN_EXE_softrdma"),
        "exec",
        "--",
        program,
    ])
    .args(args)
    .env_remove("SOFTRDMA_CONFIG")
    .env("SOFTRDMA_ADDR", addr)
    .env(
        "XDG_RUNTIME_DIR",
        std::env::temp_dir().join(format!("softrdma-rt-{}-{ns}", std::process::id())),
    );
    c
}

/// Whether TCP `port` listens in the network namespace of process `pid` (its own view of
/// /proc/net/tcp).
fn listening_in(pid: u32, port: u16) -> bool {
    let want = format!(":{port:04X}");
    ["tcp", "tcp6"].iter().any(|f| {
        std::fs::read_to_string(format!("/proc/{pid}/net/{f}")).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let mut it = l.split_whitespace();
                let local = it.nth(1).unwrap_or("");
                let state = it.nth(1).unwrap_or("");
                local.ends_with(&want) && state == "0A"
            })
        })
    })
}

#[test]
fn fi_pingpong_runs_between_network_namespaces() {
    let net = "10.213.7";
    let Some(ns) = Netns::pair("lf", net) else {
        return;
    };
    let (a, b) = (format!("{net}.1"), format!("{net}.2"));
    for (i, (prov, ep)) in KINDS.into_iter().enumerate() {
        let port = 27640 + i as u16;
        let ps = port.to_string();
        let what = format!("fi_pingpong -p {prov} -e {ep} across namespaces");
        let sargs = [
            "-p", prov, "-e", ep, "-c", "-S", "all", "-I", "10", "-B", &ps,
        ];
        let mut s = Server(Some(spawn(&mut exec_in(
            &ns.names[0],
            &a,
            "fi_pingpong",
            &sargs,
        ))));
        let deadline = std::time::Instant::now() + LIMIT;
        // `ip netns exec` and `softrdma exec` exec the program: the pid is fi_pingpong's.
        let pid = s.child().id();
        while !listening_in(pid, port)
            && s.child().try_wait().unwrap().is_none()
            && std::time::Instant::now() < deadline
        {
            std::thread::yield_now();
        }
        let cargs = [
            "-p", prov, "-e", ep, "-c", "-S", "all", "-I", "10", "-P", &ps, &a,
        ];
        let c = wait(
            spawn(&mut exec_in(&ns.names[1], &b, "fi_pingpong", &cargs)),
            &what,
        );
        both_ok(&what, s, c);
    }
}
