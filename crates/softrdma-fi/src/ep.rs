//! The endpoint (`fid_ep`), reliable-datagram (`FI_EP_RDM`) or connected (`FI_EP_MSG`):
//! its bindings (an AV, a CQ for each direction, with or without
//! `FI_SELECTIVE_COMPLETION`, counters, an EQ), its enabling, which opens
//! the fabric layer's [`Endpoint`] or [`MsgEndpoint`] on the domain's device, its
//! control, name and cancel, and a connected endpoint's `fi_connect`, `fi_accept`,
//! `fi_shutdown` and `fi_getpeer`. `endpoint` opens it; its data operations are in
//! `xfer` and `rma`.
//!
//! Threads and locks: the bindings are behind `FiEpSetup`, taken alone; once enabled, the
//! fabric layer's endpoint is read without a lock here (it has its own).

use crate::abi::*;
use crate::av::{Av, copy_name};
use crate::cntr::Cntr;
use crate::cq::Cq;
use crate::domain::DomainDevice;
use crate::entry::{self, Errno, enosys, guard, guard_int, object};
use crate::eq::Eq;
use softrdma::sync::{Lock, Rank};
use softrdma_fabric::{
    AddressVector, CompletionQueue, ConnRequest, CountOf, Counter, DgramEndpoint, Endpoint,
    EventQueue, MsgEndpoint,
};
use std::ffi::{c_int, c_void};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// A CQ binding: the queue, and whether only operations with `FI_COMPLETION` report.
#[derive(Clone)]
struct Binding {
    cq: Arc<CompletionQueue>,
    selective: bool,
}

/// What is bound before the endpoint is enabled.
#[derive(Default)]
struct Setup {
    av: Option<Arc<AddressVector>>,
    tx: Option<Binding>,
    rx: Option<Binding>,
    /// Counters, with what each counts.
    cntrs: Vec<(Arc<Counter>, CountOf)>,
    /// A connected endpoint's EQ.
    eq: Option<Arc<EventQueue>>,
    /// The request a connected endpoint opened from an `FI_CONNREQ` info accepts.
    req: Option<ConnRequest>,
}

/// An endpoint.
#[repr(C)]
pub struct Ep {
    fid: fid_ep,
    setup: Lock<Setup>,
    live: OnceLock<Endpoint>,
    /// A connected endpoint, once enabled.
    msg: OnceLock<MsgEndpoint>,
    /// A datagram endpoint, once enabled.
    dgram: OnceLock<DgramEndpoint>,
    /// `FI_EP_RDM` or `FI_EP_MSG`.
    pub ep_type: u32,
    /// Where it listens: the domain's device, the port the info asked for.
    dev: Arc<DomainDevice>,
    port: u16,
    /// Its capabilities (from its info).
    pub caps: u64,
    /// The default flags of sends and receives (`FI_SETOPSFLAG` changes them).
    tx_flags: AtomicU64,
    rx_flags: AtomicU64,
    /// Whether its sends report only with `FI_COMPLETION` (set at enable).
    tx_selective: OnceLock<bool>,
    /// The largest inject.
    pub inject_size: usize,
    /// The space under which a multi-receive buffer is released (`FI_OPT_MIN_MULTI_RECV`).
    min_multi_recv: AtomicUsize,
}

/// `FI_OPT_MIN_MULTI_RECV` until the application sets it: room for an eager message.
const MIN_MULTI_RECV: usize = softrdma_fabric::EAGER_MAX;

/// An enabled endpoint of any type.
pub enum Live<'a> {
    /// Reliable datagram.
    Rdm(&'a Endpoint),
    /// Connected.
    Msg(&'a MsgEndpoint),
    /// Datagram.
    Dgram(&'a DgramEndpoint),
}

impl Ep {
    /// The enabled endpoint, or `-FI_EOPBADSTATE`.
    pub fn active(&self) -> Result<Live<'_>, Errno> {
        match (self.live.get(), self.msg.get(), self.dgram.get()) {
            (Some(r), _, _) => Ok(Live::Rdm(r)),
            (_, Some(m), _) => Ok(Live::Msg(m)),
            (_, _, Some(d)) => Ok(Live::Dgram(d)),
            _ => Err(FI_EOPBADSTATE),
        }
    }

    /// Whether a send with `flags` reports a completion.
    pub fn reports(&self, flags: u64) -> bool {
        !self.tx_selective.get().copied().unwrap_or(false) || flags & FI_COMPLETION != 0
    }

    /// The default send flags.
    pub fn tx_flags(&self) -> u64 {
        self.tx_flags.load(Ordering::Relaxed)
    }

    /// The space under which a multi-receive buffer is released.
    pub fn min_multi_recv(&self) -> usize {
        self.min_multi_recv.load(Ordering::Relaxed)
    }
}

object!(Ep, FI_CLASS_EP, EP_FI_OPS, bind: ep_bind, control: ep_control);

static EP_OPS: Ops<fi_ops_ep> = Ops(fi_ops_ep {
    size: size_of::<fi_ops_ep>(),
    cancel: ep_cancel as Slot,
    getopt: ep_getopt as Slot,
    setopt: ep_setopt as Slot,
    tx_ctx: enosys as Slot,
    rx_ctx: enosys as Slot,
    rx_size_left: enosys as Slot,
    tx_size_left: enosys as Slot,
});

static CM_OPS: Ops<fi_ops_cm> = Ops(fi_ops_cm {
    size: size_of::<fi_ops_cm>(),
    setname: enosys as Slot,
    getname: ep_getname as Slot,
    getpeer: ep_getpeer as Slot,
    connect: ep_connect as Slot,
    listen: enosys as Slot,
    accept: ep_accept as Slot,
    reject: enosys as Slot,
    shutdown: ep_shutdown as Slot,
    join: enosys as Slot,
});

static COLLECTIVE_OPS: Ops<fi_ops_collective> = Ops(fi_ops_collective {
    size: size_of::<fi_ops_collective>(),
    slots: [enosys as Slot; 11],
});

/// An endpoint's data operations' tables.
pub struct DataOps {
    /// Messages.
    pub msg: *const fi_ops_xfer,
    /// Tagged messages.
    pub tagged: *const fi_ops_xfer,
    /// RMA.
    pub rma: *const fi_ops_xfer,
    /// Atomics.
    pub atomic: *const fi_ops_atomic,
}

impl Ep {
    /// An endpoint of `ep_type` on `dev` and `port` with `caps`, its default flags and
    /// inject size, its data operations `ops` (the caller's: they need this type); a
    /// connected one opened for a connection request `req`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        context: *mut c_void,
        ops: DataOps,
        (ep_type, req): (u32, Option<ConnRequest>),
        (dev, port): (Arc<DomainDevice>, u16),
        caps: u64,
        (tx_flags, rx_flags): (u64, u64),
        inject_size: usize,
    ) -> Self {
        Ep {
            fid: fid_ep {
                fid: fid {
                    fclass: FI_CLASS_EP,
                    context,
                    ops: &EP_FI_OPS.0,
                },
                ops: &EP_OPS.0,
                cm: &CM_OPS.0,
                msg: ops.msg,
                rma: ops.rma,
                tagged: ops.tagged,
                atomic: ops.atomic,
                collective: &COLLECTIVE_OPS.0,
            },
            setup: Lock::new(
                Rank::FiEpSetup,
                Setup {
                    req,
                    ..Setup::default()
                },
            ),
            live: OnceLock::new(),
            msg: OnceLock::new(),
            dgram: OnceLock::new(),
            ep_type,
            dev,
            port,
            caps,
            tx_flags: AtomicU64::new(tx_flags),
            rx_flags: AtomicU64::new(rx_flags),
            tx_selective: OnceLock::new(),
            inject_size,
            min_multi_recv: AtomicUsize::new(MIN_MULTI_RECV),
        }
    }
}

unsafe extern "C" fn ep_bind(f: *mut fid, bfid: *mut fid, flags: u64) -> c_int {
    guard_int(|| {
        let e = entry::get::<Ep>(f)?;
        if e.active().is_ok() {
            return Err(FI_EOPBADSTATE);
        }
        // The bound object is looked up first: the registry's lock is never taken under
        // the bindings'.
        match entry::class_of(bfid) {
            Some(FI_CLASS_AV) => {
                let av = entry::get::<Av>(bfid)?.av.clone();
                e.setup.lock().av = Some(av);
            }
            Some(FI_CLASS_CQ) => {
                let cq = entry::get::<Cq>(bfid)?.cq.clone();
                if flags & !(FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION) != 0 {
                    return Err(FI_EBADFLAGS);
                }
                let b = Binding {
                    cq,
                    selective: flags & FI_SELECTIVE_COMPLETION != 0,
                };
                let mut s = e.setup.lock();
                if flags & FI_TRANSMIT != 0 {
                    s.tx = Some(b.clone());
                }
                if flags & FI_RECV != 0 {
                    s.rx = Some(b);
                }
            }
            Some(FI_CLASS_CNTR) => {
                let cntr = entry::get::<Cntr>(bfid)?.cntr.clone();
                // A peer's RMA into this endpoint's regions is not an event here
                // (no FI_RMA_EVENT).
                if flags & (FI_REMOTE_READ | FI_REMOTE_WRITE) != 0 {
                    return Err(FI_EOPNOTSUPP);
                }
                if flags & !(FI_SEND | FI_RECV | FI_READ | FI_WRITE) != 0 || flags == 0 {
                    return Err(FI_EBADFLAGS);
                }
                let of = CountOf {
                    send: flags & FI_SEND != 0,
                    recv: flags & FI_RECV != 0,
                    read: flags & FI_READ != 0,
                    write: flags & FI_WRITE != 0,
                };
                e.setup.lock().cntrs.push((cntr, of));
            }
            // An RDM endpoint reports no connection events: an EQ may be bound, and
            // stays silent.
            Some(FI_CLASS_EQ) => {
                let cm = entry::get::<Eq>(bfid)?.cm.clone();
                e.setup.lock().eq = Some(cm);
            }
            Some(_) => return Err(FI_ENOSYS),
            None => return Err(FI_EINVAL),
        }
        Ok(0)
    })
}

unsafe extern "C" fn ep_control(f: *mut fid, command: c_int, arg: *mut c_void) -> c_int {
    guard_int(|| {
        let e = entry::get::<Ep>(f)?;
        match command {
            FI_ENABLE => enable(e).map(|()| 0),
            FI_GETOPSFLAG | FI_SETOPSFLAG => {
                if arg.is_null() {
                    return Err(FI_EINVAL);
                }
                // SAFETY: the caller's flag word.
                let word = unsafe { &mut *arg.cast::<u64>() };
                let which = match *word & (FI_TRANSMIT | FI_RECV) {
                    FI_TRANSMIT => &e.tx_flags,
                    FI_RECV => &e.rx_flags,
                    _ => return Err(FI_EINVAL),
                };
                if command == FI_GETOPSFLAG {
                    *word = which.load(Ordering::Relaxed);
                } else {
                    which.store(*word & !(FI_TRANSMIT | FI_RECV), Ordering::Relaxed);
                }
                Ok(0)
            }
            _ => Err(FI_ENOSYS),
        }
    })
}

/// Opens the fabric layer's endpoint with what is bound.
fn enable(e: &Ep) -> Result<(), Errno> {
    if e.active().is_ok() {
        return Ok(());
    }
    let s = e.setup.lock();
    let av = if e.ep_type == FI_EP_MSG {
        s.eq.as_ref().ok_or(FI_ENOEQ)?;
        None
    } else {
        Some(s.av.clone().ok_or(FI_ENOAV)?)
    };
    let (tx, rx) = match (s.tx.clone(), s.rx.clone()) {
        (None, None) => return Err(FI_ENOCQ),
        // A direction with no CQ reports into one nobody reads (an endpoint that only
        // sends, or only receives, may leave the other unbound).
        (t, r) => (
            t.unwrap_or_else(|| Binding {
                cq: CompletionQueue::new(),
                selective: true,
            }),
            r.unwrap_or_else(|| Binding {
                cq: CompletionQueue::new(),
                selective: true,
            }),
        ),
    };
    let cntrs = s.cntrs.clone();
    let eq = s.eq.clone();
    drop(s);
    let dom = e.dev.open()?;
    let _ = e.tx_selective.set(tx.selective);
    let Some(av) = av else {
        // A connected endpoint: its connection's events go to its EQ, under its fid.
        let (eq, tag) = (eq.ok_or(FI_ENOEQ)?, e as *const Ep as u64);
        let m = MsgEndpoint::open(&dom, eq, tag, tx.cq, rx.cq).map_err(|err| err.errno())?;
        for (c, of) in &cntrs {
            m.bind_counter(c, *of);
        }
        let _ = e.msg.set(m);
        return Ok(());
    };
    if e.ep_type == FI_EP_DGRAM {
        let d = DgramEndpoint::open(&dom, e.port, av, tx.cq, rx.cq).map_err(|err| err.errno())?;
        for (c, of) in &cntrs {
            d.bind_counter(c, *of);
        }
        let _ = e.dgram.set(d);
        return Ok(());
    }
    let ep = Endpoint::open_on(&dom, e.port, av, tx.cq, rx.cq).map_err(|err| err.errno())?;
    for (c, of) in &cntrs {
        ep.bind_counter(c, *of);
    }
    let _ = e.live.set(ep);
    Ok(())
}

unsafe extern "C" fn ep_getname(f: *mut fid, addr: *mut c_void, addrlen: *mut usize) -> c_int {
    guard_int(|| {
        let e = entry::get::<Ep>(f)?;
        if addrlen.is_null() {
            return Err(FI_EINVAL);
        }
        let name = match e.active() {
            Ok(Live::Rdm(r)) => Some(r.addr()),
            Ok(Live::Msg(m)) => m.addr(),
            Ok(Live::Dgram(d)) => Some(d.addr()),
            Err(_) => None,
        };
        copy_name(
            name.unwrap_or(SocketAddr::new(e.dev.info.ip, e.port)),
            addr,
            addrlen,
        )
    })
}

unsafe extern "C" fn ep_cancel(f: *mut fid, context: *mut c_void) -> isize {
    guard(|| {
        let e = entry::get::<Ep>(f)?;
        // A connected endpoint's receives are the device's: posted, they stay.
        if let Live::Rdm(r) = e.active()?
            && r.cancel(context as u64)
        {
            Ok(0)
        } else {
            Err(libc::ENOENT)
        }
    })
}

unsafe extern "C" fn ep_getopt(
    f: *mut fid,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: *mut usize,
) -> c_int {
    guard_int(|| {
        let e = entry::get::<Ep>(f)?;
        if e.ep_type == FI_EP_RDM && level == FI_OPT_ENDPOINT && optname == FI_OPT_MIN_MULTI_RECV {
            return entry::put_size(optval, optlen, e.min_multi_recv());
        }
        if e.ep_type != FI_EP_MSG {
            return Err(FI_ENOPROTOOPT);
        }
        entry::cm_getopt(level, optname, optval, optlen)
    })
}

unsafe extern "C" fn ep_setopt(
    f: *mut fid,
    level: c_int,
    optname: c_int,
    optval: *const c_void,
    optlen: usize,
) -> c_int {
    guard_int(|| {
        let e = entry::get::<Ep>(f)?;
        if level != FI_OPT_ENDPOINT || optname != FI_OPT_MIN_MULTI_RECV || e.ep_type != FI_EP_RDM {
            return Err(FI_ENOPROTOOPT);
        }
        if optval.is_null() || optlen != size_of::<usize>() {
            return Err(FI_EINVAL);
        }
        // SAFETY: the caller's size_t, its length checked.
        let v = unsafe { optval.cast::<usize>().read_unaligned() };
        e.min_multi_recv.store(v, Ordering::Relaxed);
        Ok(0)
    })
}

/// The enabled connected endpoint behind `f`, or the error for another.
fn connected(f: *mut fid) -> Result<&'static MsgEndpoint, Errno> {
    let e = entry::get::<Ep>(f)?;
    if e.ep_type != FI_EP_MSG {
        return Err(FI_EOPNOTSUPP);
    }
    e.msg.get().ok_or(FI_EOPBADSTATE)
}

unsafe extern "C" fn ep_connect(
    f: *mut fid,
    addr: *const c_void,
    param: *const c_void,
    paramlen: usize,
) -> c_int {
    guard_int(|| {
        let m = connected(f)?;
        // SAFETY: the caller's address, a sockaddr of the family it says.
        let peer = unsafe { crate::sockaddr::from_c_sized(addr) }.ok_or(FI_EINVAL)?;
        m.connect(peer, entry::bytes(param, paramlen)?)
            .map_err(|e| e.errno())?;
        Ok(0)
    })
}

unsafe extern "C" fn ep_accept(f: *mut fid, param: *const c_void, paramlen: usize) -> c_int {
    guard_int(|| {
        let m = connected(f)?;
        let e = entry::get::<Ep>(f)?;
        let req = e.setup.lock().req.take().ok_or(FI_EINVAL)?;
        m.accept(req, entry::bytes(param, paramlen)?)
            .map_err(|e| e.errno())?;
        Ok(0)
    })
}

unsafe extern "C" fn ep_shutdown(f: *mut fid, _flags: u64) -> c_int {
    guard_int(|| {
        connected(f)?.shutdown().map_err(|e| e.errno())?;
        Ok(0)
    })
}

unsafe extern "C" fn ep_getpeer(f: *mut fid, addr: *mut c_void, addrlen: *mut usize) -> c_int {
    guard_int(|| {
        let m = connected(f)?;
        if addrlen.is_null() {
            return Err(FI_EINVAL);
        }
        copy_name(m.peer().ok_or(FI_ENOTCONN)?, addr, addrlen)
    })
}
