//! The connection verbs of an ID (librdmacm's `cma.c`): bind, address and route
//! resolution, listen, connect, accept, reject, establish, notify, disconnect, the ID's
//! options and ports, and the ECE options of a connection.

use super::device::{cm_context, loopback_device, route_source_device};
use super::event::complete;
use super::id::{ChanC, IdC, ack_own_event, apply_options, fill_route, made, port_space, rust_id};
use crate::abi::*;
use crate::ffi::{Failed, Object, Ret, Verb, copy_bytes, entry, from_sockaddr};
use crate::verbs::context::SoftContext;
use softrdma::cm::{CmId, ConnParam, PeerParam, PortSpace};
use std::ffi::{c_int, c_void};
use std::net::{IpAddr, SocketAddr};

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
        if c.rust.lock().is_none()
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
        let binding = move |a: SocketAddr| super::ports::Binding {
            id: key,
            ps,
            addr: a,
            afonly: super::ports::afonly(&a, af),
            reuseaddr: reuse,
        };
        if a.port() != 0
            && let Err(e) = super::ports::claim(binding(a))
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
                super::ports::release(key);
                return Err(f);
            }
        };
        let rc = v.check(r.bind_addr(a));
        if rc.is_ok() && a.ip().is_unspecified() {
            c.wildcard = Some(a.is_ipv6());
        }
        if rc.is_err() {
            super::ports::release(key);
        } else if a.port() == 0
            && let Some(l) = r.local_addr()
        {
            // A port the device chose is recorded too (it cannot conflict: it was free).
            let _ = super::ports::claim(binding(SocketAddr::new(a.ip(), l.port())));
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
            && c.rust.lock().is_none()
            && let Some(ip) = loopback_device(a.ip())
        {
            a.set_ip(ip);
        }
        // Without a source (and unbound), the device is the one on the route to the
        // destination, as the kernel's rdma_cm finds it, and ENODEV when none is.
        let mut src = s.map(|s| s.ip()).filter(|ip| !ip.is_unspecified());
        if src.is_none() && c.rust.lock().is_none() {
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
        if c.rust.lock().is_none() {
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
    for (i, d) in crate::verbs::context::devices().iter().enumerate() {
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
    *c.also.lock() = also;
    Ok(())
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
        let peer = *c.peer.lock();
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
/// IPv4 devices, and `[::]` and 0.0.0.0 binds of one port coexist) and REUSEADDR (binds of
/// one port by IDs that both set it coexist; see `super::ports`). Anything else is
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
                if let Some(r) = c.rust.lock().as_ref() {
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
        .as_ref()
        .and_then(addr)
        .map_or(0, |a| a.port().to_be())
}
