//! Why a `softrdma` command failed: one variant per kind of failure. Each error's text is
//! what the command prints (after its name, for most commands), in the words of the rdma-core
//! tool it is modelled on where there is one.

use std::net::AddrParseError;
use std::num::{ParseFloatError, ParseIntError};
use std::path::PathBuf;

/// Why a command (or a flag's value) was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A verb failed, and its own message says it all.
    #[error(transparent)]
    Verbs(#[from] softrdma::Error),
    /// A verb failed at a step the command names, as rdma-core's tools say it
    /// (`Couldn't create QP: ...`).
    #[error("{what}: {source}")]
    Verb {
        /// The step (`Couldn't register MR`, `Failed to modify QP to INIT`, ...).
        what: &'static str,
        /// The verb's error.
        #[source]
        source: softrdma::Error,
    },
    /// A chain of send WRs (`-l`) that failed part-way; those before it stay posted.
    #[error("Couldn't post send ({posted} of the list posted): {source}")]
    PostList {
        /// The WRs of the chain posted before the one that failed.
        posted: usize,
        /// Why that one failed.
        #[source]
        source: softrdma::Error,
    },
    /// The device config file, read but not understood.
    #[error("{}: {source}", .path.display())]
    Config {
        /// The file.
        path: PathBuf,
        /// What is wrong in it.
        #[source]
        source: softrdma::Error,
    },
    /// A file, socket or connection that failed at a step the command names (the file's
    /// path, `Couldn't connect to HOST:PORT`, `out-of-band exchange failed`, ...).
    #[error("{what}: {source}")]
    Io {
        /// The file or step.
        what: String,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// The out-of-band TCP connection failed at a step that the message does not name (as
    /// rdma-core's pingpong, which prints the system's error alone).
    #[error("{0}")]
    Oob(#[source] std::io::Error),
    /// Writing the results to standard output failed.
    #[error("{0}")]
    Output(#[source] std::io::Error),
    /// A flag or argument the command refuses (`-q 65 is out of range (1..64)`), before or
    /// after it has opened the device.
    #[error("{0}")]
    Usage(String),
    /// A message from the peer on the out-of-band connection that is malformed, short or of
    /// a version this implementation does not speak.
    #[error("{0}")]
    Peer(String),
    /// A byte of the GID in the peer's address that is not two hex digits.
    #[error("{0}")]
    PeerGid(#[source] ParseIntError),
    /// A whole number that does not parse: a field of the peer's message, or a flag's value.
    #[error("{text:?}: {source}")]
    ParseInt {
        /// The text.
        text: String,
        /// Why it is not a number.
        #[source]
        source: ParseIntError,
    },
    /// A decimal number (a flag's value) that does not parse.
    #[error("{text:?}: {source}")]
    ParseFloat {
        /// The text.
        text: String,
        /// Why it is not a number.
        #[source]
        source: ParseFloatError,
    },
    /// A message size (`--size MIN:MAX`) that is not a number of bytes.
    #[error("{text:?} is not a byte count: {source}")]
    ByteCount {
        /// The text.
        text: String,
        /// Why it is not a number.
        #[source]
        source: ParseIntError,
    },
    /// An IP address that does not parse.
    #[error("{text}: {source}")]
    ParseAddr {
        /// The text.
        text: String,
        /// Why it is not an address.
        #[source]
        source: AddrParseError,
    },
    /// `softrdma link` on a device that is not in the config file.
    #[error("no device named {0}")]
    NoDevice(String),
    /// `softrdma link add` of a name the config file has already.
    #[error("device {0} already exists")]
    DeviceExists(String),
    /// A work request that completed in error, receives that could not be posted, a
    /// completion nothing waited for, or data that did not check out.
    #[error("{0}")]
    Failed(String),
    /// The peer went quiet: no completion, or no data, within the time allowed.
    #[error("{0}")]
    Timeout(String),
}

impl CliError {
    /// For `map_err`: a verb's error at the step `what` ([`CliError::Verb`]).
    pub fn verb(what: &'static str) -> impl FnOnce(softrdma::Error) -> Self {
        move |source| Self::Verb { what, source }
    }
}

#[cfg(test)]
mod tests {
    use super::CliError;

    /// Each variant prints what the `String` it replaced said.
    #[test]
    fn texts_are_the_old_messages() {
        let verb = || softrdma::Error::NoDestinationGid;
        let io = || std::io::Error::other("boom");
        let int = "zz".parse::<u32>().unwrap_err();
        let float = "x".parse::<f64>().unwrap_err();
        let addr = "1.2.3".parse::<std::net::IpAddr>().unwrap_err();
        let cases = [
            (CliError::Verbs(verb()), verb().to_string()),
            (
                CliError::verb("Couldn't create QP")(verb()),
                format!("Couldn't create QP: {}", verb()),
            ),
            (
                CliError::PostList {
                    posted: 3,
                    source: verb(),
                },
                format!("Couldn't post send (3 of the list posted): {}", verb()),
            ),
            (
                CliError::Config {
                    path: "/etc/softrdma/devices".into(),
                    source: verb(),
                },
                format!("/etc/softrdma/devices: {}", verb()),
            ),
            (
                CliError::Io {
                    what: "Couldn't connect to h:1".into(),
                    source: io(),
                },
                "Couldn't connect to h:1: boom".into(),
            ),
            (CliError::Oob(io()), "boom".into()),
            (CliError::Output(io()), "boom".into()),
            (CliError::PeerGid(int.clone()), int.to_string()),
            (
                CliError::ParseInt {
                    text: "zz".into(),
                    source: int.clone(),
                },
                format!("\"zz\": {int}"),
            ),
            (
                CliError::ParseFloat {
                    text: "x".into(),
                    source: float.clone(),
                },
                format!("\"x\": {float}"),
            ),
            (
                CliError::ByteCount {
                    text: "zz".into(),
                    source: int.clone(),
                },
                format!("\"zz\" is not a byte count: {int}"),
            ),
            (
                CliError::ParseAddr {
                    text: "1.2.3".into(),
                    source: addr.clone(),
                },
                format!("1.2.3: {addr}"),
            ),
            (CliError::NoDevice("a5".into()), "no device named a5".into()),
            (
                CliError::DeviceExists("a5".into()),
                "device a5 already exists".into(),
            ),
            (
                CliError::Usage("-n must be at least 1".into()),
                "-n must be at least 1".into(),
            ),
            (CliError::Peer("short report".into()), "short report".into()),
            (CliError::Failed("WR 1 failed".into()), "WR 1 failed".into()),
            (
                CliError::Timeout("no completion".into()),
                "no completion".into(),
            ),
        ];
        for (e, want) in cases {
            assert_eq!(e.to_string(), want, "{e:?}");
        }
    }

    /// clap takes the typed error from a value parser.
    #[test]
    fn is_send_and_sync() {
        fn check<T: std::error::Error + Send + Sync + 'static>() {}
        check::<CliError>();
    }
}
