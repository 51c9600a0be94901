//! Completion queues (plain and extended), completion channels and CQ events.
//!
//! Every CQ is allocated as an `ibv_cq_ex` (whose prefix is the `ibv_cq`), so either kind
//! of caller can use it. `ibv_poll_cq` lends completions out of the Rust CQ straight into
//! the caller's array: no copy in between, and no lock beyond the CQ's own. The extended
//! poll (`ibv_start_poll` ... `ibv_end_poll`) keeps the current completion in `cur`, a
//! lock that only that CQ's poller takes.

use super::context::{SoftContext, live, own, to_destroy};
use super::objects::{SoftChannel, SoftCq, next_handle};
use crate::abi::*;
use crate::ffi::{Failed, Object, Ret, Users, Verb, entry};
use softrdma::sync::{Lock, Rank};
use softrdma::{Completion, WcFlags};
use std::ffi::{c_int, c_uint, c_void};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, Ordering};

/// `ibv_create_comp_channel`.
pub unsafe extern "C" fn ibv_create_comp_channel(ctx: *mut ibv_context) -> *mut ibv_comp_channel {
    entry("ibv_create_comp_channel", Ret::NULL, |v| {
        // SAFETY: NULL or a context the caller got from this library.
        let soft = unsafe { live::<SoftContext>(v, ctx) }?;
        let inner = v.check(soft.ctx.create_comp_channel())?;
        let ch = SoftChannel {
            ch: ibv_comp_channel {
                context: ctx,
                fd: inner.fd(),
                refcnt: 0,
            },
            inner,
            users: Users::default(),
        };
        Ok(ch.into_c())
    })
}

/// `ibv_destroy_comp_channel`: EBUSY while CQs use it.
pub unsafe extern "C" fn ibv_destroy_comp_channel(ch: *mut ibv_comp_channel) -> c_int {
    entry("ibv_destroy_comp_channel", Ret::ERRNO, |v| {
        // SAFETY: NULL or a channel the caller got from this library.
        let Some(c) = unsafe { to_destroy::<SoftChannel>(v, ch) }? else {
            return Ok(0);
        };
        c.users.ensure_none(v, "CQs still use the channel")?;
        // SAFETY: from ibv_create_comp_channel's box, freed once.
        drop(unsafe { SoftChannel::free(ch) });
        Ok(0)
    })
}

/// What a CQ is made with, plain or extended.
struct NewCq {
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: u32,
    wc_flags: u64,
}

fn new_cq(v: Verb, ctx: *mut ibv_context, n: NewCq) -> Result<*mut ibv_cq, Failed> {
    let NewCq {
        cqe,
        cq_context,
        channel,
        comp_vector,
        wc_flags,
    } = n;
    // SAFETY: NULL or a context the caller got from this library.
    let soft = unsafe { live::<SoftContext>(v, ctx) }?;
    let vectors = soft.vctx.context.num_comp_vectors as u32;
    v.ensure(
        comp_vector < vectors,
        libc::EINVAL,
        &format_args!("comp_vector {comp_vector}: the device has {vectors}"),
    )?;
    v.ensure(
        cqe > 0,
        libc::EINVAL,
        &format_args!("cqe {cqe}: at least 1"),
    )?;
    // SAFETY: NULL or a live channel.
    let ch = unsafe { SoftChannel::from_nullable(channel) };
    let inner = v.check(soft.ctx.create_cq(cqe as usize, ch.map(|c| &c.inner)))?;
    if let Some(c) = ch {
        c.users.add();
    }
    // SAFETY: ibv_cq_ex is pointers, ints, Option<fn> and pthread objects: all-zero is
    // valid for the first three, and the pthread objects are initialised below.
    let mut ex: ibv_cq_ex = unsafe { std::mem::zeroed() };
    ex.cq.context = ctx;
    ex.cq.channel = channel;
    ex.cq.cq_context = cq_context;
    ex.cq.handle = next_handle();
    ex.cq.cqe = cqe;
    ex.cq.mutex = libc::PTHREAD_MUTEX_INITIALIZER;
    ex.cq.cond = libc::PTHREAD_COND_INITIALIZER;
    ex.start_poll = Some(start_poll);
    ex.next_poll = Some(next_poll);
    ex.end_poll = Some(end_poll);
    set_readers(&mut ex);
    ex.read_completion_ts = Some(read_completion_ts);
    ex.read_completion_wallclock_ns = Some(read_completion_wallclock_ns);
    let cq = SoftCq {
        cq: ex,
        inner,
        cur: Lock::new(Rank::CapiCqCursor, None),
        stamps: wc_flags & ((1 << 7) | (1 << 11)) != 0,
        users: Users::default(),
        error_reported: AtomicBool::new(false),
        grh_sl: roce_sl(soft.ctx.addr()),
    }
    .into_c();
    // SAFETY: just made.
    let s = unsafe { SoftCq::from_ptr(cq) };
    // The CQ's word names it for ibv_get_cq_event.
    s.inner.set_user_data(cq as u64);
    soft.cqs.lock().push(cq as usize);
    Ok(cq)
}

/// The CQ whose overflow an `IBV_EVENT_CQ_ERR` reports: the first that overflowed and
/// was not reported yet (the engine's event does not say which).
pub(crate) fn cq_that_overflowed(soft: &SoftContext) -> *mut ibv_cq {
    let cqs = soft.cqs.lock();
    for &p in cqs.iter() {
        // SAFETY: a live CQ of this context (destroy removes it from the list first).
        let c = unsafe { SoftCq::from_ptr(p as *mut ibv_cq) };
        if c.inner.overflowed() && !c.error_reported.swap(true, Ordering::AcqRel) {
            return p as *mut ibv_cq;
        }
    }
    null_mut()
}

/// `ibv_create_cq`.
pub unsafe extern "C" fn ibv_create_cq(
    ctx: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    entry("ibv_create_cq", Ret::NULL, |v| {
        let n = NewCq {
            cqe,
            cq_context,
            channel,
            comp_vector: comp_vector as u32,
            wc_flags: 0,
        };
        new_cq(v, ctx, n)
    })
}

/// The `wc_flags` an extended CQ can report: `IBV_WC_STANDARD_FLAGS` (byte_len, imm,
/// qp_num, src_qp, slid, sl, dlid_path_bits), and both completion timestamps (7, 11),
/// which rxe lacks. Not CVLAN, flow tags or tag matching.
///
/// A timestamp is the time the poll takes the completion off the CQ, not the time the
/// engine made it: the engine's completions carry no time, and a clock read per
/// completion would cost every caller for the few that ask. Busy pollers, the callers that
/// use timestamps, take completions within microseconds of their making.
const WC_EX_SUPPORTED: u64 = 0x7f | (1 << 7) | (1 << 11);

/// A clock's time now.
pub(crate) fn clock(id: libc::clockid_t) -> libc::timespec {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill.
    unsafe { libc::clock_gettime(id, &mut t) };
    t
}

fn nanos(t: libc::timespec) -> u64 {
    (t.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(t.tv_nsec as u64)
}

/// `verbs_context.create_cq_ex` (`ibv_create_cq_ex`).
pub(crate) unsafe extern "C" fn create_cq_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    entry("ibv_create_cq_ex", Ret::NULL, |v| {
        // SAFETY: the caller's attr.
        let a = unsafe { v.arg(attr, "attr") }?;
        v.ensure(
            a.wc_flags & !WC_EX_SUPPORTED == 0,
            libc::EOPNOTSUPP,
            &format_args!("wc_flags {:#x}: only IBV_WC_STANDARD_FLAGS", a.wc_flags),
        )?;
        // comp_mask: FLAGS (1) is understood (single-threaded and ignore-overrun are hints);
        // a parent domain (PD, 2) is not implemented.
        v.ensure(
            a.comp_mask & !1 == 0,
            libc::EOPNOTSUPP,
            &"comp_mask beyond IBV_CQ_INIT_ATTR_MASK_FLAGS",
        )?;
        v.ensure(a.cqe <= i32::MAX as u32, libc::EINVAL, &"cqe too large")?;
        let n = NewCq {
            cqe: a.cqe as c_int,
            cq_context: a.cq_context,
            channel: a.channel,
            comp_vector: a.comp_vector,
            wc_flags: a.wc_flags,
        };
        Ok(new_cq(v, ctx, n)?.cast())
    })
}

/// `ibv_destroy_cq`: EBUSY while QPs complete into it.
pub unsafe extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    entry("ibv_destroy_cq", Ret::ERRNO, |v| {
        // SAFETY: NULL or a CQ the caller got from this library.
        let Some(s) = unsafe { to_destroy::<SoftCq>(v, cq) }? else {
            return Ok(0);
        };
        s.users.ensure_none(v, "QPs still complete into the CQ")?;
        // SAFETY: NULL or the live channel the CQ was made with (it cannot be destroyed
        // before the CQ: it counts the CQ).
        if let Some(c) = unsafe { SoftChannel::from_nullable(s.cq.cq.channel) } {
            c.users.remove();
        }
        s.inner.set_user_data(0);
        // SAFETY: the CQ's live context.
        unsafe { SoftContext::from_ptr(s.cq.cq.context) }
            .cqs
            .lock()
            .retain(|&c| c != cq as usize);
        // SAFETY: from new_cq's box, freed once.
        drop(unsafe { SoftCq::free(cq) });
        Ok(0)
    })
}

/// `ibv_resize_cq`.
pub unsafe extern "C" fn ibv_resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    entry("ibv_resize_cq", Ret::ERRNO, |v| {
        v.ensure(
            !cq.is_null() && cqe > 0,
            libc::EINVAL,
            &"NULL CQ or cqe below 1",
        )?;
        // SAFETY: a CQ the caller got from this library.
        let s = unsafe { own::<SoftCq>(v, cq) }?;
        v.check(s.inner.resize(cqe as usize))?;
        // SAFETY: the caller's CQ; `cqe` is the field callers read.
        unsafe { (*cq).cqe = cqe };
        Ok(0)
    })
}

/// The `sl` of a UD receive on a device on `addr`. RoCE has no SL on the wire; what a
/// RoCE NIC reports there instead (libmlx5, from the CQE) is the packet's type: bit 3 for
/// a UDP header (RoCE v2), then 1 for IPv6 or 2 for IPv4. UCX's UD transport reads it to
/// find the destination address in the GRH area (the last 4 bytes for IPv4, else 16) and
/// drops the packet when that is not one of its GIDs; rxe reports 0 there, so UCX over rxe
/// IPv4 drops every packet.
fn roce_sl(addr: std::net::IpAddr) -> u8 {
    0x8 | if addr.to_canonical().is_ipv4() {
        0x2
    } else {
        0x1
    }
}

/// The `ibv_wc` of a completion (immediate data back in network order); `grh_sl` is the
/// `sl` of a completion with a GRH (see [`roce_sl`]).
pub(crate) fn to_wc(c: &Completion, grh_sl: u8) -> ibv_wc {
    let imm = if c.wc_flags.contains(WcFlags::WITH_INV) {
        c.invalidated_rkey
    } else if c.wc_flags.contains(WcFlags::WITH_IMM) {
        c.imm_data.to_be()
    } else {
        0
    };
    ibv_wc {
        wr_id: c.wr_id,
        status: c.status as c_int,
        opcode: c.opcode as c_int,
        vendor_err: 0,
        byte_len: c.byte_len,
        imm_data: imm,
        qp_num: c.qp_num.value(),
        src_qp: c.src_qp.value(),
        wc_flags: c.wc_flags.bits(),
        pkey_index: 0,
        slid: 0,
        sl: if c.wc_flags.contains(WcFlags::GRH) {
            grh_sl
        } else {
            0
        },
        dlid_path_bits: 0,
    }
}

/// `ctx->ops.poll_cq` (`ibv_poll_cq`).
pub(crate) unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    entry("ibv_poll_cq", Ret::MINUS_ONE, |v| {
        v.ensure(
            n >= 0 && (n == 0 || !wc.is_null()),
            libc::EINVAL,
            &"negative num_entries or NULL wc",
        )?;
        if n == 0 {
            return Ok(0);
        }
        // SAFETY: a CQ the caller got from this library.
        let s = unsafe { own::<SoftCq>(v, cq) }?;
        let mut lent = s.inner.poll_lending(n as usize);
        let mut i = 0;
        while let Some(c) = lent.next() {
            // SAFETY: the caller's array has `n` entries and i < n (the lend stops at n).
            unsafe { *wc.add(i) = to_wc(c, s.grh_sl) };
            i += 1;
        }
        Ok(i as c_int)
    })
}

/// `ctx->ops.req_notify_cq` (`ibv_req_notify_cq`).
pub(crate) unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    entry("ibv_req_notify_cq", Ret::ERRNO, |v| {
        // SAFETY: a CQ the caller got from this library.
        let s = unsafe { own::<SoftCq>(v, cq) }?;
        v.check(s.inner.req_notify(solicited_only != 0))?;
        Ok(0)
    })
}

/// `ibv_get_cq_event`: blocks until an armed CQ of the channel gets a completion, unless
/// the caller made the descriptor non-blocking (then EAGAIN, as rdma-core's read does).
pub unsafe extern "C" fn ibv_get_cq_event(
    ch: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    entry("ibv_get_cq_event", Ret::MINUS_ONE, |v| {
        v.non_null(&[ch.cast(), cq.cast(), cq_context.cast()])?;
        // SAFETY: a channel the caller got from this library.
        let c = unsafe { own::<SoftChannel>(v, ch) }?;
        // SAFETY: fcntl on our own descriptor.
        let nonblock = unsafe { libc::fcntl(c.ch.fd, libc::F_GETFL) } & libc::O_NONBLOCK != 0;
        let timeout = nonblock.then_some(std::time::Duration::ZERO);
        loop {
            let Some(got) = v.check(c.inner.get_cq_event_interruptible(timeout))? else {
                return Err(v.quiet(libc::EAGAIN));
            };
            let p = got.user_data() as *mut SoftCq;
            if p.is_null() {
                continue; // destroyed since it was signalled
            }
            // SAFETY: the word is the live SoftCq (cleared before it is freed); the
            // caller's out-pointers.
            unsafe {
                *cq = p.cast();
                *cq_context = (*p).cq.cq.cq_context;
            }
            return Ok(0);
        }
    })
}

/// `ibv_ack_cq_events`.
pub unsafe extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, n: c_uint) {
    entry("ibv_ack_cq_events", Ret::VOID, |_| {
        // SAFETY: NULL or the caller's live CQ.
        if let Some(c) = unsafe { cq.as_mut() } {
            c.comp_events_completed = c.comp_events_completed.wrapping_add(n);
        }
        Ok(())
    })
}

fn ex<'a>(cq: *mut ibv_cq_ex) -> &'a SoftCq {
    // SAFETY: the extended poll functions are called on a live CQ of ours.
    unsafe { SoftCq::from_ptr(cq.cast()) }
}

/// Loads the next completion into the CQ's current slot and its public fields; ENOENT
/// when there is none.
fn load_next(cq: *mut ibv_cq_ex) -> c_int {
    let s = ex(cq);
    let mut cur = s.cur.lock();
    *cur = s.inner.poll_one().map(|c| {
        if s.stamps {
            (
                c,
                nanos(clock(libc::CLOCK_MONOTONIC)),
                nanos(clock(libc::CLOCK_REALTIME)),
            )
        } else {
            (c, 0, 0)
        }
    });
    match &*cur {
        Some((c, _, _)) => {
            // SAFETY: the caller's live CQ; the fields it reads directly.
            unsafe {
                (*cq).status = c.status as c_int;
                (*cq).wr_id = c.wr_id;
            }
            0
        }
        None => libc::ENOENT,
    }
}

unsafe extern "C" fn start_poll(cq: *mut ibv_cq_ex, attr: *mut c_void) -> c_int {
    entry("ibv_start_poll", Ret::ERRNO, |v| {
        // SAFETY: a CQ the caller got from this library.
        unsafe { own::<SoftCq>(v, cq.cast()) }?;
        // SAFETY: NULL or the caller's attr, whose comp_mask must be 0.
        if unsafe { attr.cast::<u32>().as_ref() }.is_some_and(|m| *m != 0) {
            return Ok(libc::EINVAL);
        }
        Ok(load_next(cq))
    })
}

unsafe extern "C" fn next_poll(cq: *mut ibv_cq_ex) -> c_int {
    entry("ibv_next_poll", Ret::ERRNO, |_| Ok(load_next(cq)))
}

unsafe extern "C" fn end_poll(cq: *mut ibv_cq_ex) {
    entry("ibv_end_poll", Ret::VOID, |_| {
        *ex(cq).cur.lock() = None;
        Ok(())
    })
}

fn read<T: Default>(cq: *mut ibv_cq_ex, f: impl FnOnce(&ibv_wc) -> T) -> T {
    let ret = Ret::new(|_| T::default(), T::default());
    entry("ibv_read_*", ret, |_| {
        let s = ex(cq);
        let cur = s.cur.lock();
        Ok(cur
            .as_ref()
            .map(|(c, _, _)| f(&to_wc(c, s.grh_sl)))
            .unwrap_or_default())
    })
}

fn stamp(cq: *mut ibv_cq_ex, wall: bool) -> u64 {
    entry("ibv_wc_read_completion_ts", Ret::new(|_| 0, 0), |_| {
        let cur = ex(cq).cur.lock();
        Ok(cur
            .as_ref()
            .map_or(0, |&(_, mono, real)| if wall { real } else { mono }))
    })
}

unsafe extern "C" fn read_completion_ts(cq: *mut ibv_cq_ex) -> u64 {
    stamp(cq, false)
}
unsafe extern "C" fn read_completion_wallclock_ns(cq: *mut ibv_cq_ex) -> u64 {
    stamp(cq, true)
}

/// Installs the `read_*` functions of `ex` that read a field of the current completion
/// as an `ibv_wc` has it: each a [`read`] of its field.
fn set_readers(ex: &mut ibv_cq_ex) {
    macro_rules! readers {
        ($($name:ident -> $t:ty: |$w:ident| $field:expr;)*) => {$(
            unsafe extern "C" fn $name(cq: *mut ibv_cq_ex) -> $t {
                read(cq, |$w| $field)
            }
            ex.$name = Some($name);
        )*};
    }
    readers! {
        read_opcode -> c_int: |w| w.opcode;
        read_vendor_err -> u32: |w| w.vendor_err;
        read_byte_len -> u32: |w| w.byte_len;
        read_imm_data -> u32: |w| w.imm_data;
        read_qp_num -> u32: |w| w.qp_num;
        read_src_qp -> u32: |w| w.src_qp;
        read_wc_flags -> c_uint: |w| w.wc_flags;
        read_slid -> u32: |w| u32::from(w.slid);
        read_sl -> u8: |w| w.sl;
        read_dlid_path_bits -> u8: |w| w.dlid_path_bits;
    }
}
