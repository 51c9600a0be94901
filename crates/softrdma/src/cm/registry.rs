//! The registry of hosts by device (`CORES`), so that every ID of a device shares one
//! agent and one QP1, and the devices it lists for a thread that waits for a CM event.
//!
//! Calls the device through `dev` (a receive pass, the pollers' hand-back). Locks: `CmCores`, released
//! before a device is called.

use super::dev::{CmDevice, WeakCmDevice};
use super::objects::Core;
use crate::sync::{Lock, Rank};
use std::sync::Weak;

/// The cores by device, so that every ID on a device shares one agent and one QP1. A core
/// leaves the list only under its lock (see `serve`), so that an ID made meanwhile either
/// finds it with its thread still serving, or makes a new one.
pub(super) static CORES: Lock<Vec<CoreEntry>> = Lock::new(Rank::CmCores, Vec::new());

/// One device's core in [`CORES`].
pub(super) struct CoreEntry {
    /// Its device's key (`dev::key`).
    pub(super) key: usize,
    pub(super) core: Weak<Core>,
    /// Its device, reached without holding the core up (see [`release_pollers`]).
    pub(super) dev: WeakCmDevice,
}

/// The devices with a CM in this process.
pub(super) fn cm_devices() -> Vec<CmDevice> {
    CORES
        .lock()
        .iter()
        .filter_map(|c| c.dev.upgrade())
        .collect()
}

/// This thread is about to block for a CM event: each device with a CM gives its socket
/// back to its progress thread now, as a thread that blocks for a completion does
/// (`Poller::app_sleeps`). A thread that polled a CQ just before (to take the last
/// connection's completion) would otherwise keep the socket for the poller's grace, and
/// the MAD that brings the event would wait that long for anyone to read it.
pub(super) fn release_pollers() {
    for d in cm_devices() {
        d.app_sleeps();
    }
}
