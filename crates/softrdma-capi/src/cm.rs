//! librdmacm's connection manager over `softrdma::cm`: event channels, IDs, address and
//! route resolution, listen, connect, accept, reject, disconnect, the QP verbs of an ID,
//! and the endpoint helpers (the structs callers read directly are in
//! [`crate::abi::rdmacm`]).
//!
//! Each C object is a `#[repr(C)]` box whose first field is the public struct, so the
//! caller's pointer is the box's. An ID's Rust `CmId` keeps the box's address
//! ([`softrdma::cm::CmId::user`]), which is how an event finds the C ID it is for; an ID
//! being destroyed clears it first, and events of IDs already destroyed are dropped.
//!
//! The device of an ID is the one whose address the ID binds to or resolves from (the
//! first device when the address says nothing), opened once per process for the CM and
//! kept open, as librdmacm keeps its devices: `id->verbs` is that context.

use crate::abi::*;
use crate::device::SoftContext;
use crate::ffi::{Failed, Object, Ret, Verb, copy_bytes, entry, from_sockaddr, to_sockaddr};
use crate::mr::gid_of_ip;
use crate::qp::SoftQp;
use softrdma::cm::{CmEventKind, CmId, ConnParam, EventChannel, PeerParam, PortSpace};
use std::ffi::{c_int, c_void};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::ptr::null_mut;
use std::sync::Mutex;

/// A channel: the public struct, then softrdma's.
#[repr(C)]
struct ChanC {
    ch: rdma_event_channel,
    rust: EventChannel,
}

impl ChanC {
    /// A new channel, for the verb `v`.
    fn new(v: Verb) -> Result<ChanC, Failed> {
        let rust = v.check(EventChannel::new())?;
        Ok(ChanC {
            ch: rdma_event_channel { fd: rust.fd() },
            rust,
        })
    }
}

// SAFETY: repr(C), the public struct first.
unsafe impl Object for ChanC {
    type C = rdma_event_channel;
    const WHAT: &'static str = "channel";
}

/// An ID: the public struct, then softrdma's.
#[repr(C)]
struct IdC {
    id: rdma_cm_id,
    /// Made once the device is known (bind or resolve).
    rust: Mutex<Option<CmId>>,
    /// What the peer's REQ said (a connect request's ID), for an `rdma_accept` without
    /// parameters.
    peer: Mutex<Option<PeerParam>>,
    /// The channel made for an ID created without one: librdmacm's synchronous IDs, whose
    /// verbs wait for their own event (see [`complete`]).
    own_chan: Option<Box<ChanC>>,
    /// CQs `rdma_create_qp` made because the caller gave none, and their completion
    /// channels, destroyed with the QP.
    own_cqs: Vec<*mut ibv_cq>,
    own_cq_chans: Vec<*mut ibv_comp_channel>,
    /// A passive `rdma_create_ep`'s QP attributes, for the QP `rdma_get_request` makes
    /// each new connection.
    ep_attr: Option<ibv_qp_init_attr>,
    /// An active `rdma_create_ep`'s private data (`ai_connect`), for an `rdma_connect`
    /// without parameters.
    connect_data: Vec<u8>,
    /// The multicast groups joined, with each join's context (a MULTICAST_JOIN event's
    /// `param.ud.private_data`).
    groups: Mutex<Vec<(IpAddr, usize)>>,
    /// Bound to an unspecified address: whether an IPv6 one (see [`listen_elsewhere`]).
    wildcard: Option<bool>,
    /// RDMA_OPTION_ID_AFONLY: an IPv6 wildcard takes IPv6 requests only.
    afonly: bool,
    /// Whether the program set AFONLY (else the family decides, see `crate::ports`).
    afonly_set: bool,
    /// RDMA_OPTION_ID_REUSEADDR.
    reuseaddr: bool,
    /// A wildcard listen's listeners on the devices other than the ID's own.
    also: Mutex<Vec<CmId>>,
    /// RDMA_OPTION_ID_TOS and _ACK_TIMEOUT, kept for an ID not on a device yet.
    tos: Option<u8>,
    ack_timeout: Option<u8>,
    /// Its events handed out and acked, and the wait for the last ack.
    acks: Mutex<Acks>,
    acked: std::sync::Condvar,
}

impl IdC {
    /// A new ID around `raw` (its channel already set).
    fn boxed(raw: rdma_cm_id, own_chan: Option<Box<ChanC>>) -> *mut IdC {
        Box::into_raw(Box::new(IdC {
            id: raw,
            rust: Mutex::new(None),
            peer: Mutex::new(None),
            own_chan,
            own_cqs: Vec::new(),
            own_cq_chans: Vec::new(),
            ep_attr: None,
            connect_data: Vec::new(),
            groups: Mutex::new(Vec::new()),
            wildcard: None,
            afonly: false,
            afonly_set: false,
            reuseaddr: false,
            also: Mutex::new(Vec::new()),
            tos: None,
            ack_timeout: None,
            acks: Mutex::new(Acks::default()),
            acked: std::sync::Condvar::new(),
        }))
    }
}

// SAFETY: repr(C), the public struct first.
unsafe impl Object for IdC {
    type C = rdma_cm_id;
    const WHAT: &'static str = "ID";
}

/// The channel's next event for a live ID (events of destroyed IDs are dropped), waiting
/// as long as it takes.
///
/// The wait holds its own handle on the channel: a program may destroy the channel while
/// another of its threads still waits in `rdma_get_cm_event` (rping's main thread does, on
/// its way out); that thread then waits on, as on librdmacm's closed descriptor, instead
/// of reading freed memory.
fn next_event(chan: &ChanC) -> *mut rdma_cm_event {
    loop {
        if let Some(e) = take_event(chan, None) {
            return e;
        }
    }
}

/// The channel's next event for a live ID within `wait` (`None`: for ever; zero: only
/// one queued now), `None` if none came.
fn take_event(chan: &ChanC, wait: Option<std::time::Duration>) -> Option<*mut rdma_cm_event> {
    let rust = chan.rust.clone();
    loop {
        if let Some(e) = convert(rust.get_event(wait)?) {
            return Some(e);
        }
    }
}

/// Acks a synchronous ID's current event (librdmacm keeps it in `id->event` until the
/// ID's next verb, or its destruction), if it has one.
fn ack_own_event(c: &mut IdC) {
    if c.own_chan.is_some() && !c.id.event.is_null() {
        // SAFETY: the ID's own event, acked once (the pointer is cleared).
        unsafe { rdma_ack_cm_event(c.id.event) };
        c.id.event = null_mut();
    }
}

/// A synchronous ID's wait for the event its verb brings (librdmacm's `ucma_complete`):
/// the previous event is acked, the next one becomes `id->event`, and a failed one is the
/// verb's error (ECONNREFUSED for a reject, the event's status otherwise). At once for an
/// ID with a channel of the caller's.
fn complete(v: Verb, c: &mut IdC) -> Result<(), Failed> {
    if c.own_chan.is_none() {
        return Ok(());
    }
    ack_own_event(c);
    let ev = next_event(c.own_chan.as_ref().expect("checked above"));
    c.id.event = ev;
    // SAFETY: just made by convert.
    let (kind, status) = unsafe { ((*ev).event, (*ev).status) };
    match (kind, status) {
        (_, 0) => Ok(()),
        (RDMA_CM_EVENT_REJECTED, _) => {
            v.err(libc::ECONNREFUSED, &"the peer rejected the connection")
        }
        (_, s) => v.err(
            s.abs(),
            &format_args!("{}", std::io::Error::from_raw_os_error(s.abs())),
        ),
    }
}

/// An event: the public struct, then the private data it points at.
#[repr(C)]
struct EventC {
    ev: rdma_cm_event,
    private: Vec<u8>,
    /// The ID it is counted against (a connect request's listener; see [`Acks`]).
    owner: *const IdC,
}

// SAFETY: repr(C), the public struct first.
unsafe impl Object for EventC {
    type C = rdma_cm_event;
    const WHAT: &'static str = "event";
}

/// How many of an ID's events were handed out and how many acked: `rdma_destroy_id`
/// waits until all are acked, as librdmacm's does, so that a thread still handling one
/// (rping's CM thread, while its main thread destroys the connection's ID) never finds
/// the ID freed under it.
#[derive(Default)]
struct Acks {
    reported: u64,
    completed: u64,
}

/// Held for reading while an event's ID is looked up and counted, for writing while
/// `rdma_destroy_id` unhooks one: an event either counts against a live ID, which then
/// waits for its ack, or finds it gone and is dropped.
static LIVE: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn port_space(ps: c_int) -> Option<PortSpace> {
    match ps {
        RDMA_PS_TCP => Some(PortSpace::Tcp),
        RDMA_PS_UDP => Some(PortSpace::Udp),
        RDMA_PS_IB => Some(PortSpace::Ib),
        _ => None,
    }
}

/// A mutex's guard, whether or not a panic poisoned it.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The context the CM keeps open for device `index` (opened on first use, never
/// closed: librdmacm keeps its devices open too).
pub(crate) fn cm_context(index: usize) -> *mut ibv_context {
    static OPEN: Mutex<Vec<(u32, usize, usize)>> = Mutex::new(Vec::new());
    let generation = crate::device::generation();
    let mut open = lock(&OPEN);
    if let Some((_, _, c)) = open
        .iter()
        .find(|(g, i, _)| *g == generation && *i == index)
    {
        return *c as *mut ibv_context;
    }
    let Some(d) = crate::device::devices().get(index) else {
        return null_mut();
    };
    // SAFETY: a device of this process's list.
    let ctx = unsafe { crate::device::ibv_open_device((&raw const d.dev).cast_mut()) };
    if !ctx.is_null() {
        open.push((generation, index, ctx as usize));
    }
    ctx
}

/// The device for an address: the one that has it; for 0.0.0.0 the first IPv4 device
/// (else the first); for `::` or no address, the first.
fn device_for(ip: Option<IpAddr>) -> Option<usize> {
    let devs = crate::device::devices();
    match ip {
        Some(IpAddr::V4(v4)) if v4.is_unspecified() => devs
            .iter()
            .position(|d| d.info.addr.to_canonical().is_ipv4())
            .or((!devs.is_empty()).then_some(0)),
        Some(ip) if !ip.is_unspecified() => {
            let ip = ip.to_canonical();
            devs.iter().position(|d| d.info.addr == ip)
        }
        _ => (!devs.is_empty()).then_some(0),
    }
}

/// The address of the device an ID on `localhost` (127.0.0.1 or ::1) takes when no
/// device has that address: as Linux's `cma_bind_loopback` and `cma_resolve_loopback` give such an ID a
/// device of their choosing and connect it to itself, the first device on a loopback
/// address of the same family (then on any loopback address, then the first device).
/// libfabric's verbs provider binds `localhost` this way to find a device when the
/// program names no address, and pyverbs connects to its netdev's, lo's 127.0.0.1.
///
/// Only `localhost` itself: the rest of 127.0.0.0/8 names softrdma devices, which may be
/// another process's (each a host of its own), not this one.
fn loopback_device(ip: IpAddr) -> Option<IpAddr> {
    let devs = crate::device::devices();
    let ip = ip.to_canonical();
    let localhost =
        ip == IpAddr::V4(std::net::Ipv4Addr::LOCALHOST) || ip == IpAddr::V6(Ipv6Addr::LOCALHOST);
    if !localhost || devs.iter().any(|d| d.info.addr.to_canonical() == ip) {
        return None;
    }
    let on_lo = |d: &&crate::device::SoftDevice| d.info.addr.to_canonical().is_loopback();
    let family =
        |d: &&crate::device::SoftDevice| d.info.addr.to_canonical().is_ipv4() == ip.is_ipv4();
    devs.iter()
        .find(|d| on_lo(d) && family(d))
        .or_else(|| devs.iter().find(|d| on_lo(d)))
        .or(devs.first())
        .map(|d| d.info.addr)
}

/// The context the CM keeps open for `id`'s device.
fn context_of(id: &CmId) -> Option<*mut ibv_context> {
    let addr = id.context().addr();
    let i = crate::device::devices()
        .iter()
        .position(|d| d.info.addr == addr)?;
    let ctx = cm_context(i);
    (!ctx.is_null()).then_some(ctx)
}

/// A wildcard listen's other devices: rdma_cm listens on every device for an unspecified
/// address (the IPv4 ones for 0.0.0.0; for `::` all, or the IPv6 ones under AFONLY), so
/// each other device of the family gets a listener on the same port, whose requests come
/// to this ID (the request's ID is on the device that took it). EADDRINUSE, naming the
/// device, when the port is taken on one of them.
fn listen_elsewhere(
    v: Verb,
    c: &mut IdC,
    primary: &CmId,
    v6: bool,
    backlog: c_int,
) -> Result<(), Failed> {
    let Some(port) = primary.local_addr().map(|a| a.port()) else {
        return Ok(());
    };
    let here = primary.context().addr();
    // SAFETY: the ID's channel is a ChanC this library made.
    let chan = unsafe { ChanC::from_ptr(c.id.channel) };
    let ps = port_space(c.id.ps).unwrap_or(PortSpace::Tcp);
    let mut also = Vec::new();
    for (i, d) in crate::device::devices().iter().enumerate() {
        let ip = d.info.addr.to_canonical();
        let fits = if v6 {
            !c.afonly || ip.is_ipv6()
        } else {
            ip.is_ipv4()
        };
        if ip == here.to_canonical() || !fits {
            continue;
        }
        let ctx = cm_context(i);
        if ctx.is_null() {
            // A device that cannot open (its address is gone) takes no requests anyway.
            v.fail(
                libc::ENODEV,
                &format_args!("device {} did not open: not listening there", d.info.name),
            );
            continue;
        }
        // SAFETY: a context this library opened.
        let soft = unsafe { SoftContext::from_ptr(ctx) };
        let any = if ip.is_ipv4() {
            IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)
        } else {
            IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)
        };
        let r = CmId::new(&chan.rust, &soft.ctx, ps).and_then(|r| {
            r.set_user(c as *mut IdC as usize);
            r.bind_addr(SocketAddr::new(any, port))?;
            r.listen(backlog)?;
            Ok(r)
        });
        match r {
            Ok(r) => also.push(r),
            Err(e) => {
                for a in &also {
                    a.set_user(0);
                }
                return v.err(e.errno(), &format_args!("on device {}: {e}", d.info.name));
            }
        }
    }
    *lock(&c.also) = also;
    Ok(())
}

/// The address of the device on the kernel's route to `dst` (see
/// `softrdma::config::route_device`); `None` when no device is on that route (or the
/// kernel has none to `dst`).
fn route_source_device(dst: IpAddr) -> Option<IpAddr> {
    let devs = crate::device::devices();
    let infos: Vec<softrdma::config::DeviceInfo> = devs.iter().map(|d| d.info.clone()).collect();
    softrdma::config::route_device(&infos, dst).map(|i| infos[i].addr)
}

/// The ID's Rust side, made on the device of `ip` if it has none yet.
fn rust_id(v: Verb, c: &mut IdC, ip: Option<IpAddr>) -> Result<CmId, Failed> {
    if let Some(r) = lock(&c.rust).clone() {
        return Ok(r);
    }
    let Some(index) = device_for(ip) else {
        return v.err(
            libc::EADDRNOTAVAIL,
            &format_args!("no softrdma device has the address {ip:?}"),
        );
    };
    let ctx = cm_context(index);
    v.ensure(!ctx.is_null(), libc::ENODEV, &"the device did not open")?;
    // SAFETY: a context this library opened.
    let soft = unsafe { SoftContext::from_ptr(ctx) };
    // SAFETY: the ID's channel is a ChanC this library made.
    let chan = unsafe { ChanC::from_ptr(c.id.channel) };
    let ps = port_space(c.id.ps).unwrap_or(PortSpace::Tcp);
    let r = v.check(CmId::new(&chan.rust, &soft.ctx, ps))?;
    v.check(apply_options(c, &r))?;
    r.set_user(c as *mut IdC as usize);
    c.id.verbs = ctx;
    c.id.port_num = 1;
    // As librdmacm's ucma_get_device: an ID that has a device has that device's PD too
    // (pyverbs wraps `id->pd` right after the bind or resolve, before any QP).
    if c.id.pd.is_null() {
        c.id.pd = default_pd(ctx);
    }
    *lock(&c.rust) = Some(r.clone());
    Ok(r)
}

/// The ID's Rust side, which must exist.
fn made(v: Verb, c: &IdC) -> Result<CmId, Failed> {
    let r = c.rust.lock().unwrap_or_else(|e| e.into_inner()).clone();
    r.ok_or_else(|| {
        v.fail(
            libc::EINVAL,
            &"the ID is not bound to a device yet (rdma_bind_addr or rdma_resolve_addr first)",
        )
    })
}

/// Copies the ID's addresses into `id->route.addr`.
fn fill_route(c: &mut IdC, r: &CmId) {
    if let Some(a) = r.local_addr() {
        to_sockaddr(a, &mut c.id.route.addr.src);
        c.id.route.addr.ib.sgid.raw = gid_of_ip(a.ip()).octets();
    }
    if let Some(a) = r.peer_addr() {
        to_sockaddr(a, &mut c.id.route.addr.dst);
        c.id.route.addr.ib.dgid.raw = gid_of_ip(a.ip()).octets();
    }
    c.id.route.addr.ib.pkey = 0xFFFFu16.to_be();
}

/// `rdma_create_event_channel`.
pub extern "C" fn rdma_create_event_channel() -> *mut rdma_event_channel {
    entry("rdma_create_event_channel", Ret::NULL, |v| {
        Ok(ChanC::new(v)?.into_c())
    })
}

/// `rdma_destroy_event_channel`.
///
/// # Safety
/// `ch` must be a channel this library made, with no ID left on it.
pub unsafe extern "C" fn rdma_destroy_event_channel(ch: *mut rdma_event_channel) {
    entry("rdma_destroy_event_channel", Ret::VOID, |_| {
        if !ch.is_null() {
            // SAFETY: made by rdma_create_event_channel, destroyed once.
            drop(unsafe { ChanC::free(ch) });
        }
        Ok(())
    })
}

/// `rdma_create_id`: an ID on `channel` (or on a channel of its own when NULL, as
/// librdmacm makes for synchronous IDs).
///
/// # Safety
/// `channel` NULL or a channel of this library; `id` a valid pointer.
pub unsafe extern "C" fn rdma_create_id(
    channel: *mut rdma_event_channel,
    id: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: c_int,
) -> c_int {
    entry("rdma_create_id", Ret::MINUS_ONE, |v| {
        v.ensure(!id.is_null(), libc::EINVAL, &"NULL id")?;
        v.ensure(
            port_space(ps).is_some(),
            libc::EINVAL,
            &format_args!("port space {ps:#x} (RDMA_PS_TCP, _UDP or _IB)"),
        )?;
        let own_chan = if channel.is_null() {
            Some(Box::new(ChanC::new(v)?))
        } else {
            None
        };
        // SAFETY: rdma_cm_id is pointers, ints and sockaddrs: all-zero is valid.
        let mut raw: rdma_cm_id = unsafe { std::mem::zeroed() };
        raw.channel = match &own_chan {
            Some(c) => (&raw const c.ch).cast_mut(),
            None => channel,
        };
        raw.context = context;
        raw.ps = ps;
        // librdmacm's ucma_get_qp_type: UD for the UDP port space, RC otherwise.
        raw.qp_type = if ps == RDMA_PS_UDP {
            IBV_QPT_UD
        } else {
            IBV_QPT_RC
        };
        let c = IdC::boxed(raw, own_chan);
        // SAFETY: the caller's pointer.
        unsafe { *id = c.cast() };
        Ok(0)
    })
}

/// `rdma_destroy_id`: its connection ends (a DREQ, or a REJ while it forms); events still
/// queued for it are dropped. As librdmacm's, it waits until every event handed out for
/// the ID is acked (a synchronous ID's own event is acked here).
///
/// # Safety
/// `id` must be an ID of this library, not used again.
pub unsafe extern "C" fn rdma_destroy_id(id: *mut rdma_cm_id) -> c_int {
    entry("rdma_destroy_id", Ret::MINUS_ONE, |v| {
        v.ensure(!id.is_null(), libc::EINVAL, &"NULL id")?;
        {
            // No event finds the ID from here on (see LIVE).
            let _unhook = LIVE.write().unwrap_or_else(|e| e.into_inner());
            // SAFETY: a live IdC of this library.
            let c = unsafe { IdC::from_ptr(id) };
            if let Some(r) = lock(&c.rust).as_ref() {
                r.set_user(0);
            }
            for r in lock(&c.also).iter() {
                r.set_user(0);
            }
        }
        // SAFETY: a live IdC; its own event is this thread's to ack.
        ack_own_event(unsafe { IdC::from_ptr_mut(id) });
        {
            // SAFETY: a live IdC: it is freed only below.
            let c = unsafe { IdC::from_ptr(id) };
            let mut a = lock(&c.acks);
            while a.completed < a.reported {
                a = c.acked.wait(a).unwrap_or_else(|e| e.into_inner());
            }
        }
        crate::ports::release(id as usize);
        // SAFETY: made by rdma_create_id or an event, destroyed once, its events acked.
        let mut c = unsafe { IdC::free(id) };
        if c.id.qp.is_null() {
            destroy_own_cqs(&mut c);
        }
        // The connection ends as its Rust side drops (a DREQ, or a REJ).
        lock(&c.rust).take();
        lock(&c.also).clear();
        Ok(0)
    })
}

/// `rdma_bind_addr`.
///
/// # Safety
/// `id` an ID of this library; `addr` a sockaddr.
pub unsafe extern "C" fn rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut libc::sockaddr) -> c_int {
    entry("rdma_bind_addr", Ret::MINUS_ONE, |v| {
        // SAFETY: per the contract.
        let (c, a) = unsafe { (IdC::from_ptr_mut(id), from_sockaddr(addr)) };
        let Some(mut a) = a else {
            return v.err(libc::EAFNOSUPPORT, &"not an IPv4 or IPv6 address");
        };
        // A loopback address no device has binds to a device on loopback, and the ID
        // takes that device's address (the one its peers reach it at).
        if lock(&c.rust).is_none()
            && let Some(ip) = loopback_device(a.ip())
        {
            a.set_ip(ip);
        }
        // The port is the process's before the device's: Linux's conflicts first.
        let (key, ps, af, reuse) = (
            c as *const IdC as usize,
            c.id.ps,
            c.afonly_set.then_some(c.afonly),
            c.reuseaddr,
        );
        let binding = move |a: SocketAddr| crate::ports::Binding {
            id: key,
            ps,
            addr: a,
            afonly: crate::ports::afonly(&a, af),
            reuseaddr: reuse,
        };
        if a.port() != 0
            && let Err(e) = crate::ports::claim(binding(a))
        {
            // The errno itself, not -1 (as this verb has always answered a taken port).
            let f = v.fail(
                e,
                &format_args!("port {} is taken in this port space", a.port()),
            );
            return Ok(f.errno());
        }
        let r = match rust_id(v, c, Some(a.ip())) {
            Ok(r) => r,
            Err(f) => {
                crate::ports::release(key);
                return Err(f);
            }
        };
        let rc = v.check(r.bind_addr(a));
        if rc.is_ok() && a.ip().is_unspecified() {
            c.wildcard = Some(a.is_ipv6());
        }
        if rc.is_err() {
            crate::ports::release(key);
        } else if a.port() == 0
            && let Some(l) = r.local_addr()
        {
            // A port the device chose is recorded too (it cannot conflict: it was free).
            let _ = crate::ports::claim(binding(SocketAddr::new(a.ip(), l.port())));
        }
        fill_route(c, &r);
        rc.map(|()| 0)
    })
}

/// `rdma_resolve_addr`: completes at once (the GID is the address), with an
/// ADDR_RESOLVED event.
///
/// # Safety
/// `id` an ID of this library; `src` NULL or a sockaddr; `dst` a sockaddr.
pub unsafe extern "C" fn rdma_resolve_addr(
    id: *mut rdma_cm_id,
    src: *mut libc::sockaddr,
    dst: *mut libc::sockaddr,
    _timeout_ms: c_int,
) -> c_int {
    entry("rdma_resolve_addr", Ret::MINUS_ONE, |v| {
        // SAFETY: per the contract.
        let (c, mut s, d) = unsafe {
            (
                IdC::from_ptr_mut(id),
                from_sockaddr(src),
                from_sockaddr(dst),
            )
        };
        let Some(mut d) = d else {
            return v.err(libc::EAFNOSUPPORT, &"the destination is not IPv4 or IPv6");
        };
        // A loopback source no device has is a device on loopback, as for a bind.
        if let Some(a) = &mut s
            && lock(&c.rust).is_none()
            && let Some(ip) = loopback_device(a.ip())
        {
            a.set_ip(ip);
        }
        // Without a source (and unbound), the device is the one on the route to the
        // destination, as the kernel's rdma_cm finds it, and ENODEV when none is.
        let mut src = s.map(|s| s.ip()).filter(|ip| !ip.is_unspecified());
        if src.is_none() && lock(&c.rust).is_none() {
            src = route_source_device(d.ip());
            v.ensure(
                src.is_some(),
                libc::ENODEV,
                &format_args!(
                    "no softrdma device is on the kernel's route to {} (configure one \
                     with an address on that interface, or give a source address)",
                    d.ip()
                ),
            )?;
        }
        let r = rust_id(v, c, src)?;
        // A loopback destination no device has is this host: the ID's own device, as
        // Linux's cma_resolve_loopback connects to the source device itself.
        if loopback_device(d.ip()).is_some() {
            d.set_ip(r.context().addr());
        }
        let rc = v.check(r.resolve_addr(s, d));
        fill_route(c, &r);
        rc?;
        complete(v, c)?;
        Ok(0)
    })
}

/// `rdma_resolve_route`: completes at once, with a ROUTE_RESOLVED event.
///
/// # Safety
/// `id` an ID of this library.
pub unsafe extern "C" fn rdma_resolve_route(id: *mut rdma_cm_id, _timeout_ms: c_int) -> c_int {
    entry("rdma_resolve_route", Ret::MINUS_ONE, |v| {
        // SAFETY: per the contract.
        let c = unsafe { IdC::from_ptr_mut(id) };
        v.check(made(v, c)?.resolve_route())?;
        complete(v, c)?;
        Ok(0)
    })
}

/// `rdma_listen`.
///
/// # Safety
/// `id` an ID of this library.
pub unsafe extern "C" fn rdma_listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int {
    entry("rdma_listen", Ret::MINUS_ONE, |v| {
        // SAFETY: per the contract.
        let c = unsafe { IdC::from_ptr_mut(id) };
        // An ID never bound listens on 0.0.0.0, as rdma_cm binds it, on a port of its
        // choosing.
        if lock(&c.rust).is_none() {
            c.wildcard = Some(false);
        }
        let r = rust_id(v, c, Some(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)))?;
        // An AFONLY [::] listener takes no IPv4 request: not on an IPv4 device (the one
        // every ID gets when no IPv6 device is first), only on the IPv6 ones.
        let v4_only_here =
            c.wildcard == Some(true) && c.afonly && r.context().addr().to_canonical().is_ipv4();
        let mut rc = if v4_only_here {
            Ok(())
        } else {
            v.check(r.listen(backlog))
        };
        if rc.is_ok()
            && let Some(v6) = c.wildcard
        {
            rc = listen_elsewhere(v, c, &r, v6, backlog);
        }
        fill_route(c, &r);
        rc.map(|()| 0)
    })
}

/// `rdma_create_qp`: a QP on `pd` (or the ID's PD) that the CM moves to RTS as the
/// connection forms; `attr.cap` gets what was given.
///
/// # Safety
/// `id` an ID of this library; `pd` NULL or a PD of this library; `attr` valid.
pub unsafe extern "C" fn rdma_create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> c_int {
    entry("rdma_create_qp", Ret::MINUS_ONE, |v| {
        // SAFETY: per the contract.
        let c = unsafe { IdC::from_ptr_mut(id) };
        let r = made(v, c)?;
        v.ensure(!attr.is_null(), libc::EINVAL, &"NULL attributes")?;
        // As librdmacm: no PD is the device's default PD, and a missing CQ is made for the
        // ID (cmtime gives neither).
        let pd = id_pd(c, pd);
        v.ensure(!pd.is_null(), libc::EINVAL, &"no PD")?;
        // SAFETY: the caller's attributes.
        let a = unsafe { &mut *attr };
        // As librdmacm: the ID's SRQ (rdma_create_srq), unless the caller names one.
        if a.srq.is_null() {
            a.srq = c.id.srq.cast();
        }
        for (send, cq, depth) in [
            (true, &mut a.send_cq, a.cap.max_send_wr),
            (false, &mut a.recv_cq, a.cap.max_recv_wr),
        ] {
            if cq.is_null() {
                // As librdmacm's ucma_create_cqs: each with a completion channel, and the
                // ID as its context (rdma_get_recv_comp asserts both).
                // SAFETY: the ID's context.
                let ch = unsafe { crate::cq::ibv_create_comp_channel(c.id.verbs) };
                if ch.is_null() {
                    destroy_own_cqs(c);
                    return Err(Failed::recorded());
                }
                c.own_cq_chans.push(ch);
                if send {
                    c.id.send_cq_channel = ch.cast();
                } else {
                    c.id.recv_cq_channel = ch.cast();
                }
                // SAFETY: the ID's context and the channel just made.
                let made = unsafe {
                    crate::cq::ibv_create_cq(
                        c.id.verbs,
                        depth.max(1) as c_int,
                        (c as *mut IdC).cast(),
                        ch,
                        0,
                    )
                };
                if made.is_null() {
                    destroy_own_cqs(c);
                    return Err(Failed::recorded());
                }
                c.own_cqs.push(made);
                *cq = made;
            }
        }

        // SAFETY: the PD and the caller's attributes.
        let qp = unsafe { crate::qp::ibv_create_qp(pd, attr) };
        if qp.is_null() {
            destroy_own_cqs(c);
            return Err(Failed::recorded());
        }
        // SAFETY: just made by this library.
        let soft = unsafe { SoftQp::from_ptr(qp) };
        if let Err(e) = r.attach_qp(&soft.inner) {
            let f = v.error(&e);
            // SAFETY: just made, not handed out.
            unsafe { crate::qp::ibv_destroy_qp(qp) };
            destroy_own_cqs(c);
            return Err(f);
        }
        c.id.qp = qp;
        c.id.pd = pd;
        // SAFETY: the caller's attributes, as ibv_create_qp left them.
        let a = unsafe { &*attr };
        c.id.send_cq = a.send_cq.cast();
        c.id.recv_cq = a.recv_cq.cast();
        c.id.qp_type = a.qp_type;
        Ok(0)
    })
}

/// `rdma_create_qp_ex`: as [`rdma_create_qp`], from the extended attributes (PD, CQs,
/// caps and type; nothing else is taken).
///
/// # Safety
/// `id` an ID of this library; `attr` valid.
pub unsafe extern "C" fn rdma_create_qp_ex(
    id: *mut rdma_cm_id,
    attr: *mut ibv_qp_init_attr_ex,
) -> c_int {
    entry("rdma_create_qp_ex", Ret::MINUS_ONE, |v| {
        v.ensure(!attr.is_null(), libc::EINVAL, &"NULL attr")?;
        // SAFETY: the caller's attributes.
        let a = unsafe { &mut *attr };
        let mut init = ibv_qp_init_attr {
            qp_context: a.qp_context,
            send_cq: a.send_cq,
            recv_cq: a.recv_cq,
            srq: a.srq,
            cap: a.cap,
            qp_type: a.qp_type,
            sq_sig_all: a.sq_sig_all,
        };
        let pd = if a.comp_mask & IBV_QP_INIT_ATTR_PD != 0 {
            a.pd
        } else {
            null_mut()
        };
        // SAFETY: per the contract.
        let rc = unsafe { rdma_create_qp(id, pd, &mut init) };
        a.cap = init.cap;
        Ok(rc)
    })
}

/// `rdma_destroy_qp`.
///
/// # Safety
/// `id` an ID of this library.
pub unsafe extern "C" fn rdma_destroy_qp(id: *mut rdma_cm_id) {
    entry("rdma_destroy_qp", Ret::VOID, |_| {
        // SAFETY: per the contract.
        let c = unsafe { IdC::from_ptr_mut(id) };
        if let Some(r) = lock(&c.rust).as_ref() {
            r.detach_qp();
        }
        if !c.id.qp.is_null() {
            // SAFETY: the QP rdma_create_qp made, destroyed once.
            unsafe { crate::qp::ibv_destroy_qp(c.id.qp) };
            c.id.qp = null_mut();
        }
        destroy_own_cqs(c);
        Ok(())
    })
}

/// Destroys the CQs (and their channels) `rdma_create_qp` made for the ID.
fn destroy_own_cqs(c: &mut IdC) {
    for cq in c.own_cqs.drain(..) {
        // SAFETY: a CQ this library made for the ID, destroyed once, its QP gone.
        unsafe { crate::cq::ibv_destroy_cq(cq) };
    }
    for ch in c.own_cq_chans.drain(..) {
        // SAFETY: a channel this library made for the ID, its CQ gone.
        unsafe { crate::cq::ibv_destroy_comp_channel(ch) };
    }
    c.id.send_cq_channel = null_mut();
    c.id.recv_cq_channel = null_mut();
}

/// The PD a verb on the ID uses: the caller's, else the ID's, else the device's default
/// (librdmacm's order).
fn id_pd(c: &IdC, pd: *mut ibv_pd) -> *mut ibv_pd {
    match (pd.is_null(), c.id.pd.is_null()) {
        (false, _) => pd,
        (true, false) => c.id.pd,
        (true, true) => default_pd(c.id.verbs),
    }
}

/// The PD the CM gives each context (`crate::mr::library_pd`): every ID on the device has
/// it as `id->pd` until a QP of the caller's PD replaces it, and QPs created without a PD
/// use it.
fn default_pd(ctx: *mut ibv_context) -> *mut ibv_pd {
    crate::mr::library_pd(ctx)
}

/// The caller's connection parameters (NULL: librdmacm's defaults), against what the
/// peer offered (`peer`, for an accept). As librdmacm: a depth above the device's limit
/// is EINVAL, unless it is `RDMA_MAX_RESP_RES`/`RDMA_MAX_INIT_DEPTH` (255), which asks for
/// the most the device allows, and on an accept no more than the peer offered.
///
/// # Safety
/// `p` NULL or a valid `rdma_conn_param` whose private data is readable.
unsafe fn conn_param(
    v: Verb,
    p: *const rdma_conn_param,
    peer: Option<PeerParam>,
) -> Result<ConnParam, Failed> {
    // The device's limit (`max_qp_rd_atom`, `max_qp_init_rd_atom`).
    const RD_MAX: u8 = 128;
    // What `RDMA_MAX_RESP_RES` and `RDMA_MAX_INIT_DEPTH` ask for.
    const MOST: u8 = RDMA_MAX_RESP_RES;
    const _: () = assert!(RDMA_MAX_INIT_DEPTH == MOST);
    let resp = peer.map_or(RD_MAX, |p| p.initiator_depth.min(RD_MAX));
    let init = peer.map_or(RD_MAX, |p| p.responder_resources.min(RD_MAX));
    if p.is_null() {
        return Ok(ConnParam {
            private_data: Vec::new(),
            responder_resources: resp,
            initiator_depth: init,
            retry_count: 7,
            rnr_retry_count: 7,
            qp_num: None,
            srq: false,
        });
    }
    // SAFETY: per the contract.
    let p = unsafe { &*p };
    for (what, depth) in [
        ("responder_resources", p.responder_resources),
        ("initiator_depth", p.initiator_depth),
    ] {
        v.ensure(
            depth == MOST || depth <= RD_MAX,
            libc::EINVAL,
            &format_args!("conn_param.{what} = {depth} is above the device's {RD_MAX}"),
        )?;
    }
    // SAFETY: the caller's buffer of that length.
    let private_data = unsafe { copy_bytes(p.private_data, p.private_data_len.into()) };
    let or = |v: u8, most: u8| if v == MOST { most } else { v };
    Ok(ConnParam {
        private_data,
        responder_resources: or(p.responder_resources, resp),
        initiator_depth: or(p.initiator_depth, init),
        // An accept's retry count is the REQ's (the REP carries none, and
        // Linux's CM gives the passive QP the requester's); the caller's field is not read,
        // as librdmacm's callers (libfabric) leave it unset there.
        retry_count: match peer {
            Some(r) => r.retry_count.min(7),
            None => p.retry_count.min(7),
        },
        rnr_retry_count: p.rnr_retry_count.min(7),
        // A program's own QP (librdmacm reads these only when the ID has none).
        qp_num: Some(softrdma::Qpn::new(p.qp_num & 0xff_ffff)),
        srq: p.srq != 0,
    })
}

/// `rdma_connect`.
///
/// # Safety
/// `id` an ID of this library; `param` NULL or valid.
pub unsafe extern "C" fn rdma_connect(id: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int {
    entry("rdma_connect", Ret::MINUS_ONE, |v| {
        // SAFETY: per the contract.
        let (c, p) = unsafe { (IdC::from_ptr_mut(id), conn_param(v, param, None)) };
        let mut p = p?;
        if param.is_null() {
            // An active rdma_create_ep's private data (`ai_connect`).
            p.private_data = c.connect_data.clone();
        }
        v.check(made(v, c)?.connect(&p))?;
        complete(v, c)?;
        Ok(0)
    })
}

/// `rdma_accept`.
///
/// # Safety
/// `id` an ID of this library; `param` NULL or valid.
pub unsafe extern "C" fn rdma_accept(id: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int {
    entry("rdma_accept", Ret::MINUS_ONE, |v| {
        // SAFETY: per the contract.
        let c = unsafe { IdC::from_ptr_mut(id) };
        let peer = *lock(&c.peer);
        // SAFETY: per the contract.
        let p = unsafe { conn_param(v, param, peer) }?;
        v.check(made(v, c)?.accept(&p))?;
        if c.id.qp_type == IBV_QPT_UD {
            // A UD accept has no event to wait for; the request's event is done.
            ack_own_event(c);
        } else {
            complete(v, c)?;
        }
        Ok(0)
    })
}

/// REJ reasons (the codes of `softrdma_wire::cm::rej_reason`):
/// the consumer's own reject, and a reject of the peer's vendor (ECE) options.
const REJ_CONSUMER_DEFINED: u16 = 28;
const REJ_VENDOR_OPTION_NOT_SUPPORTED: u16 = 35;

/// `rdma_reject`.
///
/// # Safety
/// `id` an ID of this library; `data` NULL or `len` readable bytes.
pub unsafe extern "C" fn rdma_reject(id: *mut rdma_cm_id, data: *const c_void, len: u8) -> c_int {
    entry("rdma_reject", Ret::MINUS_ONE, |v| {
        // SAFETY: per the contract.
        unsafe { reject_for(v, id, REJ_CONSUMER_DEFINED, data, len) }
    })
}

/// `rdma_reject_ece`: a reject that says the peer's ECE options are not supported.
///
/// # Safety
/// As [`rdma_reject`].
pub unsafe extern "C" fn rdma_reject_ece(
    id: *mut rdma_cm_id,
    data: *const c_void,
    len: u8,
) -> c_int {
    entry("rdma_reject_ece", Ret::MINUS_ONE, |v| {
        // SAFETY: per the contract.
        unsafe { reject_for(v, id, REJ_VENDOR_OPTION_NOT_SUPPORTED, data, len) }
    })
}

/// Rejects `id`'s connection request with REJ reason `reason`.
///
/// # Safety
/// As [`rdma_reject`].
unsafe fn reject_for(
    v: Verb,
    id: *mut rdma_cm_id,
    reason: u16,
    data: *const c_void,
    len: u8,
) -> Result<c_int, Failed> {
    // SAFETY: per the contract.
    let (c, pd) = unsafe { (IdC::from_ptr(id), copy_bytes(data, len.into())) };
    v.check(made(v, c)?.reject_for(reason, &pd))?;
    Ok(0)
}

/// Checks an ECE verb's arguments as librdmacm does: an ID and an `ibv_ece`, and no QP on
/// the ID (ECE is for programs that move their own QP).
///
/// # Safety
/// `id` NULL or an ID of this library.
unsafe fn ece_args(v: Verb, id: *mut rdma_cm_id, ece: *mut ibv_ece) -> Result<(), Failed> {
    v.ensure(
        // SAFETY: NULL or an ID of this library.
        !id.is_null() && !ece.is_null() && unsafe { (*id).qp }.is_null(),
        libc::EINVAL,
        &"NULL ID or ece, or the ID has a QP",
    )
}

/// `rdma_get_remote_ece`: the Enhanced Connection Establishment options the peer sent.
/// softrdma's CM neither sends nor reads ECE options on the wire, so they are those of a
/// peer that offers none: vendor 0, options 0.
///
/// # Safety
/// `id` NULL or an ID of this library; `ece` NULL or writable.
pub unsafe extern "C" fn rdma_get_remote_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
    entry("rdma_get_remote_ece", Ret::MINUS_ONE, |v| {
        // SAFETY: per the contract.
        unsafe { ece_args(v, id, ece) }?;
        // SAFETY: the caller's ibv_ece.
        unsafe {
            *ece = ibv_ece {
                vendor_id: 0,
                options: 0,
                comp_mask: 0,
            }
        };
        Ok(0)
    })
}

/// `rdma_set_local_ece`: accepted and checked as librdmacm does; the options are not sent
/// (see [`rdma_get_remote_ece`]), so the peer sees an offer of none, which ECE defines as
/// "no enhanced options", the same as a device that knows no ECE.
///
/// # Safety
/// `id` NULL or an ID of this library; `ece` NULL or readable.
pub unsafe extern "C" fn rdma_set_local_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
    entry("rdma_set_local_ece", Ret::MINUS_ONE, |v| {
        // SAFETY: per the contract.
        unsafe { ece_args(v, id, ece) }?;
        Ok(0)
    })
}

/// `rdma_establish`.
///
/// # Safety
/// `id` an ID of this library.
pub unsafe extern "C" fn rdma_establish(id: *mut rdma_cm_id) -> c_int {
    entry("rdma_establish", Ret::MINUS_ONE, |v| {
        // SAFETY: per the contract.
        let c = unsafe { IdC::from_ptr(id) };
        v.check(made(v, c)?.establish())?;
        Ok(0)
    })
}

/// `rdma_notify`: IBV_EVENT_COMM_EST (a passive ID's QP received before the RTU came)
/// establishes the connection, with an ESTABLISHED event; any other event is EINVAL, as
/// the kernel's `ib_cm_notify` answers without path migration.
///
/// # Safety
/// `id` an ID of this library.
pub unsafe extern "C" fn rdma_notify(id: *mut rdma_cm_id, event: c_int) -> c_int {
    entry("rdma_notify", Ret::MINUS_ONE, |v| {
        // SAFETY: per the contract.
        let c = unsafe { IdC::from_ptr(id) };
        v.ensure(
            event == IBV_EVENT_COMM_EST,
            libc::EINVAL,
            &format_args!("event {event}: only IBV_EVENT_COMM_EST is passed on to the CM"),
        )?;
        v.check(made(v, c)?.notify(softrdma::cm::NotifyEvent::CommEstablished))?;
        Ok(0)
    })
}

/// `rdma_create_srq`: a basic SRQ on the ID's device, on `pd` (NULL: the ID's PD, or the
/// device's default as librdmacm's), which `rdma_create_qp` gives the ID's QP when its
/// attributes name none; `attr.attr` gets what was given.
///
/// # Safety
/// `id` an ID of this library; `pd` NULL or a PD of this library; `attr` valid.
pub unsafe extern "C" fn rdma_create_srq(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> c_int {
    entry("rdma_create_srq", Ret::MINUS_ONE, |v| {
        v.ensure(!attr.is_null(), libc::EINVAL, &"NULL attributes")?;
        // SAFETY: per the contract.
        unsafe { create_srq(v, id, pd, &mut *attr) }
    })
}

/// `rdma_create_srq_ex`: [`rdma_create_srq`] from the extended attributes, which must
/// name the SRQ's type; only basic SRQs (XRC ones are EOPNOTSUPP, as `ibv_create_srq_ex`).
///
/// # Safety
/// `id` an ID of this library; `attr` valid, its PD NULL or one of this library's.
pub unsafe extern "C" fn rdma_create_srq_ex(
    id: *mut rdma_cm_id,
    attr: *mut ibv_srq_init_attr_ex,
) -> c_int {
    entry("rdma_create_srq_ex", Ret::MINUS_ONE, |v| {
        v.ensure(!attr.is_null(), libc::EINVAL, &"NULL attributes")?;
        // SAFETY: the caller's attributes.
        let a = unsafe { &mut *attr };
        v.ensure(
            a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE != 0,
            libc::EINVAL,
            &"no SRQ type (IBV_SRQ_INIT_ATTR_TYPE)",
        )?;
        v.ensure(
            a.srq_type == IBV_SRQT_BASIC,
            libc::EOPNOTSUPP,
            &format_args!("SRQ type {}: only basic SRQs", a.srq_type),
        )?;
        let pd = if a.comp_mask & IBV_SRQ_INIT_ATTR_PD != 0 {
            a.pd
        } else {
            null_mut()
        };
        let mut init = ibv_srq_init_attr {
            srq_context: a.srq_context,
            attr: a.attr,
        };
        // SAFETY: per the contract.
        let rc = unsafe { create_srq(v, id, pd, &mut init) };
        a.attr = init.attr;
        rc?;
        // SAFETY: per the contract.
        a.pd = unsafe { (*id).pd };
        a.comp_mask |= IBV_SRQ_INIT_ATTR_PD;
        Ok(0)
    })
}

/// The SRQ of both entry points.
///
/// # Safety
/// `id` an ID of this library; `pd` NULL or a PD of this library.
unsafe fn create_srq(
    v: Verb,
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: &mut ibv_srq_init_attr,
) -> Result<c_int, Failed> {
    // SAFETY: per the contract.
    let c = unsafe { IdC::from_ptr_mut(id) };
    made(v, c)?;
    v.ensure(
        c.id.srq.is_null(),
        libc::EEXIST,
        &"the ID has an SRQ already (rdma_destroy_srq first)",
    )?;
    let pd = id_pd(c, pd);
    v.ensure(!pd.is_null(), libc::EINVAL, &"no PD")?;
    // SAFETY: a PD of this library and the caller's attributes.
    let srq = unsafe { crate::qp::ibv_create_srq(pd, attr) };
    if srq.is_null() {
        return Err(Failed::recorded());
    }
    c.id.srq = srq.cast();
    if c.id.pd.is_null() {
        c.id.pd = pd;
    }
    Ok(0)
}

/// `rdma_destroy_srq`: destroys the SRQ `rdma_create_srq` made for the ID (its QP must
/// be gone first, as `ibv_destroy_srq` requires).
///
/// # Safety
/// `id` an ID of this library.
pub unsafe extern "C" fn rdma_destroy_srq(id: *mut rdma_cm_id) {
    entry("rdma_destroy_srq", Ret::VOID, |_| {
        // SAFETY: per the contract.
        let c = unsafe { IdC::from_ptr_mut(id) };
        if !c.id.srq.is_null() {
            // SAFETY: the SRQ rdma_create_srq made, destroyed once.
            unsafe { crate::qp::ibv_destroy_srq(c.id.srq.cast()) };
            c.id.srq = null_mut();
        }
        Ok(())
    })
}

/// `rdma_disconnect`.
///
/// # Safety
/// `id` an ID of this library.
pub unsafe extern "C" fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
    entry("rdma_disconnect", Ret::MINUS_ONE, |v| {
        // SAFETY: per the contract.
        let c = unsafe { IdC::from_ptr_mut(id) };
        v.check(made(v, c)?.disconnect())?;
        complete(v, c)?;
        Ok(0)
    })
}

/// `rdma_set_option`: TOS (the REQ's traffic class, see `CmId::set_tos`), ACK_TIMEOUT (the
/// RC QP's, see `CmId::set_ack_timeout`), AFONLY (an IPv6 wildcard listen stays off the
/// IPv4 devices, and [::] and 0.0.0.0 binds of one port coexist) and REUSEADDR (binds of
/// one port by IDs that both set it coexist; see `crate::ports`). Anything else is
/// EINVAL, as the kernel says of an unknown option.
///
/// # Safety
/// `id` an ID of this library; `optval` NULL or `optlen` readable bytes.
pub unsafe extern "C" fn rdma_set_option(
    id: *mut rdma_cm_id,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: usize,
) -> c_int {
    entry("rdma_set_option", Ret::MINUS_ONE, |v| {
        // The sizes are the kernel's: a u8 for TOS and ACK_TIMEOUT, an int for the flags.
        const ID: c_int = RDMA_OPTION_ID;
        const TOS: c_int = RDMA_OPTION_ID_TOS;
        const ACK_TIMEOUT: c_int = RDMA_OPTION_ID_ACK_TIMEOUT;
        const REUSEADDR: c_int = RDMA_OPTION_ID_REUSEADDR;
        const AFONLY: c_int = RDMA_OPTION_ID_AFONLY;
        let size = match (level, optname) {
            (ID, TOS | ACK_TIMEOUT) => 1,
            (ID, REUSEADDR | AFONLY) => size_of::<c_int>(),
            _ => 0,
        };
        v.ensure(
            size == 0 || (!id.is_null() && !optval.is_null() && optlen >= size),
            libc::EINVAL,
            &format_args!("option {optname} takes {size} bytes"),
        )?;
        match (level, optname) {
            (ID, TOS | ACK_TIMEOUT) => {
                // SAFETY: per the contract: an ID of this library and a byte.
                let (c, b) = unsafe { (IdC::from_ptr_mut(id), *optval.cast::<u8>()) };
                if optname == TOS {
                    c.tos = Some(b);
                } else {
                    c.ack_timeout = Some(b);
                }
                // An ID not on a device yet gets them when it is (see rust_id).
                if let Some(r) = lock(&c.rust).as_ref() {
                    v.check(apply_options(c, r))?;
                }
                Ok(0)
            }
            (ID, REUSEADDR | AFONLY) => {
                // SAFETY: per the contract: an ID of this library and an int.
                let (c, on) = unsafe {
                    (
                        IdC::from_ptr_mut(id),
                        optval.cast::<c_int>().read_unaligned() != 0,
                    )
                };
                if optname == AFONLY {
                    (c.afonly, c.afonly_set) = (on, true);
                } else {
                    c.reuseaddr = on;
                }
                Ok(0)
            }
            _ => v.err(
                libc::EINVAL,
                &format_args!("level {level} option {optname}"),
            ),
        }
    })
}

/// Gives the ID's Rust side the options set on it (`rdma_set_option`).
fn apply_options(c: &IdC, r: &CmId) -> softrdma::Result<()> {
    if let Some(t) = c.tos {
        r.set_tos(t);
    }
    match c.ack_timeout {
        Some(t) => r.set_ack_timeout(t),
        None => Ok(()),
    }
}

/// `rdma_get_src_port`: the local port, in network order.
///
/// # Safety
/// `id` an ID of this library.
pub unsafe extern "C" fn rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
    // SAFETY: per the contract.
    entry("rdma_get_src_port", Ret::new(|_| 0, 0), |_| unsafe {
        Ok(port_of(id, CmId::local_addr))
    })
}

/// `rdma_get_dst_port`: the peer's port, in network order.
///
/// # Safety
/// `id` an ID of this library.
pub unsafe extern "C" fn rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
    // SAFETY: per the contract.
    entry("rdma_get_dst_port", Ret::new(|_| 0, 0), |_| unsafe {
        Ok(port_of(id, CmId::peer_addr))
    })
}

/// The port of one of the ID's addresses (`addr`), in network order; 0 for none.
///
/// # Safety
/// `id` an ID of this library.
unsafe fn port_of(id: *mut rdma_cm_id, addr: fn(&CmId) -> Option<SocketAddr>) -> u16 {
    // SAFETY: per the contract.
    let c = unsafe { IdC::from_ptr(id) };
    c.rust
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .and_then(addr)
        .map_or(0, |a| a.port().to_be())
}

/// `rdma_get_cm_event`: the channel's next event. A connect request brings a new ID, with
/// the listener's channel, context and device. It waits for one, unless the program made
/// the channel's descriptor non-blocking (`O_NONBLOCK`, as libfabric's verbs provider
/// does): then, as librdmacm's `read` of that descriptor, it fails at once with EAGAIN
/// when no event is there.
///
/// # Safety
/// `ch` a channel of this library; `event` a valid pointer.
pub unsafe extern "C" fn rdma_get_cm_event(
    ch: *mut rdma_event_channel,
    event: *mut *mut rdma_cm_event,
) -> c_int {
    entry("rdma_get_cm_event", Ret::MINUS_ONE, |v| {
        v.ensure(
            !ch.is_null() && !event.is_null(),
            libc::EINVAL,
            &"NULL argument",
        )?;
        // SAFETY: a ChanC this library made.
        let chan = unsafe { ChanC::from_ptr(ch) };
        // SAFETY: fcntl on the channel's own descriptor (the program may have changed its
        // flags; a closed one reads as blocking, as it then waits on).
        let flags = unsafe { libc::fcntl(chan.ch.fd, libc::F_GETFL) };
        let e = if flags >= 0 && flags & libc::O_NONBLOCK != 0 {
            take_event(chan, Some(std::time::Duration::ZERO))
                .ok_or_else(|| v.quiet(libc::EAGAIN))?
        } else {
            next_event(chan)
        };
        // SAFETY: the caller's pointer.
        unsafe { *event = e };
        Ok(0)
    })
}

/// The C event for `ev`, or `None` when its ID was destroyed.
fn convert(ev: softrdma::cm::CmEvent) -> Option<*mut rdma_cm_event> {
    let _live = LIVE.read().unwrap_or_else(|e| e.into_inner());
    let (kind, status) = match &ev.kind {
        CmEventKind::AddrResolved => (RDMA_CM_EVENT_ADDR_RESOLVED, 0),
        CmEventKind::RouteResolved => (RDMA_CM_EVENT_ROUTE_RESOLVED, 0),
        CmEventKind::ConnectRequest => (RDMA_CM_EVENT_CONNECT_REQUEST, 0),
        CmEventKind::ConnectResponse => (RDMA_CM_EVENT_CONNECT_RESPONSE, 0),
        CmEventKind::Established => (RDMA_CM_EVENT_ESTABLISHED, 0),
        CmEventKind::Rejected { reason } => (RDMA_CM_EVENT_REJECTED, c_int::from(*reason)),
        CmEventKind::Unreachable => (RDMA_CM_EVENT_UNREACHABLE, -libc::ETIMEDOUT),
        // As Linux's cma_sidr_rep_handler: the SIDR_REP's status itself.
        CmEventKind::Unresolved { status } => (RDMA_CM_EVENT_UNREACHABLE, c_int::from(*status)),
        CmEventKind::Disconnected => (RDMA_CM_EVENT_DISCONNECTED, 0),
        CmEventKind::TimewaitExit => (RDMA_CM_EVENT_TIMEWAIT_EXIT, 0),
        CmEventKind::MulticastJoin { .. } => (RDMA_CM_EVENT_MULTICAST_JOIN, 0),
    };
    let (id, listen_id) = if kind == RDMA_CM_EVENT_CONNECT_REQUEST {
        let l = ev.listen_id.as_ref()?.user();
        if l == 0 {
            return None;
        }
        // SAFETY: a live IdC (its user value is cleared before it is freed).
        let lc = unsafe { &*(l as *const IdC) };
        // SAFETY: all-zero is a valid rdma_cm_id.
        let mut raw: rdma_cm_id = unsafe { std::mem::zeroed() };
        // The device that took the request (a wildcard listener's may be another).
        raw.verbs = context_of(&ev.id).unwrap_or(lc.id.verbs);
        raw.pd = default_pd(raw.verbs);
        raw.channel = lc.id.channel;
        raw.context = lc.id.context;
        raw.ps = lc.id.ps;
        raw.port_num = 1;
        // The listener's: RC for TCP, UD for UDP (librdmacm's ucma_get_qp_type).
        raw.qp_type = lc.id.qp_type;
        // A synchronous listener's requests are synchronous IDs of their own (as
        // librdmacm migrates them): their events no longer go to the listener's channel.
        let own_chan = if lc.own_chan.is_some() {
            let rust = EventChannel::new().ok()?;
            ev.id.migrate(&rust);
            let chan = Box::new(ChanC {
                ch: rdma_event_channel { fd: rust.fd() },
                rust,
            });
            raw.channel = (&raw const chan.ch).cast_mut();
            Some(chan)
        } else {
            None
        };
        let c = IdC::boxed(raw, own_chan);
        // SAFETY: just made.
        unsafe {
            *lock(&(*c).rust) = Some(ev.id.clone());
            *lock(&(*c).peer) = ev.peer;
        }
        ev.id.set_user(c as usize);
        // SAFETY: just made.
        fill_route(unsafe { &mut *c }, &ev.id);
        (c.cast::<rdma_cm_id>(), l as *mut rdma_cm_id)
    } else {
        let u = ev.id.user();
        if u == 0 {
            return None;
        }
        (u as *mut rdma_cm_id, null_mut())
    };
    let mut e = Box::new(EventC {
        // SAFETY: all-zero is a valid rdma_cm_event (pointers, ints, a union of them).
        ev: unsafe { std::mem::zeroed() },
        private: ev.private_data.clone(),
        owner: if listen_id.is_null() { id } else { listen_id }.cast(),
    });
    e.ev.id = id;
    e.ev.listen_id = listen_id;
    e.ev.event = kind;
    e.ev.status = status;
    let p = ev.peer.unwrap_or_default();
    e.ev.param.conn = rdma_conn_param {
        private_data: if e.private.is_empty() {
            std::ptr::null()
        } else {
            e.private.as_ptr().cast()
        },
        private_data_len: e.private.len().min(255) as u8,
        responder_resources: p.responder_resources,
        initiator_depth: p.initiator_depth,
        flow_control: 0,
        retry_count: p.retry_count,
        rnr_retry_count: p.rnr_retry_count,
        srq: u8::from(p.srq),
        qp_num: p.qp_num,
    };
    if let Some(ud) = ev.ud {
        // SAFETY: `id` is a live IdC, whose context is this library's.
        let soft = unsafe { SoftContext::from_ptr((*id).verbs) };
        let (to, private_data, private_data_len) = match ev.kind {
            // As librdmacm: the join's context in place of private data.
            CmEventKind::MulticastJoin { group } => {
                // SAFETY: `id` is a live IdC.
                let joins = lock(unsafe { &(*id.cast::<IdC>()).groups });
                let context = joins.iter().find(|(g, _)| *g == group).map_or(0, |j| j.1);
                (Some(group), context as *const c_void, 0)
            }
            _ => (
                ev.id.peer_addr().map(|a| a.ip()),
                e.private.as_ptr().cast(),
                e.private.len().min(255) as u8,
            ),
        };
        e.ev.param.ud = rdma_ud_param {
            private_data,
            private_data_len,
            ah_attr: ud_ah_attr(soft, to),
            qp_num: ud.qp_num,
            qkey: ud.qkey,
        };
    }
    // SAFETY: a live IdC (LIVE is held), whose destruction now waits for this ack.
    lock(unsafe { &(*e.owner).acks }).reported += 1;
    let raw = Box::into_raw(e);
    // SAFETY: `id` is a live IdC; its current event, as librdmacm keeps it.
    unsafe { (*id).event = raw.cast() };
    Some(raw.cast())
}

/// The address handle attributes that reach a UD peer at `peer` (`param.ud.ah_attr`, as
/// the kernel fills them for RoCE: global, the peer's GID, our GID's index, hop limit 64).
fn ud_ah_attr(soft: &SoftContext, peer: Option<IpAddr>) -> ibv_ah_attr {
    // SAFETY: all-zero is a valid ibv_ah_attr.
    let mut a: ibv_ah_attr = unsafe { std::mem::zeroed() };
    a.is_global = 1;
    a.port_num = 1;
    a.grh.hop_limit = 64;
    if let Some(peer) = peer {
        a.grh.dgid.raw = crate::mr::gid_of_ip(peer).octets();
        a.grh.sgid_index = soft.gid_index(soft.ctx.addr()).unwrap_or(0) as u8;
    }
    a
}

/// `rdma_ack_cm_event`: frees the event.
///
/// # Safety
/// `event` an event of this library, acked once.
pub unsafe extern "C" fn rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int {
    entry("rdma_ack_cm_event", Ret::MINUS_ONE, |v| {
        v.ensure(!event.is_null(), libc::EINVAL, &"NULL event")?;
        // SAFETY: made by rdma_get_cm_event, freed once.
        let e = unsafe { EventC::free(event) };
        // SAFETY: the owner is live: its destruction waits for this ack.
        let owner = unsafe { &*e.owner };
        lock(&owner.acks).completed += 1;
        owner.acked.notify_all();
        Ok(0)
    })
}

/// `rdma_join_multicast`: joins the group at `addr` as a full member (see
/// `softrdma::cm::CmId::join_multicast`); a MULTICAST_JOIN event follows, whose
/// `param.ud.private_data` is `context`.
///
/// # Safety
/// `id` an ID of this library; `addr` a sockaddr.
pub unsafe extern "C" fn rdma_join_multicast(
    id: *mut rdma_cm_id,
    addr: *mut libc::sockaddr,
    context: *mut c_void,
) -> c_int {
    entry("rdma_join_multicast", Ret::MINUS_ONE, |v| {
        // SAFETY: per the contract.
        unsafe { join(v, id, addr, false, context) }
    })
}

/// `rdma_join_multicast_ex`: [`rdma_join_multicast`] with join flags (a send-only full
/// member's QP is not attached to the group).
///
/// # Safety
/// `id` an ID of this library; `attr` NULL or valid, its `addr` a sockaddr.
pub unsafe extern "C" fn rdma_join_multicast_ex(
    id: *mut rdma_cm_id,
    attr: *mut rdma_cm_join_mc_attr_ex,
    context: *mut c_void,
) -> c_int {
    entry("rdma_join_multicast_ex", Ret::MINUS_ONE, |v| {
        v.ensure(!attr.is_null(), libc::EINVAL, &"NULL attributes")?;
        // SAFETY: the caller's attributes.
        let a = unsafe { &*attr };
        v.ensure(
            a.comp_mask < RDMA_CM_JOIN_MC_ATTR_RESERVED,
            libc::EOPNOTSUPP,
            &format_args!("comp_mask {:#x}", a.comp_mask),
        )?;
        v.ensure(
            a.comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS != 0,
            libc::EINVAL,
            &"no address (RDMA_CM_JOIN_MC_ATTR_ADDRESS)",
        )?;
        v.ensure(
            a.comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS != 0
                && a.join_flags < RDMA_MC_JOIN_FLAG_RESERVED,
            libc::EINVAL,
            &format_args!("join flags {:#x}", a.join_flags),
        )?;
        // SAFETY: per the contract.
        unsafe {
            join(
                v,
                id,
                a.addr,
                a.join_flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER,
                context,
            )
        }
    })
}

/// The joins of both entry points.
///
/// # Safety
/// `id` an ID of this library; `addr` a sockaddr.
unsafe fn join(
    v: Verb,
    id: *mut rdma_cm_id,
    addr: *mut libc::sockaddr,
    send_only: bool,
    context: *mut c_void,
) -> Result<c_int, Failed> {
    // SAFETY: per the contract.
    let (c, a) = unsafe { (IdC::from_ptr_mut(id), from_sockaddr(addr)) };
    let Some(a) = a else {
        return v.err(libc::EINVAL, &"the group is not an IPv4 or IPv6 address");
    };
    let r = made(v, c)?;
    let group = a.ip().to_canonical();
    // Known before the event can be converted on another thread.
    lock(&c.groups).push((group, context as usize));
    if let Err(f) = v.check(r.join_multicast(group, send_only)) {
        lock(&c.groups).retain(|(g, _)| *g != group);
        return Err(f);
    }
    complete(v, c)?;
    Ok(0)
}

/// `rdma_leave_multicast`: the ID's QP is detached from the group; EADDRNOTAVAIL if it
/// was not joined.
///
/// # Safety
/// `id` an ID of this library; `addr` a sockaddr.
pub unsafe extern "C" fn rdma_leave_multicast(
    id: *mut rdma_cm_id,
    addr: *mut libc::sockaddr,
) -> c_int {
    entry("rdma_leave_multicast", Ret::MINUS_ONE, |v| {
        // SAFETY: per the contract.
        let (c, a) = unsafe { (IdC::from_ptr(id), from_sockaddr(addr)) };
        let Some(a) = a else {
            return v.err(libc::EINVAL, &"the group is not an IPv4 or IPv6 address");
        };
        let r = made(v, c)?;
        let group = a.ip().to_canonical();
        v.check(r.leave_multicast(group))?;
        lock(&c.groups).retain(|(g, _)| *g != group);
        Ok(0)
    })
}

/// `rdma_create_ep`: a synchronous ID from an `rdma_getaddrinfo` result. Passive
/// (`RAI_PASSIVE`): bound to the source address, keeping `pd` and `qp_init_attr` for the
/// QPs [`rdma_get_request`] makes. Active: resolved to the destination (address and
/// route), with a QP when `qp_init_attr` is given, and `ai_connect` kept as the private
/// data of an `rdma_connect` without parameters.
///
/// # Safety
/// `id` a valid pointer; `res` a valid `rdma_addrinfo`; `pd` NULL or a PD of this
/// library; `qp_init_attr` NULL or valid.
pub unsafe extern "C" fn rdma_create_ep(
    id: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    entry("rdma_create_ep", Ret::MINUS_ONE, |v| {
        v.ensure(
            !id.is_null() && !res.is_null(),
            libc::EINVAL,
            &"NULL argument",
        )?;
        // SAFETY: the caller's addrinfo.
        let r = unsafe { &*res };
        let mut cm: *mut rdma_cm_id = null_mut();
        // SAFETY: a synchronous ID (no channel).
        if unsafe { rdma_create_id(null_mut(), &mut cm, null_mut(), r.ai_port_space) } != 0 {
            return Err(Failed::recorded());
        }
        // SAFETY: the ID just made, destroyed below on failure.
        if let Err(f) = unsafe { ep_setup(cm, r, pd, qp_init_attr) } {
            // SAFETY: the ID just made, not handed out.
            unsafe { rdma_destroy_ep(cm) };
            return Err(f);
        }
        // SAFETY: the caller's pointer.
        unsafe { *id = cm };
        Ok(0)
    })
}

/// The passive or active half of [`rdma_create_ep`]: the verbs it calls record their
/// failures.
///
/// # Safety
/// As [`rdma_create_ep`], with `cm` an ID of this library.
unsafe fn ep_setup(
    cm: *mut rdma_cm_id,
    r: &rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> Result<(), Failed> {
    // The result of a verb called here.
    let ok = |rc: c_int| {
        if rc == 0 {
            Ok(())
        } else {
            Err(Failed::recorded())
        }
    };
    if r.ai_flags & RAI_PASSIVE != 0 {
        // SAFETY: per the contract.
        ok(unsafe { rdma_bind_addr(cm, r.ai_src_addr) })?;
        // SAFETY: per the contract.
        let c = unsafe { IdC::from_ptr_mut(cm) };
        if !pd.is_null() {
            c.id.pd = pd;
        }
        if !qp_init_attr.is_null() {
            // SAFETY: the caller's attributes.
            let mut a = unsafe { *qp_init_attr };
            a.qp_type = r.ai_qp_type;
            c.ep_attr = Some(a);
        }
        return Ok(());
    }
    // SAFETY: per the contract; the resolve waits for its event.
    ok(unsafe { rdma_resolve_addr(cm, r.ai_src_addr, r.ai_dst_addr, 2000) })?;
    // SAFETY: the ID, resolved.
    ok(unsafe { rdma_resolve_route(cm, 2000) })?;
    if !qp_init_attr.is_null() {
        // SAFETY: the caller's attributes, which rdma_create_qp fills in (caps).
        unsafe { (*qp_init_attr).qp_type = r.ai_qp_type };
        // SAFETY: per the contract.
        ok(unsafe { rdma_create_qp(cm, pd, qp_init_attr) })?;
    }
    if r.ai_connect_len > 0 && !r.ai_connect.is_null() {
        // SAFETY: per the contract.
        let c = unsafe { IdC::from_ptr_mut(cm) };
        // SAFETY: the addrinfo's buffer of that length.
        c.connect_data = unsafe { copy_bytes(r.ai_connect, r.ai_connect_len) };
    }
    Ok(())
}

/// `rdma_destroy_ep`: the ID's QP (with the CQs made for it), its SRQ, then the ID.
///
/// # Safety
/// `id` an ID of this library, not used again.
pub unsafe extern "C" fn rdma_destroy_ep(id: *mut rdma_cm_id) {
    entry("rdma_destroy_ep", Ret::VOID, |_| {
        if id.is_null() {
            return Ok(());
        }
        // SAFETY: per the contract.
        unsafe {
            if !(*id).qp.is_null() {
                rdma_destroy_qp(id);
            }
            if !(*id).srq.is_null() {
                rdma_destroy_srq(id);
            }
            rdma_destroy_id(id);
        }
        Ok(())
    })
}

/// `rdma_get_request`: the next connection request of a synchronous listener, as a new
/// synchronous ID (with a QP when the listener's `rdma_create_ep` had QP attributes);
/// the request's event is the new ID's `event`.
///
/// # Safety
/// `listen` an ID of this library; `id` a valid pointer.
pub unsafe extern "C" fn rdma_get_request(
    listen: *mut rdma_cm_id,
    id: *mut *mut rdma_cm_id,
) -> c_int {
    entry("rdma_get_request", Ret::MINUS_ONE, |v| {
        v.ensure(
            !listen.is_null() && !id.is_null(),
            libc::EINVAL,
            &"NULL argument",
        )?;
        // SAFETY: per the contract.
        let l = unsafe { IdC::from_ptr_mut(listen) };
        v.ensure(
            l.own_chan.is_some(),
            libc::EINVAL,
            &"the listener has an event channel (rdma_get_request is for IDs made without)",
        )?;
        ack_own_event(l);
        let ev = next_event(l.own_chan.as_ref().expect("checked above"));
        // SAFETY: just made by convert.
        let (kind, status, new) = unsafe { ((*ev).event, (*ev).status, (*ev).id) };
        if kind != RDMA_CM_EVENT_CONNECT_REQUEST || status != 0 {
            l.id.event = ev;
            return v.err(
                if kind == RDMA_CM_EVENT_REJECTED {
                    libc::ECONNREFUSED
                } else {
                    libc::EINVAL
                },
                &format_args!("the listener got event {kind} (status {status}), not a request"),
            );
        }
        // convert made the request the new ID's `event`, as librdmacm leaves it.
        if let Some(mut a) = l.ep_attr {
            // SAFETY: the new ID, with the listener's PD (NULL: the default one).
            if unsafe { rdma_create_qp(new, l.id.pd, &mut a) } != 0 {
                let f = Failed::recorded();
                // SAFETY: the new ID, not handed out.
                unsafe { rdma_destroy_id(new) };
                return Err(f);
            }
        }
        // SAFETY: the caller's pointer.
        unsafe { *id = new };
        Ok(0)
    })
}

/// `rdma_migrate_id`: the ID's events go to `channel` from now on (NULL: a channel of its
/// own, making it synchronous).
///
/// # Safety
/// `id` an ID of this library; `channel` NULL or a channel of this library.
pub unsafe extern "C" fn rdma_migrate_id(
    id: *mut rdma_cm_id,
    channel: *mut rdma_event_channel,
) -> c_int {
    entry("rdma_migrate_id", Ret::MINUS_ONE, |v| {
        v.ensure(!id.is_null(), libc::EINVAL, &"NULL id")?;
        // SAFETY: per the contract.
        let c = unsafe { IdC::from_ptr_mut(id) };
        v.ensure(
            c.own_chan.is_none() || !channel.is_null(),
            libc::EINVAL,
            &"the ID is synchronous already",
        )?;
        let (own, ch) = if channel.is_null() {
            let own = Box::new(ChanC::new(v)?);
            let ch = (&raw const own.ch).cast_mut();
            (Some(own), ch)
        } else {
            (None, channel)
        };
        // SAFETY: a ChanC of this library.
        let target = unsafe { ChanC::from_ptr(ch) };
        if let Some(r) = lock(&c.rust).as_ref() {
            r.migrate(&target.rust);
        }
        for r in lock(&c.also).iter() {
            r.migrate(&target.rust);
        }
        ack_own_event(c);
        c.id.channel = ch;
        c.own_chan = own;
        Ok(0)
    })
}

/// `rdma_init_qp_attr`: the attributes (and mask) that move the ID's QP to
/// `qp_attr->qp_state` (INIT, RTR or RTS), for a caller that moves a QP of its own.
///
/// # Safety
/// `id` an ID of this library; `qp_attr` and `mask` valid.
pub unsafe extern "C" fn rdma_init_qp_attr(
    id: *mut rdma_cm_id,
    qp_attr: *mut ibv_qp_attr,
    mask: *mut c_int,
) -> c_int {
    entry("rdma_init_qp_attr", Ret::MINUS_ONE, |v| {
        v.ensure(
            !id.is_null() && !qp_attr.is_null() && !mask.is_null(),
            libc::EINVAL,
            &"NULL argument",
        )?;
        // SAFETY: per the contract.
        let c = unsafe { IdC::from_ptr(id) };
        let r = made(v, c)?;
        // SAFETY: the caller's attributes.
        let want = unsafe { (*qp_attr).qp_state };
        let state = match want {
            IBV_QPS_INIT => softrdma::QpState::Init,
            IBV_QPS_RTR => softrdma::QpState::Rtr,
            IBV_QPS_RTS => softrdma::QpState::Rts,
            s => return v.err(libc::EINVAL, &format_args!("QP state {s}")),
        };
        let a = v.check(r.init_qp_attr(state))?;
        // SAFETY: the ID's context is this library's.
        let soft = unsafe { SoftContext::from_ptr(c.id.verbs) };
        let (out, m) = crate::qp::to_ibv_qp_attr(&a, soft);
        // SAFETY: the caller's writable attributes and mask.
        unsafe {
            crate::qp::write_qp_attr(qp_attr, &out);
            *mask = m;
        }
        Ok(0)
    })
}
