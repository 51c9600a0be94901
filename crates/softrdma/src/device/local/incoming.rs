//! The rings peers fill: the receive path drains them in turn ([`Local::recv`]), and the
//! progress thread arms their wake-ups before it sleeps ([`Local::arm`]). A ring whose
//! connection went is drained before it is dropped; a broken one ends its connection.
//!
//! May call: the rings' consumer ends, and `conn` to hang a broken ring's connection up.
//!
//! Threads and locks: `LocalIncoming`, taken by the thread that holds the device's receive
//! state, and by the progress thread to arm, add or drop a ring; a broken ring's
//! connection is hung up (`LocalConns`) after it is released.

use super::Local;
use crate::datapath::shm::Consumer;
use crate::datapath::socket::RecvBatch;
use std::sync::atomic::Ordering;

/// A ring a peer fills, drained by the receive path.
pub(super) struct Incoming {
    pub(super) ring: Consumer,
    pub(super) token: usize,
    /// The connection it came over (valid while `token` is in `conns`).
    pub(super) conn: std::os::fd::RawFd,
    /// Its connection is gone: it is dropped once the receive path finds it empty, so
    /// that what the peer published before it went is still delivered.
    pub(super) closing: bool,
}

impl Local {
    /// Receives up to `want` packets from the rings into `batch` (from slot 0), taking
    /// the rings in turn, and into `acks` the ACKs their boxes hold (see
    /// [`Local::ack`]); how many packets came, and how many entries were malformed.
    pub(crate) fn recv(
        &self,
        batch: &mut RecvBatch,
        want: usize,
        acks: &mut Vec<(u32, u32)>,
    ) -> (usize, usize) {
        let mut g = self.incoming.lock();
        let (rings, turn) = &mut *g;
        let (mut got, mut bad) = (0, 0);
        let n = rings.len();
        // Rings to drop: those found empty after their connection went, and broken ones
        // (whose connections are then closed, below).
        let mut done = false;
        let mut broken = Vec::new();
        // The ring to start at turns with each call, so that none starves the others; a
        // division once per call, not per ring (this runs on every empty poll).
        let mut i = if n > 1 { *turn % n } else { 0 };
        for _ in 0..n {
            if got == want {
                break;
            }
            let r = &mut rings[i];
            i = if i + 1 == n { 0 } else { i + 1 };
            match r.ring.recv(batch, got, want - got) {
                Ok((g, b)) => {
                    got += g;
                    bad += b;
                    // Behind the entries just read, the ACKs left since.
                    r.ring.acks(acks);
                    done |= r.closing && g + b == 0;
                }
                Err(e) => {
                    eprintln!("softrdma: {}: dropping a same-host ring: {e}", self.addr);
                    broken.push((r.token, r.conn));
                    r.closing = true;
                    done = true;
                }
            }
        }
        *turn = turn.wrapping_add(1);
        if done {
            let registry = self.registry.get();
            rings.retain(|r| {
                let keep =
                    !r.closing || (r.ring.pending() && !broken.iter().any(|b| b.0 == r.token));
                if !keep && let Some(reg) = registry {
                    let _ = reg.deregister(&mut mio::unix::SourceFd(&r.ring.wake_fd()));
                }
                keep
            });
            self.any_in.store(!rings.is_empty(), Ordering::Relaxed);
        }
        drop(g);
        for (token, fd) in broken {
            self.hang_up(token, fd);
        }
        (got, bad)
    }
}
