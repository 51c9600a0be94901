//! `compare`'s UCX rows: `ucx_perftest` over TCP, shared memory and shared memory with CMA,
//! when UCX is installed.

use super::figures::{Figures, Kind};
use super::run::Run;
use crate::error::BenchError;
use crate::output::missing;
use crate::pair::{Ready, args, have, pair};

/// The UCX rows.
pub(super) fn rows(run: &Run, figs: &mut Figures) {
    // UCX: "Final:" iterations, latency 50%, avg, overall [us], bandwidth avg, overall [MiB/s].
    let ucx =
        |tls: &str, test: &str, size: &str, n: &str, port: u16| -> Result<Vec<f64>, BenchError> {
            if !have("ucx_perftest") {
                return Err(BenchError::NotInstalled {
                    program: "ucx_perftest",
                    hint: " (ucx-utils)",
                });
            }
            let p = port.to_string();
            let (_, c) = pair(
                &run.pin,
                (&args(&["ucx_perftest", "-p", &p]), &[("UCX_TLS", tls)]),
                (
                    &args(&[
                        "ucx_perftest",
                        "127.0.0.1",
                        "-p",
                        &p,
                        "-t",
                        test,
                        "-s",
                        size,
                        "-n",
                        n,
                    ]),
                    &[("UCX_TLS", tls)],
                ),
                Ready::Tcp(port),
                run.limit,
            )?;
            let line = c
                .lines()
                .find(|l| l.starts_with("Final:"))
                .ok_or_else(|| BenchError::Output(format!("no Final: line in {c:?}")))?;
            Ok(line
                .split_whitespace()
                .skip(1)
                .filter_map(|x| x.parse().ok())
                .collect())
        };
    for (name, tls, port) in [
        ("tcp", "tcp", 24030),
        ("shared memory", "posix,self", 24032),
        ("shared memory with CMA", "posix,cma,self", 24034),
    ] {
        // Latency: the p50 field; bandwidth: the overall MiB/s field, in bytes per second.
        for (test, port) in [("ucp_put_lat", port + 10), ("tag_lat", port)] {
            figs.add(
                &format!("UCX {name} {test} 8 B, p50"),
                Kind::Lat,
                ucx(tls, test, "8", "100000", port)
                    .and_then(|v| v.get(1).copied().ok_or_else(missing("short line"))),
            );
        }
        for (test, port) in [("tag_bw", port + 11), ("ucp_put_bw", port + 1)] {
            figs.add(
                &format!("UCX {name} {test} 1 MiB"),
                Kind::Bw,
                ucx(tls, test, "1048576", "5000", port)
                    .and_then(|v| v.get(5).copied().ok_or_else(missing("short line")))
                    .map(|mib| mib * 1048576.0),
            );
        }
    }
}
