//! The UDP driver: a socket bound to `IP:4791` that receives (with GRO), and the send path
//! ([`super::tx`]) that sends from another port (connected sockets, GSO).

use super::batch::SendBatch;
use super::socket::{self as sys, RecvBatch};
use super::tx::{TxOptions, TxPath};
use super::{Datapath, Sent};
use crate::counters::DeviceCounters;
use crate::error::{Error, Result};
use softrdma_wire::ROCE_V2_PORT;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// The UDP driver.
pub(crate) struct Udp {
    /// Receives: every peer sends to port 4791. Non-blocking.
    socket: std::net::UdpSocket,
    /// Sends, from another port.
    tx: TxPath,
    /// Send runs of equal packets as one GSO send (turned off if the kernel refuses).
    gso: AtomicBool,
}

impl Udp {
    /// Binds `addr:4791` (IPv6 scope `scope_id`) and makes the send path.
    pub(crate) fn open(
        addr: IpAddr,
        scope_id: u32,
        opts: TxOptions,
        counters: Arc<DeviceCounters>,
    ) -> Result<Self> {
        let bind = match addr {
            IpAddr::V6(v6) => {
                SocketAddr::V6(std::net::SocketAddrV6::new(v6, ROCE_V2_PORT, 0, scope_id))
            }
            v4 => SocketAddr::new(v4, ROCE_V2_PORT),
        };
        let socket = std::net::UdpSocket::bind(bind).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AddrInUse {
                Error::AddrInUse { addr }
            } else {
                Error::Io {
                    verb: "ibv_open_device",
                    source: e,
                }
            }
        })?;
        socket
            .set_nonblocking(true)
            .map_err(Error::io("ibv_open_device"))?;
        let fd = socket.as_raw_fd();
        if addr.is_ipv6() {
            // rxe sends IPv6 UDP with checksum 0, which Linux drops unless told not to.
            sys::set_int_opt(fd, libc::IPPROTO_UDP, 102 /* UDP_NO_CHECK6_RX */, 1)
                .map_err(Error::io("ibv_open_device: setsockopt"))?;
        }
        // A deep receive buffer: a burst of a whole send window must not overflow the queue.
        // SO_RCVBUFFORCE passes net.core.rmem_max when the process may (CAP_NET_ADMIN);
        // otherwise the kernel caps the plain request at that limit.
        if sys::set_int_opt(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 16 << 20).is_err() {
            let _ = sys::set_int_opt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, 16 << 20);
        }
        if opts.gso {
            sys::enable_gro(fd);
        }
        let tx = TxPath::new(counters, addr, scope_id, opts)
            .map_err(Error::io("ibv_open_device: send socket"))?;
        Ok(Self {
            socket,
            tx,
            gso: AtomicBool::new(opts.gso),
        })
    }
}

impl Datapath for Udp {
    fn port(&self) -> u16 {
        self.tx.port()
    }

    fn readable_fd(&self) -> Option<RawFd> {
        Some(self.socket.as_raw_fd())
    }

    fn recv(&self, batch: &mut RecvBatch, want: usize) -> std::io::Result<usize> {
        sys::recv_batch(self.socket.as_raw_fd(), batch, want)
    }

    fn send(&self, batch: &mut SendBatch, _now: u64) -> Sent {
        if batch.is_empty() {
            return Sent::default();
        }
        let (sent, failed, calls) = batch.flush(&self.tx, &self.gso);
        Sent {
            sent,
            failed,
            calls,
            held_until: None,
        }
    }
}
