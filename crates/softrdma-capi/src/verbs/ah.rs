//! Address handles: `ibv_create_ah`, and the AH attributes that answer a UD receive
//! (`ibv_init_ah_from_wc`, `ibv_create_ah_from_wc`).

use super::context::{SoftContext, own};
use super::objects::{SoftAh, SoftPd, destroy_in_pd, next_handle};
use crate::abi::*;
use crate::ffi::{Failed, Object, Ret, Verb, entry};
use std::ffi::c_int;
use std::net::Ipv6Addr;
use std::ptr::null_mut;

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

/// `ibv_create_ah`.
pub unsafe extern "C" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    entry("ibv_create_ah", Ret::NULL, |v| {
        v.non_null(&[pd.cast(), attr.cast()])?;
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
        // SAFETY: NULL or an AH the caller got from this library (ibv_create_ah's box),
        // counted by its PD.
        unsafe { destroy_in_pd::<SoftAh>(v, ah, |a| a.ah.pd) }
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
        v.non_null(&[ctx.cast(), wc.cast(), grh.cast(), attr.cast()])?;
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
