//! The same-host path's resolver: a thread that looks up the processes that hold the QPNs
//! sends found no route for, and those of QPs moved by a thread that may not wait (a
//! member asks its owner: a request that can wait up to `share::ANSWER_TIMEOUT`), and
//! connects rings to them ([`super::local::Local::resolve`]), so that no send waits for
//! that under a QP's lock or the device's routes.
//!
//! # Threads and locks
//! The progress thread starts it ([`kick`]) when QPNs wait and it does not run; it takes
//! them one at a time, runs what waited for each (see `Local::want_then`), and ends when
//! none is left, so that a device whose QPNs are all
//! looked up has no thread for it, and a forked child starts its own. It holds a weak
//! reference to the device, upgraded per QPN, and no lock of its own (see `local` for
//! those a lookup takes).

use super::Device;
use std::sync::{Arc, Weak};

/// Starts `dev`'s resolver thread if QPNs wait for a lookup and it does not run.
pub(super) fn kick(dev: &Arc<Device>) {
    let Some(l) = &dev.local else {
        return;
    };
    if !l.start_resolving() {
        return;
    }
    let weak = Arc::downgrade(dev);
    let spawned = std::thread::Builder::new()
        .name(format!("softrdma-{}-routes", dev.name))
        .spawn(move || run(&weak));
    if spawned.is_err() {
        // No thread now: the QPNs wait for the next want (their packets take UDP).
        l.give_up_lookups();
    }
}

/// The thread's body: looks up every QPN that waits, then ends.
fn run(dev: &Weak<Device>) {
    loop {
        let Some(dev) = dev.upgrade() else {
            return;
        };
        let Some(l) = &dev.local else {
            return;
        };
        let Some(w) = l.next_wanted() else {
            return;
        };
        if let Some(s) = &dev.share {
            l.look_up(s, w);
        }
        l.looked_up(w);
    }
}
