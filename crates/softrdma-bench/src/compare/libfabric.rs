//! `compare`'s libfabric rows: `fi_pingpong` over libfabric's own providers, over its
//! verbs provider on softrdma (the drop-in), and over softrdma's native provider
//! (`softrdma`, which `softrdma exec` makes libfabric find), when libfabric is installed.

use super::figures::{Figures, Kind};
use super::run::Run;
use crate::error::BenchError;
use crate::pair::{Ready, args, have, pair};

impl Run {
    /// libfabric fi_pingpong: bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec. With
    /// `over` (the server's and the client's device addresses), both ends run on softrdma
    /// through `softrdma exec`.
    pub(super) fn fi_at(
        &self,
        prov: &str,
        size: &str,
        n: &str,
        port: u16,
        over: Option<(&str, &str)>,
    ) -> Result<Vec<String>, BenchError> {
        if !have("fi_pingpong") {
            return Err(BenchError::NotInstalled {
                program: "fi_pingpong",
                hint: " (libfabric-bin)",
            });
        }
        let p = port.to_string();
        let mut common = args(&["fi_pingpong", "-p", prov, "-e", "rdm", "-I", n, "-S", size]);
        if prov == NATIVE && over.is_none() {
            return Err(BenchError::Output(
                "the native provider runs only under softrdma exec".into(),
            ));
        }
        if over.is_some() {
            common.splice(0..0, args(&[self.sr.as_str(), "exec", "--"]));
        }
        let server = [common.clone(), args(&["-B", &p])].concat();
        let client = [common, args(&["-P", &p, "127.0.0.1"])].concat();
        let (s_env, c_env) = match over {
            Some((s, c)) => (vec![("SOFTRDMA_ADDR", s)], vec![("SOFTRDMA_ADDR", c)]),
            None => (vec![], vec![]),
        };
        let (_, c) = pair(
            &self.pin,
            (&server, &s_env),
            (&client, &c_env),
            Ready::Tcp(port),
            self.limit,
        )?;
        let line = c.lines().last().unwrap_or_default();
        Ok(line.split_whitespace().map(str::to_owned).collect())
    }

    /// [`Run::fi_at`] with libfabric alone.
    pub(super) fn fi(
        &self,
        prov: &str,
        size: &str,
        n: &str,
        port: u16,
    ) -> Result<Vec<String>, BenchError> {
        self.fi_at(prov, size, n, port, None)
    }
}

/// softrdma's native provider.
pub(super) const NATIVE: &str = "softrdma";
/// Two devices (the UDP path) and one device (the same-host path), for the rows over
/// softrdma.
pub(super) const TWO: (&str, &str) = ("127.0.0.2", "127.0.0.3");
/// See [`TWO`].
pub(super) const ONE: (&str, &str) = ("127.0.0.4", "127.0.0.4");

/// Field `i` of an `fi_pingpong` line, as a number.
pub(super) fn field(v: Result<Vec<String>, BenchError>, i: usize) -> Result<f64, BenchError> {
    v.and_then(|f| {
        f.get(i)
            .and_then(|x| x.parse().ok())
            .ok_or_else(|| BenchError::Output(format!("unexpected line {f:?}")))
    })
}

/// The libfabric rows.
pub(super) fn rows(run: &Run, figs: &mut Figures) {
    for (prov, port, big_n) in [
        ("tcp;ofi_rxm", 24040, "2000"),
        ("udp;ofi_rxd", 24042, "200"),
        ("shm", 24044, "2000"),
    ] {
        figs.add(
            &format!("libfabric {prov} fi_pingpong 8 B"),
            Kind::Lat,
            field(run.fi(prov, "8", "50000", port), 6),
        );
        figs.add(
            &format!("libfabric {prov} fi_pingpong 1 MiB"),
            Kind::Bw,
            field(run.fi(prov, "1048576", big_n, port + 1), 5).map(|mb| mb * 1e6),
        );
    }
    // libfabric's verbs provider with ofi_rxm over softrdma (the drop-in): on one device,
    // whose processes meet on the same-host path, and between two devices over UDP.
    // And softrdma's native provider, the same two ways.
    for (prov, what, port, over) in [
        ("verbs;ofi_rxm", "one device", 24046, ONE),
        ("verbs;ofi_rxm", "two devices", 24048, TWO),
        (NATIVE, "one device", 24050, ONE),
        (NATIVE, "two devices", 24052, TWO),
    ] {
        figs.add(
            &format!("libfabric {prov} over softrdma, {what}: fi_pingpong 8 B"),
            Kind::Lat,
            field(run.fi_at(prov, "8", "50000", port, Some(over)), 6),
        );
        figs.add(
            &format!("libfabric {prov} over softrdma, {what}: fi_pingpong 1 MiB"),
            Kind::Bw,
            field(run.fi_at(prov, "1048576", "2000", port + 1, Some(over)), 5).map(|mb| mb * 1e6),
        );
    }
}
