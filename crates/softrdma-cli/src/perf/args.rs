//! The flags of `softrdma perf` (perftest's own names and defaults), and the checks that
//! refuse, by name and before anything is opened, what a test or this implementation does
//! not allow.
//!
//! Owns [`PerfArgs`], the test, connection and atomic enums, and what a runner takes
//! ([`Run`]); calls nothing of the other `perf` files. Adding a doc comment to a flag
//! changes `softrdma perf --help`, which the man page and the tests compare against.

use crate::error::CliError;
use clap::{Args, ValueEnum};

/// The tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Test {
    /// RDMA WRITE bandwidth.
    WriteBw,
    /// RDMA WRITE latency (ping-pong).
    WriteLat,
    /// RDMA READ bandwidth.
    ReadBw,
    /// RDMA READ latency.
    ReadLat,
    /// SEND bandwidth.
    SendBw,
    /// SEND latency (ping-pong).
    SendLat,
    /// Atomic bandwidth.
    AtomicBw,
    /// Atomic latency.
    AtomicLat,
}

impl Test {
    /// Whether this is a bandwidth test (the others are latency tests).
    pub(super) fn is_bw(self) -> bool {
        matches!(
            self,
            Test::WriteBw | Test::ReadBw | Test::SendBw | Test::AtomicBw
        )
    }
    /// perftest's title line for the test.
    pub(super) fn title(self) -> &'static str {
        match self {
            Test::WriteBw => "RDMA_Write BW Test",
            Test::WriteLat => "RDMA_Write Latency Test",
            Test::ReadBw => "RDMA_Read BW Test",
            Test::ReadLat => "RDMA_Read Latency Test",
            Test::SendBw => "Send BW Test",
            Test::SendLat => "Send Latency Test",
            Test::AtomicBw => "Atomic FETCH_AND_ADD BW Test",
            Test::AtomicLat => "Atomic FETCH_AND_ADD Latency Test",
        }
    }
    /// The test's name on the command line and in `--json`.
    pub(super) fn name(self) -> &'static str {
        match self {
            Test::WriteBw => "write-bw",
            Test::WriteLat => "write-lat",
            Test::ReadBw => "read-bw",
            Test::ReadLat => "read-lat",
            Test::SendBw => "send-bw",
            Test::SendLat => "send-lat",
            Test::AtomicBw => "atomic-bw",
            Test::AtomicLat => "atomic-lat",
        }
    }
    /// Whether the test has READs or atomics outstanding (perftest's `OUT_READS`).
    pub(super) fn reads(self) -> bool {
        matches!(
            self,
            Test::ReadBw | Test::ReadLat | Test::AtomicBw | Test::AtomicLat
        )
    }
}

/// Connection types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[allow(clippy::upper_case_acronyms)]
pub enum Conn {
    /// Reliable connection.
    #[value(name = "RC", alias = "rc")]
    RC,
    /// Unreliable connection.
    #[value(name = "UC", alias = "uc")]
    UC,
    /// Unreliable datagram.
    #[value(name = "UD", alias = "ud")]
    UD,
}

/// Atomic operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[allow(non_camel_case_types, clippy::upper_case_acronyms)]
pub enum AtomicType {
    /// Compare and swap.
    #[value(name = "CMP_AND_SWAP")]
    CMP_AND_SWAP,
    /// Fetch and add.
    #[value(name = "FETCH_AND_ADD")]
    FETCH_AND_ADD,
}

/// Flags of `softrdma perf` (perftest's).
#[derive(Debug, Args)]
pub struct PerfArgs {
    /// The test.
    #[arg(value_enum)]
    pub(super) test: Test,
    /// Connect to the server at HOST; without it, run as the server.
    pub(super) host: Option<String>,
    /// Device (default: the first).
    #[arg(short = 'd', long = "ib-dev")]
    pub(super) ib_dev: Option<String>,
    /// Port of the device.
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    pub(super) ib_port: u8,
    /// GID index (default 1: IPv4, as perftest picks on rxe).
    #[arg(short = 'x', long = "gid-index", default_value_t = 1)]
    pub(super) gid_index: usize,
    /// Message size (default 65536 for BW tests, 2 for latency tests).
    #[arg(short = 's', long = "size")]
    pub(super) size: Option<u64>,
    /// Iterations (default 5000 for BW tests, 1000 for latency tests).
    #[arg(short = 'n', long = "iters")]
    pub(super) iters: Option<u64>,
    /// Run for this many seconds instead of a number of iterations.
    #[arg(short = 'D', long = "duration")]
    pub(super) duration: Option<u64>,
    /// All sizes from 2 to 2^23 bytes.
    #[arg(short = 'a', long = "all")]
    pub(super) all: bool,
    /// Path MTU (256..4096; default the port's).
    #[arg(short = 'm', long = "mtu")]
    pub(super) mtu: Option<usize>,
    /// QPs (more than one in the bandwidth tests only).
    #[arg(short = 'q', long = "qp", default_value_t = 1)]
    pub(super) qps: u32,
    /// TX depth (outstanding work requests).
    #[arg(short = 't', long = "tx-depth")]
    pub(super) tx_depth: Option<u32>,
    /// Connection type.
    #[arg(short = 'c', long = "connection", value_enum, default_value = "RC")]
    pub(super) conn: Conn,
    /// TCP port of the out-of-band exchange.
    #[arg(short = 'p', long = "port", default_value_t = 18515)]
    pub(super) port: u16,
    /// Don't fail on CPU frequency differences (accepted for compatibility).
    #[arg(short = 'F', long = "CPU-freq")]
    pub(super) cpu_freq: bool,
    /// Report Gbit/s instead of MB/s.
    #[arg(long = "report_gbits")]
    pub(super) report_gbits: bool,
    /// Inline size (accepted; the soft device copies anyway).
    #[arg(short = 'I', long = "inline_size")]
    pub(super) inline: Option<u32>,
    /// Bidirectional (BW tests): both sides send, and each prints the sum of both reports.
    #[arg(short = 'b', long = "bidirectional")]
    pub(super) bidir: bool,
    /// Post send WRs in chains of this many (one call, one system call for a run of packets).
    #[arg(short = 'l', long = "post_list", default_value_t = 1)]
    pub(super) post_list: u32,
    /// CQ moderation: signal every Nth send.
    #[arg(short = 'Q', long = "cq-mod", default_value_t = 100)]
    pub(super) cq_mod: u32,
    /// Atomic operation.
    #[arg(
        short = 'A',
        long = "atomic_type",
        value_enum,
        default_value = "FETCH_AND_ADD"
    )]
    pub(super) atomic: AtomicType,
    /// Print one JSON line of results after the table.
    #[arg(long)]
    pub(super) json: bool,
    /// With -a, draw the results against message size as SVG.
    #[arg(long)]
    pub(super) plot: Option<std::path::PathBuf>,
    /// Register a heap buffer of this process, as a C program's `malloc`ed memory, instead
    /// of shareable memory that softrdma allocates: a peer on the same host then places its
    /// WRITEs by cross-memory copy, as it does for programs run through the drop-in.
    #[arg(long)]
    pub(super) app_memory: bool,
}

/// The most QPs a bandwidth test runs (`-q`).
const MAX_QPS: u32 = 16384;

/// Checks the flags against what the test and this implementation allow, before touching the
/// network, so that misuse is reported by name.
pub(super) fn check_args(a: &PerfArgs) -> Result<(), CliError> {
    // Each QP has a send and a receive slot of the message size in the buffer, as in
    // perftest: 16,384 QPs of 64 KiB take 2 GiB a side.
    if a.qps == 0 || a.qps > MAX_QPS {
        return Err(CliError::Usage(format!(
            "-q {} is out of range (1..{MAX_QPS})",
            a.qps
        )));
    }
    if a.qps > 1 && !a.test.is_bw() {
        // As perftest: "Multiple QPs only available on bw tests".
        return Err(CliError::Usage(
            "more than one QP (-q): multiple QPs are available on the bandwidth tests only".into(),
        ));
    }
    if a.bidir && !a.test.is_bw() {
        return Err(CliError::Usage(format!(
            "-b is for the bandwidth tests, not {}",
            a.test.name()
        )));
    }
    let allowed: &[Conn] = match a.test {
        Test::WriteBw | Test::WriteLat => &[Conn::RC, Conn::UC],
        Test::SendBw | Test::SendLat => &[Conn::RC, Conn::UC, Conn::UD],
        _ => &[Conn::RC],
    };
    if !allowed.contains(&a.conn) {
        return Err(CliError::Usage(format!(
            "{} does not run over {:?} (allowed: {allowed:?})",
            a.test.name(),
            a.conn
        )));
    }
    if a.duration == Some(0) {
        return Err(CliError::Usage("-D must be at least 1 second".into()));
    }
    if a.iters == Some(0) {
        return Err(CliError::Usage("-n must be at least 1".into()));
    }
    if a.cq_mod == 0 {
        return Err(CliError::Usage("-Q must be at least 1".into()));
    }
    if a.ib_port != 1 {
        return Err(CliError::Usage(format!(
            "port {} does not exist (the device has port 1)",
            a.ib_port
        )));
    }
    if let Some(s) = a.size {
        if s == 0 || s > 1 << 31 {
            return Err(CliError::Usage(format!(
                "message size {s} is out of range (1..2^31)"
            )));
        }
    }
    Ok(())
}

/// The send queue's depth: `-t`, or perftest's default (128 for BW, 1 for latency).
pub(super) fn tx_depth(a: &PerfArgs) -> u32 {
    a.tx_depth
        .unwrap_or(if a.test.is_bw() { 128 } else { 1 })
        .clamp(1, 8192)
}

/// What every runner of one test takes: the flags, the iterations per message size (from
/// [`bw_or_lat_defaults`]) and the progress bar.
pub(super) struct Run<'a> {
    pub(super) a: &'a PerfArgs,
    pub(super) iters: u64,
    pub(super) pb: indicatif::ProgressBar,
}

/// perftest's defaults: 65536 bytes for BW tests and 2 for latency tests; 5000 and 1000
/// iterations. UD messages cannot exceed one MTU: its default is cut to the path MTU later.
pub(super) fn bw_or_lat_defaults(a: &PerfArgs) -> (u64, u64) {
    let size = a.size.unwrap_or(match (a.test.is_bw(), a.conn) {
        (true, Conn::UD) => 4096,
        (true, _) => 65536,
        (false, _) => 2,
    });
    let iters = a.iters.unwrap_or(if a.test.is_bw() { 5000 } else { 1000 });
    (size, iters)
}
