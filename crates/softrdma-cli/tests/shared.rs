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
}
