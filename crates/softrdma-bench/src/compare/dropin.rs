//! `compare`'s drop-in rows: unmodified perftest through `softrdma exec`, between two devices
//! and on one.

use super::figures::{Figures, Kind};
use super::run::Run;
use crate::error::BenchError;
use crate::output::{missing, perftest_row};
use crate::pair::{Ready, args, pair};

impl Run {
    /// Unmodified perftest through the drop-in libibverbs (`softrdma exec`), both ends: the
    /// figures perftest prints (t_typical; BW average in MB/s of 2^20 bytes; MsgRate in
    /// Mpps).
    /// Over UDP between two devices, and on one device (the same-host path), as the Rust
    /// API's rows above.
    pub(super) fn perftest_at(
        &self,
        tool: &str,
        extra: &[&str],
        port: u16,
        one: bool,
    ) -> Result<Vec<f64>, BenchError> {
        let p = port.to_string();
        let mut a = vec![self.sr.as_str(), "exec", "--", tool];
        a.extend(extra);
        a.extend(["-p", &p]);
        let server = args(&a);
        a.push("127.0.0.1");
        let client = args(&a);
        let (s_addr, c_addr) = if one {
            ("127.0.0.4", "127.0.0.4")
        } else {
            ("127.0.0.2", "127.0.0.3")
        };
        let (_, c) = pair(
            &self.pin,
            (&server, &[("SOFTRDMA_ADDR", s_addr)]),
            (&client, &[("SOFTRDMA_ADDR", c_addr)]),
            Ready::Tcp(port),
            self.limit,
        )?;
        perftest_row(&c)
    }

    /// ib_write_lat 8 B: t_typical.
    pub(super) fn pt_lat_at(&self, one: bool) -> Result<f64, BenchError> {
        self.perftest_at("ib_write_lat", &["-s", "8", "-n", "20000"], 24050, one)
            .and_then(|r| r.get(4).copied().ok_or_else(missing("no t_typical")))
    }

    /// ib_write_bw 1 MiB: the average in bytes per second.
    pub(super) fn pt_bw_at(&self, one: bool) -> Result<f64, BenchError> {
        self.perftest_at(
            "ib_write_bw",
            &["-s", "1048576", "-D", &self.secs],
            24051,
            one,
        )
        .and_then(|r| {
            r.get(3)
                .map(|m| m * 1048576.0)
                .ok_or_else(missing("no BW average"))
        })
    }

    /// ib_write_bw 8 B -t 512 -Q 64: the message rate.
    pub(super) fn pt_rate_at(&self, one: bool) -> Result<f64, BenchError> {
        self.perftest_at(
            "ib_write_bw",
            &["-s", "8", "-D", &self.secs, "-t", "512", "-Q", "64"],
            24052,
            one,
        )
        .and_then(|r| r.get(4).map(|m| m * 1e6).ok_or_else(missing("no MsgRate")))
    }
}

/// The drop-in rows.
pub(super) fn rows(run: &Run, figs: &mut Figures) {
    figs.add(
        "drop-in: unmodified ib_write_lat 8 B, t_typical",
        Kind::Lat,
        run.pt_lat_at(false),
    );
    figs.add(
        "drop-in: unmodified ib_write_bw 1 MiB",
        Kind::Bw,
        run.pt_bw_at(false),
    );
    figs.add(
        "drop-in: unmodified ib_write_bw 8 B -t 512 -Q 64, message rate [msg/s]",
        Kind::Rate,
        run.pt_rate_at(false),
    );
    figs.add(
        "drop-in, one device: unmodified ib_write_lat 8 B, t_typical",
        Kind::Lat,
        run.pt_lat_at(true),
    );
    figs.add(
        "drop-in, one device: unmodified ib_write_bw 1 MiB",
        Kind::Bw,
        run.pt_bw_at(true),
    );
    figs.add(
        "drop-in, one device: unmodified ib_write_bw 8 B -t 512 -Q 64, message rate [msg/s]",
        Kind::Rate,
        run.pt_rate_at(true),
    );
}
