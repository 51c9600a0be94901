//! The `ibv_wr_*` builders of an extended QP (`ibv_qp_ex`): each appends to or edits the
//! QP's batch, which `ibv_wr_complete` posts as one chain.

use super::context::own;
use super::objects::{SoftAh, SoftQp};
use super::post::{inline, sges};
use crate::abi::*;
use crate::ffi::{Object, Ret, entry};
use softrdma::{Payload, Qpn, SendFlags, SendOp, SendWr, Sge};
use std::ffi::{c_int, c_void};

// The `ibv_wr_*` builders of an extended QP. Each appends to or edits the QP's batch;
// `ibv_wr_complete` posts the batch as one chain.

fn qpx<'a>(qp: *mut ibv_qp_ex) -> &'a SoftQp {
    // SAFETY: the builders are called on a live QP of ours.
    unsafe { SoftQp::from_ptr(qp.cast()) }
}

fn push(qp: *mut ibv_qp_ex, op: SendOp) {
    entry("ibv_wr_*", Ret::VOID, |_| {
        let q = qpx(qp);
        let wr = SendWr {
            wr_id: q.qp.wr_id,
            op,
            payload: Payload::Sges(softrdma::sg![]),
            flags: SendFlags::from_bits_truncate(q.qp.wr_flags & 0xf),
            ud: None,
        };
        q.batch.lock().0.push(wr);
        Ok(())
    })
}

fn edit(qp: *mut ibv_qp_ex, f: impl FnOnce(&mut SendWr)) {
    entry("ibv_wr_set_*", Ret::VOID, |_| {
        let mut b = qpx(qp).batch.lock();
        let (wrs, err) = &mut *b;
        match wrs.last_mut() {
            Some(w) => f(w),
            None => *err = libc::EINVAL,
        }
        Ok(())
    })
}

unsafe extern "C" fn wr_start(qp: *mut ibv_qp_ex) {
    entry("ibv_wr_start", Ret::VOID, |_| {
        *qpx(qp).batch.lock() = (Vec::new(), 0);
        Ok(())
    })
}

unsafe extern "C" fn wr_complete(qp: *mut ibv_qp_ex) -> c_int {
    entry("ibv_wr_complete", Ret::ERRNO, |v| {
        // SAFETY: a QP the caller got from this library.
        let q = unsafe { own::<SoftQp>(v, qp.cast()) }?;
        let (wrs, err) = std::mem::take(&mut *q.batch.lock());
        v.ensure(err == 0, err, &"a builder call had no WR to apply to")?;
        q.inner.post_send_list(wrs).map_err(|(_, e)| v.error(&e))?;
        Ok(0)
    })
}

unsafe extern "C" fn wr_abort(qp: *mut ibv_qp_ex) {
    // SAFETY: forwarded.
    unsafe { wr_start(qp) }
}

unsafe extern "C" fn wr_send(qp: *mut ibv_qp_ex) {
    push(qp, SendOp::Send)
}
unsafe extern "C" fn wr_send_imm(qp: *mut ibv_qp_ex, imm: u32) {
    push(qp, SendOp::SendWithImm(u32::from_be(imm)))
}
unsafe extern "C" fn wr_send_inv(qp: *mut ibv_qp_ex, rkey: u32) {
    push(qp, SendOp::SendWithInv(rkey))
}
unsafe extern "C" fn wr_rdma_write(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    push(qp, SendOp::Write { remote_addr, rkey })
}
unsafe extern "C" fn wr_rdma_write_imm(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, imm: u32) {
    push(
        qp,
        SendOp::WriteWithImm {
            remote_addr,
            rkey,
            imm: u32::from_be(imm),
        },
    )
}
unsafe extern "C" fn wr_rdma_read(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    push(qp, SendOp::Read { remote_addr, rkey })
}
unsafe extern "C" fn wr_atomic_cmp_swp(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    compare: u64,
    swap: u64,
) {
    push(
        qp,
        SendOp::CompareSwap {
            remote_addr,
            rkey,
            compare,
            swap,
        },
    )
}
unsafe extern "C" fn wr_atomic_fetch_add(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    add: u64,
) {
    push(
        qp,
        SendOp::FetchAdd {
            remote_addr,
            rkey,
            add,
        },
    )
}
unsafe extern "C" fn wr_set_sge(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    edit(qp, |w| {
        w.payload = Payload::Sges(softrdma::sg![Sge { addr, length, lkey }])
    })
}
/// Fails the batch being built (its `ibv_wr_complete` returns EINVAL).
fn refuse_in_batch(qp: *mut ibv_qp_ex) {
    entry("ibv_wr_set_*", Ret::VOID, |_| {
        qpx(qp).batch.lock().1 = libc::EINVAL;
        Ok(())
    })
}
unsafe extern "C" fn wr_set_sge_list(qp: *mut ibv_qp_ex, n: usize, list: *const ibv_sge) {
    let max = qpx(qp).caps.max_send_sge;
    // SAFETY: the caller's `n` SGEs.
    match unsafe { sges(list, n.min(c_int::MAX as usize) as c_int, max) } {
        Ok(s) => edit(qp, |w| w.payload = Payload::Sges(s)),
        Err(_) => refuse_in_batch(qp),
    }
}
unsafe extern "C" fn wr_set_inline_data(qp: *mut ibv_qp_ex, addr: *mut c_void, length: usize) {
    let s = [Sge {
        addr: addr as u64,
        length: length.min(u32::MAX as usize) as u32,
        lkey: 0,
    }];
    let max = if length > u32::MAX as usize {
        0
    } else {
        qpx(qp).caps.max_inline_data
    };
    // SAFETY: the caller's `length` bytes at `addr`, read now as the API says.
    match unsafe { inline(&s, max) } {
        Ok(data) => edit(qp, |w| w.payload = Payload::Inline(data)),
        Err(_) => refuse_in_batch(qp),
    }
}
unsafe extern "C" fn wr_set_inline_data_list(
    qp: *mut ibv_qp_ex,
    n: usize,
    list: *const ibv_data_buf,
) {
    let caps = qpx(qp).caps;
    // No more buffers than a WR has SGEs, checked before the list is read.
    if n > caps.max_send_sge as usize || (n > 0 && list.is_null()) {
        return refuse_in_batch(qp);
    }
    let bufs = if n == 0 {
        &[][..]
    } else {
        // SAFETY: the caller's `n` buffers.
        unsafe { std::slice::from_raw_parts(list, n) }
    };
    let s: softrdma::SgList = bufs
        .iter()
        .map(|b| Sge {
            addr: b.addr as u64,
            length: b.length.min(u32::MAX as usize) as u32,
            lkey: 0,
        })
        .collect();
    let too_long = bufs.iter().any(|b| b.length > u32::MAX as usize);
    let max = if too_long { 0 } else { caps.max_inline_data };
    // SAFETY: the caller's buffers, read now.
    match unsafe { inline(&s, max) } {
        Ok(data) => edit(qp, |w| w.payload = Payload::Inline(data)),
        Err(_) => refuse_in_batch(qp),
    }
}
unsafe extern "C" fn wr_set_ud_addr(qp: *mut ibv_qp_ex, ah: *mut ibv_ah, qpn: u32, qkey: u32) {
    if ah.is_null() {
        edit(qp, |_| {});
        return;
    }
    // SAFETY: a live AH of the caller's.
    let dest = unsafe { SoftAh::from_ptr(ah) }
        .inner
        .dest(Qpn::new(qpn & 0xff_ffff), qkey);
    edit(qp, |w| w.ud = Some(dest))
}

pub(super) fn set_builders(q: &mut ibv_qp_ex) {
    q.wr_start = Some(wr_start);
    q.wr_complete = Some(wr_complete);
    q.wr_abort = Some(wr_abort);
    q.wr_send = Some(wr_send);
    q.wr_send_imm = Some(wr_send_imm);
    q.wr_send_inv = Some(wr_send_inv);
    q.wr_rdma_write = Some(wr_rdma_write);
    q.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    q.wr_rdma_read = Some(wr_rdma_read);
    q.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    q.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    q.wr_set_sge = Some(wr_set_sge);
    q.wr_set_sge_list = Some(wr_set_sge_list);
    q.wr_set_inline_data = Some(wr_set_inline_data);
    q.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    q.wr_set_ud_addr = Some(wr_set_ud_addr);
}
