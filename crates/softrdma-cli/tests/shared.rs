//! One device, many processes: softrdma's own pingpongs with no `SOFTRDMA_ADDR`, and
//! unmodified rdma-core and perftest tools with server and client on one device; a device
//! that outlives a `kill -9` of its owner; a killed member's QPNs freed; and another user
//! that can neither take the device's port nor talk to its owner.
//!
//! Every process runs under a time limit; a test waits for what it needs by reading the
//! processes' output as it comes (the service's log, a pingpong's address lines) or the
//! TCP table, never by sleeping.

mod common;
use common::*;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::Instant;

/// A process whose output lines (stdout and stderr) the test reads as they come; killed
/// if the test ends first.
struct Watched {
    child: Option<Child>,
    lines: Receiver<String>,
    seen: Vec<String>,
    what: String,
}

impl Watched {
    fn spawn(mut c: Command, what: &str) -> Self {
        let mut child = c
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let (tx, lines) = channel();
        let out = child.stdout.take().unwrap();
        let err = child.stderr.take().unwrap();
        let t2 = tx.clone();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        std::thread::spawn(move || {
            for l in BufReader::new(err).lines().map_while(Result::ok) {
                let _ = t2.send(l);
            }
        });
        Self {
            child: Some(child),
            lines,
            seen: Vec::new(),
            what: what.to_owned(),
        }
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// Waits (at most [`LIMIT`]) for a line containing `want`, and returns it.
    fn expect(&mut self, want: &str) -> String {
        if let Some(l) = self.seen.iter().find(|l| l.contains(want)) {
            return l.clone();
        }
        let deadline = Instant::now() + LIMIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if l.contains(want) {
                        return l;
                    }
                }
                Err(_) => panic!(
                    "{}: no line with {want:?} within {LIMIT:?}:\n{}",
                    self.what,
                    self.seen.join("\n")
                ),
            }
        }
    }

    /// Waits (at most [`LIMIT`]) for the exit; its status and every line.
    fn finish(mut self) -> (ExitStatus, String) {
        let mut child = self.child.take().unwrap();
        let deadline = Instant::now() + LIMIT;
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("{} ran longer than {LIMIT:?}", self.what);
            }
            // Drain the output meanwhile, so that a full pipe cannot stall the child.
            while let Ok(l) = self
                .lines
                .recv_timeout(std::time::Duration::from_millis(20))
            {
                self.seen.push(l);
            }
        };
        // The readers end with the pipes.
        while let Ok(l) = self.lines.recv_timeout(std::time::Duration::from_secs(2)) {
            self.seen.push(l);
        }
        (status, self.seen.join("\n"))
    }

    fn kill9(&mut self) {
        let c = self.child.as_mut().unwrap();
        // SAFETY: kill(2) takes no pointers; the pid is our own child's.
        unsafe { libc::kill(c.id() as i32, libc::SIGKILL) };
        let _ = c.wait();
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Waits (at most [`LIMIT`]) until TCP `port` listens; `what` names the server if not.
fn until_listening(port: u16, what: &str) {
    let deadline = Instant::now() + LIMIT;
    while !listening(port) {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::yield_now();
    }
}

/// `softrdma ARGS` on the device at `addr` (`None`: the default device, no
/// `SOFTRDMA_ADDR`).
fn cli(addr: Option<&str>, args: &[&str]) -> Command {
    let mut c = softrdma();
    match addr {
        Some(a) => c.env("SOFTRDMA_ADDR", a),
        None => c.env_remove("SOFTRDMA_ADDR"),
    };
    c.args(args);
    c
}

/// A pingpong server and its client on one device; both must succeed.
fn pingpong_pair(addr: Option<&str>, tool: &str, port: u16, extra: &[&str]) -> (String, String) {
    let p = port.to_string();
    let mut args = vec![tool, "-g", "1", "-p", &p];
    args.extend(extra);
    let server = Watched::spawn(cli(addr, &args), &format!("{tool} server"));
    until_listening(port, &format!("{tool} server never listened"));
    args.push("localhost");
    let client = Watched::spawn(cli(addr, &args), &format!("{tool} client"));
    let (cs, ct) = client.finish();
    let (ss, st) = server.finish();
    assert!(
        cs.success() && ss.success(),
        "{tool}: server {ss:?}, client {cs:?}\n--- server\n{st}\n--- client\n{ct}"
    );
    (st, ct)
}

#[test]
fn softrdmas_pingpongs_share_the_default_device() {
    for (i, tool) in ["rc-pingpong", "uc-pingpong", "ud-pingpong"]
        .iter()
        .enumerate()
    {
        let (s, c) = pingpong_pair(None, tool, 24100 + i as u16, &["-n", "200"]);
        assert!(c.contains("200 iters in"), "{tool}: {c}");
        // Both ends have the default device's GID.
        for t in [&s, &c] {
            assert!(
                t.matches("GID ::ffff:127.0.0.1").count() == 2,
                "{tool}: both addresses are the one device's:\n{t}"
            );
        }
    }
}

#[test]
fn softrdmas_perf_shares_one_device() {
    for (i, test) in ["write-bw", "read-lat", "send-bw", "atomic-lat"]
        .iter()
        .enumerate()
    {
        let port = (24200 + i as u16).to_string();
        let args = ["perf", test, "-n", "200", "-p", &port];
        let server = Watched::spawn(cli(None, &args), &format!("perf {test} server"));
        until_listening(
            24200 + i as u16,
            &format!("perf {test} server never listened"),
        );
        let mut cargs = args.to_vec();
        cargs.push("127.0.0.1");
        let (cs, ct) = Watched::spawn(cli(None, &cargs), &format!("perf {test}")).finish();
        let (ss, st) = server.finish();
        assert!(
            cs.success() && ss.success() && ct.contains("#bytes"),
            "perf {test}:\n--- server\n{st}\n--- client\n{ct}"
        );
    }
}

/// `perf --app-memory` registers the process's own heap memory, as C programs do, which has
/// no memfd for a peer to map: a peer on the same device still places its WRITEs there, by
/// cross-memory copy, and sends them through the rings with `SOFTRDMA_CMA=0`. The
/// benchmark's like-for-like pairs with the drop-in rest on this.
#[test]
fn perf_app_memory_is_placed_by_cross_memory_copy_only() {
    for (i, (addr, app, cma, placed)) in [
        ("127.0.96.30", true, "1", true),
        ("127.0.96.31", true, "0", false),
    ]
    .into_iter()
    .enumerate()
    {
        let before = counter(addr, "placed_writes");
        let port = (24210 + i as u16).to_string();
        let mut args = vec!["perf", "write-lat", "-s", "8", "-n", "500", "-p", &port];
        if app {
            args.push("--app-memory");
        }
        let with = |a: &[&str]| {
            let mut c = cli(Some(addr), a);
            c.env("SOFTRDMA_CMA", cma);
            c
        };
        let server = Watched::spawn(with(&args), "perf write-lat server");
        until_listening(24210 + i as u16, "perf write-lat server never listened");
        args.push("127.0.0.1");
        let (cs, ct) = Watched::spawn(with(&args), "perf write-lat").finish();
        let (ss, st) = server.finish();
        assert!(
            cs.success() && ss.success() && ct.contains("#bytes"),
            "{addr}:\n--- server\n{st}\n--- client\n{ct}"
        );
        let n = counter(addr, "placed_writes") - before;
        assert_eq!(
            n >= 500,
            placed,
            "{addr} (app memory {app}, SOFTRDMA_CMA={cma}): {n} WRITEs placed"
        );
        if !placed {
            assert!(
                n < 10,
                "{addr}: {n} WRITEs placed with no way to place them"
            );
        }
    }
}

/// Unmodified tools through `softrdma exec`, server and client on one device.
#[test]
fn unmodified_tools_run_with_both_ends_on_one_device() {
    let addr = "127.0.95.2";
    let mut port = 24300;
    let mut run = |tool: &str, args: &[&str], want: &str| {
        port += 1;
        let p = port.to_string();
        let mut a = args.to_vec();
        a.extend(["-p", &p]);
        let (_, ct) = pair_at((addr, addr), port, (tool, &a), (tool, &a));
        assert!(ct.contains(want), "{tool} {args:?}:\n{ct}");
    };
    for tool in ["ibv_rc_pingpong", "ibv_uc_pingpong", "ibv_ud_pingpong"] {
        run(tool, &["-g", "1", "-n", "100"], "100 iters in");
    }
    for tool in [
        "ib_write_lat",
        "ib_read_lat",
        "ib_send_lat",
        "ib_atomic_lat",
    ] {
        run(tool, &["-n", "200"], "t_avg[usec]");
    }
    for tool in ["ib_write_bw", "ib_read_bw", "ib_send_bw", "ib_atomic_bw"] {
        run(tool, &["-n", "200"], "BW average[MB/sec]");
    }
}

/// `softrdma service` owning the device on `addr`, and an RC pingpong of `iters`
/// iterations between two processes on it, TCP `port`, once the client is connected (its
/// stream under way): `[service, server, client]`.
fn streaming(addr: &str, port: u16, iters: &str) -> [Watched; 3] {
    let mut service = Watched::spawn(cli(Some(addr), &["service"]), "softrdma service");
    service.expect("owns the device");
    let p = port.to_string();
    let args = ["rc-pingpong", "-g", "1", "-n", iters, "-p", &p];
    let server = Watched::spawn(cli(Some(addr), &args), "rc-pingpong server");
    until_listening(port, "the server never listened");
    let mut cargs = args.to_vec();
    cargs.push("localhost");
    let mut client = Watched::spawn(cli(Some(addr), &cargs), "rc-pingpong client");
    client.expect("remote address:");
    [service, server, client]
}

/// `softrdma service` owns the device; two pingpongs join it; the service is killed with
/// SIGKILL in the middle of their RC stream; one of them carries on as owner and both
/// finish every iteration. Three times over.
#[test]
fn the_device_outlives_a_kill_9_of_its_owner() {
    for round in 0..3u16 {
        let addr = format!("127.0.96.{}", 2 + round);
        let [mut service, server, client] = streaming(&addr, 24400 + round, "60000");
        service.expect(&format!("member pid {} joined", client.pid()));
        service.kill9();
        let (cs, ct) = client.finish();
        let (ss, st) = server.finish();
        assert!(
            cs.success() && ss.success() && ct.contains("60000 iters in"),
            "round {round}:\n--- server\n{st}\n--- client\n{ct}"
        );
    }
}

/// How many same-host rings process `pid` has mapped (its own and its peers').
fn rings_of(pid: u32) -> usize {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("memfd:softrdma-ring"))
        .count()
}

/// A member killed in the middle of an RC stream: the owner frees its QPNs into
/// quarantine at once, and its same-host peer's QP fails within a second (the ring's
/// connection hung up with no bye), not after its retries would have run out (seconds):
/// RETRY_EXC_ERR for a send on the wire, as its retries would have ended, and its
/// receives flushed. Three times over.
#[test]
fn a_killed_members_qpns_are_freed_and_its_peer_fails_at_once() {
    for round in 0..3u16 {
        let addr = format!("127.0.96.{}", 9 + round);
        let [mut service, server, mut client] = streaming(&addr, 24409 + round, "100000000");
        // Mid-stream: the server has mapped the client's ring and its own, to the
        // client, which both exist once each side has sent.
        let deadline = Instant::now() + LIMIT;
        while rings_of(server.pid()) < 2 {
            assert!(
                Instant::now() < deadline,
                "round {round}: no rings in {LIMIT:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let pid = client.pid();
        client.kill9();
        let killed = Instant::now();
        let (ss, st) = server.finish();
        let took = killed.elapsed();
        assert!(
            // RETRY_EXC_ERR if a send was on the wire, else a flushed receive first.
            !ss.success() && (st.contains("retry exc err") || st.contains("wr flush err")),
            "round {round}: the server's peer is gone:\n{st}"
        );
        eprintln!("round {round}: the server failed {took:?} after the kill");
        assert!(
            took < std::time::Duration::from_secs(1),
            "round {round}: {took:?}"
        );
        let left = service.expect(&format!("member pid {pid} left"));
        assert!(left.ends_with("1 QPNs quarantined"), "{left}");
    }
}

/// Another user can neither bind the device's port nor talk to its owner.
#[test]
fn another_user_can_neither_take_the_port_nor_join() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("not root: there is no second uid to test with");
        return;
    }
    let addr = "127.0.96.20";
    let mut service = Watched::spawn(cli(Some(addr), &["service"]), "softrdma service");
    service.expect("owns the device");
    let as_nobody = |prog: &str| {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(prog)
            .env("SOFTRDMA_ADDR", addr)
            .env_remove("SOFTRDMA_CONFIG")
            .env("XDG_RUNTIME_DIR", "/tmp");
        c
    };
    // Its own open finds no owner of its own, and the port taken.
    let mut c = as_nobody(env!("CARGO_BIN_EXE_softrdma"));
    c.args(["rc-pingpong", "-g", "1", "-p", "24420"]);
    let (st, t) = Watched::spawn(c, "nobody's rc-pingpong").finish();
    assert!(!st.success(), "{t}");
    assert!(
        t.contains(&format!(
            "{addr}:4791 is held by something that does not answer as a softrdma device owner"
        )),
        "{t}"
    );
    // A hello to root's owner is answered by a closed connection.
    let py = format!(
        "import socket, struct\n\
         s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)\n\
         s.connect(b'\\0softrdma/0/{addr}')\n\
         s.settimeout(10)\n\
         try:\n    s.send(b'\\x01SRDM' + struct.pack('<II', 1, 0))\nexcept OSError as e:\n    print('closed', e)\n\
         try:\n    print('answer', s.recv(100))\nexcept ConnectionResetError:\n    print('answer reset')\n"
    );
    let mut c = as_nobody("/usr/bin/python3");
    c.args(["-c", &py]);
    let (st, t) = Watched::spawn(c, "nobody's hello").finish();
    // Closed (an end of stream, or a reset when the hello was still unread): never
    // answered.
    assert!(
        st.success() && (t.contains("answer b''") || t.contains("answer reset")),
        "{t}"
    );
    let refused = service.expect("refused a connection");
    assert!(refused.contains("uid 65534"), "{refused}");
    // The port's SO_REUSEPORT group (members are steered through it) is this user's:
    // another's socket cannot join it.
    let py = format!(
        "import socket\n\
         s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
         s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)\n\
         try:\n    s.bind(('{addr}', 4791)); print('joined')\nexcept OSError as e:\n    print('refused', e.errno)\n"
    );
    let mut c = as_nobody("/usr/bin/python3");
    c.args(["-c", &py]);
    let (st, t) = Watched::spawn(c, "nobody's reuseport bind").finish();
    assert!(st.success() && t.contains("refused 98"), "{t}");
}

/// `softrdma ARGS` on the device at `addr`, run to its end; its standard output.
fn cli_out(addr: &str, args: &[&str]) -> String {
    let o = wait(spawn(cli(Some(addr), args).stdout(Stdio::piped())), args[0]);
    assert!(
        o.status.success(),
        "softrdma {}: {}",
        args.join(" "),
        text(&o)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Counter `name` in `softrdma link show -s` of the device at `addr`.
fn counter(addr: &str, name: &str) -> u64 {
    let out = cli_out(addr, &["link", "show", "-s"]);
    let line = out.lines().last().unwrap_or_default();
    let words: Vec<&str> = line.split(' ').collect();
    let at = words
        .iter()
        .position(|w| *w == name)
        .unwrap_or_else(|| panic!("{line}"));
    words[at + 1].parse().unwrap()
}

/// `softrdma res show` lists what each process of a device holds, as it holds it: two
/// pingpong processes' QPs (each the other's peer, in RTS), CQs, MRs and PDs, with their
/// pids. `link show -s` sums the counters of every process, and keeps those of processes
/// that closed the device or were killed; their resources leave the list.
#[test]
fn res_show_lists_every_processs_resources_and_counters_outlive_them() {
    let addr = "127.0.96.21";
    // Processes that close the device in order: their counters stay.
    let (_, c) = pingpong_pair(Some(addr), "rc-pingpong", 24430, &["-n", "2000"]);
    assert!(c.contains("2000 iters in"), "{c}");
    let sent = counter(addr, "sent_pkts");
    assert!(sent >= 4000, "both processes' sends are counted: {sent}");
    let summary = cli_out(addr, &["res", "show"]);
    assert!(
        summary.contains(": softrdma0: pd 0 cq 0 qp 0 cm_id 0 mr 0 ctx 0"),
        "{summary}"
    );

    // Processes that hold the device now.
    let [_service, mut server, mut client] = streaming(addr, 24431, "100000000");
    let pids = [server.pid(), client.pid()];
    let deadline = Instant::now() + LIMIT;
    let qps = loop {
        let j: serde_json::Value =
            serde_json::from_str(&cli_out(addr, &["res", "show", "qp", "-j", "-dd"])).unwrap();
        // Not QP1: the service's CM agent has one (as `rdma res show qp` lists the GSI
        // QP of each port).
        let qps: Vec<serde_json::Value> = j
            .as_array()
            .unwrap()
            .iter()
            .filter(|q| q["lqpn"] != 1)
            .cloned()
            .collect();
        let rts = |q: &serde_json::Value| q["state"] == "RTS" && q["sent-pkts"].as_u64() > Some(0);
        if qps.len() == 2 && qps.iter().all(rts) {
            break qps;
        }
        assert!(Instant::now() < deadline, "two QPs in RTS: {qps:?}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut got: Vec<u64> = qps.iter().map(|q| q["pid"].as_u64().unwrap()).collect();
    got.sort();
    let mut want: Vec<u64> = pids.iter().map(|p| u64::from(*p)).collect();
    want.sort();
    assert_eq!(got, want, "one QP in each pingpong: {qps:?}");
    assert_eq!(qps[0]["lqpn"], qps[1]["rqpn"], "{qps:?}");
    assert_eq!(qps[1]["lqpn"], qps[0]["rqpn"], "{qps:?}");
    for q in &qps {
        assert_eq!(
            (&q["type"], &q["peer"], &q["ifname"]),
            (&"RC".into(), &addr.into(), &"softrdma0".into())
        );
        assert_eq!(q["comm"], "softrdma");
    }
    // The service's own lines are its CM agent's: QP1 and what it needs.
    let theirs = |out: &str| -> Vec<String> {
        out.lines()
            .filter(|l| pids.iter().any(|p| l.contains(&format!(" pid {p} "))))
            .map(str::to_owned)
            .collect()
    };
    let text = cli_out(addr, &["res", "show", "qp"]);
    let line = theirs(&text).first().cloned().unwrap_or_default();
    assert!(
        line.starts_with("link softrdma0/1 lqpn 0x") && line.contains(" type RC state RTS "),
        "{text}"
    );
    for kind in ["cq", "mr", "pd"] {
        let out = cli_out(addr, &["res", "show", kind]);
        assert_eq!(theirs(&out).len(), 2, "{kind}: one per pingpong:\n{out}");
        assert!(
            out.lines().all(|l| l.starts_with("dev softrdma0 ")),
            "{out}"
        );
    }
    let summary = cli_out(addr, &["res", "show"]);
    assert!(
        // The CM agent's QP1 has two CQs: its sends complete apart from its receives.
        summary.contains("pd 3 cq 4 qp 3 cm_id 0 mr 3 ctx 3"),
        "the pingpongs' and the service's CM agent's: {summary}"
    );

    // Killed: their last published counters stay; their resources go.
    let before = counter(addr, "sent_pkts");
    client.kill9();
    server.kill9();
    assert!(counter(addr, "sent_pkts") >= before);
    let out = cli_out(addr, &["res", "show", "qp"]);
    assert!(theirs(&out).is_empty(), "{out}");
}
