//! Why a benchmark, or one run of it, failed: one variant per kind of failure. A failed run
//! of `compare` or `loss` is a skipped figure, with the error's text as its note.

use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::Duration;

/// Why a benchmark, a baseline subcommand or one of their runs failed.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A socket call of a baseline that failed (`bind`, `connect`, `send`, `recv`, ...).
    #[error("{what}: {source}")]
    Io {
        /// The call.
        what: &'static str,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// A socket call of a baseline, made through nix, that failed (`UDP_GRO`, `recvmsg`,
    /// `sendmsg with UDP_SEGMENT`, ...).
    #[error("{what}: {source}")]
    Sys {
        /// The call.
        what: &'static str,
        /// The errno.
        #[source]
        source: nix::errno::Errno,
    },
    /// A file that could not be written (the plot).
    #[error("{}: {source}", .path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// A baseline's peer went quiet: no datagram within this long.
    #[error("no datagram within {0:?}")]
    Quiet(Duration),
    /// `recvmsg` gave a sender address that is neither IPv4 nor IPv6.
    #[error("recvmsg: not an IP address")]
    NotIpAddress,
    /// A segment the RoCE-like blaster received that is too short for its header and CRC.
    #[error("a {len}-byte segment is too short")]
    ShortSegment {
        /// The segment's length.
        len: usize,
    },
    /// A segment the RoCE-like blaster received with a wrong CRC-32.
    #[error("a segment's CRC-32 is wrong")]
    BadCrc,
    /// A child process that could not be started.
    #[error("{program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// Why it did not start.
        #[source]
        source: std::io::Error,
    },
    /// Waiting for a child process, or collecting its output, failed.
    #[error("{0}")]
    Wait(#[source] std::io::Error),
    /// A child process that ran past its limit, and was killed.
    #[error("ran longer than {0:?}")]
    TooLong(Duration),
    /// A child process that exited with a failure.
    #[error("{status}: {stdout}{stderr}")]
    Child {
        /// How it exited.
        status: ExitStatus,
        /// Its standard output, trimmed.
        stdout: String,
        /// Its standard error, trimmed.
        stderr: String,
    },
    /// A server that announces itself by a line, started without a standard output to read
    /// it from.
    #[error("no stdout")]
    NoStdout,
    /// A server that did not print its ready line in time.
    #[error("the server did not get ready within 15 s")]
    NotReady,
    /// A server that did not listen on its TCP port in time.
    #[error("nothing listens on port {port} after 15 s")]
    NotListening {
        /// The port.
        port: u16,
    },
    /// A child's output that does not parse as JSON.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// A child's output without a JSON line.
    #[error("no JSON in {0:?}")]
    NoJson(String),
    /// A child's output that lacks the figure looked for, or has it in a form that does not
    /// parse (`no t_typical`, `no usec/iter in ...`).
    #[error("{0}")]
    Output(String),
    /// A peer program that is not installed: its figures are skipped.
    #[error("{program} is not installed{hint}")]
    NotInstalled {
        /// The program.
        program: &'static str,
        /// Where it comes from, as ` (package)`, or empty.
        hint: &'static str,
    },
    /// This binary's own path, which the `softrdma` binary is looked for next to, is unknown.
    #[error("{0}")]
    CurrentExe(#[source] std::io::Error),
    /// The `softrdma` binary is not there.
    #[error(
        "{} not found: build it with cargo build --release -p softrdma-cli",
        .0.display()
    )]
    NoSoftrdma(PathBuf),
}

/// For `map_err`: a socket call's error ([`BenchError::Io`]).
pub(crate) fn io(what: &'static str) -> impl Fn(std::io::Error) -> BenchError {
    move |source| BenchError::Io { what, source }
}

/// For `map_err`: the error of a socket call made through nix ([`BenchError::Sys`]).
pub(crate) fn sys(what: &'static str) -> impl Fn(nix::errno::Errno) -> BenchError {
    move |source| BenchError::Sys { what, source }
}

#[cfg(test)]
mod tests {
    use super::BenchError;
    use std::time::Duration;

    /// Each variant prints what the `String` it replaced said.
    #[test]
    fn texts_are_the_old_messages() {
        let io = || std::io::Error::other("boom");
        let errno = nix::errno::Errno::EAGAIN;
        let json = serde_json::from_str::<serde_json::Value>("{").unwrap_err();
        let json_text = json.to_string();
        let quiet = Duration::from_secs(2);
        let cases = [
            (
                BenchError::Io {
                    what: "bind",
                    source: io(),
                },
                "bind: boom".to_string(),
            ),
            (
                BenchError::Sys {
                    what: "UDP_GRO",
                    source: errno,
                },
                format!("UDP_GRO: {errno}"),
            ),
            (
                BenchError::File {
                    path: "/tmp/x.svg".into(),
                    source: io(),
                },
                "/tmp/x.svg: boom".into(),
            ),
            (
                BenchError::Quiet(quiet),
                format!("no datagram within {quiet:?}"),
            ),
            (
                BenchError::NotIpAddress,
                "recvmsg: not an IP address".into(),
            ),
            (
                BenchError::ShortSegment { len: 7 },
                "a 7-byte segment is too short".into(),
            ),
            (BenchError::BadCrc, "a segment's CRC-32 is wrong".into()),
            (
                BenchError::Spawn {
                    program: "iperf3".into(),
                    source: io(),
                },
                "iperf3: boom".into(),
            ),
            (BenchError::Wait(io()), "boom".into()),
            (
                BenchError::TooLong(Duration::from_secs(72)),
                format!("ran longer than {:?}", Duration::from_secs(72)),
            ),
            (BenchError::NoStdout, "no stdout".into()),
            (
                BenchError::NotReady,
                "the server did not get ready within 15 s".into(),
            ),
            (
                BenchError::NotListening { port: 24020 },
                "nothing listens on port 24020 after 15 s".into(),
            ),
            (BenchError::Json(json), json_text),
            (
                BenchError::NoJson("x\n".into()),
                format!("no JSON in {:?}", "x\n"),
            ),
            (BenchError::Output("no bw".into()), "no bw".into()),
            (
                BenchError::NotInstalled {
                    program: "iperf3",
                    hint: "",
                },
                "iperf3 is not installed".into(),
            ),
            (
                BenchError::NotInstalled {
                    program: "ucx_perftest",
                    hint: " (ucx-utils)",
                },
                "ucx_perftest is not installed (ucx-utils)".into(),
            ),
            (BenchError::CurrentExe(io()), "boom".into()),
            (
                BenchError::NoSoftrdma("/x/softrdma".into()),
                "/x/softrdma not found: build it with cargo build --release -p softrdma-cli".into(),
            ),
        ];
        for (e, want) in cases {
            assert_eq!(e.to_string(), want, "{e:?}");
        }
    }

    /// A child that failed: its status, then its trimmed output and error, as before.
    #[test]
    fn a_failed_child_says_how() {
        let o = std::process::Command::new("sh")
            .args(["-c", "echo out; echo err >&2; exit 3"])
            .output()
            .unwrap();
        let e = BenchError::Child {
            status: o.status,
            stdout: "out".into(),
            stderr: "err".into(),
        };
        assert_eq!(e.to_string(), format!("{}: outerr", o.status));
    }
}
