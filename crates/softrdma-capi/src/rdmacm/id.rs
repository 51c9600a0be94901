//! The C objects of the connection manager (channels, IDs, events), each a `#[repr(C)]`
//! box whose first field is the public struct, and the lifecycle of channels and IDs
//! (librdmacm's `cma.c`). An ID's Rust `CmId` is made on its device once the ID has one
//! (bind or resolve), with the options set on it before.

use super::device::{cm_context, default_pd, device_for};
use crate::abi::*;
use crate::ffi::{Failed, Object, Ret, Verb, c_object, entry, to_sockaddr};
use crate::verbs::context::SoftContext;
use crate::verbs::context::gid_of_ip;
use softrdma::cm::{CmId, EventChannel, PeerParam, PortSpace};
use softrdma::sync::{Condvar, Lock, Rank, RwLock};
use std::ffi::{c_int, c_void};
use std::net::IpAddr;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, Ordering};

/// A channel: the public struct, then softrdma's.
#[repr(C)]
pub(super) struct ChanC {
    pub(super) ch: rdma_event_channel,
    pub(super) rust: EventChannel,
}

impl ChanC {
    /// A new channel, for the verb `v`.
    pub(super) fn open(v: Verb) -> Result<Box<ChanC>, Failed> {
        Ok(Self::boxed(v.check(EventChannel::new())?))
    }

    /// The channel around `rust`, boxed where its caller's pointer will point, and listed
    /// in [`CHANNELS`] until it is dropped.
    pub(super) fn boxed(rust: EventChannel) -> Box<ChanC> {
        let b = Box::new(ChanC {
            ch: rdma_event_channel { fd: rust.fd() },
            rust: rust.clone(),
        });
        CHANNELS.lock().push((&raw const b.ch as usize, rust));
        watch_exit();
        b
    }

    /// The events of the channel a program's pointer `ch` names, if that channel is alive
    /// (found in [`CHANNELS`], never read through `ch`).
    pub(super) fn live(ch: *const rdma_event_channel) -> Option<EventChannel> {
        let list = CHANNELS.lock();
        list.iter()
            .find(|(p, _)| *p == ch as usize)
            .map(|(_, r)| r.clone())
    }
}

impl Drop for ChanC {
    fn drop(&mut self) {
        let me = &raw const self.ch as usize;
        CHANNELS.lock().retain(|(p, _)| *p != me);
    }
}

/// The channels alive, by the address their programs hold, each with a handle on its
/// events. `rdma_get_cm_event` finds its channel here rather than through the program's
/// pointer: a program may destroy a channel just as another of its threads comes back to
/// wait on it (rping's CM thread does, on the busy machine, as rping's main thread ends),
/// and that pointer then points at freed memory. A short list: a program has a few.
static CHANNELS: Lock<Vec<(usize, EventChannel)>> = Lock::new(Rank::CapiChannels, Vec::new());

c_object!(ChanC, ch: rdma_event_channel, "channel");

/// Set once the program has begun to exit (`exit(3)`'s handlers run).
static EXITING: AtomicBool = AtomicBool::new(false);

/// Whether the program has begun to exit; the flag's `atexit` handler is registered the
/// first time this is asked or a channel is made.
pub(super) fn exiting() -> bool {
    watch_exit();
    // softrdma's own exit handler (registered once a CM device is up, so after this one,
    // and run first) may take a while to end the connections: its flag comes on sooner.
    EXITING.load(Ordering::Acquire) || softrdma::cm::exiting()
}

/// Registers, once, the `atexit` handler that sets [`EXITING`].
fn watch_exit() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    extern "C" fn at_exit() {
        EXITING.store(true, Ordering::Release);
    }
    ONCE.call_once(|| {
        // SAFETY: registers a handler that only stores a flag.
        unsafe { libc::atexit(at_exit) };
    });
}

/// An ID: the public struct, then softrdma's.
#[repr(C)]
pub(super) struct IdC {
    pub(super) id: rdma_cm_id,
    /// Made once the device is known (bind or resolve).
    pub(super) rust: Lock<Option<CmId>>,
    /// What the peer's REQ said (a connect request's ID), for an `rdma_accept` without
    /// parameters.
    pub(super) peer: Lock<Option<PeerParam>>,
    /// The channel made for an ID created without one: librdmacm's synchronous IDs, whose
    /// verbs wait for their own event (see [`super::event::complete`]).
    pub(super) own_chan: Option<Box<ChanC>>,
    /// CQs `rdma_create_qp` made because the caller gave none, and their completion
    /// channels, destroyed with the QP.
    pub(super) own_cqs: Vec<*mut ibv_cq>,
    pub(super) own_cq_chans: Vec<*mut ibv_comp_channel>,
    /// A passive `rdma_create_ep`'s QP attributes, for the QP `rdma_get_request` makes
    /// each new connection.
    pub(super) ep_attr: Option<ibv_qp_init_attr>,
    /// An active `rdma_create_ep`'s private data (`ai_connect`), for an `rdma_connect`
    /// without parameters.
    pub(super) connect_data: Vec<u8>,
    /// The multicast groups joined, with each join's context (a MULTICAST_JOIN event's
    /// `param.ud.private_data`).
    pub(super) groups: Lock<Vec<(IpAddr, usize)>>,
    /// Bound to an unspecified address: whether an IPv6 one (see `listen_elsewhere` in
    /// [`super::conn`]).
    pub(super) wildcard: Option<bool>,
    /// RDMA_OPTION_ID_AFONLY: an IPv6 wildcard takes IPv6 requests only.
    pub(super) afonly: bool,
    /// Whether the program set AFONLY (else the family decides, see `super::ports`).
    pub(super) afonly_set: bool,
    /// RDMA_OPTION_ID_REUSEADDR.
    pub(super) reuseaddr: bool,
    /// A wildcard listen's listeners on the devices other than the ID's own.
    pub(super) also: Lock<Vec<CmId>>,
    /// RDMA_OPTION_ID_TOS and _ACK_TIMEOUT, kept for an ID not on a device yet.
    pub(super) tos: Option<u8>,
    pub(super) ack_timeout: Option<u8>,
    /// Its events handed out and acked, and the wait for the last ack.
    pub(super) acks: Lock<Acks>,
    pub(super) acked: Condvar,
}

impl IdC {
    /// A new ID around `raw` (its channel already set).
    pub(super) fn boxed(raw: rdma_cm_id, own_chan: Option<Box<ChanC>>) -> *mut IdC {
        Box::into_raw(Box::new(IdC {
            id: raw,
            rust: Lock::new(Rank::CapiIdRust, None),
            peer: Lock::new(Rank::CapiIdPeer, None),
            own_chan,
            own_cqs: Vec::new(),
            own_cq_chans: Vec::new(),
            ep_attr: None,
            connect_data: Vec::new(),
            groups: Lock::new(Rank::CapiIdGroups, Vec::new()),
            wildcard: None,
            afonly: false,
            afonly_set: false,
            reuseaddr: false,
            also: Lock::new(Rank::CapiIdAlso, Vec::new()),
            tos: None,
            ack_timeout: None,
            acks: Lock::new(Rank::CapiIdAcks, Acks::default()),
            acked: Condvar::new(),
        }))
    }
}

c_object!(IdC, id: rdma_cm_id, "ID");

/// An event: the public struct, then the private data it points at.
#[repr(C)]
pub(super) struct EventC {
    pub(super) ev: rdma_cm_event,
    pub(super) private: Vec<u8>,
    /// The ID it is counted against (a connect request's listener; see [`Acks`]).
    pub(super) owner: *const IdC,
}

c_object!(EventC, ev: rdma_cm_event, "event");

/// How many of an ID's events were handed out and how many acked: `rdma_destroy_id`
/// waits until all are acked, as librdmacm's does, so that a thread still handling one
/// (rping's CM thread, while its main thread destroys the connection's ID) never finds
/// the ID freed under it.
#[derive(Default)]
pub(super) struct Acks {
    pub(super) reported: u64,
    pub(super) completed: u64,
}

/// Held for reading while an event's ID is looked up and counted, for writing while
/// `rdma_destroy_id` unhooks one: an event either counts against a live ID, which then
/// waits for its ack, or finds it gone and is dropped.
pub(super) static LIVE: RwLock<()> = RwLock::new(Rank::CapiIdsLive, ());

pub(super) fn port_space(ps: c_int) -> Option<PortSpace> {
    match ps {
        RDMA_PS_TCP => Some(PortSpace::Tcp),
        RDMA_PS_UDP => Some(PortSpace::Udp),
        RDMA_PS_IB => Some(PortSpace::Ib),
        _ => None,
    }
}

/// The ID's Rust side, made on the device of `ip` if it has none yet.
pub(super) fn rust_id(v: Verb, c: &mut IdC, ip: Option<IpAddr>) -> Result<CmId, Failed> {
    if let Some(r) = c.rust.lock().clone() {
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
    *c.rust.lock() = Some(r.clone());
    Ok(r)
}

/// The ID's Rust side, which must exist.
pub(super) fn made(v: Verb, c: &IdC) -> Result<CmId, Failed> {
    let r = c.rust.lock().clone();
    r.ok_or_else(|| {
        v.fail(
            libc::EINVAL,
            &"the ID is not bound to a device yet (rdma_bind_addr or rdma_resolve_addr first)",
        )
    })
}

/// Copies the ID's addresses into `id->route.addr`.
pub(super) fn fill_route(c: &mut IdC, r: &CmId) {
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

/// Gives the ID's Rust side the options set on it (`rdma_set_option`).
pub(super) fn apply_options(c: &IdC, r: &CmId) -> softrdma::Result<()> {
    if let Some(t) = c.tos {
        r.set_tos(t);
    }
    match c.ack_timeout {
        Some(t) => r.set_ack_timeout(t),
        None => Ok(()),
    }
}

/// Acks a synchronous ID's current event (librdmacm keeps it in `id->event` until the
/// ID's next verb, or its destruction), if it has one.
pub(super) fn ack_own_event(c: &mut IdC) {
    if c.own_chan.is_some() && !c.id.event.is_null() {
        // SAFETY: the ID's own event, acked once (the pointer is cleared).
        unsafe { ack(c.id.event) };
        c.id.event = null_mut();
    }
}

/// Destroys the CQs (and their channels) `rdma_create_qp` made for the ID.
pub(super) fn destroy_own_cqs(c: &mut IdC) {
    for cq in c.own_cqs.drain(..) {
        // SAFETY: a CQ this library made for the ID, destroyed once, its QP gone.
        unsafe { crate::verbs::cq::ibv_destroy_cq(cq) };
    }
    for ch in c.own_cq_chans.drain(..) {
        // SAFETY: a channel this library made for the ID, its CQ gone.
        unsafe { crate::verbs::cq::ibv_destroy_comp_channel(ch) };
    }
    c.id.send_cq_channel = null_mut();
    c.id.recv_cq_channel = null_mut();
}

/// Frees an event handed out for an ID and counts its ack, which the destruction of its
/// ID waits for.
///
/// # Safety
/// `event` is an event of this library, acked once.
pub(super) unsafe fn ack(event: *mut rdma_cm_event) {
    // SAFETY: made by convert, freed once.
    let e = unsafe { EventC::free(event) };
    // SAFETY: the owner is live: its destruction waits for this ack.
    let owner = unsafe { &*e.owner };
    owner.acks.lock().completed += 1;
    owner.acked.notify_all();
}

/// `rdma_create_event_channel`.
pub extern "C" fn rdma_create_event_channel() -> *mut rdma_event_channel {
    entry("rdma_create_event_channel", Ret::NULL, |v| {
        Ok(Box::into_raw(ChanC::open(v)?).cast())
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
            Some(ChanC::open(v)?)
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
            let _unhook = LIVE.write();
            // SAFETY: a live IdC of this library.
            let c = unsafe { IdC::from_ptr(id) };
            if let Some(r) = c.rust.lock().as_ref() {
                r.set_user(0);
            }
            for r in c.also.lock().iter() {
                r.set_user(0);
            }
        }
        // SAFETY: a live IdC; its own event is this thread's to ack.
        ack_own_event(unsafe { IdC::from_ptr_mut(id) });
        {
            // SAFETY: a live IdC: it is freed only below.
            let c = unsafe { IdC::from_ptr(id) };
            let mut a = c.acks.lock();
            while a.completed < a.reported {
                a = c.acked.wait(a);
            }
        }
        super::ports::release(id as usize);
        // SAFETY: made by rdma_create_id or an event, destroyed once, its events acked.
        let mut c = unsafe { IdC::free(id) };
        if c.id.qp.is_null() {
            destroy_own_cqs(&mut c);
        }
        // The connection ends as its Rust side drops (a DREQ, or a REJ).
        c.rust.lock().take();
        c.also.lock().clear();
        Ok(0)
    })
}
