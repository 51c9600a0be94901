//! The endpoint's data operations: messages (`fi_ops_msg`) and tagged messages
//! (`fi_ops_tagged`), each form (plain, vectored with one element, `*msg` with flags,
//! inject, with remote CQ data) brought to one send and one receive of the fabric layer,
//! on the caller's memory.
//!
//! A send reports a completion unless it is an inject, or its endpoint's CQ was bound
//! with `FI_SELECTIVE_COMPLETION` and it lacks `FI_COMPLETION`. An inject is copied before
//! the call returns, so its size is capped at the inject size. A receive names its source
//! only on an endpoint with `FI_DIRECTED_RECV`.

use crate::abi::*;
use crate::entry::{self, Errno, guard, one_iov};
use crate::ep::{Ep, Live};
use softrdma_fabric::{Buf, SendOpts};
use std::ffi::c_void;

/// What a send or receive is, apart from its memory.
#[derive(Clone, Copy)]
struct Op {
    addr: fi_addr_t,
    context: *mut c_void,
    tag: Option<(u64, u64)>,
    data: Option<u64>,
    flags: u64,
}

/// The memory of one element at `buf`: none for a zero-length one.
pub(crate) fn memory(buf: *const c_void, len: usize) -> Result<Buf, Errno> {
    if buf.is_null() && len != 0 {
        return Err(FI_EINVAL);
    }
    // SAFETY: the caller's `len` bytes at `buf`, theirs to keep valid until the
    // operation completes (libfabric's rule for every data operation).
    Ok(unsafe { Buf::raw(buf.cast_mut().cast(), len) })
}

/// The memory of an operation: the caller's, or a copy for an inject.
pub(crate) fn operand(e: &Ep, buf: *const c_void, len: usize, flags: u64) -> Result<Buf, Errno> {
    if flags & FI_INJECT == 0 {
        return memory(buf, len);
    }
    if len > e.inject_size {
        return Err(FI_EMSGSIZE);
    }
    if buf.is_null() && len != 0 {
        return Err(FI_EINVAL);
    }
    // SAFETY: the caller's `len` bytes, read now (an inject's buffer is the caller's
    // again when the call returns).
    let v = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) }.to_vec();
    Ok(v.into())
}

fn send(ep: *mut fid_ep, buf: *const c_void, len: usize, op: Op) -> isize {
    guard(|| {
        let e = entry::get::<Ep>(ep.cast())?;
        let live = e.active()?;
        let inject = op.flags & FI_INJECT != 0;
        if inject && len > e.inject_size {
            return Err(FI_EMSGSIZE);
        }
        if len > crate::info::MAX_MSG {
            return Err(FI_EMSGSIZE);
        }
        if op.tag.is_some() && e.caps & FI_TAGGED == 0 || op.tag.is_none() && e.caps & FI_MSG == 0 {
            return Err(FI_EOPNOTSUPP);
        }
        let silent = inject || !e.reports(op.flags);
        let live = match live {
            Live::Rdm(r) => r,
            Live::Msg(_) | Live::Dgram(_) => {
                // The SEND's immediate: 32 bits (the domain's cq_data_size).
                let data = op.data.map(u32::try_from).transpose();
                let data = data.map_err(|_| FI_EINVAL)?;
                if let Live::Dgram(d) = live
                    && len > d.max_msg()
                {
                    return Err(FI_EMSGSIZE);
                }
                let mem = operand(e, buf, len, op.flags)?;
                let ctx = op.context as u64;
                match live {
                    Live::Msg(m) => m.send(mem, data, silent, ctx),
                    Live::Dgram(d) => d.send(op.addr, mem, data, silent, ctx),
                    Live::Rdm(_) => unreachable!("matched above"),
                }
                .map_err(|err| err.errno())?;
                return Ok(0);
            }
        };
        let opts = SendOpts {
            tag: op.tag.map(|(t, _)| t),
            data: op.data,
            inject: silent,
        };
        live.send(op.addr, memory(buf, len)?, op.context as u64, opts)
            .map_err(|err| err.errno())?;
        Ok(0)
    })
}

fn recv(ep: *mut fid_ep, buf: *mut c_void, len: usize, op: Op) -> isize {
    guard(|| {
        let e = entry::get::<Ep>(ep.cast())?;
        let live = match e.active()? {
            Live::Rdm(r) => r,
            live @ (Live::Msg(_) | Live::Dgram(_)) => {
                if op.tag.is_some() || op.flags & (FI_MULTI_RECV | FI_PEEK | FI_CLAIM) != 0 {
                    return Err(FI_EOPNOTSUPP);
                }
                let (mem, ctx) = (memory(buf, len)?, op.context as u64);
                match live {
                    Live::Msg(m) => m.recv(mem, ctx),
                    Live::Dgram(d) => d.recv(mem, ctx),
                    Live::Rdm(_) => unreachable!("matched above"),
                }
                .map_err(|err| err.errno())?;
                return Ok(0);
            }
        };
        let src = if e.caps & FI_DIRECTED_RECV != 0 {
            op.addr
        } else {
            FI_ADDR_UNSPEC
        };
        let mem = memory(buf, len)?;
        let ctx = op.context as u64;
        // A multi-receive buffer takes untagged messages only.
        if op.flags & FI_MULTI_RECV != 0 {
            if e.caps & FI_MULTI_RECV == 0 || op.tag.is_some() {
                return Err(FI_EOPNOTSUPP);
            }
            live.recv_multi(mem, e.min_multi_recv(), src, ctx)
                .map_err(|err| err.errno())?;
            return Ok(0);
        }
        let (tag, ignore) = op.tag.unwrap_or((0, 0));
        // FI_PEEK looks (FI_CLAIM: and takes); FI_CLAIM alone receives what a peek took,
        // FI_DISCARD with it drops that.
        if op.flags & FI_PEEK != 0 {
            live.peek(
                op.tag.is_some(),
                (src, tag, ignore),
                ctx,
                op.flags & FI_CLAIM != 0,
            )
            .map_err(|err| err.errno())?;
            return Ok(0);
        }
        if op.flags & FI_CLAIM != 0 {
            live.recv_claimed(mem, ctx, op.flags & FI_DISCARD != 0)
                .map_err(|err| err.errno())?;
            return Ok(0);
        }
        if op.flags & FI_DISCARD != 0 {
            return Err(FI_EINVAL);
        }
        match op.tag {
            Some((tag, ignore)) if e.caps & FI_TAGGED != 0 => {
                live.trecv(mem, src, tag, ignore, ctx)
            }
            None if e.caps & FI_MSG != 0 => live.recv(mem, src, ctx),
            _ => return Err(FI_EOPNOTSUPP),
        }
        .map_err(|err| err.errno())?;
        Ok(0)
    })
}

/// The default flags of the endpoint behind `ep`, for the calls that take none.
pub(crate) fn tx_flags(ep: *mut fid_ep) -> u64 {
    entry::get::<Ep>(ep.cast()).map_or(0, Ep::tx_flags)
}

fn plain(addr: fi_addr_t, context: *mut c_void, flags: u64) -> Op {
    Op {
        addr,
        context,
        tag: None,
        data: None,
        flags,
    }
}

// The messages.

unsafe extern "C" fn msg_recv(
    ep: *mut fid_ep,
    buf: *mut c_void,
    len: usize,
    _desc: *mut c_void,
    src: fi_addr_t,
    context: *mut c_void,
) -> isize {
    recv(ep, buf, len, plain(src, context, 0))
}

unsafe extern "C" fn msg_recvv(
    ep: *mut fid_ep,
    iov: *const iovec,
    _desc: *mut *mut c_void,
    count: usize,
    src: fi_addr_t,
    context: *mut c_void,
) -> isize {
    match one_iov(iov, count) {
        Ok((b, l)) => recv(ep, b.cast_mut(), l, plain(src, context, 0)),
        Err(e) => -(e as isize),
    }
}

unsafe extern "C" fn msg_recvmsg(ep: *mut fid_ep, msg: *const fi_msg, flags: u64) -> isize {
    // SAFETY: libfabric's message, valid or null.
    let Some(m) = (unsafe { msg.as_ref() }) else {
        return -(FI_EINVAL as isize);
    };
    match one_iov(m.msg_iov, m.iov_count) {
        Ok((b, l)) => recv(ep, b.cast_mut(), l, plain(m.addr, m.context, flags)),
        Err(e) => -(e as isize),
    }
}

unsafe extern "C" fn msg_send(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    dest: fi_addr_t,
    context: *mut c_void,
) -> isize {
    send(ep, buf, len, plain(dest, context, tx_flags(ep)))
}

unsafe extern "C" fn msg_sendv(
    ep: *mut fid_ep,
    iov: *const iovec,
    _desc: *mut *mut c_void,
    count: usize,
    dest: fi_addr_t,
    context: *mut c_void,
) -> isize {
    match one_iov(iov, count) {
        Ok((b, l)) => send(ep, b, l, plain(dest, context, tx_flags(ep))),
        Err(e) => -(e as isize),
    }
}

unsafe extern "C" fn msg_sendmsg(ep: *mut fid_ep, msg: *const fi_msg, flags: u64) -> isize {
    // SAFETY: libfabric's message, valid or null.
    let Some(m) = (unsafe { msg.as_ref() }) else {
        return -(FI_EINVAL as isize);
    };
    let op = Op {
        data: (flags & FI_REMOTE_CQ_DATA != 0).then_some(m.data),
        ..plain(m.addr, m.context, flags)
    };
    match one_iov(m.msg_iov, m.iov_count) {
        Ok((b, l)) => send(ep, b, l, op),
        Err(e) => -(e as isize),
    }
}

unsafe extern "C" fn msg_inject(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    dest: fi_addr_t,
) -> isize {
    send(ep, buf, len, plain(dest, std::ptr::null_mut(), FI_INJECT))
}

unsafe extern "C" fn msg_senddata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    data: u64,
    dest: fi_addr_t,
    context: *mut c_void,
) -> isize {
    let op = Op {
        data: Some(data),
        ..plain(dest, context, tx_flags(ep))
    };
    send(ep, buf, len, op)
}

unsafe extern "C" fn msg_injectdata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: fi_addr_t,
) -> isize {
    let op = Op {
        data: Some(data),
        ..plain(dest, std::ptr::null_mut(), FI_INJECT)
    };
    send(ep, buf, len, op)
}

/// The message operations.
pub static MSG_OPS: Ops<fi_ops_xfer> = Ops(fi_ops_xfer {
    size: size_of::<fi_ops_xfer>(),
    slots: [
        msg_recv as Slot,
        msg_recvv as Slot,
        msg_recvmsg as Slot,
        msg_send as Slot,
        msg_sendv as Slot,
        msg_sendmsg as Slot,
        msg_inject as Slot,
        msg_senddata as Slot,
        msg_injectdata as Slot,
    ],
});

// The tagged messages.

fn tagged(addr: fi_addr_t, context: *mut c_void, tag: u64, ignore: u64, flags: u64) -> Op {
    Op {
        tag: Some((tag, ignore)),
        ..plain(addr, context, flags)
    }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn tag_recv(
    ep: *mut fid_ep,
    buf: *mut c_void,
    len: usize,
    _desc: *mut c_void,
    src: fi_addr_t,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
) -> isize {
    recv(ep, buf, len, tagged(src, context, tag, ignore, 0))
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn tag_recvv(
    ep: *mut fid_ep,
    iov: *const iovec,
    _desc: *mut *mut c_void,
    count: usize,
    src: fi_addr_t,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
) -> isize {
    match one_iov(iov, count) {
        Ok((b, l)) => recv(ep, b.cast_mut(), l, tagged(src, context, tag, ignore, 0)),
        Err(e) => -(e as isize),
    }
}

unsafe extern "C" fn tag_recvmsg(ep: *mut fid_ep, msg: *const fi_msg_tagged, flags: u64) -> isize {
    // SAFETY: libfabric's message, valid or null.
    let Some(m) = (unsafe { msg.as_ref() }) else {
        return -(FI_EINVAL as isize);
    };
    let op = tagged(m.addr, m.context, m.tag, m.ignore, flags);
    match one_iov(m.msg_iov, m.iov_count) {
        Ok((b, l)) => recv(ep, b.cast_mut(), l, op),
        Err(e) => -(e as isize),
    }
}

unsafe extern "C" fn tag_send(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    dest: fi_addr_t,
    tag: u64,
    context: *mut c_void,
) -> isize {
    send(ep, buf, len, tagged(dest, context, tag, 0, tx_flags(ep)))
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn tag_sendv(
    ep: *mut fid_ep,
    iov: *const iovec,
    _desc: *mut *mut c_void,
    count: usize,
    dest: fi_addr_t,
    tag: u64,
    context: *mut c_void,
) -> isize {
    match one_iov(iov, count) {
        Ok((b, l)) => send(ep, b, l, tagged(dest, context, tag, 0, tx_flags(ep))),
        Err(e) => -(e as isize),
    }
}

unsafe extern "C" fn tag_sendmsg(ep: *mut fid_ep, msg: *const fi_msg_tagged, flags: u64) -> isize {
    // SAFETY: libfabric's message, valid or null.
    let Some(m) = (unsafe { msg.as_ref() }) else {
        return -(FI_EINVAL as isize);
    };
    let op = Op {
        data: (flags & FI_REMOTE_CQ_DATA != 0).then_some(m.data),
        ..tagged(m.addr, m.context, m.tag, 0, flags)
    };
    match one_iov(m.msg_iov, m.iov_count) {
        Ok((b, l)) => send(ep, b, l, op),
        Err(e) => -(e as isize),
    }
}

unsafe extern "C" fn tag_inject(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    dest: fi_addr_t,
    tag: u64,
) -> isize {
    send(
        ep,
        buf,
        len,
        tagged(dest, std::ptr::null_mut(), tag, 0, FI_INJECT),
    )
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn tag_senddata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    data: u64,
    dest: fi_addr_t,
    tag: u64,
    context: *mut c_void,
) -> isize {
    let op = Op {
        data: Some(data),
        ..tagged(dest, context, tag, 0, tx_flags(ep))
    };
    send(ep, buf, len, op)
}

unsafe extern "C" fn tag_injectdata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: fi_addr_t,
    tag: u64,
) -> isize {
    let op = Op {
        data: Some(data),
        ..tagged(dest, std::ptr::null_mut(), tag, 0, FI_INJECT)
    };
    send(ep, buf, len, op)
}

/// The tagged operations.
pub static TAGGED_OPS: Ops<fi_ops_xfer> = Ops(fi_ops_xfer {
    size: size_of::<fi_ops_xfer>(),
    slots: [
        tag_recv as Slot,
        tag_recvv as Slot,
        tag_recvmsg as Slot,
        tag_send as Slot,
        tag_sendv as Slot,
        tag_sendmsg as Slot,
        tag_inject as Slot,
        tag_senddata as Slot,
        tag_injectdata as Slot,
    ],
});
