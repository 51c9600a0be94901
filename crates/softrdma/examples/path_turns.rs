//! The whole path of a device, for counting instructions: RC WRITEs between two ends in
//! one thread, each end on a real device with its sockets, driven by polling its CQ (a
//! poll that finds nothing receives on the device's socket itself, as an application's
//! busy poll does). `bench/instructions.sh` runs it under callgrind at two counts; the
//! difference is what the extra turns or bursts cost, setup excluded, with every layer in
//! it: datapath (the UDP sockets or the same-host ring), device, endpoint, engine, copy
//! and CRC.
//!
//! - `lat N`: N turns of perftest's write_lat step, both ways: a WRITEs 8 bytes into b's
//!   buffer, b polls until they are there and WRITEs back. Four packets a turn (two
//!   WRITEs, two ACKs).
//! - `bw N`: N bursts of 8 WRITEs of 1 MiB from a to b, each burst waited for: 2,048
//!   packets of 4 KiB (and their ACKs) a burst.
//!
//! The ends are on two devices, 127.0.88.2 and 127.0.88.3: the UDP path between hosts. With
//! `--one` they share the device on 127.0.88.1 as two processes would (the second context
//! joins the first's), so their packets take the same-host ring, and a WRITE lands in the
//! peer's memory as it is posted.
//!
//! `cargo run --release -p softrdma --example path_turns -- lat 1000 [--one]`

#[path = "shared/ends.rs"]
mod ends;

use ends::{End, connect, end};
use softrdma::*;
use std::time::{Duration, Instant};

/// The longest WRITE: 1 MiB (a `bw` burst's).
const LEN: usize = 1 << 20;
/// Where in each end's buffer a WRITE's bytes come from: WRITEs land at 0, and a turn's
/// answer must not overwrite what the next WRITE sends.
const SRC: usize = 4096;
/// WRITEs a `bw` burst posts before it waits.
const BURST: usize = 8;

/// WRITEs `len` bytes from `from`'s buffer at [`SRC`] to the start of `to`'s.
fn write(from: &End, to: &End, id: u64, len: usize) -> Result<()> {
    from.qp.post_send(SendWr {
        wr_id: id,
        op: SendOp::Write {
            remote_addr: to.mr.addr(),
            rkey: to.mr.rkey(),
        },
        payload: Payload::Sges(softrdma_proto::sg![from.mr.sge(SRC as u64, len as u32)]),
        flags: SendFlags::SIGNALED,
        ud: None,
    })
}

/// The first 8 bytes of `e`'s buffer.
fn word(e: &End) -> u64 {
    let mut b = [0u8; 8];
    e.mr.read(0, &mut b).expect("inside the region");
    u64::from_le_bytes(b)
}

/// Drives both ends (polls each CQ at least once) until `done` holds, for at most ten
/// seconds; `a`'s completions are counted into `sent` (each must succeed).
fn drive(a: &End, b: &End, sent: &mut usize, mut done: impl FnMut(usize) -> bool) {
    // Kept between calls: an allocation per call would be counted with the path.
    thread_local! {
        static WCS: std::cell::RefCell<Vec<Completion>> =
            std::cell::RefCell::new(Vec::with_capacity(64));
    }
    WCS.with_borrow_mut(|wcs| drive_with(wcs, a, b, sent, &mut done));
}

fn drive_with(
    wcs: &mut Vec<Completion>,
    a: &End,
    b: &End,
    sent: &mut usize,
    done: &mut impl FnMut(usize) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut spins = 0u32;
    // At least one poll of each: on one device a WRITE may land inside its post, and its
    // completions must still be taken.
    loop {
        for e in [a, b] {
            wcs.clear();
            e.cq.poll_into(64, wcs);
            for c in wcs.iter() {
                assert_eq!(c.status, WcStatus::Success, "{c:?}");
            }
            if std::ptr::eq(e, a) {
                *sent += wcs.len();
            }
        }
        if done(*sent) {
            return;
        }
        spins += 1;
        // The clock is read seldom: it would be counted with the path.
        if spins % 4096 == 0 {
            assert!(
                Instant::now() < deadline,
                "stuck after {sent} completions: a holds {}, b {}; CQ lost {} {}",
                word(a),
                word(b),
                a.cq.lost(),
                b.cq.lost()
            );
        }
    }
}

/// Runs the mode and count given as the arguments.
pub fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = args.first().map_or("lat", String::as_str);
    let n: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(1000);
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let one = args.iter().any(|a| a == "--one");
    let (ip_a, ip_b) = if one {
        ("127.0.88.1", "127.0.88.1")
    } else {
        ("127.0.88.2", "127.0.88.3")
    };
    let a = end("path", ip_a, SRC + LEN, access)?;
    let b = end("path", ip_b, SRC + LEN, access)?;
    connect(&a, &b)?;
    let mut sent = 0;
    match mode {
        "lat" => {
            for i in 1..=n {
                a.mr.write(SRC, &i.to_le_bytes())?;
                write(&a, &b, i, 8)?;
                drive(&a, &b, &mut sent, |_| word(&b) == i);
                b.mr.write(SRC, &i.to_le_bytes())?;
                write(&b, &a, i, 8)?;
                drive(&a, &b, &mut sent, |_| word(&a) == i);
            }
            // Every WRITE of a acknowledged; b's complete with the ACKs of its own.
            let n = n as usize;
            drive(&a, &b, &mut sent, |s| s >= n);
        }
        "bw" => {
            for i in 0..n as usize {
                for k in 0..BURST {
                    write(&a, &b, (i * BURST + k) as u64, LEN)?;
                }
                drive(&a, &b, &mut sent, |s| s >= (i + 1) * BURST);
            }
        }
        m => panic!("mode {m}: lat or bw"),
    }
    println!("{mode} {n}{}", if one { " on one device" } else { "" });
    Ok(())
}
