//! The passive endpoint (`fid_pep`): bound to an EQ, it listens (`fi_listen`) on the
//! device and port of its info through the fabric layer's [`PassiveEndpoint`], whose
//! connection requests come on the EQ as `FI_CONNREQ`; `fi_reject` refuses one.
//!
//! Threads and locks: its EQ binding is behind `FiEpSetup`, taken alone.

use crate::abi::*;
use crate::av::copy_name;
use crate::entry::{self, enosys, guard_int, object};
use crate::eq::{ConnReq, Eq};
use softrdma::sync::{Lock, Rank};
use softrdma_fabric::{Domain, EventQueue, PassiveEndpoint};
use std::ffi::{c_int, c_void};
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

/// A passive endpoint.
#[repr(C)]
pub struct Pep {
    fid: fid_pep,
    /// Where it listens: the info's device and port.
    src: SocketAddr,
    eq: Lock<Option<Arc<EventQueue>>>,
    live: OnceLock<PassiveEndpoint>,
}

object!(Pep, FI_CLASS_PEP, PEP_FI_OPS, bind: pep_bind);

static PEP_OPS: Ops<fi_ops_ep> = Ops(fi_ops_ep {
    size: size_of::<fi_ops_ep>(),
    cancel: enosys as Slot,
    getopt: pep_getopt as Slot,
    setopt: enosys as Slot,
    tx_ctx: enosys as Slot,
    rx_ctx: enosys as Slot,
    rx_size_left: enosys as Slot,
    tx_size_left: enosys as Slot,
});

static PEP_CM_OPS: Ops<fi_ops_cm> = Ops(fi_ops_cm {
    size: size_of::<fi_ops_cm>(),
    setname: enosys as Slot,
    getname: pep_getname as Slot,
    getpeer: enosys as Slot,
    connect: enosys as Slot,
    listen: pep_listen as Slot,
    accept: enosys as Slot,
    reject: pep_reject as Slot,
    shutdown: enosys as Slot,
    join: enosys as Slot,
});

/// `fi_passive_ep`: on the device of `info`, at its source port.
pub unsafe extern "C" fn passive_ep(
    fabric: *mut fid_fabric,
    info: *mut fi_info,
    pep: *mut *mut fid_pep,
    context: *mut c_void,
) -> c_int {
    guard_int(|| {
        if entry::class_of(fabric.cast()) != Some(FI_CLASS_FABRIC) || pep.is_null() {
            return Err(FI_EINVAL);
        }
        // SAFETY: libfabric's info, valid or null.
        let info = unsafe { info.as_ref() }.ok_or(FI_EINVAL)?;
        // SAFETY: as above, its attrs valid or null.
        if unsafe { info.ep_attr.as_ref() }.is_some_and(|a| a.type_ != FI_EP_MSG) {
            return Err(FI_EINVAL);
        }
        let dev = crate::domain::device_of(info)?;
        // SAFETY: the info's source address, valid for its length.
        let port = unsafe { crate::sockaddr::from_c(info.src_addr, info.src_addrlen) }
            .map_or(0, |s| s.port());
        let p = entry::open(Pep {
            fid: fid_pep {
                fid: fid {
                    fclass: FI_CLASS_PEP,
                    context,
                    ops: &PEP_FI_OPS.0,
                },
                ops: &PEP_OPS.0,
                cm: &PEP_CM_OPS.0,
            },
            src: SocketAddr::new(dev.ip, port),
            eq: Lock::new(Rank::FiEpSetup, None),
            live: OnceLock::new(),
        });
        // SAFETY: `pep` is writable, checked non-null.
        unsafe { *pep = p.cast() };
        Ok(0)
    })
}

unsafe extern "C" fn pep_bind(f: *mut fid, bfid: *mut fid, _flags: u64) -> c_int {
    guard_int(|| {
        let p = entry::get::<Pep>(f)?;
        match entry::class_of(bfid) {
            Some(FI_CLASS_EQ) => {
                let cm = entry::get::<Eq>(bfid)?.cm.clone();
                *p.eq.lock() = Some(cm);
                Ok(0)
            }
            Some(_) => Err(FI_EINVAL),
            None => Err(FI_EINVAL),
        }
    })
}

unsafe extern "C" fn pep_listen(f: *mut fid) -> c_int {
    guard_int(|| {
        let p = entry::get::<Pep>(f)?;
        if p.live.get().is_some() {
            return Err(FI_EOPBADSTATE);
        }
        let eq = p.eq.lock().clone().ok_or(FI_ENOEQ)?;
        let dom = Domain::open(p.src.ip()).map_err(|e| e.errno())?;
        let l = PassiveEndpoint::listen(&dom, p.src.port(), eq, f as u64).map_err(|e| e.errno())?;
        let _ = p.live.set(l);
        Ok(0)
    })
}

unsafe extern "C" fn pep_getname(f: *mut fid, addr: *mut c_void, addrlen: *mut usize) -> c_int {
    guard_int(|| {
        let p = entry::get::<Pep>(f)?;
        if addrlen.is_null() {
            return Err(FI_EINVAL);
        }
        copy_name(
            p.live.get().map_or(p.src, PassiveEndpoint::addr),
            addr,
            addrlen,
        )
    })
}

unsafe extern "C" fn pep_reject(
    f: *mut fid,
    handle: *mut fid,
    param: *const c_void,
    paramlen: usize,
) -> c_int {
    guard_int(|| {
        entry::get::<Pep>(f)?;
        let req = ConnReq::take(handle)?;
        req.reject(crate::entry::bytes(param, paramlen)?)
            .map_err(|e| e.errno())?;
        Ok(0)
    })
}

unsafe extern "C" fn pep_getopt(
    f: *mut fid,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: *mut usize,
) -> c_int {
    guard_int(|| {
        entry::get::<Pep>(f)?;
        entry::cm_getopt(level, optname, optval, optlen)
    })
}
