//! The datagram side of sharing: which datagrams the owner forwards to a member (by
//! QPN, and QP1's MADs by communication ID or service), the REQs it holds for a listener
//! yet to come, what a steered member hands back, and the routing tables the receive
//! path reads. The control plane (`control`) decides the routes; the owner's loop
//! (`owner`) writes them here.
//!
//! # Threads and locks
//! Called per datagram by whichever thread receives (the progress thread, or an
//! application thread that polls). `routes` and `cm` are read under their read locks;
//! `forwarding` and `cm_forwarding` are read with no lock. A held REQ takes the control
//! lock for a moment to ask whether it may be held, then `held_reqs`, then
//! `waiting_reqs`, never two of them at once.

use super::{Role, Share, log};
use crate::datapath::socket as sys;
use softrdma_proto::cm::RELISTEN_GRACE;
use softrdma_wire::IbPacket;
use softrdma_wire::cm::{Addressee, CmMad, CmMessage, GSI_QPN};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How long an owner remembers a REQ it dropped once (see [`Share::hold_first_req`]):
/// longer than any requester waits to resend it.
const HELD_REQ_MEMORY: Duration = Duration::from_secs(30);
/// The most REQs an owner remembers having dropped once (see [`Share::hold_first_req`]).
const HELD_REQS_MAX: usize = 4096;
/// How long an owner keeps a REQ for a service nobody listens on yet, to hand it to the
/// member that listens on it meanwhile (see [`Share::hold_first_req`]).
const HELD_REQ_WAIT: Duration = Duration::from_secs(1);
/// The most REQs an owner keeps waiting for a listener at once.
const WAITING_REQS_MAX: usize = 256;
/// The owner's routes for QP1's MADs (see `crate::cm`): the port has one QP1, and each
/// process of the device runs its own CM agent behind it. The owner reads the MADs (the
/// steering program sends QP1 to it) and forwards each to the process it names: a REQ or
/// SIDR_REQ to the listener of its service ID, every other message to the process whose
/// slot its communication ID carries in its low byte (each agent draws its IDs so).
/// What names no member is the owner's own agent's.
#[derive(Default)]
pub(super) struct CmRoutes {
    /// Each member's slot, with its end of its forwarding pair.
    pub(super) by_slot: HashMap<u8, Arc<OwnedFd>>,
    /// Members' listens by service ID.
    pub(super) by_service: HashMap<u64, CmListen>,
}

/// A REQ an owner keeps for a listener to come (see [`Share::hold_first_req`]).
pub(super) struct WaitingReq {
    /// Its service.
    sid: u64,
    /// When the requester's first REQ came.
    first: Instant,
    /// The latest datagram, and its sender.
    from: SocketAddr,
    data: Vec<u8>,
}

/// A member's listen on a CM service, as the owner's receive path reads it.
pub(super) struct CmListen {
    /// The member's end of its forwarding pair.
    pub(super) data: Arc<OwnedFd>,
    /// When the member stopped listening: for [`RELISTEN_GRACE`] after, REQs for the
    /// service still go to it, whose agent drops them so that a program that listens
    /// again (perftest's `-R`) gets the requester's resend instead of a reject.
    pub(super) ended: Option<Instant>,
}

impl CmListen {
    fn live(&self) -> bool {
        self.ended.is_none_or(|t| t.elapsed() < RELISTEN_GRACE)
    }
}

/// The destination QP of a RoCE packet (its BTH first); `None` if it is too short.
pub(crate) fn dest_qpn(packet: &[u8]) -> Option<u32> {
    // IBTA 9.2: the BTH's destination QP is bytes 5..8.
    let q = packet.get(5..8)?;
    Some(u32::from_be_bytes([0, q[0], q[1], q[2]]))
}

impl Share {
    /// Whether a received datagram may be another process's (read per datagram).
    #[inline]
    pub(crate) fn forwarding(&self) -> bool {
        self.forwarding.load(Ordering::Relaxed) || self.cm_forwarding.load(Ordering::Relaxed)
    }

    /// A datagram from `from` for no QP of this process: a steered member hands it back
    /// to its owner if the group gave it here by mistake (see [`crate::datapath::udp::RxPort::hand_back`]).
    /// Returns whether it did.
    pub(crate) fn hand_back(&self, data: &[u8], from: SocketAddr) -> bool {
        dest_qpn(data).is_some_and(|q| self.rx.hand_back(q, data, from))
    }

    /// Forwards `data` from `from` to the member whose QPN it is addressed to; false if
    /// it is not a member's (the device handles it).
    pub(crate) fn forward(&self, data: &[u8], from: SocketAddr) -> Option<bool> {
        let qpn = dest_qpn(data)?;
        if qpn == GSI_QPN {
            return self.forward_mad(data, from);
        }
        let routes = self.routes.read();
        let fd = routes.get(&qpn)?;
        Some(sys::send_framed(fd.as_raw_fd(), from, data).is_ok())
    }

    /// Forwards a MAD for QP1 to the member it names (see [`CmRoutes`]); `None` if it is
    /// for this process's agent, or does not parse (the agent counts it).
    fn forward_mad(&self, data: &[u8], from: SocketAddr) -> Option<bool> {
        if !self.cm_forwarding.load(Ordering::Relaxed) {
            return None;
        }
        let packet = IbPacket::new_checked(data).ok()?;
        let mad = CmMad::parse(packet.payload()).ok()?;
        let to = mad.msg.addressee()?;
        let fd = {
            let cm = self.cm.read();
            match to {
                Addressee::Comm(id) => cm.by_slot.get(&(id as u8)).cloned(),
                Addressee::Service(sid) => cm
                    .by_service
                    .get(&sid)
                    .filter(|l| l.live())
                    .map(|l| l.data.clone()),
            }
        };
        match (fd, to) {
            (Some(fd), _) => Some(sys::send_framed(fd.as_raw_fd(), from, data).is_ok()),
            // Dropped, not rejected: the requester resends, and finds the listener.
            (None, Addressee::Service(sid)) if self.hold_first_req(sid, &mad, from, data) => {
                Some(true)
            }
            (None, _) => None,
        }
    }

    /// Whether to drop a REQ (or SIDR_REQ) for service `sid`, which no process of the
    /// device listens on, rather than reject it (owner): the first one from a requester
    /// is dropped when the device has members, and its resend is rejected. A program may
    /// tell its peer the port before it listens (qperf's server does), and a member's
    /// listen takes a round trip through the owner: the peer's REQ may overtake it, and
    /// rejecting it would fail a connection that Linux, whose listen is a system call,
    /// makes. The REQ waits [`HELD_REQ_WAIT`] for a member to listen, and is handed to it
    /// the moment it does (`Share::deliver_waiting`), with no resend to wait for (rxe's
    /// come 6 s apart); resends within that time wait with it. A later resend finds the
    /// listener, or gets the reject.
    fn hold_first_req(&self, sid: u64, mad: &CmMad, from: SocketAddr, data: &[u8]) -> bool {
        let requester = match mad.msg {
            CmMessage::Req(r) => r.local_comm_id,
            CmMessage::SidrReq(r) => r.request_id,
            _ => return false,
        };
        {
            let ctl = self.ctl.lock();
            if !matches!(ctl.role, Role::Owner { .. }) || !ctl.core.may_hold_req(sid) {
                return false;
            }
        }
        let mut held = self.held_reqs.lock();
        held.retain(|_, t| t.elapsed() < HELD_REQ_MEMORY);
        if held.len() >= HELD_REQS_MAX {
            // A flood of REQs for services nobody serves: reject them at once rather than
            // remember each.
            return false;
        }
        let key = (from.ip(), requester);
        let first = match held.entry(key) {
            std::collections::hash_map::Entry::Occupied(o) => *o.get(),
            std::collections::hash_map::Entry::Vacant(v) => *v.insert(Instant::now()),
        };
        drop(held);
        if first.elapsed() >= HELD_REQ_WAIT {
            return false;
        }
        let mut waiting = self.waiting_reqs.lock();
        waiting.retain(|_, w| w.first.elapsed() < HELD_REQ_WAIT);
        if waiting.len() < WAITING_REQS_MAX || waiting.contains_key(&key) {
            let w = WaitingReq {
                sid,
                first,
                from,
                data: data.to_vec(),
            };
            let again = waiting.insert(key, w).is_some();
            log(format_args!(
                "{}: a REQ from {from} for CM service {sid:#x}, where nobody listens, \
                 waits for a listener{}",
                self.addr,
                if again { " (a resend)" } else { "" }
            ));
        }
        true
    }

    /// Hands the REQs waiting for service `sid` (see [`Share::hold_first_req`]) to the
    /// member that now listens on it, through its forwarding socket `fd` (owner).
    pub(super) fn deliver_waiting(&self, sid: u64, fd: RawFd) {
        let mut waiting = self.waiting_reqs.lock();
        waiting.retain(|_, w| w.first.elapsed() < HELD_REQ_WAIT);
        let keys: Vec<_> = waiting
            .iter()
            .filter(|(_, w)| w.sid == sid)
            .map(|(k, _)| *k)
            .collect();
        for k in keys {
            if let Some(WaitingReq { from, data, .. }) = waiting.remove(&k) {
                let sent = sys::send_framed(fd, from, &data).is_ok();
                log(format_args!(
                    "{}: a REQ from {from} held for CM service {sid:#x} handed to its new \
                     listener: {sent}",
                    self.addr
                ));
            }
        }
    }

    /// Whether a MAD for QP1 that this steered member's socket got belongs to another
    /// process: the steering program sends QP1 to the owner, but in the moment after a
    /// member left the group, before the owner probed it again, the kernel may give the
    /// owner's datagrams to a member (see [`super::steer`]). Such a MAD (one for a service this
    /// process neither listens on nor left within [`super::control::MEMBER_GRACE`], or for a
    /// communication ID of another slot) goes back to the owner, who routes it; what the
    /// owner forwards here is always this process's by the same rules, so nothing
    /// circles. False for an owner, a process alone, and a MAD that does not parse (the
    /// agent counts those).
    pub(crate) fn misdelivered_mad(&self, data: &[u8]) -> bool {
        if self.rx.spill().is_none() {
            return false;
        }
        let Some(to) = IbPacket::new_checked(data)
            .ok()
            .and_then(|p| CmMad::parse(p.payload()).ok())
            .and_then(|m| m.msg.addressee())
        else {
            return false;
        };
        self.ctl.lock().core.not_mine(Instant::now(), to)
    }

    /// Changes the owner's CM routes with `f`.
    pub(super) fn cm_routes(&self, f: impl FnOnce(&mut CmRoutes)) {
        let mut cm = self.cm.write();
        f(&mut cm);
        let any = !cm.by_slot.is_empty() || !cm.by_service.is_empty();
        self.cm_forwarding.store(any, Ordering::Relaxed);
    }

    /// Adds (or with `None` removes) a member's route.
    pub(super) fn route(&self, qpn: u32, data: Option<Arc<OwnedFd>>) {
        let mut routes = self.routes.write();
        match data {
            Some(d) => {
                routes.insert(qpn, d);
            }
            None => {
                routes.remove(&qpn);
            }
        }
        self.forwarding.store(!routes.is_empty(), Ordering::Relaxed);
    }
}
