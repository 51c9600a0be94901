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

use super::{Pin, last_json, softrdma_pair};
use std::fmt::Write as _;
use std::time::Duration;

/// Loss rates of the goodput table, in percent.
const RATES: [f64; 6] = [0.0, 0.1, 0.5, 1.0, 2.0, 5.0];

/// `softrdma perf write-bw` goodput in bytes per second.
fn write_bw(pin: &Pin, sr: &str, secs: &str, faults: &str, port: u16) -> Result<f64, String> {
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
        .ok_or_else(|| format!("no bandwidth in {out:?}"))
}

/// `softrdma rc-pingpong -s 100000 -n 200` in usec/iter.
fn pingpong(pin: &Pin, sr: &str, faults: &str, port: u16) -> Result<f64, String> {
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
        .ok_or_else(|| format!("no usec/iter in {out:?}"))
}

/// Runs both tables; returns the markdown, and writes the plot to `svg`.
pub(crate) fn run(
    pin: &Pin,
    sr: &str,
    seconds: u64,
    svg: Option<&std::path::Path>,
) -> Result<String, String> {
    let secs = seconds.to_string();
    let mut md = String::new();
    let mut points = Vec::new();
    let _ = writeln!(
        md,
        "| loss | write-bw 1 MiB goodput [GB/s] | against lossless |\n|---:|---:|---:|"
    );
    let mut base = None;
    for (i, rate) in RATES.iter().enumerate() {
        // The lossless run goes without SOFTRDMA_FAULTS: the device's own send path.
        let faults = if *rate == 0.0 {
            String::new()
        } else {
            format!("drop={}", rate / 100.0)
        };
        let r = write_bw(pin, sr, &secs, &faults, 24100 + i as u16);
        eprintln!("  drop {rate} %: {r:?}");
        match r {
            Ok(v) => {
                let b = *base.get_or_insert(v);
                points.push((*rate, v));
                let _ = writeln!(md, "| {rate} % | {:.3} | {:.2}x |", v / 1e9, v / b);
            }
            Err(e) => {
                let _ = writeln!(md, "| {rate} % | failed: {} | |", e.replace('|', "/"));
            }
        }
    }
    if let Some(path) = svg {
        std::fs::write(path, plot(&points)).map_err(|e| format!("{}: {e}", path.display()))?;
    }

    let _ = writeln!(
        md,
        "\n| goal | lossless | faulty | ratio | bound |\n|---|---:|---:|---:|---:|"
    );
    let clean = pingpong(pin, sr, "", 24110);
    eprintln!("  rc-pingpong lossless: {clean:?}");
    for (i, (faults, bound)) in [
        ("drop=0.01", 3.0),
        ("reorder=0.05", 3.0),
        ("drop=0.02,reorder=0.05,dup=0.01", 6.0),
    ]
    .into_iter()
    .enumerate()
    {
        let r = pingpong(pin, sr, faults, 24111 + i as u16);
        eprintln!("  rc-pingpong {faults}: {r:?}");
        let row = match (&clean, r) {
            (Ok(c), Ok(f)) => format!(
                "| {:.1} usec/iter | {f:.1} usec/iter | {:.2}x | <= {bound}x |",
                c,
                f / c
            ),
            (c, f) => format!("| {c:?} | {f:?} | | <= {bound}x |"),
        };
        let _ = writeln!(md, "| rc-pingpong 100000 B, {faults} {row}");
    }
    let lossy = points.iter().find(|p| p.0 == 1.0).map(|p| p.1);
    let _ = match (base, lossy) {
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
    fn the_plot_has_a_point_per_rate() {
        let svg = super::plot(&[(0.0, 1e9), (1.0, 8e8), (5.0, 2e8)]);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert_eq!(svg.matches("<circle").count(), 3);
        assert!(svg.contains("<polyline"));
    }
}
