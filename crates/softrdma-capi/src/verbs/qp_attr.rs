//! A QP's attributes: `ibv_modify_qp` (the `IBV_QP_*` attributes it names, checked by the
//! engine against the transition table) and `ibv_query_qp`, with the conversions of
//! `ibv_qp_attr` both ways that the connection manager's `rdma_init_qp_attr` uses too.

use super::ah::ah_path;
use super::context::{SoftContext, own};
use super::objects::SoftQp;
use crate::abi::*;
use crate::ffi::{Object, Ret, entry};
use softrdma::{AccessFlags, AddressVector, Mtu, Psn, QpAttr, QpState, Qpn};
use std::ffi::c_int;
use std::net::IpAddr;

fn qp_state(s: c_int) -> Option<QpState> {
    Some(match s {
        IBV_QPS_RESET => QpState::Reset,
        IBV_QPS_INIT => QpState::Init,
        IBV_QPS_RTR => QpState::Rtr,
        IBV_QPS_RTS => QpState::Rts,
        IBV_QPS_SQD => QpState::Sqd,
        IBV_QPS_SQE => QpState::Sqe,
        IBV_QPS_ERR => QpState::Error,
        _ => return None,
    })
}

fn mtu(m: c_int) -> Option<Mtu> {
    Some(match m {
        1 => Mtu::M256,
        2 => Mtu::M512,
        3 => Mtu::M1024,
        4 => Mtu::M2048,
        5 => Mtu::M4096,
        _ => return None,
    })
}

/// Writes `o` to the caller's `ibv_qp_attr` up to `rate_limit`, which is not written:
/// programs built against rdma-core 12 and older pass a struct that ends before it, and
/// rdma-core never fills it in a query either.
///
/// # Safety
/// `attr` points to a writable `ibv_qp_attr` of at least that old size.
pub(crate) unsafe fn write_qp_attr(attr: *mut ibv_qp_attr, o: &ibv_qp_attr) {
    let n = std::mem::offset_of!(ibv_qp_attr, rate_limit);
    // SAFETY: `n` bytes of `o` into the caller's struct, which has them (per the contract).
    unsafe {
        std::ptr::copy_nonoverlapping((o as *const ibv_qp_attr).cast::<u8>(), attr.cast::<u8>(), n)
    };
}

/// The local address of GID `index` of the context's table: the device's one address,
/// whichever GID names it (the packets' IP source, which their ICRC covers).
fn gid_addr(soft: &SoftContext, index: usize) -> Option<IpAddr> {
    (index < soft.ctx.gids().len()).then(|| soft.ctx.addr())
}

/// `ibv_modify_qp`: the attributes `mask` names, checked by the engine against the
/// transition table of IBTA 11.2.5.2 (EINVAL for one it does not allow).
pub unsafe extern "C" fn ibv_modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
) -> c_int {
    entry("ibv_modify_qp", Ret::ERRNO, |v| {
        v.non_null(&[qp.cast(), attr.cast()])?;
        // SAFETY: a QP the caller got from this library.
        let q = unsafe { own::<SoftQp>(v, qp) }?;
        // SAFETY: the caller's attr.
        let a = unsafe { &*attr };
        let has = |bit: c_int| mask & bit != 0;
        // The attributes up to IBV_QP_DEST_QPN, and a rate limit of 0 (none).
        let known = (IBV_QP_DEST_QPN << 1) - 1;
        v.ensure(
            mask & !known & !IBV_QP_RATE_LIMIT == 0
                && !(has(IBV_QP_RATE_LIMIT) && a.rate_limit != 0),
            libc::EOPNOTSUPP,
            &format_args!(
                "attr_mask {:#x}: rate limits are not implemented",
                mask as u32
            ),
        )?;
        let bad = |what: &str| v.fail(libc::EINVAL, &format_args!("invalid {what}"));
        // The attributes taken as they are (a PSN or QPN cut to its 24 bits).
        let mut r = QpAttr {
            en_sqd_async_notify: has(IBV_QP_EN_SQD_ASYNC_NOTIFY)
                .then_some(a.en_sqd_async_notify != 0),
            pkey_index: has(IBV_QP_PKEY_INDEX).then_some(a.pkey_index),
            port: has(IBV_QP_PORT).then_some(a.port_num),
            qkey: has(IBV_QP_QKEY).then_some(a.qkey),
            timeout: has(IBV_QP_TIMEOUT).then_some(a.timeout),
            retry_cnt: has(IBV_QP_RETRY_CNT).then_some(a.retry_cnt),
            rnr_retry: has(IBV_QP_RNR_RETRY).then_some(a.rnr_retry),
            rq_psn: has(IBV_QP_RQ_PSN).then_some(Psn::new(a.rq_psn & 0xff_ffff)),
            max_rd_atomic: has(IBV_QP_MAX_QP_RD_ATOMIC).then_some(a.max_rd_atomic),
            min_rnr_timer: has(IBV_QP_MIN_RNR_TIMER).then_some(a.min_rnr_timer),
            sq_psn: has(IBV_QP_SQ_PSN).then_some(Psn::new(a.sq_psn & 0xff_ffff)),
            max_dest_rd_atomic: has(IBV_QP_MAX_DEST_RD_ATOMIC).then_some(a.max_dest_rd_atomic),
            dest_qpn: has(IBV_QP_DEST_QPN).then_some(Qpn::new(a.dest_qp_num & 0xff_ffff)),
            ..QpAttr::default()
        };
        if has(IBV_QP_STATE) {
            r.state = Some(qp_state(a.qp_state).ok_or_else(|| bad("qp_state"))?);
        }
        if has(IBV_QP_CUR_STATE) {
            r.cur_state = Some(qp_state(a.cur_qp_state).ok_or_else(|| bad("cur_qp_state"))?);
        }
        if has(IBV_QP_ACCESS_FLAGS) {
            let f = AccessFlags::from_bits(a.qp_access_flags & 0xf);
            r.access_flags = Some(f.ok_or_else(|| bad("qp_access_flags"))?);
        }
        if has(IBV_QP_AV) {
            // SAFETY: the QP's live context.
            let soft = unsafe { SoftContext::from_ptr(q.qp.qp_base.context) };
            let (dgid, sgid_index) = ah_path(v, &a.ah_attr, soft)?;
            let src = gid_addr(soft, sgid_index).ok_or_else(|| bad("ah_attr.grh.sgid_index"))?;
            r.av = Some(AddressVector {
                src,
                dst: soft.ctx.gid_addr(dgid),
                flow_label: a.ah_attr.grh.flow_label & 0xf_ffff,
                traffic_class: a.ah_attr.grh.traffic_class,
            });
        }
        if has(IBV_QP_PATH_MTU) {
            r.path_mtu = Some(mtu(a.path_mtu).ok_or_else(|| bad("path_mtu"))?);
        }
        v.ensure(
            !has(IBV_QP_ALT_PATH) && !has(IBV_QP_PATH_MIG_STATE),
            libc::EINVAL,
            &"alternate paths and path migration are not supported on RoCE",
        )?;
        if has(IBV_QP_CAP) {
            return Err(bad("IBV_QP_CAP (the caps are fixed at creation)"));
        }
        v.check(q.inner.modify(&r))?;
        if let Some(s) = r.state {
            // SAFETY: the caller's live QP; `state` is the field callers read.
            unsafe { (*qp).state = s as c_int };
        }
        Ok(0)
    })
}

/// `ibv_query_qp`: every attribute in force (whatever `mask` asks), and the creation
/// attributes.
pub unsafe extern "C" fn ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
    init: *mut ibv_qp_init_attr,
) -> c_int {
    entry("ibv_query_qp", Ret::ERRNO, |v| {
        v.non_null(&[qp.cast(), attr.cast(), init.cast()])?;
        // As rdma-core's ibv_cmd_query_qp: IBV_QP_RATE_LIMIT and later bits cannot be
        // queried (their fields may lie past the caller's struct).
        v.ensure(
            mask & !(IBV_QP_RATE_LIMIT - 1) == 0,
            libc::EOPNOTSUPP,
            &format_args!("attr_mask {mask:#x} asks for IBV_QP_RATE_LIMIT or later"),
        )?;
        // SAFETY: live QP.
        let q = unsafe { SoftQp::from_ptr(qp) };
        let b = &q.qp.qp_base;
        // SAFETY: live context.
        let soft = unsafe { SoftContext::from_ptr(b.context) };
        let r = q.inner.query();
        let (mut o, _) = to_ibv_qp_attr(&r, soft);
        o.cap = q.caps;
        // SAFETY: the caller's writable structs.
        unsafe {
            write_qp_attr(attr, &o);
            let i = &mut *init;
            i.qp_context = b.qp_context;
            i.send_cq = b.send_cq;
            i.recv_cq = b.recv_cq;
            i.srq = b.srq;
            i.cap = q.caps;
            i.qp_type = b.qp_type;
            i.sq_sig_all = c_int::from(q.sq_sig_all);
        }
        Ok(0)
    })
}

/// `attr` as C's `ibv_qp_attr`, with the `IBV_QP_*` mask of the attributes it sets
/// (unset ones read as their defaults: the state RESET, the device's MTU, port 1); the
/// kernel backend's conversion, with this device's GID table.
pub(crate) fn to_ibv_qp_attr(r: &QpAttr, soft: &SoftContext) -> (ibv_qp_attr, c_int) {
    softrdma::kernel::convert::to_ibv_qp_attr(r, soft.ctx.active_mtu(), |ip| soft.gid_index(ip))
}
