//! The fabric (`fid_fabric`, every softrdma device), the opening of its domains (their
//! operations wired to the objects' modules) and its event queues (`fid_eq`). An event
//! queue holds what the application writes to it; reliable-datagram endpoints report no
//! connection events.
//!
//! Threads and locks: an EQ's events are behind `FiEq`, taken alone.

use crate::abi::*;
use crate::domain::{Domain, device_of};
use crate::entry::{self, enosys, guard_int, object};
use crate::info;
use softrdma::sync::{Lock, Rank};
use std::collections::VecDeque;
use std::ffi::{c_int, c_void};

/// The fabric.
#[repr(C)]
pub struct Fabric {
    fid: fid_fabric,
}

object!(Fabric, FI_CLASS_FABRIC, FABRIC_FI_OPS);

static FABRIC_OPS: Ops<fi_ops_fabric> = Ops(fi_ops_fabric {
    size: size_of::<fi_ops_fabric>(),
    domain: domain_open as Slot,
    passive_ep: enosys as Slot,
    eq_open: eq_open as Slot,
    wait_open: enosys as Slot,
    trywait: trywait as Slot,
    domain2: domain2_open as Slot,
});

/// The provider's `fabric` (`fi_fabric`).
///
/// # Safety
/// libfabric's arguments: `attr` readable, `fabric` writable.
pub unsafe extern "C" fn fabric_open(
    attr: *const fi_fabric_attr,
    fabric: *mut *mut fid_fabric,
    context: *mut c_void,
) -> c_int {
    guard_int(|| {
        // SAFETY: libfabric's attr, valid or null.
        let attr = unsafe { attr.as_ref() }.ok_or(FI_EINVAL)?;
        if fabric.is_null() || attr.name.is_null() {
            return Err(FI_EINVAL);
        }
        // SAFETY: a fabric name is a C string.
        let name = unsafe { std::ffi::CStr::from_ptr(attr.name) };
        if name.to_bytes() != info::FABRIC_NAME.as_bytes() {
            return Err(FI_ENODATA);
        }
        let f = entry::open(Fabric {
            fid: fid_fabric {
                fid: fid {
                    fclass: FI_CLASS_FABRIC,
                    context,
                    ops: &FABRIC_FI_OPS.0,
                },
                ops: &FABRIC_OPS.0,
                api_version: attr.api_version,
            },
        });
        // SAFETY: `fabric` is writable, checked non-null.
        unsafe { *fabric = f.cast() };
        Ok(0)
    })
}

unsafe extern "C" fn trywait(_f: *mut fid_fabric, _fids: *mut *mut fid, _count: c_int) -> c_int {
    // Nothing here waits on a descriptor: a read never blocks, so there is always
    // something worth trying.
    0
}

static DOMAIN_OPS: Ops<fi_ops_domain> = Ops(fi_ops_domain {
    size: size_of::<fi_ops_domain>(),
    av_open: crate::av::av_open as Slot,
    cq_open: crate::cq::cq_open as Slot,
    endpoint: crate::endpoint::ep_open as Slot,
    scalable_ep: enosys as Slot,
    cntr_open: crate::cntr::cntr_open as Slot,
    poll_open: enosys as Slot,
    stx_ctx: enosys as Slot,
    srx_ctx: enosys as Slot,
    query_atomic: crate::rma::query_atomic as Slot,
    query_collective: enosys as Slot,
    endpoint2: crate::endpoint::ep_open2 as Slot,
});

static MR_OPS: Ops<fi_ops_mr> = Ops(fi_ops_mr {
    size: size_of::<fi_ops_mr>(),
    reg: crate::mr::mr_reg as Slot,
    regv: crate::mr::mr_regv as Slot,
    regattr: crate::mr::mr_regattr as Slot,
});

unsafe extern "C" fn domain_open(
    fabric: *mut fid_fabric,
    info: *mut fi_info,
    dom: *mut *mut fid_domain,
    context: *mut c_void,
) -> c_int {
    guard_int(|| {
        let f = entry::get::<Fabric>(fabric.cast())?;
        // SAFETY: libfabric's info, valid or null.
        let info = unsafe { info.as_ref() }.ok_or(FI_EINVAL)?;
        if dom.is_null() {
            return Err(FI_EINVAL);
        }
        let dev = device_of(info)?;
        let d = entry::open(Domain {
            fid: fid_domain {
                fid: fid {
                    fclass: FI_CLASS_DOMAIN,
                    context,
                    ops: &crate::domain::DOMAIN_FI_OPS.0,
                },
                ops: &DOMAIN_OPS.0,
                mr: &MR_OPS.0,
            },
            dev: crate::domain::DomainDevice::new(dev),
            api_version: f.fid.api_version,
        });
        // SAFETY: `dom` is writable, checked non-null.
        unsafe { *dom = d.cast() };
        Ok(0)
    })
}

unsafe extern "C" fn domain2_open(
    fabric: *mut fid_fabric,
    info: *mut fi_info,
    dom: *mut *mut fid_domain,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    if flags != 0 {
        return -FI_EBADFLAGS;
    }
    // SAFETY: forwarded from libfabric.
    unsafe { domain_open(fabric, info, dom, context) }
}

/// An event queue.
#[repr(C)]
pub struct Eq {
    fid: fid_eq,
    events: Lock<VecDeque<(u32, Vec<u8>)>>,
}

object!(Eq, FI_CLASS_EQ, EQ_FI_OPS);

static EQ_OPS: Ops<fi_ops_eq> = Ops(fi_ops_eq {
    size: size_of::<fi_ops_eq>(),
    read: eq_read as Slot,
    readerr: eq_readerr as Slot,
    write: eq_write as Slot,
    sread: eq_sread as Slot,
    strerror: crate::cq::strerror as Slot,
});

unsafe extern "C" fn eq_open(
    fabric: *mut fid_fabric,
    attr: *mut fi_eq_attr,
    eq: *mut *mut fid_eq,
    context: *mut c_void,
) -> c_int {
    guard_int(|| {
        entry::get::<Fabric>(fabric.cast())?;
        // SAFETY: libfabric's attr, valid or null.
        let attr = unsafe { attr.as_ref() }.ok_or(FI_EINVAL)?;
        if eq.is_null() {
            return Err(FI_EINVAL);
        }
        if ![FI_WAIT_NONE, FI_WAIT_UNSPEC, FI_WAIT_YIELD].contains(&attr.wait_obj) {
            return Err(FI_ENOSYS);
        }
        let e = entry::open(Eq {
            fid: fid_eq {
                fid: fid {
                    fclass: FI_CLASS_EQ,
                    context,
                    ops: &EQ_FI_OPS.0,
                },
                ops: &EQ_OPS.0,
            },
            events: Lock::new(Rank::FiEq, VecDeque::new()),
        });
        // SAFETY: `eq` is writable, checked non-null.
        unsafe { *eq = e.cast() };
        Ok(0)
    })
}

/// `FI_PEEK` as an EQ read flag.
const EQ_PEEK: u64 = FI_PEEK;

unsafe extern "C" fn eq_read(
    eq: *mut fid_eq,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
    flags: u64,
) -> isize {
    entry::guard(|| {
        let e = entry::get::<Eq>(eq.cast())?;
        let mut q = e.events.lock();
        let Some((ev, data)) = q.front() else {
            return Err(FI_EAGAIN);
        };
        if len < data.len() || (buf.is_null() && !data.is_empty()) {
            return Err(FI_ETOOSMALL);
        }
        // SAFETY: `event` is the caller's, writable if not null; `buf` holds `len` bytes.
        unsafe {
            if !event.is_null() {
                *event = *ev;
            }
            std::ptr::copy_nonoverlapping(data.as_ptr(), buf.cast(), data.len());
        }
        let n = data.len() as isize;
        if flags & EQ_PEEK == 0 {
            q.pop_front();
        }
        Ok(n)
    })
}

unsafe extern "C" fn eq_readerr(
    _eq: *mut fid_eq,
    _buf: *mut fi_eq_err_entry,
    _flags: u64,
) -> isize {
    // No error event is ever queued.
    -(FI_EAGAIN as isize)
}

unsafe extern "C" fn eq_write(
    eq: *mut fid_eq,
    event: u32,
    buf: *const c_void,
    len: usize,
    _flags: u64,
) -> isize {
    entry::guard(|| {
        let e = entry::get::<Eq>(eq.cast())?;
        if buf.is_null() && len != 0 {
            return Err(FI_EINVAL);
        }
        let data = if len == 0 {
            Vec::new()
        } else {
            // SAFETY: the caller's `len` bytes at `buf`.
            unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len).to_vec() }
        };
        e.events.lock().push_back((event, data));
        Ok(len as isize)
    })
}

unsafe extern "C" fn eq_sread(
    eq: *mut fid_eq,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
    timeout: c_int,
    flags: u64,
) -> isize {
    crate::wait::wait_for(timeout, || {
        // SAFETY: forwarded from libfabric.
        unsafe { eq_read(eq, event, buf, len, flags) }
    })
}
