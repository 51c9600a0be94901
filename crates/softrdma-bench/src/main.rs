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
mod compare;
mod error;
mod floor;
mod loss;
mod output;
mod pair;
mod stats;

use clap::Parser;
use cli::{Cli, Cmd};
use floor::{udp_blast_recv, udp_blast_send, udp_pingpong_client, udp_pingpong_server};
use pair::{pinning, softrdma_bin};

fn main() -> std::process::ExitCode {
    let r = match Cli::parse().cmd {
        Cmd::Compare { softrdma, seconds } => compare::compare(softrdma, seconds),
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
        Cmd::UdpPingpongServer(ends) => udp_pingpong_server(ends),
        Cmd::UdpPingpongClient(ends) => udp_pingpong_client(ends),
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
