//! Protection domains, and the PD the library keeps on each context for the connection
//! manager (`id->pd`, as librdmacm's).

use super::context::{SoftContext, live, to_destroy};
use super::objects::{SoftPd, next_handle};
use crate::abi::*;
use crate::ffi::{Object, Ret, Users, entry};
use softrdma::sync::{Lock, Rank};
use std::ffi::c_int;
use std::ptr::null_mut;

/// `ibv_alloc_pd`.
pub unsafe extern "C" fn ibv_alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd {
    entry("ibv_alloc_pd", Ret::NULL, |v| {
        // SAFETY: NULL or a context the caller got from this library.
        let soft = unsafe { live::<SoftContext>(v, ctx) }?;
        let pd = SoftPd {
            pd: ibv_pd {
                context: ctx,
                handle: next_handle(),
            },
            inner: soft.ctx.alloc_pd(),
            users: Users::default(),
        };
        Ok(pd.into_c())
    })
}

/// The PDs the library allocates for itself, one per context: (context, PD) as
/// addresses. Its lock is held across the allocation, so that two threads make one PD.
static LIBRARY_PDS: Lock<Vec<(usize, usize)>> = Lock::new(Rank::CapiLibraryPds, Vec::new());

/// The library's own PD on context `ctx` (allocated on first use; NULL if that fails),
/// which lives as long as the library, as librdmacm's `cma_dev->pd`: the connection
/// manager's `id->pd`.
pub(crate) fn library_pd(ctx: *mut ibv_context) -> *mut ibv_pd {
    if ctx.is_null() {
        return null_mut();
    }
    let mut pds = LIBRARY_PDS.lock();
    if let Some((_, pd)) = pds.iter().find(|(c, _)| *c == ctx as usize) {
        return *pd as *mut ibv_pd;
    }
    // SAFETY: a live context of this library (the caller's contract).
    let pd = unsafe { ibv_alloc_pd(ctx) };
    if !pd.is_null() {
        pds.push((ctx as usize, pd as usize));
    }
    pd
}

/// Whether `pd` is one of [`library_pd`]'s, which `ibv_dealloc_pd` leaves be.
fn is_library_pd(pd: *mut ibv_pd) -> bool {
    LIBRARY_PDS.lock().iter().any(|(_, p)| *p == pd as usize)
}

/// `ibv_dealloc_pd`: EBUSY while objects made in it are alive.
pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    entry("ibv_dealloc_pd", Ret::ERRNO, |v| {
        // SAFETY: NULL or a PD the caller got from this library.
        let Some(spd) = unsafe { to_destroy::<SoftPd>(v, pd) }? else {
            return Ok(0);
        };
        // The library's own PD (the connection manager's `id->pd` before a QP) outlives
        // its IDs, as librdmacm's: a program that wraps and then frees it (pyverbs) leaves
        // it be.
        if is_library_pd(pd) {
            return Ok(0);
        }
        let n = spd.users.count();
        if n > 0 {
            return v.err(libc::EBUSY, &format_args!("{n} objects still use the PD"));
        }
        // SAFETY: the PD came from ibv_alloc_pd's box and is freed once.
        drop(unsafe { SoftPd::free(pd) });
        Ok(0)
    })
}
