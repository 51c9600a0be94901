//! `compare`'s connection-setup rows: `softrdma cm-setup`, 1,000 rdma_cm connections between
//! two devices.

use super::figures::{Figures, Kind};
use super::run::Run;
use crate::error::BenchError;
use crate::output::{last_json, missing};
use crate::pair::{Ready, args, pair};
use serde_json::Value;

/// The connection-setup rows.
pub(super) fn rows(run: &Run, figs: &mut Figures) {
    // Connection setup through rdma_cm (`softrdma cm-setup`: 1,000 connections one after
    // another, each from rdma_resolve_addr until both ends are ESTABLISHED), server and
    // client on two devices.
    let cm_setup = || -> Result<Value, BenchError> {
        let base = [run.sr.as_str(), "cm-setup", "-c", "1000", "-p", "24040"];
        let server = args(&base);
        let mut client = base.to_vec();
        client.extend(["--json", "127.0.0.2"]);
        let (_, c) = pair(
            &run.pin,
            (&server, &[("SOFTRDMA_ADDR", "127.0.0.2")]),
            (&args(&client), &[("SOFTRDMA_ADDR", "127.0.0.3")]),
            Ready::Line("ready"),
            run.limit,
        )?;
        last_json(&c)
    };
    let cm = cm_setup();
    let cm_fig = |key: &'static str| {
        cm.as_ref()
            .map_err(|e| BenchError::Output(e.to_string()))
            .and_then(|v| v[key].as_f64().ok_or_else(missing(key)))
    };
    figs.add(
        "softrdma rdma_cm connection setup (resolve_addr to ESTABLISHED at both ends), median",
        Kind::Lat,
        cm_fig("median_us"),
    );
    figs.add(
        "the same, p99 over 1,000 connections",
        Kind::Lat,
        cm_fig("p99_us"),
    );
}
