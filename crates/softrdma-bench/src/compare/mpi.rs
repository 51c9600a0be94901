//! `compare`'s Open MPI rows: point-to-point latency (`bench/mpi_latency.c`, 8 B
//! ping-pong between ranks 0 and 1) over `--mca mtl ofi`, with softrdma's native libfabric
//! provider and with libfabric's `verbs;ofi_rxm` over the drop-in, each rank on its own
//! device, under `softrdma exec`. Skipped without `mpicc.openmpi` and `mpirun.openmpi`.

use super::figures::{Figures, Kind};
use super::libfabric::{NATIVE, TWO};
use super::run::Run;
use crate::error::BenchError;
use crate::pair::{args, command, finish, have};
use std::path::PathBuf;

/// Round trips measured per run.
const COUNT: &str = "20000";

/// `bench/mpi_latency.c`, built once into the temporary directory.
fn program() -> Result<PathBuf, BenchError> {
    for p in ["mpicc.openmpi", "mpirun.openmpi"] {
        if !have(p) {
            return Err(BenchError::NotInstalled {
                program: if p.starts_with("mpicc") {
                    "mpicc.openmpi"
                } else {
                    "mpirun.openmpi"
                },
                hint: " (libopenmpi-dev, openmpi-bin)",
            });
        }
    }
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bench/mpi_latency.c");
    let bin = std::env::temp_dir().join(format!("softrdma-mpi-latency-{}", std::process::id()));
    let argv = args(&["mpicc.openmpi", "-O2", "-o"]);
    let argv = [
        argv,
        vec![bin.display().to_string(), src.display().to_string()],
    ]
    .concat();
    let c = command(&[], &argv, &[])
        .spawn()
        .map_err(|source| BenchError::Spawn {
            program: "mpicc.openmpi".into(),
            source,
        })?;
    finish(c, std::time::Duration::from_secs(120))?;
    Ok(bin)
}

impl Run {
    /// mpi_latency's figure over `mtl ofi` with provider `prov`, rank `r` on
    /// 127.0.0.(2 + r), mpirun on 127.0.0.5.
    fn mpi_latency(&self, bin: &std::path::Path, prov: &str) -> Result<f64, BenchError> {
        let mut argv = args(&[
            self.sr.as_str(),
            "exec",
            "--",
            "mpirun.openmpi",
            "-np",
            "2",
            "--oversubscribe",
            "--timeout",
            "120",
            // Harmless when not root.
            "--allow-run-as-root",
        ]);
        let (server, client) = TWO;
        let base = server.rsplit_once('.').map_or(server, |(b, _)| b);
        debug_assert!(client.starts_with(base));
        argv.extend(args(&[
            "--mca",
            "pml",
            "cm",
            "--mca",
            "mtl",
            "ofi",
            "--mca",
            "btl",
            "self",
            "--mca",
            "mtl_ofi_provider_include",
            prov,
            "sh",
            "-c",
            &format!("SOFTRDMA_ADDR={base}.$((2 + OMPI_COMM_WORLD_RANK)) exec \"$@\""),
            "rank",
        ]));
        argv.push(bin.display().to_string());
        argv.push(COUNT.into());
        let c = command(&[], &argv, &[("SOFTRDMA_ADDR", "127.0.0.5")])
            .spawn()
            .map_err(|source| BenchError::Spawn {
                program: "mpirun.openmpi".into(),
                source,
            })?;
        let out = finish(c, self.limit)?;
        out.lines()
            .find_map(|l| l.strip_prefix("mpi_latency_us "))
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| BenchError::Output(format!("no latency in {out:?}")))
    }
}

/// The row names, for the report's goal.
pub(super) const NATIVE_ROW: &str = "Open MPI mtl ofi softrdma (native), two devices: 8 B latency";
/// See [`NATIVE_ROW`].
pub(super) const RXM_ROW: &str =
    "Open MPI mtl ofi verbs;ofi_rxm over softrdma, two devices: 8 B latency";

/// The Open MPI rows.
pub(super) fn rows(run: &Run, figs: &mut Figures) {
    let bin = program();
    for (prov, name) in [(NATIVE, NATIVE_ROW), ("verbs;ofi_rxm", RXM_ROW)] {
        let r = match &bin {
            Ok(b) => run.mpi_latency(b, prov),
            Err(e) => Err(BenchError::Output(e.to_string())),
        };
        figs.add(name, Kind::Lat, r);
    }
    if let Ok(b) = bin {
        let _ = std::fs::remove_file(b);
    }
}
