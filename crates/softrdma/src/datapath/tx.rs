//! Where a device's packets leave: one connected UDP socket per destination, and one
//! unconnected socket for everything else.
//!
//! Why connected sockets: Linux looks up the route of every datagram that an unconnected
//! socket sends, and a connected socket caches it. On loopback that lookup is about 0.4 µs
//! of a 2.7 µs half round trip.
//!
//! The catch is IPv4's identification field, which the ICRC covers (IBTA vol. 1, 7.8.1 and
//! Annex A17: only TOS, TTL and the header checksum are masked). An unconnected socket with
//! DF set sends ID 0, and that is what the engine computes every ICRC for. A connected socket
//! numbers its packets from a private counter that starts at a random value (`inet_id`, see
//! `ip_select_ident_segs`). So this module learns that counter and patches each packet's
//! ICRC for the ID the kernel will give it. CRC-32 is affine, so the patch is an XOR that
//! depends only on the ID and the packet's length ([`softrdma_wire::icrc::ipv4_ident_basis`]).
//!
//! - **Learning the counter.** A probe datagram goes from the connected socket to the device's
//!   own unconnected socket, with a transmit timestamp requested (`SO_TIMESTAMPING`). The
//!   error queue hands the packet back with its headers, ID included. The device's own socket
//!   drops the probe.
//! - **How the counter moves** differs between kernels: by one per datagram, by the GSO
//!   segments before the send, or by them after. Three probes (one datagram, a two-segment
//!   GSO send, one datagram) tell which rule holds. A pattern that fits none of them, or a
//!   probe that does not come back, leaves that destination on the unconnected socket.
//! - **The segments of a GSO send** carry the send's ID plus their index (`inet_gso_segment`)
//!   when the kernel splits them; on loopback with GRO they are never split.
//! - **A failed send loses track** (the kernel may or may not have used an ID for it), so
//!   that destination's counter is learnt again.
//! - **Nobody waits for a probe.** A probe's copy may take up to [`PROBE_WAIT`] to come back,
//!   so the probes run on a learner thread of the path's own, started with its first job.
//!   A sender never blocks on them, nor on a lock that a probing thread holds: until a
//!   destination's counter is known (first use, or after a failed send) its packets leave
//!   from the unconnected socket, with ID 0.
//!
//! IPv6 has no identification field, and its connected sockets need no probes.
//!
//! Contract: every packet leaves from `address:`[`TxPath::port`], which is the UDP source port
//! that the engine's ICRCs assume, with an ICRC that is right for the IP header Linux gives
//! it. `SOFTRDMA_CONNECTED=0` keeps every packet on the unconnected socket.

use crate::sync::{Lock, Rank, RwLock};
use softrdma_proto::endpoint::Counter;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Destinations that get a connected socket; any further ones share the unconnected socket.
const MAX_CONNECTED: usize = 256;
/// How long a probe's copy may take to come back on the error queue.
const PROBE_WAIT: Duration = Duration::from_millis(200);
/// Bytes in a probe (two 8-byte segments when it tests GSO).
const PROBE_LEN: usize = 8;

/// How a kernel advances a connected socket's IPv4 identification counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IdRule {
    /// By one per datagram, whatever its GSO segments (Linux up to at least 6.18 for UDP).
    PerSend,
    /// By the previous send's segments (`atomic_fetch_add(segs)`).
    SegsBefore,
    /// By this send's segments, the ID being the counter after the add
    /// (`atomic_add_return(segs)`).
    SegsAfter,
}

impl IdRule {
    /// The ID of a send of `segs` segments after one with ID `last` of `last_segs` segments.
    fn next(self, last: u16, last_segs: u16, segs: u16) -> u16 {
        match self {
            IdRule::PerSend => last.wrapping_add(1),
            IdRule::SegsBefore => last.wrapping_add(last_segs),
            IdRule::SegsAfter => last.wrapping_add(segs),
        }
    }

    /// The rule that explains the IDs of the calibration probes: one datagram (`a`), two GSO
    /// segments (`b`), one datagram (`c`).
    fn from_probes(a: u16, b: u16, c: u16) -> Option<IdRule> {
        match (b.wrapping_sub(a), c.wrapping_sub(b)) {
            (1, 1) => Some(IdRule::PerSend),
            (1, 2) => Some(IdRule::SegsBefore),
            (2, 1) => Some(IdRule::SegsAfter),
            _ => None,
        }
    }
}

/// Where an IPv4 connected socket's counter stands.
struct Ident {
    rule: IdRule,
    /// The ID of the last send, and its segments; `None` when a failed send lost track.
    last: Option<(u16, u16)>,
    /// The learner has been asked to probe the counter again.
    relearning: bool,
}

/// A connected socket, shared by the threads that send to its destination.
pub(crate) type SharedConn = Arc<Lock<Conn>>;

/// A socket connected to one destination.
pub(crate) struct Conn {
    /// Shared with the learner, which probes on it without the lock while `ident.last` is
    /// `None` (and so no sender uses it).
    sock: Arc<socket2::Socket>,
    dst: SocketAddr,
    /// IPv4 only.
    ident: Option<Ident>,
}

impl Conn {
    /// The descriptor to send on (no address needed).
    pub(crate) fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// The IDs the next sends will get, one per send of `segs[i]` segments, when the counter
    /// is known; `Some(empty)` for IPv6. `None` while a failed send has lost track: the
    /// learner is asked to probe again, and meanwhile the unconnected socket serves.
    pub(crate) fn plan(&mut self, tx: &TxPath, segs: impl Iterator<Item = u16>) -> Option<Plan> {
        let Some(id) = &mut self.ident else {
            return Some(Plan::default());
        };
        let Some((mut last, mut last_segs)) = id.last else {
            if !id.relearning {
                id.relearning = true;
                tx.learn(self.dst);
            }
            return None;
        };
        let mut plan = Plan::default();
        for s in segs.take(super::socket::BATCH) {
            let next = id.rule.next(last, last_segs, s);
            plan.ids[plan.len] = next;
            plan.len += 1;
            (last, last_segs) = (next, s);
        }
        plan.end = Some((last, last_segs));
        Some(plan)
    }

    /// Records how a planned send went: `sent` of its sends left, and the kernel reported
    /// no error. Anything else loses track of the counter.
    pub(crate) fn commit(&mut self, plan: &Plan, sent: usize, clean: bool) {
        if let Some(id) = &mut self.ident {
            id.last = if clean && sent == plan.len {
                plan.end
            } else {
                None
            };
        }
    }
}

/// The IDs a connected socket's next sends (at most [`super::socket::BATCH`]) will get.
pub(crate) struct Plan {
    ids: [u16; super::socket::BATCH],
    len: usize,
    end: Option<(u16, u16)>,
}

impl Default for Plan {
    fn default() -> Self {
        Self {
            ids: [0; super::socket::BATCH],
            len: 0,
            end: None,
        }
    }
}

impl Plan {
    /// One ID per send (IPv4); none for IPv6.
    pub(crate) fn ids(&self) -> &[u16] {
        &self.ids[..self.len]
    }
}

/// How a path sends.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TxOptions {
    /// Connected sockets at all.
    pub connect: bool,
    /// Sends may use GSO (the probes then test how the counter moves for them).
    pub gso: bool,
    /// GSO toward every destination, not only loopback.
    pub gso_everywhere: bool,
}

/// A device's sending side.
pub(crate) struct TxPath {
    /// Tells paths apart for caches that outlive one (a thread's send batch).
    pub(crate) id: u64,
    /// Whether to connect at all (`SOFTRDMA_CONNECTED=0` says no; packet capture too, since
    /// it records ID 0).
    connect: bool,
    /// GSO toward every destination (`SOFTRDMA_GSO=always`), not only loopback.
    pub(crate) gso_everywhere: bool,
    /// What the learner shares.
    shared: Arc<Shared>,
    /// Jobs for the learner thread (a destination to connect or to probe again), once it
    /// runs; it ends when this is dropped.
    learner: Lock<Option<std::sync::mpsc::Sender<SocketAddr>>>,
}

/// The part of a path that its learner thread uses too.
struct Shared {
    addr: SocketAddr,
    /// [`TxPath::multicast_if`].
    mcast_if: u32,
    /// Unconnected, bound to `addr`: sends where no connected socket serves, and receives
    /// (and drops) the probes.
    plain: std::net::UdpSocket,
    /// Connected sockets by destination. Only the learner writes an entry other than
    /// `Pending`, and it probes with no lock of this map held.
    conns: RwLock<HashMap<SocketAddr, Slot>>,
    /// Whether sends may use GSO (the probes then test how the counter moves for them).
    gso: bool,
    /// The device's counters (probes are counted).
    counters: Arc<crate::counters::DeviceCounters>,
}

/// A destination's connected socket, as far as it goes.
#[derive(Clone)]
enum Slot {
    /// The learner is connecting it.
    Pending,
    Ready(SharedConn),
    /// It could not be set up (too many, or its counter follows no known rule).
    Unusable,
}

impl TxPath {
    /// Binds the unconnected socket on `ip` (any free port) and prepares the path.
    pub(crate) fn new(
        counters: Arc<crate::counters::DeviceCounters>,
        ip: IpAddr,
        scope_id: u32,
        opts: TxOptions,
    ) -> std::io::Result<Self> {
        let bind = match ip {
            IpAddr::V6(v6) => SocketAddr::V6(std::net::SocketAddrV6::new(v6, 0, 0, scope_id)),
            v4 => SocketAddr::new(v4, 0),
        };
        // Looked up once: the learner binds a socket for each destination it connects.
        let mcast_if = match ip {
            IpAddr::V6(v6) => super::socket::v6_interface(v6, scope_id),
            IpAddr::V4(_) => 0,
        };
        let plain = std::net::UdpSocket::from(new_socket(bind, mcast_if)?);
        let addr = plain.local_addr()?;
        static NEXT: AtomicU64 = AtomicU64::new(0);
        Ok(Self {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            connect: opts.connect,
            gso_everywhere: opts.gso_everywhere,
            shared: Arc::new(Shared {
                addr,
                mcast_if,
                plain,
                conns: RwLock::new(Rank::TxConns, HashMap::new()),
                gso: opts.gso,
                counters,
            }),
            learner: Lock::new(Rank::Learner, None),
        })
    }

    /// The UDP source port of every packet.
    pub(crate) fn port(&self) -> u16 {
        self.shared.addr.port()
    }

    /// The interface an IPv6 path's multicast leaves and its groups are joined on (see
    /// `socket::v6_interface`); 0 for IPv4, whose groups go by the device's address.
    pub(crate) fn multicast_if(&self) -> u32 {
        self.shared.mcast_if
    }

    /// The unconnected socket.
    pub(crate) fn plain_fd(&self) -> RawFd {
        self.shared.plain.as_raw_fd()
    }

    /// The connected socket for `dst` once it is ready; `None` means the unconnected one.
    /// Never blocks: a destination's first use hands it to the learner.
    #[cfg(test)]
    pub(crate) fn conn(&self, dst: SocketAddr) -> Option<SharedConn> {
        self.route(dst).0
    }

    /// [`TxPath::conn`], and whether that answer is final (a caller may keep it): not while
    /// the learner is still connecting `dst`.
    pub(crate) fn route(&self, dst: SocketAddr) -> (Option<SharedConn>, bool) {
        if !self.connect {
            return (None, true);
        }
        let look = |map: &HashMap<SocketAddr, Slot>| {
            map.get(&dst).map(|slot| match slot {
                Slot::Ready(c) => (Some(c.clone()), true),
                Slot::Pending => (None, false),
                Slot::Unusable => (None, true),
            })
        };
        let conns = &self.shared.conns;
        if let Some(r) = look(&conns.read()) {
            return r;
        }
        let mut map = conns.write();
        if let Some(r) = look(&map) {
            return r;
        }
        if map.len() >= MAX_CONNECTED {
            map.insert(dst, Slot::Unusable);
            return (None, true);
        }
        map.insert(dst, Slot::Pending);
        drop(map);
        self.learn(dst);
        (None, false)
    }

    /// [`TxPath::conn`], once the learner has settled `dst` (bounded by `PROBE_WAIT`s).
    #[cfg(test)]
    pub(crate) fn conn_settled(&self, dst: SocketAddr) -> Option<SharedConn> {
        let deadline = std::time::Instant::now() + 4 * PROBE_WAIT;
        loop {
            let (c, settled) = self.route(dst);
            if settled || std::time::Instant::now() > deadline {
                return c;
            }
            std::thread::yield_now();
        }
    }

    /// Asks the learner to connect `dst`, or to probe its counter again; starts the learner
    /// on the first job. If the thread cannot start, the destination stays unconnected.
    fn learn(&self, dst: SocketAddr) {
        let mut l = self.learner.lock();
        if l.is_none() {
            let (tx, rx) = std::sync::mpsc::channel();
            let shared = Arc::downgrade(&self.shared);
            let spawned = std::thread::Builder::new()
                .name("softrdma-ipid".into())
                .spawn(move || learner(shared, rx));
            if spawned.is_err() {
                self.shared.set(dst, Slot::Unusable);
                return;
            }
            *l = Some(tx);
        }
        if let Some(tx) = l.as_ref() {
            let _ = tx.send(dst);
        }
    }
}

/// The learner thread: connects the destinations it is given, or probes their counters
/// again, until its path is gone.
fn learner(shared: std::sync::Weak<Shared>, jobs: std::sync::mpsc::Receiver<SocketAddr>) {
    while let Ok(dst) = jobs.recv() {
        let Some(s) = shared.upgrade() else { return };
        let slot = s.conns.read().get(&dst).cloned();
        match slot {
            Some(Slot::Pending) => {
                let slot = match s.connect_to(dst) {
                    Ok(c) => Slot::Ready(Arc::new(Lock::new(Rank::TxConn, c))),
                    Err(_) => Slot::Unusable,
                };
                s.set(dst, slot);
            }
            Some(Slot::Ready(c)) => {
                // No sender uses the socket while its counter is unknown, so the probe runs
                // without the lock, and the lock is taken only to record what it found.
                let sock = c.lock().sock.clone();
                let got = s.probe(&sock, 0).ok();
                let mut c = c.lock();
                if let Some(id) = &mut c.ident {
                    id.last = got.map(|g| (g, 1));
                    // A probe that did not come back is tried again at the next send.
                    id.relearning = false;
                }
            }
            _ => {}
        }
    }
}

impl Shared {
    fn set(&self, dst: SocketAddr, slot: Slot) {
        self.conns.write().insert(dst, slot);
    }

    /// A socket bound next to the unconnected one and connected to `dst`, its counter
    /// learnt.
    fn connect_to(&self, dst: SocketAddr) -> std::io::Result<Conn> {
        let sock = new_socket(self.addr, self.mcast_if)?;
        sock.connect(&dst.into())?;
        let ident = match (self.addr.ip(), dst.ip()) {
            (IpAddr::V4(_), IpAddr::V4(_)) => {
                let a = self.probe(&sock, 0)?;
                let (rule, c) = if self.gso {
                    let b = self.probe(&sock, PROBE_LEN as u16)?;
                    let c = self.probe(&sock, 0)?;
                    (IdRule::from_probes(a, b, c), c)
                } else {
                    // Without GSO every send is one segment, and every rule moves by one.
                    let c = self.probe(&sock, 0)?;
                    ((c == a.wrapping_add(1)).then_some(IdRule::PerSend), c)
                };
                let rule = rule.ok_or_else(|| {
                    std::io::Error::other(format!(
                        "IP ID probes came back as {a} … {c}: no known rule"
                    ))
                })?;
                Some(Ident {
                    rule,
                    last: Some((c, 1)),
                    relearning: false,
                })
            }
            _ => None,
        };
        Ok(Conn {
            sock: Arc::new(sock),
            dst,
            ident,
        })
    }

    /// Sends a probe from `sock` to the unconnected socket (two GSO segments of `seg` bytes
    /// when `seg > 0`) and returns the IPv4 ID it left with.
    fn probe(&self, sock: &socket2::Socket, seg: u16) -> std::io::Result<u16> {
        let IpAddr::V4(me) = self.addr.ip() else {
            return Err(std::io::Error::other("IPv6 has no IP ID"));
        };
        let len = if seg > 0 {
            2 * usize::from(seg)
        } else {
            PROBE_LEN
        };
        self.counters.add(Counter::IpIdProbes, 1);
        let r = super::socket::send_probe(sock.as_raw_fd(), self.addr, len, seg).and_then(|()| {
            super::socket::sent_ipv4_ident(sock.as_raw_fd(), me, me, len, PROBE_WAIT)
        });
        super::socket::discard(self.plain.as_raw_fd());
        r
    }
}

/// A non-blocking UDP socket bound to `addr` (shared with the path's other sockets), with DF
/// set and a deep send buffer.
fn new_socket(addr: SocketAddr, mcast_if: u32) -> std::io::Result<socket2::Socket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let sock = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    // Every socket of the path sends from the same port: the ICRC covers it.
    sock.set_reuse_address(true)?;
    sock.set_nonblocking(true)?;
    let fd = sock.as_raw_fd();
    // DF on every packet: an unconnected socket then sends IP ID 0, and no packet is ever
    // fragmented (RoCE has no reassembly).
    match addr {
        SocketAddr::V4(_) => super::socket::set_int_opt(
            fd,
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_DO,
        )?,
        SocketAddr::V6(_) => super::socket::set_int_opt(
            fd,
            libc::IPPROTO_IPV6,
            libc::IPV6_MTU_DISCOVER,
            libc::IP_PMTUDISC_DO,
        )?,
    }
    // A burst of a whole send window must not find the buffer full. SO_SNDBUFFORCE passes
    // net.core.wmem_max when the process may (CAP_NET_ADMIN); otherwise the kernel caps the
    // plain request at that limit.
    if super::socket::set_int_opt(fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, 16 << 20).is_err() {
        let _ = sock.set_send_buffer_size(16 << 20);
    }
    // Multicast leaves by the device's own interface, never by the default route (which
    // would take a group on a loopback device off the host), one hop, and comes back to
    // this host's members.
    match addr {
        SocketAddr::V4(a) => sock.set_multicast_if_v4(a.ip())?,
        SocketAddr::V6(_) if mcast_if != 0 => sock.set_multicast_if_v6(mcast_if)?,
        SocketAddr::V6(_) => {}
    }
    sock.bind(&addr.into())?;
    Ok(sock)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn rules_are_told_apart_by_the_probes() {
        assert_eq!(IdRule::from_probes(10, 11, 12), Some(IdRule::PerSend));
        assert_eq!(IdRule::from_probes(10, 11, 13), Some(IdRule::SegsBefore));
        assert_eq!(IdRule::from_probes(10, 12, 13), Some(IdRule::SegsAfter));
        assert_eq!(IdRule::from_probes(65535, 0, 1), Some(IdRule::PerSend));
        assert_eq!(IdRule::from_probes(10, 30, 31), None);
        // Each rule predicts its own probes.
        for rule in [IdRule::PerSend, IdRule::SegsBefore, IdRule::SegsAfter] {
            let b = rule.next(100, 1, 2);
            let c = rule.next(b, 2, 1);
            assert_eq!(IdRule::from_probes(100, b, c), Some(rule));
        }
    }

    /// A path on 127.0.77.`last` that connects its destinations, with or without GSO,
    /// and a socket to send to beside it.
    fn connecting(last: u8, gso: bool) -> (TxPath, std::net::UdpSocket) {
        let ip = IpAddr::V4(Ipv4Addr::new(127, 0, 77, last));
        let options = TxOptions {
            connect: true,
            gso,
            gso_everywhere: false,
        };
        let tx = TxPath::new(Default::default(), ip, 0, options).unwrap();
        (tx, std::net::UdpSocket::bind((ip, 0)).unwrap())
    }

    /// Without GSO (`SOFTRDMA_NO_GSO`), two single probes are enough to connect.
    #[test]
    fn without_gso_a_destination_still_connects() {
        let (tx, sink) = connecting(66, false);
        assert!(tx.conn_settled(sink.local_addr().unwrap()).is_some());
        assert_eq!(tx.shared.counters.get(Counter::IpIdProbes), 2);
    }

    /// The whole mechanism against this machine's kernel: the IDs that a connected socket's
    /// packets leave with are the ones planned, single and GSO sends alike.
    #[test]
    fn planned_ids_match_what_the_kernel_sends() {
        let (tx, sink) = connecting(60, true);
        let dst = sink.local_addr().unwrap();
        // The first use hands the destination to the learner and sends unconnected.
        assert!(tx.conn(dst).is_none());
        let shared = tx
            .conn_settled(dst)
            .expect("a connected socket with a known counter");
        let mut c = shared.lock();
        for segs in [1u16, 3, 1, 2, 2, 1] {
            let plan = c.plan(&tx, [segs].into_iter()).unwrap();
            // Send it to the destination as a probe would, and read the ID back.
            let len = 8 * usize::from(segs);
            let seg = if segs > 1 { 8 } else { 0 };
            super::super::socket::send_probe(c.fd(), dst, len, seg).unwrap();
            let got = super::super::socket::sent_ipv4_ident(
                c.fd(),
                Ipv4Addr::new(127, 0, 77, 60),
                Ipv4Addr::new(127, 0, 77, 60),
                len,
                PROBE_WAIT,
            )
            .unwrap();
            assert_eq!(got, plan.ids()[0], "a send of {segs} segments");
            c.commit(&plan, 1, true);
        }
        // A failed send loses track: the next plan is refused (the unconnected socket then
        // serves) while the learner probes again, and after it the plans are right again.
        let plan = c.plan(&tx, [1].into_iter()).unwrap();
        c.commit(&plan, 0, false);
        let before = tx.shared.counters.get(Counter::IpIdProbes);
        assert!(c.plan(&tx, [1].into_iter()).is_none());
        drop(c);
        let deadline = std::time::Instant::now() + 4 * PROBE_WAIT;
        let plan = loop {
            if let Some(p) = shared.lock().plan(&tx, [1].into_iter()) {
                break p;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the learner never probed"
            );
            std::thread::yield_now();
        };
        let c = shared.lock();
        assert_eq!(tx.shared.counters.get(Counter::IpIdProbes), before + 1);
        super::super::socket::send_probe(c.fd(), dst, 8, 0).unwrap();
        let got = super::super::socket::sent_ipv4_ident(
            c.fd(),
            Ipv4Addr::new(127, 0, 77, 60),
            Ipv4Addr::new(127, 0, 77, 60),
            8,
            PROBE_WAIT,
        )
        .unwrap();
        assert_eq!(got, plan.ids()[0]);
    }
}
