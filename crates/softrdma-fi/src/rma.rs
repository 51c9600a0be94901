//! The endpoint's RMA (`fi_ops_rma`) and atomics (`fi_ops_atomic`), each form (plain,
//! vectored with one element, `*msg` with flags, inject, with remote CQ data) brought to
//! one write, read or atomic of the fabric layer, on the caller's memory. An inject is
//! copied before the call returns; everything else uses the caller's buffers until it
//! completes.
//!
//! Atomics act on one 64-bit word (`FI_INT64`, `FI_UINT64`, count 1): `FI_SUM` plain and
//! fetching, `FI_ATOMIC_READ` fetching, and `FI_CSWAP` comparing, which are the device's
//! fetch-and-add and compare-and-swap. `fi_query_atomic` and the `*valid` calls say so;
//! any other op or datatype gets `-FI_EOPNOTSUPP`, one outside libfabric's enums
//! `-FI_EINVAL`.

use crate::abi::*;
use crate::entry::{self, Errno, guard, guard_int, one_iov};
use crate::ep::{Ep, Live};
use crate::xfer::{memory, operand, tx_flags};
use softrdma_fabric::{AtomicOp, Buf, RmaOpts};
use std::ffi::{c_int, c_void};

/// Where an RMA or atomic goes: the peer, and the address and key of its region.
#[derive(Clone, Copy)]
struct Target {
    peer: fi_addr_t,
    addr: u64,
    key: u64,
}

/// The endpoint behind `ep`, enabled and with `cap`.
fn live_with(ep: *mut fid_ep, cap: u64) -> Result<(&'static Ep, Live<'static>), Errno> {
    let e = entry::get::<Ep>(ep.cast())?;
    let live = e.active()?;
    if e.caps & cap == 0 {
        return Err(FI_EOPNOTSUPP);
    }
    Ok((e, live))
}

/// The operation's options from its flags: silent for an inject, or without
/// `FI_COMPLETION` on a selective endpoint.
fn opts(e: &Ep, flags: u64, data: Option<u64>) -> RmaOpts {
    RmaOpts {
        data,
        silent: flags & FI_INJECT != 0 || !e.reports(flags),
    }
}

fn write(
    ep: *mut fid_ep,
    (buf, len): (*const c_void, usize),
    t: Target,
    data: Option<u64>,
    (context, flags): (*mut c_void, u64),
) -> isize {
    guard(|| {
        let (e, live) = live_with(ep, FI_RMA)?;
        if len > crate::info::MAX_MSG {
            return Err(FI_EMSGSIZE);
        }
        let mem = operand(e, buf, len, flags)?;
        let (target, o, ctx) = ((t.addr, t.key), opts(e, flags, data), context as u64);
        match live {
            Live::Rdm(r) => r.write(t.peer, mem, target, o, ctx),
            Live::Msg(m) => m.write(mem, target, o, ctx),
            Live::Dgram(_) => return Err(FI_EOPNOTSUPP),
        }
        .map_err(|err| err.errno())?;
        Ok(0)
    })
}

fn read(
    ep: *mut fid_ep,
    (buf, len): (*mut c_void, usize),
    t: Target,
    (context, flags): (*mut c_void, u64),
) -> isize {
    guard(|| {
        let (e, live) = live_with(ep, FI_RMA)?;
        if len > crate::info::MAX_MSG {
            return Err(FI_EMSGSIZE);
        }
        if flags & FI_INJECT != 0 {
            return Err(FI_EINVAL);
        }
        let mem = memory(buf, len)?;
        let (target, o, ctx) = ((t.addr, t.key), opts(e, flags, None), context as u64);
        match live {
            Live::Rdm(r) => r.read(t.peer, mem, target, o, ctx),
            Live::Msg(m) => m.read(mem, target, o, ctx),
            Live::Dgram(_) => return Err(FI_EOPNOTSUPP),
        }
        .map_err(|err| err.errno())?;
        Ok(0)
    })
}

fn at(peer: fi_addr_t, addr: u64, key: u64) -> Target {
    Target { peer, addr, key }
}

// RMA.

unsafe extern "C" fn rma_read(
    ep: *mut fid_ep,
    buf: *mut c_void,
    len: usize,
    _desc: *mut c_void,
    src: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    read(ep, (buf, len), at(src, addr, key), (context, tx_flags(ep)))
}

unsafe extern "C" fn rma_readv(
    ep: *mut fid_ep,
    iov: *const iovec,
    _desc: *mut *mut c_void,
    count: usize,
    src: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    match one_iov(iov, count) {
        Ok((b, l)) => read(
            ep,
            (b.cast_mut(), l),
            at(src, addr, key),
            (context, tx_flags(ep)),
        ),
        Err(e) => -(e as isize),
    }
}

/// A `fi_msg_rma`'s memory and target: one element each, the target at least as long.
fn msg_rma(m: &fi_msg_rma) -> Result<((*const c_void, usize), Target), Errno> {
    let (b, l) = one_iov(m.msg_iov, m.iov_count)?;
    if m.rma_iov_count != 1 || m.rma_iov.is_null() {
        return Err(FI_EINVAL);
    }
    // SAFETY: the caller's one target element.
    let r = unsafe { &*m.rma_iov };
    if r.len < l {
        return Err(FI_EINVAL);
    }
    Ok(((b, l), at(m.addr, r.addr, r.key)))
}

unsafe extern "C" fn rma_readmsg(ep: *mut fid_ep, msg: *const fi_msg_rma, flags: u64) -> isize {
    // SAFETY: libfabric's message, valid or null.
    let Some(m) = (unsafe { msg.as_ref() }) else {
        return -(FI_EINVAL as isize);
    };
    match msg_rma(m) {
        Ok(((b, l), t)) => read(ep, (b.cast_mut(), l), t, (m.context, flags)),
        Err(e) => -(e as isize),
    }
}

unsafe extern "C" fn rma_write(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    write(
        ep,
        (buf, len),
        at(dest, addr, key),
        None,
        (context, tx_flags(ep)),
    )
}

unsafe extern "C" fn rma_writev(
    ep: *mut fid_ep,
    iov: *const iovec,
    _desc: *mut *mut c_void,
    count: usize,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    match one_iov(iov, count) {
        Ok(mem) => write(ep, mem, at(dest, addr, key), None, (context, tx_flags(ep))),
        Err(e) => -(e as isize),
    }
}

unsafe extern "C" fn rma_writemsg(ep: *mut fid_ep, msg: *const fi_msg_rma, flags: u64) -> isize {
    // SAFETY: libfabric's message, valid or null.
    let Some(m) = (unsafe { msg.as_ref() }) else {
        return -(FI_EINVAL as isize);
    };
    let data = (flags & FI_REMOTE_CQ_DATA != 0).then_some(m.data);
    match msg_rma(m) {
        Ok((mem, t)) => write(ep, mem, t, data, (m.context, flags)),
        Err(e) => -(e as isize),
    }
}

unsafe extern "C" fn rma_inject(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
) -> isize {
    let flags = tx_flags(ep) | FI_INJECT;
    write(
        ep,
        (buf, len),
        at(dest, addr, key),
        None,
        (std::ptr::null_mut(), flags),
    )
}

unsafe extern "C" fn rma_writedata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    data: u64,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    write(
        ep,
        (buf, len),
        at(dest, addr, key),
        Some(data),
        (context, tx_flags(ep)),
    )
}

unsafe extern "C" fn rma_injectdata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
) -> isize {
    let flags = tx_flags(ep) | FI_INJECT;
    write(
        ep,
        (buf, len),
        at(dest, addr, key),
        Some(data),
        (std::ptr::null_mut(), flags),
    )
}

/// The RMA operations.
pub static RMA_OPS: Ops<fi_ops_xfer> = Ops(fi_ops_xfer {
    size: size_of::<fi_ops_xfer>(),
    slots: [
        rma_read as Slot,
        rma_readv as Slot,
        rma_readmsg as Slot,
        rma_write as Slot,
        rma_writev as Slot,
        rma_writemsg as Slot,
        rma_inject as Slot,
        rma_writedata as Slot,
        rma_injectdata as Slot,
    ],
});

// Atomics.

/// The three forms of atomic.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Form {
    /// `fi_atomic`: nothing comes back.
    Plain,
    /// `fi_fetch_atomic`: the value before comes back.
    Fetch,
    /// `fi_compare_atomic`: compared, and the value before comes back.
    Compare,
}

/// Whether `datatype` and `op` are an atomic of `form` this provider does.
fn supported(datatype: u32, op: u32, form: Form) -> Result<(), Errno> {
    // FI_INT128 and FI_UINT128 follow FI_DATATYPE_LAST.
    if datatype > FI_DATATYPE_LAST + 1 || op >= FI_ATOMIC_OP_LAST {
        return Err(FI_EINVAL);
    }
    if datatype != FI_INT64 && datatype != FI_UINT64 {
        return Err(FI_EOPNOTSUPP);
    }
    match (form, op) {
        (Form::Plain | Form::Fetch, FI_SUM) | (Form::Fetch, FI_ATOMIC_READ) => Ok(()),
        (Form::Compare, FI_CSWAP) => Ok(()),
        _ => Err(FI_EOPNOTSUPP),
    }
}

/// Reads one 64-bit operand the caller gave.
fn word(p: *const c_void) -> Result<u64, Errno> {
    if p.is_null() {
        return Err(FI_EINVAL);
    }
    // SAFETY: the caller's operand of one 64-bit element (count 1 is checked first).
    Ok(unsafe { p.cast::<u64>().read_unaligned() })
}

/// One atomic's arguments: its operand, compare value and result buffers (count 1 each),
/// its datatype and op.
struct Atomic {
    form: Form,
    buf: (*const c_void, usize),
    compare: *const c_void,
    result: *mut c_void,
    datatype: u32,
    op: u32,
}

fn atomic(ep: *mut fid_ep, a: Atomic, t: Target, (context, flags): (*mut c_void, u64)) -> isize {
    guard(|| {
        let (e, live) = live_with(ep, FI_ATOMIC)?;
        supported(a.datatype, a.op, a.form)?;
        let count = a.buf.1;
        // FI_ATOMIC_READ takes no operand: its buffer may be null, its count still 1.
        if count != 1 {
            return Err(FI_EINVAL);
        }
        let op = match (a.form, a.op) {
            (Form::Plain, _) => AtomicOp::Add(word(a.buf.0)?),
            (Form::Fetch, FI_ATOMIC_READ) => AtomicOp::Read,
            (Form::Fetch, _) => AtomicOp::FetchAdd(word(a.buf.0)?),
            (Form::Compare, _) => AtomicOp::CompareSwap {
                compare: word(a.compare)?,
                swap: word(a.buf.0)?,
            },
        };
        let result = match a.form {
            Form::Plain => Buf::from(vec![0u8; 8]),
            _ if a.result.is_null() => return Err(FI_EINVAL),
            _ => memory(a.result, 8)?,
        };
        if a.form != Form::Plain && flags & FI_INJECT != 0 {
            return Err(FI_EINVAL);
        }
        let (target, opts, context) = ((t.addr, t.key), opts(e, flags, None), context as u64);
        match live {
            Live::Rdm(r) => r.atomic(t.peer, op, target, result, opts, context),
            // A connected endpoint's one peer: the address is not looked at.
            Live::Msg(m) => m.atomic(op, target, result, opts, context),
            Live::Dgram(_) => return Err(FI_EOPNOTSUPP),
        }
        .map_err(|err| err.errno())?;
        Ok(0)
    })
}

/// The one element of an atomic's `fi_ioc` list.
fn one_ioc(ioc: *const fi_ioc, count: usize) -> Result<(*const c_void, usize), Errno> {
    if count != 1 || ioc.is_null() {
        return Err(FI_EINVAL);
    }
    // SAFETY: the caller's one element.
    let v = unsafe { &*ioc };
    Ok((v.addr, v.count))
}

/// A `fi_msg_atomic`'s operand and target.
fn msg_atomic(m: &fi_msg_atomic) -> Result<((*const c_void, usize), Target), Errno> {
    let buf = one_ioc(m.msg_iov, m.iov_count)?;
    if m.rma_iov_count != 1 || m.rma_iov.is_null() {
        return Err(FI_EINVAL);
    }
    // SAFETY: the caller's one target element.
    let r = unsafe { &*m.rma_iov };
    Ok((buf, at(m.addr, r.addr, r.key)))
}

fn plain(buf: (*const c_void, usize), datatype: u32, op: u32) -> Atomic {
    Atomic {
        form: Form::Plain,
        buf,
        compare: std::ptr::null(),
        result: std::ptr::null_mut(),
        datatype,
        op,
    }
}

unsafe extern "C" fn atomic_write(
    ep: *mut fid_ep,
    buf: *const c_void,
    count: usize,
    _desc: *mut c_void,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    datatype: u32,
    op: u32,
    context: *mut c_void,
) -> isize {
    let a = plain((buf, count), datatype, op);
    atomic(ep, a, at(dest, addr, key), (context, tx_flags(ep)))
}

unsafe extern "C" fn atomic_writev(
    ep: *mut fid_ep,
    iov: *const fi_ioc,
    _desc: *mut *mut c_void,
    count: usize,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    datatype: u32,
    op: u32,
    context: *mut c_void,
) -> isize {
    match one_ioc(iov, count) {
        Ok(buf) => {
            let a = plain(buf, datatype, op);
            atomic(ep, a, at(dest, addr, key), (context, tx_flags(ep)))
        }
        Err(e) => -(e as isize),
    }
}

unsafe extern "C" fn atomic_writemsg(
    ep: *mut fid_ep,
    msg: *const fi_msg_atomic,
    flags: u64,
) -> isize {
    let args = (|| {
        let m = msg_ref(msg)?;
        let (buf, t) = msg_atomic(m)?;
        Ok((plain(buf, m.datatype, m.op), t, (m.context, flags)))
    })();
    run(ep, args)
}

unsafe extern "C" fn atomic_inject(
    ep: *mut fid_ep,
    buf: *const c_void,
    count: usize,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    datatype: u32,
    op: u32,
) -> isize {
    let a = plain((buf, count), datatype, op);
    let flags = tx_flags(ep) | FI_INJECT;
    atomic(ep, a, at(dest, addr, key), (std::ptr::null_mut(), flags))
}

/// The one result element of a fetching or comparing atomic's list.
fn one_result(resultv: *mut fi_ioc, count: usize) -> Result<*mut c_void, Errno> {
    one_ioc(resultv, count).map(|(p, _)| p.cast_mut())
}

/// The caller's message, if not null.
fn msg_ref<'a>(msg: *const fi_msg_atomic) -> Result<&'a fi_msg_atomic, Errno> {
    // SAFETY: libfabric's message, valid or null.
    unsafe { msg.as_ref() }.ok_or(FI_EINVAL)
}

/// A fetching or comparing atomic: `compare` is null for a fetching one.
fn returning(
    buf: (*const c_void, usize),
    compare: *const c_void,
    result: *mut c_void,
    (datatype, op): (u32, u32),
) -> Atomic {
    let form = if compare.is_null() {
        Form::Fetch
    } else {
        Form::Compare
    };
    Atomic {
        form,
        compare,
        result,
        ..plain(buf, datatype, op)
    }
}

/// Runs the atomic its arguments describe, or returns the error met reading them.
fn run(ep: *mut fid_ep, args: Result<(Atomic, Target, (*mut c_void, u64)), Errno>) -> isize {
    match args {
        Ok((a, t, how)) => atomic(ep, a, t, how),
        Err(e) => -(e as isize),
    }
}

unsafe extern "C" fn atomic_readwrite(
    ep: *mut fid_ep,
    buf: *const c_void,
    count: usize,
    _desc: *mut c_void,
    result: *mut c_void,
    _result_desc: *mut c_void,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    datatype: u32,
    op: u32,
    context: *mut c_void,
) -> isize {
    let a = returning((buf, count), std::ptr::null(), result, (datatype, op));
    atomic(ep, a, at(dest, addr, key), (context, tx_flags(ep)))
}

unsafe extern "C" fn atomic_readwritev(
    ep: *mut fid_ep,
    iov: *const fi_ioc,
    _desc: *mut *mut c_void,
    count: usize,
    resultv: *mut fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: usize,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    datatype: u32,
    op: u32,
    context: *mut c_void,
) -> isize {
    let args = (|| {
        let result = one_result(resultv, result_count)?;
        let a = returning(
            one_ioc(iov, count)?,
            std::ptr::null(),
            result,
            (datatype, op),
        );
        Ok((a, at(dest, addr, key), (context, tx_flags(ep))))
    })();
    run(ep, args)
}

unsafe extern "C" fn atomic_readwritemsg(
    ep: *mut fid_ep,
    msg: *const fi_msg_atomic,
    resultv: *mut fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: usize,
    flags: u64,
) -> isize {
    let args = (|| {
        let m = msg_ref(msg)?;
        let (buf, t) = msg_atomic(m)?;
        let result = one_result(resultv, result_count)?;
        let a = returning(buf, std::ptr::null(), result, (m.datatype, m.op));
        Ok((a, t, (m.context, flags)))
    })();
    run(ep, args)
}

unsafe extern "C" fn atomic_compwrite(
    ep: *mut fid_ep,
    buf: *const c_void,
    count: usize,
    _desc: *mut c_void,
    compare: *const c_void,
    _compare_desc: *mut c_void,
    result: *mut c_void,
    _result_desc: *mut c_void,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    datatype: u32,
    op: u32,
    context: *mut c_void,
) -> isize {
    let args = (|| {
        // A compare value is needed: a null one is the caller's error, not a fetch.
        if compare.is_null() {
            return Err(FI_EINVAL);
        }
        let a = returning((buf, count), compare, result, (datatype, op));
        Ok((a, at(dest, addr, key), (context, tx_flags(ep))))
    })();
    run(ep, args)
}

/// The one compare element of a comparing atomic's list (not null).
fn one_compare(comparev: *const fi_ioc, count: usize) -> Result<*const c_void, Errno> {
    match one_ioc(comparev, count)?.0 {
        p if p.is_null() => Err(FI_EINVAL),
        p => Ok(p),
    }
}

unsafe extern "C" fn atomic_compwritev(
    ep: *mut fid_ep,
    iov: *const fi_ioc,
    _desc: *mut *mut c_void,
    count: usize,
    comparev: *const fi_ioc,
    _compare_desc: *mut *mut c_void,
    compare_count: usize,
    resultv: *mut fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: usize,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    datatype: u32,
    op: u32,
    context: *mut c_void,
) -> isize {
    let args = (|| {
        let compare = one_compare(comparev, compare_count)?;
        let result = one_result(resultv, result_count)?;
        let a = returning(one_ioc(iov, count)?, compare, result, (datatype, op));
        Ok((a, at(dest, addr, key), (context, tx_flags(ep))))
    })();
    run(ep, args)
}

unsafe extern "C" fn atomic_compwritemsg(
    ep: *mut fid_ep,
    msg: *const fi_msg_atomic,
    comparev: *const fi_ioc,
    _compare_desc: *mut *mut c_void,
    compare_count: usize,
    resultv: *mut fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: usize,
    flags: u64,
) -> isize {
    let args = (|| {
        let m = msg_ref(msg)?;
        let (buf, t) = msg_atomic(m)?;
        let compare = one_compare(comparev, compare_count)?;
        let result = one_result(resultv, result_count)?;
        let a = returning(buf, compare, result, (m.datatype, m.op));
        Ok((a, t, (m.context, flags)))
    })();
    run(ep, args)
}

/// A `*valid` call: whether the endpoint does `datatype` and `op` in `form`, and how
/// many elements at once (1).
fn valid(ep: *mut fid_ep, datatype: u32, op: u32, form: Form, count: *mut usize) -> c_int {
    guard_int(|| {
        entry::get::<Ep>(ep.cast())?;
        supported(datatype, op, form)?;
        if !count.is_null() {
            // SAFETY: the caller's count, checked non-null.
            unsafe { *count = 1 };
        }
        Ok(0)
    })
}

unsafe extern "C" fn writevalid(ep: *mut fid_ep, dt: u32, op: u32, count: *mut usize) -> c_int {
    valid(ep, dt, op, Form::Plain, count)
}

unsafe extern "C" fn readwritevalid(ep: *mut fid_ep, dt: u32, op: u32, count: *mut usize) -> c_int {
    valid(ep, dt, op, Form::Fetch, count)
}

unsafe extern "C" fn compwritevalid(ep: *mut fid_ep, dt: u32, op: u32, count: *mut usize) -> c_int {
    valid(ep, dt, op, Form::Compare, count)
}

/// The atomic operations.
pub static ATOMIC_OPS: Ops<fi_ops_atomic> = Ops(fi_ops_atomic {
    size: size_of::<fi_ops_atomic>(),
    slots: [
        atomic_write as Slot,
        atomic_writev as Slot,
        atomic_writemsg as Slot,
        atomic_inject as Slot,
        atomic_readwrite as Slot,
        atomic_readwritev as Slot,
        atomic_readwritemsg as Slot,
        atomic_compwrite as Slot,
        atomic_compwritev as Slot,
        atomic_compwritemsg as Slot,
        writevalid as Slot,
        readwritevalid as Slot,
        compwritevalid as Slot,
    ],
});

/// `fi_query_atomic`: whether the domain does `datatype` and `op` in the form `flags`
/// names (`FI_FETCH_ATOMIC`, `FI_COMPARE_ATOMIC`, or neither), with its count and size.
pub unsafe extern "C" fn query_atomic(
    domain: *mut fid_domain,
    datatype: u32,
    op: u32,
    attr: *mut fi_atomic_attr,
    flags: u64,
) -> c_int {
    guard_int(|| {
        entry::get::<crate::domain::Domain>(domain.cast())?;
        let form = match flags & (FI_FETCH_ATOMIC | FI_COMPARE_ATOMIC) {
            0 => Form::Plain,
            FI_FETCH_ATOMIC => Form::Fetch,
            FI_COMPARE_ATOMIC => Form::Compare,
            _ => return Err(FI_EINVAL),
        };
        if flags & !(FI_FETCH_ATOMIC | FI_COMPARE_ATOMIC) != 0 || attr.is_null() {
            return Err(FI_EINVAL);
        }
        supported(datatype, op, form)?;
        // SAFETY: the caller's attr, checked non-null.
        unsafe {
            (*attr).count = 1;
            (*attr).size = 8;
        }
        Ok(0)
    })
}
