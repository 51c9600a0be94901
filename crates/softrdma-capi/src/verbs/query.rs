//! The queries of a context: the device's and port's attributes, the GID table (RoCE v2
//! GIDs, as rxe's) and the one P_Key.

use super::context::SoftContext;
use super::cq::clock;
use crate::abi::*;
use crate::ffi::{Object, Ret, copy_cstr, entry};
use std::ffi::{c_int, c_void};

fn fill_device_attr(soft: &SoftContext, out: &mut ibv_device_attr) {
    let a = soft.ctx.query_device();
    // SAFETY: plain data, all-zero valid.
    *out = unsafe { std::mem::zeroed() };
    copy_cstr(&mut out.fw_ver, &a.fw_ver);
    out.node_guid = a.node_guid.to_be();
    out.sys_image_guid = a.sys_image_guid.to_be();
    out.max_mr_size = a.max_mr_size;
    out.page_size_cap = a.page_size_cap;
    out.vendor_id = a.vendor_id;
    out.vendor_part_id = a.vendor_part_id;
    out.hw_ver = a.hw_ver;
    out.device_cap_flags = DEVICE_CAP_FLAGS;
    out.atomic_cap = 1; // IBV_ATOMIC_HCA
    // The counts, which C has as ints: clamped to the largest int.
    macro_rules! ints {
        ($($f:ident)*) => { $(out.$f = a.$f.min(i32::MAX as u32) as c_int;)* };
    }
    ints!(
        max_qp max_qp_wr max_sge max_sge_rd max_cq max_cqe max_mr max_pd max_qp_rd_atom
        max_res_rd_atom max_qp_init_rd_atom max_ah max_mcast_grp max_mcast_qp_attach
        max_total_mcast_qp_attach max_srq max_srq_wr max_srq_sge
    );
    out.max_pkeys = a.max_pkeys as u16;
    out.local_ca_ack_delay = a.local_ca_ack_delay as u8;
    out.phys_port_cnt = a.phys_port_cnt;
}

/// The `device_cap_flags` softrdma has: bad P_Key and Q_Key counters (1, 2), a system
/// image GUID (11), RNR NAK generation (12) and port-active events (10). Not memory
/// windows, path migration or SRQ resizing, which it does not implement.
const DEVICE_CAP_FLAGS: u32 = (1 << 1) | (1 << 2) | (1 << 10) | (1 << 11) | (1 << 12);

/// `ibv_query_device`.
pub unsafe extern "C" fn ibv_query_device(
    ctx: *mut ibv_context,
    attr: *mut ibv_device_attr,
) -> c_int {
    entry("ibv_query_device", Ret::ERRNO, |v| {
        v.non_null(&[ctx.cast(), attr.cast()])?;
        // SAFETY: live context; `attr` is the caller's writable struct.
        unsafe { fill_device_attr(SoftContext::from_ptr(ctx), &mut *attr) };
        Ok(0)
    })
}

/// `verbs_context.query_device_ex`: the legacy attributes and zeroed extensions, written
/// up to `attr_size` bytes (callers built against older headers pass less).
pub(super) unsafe extern "C" fn query_device_ex(
    ctx: *mut ibv_context,
    _input: *const c_void,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    entry("ibv_query_device_ex", Ret::ERRNO, |v| {
        v.ensure(
            !ctx.is_null() && !attr.is_null() && attr_size >= size_of::<ibv_device_attr>(),
            libc::EINVAL,
            &"attr_size below ibv_device_attr",
        )?;
        // SAFETY: plain data, all-zero valid.
        let mut ex: ibv_device_attr_ex = unsafe { std::mem::zeroed() };
        // SAFETY: live context.
        fill_device_attr(unsafe { SoftContext::from_ptr(ctx) }, &mut ex.orig_attr);
        // Completion timestamps count nanoseconds of CLOCK_MONOTONIC: a 1 GHz clock.
        ex.completion_timestamp_mask = u64::MAX;
        ex.hca_core_clock = 1_000_000;
        ex.phys_port_cnt_ex = 1;
        // On-demand paging: nothing is pinned, every region is reached on demand (pages
        // fault in when the device touches them, as with ODP). Not implicit ODP (a region
        // of the whole address space), and not for XRC, which softrdma has not.
        ex.odp_general_caps = 1; // IBV_ODP_SUPPORT
        // SEND 1, RECV 2, WRITE 4, READ 8, ATOMIC 16, SRQ_RECV 32.
        ex.odp_rc_caps = 0x3f;
        ex.odp_uc_caps = 0x27;
        ex.odp_ud_caps = 0x23;
        let n = attr_size.min(size_of::<ibv_device_attr_ex>());
        // SAFETY: the caller's struct has `attr_size` writable bytes; zero what we do not know.
        unsafe {
            std::ptr::write_bytes(attr.cast::<u8>(), 0, attr_size);
            std::ptr::copy_nonoverlapping((&raw const ex).cast::<u8>(), attr.cast::<u8>(), n);
        }
        Ok(0)
    })
}

/// `verbs_context.query_rt_values` (`ibv_query_rt_values_ex`): the completion clock now.
pub(super) unsafe extern "C" fn query_rt_values(
    ctx: *mut ibv_context,
    values: *mut ibv_values_ex,
) -> c_int {
    entry("ibv_query_rt_values_ex", Ret::ERRNO, |v| {
        v.non_null(&[ctx.cast(), values.cast()])?;
        // SAFETY: the caller's struct.
        let values = unsafe { &mut *values };
        // Only IBV_VALUES_MASK_RAW_CLOCK exists.
        v.ensure(
            values.comp_mask & !1 == 0,
            libc::EOPNOTSUPP,
            &"comp_mask beyond RAW_CLOCK",
        )?;
        values.comp_mask = 1;
        values.raw_clock = clock(libc::CLOCK_MONOTONIC);
        Ok(0)
    })
}

fn port_attr(soft: &SoftContext) -> ibv_port_attr {
    let p = soft.ctx.query_port();
    let a = soft.ctx.query_device();
    ibv_port_attr {
        state: 4, // IBV_PORT_ACTIVE
        max_mtu: p.max_mtu as c_int,
        active_mtu: p.active_mtu as c_int,
        gid_tbl_len: p.gid_tbl_len as c_int,
        // What rxe reports: CM supported (16), IP-based GIDs (26).
        port_cap_flags: (1 << 16) | (1 << 26),
        max_msg_sz: a.max_msg_sz.min(u64::from(u32::MAX)) as u32,
        pkey_tbl_len: 1,
        lid: softrdma::config::sysfs::port_lid(soft.ctx.addr()),
        sm_lid: p.sm_lid,
        max_vl_num: 1,
        active_width: 1, // 1X
        active_speed: 1, // 2.5 Gbps, as rxe on a link that reports no speed
        phys_state: 5,   // LinkUp
        link_layer: 2,   // IBV_LINK_LAYER_ETHERNET
        ..Default::default()
    }
}

/// `verbs_context.query_port`: `len` bytes of `ibv_port_attr`.
pub(super) unsafe extern "C" fn query_port_ex(
    ctx: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
    len: usize,
) -> c_int {
    entry("ibv_query_port", Ret::ERRNO, |v| {
        v.non_null(&[ctx.cast(), attr.cast()])?;
        v.ensure(
            port == 1,
            libc::EINVAL,
            &format_args!("port {port}: the device has port 1 only"),
        )?;
        // SAFETY: live context.
        let a = port_attr(unsafe { SoftContext::from_ptr(ctx) });
        let n = len.min(size_of::<ibv_port_attr>());
        // SAFETY: the caller's struct has `len` writable bytes.
        unsafe { std::ptr::copy_nonoverlapping((&raw const a).cast::<u8>(), attr.cast::<u8>(), n) };
        Ok(0)
    })
}

/// `ibv_query_port`, the exported symbol: callers of rdma-core's compat path get 48 bytes
/// (`struct _compat_ibv_port_attr`, without `port_cap_flags2`).
pub unsafe extern "C" fn ibv_query_port(
    ctx: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
) -> c_int {
    // SAFETY: forwarded.
    unsafe { query_port_ex(ctx, port, attr, 48) }
}

/// The GIDs of port 1, with their types (`enum ibv_gid_type`: 2 = RoCE v2; rxe has only
/// RoCE v2 GIDs).
fn gids(soft: &SoftContext) -> Vec<ibv_gid_entry> {
    let ifindex = soft
        .dev
        .info
        .netdev
        .as_deref()
        .and_then(|n| std::ffi::CString::new(n).ok())
        // SAFETY: a valid NUL-terminated name.
        .map_or(0, |n| unsafe { libc::if_nametoindex(n.as_ptr()) });
    soft.ctx
        .gids()
        .iter()
        .enumerate()
        .map(|(i, g)| ibv_gid_entry {
            gid: ibv_gid { raw: g.octets() },
            gid_index: i as u32,
            port_num: 1,
            gid_type: 2,
            ndev_ifindex: ifindex,
        })
        .collect()
}

/// `ibv_query_gid`. An index inside the table but past the configured GIDs reads as zero,
/// as an empty slot of rxe's.
pub unsafe extern "C" fn ibv_query_gid(
    ctx: *mut ibv_context,
    port: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    entry("ibv_query_gid", Ret::MINUS_ONE, |v| {
        v.ensure(
            !ctx.is_null() && !gid.is_null() && port == 1,
            libc::EINVAL,
            &"NULL argument or port other than 1",
        )?;
        // SAFETY: live context.
        let soft = unsafe { SoftContext::from_ptr(ctx) };
        let len = soft.ctx.query_port().gid_tbl_len as c_int;
        v.ensure(
            (0..len).contains(&index),
            libc::EINVAL,
            &format_args!("GID index {index} outside 0..{len}"),
        )?;
        let g = gids(soft)
            .get(index as usize)
            .map(|e| e.gid)
            .unwrap_or_default();
        // SAFETY: the caller's writable gid.
        unsafe { *gid = g };
        Ok(0)
    })
}

/// `_ibv_query_gid_ex` (behind `ibv_query_gid_ex`): ENODATA for an empty slot.
pub unsafe extern "C" fn _ibv_query_gid_ex(
    ctx: *mut ibv_context,
    port: u32,
    index: u32,
    out: *mut ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    entry("ibv_query_gid_ex", Ret::ERRNO, |v| {
        v.ensure(
            !ctx.is_null()
                && !out.is_null()
                && flags == 0
                && entry_size >= size_of::<ibv_gid_entry>(),
            libc::EINVAL,
            &"NULL argument, flags or entry_size",
        )?;
        v.ensure(port == 1, libc::EINVAL, &"port other than 1")?;
        // SAFETY: live context.
        let soft = unsafe { SoftContext::from_ptr(ctx) };
        let Some(e) = gids(soft).get(index as usize).copied() else {
            return v.err(libc::ENODATA, &format_args!("GID index {index} is empty"));
        };
        // SAFETY: the caller's writable entry.
        unsafe { *out = e };
        Ok(0)
    })
}

/// `_ibv_query_gid_table` (behind `ibv_query_gid_table`): the valid entries, or a negative
/// errno.
pub unsafe extern "C" fn _ibv_query_gid_table(
    ctx: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max_entries: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    let ret = Ret::new(|e| -(e as isize), -1);
    entry("ibv_query_gid_table", ret, |v| {
        v.ensure(
            !ctx.is_null() && flags == 0 && entry_size >= size_of::<ibv_gid_entry>(),
            libc::EINVAL,
            &"NULL context, flags or entry_size",
        )?;
        // SAFETY: live context.
        let g = gids(unsafe { SoftContext::from_ptr(ctx) });
        v.ensure(
            g.len() <= max_entries && (g.is_empty() || !entries.is_null()),
            libc::EINVAL,
            &"max_entries below the table, or no entries array",
        )?;
        for (i, e) in g.iter().enumerate() {
            // SAFETY: the caller's array holds `max_entries` entries of `entry_size` bytes.
            unsafe { *entries.byte_add(i * entry_size) = *e };
        }
        Ok(g.len() as isize)
    })
}

/// `ibv_query_gid_type` (IBVERBS_PRIVATE_34, used by `ibv_devinfo`): the sysfs type,
/// 1 = RoCE v2.
pub unsafe extern "C" fn ibv_query_gid_type(
    ctx: *mut ibv_context,
    port: u8,
    index: u32,
    ty: *mut c_int,
) -> c_int {
    entry("ibv_query_gid_type", Ret::MINUS_ONE, |v| {
        if ctx.is_null() || ty.is_null() || port != 1 {
            return Err(v.quiet(libc::EINVAL));
        }
        // SAFETY: live context.
        let n = gids(unsafe { SoftContext::from_ptr(ctx) }).len();
        if index as usize >= n {
            return Err(v.quiet(libc::EINVAL));
        }
        // SAFETY: the caller's writable int.
        unsafe { *ty = 1 };
        Ok(0)
    })
}

/// `ibv_query_pkey`: the one P_Key, 0xFFFF (network order, the same bytes).
pub unsafe extern "C" fn ibv_query_pkey(
    ctx: *mut ibv_context,
    port: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    entry("ibv_query_pkey", Ret::MINUS_ONE, |v| {
        v.ensure(
            !ctx.is_null() && !pkey.is_null() && port == 1 && index == 0,
            libc::EINVAL,
            &"port 1 has one P_Key, at index 0",
        )?;
        // SAFETY: the caller's writable u16.
        unsafe { *pkey = 0xffff };
        Ok(0)
    })
}

/// `ibv_get_pkey_index`.
pub unsafe extern "C" fn ibv_get_pkey_index(ctx: *mut ibv_context, port: u8, pkey: u16) -> c_int {
    entry("ibv_get_pkey_index", Ret::MINUS_ONE, |v| {
        if ctx.is_null() || port != 1 || u16::from_be(pkey) & 0x7fff != 0x7fff {
            return Err(v.quiet(libc::ENOENT));
        }
        Ok(0)
    })
}
