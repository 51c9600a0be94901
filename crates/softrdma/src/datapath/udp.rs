//! The UDP driver: a socket bound to `IP:4791` that receives (with GRO), or the socket a
//! device's owner forwards this process's datagrams to, and the send path ([`super::tx`])
//! that sends from another port (connected sockets, GSO).

use super::batch::SendBatch;
use super::socket::{self as sys, Forgotten, RecvBatch};
use super::tx::{TxOptions, TxPath};
use super::{Datapath, Sent};
use crate::counters::DeviceCounters;
use crate::error::{Error, Result};
use crate::sync::{Lock, Rank};
use softrdma_wire::ROCE_V2_PORT;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, AtomicU64, Ordering};

/// The receiving socket a process reads: the port (the device's owner, or a process
/// alone), or its end of the pair the owner forwards it datagrams through (a member; see
/// `device::share`). It changes when a member carries on as owner, and every receive
/// reads it anew.
pub(crate) struct RxPort {
    /// The descriptor read, with bit 32 set when it is a forwarding socket (framed).
    cur: AtomicU64,
    /// A steered member's forwarding socket (framed), which it reads too, but only when
    /// the progress thread saw it readable (`spilled`): its owner forwards there what the
    /// group did not steer (see `device::share::steer`). -1: none.
    spill: AtomicI32,
    spilled: AtomicBool,
    /// The slot of a steered member (whose QPNs end in it): a datagram for a QPN of
    /// another slot that its socket got is the kernel's mistake, which it hands back.
    slot: AtomicU8,
    /// An owner's ends of its members' forwarding pairs, on which members hand back what
    /// the group gave them by mistake (see `device::share`), read only when the progress
    /// thread saw one readable (`handed`).
    handbacks: Lock<Vec<Arc<OwnedFd>>>,
    handed: AtomicBool,
    /// Every socket ever current, kept open for the device's life (there is one per
    /// change of owner), so that a receive that read the old descriptor never reads a
    /// reused number.
    keep: Lock<Vec<Forgotten>>,
}

impl RxPort {
    /// Starts out reading `fd` (`framed`: a forwarding socket).
    pub(crate) fn new(fd: Forgotten, framed: bool) -> Self {
        let p = Self {
            cur: Default::default(),
            spill: AtomicI32::new(-1),
            spilled: AtomicBool::new(false),
            slot: AtomicU8::new(0),
            handbacks: Lock::new(Rank::UdpHandbacks, Vec::new()),
            handed: AtomicBool::new(false),
            keep: Lock::new(Rank::UdpKeep, Vec::new()),
        };
        p.set(fd, framed);
        p
    }

    /// Reads `fd` from now on.
    pub(crate) fn set(&self, fd: Forgotten, framed: bool) {
        let raw = fd.raw() as u32 as u64 | (u64::from(framed) << 32);
        self.keep.lock().push(fd);
        self.cur.store(raw, Ordering::Release);
    }

    /// The descriptor to read, and whether it is framed.
    pub(crate) fn get(&self) -> (RawFd, bool) {
        let v = self.cur.load(Ordering::Acquire);
        (v as u32 as RawFd, v >> 32 != 0)
    }

    /// Reads forwarded datagrams from `fd` (framed) beside the current socket, or no
    /// more (`None`); `slot`: the one this steered member's QPNs end in.
    pub(crate) fn set_spill(&self, fd: Option<Forgotten>, slot: u8) {
        let raw = fd.as_ref().map_or(-1, |f| f.raw());
        if let Some(fd) = fd {
            self.keep.lock().push(fd);
        }
        self.slot.store(slot, Ordering::Relaxed);
        self.spill.store(raw, Ordering::Release);
        self.spilled.store(raw >= 0, Ordering::Release);
    }

    /// A steered member's socket got `data` from `from`, a datagram for no QP of this
    /// process: if its QPN ends in another slot than this member's, the group gave it here
    /// by mistake (for the moment after a member died, before the owner probed the group
    /// again, the kernel had moved another member's socket into the dead one's index).
    /// It goes back to the owner over the forwarding pair, which routes it as though its
    /// own socket had received it. Returns whether it went.
    pub(crate) fn hand_back(&self, qpn: u32, data: &[u8], from: SocketAddr) -> bool {
        match self.spill() {
            Some(fd) if qpn as u8 != self.slot.load(Ordering::Relaxed) => {
                sys::send_framed(fd, from, data).is_ok()
            }
            _ => false,
        }
    }

    /// The owner reads what the member at the other end of `fd` hands back (`on`), or no
    /// longer (the member is gone, and `fd` is forgotten here).
    pub(crate) fn set_handback(&self, fd: &Arc<OwnedFd>, on: bool) {
        let mut h = self.handbacks.lock();
        h.retain(|f| !Arc::ptr_eq(f, fd));
        if on {
            h.push(fd.clone());
        }
    }

    /// The progress thread saw a member's forwarding pair readable: the next receive
    /// reads the pairs.
    pub(crate) fn handed(&self) {
        self.handed.store(true, Ordering::Release);
    }

    /// Reads what members handed back, if the progress thread saw some.
    fn recv_handed(&self, batch: &mut RecvBatch, want: usize) -> Option<usize> {
        if !self.handed.load(Ordering::Relaxed) || !self.handed.swap(false, Ordering::AcqRel) {
            return None;
        }
        // Under the lock: a member's pair is closed only once it is out of the list.
        let h = self.handbacks.lock();
        for fd in h.iter() {
            if let Ok(n @ 1..) = sys::recv_framed(fd.as_raw_fd(), batch, want) {
                // More may wait, here or in another pair.
                self.handed.store(true, Ordering::Release);
                return Some(n);
            }
        }
        None
    }

    /// The forwarding socket read beside the current one.
    pub(crate) fn spill(&self) -> Option<RawFd> {
        let fd = self.spill.load(Ordering::Acquire);
        (fd >= 0).then_some(fd)
    }

    /// The progress thread saw the forwarding socket readable: the next receive reads it.
    pub(crate) fn spilled(&self) {
        self.spilled.store(true, Ordering::Release);
    }

    /// Reads forwarded datagrams if the progress thread saw some.
    fn recv_spill(&self, batch: &mut RecvBatch, want: usize) -> Option<usize> {
        if !self.spilled.load(Ordering::Relaxed) || !self.spilled.swap(false, Ordering::AcqRel) {
            return None;
        }
        let fd = self.spill()?;
        match sys::recv_framed(fd, batch, want) {
            Ok(n) if n > 0 => {
                // More may wait: the poll reports the next arrival only.
                self.spilled.store(true, Ordering::Release);
                Some(n)
            }
            _ => None,
        }
    }
}

/// Whether interface `ifindex` is marked for multicast (IFF_MULTICAST): Linux's `lo` is
/// not, and IPv6 multicast sent through it reaches nobody.
fn carries_multicast(ifindex: u32) -> bool {
    let Ok(name) = nix::net::if_::if_indextoname(ifindex) else {
        return true;
    };
    let Ok(ifaces) = nix::ifaddrs::getifaddrs() else {
        return true;
    };
    ifaces
        .filter(|i| name.to_str() == Ok(i.interface_name.as_str()))
        .any(|i| {
            i.flags
                .contains(nix::net::if_::InterfaceFlags::IFF_MULTICAST)
        })
}

/// UDP port 4791 at `ip` (IPv6 scope `scope_id`).
pub(crate) fn roce_port(ip: IpAddr, scope_id: u32) -> SocketAddr {
    match ip {
        IpAddr::V6(v6) => {
            SocketAddr::V6(std::net::SocketAddrV6::new(v6, ROCE_V2_PORT, 0, scope_id))
        }
        v4 => SocketAddr::new(v4, ROCE_V2_PORT),
    }
}

/// How [`Udp::bind_port`] binds the port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PortBind {
    /// Alone: no other socket may ever bind it (`SOFTRDMA_SHARE=0`).
    Alone,
    /// The device's owner: the first socket of a SO_REUSEPORT group, if the port is free.
    Group,
    /// A member: joins the owner's group, to be steered its own datagrams.
    Join,
}

/// The UDP driver.
pub(crate) struct Udp {
    /// Receives: the device's `IP:4791` socket (every peer sends to port 4791), or, in a
    /// process that shares the device with its owner, the socket the owner forwards this
    /// process's datagrams to (see `device::share`). Non-blocking.
    rx: Arc<RxPort>,
    /// Sends, from another port.
    tx: TxPath,
    /// Send runs of equal packets as one GSO send (turned off if the kernel refuses).
    gso: AtomicBool,
    /// The device's address and IPv6 scope: the interface multicast groups are joined on.
    addr: IpAddr,
    scope_id: u32,
    /// One socket per joined multicast group, bound to `group:4791`, non-blocking.
    /// Shared, so that [`Datapath::recv_groups`] receives without the lock held: its
    /// callback takes the device's member lock, which the device holds while it joins
    /// and leaves.
    groups: Lock<HashMap<IpAddr, Arc<std::net::UdpSocket>>>,
}

impl Udp {
    /// Binds `addr:4791` (IPv6 scope `scope_id`) for the device's receive path, with no
    /// SO_REUSEADDR (which would let another user take the port). `how` says whether the
    /// socket opens a SO_REUSEPORT group that this user's other processes may join (their
    /// datagrams are then steered to them, see `device::share::steer`), joins one, or
    /// stays alone. `gro`: ask the kernel to coalesce received segments.
    pub(crate) fn bind_port(
        addr: IpAddr,
        scope_id: u32,
        gro: bool,
        how: PortBind,
    ) -> Result<OwnedFd> {
        let bind = roce_port(addr, scope_id);
        let in_use = |e: std::io::Error| {
            if e.kind() == std::io::ErrorKind::AddrInUse {
                Error::AddrInUse { addr }
            } else {
                Error::Io {
                    verb: "ibv_open_device",
                    source: e,
                }
            }
        };
        if how == PortBind::Group {
            // A plain bind first: a group's socket would join a group some other process
            // of this user still holds (a member of an owner that just went), where it
            // must find the port taken instead. Only the holder of the device's name binds
            // here, so nobody takes the port between the two binds but a joining member.
            drop(std::net::UdpSocket::bind(bind).map_err(in_use)?);
        }
        let socket: std::net::UdpSocket = if how == PortBind::Alone {
            std::net::UdpSocket::bind(bind).map_err(in_use)?
        } else {
            let s = socket2::Socket::new(
                socket2::Domain::for_address(bind),
                socket2::Type::DGRAM,
                Some(socket2::Protocol::UDP),
            )
            .map_err(Error::io("ibv_open_device: socket"))?;
            // The kernel lets only sockets of the same effective uid into a group.
            s.set_reuse_port(true)
                .map_err(Error::io("ibv_open_device: SO_REUSEPORT"))?;
            s.bind(&bind.into()).map_err(in_use)?;
            s.into()
        };
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
        if gro {
            sys::enable_gro(fd);
        }
        Ok(socket.into())
    }

    /// The driver over the receiving socket `rx`, with a send path from `addr`.
    pub(crate) fn open(
        rx: Arc<RxPort>,
        addr: IpAddr,
        scope_id: u32,
        opts: TxOptions,
        counters: Arc<DeviceCounters>,
    ) -> Result<Self> {
        let tx = TxPath::new(counters, addr, scope_id, opts)
            .map_err(Error::io("ibv_open_device: send socket"))?;
        Ok(Self {
            rx,
            tx,
            gso: AtomicBool::new(opts.gso),
            addr,
            scope_id,
            groups: Lock::new(Rank::UdpGroups, HashMap::new()),
        })
    }
}

impl Udp {
    /// A socket that receives `group`'s datagrams to port 4791 on the device's interface.
    ///
    /// Every member socket of a group binds `group:4791`, within this process and across
    /// processes, so these (and only these) sockets set SO_REUSEADDR: for a multicast
    /// address it makes the kernel give each member its own copy, which is what a group
    /// is. It opens no unicast port to anyone (the device's own `IP:4791` socket has no
    /// SO_REUSEADDR), and what it receives, any host on the link may send and receive.
    fn group_socket(&self, group: IpAddr) -> std::io::Result<std::net::UdpSocket> {
        use socket2::{Domain, Protocol, Socket, Type};
        let bind = roce_port(group, self.scope_id);
        let sock = Socket::new(Domain::for_address(bind), Type::DGRAM, Some(Protocol::UDP))?;
        sock.set_reuse_address(true)?;
        sock.set_nonblocking(true)?;
        sock.bind(&bind.into())?;
        match (group, self.addr) {
            (IpAddr::V4(g), IpAddr::V4(me)) => sock.join_multicast_v4(&g, &me)?,
            (IpAddr::V6(g), IpAddr::V6(_)) => {
                let ifindex = self.tx.multicast_if();
                if ifindex != 0 && !carries_multicast(ifindex) {
                    // Linux joins the group on such an interface (`lo`), but nothing sent
                    // to it arrives: say so now rather than lose every datagram.
                    return Err(std::io::Error::from_raw_os_error(libc::EOPNOTSUPP));
                }
                sock.join_multicast_v6(&g, ifindex)?;
                // rxe sends IPv6 UDP with checksum 0, which Linux drops unless told not to.
                sys::set_int_opt(sock.as_raw_fd(), libc::IPPROTO_UDP, 102, 1)?;
            }
            _ => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "the group's address family is not the device's",
                ));
            }
        }
        Ok(sock.into())
    }
}

impl Datapath for Udp {
    fn port(&self) -> u16 {
        self.tx.port()
    }

    fn readable_fd(&self) -> Option<RawFd> {
        Some(self.rx.get().0)
    }

    fn recv(&self, batch: &mut RecvBatch, want: usize) -> std::io::Result<usize> {
        let r = match self.rx.get() {
            (fd, false) => sys::recv_batch(fd, batch, want),
            (fd, true) => sys::recv_framed(fd, batch, want),
        };
        match r {
            Ok(n) if n > 0 => Ok(n),
            r => self
                .rx
                .recv_spill(batch, want)
                .or_else(|| self.rx.recv_handed(batch, want))
                .map_or(r, Ok),
        }
    }

    fn join(&self, group: IpAddr) -> std::io::Result<Option<RawFd>> {
        let mut groups = self.groups.lock();
        if let Some(s) = groups.get(&group) {
            return Ok(Some(s.as_raw_fd()));
        }
        let sock = self.group_socket(group)?;
        let fd = sock.as_raw_fd();
        groups.insert(group, Arc::new(sock));
        Ok(Some(fd))
    }

    fn leave(&self, group: IpAddr) {
        // Closing the socket leaves the group.
        self.groups.lock().remove(&group);
    }

    fn recv_groups(&self, buf: &mut [u8], f: &mut dyn FnMut(IpAddr, SocketAddr, &[u8])) -> usize {
        // A socket left meanwhile is closed once this pass lets go of it.
        let groups: Vec<(IpAddr, Arc<std::net::UdpSocket>)> = self
            .groups
            .lock()
            .iter()
            .map(|(g, s)| (*g, s.clone()))
            .collect();
        let mut n = 0;
        // Each socket is emptied: the progress thread's poll reports edges.
        for (group, sock) in &groups {
            while let Ok((len, from)) = sock.recv_from(buf) {
                n += 1;
                f(*group, from, &buf[..len]);
            }
        }
        n
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
