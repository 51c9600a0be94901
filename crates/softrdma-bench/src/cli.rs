//! The command line of `softrdma-bench`: its subcommands and their flags.
//!
//! `bench/compare.sh` and `bench/loss.sh` call these subcommands, and `compare` calls the
//! baseline ones on itself: their names and flags stay as they are. Owns only the
//! definitions; the ping-pong's own flags (`Ends`) live with the ping-pong in `floor`.

use crate::floor::Ends;
use clap::{Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Parser)]
#[command(about = "softrdma against raw UDP, iperf3, UCX and libfabric on loopback")]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) cmd: Cmd,
}

#[derive(Subcommand)]
pub(crate) enum Cmd {
    /// Runs every benchmark and prints the markdown table.
    Compare {
        /// The `softrdma` binary (default: next to this one).
        #[arg(long)]
        softrdma: Option<PathBuf>,
        /// Seconds per bandwidth run.
        #[arg(long, default_value_t = 3)]
        seconds: u64,
    },
    /// Goodput against loss rate on the soft device (a markdown table and, with `--svg`, a
    /// plot), and the loss-recovery goals, each against the lossless run of the same work.
    Loss {
        /// The `softrdma` binary (default: next to this one).
        #[arg(long)]
        softrdma: Option<PathBuf>,
        /// Seconds per bandwidth run.
        #[arg(long, default_value_t = 3)]
        seconds: u64,
        /// Where to write the plot of goodput against loss.
        #[arg(long)]
        svg: Option<PathBuf>,
        /// Runs of each measurement; the tables give their medians.
        #[arg(long, default_value_t = 5)]
        rounds: usize,
    },
    /// Raw UDP ping-pong, echo side: prints "ready", then echoes until `iters` came back.
    UdpPingpongServer(Ends),
    /// Raw UDP ping-pong, timing side: prints `{"half_rtt_p50_us": ...}`.
    UdpPingpongClient(Ends),
    /// GSO+GRO blaster, receiving side: prints "ready", then `{"bytes_per_sec": ...}`.
    UdpBlastRecv {
        #[arg(long)]
        addr: SocketAddr,
        /// Receive as a RoCE receiver must at the least: with the sender's address and the
        /// GRO segment size, checking each segment's trailing CRC-32 and copying its payload
        /// into a 1 MiB region (a socket cannot place it there by itself).
        #[arg(long)]
        roce: bool,
    },
    /// GSO+GRO blaster, sending side: 4096-byte segments, 15 per system call.
    UdpBlastSend {
        #[arg(long)]
        addr: SocketAddr,
        #[arg(long)]
        peer: SocketAddr,
        #[arg(long)]
        seconds: u64,
        /// Send as a RoCE sender must at the least: each 4096-byte payload taken in place
        /// from a 1 MiB region, behind a 12-byte header and followed by a CRC-32 of both (the
        /// ICRC's share of the work), as header / region / CRC pieces of one GSO send.
        #[arg(long)]
        roce: bool,
    },
}
