//! `softrdma rping` between two processes on two loopback devices, through softrdma's
//! connection manager (IB CM MADs on QP1 over UDP), and `softrdma res show cm_id` while a
//! server listens.

mod common;

use common::{DeviceConfig, text};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn softrdma(addr: &str, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_softrdma"));
    c.env("SOFTRDMA_ADDR", addr).args(args);
    c
}

/// A child whose output is read from the start (a full pipe would stop it), to be
/// waited for with [`Running::finish`].
struct Running {
    pid: u32,
    rx: std::sync::mpsc::Receiver<std::io::Result<Output>>,
}

impl Running {
    fn new(child: Child) -> Self {
        let pid = child.id();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(child.wait_with_output()));
        Self { pid, rx }
    }

    /// Its output, once it ends within `limit`.
    fn finish(mut self, limit: Duration) -> Output {
        let pid = std::mem::replace(&mut self.pid, 0);
        match self.rx.recv_timeout(limit) {
            Ok(o) => o.expect("output"),
            Err(_) => {
                let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
                panic!("pid {pid} ran longer than {limit:?}");
            }
        }
    }
}

impl Drop for Running {
    /// A child not waited for (the test failed before) does not outlive the test: it
    /// would hold its device's port for the next one.
    fn drop(&mut self) {
        if self.pid != 0 {
            let _ = Command::new("kill")
                .arg("-9")
                .arg(self.pid.to_string())
                .status();
        }
    }
}

/// Waits until `res show cm_id` on `addr`'s device shows a listener on `port`; gives the
/// line.
fn listening(addr: &str, port: u16) -> String {
    listening_on(
        || softrdma(addr, &["res", "show", "cm_id"]),
        &format!(":{port} "),
    )
}

/// Waits until the output of `res_show` has a listener line containing `what`; gives it.
fn listening_on(res_show: impl Fn() -> Command, what: &str) -> String {
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let o = res_show().output().unwrap();
        let t = text(&o);
        if let Some(l) = t
            .lines()
            .find(|l| l.contains("state LISTEN") && l.contains(what))
        {
            return l.to_owned();
        }
        assert!(Instant::now() < end, "no listener with {what:?}: {t}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn server(addr: &str, port: &str, size: &str) -> Running {
    piped(&mut softrdma(
        addr,
        &["rping", "-s", "-v", "-S", size, "-p", port],
    ))
}

/// `softrdma service` on `addr`, its stderr read line by line, killed when dropped.
struct Service {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Service {
    /// Starts the service and waits until it says it owns the device. Waiting for the
    /// device to answer (`link show`) is not enough: a `link show` that comes before the
    /// service opens the device owns it itself, and the service becomes a member that only
    /// takes the device over when `link show` leaves, while the test's next program may
    /// race it for the role.
    fn start(addr: &str) -> Self {
        let mut child = softrdma(addr, &["service"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, lines) = std::sync::mpsc::channel::<String>();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for l in std::io::BufRead::lines(std::io::BufReader::new(err)).map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let s = Self { child, lines };
        let l = s.wait_for("softrdma service: softrdma0 on ");
        assert!(
            l.contains(": owner (pid"),
            "the service is not the owner: {l}"
        );
        s
    }

    /// The first line from now on that contains `what`, within 20 s.
    fn wait_for(&self, what: &str) -> String {
        let end = Instant::now() + Duration::from_secs(20);
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if l.contains(what) => return l,
                Ok(_) => {}
                Err(e) => panic!("the service logged no {what:?}: {e}"),
            }
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The arguments of a verbose rping client that sends `count` pings of `size` bytes,
/// checking each, to `to`'s `port`.
fn rping_client<'a>(count: &'a str, size: &'a str, to: &'a str, port: &'a str) -> [&'a str; 12] {
    [
        "rping", "-c", "-v", "-V", "-C", count, "-S", size, "-a", to, "-p", port,
    ]
}

/// An rping client's output: it succeeded (its server's output shown when not) and got
/// `n` pings through.
fn assert_pinged(cli: &Output, srv: &Output, n: usize) {
    assert!(cli.status.success(), "{}\n{}", text(cli), text(srv));
    assert_eq!(text(cli).matches("ping data: rdma-ping-").count(), n);
}

/// `c` started with its output read (see [`Running`]).
fn piped(c: &mut Command) -> Running {
    Running::new(
        c.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    )
}

#[test]
fn rping_between_two_processes_checks_every_ping() {
    for (size, port) in [("64", 7401u16), ("65000", 7402)] {
        let srv = server("127.0.0.91", &port.to_string(), size);
        let line = listening("127.0.0.91", port);
        assert!(
            line.starts_with("link softrdma0/1 cm-idn ")
                && line.contains(" ps TCP ")
                && line.contains(&format!("src-addr 127.0.0.91:{port} "))
                && line.contains(" comm softrdma"),
            "{line}"
        );
        let cli = piped(&mut softrdma(
            "127.0.0.92",
            &rping_client("10", size, "127.0.0.91", &port.to_string()),
        ))
        .finish(Duration::from_secs(60));
        let srv = srv.finish(Duration::from_secs(60));
        let short = |o: &Output| text(o).chars().take(2000).collect::<String>();
        assert!(
            cli.status.success(),
            "client: {}\nserver: {}",
            short(&cli),
            short(&srv)
        );
        assert!(srv.status.success(), "server: {}", short(&srv));
        assert_eq!(text(&cli).matches("ping data: rdma-ping-").count(), 10);
        assert_eq!(
            text(&srv).matches("server ping data: rdma-ping-").count(),
            10
        );
        assert!(
            text(&srv).contains("rdma-ping-9: JKLMNOP"),
            "{}",
            short(&srv)
        );
    }
}

#[test]
fn rping_to_a_port_nobody_listens_on_is_rejected() {
    let srv = server("127.0.0.93", "7403", "64");
    listening("127.0.0.93", 7403);
    let cli = softrdma(
        "127.0.0.94",
        &["rping", "-c", "-C", "1", "-a", "127.0.0.93", "-p", "7404"],
    )
    .output()
    .unwrap();
    assert!(!cli.status.success());
    assert!(
        text(&cli).contains("Rejected { reason: 8 }"),
        "{}",
        text(&cli)
    );
    let _ = Command::new("kill").arg(srv.pid.to_string()).status();
    srv.finish(Duration::from_secs(10));
}

/// `softrdma exec -- PROGRAM`: an unmodified rdma-core or perftest binary on the drop-in
/// librdmacm, on `addr`'s device.
fn exec(addr: &str, program: &[&str]) -> Command {
    let mut a = vec!["exec", "--"];
    a.extend(program);
    softrdma(addr, &a)
}

/// Whether every one of `programs` is installed; says which are not when not (the test
/// then skips its part: scripts/test installs them).
fn have_all(programs: &[&str]) -> bool {
    let missing: Vec<&&str> = programs.iter().filter(|p| !have(p)).collect();
    if !missing.is_empty() {
        eprintln!("{missing:?} missing: skipped (scripts/test installs them)");
    }
    missing.is_empty()
}

/// Asserts that a [`dropin_pair`]'s client said `client` and its server `server`.
fn both_say((c, s): (String, String), client: &str, server: &str) {
    assert!(c.contains(client) && s.contains(server), "{c}\n{s}");
}

fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A server and a client of an unmodified program through the drop-in librdmacm, on two
/// devices of their own (`127.0.1.N` and `127.0.2.N`); the client starts once `res show
/// cm_id` shows the server listening on `port`. Both must succeed; gives their outputs.
fn dropin_pair(n: u8, server: &[&str], client: &[&str], port: u16) -> (String, String) {
    let (saddr, caddr) = (format!("127.0.1.{n}"), format!("127.0.2.{n}"));
    dropin_pair_on(&saddr, &caddr, server, client, port)
}

/// [`dropin_pair`] with the server on `saddr`'s device and the client on `caddr`'s (the
/// same device, when they are equal); `ADDR` in either's arguments stands for `saddr`.
fn dropin_pair_on(
    saddr: &str,
    caddr: &str,
    server: &[&str],
    client: &[&str],
    port: u16,
) -> (String, String) {
    let fill = |v: &[&str]| -> Vec<String> { v.iter().map(|x| x.replace("ADDR", saddr)).collect() };
    let (sv, cv) = (fill(server), fill(client));
    let server: Vec<&str> = sv.iter().map(String::as_str).collect();
    let client: Vec<&str> = cv.iter().map(String::as_str).collect();
    let what = format!("{server:?} against {client:?}");
    eprintln!("{what}");
    let srv = piped(&mut exec(saddr, &server));
    listening(saddr, port);
    let cli = piped(&mut exec(caddr, &client)).finish(Duration::from_secs(60));
    let srv = srv.finish(Duration::from_secs(60));
    let (s, c) = common::both_succeeded(&what, &srv, &cli);
    (c, s)
}

/// rdma-core's rping, ucmatose (four connections), udaddy and rdma_server/rdma_client,
/// unmodified, each server and client through `pair` (see [`dropin_pair`]) on device
/// `n` and the three after it, with ports from `port`; udaddy's arguments end with
/// `udaddy`.
fn rdma_cm_programs(
    pair: impl Fn(u8, &[&str], &[&str], u16) -> (String, String),
    n: u8,
    port: u16,
    udaddy: &[&str],
) {
    let p = |i: u16| (port + i).to_string();
    let (c, s) = pair(
        n,
        &["rping", "-s", "-v", "-C", "10", "-a", "ADDR", "-p", &p(0)],
        &rping_client("10", "64", "ADDR", &p(0)),
        port,
    );
    assert_eq!(c.matches("ping data: rdma-ping-").count(), 10, "{c}");
    assert_eq!(s.matches("server ping data: rdma-ping-").count(), 10, "{s}");

    let p1 = p(1);
    let ucmatose = |role| ["ucmatose", role, "ADDR", "-p", &p1, "-c", "4", "-C", "10"];
    let ucm = pair(n + 1, &ucmatose("-b"), &ucmatose("-s"), port + 1);
    both_say(ucm, "return status 0", "return status 0");

    // udaddy: UD QPs found through SIDR (no connection), then messages both ways, each
    // reply addressed from the request's GRH. Its port is fixed (7174).
    let udaddy_as = |role| [&["udaddy", role, "ADDR", "-C", "10"][..], udaddy].concat();
    let ud = pair(n + 2, &udaddy_as("-b"), &udaddy_as("-s"), 7174);
    both_say(ud, "data transfers complete", "data transfers complete");

    // rdma_server and rdma_client: synchronous IDs (no event channel) made by
    // rdma_create_ep, a request taken by rdma_get_request with its QP made from the
    // listener's attributes, and rdma_verbs.h's helpers on the CQs rdma_create_qp made.
    let rs = pair(
        n + 3,
        &["rdma_server", "-s", "ADDR", "-p", &p(3)],
        &["rdma_client", "-s", "ADDR", "-p", &p(3)],
        port + 3,
    );
    both_say(rs, "rdma_client: end 0", "rdma_server: end 0");
}

/// rdma-core's rping, ucmatose (four connections), udaddy (two UD IDs through SIDR),
/// rdma_server/rdma_client, qperf `-cm1` (its twelve RC tests) and cmtime (1,000), and
/// every perftest
/// tool with `-R` (its connections made by rdma_cm), unmodified, as two processes.
#[test]
fn unmodified_rdma_cm_programs_connect_through_the_dropin() {
    if !have_all(&["rping", "ib_send_bw", "qperf"]) {
        return;
    }
    // udaddy with two IDs at once.
    rdma_cm_programs(dropin_pair, 1, 7420, &["-c", "2"]);
    qperf_cm("127.0.1.6", "127.0.2.6", 19870);

    // cmtime: 1,000 connections made and torn down step by step, each step timed.
    let c = cmtime("127.0.1.5", "127.0.2.5", 7425, "1000");
    // Every connection's connect step was timed (a failed one shows no minimum).
    let connect = c.lines().find(|l| l.starts_with("connect")).unwrap();
    assert!(!connect.contains("1000000000"), "{c}");

    let tools = [
        "ib_send_bw",
        "ib_send_lat",
        "ib_write_bw",
        "ib_write_lat",
        "ib_read_bw",
        "ib_read_lat",
        "ib_atomic_bw",
        "ib_atomic_lat",
    ];
    for (i, t) in tools.iter().enumerate() {
        let port = (7430 + i).to_string();
        let n = 10 + i as u8;
        let (c, _) = dropin_pair(
            n,
            &[t, "-R", "-n", "50", "-p", &port],
            &[t, "-R", "-n", "50", "-p", &port, &format!("127.0.1.{n}")],
            7430 + i as u16,
        );
        assert!(c.contains("#bytes"), "{t}: {c}");
    }
}

/// cmtime's server on `saddr`'s device (it serves until it is stopped) and its client,
/// `n` connections to `port`, on `caddr`'s. The client must succeed and time the connect
/// step; gives its output.
fn cmtime(saddr: &str, caddr: &str, port: u16, n: &str) -> String {
    let p = port.to_string();
    let srv = piped(&mut exec(
        saddr,
        &["cmtime", "-b", saddr, "-p", &p, "-c", n],
    ));
    listening(saddr, port);
    let cli = piped(&mut exec(
        caddr,
        &["cmtime", "-s", saddr, "-p", &p, "-c", n],
    ))
    .finish(Duration::from_secs(60));
    drop(srv);
    let c = text(&cli);
    assert!(cli.status.success() && c.contains("connect      :"), "{c}");
    c
}

/// qperf's twelve RC tests with `-cm1` (connections made by rdma_cm; its server forks a
/// process per test, which tells the client its port before it listens, and exits
/// without `rdma_disconnect`), the server on `saddr`'s device and the client on
/// `caddr`'s; `lp` is the TCP port of qperf's own control connection.
fn qperf_cm(saddr: &str, caddr: &str, lp: u16) {
    const TESTS: [&str; 12] = [
        "rc_bi_bw",
        "rc_bw",
        "rc_lat",
        "rc_rdma_read_bw",
        "rc_rdma_read_lat",
        "rc_rdma_write_bw",
        "rc_rdma_write_lat",
        "rc_rdma_write_poll_lat",
        "rc_compare_swap_mr",
        "rc_fetch_add_mr",
        "ver_rc_compare_swap",
        "ver_rc_fetch_add",
    ];
    let lp = lp.to_string();
    let srv = piped(&mut exec(saddr, &["qperf", "-lp", &lp]));
    let end = Instant::now() + Duration::from_secs(20);
    let at: std::net::SocketAddr = format!("{saddr}:{lp}").parse().unwrap();
    while std::net::TcpStream::connect_timeout(&at, Duration::from_millis(100)).is_err() {
        assert!(Instant::now() < end, "qperf's server did not come up");
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut args = vec!["qperf", "-lp", &lp, "-cm1", "-t", "1", saddr];
    args.extend(TESTS);
    let cli = piped(&mut exec(caddr, &args)).finish(Duration::from_secs(120));
    drop(srv);
    let c = text(&cli);
    assert!(cli.status.success(), "{c}");
    for t in TESTS {
        assert!(c.contains(&format!("{t}:")), "{t} missing:\n{c}");
    }
    // Each test printed its figure: a bandwidth, a latency or a message rate.
    assert_eq!(c.matches(" = ").count(), 12, "{c}");
}

/// Two processes on one device (one GID, one port 4791, one QP1): each runs its own CM
/// agent, and the process that reads the port forwards each MAD to the agent it names.
/// `softrdma rping` both ways round (the server owning the device, then a third process,
/// `softrdma service`, owning it and both ends members); a second listener on the same
/// port is refused; a REQ for a port nobody listens on is rejected at once by the
/// service's agent.
#[test]
fn rping_between_two_processes_on_one_shared_device() {
    let addr = "127.0.3.21";
    let rping = |port: u16, n: &str| {
        piped(&mut softrdma(
            addr,
            &rping_client(n, "1000", addr, &port.to_string()),
        ))
        .finish(Duration::from_secs(60))
    };
    // The server owns the device; the client is its member.
    let srv = server(addr, "7450", "1000");
    listening(addr, 7450);
    // Another process of the device cannot listen on the port too.
    let again = softrdma(addr, &["rping", "-s", "-C", "1", "-p", "7450"])
        .output()
        .unwrap();
    assert!(
        !again.status.success() && text(&again).contains("listens on port 7450 already"),
        "{}",
        text(&again)
    );
    let cli = rping(7450, "20");
    let srv = srv.finish(Duration::from_secs(60));
    assert_pinged(&cli, &srv, 20);
    assert!(srv.status.success(), "{}", text(&srv));

    // Now a service owns the device, and both ends are its members.
    let svc = Service::start(addr);
    let srv = server(addr, "7451", "1000");
    listening(addr, 7451);
    let cli = rping(7451, "5");
    let srv = srv.finish(Duration::from_secs(60));
    assert_pinged(&cli, &srv, 5);
    // Nobody listens on 7452: the service's agent rejects, no timeout is waited for.
    let t = Instant::now();
    let cli = rping(7452, "1");
    assert!(
        !cli.status.success() && text(&cli).contains("Rejected { reason: 8 }"),
        "{}",
        text(&cli)
    );
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    drop(svc);
}

/// A REQ that reaches a shared device before anyone listens on its port (qperf's server
/// tells its client the port before it listens) waits in the owner, and is handed to the
/// member that listens on the port the moment it does: the owner (`softrdma service`)
/// logs the REQ waiting, only then does the rping server start, and the owner logs the
/// hand-over; the client, started first, gets its pings through.
#[test]
fn a_req_that_comes_before_its_listener_is_handed_to_it() {
    let addr = "127.0.3.22";
    let svc = Service::start(addr);
    let cli = piped(&mut softrdma(
        addr,
        &[
            "rping", "-c", "-v", "-V", "-C", "5", "-a", addr, "-p", "7453",
        ],
    ));
    let held = svc.wait_for("waits for a listener");
    // The IP CM's service ID for TCP port 7453 (IBTA A11: prefix, port space, port).
    assert!(held.contains("service 0x1061d1d,"), "{held}");
    let srv = piped(&mut softrdma(
        addr,
        &["rping", "-s", "-v", "-C", "5", "-p", "7453"],
    ));
    let handed = svc.wait_for("handed to its new listener");
    assert!(handed.ends_with(": true"), "{handed}");
    let cli = cli.finish(Duration::from_secs(60));
    let srv = srv.finish(Duration::from_secs(60));
    assert_pinged(&cli, &srv, 5);
}

/// Unmodified rping, ucmatose, udaddy, rdma_server/rdma_client, qperf `-cm1` (its twelve
/// RC tests), cmtime (200 connections at once) and perftest with `-R`
/// (which listens again on its port right after its first connection), server and client
/// on one shared device through the drop-in.
#[test]
fn unmodified_rdma_cm_programs_share_one_device() {
    if !have_all(&["rping", "ib_send_bw", "qperf"]) {
        return;
    }
    let on = |n: u8, server: &[&str], client: &[&str], port: u16| {
        let a = format!("127.0.3.{n}");
        dropin_pair_on(&a, &a, server, client, port)
    };
    rdma_cm_programs(on, 31, 7460, &[]);
    qperf_cm("127.0.3.39", "127.0.3.39", 19871);
    for (i, t) in ["ib_write_bw", "ib_send_lat", "ib_atomic_bw"]
        .iter()
        .enumerate()
    {
        let port = 7462 + i as u16;
        let (c, _) = on(
            35 + i as u8,
            &[t, "-R", "-n", "50", "-p", &port.to_string()],
            &[t, "-R", "-n", "50", "-p", &port.to_string(), "ADDR"],
            port,
        );
        assert!(c.contains("#bytes"), "{t}: {c}");
    }
    let c = cmtime("127.0.3.38", "127.0.3.38", 7466, "200");
    // No REQ or REP waited for a resend (half a second): the burst of 200 fits QP1's
    // receive queue and the forwarding.
    let max_ms: f64 = c
        .lines()
        .find(|l| l.starts_with("connect "))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::MAX);
    assert!(max_ms < 500.0, "{c}");
}

/// A client killed (`kill -9`) after its REQ: the server accepts, its REP is never
/// answered, and its ID gets UNREACHABLE once the REP's resends run out (the REQ's
/// response timeout and retry count), never a hang.
#[test]
fn a_client_killed_mid_handshake_leaves_the_server_a_timeout() {
    use softrdma::cm::{CmEventKind, CmId, ConnParam, EventChannel, PortSpace};
    use softrdma::{Context, Mtu, QpInitAttr, QpType};
    let sctx = Context::open_addr("s", "127.0.0.95".parse().unwrap(), Mtu::M1024).unwrap();
    let chan = EventChannel::new().unwrap();
    let listener = CmId::new(&chan, &sctx, PortSpace::Tcp).unwrap();
    listener
        .bind_addr("127.0.0.95:7405".parse().unwrap())
        .unwrap();
    listener.listen(1).unwrap();
    let cli = Running::new(
        softrdma(
            "127.0.0.96",
            &["rping", "-c", "-C", "1", "-a", "127.0.0.95", "-p", "7405"],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap(),
    );
    let req = chan
        .get_event(Some(Duration::from_secs(20)))
        .expect("the REQ");
    assert_eq!(req.kind, CmEventKind::ConnectRequest);
    let _ = Command::new("kill")
        .arg("-9")
        .arg(cli.pid.to_string())
        .status();
    drop(cli);
    let pd = sctx.alloc_pd();
    let cq = sctx.create_cq(8, None).unwrap();
    req.id
        .create_qp(&pd, QpInitAttr::new(QpType::Rc, &cq))
        .unwrap();
    let t = Instant::now();
    req.id.accept(&ConnParam::default()).unwrap();
    let ev = chan
        .get_event(Some(Duration::from_secs(10)))
        .expect("an event");
    assert_eq!(ev.kind, CmEventKind::Unreachable, "{ev:?}");
    // rping's REQ allows 7 sends of the REP, 539 ms apart.
    assert!(t.elapsed() < Duration::from_secs(6), "{:?}", t.elapsed());
}

/// rdma_cm over IPv6 loopback, which rxe cannot do ("No such device"): softrdma's rping
/// and rdma-core's unmodified rping and udaddy (through the drop-in), server and client
/// on `::1`'s one device.
#[test]
fn rdma_cm_works_on_ipv6_loopback() {
    let srv = piped(&mut softrdma(
        "::1",
        &["rping", "-s", "-V", "-a", "::1", "-p", "7480"],
    ));
    let line = listening("::1", 7480);
    assert!(line.contains("::1"), "{line}");
    let cli = piped(&mut softrdma(
        "::1",
        &[
            "rping", "-c", "-v", "-V", "-C", "10", "-a", "::1", "-p", "7480",
        ],
    ))
    .finish(Duration::from_secs(60));
    let srv = srv.finish(Duration::from_secs(60));
    assert_pinged(&cli, &srv, 10);
    assert!(srv.status.success(), "{}", text(&srv));

    if !have_all(&["rping", "udaddy"]) {
        return;
    }
    let (c, _) = dropin_pair_on(
        "::1",
        "::1",
        &["rping", "-s", "-V", "-C", "10", "-a", "::1", "-p", "7481"],
        &[
            "rping", "-c", "-v", "-V", "-C", "10", "-a", "::1", "-p", "7481",
        ],
        7481,
    );
    assert_eq!(c.matches("ping data: rdma-ping-").count(), 10, "{c}");
    both_say(
        dropin_pair_on(
            "::1",
            "::1",
            // udaddy's port is fixed (its -p is the port space).
            &["udaddy", "-b", "::1"],
            &["udaddy", "-s", "::1"],
            7174,
        ),
        "test complete",
        "test complete",
    );
}

/// `rdma_resolve_addr` with no source takes the device on the kernel's route to the
/// destination, not the first one: the client's first device is on `::1`, and rping's
/// IPv4 destination goes out on `lo`, where its second device (127.0.3.2) is.
#[test]
fn resolve_addr_without_a_source_takes_the_device_on_the_route() {
    if !have_all(&["rping"]) {
        return;
    }
    let conf = DeviceConfig::new("route", "sr6 addr ::1\nsr4 addr 127.0.3.2\n");
    let (to, port) = ("127.0.3.1", "7490");
    let srv = piped(&mut exec(
        to,
        &["rping", "-s", "-V", "-C", "5", "-a", to, "-p", port],
    ));
    listening(to, 7490);
    let mut c = exec(
        "unused",
        &["rping", "-c", "-v", "-V", "-C", "5", "-a", to, "-p", port],
    );
    let cli = piped(conf.apply(&mut c)).finish(Duration::from_secs(60));
    let srv = srv.finish(Duration::from_secs(60));
    assert_pinged(&cli, &srv, 5);
    assert!(srv.status.success(), "{}", text(&srv));

    // With no device on the route (only an IPv6 one), the resolve fails at once with the
    // kernel's ENODEV; a source of the other family given explicitly gets ENETUNREACH.
    // Neither leaves the client to wait for UNREACHABLE.
    for (extra, says, errno) in [
        (
            &[][..],
            "no softrdma device is on the kernel's route to 127.0.3.1",
            "No such device",
        ),
        (
            &["-I", "::1"][..],
            "cannot reach 127.0.3.1",
            "Network is unreachable",
        ),
    ] {
        let started = Instant::now();
        let mut args = vec!["rping", "-c", "-C", "1", "-a", "127.0.3.1", "-p", "7491"];
        args.extend(extra);
        let cli =
            piped(exec("::1", &args).env("SOFTRDMA_DEBUG", "1")).finish(Duration::from_secs(30));
        assert!(!cli.status.success(), "{}", text(&cli));
        assert!(
            text(&cli).contains(says) && text(&cli).contains(errno),
            "{}",
            text(&cli)
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
    }
}

/// rdma-core's mckey, unmodified, through the drop-in: two receiving processes on two
/// devices (the first with two IDs, so two QPs of one device are members) join an IPv4
/// group through `rdma_join_multicast`, and a third process joins it and sends ten
/// messages to it, which each receiving ID must get. In a network namespace of its own
/// (util-linux's unshare, as a user namespace's root when the test is not root), so that
/// the group's traffic, though it never leaves loopback, touches nothing of the host's.
#[test]
fn mckey_joins_a_group_and_every_member_receives() {
    if !have_all(&["mckey", "unshare", "stdbuf"]) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("softrdma-mckey-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Receivers first; the sender starts once both printed their join (mckey then waits
    // 3 s before it sends, for a subnet manager).
    let script = r#"
        ip link set lo up || exit 3
        S="$0"; D="$1"; G=239.49.1.1
        SOFTRDMA_ADDR=127.0.49.5 "$S" exec -- stdbuf -oL mckey -m $G -b 127.0.49.5 -c 2 -C 10 > "$D/r1" 2>&1 &
        r1=$!
        SOFTRDMA_ADDR=127.0.49.6 "$S" exec -- stdbuf -oL mckey -m $G -b 127.0.49.6 -C 10 > "$D/r2" 2>&1 &
        r2=$!
        i=0
        until [ "$(grep -c joined "$D/r1")" = 2 ] && grep -q joined "$D/r2"; do
            i=$((i + 1)); [ $i -gt 600 ] && exit 4; sleep 0.05
        done
        SOFTRDMA_ADDR=127.0.49.7 "$S" exec -- mckey -m $G -b 127.0.49.7 -s -C 10 > "$D/s" 2>&1 || exit 5
        wait $r1 || exit 6
        wait $r2 || exit 7
    "#;
    let mut c = Command::new("unshare");
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        c.arg("-r");
    }
    c.args(["--net", "--", "sh", "-c", script])
        .arg(env!("CARGO_BIN_EXE_softrdma"))
        .arg(&dir)
        .env_remove("SOFTRDMA_ADDR");
    let o = piped(&mut c).finish(Duration::from_secs(60));
    let log = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
    let (r1, r2, s) = (log("r1"), log("r2"), log("s"));
    let _ = std::fs::remove_dir_all(&dir);
    let all = format!("{}\nr1:\n{r1}\nr2:\n{r2}\nsender:\n{s}", text(&o));
    assert!(o.status.success(), "{all}");
    for r in [&r1, &r2, &s] {
        assert!(
            r.contains("joined dgid: ::ffff:239.49.1.1")
                && r.contains("data transfers complete")
                && r.contains("return status 0"),
            "{all}"
        );
    }
}

/// A listener bound to the any-address listens on every device of the process, as
/// rdma_cm's does: the server's config names two devices, `res show cm_id` shows a
/// listener on each, and rdma-core's ucmatose, unmodified, serves one client that connects
/// to the first device's address and one that connects to the second's.
#[test]
fn a_wildcard_listener_takes_requests_on_every_device() {
    if !have_all(&["ucmatose"]) {
        return;
    }
    let conf = DeviceConfig::new("any", "sa0 addr 127.0.6.1\nsa1 addr 127.0.6.2\n");
    let mut s = exec("unused", &["ucmatose", "-c", "2", "-C", "5", "-p", "7496"]);
    let srv = piped(conf.apply(&mut s));
    let res_show = || {
        let mut c = softrdma("unused", &["res", "show", "cm_id"]);
        conf.apply(&mut c);
        c
    };
    listening_on(res_show, "src-addr 127.0.6.1:7496 ");
    listening_on(res_show, "src-addr 127.0.6.2:7496 ");
    let clients: Vec<Running> = [("127.0.6.3", "127.0.6.1"), ("127.0.6.4", "127.0.6.2")]
        .iter()
        .map(|(me, to)| {
            piped(&mut exec(
                me,
                &["ucmatose", "-s", to, "-c", "1", "-C", "5", "-p", "7496"],
            ))
        })
        .collect();
    let outs: Vec<Output> = clients
        .into_iter()
        .map(|c| c.finish(Duration::from_secs(60)))
        .collect();
    let srv = srv.finish(Duration::from_secs(60));
    for o in outs.iter().chain([&srv]) {
        assert!(
            o.status.success() && text(o).contains("return status 0"),
            "{}\nserver:\n{}",
            text(o),
            text(&srv)
        );
    }
}
