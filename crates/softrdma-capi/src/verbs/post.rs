//! The post verbs (`ctx->ops.post_send`, `post_recv` and `post_srq_recv`).
//!
//! `ibv_post_send` turns each `ibv_send_wr` into a [`SendWr`] and hands the chain to the
//! Rust QP in one call (one QP lock, one engine pass, as few system calls as the kernel
//! allows); the SGEs name the application's registered memory, which the device reads when
//! each packet is built. An `IBV_SEND_INLINE` payload is copied at post time, as on a NIC.

use super::context::{OfContext, own};
use super::objects::{SoftAh, SoftQp, SoftSrq};
use crate::abi::*;
use crate::ffi::{Failed, Object, Ret, Verb, entry};
use softrdma::{Payload, Qpn, RecvWr, SendFlags, SendOp, SendWr, Sge};
use std::ffi::c_int;

/// The SGEs of a WR.
///
/// # Safety
/// `sg` must point at `n` SGEs (or `n` is 0).
pub(super) unsafe fn sges(
    sg: *const ibv_sge,
    n: c_int,
    max: u32,
) -> Result<softrdma::SgList, c_int> {
    // Checked before the list is read: a count past the queue's limit (garbage, or a
    // program's bug) must not make this read past the caller's array.
    if n < 0 || n as u32 > max || (n > 0 && sg.is_null()) {
        return Err(libc::EINVAL);
    }
    if n == 0 {
        return Ok(softrdma::SgList::new());
    }
    // SAFETY: per the contract.
    let s = unsafe { std::slice::from_raw_parts(sg, n as usize) };
    Ok(s.iter()
        .map(|e| Sge {
            addr: e.addr,
            length: e.length,
            lkey: e.lkey,
        })
        .collect())
}

/// The bytes an inline send carries, copied from the SGEs' addresses (whose keys an
/// inline send does not need).
///
/// # Safety
/// Each SGE must name `length` readable bytes at `addr`.
pub(super) unsafe fn inline(s: &[Sge], max: u32) -> Result<Vec<u8>, c_int> {
    // The length is checked before anything is read or allocated, as rxe and mlx5 check
    // it against the QP's max_inline_data.
    let total: u64 = s.iter().map(|e| u64::from(e.length)).sum();
    if total > u64::from(max) {
        return Err(libc::EINVAL);
    }
    let mut v = Vec::with_capacity(total as usize);
    // An empty SGE may have a NULL address (UCX posts them), which no slice may have.
    for e in s.iter().filter(|e| e.length > 0) {
        // SAFETY: per the contract (the C API's: an inline send reads the caller's memory
        // during the post).
        v.extend_from_slice(unsafe {
            std::slice::from_raw_parts(e.addr as *const u8, e.length as usize)
        });
    }
    Ok(v)
}

/// The [`SendWr`] of an `ibv_send_wr`.
///
/// # Safety
/// `w` and what it points at must be valid, as the C API requires.
unsafe fn send_wr(q: &SoftQp, w: &ibv_send_wr) -> Result<SendWr, c_int> {
    // SAFETY: per the contract.
    let s = unsafe { sges(w.sg_list, w.num_sge, q.caps.max_send_sge) }?;
    let flags = SendFlags::from_bits_truncate(w.send_flags & 0xf);
    // SAFETY: the union member the opcode names.
    let (rdma, atomic) = unsafe { (w.wr.rdma, w.wr.atomic) };
    let imm = u32::from_be(w.imm_data);
    let op = match w.opcode {
        IBV_WR_RDMA_WRITE => SendOp::Write {
            remote_addr: rdma.remote_addr,
            rkey: rdma.rkey,
        },
        IBV_WR_RDMA_WRITE_WITH_IMM => SendOp::WriteWithImm {
            remote_addr: rdma.remote_addr,
            rkey: rdma.rkey,
            imm,
        },
        IBV_WR_SEND => SendOp::Send,
        IBV_WR_SEND_WITH_IMM => SendOp::SendWithImm(imm),
        IBV_WR_RDMA_READ => SendOp::Read {
            remote_addr: rdma.remote_addr,
            rkey: rdma.rkey,
        },
        IBV_WR_ATOMIC_CMP_AND_SWP => SendOp::CompareSwap {
            remote_addr: atomic.remote_addr,
            rkey: atomic.rkey,
            compare: atomic.compare_add,
            swap: atomic.swap,
        },
        IBV_WR_ATOMIC_FETCH_AND_ADD => SendOp::FetchAdd {
            remote_addr: atomic.remote_addr,
            rkey: atomic.rkey,
            add: atomic.compare_add,
        },
        IBV_WR_SEND_WITH_INV => SendOp::SendWithInv(w.imm_data),
        _ => return Err(libc::EINVAL),
    };
    let payload = if flags.contains(SendFlags::INLINE) && !op.is_read_or_atomic() {
        // SAFETY: per the contract.
        Payload::Inline(unsafe { inline(&s, q.caps.max_inline_data) }?)
    } else {
        Payload::Sges(s)
    };
    let ud = if q.qp.qp_base.qp_type == IBV_QPT_UD {
        // SAFETY: the UD member, for a UD QP.
        let ud = unsafe { w.wr.ud };
        if ud.ah.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: a live AH of the caller's.
        let ah = unsafe { SoftAh::from_ptr(ud.ah) };
        Some(
            ah.inner
                .dest(Qpn::new(ud.remote_qpn & 0xff_ffff), ud.remote_qkey),
        )
    } else {
        None
    };
    Ok(SendWr {
        wr_id: w.wr_id,
        op,
        payload,
        flags,
        ud,
    })
}

/// Names the WR a post stopped at in the caller's `bad`, if it gave one.
///
/// # Safety
/// `bad` is NULL or the caller's writable out-pointer.
unsafe fn set_bad<W>(bad: *mut *mut W, wr: *mut W) {
    if !bad.is_null() {
        // SAFETY: per the contract.
        unsafe { *bad = wr };
    }
}

/// The QP or SRQ a post is on ([`own`]): a parent's in a forked child is refused, `bad`
/// naming the first WR.
///
/// # Safety
/// `p` is a live object of this library; `bad` NULL or the caller's writable out-pointer.
unsafe fn poster<'a, O: OfContext, W>(
    v: Verb,
    p: *mut O::C,
    wr: *mut W,
    bad: *mut *mut W,
) -> Result<&'a O, Failed> {
    // SAFETY: per the contract.
    match unsafe { own::<O>(v, p) } {
        Ok(o) => Ok(o),
        Err(f) => {
            // SAFETY: per the contract.
            unsafe { set_bad(bad, wr) };
            Err(f)
        }
    }
}

/// `ctx->ops.post_send` (`ibv_post_send`).
pub(crate) unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> c_int {
    entry("ibv_post_send", Ret::ERRNO, |v| {
        // SAFETY: a QP the caller got from this library, and its out-pointer.
        let q = unsafe { poster::<SoftQp, _>(v, qp, wr, bad) }?;
        if wr.is_null() {
            return Ok(0);
        }
        // SAFETY: the caller's WR.
        let first = unsafe { &*wr };
        if first.next.is_null() {
            // The common case, one WR: no list.
            // SAFETY: the caller's WR, as the C API requires.
            let r = unsafe { send_wr(q, first) }
                .and_then(|w| v.check(q.inner.post_send(w)).map_err(Failed::errno));
            if let Err(errno) = r {
                // SAFETY: the caller's out-pointer.
                unsafe { set_bad(bad, wr) };
                return v.err(errno, &"WR refused");
            }
            return Ok(0);
        }
        let mut ptrs = Vec::new();
        let mut wrs = Vec::new();
        let mut broken = None;
        let mut p = wr;
        while !p.is_null() {
            // SAFETY: the caller's chain.
            let w = unsafe { &*p };
            // SAFETY: as the C API requires.
            match unsafe { send_wr(q, w) } {
                Ok(s) => {
                    wrs.push(s);
                    ptrs.push(p);
                }
                Err(errno) => {
                    broken = Some((p, errno));
                    break;
                }
            }
            p = w.next;
        }
        if let Err((i, e)) = q.inner.post_send_list(wrs) {
            // SAFETY: the caller's out-pointer.
            unsafe { set_bad(bad, ptrs[i]) };
            return Err(v.error(&e));
        }
        match broken {
            Some((p, errno)) => {
                // SAFETY: the caller's out-pointer.
                unsafe { set_bad(bad, p) };
                v.err(errno, &"WR refused (opcode, SGEs or AH)")
            }
            None => Ok(0),
        }
    })
}

/// The [`RecvWr`]s of a chain, each handed to `post` in order; the first failure sets
/// `bad`.
///
/// # Safety
/// The chain must be valid, as the C API requires.
unsafe fn post_recv_chain(
    v: Verb,
    max_sge: u32,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
    post: impl Fn(RecvWr) -> softrdma::Result<()>,
) -> Result<c_int, Failed> {
    let mut p = wr;
    while !p.is_null() {
        // SAFETY: per the contract.
        let w = unsafe { &*p };
        // SAFETY: per the contract.
        let r = match unsafe { sges(w.sg_list, w.num_sge, max_sge) } {
            Ok(s) => v.check(post(RecvWr {
                wr_id: w.wr_id,
                sg_list: s,
            })),
            Err(errno) => v.err(errno, &"bad sg_list"),
        };
        if let Err(f) = r {
            // SAFETY: the caller's out-pointer.
            unsafe { set_bad(bad, p) };
            return Err(f);
        }
        p = w.next;
    }
    Ok(0)
}

/// `ctx->ops.post_recv` (`ibv_post_recv`).
pub(crate) unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    entry("ibv_post_recv", Ret::ERRNO, |v| {
        // SAFETY: a QP the caller got from this library, and its out-pointer.
        let q = unsafe { poster::<SoftQp, _>(v, qp, wr, bad) }?;
        // SAFETY: as the C API requires.
        unsafe { post_recv_chain(v, q.caps.max_recv_sge, wr, bad, |w| q.inner.post_recv(w)) }
    })
}

/// `ctx->ops.post_srq_recv` (`ibv_post_srq_recv`).
pub(crate) unsafe extern "C" fn post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    entry("ibv_post_srq_recv", Ret::ERRNO, |v| {
        // SAFETY: an SRQ the caller got from this library, and its out-pointer.
        let s = unsafe { poster::<SoftSrq, _>(v, srq, wr, bad) }?;
        let max = s.attr.lock().max_sge;
        // SAFETY: as the C API requires.
        unsafe { post_recv_chain(v, max, wr, bad, |w| s.inner.post_recv(w)) }
    })
}
