//! `softrdma sim`: the transport engine in the deterministic simulator.

use crate::error::CliError;
use clap::{Args, ValueEnum};
use serde_json::json;
use softrdma_proto::sim::{LinkFaults, LinkRate};
use softrdma_proto::workload::{OpMix, WorkloadConfig, lossless, run_workload_observed};
use softrdma_proto::{Instant, Mtu, QpType};
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Transport {
    Rc,
    Uc,
    Ud,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Op {
    Send,
    Write,
    Read,
    Atomic,
    Mixed,
}

/// Flags of `softrdma sim`.
#[derive(Debug, Args)]
pub struct SimArgs {
    /// Transport.
    #[arg(long, value_enum, default_value = "rc")]
    transport: Transport,
    /// Operations to post (mixed: every one the transport allows).
    #[arg(long, value_enum, default_value = "mixed")]
    op: Op,
    /// Work requests over all QPs.
    #[arg(long, default_value_t = 1000)]
    ops: u64,
    /// Message size in bytes, or a range MIN:MAX to draw from.
    #[arg(long, default_value = "1:4096", value_parser = parse_size)]
    size: (u32, u32),
    /// Path MTU: 256, 512, 1024, 2048 or 4096.
    #[arg(long, default_value_t = 1024, value_parser = parse_mtu)]
    mtu: usize,
    /// QP pairs.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=1024))]
    qps: u32,
    /// Probability that a packet is lost.
    #[arg(long, default_value_t = 0.0, value_parser = parse_prob)]
    loss: f64,
    /// Probability that a packet is duplicated.
    #[arg(long, default_value_t = 0.0, value_parser = parse_prob)]
    dup: f64,
    /// Probability that a packet is reordered.
    #[arg(long, default_value_t = 0.0, value_parser = parse_prob)]
    reorder: f64,
    /// Probability that a packet has a bit flipped (the ICRC must catch it).
    #[arg(long, default_value_t = 0.0, value_parser = parse_prob)]
    corrupt: f64,
    /// One-way link delay in microseconds.
    #[arg(long, default_value_t = 5)]
    delay_us: u64,
    /// Cut the network at this simulated time, in microseconds.
    #[arg(long)]
    partition_at_us: Option<u64>,
    /// Seed of the workload and the network.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Transport retries, 0-7 (7: unlimited, as rxe). Default: 7, or 3 with a partition.
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=7))]
    retry_cnt: Option<u8>,
    /// Local ACK timeout exponent, 1-31 (4.096 us x 2^N).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u8).range(1..=31))]
    timeout: u8,
    /// Give each direction of the link this rate, in Gb/s, with a drop-tail queue
    /// (`--queue-pkts`) that every QP pair shares: congestion loss.
    #[arg(long, value_parser = parse_gbps)]
    link_gbps: Option<f64>,
    /// Packets the link's queue holds (with `--link-gbps`).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    queue_pkts: u64,
    /// Print one JSON line instead of a summary.
    #[arg(long)]
    json: bool,
}

fn parse_size(s: &str) -> Result<(u32, u32), CliError> {
    let num = |x: &str| {
        x.trim()
            .parse::<u32>()
            .map_err(|source| CliError::ByteCount {
                text: x.into(),
                source,
            })
    };
    let (lo, hi) = match s.split_once(':') {
        Some((a, b)) => (num(a)?, num(b)?),
        None => (num(s)?, num(s)?),
    };
    if lo > hi {
        return Err(CliError::Usage(format!("MIN {lo} is larger than MAX {hi}")));
    }
    if hi > 1 << 31 {
        return Err(CliError::Usage("messages are at most 2^31 bytes".into()));
    }
    Ok((lo, hi))
}

fn parse_mtu(s: &str) -> Result<usize, CliError> {
    let v: usize = s.parse().map_err(|source| CliError::ParseInt {
        text: s.into(),
        source,
    })?;
    Mtu::from_bytes(v).map(|m| m.bytes()).ok_or_else(|| {
        CliError::Usage(format!(
            "{v} is not an IB MTU (256, 512, 1024, 2048 or 4096)"
        ))
    })
}

/// A decimal flag's value.
fn parse_f64(s: &str) -> Result<f64, CliError> {
    s.parse().map_err(|source| CliError::ParseFloat {
        text: s.into(),
        source,
    })
}

fn parse_gbps(s: &str) -> Result<f64, CliError> {
    let v = parse_f64(s)?;
    if v > 0.0 && v <= 10_000.0 {
        Ok(v)
    } else {
        Err(CliError::Usage(format!(
            "{v} is not a link rate between 0 and 10000 Gb/s"
        )))
    }
}

fn parse_prob(s: &str) -> Result<f64, CliError> {
    let v = parse_f64(s)?;
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(CliError::Usage(format!(
            "{v} is not a probability between 0 and 1"
        )))
    }
}

/// Runs `softrdma sim`.
pub fn run(a: &SimArgs, out: &mut impl Write) -> ExitCode {
    let transport = match a.transport {
        Transport::Rc => QpType::Rc,
        Transport::Uc => QpType::Uc,
        Transport::Ud => QpType::Ud,
    };
    let mix = match a.op {
        Op::Send => OpMix::Send,
        Op::Write => OpMix::Write,
        Op::Read => OpMix::Read,
        Op::Atomic => OpMix::Atomic,
        Op::Mixed => OpMix::Mixed,
    };
    let allowed = match transport {
        QpType::Rc => true,
        QpType::Uc => matches!(mix, OpMix::Send | OpMix::Write | OpMix::Mixed),
        QpType::Ud => matches!(mix, OpMix::Send | OpMix::Mixed),
    };
    if !allowed {
        eprintln!(
            "softrdma sim: --op {:?} is not available on {:?} (UC has SEND and WRITE; UD has SEND)",
            a.op, a.transport
        );
        return ExitCode::from(2);
    }
    let mtu = Mtu::from_bytes(a.mtu).unwrap_or(Mtu::M1024);
    if transport == QpType::Ud && a.size.0 as usize > mtu.bytes() {
        eprintln!(
            "softrdma sim: UD messages are at most one MTU ({} bytes)",
            mtu.bytes()
        );
        return ExitCode::from(2);
    }
    let max_pkts = u64::from(a.size.1).div_ceil(mtu.bytes() as u64).max(1);
    let cfg = WorkloadConfig {
        transport,
        mix,
        ops: a.ops,
        min_size: a.size.0,
        max_size: a.size.1,
        mtu,
        qps: a.qps,
        faults: LinkFaults {
            loss: a.loss,
            dup: a.dup,
            reorder: a.reorder,
            corrupt: a.corrupt,
            delay: Duration::from_micros(a.delay_us),
            jitter: Duration::from_micros(a.delay_us / 5),
            reorder_hold: Duration::ZERO,
            reorder_spread: 4.0,
            partition_at: a.partition_at_us.map(|t| Instant::from_nanos(t * 1000)),
            rate: a.link_gbps.map(|g| LinkRate {
                bits_per_sec: (g * 1e9) as u64,
                queue_pkts: a.queue_pkts as usize,
            }),
        },
        seed: a.seed,
        retry_cnt: a
            .retry_cnt
            .unwrap_or(if a.partition_at_us.is_some() { 3 } else { 7 }),
        timeout: a.timeout,
        max_steps: 1_000_000 + a.ops.saturating_mul(max_pkts).saturating_mul(400),
    };
    // Both runs on one bar, on stderr when it is a terminal (a run of 50,000 operations
    // takes seconds).
    let pb = crate::progress::bar(a.ops.saturating_mul(2), "work requests");
    let r = match run_workload_observed(&cfg, &mut |n| pb.set_position(n)) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("softrdma sim: {e}");
            return ExitCode::from(1);
        }
    };
    // The same work on a lossless link, so that the run is judged by its efficiency too.
    let base = match run_workload_observed(&lossless(&cfg), &mut |n| {
        pb.set_position(a.ops.saturating_add(n))
    }) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("softrdma sim: the lossless run: {e}");
            return ExitCode::from(1);
        }
    };
    pb.finish_and_clear();
    let slowdown = r.sim_time_ns as f64 / base.sim_time_ns.max(1) as f64;
    let c = &r.counters;
    // Goodput as a share of the line rate.
    let utilization = a.link_gbps.map(|g| r.goodput_bps() * 8.0 / (g * 1e9));
    let written = if a.json {
        let line = json!({
            "posted": r.posted,
            "ok": r.ok,
            "errors": r.errors,
            "data_verified": r.data_verified,
            "packets_sent": r.packets_sent,
            "retransmits": r.retransmits,
            "timeouts": c.timeouts,
            "probes": c.probes,
            "seq_naks": c.seq_naks_sent,
            "sim_time_us": r.sim_time_us(),
            "goodput_bytes_per_s": r.goodput_bps().round(),
            "lossless_us": base.sim_time_us(),
            "slowdown": (slowdown * 1000.0).round() / 1000.0,
            "queue_drops": r.sim.queue_drops,
            "link_utilization": utilization.map(|u| (u * 1000.0).round() / 1000.0),
        });
        writeln!(out, "{line}")
    } else {
        let s = &r.sim;
        writeln!(
            out,
            "{:?} {:?}: {} posted, {} ok, errors {:?}\n\
             data verified: {}\n\
             packets: {} sent, {} delivered, {} lost, {} duplicated, {} reordered, \
             {} corrupted ({} caught by ICRC), {} partitioned\n\
             retransmits: {}, timeouts: {}, probes: {}, sequence NAKs: {}, timers: {}, steps: {}\n\
             simulated time: {} us, {:.2}x the same work without faults ({} us); \
             goodput {:.3} Gb/s{}\n\
             guarantees {}{}",
            a.transport,
            a.op,
            r.posted,
            r.ok,
            r.errors,
            r.data_verified,
            r.packets_sent,
            s.delivered,
            s.lost,
            s.duplicated,
            s.reordered,
            s.corrupted,
            s.icrc_drops,
            s.partitioned,
            r.retransmits,
            c.timeouts,
            c.probes,
            c.seq_naks_sent,
            s.timers,
            s.steps,
            r.sim_time_us(),
            slowdown,
            base.sim_time_us(),
            r.goodput_bps() * 8.0 / 1e9,
            utilization.map_or(String::new(), |u| format!(
                " ({:.1} % of the link; {} packets dropped by its full queue)",
                u * 100.0,
                r.sim.queue_drops
            )),
            if r.guarantees_met { "met" } else { "NOT met" },
            r.problems
                .iter()
                .take(10)
                .map(|p| format!("\n  {p}"))
                .collect::<String>()
        )
    };
    if let Err(e) = written {
        eprintln!("softrdma sim: cannot write the report: {e}");
        return ExitCode::from(2);
    }
    if r.guarantees_met {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
