//! `softrdma-bench`: softrdma against its peers on loopback, in one run, so that every figure
//! can be read as a ratio against the raw-UDP baseline measured minutes before it.
//!
//! `softrdma-bench compare` runs each pair of processes (server pinned to CPU 0, client to
//! CPU 1 where there are two), bounds each run in time, skips peers that are not installed
//! (saying so), and prints a markdown table. The raw-UDP baselines are subcommands of this
//! binary itself: a busy-poll ping-pong (both ends connected, no clock read in the spin) and
//! a GSO+GRO blaster with 4096-byte segments (eight GSO sends per `sendmmsg`, eight GRO
//! receives per `recvmmsg`), the best a user-space UDP transport can do on this kernel.
//! Each also runs as a RoCE endpoint must at the least (the address and segment size on receive, the ACK segment, the CRC over
//! every segment): the floors under softrdma's own figures.
//!
//! This file owns the dispatch of the subcommands; its children split the work by role:
//! `cli` (the flags), `floor` (the raw-UDP baselines and their socket code), `pair` (running
//! a server and a client process), `output` (reading their figures), `stats`, `compare` and
//! `loss` (the two benchmarks) and `error`.

mod cli;
mod error;
mod floor;
mod loss;
mod output;
mod pair;
mod stats;

use clap::Parser;
use cli::{Cli, Cmd};
use error::BenchError;
use floor::{udp_blast_recv, udp_blast_send, udp_pingpong_client, udp_pingpong_server};
use output::{last_json, missing, perftest_row};
use pair::{
    Pin, Ready, args, command, have, pair, pinning, softrdma_bin, softrdma_pair, softrdma_pair_env,
};
use serde_json::Value;
use stats::median;
use std::path::PathBuf;
use std::time::Duration;

fn main() -> std::process::ExitCode {
    let r = match Cli::parse().cmd {
        Cmd::Compare { softrdma, seconds } => compare(softrdma, seconds),
        Cmd::Loss {
            softrdma,
            seconds,
            svg,
            rounds,
        } => softrdma_bin(softrdma).and_then(|sr| {
            let md = loss::run(&pinning(), &sr, seconds, rounds, svg.as_deref())?;
            println!("{md}");
            Ok(())
        }),
        Cmd::UdpPingpongServer {
            addr,
            peer,
            iters,
            how,
        } => udp_pingpong_server(addr, peer, iters, how),
        Cmd::UdpPingpongClient {
            addr,
            peer,
            iters,
            how,
        } => udp_pingpong_client(addr, peer, iters, how),
        Cmd::UdpBlastRecv { addr, roce } => udp_blast_recv(addr, roce),
        Cmd::UdpBlastSend {
            addr,
            peer,
            seconds,
            roce,
        } => udp_blast_send(addr, peer, seconds, roce),
    };
    match r {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("softrdma-bench: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// One figure of the table.
struct Figure {
    what: String,
    /// Microseconds for latency, bytes per second for bandwidth, messages per second for rate.
    value: Option<f64>,
    kind: Kind,
    note: String,
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Lat,
    Bw,
    Rate,
}

fn compare(softrdma: Option<PathBuf>, seconds: u64) -> Result<(), BenchError> {
    let me = std::env::current_exe().map_err(BenchError::CurrentExe)?;
    let me = me.to_string_lossy().into_owned();
    let sr = softrdma_bin(softrdma)?;
    let pin = pinning();
    let limit = Duration::from_secs(seconds * 4 + 60);
    let mut figs: Vec<Figure> = Vec::new();
    let mut add = |what: &str, kind: Kind, r: Result<f64, BenchError>| {
        let (value, note) = match r {
            Ok(v) => (Some(v), String::new()),
            Err(e) => (None, e.to_string().chars().take(120).collect()),
        };
        eprintln!(
            "  {what}: {}",
            value.map_or(format!("skipped ({note})"), |v| format!("{v:.3}"))
        );
        figs.push(Figure {
            what: what.into(),
            value,
            kind,
            note,
        });
    };

    // Raw UDP. Besides the baseline (connected socket, 8 B), the same ping-pong sent the way
    // a RoCE device must send it, with a softrdma 8 B WRITE's 40 bytes: the floor under
    // softrdma's UC and RC (with the ACK in the same GSO send) latency, in the same run.
    let pingpong = |port: u16, extra: &[&str]| -> Result<f64, BenchError> {
        let (srv, cli) = (
            format!("127.0.0.1:{port}"),
            format!("127.0.0.1:{}", port + 1),
        );
        let mut server = args(&[&me, "udp-pingpong-server", "--addr", &srv, "--peer", &cli]);
        let mut client = args(&[&me, "udp-pingpong-client", "--addr", &cli, "--peer", &srv]);
        for v in [&mut server, &mut client] {
            v.extend(args(&["--iters", "100000"]));
            v.extend(args(extra));
        }
        pair(
            &pin,
            (&server, &[]),
            (&client, &[]),
            Ready::Line("ready"),
            limit,
        )
        .and_then(|(_, c)| last_json(&c))
        .and_then(|v| {
            v["half_rtt_p50_us"]
                .as_f64()
                .ok_or_else(missing("no half_rtt"))
        })
    };
    add(
        "raw UDP busy-poll ping-pong 8 B, half RTT p50",
        Kind::Lat,
        pingpong(24001, &[]),
    );
    add(
        "UDP ping-pong as softrdma's device sends and receives (connected, recvmsg with address and GRO), 40 B: the UC floor",
        Kind::Lat,
        pingpong(24005, &["--roce", "--size", "40"]),
    );
    add(
        "the same with a 20 B ACK in the same GSO send: the RC floor",
        Kind::Lat,
        pingpong(24007, &["--roce", "--ack", "--size", "40"]),
    );
    let secs = seconds.to_string();
    let blast_as = |extra: &[&str]| {
        let mut recv = vec![me.as_str(), "udp-blast-recv", "--addr", "127.0.0.1:24003"];
        let mut send = vec![
            me.as_str(),
            "udp-blast-send",
            "--addr",
            "127.0.0.1:24004",
            "--peer",
            "127.0.0.1:24003",
            "--seconds",
            &secs,
        ];
        recv.extend(extra);
        send.extend(extra);
        pair(
            &pin,
            (&args(&recv), &[]),
            (&args(&send), &[]),
            Ready::Line("ready"),
            limit,
        )
        .and_then(|(s, _)| last_json(&s))
        .and_then(|v| v["bytes_per_sec"].as_f64().ok_or_else(missing("no rate")))
    };
    let blast = || blast_as(&[]);
    add("raw UDP GSO+GRO, 4096-byte segments", Kind::Bw, blast());
    add(
        "the same with what a RoCE endpoint cannot skip (a CRC-32 over each 4112-byte segment at both ends, payload sent from and copied into a 1 MiB region): the bandwidth floor",
        Kind::Bw,
        blast_as(&["--roce"]),
    );

    // softrdma perf.
    let perf = |test: &str, extra: &[&str], port: u16| -> Result<Value, BenchError> {
        let mut cmd = vec!["perf", test, "--json"];
        cmd.extend(extra);
        let c = softrdma_pair(&pin, &sr, &cmd, "", port, limit)?;
        let v = last_json(&c)?;
        Ok(v["results"][0].clone())
    };
    let lat = |v: Result<Value, BenchError>| {
        v.and_then(|x| {
            x["t_typical_us"]
                .as_f64()
                .ok_or_else(missing("no t_typical"))
        })
    };
    let bw = |v: Result<Value, BenchError>| {
        v.and_then(|x| {
            x["bw_avg_bytes_per_sec"]
                .as_f64()
                .ok_or_else(missing("no bw"))
        })
    };
    let write_lat = || lat(perf("write-lat", &["-s", "8", "-n", "20000"], 24010));
    let write_bw_1m = || bw(perf("write-bw", &["-s", "1048576", "-D", &secs], 24013));
    add("softrdma write-lat 8 B, t_typical", Kind::Lat, write_lat());
    // The same over UC, which has no ACKs: what the ACK on the critical path costs.
    add(
        "softrdma write-lat 8 B over UC, t_typical",
        Kind::Lat,
        lat(perf(
            "write-lat",
            &["-s", "8", "-n", "20000", "-c", "UC"],
            24015,
        )),
    );
    add(
        "softrdma send-lat 8 B, t_typical",
        Kind::Lat,
        lat(perf("send-lat", &["-s", "8", "-n", "20000"], 24011)),
    );
    add(
        "softrdma write-bw 64 KiB",
        Kind::Bw,
        bw(perf("write-bw", &["-s", "65536", "-D", &secs], 24012)),
    );
    let rate_8 = || {
        perf(
            "write-bw",
            &["-s", "8", "-D", &secs, "-t", "512", "-Q", "64"],
            24014,
        )
        .and_then(|x| {
            x["msg_rate_per_sec"]
                .as_f64()
                .ok_or_else(missing("no rate"))
        })
    };
    add("softrdma write-bw 1 MiB", Kind::Bw, write_bw_1m());
    add(
        "softrdma write-bw 8 B, message rate [msg/s]",
        Kind::Rate,
        rate_8(),
    );

    // The same-host path: both processes on one device (127.0.0.4), through its rings, and
    // with SOFTRDMA_SHM=0 through UDP and the owner's forwarding.
    // Writes are placed by cross-memory copy there unless SOFTRDMA_CMA=0.
    let same_host_cma = |test: &str, extra: &[&str], shm: &str, cma: &str, port: u16| {
        let mut cmd = vec!["perf", test, "--json"];
        cmd.extend(extra);
        let env = [
            ("SOFTRDMA_ADDR", "127.0.0.4"),
            ("SOFTRDMA_SHM", shm),
            ("SOFTRDMA_CMA", cma),
        ];
        softrdma_pair_env(&pin, &sr, &cmd, (&env, &env), port, limit)
            .and_then(|c| last_json(&c))
            .map(|v| v["results"][0].clone())
    };
    let same_host = |test: &str, extra: &[&str], shm: &str, port: u16| {
        same_host_cma(test, extra, shm, "1", port)
    };
    // With `--app-memory`, both ends register a heap buffer of their own, as C programs do,
    // which peers reach by cross-memory copy; without it, shareable memory they map.
    fn with<'a>(extra: &[&'a str], app: bool) -> Vec<&'a str> {
        let mut v = extra.to_vec();
        if app {
            v.push("--app-memory");
        }
        v
    }
    let same_lat_as = |app: bool| {
        lat(same_host(
            "write-lat",
            &with(&["-s", "8", "-n", "20000"], app),
            "1",
            24050,
        ))
    };
    let same_bw_1m_as = |app: bool| {
        bw(same_host(
            "write-bw",
            &with(&["-s", "1048576", "-m", "4096", "-D", &secs], app),
            "1",
            24052,
        ))
    };
    let same_rate_8_as = |app: bool| {
        same_host(
            "write-bw",
            &with(&["-s", "8", "-D", &secs, "-t", "512", "-Q", "64"], app),
            "1",
            24053,
        )
        .and_then(|x| {
            x["msg_rate_per_sec"]
                .as_f64()
                .ok_or_else(missing("no rate"))
        })
    };
    let (same_bw_1m, same_rate_8) = (|| same_bw_1m_as(false), || same_rate_8_as(false));
    add(
        "same host, one device (rings, SOFTRDMA_CMA=0): softrdma write-lat 8 B, t_typical",
        Kind::Lat,
        lat(same_host_cma(
            "write-lat",
            &["-s", "8", "-n", "20000"],
            "1",
            "0",
            24054,
        )),
    );
    add(
        "same host, one device (rings, SOFTRDMA_CMA=0): softrdma write-bw 1 MiB",
        Kind::Bw,
        bw(same_host_cma(
            "write-bw",
            &["-s", "1048576", "-m", "4096", "-D", &secs],
            "1",
            "0",
            24055,
        )),
    );
    for (shm, how) in [("1", "rings"), ("0", "SOFTRDMA_SHM=0, UDP")] {
        add(
            &format!("same host, one device ({how}): softrdma write-lat 8 B, t_typical"),
            Kind::Lat,
            lat(same_host(
                "write-lat",
                &["-s", "8", "-n", "20000"],
                shm,
                24050,
            )),
        );
    }
    add(
        "same host, one device (rings): softrdma send-lat 8 B, t_typical",
        Kind::Lat,
        lat(same_host(
            "send-lat",
            &["-s", "8", "-n", "20000"],
            "1",
            24051,
        )),
    );
    add(
        "same host, one device (rings): softrdma write-bw 1 MiB",
        Kind::Bw,
        same_bw_1m(),
    );
    add(
        "same host, one device (rings): softrdma write-bw 8 B, message rate [msg/s]",
        Kind::Rate,
        same_rate_8(),
    );
    add(
        "same host, one device (rings), application memory: softrdma write-lat 8 B, t_typical",
        Kind::Lat,
        same_lat_as(true),
    );
    add(
        "same host, one device (rings), application memory: softrdma write-bw 1 MiB",
        Kind::Bw,
        same_bw_1m_as(true),
    );
    add(
        "same host, one device (rings), application memory: softrdma write-bw 8 B, message rate [msg/s]",
        Kind::Rate,
        same_rate_8_as(true),
    );

    // A process that shares its device with another (here `softrdma service`, which owns
    // it) talking to a process on another device, against the lone processes of `softrdma
    // write-lat` above: steered its datagrams by the kernel (the default), and forwarded
    // by the owner (`SOFTRDMA_STEER=0`), which costs a hop through a third process.
    let member_lat = |steer: &'static str| -> Result<f64, BenchError> {
        let mut service = command(
            &[],
            &args(&[sr.as_str(), "service"]),
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
            lat(softrdma_pair_env(&pin, &sr, &cmd, env, 24056, limit)
                .and_then(|c| last_json(&c))
                .map(|v| v["results"][0].clone()))
        } else {
            Err(BenchError::Output("softrdma service did not start".into()))
        };
        let _ = service.kill();
        let _ = service.wait();
        r
    };
    add(
        "a member of a shared device (steered) to another device: softrdma write-lat 8 B, t_typical",
        Kind::Lat,
        member_lat("1"),
    );
    add(
        "a member of a shared device (its owner forwards, SOFTRDMA_STEER=0) to another device: softrdma write-lat 8 B, t_typical",
        Kind::Lat,
        member_lat("0"),
    );

    // Unmodified perftest through the drop-in libibverbs (`softrdma exec`), both ends: the
    // figures perftest prints (t_typical; BW average in MB/s of 2^20 bytes; MsgRate in
    // Mpps).
    // Over UDP between two devices, and on one device (the same-host path), as the Rust
    // API's rows above.
    let perftest_at =
        |tool: &str, extra: &[&str], port: u16, one: bool| -> Result<Vec<f64>, BenchError> {
            let p = port.to_string();
            let mut a = vec![sr.as_str(), "exec", "--", tool];
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
                &pin,
                (&server, &[("SOFTRDMA_ADDR", s_addr)]),
                (&client, &[("SOFTRDMA_ADDR", c_addr)]),
                Ready::Tcp(port),
                limit,
            )?;
            perftest_row(&c)
        };
    let pt_lat_at = |one: bool| {
        perftest_at("ib_write_lat", &["-s", "8", "-n", "20000"], 24050, one)
            .and_then(|r| r.get(4).copied().ok_or_else(missing("no t_typical")))
    };
    let pt_bw_at = |one: bool| {
        perftest_at("ib_write_bw", &["-s", "1048576", "-D", &secs], 24051, one).and_then(|r| {
            r.get(3)
                .map(|m| m * 1048576.0)
                .ok_or_else(missing("no BW average"))
        })
    };
    let pt_rate_at = |one: bool| {
        perftest_at(
            "ib_write_bw",
            &["-s", "8", "-D", &secs, "-t", "512", "-Q", "64"],
            24052,
            one,
        )
        .and_then(|r| r.get(4).map(|m| m * 1e6).ok_or_else(missing("no MsgRate")))
    };
    let (pt_lat, pt_bw, pt_rate) = (
        || pt_lat_at(false),
        || pt_bw_at(false),
        || pt_rate_at(false),
    );
    add(
        "drop-in: unmodified ib_write_lat 8 B, t_typical",
        Kind::Lat,
        pt_lat(),
    );
    add("drop-in: unmodified ib_write_bw 1 MiB", Kind::Bw, pt_bw());
    add(
        "drop-in: unmodified ib_write_bw 8 B -t 512 -Q 64, message rate [msg/s]",
        Kind::Rate,
        pt_rate(),
    );
    add(
        "drop-in, one device: unmodified ib_write_lat 8 B, t_typical",
        Kind::Lat,
        pt_lat_at(true),
    );
    add(
        "drop-in, one device: unmodified ib_write_bw 1 MiB",
        Kind::Bw,
        pt_bw_at(true),
    );
    add(
        "drop-in, one device: unmodified ib_write_bw 8 B -t 512 -Q 64, message rate [msg/s]",
        Kind::Rate,
        pt_rate_at(true),
    );

    // iperf3.
    let r = if have("iperf3") {
        pair(
            &pin,
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
                    &secs,
                    "-J",
                ]),
                &[],
            ),
            Ready::Tcp(24020),
            limit,
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
    add("iperf3 TCP", Kind::Bw, r);

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
                &pin,
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
                limit,
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
            add(
                &format!("UCX {name} {test} 8 B, p50"),
                Kind::Lat,
                ucx(tls, test, "8", "100000", port)
                    .and_then(|v| v.get(1).copied().ok_or_else(missing("short line"))),
            );
        }
        for (test, port) in [("tag_bw", port + 11), ("ucp_put_bw", port + 1)] {
            add(
                &format!("UCX {name} {test} 1 MiB"),
                Kind::Bw,
                ucx(tls, test, "1048576", "5000", port)
                    .and_then(|v| v.get(5).copied().ok_or_else(missing("short line")))
                    .map(|mib| mib * 1048576.0),
            );
        }
    }

    // libfabric fi_pingpong: bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec. With
    // `over` (the server's and the client's device addresses), both ends run on softrdma
    // through `softrdma exec`.
    let fi_at = |prov: &str,
                 size: &str,
                 n: &str,
                 port: u16,
                 over: Option<(&str, &str)>|
     -> Result<Vec<String>, BenchError> {
        if !have("fi_pingpong") {
            return Err(BenchError::NotInstalled {
                program: "fi_pingpong",
                hint: " (libfabric-bin)",
            });
        }
        let p = port.to_string();
        let mut common = args(&["fi_pingpong", "-p", prov, "-e", "rdm", "-I", n, "-S", size]);
        if over.is_some() {
            common.splice(0..0, args(&[sr.as_str(), "exec", "--"]));
        }
        let server = [common.clone(), args(&["-B", &p])].concat();
        let client = [common, args(&["-P", &p, "127.0.0.1"])].concat();
        let (s_env, c_env) = match over {
            Some((s, c)) => (vec![("SOFTRDMA_ADDR", s)], vec![("SOFTRDMA_ADDR", c)]),
            None => (vec![], vec![]),
        };
        let (_, c) = pair(
            &pin,
            (&server, &s_env),
            (&client, &c_env),
            Ready::Tcp(port),
            limit,
        )?;
        let line = c.lines().last().unwrap_or_default();
        Ok(line.split_whitespace().map(str::to_owned).collect())
    };
    let fi = |prov: &str, size: &str, n: &str, port: u16| fi_at(prov, size, n, port, None);
    let field = |v: Result<Vec<String>, BenchError>, i: usize| -> Result<f64, BenchError> {
        v.and_then(|f| {
            f.get(i)
                .and_then(|x| x.parse().ok())
                .ok_or_else(|| BenchError::Output(format!("unexpected line {f:?}")))
        })
    };
    for (prov, port, big_n) in [
        ("tcp;ofi_rxm", 24040, "2000"),
        ("udp;ofi_rxd", 24042, "200"),
        ("shm", 24044, "2000"),
    ] {
        add(
            &format!("libfabric {prov} fi_pingpong 8 B"),
            Kind::Lat,
            field(fi(prov, "8", "50000", port), 6),
        );
        add(
            &format!("libfabric {prov} fi_pingpong 1 MiB"),
            Kind::Bw,
            field(fi(prov, "1048576", big_n, port + 1), 5).map(|mb| mb * 1e6),
        );
    }
    // libfabric's verbs provider with ofi_rxm over softrdma (the drop-in): on one device,
    // whose processes meet on the same-host path, and between two devices over UDP.
    for (what, port, over) in [
        ("one device", 24046, ("127.0.0.4", "127.0.0.4")),
        ("two devices", 24048, ("127.0.0.2", "127.0.0.3")),
    ] {
        add(
            &format!("libfabric verbs;ofi_rxm over softrdma, {what}: fi_pingpong 8 B"),
            Kind::Lat,
            field(fi_at("verbs;ofi_rxm", "8", "50000", port, Some(over)), 6),
        );
        add(
            &format!("libfabric verbs;ofi_rxm over softrdma, {what}: fi_pingpong 1 MiB"),
            Kind::Bw,
            field(
                fi_at("verbs;ofi_rxm", "1048576", "2000", port + 1, Some(over)),
                5,
            )
            .map(|mb| mb * 1e6),
        );
    }

    // The two ratio goals again, from back-to-back pairs: this machine drifts between
    // regimes (the raw ping-pong moves by half a microsecond from one minute to the next), so
    // a ratio of two figures taken minutes apart can swing either way. Each pair runs the
    // baseline and then softrdma, seconds apart; the verdict takes the median pair.
    let mut paired = Paired::default();
    for _ in 0..PAIRS {
        if let (Ok(b), Ok(l)) = (pingpong(24001, &[]), write_lat()) {
            paired.lat.push(l / b);
        }
        if let (Ok(b), Ok(w)) = (blast(), write_bw_1m()) {
            paired.bw.push(w / b);
            // The floor right after: softrdma against what any RoCE endpoint must do.
            if let Ok(f) = blast_as(&["--roce"]) {
                paired.floor.push(f / b);
                paired.bw_floor.push(w / f);
            }
        }
    }

    // The drop-in against the Rust API, each pair back to back.
    for _ in 0..PAIRS {
        if let (Ok(c), Ok(r)) = (pt_lat(), write_lat()) {
            paired.dropin_lat.push(c / r);
        }
        if let (Ok(c), Ok(r)) = (pt_bw(), write_bw_1m()) {
            paired.dropin_bw.push(c / r);
        }
        if let (Ok(c), Ok(r)) = (pt_rate(), rate_8()) {
            paired.dropin_rate.push(c / r);
        }
        // perftest's buffer is its own heap memory, so the Rust API's row registers its own
        // as well: the same placement (cross-memory copy) on both sides of the pair.
        if let (Ok(c), Ok(r)) = (pt_lat_at(true), same_lat_as(true)) {
            paired.one_lat.push(c / r);
        }
        if let (Ok(c), Ok(r)) = (pt_bw_at(true), same_bw_1m_as(true)) {
            paired.one_bw.push(c / r);
        }
        if let (Ok(c), Ok(r)) = (pt_rate_at(true), same_rate_8_as(true)) {
            paired.one_rate.push(c / r);
        }
        let one = Some(("127.0.0.4", "127.0.0.4"));
        if let (Ok(t), Ok(o)) = (
            field(fi("tcp;ofi_rxm", "8", "50000", 24040), 6),
            field(fi_at("verbs;ofi_rxm", "8", "50000", 24046, one), 6),
        ) {
            paired.fi_lat.push(t / o);
        }
    }

    // Connection setup through rdma_cm (`softrdma cm-setup`: 1,000 connections one after
    // another, each from rdma_resolve_addr until both ends are ESTABLISHED), server and
    // client on two devices.
    let cm_setup = || -> Result<Value, BenchError> {
        let base = [sr.as_str(), "cm-setup", "-c", "1000", "-p", "24040"];
        let server = args(&base);
        let mut client = base.to_vec();
        client.extend(["--json", "127.0.0.2"]);
        let (_, c) = pair(
            &pin,
            (&server, &[("SOFTRDMA_ADDR", "127.0.0.2")]),
            (&args(&client), &[("SOFTRDMA_ADDR", "127.0.0.3")]),
            Ready::Line("ready"),
            limit,
        )?;
        last_json(&c)
    };
    let cm = cm_setup();
    let cm_fig = |key: &'static str| {
        cm.as_ref()
            .map_err(|e| BenchError::Output(e.to_string()))
            .and_then(|v| v[key].as_f64().ok_or_else(missing(key)))
    };
    add(
        "softrdma rdma_cm connection setup (resolve_addr to ESTABLISHED at both ends), median",
        Kind::Lat,
        cm_fig("median_us"),
    );
    add(
        "the same, p99 over 1,000 connections",
        Kind::Lat,
        cm_fig("p99_us"),
    );

    print_table(&figs, &pin, seconds, &paired);
    Ok(())
}

/// Back-to-back pairs the goals are judged from.
const PAIRS: usize = 3;

/// Ratios of softrdma to its baseline, each from a pair of runs one right after the other.
#[derive(Default)]
struct Paired {
    /// RC write-lat 8 B over the raw ping-pong.
    lat: Vec<f64>,
    /// write-bw 1 MiB over the blaster.
    bw: Vec<f64>,
    /// The bandwidth floor over the same blaster run.
    floor: Vec<f64>,
    /// write-bw 1 MiB over the floor run right after it.
    bw_floor: Vec<f64>,
    /// Unmodified ib_write_lat 8 B through the drop-in over softrdma perf write-lat.
    dropin_lat: Vec<f64>,
    /// Unmodified ib_write_bw 1 MiB over softrdma perf write-bw.
    dropin_bw: Vec<f64>,
    /// Unmodified ib_write_bw 8 B message rate over softrdma perf's.
    dropin_rate: Vec<f64>,
    /// The same three with both ends on one device (the same-host path).
    one_lat: Vec<f64>,
    one_bw: Vec<f64>,
    one_rate: Vec<f64>,
    /// libfabric tcp;ofi_rxm fi_pingpong 8 B latency over verbs;ofi_rxm's on one softrdma
    /// device (how many times faster softrdma is).
    fi_lat: Vec<f64>,
}

/// The median of `v` and the list it came from, as the table prints them.
fn median_of(v: &[f64]) -> Option<(f64, String)> {
    let list = v
        .iter()
        .map(|r| format!("{r:.2}×"))
        .collect::<Vec<_>>()
        .join(", ");
    median(v).map(|m| (m, list))
}

fn print_table(figs: &[Figure], pin: &Pin, seconds: u64, paired: &Paired) {
    let base = |k: Kind| {
        figs.iter()
            .find(|f| f.kind == k && f.what.starts_with("raw UDP"))
            .and_then(|f| f.value)
    };
    let (lat0, bw0) = (base(Kind::Lat), base(Kind::Bw));
    println!();
    if pin.server.is_empty() {
        println!("Processes not pinned (fewer than 2 CPUs or no taskset).");
    } else {
        println!(
            "Server pinned to CPU 0 and client to CPU 1 (taskset); bandwidth runs {seconds} s."
        );
    }
    println!();
    println!("| Figure | Value | Ratio to raw UDP |");
    println!("|---|---:|---:|");
    for f in figs {
        let (val, ratio) = match (f.value, f.kind) {
            (None, _) => (format!("skipped: {}", f.note.replace('|', "/")), "".into()),
            (Some(v), Kind::Lat) => (
                format!("{v:.2} µs"),
                lat0.map_or(String::new(), |b| format!("{:.2}×", v / b)),
            ),
            (Some(v), Kind::Bw) => (
                format!("{:.2} GB/s", v / 1e9),
                bw0.map_or(String::new(), |b| format!("{:.2}×", v / b)),
            ),
            (Some(v), Kind::Rate) => (format!("{:.3} M/s", v / 1e6), String::new()),
        };
        println!("| {} | {val} | {ratio} |", f.what);
    }
    let get = |p: &str| {
        figs.iter()
            .find(|f| f.what.starts_with(p))
            .and_then(|f| f.value)
    };
    println!();
    println!("Goals (the two ratios: the median of {PAIRS} back-to-back pairs, each listed):");
    let verdict = |ok: bool| if ok { "met" } else { "missed" };
    match median_of(&paired.lat) {
        Some((m, list)) => println!(
            "- 8 B WRITE latency ≤ 1.3× raw UDP: {m:.2}× ({}; pairs {list}; in the table above {})",
            verdict(m <= 1.3),
            get("softrdma write-lat")
                .zip(lat0)
                .map_or("-".into(), |(l, b)| format!("{:.2}×", l / b)),
        ),
        None => println!("- 8 B WRITE latency: no pair completed"),
    }
    match median_of(&paired.bw) {
        Some((m, list)) => println!(
            "- 1 MiB WRITE bandwidth ≥ 0.8× raw UDP GSO+GRO: {m:.2}× ({}; pairs {list}; in the table above {})",
            verdict(m >= 0.8),
            get("softrdma write-bw 1 MiB")
                .zip(bw0)
                .map_or("-".into(), |(w, b)| format!("{:.2}×", w / b)),
        ),
        None => println!("- 1 MiB WRITE bandwidth: no pair completed"),
    }
    if let (Some(l), Some(f)) = (
        get("softrdma write-lat 8 B,"),
        get("the same with a 20 B ACK"),
    ) {
        println!(
            "- (for reference) RC write-lat against the RC floor of this run: {:.2}×",
            l / f
        );
    }
    if let (Some((f, flist)), Some((w, wlist))) =
        (median_of(&paired.floor), median_of(&paired.bw_floor))
    {
        let bound = if f < 0.8 {
            ", so no RoCE endpoint on this path reaches 0.8×"
        } else {
            ""
        };
        println!(
            "- (for reference) the bandwidth floor itself: {f:.2}× raw UDP (pairs {flist}){bound}; write-bw 1 MiB against it: {w:.2}× (pairs {wlist})"
        );
    }
    let within = |name: &str, v: &[f64], low: f64, high: f64| match median_of(v) {
        Some((m, list)) => println!(
            "- {name}: {m:.2}× ({}; pairs {list})",
            verdict(m >= low && m <= high)
        ),
        None => println!("- {name}: no pair completed"),
    };
    within(
        "drop-in ib_write_lat 8 B within 10 % of softrdma perf write-lat (t_typical)",
        &paired.dropin_lat,
        0.0,
        1.1,
    );
    within(
        "drop-in ib_write_bw 1 MiB within 5 % of softrdma perf write-bw",
        &paired.dropin_bw,
        0.95,
        f64::INFINITY,
    );
    within(
        "drop-in ib_write_bw 8 B -t 512 -Q 64 message rate within 10 % of softrdma perf's",
        &paired.dropin_rate,
        0.9,
        f64::INFINITY,
    );
    within(
        "one device: drop-in ib_write_lat 8 B within 10 % of softrdma perf write-lat (t_typical)",
        &paired.one_lat,
        0.0,
        1.1,
    );
    within(
        "one device: drop-in ib_write_bw 1 MiB within 5 % of softrdma perf write-bw",
        &paired.one_bw,
        0.95,
        f64::INFINITY,
    );
    within(
        "one device: drop-in ib_write_bw 8 B -t 512 -Q 64 message rate within 10 % of softrdma perf's",
        &paired.one_rate,
        0.9,
        f64::INFINITY,
    );
    // The same-host goals (issue 15), each against its peer from this run.
    let ratio = |name: &str, ours: &str, theirs: &str, goal: f64, higher: bool| match (
        get(ours),
        get(theirs),
    ) {
        (Some(a), Some(b)) if b > 0.0 => {
            let r = a / b;
            let ok = if higher { r >= goal } else { r <= goal };
            println!(
                "- {name}: {r:.2}× ({a:.3e} against {b:.3e}; {})",
                verdict(ok)
            );
        }
        _ => println!("- {name}: a figure is missing"),
    };
    ratio(
        "same-host write-lat 8 B ≤ 2× UCX posix ucp_put_lat",
        "same host, one device (rings): softrdma write-lat",
        "UCX shared memory ucp_put_lat",
        2.0,
        false,
    );
    ratio(
        "same-host write-bw 1 MiB, application memory, ≥ 0.6× UCX's best same-host tag_bw (posix with CMA)",
        "same host, one device (rings), application memory: softrdma write-bw 1 MiB",
        "UCX shared memory with CMA tag_bw",
        0.6,
        true,
    );
    ratio(
        "same-host write-bw 1 MiB, memory softrdma allocates, ≥ 0.8× UCX posix ucp_put_bw",
        "same host, one device (rings): softrdma write-bw 1 MiB",
        "UCX shared memory ucp_put_bw",
        0.8,
        true,
    );
    ratio(
        "two processes on one device, one talking to another device: latency ≤ 1.5× a lone process's",
        "a member of a shared device (steered) to another device",
        "softrdma write-lat 8 B, t_typical",
        1.5,
        false,
    );
    ratio(
        "same-host placed WRITEs against rings alone (SOFTRDMA_CMA=0), write-bw 1 MiB",
        "same host, one device (rings): softrdma write-bw 1 MiB",
        "same host, one device (rings, SOFTRDMA_CMA=0): softrdma write-bw 1 MiB",
        1.0,
        true,
    );
    ratio(
        "same-host rings against the same device over UDP, write-lat 8 B (lower is better)",
        "same host, one device (rings): softrdma write-lat",
        "same host, one device (SOFTRDMA_SHM=0, UDP): softrdma write-lat",
        1.0,
        false,
    );
    // The libfabric goal (issue 37), from back-to-back pairs: verbs;ofi_rxm on softrdma's
    // same-host path against libfabric's own tcp provider (tcp;ofi_rxm), 8 B latency.
    within(
        "libfabric verbs;ofi_rxm over softrdma (one device) ≥ 3× faster than libfabric tcp;ofi_rxm, fi_pingpong 8 B latency (tcp's over ours)",
        &paired.fi_lat,
        3.0,
        f64::INFINITY,
    );
    for (what, name, goal) in [
        (
            "write-lat 8 B ≤ 0.5 µs",
            "same host, one device (rings): softrdma write-lat",
            0.5,
        ),
        (
            "send-lat 8 B ≤ 0.6 µs",
            "same host, one device (rings): softrdma send-lat",
            0.6,
        ),
    ] {
        if let Some(us) = get(name) {
            println!("- same-host {what}: {us:.2} µs ({})", verdict(us <= goal));
        }
    }
    if let Some(r) = get("same host, one device (rings): softrdma write-bw 8 B") {
        println!(
            "- same-host 8 B WRITE message rate ≥ 5 M/s: {:.3} M/s ({})",
            r / 1e6,
            verdict(r >= 5e6)
        );
    }
    if let Some(r) = get("softrdma write-bw 8 B") {
        println!(
            "- 8 B WRITE message rate ≥ 1 M/s: {:.3} M/s ({})",
            r / 1e6,
            verdict(r >= 1e6)
        );
    }
}
