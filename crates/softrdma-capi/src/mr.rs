//! Protection domains, memory regions and address handles.
//!
//! Memory registered from C is the application's own: the region points at it and the
//! device reads and writes it in place (a WRITE's payload lands in order, its last byte
//! last, which latency tests spin on). A PD counts the objects made in it, so that
//! `ibv_dealloc_pd` can refuse with EBUSY while any is alive.

use crate::abi::*;
use crate::device::{OfContext, SoftContext, live, own, to_destroy};
use crate::ffi::{Failed, Object, Ret, Users, Verb, entry};
use softrdma::{AccessFlags, AddressHandle, MemoryRegion, ProtectionDomain};
use std::ffi::{c_int, c_uint, c_void};
use std::net::Ipv6Addr;
use std::ptr::null_mut;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

/// Handles for the objects' `handle` fields (unique per process; nothing reads them but
/// tools that print them).
pub(crate) fn next_handle() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A PD: the public `ibv_pd`, then softrdma's.
#[repr(C)]
pub(crate) struct SoftPd {
    pub pd: ibv_pd,
    pub inner: ProtectionDomain,
    /// QPs, MRs, SRQs and AHs made in this PD and not yet destroyed.
    pub users: Users,
}

// SAFETY: repr(C), the public struct first.
unsafe impl Object for SoftPd {
    type C = ibv_pd;
    const WHAT: &'static str = "PD";
}

// SAFETY: `ibv_pd` begins with its context.
unsafe impl OfContext for SoftPd {}

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
/// addresses. Behind a leaf lock.
static LIBRARY_PDS: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());

/// The library's own PD on context `ctx` (allocated on first use; NULL if that fails),
/// which lives as long as the library, as librdmacm's `cma_dev->pd`: the connection
/// manager's `id->pd`.
pub(crate) fn library_pd(ctx: *mut ibv_context) -> *mut ibv_pd {
    if ctx.is_null() {
        return null_mut();
    }
    let mut pds = LIBRARY_PDS.lock().unwrap_or_else(|e| e.into_inner());
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
    LIBRARY_PDS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .any(|(_, p)| *p == pd as usize)
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

/// An MR: the public `ibv_mr`, then softrdma's region (dropping it deregisters).
#[repr(C)]
pub(crate) struct SoftMr {
    pub mr: ibv_mr,
    pub inner: MemoryRegion,
}

// SAFETY: repr(C), the public struct first.
unsafe impl Object for SoftMr {
    type C = ibv_mr;
    const WHAT: &'static str = "MR";
}

// SAFETY: `ibv_mr` begins with its context.
unsafe impl OfContext for SoftMr {}

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
        // SAFETY: NULL or an MR the caller got from this library.
        if unsafe { to_destroy::<SoftMr>(v, mr) }?.is_none() {
            return Ok(0);
        }
        // SAFETY: the MR came from reg_mr's box and is freed once; its PD outlives it
        // (dealloc_pd refuses while it is counted).
        let m = unsafe { SoftMr::free(mr) };
        // SAFETY: live PD, as above.
        unsafe { SoftPd::from_ptr(m.mr.pd) }.users.remove();
        drop(m);
        Ok(0)
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

/// An AH: the public `ibv_ah`, then softrdma's.
#[repr(C)]
pub(crate) struct SoftAh {
    pub ah: ibv_ah,
    pub inner: AddressHandle,
}

// SAFETY: repr(C), the public struct first.
unsafe impl Object for SoftAh {
    type C = ibv_ah;
    const WHAT: &'static str = "AH";
}

// SAFETY: `ibv_ah` begins with its context.
unsafe impl OfContext for SoftAh {}

/// The destination GID of an `ibv_ah_attr` for a device on `local`.
///
/// RoCE addresses by GID, so rxe refuses an AH without a GRH (`ib_resolve_eth_dmac`:
/// EINVAL), and programs that exchange only LIDs (qperf) cannot run on it. softrdma does
/// better for IPv4 devices: their port has a LID, the low 16 bits of the address
/// (`softrdma::config::sysfs::port_lid`), and an AH without a GRH reaches the host of that LID in the device's
/// /16. Anything else without a GRH is refused as on rxe.
pub(crate) fn ah_dgid(
    v: Verb,
    attr: &ibv_ah_attr,
    local: std::net::IpAddr,
) -> Result<Ipv6Addr, Failed> {
    if attr.is_global != 0 {
        return Ok(Ipv6Addr::from(attr.grh.dgid.raw));
    }
    match local {
        std::net::IpAddr::V4(a) if attr.dlid != 0 => {
            let ip = (u32::from(a) & 0xffff_0000) | u32::from(attr.dlid);
            Ok(std::net::Ipv4Addr::from(ip).to_ipv6_mapped())
        }
        _ => v.err(
            libc::EINVAL,
            &"RoCE needs a GRH (is_global = 1 and a destination GID), or a LID of an IPv4 device",
        ),
    }
}

/// The destination GID and the source GID index of an `ibv_ah_attr`: the GRH's, or for a
/// LID-addressed AH (see [`ah_dgid`]) the device address's own GID.
pub(crate) fn ah_path(
    v: Verb,
    attr: &ibv_ah_attr,
    soft: &SoftContext,
) -> Result<(Ipv6Addr, usize), Failed> {
    let addr = soft.ctx.addr();
    let dgid = ah_dgid(v, attr, addr)?;
    if attr.is_global != 0 {
        return Ok((dgid, attr.grh.sgid_index as usize));
    }
    Ok((dgid, soft.gid_index(addr).unwrap_or(0)))
}

/// The GID of an IP address, as RoCE v2 carries it: IPv4 mapped, IPv6 as is.
pub(crate) fn gid_of_ip(ip: std::net::IpAddr) -> Ipv6Addr {
    match ip {
        std::net::IpAddr::V4(a) => a.to_ipv6_mapped(),
        std::net::IpAddr::V6(a) => a,
    }
}

/// `ibv_create_ah`.
pub unsafe extern "C" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    entry("ibv_create_ah", Ret::NULL, |v| {
        v.ensure(
            !pd.is_null() && !attr.is_null(),
            libc::EINVAL,
            &"NULL argument",
        )?;
        // SAFETY: a PD the caller got from this library.
        let spd = unsafe { own::<SoftPd>(v, pd) }?;
        // SAFETY: the caller's attr.
        let attr = unsafe { &*attr };
        // SAFETY: the PD's live context.
        let soft = unsafe { SoftContext::from_ptr(spd.pd.context) };
        let (dgid, sgid_index) = ah_path(v, attr, soft)?;
        let inner = v.check(spd.inner.create_ah(dgid, sgid_index))?;
        let inner = inner.with_traffic_class(attr.grh.traffic_class);
        spd.users.add();
        let ah = SoftAh {
            ah: ibv_ah {
                context: spd.pd.context,
                pd,
                handle: next_handle(),
            },
            inner,
        };
        Ok(ah.into_c())
    })
}

/// `ibv_destroy_ah`.
pub unsafe extern "C" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
    entry("ibv_destroy_ah", Ret::ERRNO, |v| {
        // SAFETY: NULL or an AH the caller got from this library.
        if unsafe { to_destroy::<SoftAh>(v, ah) }?.is_none() {
            return Ok(0);
        }
        // SAFETY: from ibv_create_ah's box, freed once; its PD is alive (counted).
        let a = unsafe { SoftAh::free(ah) };
        // SAFETY: as above.
        unsafe { SoftPd::from_ptr(a.ah.pd) }.users.remove();
        Ok(0)
    })
}

/// `ibv_init_ah_from_wc`: the AH attributes that answer a UD receive, from its GRH
/// (the sender's GID becomes the destination; our GID it was sent to picks the source
/// index).
pub unsafe extern "C" fn ibv_init_ah_from_wc(
    ctx: *mut ibv_context,
    port: u8,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    attr: *mut ibv_ah_attr,
) -> c_int {
    entry("ibv_init_ah_from_wc", Ret::MINUS_ONE, |v| {
        v.ensure(
            !ctx.is_null() && !wc.is_null() && !grh.is_null() && !attr.is_null(),
            libc::EINVAL,
            &"NULL argument",
        )?;
        // SAFETY: the caller's wc and GRH (the first 40 bytes of the receive buffer).
        let (wc, grh) = unsafe { (&*wc, &*grh) };
        v.ensure(
            wc.wc_flags & IBV_WC_GRH != 0,
            libc::EINVAL,
            &"the completion has no GRH (IBV_WC_GRH)",
        )?;
        // SAFETY: live context.
        let soft = unsafe { SoftContext::from_ptr(ctx) };
        let (theirs, ours, tclass, flow) = grh_addrs(grh);
        // A GID sent to is ours; with IPv4 the GRH carries the IPv4-mapped address.
        let index = soft
            .ctx
            .gids()
            .iter()
            .position(|g| *g == ours)
            .unwrap_or(1.min(soft.ctx.gids().len() - 1));
        let out = ibv_ah_attr {
            grh: ibv_global_route {
                dgid: ibv_gid {
                    raw: theirs.octets(),
                },
                flow_label: flow,
                sgid_index: index as u8,
                hop_limit: 0xff,
                traffic_class: tclass,
            },
            dlid: wc.slid,
            sl: wc.sl,
            src_path_bits: wc.dlid_path_bits,
            static_rate: 0,
            is_global: 1,
            port_num: port,
        };
        // SAFETY: the caller's writable attr.
        unsafe { *attr = out };
        Ok(0)
    })
}

/// The sender's and receiver's GIDs, traffic class and flow label of a UD receive's
/// 40-byte GRH area. RoCE v2 over IPv4 has no GRH: the device writes the IPv4 header in
/// the area's last 20 bytes (as rxe does, and as libibverbs' `ibv_init_ah_from_wc` reads
/// it), and its addresses stand for their IPv4-mapped GIDs.
fn grh_addrs(grh: &ibv_grh) -> (Ipv6Addr, Ipv6Addr, u8, u32) {
    // SAFETY: ibv_grh is 40 bytes of plain data.
    let b: &[u8; 40] = unsafe { &*(grh as *const ibv_grh).cast::<[u8; 40]>() };
    let ip4 = &b[20..];
    if b[0] >> 4 != 6 && ip4[0] >> 4 == 4 {
        let v4 = |o: usize| std::net::Ipv4Addr::new(ip4[o], ip4[o + 1], ip4[o + 2], ip4[o + 3]);
        return (v4(12).to_ipv6_mapped(), v4(16).to_ipv6_mapped(), ip4[1], 0);
    }
    let flow = u32::from_be(grh.version_tclass_flow);
    (
        Ipv6Addr::from(grh.sgid.raw),
        Ipv6Addr::from(grh.dgid.raw),
        (flow >> 20) as u8,
        flow & 0xf_ffff,
    )
}

/// `ibv_create_ah_from_wc`.
pub unsafe extern "C" fn ibv_create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    port: u8,
) -> *mut ibv_ah {
    entry("ibv_create_ah_from_wc", Ret::NULL, |v| {
        v.ensure(!pd.is_null(), libc::EINVAL, &"NULL PD")?;
        let mut attr = ibv_ah_attr::default();
        // SAFETY: live PD; the rest is checked by ibv_init_ah_from_wc.
        let ctx = unsafe { SoftPd::from_ptr(pd) }.pd.context;
        // SAFETY: forwarded.
        if unsafe { ibv_init_ah_from_wc(ctx, port, wc, grh, &mut attr) } != 0 {
            return Ok(null_mut());
        }
        // SAFETY: forwarded.
        Ok(unsafe { ibv_create_ah(pd, &mut attr) })
    })
}
