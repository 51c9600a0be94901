//! Counters (`fid_cntr`): the fabric layer's [`Counter`], which an endpoint bound to it
//! (`fi_ep_bind` with `FI_SEND`, `FI_RECV`, `FI_READ`, `FI_WRITE`) counts its completions
//! on, those that write no CQ entry too. Reading or waiting on one drives the bound
//! endpoints. `fi_cntr_wait` spins (as `fi_cq_sread` does): there is no wait object to
//! give, so only `FI_WAIT_NONE`, `FI_WAIT_UNSPEC` and `FI_WAIT_YIELD` are taken.
//!
//! Threads and locks: none here; the counter's numbers are atomics.

use crate::abi::*;
use crate::domain::Domain;
use crate::entry::{self, guard_int, object};
use softrdma_fabric::{Counter, Waited};
use std::ffi::{c_int, c_void};
use std::sync::Arc;
use std::time::Duration;

/// A counter.
#[repr(C)]
pub struct Cntr {
    fid: fid_cntr,
    /// The fabric layer's counter.
    pub cntr: Arc<Counter>,
}

object!(Cntr, FI_CLASS_CNTR, CNTR_FI_OPS);

static CNTR_OPS: Ops<fi_ops_cntr> = Ops(fi_ops_cntr {
    size: size_of::<fi_ops_cntr>(),
    read: cntr_read as Slot,
    readerr: cntr_readerr as Slot,
    add: cntr_add as Slot,
    set: cntr_set as Slot,
    wait: cntr_wait as Slot,
    adderr: cntr_adderr as Slot,
    seterr: cntr_seterr as Slot,
});

/// `fi_cntr_open`.
pub unsafe extern "C" fn cntr_open(
    domain: *mut fid_domain,
    attr: *mut fi_cntr_attr,
    cntr: *mut *mut fid_cntr,
    context: *mut c_void,
) -> c_int {
    guard_int(|| {
        entry::get::<Domain>(domain.cast())?;
        if cntr.is_null() {
            return Err(FI_EINVAL);
        }
        // SAFETY: libfabric's attr, valid or null (null: the defaults).
        if let Some(a) = unsafe { attr.as_ref() } {
            if a.events != FI_CNTR_EVENTS_COMP || a.flags != 0 {
                return Err(FI_EINVAL);
            }
            if ![FI_WAIT_NONE, FI_WAIT_UNSPEC, FI_WAIT_YIELD].contains(&a.wait_obj)
                || !a.wait_set.is_null()
            {
                return Err(FI_ENOSYS);
            }
        }
        let c = entry::open(Cntr {
            fid: fid_cntr {
                fid: fid {
                    fclass: FI_CLASS_CNTR,
                    context,
                    ops: &CNTR_FI_OPS.0,
                },
                ops: &CNTR_OPS.0,
            },
            cntr: Counter::new(),
        });
        // SAFETY: `cntr` is writable, checked non-null.
        unsafe { *cntr = c.cast() };
        Ok(0)
    })
}

/// The counter behind `c`, if it is one of this provider's.
fn get(c: *mut fid_cntr) -> Option<&'static Counter> {
    entry::get::<Cntr>(c.cast()).ok().map(|c| &*c.cntr)
}

// `fi_cntr_read` and `fi_cntr_readerr` return the count itself: a fid that is not a
// counter reads as 0, as there is no error to give.
unsafe extern "C" fn cntr_read(c: *mut fid_cntr) -> u64 {
    std::panic::catch_unwind(|| get(c).map_or(0, Counter::read)).unwrap_or(0)
}

unsafe extern "C" fn cntr_readerr(c: *mut fid_cntr) -> u64 {
    std::panic::catch_unwind(|| get(c).map_or(0, Counter::read_errors)).unwrap_or(0)
}

/// Applies `f` to the counter behind `c`.
fn with(c: *mut fid_cntr, f: impl FnOnce(&Counter)) -> c_int {
    guard_int(|| {
        f(get(c).ok_or(FI_EINVAL)?);
        Ok(0)
    })
}

unsafe extern "C" fn cntr_add(c: *mut fid_cntr, value: u64) -> c_int {
    with(c, |k| k.add(value))
}

unsafe extern "C" fn cntr_set(c: *mut fid_cntr, value: u64) -> c_int {
    with(c, |k| k.set(value))
}

unsafe extern "C" fn cntr_adderr(c: *mut fid_cntr, value: u64) -> c_int {
    with(c, |k| k.add_errors(value))
}

unsafe extern "C" fn cntr_seterr(c: *mut fid_cntr, value: u64) -> c_int {
    with(c, |k| k.set_errors(value))
}

/// `fi_cntr_wait`: until the count reaches `threshold` (0), an error is counted
/// (`-FI_EAVAIL`), or `timeout` ms pass (`-FI_ETIMEDOUT`; a negative timeout waits for
/// ever).
unsafe extern "C" fn cntr_wait(c: *mut fid_cntr, threshold: u64, timeout: c_int) -> c_int {
    guard_int(|| {
        let k = get(c).ok_or(FI_EINVAL)?;
        let within = u64::try_from(timeout).map_or(Duration::MAX, Duration::from_millis);
        match k.wait(threshold, within) {
            Waited::Reached => Ok(0),
            Waited::Failed => Err(FI_EAVAIL),
            Waited::TimedOut => Err(FI_ETIMEDOUT),
        }
    })
}
