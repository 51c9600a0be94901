//! `softrdma perf`: perftest's bandwidth and latency tests, speaking perftest 4.5's
//! out-of-band protocol on TCP port 18515, so that either end can be `ib_write_bw`,
//! `ib_read_lat`, `ib_send_lat`, `ib_atomic_lat`, ...
//!
//! The contract: every test over the transports perftest allows for it (WRITE RC/UC, SEND
//! RC/UC/UD, READ and atomics RC), `-q` and `-b` in the bandwidth tests (perftest refuses
//! them in latency tests, and so do we), `-a`, `-D`, `-l`; the same sequence of exchanges as
//! perftest for each combination, so either side may be perftest. Flags this implementation
//! cannot honour are refused by name before anything is opened; a peer that stops answering
//! is an error after 30 s (RDMA) or 120 s (out of band), never a hang.
//!
//! This file owns the command's course: for each test and side (client or server), the
//! order of barriers, runs and report exchanges that perftest follows, then the output. It
//! calls its children and nothing calls back into it; they split the work by role:
//!
//! * `args`: the flags, their defaults and their checks;
//! * `oob`: the out-of-band exchange (key messages, barriers, BW reports);
//! * `setup`: the device resources and the connection of the QPs;
//! * `queue`: posting work requests and waiting for completions, with the peer timeout;
//! * `bw` and `lat`: the bandwidth and latency runners;
//! * `stats`: a row of results and its statistics;
//! * `report`: perftest's text header and table, `--json` and `--plot`.
//!
//! One thread: the runners spin on the caller's CQ and the device makes progress in its
//! polls.

mod args;
mod bw;
mod lat;
mod oob;
mod queue;
mod report;
mod setup;
mod stats;

pub use args::PerfArgs;

use crate::error::CliError;
use args::{Conn, Run, Test, bw_or_lat_defaults, check_args};
use bw::{run_bw, run_bw_server};
use lat::run_lat;
use queue::fill_recvs;
use report::{header, json, plot, print_table};
use setup::setup;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;

/// Runs `softrdma perf`.
pub fn run(a: &PerfArgs, out: &mut impl Write) -> ExitCode {
    match perf(a, out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("softrdma perf: {e}");
            ExitCode::from(1)
        }
    }
}

fn perf(a: &PerfArgs, out: &mut impl Write) -> Result<(), CliError> {
    check_args(a)?;
    let atomic = matches!(a.test, Test::AtomicBw | Test::AtomicLat);
    let (size, iters) = bw_or_lat_defaults(a);
    let sizes: Vec<u64> = if atomic {
        // Atomics move 8 bytes, whatever -s and -a say.
        vec![8]
    } else if a.all {
        (1..=23).map(|i| 1u64 << i).collect()
    } else {
        vec![size]
    };
    let max = sizes.iter().copied().max().unwrap_or(size);
    let mut s = setup(a, max)?;
    let mut sizes = sizes;
    if a.conn == Conn::UD {
        // perftest: "Max msg size in UD is MTU": the default size and -a stop there.
        let mtu = s.mtu.bytes() as u64;
        sizes = sizes.into_iter().map(|x| x.min(mtu)).collect();
        sizes.dedup();
    }
    let client = a.host.is_some();
    let io = CliError::Output;
    header(a, &s, out).map_err(io)?;
    let long = a.all || a.duration.is_some_and(|d| d >= 5);
    let pb = if long && std::io::stdout().is_terminal() {
        let pb = indicatif::ProgressBar::new(sizes.len() as u64 * iters);
        if let Some(d) = a.duration {
            pb.set_length(d);
        }
        pb
    } else {
        indicatif::ProgressBar::hidden()
    };
    let r = Run { a, iters, pb };
    let mut rows = Vec::new();
    match (a.test, client) {
        // Bidirectional: both sides run, each size between barriers, and each prints the sum
        // of both sides' reports (perftest's duplex path).
        (Test::WriteBw | Test::ReadBw | Test::AtomicBw, _) if a.bidir => {
            for &sz in &sizes {
                s.barrier()?;
                let mine = run_bw(&r, &s, sz)?;
                if a.all {
                    s.barrier()?;
                }
                let theirs = s.oob.xchg_report(Some(&mine))?;
                rows.push(mine.plus(&theirs));
            }
            s.close()?;
        }
        // One-sided bandwidth: the server only waits, then prints the client's report.
        (Test::WriteBw | Test::ReadBw | Test::AtomicBw, false) => {
            s.barrier()?;
            rows.push(s.oob.xchg_report(None)?);
            s.close()?;
        }
        (Test::WriteBw | Test::ReadBw | Test::AtomicBw, true) => {
            for &sz in &sizes {
                rows.push(run_bw(&r, &s, sz)?);
            }
            s.barrier()?;
            if let Some(r) = rows.last() {
                s.oob.xchg_report(Some(r))?;
            }
            s.close()?;
        }
        (Test::SendBw, _) => {
            for &sz in &sizes {
                if !client || a.bidir {
                    fill_recvs(&s)?;
                }
                s.barrier()?;
                let row = if client || a.bidir {
                    run_bw(&r, &s, sz)?
                } else {
                    run_bw_server(&r, &s, sz)?
                };
                // perftest's send_bw: the duplex reports (not in timed runs), then a barrier
                // between sizes.
                if a.bidir && a.duration.is_none() {
                    let theirs = s.oob.xchg_report(Some(&row))?;
                    rows.push(row.plus(&theirs));
                } else {
                    rows.push(row);
                }
                if a.all {
                    s.barrier()?;
                }
            }
            s.close()?;
        }
        // Only the client reads; the server waits for the end.
        (Test::ReadLat | Test::AtomicLat, false) => s.close()?,
        (Test::ReadLat | Test::AtomicLat, true) => {
            for &sz in &sizes {
                rows.push(run_lat(&r, &s, sz)?);
            }
            s.close()?;
        }
        (Test::SendLat, _) => {
            for &sz in &sizes {
                fill_recvs(&s)?;
                s.barrier()?;
                rows.push(run_lat(&r, &s, sz)?);
            }
            s.close()?;
        }
        (Test::WriteLat, _) => {
            for &sz in &sizes {
                rows.push(run_lat(&r, &s, sz)?);
            }
            // A timed run stops on each side's own clock, so the side that stops last may
            // still have a WRITE in flight to the one that stopped first: both meet here
            // before tearing down (each side's own WRITEs have completed). perftest's
            // write_lat has no such point and just exits: its socket closing ends the wait.
            if a.duration.is_some() {
                let _ = s.barrier();
            }
        }
    }
    r.pb.finish_and_clear();
    if !rows.is_empty() {
        print_table(a, &rows, out).map_err(io)?;
    } else {
        writeln!(out, "{}", "-".repeat(87)).map_err(io)?;
    }
    if a.json {
        writeln!(out, "{}", json(a, &rows)).map_err(io)?;
    }
    if let Some(p) = &a.plot {
        plot(a, &rows, p)?;
    }
    Ok(())
}
