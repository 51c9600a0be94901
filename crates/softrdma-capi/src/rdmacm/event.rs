//! The events of the connection manager: `rdma_get_cm_event` and its conversion of
//! softrdma's events (a connect request's new ID among them), `rdma_ack_cm_event`, and a
//! synchronous ID's wait for the event its verb brings.

use super::device::{context_of, default_pd};
use super::id::{ChanC, EventC, IdC, LIVE, ack, ack_own_event, exiting, fill_route};
use crate::abi::*;
use crate::ffi::{Failed, Object, Ret, Verb, entry};
use crate::verbs::context::SoftContext;
use softrdma::cm::{CmEventKind, EventChannel};
use std::ffi::{c_char, c_int, c_void};
use std::net::IpAddr;
use std::ptr::null_mut;
use std::time::{Duration, Instant};

/// The channel's next event for a live ID (events of destroyed IDs are dropped), waiting
/// as long as it takes.
///
/// The wait is on the caller's own handle on the channel: a program may destroy the
/// channel while another of its threads still waits in `rdma_get_cm_event` (rping's main
/// thread does, on its way out); that thread then waits on, as on librdmacm's closed
/// descriptor, instead of reading freed memory.
pub(super) fn next_event(chan: &EventChannel) -> *mut rdma_cm_event {
    loop {
        if let Some(e) = take_event(chan, None) {
            return e;
        }
    }
}

/// The channel's next event for a live ID within `wait` (`None`: for ever; zero: only
/// one queued now), `None` if none came.
fn take_event(chan: &EventChannel, wait: Option<Duration>) -> Option<*mut rdma_cm_event> {
    loop {
        if let Some(e) = convert(chan.get_event(wait)?) {
            return Some(e);
        }
    }
}

/// A synchronous ID's wait for the event its verb brings (librdmacm's `ucma_complete`):
/// the previous event is acked, the next one becomes `id->event`, and a failed one is the
/// verb's error (ECONNREFUSED for a reject, the event's status otherwise). At once for an
/// ID with a channel of the caller's.
pub(super) fn complete(v: Verb, c: &mut IdC) -> Result<(), Failed> {
    if c.own_chan.is_none() {
        return Ok(());
    }
    ack_own_event(c);
    let ev = next_event(&c.own_chan.as_ref().expect("checked above").rust);
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
        v.non_null(&[ch.cast(), event.cast()])?;
        let Some(chan) = ChanC::live(ch) else {
            return Err(destroyed(v));
        };
        // SAFETY: fcntl on the channel's own descriptor (the program may have changed its
        // flags; a closed one reads as blocking, as it then waits on).
        let flags = unsafe { libc::fcntl(chan.fd(), libc::F_GETFL) };
        let e = if flags >= 0 && flags & libc::O_NONBLOCK != 0 {
            take_event(&chan, Some(Duration::ZERO)).ok_or_else(|| v.quiet(libc::EAGAIN))?
        } else {
            next_event(&chan)
        };
        // SAFETY: the caller's pointer.
        unsafe { *event = e };
        Ok(0)
    })
}

/// What `rdma_get_cm_event` does on a channel that is not alive: destroyed, or never made
/// by this library.
///
/// A thread that comes back to wait on a channel its program has just destroyed, as the
/// program ends, is the common case (rping's CM thread, after the last event, while the
/// main thread tears down and exits): on librdmacm it would block on a closed descriptor
/// until the exit ends it, or fail with EBADF and race the exit with an `exit(-1)` of its
/// own. Here it waits for that exit, up to [`GONE_GRACE`], and then for ever once the
/// exit has begun; only a program that really uses a dead channel gets EBADF, which says
/// so. Never a read of the channel's memory, which is freed.
fn destroyed(v: Verb) -> Failed {
    let end = Instant::now() + GONE_GRACE;
    while !exiting() && Instant::now() < end {
        // A cold path (one wait per misuse or per teardown race): a coarse poll of the
        // exit flag is enough, where a notification would cost every exit.
        std::thread::sleep(Duration::from_millis(5));
    }
    while exiting() {
        // exit(3) ends this thread with the process.
        std::thread::park();
    }
    v.fail(
        libc::EBADF,
        &"the event channel was destroyed, or was not made by rdma_create_event_channel",
    )
}

/// How long `rdma_get_cm_event` on a dead channel waits for the program's exit before it
/// fails (see [`destroyed`]): far longer than a program takes from its last destroy to
/// `exit(3)`.
const GONE_GRACE: Duration = Duration::from_secs(1);

/// The C event for `ev`, or `None` when its ID was destroyed.
fn convert(ev: softrdma::cm::CmEvent) -> Option<*mut rdma_cm_event> {
    let _live = LIVE.read();
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
        let lc = unsafe { IdC::from_ptr(l as *mut rdma_cm_id) };
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
            let chan = ChanC::boxed(rust);
            raw.channel = (&raw const chan.ch).cast_mut();
            Some(chan)
        } else {
            None
        };
        let c = IdC::boxed(raw, own_chan);
        // SAFETY: just made.
        unsafe {
            *(*c).rust.lock() = Some(ev.id.clone());
            *(*c).peer.lock() = ev.peer;
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
                let joins = unsafe { IdC::from_ptr(id) }.groups.lock();
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
    unsafe { &(*e.owner).acks }.lock().reported += 1;
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
        a.grh.dgid.raw = crate::verbs::context::gid_of_ip(peer).octets();
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
        // SAFETY: per the contract.
        unsafe { ack(event) };
        Ok(0)
    })
}

/// `rdma_event_str`: the names of `enum rdma_cm_event_type`.
pub extern "C" fn rdma_event_str(event: c_int) -> *const c_char {
    const T: &[&std::ffi::CStr] = &[
        c"RDMA_CM_EVENT_ADDR_RESOLVED",
        c"RDMA_CM_EVENT_ADDR_ERROR",
        c"RDMA_CM_EVENT_ROUTE_RESOLVED",
        c"RDMA_CM_EVENT_ROUTE_ERROR",
        c"RDMA_CM_EVENT_CONNECT_REQUEST",
        c"RDMA_CM_EVENT_CONNECT_RESPONSE",
        c"RDMA_CM_EVENT_CONNECT_ERROR",
        c"RDMA_CM_EVENT_UNREACHABLE",
        c"RDMA_CM_EVENT_REJECTED",
        c"RDMA_CM_EVENT_ESTABLISHED",
        c"RDMA_CM_EVENT_DISCONNECTED",
        c"RDMA_CM_EVENT_DEVICE_REMOVAL",
        c"RDMA_CM_EVENT_MULTICAST_JOIN",
        c"RDMA_CM_EVENT_MULTICAST_ERROR",
        c"RDMA_CM_EVENT_ADDR_CHANGE",
        c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
    ];
    usize::try_from(event)
        .ok()
        .and_then(|i| T.get(i))
        .copied()
        .unwrap_or(c"UNKNOWN EVENT")
        .as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rdmacm::id::{rdma_create_event_channel, rdma_destroy_event_channel};

    /// A wait on a channel already destroyed fails with EBADF once the grace for an exit
    /// has passed, and reads nothing of the freed channel (the pointer may even be reused
    /// by then: a channel made since is not the one asked for).
    #[test]
    fn a_wait_on_a_destroyed_channel_fails_with_ebadf() {
        let ch = rdma_create_event_channel();
        assert!(!ch.is_null());
        // SAFETY: made just above, destroyed once.
        unsafe { rdma_destroy_event_channel(ch) };
        let mut ev = null_mut();
        let start = Instant::now();
        // SAFETY: a stale pointer is what is tested: the call must not read through it.
        let rc = unsafe { rdma_get_cm_event(ch, &mut ev) };
        // SAFETY: the calling thread's errno slot.
        let errno = unsafe { *libc::__errno_location() };
        assert_eq!((rc, errno), (-1, libc::EBADF));
        assert!(ev.is_null());
        assert!(start.elapsed() >= GONE_GRACE, "{:?}", start.elapsed());

        // A live one is found by its address, never read through it.
        let ch = rdma_create_event_channel();
        assert!(ChanC::live(ch).is_some());
        // SAFETY: made just above, destroyed once.
        unsafe { rdma_destroy_event_channel(ch) };
        assert!(ChanC::live(ch).is_none());
    }
}
