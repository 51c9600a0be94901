//! The event queue (`fid_eq`): the events the application writes (`fi_eq_write`) and the
//! fabric layer's connection events ([`softrdma_fabric::EventQueue`], which passive and
//! MSG endpoints bound to this EQ fill), read as libfabric's entries. A connection
//! request becomes `FI_CONNREQ` with an info whose `handle` is a [`ConnReq`] (for
//! `fi_endpoint` and `fi_accept`, or `fi_reject`); a connection made `FI_CONNECTED`; an
//! ended one `FI_SHUTDOWN`; one that could not be made an error entry
//! (`-FI_EAVAIL`, then `fi_eq_readerr`). Private data follows an entry, exactly as the
//! peer gave it. The application's own events (`fi_eq_write`) come in their place among
//! them. `FI_PEEK` looks at an event of the application's only (a connection event is
//! not peeked: reading a request makes its handle). An EQ opened with `FI_WAIT_FD` has a
//! descriptor (`fi_control(FI_GETWAIT)`) that polls readable while events wait, and
//! `fi_trywait` takes it.
//!
//! Threads and locks: a request's connection is behind `FiEpSetup`, taken alone; the
//! fabric layer's queue (all the events) has its own.

use crate::abi::*;
use crate::entry::{self, guard, guard_int, object};
use softrdma::sync::{Lock, Rank};
use softrdma_fabric::{ConnRequest, Event, EventQueue};
use std::ffi::{c_int, c_void};
use std::sync::{Arc, Weak};

/// An event queue.
#[repr(C)]
pub struct Eq {
    fid: fid_eq,
    /// Its events: the application's, and those the fabric layer's endpoints bound to it
    /// put there.
    pub cm: Arc<EventQueue>,
    /// The API version of the fabric it was opened on (for a request's info).
    api_version: u32,
    /// The requests read from it, by their handles, until each is taken.
    reqs: Lock<Vec<(usize, Weak<Pending>)>>,
}

impl Drop for Eq {
    /// The requests read from it that were neither accepted nor rejected are refused, and
    /// their handles closed: nothing can take them any more, and the peer would otherwise
    /// wait out its connect timeout (libfabric's `fi_freeinfo` does not close a handle).
    fn drop(&mut self) {
        let reqs = std::mem::take(&mut *self.reqs.lock());
        for (handle, weak) in reqs {
            let Some(shared) = weak.upgrade() else {
                continue;
            };
            // Closed only if that address still holds this request's handle.
            let _ =
                entry::close_if::<ConnReq>(handle as *mut fid, |c| Arc::ptr_eq(&c.req, &shared));
            if let Some(r) = shared.lock().take() {
                let _ = r.reject(&[]);
            }
        }
    }
}

object!(Eq, FI_CLASS_EQ, EQ_FI_OPS, control: eq_control);

/// A connection request, as an `FI_CONNREQ` info's `handle`: taken by the endpoint that
/// accepts it, or by `fi_reject`.
#[repr(C)]
pub struct ConnReq {
    fid: fid,
    /// Shared with the EQ that gave it out, which refuses it if it is left (see `Eq`'s
    /// drop).
    req: Arc<Pending>,
}

/// A request's connection until an endpoint or `fi_reject` takes it.
type Pending = Lock<Option<ConnRequest>>;

object!(ConnReq, FI_CLASS_CONNREQ, CONNREQ_FI_OPS);

impl ConnReq {
    /// Takes the request behind `handle` (once), and closes the handle.
    pub fn take(handle: *mut fid) -> Result<ConnRequest, entry::Errno> {
        let c = entry::close::<ConnReq>(handle)?;
        c.req.lock().take().ok_or(FI_EINVAL)
    }
}

static EQ_OPS: Ops<fi_ops_eq> = Ops(fi_ops_eq {
    size: size_of::<fi_ops_eq>(),
    read: eq_read as Slot,
    readerr: eq_readerr as Slot,
    write: eq_write as Slot,
    sread: eq_sread as Slot,
    strerror: crate::cq::strerror as Slot,
});

/// `fi_eq_open`.
pub unsafe extern "C" fn eq_open(
    fabric: *mut fid_fabric,
    attr: *mut fi_eq_attr,
    eq: *mut *mut fid_eq,
    context: *mut c_void,
) -> c_int {
    guard_int(|| {
        if entry::class_of(fabric.cast()) != Some(FI_CLASS_FABRIC) {
            return Err(FI_EINVAL);
        }
        // SAFETY: a live fabric of this provider.
        let api_version = unsafe { (*fabric).api_version };
        // SAFETY: libfabric's attr, valid or null.
        let attr = unsafe { attr.as_ref() }.ok_or(FI_EINVAL)?;
        if eq.is_null() {
            return Err(FI_EINVAL);
        }
        if ![FI_WAIT_NONE, FI_WAIT_UNSPEC, FI_WAIT_YIELD, FI_WAIT_FD].contains(&attr.wait_obj)
            || !attr.wait_set.is_null()
        {
            return Err(FI_ENOSYS);
        }
        let cm = if attr.wait_obj == FI_WAIT_FD {
            EventQueue::with_fd().map_err(|_| FI_ENOMEM)?
        } else {
            EventQueue::new()
        };
        let e = entry::open(Eq {
            fid: fid_eq {
                fid: fid {
                    fclass: FI_CLASS_EQ,
                    context,
                    ops: &EQ_FI_OPS.0,
                },
                ops: &EQ_OPS.0,
            },
            cm,
            api_version,
            reqs: Lock::new(Rank::FiEq, Vec::new()),
        });
        // SAFETY: `eq` is writable, checked non-null.
        unsafe { *eq = e.cast() };
        Ok(0)
    })
}

/// `FI_PEEK` as an EQ read flag.
const EQ_PEEK: u64 = FI_PEEK;

/// Copies `parts` one after the other into the caller's `buf` (which the caller checked
/// holds them) and the event number into `event`; the bytes written.
fn deliver(event: *mut u32, ev: u32, buf: *mut c_void, parts: [&[u8]; 2]) -> isize {
    let n: usize = parts.iter().map(|p| p.len()).sum();
    // SAFETY: `event` is the caller's, writable if not null; `buf` holds `n` bytes
    // (checked by the caller).
    unsafe {
        if !event.is_null() {
            *event = ev;
        }
        let mut at = buf.cast::<u8>();
        for p in parts {
            std::ptr::copy_nonoverlapping(p.as_ptr(), at, p.len());
            at = at.add(p.len());
        }
    }
    n as isize
}

/// The bytes of an `fi_eq_cm_entry` for `fid` and `info`.
fn cm_entry(fid: *mut fid, info: *mut fi_info) -> [u8; size_of::<fi_eq_cm_entry>()] {
    let mut b = [0u8; size_of::<fi_eq_cm_entry>()];
    b[..8].copy_from_slice(&(fid as usize).to_ne_bytes());
    b[8..].copy_from_slice(&(info as usize).to_ne_bytes());
    b
}

/// Reads the oldest event into the caller's buffer.
fn read_event(
    e: &Eq,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
) -> Result<isize, entry::Errno> {
    let Some(ev) = e.cm.read() else {
        return Err(FI_EAGAIN);
    };
    if matches!(ev, Event::Failed { .. }) {
        // For fi_eq_readerr.
        e.cm.unread(ev);
        return Err(FI_EAVAIL);
    }
    let cm = size_of::<fi_eq_cm_entry>();
    let need = match &ev {
        Event::ConnRequest { req, .. } => cm + req.private_data.len(),
        Event::Connected { private_data, .. } => cm + private_data.len(),
        Event::User { data, .. } => data.len(),
        _ => cm,
    };
    if len < need || (buf.is_null() && need > 0) {
        e.cm.unread(ev);
        return Err(FI_ETOOSMALL);
    }
    let n = match ev {
        Event::ConnRequest { tag, req } => {
            let (local, peer) = (req.local, req.peer);
            let data = req.private_data.clone();
            let shared = Arc::new(Lock::new(Rank::FiEpSetup, Some(req)));
            let handle = entry::open(ConnReq {
                fid: fid {
                    fclass: FI_CLASS_CONNREQ,
                    context: std::ptr::null_mut(),
                    ops: &CONNREQ_FI_OPS.0,
                },
                req: shared.clone(),
            });
            {
                let mut reqs = e.reqs.lock();
                reqs.retain(|(_, w)| w.strong_count() > 0);
                reqs.push((handle as usize, Arc::downgrade(&shared)));
            }
            let info = crate::info::connreq_info(e.api_version, local, peer, handle.cast());
            let Some(info) = info else {
                // No info to give (the device is gone from the configuration): refused.
                if let Ok(r) = ConnReq::take(handle.cast()) {
                    let _ = r.reject(&[]);
                }
                return Err(FI_EAGAIN);
            };
            let entry = cm_entry(tag as *mut fid, info);
            deliver(event, FI_CONNREQ, buf, [&entry, &data])
        }
        Event::Connected { tag, private_data } => {
            let entry = cm_entry(tag as *mut fid, std::ptr::null_mut());
            deliver(event, FI_CONNECTED, buf, [&entry, &private_data])
        }
        Event::Shutdown { tag } => {
            let entry = cm_entry(tag as *mut fid, std::ptr::null_mut());
            deliver(event, FI_SHUTDOWN, buf, [&entry, &[]])
        }
        Event::User { event: ev, data } => deliver(event, ev, buf, [&data, &[]]),
        Event::Failed { .. } => unreachable!("put back above"),
    };
    Ok(n)
}

unsafe extern "C" fn eq_read(
    eq: *mut fid_eq,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
    flags: u64,
) -> isize {
    guard(|| {
        let e = entry::get::<Eq>(eq.cast())?;
        if flags & EQ_PEEK == 0 {
            return read_event(e, event, buf, len);
        }
        let (ev, data) = e.cm.peek_user().ok_or(FI_EAGAIN)?;
        if len < data.len() || (buf.is_null() && !data.is_empty()) {
            return Err(FI_ETOOSMALL);
        }
        Ok(deliver(event, ev, buf, [&data, &[]]))
    })
}

/// `fi_eq_readerr`: a connection that could not be made, with the endpoint's fid and
/// context.
unsafe extern "C" fn eq_readerr(eq: *mut fid_eq, buf: *mut fi_eq_err_entry, _flags: u64) -> isize {
    guard(|| {
        let e = entry::get::<Eq>(eq.cast())?;
        if buf.is_null() {
            return Err(FI_EINVAL);
        }
        let (tag, error) = match e.cm.read() {
            Some(Event::Failed { tag, error, .. }) => (tag, error),
            Some(other) => {
                e.cm.unread(other);
                return Err(FI_EAGAIN);
            }
            None => return Err(FI_EAGAIN),
        };
        let f = tag as *mut fid;
        let context = if entry::class_of(f).is_some() {
            // SAFETY: a live object of this provider: its fid is readable.
            unsafe { (*f).context }
        } else {
            std::ptr::null_mut()
        };
        // SAFETY: the caller's entry, checked non-null.
        unsafe {
            let b = &mut *buf;
            b.fid = f;
            b.context = context;
            b.data = 0;
            b.err = error;
            b.prov_errno = error;
            b.err_data = std::ptr::null_mut();
            b.err_data_size = 0;
        }
        Ok(size_of::<fi_eq_err_entry>() as isize)
    })
}

unsafe extern "C" fn eq_write(
    eq: *mut fid_eq,
    event: u32,
    buf: *const c_void,
    len: usize,
    _flags: u64,
) -> isize {
    guard(|| {
        let e = entry::get::<Eq>(eq.cast())?;
        if buf.is_null() && len != 0 {
            return Err(FI_EINVAL);
        }
        let data = if len == 0 {
            Vec::new()
        } else {
            // SAFETY: the caller's `len` bytes at `buf`.
            unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len).to_vec() }
        };
        e.cm.write(event, data);
        Ok(len as isize)
    })
}

unsafe extern "C" fn eq_sread(
    eq: *mut fid_eq,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
    timeout: c_int,
    flags: u64,
) -> isize {
    crate::wait::wait_for(timeout, || {
        // SAFETY: forwarded from libfabric.
        unsafe { eq_read(eq, event, buf, len, flags) }
    })
}

/// `fi_control` of an EQ: `FI_GETWAIT` gives the descriptor of an EQ opened with
/// `FI_WAIT_FD` (into the caller's `int`).
unsafe extern "C" fn eq_control(f: *mut fid, command: c_int, arg: *mut c_void) -> c_int {
    guard_int(|| {
        let e = entry::get::<Eq>(f)?;
        crate::wait::control(command, e.cm.fd(), arg)
    })
}
