//! `softrdma service`: holds devices open, so that one process owns each (reads its port
//! and forwards the other processes their datagrams) whatever programs come and go, and
//! logs on stderr who joins, leaves and owns it. Nothing needs it: the first process to open
//! a device owns it, and the role passes on when that process goes (see the `softrdma`
//! crate's sharing docs). It is for watching, and for keeping a device's owner out of the
//! programs under test. It runs each device's connection manager agent, which answers the
//! MADs no program's agent takes.

use clap::Args;
use nix::sys::signal::{SigSet, Signal};
use std::process::ExitCode;

/// Flags of `softrdma service`.
#[derive(Debug, Args)]
pub struct ServiceArgs {
    /// Only this device (by default every configured device).
    #[arg(short = 'd', long = "ib-dev")]
    ib_dev: Option<String>,
}

/// Runs `softrdma service` until SIGINT or SIGTERM.
pub fn run(a: &ServiceArgs) -> ExitCode {
    // The signals are waited for, not handled: blocked before any thread exists, so every
    // thread inherits the mask and none is interrupted.
    let mut sigs = SigSet::empty();
    sigs.add(Signal::SIGINT);
    sigs.add(Signal::SIGTERM);
    if let Err(e) = sigs.thread_block() {
        eprintln!("softrdma service: blocking SIGINT and SIGTERM: {e}");
        return ExitCode::from(2);
    }
    softrdma::set_share_log(true);
    let names: Vec<String> = match &a.ib_dev {
        Some(d) => vec![d.clone()],
        None => match softrdma::config::devices() {
            Ok(d) => d.into_iter().map(|d| d.name).collect(),
            Err(e) => {
                eprintln!("softrdma service: {e}");
                return ExitCode::from(2);
            }
        },
    };
    let mut open = Vec::new();
    for n in &names {
        match softrdma::Context::open(Some(n)) {
            Ok(c) => {
                let (owner, _) = c.sharing();
                eprintln!(
                    "softrdma service: {n} on {}: {} (pid {})",
                    c.addr(),
                    if owner { "owner" } else { "member" },
                    std::process::id()
                );
                // The agent answers the MADs that name no other process's: a REQ for
                // a port nobody listens on is rejected at once, not left to time out.
                match softrdma::cm::CmPort::open(&c) {
                    Ok(p) => open.push((c, Some(p))),
                    Err(e) => {
                        eprintln!("softrdma service: {n}: no connection manager: {e}");
                        open.push((c, None));
                    }
                }
            }
            Err(e) => {
                eprintln!("softrdma service: {n}: {e}");
                return ExitCode::from(1);
            }
        }
    }
    let code = match sigs.wait() {
        Ok(s) => {
            eprintln!("softrdma service: {s}: closing");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("softrdma service: waiting for a signal: {e}");
            ExitCode::from(2)
        }
    };
    // Closing hands each device to the processes that still have it open.
    drop(open);
    code
}
