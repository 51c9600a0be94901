//! `softrdma-bench compare`: softrdma against raw UDP, iperf3, UCX and libfabric, each pair
//! of processes run in turn, then the markdown table and the goals.
//!
//! This file owns the order of the runs (the table lists the figures in that order, and
//! each family reuses TCP ports the one before it has let go of). Its children: `run` (what
//! every family runs with), `figures` (the table being filled), one file per family
//! (`udp`, `perf`, `qps`, `same_host`, `member`, `dropin`, `iperf`, `ucx`, `libfabric`, `mpi`,
//! `cm`),
//! `paired` (the back-to-back pairs the goals are judged from) and `report` (the table and
//! the goals). Families call `run` and `figures`, `paired` calls the families, `report`
//! reads `figures` and `paired`; none calls this file. One thread, one child pair at a
//! time.

mod cm;
mod dropin;
mod figures;
mod iperf;
mod libfabric;
mod member;
mod mpi;
mod paired;
mod perf;
mod qps;
mod report;
mod run;
mod same_host;
mod ucx;
mod udp;

use crate::error::BenchError;
use crate::pair::{pinning, softrdma_bin};
use figures::Figures;
use run::Run;
use std::path::PathBuf;
use std::time::Duration;

/// Runs every benchmark, the pairs and the report (`softrdma-bench compare`).
pub(crate) fn compare(softrdma: Option<PathBuf>, seconds: u64) -> Result<(), BenchError> {
    let me = std::env::current_exe().map_err(BenchError::CurrentExe)?;
    let me = me.to_string_lossy().into_owned();
    let sr = softrdma_bin(softrdma)?;
    let pin = pinning();
    let limit = Duration::from_secs(seconds * 4 + 60);
    let run = Run {
        me,
        sr,
        pin,
        limit,
        secs: seconds.to_string(),
    };
    let mut figs = Figures::default();
    udp::rows(&run, &mut figs);
    perf::rows(&run, &mut figs);
    qps::rows(&run, &mut figs);
    same_host::rows(&run, &mut figs);
    member::rows(&run, &mut figs);
    dropin::rows(&run, &mut figs);
    iperf::rows(&run, &mut figs);
    ucx::rows(&run, &mut figs);
    libfabric::rows(&run, &mut figs);
    mpi::rows(&run, &mut figs);
    let paired = paired::pairs(&run);
    cm::rows(&run, &mut figs);
    report::print_table(&figs.0, &run.pin, seconds, &paired);
    Ok(())
}
