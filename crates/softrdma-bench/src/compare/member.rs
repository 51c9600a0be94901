//! `compare`'s rows of a process that shares its device with another (`softrdma service`
//! owns it) talking to a process on another device, steered and forwarded. The service is
//! started, and killed, for each row.

use super::figures::{Figures, Kind};
use super::perf::lat;
use super::run::Run;
use crate::error::BenchError;
use crate::output::last_json;
use crate::pair::{args, command, softrdma_pair_env};

/// The member rows.
pub(super) fn rows(run: &Run, figs: &mut Figures) {
    // A process that shares its device with another (here `softrdma service`, which owns
    // it) talking to a process on another device, against the lone processes of `softrdma
    // write-lat` above: steered its datagrams by the kernel (the default), and forwarded
    // by the owner (`SOFTRDMA_STEER=0`), which costs a hop through a third process.
    let member_lat = |steer: &'static str| -> Result<f64, BenchError> {
        let mut service = command(
            &[],
            &args(&[run.sr.as_str(), "service"]),
            &[("SOFTRDMA_ADDR", "127.0.0.6"), ("SOFTRDMA_STEER", steer)],
        )
        .spawn()
        .map_err(|source| BenchError::Spawn {
            program: "softrdma service".into(),
            source,
        })?;
        // Up once it says it owns the device.
        let up = service.stderr.take().map(|e| {
            let mut r = std::io::BufReader::new(e);
            let mut line = String::new();
            let ok =
                std::io::BufRead::read_line(&mut r, &mut line).is_ok() && line.contains("owns");
            std::thread::spawn(move || std::io::copy(&mut r, &mut std::io::sink()));
            ok
        });
        let r = if up == Some(true) {
            let cmd = ["perf", "write-lat", "--json", "-s", "8", "-n", "20000"];
            let env = (
                &[("SOFTRDMA_ADDR", "127.0.0.6"), ("SOFTRDMA_STEER", steer)][..],
                &[("SOFTRDMA_ADDR", "127.0.0.7")][..],
            );
            lat(
                softrdma_pair_env(&run.pin, &run.sr, &cmd, env, 24056, run.limit)
                    .and_then(|c| last_json(&c))
                    .map(|v| v["results"][0].clone()),
            )
        } else {
            Err(BenchError::Output("softrdma service did not start".into()))
        };
        let _ = service.kill();
        let _ = service.wait();
        r
    };
    figs.add(
        "a member of a shared device (steered) to another device: softrdma write-lat 8 B, t_typical",
        Kind::Lat,
        member_lat("1"),
    );
    figs.add(
        "a member of a shared device (its owner forwards, SOFTRDMA_STEER=0) to another device: softrdma write-lat 8 B, t_typical",
        Kind::Lat,
        member_lat("0"),
    );
}
