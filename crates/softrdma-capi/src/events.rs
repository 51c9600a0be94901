//! Asynchronous events (`ibv_get_async_event` on a pollable `async_fd`), fork support, and
//! the string and rate helpers of libibverbs.

use crate::abi::*;
use crate::device::{SoftContext, own};
use crate::ffi::{Ret, entry};
use softrdma::AsyncEvent;
use std::ffi::{CStr, c_char, c_int};

/// `ibv_get_async_event`: blocks on the context's `async_fd` until an event arrives,
/// unless the caller made it non-blocking (then EAGAIN).
pub unsafe extern "C" fn ibv_get_async_event(
    ctx: *mut ibv_context,
    event: *mut ibv_async_event,
) -> c_int {
    entry("ibv_get_async_event", Ret::MINUS_ONE, |v| {
        v.ensure(
            !ctx.is_null() && !event.is_null(),
            libc::EINVAL,
            &"NULL argument",
        )?;
        // SAFETY: a context the caller got from this library.
        let soft = unsafe { own::<SoftContext>(v, ctx) }?;
        let fd = soft.vctx.context.async_fd;
        loop {
            if let Some(e) = soft.events.pop() {
                let Some(out) = to_c(soft, e) else { continue };
                // SAFETY: the caller's writable event.
                unsafe { *event = out };
                return Ok(0);
            }
            // SAFETY: fcntl on the context's own descriptor.
            let nonblock =
                fd < 0 || unsafe { libc::fcntl(fd, libc::F_GETFL) } & libc::O_NONBLOCK != 0;
            if nonblock {
                return Err(v.quiet(libc::EAGAIN));
            }
            let mut p = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            if unsafe { libc::poll(&mut p, 1, -1) } < 0 {
                // EINTR too goes back to the caller, as rdma-core's read(2) does.
                let e = std::io::Error::last_os_error();
                return Err(v.quiet(e.raw_os_error().unwrap_or(libc::EIO)));
            }
        }
    })
}

/// The C form of an event; `None` for one whose object is gone or belongs to another
/// context of the device (each context's queue sees the whole device's events; the
/// kernel sends a context only its own objects' and the port's).
fn to_c(soft: &SoftContext, e: AsyncEvent) -> Option<ibv_async_event> {
    let qp = |n: softrdma::Qpn, ty| {
        let p = crate::qp::qp_by_num(soft, n.value());
        (!p.is_null()).then_some(ibv_async_event {
            element: ibv_event_element { qp: p },
            event_type: ty,
        })
    };
    match e {
        AsyncEvent::CqError => {
            let cq = crate::cq::cq_that_overflowed(soft);
            (!cq.is_null()).then_some(ibv_async_event {
                element: ibv_event_element { cq },
                event_type: IBV_EVENT_CQ_ERR,
            })
        }
        AsyncEvent::QpFatal(n) => qp(n, IBV_EVENT_QP_FATAL),
        AsyncEvent::QpRequestError(n) => qp(n, IBV_EVENT_QP_REQ_ERR),
        AsyncEvent::QpAccessError(n) => qp(n, IBV_EVENT_QP_ACCESS_ERR),
        AsyncEvent::SqDrained(n) => qp(n, IBV_EVENT_SQ_DRAINED),
        AsyncEvent::PortActive(p) => Some(ibv_async_event {
            element: ibv_event_element {
                port_num: c_int::from(p),
            },
            event_type: IBV_EVENT_PORT_ACTIVE,
        }),
        AsyncEvent::SrqLimitReached => {
            let srq = crate::qp::srq_that_reached_its_limit(soft);
            (!srq.is_null()).then_some(ibv_async_event {
                element: ibv_event_element { srq },
                event_type: IBV_EVENT_SRQ_LIMIT_REACHED,
            })
        }
        AsyncEvent::LastWqeReached(n) => qp(n, IBV_EVENT_QP_LAST_WQE_REACHED),
    }
}

/// `ibv_ack_async_event`: nothing waits for acknowledgements here.
pub unsafe extern "C" fn ibv_ack_async_event(_event: *mut ibv_async_event) {}

/// `ibv_fork_init`: nothing to do. softrdma pins no memory for a device to write (the
/// device is this process), so a forked child's copy-on-write cannot take pages from
/// under it. What a child may do with a parent's objects is in the `device` module's
/// docs: nothing but destroy them, which leaves the parent's untouched.
pub extern "C" fn ibv_fork_init() -> c_int {
    0
}

/// `ibv_is_fork_initialized`: `IBV_FORK_UNNEEDED` (see [`ibv_fork_init`]).
pub extern "C" fn ibv_is_fork_initialized() -> c_int {
    2
}

/// `ibv_dontfork_range`: nothing to do (see [`ibv_fork_init`]).
pub extern "C" fn ibv_dontfork_range(_base: *mut std::ffi::c_void, _size: usize) -> c_int {
    0
}

/// `ibv_dofork_range`: nothing to do.
pub extern "C" fn ibv_dofork_range(_base: *mut std::ffi::c_void, _size: usize) -> c_int {
    0
}

fn pick(table: &[&'static CStr], i: c_int) -> *const c_char {
    usize::try_from(i)
        .ok()
        .and_then(|i| table.get(i))
        .copied()
        .unwrap_or(c"unknown")
        .as_ptr()
}

/// `ibv_wc_status_str`: rdma-core's wording.
pub extern "C" fn ibv_wc_status_str(status: c_int) -> *const c_char {
    const T: &[&CStr] = &[
        c"success",
        c"local length error",
        c"local QP operation error",
        c"local EE context operation error",
        c"local protection error",
        c"Work Request Flushed Error",
        c"memory management operation error",
        c"bad response error",
        c"local access error",
        c"remote invalid request error",
        c"remote access error",
        c"remote operation error",
        c"transport retry counter exceeded",
        c"RNR retry counter exceeded",
        c"local RDD violation error",
        c"remote invalid RD request",
        c"aborted error",
        c"invalid EE context number",
        c"invalid EE context state",
        c"fatal error",
        c"response timeout error",
        c"general error",
        c"TM error",
        c"TM software rendezvous",
    ];
    pick(T, status)
}

/// `ibv_event_type_str`.
pub extern "C" fn ibv_event_type_str(ev: c_int) -> *const c_char {
    const T: &[&CStr] = &[
        c"CQ error",
        c"local work queue catastrophic error",
        c"invalid request local work queue error",
        c"local access violation work queue error",
        c"communication established",
        c"send queue drained",
        c"path migrated",
        c"path migration request error",
        c"local catastrophic error",
        c"port active",
        c"port error",
        c"LID change",
        c"P_Key change",
        c"SM change",
        c"SRQ catastrophic error",
        c"SRQ limit reached",
        c"last WQE reached",
        c"client reregistration",
        c"GID table change",
        c"WQ fatal",
    ];
    pick(T, ev)
}

/// `ibv_node_type_str`.
pub extern "C" fn ibv_node_type_str(t: c_int) -> *const c_char {
    const T: &[&CStr] = &[
        c"unknown",
        c"InfiniBand channel adapter",
        c"InfiniBand switch",
        c"InfiniBand router",
        c"iWARP NIC",
        c"usNIC",
        c"usNIC UDP",
        c"unspecified",
    ];
    pick(T, t)
}

/// `ibv_port_state_str`.
pub extern "C" fn ibv_port_state_str(s: c_int) -> *const c_char {
    const T: &[&CStr] = &[
        c"no state change (NOP)",
        c"down",
        c"init",
        c"armed",
        c"active",
        c"active defer",
    ];
    pick(T, s)
}

/// `enum ibv_rate` → (multiple of 2.5 Gb/s, Mb/s); index = the enum value.
const RATES: &[(c_int, c_int)] = &[
    (0, 0),
    (0, 0),
    (1, 2500),
    (4, 10000),
    (12, 30000),
    (2, 5000),
    (8, 20000),
    (16, 40000),
    (24, 60000),
    (32, 80000),
    (48, 120000),
    (0, 14062),
    (0, 56250),
    (0, 112500),
    (0, 168750),
    (0, 25781),
    (0, 103125),
    (0, 206250),
    (0, 309375),
    (0, 28125),
    (0, 53125),
    (0, 425000),
    (0, 637500),
];

fn rate(r: c_int) -> Option<(c_int, c_int)> {
    usize::try_from(r).ok().and_then(|i| RATES.get(i)).copied()
}

/// `ibv_rate_to_mult`.
pub extern "C" fn ibv_rate_to_mult(r: c_int) -> c_int {
    rate(r).map_or(-1, |(m, _)| if m == 0 { -1 } else { m })
}

/// `mult_to_ibv_rate`.
pub extern "C" fn mult_to_ibv_rate(mult: c_int) -> c_int {
    RATES
        .iter()
        .position(|&(m, _)| m == mult && m != 0)
        .map_or(0, |i| i as c_int)
}

/// `ibv_rate_to_mbps`.
pub extern "C" fn ibv_rate_to_mbps(r: c_int) -> c_int {
    rate(r).map_or(-1, |(_, mbps)| if mbps == 0 { -1 } else { mbps })
}

/// `mbps_to_ibv_rate`.
pub extern "C" fn mbps_to_ibv_rate(mbps: c_int) -> c_int {
    RATES
        .iter()
        .position(|&(_, m)| m == mbps && m != 0)
        .map_or(0, |i| i as c_int)
}
