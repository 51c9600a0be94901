//! `softrdma`: the command-line face of softrdma, modelled on the rdma-core tools.
//!
//! `softrdma pcap verify` checks every RoCE v2 packet's ICRC and framing in captures, and
//! `softrdma pcap decode` prints them one per line, as text or JSON. `softrdma sim` runs the
//! transport engine in the deterministic network simulator.

mod cmsetup;
mod demo;
mod devices;
mod doctor;
mod dropin;
mod error;
mod pcap;
mod perf;
mod pingpong;
mod res;
mod rping;
mod service;
mod sim;
mod view;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// softrdma: RDMA over RoCE v2 in user space.
#[derive(Debug, Parser)]
#[command(name = "softrdma", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Read RoCE v2 packets from classic pcap captures.
    #[command(subcommand)]
    Pcap(PcapCommand),
    /// Run the transport engine in the deterministic network simulator and check every
    /// operation against a model. Exits 0 if and only if the transport's guarantees held.
    Sim(sim::SimArgs),
    /// Two soft devices on loopback: SEND, WRITE, READ, FETCH_ADD and COMPARE_SWAP, checked,
    /// then latency and bandwidth.
    Demo,
    /// perftest's bandwidth and latency tests, compatible with perftest 4.5 on the wire and
    /// on the out-of-band connection.
    Perf(perf::PerfArgs),
    /// Show devices and their attributes, as `ibv_devinfo` does.
    Devinfo(devices::DevinfoArgs),
    /// Add, delete and show soft devices, as iproute2's `rdma link` does.
    #[command(subcommand)]
    Link(devices::LinkCommand),
    /// RC ping-pong, compatible with `ibv_rc_pingpong` in both directions.
    RcPingpong(pingpong::PingpongArgs),
    /// UC ping-pong, compatible with `ibv_uc_pingpong` in both directions.
    UcPingpong(pingpong::PingpongArgs),
    /// UD ping-pong, compatible with `ibv_ud_pingpong` in both directions.
    UdPingpong(pingpong::PingpongArgs),
    /// librdmacm's rping over softrdma's connection manager, compatible with `rping` in
    /// both directions.
    Rping(rping::RpingArgs),
    /// How long rdma_cm takes to make a connection: `-c` connections one after another,
    /// each timed from rdma_resolve_addr to ESTABLISHED at both ends (median and p99);
    /// without a server address, serve them.
    CmSetup(cmsetup::CmSetupArgs),
    /// Run an unmodified RDMA program (ibv_devinfo, ibv_rc_pingpong, perftest, qperf, ...)
    /// on softrdma: it gets the drop-in libibverbs.so.1 and librdmacm.so.1 through
    /// LD_LIBRARY_PATH, and its exit status is this command's.
    Exec {
        /// Run the program without the private sysfs and /dev view of softrdma's devices
        /// (by default it gets one where the kernel allows it).
        #[arg(long)]
        no_view: bool,
        /// The program and its arguments (after `--`).
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        program: Vec<std::ffi::OsString>,
    },
    /// Print the `export` line that makes a shell's programs use softrdma.
    Env,
    /// Show what every process holds on each device (QPs, CQs, MRs, PDs), as iproute2's
    /// `rdma res` does.
    #[command(subcommand)]
    Res(res::ResCommand),
    /// Hold the devices open (one process owns each and forwards the others their
    /// datagrams), logging who joins, leaves and owns them, until SIGINT or SIGTERM.
    Service(service::ServiceArgs),
    /// Check the host's RDMA stack (kernel modules, devices and ports, user space) and
    /// softrdma's devices; say why RDMA does not work and how to fix it. Exits 1 when
    /// something is broken.
    Doctor(doctor::DoctorArgs),
}

#[derive(Debug, Subcommand)]
enum PcapCommand {
    /// Check the ICRC and framing of every RoCE v2 packet. Prints one line per file; exits 0
    /// when nothing is bad, 1 when a packet is malformed or has a bad ICRC, 2 when a file
    /// cannot be read.
    Verify {
        /// Capture files (classic pcap, Ethernet).
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Print one line per RoCE v2 packet (UDP destination port 4791), in capture order.
    Decode {
        /// Print one JSON object per packet instead of a tshark-like summary.
        #[arg(long)]
        json: bool,
        /// Capture file (classic pcap, Ethernet).
        file: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut out = std::io::stdout().lock();
    let result = match cli.command {
        Command::Pcap(PcapCommand::Verify { files }) => pcap::verify(&files, &mut out),
        Command::Pcap(PcapCommand::Decode { json, file }) => pcap::decode(&file, json, &mut out),
        Command::Sim(args) => return sim::run(&args, &mut out),
        Command::Demo => return demo::run(),
        Command::Perf(a) => return perf::run(&a, &mut out),
        Command::Devinfo(a) => return devices::devinfo(&a),
        Command::Link(c) => return devices::link(&c),
        Command::Res(c) => return res::run(&c),
        Command::RcPingpong(a) => return pingpong::run(softrdma::QpType::Rc, &a),
        Command::UcPingpong(a) => return pingpong::run(softrdma::QpType::Uc, &a),
        Command::UdPingpong(a) => return pingpong::run(softrdma::QpType::Ud, &a),
        Command::Rping(a) => return rping::run(&a),
        Command::CmSetup(a) => return cmsetup::run(&a),
        Command::Exec { program, no_view } => return dropin::exec(&program, !no_view),
        Command::Env => return dropin::env(),
        Command::Service(a) => return service::run(&a),
        Command::Doctor(a) => return doctor::run(&a),
    };
    match result {
        Ok(code) => code,
        Err(pcap::Fatal::OutputClosed) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("softrdma: {e}");
            ExitCode::from(2)
        }
    }
}
