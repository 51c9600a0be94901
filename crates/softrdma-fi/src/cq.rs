//! The completion queue (`fid_cq`): the fabric layer's [`CompletionQueue`], read out in
//! the format the application chose (context, msg, data or tagged). A read drives the
//! endpoints bound to it, so a program that only polls still makes progress; the
//! endpoints' own threads make it otherwise.
//!
//! `fi_cq_read` stops at an error entry and says so with `-FI_EAVAIL`; `fi_cq_readerr`
//! then takes it. The blocking reads (`fi_cq_sread`) wait by polling, spinning briefly
//! first. A CQ opened with `FI_WAIT_FD` has a descriptor (`fi_control(FI_GETWAIT)`) that
//! polls readable while entries wait, for `poll(2)` after `fi_trywait`; wait sets and
//! wait conditions are not offered.

use crate::abi::*;
use crate::domain::Domain;
use crate::entry::{self, guard_int, object};
use crate::wait::{error_string, wait_for};
use softrdma_fabric::{Completion, CompletionQueue, flags};
use std::ffi::{c_char, c_int, c_void};
use std::sync::Arc;

/// A completion queue.
#[repr(C)]
pub struct Cq {
    fid: fid_cq,
    /// The queue, shared with the endpoints bound to it.
    pub cq: Arc<CompletionQueue>,
    format: u32,
}

object!(Cq, FI_CLASS_CQ, CQ_FI_OPS, control: cq_control);

static CQ_OPS: Ops<fi_ops_cq> = Ops(fi_ops_cq {
    size: size_of::<fi_ops_cq>(),
    read: cq_read as Slot,
    readfrom: cq_readfrom as Slot,
    readerr: cq_readerr as Slot,
    sread: cq_sread as Slot,
    sreadfrom: cq_sreadfrom as Slot,
    signal: cq_signal as Slot,
    strerror: strerror as Slot,
});

/// `fi_cq_open`.
pub unsafe extern "C" fn cq_open(
    domain: *mut fid_domain,
    attr: *mut fi_cq_attr,
    cq: *mut *mut fid_cq,
    context: *mut c_void,
) -> c_int {
    guard_int(|| {
        entry::get::<Domain>(domain.cast())?;
        // SAFETY: libfabric's attr, valid or null.
        let attr = unsafe { attr.as_ref() }.ok_or(FI_EINVAL)?;
        if cq.is_null() {
            return Err(FI_EINVAL);
        }
        let format = match attr.format {
            FI_CQ_FORMAT_UNSPEC => FI_CQ_FORMAT_CONTEXT,
            f @ FI_CQ_FORMAT_CONTEXT..=FI_CQ_FORMAT_TAGGED => f,
            _ => return Err(FI_ENOSYS),
        };
        if ![FI_WAIT_NONE, FI_WAIT_UNSPEC, FI_WAIT_YIELD, FI_WAIT_FD].contains(&attr.wait_obj)
            || attr.wait_cond != 0
            || !attr.wait_set.is_null()
        {
            return Err(FI_ENOSYS);
        }
        let queue = if attr.wait_obj == FI_WAIT_FD {
            CompletionQueue::with_fd().map_err(|_| FI_ENOMEM)?
        } else {
            CompletionQueue::new()
        };
        let c = entry::open(Cq {
            fid: fid_cq {
                fid: fid {
                    fclass: FI_CLASS_CQ,
                    context,
                    ops: &CQ_FI_OPS.0,
                },
                ops: &CQ_OPS.0,
            },
            cq: queue,
            format,
        });
        // SAFETY: `cq` is writable, checked non-null.
        unsafe { *cq = c.cast() };
        Ok(0)
    })
}

/// The size of one entry of `format`.
fn entry_size(format: u32) -> usize {
    match format {
        FI_CQ_FORMAT_CONTEXT => 8,
        FI_CQ_FORMAT_MSG => 24,
        FI_CQ_FORMAT_DATA => 40,
        _ => size_of::<fi_cq_tagged_entry>(),
    }
}

/// A completion as C's widest entry; the narrower formats are its prefixes.
fn tagged(c: &Completion) -> fi_cq_tagged_entry {
    fi_cq_tagged_entry {
        op_context: c.context as *mut c_void,
        flags: c.flags,
        len: c.len,
        // A multi-receive buffer's last entry gives the whole buffer back: its message
        // lies at its offset.
        buf: if c.flags & flags::RECV != 0 {
            let off = if c.flags & flags::MULTI_RECV != 0 {
                c.offset as u64
            } else {
                0
            };
            (c.buf.addr() + off) as *mut c_void
        } else {
            std::ptr::null_mut()
        },
        data: c.data.unwrap_or(0),
        tag: if c.flags & flags::TAGGED != 0 {
            c.tag
        } else {
            0
        },
    }
}

fn read_into(cq: *mut fid_cq, buf: *mut c_void, count: usize, src: *mut fi_addr_t) -> isize {
    entry::guard(|| {
        let c = entry::get::<Cq>(cq.cast())?;
        if buf.is_null() && count != 0 {
            return Err(FI_EINVAL);
        }
        let size = entry_size(c.format);
        let mut i = 0;
        let (got, error_next) = c.cq.read_ok_each(count, |e| {
            let t = tagged(&e);
            // SAFETY: the caller's array of `count` entries of its format (`size`
            // bytes each), and `count` source addresses when `src` is given; `t`'s first
            // `size` bytes are that format's entry; `read_ok_each` gives at most `count`.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    (&raw const t).cast::<u8>(),
                    buf.cast::<u8>().add(i * size),
                    size,
                );
                if !src.is_null() {
                    *src.add(i) = e.src;
                }
            }
            i += 1;
        });
        if got == 0 {
            return Err(if error_next { FI_EAVAIL } else { FI_EAGAIN });
        }
        Ok(got as isize)
    })
}

unsafe extern "C" fn cq_read(cq: *mut fid_cq, buf: *mut c_void, count: usize) -> isize {
    read_into(cq, buf, count, std::ptr::null_mut())
}

unsafe extern "C" fn cq_readfrom(
    cq: *mut fid_cq,
    buf: *mut c_void,
    count: usize,
    src: *mut fi_addr_t,
) -> isize {
    read_into(cq, buf, count, src)
}

unsafe extern "C" fn cq_readerr(cq: *mut fid_cq, buf: *mut fi_cq_err_entry, _flags: u64) -> isize {
    entry::guard(|| {
        let c = entry::get::<Cq>(cq.cast())?;
        if buf.is_null() {
            return Err(FI_EINVAL);
        }
        let Some(e) = c.cq.read_error() else {
            return Err(FI_EAGAIN);
        };
        let t = tagged(&e);
        // SAFETY: the caller's entry. Its `err_data` buffer, if any, is left as given:
        // this provider has no error data (its size is set to 0).
        unsafe {
            let b = &mut *buf;
            b.op_context = t.op_context;
            b.flags = t.flags;
            b.len = t.len;
            b.buf = t.buf;
            b.data = t.data;
            b.tag = t.tag;
            b.olen = e.olen;
            b.err = e.error;
            b.prov_errno = e.error;
            b.err_data_size = 0;
        }
        Ok(1)
    })
}

unsafe extern "C" fn cq_sread(
    cq: *mut fid_cq,
    buf: *mut c_void,
    count: usize,
    _cond: *const c_void,
    timeout: c_int,
) -> isize {
    wait_for(timeout, || read_into(cq, buf, count, std::ptr::null_mut()))
}

unsafe extern "C" fn cq_sreadfrom(
    cq: *mut fid_cq,
    buf: *mut c_void,
    count: usize,
    src: *mut fi_addr_t,
    _cond: *const c_void,
    timeout: c_int,
) -> isize {
    wait_for(timeout, || read_into(cq, buf, count, src))
}

unsafe extern "C" fn cq_signal(_cq: *mut fid_cq) -> c_int {
    // A waiter polls: it sees what there is without being woken.
    0
}

/// `fi_cq_strerror` and `fi_eq_strerror`: the text of a provider error number (this
/// provider's are errnos).
pub unsafe extern "C" fn strerror(
    _fid: *mut c_void,
    prov_errno: c_int,
    _err_data: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
    let text = match prov_errno {
        softrdma_fabric::errno::ETRUNC => "message longer than the receive buffer".to_owned(),
        e => std::io::Error::from_raw_os_error(e).to_string(),
    };
    // SAFETY: the caller's buffer of `len` bytes, or null.
    unsafe { error_string(&format!("softrdma: {text}"), buf, len) }
}

/// `fi_control` of a CQ: `FI_GETWAIT` gives the descriptor of a CQ opened with
/// `FI_WAIT_FD` (into the caller's `int`).
unsafe extern "C" fn cq_control(f: *mut fid, command: c_int, arg: *mut c_void) -> c_int {
    guard_int(|| {
        let c = entry::get::<Cq>(f)?;
        crate::wait::control(command, c.cq.fd(), arg)
    })
}
