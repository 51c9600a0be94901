//! Scale: many processes and many QPs on one shared device, and what an idle QP costs.
//!
//! The multi-process test runs this test binary again as its children (`SCALE_CHILD`
//! names the child's index), so that each is a real process with a device of its own
//! that shares the port with the others. Its own heap is counted by a global allocator,
//! which is why the QP-cost test lives in this binary alone.

use softrdma::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

/// The system allocator, counting the bytes live.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call goes to the system allocator with the caller's arguments; the count is
// a side effect only.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as isize - l.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const PROCS: usize = 10;
const QPS: usize = 100;
/// Each process's QPs `0..HALF` talk to the next process's `HALF..QPS`.
const HALF: usize = QPS / 2;
const LIMIT: Duration = Duration::from_secs(60);
const ADDR: Ipv4Addr = Ipv4Addr::new(127, 0, 96, 40);

/// 10,000 connected, idle RC QPs (5,000 pairs on one device) cost at most 1 KiB of heap
/// each, everything the device keeps for them included.
#[test]
fn an_idle_qp_costs_at_most_a_kib() {
    let ctx = Context::open_addr(
        "scale-idle",
        IpAddr::V4(Ipv4Addr::new(127, 0, 96, 41)),
        Mtu::M1024,
    )
    .expect("device opens");
    let pd = ctx.alloc_pd();
    let cq = ctx.create_cq(16, None).unwrap();
    // Small queues, as an idle QP of a large job has.
    let init = || QpInitAttr {
        cap: QpCaps {
            max_send_wr: 16,
            max_recv_wr: 16,
            ..QpCaps::default()
        },
        ..QpInitAttr::new(QpType::Rc, &cq)
    };
    let before = LIVE.load(Ordering::Relaxed);
    let mut qps = Vec::with_capacity(10_000);
    for _ in 0..10_000 {
        qps.push(pd.create_qp(init()).unwrap());
    }
    for pair in qps.chunks(2) {
        let peer = |q: &QueuePair| Peer {
            addr: ctx.addr(),
            qpn: q.qp_num(),
            psn: Psn::new(1),
        };
        pair[0]
            .connect(Psn::new(1), &peer(&pair[1]), &ConnectAttr::default())
            .unwrap();
        pair[1]
            .connect(Psn::new(1), &peer(&pair[0]), &ConnectAttr::default())
            .unwrap();
    }
    // The least over a while: the progress thread's passing allocations (the `res show`
    // file it writes for these QPs, say) are not what the QPs keep.
    let mut least = isize::MAX;
    for _ in 0..50 {
        least = least.min(LIVE.load(Ordering::Relaxed));
        std::thread::sleep(Duration::from_millis(5));
    }
    let per_qp = (least - before) / 10_000;
    assert!(per_qp <= 1024, "an idle QP costs {per_qp} bytes");
    eprintln!("an idle connected RC QP: {per_qp} bytes of heap");
}

/// Ten processes, 1,000 QPs between them, on one device: each process's first 50 QPs
/// send to the next process's last 50 (a WRITE, then a SEND with immediate data), every
/// byte checked, every completion a success.
#[test]
fn ten_processes_with_a_thousand_qps_share_a_device() {
    if std::env::var_os("SCALE_CHILD").is_some() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("softrdma-scale-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut kids: Vec<std::process::Child> = (0..PROCS)
        .map(|k| {
            std::process::Command::new(&exe)
                .args(["--exact", "scale_child", "--nocapture"])
                .env("SCALE_CHILD", k.to_string())
                .env("SCALE_DIR", &dir)
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let deadline = Instant::now() + LIMIT;
    let mut failed = Vec::new();
    for (k, kid) in kids.iter_mut().enumerate() {
        let status = loop {
            if let Some(s) = kid.try_wait().unwrap() {
                break Some(s);
            }
            if Instant::now() > deadline {
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        if !status.is_some_and(|s| s.success()) {
            failed.push((k, status));
        }
    }
    for kid in &mut kids {
        let _ = kid.kill();
        let _ = kid.wait();
    }
    let done = (0..PROCS)
        .filter(|k| dir.join(format!("{k}.done")).exists())
        .count();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failed.is_empty(), "children that failed: {failed:?}");
    assert_eq!(done, PROCS, "every child checked its data");
}

/// One child of the test above (does nothing unless run as one).
#[test]
fn scale_child() {
    let Some(k) = std::env::var("SCALE_CHILD")
        .ok()
        .map(|v| v.parse::<usize>().unwrap())
    else {
        return;
    };
    let dir = PathBuf::from(std::env::var_os("SCALE_DIR").unwrap());
    let ctx = Context::open_addr("scale", IpAddr::V4(ADDR), Mtu::M1024).expect("device opens");
    let pd = ctx.alloc_pd();
    let cq = ctx.create_cq(4 * QPS, None).unwrap();
    let mr = pd
        .register_zeroed(
            QPS * 64,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
    let qps: Vec<QueuePair> = (0..QPS)
        .map(|_| pd.create_qp(QpInitAttr::new(QpType::Rc, &cq)).unwrap())
        .collect();
    let me: Vec<String> = qps.iter().map(|q| q.qp_num().value().to_string()).collect();
    publish(
        &dir,
        &format!("{k}.qpns"),
        &format!("{} {} {}", mr.addr(), mr.rkey(), me.join(" ")),
    );
    let next = read_qpns(&dir, (k + 1) % PROCS);
    let prev = read_qpns(&dir, (k + PROCS - 1) % PROCS);
    for (i, q) in qps.iter().enumerate() {
        let (peer, j) = if i < HALF {
            (&next, i + HALF)
        } else {
            (&prev, i - HALF)
        };
        let p = Peer {
            addr: ctx.addr(),
            qpn: Qpn::new(peer.2[j]),
            psn: Psn::new(7),
        };
        q.connect(Psn::new(7), &p, &ConnectAttr::default()).unwrap();
    }
    for (i, q) in qps.iter().enumerate().skip(HALF) {
        q.post_recv(RecvWr {
            wr_id: i as u64,
            sg_list: softrdma_proto::sg![mr.sge(i as u64 * 64 + 32, 32)],
        })
        .unwrap();
    }
    publish(&dir, &format!("{k}.ready"), "");
    wait_for(&dir, |n| n.ends_with(".ready"));
    // Each sending QP writes its stamp into its peer's slot, then sends it.
    for (i, q) in qps.iter().enumerate().take(HALF) {
        let stamp = [(k as u8) ^ 0xa0, i as u8, 0x5a, 0xc3];
        mr.write(i * 64, &stamp).unwrap();
        let slot = (i + HALF) as u64 * 64;
        let sge = mr.sge(i as u64 * 64, 4);
        q.post_send(SendWr {
            wr_id: i as u64,
            op: SendOp::Write {
                remote_addr: next.0 + slot,
                rkey: next.1,
            },
            payload: Payload::Sges(softrdma_proto::sg![sge]),
            flags: SendFlags::SIGNALED,
            ud: None,
        })
        .unwrap();
        q.post_send(SendWr {
            wr_id: 1000 + i as u64,
            op: SendOp::SendWithImm(i as u32),
            payload: Payload::Sges(softrdma_proto::sg![sge]),
            flags: SendFlags::SIGNALED,
            ud: None,
        })
        .unwrap();
    }
    // 100 send completions and 50 receives.
    let deadline = Instant::now() + LIMIT;
    let mut got = 0;
    while got < 3 * HALF {
        assert!(Instant::now() < deadline, "child {k}: {got} completions");
        let Some(wc) = cq.poll_one() else {
            std::thread::yield_now();
            continue;
        };
        assert_eq!(wc.status, WcStatus::Success, "child {k}: {wc:?}");
        got += 1;
    }
    let prev_k = (k + PROCS - 1) % PROCS;
    for i in HALF..QPS {
        let want = [(prev_k as u8) ^ 0xa0, (i - HALF) as u8, 0x5a, 0xc3];
        let mut w = [0u8; 4];
        mr.read(i * 64, &mut w).unwrap();
        assert_eq!(w, want, "child {k}: the WRITE into slot {i}");
        mr.read(i * 64 + 32, &mut w).unwrap();
        assert_eq!(w, want, "child {k}: the SEND into slot {i}");
    }
    // Stay until every process is done: their last ACKs come from here.
    publish(&dir, &format!("{k}.done"), "");
    wait_for(&dir, |n| n.ends_with(".done"));
}

/// Writes `name` in `dir` whole (a rename), for the other children to read.
fn publish(dir: &Path, name: &str, text: &str) {
    let tmp = dir.join(format!(".{name}.{}", std::process::id()));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(tmp, dir.join(name)).unwrap();
}

/// Waits until every child has published a file that `pick` names.
fn wait_for(dir: &Path, pick: impl Fn(&str) -> bool) {
    let deadline = Instant::now() + LIMIT;
    loop {
        let n = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .filter(|e| pick(&e.file_name().to_string_lossy()))
            .count();
        if n == PROCS {
            return;
        }
        assert!(Instant::now() < deadline, "{n} of {PROCS} children");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Child `k`'s region address, R_Key and QPNs, once published.
fn read_qpns(dir: &Path, k: usize) -> (u64, u32, Vec<u32>) {
    let path = dir.join(format!("{k}.qpns"));
    let deadline = Instant::now() + LIMIT;
    let text = loop {
        if let Ok(t) = std::fs::read_to_string(&path) {
            break t;
        }
        assert!(Instant::now() < deadline, "child {k} published no QPNs");
        std::thread::sleep(Duration::from_millis(5));
    };
    let mut f = text.split_whitespace();
    let addr = f.next().unwrap().parse().unwrap();
    let rkey = f.next().unwrap().parse().unwrap();
    (addr, rkey, f.map(|q| q.parse().unwrap()).collect())
}
