//! Memory registration (`fid_mr`). Messages need none (the domain does not ask for
//! `FI_MR_LOCAL`), so a registration for local access is a record with no key; one that
//! peers would reach (`FI_REMOTE_READ`/`FI_REMOTE_WRITE`) is refused with
//! `-FI_EOPNOTSUPP` until this provider offers RMA.

use crate::abi::*;
use crate::domain::Domain;
use crate::entry::{self, guard_int, object};
use std::ffi::{c_int, c_void};

/// A registration.
#[repr(C)]
pub struct Mr {
    fid: fid_mr,
}

object!(Mr, FI_CLASS_MR, MR_FI_OPS);

/// The access bits of a registration that only this side uses.
const LOCAL: u64 = FI_SEND | FI_RECV | FI_READ | FI_WRITE;

fn register(domain: *mut fid, access: u64, mr: *mut *mut fid_mr, context: *mut c_void) -> c_int {
    guard_int(|| {
        entry::get::<Domain>(domain)?;
        if mr.is_null() {
            return Err(FI_EINVAL);
        }
        if access & !LOCAL != 0 {
            return Err(FI_EOPNOTSUPP);
        }
        let m = entry::open(Mr {
            fid: fid_mr {
                fid: fid {
                    fclass: FI_CLASS_MR,
                    context,
                    ops: &MR_FI_OPS.0,
                },
                mem_desc: std::ptr::null_mut(),
                key: 0,
            },
        });
        // SAFETY: `mr` is writable, checked non-null.
        unsafe { *mr = m.cast() };
        Ok(0)
    })
}

/// `fi_mr_reg`.
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn mr_reg(
    domain: *mut fid,
    _buf: *const c_void,
    _len: usize,
    access: u64,
    _offset: u64,
    _requested_key: u64,
    _flags: u64,
    mr: *mut *mut fid_mr,
    context: *mut c_void,
) -> c_int {
    register(domain, access, mr, context)
}

/// `fi_mr_regv`.
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn mr_regv(
    domain: *mut fid,
    _iov: *const iovec,
    _count: usize,
    access: u64,
    _offset: u64,
    _requested_key: u64,
    _flags: u64,
    mr: *mut *mut fid_mr,
    context: *mut c_void,
) -> c_int {
    register(domain, access, mr, context)
}

/// `fi_mr_regattr`: `access` at offset 16 and `context` at 40 of `struct fi_mr_attr`.
pub unsafe extern "C" fn mr_regattr(
    domain: *mut fid,
    attr: *const c_void,
    _flags: u64,
    mr: *mut *mut fid_mr,
) -> c_int {
    if attr.is_null() {
        return -FI_EINVAL;
    }
    // SAFETY: libfabric's `fi_mr_attr` (80 bytes, docs/fabric-provider.md §2.2).
    let (access, context) = unsafe {
        (
            attr.cast::<u8>().add(16).cast::<u64>().read(),
            attr.cast::<u8>().add(40).cast::<*mut c_void>().read(),
        )
    };
    register(domain, access, mr, context)
}
