//! Running the programs a benchmark compares: a server and a client process as a pair (the
//! server pinned to CPU 0, the client to CPU 1 where there are two), each bounded in time,
//! and finding the programs (`softrdma`, and the peers, which may not be installed).
//!
//! Owns the child processes it spawns: each is waited for or killed before a call returns.
//! A server announcing itself by a line has its output read by a thread of its own.

use crate::error::BenchError;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Where each process of a pair runs.
pub(crate) struct Pin {
    /// The server's command prefix (`taskset -c 0`, or none).
    pub(crate) server: Vec<String>,
    /// The client's command prefix.
    pub(crate) client: Vec<String>,
}

/// The pinning for this machine: CPUs 0 and 1 through taskset where both exist.
pub(crate) fn pinning() -> Pin {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let taskset = Command::new("taskset").arg("-V").output().is_ok();
    if cpus >= 2 && taskset {
        Pin {
            server: vec!["taskset".into(), "-c".into(), "0".into()],
            client: vec!["taskset".into(), "-c".into(), "1".into()],
        }
    } else {
        Pin {
            server: vec![],
            client: vec![],
        }
    }
}

/// `prefix` then `argv` with `env` added, its stdin empty and its output piped.
pub(crate) fn command(prefix: &[String], argv: &[String], env: &[(&str, &str)]) -> Command {
    let mut all: Vec<String> = prefix.to_vec();
    all.extend(argv.iter().cloned());
    let mut c = Command::new(&all[0]);
    c.args(&all[1..]);
    for (k, v) in env {
        c.env(k, v);
    }
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// A running child whose output is being read (see [`drained`]).
struct Drained {
    child: Child,
    out: Option<std::thread::JoinHandle<Vec<u8>>>,
    err: Option<std::thread::JoinHandle<Vec<u8>>>,
}

/// Starts reading `c`'s output while it runs: a child that writes more than a pipe holds
/// (`softrdma perf` prints two lines a QP, 76 KB for 256 QPs) would otherwise block on its
/// write, and its peer with it, until the limit.
fn drained(mut c: Child) -> Drained {
    Drained {
        out: drain(c.stdout.take()),
        err: drain(c.stderr.take()),
        child: c,
    }
}

/// Waits for a child with a limit, killing it past the limit; its output is read while it
/// runs (see [`drained`]).
pub(crate) fn finish(c: Child, limit: Duration) -> Result<String, BenchError> {
    finish_drained(drained(c), limit)
}

/// [`finish`] for a child already [`drained`].
fn finish_drained(d: Drained, limit: Duration) -> Result<String, BenchError> {
    let Drained {
        child: mut c,
        out,
        err,
    } = d;
    let deadline = Instant::now() + limit;
    let status = loop {
        match c.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() > deadline => {
                let _ = c.kill();
                let _ = c.wait();
                return Err(BenchError::TooLong(limit));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(BenchError::Wait(e)),
        }
    };
    let text = |h: Option<std::thread::JoinHandle<Vec<u8>>>| {
        let bytes = h.map(|h| h.join().unwrap_or_default()).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    let stdout = text(out);
    if status.success() {
        Ok(stdout)
    } else {
        Err(BenchError::Child {
            status,
            stdout: stdout.trim().to_owned(),
            stderr: text(err).trim().to_owned(),
        })
    }
}

/// Reads a child's pipe to its end on a thread of its own.
fn drain<R: std::io::Read + Send + 'static>(
    pipe: Option<R>,
) -> Option<std::thread::JoinHandle<Vec<u8>>> {
    pipe.map(|mut p| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = p.read_to_end(&mut v);
            v
        })
    })
}

/// How the server of a pair tells that it is ready.
pub(crate) enum Ready {
    /// It prints this line.
    Line(&'static str),
    /// It listens on this TCP port.
    Tcp(u16),
}

/// Waits until the server is ready. A server that announces itself by a line gets its other
/// output forwarded through the returned channel.
fn wait_ready(
    server: &mut Child,
    ready: &Ready,
) -> Result<Option<mpsc::Receiver<String>>, BenchError> {
    match ready {
        Ready::Line(want) => {
            let out = server.stdout.take().ok_or(BenchError::NoStdout)?;
            let (tx_ready, rx_ready) = mpsc::channel();
            let (tx_rest, rx_rest) = mpsc::channel();
            let want = want.to_string();
            std::thread::spawn(move || {
                let mut r = BufReader::new(out);
                let mut line = String::new();
                let mut rest = String::new();
                while r.read_line(&mut line).is_ok_and(|n| n > 0) {
                    if line.trim() == want {
                        let _ = tx_ready.send(());
                    } else {
                        rest.push_str(&line);
                    }
                    line.clear();
                }
                let _ = tx_rest.send(rest);
            });
            rx_ready
                .recv_timeout(Duration::from_secs(15))
                .map_err(|_| BenchError::NotReady)?;
            Ok(Some(rx_rest))
        }
        Ready::Tcp(port) => {
            let deadline = Instant::now() + Duration::from_secs(15);
            while !listening(*port) {
                if Instant::now() > deadline {
                    return Err(BenchError::NotListening { port: *port });
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(None)
        }
    }
}

/// Whether a TCP socket listens on `port`, from /proc (no connection made).
fn listening(port: u16) -> bool {
    let want = format!(":{port:04X} ");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|t| {
            t.lines()
                .skip(1)
                .any(|l| l.split_whitespace().nth(3) == Some("0A") && l.contains(&want))
        })
    })
}

/// Runs a server and a client; returns (server stdout, client stdout).
pub(crate) fn pair(
    pin: &Pin,
    server: (&[String], &[(&str, &str)]),
    client: (&[String], &[(&str, &str)]),
    ready: Ready,
    limit: Duration,
) -> Result<(String, String), BenchError> {
    let spawn_failed = |program: &String| {
        let program = program.clone();
        move |source| BenchError::Spawn { program, source }
    };
    let mut s = command(&pin.server, server.0, server.1)
        .spawn()
        .map_err(spawn_failed(&server.0[0]))?;
    let rest = match wait_ready(&mut s, &ready) {
        Ok(r) => r,
        Err(e) => {
            let _ = s.kill();
            let _ = s.wait();
            return Err(e);
        }
    };
    // Both outputs are read from now on, the server's too: a server blocked on a full
    // pipe would stall its client.
    let s = drained(s);
    let c = command(&pin.client, client.0, client.1)
        .spawn()
        .map_err(spawn_failed(&client.0[0]))?;
    let cout = finish(c, limit);
    let sout = finish_drained(s, Duration::from_secs(10));
    let sout = match rest {
        Some(rx) => rx.recv_timeout(Duration::from_secs(5)).unwrap_or_default(),
        None => sout.unwrap_or_default(),
    };
    Ok((sout, cout?))
}

/// `softrdma CMD -p PORT` as a server on 127.0.0.2 and as its client on 127.0.0.3, with
/// `SOFTRDMA_FAULTS=faults` on both unless `faults` is empty (a device with faults sends
/// through the fault injector, not its own send path); returns the client's output.
pub(crate) fn softrdma_pair(
    pin: &Pin,
    sr: &str,
    cmd: &[&str],
    faults: &str,
    port: u16,
    limit: Duration,
) -> Result<String, BenchError> {
    let env = |addr| {
        let mut e = vec![("SOFTRDMA_ADDR", addr)];
        if !faults.is_empty() {
            e.push(("SOFTRDMA_FAULTS", faults));
        }
        e
    };
    softrdma_pair_env(
        pin,
        sr,
        cmd,
        (&env("127.0.0.2"), &env("127.0.0.3")),
        port,
        limit,
    )
}

/// A process's added environment.
pub(crate) type Env<'a> = &'a [(&'a str, &'a str)];

/// `softrdma CMD` as server and client (TCP `port`), each with its environment in `env`;
/// the client's output.
pub(crate) fn softrdma_pair_env(
    pin: &Pin,
    sr: &str,
    cmd: &[&str],
    env: (Env<'_>, Env<'_>),
    port: u16,
    limit: Duration,
) -> Result<String, BenchError> {
    let p = port.to_string();
    let mut a = vec![sr];
    a.extend(cmd);
    a.extend(["-p", &p]);
    let server = args(&a);
    a.push("127.0.0.1");
    let client = args(&a);
    let (_, c) = pair(
        pin,
        (&server, env.0),
        (&client, env.1),
        Ready::Tcp(port),
        limit,
    )?;
    Ok(c)
}

/// Owned arguments.
pub(crate) fn args(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// Whether `prog` is on the PATH.
pub(crate) fn have(prog: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {prog} >/dev/null")])
        .status()
        .is_ok_and(|s| s.success())
}

/// The `softrdma` binary: `given`, or the one next to this one.
pub(crate) fn softrdma_bin(given: Option<PathBuf>) -> Result<String, BenchError> {
    let me = std::env::current_exe().map_err(BenchError::CurrentExe)?;
    let softrdma = given.unwrap_or_else(|| me.with_file_name("softrdma"));
    if !softrdma.exists() {
        return Err(BenchError::NoSoftrdma(softrdma));
    }
    Ok(softrdma.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child that writes far more than a pipe holds finishes, and all it wrote comes
    /// back: its output is read while it runs.
    #[test]
    fn a_child_that_writes_more_than_a_pipe_holds_finishes() {
        let argv: Vec<String> = ["sh", "-c", "yes x | head -c 300000"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let c = command(&[], &argv, &[]).spawn().expect("sh");
        let out = finish(c, Duration::from_secs(20)).expect("finishes within the limit");
        assert_eq!(out.len(), 300_000);
        assert!(out.bytes().all(|b| b == b'x' || b == b'\n'));
    }
}
