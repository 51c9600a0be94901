//! The device verbs: the device list, `ibv_open_device` (a `struct verbs_context` around
//! each context, whose table names the verbs each other module serves) and
//! `ibv_close_device`.

use super::context::{SoftContext, device, devices, to_destroy};
use super::fork::generation;
use crate::abi::*;
use crate::ffi::{Object, Ret, entry, null_terminated, set_errno};
use softrdma::sync::{Lock, Rank};
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void};

/// `ibv_get_device_list`: a NULL-terminated array, freed by `ibv_free_device_list`.
pub unsafe extern "C" fn ibv_get_device_list(num: *mut c_int) -> *mut *mut ibv_device {
    entry("ibv_get_device_list", Ret::NULL, |v| {
        let devs = devices();
        // The devices live for the process.
        let ptrs: Vec<*mut ibv_device> =
            devs.iter().map(|d| (&raw const d.dev).cast_mut()).collect();
        let list = null_terminated(&ptrs);
        if list.is_null() {
            return Err(v.quiet(libc::ENOMEM));
        }
        if !num.is_null() {
            // SAFETY: the caller passes a valid int or NULL.
            unsafe { *num = devs.len() as c_int };
        }
        if devs.is_empty() {
            set_errno(libc::ENOSYS);
        }
        Ok(list)
    })
}

/// `ibv_free_device_list`.
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    entry("ibv_free_device_list", Ret::VOID, |_| {
        // SAFETY: `list` came from ibv_get_device_list's calloc (or is NULL).
        unsafe { libc::free(list.cast()) };
        Ok(())
    })
}

/// `ibv_get_device_name`.
pub unsafe extern "C" fn ibv_get_device_name(dev: *mut ibv_device) -> *const c_char {
    let null = Ret::new(|_| std::ptr::null(), std::ptr::null());
    entry("ibv_get_device_name", null, |v| match device(dev) {
        Some(d) => Ok(d.dev.name.as_ptr()),
        None => Err(v.quiet(libc::EINVAL)),
    })
}

/// `ibv_get_device_guid`: the node GUID, in network order.
pub unsafe extern "C" fn ibv_get_device_guid(dev: *mut ibv_device) -> u64 {
    entry("ibv_get_device_guid", Ret::new(|_| 0, 0), |_| {
        Ok(device(dev).map_or(0, |d| softrdma::config::node_guid(d.info.addr).to_be()))
    })
}

/// `ibv_get_device_index`.
pub unsafe extern "C" fn ibv_get_device_index(dev: *mut ibv_device) -> c_int {
    entry("ibv_get_device_index", Ret::MINUS_ONE, |_| {
        Ok(device(dev).map_or(-1, |d| d.index as c_int))
    })
}

/// `ibv_open_device`.
pub unsafe extern "C" fn ibv_open_device(dev: *mut ibv_device) -> *mut ibv_context {
    entry("ibv_open_device", Ret::NULL, |v| {
        let Some(d) = device(dev) else {
            return v.err(libc::EINVAL, &"not a device of this library");
        };
        let ctx = {
            let mut open = d.open.lock();
            match &mut *open {
                Some((ctx, n)) => {
                    *n += 1;
                    ctx.clone()
                }
                None => {
                    match softrdma::Context::open_addr(&d.info.name, d.info.addr, d.info.active_mtu)
                    {
                        Ok(ctx) => {
                            *open = Some((ctx.clone(), 1));
                            ctx
                        }
                        Err(e) => {
                            // Opening a device is where users meet a taken port: say so always.
                            eprintln!("softrdma: ibv_open_device({}): {e}", d.info.name);
                            return Err(v.error(&e));
                        }
                    }
                }
            }
        };
        let events = ctx.subscribe_async_events();
        let async_fd = events.fd().unwrap_or(-1);
        // Callers dup and pass around a kernel context's command descriptor (pyverbs'
        // import tests): give them a real one, /dev/null, which nothing reads.
        // SAFETY: a valid NUL-terminated path; the result is checked by its users.
        let cmd_fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        let soft = SoftContext {
            vctx: verbs_context_for(dev, async_fd, cmd_fd),
            ctx,
            events,
            dev: d,
            qps: Lock::new(Rank::CapiContextQps, HashMap::new()),
            cqs: Lock::new(Rank::CapiContextCqs, Vec::new()),
            srqs: Lock::new(Rank::CapiContextSrqs, Vec::new()),
            generation: generation(),
        };
        Ok(soft.into_c())
    })
}

fn verbs_context_for(dev: *mut ibv_device, async_fd: c_int, cmd_fd: c_int) -> verbs_context {
    // SAFETY: verbs_context is pointers (NULL or Option<fn>, both valid as zero), ints and
    // a pthread mutex, which is then initialised below.
    let mut v: verbs_context = unsafe { std::mem::zeroed() };
    v.query_port = Some(super::query::query_port_ex);
    v.query_device_ex = Some(super::query::query_device_ex);
    v.query_rt_values = Some(super::query::query_rt_values);
    v.advise_mr = Some(super::mr::advise_mr);
    v.create_cq_ex = Some(super::cq::create_cq_ex);
    v.create_qp_ex = Some(super::qp::create_qp_ex);
    v.create_srq_ex = Some(super::srq::create_srq_ex);
    v.get_srq_num = Some(super::srq::get_srq_num);
    v.sz = size_of::<verbs_context>();
    let c = &mut v.context;
    c.device = dev;
    c.ops.poll_cq = Some(super::cq::poll_cq);
    c.ops.req_notify_cq = Some(super::cq::req_notify_cq);
    c.ops.post_send = Some(super::post::post_send);
    c.ops.post_recv = Some(super::post::post_recv);
    c.ops.post_srq_recv = Some(super::post::post_srq_recv);
    c.cmd_fd = cmd_fd;
    c.async_fd = async_fd;
    c.num_comp_vectors = 1;
    c.mutex = libc::PTHREAD_MUTEX_INITIALIZER;
    c.abi_compat = usize::MAX as *mut c_void;
    v
}

/// `ibv_close_device`.
pub unsafe extern "C" fn ibv_close_device(ctx: *mut ibv_context) -> c_int {
    entry("ibv_close_device", Ret::ERRNO, |v| {
        // SAFETY: NULL or a context the caller got from this library.
        if unsafe { to_destroy::<SoftContext>(v, ctx) }?.is_none() {
            return Ok(0);
        }
        // SAFETY: `ctx` is a context ibv_open_device returned; the box is freed once.
        let soft = unsafe { SoftContext::free(ctx) };
        if soft.vctx.context.cmd_fd >= 0 {
            // SAFETY: the context's own descriptor, closed once.
            unsafe { libc::close(soft.vctx.context.cmd_fd) };
        }
        let mut open = soft.dev.open.lock();
        if let Some((_, n)) = &mut *open {
            *n -= 1;
            if *n == 0 {
                *open = None;
            }
        }
        Ok(0)
    })
}
