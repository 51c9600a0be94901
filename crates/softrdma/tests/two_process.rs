//! End to end between two processes over real UDP sockets. The test binary runs a copy of
//! itself as the peer (`peer_process`, active only when `SOFTRDMA_E2E_PEER` is set), so both
//! ends are real processes with their own device, talking on loopback.

mod common;

use common::signaled;
use softrdma::*;
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

const MR_LEN: usize = 1 << 20;

fn all() -> AccessFlags {
    AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC
}

fn qp_type(s: &str) -> QpType {
    match s {
        "rc" => QpType::Rc,
        "uc" => QpType::Uc,
        _ => QpType::Ud,
    }
}

/// Under injected faults: short ACK timeouts (1 ms) keep the tests quick, and the retry count
/// is 7 (unlimited, as rxe), since a few losses in a row are then expected. Otherwise nothing
/// is lost, and the timeout only has to outlast a peer process that the scheduler holds off
/// the CPU (tests run in parallel on 2 cores): 16.8 ms, 6 retries, so that a dead peer is
/// still noticed in about 120 ms.
fn attr() -> ConnectAttr {
    let lossy = std::env::var_os("SOFTRDMA_FAULTS").is_some() || LOSSY.with(|l| l.get());
    ConnectAttr {
        timeout: if lossy { 8 } else { 12 },
        retry_cnt: if lossy { 7 } else { 6 },
        ..Default::default()
    }
}

thread_local! {
    static LOSSY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The peer: prints its address, connects, serves until told "DONE". RC work is one-sided
/// or lands in posted receives; UC and UD receives are echoed back.
#[test]
fn peer_process() {
    let Ok(addr) = std::env::var("SOFTRDMA_E2E_PEER") else {
        return;
    };
    let t = qp_type(&std::env::var("SOFTRDMA_E2E_TYPE").unwrap());
    let ctx = Context::open_addr("peer", addr.parse().unwrap(), Mtu::M1024).unwrap();
    let pd = ctx.alloc_pd();
    let cq = ctx.create_cq(8192, None).unwrap();
    let qp = pd.create_qp(QpInitAttr::new(t, &cq)).unwrap();
    let mr = pd.register_zeroed(MR_LEN, all()).unwrap();
    qp.init(&attr()).unwrap();
    for i in 0..512u64 {
        qp.post_recv(RecvWr {
            wr_id: i,
            sg_list: softrdma_proto::sg![mr.sge(i * 2048, 2048)],
        })
        .unwrap();
    }
    println!("READY {} {} {}", qp.qp_num().value(), mr.addr(), mr.rkey());
    std::io::stdout().flush().unwrap();
    let mut first = String::new();
    std::io::stdin().read_line(&mut first).unwrap();
    let peer: Vec<String> = first.trim().split(' ').map(String::from).collect();
    let peer_addr: IpAddr = peer[1].parse().unwrap();
    let peer_qpn = Qpn::new(peer[2].parse().unwrap());
    qp.connect(
        Psn::new(0x800),
        &Peer {
            addr: peer_addr,
            qpn: peer_qpn,
            psn: Psn::new(0x100),
        },
        &attr(),
    )
    .unwrap();
    println!("CONNECTED");
    std::io::stdout().flush().unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    std::thread::spawn(move || {
        for l in std::io::stdin().lines() {
            if l.map(|l| l == "DONE").unwrap_or(true) {
                break;
            }
        }
        d.store(true, Ordering::SeqCst);
    });
    // RC: this thread does nothing at all; the device serves WRITE, READ and atomics alone.
    while !done.load(Ordering::SeqCst) {
        if t == QpType::Rc {
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        for wc in cq.poll(16) {
            if wc.opcode != WcOpcode::Recv || wc.status != WcStatus::Success {
                continue;
            }
            let grh = if t == QpType::Ud { 40 } else { 0 };
            let len = wc.byte_len - grh;
            qp.post_send(SendWr {
                wr_id: 0,
                op: SendOp::Send,
                payload: Payload::Sges(softrdma_proto::sg![
                    mr.sge(wc.wr_id * 2048 + u64::from(grh), len)
                ]),
                flags: SendFlags::empty(),
                ud: (t == QpType::Ud).then_some(UdDest {
                    src: ctx.addr(),
                    ip: peer_addr,
                    qpn: peer_qpn,
                    qkey: 0x1111_1111,
                    traffic_class: 0,
                }),
            })
            .ok();
            qp.post_recv(RecvWr {
                wr_id: wc.wr_id,
                sg_list: softrdma_proto::sg![mr.sge(wc.wr_id * 2048, 2048)],
            })
            .unwrap();
        }
    }
    println!("BYE");
}

struct PeerProc {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    qpn: u32,
    addr: u64,
    rkey: u32,
}

fn line(rx: &mpsc::Receiver<String>) -> String {
    rx.recv_timeout(Duration::from_secs(30))
        .expect("the peer answers within 30 s")
}

/// Starts the peer process; `env` adds to its environment.
fn spawn_peer(t: &str, addr: &str, faults: Option<&str>, env: &[(&str, &str)]) -> PeerProc {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["peer_process", "--exact", "--nocapture", "--test-threads=1"])
        .env("SOFTRDMA_E2E_PEER", addr)
        .env("SOFTRDMA_E2E_TYPE", t)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if let Some(f) = faults {
        c.env("SOFTRDMA_FAULTS", f);
    }
    c.envs(env.iter().copied());
    let mut child = c.spawn().unwrap();
    let stdin = child.stdin.take().unwrap();
    let out: ChildStdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(|l| l.ok()) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    // The test harness may print "test peer_process ... " on the same line.
    let ready = loop {
        let l = line(&rx);
        if let Some(at) = l.find("READY ") {
            break l[at..].to_owned();
        }
    };
    let f: Vec<&str> = ready.split(' ').collect();
    PeerProc {
        child,
        stdin,
        lines: rx,
        qpn: f[1].parse().unwrap(),
        addr: f[2].parse().unwrap(),
        rkey: f[3].parse().unwrap(),
    }
}

struct Me {
    ctx: Context,
    cq: CompletionQueue,
    qp: QueuePair,
    mr: MemoryRegion,
    _pd: ProtectionDomain,
}

fn me(t: &str, addr: IpAddr, peer: &mut PeerProc, peer_addr: IpAddr, opts: DeviceOptions) -> Me {
    let ctx = Context::open_with("me", addr, Mtu::M1024, opts).unwrap();
    let pd = ctx.alloc_pd();
    let cq = ctx.create_cq(8192, None).unwrap();
    let qp = pd.create_qp(QpInitAttr::new(qp_type(t), &cq)).unwrap();
    let mr = pd.register_zeroed(MR_LEN, all()).unwrap();
    qp.init(&attr()).unwrap();
    for i in 0..512u64 {
        qp.post_recv(RecvWr {
            wr_id: 1000 + i,
            sg_list: softrdma_proto::sg![mr.sge(0x80000 + i * 1024, 1024)],
        })
        .ok();
    }
    qp.connect(
        Psn::new(0x100),
        &Peer {
            addr: peer_addr,
            qpn: Qpn::new(peer.qpn),
            psn: Psn::new(0x800),
        },
        &attr(),
    )
    .unwrap();
    writeln!(peer.stdin, "PEER {} {}", addr, qp.qp_num().value()).unwrap();
    assert_eq!(line(&peer.lines), "CONNECTED");
    Me {
        ctx,
        cq,
        qp,
        mr,
        _pd: pd,
    }
}

thread_local! {
    /// Completions polled while waiting for another one, kept for later.
    static STASH: std::cell::RefCell<Vec<Completion>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Waits for the completion of `wr_id`, keeping the others for later calls and `drain`.
fn wait(cq: &CompletionQueue, wr_id: u64) -> Completion {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let found = STASH.with(|s| {
            let mut s = s.borrow_mut();
            s.extend(cq.poll(16));
            s.iter().position(|w| w.wr_id == wr_id).map(|i| s.remove(i))
        });
        if let Some(wc) = found {
            return wc;
        }
        assert!(Instant::now() < deadline, "no completion for WR {wr_id}");
    }
}

/// Every completion available now, stashed ones first.
fn drain(cq: &CompletionQueue) -> Vec<Completion> {
    STASH.with(|s| {
        let mut s = s.borrow_mut();
        s.extend(cq.poll(32));
        std::mem::take(&mut *s)
    })
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u64).wrapping_mul(131) ^ seed.wrapping_mul(7)) as u8)
        .collect()
}

/// Posts `op` from `sge` as the next WR after `id` and waits for its successful
/// completion.
fn done(m: &Me, id: &mut u64, op: SendOp, sge: Sge) {
    *id += 1;
    m.qp.post_send(signaled(*id, op, sge)).unwrap();
    assert_eq!(wait(&m.cq, *id).status, WcStatus::Success, "WR {id}");
}

/// RC: WRITE, READ back, SEND (checked by READing the peer's receive buffer), FETCH_ADD and
/// CMP_SWAP, against a peer process whose application thread never touches the QP.
fn rc_round(faults: Option<&str>, last: u8, peer_env: &[(&str, &str)]) {
    LOSSY.with(|l| l.set(faults.is_some()));
    let peer_ip = IpAddr::V4(Ipv4Addr::new(127, 0, 79, last));
    let my_ip = IpAddr::V4(Ipv4Addr::new(127, 0, 79, last + 1));
    let mut p = spawn_peer("rc", &peer_ip.to_string(), faults, peer_env);
    let opts = DeviceOptions {
        faults: faults.map(|f| softrdma::LinkFaults::parse(f).unwrap()),
        ..Default::default()
    };
    let m = me("rc", my_ip, &mut p, peer_ip, opts);
    let mut id = 0;
    let mut counter = 0u64;
    for round in 0..40u64 {
        let len = 1 + (round as usize * 3011) % 9000;
        let data = pattern(round, len);
        m.mr.write(0, &data).unwrap();
        let remote = p.addr + 0x40000 + (round % 8) * 16384;
        done(
            &m,
            &mut id,
            SendOp::Write {
                remote_addr: remote,
                rkey: p.rkey,
            },
            m.mr.sge(0, len as u32),
        );
        done(
            &m,
            &mut id,
            SendOp::Read {
                remote_addr: remote,
                rkey: p.rkey,
            },
            m.mr.sge(0x20000, len as u32),
        );
        assert_eq!(
            &m.mr.to_vec()[0x20000..0x20000 + len],
            &data[..],
            "round {round}: WRITE then READ"
        );
        // SEND lands in the peer's receive WR `round` (2048 bytes at round * 2048).
        let slen = (1 + (round as usize * 37) % 2048).min(len);
        done(&m, &mut id, SendOp::Send, m.mr.sge(0, slen as u32));
        done(
            &m,
            &mut id,
            SendOp::Read {
                remote_addr: p.addr + round * 2048,
                rkey: p.rkey,
            },
            m.mr.sge(0x30000, slen as u32),
        );
        assert_eq!(
            &m.mr.to_vec()[0x30000..0x30000 + slen],
            &data[..slen],
            "round {round}: SEND"
        );
        done(
            &m,
            &mut id,
            SendOp::FetchAdd {
                remote_addr: p.addr + 0xF0000,
                rkey: p.rkey,
                add: round + 1,
            },
            m.mr.sge(0xF0000, 8),
        );
        assert_eq!(m.mr.to_vec()[0xF0000..0xF0008], counter.to_ne_bytes());
        counter += round + 1;
        done(
            &m,
            &mut id,
            SendOp::CompareSwap {
                remote_addr: p.addr + 0xF0000,
                rkey: p.rkey,
                compare: counter,
                swap: counter * 2,
            },
            m.mr.sge(0xF0008, 8),
        );
        assert_eq!(m.mr.to_vec()[0xF0008..0xF0010], counter.to_ne_bytes());
        counter *= 2;
    }
    writeln!(p.stdin, "DONE").unwrap();
    assert_eq!(line(&p.lines), "BYE");
    assert!(p.child.wait().unwrap().success());
    drop(m.ctx);
}

#[test]
fn rc_between_processes() {
    rc_round(None, 1, &[]);
}

/// A peer that sends only from its unconnected socket (IP ID 0) with one that numbers its
/// packets from connected sockets.
#[test]
fn rc_between_processes_one_unconnected() {
    rc_round(None, 13, &[("SOFTRDMA_CONNECTED", "0")]);
}

#[test]
fn rc_between_processes_under_faults() {
    rc_round(Some("drop=0.03,dup=0.03,reorder=0.05,corrupt=0.01"), 3, &[]);
}

fn echo_round(t: &str, faults: Option<&str>, last: u8) {
    LOSSY.with(|l| l.set(faults.is_some()));
    let peer_ip = IpAddr::V4(Ipv4Addr::new(127, 0, 79, last));
    let my_ip = IpAddr::V4(Ipv4Addr::new(127, 0, 79, last + 1));
    let mut p = spawn_peer(t, &peer_ip.to_string(), faults, &[]);
    let opts = DeviceOptions {
        faults: faults.map(|f| softrdma::LinkFaults::parse(f).unwrap()),
        ..Default::default()
    };
    let m = me(t, my_ip, &mut p, peer_ip, opts);
    let n = 200u64;
    for i in 0..n {
        let mut data = pattern(i, 900);
        data[..8].copy_from_slice(&i.to_le_bytes());
        m.mr.write(0, &data).unwrap();
        let mut w = signaled(i, SendOp::Send, m.mr.sge(0, 900));
        w.ud = (t == "ud").then_some(UdDest {
            src: my_ip,
            ip: peer_ip,
            qpn: Qpn::new(p.qpn),
            qkey: 0x1111_1111,
            traffic_class: 0,
        });
        m.qp.post_send(w).unwrap();
        assert_eq!(wait(&m.cq, i).status, WcStatus::Success);
    }
    // Echoes come back into receive WRs 1000..: each whole and correct.
    let deadline =
        Instant::now() + Duration::from_millis(if faults.is_some() { 500 } else { 3000 });
    let mut echoes = 0;
    let grh = if t == "ud" { 40 } else { 0 };
    while Instant::now() < deadline && (faults.is_some() || echoes < n) {
        for wc in drain(&m.cq) {
            if wc.opcode == WcOpcode::Recv && wc.status == WcStatus::Success {
                let at = 0x80000 + (wc.wr_id as usize - 1000) * 1024 + grh;
                let mem = m.mr.to_vec();
                let idx = u64::from_le_bytes(mem[at..at + 8].try_into().unwrap());
                let mut want = pattern(idx, 900);
                want[..8].copy_from_slice(&idx.to_le_bytes());
                assert_eq!(&mem[at..at + 900], &want[..], "{t}: echo of {idx}");
                echoes += 1;
                m.qp.post_recv(RecvWr {
                    wr_id: wc.wr_id,
                    sg_list: softrdma_proto::sg![
                        m.mr.sge(0x80000 + (wc.wr_id - 1000) * 1024, 1024)
                    ],
                })
                .unwrap();
            }
        }
    }
    if faults.is_none() {
        assert_eq!(echoes, n, "{t}: every echo without faults");
    } else {
        assert!(echoes > 0, "{t}: some echoes under faults");
    }
    writeln!(p.stdin, "DONE").unwrap();
    assert_eq!(line(&p.lines), "BYE");
    assert!(p.child.wait().unwrap().success());
}

#[test]
fn uc_and_ud_between_processes() {
    echo_round("uc", None, 5);
    echo_round("ud", None, 7);
    echo_round("uc", Some("drop=0.05,dup=0.05,reorder=0.1"), 9);
    echo_round("ud", Some("drop=0.05,dup=0.05,reorder=0.1"), 11);
}

#[test]
fn killed_peer_gives_retry_exc_err_then_flushes() {
    let peer_ip = IpAddr::V4(Ipv4Addr::new(127, 0, 79, 20));
    let my_ip = IpAddr::V4(Ipv4Addr::new(127, 0, 79, 21));
    let mut p = spawn_peer("rc", &peer_ip.to_string(), None, &[]);
    let m = me("rc", my_ip, &mut p, peer_ip, DeviceOptions::default());
    m.mr.write(0, &pattern(1, 65536)).unwrap();
    let w = |i| {
        signaled(
            i,
            SendOp::Write {
                remote_addr: p.addr,
                rkey: p.rkey,
            },
            m.mr.sge(0, 65536),
        )
    };
    m.qp.post_send(w(1)).unwrap();
    assert_eq!(wait(&m.cq, 1).status, WcStatus::Success);
    p.child.kill().unwrap();
    p.child.wait().unwrap();
    for i in 2..10 {
        m.qp.post_send(w(i)).unwrap();
    }
    let started = Instant::now();
    let first = wait(&m.cq, 2);
    assert_eq!(first.status, WcStatus::RetryExcErr);
    for i in 3..10 {
        assert_eq!(wait(&m.cq, i).status, WcStatus::WrFlushErr);
    }
    // timeout 12 (16.8 ms) and retry_cnt 6: about 120 ms, not a hang.
    assert!(started.elapsed() < Duration::from_secs(5));
}
