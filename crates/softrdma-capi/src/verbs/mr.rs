//! Memory regions.
//!
//! Memory registered from C is the application's own: the region points at it and the
//! device reads and writes it in place (a WRITE's payload lands in order, its last byte
//! last, which latency tests spin on). Its PD counts it, so that `ibv_dealloc_pd` can
//! refuse with EBUSY while it is alive.

use super::context::live;
use super::objects::{SoftMr, SoftPd, destroy_in_pd, next_handle};
use crate::abi::*;
use crate::ffi::{Failed, Object, Ret, Verb, entry};
use softrdma::AccessFlags;
use std::ffi::{c_int, c_uint, c_void};

/// The access bits softrdma knows (`enum ibv_access_flags` 0-5 are the same bits as
/// [`AccessFlags`]). On-demand paging (6) is what every region of softrdma is anyway
/// (nothing is pinned; see the device's `odp_caps`), and huge pages (7), relaxed ordering
/// and the other optional bits (20-29) are hints a soft device may ignore, as the man page
/// allows.
fn access(bits: c_uint) -> Result<AccessFlags, &'static str> {
    const OPTIONAL: c_uint = 0x3ff0_0000;
    const ON_DEMAND: c_uint = 1 << 6;
    const HUGETLB: c_uint = 1 << 7;
    let known = bits & !(OPTIONAL | ON_DEMAND | HUGETLB);
    AccessFlags::from_bits(known).ok_or("unknown access bits")
}

/// Whether every page of `[addr, addr + len)` is mapped in this process, as the kernel's
/// pinning of a region requires (it fails with EFAULT on a hole): without this check a
/// bad range would fault later, in the progress thread, when a peer's WRITE or READ
/// reached it. `mincore` answers for a range without touching it, ENOMEM for a hole; it
/// is asked 1 GiB at a time, so that a large region needs no large vector.
fn mapped(addr: *const c_void, len: usize) -> bool {
    const PAGE: usize = 4096;
    const CHUNK: usize = 1 << 30;
    if len == 0 {
        return true;
    }
    let Some(end) = (addr as usize).checked_add(len) else {
        return false;
    };
    let mut at = addr as usize & !(PAGE - 1);
    let mut pages = vec![0u8; (end - at).min(CHUNK).div_ceil(PAGE)];
    while at < end {
        let n = (end - at).min(CHUNK);
        // SAFETY: mincore reads no memory of the range; `pages` has a byte for each of
        // the at most CHUNK / PAGE pages asked about.
        if unsafe { libc::mincore(at as *mut c_void, n, pages.as_mut_ptr()) } != 0 {
            return false;
        }
        at += n;
    }
    true
}

fn reg_mr(
    v: Verb,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    bits: c_uint,
) -> Result<*mut ibv_mr, Failed> {
    // SAFETY: NULL or a PD the caller got from this library.
    let spd = unsafe { live::<SoftPd>(v, pd) }?;
    let acc = access(bits).map_err(|why| v.fail(libc::EINVAL, &why))?;
    v.ensure(
        mapped(addr, length),
        libc::EFAULT,
        &format_args!("[{addr:p}, +{length}) is not all mapped in this process"),
    )?;
    // SAFETY: the C contract of ibv_reg_mr: the memory stays valid until ibv_dereg_mr,
    // which drops the region first.
    let inner = v.check(unsafe { spd.inner.register_raw_iova(addr.cast(), length, iova, acc) })?;
    spd.users.add();
    let mr = SoftMr {
        mr: ibv_mr {
            context: spd.pd.context,
            pd,
            addr,
            length,
            handle: next_handle(),
            lkey: inner.lkey(),
            rkey: inner.rkey(),
        },
        inner,
    };
    Ok(mr.into_c())
}

/// `ibv_reg_mr`.
pub unsafe extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    entry("ibv_reg_mr", Ret::NULL, |v| {
        reg_mr(v, pd, addr, length, addr as u64, access as c_uint)
    })
}

/// `ibv_reg_mr_iova`.
pub unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    entry("ibv_reg_mr_iova", Ret::NULL, |v| {
        reg_mr(v, pd, addr, length, iova, access as c_uint)
    })
}

/// `ibv_reg_mr_iova2` (what `ibv_reg_mr` becomes with a non-constant access).
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    entry("ibv_reg_mr_iova2", Ret::NULL, |v| {
        reg_mr(v, pd, addr, length, iova, access)
    })
}

/// `ibv_dereg_mr`.
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    entry("ibv_dereg_mr", Ret::ERRNO, |v| {
        // SAFETY: NULL or an MR the caller got from this library (reg_mr's box), counted
        // by its PD.
        unsafe { destroy_in_pd::<SoftMr>(v, mr, |m| m.mr.pd) }
    })
}

/// `ibv_rereg_mr`: registers the MR again with a new translation (1), PD (2) and/or
/// access (4), keeping its keys, so that peers and posted WRs that hold them reach the new
/// registration. Returns 0, or `IBV_REREG_MR_ERR_INPUT` (-1) / `IBV_REREG_MR_ERR_CMD` (-4)
/// with errno set, as rdma-core.
pub unsafe extern "C" fn ibv_rereg_mr(
    mr: *mut ibv_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access_bits: c_int,
) -> c_int {
    const TRANSLATION: c_int = 1;
    const PD: c_int = 2;
    const ACCESS: c_int = 4;
    const ERR_INPUT: c_int = -1;
    const ERR_CMD: c_int = -4;
    // A refused argument is ERR_INPUT; a registration that fails, ERR_CMD.
    entry("ibv_rereg_mr", Ret::new(|_| ERR_INPUT, ERR_CMD), |v| {
        v.ensure(
            !mr.is_null() && flags != 0 && flags & !(TRANSLATION | PD | ACCESS) == 0,
            libc::EINVAL,
            &"NULL MR, or flags other than TRANSLATION, PD and ACCESS",
        )?;
        v.ensure(
            flags & PD == 0 || !pd.is_null(),
            libc::EINVAL,
            &"IBV_REREG_MR_CHANGE_PD with a NULL PD",
        )?;
        // SAFETY: the caller's live MR; rdma-core's contract: no other call uses it meanwhile.
        let m = unsafe { SoftMr::from_ptr_mut(mr) };
        let new_pd = if flags & PD != 0 { pd } else { m.mr.pd };
        let (base, len) = if flags & TRANSLATION != 0 {
            (addr, length)
        } else {
            (m.mr.addr, m.mr.length)
        };
        let acc = if flags & ACCESS != 0 {
            access(access_bits as c_uint).map_err(|why| v.fail(libc::EINVAL, &why))?
        } else {
            m.inner.access()
        };
        // SAFETY: live PDs (the old one counts this MR; the new one is the caller's).
        let (old, new) = unsafe { (SoftPd::from_ptr(m.mr.pd), SoftPd::from_ptr(new_pd)) };
        // SAFETY: the C contract of ibv_rereg_mr: the new memory stays valid until the MR
        // is deregistered or registered again.
        let r = unsafe {
            new.inner
                .reregister_raw(&mut m.inner, base.cast(), len, base as u64, acc)
        };
        if let Err(e) = r {
            v.error(&e);
            return Ok(ERR_CMD);
        }
        if !std::ptr::eq(old, new) {
            new.users.add();
            old.users.remove();
        }
        m.mr.pd = new_pd;
        m.mr.addr = base;
        m.mr.length = len;
        Ok(0)
    })
}

/// `verbs_context.advise_mr` (`ibv_advise_mr`): prefetching has nothing to do, since the
/// device reaches the memory directly; the advice and the SGEs' keys are still checked.
pub(crate) unsafe extern "C" fn advise_mr(
    pd: *mut ibv_pd,
    advice: c_int,
    flags: u32,
    sg: *mut ibv_sge,
    n: u32,
) -> c_int {
    entry("ibv_advise_mr", Ret::ERRNO, |v| {
        // PREFETCH, PREFETCH_WRITE, PREFETCH_NO_FAULT; the one flag is FLUSH.
        v.ensure(
            !pd.is_null()
                && (0..=2).contains(&advice)
                && flags & !1 == 0
                && n != 0
                && !sg.is_null(),
            libc::EINVAL,
            &"bad PD, advice, flags or SGE list",
        )?;
        Ok(0)
    })
}
