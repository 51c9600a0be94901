//! The same-host path's resolver: one thread per device with a same-host path, which
//! looks up the process that holds a QPN (a member asks its owner: a request that can wait
//! up to `share::ANSWER_TIMEOUT`) and connects a ring to it, so that no send waits for
//! that under a QP's lock or the device's routes ([`super::local::Local::resolve`]).
//!
//! # Threads and locks
//! The thread takes QPNs from a channel that [`super::local::Local::divert`] feeds once per
//! QPN not looked up, and holds no lock while it asks and connects. It keeps only a weak
//! reference to the device, upgraded per QPN, and ends when the device (and with it the
//! channel's sender) is gone.

use super::Device;
use super::local::Local;
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Weak};

/// Starts `dev`'s resolver thread and gives `local` its queue.
pub(super) fn start(dev: &Arc<Device>, local: &Local, name: &str) -> std::io::Result<()> {
    let (tx, rx) = channel();
    let weak = Arc::downgrade(dev);
    std::thread::Builder::new()
        .name(format!("softrdma-{name}-routes"))
        .spawn(move || run(&weak, &rx))?;
    local.set_resolver(tx);
    Ok(())
}

fn run(dev: &Weak<Device>, rx: &Receiver<u32>) {
    while let Ok(qpn) = rx.recv() {
        let Some(dev) = dev.upgrade() else {
            return;
        };
        dev.resolve_route(qpn);
    }
}
