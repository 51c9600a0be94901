//! The endpoint helpers of librdmacm: `rdma_create_ep` and `rdma_destroy_ep` (a synchronous
//! ID from an `rdma_getaddrinfo` result, with its QP), `rdma_get_request` (a synchronous
//! listener's next connection) and `rdma_migrate_id` (an ID to another channel, or to one
//! of its own).

use super::conn::{rdma_bind_addr, rdma_resolve_addr, rdma_resolve_route};
use super::event::next_event;
use super::id::{ChanC, IdC, ack_own_event, rdma_create_id, rdma_destroy_id};
use super::qp::{rdma_create_qp, rdma_destroy_qp, rdma_destroy_srq};
use crate::abi::*;
use crate::ffi::{Failed, Object, Ret, copy_bytes, entry};
use std::ffi::c_int;
use std::ptr::null_mut;

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
        v.non_null(&[id.cast(), res.cast()])?;
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
        v.non_null(&[listen.cast(), id.cast()])?;
        // SAFETY: per the contract.
        let l = unsafe { IdC::from_ptr_mut(listen) };
        v.ensure(
            l.own_chan.is_some(),
            libc::EINVAL,
            &"the listener has an event channel (rdma_get_request is for IDs made without)",
        )?;
        ack_own_event(l);
        let ev = next_event(&l.own_chan.as_ref().expect("checked above").rust);
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
            let own = ChanC::open(v)?;
            let ch = (&raw const own.ch).cast_mut();
            (Some(own), ch)
        } else {
            (None, channel)
        };
        // SAFETY: a ChanC of this library.
        let target = unsafe { ChanC::from_ptr(ch) };
        if let Some(r) = c.rust.lock().as_ref() {
            r.migrate(&target.rust);
        }
        for r in c.also.lock().iter() {
            r.migrate(&target.rust);
        }
        ack_own_event(c);
        c.id.channel = ch;
        c.own_chan = own;
        Ok(0)
    })
}
