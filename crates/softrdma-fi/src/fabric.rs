//! The fabric (`fid_fabric`, every softrdma device) and the opening of its domains, with
//! their operations wired to the objects' modules; its event queues (`eq`) and passive
//! endpoints (`pep`) are opened there too.
//!
//! Threads and locks: none of its own.

use crate::abi::*;
use crate::domain::{Domain, device_of};
use crate::entry::{self, enosys, guard_int, object};
use crate::info;
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
    passive_ep: crate::pep::passive_ep as Slot,
    eq_open: crate::eq::eq_open as Slot,
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

/// `fi_trywait`: 0 when the program may sleep on the descriptors of `fids` (CQs and EQs
/// opened with `FI_WAIT_FD`; each CQ driven first, and every one empty), `-FI_EAGAIN`
/// when one has entries to read first, `-FI_EINVAL` for any other fid.
unsafe extern "C" fn trywait(f: *mut fid_fabric, fids: *mut *mut fid, count: c_int) -> c_int {
    guard_int(|| {
        entry::get::<Fabric>(f.cast())?;
        let n = usize::try_from(count).map_err(|_| FI_EINVAL)?;
        if fids.is_null() && n > 0 {
            return Err(FI_EINVAL);
        }
        for k in 0..n {
            // SAFETY: the caller's `count` fids.
            let fid = unsafe { *fids.add(k) };
            let (has_fd, empty) = match entry::class_of(fid) {
                Some(FI_CLASS_CQ) => {
                    let cq = &entry::get::<crate::cq::Cq>(fid)?.cq;
                    (cq.fd().is_some(), cq.try_wait())
                }
                Some(FI_CLASS_EQ) => {
                    let eq = &entry::get::<crate::eq::Eq>(fid)?.cm;
                    (eq.fd().is_some(), eq.try_wait())
                }
                _ => return Err(FI_EINVAL),
            };
            if !has_fd {
                return Err(FI_EINVAL);
            }
            if !empty {
                return Err(FI_EAGAIN);
            }
        }
        Ok(0)
    })
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
