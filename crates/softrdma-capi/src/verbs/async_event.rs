//! Asynchronous events: `ibv_get_async_event` on a pollable `async_fd`, naming the QP, CQ
//! or SRQ each engine event is about.

use super::context::{SoftContext, own};
use super::cq::cq_that_overflowed;
use super::qp::qp_by_num;
use super::srq::srq_that_reached_its_limit;
use crate::abi::*;
use crate::ffi::{Ret, entry};
use softrdma::AsyncEvent;
use std::ffi::c_int;

/// `ibv_get_async_event`: blocks on the context's `async_fd` until an event arrives,
/// unless the caller made it non-blocking (then EAGAIN).
pub unsafe extern "C" fn ibv_get_async_event(
    ctx: *mut ibv_context,
    event: *mut ibv_async_event,
) -> c_int {
    entry("ibv_get_async_event", Ret::MINUS_ONE, |v| {
        v.non_null(&[ctx.cast(), event.cast()])?;
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
    // The event about `element`, if its object is still there (`live`).
    let about = |live: bool, element, event_type| {
        live.then_some(ibv_async_event {
            element,
            event_type,
        })
    };
    let qp = |n: softrdma::Qpn, ty| {
        let qp = qp_by_num(soft, n.value());
        about(!qp.is_null(), ibv_event_element { qp }, ty)
    };
    match e {
        AsyncEvent::CqError => {
            let cq = cq_that_overflowed(soft);
            about(!cq.is_null(), ibv_event_element { cq }, IBV_EVENT_CQ_ERR)
        }
        AsyncEvent::QpFatal(n) => qp(n, IBV_EVENT_QP_FATAL),
        AsyncEvent::QpRequestError(n) => qp(n, IBV_EVENT_QP_REQ_ERR),
        AsyncEvent::QpAccessError(n) => qp(n, IBV_EVENT_QP_ACCESS_ERR),
        AsyncEvent::SqDrained(n) => qp(n, IBV_EVENT_SQ_DRAINED),
        AsyncEvent::PortActive(p) => {
            let port_num = c_int::from(p);
            about(true, ibv_event_element { port_num }, IBV_EVENT_PORT_ACTIVE)
        }
        AsyncEvent::SrqLimitReached => {
            let srq = srq_that_reached_its_limit(soft);
            about(
                !srq.is_null(),
                ibv_event_element { srq },
                IBV_EVENT_SRQ_LIMIT_REACHED,
            )
        }
        AsyncEvent::LastWqeReached(n) => qp(n, IBV_EVENT_QP_LAST_WQE_REACHED),
    }
}

/// `ibv_ack_async_event`: nothing waits for acknowledgements here.
pub unsafe extern "C" fn ibv_ack_async_event(_event: *mut ibv_async_event) {}
