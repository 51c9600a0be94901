//! Building a device: the driver stack beneath it from [`DeviceOptions`] (the UDP driver,
//! wrapped in the pcap writer and the fault injector when asked for), its part in sharing
//! ([`super::share`]) and the same-host path ([`super::local`]), the device itself
//! (`assemble`), its progress thread, and its end (`close`). A test rig is the same device
//! over a datapath the test gives, on a clock it moves, with no thread.
//!
//! May call: the datapath constructors, the sharing and same-host path's setup, the
//! progress thread ([`super::progress`]).
//!
//! Threads and locks: the opening thread; it makes the device's locks and takes none
//! (what sharing takes to attach is its own). `open` starts the progress thread.

use super::poller::UdpPace;
use super::progress::{self, SOCKET, SocketRef, WAKE};
use super::regions::MrTable;
use super::rx::RxState;
use super::{Clock, Device, events, handoff, local, res, share};
use crate::config::DeviceOptions;
use crate::counters::DeviceCounters;
use crate::datapath::Datapath;
use crate::datapath::batch::SendBatch;
use crate::datapath::faults::Faulty;
use crate::datapath::pcap::{Capture, Captured};
use crate::datapath::socket::RecvBatch;
use crate::datapath::tx::TxOptions;
use crate::datapath::udp::Udp;
use crate::error::{Error, Result};
use crate::sync::{Lock, Rank, RwLock};
use mio::{Interest, Poll, Waker};
use softrdma_proto::endpoint::timers::TimerQueue;
use softrdma_proto::endpoint::{QpTable, Receiver};
use softrdma_proto::{AsyncEvent, Mtu};
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// The next device's id (see `Device::id`).
static NEXT_DEVICE: AtomicU64 = AtomicU64::new(0);

impl Device {
    /// Opens the device `name` on `addr` (IPv6 scope `scope_id`): binds `addr:4791`, makes
    /// the sending path, and starts the progress thread, which runs until [`Device::close`].
    pub(crate) fn open(
        name: &str,
        addr: IpAddr,
        scope_id: u32,
        mtu: Mtu,
        opts: DeviceOptions,
    ) -> Result<(Arc<Device>, std::thread::JoinHandle<()>)> {
        let counters = Arc::new(DeviceCounters::default());
        let bind = |how| Udp::bind_port(addr, scope_id, opts.gso, how);
        let mrs = Arc::new(MrTable::new(opts.zero_copy));
        let local = (opts.share && opts.shm && opts.faults.is_none() && opts.pcap.is_none())
            .then(|| {
                let granted = mrs.granted.clone();
                local::Local::bind(addr, scope_id, opts.cma, granted, opts.route_lookup_delay)
            })
            .flatten();
        let ep = local.as_ref().map_or(0, |l| l.ep);
        let share = share::Share::attach(addr, scope_id, !opts.share, opts.steer, ep, &bind)?;
        let udp = Udp::open(
            share.rx.clone(),
            addr,
            scope_id,
            TxOptions {
                // A capture records every packet it sends with IP ID 0, which only the
                // unconnected socket sends.
                connect: opts.connected && opts.pcap.is_none(),
                gso: opts.gso,
                gso_everywhere: opts.gso_everywhere,
            },
            counters.clone(),
        )?;
        // The wrappers, innermost first: a capture records what the faults let out.
        let captured: Box<dyn Datapath> = match &opts.pcap {
            Some(p) => Box::new(Captured::new(udp, addr, Capture::create(p)?)),
            None => Box::new(udp),
        };
        if let Some(f) = &opts.faults {
            // The device applies the per-packet faults; a link's rate and a partition are
            // the simulator's, and silently ignoring them would mislead.
            let sim_only = [
                (f.rate.is_some(), "rate"),
                (f.partition_at.is_some(), "partition_at"),
            ];
            if let Some((_, what)) = sim_only.iter().find(|(set, _)| *set) {
                return Err(Error::Faults {
                    spec: format!("{f:?}"),
                    source: softrdma_proto::faults::FaultsError::SimulatorOnly(what),
                });
            }
        }
        let datapath: Box<dyn Datapath> = match opts.faults {
            Some(f) => Box::new(Faulty::new(captured, f)),
            None => captured,
        };
        let (dev, poll) = Self::assemble(
            name,
            addr,
            scope_id,
            mtu,
            mrs,
            datapath,
            Some(share),
            local,
            Clock::system(),
            counters,
        )?;
        if let Some(s) = &dev.share {
            s.register(poll.registry())
                .map_err(Error::io("ibv_open_device: poll"))?;
        }
        if let Some(l) = &dev.local {
            l.start(poll.registry(), dev.port())
                .map_err(Error::io("ibv_open_device: poll"))?;
        }
        let d = dev.clone();
        let thread = std::thread::Builder::new()
            .name(format!("softrdma-{name}"))
            .spawn(move || progress::progress(d, poll, true))
            .map_err(Error::io("ibv_open_device: progress thread"))?;
        Ok((dev, thread))
    }

    /// The device itself, over `datapath`, with its
    /// progress thread's poll (the thread is the caller's to start).
    #[allow(clippy::too_many_arguments)]
    fn assemble(
        name: &str,
        addr: IpAddr,
        scope_id: u32,
        mtu: Mtu,
        mrs: Arc<MrTable>,
        datapath: Box<dyn Datapath>,
        share: Option<share::Share>,
        local: Option<local::Local>,
        clock: Clock,
        counters: Arc<DeviceCounters>,
    ) -> Result<(Arc<Device>, Poll)> {
        let holds = datapath.holds();
        let poll = Poll::new().map_err(Error::io("ibv_open_device: poll"))?;
        if let Some(fd) = datapath.readable_fd() {
            poll.registry()
                .register(&mut SocketRef(fd), SOCKET, Interest::READABLE)
                .map_err(Error::io("ibv_open_device: poll"))?;
        }
        let waker =
            Waker::new(poll.registry(), WAKE).map_err(Error::io("ibv_open_device: poll"))?;
        let registry = poll
            .registry()
            .try_clone()
            .map_err(Error::io("ibv_open_device: poll"))?;
        let dev = Arc::new(Device {
            name: name.to_owned(),
            addr,
            scope_id,
            mtu,
            datapath,
            holds,
            share,
            local,
            id: NEXT_DEVICE.fetch_add(1, Ordering::Relaxed),
            mrs,
            qps: RwLock::new(Rank::QpTable, QpTable::default()),
            res: {
                // Published once at open too: `res show` counts the processes.
                let r = res::Resources::default();
                r.changed();
                r
            },
            paths: Lock::new(Rank::Paths, std::collections::HashMap::new()),
            qps_gen: AtomicU64::new(0),
            next_pd: AtomicU32::new(1),
            waker,
            clock,
            counters,
            events: {
                let e = Arc::new(events::AsyncEvents::new());
                e.push([AsyncEvent::PortActive(1)]);
                e
            },
            shutdown: AtomicBool::new(false),
            gate: handoff::WakeGate::new(),
            sweeping: Lock::new(Rank::Sweeping, ()),
            timers: Lock::new(Rank::Timers, TimerQueue::default()),
            #[cfg(test)]
            progress_paused: AtomicBool::new(false),
            #[cfg(test)]
            timer_visits: AtomicU64::new(0),
            app_polls: AtomicU64::new(0),
            app_released: AtomicU64::new(0),
            app_sends: AtomicU64::new(0),
            deferred_at: AtomicU64::new(u64::MAX),
            retired: Lock::new(Rank::Retired, softrdma_proto::QpCounters::default()),
            rx: Lock::new(
                Rank::Rx,
                RxState {
                    rx: Receiver::default(),
                    batch: RecvBatch::default(),
                    want: 1,
                    group_buf: Vec::new(),
                    udp: UdpPace::new(),
                    acks: Vec::new(),
                },
            ),
            deferred: Lock::new(Rank::Deferred, SendBatch::default()),
            groups: Lock::new(Rank::Groups, std::collections::HashMap::new()),
            grouped: AtomicBool::new(false),
            awaiting: AtomicUsize::new(0),
            requesting: AtomicUsize::new(0),
            idle_poller: AtomicBool::new(false),
            inline_consumers: AtomicBool::new(false),
            registry,
        });
        Ok((dev, poll))
    }

    /// A device over `datapath` on a clock the test moves, with no progress thread: the
    /// test's own calls (posts, polls) do all the work, so what happens is decided by the
    /// test alone, with no sockets or sleeps.
    #[cfg(test)]
    pub(crate) fn rig(
        name: &str,
        addr: IpAddr,
        datapath: Box<dyn Datapath>,
        clock: Arc<AtomicU64>,
    ) -> Arc<Device> {
        let counters = Arc::new(DeviceCounters::default());
        let (dev, _poll) = Self::assemble(
            name,
            addr,
            0,
            Mtu::M1024,
            Arc::new(MrTable::new(false)),
            datapath,
            None,
            None,
            Clock::Manual(clock),
            counters,
        )
        .expect("a rig needs no socket");
        dev
    }

    /// Stops the progress thread, which sends what is still held back first.
    pub(crate) fn close(&self) {
        if let Some(l) = &self.local {
            l.bye();
        }
        self.shutdown.store(true, Ordering::Release);
        self.wake();
    }
}
