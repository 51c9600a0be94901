//! `compare`'s raw-UDP rows: the baselines (this binary's `udp-pingpong-*` and
//! `udp-blast-*` subcommands) and the floors under softrdma's figures.

use super::figures::{Figures, Kind};
use super::run::Run;
use crate::error::BenchError;
use crate::output::{last_json, missing};
use crate::pair::{Ready, args, pair};

impl Run {
    /// The busy-poll ping-pong on ports `port` and `port + 1` with `extra` flags: the median
    /// half round trip in microseconds.
    pub(super) fn pingpong(&self, port: u16, extra: &[&str]) -> Result<f64, BenchError> {
        let (srv, cli) = (
            format!("127.0.0.1:{port}"),
            format!("127.0.0.1:{}", port + 1),
        );
        let mut server = args(&[
            &self.me,
            "udp-pingpong-server",
            "--addr",
            &srv,
            "--peer",
            &cli,
        ]);
        let mut client = args(&[
            &self.me,
            "udp-pingpong-client",
            "--addr",
            &cli,
            "--peer",
            &srv,
        ]);
        for v in [&mut server, &mut client] {
            v.extend(args(&["--iters", "100000"]));
            v.extend(args(extra));
        }
        pair(
            &self.pin,
            (&server, &[]),
            (&client, &[]),
            Ready::Line("ready"),
            self.limit,
        )
        .and_then(|(_, c)| last_json(&c))
        .and_then(|v| {
            v["half_rtt_p50_us"]
                .as_f64()
                .ok_or_else(missing("no half_rtt"))
        })
    }

    /// The GSO+GRO blaster with `extra` flags: bytes per second.
    pub(super) fn blast_as(&self, extra: &[&str]) -> Result<f64, BenchError> {
        let mut recv = vec![
            self.me.as_str(),
            "udp-blast-recv",
            "--addr",
            "127.0.0.1:24003",
        ];
        let mut send = vec![
            self.me.as_str(),
            "udp-blast-send",
            "--addr",
            "127.0.0.1:24004",
            "--peer",
            "127.0.0.1:24003",
            "--seconds",
            &self.secs,
        ];
        recv.extend(extra);
        send.extend(extra);
        pair(
            &self.pin,
            (&args(&recv), &[]),
            (&args(&send), &[]),
            Ready::Line("ready"),
            self.limit,
        )
        .and_then(|(s, _)| last_json(&s))
        .and_then(|v| v["bytes_per_sec"].as_f64().ok_or_else(missing("no rate")))
    }

    /// The plain blaster: the bandwidth baseline.
    pub(super) fn blast(&self) -> Result<f64, BenchError> {
        self.blast_as(&[])
    }
}

/// The raw-UDP rows: three ping-pongs (baseline, UC floor, RC floor), two blasts.
pub(super) fn rows(run: &Run, figs: &mut Figures) {
    // Raw UDP. Besides the baseline (connected socket, 8 B), the same ping-pong sent the way
    // a RoCE device must send it, with a softrdma 8 B WRITE's 40 bytes: the floor under
    // softrdma's UC and RC (with the ACK in the same GSO send) latency, in the same run.
    figs.add(
        "raw UDP busy-poll ping-pong 8 B, half RTT p50",
        Kind::Lat,
        run.pingpong(24001, &[]),
    );
    figs.add(
        "UDP ping-pong as softrdma's device sends and receives (connected, recvmsg with address and GRO), 40 B: the UC floor",
        Kind::Lat,
        run.pingpong(24005, &["--roce", "--size", "40"]),
    );
    figs.add(
        "the same with a 20 B ACK in the same GSO send: the RC floor",
        Kind::Lat,
        run.pingpong(24007, &["--roce", "--ack", "--size", "40"]),
    );
    figs.add("raw UDP GSO+GRO, 4096-byte segments", Kind::Bw, run.blast());
    figs.add(
        "the same with what a RoCE endpoint cannot skip (a CRC-32 over each 4112-byte segment at both ends, payload sent from and copied into a 1 MiB region): the bandwidth floor",
        Kind::Bw,
        run.blast_as(&["--roce"]),
    );
}
