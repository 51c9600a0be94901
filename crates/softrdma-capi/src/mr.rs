//! Protection domains, memory regions and address handles.
//!
//! Memory registered from C is the application's own: the region points at it and the
//! device reads and writes it in place (a WRITE's payload lands in order, its last byte
//! last, which latency tests spin on). A PD counts the objects made in it, so that
//! `ibv_dealloc_pd` can refuse with EBUSY while any is alive.

use crate::abi::*;
use crate::device::{SoftContext, inherited, inherited_ctx, refuse_inherited};
use crate::{fail, fail_with, guard};
use softrdma::{AccessFlags, AddressHandle, MemoryRegion, ProtectionDomain};
use std::ffi::{c_int, c_uint, c_void};
use std::net::Ipv6Addr;
use std::ptr::null_mut;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

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
    pub users: AtomicUsize,
}

impl SoftPd {
    /// # Safety
    /// `pd` must be a live PD this library returned.
    pub(crate) unsafe fn from_ptr<'a>(pd: *mut ibv_pd) -> &'a SoftPd {
        // SAFETY: `pd` is the first field of a live SoftPd (repr(C)).
        unsafe { &*pd.cast::<SoftPd>() }
    }
}

/// `ibv_alloc_pd`.
pub unsafe extern "C" fn ibv_alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd {
    guard("ibv_alloc_pd", null_mut(), || {
        if ctx.is_null() {
            fail("ibv_alloc_pd", libc::EINVAL, &"NULL context");
            return null_mut();
        }
        // SAFETY: NULL or a live object the caller got from this library.
        if unsafe { inherited_ctx(ctx) } {
            refuse_inherited("ibv_alloc_pd");
            return null_mut();
        }
        // SAFETY: live context.
        let soft = unsafe { SoftContext::from_ptr(ctx) };
        let pd = Box::new(SoftPd {
            pd: ibv_pd {
                context: ctx,
                handle: next_handle(),
            },
            inner: soft.ctx.alloc_pd(),
            users: AtomicUsize::new(0),
        });
        Box::into_raw(pd).cast()
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
    guard("ibv_dealloc_pd", libc::EIO, || {
        if pd.is_null() {
            return fail("ibv_dealloc_pd", libc::EINVAL, &"NULL PD");
        }
        // SAFETY: NULL or a live object the caller got from this library.
        if unsafe { inherited(pd.cast()) } {
            return 0;
        }
        // The library's own PD (the connection manager's `id->pd` before a QP) outlives
        // its IDs, as librdmacm's: a program that wraps and then frees it (pyverbs) leaves
        // it be.
        if is_library_pd(pd) {
            return 0;
        }
        // SAFETY: live PD.
        let n = unsafe { SoftPd::from_ptr(pd) }
            .users
            .load(Ordering::Acquire);
        if n > 0 {
            return fail(
                "ibv_dealloc_pd",
                libc::EBUSY,
                &format_args!("{n} objects still use the PD"),
            );
        }
        // SAFETY: the PD came from ibv_alloc_pd's Box and is freed once.
        drop(unsafe { Box::from_raw(pd.cast::<SoftPd>()) });
        0
    })
}

/// An MR: the public `ibv_mr`, then softrdma's region (dropping it deregisters).
#[repr(C)]
pub(crate) struct SoftMr {
    pub mr: ibv_mr,
    pub inner: MemoryRegion,
}

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
    verb: &'static str,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    bits: c_uint,
) -> *mut ibv_mr {
    guard(verb, null_mut(), || {
        if pd.is_null() {
            fail(verb, libc::EINVAL, &"NULL PD");
            return null_mut();
        }
        // SAFETY: NULL or a live object the caller got from this library.
        if unsafe { inherited(pd.cast()) } {
            refuse_inherited(verb);
            return null_mut();
        }
        let acc = match access(bits) {
            Ok(a) => a,
            Err(why) => {
                fail(verb, libc::EINVAL, &why);
                return null_mut();
            }
        };
        if !mapped(addr, length) {
            fail(
                verb,
                libc::EFAULT,
                &format_args!("[{addr:p}, +{length}) is not all mapped in this process"),
            );
            return null_mut();
        }
        // SAFETY: live PD.
        let spd = unsafe { SoftPd::from_ptr(pd) };
        // SAFETY: the C contract of ibv_reg_mr: the memory stays valid until ibv_dereg_mr,
        // which drops the region first.
        let inner = match unsafe { spd.inner.register_raw_iova(addr.cast(), length, iova, acc) } {
            Ok(r) => r,
            Err(e) => {
                fail_with(verb, &e);
                return null_mut();
            }
        };
        spd.users.fetch_add(1, Ordering::AcqRel);
        let mr = Box::new(SoftMr {
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
        });
        Box::into_raw(mr).cast()
    })
}

/// `ibv_reg_mr`.
pub unsafe extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    reg_mr(
        "ibv_reg_mr",
        pd,
        addr,
        length,
        addr as u64,
        access as c_uint,
    )
}

/// `ibv_reg_mr_iova`.
pub unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    reg_mr("ibv_reg_mr_iova", pd, addr, length, iova, access as c_uint)
}

/// `ibv_reg_mr_iova2` (what `ibv_reg_mr` becomes with a non-constant access).
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    reg_mr("ibv_reg_mr_iova2", pd, addr, length, iova, access)
}

/// `ibv_dereg_mr`.
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    guard("ibv_dereg_mr", libc::EIO, || {
        if mr.is_null() {
            return fail("ibv_dereg_mr", libc::EINVAL, &"NULL MR");
        }
        // SAFETY: NULL or a live object the caller got from this library.
        if unsafe { inherited(mr.cast()) } {
            return 0;
        }
        // SAFETY: the MR came from reg_mr's Box and is freed once; its PD outlives it
        // (dealloc_pd refuses while it is counted).
        let m = unsafe { Box::from_raw(mr.cast::<SoftMr>()) };
        // SAFETY: live PD, as above.
        unsafe { SoftPd::from_ptr(m.mr.pd) }
            .users
            .fetch_sub(1, Ordering::AcqRel);
        drop(m);
        0
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
    guard("ibv_rereg_mr", ERR_CMD, || {
        if mr.is_null() || flags == 0 || flags & !(TRANSLATION | PD | ACCESS) != 0 {
            fail(
                "ibv_rereg_mr",
                libc::EINVAL,
                &"NULL MR, or flags other than TRANSLATION, PD and ACCESS",
            );
            return ERR_INPUT;
        }
        if flags & PD != 0 && pd.is_null() {
            fail(
                "ibv_rereg_mr",
                libc::EINVAL,
                &"IBV_REREG_MR_CHANGE_PD with a NULL PD",
            );
            return ERR_INPUT;
        }
        // SAFETY: the caller's live MR; rdma-core's contract: no other call uses it meanwhile.
        let m = unsafe { &mut *mr.cast::<SoftMr>() };
        let new_pd = if flags & PD != 0 { pd } else { m.mr.pd };
        let (base, len) = if flags & TRANSLATION != 0 {
            (addr, length)
        } else {
            (m.mr.addr, m.mr.length)
        };
        let acc = if flags & ACCESS != 0 {
            match access(access_bits as c_uint) {
                Ok(a) => a,
                Err(why) => {
                    fail("ibv_rereg_mr", libc::EINVAL, &why);
                    return ERR_INPUT;
                }
            }
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
            fail_with("ibv_rereg_mr", &e);
            return ERR_CMD;
        }
        if !std::ptr::eq(old, new) {
            new.users.fetch_add(1, Ordering::AcqRel);
            old.users.fetch_sub(1, Ordering::AcqRel);
        }
        m.mr.pd = new_pd;
        m.mr.addr = base;
        m.mr.length = len;
        0
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
    guard("ibv_advise_mr", libc::EIO, || {
        // PREFETCH, PREFETCH_WRITE, PREFETCH_NO_FAULT; the one flag is FLUSH.
        if pd.is_null() || !(0..=2).contains(&advice) || flags & !1 != 0 || n == 0 || sg.is_null() {
            return fail(
                "ibv_advise_mr",
                libc::EINVAL,
                &"bad PD, advice, flags or SGE list",
            );
        }
        0
    })
}

/// An AH: the public `ibv_ah`, then softrdma's.
#[repr(C)]
pub(crate) struct SoftAh {
    pub ah: ibv_ah,
    pub inner: AddressHandle,
}

impl SoftAh {
    /// # Safety
    /// `ah` must be a live AH this library returned.
    pub(crate) unsafe fn from_ptr<'a>(ah: *mut ibv_ah) -> &'a SoftAh {
        // SAFETY: `ah` is the first field of a live SoftAh.
        unsafe { &*ah.cast::<SoftAh>() }
    }
}

/// The destination GID of an `ibv_ah_attr` for a device on `local`.
///
/// RoCE addresses by GID, so rxe refuses an AH without a GRH (`ib_resolve_eth_dmac`:
/// EINVAL), and programs that exchange only LIDs (qperf) cannot run on it. softrdma does
/// better for IPv4 devices: their port has a LID, the low 16 bits of the address
/// (`softrdma::config::sysfs::port_lid`), and an AH without a GRH reaches the host of that LID in the device's
/// /16. Anything else without a GRH is refused as on rxe.
pub(crate) fn ah_dgid(
    verb: &str,
    attr: &ibv_ah_attr,
    local: std::net::IpAddr,
) -> Result<Ipv6Addr, c_int> {
    if attr.is_global != 0 {
        return Ok(Ipv6Addr::from(attr.grh.dgid.raw));
    }
    match local {
        std::net::IpAddr::V4(a) if attr.dlid != 0 => {
            let ip = (u32::from(a) & 0xffff_0000) | u32::from(attr.dlid);
            Ok(std::net::Ipv4Addr::from(ip).to_ipv6_mapped())
        }
        _ => Err(fail(
            verb,
            libc::EINVAL,
            &"RoCE needs a GRH (is_global = 1 and a destination GID), or a LID of an IPv4 device",
        )),
    }
}

/// The destination GID and the source GID index of an `ibv_ah_attr`: the GRH's, or for a
/// LID-addressed AH (see [`ah_dgid`]) the device address's own GID.
pub(crate) fn ah_path(
    verb: &str,
    attr: &ibv_ah_attr,
    soft: &SoftContext,
) -> Result<(Ipv6Addr, usize), c_int> {
    let addr = soft.ctx.addr();
    let dgid = ah_dgid(verb, attr, addr)?;
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
    guard("ibv_create_ah", null_mut(), || {
        if pd.is_null() || attr.is_null() {
            fail("ibv_create_ah", libc::EINVAL, &"NULL argument");
            return null_mut();
        }
        // SAFETY: NULL or a live object the caller got from this library.
        if unsafe { inherited(pd.cast()) } {
            refuse_inherited("ibv_create_ah");
            return null_mut();
        }
        // SAFETY: the caller's attr.
        let attr = unsafe { &*attr };
        // SAFETY: live PD, and its live context.
        let (spd, soft) = unsafe { (SoftPd::from_ptr(pd), SoftContext::from_ptr((*pd).context)) };
        let Ok((dgid, sgid_index)) = ah_path("ibv_create_ah", attr, soft) else {
            return null_mut();
        };
        match spd.inner.create_ah(dgid, sgid_index) {
            Ok(inner) => {
                let inner = inner.with_traffic_class(attr.grh.traffic_class);
                spd.users.fetch_add(1, Ordering::AcqRel);
                let ah = Box::new(SoftAh {
                    ah: ibv_ah {
                        context: spd.pd.context,
                        pd,
                        handle: next_handle(),
                    },
                    inner,
                });
                Box::into_raw(ah).cast()
            }
            Err(e) => {
                fail_with("ibv_create_ah", &e);
                null_mut()
            }
        }
    })
}

/// `ibv_destroy_ah`.
pub unsafe extern "C" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
    guard("ibv_destroy_ah", libc::EIO, || {
        if ah.is_null() {
            return fail("ibv_destroy_ah", libc::EINVAL, &"NULL AH");
        }
        // SAFETY: NULL or a live object the caller got from this library.
        if unsafe { inherited(ah.cast()) } {
            return 0;
        }
        // SAFETY: from ibv_create_ah's Box, freed once; its PD is alive (counted).
        let a = unsafe { Box::from_raw(ah.cast::<SoftAh>()) };
        // SAFETY: as above.
        unsafe { SoftPd::from_ptr(a.ah.pd) }
            .users
            .fetch_sub(1, Ordering::AcqRel);
        0
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
    guard("ibv_init_ah_from_wc", -1, || {
        if ctx.is_null() || wc.is_null() || grh.is_null() || attr.is_null() {
            fail("ibv_init_ah_from_wc", libc::EINVAL, &"NULL argument");
            return -1;
        }
        // SAFETY: the caller's wc and GRH (the first 40 bytes of the receive buffer).
        let (wc, grh) = unsafe { (&*wc, &*grh) };
        if wc.wc_flags & 1 == 0 {
            fail(
                "ibv_init_ah_from_wc",
                libc::EINVAL,
                &"the completion has no GRH (IBV_WC_GRH)",
            );
            return -1;
        }
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
        0
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
    guard("ibv_create_ah_from_wc", null_mut(), || {
        if pd.is_null() {
            fail("ibv_create_ah_from_wc", libc::EINVAL, &"NULL PD");
            return null_mut();
        }
        let mut attr = ibv_ah_attr::default();
        // SAFETY: live PD; the rest is checked by ibv_init_ah_from_wc.
        let ctx = unsafe { SoftPd::from_ptr(pd) }.pd.context;
        // SAFETY: forwarded.
        if unsafe { ibv_init_ah_from_wc(ctx, port, wc, grh, &mut attr) } != 0 {
            return null_mut();
        }
        // SAFETY: forwarded.
        unsafe { ibv_create_ah(pd, &mut attr) }
    })
}
