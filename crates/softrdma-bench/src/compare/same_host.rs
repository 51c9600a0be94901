//! `compare`'s same-host rows: both processes on one device (127.0.0.4), through its rings,
//! with and without placed WRITEs, with application memory, and over UDP.

use super::figures::{Figures, Kind};
use super::perf::{bw, lat, rate};
use super::run::Run;
use crate::error::BenchError;
use crate::output::last_json;
use crate::pair::softrdma_pair_env;
use serde_json::Value;

/// `extra`, and `--app-memory` if `app`. With `--app-memory`, both ends register a heap
/// buffer of their own, as C programs do, which peers reach by cross-memory copy; without
/// it, shareable memory they map.
fn with<'a>(extra: &[&'a str], app: bool) -> Vec<&'a str> {
    let mut v = extra.to_vec();
    if app {
        v.push("--app-memory");
    }
    v
}

impl Run {
    /// `softrdma perf TEST --json EXTRA` with both processes on one device (127.0.0.4), with
    /// `SOFTRDMA_SHM=shm` and `SOFTRDMA_CMA=cma`: the first result.
    ///
    /// The same-host path: both processes on one device (127.0.0.4), through its rings, and
    /// with SOFTRDMA_SHM=0 through UDP and the owner's forwarding.
    /// Writes are placed by cross-memory copy there unless SOFTRDMA_CMA=0.
    pub(super) fn same_host_cma(
        &self,
        test: &str,
        extra: &[&str],
        shm: &str,
        cma: &str,
        port: u16,
    ) -> Result<Value, BenchError> {
        let mut cmd = vec!["perf", test, "--json"];
        cmd.extend(extra);
        let env = [
            ("SOFTRDMA_ADDR", "127.0.0.4"),
            ("SOFTRDMA_SHM", shm),
            ("SOFTRDMA_CMA", cma),
        ];
        softrdma_pair_env(&self.pin, &self.sr, &cmd, (&env, &env), port, self.limit)
            .and_then(|c| last_json(&c))
            .map(|v| v["results"][0].clone())
    }

    /// [`Run::same_host_cma`] with placed WRITEs.
    pub(super) fn same_host(
        &self,
        test: &str,
        extra: &[&str],
        shm: &str,
        port: u16,
    ) -> Result<Value, BenchError> {
        self.same_host_cma(test, extra, shm, "1", port)
    }

    /// write-lat 8 B on one device, with application memory if `app`.
    pub(super) fn same_lat_as(&self, app: bool) -> Result<f64, BenchError> {
        lat(self.same_host(
            "write-lat",
            &with(&["-s", "8", "-n", "20000"], app),
            "1",
            24050,
        ))
    }

    /// write-bw 1 MiB on one device, with application memory if `app`.
    pub(super) fn same_bw_1m_as(&self, app: bool) -> Result<f64, BenchError> {
        bw(self.same_host(
            "write-bw",
            &with(&["-s", "1048576", "-m", "4096", "-D", &self.secs], app),
            "1",
            24052,
        ))
    }

    /// write-bw 8 B message rate on one device, with application memory if `app`.
    pub(super) fn same_rate_8_as(&self, app: bool) -> Result<f64, BenchError> {
        rate(self.same_host(
            "write-bw",
            &with(&["-s", "8", "-D", &self.secs, "-t", "512", "-Q", "64"], app),
            "1",
            24053,
        ))
    }
}

/// The same-host rows.
pub(super) fn rows(run: &Run, figs: &mut Figures) {
    figs.add(
        "same host, one device (rings, SOFTRDMA_CMA=0): softrdma write-lat 8 B, t_typical",
        Kind::Lat,
        lat(run.same_host_cma("write-lat", &["-s", "8", "-n", "20000"], "1", "0", 24054)),
    );
    figs.add(
        "same host, one device (rings, SOFTRDMA_CMA=0): softrdma write-bw 1 MiB",
        Kind::Bw,
        bw(run.same_host_cma(
            "write-bw",
            &["-s", "1048576", "-m", "4096", "-D", &run.secs],
            "1",
            "0",
            24055,
        )),
    );
    for (shm, how) in [("1", "rings"), ("0", "SOFTRDMA_SHM=0, UDP")] {
        figs.add(
            &format!("same host, one device ({how}): softrdma write-lat 8 B, t_typical"),
            Kind::Lat,
            lat(run.same_host("write-lat", &["-s", "8", "-n", "20000"], shm, 24050)),
        );
    }
    figs.add(
        "same host, one device (rings): softrdma send-lat 8 B, t_typical",
        Kind::Lat,
        lat(run.same_host("send-lat", &["-s", "8", "-n", "20000"], "1", 24051)),
    );
    figs.add(
        "same host, one device (rings): softrdma write-bw 1 MiB",
        Kind::Bw,
        run.same_bw_1m_as(false),
    );
    figs.add(
        "same host, one device (rings): softrdma write-bw 8 B, message rate [msg/s]",
        Kind::Rate,
        run.same_rate_8_as(false),
    );
    figs.add(
        "same host, one device (rings), application memory: softrdma write-lat 8 B, t_typical",
        Kind::Lat,
        run.same_lat_as(true),
    );
    figs.add(
        "same host, one device (rings), application memory: softrdma write-bw 1 MiB",
        Kind::Bw,
        run.same_bw_1m_as(true),
    );
    figs.add(
        "same host, one device (rings), application memory: softrdma write-bw 8 B, message rate [msg/s]",
        Kind::Rate,
        run.same_rate_8_as(true),
    );
}
