//! Memory registration (`fid_mr`). Local use needs none (the domain does not ask for
//! `FI_MR_LOCAL`), so a registration for local access only is a record with no key. One
//! that peers reach (`FI_REMOTE_READ`, `FI_REMOTE_WRITE`) registers the caller's memory
//! on the domain's device: its key is the provider's (`FI_MR_PROV_KEY`) and peers address
//! it by virtual address (`FI_MR_VIRT_ADDR`). `FI_REMOTE_WRITE` allows atomics too, as
//! `fi_mr(3)` has it (the target of an RMA write or an atomic).

use crate::abi::*;
use crate::domain::Domain;
use crate::entry::{self, guard_int, object};
use softrdma_fabric::{Access, Region};
use std::ffi::{c_int, c_void};

/// A registration.
#[repr(C)]
pub struct Mr {
    fid: fid_mr,
    /// The device's registration, for one that peers reach.
    _region: Option<Region>,
}

object!(Mr, FI_CLASS_MR, MR_FI_OPS);

/// The access bits of a registration that only this side uses.
const LOCAL: u64 = FI_SEND | FI_RECV | FI_READ | FI_WRITE;
/// The access bits of one that peers reach.
const REMOTE: u64 = FI_REMOTE_READ | FI_REMOTE_WRITE;

fn register(
    domain: *mut fid,
    (buf, len): (*const c_void, usize),
    access: u64,
    mr: *mut *mut fid_mr,
    context: *mut c_void,
) -> c_int {
    guard_int(|| {
        let d = entry::get::<Domain>(domain)?;
        if mr.is_null() {
            return Err(FI_EINVAL);
        }
        if access & !(LOCAL | REMOTE) != 0 {
            return Err(FI_EOPNOTSUPP);
        }
        let region = if access & REMOTE != 0 {
            if buf.is_null() && len != 0 {
                return Err(FI_EINVAL);
            }
            let mut a = Access::NONE;
            if access & FI_REMOTE_READ != 0 {
                a = a | Access::READ;
            }
            if access & FI_REMOTE_WRITE != 0 {
                a = a | Access::WRITE | Access::ATOMIC;
            }
            let dom = d.dev.open()?;
            // SAFETY: the caller's `len` bytes at `buf`, which libfabric's rules keep
            // valid until the registration is closed (the region is dropped then).
            let r = unsafe { dom.register_raw(buf.cast_mut().cast(), len, a) };
            Some(r.map_err(|e| e.errno())?)
        } else {
            None
        };
        let key = region.as_ref().map_or(0, Region::key);
        let m = entry::open(Mr {
            fid: fid_mr {
                fid: fid {
                    fclass: FI_CLASS_MR,
                    context,
                    ops: &MR_FI_OPS.0,
                },
                mem_desc: std::ptr::null_mut(),
                key,
            },
            _region: region,
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
    buf: *const c_void,
    len: usize,
    access: u64,
    _offset: u64,
    _requested_key: u64,
    _flags: u64,
    mr: *mut *mut fid_mr,
    context: *mut c_void,
) -> c_int {
    register(domain, (buf, len), access, mr, context)
}

/// `fi_mr_regv`.
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn mr_regv(
    domain: *mut fid,
    iov: *const iovec,
    count: usize,
    access: u64,
    _offset: u64,
    _requested_key: u64,
    _flags: u64,
    mr: *mut *mut fid_mr,
    context: *mut c_void,
) -> c_int {
    match crate::entry::one_iov(iov, count) {
        Ok(mem) => register(domain, mem, access, mr, context),
        Err(e) => -e,
    }
}

/// `fi_mr_regattr`: `mr_iov` at offset 0, `iov_count` at 8, `access` at 16 and `context`
/// at 40 of `struct fi_mr_attr`.
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
    let (iov, count, access, context) = unsafe {
        let a = attr.cast::<u8>();
        (
            a.cast::<*const iovec>().read(),
            a.add(8).cast::<usize>().read(),
            a.add(16).cast::<u64>().read(),
            a.add(40).cast::<*mut c_void>().read(),
        )
    };
    match crate::entry::one_iov(iov, count) {
        Ok(mem) => register(domain, mem, access, mr, context),
        Err(e) => -e,
    }
}
