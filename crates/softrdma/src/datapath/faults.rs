//! The fault injector, around any driver: every packet sent goes through the one fault model
//! ([`softrdma_proto::faults::LinkFaults`], which the simulator uses too, with the same
//! draws in the same order): it is lost, duplicated, corrupted (one bit) or held back (a
//! delay, a reordering hold). What is spared goes out through the inner driver in the same
//! send, so that a faulty device measures the device's own send path (GSO, connected
//! sockets, deferred ACKs); what is held back goes when [`Datapath::release`] finds it due.

use super::batch::SendBatch;
use super::socket::RecvBatch;
use super::{Datapath, Sent};
use crate::sync::{Lock, Rank};
use softrdma_proto::faults::LinkFaults;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::RawFd;

/// A packet held back: due time, sequence (FIFO among equal times), destination and TOS,
/// bytes.
type Held = Reverse<(u64, u64, (SocketAddr, u8), Vec<u8>)>;

/// A fault injector around `D`.
pub struct Faulty<D> {
    inner: D,
    faults: LinkFaults,
    state: Lock<State>,
}

/// The injector's state.
#[derive(Default)]
struct State {
    /// What is held back.
    held: BinaryHeap<Held>,
    /// Sequence numbers of held packets.
    seq: u64,
    /// The batch packets leave in (kept to spare allocations).
    out: SendBatch,
    /// The latest due time of a held packet to each destination that was not chosen for
    /// reordering: as in the simulator, delay and jitter never reorder a link by
    /// themselves, only a reordering hold does.
    tail: HashMap<SocketAddr, u64>,
}

impl<D> Faulty<D> {
    /// `inner` with `faults` on every packet sent.
    pub(crate) fn new(inner: D, faults: LinkFaults) -> Self {
        Self {
            inner,
            faults,
            state: Lock::new(Rank::Faults, State::default()),
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

    fn join(&self, group: IpAddr) -> std::io::Result<Option<RawFd>> {
        self.inner.join(group)
    }

    fn leave(&self, group: IpAddr) {
        self.inner.leave(group)
    }

    fn recv_groups(&self, buf: &mut [u8], f: &mut dyn FnMut(IpAddr, SocketAddr, &[u8])) -> usize {
        self.inner.recv_groups(buf, f)
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
        let mut st = self.state.lock();
        let State {
            held,
            seq,
            out,
            tail,
        } = &mut *st;
        let mut held_until = None::<u64>;
        for (bytes, dst, tos) in batch.packets() {
            // The fault model's draws, in its order (see `softrdma_proto::faults`).
            if f.lost(&mut rng) {
                continue;
            }
            let copies = if f.duplicated(&mut rng) { 2 } else { 1 };
            for _ in 0..copies {
                let mut copy = bytes.to_vec();
                f.corrupted(&mut rng, &mut copy);
                let (delay, reordered) = f.copy_delay(&mut rng);
                let mut due = now.saturating_add(delay.as_nanos() as u64);
                if !reordered {
                    // Not before what went to this destination before it.
                    let t = tail.entry(dst).or_insert(0);
                    due = due.max(*t);
                    *t = due;
                }
                if due <= now {
                    out.push(&copy, dst, tos);
                } else {
                    *seq += 1;
                    held.push(Reverse((due, *seq, (dst, tos), copy)));
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
        let mut st = self.state.lock();
        let State { held, out, .. } = &mut *st;
        while let Some(Reverse((due, ..))) = held.peek() {
            if *due > now {
                break;
            }
            if let Some(Reverse((_, _, (dst, tos), bytes))) = held.pop() {
                out.push(&bytes, dst, tos);
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

    fn holds(&self) -> bool {
        true
    }
}
