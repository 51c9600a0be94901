//! `compare`'s rows of many QPs at once (issue 42): the aggregate bandwidth of 64 KiB
//! WRITEs between two devices over UDP with 1, 16, 256 and 4,096 RC QPs streaming together,
//! and the memory each QP takes, from the client's peak resident memory at 1 and 4,096 QPs.

use super::figures::{Figures, Kind};
use super::perf::bw;
use super::run::Run;
use crate::error::BenchError;

/// The QP counts of the rows.
pub(super) const COUNTS: [u32; 4] = [1, 16, 256, 4096];
/// The message size of the rows, and so the bytes of buffer `perf` gives each QP per side
/// (a send and a receive slot).
const SIZE: u64 = 65536;

/// The row of `n` QPs.
pub(super) fn row(n: u32) -> String {
    format!("softrdma write-bw 64 KiB, {n} RC QPs at once (aggregate)")
}

/// The memory row.
pub(super) const MEM_ROW: &str = "softrdma memory per RC QP, beyond perf's two 64 KiB slots (client's peak RSS, 1 against 4,096 QPs) [KiB]";

/// The rows.
pub(super) fn rows(run: &Run, figs: &mut Figures) {
    let mut rss = Vec::new();
    for (i, n) in COUNTS.into_iter().enumerate() {
        // About 128 WRITEs in flight in all, as one QP's default depth, each QP at least one.
        let depth = (128 / n).max(1).to_string();
        let q = n.to_string();
        let v = run.perf_json(
            "write-bw",
            &[
                "-s",
                &SIZE.to_string(),
                "-D",
                &run.secs,
                "-q",
                &q,
                "-t",
                &depth,
            ],
            24320 + i as u16,
        );
        if let Ok(j) = &v {
            rss.push((n, j["peak_rss_kb"].as_f64()));
        }
        figs.add(&row(n), Kind::Bw, bw(v.map(|j| j["results"][0].clone())));
    }
    let at = |n| rss.iter().find(|r| r.0 == n).and_then(|r| r.1);
    let per_qp = match (at(1), at(4096)) {
        (Some(one), Some(many)) => Ok((many - one) / 4095.0 - 2.0 * SIZE as f64 / 1024.0),
        _ => Err(BenchError::Output(
            "no peak RSS from the 1 or 4,096 QP run".into(),
        )),
    };
    figs.add(MEM_ROW, Kind::Size, per_qp);
}
