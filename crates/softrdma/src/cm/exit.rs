//! The end of the process: at `exit(3)` every connection ends as destroying its ID would
//! (a DREQ, a REJ), so that peers do not resend to nobody.
//!
//! Locks: `CmCores` (to list the hosts, released), then each host's `CmAgent` (*try*,
//! for at most [`EXIT_WAIT`]).

use super::objects::Core;
use super::registry::CORES;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// At `exit(3)`, every connection of the process ends as destroying its ID would end it
/// (a DREQ for an established one, a REJ for one that forms): a program that exits
/// without `rdma_disconnect` (qperf's server, after each test) must not leave its peer
/// resending a DREQ to nobody for seconds, which is what the kernel spares programs on
/// Linux by closing their IDs when their file closes. A `kill -9` still leaves the peers
/// to their timeouts.
pub(super) extern "C" fn at_exit() {
    EXITING.store(true, Ordering::Release);
    // Most programs end with their IDs destroyed: then no thread is started. A thread born
    // inside exit(3) is one more thing that can fail there (its first thread-local with a
    // destructor allocates, and glibc ends the process if that fails).
    if !anything_to_end() {
        return;
    }
    // On a thread of its own: this one's thread-locals (the device's send batch) may be
    // gone already, as exit(3) runs their destructors first.
    let _ = std::thread::Builder::new()
        .name("softrdma-exit".into())
        .spawn(end_all)
        .map(|t| t.join());
}

/// Set as [`at_exit`] begins.
static EXITING: AtomicBool = AtomicBool::new(false);

/// Whether the process has begun to exit and ends its connections (its `atexit` handler): a
/// thread that finds an object of its program destroyed under it may then wait for the
/// exit rather than fail (the drop-in's `rdma_get_cm_event` on a destroyed channel).
pub fn exiting() -> bool {
    EXITING.load(Ordering::Acquire)
}

/// Whether any core has a connection or SIDR request to end (or is busy: then it may).
/// Safe on the exiting thread: it takes the registry's and agents' locks (*try*) only,
/// and the thread-locals those touch have no destructors, or are read with `try_with`.
fn anything_to_end() -> bool {
    live_cores()
        .iter()
        .any(|core| core.try_agent().is_none_or(|cs| cs.agent.has_any()))
}

/// The cores still alive, listed with the registry let go again: a core's last handle may
/// go with this list, and its drop takes the registry.
fn live_cores() -> Vec<Arc<Core>> {
    CORES
        .lock()
        .iter()
        .filter_map(|c| c.core.upgrade())
        .collect()
}

/// How long the exit waits for an agent that another thread holds.
pub(super) const EXIT_WAIT: Duration = Duration::from_secs(1);

/// Ends every connection of every core (see [`at_exit`]).
pub(super) fn end_all() {
    for core in live_cores() {
        // The CM thread holds the agent for a pass at a time: wait it out, but not for
        // ever, since the thread that called exit(3) may hold it (from a signal handler)
        // and waits for this one.
        let until = std::time::Instant::now() + EXIT_WAIT;
        let cs = loop {
            match core.try_agent() {
                Some(cs) => break Some(cs),
                None if std::time::Instant::now() >= until => break None,
                None => std::thread::sleep(Duration::from_millis(1)),
            }
        };
        if let Some(mut cs) = cs {
            let now = core.now();
            cs.agent.destroy_all(now);
            while let Some((to, mad)) = cs.agent.poll_transmit() {
                core.send(to, &mad);
            }
        }
    }
}
