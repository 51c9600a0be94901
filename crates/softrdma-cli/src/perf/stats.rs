//! A row of results and its statistics: bandwidth from completion marks, and the latency
//! figures perftest prints (min, max, typical, average, deviation, percentiles).
//!
//! Owns [`Row`]; calls nothing of the other `perf` files.

use std::time::Instant;

/// One row of results.
#[derive(Debug, Clone)]
pub(super) enum Row {
    /// A bandwidth test's: message size, iterations (per QP) and rates.
    Bw {
        bytes: u64,
        iters: u64,
        /// Bytes per second.
        peak: f64,
        /// Bytes per second.
        avg: f64,
        /// Messages per second.
        rate: f64,
    },
    /// A latency test's: message size, iterations and samples.
    Lat {
        bytes: u64,
        iters: u64,
        /// One sample per iteration, in microseconds.
        us: Vec<f64>,
    },
}

impl Row {
    /// Both directions of a bidirectional test: rates add up (perftest's
    /// `print_full_bw_report`).
    pub(super) fn plus(&self, other: &Row) -> Row {
        match (self, other) {
            (
                &Row::Bw {
                    bytes,
                    iters,
                    peak,
                    avg,
                    rate,
                },
                &Row::Bw {
                    peak: p2,
                    avg: a2,
                    rate: r2,
                    ..
                },
            ) => Row::Bw {
                bytes,
                iters,
                peak: peak + p2,
                avg: avg + a2,
                rate: rate + r2,
            },
            (r, _) => r.clone(),
        }
    }

    /// Replaces the iteration count of a bandwidth row.
    pub(super) fn set_iters(&mut self, n: u64) {
        if let Row::Bw { iters, .. } = self {
            *iters = n;
        }
    }
}

/// Bandwidth from completion marks `(time, messages done)`: the average over the run, and the
/// peak as the best of 16 equal slices of the run, so that a burst of completions reported
/// together cannot pass for a rate.
pub(super) fn bw_row(size: u64, start: Instant, marks: &[(Instant, u64)]) -> Row {
    let done = marks.last().map_or(0, |m| m.1);
    let secs = marks
        .last()
        .map_or(0.0, |m| m.0.duration_since(start).as_secs_f64())
        .max(1e-9);
    let avg = (done * size) as f64 / secs;
    let mut slices = [0u64; 16];
    let mut prev = 0;
    for &(t, n) in marks {
        let i = (t.duration_since(start).as_secs_f64() / secs * 16.0) as usize;
        slices[i.min(15)] += n - prev;
        prev = n;
    }
    let best = slices.iter().copied().max().unwrap_or(0);
    let peak = ((best * size) as f64 / (secs / 16.0)).max(avg);
    Row::Bw {
        bytes: size,
        iters: done,
        peak,
        avg,
        rate: done as f64 / secs,
    }
}

/// Latency samples in microseconds: min, max, median (perftest's typical), average,
/// standard deviation, 99th and 99.9th percentiles.
pub(super) fn stats(us: &[f64]) -> (f64, f64, f64, f64, f64, f64, f64) {
    let mut v = us.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    }
    let n = v.len();
    let avg = v.iter().sum::<f64>() / n as f64;
    let stdev = (v.iter().map(|x| (x - avg) * (x - avg)).sum::<f64>() / n as f64).sqrt();
    let pct = |p: f64| v[((n as f64 * p).ceil() as usize).clamp(1, n) - 1];
    (v[0], v[n - 1], v[n / 2], avg, stdev, pct(0.99), pct(0.999))
}
