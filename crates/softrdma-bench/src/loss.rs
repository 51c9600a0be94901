//! `softrdma-bench loss`: goodput against loss rate on the soft device, and the loss-recovery
//! goals, each against the lossless run of the same work in the same invocation.
//!
//! This kernel has no netem, so the faults come from `SOFTRDMA_FAULTS` on both processes
//! (each applies them to what it sends: requests one way, responses the other). The
//! lossless runs go without it, through the device's own send path, which the fault
//! injector does not use. Two tables:
//!
//! * goodput of `softrdma perf write-bw -s 1048576` at 0, 0.1, 0.5, 1, 2 and 5 % loss, with
//!   each rate's ratio to the lossless run, also drawn as an SVG (`--svg FILE`);
//! * the goals of the loss-recovery issue: `rc-pingpong -s 100000 -n 200` (timeout 14) under
//!   drop, reorder and a mix, in usec/iter against lossless, and write-bw under 1 % loss.
//!
//! Every figure is the median of `--rounds` runs (5), taken in rounds that start with the
//! lossless run, with the range of the runs beside it.

use crate::error::BenchError;
use crate::output::last_json;
use crate::pair::{Pin, softrdma_pair};
use crate::stats::median;
use std::fmt::Write as _;
use std::time::Duration;

/// Loss rates of the goodput table, in percent.
const RATES: [f64; 6] = [0.0, 0.1, 0.5, 1.0, 2.0, 5.0];

/// `softrdma perf write-bw` goodput in bytes per second.
fn write_bw(pin: &Pin, sr: &str, secs: &str, faults: &str, port: u16) -> Result<f64, BenchError> {
    let out = softrdma_pair(
        pin,
        sr,
        &["perf", "write-bw", "-s", "1048576", "-D", secs, "--json"],
        faults,
        port,
        Duration::from_secs(120),
    )?;
    last_json(&out)?["results"][0]["bw_avg_bytes_per_sec"]
        .as_f64()
        .ok_or_else(|| BenchError::Output(format!("no bandwidth in {out:?}")))
}

/// `softrdma rc-pingpong -s 100000 -n 200` in usec/iter.
fn pingpong(pin: &Pin, sr: &str, faults: &str, port: u16) -> Result<f64, BenchError> {
    let out = softrdma_pair(
        pin,
        sr,
        &[
            "rc-pingpong",
            "-g",
            "1",
            "-s",
            "100000",
            "-n",
            "200",
            "--timeout",
            "100",
        ],
        faults,
        port,
        Duration::from_secs(120),
    )?;
    out.split_whitespace()
        .collect::<Vec<_>>()
        .windows(2)
        .find(|w| w[1] == "usec/iter")
        .and_then(|w| w[0].parse().ok())
        .ok_or_else(|| BenchError::Output(format!("no usec/iter in {out:?}")))
}

/// A run's result as the progress lines have always printed it: `Ok(1.5)`, or the error's
/// text quoted, `Err("...")`.
fn outcome(r: &Result<f64, BenchError>) -> String {
    match r {
        Ok(v) => format!("Ok({v:?})"),
        Err(e) => format!("Err({:?})", e.to_string()),
    }
}

/// One cell: the median and the range of the runs that finished, and how many failed.
fn cell(v: &[f64], failed: usize, scale: f64, unit: &str) -> String {
    let mut out = match median(v) {
        Some(m) => {
            let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = v.iter().copied().fold(0.0, f64::max);
            let unit = if unit.is_empty() {
                String::new()
            } else {
                format!(" {unit}")
            };
            format!(
                "{:.2}{unit} ({:.2}-{:.2})",
                m / scale,
                lo / scale,
                hi / scale
            )
        }
        None => "failed".into(),
    };
    if failed > 0 && !v.is_empty() {
        let _ = write!(out, ", {failed} failed");
    }
    out
}

/// Runs both tables; returns the markdown, and writes the plot to `svg`. Each figure is the
/// median of `rounds` runs, and the runs of one round (lossless first) follow each other,
/// so that a slow spell of this noisy machine touches the baseline and the faulty runs
/// alike.
pub(crate) fn run(
    pin: &Pin,
    sr: &str,
    seconds: u64,
    rounds: usize,
    svg: Option<&std::path::Path>,
) -> Result<String, BenchError> {
    let secs = seconds.to_string();
    let mut md = String::new();
    let rounds = rounds.max(1);
    // The lossless run goes without SOFTRDMA_FAULTS: the device's own send path.
    let bw_faults: Vec<String> = RATES
        .iter()
        .map(|r| {
            if *r == 0.0 {
                String::new()
            } else {
                format!("drop={}", r / 100.0)
            }
        })
        .collect();
    let mut bw: Vec<(Vec<f64>, usize)> = vec![(Vec::new(), 0); RATES.len()];
    for round in 0..rounds {
        for (i, faults) in bw_faults.iter().enumerate() {
            let r = write_bw(pin, sr, &secs, faults, 24100 + i as u16);
            eprintln!("  round {round}, drop {} %: {}", RATES[i], outcome(&r));
            match r {
                Ok(v) => bw[i].0.push(v),
                Err(_) => bw[i].1 += 1,
            }
        }
    }
    let _ = writeln!(
        md,
        "Medians of {rounds} runs (range in brackets).\n\n\
         | loss | write-bw 1 MiB goodput [GB/s] | against lossless |\n|---:|---:|---:|"
    );
    let base = median(&bw[0].0);
    let mut points = Vec::new();
    for (rate, (v, failed)) in RATES.iter().zip(&bw) {
        let ratio = match (median(v), base) {
            (Some(m), Some(b)) => {
                points.push((*rate, m));
                format!("{:.2}x", m / b)
            }
            _ => String::new(),
        };
        let _ = writeln!(md, "| {rate} % | {} | {ratio} |", cell(v, *failed, 1e9, ""));
    }
    if let Some(path) = svg {
        std::fs::write(path, plot(&points)).map_err(|source| BenchError::File {
            path: path.to_owned(),
            source,
        })?;
    }

    let goals = [
        ("", 0.0),
        ("drop=0.01", 3.0),
        ("reorder=0.05", 3.0),
        ("drop=0.02,reorder=0.05,dup=0.01", 6.0),
    ];
    let mut pp: Vec<(Vec<f64>, usize)> = vec![(Vec::new(), 0); goals.len()];
    for round in 0..rounds {
        for (i, (faults, _)) in goals.iter().enumerate() {
            let r = pingpong(pin, sr, faults, 24110 + i as u16);
            eprintln!("  round {round}, rc-pingpong {faults:?}: {}", outcome(&r));
            match r {
                Ok(v) => pp[i].0.push(v),
                Err(_) => pp[i].1 += 1,
            }
        }
    }
    let _ = writeln!(
        md,
        "\n| goal | lossless | faulty | ratio | bound |\n|---|---:|---:|---:|---:|"
    );
    let clean = median(&pp[0].0);
    for ((faults, bound), (v, failed)) in goals.iter().zip(&pp).skip(1) {
        let ratio = match (median(v), clean) {
            (Some(f), Some(c)) => format!("{:.2}x", f / c),
            _ => "failed".into(),
        };
        let _ = writeln!(
            md,
            "| rc-pingpong 100000 B, {faults} | {} | {} | {ratio} | <= {bound}x |",
            cell(&pp[0].0, pp[0].1, 1.0, "usec/iter"),
            cell(v, *failed, 1.0, "usec/iter"),
        );
    }
    let one = RATES.iter().position(|r| *r == 1.0).unwrap_or(0);
    let _ = match (base, median(&bw[one].0)) {
        (Some(b), Some(l)) => writeln!(
            md,
            "| write-bw 1 MiB, drop=0.01 | {:.3} GB/s | {:.3} GB/s | {:.2}x | >= 0.3x |",
            b / 1e9,
            l / 1e9,
            l / b
        ),
        _ => writeln!(md, "| write-bw 1 MiB, drop=0.01 | | | failed | >= 0.3x |"),
    };
    Ok(md)
}

/// Goodput against loss rate, as an SVG line chart.
fn plot(points: &[(f64, f64)]) -> String {
    let (w, h, m) = (640.0, 400.0, 60.0);
    let ymax = points
        .iter()
        .map(|p| p.1 / 1e9)
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.1;
    let x = |v: f64| m + v / 5.0 * (w - 2.0 * m);
    let y = |v: f64| h - m - v / ymax * (h - 2.0 * m);
    let poly: Vec<String> = points
        .iter()
        .map(|(r, v)| format!("{:.1},{:.1}", x(*r), y(v / 1e9)))
        .collect();
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"24\" text-anchor=\"middle\" font-size=\"14\">softrdma write-bw \
         1 MiB against packet loss, loopback</text>\n\
         <line x1=\"{m}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"black\"/>\n\
         <line x1=\"{m}\" y1=\"{m}\" x2=\"{m}\" y2=\"{b}\" stroke=\"black\"/>\n\
         <text x=\"{}\" y=\"{}\" text-anchor=\"middle\">packets dropped [%]</text>\n\
         <text x=\"16\" y=\"{}\" transform=\"rotate(-90 16 {})\" text-anchor=\"middle\">\
         goodput [GB/s]</text>\n\
         <polyline fill=\"none\" stroke=\"steelblue\" stroke-width=\"2\" points=\"{}\"/>\n",
        w / 2.0,
        w / 2.0,
        h - 16.0,
        h / 2.0,
        h / 2.0,
        poly.join(" "),
        b = h - m,
        r = w - m,
    );
    for (r, v) in points {
        let _ = writeln!(
            svg,
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"steelblue\"/>",
            x(*r),
            y(v / 1e9)
        );
    }
    for t in [0.0, 1.0, 2.0, 3.0, 4.0, 5.0] {
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{t}</text>",
            x(t),
            h - m + 16.0
        );
    }
    for f in [0.0, 0.5, 1.0] {
        let _ = writeln!(
            svg,
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{:.2}</text>",
            m - 4.0,
            y(ymax * f / 1.1) + 4.0,
            ymax * f / 1.1
        );
    }
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    #[test]
    fn medians_and_cells() {
        assert_eq!(crate::stats::median(&[]), None);
        assert_eq!(crate::stats::median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(
            super::cell(&[2e9, 1e9, 3e9], 1, 1e9, ""),
            "2.00 (1.00-3.00), 1 failed"
        );
        assert_eq!(super::cell(&[], 2, 1.0, "x"), "failed");
    }

    #[test]
    fn progress_lines_print_results_as_before() {
        let ok: Result<f64, crate::error::BenchError> = Ok(1.5);
        assert_eq!(super::outcome(&ok), format!("{:?}", Ok::<f64, String>(1.5)));
        let err: Result<f64, crate::error::BenchError> =
            Err(crate::error::BenchError::Output("no bw".into()));
        assert_eq!(
            super::outcome(&err),
            format!("{:?}", Err::<f64, String>("no bw".into()))
        );
    }

    #[test]
    fn the_plot_has_a_point_per_rate() {
        let svg = super::plot(&[(0.0, 1e9), (1.0, 8e8), (5.0, 2e8)]);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert_eq!(svg.matches("<circle").count(), 3);
        assert!(svg.contains("<polyline"));
    }
}
