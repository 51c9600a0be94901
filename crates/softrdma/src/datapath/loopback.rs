//! An in-process loopback driver: devices on one [`Fabric`] exchange packets through
//! queues in memory, with no socket. A test decides when each queue is drained (a device
//! with no progress thread receives only when its CQ is polled), can drop what a queue
//! holds (loss), and can have the "kernel" number IPv4 packets as a connected socket does,
//! so that the receive path must recover each packet's ID from its ICRC.

use super::batch::SendBatch;
use super::socket::{RX_BATCH, RecvBatch};
use super::{Datapath, Sent};
use crate::sync::{Lock, Rank};
use softrdma_proto::endpoint::check::IdentPatches;
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::RawFd;
use std::sync::Arc;

/// A datagram in flight: bytes and sender.
pub(crate) type Datagram = (Vec<u8>, SocketAddr);

/// The queues of every device on the fabric, by address.
pub(crate) struct Fabric {
    queues: Lock<HashMap<IpAddr, VecDeque<Datagram>>>,
}

impl Fabric {
    /// A fabric with no device on it.
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            queues: Lock::new(Rank::Loopback, HashMap::new()),
        })
    }

    /// Takes what waits for `ip` (a test that loses it, or looks at it and puts it back).
    pub(crate) fn take(&self, ip: IpAddr) -> Vec<Datagram> {
        let mut q = self.queues.lock();
        q.get_mut(&ip)
            .map(|d| d.drain(..).collect())
            .unwrap_or_default()
    }

    /// Puts datagrams back at the front of `ip`'s queue, in order.
    pub(crate) fn put_back(&self, ip: IpAddr, d: Vec<Datagram>) {
        let mut q = self.queues.lock();
        let queue = q.entry(ip).or_default();
        for x in d.into_iter().rev() {
            queue.push_front(x);
        }
    }

    /// The first byte (the BTH opcode) of every datagram waiting for `ip`.
    pub(crate) fn opcodes(&self, ip: IpAddr) -> Vec<u8> {
        let q = self.queues.lock();
        q.get(&ip)
            .map(|d| d.iter().filter_map(|(b, _)| b.first().copied()).collect())
            .unwrap_or_default()
    }
}

/// One device's port on a [`Fabric`].
pub(crate) struct Loopback {
    addr: IpAddr,
    port: u16,
    fabric: Arc<Fabric>,
    /// The next IPv4 ID the "kernel" gives a packet, with the patches that make its ICRC
    /// right for it; `None`: every packet carries ID 0, as from an unconnected socket.
    ident: Option<Lock<(u16, IdentPatches)>>,
}

impl Loopback {
    /// `addr`'s port on `fabric`; its packets leave from UDP port `port`.
    pub(crate) fn new(fabric: Arc<Fabric>, addr: IpAddr, port: u16) -> Self {
        Self {
            addr,
            port,
            fabric,
            ident: None,
        }
    }

    /// Numbers the IPv4 packets this port sends from `first` on, one per packet, as a
    /// connected socket's kernel does (the ICRC patched to match, as the UDP driver's send
    /// path patches it for the ID it expects).
    pub(crate) fn numbering_ipv4_ids(mut self, first: u16) -> Self {
        self.ident = Some(Lock::new(
            Rank::LoopbackIdent,
            (first, IdentPatches::default()),
        ));
        self
    }
}

impl Datapath for Loopback {
    fn port(&self) -> u16 {
        self.port
    }

    fn readable_fd(&self) -> Option<RawFd> {
        None
    }

    fn recv(&self, batch: &mut RecvBatch, want: usize) -> std::io::Result<usize> {
        let mut q = self.fabric.queues.lock();
        let Some(queue) = q.get_mut(&self.addr) else {
            return Ok(0);
        };
        let mut n = 0;
        while n < want.clamp(1, RX_BATCH) {
            let Some((bytes, from)) = queue.pop_front() else {
                break;
            };
            batch.set(n, &bytes, from);
            n += 1;
        }
        Ok(n)
    }

    fn send(&self, batch: &mut SendBatch, _now: u64) -> Sent {
        let from = SocketAddr::new(self.addr, self.port);
        let mut sent = 0;
        {
            let mut q = self.fabric.queues.lock();
            // The in-process fabric has no IP header to put the TOS in.
            for (bytes, dst, _tos) in batch.packets() {
                let mut b = bytes.into_owned();
                if let (Some(id), true, n) = (&self.ident, self.addr.is_ipv4(), b.len())
                    && n >= 4
                {
                    let mut id = id.lock();
                    let (next, patches) = &mut *id;
                    let x = patches.xor(n - 4, 0, *next);
                    let icrc = u32::from_le_bytes([b[n - 4], b[n - 3], b[n - 2], b[n - 1]]) ^ x;
                    b[n - 4..].copy_from_slice(&icrc.to_le_bytes());
                    *next = next.wrapping_add(1);
                }
                q.entry(dst.ip().to_canonical())
                    .or_default()
                    .push_back((b, from));
                sent += 1;
            }
        }
        batch.clear();
        Sent {
            sent,
            failed: 0,
            calls: usize::from(sent > 0),
            held_until: None,
        }
    }
}
