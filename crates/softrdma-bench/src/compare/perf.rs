//! `compare`'s `softrdma perf` rows between two devices over UDP, and the runners the other
//! rows and the pairs reuse.

use super::figures::{Figures, Kind};
use super::run::Run;
use crate::error::BenchError;
use crate::output::{last_json, missing};
use crate::pair::softrdma_pair;
use serde_json::Value;

/// The typical latency of a `softrdma perf` result.
pub(super) fn lat(v: Result<Value, BenchError>) -> Result<f64, BenchError> {
    v.and_then(|x| {
        x["t_typical_us"]
            .as_f64()
            .ok_or_else(missing("no t_typical"))
    })
}

/// The mean latency (`t_avg`) of a `softrdma perf` result: what `fi_pingpong` reports
/// (its `usec/xfer` is a mean), so the two compare like with like.
pub(super) fn lat_avg(v: &Result<Value, BenchError>) -> Result<f64, BenchError> {
    match v {
        Ok(x) => x["t_avg_us"].as_f64().ok_or_else(missing("no t_avg")),
        Err(e) => Err(BenchError::Output(format!("{e}"))),
    }
}

/// The average bandwidth of a `softrdma perf` result.
pub(super) fn bw(v: Result<Value, BenchError>) -> Result<f64, BenchError> {
    v.and_then(|x| {
        x["bw_avg_bytes_per_sec"]
            .as_f64()
            .ok_or_else(missing("no bw"))
    })
}

/// The message rate of a `softrdma perf` result.
pub(super) fn rate(v: Result<Value, BenchError>) -> Result<f64, BenchError> {
    v.and_then(|x| {
        x["msg_rate_per_sec"]
            .as_f64()
            .ok_or_else(missing("no rate"))
    })
}

impl Run {
    /// `softrdma perf TEST --json EXTRA` between 127.0.0.2 and 127.0.0.3: the first result.
    pub(super) fn perf(&self, test: &str, extra: &[&str], port: u16) -> Result<Value, BenchError> {
        Ok(self.perf_json(test, extra, port)?["results"][0].clone())
    }

    /// [`Run::perf`]'s whole JSON line, of the client: with its QP count and its peak
    /// resident memory (`peak_rss_kb`).
    pub(super) fn perf_json(
        &self,
        test: &str,
        extra: &[&str],
        port: u16,
    ) -> Result<Value, BenchError> {
        let mut cmd = vec!["perf", test, "--json"];
        cmd.extend(extra);
        let c = softrdma_pair(&self.pin, &self.sr, &cmd, "", port, self.limit)?;
        last_json(&c)
    }

    /// write-lat 8 B.
    pub(super) fn write_lat(&self) -> Result<f64, BenchError> {
        lat(self.perf("write-lat", &["-s", "8", "-n", "20000"], 24010))
    }

    /// write-bw 1 MiB.
    pub(super) fn write_bw_1m(&self) -> Result<f64, BenchError> {
        bw(self.perf("write-bw", &["-s", "1048576", "-D", &self.secs], 24013))
    }

    /// write-bw 8 B, message rate.
    pub(super) fn rate_8(&self) -> Result<f64, BenchError> {
        rate(self.perf(
            "write-bw",
            &["-s", "8", "-D", &self.secs, "-t", "512", "-Q", "64"],
            24014,
        ))
    }
}

/// The `softrdma perf` rows between two devices.
pub(super) fn rows(run: &Run, figs: &mut Figures) {
    figs.add(
        "softrdma write-lat 8 B, t_typical",
        Kind::Lat,
        run.write_lat(),
    );
    // The same over UC, which has no ACKs: what the ACK on the critical path costs.
    figs.add(
        "softrdma write-lat 8 B over UC, t_typical",
        Kind::Lat,
        lat(run.perf("write-lat", &["-s", "8", "-n", "20000", "-c", "UC"], 24015)),
    );
    figs.add(
        "softrdma send-lat 8 B, t_typical",
        Kind::Lat,
        lat(run.perf("send-lat", &["-s", "8", "-n", "20000"], 24011)),
    );
    figs.add(
        "softrdma write-bw 64 KiB",
        Kind::Bw,
        bw(run.perf("write-bw", &["-s", "65536", "-D", &run.secs], 24012)),
    );
    figs.add("softrdma write-bw 1 MiB", Kind::Bw, run.write_bw_1m());
    figs.add(
        "softrdma write-bw 8 B, message rate [msg/s]",
        Kind::Rate,
        run.rate_8(),
    );
}
