//! Devices and contexts: the device list, `ibv_open_device` (a `struct verbs_context`
//! around each context), the queries, the GID table and the sysfs files rdma-core's tools
//! read.
//!
//! The device list is read once per process from softrdma's configuration (the config
//! file, or `softrdma0` on `$SOFTRDMA_ADDR` / 127.0.0.1) and lives until the process ends,
//! as rdma-core's does. Every context of one device in a process shares one soft device
//! (one UDP port): it is opened by the first `ibv_open_device` and closed by the last
//! `ibv_close_device`, under the device's `open` lock.
//!
//! Fork. Contexts and everything made from them belong to the process that opened them:
//! their progress thread, sockets and events live there. A `pthread_atfork` handler
//! counts forks, so a forked child knows a parent's objects by their generation. In the
//! child they are left as they are (the parent's are untouched): destroying or closing
//! them returns 0 and changes nothing, and every other verb on them fails with EPERM
//! (rdma-core's providers fault or misbehave there instead). The child reads the
//! configuration again (so it may set `SOFTRDMA_ADDR` after the fork) and opens devices
//! of its own, even through the parent's `ibv_device` pointers.

use crate::abi::*;
use crate::ffi::{Failed, Object, Ret, Verb, copy_cstr, entry, null_terminated, set_errno};
use softrdma::config::DeviceInfo;
use std::collections::HashMap;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::net::IpAddr;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

/// One device of the list: the public `ibv_device`, the NULL word where rdma-core keeps
/// its driver ops (`VERBS_DEVICE_OPS_OFFSET`), then softrdma's own state.
#[repr(C)]
pub(crate) struct SoftDevice {
    pub dev: ibv_device,
    verbs_ops: *mut c_void,
    pub info: DeviceInfo,
    pub index: usize,
    /// The open soft device and how many contexts use it.
    open: Mutex<Option<(softrdma::Context, usize)>>,
}

// SAFETY: the raw pointers in `dev` are the NULL reserved words, never dereferenced; the
// rest is Sync on its own.
unsafe impl Sync for SoftDevice {}
// SAFETY: as above.
unsafe impl Send for SoftDevice {}

const _: () = assert!(std::mem::offset_of!(SoftDevice, verbs_ops) == VERBS_DEVICE_OPS_OFFSET);

/// Forks this process has seen as a child (0 in a process that was never forked with the
/// library loaded).
static GENERATION: AtomicU32 = AtomicU32::new(0);

extern "C" fn forked() {
    // Async-signal-safe, as a child handler must be: one atomic add.
    GENERATION.fetch_add(1, Ordering::Relaxed);
}

/// This process's generation (see [`GENERATION`]).
pub(crate) fn generation() -> u32 {
    GENERATION.load(Ordering::Relaxed)
}

/// A verbs object of this library, made on a context: its public struct begins with the
/// context's pointer, as every verbs object's does (and a context is its own).
///
/// # Safety
/// [`OfContext::context_of`] finds the context of a live object.
pub(crate) unsafe trait OfContext: Object {
    /// The context `p` was made on.
    ///
    /// # Safety
    /// `p` is a live object of this library.
    unsafe fn context_of(p: *mut Self::C) -> *mut ibv_context {
        // SAFETY: per the contract and the trait's, it begins with its context's pointer.
        unsafe { *p.cast::<*mut ibv_context>() }
    }
}

/// Whether `p`, an object of this library (or NULL), was made before this process was
/// forked from its maker.
///
/// # Safety
/// `p` is NULL or a live object of this library.
unsafe fn inherited<O: OfContext>(p: *mut O::C) -> bool {
    let now = generation();
    if now == 0 || p.is_null() {
        return false;
    }
    // SAFETY: per the contract.
    let ctx = unsafe { O::context_of(p) };
    // SAFETY: a live context of ours.
    !ctx.is_null() && unsafe { SoftContext::from_ptr(ctx) }.generation != now
}

/// The answer of a verb on a parent's object in a forked child (see the module docs).
pub(crate) fn refuse_inherited(v: Verb) -> Failed {
    v.fail(
        libc::EPERM,
        &"the object belongs to the process this one was forked from; open the device again in this process",
    )
}

/// The caller's object `p`, for a verb on it: EINVAL when it is NULL, EPERM when it is a
/// parent's (see the module docs).
///
/// # Safety
/// `p` is NULL or a live object of this library.
pub(crate) unsafe fn live<'a, O: OfContext>(v: Verb, p: *mut O::C) -> Result<&'a O, Failed> {
    v.ensure(
        !p.is_null(),
        libc::EINVAL,
        &format_args!("NULL {}", O::WHAT),
    )?;
    // SAFETY: per the contract, and not NULL.
    unsafe { own(v, p) }
}

/// The caller's object `p`, for a verb on it: EPERM when it is a parent's. NULL is not
/// checked (the verb checked it, or, on a hot path, leaves it to the caller, as rdma-core).
///
/// # Safety
/// `p` is a live object of this library.
pub(crate) unsafe fn own<'a, O: OfContext>(v: Verb, p: *mut O::C) -> Result<&'a O, Failed> {
    // SAFETY: per the contract.
    if unsafe { inherited::<O>(p) } {
        return Err(refuse_inherited(v));
    }
    // SAFETY: per the contract.
    Ok(unsafe { O::from_ptr(p) })
}

/// The caller's object `p`, for a verb that destroys it: EINVAL when it is NULL; `None`
/// when it is a parent's, which the destroy leaves as it is (and succeeds, see the module
/// docs).
///
/// # Safety
/// `p` is NULL or a live object of this library.
pub(crate) unsafe fn to_destroy<'a, O: OfContext>(
    v: Verb,
    p: *mut O::C,
) -> Result<Option<&'a O>, Failed> {
    v.ensure(
        !p.is_null(),
        libc::EINVAL,
        &format_args!("NULL {}", O::WHAT),
    )?;
    // SAFETY: per the contract, and not NULL.
    if unsafe { inherited::<O>(p) } {
        return Ok(None);
    }
    // SAFETY: as above.
    Ok(Some(unsafe { O::from_ptr(p) }))
}

/// The device lists of this process, one per generation, each leaked: a parent's
/// `ibv_device` pointers stay valid in a child.
static LISTS: Mutex<Vec<(u32, &'static [SoftDevice])>> = Mutex::new(Vec::new());

/// Every device of every generation.
fn all_devices() -> impl Iterator<Item = &'static SoftDevice> {
    let lists: Vec<&'static [SoftDevice]> = LISTS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|(_, l)| *l)
        .collect();
    lists.into_iter().flatten()
}

/// The devices of this process (of its generation), made once per generation.
pub(crate) fn devices() -> &'static [SoftDevice] {
    static ATFORK: std::sync::Once = std::sync::Once::new();
    ATFORK.call_once(|| {
        // SAFETY: registers a handler that only adds to an atomic; no pointers.
        unsafe { libc::pthread_atfork(None, None, Some(forked)) };
    });
    let now = generation();
    let mut lists = LISTS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, l)) = lists.iter().find(|(g, _)| *g == now) {
        return l;
    }
    let list: &'static [SoftDevice] = Vec::leak(make_devices());
    lists.push((now, list));
    list
}

fn make_devices() -> Vec<SoftDevice> {
    let infos = softrdma::config::devices().unwrap_or_else(|e| {
        eprintln!("softrdma: no devices: {e}");
        Vec::new()
    });
    infos
        .into_iter()
        .enumerate()
        .map(|(index, info)| {
            // SAFETY: ibv_device is plain data (ints, chars, NULL pointers): all-zero
            // bytes are a valid value.
            let mut dev: ibv_device = unsafe { std::mem::zeroed() };
            dev.node_type = 1; // IBV_NODE_CA
            dev.transport_type = 0; // IBV_TRANSPORT_IB, as rxe
            copy_cstr(&mut dev.name, &info.name);
            copy_cstr(&mut dev.dev_name, &format!("uverbs{index}"));
            copy_cstr(
                &mut dev.dev_path,
                &format!("/sys/class/infiniband_verbs/uverbs{index}"),
            );
            copy_cstr(
                &mut dev.ibdev_path,
                &format!("/sys/class/infiniband/{}", info.name),
            );
            SoftDevice {
                dev,
                verbs_ops: null_mut(),
                info,
                index,
                open: Mutex::new(None),
            }
        })
        .collect()
}

/// The device behind `dev`, if it is one of ours: in a forked child, the child's own
/// device of that name when `dev` is a parent's.
pub(crate) fn device(dev: *const ibv_device) -> Option<&'static SoftDevice> {
    let d = all_devices().find(|d| std::ptr::eq(&d.dev, dev))?;
    devices().iter().find(|c| c.info.name == d.info.name)
}

/// An open context: the `verbs_context` the application's `ibv_context *` points into,
/// then softrdma's state.
#[repr(C)]
pub(crate) struct SoftContext {
    pub vctx: verbs_context,
    pub ctx: softrdma::Context,
    /// This context's own asynchronous events and `async_fd` (as each rdma-core context
    /// has: programs key handlers by that descriptor).
    pub events: std::sync::Arc<softrdma::AsyncEventQueue>,
    pub dev: &'static SoftDevice,
    /// QPN → the `SoftQp` (as an address), to name the QP of an async event.
    pub qps: Mutex<HashMap<u32, usize>>,
    /// The live CQs and SRQs (as addresses), to name the object of a CQ error or an SRQ
    /// limit event, whose engine events do not say which.
    pub cqs: Mutex<Vec<usize>>,
    /// See `cqs`.
    pub srqs: Mutex<Vec<usize>>,
    /// The process generation that opened it (see [`own`]).
    pub generation: u32,
}

// SAFETY: the application's `ibv_context *` is the `vctx.context` inside the box, which
// each method finds the box from.
unsafe impl Object for SoftContext {
    type C = ibv_context;
    const WHAT: &'static str = "context";

    fn into_c(self) -> *mut ibv_context {
        let soft = Box::into_raw(Box::new(self));
        // SAFETY: `soft` is a live allocation; the context lives inside it.
        unsafe { &raw mut (*soft).vctx.context }
    }

    unsafe fn from_ptr<'a>(ctx: *mut ibv_context) -> &'a SoftContext {
        // SAFETY: per the contract.
        unsafe { &*Self::container(ctx) }
    }

    unsafe fn from_ptr_mut<'a>(ctx: *mut ibv_context) -> &'a mut SoftContext {
        // SAFETY: per the contract.
        unsafe { &mut *Self::container(ctx) }
    }

    unsafe fn free(ctx: *mut ibv_context) -> Box<SoftContext> {
        // SAFETY: per the contract: the box into_c made.
        unsafe { Box::from_raw(Self::container(ctx)) }
    }
}

// SAFETY: a context is its own.
unsafe impl OfContext for SoftContext {
    unsafe fn context_of(ctx: *mut ibv_context) -> *mut ibv_context {
        ctx
    }
}

impl SoftContext {
    /// The `SoftContext` whose `vctx.context` field `ctx` points at (pointer arithmetic
    /// only; nothing is read).
    fn container(ctx: *mut ibv_context) -> *mut SoftContext {
        let off =
            std::mem::offset_of!(SoftContext, vctx) + std::mem::offset_of!(verbs_context, context);
        ctx.wrapping_byte_sub(off).cast()
    }

    /// The index of the table's GID of `ip` (IPv4 mapped), if it has one.
    pub(crate) fn gid_index(&self, ip: IpAddr) -> Option<usize> {
        let gid = crate::mr::gid_of_ip(ip);
        self.ctx.gids().iter().position(|g| *g == gid)
    }
}

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
            let mut open = d.open.lock().unwrap_or_else(|e| e.into_inner());
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
            qps: Mutex::new(HashMap::new()),
            cqs: Mutex::new(Vec::new()),
            srqs: Mutex::new(Vec::new()),
            generation: generation(),
        };
        Ok(soft.into_c())
    })
}

fn verbs_context_for(dev: *mut ibv_device, async_fd: c_int, cmd_fd: c_int) -> verbs_context {
    // SAFETY: verbs_context is pointers (NULL or Option<fn>, both valid as zero), ints and
    // a pthread mutex, which is then initialised below.
    let mut v: verbs_context = unsafe { std::mem::zeroed() };
    v.query_port = Some(query_port_ex);
    v.query_device_ex = Some(query_device_ex);
    v.query_rt_values = Some(query_rt_values);
    v.advise_mr = Some(crate::mr::advise_mr);
    v.create_cq_ex = Some(crate::cq::create_cq_ex);
    v.create_qp_ex = Some(crate::qp::create_qp_ex);
    v.create_srq_ex = Some(crate::qp::create_srq_ex);
    v.get_srq_num = Some(crate::qp::get_srq_num);
    v.sz = size_of::<verbs_context>();
    let c = &mut v.context;
    c.device = dev;
    c.ops.poll_cq = Some(crate::cq::poll_cq);
    c.ops.req_notify_cq = Some(crate::cq::req_notify_cq);
    c.ops.post_send = Some(crate::qp::post_send);
    c.ops.post_recv = Some(crate::qp::post_recv);
    c.ops.post_srq_recv = Some(crate::qp::post_srq_recv);
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
        let mut open = soft.dev.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, n)) = &mut *open {
            *n -= 1;
            if *n == 0 {
                *open = None;
            }
        }
        Ok(0)
    })
}

fn fill_device_attr(soft: &SoftContext, out: &mut ibv_device_attr) {
    let a = soft.ctx.query_device();
    let i = |v: u32| v.min(i32::MAX as u32) as c_int;
    // SAFETY: plain data, all-zero valid.
    *out = unsafe { std::mem::zeroed() };
    copy_cstr(&mut out.fw_ver, &a.fw_ver);
    out.node_guid = a.node_guid.to_be();
    out.sys_image_guid = a.sys_image_guid.to_be();
    out.max_mr_size = a.max_mr_size;
    out.page_size_cap = a.page_size_cap;
    out.vendor_id = a.vendor_id;
    out.vendor_part_id = a.vendor_part_id;
    out.hw_ver = a.hw_ver;
    out.max_qp = i(a.max_qp);
    out.max_qp_wr = i(a.max_qp_wr);
    out.device_cap_flags = DEVICE_CAP_FLAGS;
    out.max_sge = i(a.max_sge);
    out.max_sge_rd = i(a.max_sge_rd);
    out.max_cq = i(a.max_cq);
    out.max_cqe = i(a.max_cqe);
    out.max_mr = i(a.max_mr);
    out.max_pd = i(a.max_pd);
    out.max_qp_rd_atom = i(a.max_qp_rd_atom);
    out.max_res_rd_atom = i(a.max_res_rd_atom);
    out.max_qp_init_rd_atom = i(a.max_qp_init_rd_atom);
    out.atomic_cap = 1; // IBV_ATOMIC_HCA
    out.max_ah = i(a.max_ah);
    out.max_mcast_grp = i(a.max_mcast_grp);
    out.max_mcast_qp_attach = i(a.max_mcast_qp_attach);
    out.max_total_mcast_qp_attach = i(a.max_total_mcast_qp_attach);
    out.max_srq = i(a.max_srq);
    out.max_srq_wr = i(a.max_srq_wr);
    out.max_srq_sge = i(a.max_srq_sge);
    out.max_pkeys = a.max_pkeys as u16;
    out.local_ca_ack_delay = a.local_ca_ack_delay as u8;
    out.phys_port_cnt = a.phys_port_cnt;
}

/// The `device_cap_flags` softrdma has: bad P_Key and Q_Key counters (1, 2), a system
/// image GUID (11), RNR NAK generation (12) and port-active events (10). Not memory
/// windows, path migration or SRQ resizing, which it does not implement.
const DEVICE_CAP_FLAGS: u32 = (1 << 1) | (1 << 2) | (1 << 10) | (1 << 11) | (1 << 12);

/// `ibv_query_device`.
pub unsafe extern "C" fn ibv_query_device(
    ctx: *mut ibv_context,
    attr: *mut ibv_device_attr,
) -> c_int {
    entry("ibv_query_device", Ret::ERRNO, |v| {
        v.ensure(
            !ctx.is_null() && !attr.is_null(),
            libc::EINVAL,
            &"NULL argument",
        )?;
        // SAFETY: live context; `attr` is the caller's writable struct.
        unsafe { fill_device_attr(SoftContext::from_ptr(ctx), &mut *attr) };
        Ok(0)
    })
}

/// `verbs_context.query_device_ex`: the legacy attributes and zeroed extensions, written
/// up to `attr_size` bytes (callers built against older headers pass less).
unsafe extern "C" fn query_device_ex(
    ctx: *mut ibv_context,
    _input: *const c_void,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    entry("ibv_query_device_ex", Ret::ERRNO, |v| {
        v.ensure(
            !ctx.is_null() && !attr.is_null() && attr_size >= size_of::<ibv_device_attr>(),
            libc::EINVAL,
            &"attr_size below ibv_device_attr",
        )?;
        // SAFETY: plain data, all-zero valid.
        let mut ex: ibv_device_attr_ex = unsafe { std::mem::zeroed() };
        // SAFETY: live context.
        fill_device_attr(unsafe { SoftContext::from_ptr(ctx) }, &mut ex.orig_attr);
        // Completion timestamps count nanoseconds of CLOCK_MONOTONIC: a 1 GHz clock.
        ex.completion_timestamp_mask = u64::MAX;
        ex.hca_core_clock = 1_000_000;
        ex.phys_port_cnt_ex = 1;
        // On-demand paging: nothing is pinned, every region is reached on demand (pages
        // fault in when the device touches them, as with ODP). Not implicit ODP (a region
        // of the whole address space), and not for XRC, which softrdma has not.
        ex.odp_general_caps = 1; // IBV_ODP_SUPPORT
        // SEND 1, RECV 2, WRITE 4, READ 8, ATOMIC 16, SRQ_RECV 32.
        ex.odp_rc_caps = 0x3f;
        ex.odp_uc_caps = 0x27;
        ex.odp_ud_caps = 0x23;
        let n = attr_size.min(size_of::<ibv_device_attr_ex>());
        // SAFETY: the caller's struct has `attr_size` writable bytes; zero what we do not know.
        unsafe {
            std::ptr::write_bytes(attr.cast::<u8>(), 0, attr_size);
            std::ptr::copy_nonoverlapping((&raw const ex).cast::<u8>(), attr.cast::<u8>(), n);
        }
        Ok(0)
    })
}

/// `verbs_context.query_rt_values` (`ibv_query_rt_values_ex`): the completion clock now.
unsafe extern "C" fn query_rt_values(ctx: *mut ibv_context, values: *mut ibv_values_ex) -> c_int {
    entry("ibv_query_rt_values_ex", Ret::ERRNO, |v| {
        v.ensure(
            !ctx.is_null() && !values.is_null(),
            libc::EINVAL,
            &"NULL argument",
        )?;
        // SAFETY: the caller's struct.
        let values = unsafe { &mut *values };
        // Only IBV_VALUES_MASK_RAW_CLOCK exists.
        v.ensure(
            values.comp_mask & !1 == 0,
            libc::EOPNOTSUPP,
            &"comp_mask beyond RAW_CLOCK",
        )?;
        values.comp_mask = 1;
        values.raw_clock = crate::cq::clock(libc::CLOCK_MONOTONIC);
        Ok(0)
    })
}

fn port_attr(soft: &SoftContext) -> ibv_port_attr {
    let p = soft.ctx.query_port();
    let a = soft.ctx.query_device();
    ibv_port_attr {
        state: 4, // IBV_PORT_ACTIVE
        max_mtu: p.max_mtu as c_int,
        active_mtu: p.active_mtu as c_int,
        gid_tbl_len: p.gid_tbl_len as c_int,
        // What rxe reports: CM supported (16), IP-based GIDs (26).
        port_cap_flags: (1 << 16) | (1 << 26),
        max_msg_sz: a.max_msg_sz.min(u64::from(u32::MAX)) as u32,
        pkey_tbl_len: 1,
        lid: softrdma::config::sysfs::port_lid(soft.ctx.addr()),
        sm_lid: p.sm_lid,
        max_vl_num: 1,
        active_width: 1, // 1X
        active_speed: 1, // 2.5 Gbps, as rxe on a link that reports no speed
        phys_state: 5,   // LinkUp
        link_layer: 2,   // IBV_LINK_LAYER_ETHERNET
        ..Default::default()
    }
}

/// `verbs_context.query_port`: `len` bytes of `ibv_port_attr`.
unsafe extern "C" fn query_port_ex(
    ctx: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
    len: usize,
) -> c_int {
    entry("ibv_query_port", Ret::ERRNO, |v| {
        v.ensure(
            !ctx.is_null() && !attr.is_null(),
            libc::EINVAL,
            &"NULL argument",
        )?;
        v.ensure(
            port == 1,
            libc::EINVAL,
            &format_args!("port {port}: the device has port 1 only"),
        )?;
        // SAFETY: live context.
        let a = port_attr(unsafe { SoftContext::from_ptr(ctx) });
        let n = len.min(size_of::<ibv_port_attr>());
        // SAFETY: the caller's struct has `len` writable bytes.
        unsafe { std::ptr::copy_nonoverlapping((&raw const a).cast::<u8>(), attr.cast::<u8>(), n) };
        Ok(0)
    })
}

/// `ibv_query_port`, the exported symbol: callers of rdma-core's compat path get 48 bytes
/// (`struct _compat_ibv_port_attr`, without `port_cap_flags2`).
pub unsafe extern "C" fn ibv_query_port(
    ctx: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
) -> c_int {
    // SAFETY: forwarded.
    unsafe { query_port_ex(ctx, port, attr, 48) }
}

/// The GIDs of port 1, with their types (`enum ibv_gid_type`: 2 = RoCE v2; rxe has only
/// RoCE v2 GIDs).
fn gids(soft: &SoftContext) -> Vec<ibv_gid_entry> {
    let ifindex = soft
        .dev
        .info
        .netdev
        .as_deref()
        .and_then(|n| std::ffi::CString::new(n).ok())
        // SAFETY: a valid NUL-terminated name.
        .map_or(0, |n| unsafe { libc::if_nametoindex(n.as_ptr()) });
    soft.ctx
        .gids()
        .iter()
        .enumerate()
        .map(|(i, g)| ibv_gid_entry {
            gid: ibv_gid { raw: g.octets() },
            gid_index: i as u32,
            port_num: 1,
            gid_type: 2,
            ndev_ifindex: ifindex,
        })
        .collect()
}

/// `ibv_query_gid`. An index inside the table but past the configured GIDs reads as zero,
/// as an empty slot of rxe's.
pub unsafe extern "C" fn ibv_query_gid(
    ctx: *mut ibv_context,
    port: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    entry("ibv_query_gid", Ret::MINUS_ONE, |v| {
        v.ensure(
            !ctx.is_null() && !gid.is_null() && port == 1,
            libc::EINVAL,
            &"NULL argument or port other than 1",
        )?;
        // SAFETY: live context.
        let soft = unsafe { SoftContext::from_ptr(ctx) };
        let len = soft.ctx.query_port().gid_tbl_len as c_int;
        v.ensure(
            (0..len).contains(&index),
            libc::EINVAL,
            &format_args!("GID index {index} outside 0..{len}"),
        )?;
        let g = gids(soft)
            .get(index as usize)
            .map(|e| e.gid)
            .unwrap_or_default();
        // SAFETY: the caller's writable gid.
        unsafe { *gid = g };
        Ok(0)
    })
}

/// `_ibv_query_gid_ex` (behind `ibv_query_gid_ex`): ENODATA for an empty slot.
pub unsafe extern "C" fn _ibv_query_gid_ex(
    ctx: *mut ibv_context,
    port: u32,
    index: u32,
    out: *mut ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    entry("ibv_query_gid_ex", Ret::ERRNO, |v| {
        v.ensure(
            !ctx.is_null()
                && !out.is_null()
                && flags == 0
                && entry_size >= size_of::<ibv_gid_entry>(),
            libc::EINVAL,
            &"NULL argument, flags or entry_size",
        )?;
        v.ensure(port == 1, libc::EINVAL, &"port other than 1")?;
        // SAFETY: live context.
        let soft = unsafe { SoftContext::from_ptr(ctx) };
        let Some(e) = gids(soft).get(index as usize).copied() else {
            return v.err(libc::ENODATA, &format_args!("GID index {index} is empty"));
        };
        // SAFETY: the caller's writable entry.
        unsafe { *out = e };
        Ok(0)
    })
}

/// `_ibv_query_gid_table` (behind `ibv_query_gid_table`): the valid entries, or a negative
/// errno.
pub unsafe extern "C" fn _ibv_query_gid_table(
    ctx: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max_entries: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    let ret = Ret::new(|e| -(e as isize), -1);
    entry("ibv_query_gid_table", ret, |v| {
        v.ensure(
            !ctx.is_null() && flags == 0 && entry_size >= size_of::<ibv_gid_entry>(),
            libc::EINVAL,
            &"NULL context, flags or entry_size",
        )?;
        // SAFETY: live context.
        let g = gids(unsafe { SoftContext::from_ptr(ctx) });
        v.ensure(
            g.len() <= max_entries && (g.is_empty() || !entries.is_null()),
            libc::EINVAL,
            &"max_entries below the table, or no entries array",
        )?;
        for (i, e) in g.iter().enumerate() {
            // SAFETY: the caller's array holds `max_entries` entries of `entry_size` bytes.
            unsafe { *entries.byte_add(i * entry_size) = *e };
        }
        Ok(g.len() as isize)
    })
}

/// `ibv_query_gid_type` (IBVERBS_PRIVATE_34, used by `ibv_devinfo`): the sysfs type,
/// 1 = RoCE v2.
pub unsafe extern "C" fn ibv_query_gid_type(
    ctx: *mut ibv_context,
    port: u8,
    index: u32,
    ty: *mut c_int,
) -> c_int {
    entry("ibv_query_gid_type", Ret::MINUS_ONE, |v| {
        if ctx.is_null() || ty.is_null() || port != 1 {
            return Err(v.quiet(libc::EINVAL));
        }
        // SAFETY: live context.
        let n = gids(unsafe { SoftContext::from_ptr(ctx) }).len();
        if index as usize >= n {
            return Err(v.quiet(libc::EINVAL));
        }
        // SAFETY: the caller's writable int.
        unsafe { *ty = 1 };
        Ok(0)
    })
}

/// `ibv_query_pkey`: the one P_Key, 0xFFFF (network order, the same bytes).
pub unsafe extern "C" fn ibv_query_pkey(
    ctx: *mut ibv_context,
    port: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    entry("ibv_query_pkey", Ret::MINUS_ONE, |v| {
        v.ensure(
            !ctx.is_null() && !pkey.is_null() && port == 1 && index == 0,
            libc::EINVAL,
            &"port 1 has one P_Key, at index 0",
        )?;
        // SAFETY: the caller's writable u16.
        unsafe { *pkey = 0xffff };
        Ok(0)
    })
}

/// `ibv_get_pkey_index`.
pub unsafe extern "C" fn ibv_get_pkey_index(ctx: *mut ibv_context, port: u8, pkey: u16) -> c_int {
    entry("ibv_get_pkey_index", Ret::MINUS_ONE, |v| {
        if ctx.is_null() || port != 1 || u16::from_be(pkey) & 0x7fff != 0x7fff {
            return Err(v.quiet(libc::ENOENT));
        }
        Ok(0)
    })
}

/// The online CPUs (`0-1`), which a device's sysfs calls local to it.
fn online_cpus() -> &'static str {
    static CPUS: OnceLock<String> = OnceLock::new();
    CPUS.get_or_init(softrdma::config::online_cpus)
}

/// `ibv_read_sysfs_file`: a device's files come from softrdma (there is no kernel device
/// behind it); any other path is read from the file system.
pub unsafe extern "C" fn ibv_read_sysfs_file(
    dir: *const c_char,
    file: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> c_int {
    entry("ibv_read_sysfs_file", Ret::MINUS_ONE, |v| {
        if dir.is_null() || file.is_null() || buf.is_null() || size == 0 {
            return Err(v.quiet(libc::EINVAL));
        }
        // SAFETY: C strings from the caller.
        let (dir, file) = unsafe { (CStr::from_ptr(dir), CStr::from_ptr(file)) };
        let (dir, file) = (dir.to_string_lossy(), file.to_string_lossy());
        let path = format!("{}/{file}", dir.trim_end_matches('/'));
        let infos: Vec<_> = devices().iter().map(|d| d.info.clone()).collect();
        let text = match softrdma::config::sysfs::read(&infos, online_cpus(), &path) {
            Some(Ok(t)) => t,
            Some(Err(())) => return Err(v.quiet(libc::ENOENT)),
            // At most `size` bytes, as rdma-core's one read(2) (a file that never ends,
            // such as /dev/zero, must not be read whole).
            None => {
                use std::io::Read;
                let mut b = Vec::new();
                match std::fs::File::open(&path)
                    .and_then(|f| f.take(size as u64).read_to_end(&mut b))
                {
                    Ok(_) => String::from_utf8_lossy(&b).into_owned(),
                    Err(e) => return Err(v.quiet(e.raw_os_error().unwrap_or(libc::EIO))),
                }
            }
        };
        let b = text.as_bytes();
        let mut n = b.len().min(size);
        // SAFETY: the caller's buffer has `size` bytes; every write below is within it.
        unsafe {
            std::ptr::copy_nonoverlapping(b.as_ptr().cast::<c_char>(), buf, n);
            // As rdma-core: the newline becomes the terminator (and is not counted), else
            // a terminator follows when there is room; contents that fill the buffer
            // unterminated are a failure, not a string the caller would read past.
            if n > 0 && *buf.add(n - 1) == b'\n' as c_char {
                n -= 1;
                *buf.add(n) = 0;
            } else if n < size {
                *buf.add(n) = 0;
            } else {
                return Err(v.quiet(libc::EOVERFLOW));
            }
        }
        Ok(n as c_int)
    })
}

/// `ibv_get_sysfs_path`.
pub extern "C" fn ibv_get_sysfs_path() -> *const c_char {
    c"/sys".as_ptr()
}
