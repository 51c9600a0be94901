//! What `softrdma perf` prints: perftest's test information and address blocks, its result
//! table, the `--json` line and the `--plot` SVG. Its format is what perftest's users, the
//! man page and the tests read: keep it.
//!
//! Calls `args`, `setup` (for the header) and `stats`; writes to the given output.

use super::args::{AtomicType, PerfArgs, Test, tx_depth};
use super::setup::{RX_DEPTH, Setup};
use super::stats::{Row, stats};
use crate::error::CliError;
use std::io::Write;

/// C's `%#0Nx`: like Rust's `{:#0N$x}` but zero prints without the prefix.
fn c_hex(v: u64, width: usize) -> String {
    if v == 0 {
        format!("{:0width$}", 0)
    } else {
        format!("{v:#0width$x}")
    }
}

/// perftest's test information block and the two address blocks.
pub(super) fn header(a: &PerfArgs, s: &Setup, out: &mut impl Write) -> std::io::Result<()> {
    let line = "-".repeat(87);
    let client = a.host.is_some();
    writeln!(out, "{line}")?;
    writeln!(out, "                    {}", s_title(a))?;
    writeln!(
        out,
        " Dual-port       : OFF\t\tDevice         : {}",
        s.ctx.name()
    )?;
    writeln!(out, " Number of qps   : 1\t\tTransport type : IB")?;
    writeln!(
        out,
        " Connection type : {:?}\t\tUsing SRQ      : OFF",
        a.conn
    )?;
    writeln!(out, " PCIe relax order: ON")?;
    writeln!(out, " ibv_wr* API     : OFF")?;
    if client || a.bidir || !a.test.is_bw() {
        writeln!(out, " TX depth        : {}", tx_depth(a))?;
    }
    if a.post_list > 1 && a.test.is_bw() {
        writeln!(out, " Post List       : {}", a.post_list)?;
    }
    if matches!(a.test, Test::SendBw | Test::SendLat) && (!client || !a.test.is_bw()) {
        writeln!(out, " RX depth        : {RX_DEPTH}")?;
    }
    if a.test.is_bw() {
        writeln!(out, " CQ Moderation   : {}", a.cq_mod.min(tx_depth(a)))?;
    }
    writeln!(out, " Mtu             : {}[B]", s.mtu.bytes())?;
    writeln!(out, " Link type       : Ethernet")?;
    writeln!(out, " GID index       : {}", a.gid_index)?;
    if a.test.reads() {
        writeln!(out, " Outstand reads  : {}", s.me().out_reads)?;
    } else {
        writeln!(out, " Max inline data : {}[B]", a.inline.unwrap_or(0))?;
    }
    writeln!(out, " rdma_cm QPs\t : OFF")?;
    writeln!(out, " Data ex. method : Ethernet")?;
    writeln!(out, "{line}")?;
    let sides = s.qps.iter().map(|q| ("local", &q.me));
    for (what, k) in sides.chain(s.qps.iter().map(|q| ("remote", &q.rem))) {
        write!(
            out,
            " {what} address: LID {} QPN {} PSN {}",
            c_hex(k.lid.into(), 4),
            c_hex(k.qpn.into(), 6),
            c_hex(k.psn.into(), 6)
        )?;
        if matches!(a.test, Test::ReadBw | Test::ReadLat) {
            write!(out, " OUT {}", c_hex(k.out_reads.into(), 4))?;
        }
        if matches!(
            a.test,
            Test::ReadBw | Test::ReadLat | Test::WriteBw | Test::WriteLat
        ) {
            write!(
                out,
                " RKey {} VAddr {}",
                c_hex(k.rkey.into(), 8),
                c_hex(k.vaddr, 16)
            )?;
        }
        writeln!(out)?;
        let g: Vec<String> = k.gid.iter().map(|b| format!("{b:02}")).collect();
        writeln!(out, " GID: {}", g.join(":"))?;
    }
    writeln!(out, "{line}")
}

fn s_title(a: &PerfArgs) -> String {
    let t = match (a.test, a.atomic) {
        (Test::AtomicBw, AtomicType::CMP_AND_SWAP) => "Atomic CMP_AND_SWAP BW Test",
        (Test::AtomicLat, AtomicType::CMP_AND_SWAP) => "Atomic CMP_AND_SWAP Latency Test",
        (t, _) => t.title(),
    };
    if a.bidir {
        t.replace(" BW Test", " Bidirectional BW Test")
    } else {
        t.into()
    }
}

/// perftest's result table: one line per row.
pub(super) fn print_table(a: &PerfArgs, rows: &[Row], out: &mut impl Write) -> std::io::Result<()> {
    let line = "-".repeat(87);
    let unit = if a.report_gbits { "Gb/sec" } else { "MB/sec" };
    let conv = |b: f64| {
        if a.report_gbits {
            b * 8.0 / 1e9
        } else {
            b / 1048576.0
        }
    };
    if a.test.is_bw() {
        writeln!(
            out,
            " #bytes     #iterations    BW peak[{unit}]    BW average[{unit}]   MsgRate[Mpps]"
        )?;
    } else {
        writeln!(
            out,
            " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
        )?;
    }
    for r in rows {
        match r {
            Row::Bw {
                bytes,
                iters,
                peak,
                avg,
                rate,
            } => writeln!(
                out,
                " {bytes:<10} {iters:<10}       {:.2}            {:.2}   \t\t   {:.6}",
                conv(*peak),
                conv(*avg),
                rate / 1e6
            )?,
            Row::Lat { bytes, iters, us } => {
                let (min, max, typ, avg, sd, p99, p999) = stats(us);
                writeln!(
                    out,
                    " {bytes:<7} {iters:<10} {min:<14.2} {max:<12.2} {typ:<8.2} \t       {avg:<11.2} \t{sd:.2}  \t\t{p99:.2} \t\t{p999:.2}"
                )?
            }
        }
    }
    writeln!(out, "{line}")
}

/// The `--json` line: the test and one object per row.
pub(super) fn json(a: &PerfArgs, rows: &[Row]) -> serde_json::Value {
    let results: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| match r {
            Row::Bw {
                bytes,
                iters,
                peak,
                avg,
                rate,
            } => serde_json::json!({
                "bytes": bytes,
                "iterations": iters,
                "bw_peak_bytes_per_sec": peak,
                "bw_avg_bytes_per_sec": avg,
                "msg_rate_per_sec": rate,
            }),
            Row::Lat { bytes, iters, us } => {
                let (min, max, typ, avg, sd, p99, p999) = stats(us);
                serde_json::json!({
                    "bytes": bytes,
                    "iterations": iters,
                    "t_min_us": min,
                    "t_max_us": max,
                    "t_typical_us": typ,
                    "t_avg_us": avg,
                    "t_stdev_us": sd,
                    "p99_us": p99,
                    "p999_us": p999,
                })
            }
        })
        .collect();
    serde_json::json!({
        "test": a.test.name(),
        "qps": a.qps,
        "peak_rss_kb": peak_rss_kb(),
        "results": results,
    })
}

/// This process's peak resident memory (`VmHWM`), in KiB, if the kernel says: what the
/// bench divides among QPs.
fn peak_rss_kb() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The `--plot` SVG: bandwidth or typical latency against log2 of the message size.
pub(super) fn plot(a: &PerfArgs, rows: &[Row], path: &std::path::Path) -> Result<(), CliError> {
    let pts: Vec<(f64, f64)> = rows
        .iter()
        .map(|r| match r {
            Row::Bw { bytes, avg, .. } => ((*bytes as f64).log2(), avg / 1e9),
            Row::Lat { bytes, us, .. } => ((*bytes as f64).log2(), stats(us).2),
        })
        .collect();
    let ymax = pts.iter().map(|p| p.1).fold(0.0f64, f64::max).max(1e-9) * 1.1;
    let (w, h, m) = (720.0, 420.0, 60.0);
    let x = |v: f64| m + (v - 1.0) / 22.0 * (w - 2.0 * m);
    let y = |v: f64| h - m - v / ymax * (h - 2.0 * m);
    let poly: Vec<String> = pts
        .iter()
        .map(|(a, b)| format!("{:.1},{:.1}", x(*a), y(*b)))
        .collect();
    let ylabel = if a.test.is_bw() {
        "bandwidth [GB/s]"
    } else {
        "t_typical [us]"
    };
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"24\" text-anchor=\"middle\" font-size=\"16\">softrdma perf {}</text>\n\
         <line x1=\"{m}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n<line x1=\"{m}\" y1=\"{m}\" x2=\"{m}\" y2=\"{}\" stroke=\"black\"/>\n\
         <text x=\"{}\" y=\"{}\" text-anchor=\"middle\">message size [bytes, log2]</text>\n\
         <text x=\"16\" y=\"{}\" transform=\"rotate(-90 16 {})\" text-anchor=\"middle\">{ylabel}</text>\n\
         <polyline fill=\"none\" stroke=\"steelblue\" stroke-width=\"2\" points=\"{}\"/>\n",
        w / 2.0,
        a.test.name(),
        h - m,
        w - m,
        h - m,
        h - m,
        w / 2.0,
        h - 20.0,
        h / 2.0,
        h / 2.0,
        poly.join(" ")
    );
    for i in [1, 4, 8, 12, 16, 20, 23] {
        svg.push_str(&format!(
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">2^{i}</text>\n",
            x(f64::from(i)),
            h - m + 16.0
        ));
    }
    svg.push_str(&format!(
        "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{ymax:.2}</text>\n</svg>\n",
        m - 4.0,
        m + 4.0
    ));
    std::fs::write(path, svg).map_err(|source| CliError::Io {
        what: path.display().to_string(),
        source,
    })
}
