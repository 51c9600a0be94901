//! The reliable-datagram endpoint (`fid_ep`, `FI_EP_RDM`): its bindings (an AV, a CQ for
//! each direction, with or without `FI_SELECTIVE_COMPLETION`, counters), its enabling, which opens
//! the fabric layer's [`Endpoint`] on the domain's device, and its control, name and
//! cancel. `endpoint` opens it; its data operations are in `xfer`.
//!
//! Threads and locks: the bindings are behind `FiEpSetup`, taken alone; once enabled, the
//! fabric layer's endpoint is read without a lock here (it has its own).

use crate::abi::*;
use crate::av::{Av, copy_name};
use crate::cntr::Cntr;
use crate::cq::Cq;
use crate::domain::DomainDevice;
use crate::entry::{self, Errno, enosys, guard, guard_int, object};
use softrdma::sync::{Lock, Rank};
use softrdma_fabric::{AddressVector, CompletionQueue, CountOf, Counter, Endpoint};
use std::ffi::{c_int, c_void};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
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
}

/// An endpoint.
#[repr(C)]
pub struct Ep {
    fid: fid_ep,
    setup: Lock<Setup>,
    live: OnceLock<Endpoint>,
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
}

impl Ep {
    /// The enabled endpoint, or `-FI_EOPBADSTATE`.
    pub fn live(&self) -> Result<&Endpoint, Errno> {
        self.live.get().ok_or(FI_EOPBADSTATE)
    }

    /// Whether a send with `flags` reports a completion.
    pub fn reports(&self, flags: u64) -> bool {
        !self.tx_selective.get().copied().unwrap_or(false) || flags & FI_COMPLETION != 0
    }

    /// The default send flags.
    pub fn tx_flags(&self) -> u64 {
        self.tx_flags.load(Ordering::Relaxed)
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
    getpeer: enosys as Slot,
    connect: enosys as Slot,
    listen: enosys as Slot,
    accept: enosys as Slot,
    reject: enosys as Slot,
    shutdown: enosys as Slot,
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
    /// An endpoint on `dev` and `port` with `caps`, its default flags and inject size,
    /// its data operations `ops` (the caller's: they need this type).
    pub fn new(
        context: *mut c_void,
        ops: DataOps,
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
            setup: Lock::new(Rank::FiEpSetup, Setup::default()),
            live: OnceLock::new(),
            dev,
            port,
            caps,
            tx_flags: AtomicU64::new(tx_flags),
            rx_flags: AtomicU64::new(rx_flags),
            tx_selective: OnceLock::new(),
            inject_size,
        }
    }
}

unsafe extern "C" fn ep_bind(f: *mut fid, bfid: *mut fid, flags: u64) -> c_int {
    guard_int(|| {
        let e = entry::get::<Ep>(f)?;
        if e.live.get().is_some() {
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
            Some(FI_CLASS_EQ) => {}
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
    if e.live.get().is_some() {
        return Ok(());
    }
    let s = e.setup.lock();
    let av = s.av.clone().ok_or(FI_ENOAV)?;
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
    drop(s);
    let dom = e.dev.open()?;
    let ep = Endpoint::open_on(&dom, e.port, av, tx.cq, rx.cq).map_err(|err| err.errno())?;
    for (c, of) in &cntrs {
        ep.bind_counter(c, *of);
    }
    let _ = e.tx_selective.set(tx.selective);
    let _ = e.live.set(ep);
    Ok(())
}

unsafe extern "C" fn ep_getname(f: *mut fid, addr: *mut c_void, addrlen: *mut usize) -> c_int {
    guard_int(|| {
        let e = entry::get::<Ep>(f)?;
        if addrlen.is_null() {
            return Err(FI_EINVAL);
        }
        let name = e
            .live
            .get()
            .map_or(SocketAddr::new(e.dev.info.ip, e.port), Endpoint::addr);
        copy_name(name, addr, addrlen)
    })
}

unsafe extern "C" fn ep_cancel(f: *mut fid, context: *mut c_void) -> isize {
    guard(|| {
        let e = entry::get::<Ep>(f)?;
        if e.live()?.cancel(context as u64) {
            Ok(0)
        } else {
            Err(libc::ENOENT)
        }
    })
}

unsafe extern "C" fn ep_getopt(
    f: *mut fid,
    _level: c_int,
    _optname: c_int,
    _optval: *mut c_void,
    _optlen: *mut usize,
) -> c_int {
    guard_int(|| {
        entry::get::<Ep>(f)?;
        Err(FI_ENOPROTOOPT)
    })
}

unsafe extern "C" fn ep_setopt(
    f: *mut fid,
    _level: c_int,
    _optname: c_int,
    _optval: *const c_void,
    _optlen: usize,
) -> c_int {
    guard_int(|| {
        entry::get::<Ep>(f)?;
        Err(FI_ENOPROTOOPT)
    })
}
