//! An open device (`struct ibv_context`): opening it (the sockets, the progress thread),
//! its attributes, and the objects made from it.

use crate::config::{DeviceAttr, DeviceOptions, PortAttr, device_attr, port_attr};
use crate::counters::DeviceCounters;
use crate::device::Device;
use crate::error::{Error, Result};
use softrdma_proto::{AsyncEvent, Mtu};
use std::net::IpAddr;
use std::sync::Arc;

struct ContextInner {
    dev: Arc<Device>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for ContextInner {
    fn drop(&mut self) {
        self.dev.close();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        crate::device::stats::retire(&self.dev.stats_key());
        let _ = std::fs::remove_file(crate::device::res::path(&self.dev.stats_key()));
    }
}

/// An open device (`struct ibv_context`). Cloning gives another handle; the device closes
/// when the last handle, and every object made from it, is gone.
#[derive(Clone)]
pub struct Context {
    inner: Arc<ContextInner>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("name", &self.inner.dev.name)
            .field("addr", &self.inner.dev.addr)
            .finish()
    }
}

impl Context {
    /// The IP address a packet to (or from) `gid` carries: the device's own address for
    /// any of its own GIDs, else [`crate::config::gid_addr`] (a softrdma device's
    /// link-local GID is reached at its IPv4 address, as rxe's is at its IPv6 one).
    pub fn gid_addr(&self, gid: std::net::Ipv6Addr) -> IpAddr {
        if self.gids().contains(&gid) {
            return self.addr();
        }
        crate::config::gid_addr(gid)
    }

    /// Opens the device named `name` bound to `addr`, with path MTU `mtu`.
    pub fn open_addr(name: &str, addr: IpAddr, mtu: Mtu) -> Result<Self> {
        Self::open_with(name, addr, mtu, DeviceOptions::from_env()?)
    }

    /// Opens a device on `addr` with explicit fault injection and capture settings (what
    /// `SOFTRDMA_FAULTS` and `SOFTRDMA_PCAP` set for [`Context::open`]).
    pub fn open_with(name: &str, addr: IpAddr, mtu: Mtu, opts: DeviceOptions) -> Result<Self> {
        // A link-local IPv6 address needs the scope of the interface that has it.
        let scope_id = match addr {
            IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80 => {
                crate::config::resolve(&crate::config::DeviceSpec {
                    name: name.to_owned(),
                    binding: crate::config::Binding::Addr(addr),
                })
                .map(|d| d.scope_id)
                .unwrap_or(0)
            }
            _ => 0,
        };
        let (dev, thread) = Device::open(name, addr, scope_id, mtu, opts)?;
        Ok(Self {
            inner: Arc::new(ContextInner {
                dev,
                thread: Some(thread),
            }),
        })
    }

    /// A device over `datapath` on a clock the test
    /// moves, with no progress thread (see `Device::rig`).
    #[cfg(test)]
    pub(crate) fn rig(
        name: &str,
        addr: IpAddr,
        datapath: Box<dyn crate::datapath::Datapath>,
        clock: Arc<std::sync::atomic::AtomicU64>,
    ) -> Self {
        Self {
            inner: Arc::new(ContextInner {
                dev: Device::rig(name, addr, datapath, clock),
                thread: None,
            }),
        }
    }

    /// Opens the default device: [`Context::open`] with no name.
    pub fn open_default() -> Result<Self> {
        Self::open(None)
    }

    pub(crate) fn dev(&self) -> &Arc<Device> {
        &self.inner.dev
    }

    /// How many handles of this context there are (the application's, and those its PDs,
    /// CQs, QPs and the CM hold).
    pub(crate) fn handles(&self) -> usize {
        Arc::strong_count(&self.inner)
    }

    /// The device name.
    pub fn name(&self) -> &str {
        &self.inner.dev.name
    }

    /// The address the device is bound to.
    pub fn addr(&self) -> IpAddr {
        self.inner.dev.addr
    }

    /// How this process holds the device it shares with this user's other processes:
    /// whether it reads the port itself (it owns the device, or has it alone), and how many
    /// other processes it forwards datagrams to.
    pub fn sharing(&self) -> (bool, usize) {
        self.inner.dev.sharing()
    }

    /// The active MTU of port 1.
    pub fn active_mtu(&self) -> Mtu {
        self.inner.dev.mtu
    }

    /// Device limits.
    pub fn query_device(&self) -> DeviceAttr {
        device_attr(self.addr())
    }

    /// A GUID derived from the address, as rxe derives it from the MAC.
    pub fn node_guid(&self) -> u64 {
        crate::config::node_guid(self.addr())
    }

    /// Port 1's attributes.
    pub fn query_port(&self) -> PortAttr {
        port_attr(self.active_mtu())
    }

    /// The GID table, in rxe's order (see [`crate::config::gid_table`]).
    pub fn gids(&self) -> Vec<std::net::Ipv6Addr> {
        crate::config::gid_table(self.addr())
    }

    /// Opens the device named `name`, or the first configured device (`ibv_open_device`).
    /// With no config file that is `softrdma0` on `$SOFTRDMA_ADDR` or 127.0.0.1.
    pub fn open(name: Option<&str>) -> Result<Self> {
        let devs = crate::config::devices()?;
        let d = match name {
            Some(n) => devs.iter().find(|d| d.name == n).ok_or_else(|| {
                if crate::kernel::devices().iter().any(|k| k.name == n) {
                    Error::KernelDevice {
                        verb: "ibv_open_device",
                        device: n.to_owned(),
                    }
                } else {
                    Error::NoDevice(n.to_owned())
                }
            })?,
            None => devs
                .first()
                .ok_or_else(|| Error::NoDevice("(none configured)".into()))?,
        };
        Self::open_addr(&d.name, d.addr, d.active_mtu)
    }

    /// Sends now the ACKs the device holds back to ride with a later send: for a program
    /// about to end its connections out of band, so that each peer learns that its last
    /// messages landed before it learns of the end.
    pub fn flush_acks(&self) {
        self.inner.dev.flush_batch(true);
    }

    /// The next asynchronous event, if any (`ibv_get_async_event`, non-blocking).
    pub fn poll_async_event(&self) -> Option<AsyncEvent> {
        self.inner.dev.events.pop()
    }

    /// A descriptor that is readable while an asynchronous event waits (the context's
    /// `async_fd`), if the process had one to spare when the device opened.
    pub fn async_fd(&self) -> Option<std::os::fd::RawFd> {
        self.inner.dev.events.fd()
    }

    /// A queue of its own that receives every asynchronous event of the device from now
    /// on, with a descriptor of its own: what each `ibv_open_device` of a C program gets.
    /// It starts with the port's PORT_ACTIVE, as a newly opened device's queue does.
    pub fn subscribe_async_events(&self) -> Arc<crate::device::events::AsyncEventQueue> {
        self.inner
            .dev
            .events
            .subscribe(&[AsyncEvent::PortActive(1)])
    }

    /// The device's own counters (packets it could not hand to a QP, and so on).
    pub fn counters(&self) -> &DeviceCounters {
        &self.inner.dev.counters
    }

    /// Every counter, named as rxe's `hw_counters` (QP counters summed over the device).
    pub fn hw_counters(&self) -> Vec<(&'static str, u64)> {
        self.inner.dev.hw_counters()
    }
}

#[cfg(test)]
mod tests {
    use crate::*;
    use std::net::{IpAddr, Ipv4Addr};
    use std::sync::atomic::Ordering;
    use std::time::{Duration, Instant};

    /// A thread that blocks for a CQ event receives the datagram it waits for itself: with
    /// the receiving device's progress thread paused, A's SEND still reaches B's QP, and
    /// B's `get_cq_event` returns its CQ (before, only the progress thread read the socket
    /// while the application slept, and its wake-up came on top of the application's).
    #[test]
    fn a_thread_blocked_for_a_cq_event_receives_the_datagram_itself() {
        let open = |last: u8| {
            let addr = IpAddr::V4(Ipv4Addr::new(127, 0, 78, last));
            let ctx = Context::open_with(&format!("e{last}"), addr, Mtu::M1024, Default::default())
                .expect("device opens");
            let pd = ctx.alloc_pd();
            let mr = pd.register_zeroed(4096, AccessFlags::LOCAL_WRITE).unwrap();
            (ctx, pd, mr)
        };
        let (a, b) = (open(5), open(6));
        let chan = b.0.create_comp_channel().unwrap();
        let bcq = b.0.create_cq(16, Some(&chan)).unwrap();
        let acq = a.0.create_cq(16, None).unwrap();
        let aqp = a.1.create_qp(QpInitAttr::new(QpType::Rc, &acq)).unwrap();
        let bqp = b.1.create_qp(QpInitAttr::new(QpType::Rc, &bcq)).unwrap();
        let (pa, pb) = (Psn::new(1), Psn::new(2));
        let peer = |ctx: &Context, qp: &QueuePair, psn| Peer {
            addr: ctx.addr(),
            qpn: qp.qp_num(),
            psn,
        };
        aqp.connect(pa, &peer(&b.0, &bqp, pb), &ConnectAttr::default())
            .unwrap();
        bqp.connect(pb, &peer(&a.0, &aqp, pa), &ConnectAttr::default())
            .unwrap();
        bqp.post_recv(RecvWr {
            wr_id: 7,
            sg_list: softrdma_proto::sg![b.2.sge(0, 64)],
        })
        .unwrap();
        bcq.req_notify(false).unwrap();
        b.0.dev().progress_paused.store(true, Ordering::Relaxed);
        aqp.post_send(SendWr {
            wr_id: 1,
            op: SendOp::Send,
            payload: Payload::Inline(vec![5; 16]),
            flags: SendFlags::SIGNALED | SendFlags::INLINE,
            ud: None,
        })
        .unwrap();
        // Bounds a failure only: the event comes as soon as the datagram is there.
        let got = chan.get_cq_event(Some(Duration::from_secs(10))).unwrap();
        assert!(got.is_some(), "no CQ event with B's progress thread paused");
        let wc = bcq.poll(1);
        assert_eq!(wc.len(), 1);
        assert_eq!((wc[0].wr_id, wc[0].status), (7, WcStatus::Success));
        b.0.dev().progress_paused.store(false, Ordering::Relaxed);
    }

    /// A busy poller runs the timers itself: with both progress threads starved and every
    /// packet held back by the fault injector, a WRITE still completes, because the polls
    /// send the held packets when they fall due. (The progress thread of a process whose
    /// pollers spin on every core waits milliseconds for a CPU; before pollers ran timers,
    /// each held packet, probe and retransmission waited with it.)
    #[test]
    fn busy_pollers_run_the_timers_of_a_starved_progress_thread() {
        let faults = DeviceOptions {
            faults: Some(crate::LinkFaults::parse("reorder=1").unwrap()),
            ..Default::default()
        };
        let open = |last: u8| {
            let addr = IpAddr::V4(Ipv4Addr::new(127, 0, 78, last));
            let ctx = Context::open_with(&format!("u{last}"), addr, Mtu::M1024, faults.clone())
                .expect("device opens");
            ctx.dev().progress_paused.store(true, Ordering::Relaxed);
            let pd = ctx.alloc_pd();
            let cq = ctx.create_cq(64, None).unwrap();
            let qp = pd.create_qp(QpInitAttr::new(QpType::Rc, &cq)).unwrap();
            let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
            let mr = pd.register_zeroed(64 << 10, access).unwrap();
            (ctx, pd, cq, qp, mr)
        };
        let a = open(1);
        let b = open(2);
        let (pa, pb) = (Psn::new(7), Psn::new(0xFFFFF0));
        let peer = |e: &(
            Context,
            ProtectionDomain,
            CompletionQueue,
            QueuePair,
            MemoryRegion,
        ),
                    psn| Peer {
            addr: e.0.addr(),
            qpn: e.3.qp_num(),
            psn,
        };
        a.3.connect(pa, &peer(&b, pb), &ConnectAttr::default())
            .unwrap();
        b.3.connect(pb, &peer(&a, pa), &ConnectAttr::default())
            .unwrap();
        let data: Vec<u8> = (0..40_000u32).map(|i| (i * 7) as u8).collect();
        a.4.write(0, &data).unwrap();
        a.3.post_send(SendWr {
            wr_id: 1,
            op: SendOp::Write {
                remote_addr: b.4.addr(),
                rkey: b.4.rkey(),
            },
            payload: Payload::Sges(softrdma_proto::sg![a.4.sge(0, data.len() as u32)]),
            flags: SendFlags::SIGNALED,
            ud: None,
        })
        .unwrap();
        // Bounds a hang only: the WRITE takes milliseconds.
        let deadline = Instant::now() + Duration::from_secs(20);
        let wc = loop {
            if let Some(wc) = a.2.poll(1).pop() {
                break wc;
            }
            assert!(b.2.poll(1).is_empty());
            assert!(Instant::now() < deadline, "the WRITE never completed");
        };
        assert_eq!(wc.status, WcStatus::Success);
        assert_eq!(b.4.to_vec()[..data.len()], data[..]);
        assert!(a.3.counters().sent_packets >= 40);
    }

    /// A thread that sends on two devices keeps a batch for each: what it queued for one is
    /// not in the other's batch, and so can never leave through the other's sockets.
    #[test]
    fn each_device_has_its_own_send_batch_on_a_thread() {
        let open = |last: u8| {
            let addr = IpAddr::V4(Ipv4Addr::new(127, 0, 78, last));
            Context::open_with(
                &format!("b{last}"),
                addr,
                Mtu::M1024,
                DeviceOptions::default(),
            )
            .expect("device opens")
        };
        let (a, b) = (open(3), open(4));
        let dst = std::net::SocketAddr::new(b.addr(), 4791);
        a.dev().with_batch(|q| q.push(&[0u8; 40], dst, 0));
        assert!(b.dev().with_batch(|q| q.is_empty()));
        assert!(!a.dev().with_batch(|q| q.is_empty()));
        a.dev().flush_batch(true);
        assert!(a.dev().with_batch(|q| q.is_empty()));
    }

    /// A peer that sends and closes at once leaves its last packets in its ring: they
    /// are delivered, not dropped with the ring when its bye and hang-up are seen. The
    /// receiver's progress thread is held until the sender is gone, so that it finds the
    /// ring, the bye and the hang-up in one look, which is when the old code dropped
    /// all 100 messages.
    #[test]
    fn a_closing_peers_last_packets_are_delivered_from_its_ring() {
        let addr = IpAddr::V4(Ipv4Addr::new(127, 0, 78, 30));
        let open = |name: &str| {
            Context::open_with(name, addr, Mtu::M1024, DeviceOptions::default())
                .expect("device opens")
        };
        let owner = open("o30");
        let end = |ctx: &Context| {
            let pd = ctx.alloc_pd();
            let cq = ctx.create_cq(256, None).unwrap();
            let qp = pd.create_qp(QpInitAttr::new(QpType::Uc, &cq)).unwrap();
            let mr = pd
                .register_zeroed(64 << 10, AccessFlags::LOCAL_WRITE)
                .unwrap();
            (pd, cq, qp, mr)
        };
        let (a, b) = (open("a30"), open("b30"));
        let (ea, eb) = (end(&a), end(&b));
        b.dev().progress_paused.store(true, Ordering::Relaxed);
        let peer = |qp: &QueuePair| Peer {
            addr,
            qpn: qp.qp_num(),
            psn: Psn::new(1),
        };
        ea.2.connect(Psn::new(1), &peer(&eb.2), &ConnectAttr::default())
            .unwrap();
        eb.2.connect(Psn::new(1), &peer(&ea.2), &ConnectAttr::default())
            .unwrap();
        const N: u64 = 100;
        for i in 0..N {
            eb.2.post_recv(RecvWr {
                wr_id: i,
                sg_list: softrdma_proto::sg![eb.3.sge(i * 256, 256)],
            })
            .unwrap();
        }
        for i in 0..N {
            ea.2.post_send(SendWr {
                wr_id: i,
                op: SendOp::Send,
                payload: Payload::Sges(softrdma_proto::sg![ea.3.sge(0, 64)]),
                flags: SendFlags::SIGNALED,
                ud: None,
            })
            .unwrap();
        }
        // Bounds a hang only: a UC send completes as it leaves.
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut sent = 0;
        while sent < N {
            sent += ea.1.poll(16).len() as u64;
            assert!(Instant::now() < deadline, "{sent} sends completed");
        }
        drop(ea);
        drop(a);
        b.dev().progress_paused.store(false, Ordering::Relaxed);
        let mut got = 0;
        let deadline = Instant::now() + Duration::from_secs(10);
        while got < N && Instant::now() < deadline {
            for wc in eb.1.poll(16) {
                assert_eq!(wc.status, WcStatus::Success);
                got += 1;
            }
        }
        assert_eq!(got, N, "every message sent before the close arrives");
        let forwarded = owner
            .hw_counters()
            .into_iter()
            .find(|(n, _)| *n == "forwarded_pkts")
            .map(|c| c.1);
        assert_eq!(forwarded, Some(0), "the messages went through the ring");
    }
}
