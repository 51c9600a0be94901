//! `softrdma`: the command-line face of softrdma, modelled on the rdma-core tools and
//! iproute2's `rdma`.
//!
//! It runs unmodified RDMA programs on softrdma (`exec`, `env`), checks the host
//! (`doctor`), shows and manages devices (`devinfo`, `link`, `res`, `service`), speaks
//! rdma-core's and perftest's tools on the wire (`rc-pingpong` and its kin, `perf`,
//! `rping`, `cm-setup`), demonstrates and simulates (`demo`, `sim`), reads captures
//! (`pcap`), and describes itself (`completions`, and the man pages, which packaging
//! makes with the hidden `manpages`). Results go to stdout; errors go to stderr, with a
//! non-zero exit status.

mod cmsetup;
mod demo;
mod devices;
mod doctor;
mod dropin;
mod error;
mod libdir;
mod manual;
mod oob;
mod pcap;
mod perf;
mod pingpong;
mod progress;
mod res;
mod rping;
mod service;
mod sim;
mod view;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// softrdma: the Linux RDMA stack in user space. Run unmodified RDMA programs with
/// `softrdma exec`, with no RDMA NIC, kernel module or root; it speaks RoCE v2 to Linux rxe
/// and to real RoCE NICs.
#[derive(Debug, Parser)]
#[command(
    name = "softrdma",
    version,
    long_version = manual::long_version(),
    after_help = "Examples:\n  softrdma exec -- ibv_devinfo\n  softrdma doctor\n  softrdma demo"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Read RoCE v2 packets from classic pcap captures.
    #[command(
        subcommand,
        after_help = "Example:\n  softrdma pcap verify capture.pcap"
    )]
    Pcap(PcapCommand),
    /// Run the transport engine in the deterministic network simulator and check every
    /// operation against a model. Exits 0 if and only if the transport's guarantees held.
    #[command(
        after_help = "Example:\n  softrdma sim --transport rc --op mixed --ops 2000 --loss 0.1 --seed 7"
    )]
    Sim(sim::SimArgs),
    /// Two soft devices on loopback: SEND, WRITE, READ, FETCH_ADD and COMPARE_SWAP, checked,
    /// then latency and bandwidth.
    #[command(after_help = "Example:\n  softrdma demo")]
    Demo,
    /// perftest's bandwidth and latency tests, compatible with perftest 4.5 on the wire and
    /// on the out-of-band connection.
    #[command(
        after_help = "Example:\n  softrdma perf write-bw &\n  softrdma perf write-bw 127.0.0.1"
    )]
    Perf(perf::PerfArgs),
    /// Show devices and their attributes, as `ibv_devinfo` does.
    #[command(after_help = "Example:\n  softrdma devinfo -v")]
    Devinfo(devices::DevinfoArgs),
    /// Add, delete and show soft devices, as iproute2's `rdma link` does.
    #[command(
        subcommand,
        after_help = "Example:\n  softrdma link add softrdma1 addr 127.0.0.2\n  softrdma link show"
    )]
    Link(devices::LinkCommand),
    /// RC ping-pong, compatible with `ibv_rc_pingpong` in both directions.
    #[command(
        after_help = "Example:\n  softrdma rc-pingpong -g 1 &\n  softrdma rc-pingpong -g 1 localhost"
    )]
    RcPingpong(pingpong::PingpongArgs),
    /// UC ping-pong, compatible with `ibv_uc_pingpong` in both directions.
    #[command(
        after_help = "Example:\n  softrdma uc-pingpong -g 1 &\n  softrdma uc-pingpong -g 1 localhost"
    )]
    UcPingpong(pingpong::PingpongArgs),
    /// UD ping-pong, compatible with `ibv_ud_pingpong` in both directions.
    #[command(
        after_help = "Example:\n  softrdma ud-pingpong -g 1 &\n  softrdma ud-pingpong -g 1 localhost"
    )]
    UdPingpong(pingpong::PingpongArgs),
    /// librdmacm's rping over softrdma's connection manager, compatible with `rping` in
    /// both directions.
    #[command(
        after_help = "Example:\n  softrdma rping -s -a 127.0.0.1 -C 10 &\n  softrdma rping -c -a 127.0.0.1 -C 10 -v"
    )]
    Rping(rping::RpingArgs),
    /// How long rdma_cm takes to make a connection: `-c` connections one after another,
    /// each timed from rdma_resolve_addr to ESTABLISHED at both ends (median and p99);
    /// without a server address, serve them.
    #[command(after_help = "Example:\n  softrdma cm-setup &\n  softrdma cm-setup 127.0.0.1 -c 100")]
    CmSetup(cmsetup::CmSetupArgs),
    /// Run an unmodified RDMA program (ibv_devinfo, ibv_rc_pingpong, perftest, qperf, ...)
    /// on softrdma: it gets the drop-in libibverbs.so.1 and librdmacm.so.1 through
    /// LD_LIBRARY_PATH, and libfabric's `softrdma` provider through FI_PROVIDER_PATH
    /// (libfabric's MR cache monitor is `disabled` unless FI_MR_CACHE_MONITOR says
    /// otherwise: its default rewrites libc's code under the drop-in's threads); its exit
    /// status is this command's.
    #[command(
        after_help = "Example:\n  softrdma exec -- ibv_devinfo\n  softrdma exec -- ib_write_bw & softrdma exec -- ib_write_bw localhost\n  softrdma exec -- fi_pingpong -p softrdma -e rdm & softrdma exec -- fi_pingpong -p softrdma -e rdm localhost"
    )]
    Exec {
        /// Run the program without the private sysfs and /dev view of softrdma's devices
        /// (by default it gets one where the kernel allows it).
        #[arg(long)]
        no_view: bool,
        /// The program and its arguments (after `--`).
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        program: Vec<std::ffi::OsString>,
    },
    /// Print the `export` lines that make a shell's programs use softrdma (LD_LIBRARY_PATH
    /// for the drop-in libraries, FI_PROVIDER_PATH for libfabric's `softrdma` provider,
    /// FI_MR_CACHE_MONITOR as `softrdma exec` sets it).
    #[command(after_help = "Example:\n  eval \"$(softrdma env)\"; ibv_devinfo")]
    Env,
    /// Show what every process holds on each device (QPs, CQs, MRs, PDs), as iproute2's
    /// `rdma res` does.
    #[command(subcommand, after_help = "Example:\n  softrdma res show qp -dd")]
    Res(res::ResCommand),
    /// Hold the devices open (one process owns each and forwards the others their
    /// datagrams), logging who joins, leaves and owns them, until SIGINT or SIGTERM.
    #[command(after_help = "Example:\n  softrdma service -d softrdma0")]
    Service(service::ServiceArgs),
    /// Check the host's RDMA stack (kernel modules, devices and ports, user space) and
    /// softrdma's devices; say why RDMA does not work and how to fix it. Exits 1 when
    /// something is broken.
    #[command(after_help = "Example:\n  softrdma doctor --json")]
    Doctor(doctor::DoctorArgs),
    /// Print a shell completion script for bash, zsh, fish, elvish or powershell.
    #[command(
        after_help = "Example:\n  softrdma completions bash > /etc/bash_completion.d/softrdma"
    )]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Write the man pages (softrdma.1 and one per subcommand) into a folder.
    #[command(hide = true)]
    Manpages {
        /// The folder, made if missing.
        dir: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
enum PcapCommand {
    /// Check the ICRC and framing of every RoCE v2 packet. Prints one line per file; exits 0
    /// when nothing is bad, 1 when a packet is malformed or has a bad ICRC, 2 when a file
    /// cannot be read.
    #[command(after_help = "Example:\n  softrdma pcap verify tests/data/*.pcap")]
    Verify {
        /// Capture files (classic pcap, Ethernet).
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Print one line per RoCE v2 packet (UDP destination port 4791), in capture order.
    #[command(after_help = "Example:\n  softrdma pcap decode --json capture.pcap")]
    Decode {
        /// Print one JSON object per packet instead of a tshark-like summary.
        #[arg(long)]
        json: bool,
        /// Capture file (classic pcap, Ethernet).
        file: PathBuf,
    },
}

fn main() -> ExitCode {
    // A reader that stops early (`softrdma devinfo | head -1`) ends this process quietly,
    // as it ends rdma-core's and iproute2's tools: the Rust runtime ignores SIGPIPE, which
    // would make every `println!` to a closed pipe a panic instead. The library's own
    // sockets send with MSG_NOSIGNAL, so a vanished peer raises no SIGPIPE.
    // SAFETY: no thread exists yet, and SIG_DFL installs no handler that could run.
    let _ = unsafe {
        nix::sys::signal::signal(
            nix::sys::signal::Signal::SIGPIPE,
            nix::sys::signal::SigHandler::SigDfl,
        )
    };
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
        Command::Completions { shell } => return manual::completions(shell),
        Command::Manpages { dir } => return manual::manpages(&dir),
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
