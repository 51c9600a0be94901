//! The datapaths beneath the device: how its packets leave and arrive. smoltcp's
//! `phy::Device` is the model: the device hands a driver batches of whole packets and asks
//! it for batches of datagrams, and knows nothing of sockets.
//!
//! - [`Datapath`]: the interface every driver implements.
//! - [`udp::Udp`]: the UDP driver: the receive socket on `IP:4791` (with GRO), or the
//!   socket the device's owner forwards this process's datagrams to, and the
//!   sending path `tx` (connected sockets with IPv4-ID learning, GSO batches), over the
//!   batched system calls of `socket` and the send batch of `batch` (its `sendmmsg` and
//!   GSO in `batch::send`).
//! - [`faults::Faulty`]: a fault injector around any driver, applying the one fault model
//!   ([`softrdma_proto::faults`], the simulator's) to every packet it sends.
//! - [`pcap::Captured`]: a pcap writer around any driver.
//! - `loopback`: an in-process driver for deterministic tests (devices on a clock the test
//!   moves, with no progress thread, no socket and no sleep).
//!
//! - `shm`: the same-host path's ring (a sealed memfd shared by two processes of one user),
//!   which the device fills and drains beside its driver (see `device::local`): packets to
//!   another local process's QPN leave the send batch for a ring before the driver sees it.
//! - `shared_mem`: the sealed memfd mappings beneath the ring, and those of the same-host
//!   WRITE placement (a region's memory, the table of grants).
//!
//! Contract: a driver never blocks (every socket is non-blocking; the capture wrapper's
//! buffered file writes are the one exception, see the crate docs), may be called from any
//! thread (`Send + Sync`; the device serialises receives itself), and takes the packets it
//! is given: a send empties the batch whatever became of each packet.
//!
//! Room for what comes next: the batches still carry UDP's addressing (`SocketAddr`s, the
//! IPv4-ID bookkeeping of `batch`), which the rings carry too (each entry is the packet UDP
//! would carry, ICRC included); a ring that took packets built straight into it, with no
//! ICRC, would spare two copies and two CRCs per packet.

pub(crate) mod batch;
pub mod faults;
#[cfg(test)]
pub(crate) mod loopback;
pub mod pcap;
pub(crate) mod shared_mem;
pub(crate) mod shm;
pub(crate) mod socket;
pub(crate) mod tx;
pub(crate) mod udp;

use batch::SendBatch;
use socket::RecvBatch;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::RawFd;

/// What became of a send.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Sent {
    /// Packets handed to the network.
    pub sent: usize,
    /// Packets refused (a full buffer, an unreachable address).
    pub failed: usize,
    /// System calls made.
    pub calls: usize,
    /// Packets a wrapper held back: the earliest is due then (nanoseconds on the device
    /// clock), and the device must call [`Datapath::release`] by that time.
    pub held_until: Option<u64>,
}

impl std::ops::AddAssign for Sent {
    fn add_assign(&mut self, o: Sent) {
        self.sent += o.sent;
        self.failed += o.failed;
        self.calls += o.calls;
        self.held_until = match (self.held_until, o.held_until) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}

/// A driver beneath the device (see the module docs).
pub(crate) trait Datapath: Send + Sync {
    /// The UDP source port every packet leaves from (the ICRC covers it).
    fn port(&self) -> u16;
    /// A descriptor that becomes readable when a datagram waits, for the progress
    /// thread's poll (`None`: a driver that only its callers' polls drain).
    fn readable_fd(&self) -> Option<RawFd>;
    /// Receives up to `want` datagrams into `batch` without blocking; how many came.
    fn recv(&self, batch: &mut RecvBatch, want: usize) -> std::io::Result<usize>;
    /// Sends (or drops, or holds back) every packet of `batch`, which it leaves empty;
    /// `now`: the device clock, for a wrapper that holds packets back.
    fn send(&self, batch: &mut SendBatch, now: u64) -> Sent;
    /// Sends what was held back and is due at `now` (`u64::MAX`: everything); returns the
    /// send, with when the next held packet is due.
    fn release(&self, now: u64) -> Sent {
        let _ = now;
        Sent::default()
    }
    /// Writes out what a capture holds buffered.
    fn flush_capture(&self) {}
    /// Whether this driver (or one it wraps) holds packets back, and so needs the device
    /// clock on each send.
    fn holds(&self) -> bool {
        false
    }
    /// Starts receiving the multicast group `group` (an IP multicast address): its
    /// datagrams come through [`Datapath::recv_groups`]. Returns a descriptor that becomes
    /// readable when one waits, for the progress thread to watch. A driver without
    /// multicast refuses.
    fn join(&self, group: IpAddr) -> std::io::Result<Option<RawFd>> {
        let _ = group;
        Err(std::io::ErrorKind::Unsupported.into())
    }
    /// Stops receiving `group`.
    fn leave(&self, group: IpAddr) {
        let _ = group;
    }
    /// Receives, without blocking, what waits for the joined groups: `f(group, from, data)`
    /// for each datagram; how many came. `buf` is the scratch they are received into.
    fn recv_groups(&self, buf: &mut [u8], f: &mut dyn FnMut(IpAddr, SocketAddr, &[u8])) -> usize {
        let _ = (buf, f);
        0
    }
}

/// A boxed driver is a driver: the wrappers wrap whatever the device chose beneath them.
impl Datapath for Box<dyn Datapath> {
    fn port(&self) -> u16 {
        (**self).port()
    }
    fn readable_fd(&self) -> Option<RawFd> {
        (**self).readable_fd()
    }
    fn recv(&self, batch: &mut RecvBatch, want: usize) -> std::io::Result<usize> {
        (**self).recv(batch, want)
    }
    fn send(&self, batch: &mut SendBatch, now: u64) -> Sent {
        (**self).send(batch, now)
    }
    fn release(&self, now: u64) -> Sent {
        (**self).release(now)
    }
    fn flush_capture(&self) {
        (**self).flush_capture()
    }
    fn holds(&self) -> bool {
        (**self).holds()
    }
    fn join(&self, group: IpAddr) -> std::io::Result<Option<RawFd>> {
        (**self).join(group)
    }
    fn leave(&self, group: IpAddr) {
        (**self).leave(group)
    }
    fn recv_groups(&self, buf: &mut [u8], f: &mut dyn FnMut(IpAddr, SocketAddr, &[u8])) -> usize {
        (**self).recv_groups(buf, f)
    }
}
