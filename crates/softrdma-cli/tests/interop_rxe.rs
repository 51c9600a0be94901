//! Interoperability with real Linux Soft-RoCE: `softrdma {rc,uc,ud}-pingpong` against
//! `ibv_{rc,uc,ud}_pingpong` of rdma-core 44, and `softrdma perf` against perftest 4.5's
//! `ib_write_bw`, `ib_read_lat`, `ib_send_lat` and `ib_atomic_lat`, in a VM running kernel rxe,
//! in both directions, over RoCE v2 on IPv4 at path MTU 1024 (pingpongs with `-c`). One exchange is captured on the bridge and
//! must pass `softrdma pcap verify` (every ICRC, ours and rxe's) and tshark. The connection
//! manager's clients (rping, ucmatose, udaddy, rdma_server/client, perftest `-R`, cmtime,
//! qperf `-cm1` and mckey) run through the drop-in against the same programs in the VM,
//! both ways; those the image lacks run there from its 9p share. A bridge capture of
//! perftest `-R -T` checks that both stacks' packets carry the ID's TOS.
//!
//! It needs root, qemu and the rxe-peer scripts (`../shared/rxe-peer`, or
//! `$SOFTRDMA_RXE_PEER`), boots one VM in a network namespace it creates (10.77.0.0/24, nothing
//! routed), and takes one to two minutes. `.ci/run` runs it: `cargo test -p softrdma-cli --test
//! interop_rxe -- --ignored`.

mod common;

use common::{drain, spawn, text, wait_for};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const VM_IP: &str = "10.77.0.2";
const HOST_IP: &str = "10.77.0.1";

fn peer_dir() -> PathBuf {
    std::env::var_os("SOFTRDMA_RXE_PEER")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/rxe-peer")
        })
}

/// Runs a command with a time limit; returns its output.
fn run(cmd: &mut Command, limit: Duration) -> Output {
    let what = format!("{cmd:?}");
    wait_for(spawn(cmd), &what, limit)
}

struct Vm {
    dir: PathBuf,
}

impl Vm {
    fn script(&self, name: &str) -> Command {
        let mut c = Command::new(self.dir.join(name));
        c.env("RXE_PEER_DIR", "/tmp/softrdma-rxe-peer");
        c
    }

    fn exec(&self, cmd: &str) -> Output {
        run(
            self.script("vmexec.sh")
                .env("TIMEOUT", "90")
                .arg("vm1")
                .arg(cmd),
            Duration::from_secs(100),
        )
    }

    fn exec_ok(&self, cmd: &str) -> String {
        let o = self.exec(cmd);
        assert!(o.status.success(), "in the VM: {cmd}\n{}", text(&o));
        text(&o)
    }

    /// Copies the host's `/usr/bin/NAME` into the VM's 9p share (`/host`), for a program
    /// the image lacks (cmtime, mckey, qperf): Debian 12's binaries, whose libraries the
    /// image has for rping's sake. Gives its path in the VM.
    fn share(&self, name: &str) -> String {
        let dst = PathBuf::from("/tmp/softrdma-rxe-peer/run/vm1/share").join(name);
        std::fs::copy(PathBuf::from("/usr/bin").join(name), &dst)
            .unwrap_or_else(|e| panic!("/usr/bin/{name} to {}: {e}", dst.display()));
        format!("/host/{name}")
    }

    /// Waits for the VM's background program that wrote `/tmp/TAG.pid` to end, and gives
    /// what it logged to `/tmp/TAG.log`.
    fn finished(&self, tag: &str) -> String {
        self.exec_ok(&format!(
            "while kill -0 $(cat /tmp/{tag}.pid) 2>/dev/null; do sleep 0.1; done; cat /tmp/{tag}.log"
        ))
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        let _ = run(
            self.script("stop-vm.sh").args(["all", "--netns"]),
            Duration::from_secs(60),
        );
    }
}

/// `softrdma` inside the namespace, on `addr` of the bridge, with extra environment.
fn ours(addr: &str, env: &[(&str, &str)], args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", "rxepeer", "env"])
        .arg(format!("SOFTRDMA_ADDR={addr}"));
    for (k, v) in env {
        c.arg(format!("{k}={v}"));
    }
    c.arg(env!("CARGO_BIN_EXE_softrdma")).args(args);
    c
}

/// Waits until something in the namespace listens on TCP `port` (the softrdma servers), so
/// that the client in the VM is started only once it can connect.
fn wait_listen(port: u16) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let o = run(
            Command::new("ip").args([
                "netns",
                "exec",
                "rxepeer",
                "ss",
                "-Hltn",
                &format!("sport = :{port}"),
            ]),
            Duration::from_secs(10),
        );
        if !String::from_utf8_lossy(&o.stdout).trim().is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "nothing listens on port {port} after 30 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `softrdma perf <test>` against perftest's `ib_<test>` in the VM, both ways, with the same
/// flags; both sides must finish, and the measuring side must print its table.
fn perf_case(vm: &Vm, test: &str, flags: &[&str]) {
    perf_case_env(vm, test, flags, &[]);
}

/// [`perf_case`] with extra environment for softrdma (`SOFTRDMA_FAULTS`, say).
fn perf_case_env(vm: &Vm, test: &str, flags: &[&str], env: &[(&str, &str)]) {
    let ib = format!(
        "ib_{} -d rxe0 -x 1 -F {}",
        test.replace('-', "_"),
        flags.join(" ")
    );
    let table = if test.ends_with("-bw") {
        " #bytes     #iterations    BW peak[MB/sec]"
    } else {
        " #bytes #iterations    t_min[usec]"
    };
    let mut args = vec!["perf", test, "-x", "1", "--json"];
    args.extend(flags);

    // perftest serves, softrdma connects.
    vm.exec_ok(&format!(
        "{ib} > /tmp/perf.log 2>&1 & echo $! > /tmp/perf.pid"
    ));
    vm.exec_ok("waitport 18515");
    let mut cli_args = args.clone();
    cli_args.push(VM_IP);
    let o = run(&mut ours(HOST_IP, env, &cli_args), Duration::from_secs(90));
    let srv = vm.finished("perf");
    let out = text(&o);
    assert!(
        o.status.success(),
        "softrdma perf {test} -> perftest:\n{out}\nperftest:\n{srv}"
    );
    assert!(
        out.contains(table) && out.contains("\"results\":[{"),
        "{out}"
    );
    if test.ends_with("-bw") {
        assert!(srv.contains(table), "perftest server:\n{srv}");
    }
    assert!(
        !srv.contains("Failed") && !srv.contains("Couldn't"),
        "{srv}"
    );

    // softrdma serves, perftest connects.
    let server = drain(spawn(&mut ours(HOST_IP, env, &args)));
    wait_listen(18515);
    let cli = vm.exec(&format!("{ib} {HOST_IP}"));
    let srv = server.wait("softrdma perf server", Duration::from_secs(60));
    let (c, s) = (text(&cli), text(&srv));
    assert!(
        cli.status.success() && srv.status.success(),
        "perftest {test} -> softrdma perf:\n{c}\nsoftrdma:\n{s}"
    );
    assert!(c.contains(table), "{c}");
    if test.ends_with("-bw") {
        assert!(s.contains(table) && s.contains("\"results\":[{"), "{s}");
    }
    eprintln!("ok: perf {test} {flags:?} {env:?} both ways with perftest");
}

/// One pingpong both ways at one size. `gid` 1 is RoCE v2 over IPv4; 0 over IPv6 link-local.
struct Case<'a> {
    t: &'a str,
    size: usize,
    gid: &'a str,
    addr: &'a str,
    env: &'a [(&'a str, &'a str)],
    iters: &'a str,
}

/// Runs one case both ways; returns what softrdma's client printed.
fn case(vm: &Vm, c: Case<'_>) -> String {
    let Case {
        t,
        size,
        gid,
        addr,
        env,
        iters,
    } = c;
    let s = size.to_string();
    let mut flags = vec!["-g", gid, "-n", iters, "-s", &s, "-c"];
    if t != "ud" {
        flags.extend(["-m", "1024"]);
    }
    let ibv = format!("ibv_{t}_pingpong -d rxe0 {}", flags.join(" "));
    let cmd = format!("{t}-pingpong");

    // rxe serves, softrdma connects.
    vm.exec_ok(&format!(
        "{ibv} > /tmp/srv.log 2>&1 & echo $! > /tmp/srv.pid"
    ));
    vm.exec_ok("waitport 18515");
    let mut args = vec![cmd.as_str(), "--timeout", "60"];
    args.extend(&flags);
    args.push(VM_IP);
    let o = run(&mut ours(addr, env, &args), Duration::from_secs(90));
    assert!(
        o.status.success(),
        "softrdma {t} client -> rxe, {size} B:\n{}",
        text(&o)
    );
    let client = text(&o);
    assert!(client.contains(&format!("{iters} iters in")));
    let srv = vm.exec_ok("sleep 1; cat /tmp/srv.log");
    assert!(
        srv.contains(&format!("{iters} iters in")),
        "rxe server, {t} {size} B:\n{srv}"
    );
    assert!(
        !srv.contains("invalid data"),
        "rxe validated our data:\n{srv}"
    );

    // softrdma serves, rxe connects.
    let mut args = vec![cmd.as_str(), "--timeout", "60"];
    args.extend(&flags);
    let server = spawn(&mut ours(addr, &[], &args));
    wait_listen(18515);
    // Bounded below the transport's 90 s: with retry_cnt 7 rxe retries for ever.
    let cli = vm.exec(&format!("timeout 70 {ibv} {HOST_IP}"));
    let srv = server.wait_with_output().unwrap();
    assert!(
        cli.status.success(),
        "rxe {t} client -> softrdma, {size} B:\n{}\nserver:\n{}\nrxe's counters:\n{}",
        text(&cli),
        text(&srv),
        text(&vm.exec("grep . /sys/class/infiniband/rxe0/ports/1/hw_counters/*"))
    );
    assert!(
        srv.status.success(),
        "softrdma {t} server, {size} B:\n{}",
        text(&srv)
    );
    assert!(text(&srv).contains(&format!("{iters} iters in")));
    eprintln!("ok: {t} {size} B both ways (GID {gid})");
    client
}

/// A counter from the `QpCounters` line that `SOFTRDMA_DEBUG=1` makes rc-pingpong print.
fn qp_counter(out: &str, name: &str) -> u64 {
    let at = out
        .find(&format!("{name}: "))
        .unwrap_or_else(|| panic!("no {name} in {out}"));
    out[at + name.len() + 2..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{name} is not a number in {out}"))
}

#[test]
#[ignore = "needs root, qemu and ../shared/rxe-peer; run by .ci/run"]
fn pingpong_with_linux_rxe() {
    let dir = peer_dir();
    assert!(
        dir.join("run-vm.sh").exists(),
        "rxe-peer scripts not found at {}",
        dir.display()
    );
    let id = run(Command::new("id").arg("-u"), Duration::from_secs(5));
    assert_eq!(
        String::from_utf8_lossy(&id.stdout).trim(),
        "0",
        "this test needs root"
    );
    let vm = Vm { dir };
    let o = run(
        vm.script("build-vm.sh").arg("--quiet"),
        Duration::from_secs(600),
    );
    assert!(o.status.success(), "build-vm.sh:\n{}", text(&o));
    let o = run(
        vm.script("run-vm.sh").args(["vm1", VM_IP]),
        Duration::from_secs(240),
    );
    assert!(o.status.success(), "run-vm.sh:\n{}", text(&o));

    let v4 = |t, size| Case {
        t,
        size,
        gid: "1",
        addr: HOST_IP,
        env: &[],
        iters: "5",
    };
    // One exchange captured by softrdma itself (SOFTRDMA_PCAP) must verify, ICRCs and all,
    // and tshark must read it. Again with UDP GSO toward rxe (SOFTRDMA_GSO=always; by
    // default only loopback gets it): each message's 4 packets leave in one send, which the
    // kernel splits on the way to the bridge, numbering the segments' IPv4 IDs; rxe must
    // accept every segment the first time.
    let pcap = "/tmp/softrdma-interop-rc.pcap";
    let pcap_gso = "/tmp/softrdma-interop-rc-gso.pcap";
    for (file, gso) in [(pcap, "auto"), (pcap_gso, "always")] {
        let _ = std::fs::remove_file(file);
        let client = case(
            &vm,
            Case {
                env: &[
                    ("SOFTRDMA_PCAP", file),
                    ("SOFTRDMA_GSO", gso),
                    ("SOFTRDMA_DEBUG", "1"),
                ],
                ..v4("rc", 4096)
            },
        );
        let o = run(
            Command::new(env!("CARGO_BIN_EXE_softrdma")).args(["pcap", "verify", file]),
            Duration::from_secs(30),
        );
        let line = text(&o);
        assert!(o.status.success(), "{line}");
        // 5 iterations of 4 SEND packets and an ACK each way is 50 packets, and softrdma's
        // QP sends one farewell ACK as it is destroyed: no loss, no retransmission. rxe in
        // its emulated VM may take milliseconds to ACK, so a tail-loss probe may go out:
        // each adds itself and rxe's answer, and is all that was sent again.
        let counter = |n| qp_counter(&client, n);
        assert_eq!(
            (counter("timeouts"), counter("seq_naks_rcvd")),
            (0, 0),
            "rxe took every packet the first time: {client}"
        );
        let probes = counter("probes");
        assert!(counter("retransmits") <= probes, "{client}");
        let n = 51 + 2 * probes;
        assert!(
            line.contains(&format!(
                ": {n} RoCE packets, {n} ICRC ok, 0 ICRC bad, 0 malformed"
            )),
            "SOFTRDMA_GSO={gso}, {probes} probes: {line}"
        );
        eprintln!("SOFTRDMA_GSO={gso}: {line}");
    }
    // GSO from the connected sockets (no capture), whose IPv4 IDs softrdma predicts and
    // patches into each segment's ICRC: a wrong ID would make rxe drop the segment, and
    // every retransmission with it, until the retries ran out.
    for size in [4096, 65536] {
        case(
            &vm,
            Case {
                env: &[("SOFTRDMA_GSO", "always")],
                ..v4("rc", size)
            },
        );
    }
    if Command::new("tshark").arg("-v").output().is_ok() {
        let t = run(
            Command::new("tshark").args(["-r", pcap]),
            Duration::from_secs(60),
        );
        assert!(
            t.status.success() && text(&t).contains("RC Send"),
            "{}",
            text(&t)
        );
    }

    for t in ["rc", "uc"] {
        for size in [64, 4096, 65536] {
            case(&vm, v4(t, size));
        }
    }
    for size in [64, 1024] {
        case(&vm, v4("ud", size));
    }

    // RoCE v2 over IPv6: the bridge's link-local address, with its scope.
    let o = run(
        Command::new("ip").args([
            "netns", "exec", "rxepeer", "ip", "-6", "-o", "addr", "show", "dev", "br0", "scope",
            "link",
        ]),
        Duration::from_secs(10),
    );
    let ll = text(&o)
        .split_whitespace()
        .skip_while(|w| *w != "inet6")
        .nth(1)
        .and_then(|a| a.split('/').next())
        .map(str::to_owned)
        .expect("br0 has an IPv6 link-local address");
    for t in ["rc", "uc"] {
        case(
            &vm,
            Case {
                t,
                size: 4096,
                gid: "0",
                addr: &ll,
                env: &[],
                iters: "5",
            },
        );
    }

    // perftest 4.5: the out-of-band exchange, the handshakes and the traffic of each test.
    perf_case(&vm, "write-bw", &["-n", "20", "-s", "16384"]);
    perf_case(&vm, "write-bw", &["-n", "10", "-s", "4096", "-q", "2"]);
    perf_case(&vm, "write-bw", &["-n", "10", "-s", "4096", "-b"]);
    perf_case(&vm, "read-lat", &["-n", "20", "-s", "64"]);
    perf_case(&vm, "send-lat", &["-n", "20", "-s", "64"]);
    perf_case(&vm, "atomic-lat", &["-n", "20"]);
    perf_case(&vm, "write-lat", &["-n", "20", "-s", "64"]);
    perf_case(&vm, "read-bw", &["-n", "20", "-s", "16384"]);
    perf_case(&vm, "send-bw", &["-n", "20", "-s", "4096"]);
    perf_case(&vm, "send-bw", &["-n", "20", "-s", "4096", "-b"]);
    perf_case(&vm, "atomic-bw", &["-n", "20"]);

    // Loss on softrdma's side (2 % of what it sends, requests and responses alike): rxe
    // must take our go-back-N passes and tail-loss probes (duplicates to it) and answer
    // them, and every exchange must complete, the pingpong's data checked at both ends.
    let lossy = [("SOFTRDMA_FAULTS", "drop=0.02")];
    case(
        &vm,
        Case {
            env: &lossy,
            iters: "50",
            ..v4("rc", 65536)
        },
    );
    perf_case_env(&vm, "write-bw", &["-n", "200", "-s", "65536"], &lossy);
    perf_case_env(&vm, "read-bw", &["-n", "200", "-s", "65536"], &lossy);

    two_local_processes_at_once(&vm);

    // The connection manager: IB CM MADs on QP1 between softrdma's `rping` and rdma-core's
    // over the kernel's rdma_cm, both ways, data checked (`-V`) at 64 B and 64 KiB.
    for size in ["64", "65000"] {
        rping_case(&vm, size);
    }
    // Unmodified rdmacm-utils and perftest through the drop-in librdmacm against the same
    // binaries over the kernel's rdma_cm, both ways.
    cm_dropin_case(
        &vm,
        "ucmatose -b {me} -p 7180 -c 2 -C 10",
        "ucmatose -s {peer} -p 7180 -c 2 -C 10",
        7180,
        "return status 0",
    );
    cm_dropin_case(
        &vm,
        "udaddy -b {me} -C 10",
        "udaddy -s {peer} -C 10",
        7174,
        "data transfers complete",
    );
    cm_dropin_case(
        &vm,
        "rdma_server -s {me} -p 7181",
        "rdma_client -s {peer} -p 7181",
        7181,
        "end 0",
    );
    cm_dropin_case(
        &vm,
        "ib_send_bw -R -n 20 -p 7182",
        "ib_send_bw -R -n 20 -p 7182 {peer}",
        7182,
        "#bytes",
    );
    cm_dropin_case(
        &vm,
        "ib_read_lat -R -n 20 -p 7183",
        "ib_read_lat -R -n 20 -p 7183 {peer}",
        7183,
        "#bytes",
    );
    // The other six perftest tools with -R.
    for (i, tool) in [
        "ib_send_lat",
        "ib_write_bw",
        "ib_write_lat",
        "ib_read_bw",
        "ib_atomic_bw",
        "ib_atomic_lat",
    ]
    .iter()
    .enumerate()
    {
        let port = 7194 + i as u16;
        cm_dropin_case(
            &vm,
            &format!("{tool} -R -n 20 -p {port}"),
            &format!("{tool} -R -n 20 -p {port} {{peer}}"),
            port,
            "#bytes",
        );
    }

    // RDMA_OPTION_ID_TOS (perftest's -T) both ways, seen on the wire.
    tos_case(&vm);

    // Programs the VM image lacks, run there from the share: cmtime's 1,000 connections,
    // qperf's twelve RC tests over rdma_cm, and mckey's multicast through
    // rdma_join_multicast, each both ways.
    cmtime_case(&vm);
    qperf_case(&vm);
    mckey_case(&vm);

    // Unmodified rdma-core and perftest binaries on the host through the drop-in
    // libibverbs (`softrdma exec`), against the same binaries on rxe, both ways.
    dropin_case(
        &vm,
        "ibv_rc_pingpong",
        "-g 1 -n 50 -s 4096 -c -m 1024",
        "50 iters in",
    );
    dropin_case(&vm, "ib_write_bw", "-x 1 -F -n 50 -s 65536", "BW average");
}

/// `softrdma rping` against rdma-core's `rping` in the VM, both ways, `-C 20 -S size`:
/// the REQ, REP, RTU, DREQ and DREP of each connection come from the kernel's CM on one
/// side and softrdma's on the other, and the READs and WRITEs of the pings follow.
fn rping_case(vm: &Vm, size: &str) {
    // rxe's rping as the client.
    let srv = drain(spawn(&mut ours(
        HOST_IP,
        &[],
        &["rping", "-s", "-v", "-S", size, "-p", "7174"],
    )));
    // rxe's client starts once `res show cm_id` shows the server listening: a REQ before
    // then would be rejected.
    wait_cm_listen(7174);
    let cli = vm.exec(&format!(
        "timeout 60 rping -c -v -V -C 20 -S {size} -a {HOST_IP} -p 7174"
    ));
    let srv = srv.wait("softrdma rping -s", Duration::from_secs(60));
    assert!(
        cli.status.success() && text(&cli).matches("ping data: rdma-ping-").count() == 20,
        "rxe rping -c -> softrdma, -S {size}:\n{}\nserver:\n{}",
        text(&cli),
        text(&srv)
    );
    assert!(srv.status.success(), "softrdma rping -s:\n{}", text(&srv));
    assert_eq!(
        text(&srv).matches("server ping data: rdma-ping-").count(),
        20,
        "{}",
        text(&srv)
    );

    // rxe's rping as the server.
    vm.exec_ok(&format!(
        "timeout 60 rping -s -v -S {size} -a {VM_IP} -p 7175 > /tmp/rping.log 2>&1 & echo $! > /tmp/rping.pid"
    ));
    vm.exec_ok("waitcm 7175");
    let cli = run(
        &mut ours(
            HOST_IP,
            &[],
            &[
                "rping", "-c", "-v", "-V", "-C", "20", "-S", size, "-a", VM_IP, "-p", "7175",
            ],
        ),
        Duration::from_secs(70),
    );
    let srv = vm.finished("rping");
    assert!(
        cli.status.success() && text(&cli).matches("ping data: rdma-ping-").count() == 20,
        "softrdma rping -c -> rxe, -S {size}:\n{}\nrxe's server:\n{srv}",
        text(&cli)
    );
    assert_eq!(
        srv.matches("server ping data: rdma-ping-").count(),
        20,
        "{srv}"
    );
    eprintln!("ok: rping -S {size} both ways");
}

/// The drop-in's client `what` against rxe's server (whose log is `srv`): it must succeed
/// and print `want`.
fn dropin_reached_rxe(what: &str, o: &Output, srv: &str, want: &str) {
    assert!(
        o.status.success() && text(o).contains(want),
        "drop-in {what} -> rxe ({:?}):\n{}\nrxe:\n{srv}",
        o.status,
        text(o)
    );
}

/// rxe's client `what` against the drop-in's server `srv`: both must succeed and the
/// client print `want`.
fn rxe_reached_dropin(what: &str, cli: &Output, srv: &Output, want: &str) {
    assert!(
        cli.status.success() && srv.status.success() && text(cli).contains(want),
        "rxe {what} -> drop-in:\n{}\ndrop-in:\n{}",
        text(cli),
        text(srv)
    );
}

/// An rdma_cm program through the drop-in on the host against the same program over the
/// kernel's rdma_cm in the VM, both ways: `server` and `client` are its command lines,
/// with `{me}` the side's own address and `{peer}` the other's; the server listens on
/// `port`; both must succeed and the client must print `want`.
fn cm_dropin_case(vm: &Vm, server: &str, client: &str, port: u16, want: &str) {
    let line = |t: &str, me: &str, peer: &str| t.replace("{me}", me).replace("{peer}", peer);
    let host = |cmd: String| {
        let mut a = vec!["exec".to_owned(), "--".to_owned()];
        a.extend(cmd.split_whitespace().map(str::to_owned));
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        ours(HOST_IP, &[], &a)
    };

    // rxe serves, the drop-in connects.
    vm.exec_ok(&format!(
        "timeout 60 {} > /tmp/cmsrv.log 2>&1 & echo $! > /tmp/cmsrv.pid",
        line(server, VM_IP, HOST_IP)
    ));
    vm.exec_ok(&format!("waitcm {port}"));
    let o = run(
        &mut host(line(client, HOST_IP, VM_IP)),
        Duration::from_secs(90),
    );
    let srv = vm.finished("cmsrv");
    dropin_reached_rxe(client, &o, &srv, want);

    // The drop-in serves, rxe connects.
    let server_proc = drain(spawn(&mut host(line(server, HOST_IP, VM_IP))));
    wait_cm_listen(port);
    let cli = vm.exec(&format!("timeout 60 {}", line(client, VM_IP, HOST_IP)));
    let srv = server_proc.wait(&format!("the drop-in's {server}"), Duration::from_secs(60));
    rxe_reached_dropin(client, &cli, &srv, want);
    eprintln!("ok: unmodified {server} / {client} through the drop-in, both ways with rxe");
}

/// A drop-in server on the host (`softrdma exec -- ARGS` on HOST_IP), killed when dropped.
struct HostServer(Option<std::process::Child>);

impl HostServer {
    fn start(args: &[&str], out: Stdio) -> Self {
        let mut a = vec!["exec", "--"];
        a.extend(args);
        Self(Some(
            ours(HOST_IP, &[], &a)
                .stdout(out)
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        ))
    }

    /// Its exit status, once it ends within `limit` (else it is killed, and the test fails).
    fn finish(mut self, limit: Duration) -> std::process::ExitStatus {
        let child = self.0.take().expect("started");
        wait_for(child, "the drop-in's server", limit).status
    }
}

impl Drop for HostServer {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// perftest's `ib_send_lat -R -T 104` both ways, captured on the bridge: the REQ carries
/// the TOS (0x68), and every data packet of both QPs, rxe's and the drop-in's, leaves with
/// it in its IP header, as the kernel's rdma_cm and rxe put it there.
///
/// One more attempt, on another port, if the first capture's QPs do not fit: in two of
/// the last stop's clean-clone runs one direction's 20 pings went over perftest's second
/// connection (the one made without `-T`), and its TOS QP carried 2 packets. Whether
/// perftest picks its connections by arrival order there, or the drop-in's CM delivers
/// the two requests out of order, is not known yet. The check itself is the same in both
/// attempts.
fn tos_case(vm: &Vm) {
    let Err(first) = tos_attempt(vm, 7202) else {
        return;
    };
    eprintln!("tos_case: a second attempt, after: {first}");
    if let Err(again) = tos_attempt(vm, 7203) {
        panic!("{again}\n(the first attempt: {first})");
    }
}

/// One capture of [`tos_case`] on `port`: `Err` with the packets by QP and TOS where the
/// test's QPs are not two per side, each with every packet at TOS 0x68.
fn tos_attempt(vm: &Vm, port: u16) -> Result<(), String> {
    let pcap = "/tmp/softrdma-interop-tos.pcap";
    let _ = std::fs::remove_file(pcap);
    let mut cap = Command::new("ip")
        .args([
            "netns", "exec", "rxepeer", "dumpcap", "-q", "-i", "br0", "-s", "96",
        ])
        .args(["-f", "udp port 4791", "-w", pcap])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("dumpcap (tshark's package) in the namespace");
    // dumpcap says "Capturing on" once it captures.
    let mut err = cap.stderr.take().unwrap();
    let mut seen = String::new();
    while !seen.contains("Capturing on") {
        let mut b = [0u8; 256];
        let n = std::io::Read::read(&mut err, &mut b).unwrap_or(0);
        assert!(n > 0, "dumpcap did not start: {seen}");
        seen.push_str(&String::from_utf8_lossy(&b[..n]));
    }
    cm_dropin_case(
        vm,
        &format!("ib_send_lat -R -T 104 -n 20 -p {port}"),
        &format!("ib_send_lat -R -T 104 -n 20 -p {port} {{peer}}"),
        port,
        "#bytes",
    );
    let _ = Command::new("kill").arg(cap.id().to_string()).status();
    let _ = cap.wait();
    // Data packets (not to QP1) by sender, destination QP and TOS. perftest's -R runs its
    // own exchange over a second rdma_cm connection, made without -T: its QPs send TOS 0.
    let o = run(
        Command::new("tshark").args([
            "-r",
            pcap,
            "-Y",
            "infiniband.bth.destqp != 1",
            "-T",
            "fields",
            "-e",
            "ip.src",
            "-e",
            "infiniband.bth.destqp",
            "-e",
            "ip.dsfield",
        ]),
        Duration::from_secs(60),
    );
    let mut by: std::collections::BTreeMap<(String, String, String), usize> = Default::default();
    for l in text(&o).lines() {
        let f: Vec<&str> = l.split('\t').collect();
        if let [src, qp, tos] = f[..] {
            *by.entry((src.into(), qp.into(), tos.into())).or_default() += 1;
        }
    }
    for src in [HOST_IP, VM_IP] {
        // The test's QPs, one per direction's run: those whose packets carry 0x68; none
        // sent a packet with another TOS.
        let tested: Vec<_> = by
            .iter()
            .filter(|((s, _, t), n)| s == src && t == "0x68" && **n >= 20)
            .map(|((_, qp, _), _)| qp.clone())
            .collect();
        let other_tos = by
            .keys()
            .any(|(s, qp, t)| s == src && tested.contains(qp) && t != "0x68");
        if tested.len() != 2 || other_tos {
            return Err(format!(
                "{src}'s data packets by destination QP and TOS: {by:?}"
            ));
        }
    }
    eprintln!("ok: TOS 0x68 on every data packet both ways with rxe: {by:?}");
    Ok(())
}

/// rdma-core's cmtime, 1,000 connections made and torn down step by step, both ways: the
/// drop-in against the kernel's rdma_cm. Its server serves until it is stopped.
fn cmtime_case(vm: &Vm) {
    let cmtime = vm.share("cmtime");
    vm.exec_ok(&format!(
        "timeout 120 {cmtime} -b {VM_IP} -p 7185 -c 1000 > /tmp/cmt.log 2>&1 & \
         echo $! > /tmp/cmt.pid"
    ));
    vm.exec_ok("waitcm 7185");
    let o = run(
        &mut ours(
            HOST_IP,
            &[],
            &[
                "exec", "--", "cmtime", "-s", VM_IP, "-p", "7185", "-c", "1000",
            ],
        ),
        Duration::from_secs(120),
    );
    vm.exec("kill $(cat /tmp/cmt.pid)");
    assert!(
        o.status.success() && text(&o).contains("connect   "),
        "drop-in cmtime -> rxe: {}",
        text(&o)
    );
    eprintln!("drop-in cmtime -> rxe:\n{}", text(&o));

    let _srv = HostServer::start(
        &["cmtime", "-b", HOST_IP, "-p", "7186", "-c", "1000"],
        Stdio::null(),
    );
    wait_cm_listen(7186);
    let o = vm.exec(&format!("timeout 80 {cmtime} -s {HOST_IP} -p 7186 -c 1000"));
    assert!(
        o.status.success() && text(&o).contains("connect   "),
        "rxe cmtime -> drop-in: {}",
        text(&o)
    );
    eprintln!("rxe cmtime -> drop-in:\n{}", text(&o));
}

/// qperf `-cm1` with its twelve RC tests (atomics and their verified forms included),
/// both ways; each test makes its own rdma_cm connection.
fn qperf_case(vm: &Vm) {
    const TESTS: &str = "rc_bi_bw rc_bw rc_lat rc_rdma_read_bw rc_rdma_read_lat \
        rc_rdma_write_bw rc_rdma_write_lat rc_rdma_write_poll_lat rc_compare_swap_mr \
        rc_fetch_add_mr ver_rc_compare_swap ver_rc_fetch_add";
    let figures = |o: &Output| text(o).matches(" = ").count();
    let qperf = vm.share("qperf");
    vm.exec_ok(&format!(
        "timeout 120 {qperf} -lp 19790 > /tmp/qp.log 2>&1 & echo $! > /tmp/qp.pid; \
         waitport 19790"
    ));
    let mut args = vec![
        "exec", "--", "qperf", "-lp", "19790", "-cm1", "-t", "1", VM_IP,
    ];
    args.extend(TESTS.split_whitespace());
    let o = run(&mut ours(HOST_IP, &[], &args), Duration::from_secs(120));
    vm.exec("kill $(cat /tmp/qp.pid)");
    assert!(
        o.status.success() && figures(&o) == 12,
        "drop-in qperf -> rxe: {}",
        text(&o)
    );

    let _srv = HostServer::start(&["qperf", "-lp", "19791"], Stdio::null());
    wait_listen(19791);
    let o = vm.exec(&format!(
        "timeout 80 {qperf} -lp 19791 -cm1 -t 1 {HOST_IP} {TESTS}"
    ));
    assert!(
        o.status.success() && figures(&o) == 12,
        "rxe qperf -> drop-in: {}",
        text(&o)
    );
    eprintln!("ok: qperf -cm1, twelve RC tests, both ways with rxe");
}

/// rdma-core's mckey, both ways: a receiver joins an IPv4 group through
/// rdma_join_multicast (rxe's kernel rdma_cm, or the drop-in), and the other side joins it
/// and sends ten messages, which the receiver must get.
fn mckey_case(vm: &Vm) {
    let mckey = vm.share("mckey");
    let done = |t: &str| t.contains("data transfers complete") && t.contains("return status 0");
    // Joined once the kernel's rdma_cm has joined the IP group for it (mckey's own
    // output is buffered until it ends): 239.77.1.1 is 01014DEF in /proc/net/igmp.
    vm.exec_ok(&format!(
        "timeout 60 {mckey} -m 239.77.1.1 -b {VM_IP} -C 10 > /tmp/mk.log 2>&1 & \
         echo $! > /tmp/mk.pid; until grep -q 01014DEF /proc/net/igmp; do sleep 0.05; done"
    ));
    let o = run(
        &mut ours(
            HOST_IP,
            &[],
            &[
                "exec",
                "--",
                "mckey",
                "-m",
                "239.77.1.1",
                "-b",
                HOST_IP,
                "-s",
                "-C",
                "10",
            ],
        ),
        Duration::from_secs(60),
    );
    let rxe = vm.finished("mk");
    assert!(
        o.status.success() && done(&text(&o)) && done(&rxe),
        "drop-in mckey -> rxe:\n{}\nrxe:\n{rxe}",
        text(&o)
    );

    let log = std::env::temp_dir().join(format!("softrdma-mckey-{}", std::process::id()));
    let srv = HostServer::start(
        &[
            "stdbuf",
            "-oL",
            "mckey",
            "-m",
            "239.77.1.2",
            "-b",
            HOST_IP,
            "-C",
            "10",
        ],
        Stdio::from(std::fs::File::create(&log).unwrap()),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("joined")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the drop-in's mckey did not join"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = vm.exec(&format!(
        "timeout 60 {mckey} -m 239.77.1.2 -b {VM_IP} -s -C 10"
    ));
    let status = srv.finish(Duration::from_secs(60));
    let ours_log = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    assert!(
        status.success() && done(&ours_log) && o.status.success() && done(&text(&o)),
        "rxe mckey -> drop-in:\n{}\ndrop-in:\n{ours_log}",
        text(&o)
    );
    eprintln!("ok: mckey multicast through rdma_cm, both ways with rxe");
}

/// Waits until a softrdma process in the namespace listens on rdma_cm port `port`, as
/// `softrdma res show cm_id` shows it.
fn wait_cm_listen(port: u16) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let o = run(
            &mut ours(HOST_IP, &[], &["res", "show", "cm_id"]),
            Duration::from_secs(10),
        );
        let t = text(&o);
        if t.lines()
            .any(|l| l.contains("state LISTEN") && l.contains(&format!(":{port} ")))
        {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no rdma_cm listener on port {port} after 30 s: {t}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Two softrdma processes on the host share one device (`HOST_IP:4791`: the first owns it,
/// and the kernel steers the other's datagrams to it by QPN) and each runs an RC pingpong
/// with its own rxe process at the same time, data checked at both ends: rxe as the
/// servers, then as the clients. Steered, the owner forwards almost nothing.
fn two_local_processes_at_once(vm: &Vm) {
    let before = [counter("forwarded_pkts"), counter("rcvd_pkts")];
    let flags = ["-g", "1", "-n", "50", "-s", "4096", "-c", "-m", "1024"];
    let ibv = format!("ibv_rc_pingpong -d rxe0 {}", flags.join(" "));
    let ports = ["18515", "18516"];
    // rxe serves twice; two softrdma clients at once.
    for p in ports {
        vm.exec_ok(&format!(
            "{ibv} -p {p} > /tmp/srv{p}.log 2>&1 & echo $! > /tmp/srv{p}.pid"
        ));
        vm.exec_ok(&format!("waitport {p}"));
    }
    // softrdma's rc-pingpong on port `p`, a client of `peer` or a server.
    let pingpong = |p: &str, peer: Option<&str>| {
        let mut args = vec!["rc-pingpong", "--timeout", "60", "-p", p];
        args.extend(flags);
        args.extend(peer);
        spawn(&mut ours(HOST_IP, &[], &args))
    };
    let clients: Vec<_> = ports.iter().map(|p| pingpong(p, Some(VM_IP))).collect();
    for (c, p) in clients.into_iter().zip(ports) {
        let o = c.wait_with_output().unwrap();
        assert!(
            o.status.success() && text(&o).contains("50 iters in"),
            "softrdma client on port {p}, beside another:\n{}",
            text(&o)
        );
        let srv = vm.finished(&format!("srv{p}"));
        assert!(
            srv.contains("50 iters in"),
            "rxe server on port {p}:\n{srv}"
        );
    }
    // Two softrdma servers at once; rxe connects to each.
    let servers: Vec<_> = ports.iter().map(|p| pingpong(p, None)).collect();
    for p in ports {
        wait_listen(p.parse().unwrap());
        vm.exec_ok(&format!(
            "{ibv} -p {p} {HOST_IP} > /tmp/cli{p}.log 2>&1 & echo $! > /tmp/cli{p}.pid"
        ));
    }
    for (s, p) in servers.into_iter().zip(ports) {
        let o = s.wait_with_output().unwrap();
        let cli = vm.finished(&format!("cli{p}"));
        assert!(
            o.status.success() && text(&o).contains("50 iters in"),
            "softrdma server on port {p}, beside another:\n{}\nrxe client:\n{cli}",
            text(&o)
        );
        assert!(
            cli.contains("50 iters in"),
            "rxe client on port {p}:\n{cli}"
        );
    }
    let [forwarded, rcvd] = [
        counter("forwarded_pkts") - before[0],
        counter("rcvd_pkts") - before[1],
    ];
    assert!(
        rcvd > 200 && forwarded * 10 <= rcvd,
        "the owner forwarded {forwarded} of {rcvd} datagrams"
    );
    eprintln!(
        "ok: two softrdma processes on one device, each with rxe, both ways \
         ({forwarded} of {rcvd} datagrams forwarded)"
    );
}

/// Counter `name` of the host's device, summed over its processes, live and gone
/// (`softrdma link show -s`).
fn counter(name: &str) -> u64 {
    let o = run(
        &mut ours(HOST_IP, &[], &["link", "show", "-s"]),
        Duration::from_secs(30),
    );
    let out = text(&o);
    let line = out.lines().find(|l| l.contains(name)).unwrap_or_default();
    let words: Vec<&str> = line.split_whitespace().collect();
    words
        .iter()
        .position(|w| *w == name)
        .and_then(|at| words.get(at + 1)?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in:\n{out}"))
}

/// `PROGRAM FLAGS` on the host through `softrdma exec` against `PROGRAM FLAGS` on rxe in
/// the VM, each side serving once; both must finish and the client must print `want`.
fn dropin_case(vm: &Vm, program: &str, flags: &str, want: &str) {
    let host = |extra: Option<&str>| {
        let mut a = vec!["exec", "--", program, "-d", "softrdma0"];
        a.extend(flags.split_whitespace());
        a.extend(extra);
        ours(HOST_IP, &[], &a)
    };
    let rxe = format!("{program} -d rxe0 {flags}");

    // rxe serves, the drop-in connects.
    vm.exec_ok(&format!(
        "{rxe} > /tmp/dsrv.log 2>&1 & echo $! > /tmp/dsrv.pid"
    ));
    vm.exec_ok("waitport 18515");
    let o = run(&mut host(Some(VM_IP)), Duration::from_secs(90));
    let srv = vm.finished("dsrv");
    dropin_reached_rxe(program, &o, &srv, want);

    // The drop-in serves, rxe connects.
    let server = drain(spawn(&mut host(None)));
    wait_listen(18515);
    let cli = vm.exec(&format!("{rxe} {HOST_IP}"));
    let srv = server.wait("the drop-in server", Duration::from_secs(60));
    rxe_reached_dropin(program, &cli, &srv, want);
    eprintln!("ok: unmodified {program} through the drop-in, both ways with rxe");
}
