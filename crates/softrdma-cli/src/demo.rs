//! `softrdma demo`: two soft devices on loopback in one process, every RC operation checked,
//! and latency and bandwidth measured.

use crate::error::CliError;
use softrdma::{
    AccessFlags, Completion, CompletionQueue, ConnectAttr, Context, DeviceOptions, MemoryRegion,
    Mtu, Payload, Peer, ProtectionDomain, Psn, QpInitAttr, QpType, QueuePair, RecvWr, SendFlags,
    SendOp, SendWr, WcStatus,
};
use std::net::IpAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

struct End {
    ctx: Context,
    _pd: ProtectionDomain,
    cq: CompletionQueue,
    qp: QueuePair,
    mr: MemoryRegion,
}

const MR_LEN: usize = 4 << 20;

fn end(addr: &str) -> Result<End, CliError> {
    let addr: IpAddr = addr.parse().map_err(|source| CliError::ParseAddr {
        text: addr.into(),
        source,
    })?;
    let ctx = Context::open_with("demo", addr, Mtu::M4096, DeviceOptions::default())?;
    let pd = ctx.alloc_pd();
    let cq = ctx.create_cq(4096, None)?;
    let qp = pd.create_qp(QpInitAttr::new(QpType::Rc, &cq))?;
    let mr = pd.register_zeroed(
        MR_LEN,
        AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC,
    )?;
    Ok(End {
        ctx,
        _pd: pd,
        cq,
        qp,
        mr,
    })
}

fn wait(cq: &CompletionQueue) -> Result<Completion, CliError> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(wc) = cq.poll_one() {
            return if wc.status == WcStatus::Success {
                Ok(wc)
            } else {
                Err(CliError::Failed(format!(
                    "WR {} failed: {}",
                    wc.wr_id, wc.status
                )))
            };
        }
        if Instant::now() > deadline {
            return Err(CliError::Timeout("no completion within 10 s".into()));
        }
        std::hint::spin_loop();
    }
}

/// Posts `op` on `len` bytes of `e`'s region at `off`, signaled.
fn post(e: &End, wr_id: u64, op: SendOp, off: u64, len: u32) -> Result<(), CliError> {
    e.qp.post_send(SendWr {
        wr_id,
        op,
        payload: Payload::Sges(softrdma_proto::sg![e.mr.sge(off, len)]),
        flags: SendFlags::SIGNALED,
        ud: None,
    })?;
    Ok(())
}

/// [`post`], then waits for its completion.
fn run_op(e: &End, wr_id: u64, op: SendOp, off: u64, len: u32) -> Result<Completion, CliError> {
    post(e, wr_id, op, off, len)?;
    wait(&e.cq)
}

/// The 8-byte word at `off` of `mr`, as the atomics see it.
fn word(mr: &MemoryRegion, off: usize) -> u64 {
    u64::from_ne_bytes(mr.to_vec()[off..off + 8].try_into().unwrap_or_default())
}

/// Connects `x`'s QP, starting at `x_psn`, to `y`'s, which starts at `y_psn`.
fn connect(x: &End, x_psn: u32, y: &End, y_psn: u32, attr: &ConnectAttr) -> Result<(), CliError> {
    let peer = Peer {
        addr: y.ctx.addr(),
        qpn: y.qp.qp_num(),
        psn: Psn::new(y_psn),
    };
    x.qp.connect(Psn::new(x_psn), &peer, attr)?;
    Ok(())
}

fn check(what: &str, ok: bool, detail: String) -> Result<(), CliError> {
    if ok {
        println!("  {what:<13} ok    {detail}");
        Ok(())
    } else {
        Err(CliError::Failed(format!(
            "{what} returned wrong data: {detail}"
        )))
    }
}

/// Runs the demo.
pub fn run() -> ExitCode {
    match demo() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("softrdma demo: {e}");
            ExitCode::from(1)
        }
    }
}

fn demo() -> Result<(), CliError> {
    let (a, b) = (end("127.0.0.2")?, end("127.0.0.3")?);
    let attr = ConnectAttr {
        mtu: a.ctx.active_mtu(),
        ..ConnectAttr::default()
    };
    connect(&a, 0x1000, &b, 0x2000, &attr)?;
    connect(&b, 0x2000, &a, 0x1000, &attr)?;
    println!(
        "softrdma demo: {} (QP {:#x}) <-> {} (QP {:#x}), RC, path MTU 4096, RoCE v2 over UDP",
        a.ctx.addr(),
        a.qp.qp_num().value(),
        b.ctx.addr(),
        b.qp.qp_num().value()
    );
    let msg: Vec<u8> = (0..100_000u32).map(|i| (i * 7 + 3) as u8).collect();
    let bmem = |off: usize, len: usize| b.mr.to_vec()[off..off + len].to_vec();
    let (raddr, rkey) = (b.mr.addr(), b.mr.rkey());

    // SEND into a posted receive.
    b.qp.post_recv(RecvWr {
        wr_id: 1,
        sg_list: softrdma_proto::sg![b.mr.sge(0, 200_000)],
    })?;
    a.mr.write(0, &msg)?;
    run_op(&a, 1, SendOp::SendWithImm(0xC0FFEE), 0, msg.len() as u32)?;
    let r = wait(&b.cq)?;
    check(
        "SEND",
        bmem(0, msg.len()) == msg && r.imm_data == 0xC0FFEE,
        format!("{} bytes received, immediate {:#x}", r.byte_len, r.imm_data),
    )?;
    // WRITE, then READ it back.
    run_op(
        &a,
        2,
        SendOp::Write {
            remote_addr: raddr + 0x100000,
            rkey,
        },
        0,
        msg.len() as u32,
    )?;
    check(
        "RDMA WRITE",
        bmem(0x100000, msg.len()) == msg,
        format!("{} bytes placed", msg.len()),
    )?;
    run_op(
        &a,
        3,
        SendOp::Read {
            remote_addr: raddr + 0x100000,
            rkey,
        },
        0x200000,
        msg.len() as u32,
    )?;
    check(
        "RDMA READ",
        a.mr.to_vec()[0x200000..0x200000 + msg.len()] == msg[..],
        format!("{} bytes read back", msg.len()),
    )?;
    // Atomics on a counter at B.
    b.mr.write(0x300000, &41u64.to_ne_bytes())?;
    run_op(
        &a,
        4,
        SendOp::FetchAdd {
            remote_addr: raddr + 0x300000,
            rkey,
            add: 1,
        },
        0x300000,
        8,
    )?;
    let orig = word(&a.mr, 0x300000);
    check(
        "FETCH_ADD",
        orig == 41,
        format!("returned {orig}, counter now 42"),
    )?;
    run_op(
        &a,
        5,
        SendOp::CompareSwap {
            remote_addr: raddr + 0x300000,
            rkey,
            compare: 42,
            swap: 7,
        },
        0x300008,
        8,
    )?;
    let (orig, now) = (word(&a.mr, 0x300008), word(&b.mr, 0x300000));
    check(
        "COMPARE_SWAP",
        orig == 42 && now == 7,
        format!("returned {orig}, swapped to {now}"),
    )?;

    // Latency: 8-byte WRITEs, one at a time; completion time is a full round trip.
    let mut lat = Vec::with_capacity(2000);
    for i in 0..2000u64 {
        let t = Instant::now();
        run_op(
            &a,
            100 + i,
            SendOp::Write {
                remote_addr: raddr,
                rkey,
            },
            0,
            8,
        )?;
        lat.push(t.elapsed());
    }
    lat.sort();
    let p50 = lat[lat.len() / 2].as_secs_f64() * 1e6;
    let p99 = lat[lat.len() * 99 / 100].as_secs_f64() * 1e6;
    // Bandwidth: 1 MiB WRITEs, 8 in flight, for half a second.
    let start = Instant::now();
    let (mut posted, mut done) = (0u64, 0u64);
    while start.elapsed() < Duration::from_millis(500) || done < posted {
        while posted - done < 8 && start.elapsed() < Duration::from_millis(500) {
            post(
                &a,
                10_000 + posted,
                SendOp::Write {
                    remote_addr: raddr + 0x100000,
                    rkey,
                },
                0x100000,
                1 << 20,
            )?;
            posted += 1;
        }
        wait(&a.cq)?;
        done += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    let gbs = (done as f64 * (1 << 20) as f64) / secs / 1e9;
    println!(
        "  latency       8-byte RDMA WRITE, round trip: p50 {p50:.1} us, p99 {p99:.1} us (2000 samples)"
    );
    println!(
        "  bandwidth     1 MiB RDMA WRITEs, 8 in flight: {gbs:.2} GB/s ({done} in {secs:.2} s)"
    );
    let c: std::collections::HashMap<_, _> = a.ctx.hw_counters().into_iter().collect();
    println!(
        "  counters      {} packets sent, {} received, {} ICRC errors",
        c["sent_pkts"], c["rcvd_pkts"], c["rcvd_icrc_err"]
    );
    if std::env::var_os("SOFTRDMA_DEBUG").is_some() {
        eprintln!(
            "A {:?}\nB {:?}\nB dev {:?}",
            a.qp.counters(),
            b.qp.counters(),
            b.ctx.hw_counters()
        );
    }
    println!("all operations checked: ok");
    Ok(())
}
