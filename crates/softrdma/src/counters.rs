//! The device's counters of what its datapath sends and receives (the QPs count the rest,
//! see [`softrdma_proto::QpCounters`]), one slot per [`Counter::DEVICE`] entry, so that
//! each is named once ([`Counter::name`]). Atomic, since every thread that sends or drains
//! the socket adds to them; the receive path adds a batch's counts at once.

use softrdma_proto::endpoint::Counter;
use std::sync::atomic::{AtomicU64, Ordering};

/// The device's own counters (see [`Counter::DEVICE`] for what each counts).
#[derive(Debug, Default)]
pub struct DeviceCounters {
    slots: [AtomicU64; Counter::DEVICE.len()],
}

impl DeviceCounters {
    fn slot(&self, c: Counter) -> Option<&AtomicU64> {
        c.device_slot().map(|i| &self.slots[i])
    }

    /// Adds `n` to `c` (nothing for a counter summed over QPs, or for 0: an add is a locked
    /// instruction).
    pub fn add(&self, c: Counter, n: u64) {
        if n > 0
            && let Some(s) = self.slot(c)
        {
            s.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// The value of `c` (0 for a counter summed over QPs).
    pub fn get(&self, c: Counter) -> u64 {
        self.slot(c).map_or(0, |s| s.load(Ordering::Relaxed))
    }

    /// Name and value of every device counter.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        Counter::DEVICE
            .iter()
            .map(|&c| (c.name(), self.get(c)))
            .collect()
    }
}
