//! The fault injector, around any driver: every packet sent goes through the one fault model
//! ([`softrdma_proto::faults::LinkFaults`], which the simulator uses too, with the same
//! draws in the same order): it is lost, duplicated, corrupted (one bit) or held back (a
//! delay, a reordering hold). What is spared goes out through the inner driver in the same
//! send, so that a faulty device measures the device's own send path (GSO, connected
//! sockets, deferred ACKs); what is held back goes when [`Datapath::release`] finds it due.

use super::batch::SendBatch;
use super::socket::RecvBatch;
use super::{Datapath, Sent};
use softrdma_proto::faults::LinkFaults;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::Mutex;

/// A packet held back: due time, sequence (FIFO among equal times), destination, bytes.
type Held = Reverse<(u64, u64, SocketAddr, Vec<u8>)>;

/// A fault injector around `D`.
pub struct Faulty<D> {
    inner: D,
    faults: LinkFaults,
    /// What is held back, and the batch packets leave in (kept to spare allocations).
    state: Mutex<(BinaryHeap<Held>, u64, SendBatch)>,
}

impl<D> Faulty<D> {
    /// `inner` with `faults` on every packet sent.
    pub(crate) fn new(inner: D, faults: LinkFaults) -> Self {
        Self {
            inner,
            faults,
            state: Mutex::new((BinaryHeap::new(), 0, SendBatch::default())),
        }
    }
}

impl<D: Datapath> Datapath for Faulty<D> {
    fn port(&self) -> u16 {
        self.inner.port()
    }

    fn readable_fd(&self) -> Option<RawFd> {
        self.inner.readable_fd()
    }

    fn recv(&self, batch: &mut RecvBatch, want: usize) -> std::io::Result<usize> {
        self.inner.recv(batch, want)
    }

    fn send(&self, batch: &mut SendBatch, now: u64) -> Sent {
        if batch.is_empty() {
            return Sent::default();
        }
        let f = &self.faults;
        let mut rng = rand::rng();
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (held, seq, out) = &mut *st;
        let mut held_until = None::<u64>;
        for (bytes, dst) in batch.packets() {
            // The fault model's draws, in its order (see `softrdma_proto::faults`).
            if f.lost(&mut rng) {
                continue;
            }
            let copies = if f.duplicated(&mut rng) { 2 } else { 1 };
            for _ in 0..copies {
                let mut copy = bytes.to_vec();
                f.corrupted(&mut rng, &mut copy);
                let (delay, _) = f.copy_delay(&mut rng);
                if delay.is_zero() {
                    out.push(&copy, dst);
                } else {
                    let due = now.saturating_add(delay.as_nanos() as u64);
                    *seq += 1;
                    held.push(Reverse((due, *seq, dst, copy)));
                    held_until = Some(held_until.map_or(due, |h| h.min(due)));
                }
            }
        }
        batch.clear();
        let mut sent = self.inner.send(out, now);
        sent.held_until = held_until;
        sent
    }

    fn release(&self, now: u64) -> Sent {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (held, _, out) = &mut *st;
        while let Some(Reverse((due, ..))) = held.peek() {
            if *due > now {
                break;
            }
            if let Some(Reverse((_, _, dst, bytes))) = held.pop() {
                out.push(&bytes, dst);
            }
        }
        let mut sent = self.inner.send(out, now);
        sent.held_until = held.peek().map(|Reverse((due, ..))| *due);
        sent += self.inner.release(now);
        sent
    }

    fn flush_capture(&self) {
        self.inner.flush_capture();
    }
}
