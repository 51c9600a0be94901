//! `compare`'s iperf3 row: TCP on loopback, when iperf3 is installed.

use super::figures::{Figures, Kind};
use super::run::Run;
use crate::error::BenchError;
use crate::output::missing;
use crate::pair::{Ready, args, have, pair};
use serde_json::Value;

/// The iperf3 row.
pub(super) fn rows(run: &Run, figs: &mut Figures) {
    // iperf3.
    let r = if have("iperf3") {
        pair(
            &run.pin,
            (
                &args(&["iperf3", "-s", "-1", "-p", "24020", "-B", "127.0.0.1"]),
                &[],
            ),
            (
                &args(&[
                    "iperf3",
                    "-c",
                    "127.0.0.1",
                    "-p",
                    "24020",
                    "-t",
                    &run.secs,
                    "-J",
                ]),
                &[],
            ),
            Ready::Tcp(24020),
            run.limit,
        )
        .and_then(|(_, c)| serde_json::from_str::<Value>(&c).map_err(BenchError::Json))
        .and_then(|v| {
            v["end"]["sum_received"]["bits_per_second"]
                .as_f64()
                .map(|b| b / 8.0)
                .ok_or_else(missing("no sum_received"))
        })
    } else {
        Err(BenchError::NotInstalled {
            program: "iperf3",
            hint: "",
        })
    };
    figs.add("iperf3 TCP", Kind::Bw, r);
}
