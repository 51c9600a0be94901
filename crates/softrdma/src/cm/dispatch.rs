//! The agent's connection events turned into ID events: a REQ makes a passive ID for its
//! listener, a REP brings the active ID's QP to RTS (and sends the RTU), a REJ, timeout,
//! DREQ or TIMEWAIT's end moves the ID on. SIDR's events are `sidr`'s.
//!
//! Runs under `CmAgent` (from `Core::flush`); takes `CmId`, then `CmIdChannel` and
//! `CmEvents`, and a QP's `Qp` through the verbs for the move to RTS. An active side's
//! ESTABLISHED on a shared device may be posted later, by the device's resolver thread
//! with no lock held, once its QP's same-host route is looked up.

use super::dev;
use super::objects::{CmEvent, CmId, Core, CoreSt, IdInner, IdRecord, QpRef};
use super::qp_attr::{active_conn, random_psn, to_rts};
use super::types::{CmEventKind, PeerParam};
use softrdma_proto::cm::{CmEvent as AgentEvent, CommId};
use softrdma_proto::cma::IdStep;
use softrdma_wire::cm::{IpCmHeader, rej_reason};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Weak};

impl Core {
    pub(super) fn dispatch(&self, cs: &mut CoreSt, ev: AgentEvent<IpAddr>) {
        let now = self.now();
        let id_of = |cs: &CoreSt, c: CommId| cs.ids.get(&c).and_then(Weak::upgrade);
        match ev {
            AgentEvent::ReqReceived { id, from, req } => {
                let listener = cs.listeners.get(&req.service_id).and_then(Weak::upgrade);
                let (Some(l), Ok(ip)) = (listener, IpCmHeader::parse(req.private_data.as_bytes()))
                else {
                    let _ = cs.agent.reject(now, id, rej_reason::CONSUMER_DEFINED, &[]);
                    return;
                };
                let from = SocketAddr::new(from, ip.src_port);
                let peer = PeerParam {
                    responder_resources: req.responder_resources,
                    initiator_depth: req.initiator_depth,
                    retry_count: req.retry_count,
                    rnr_retry_count: req.rnr_retry_count,
                    srq: req.srq,
                    qp_num: req.local_qpn,
                };
                let asked = (&req.private_data.as_bytes()[..], Some(peer));
                CmId::passive(cs, l, (from, id), asked, |st| {
                    st.req = Some(req.clone());
                    st.rq_psn = random_psn();
                    st.passive = true;
                });
            }
            AgentEvent::RepReceived { id, rep } => {
                let Some(inner) = id_of(cs, id) else {
                    return;
                };
                let cid = CmId { inner };
                let (qp, req, param, peer) = {
                    let st = cid.st();
                    (
                        st.qp.as_ref().and_then(QpRef::get),
                        st.req.clone(),
                        st.param.clone(),
                        st.peer,
                    )
                };
                // Kept for `init_qp_attr`, and for `establish` without a QP.
                cid.st().rep = Some(rep.clone());
                let (Some(qp), Some(req), Some(param), Some(peer)) = (qp, req, param, peer) else {
                    cid.event(
                        CmEventKind::ConnectResponse,
                        rep.private_data.as_bytes().to_vec(),
                    );
                    return;
                };
                let _elsewhere = dev::lookups_elsewhere();
                let r = to_rts(
                    &qp,
                    self.ctx.addr(),
                    peer.ip(),
                    active_conn(&req, &rep, &param.offer(), self.ctx.active_mtu()),
                );
                if r.is_err() {
                    let _ = cs.agent.reject(now, id, rej_reason::CONSUMER_DEFINED, &[]);
                    cid.event(CmEventKind::Unreachable, vec![]);
                    return;
                }
                let _ = cs.agent.ready_to_use(id, &[]);
                let peer = PeerParam {
                    responder_resources: rep.responder_resources,
                    initiator_depth: rep.initiator_depth,
                    retry_count: 0,
                    rnr_retry_count: rep.rnr_retry_count,
                    srq: rep.srq,
                    qp_num: rep.local_qpn,
                };
                let private_data = rep.private_data.as_bytes().to_vec();
                // The program sends from the event on: its QP's first packet must find
                // the same-host route, which is looked up elsewhere (see above).
                // Its events after this one (a DREQ that comes meanwhile) wait behind it.
                cid.hold_events();
                let established = move || {
                    cid.release_with(CmEventKind::Established, private_data, Some(peer), None);
                };
                dev::when_routed(&self.ctx, &qp, Box::new(established));
            }
            AgentEvent::Established { id, private_data } => {
                if let Some(inner) = id_of(cs, id) {
                    CmId { inner }.event(CmEventKind::Established, private_data.into_vec());
                }
            }
            AgentEvent::Rejected { id, rej } => {
                if let Some(inner) = cs.ids.remove(&id).and_then(|w| w.upgrade()) {
                    let cid = CmId { inner };
                    cid.st().comm = None;
                    cid.moved(IdStep::Rejected);
                    cid.event(
                        CmEventKind::Rejected { reason: rej.reason },
                        rej.private_data.as_bytes().to_vec(),
                    );
                }
            }
            AgentEvent::Timeout { id, .. } => {
                if let Some(inner) = id_of(cs, id) {
                    let cid = CmId { inner };
                    if cs.agent.state(id).is_none() {
                        cs.ids.remove(&id);
                        cid.st().comm = None;
                    }
                    cid.event(CmEventKind::Unreachable, vec![]);
                }
            }
            AgentEvent::DreqReceived { id, private_data } => {
                if let Some(inner) = id_of(cs, id) {
                    let cid = CmId { inner };
                    cid.moved(IdStep::Disconnected);
                    cid.event(CmEventKind::Disconnected, private_data.into_vec());
                }
            }
            AgentEvent::Disconnected { id, .. } => {
                if let Some(inner) = id_of(cs, id) {
                    let cid = CmId { inner };
                    cid.moved(IdStep::Disconnected);
                    cid.event(CmEventKind::Disconnected, vec![]);
                }
            }
            AgentEvent::TimewaitExit { id } => {
                if let Some(inner) = cs.ids.remove(&id).and_then(|w| w.upgrade()) {
                    let cid = CmId { inner };
                    cid.st().comm = None;
                    cid.moved(IdStep::TimewaitExit);
                    cid.event(CmEventKind::TimewaitExit, vec![]);
                }
            }
            AgentEvent::MraReceived { .. } => {}
            AgentEvent::SidrReqReceived { id, from, req } => {
                self.on_sidr_req(cs, now, id, from, req)
            }
            AgentEvent::SidrRepReceived { id, rep } => self.on_sidr_rep(cs, id, rep),
        }
    }
}

impl CmId {
    /// The passive ID a REQ or SIDR_REQ makes for listener `l` (from the peer at `from`,
    /// connection `id`), in the agent's table from now on, and its CONNECT_REQUEST event:
    /// `asked` is the request's private data (its IP CM header first, which the event
    /// leaves out) and what the peer offered; `fill` adds what the request brings.
    pub(super) fn passive(
        cs: &mut CoreSt,
        l: Arc<IdInner>,
        (from, id): (SocketAddr, CommId),
        (private_data, peer): (&[u8], Option<PeerParam>),
        fill: impl FnOnce(&mut IdRecord),
    ) {
        let local = l.st.lock().local;
        let conn = CmId::with_core(l.chan(), l.ctx.clone(), l.core.clone(), l.ps);
        {
            let mut st = conn.st();
            st.local = local;
            st.peer = Some(from);
            st.comm = Some(id);
            fill(&mut st);
        }
        conn.moved(IdStep::Requested);
        cs.ids.insert(id, Arc::downgrade(&conn.inner));
        conn.inner.chan().push(CmEvent {
            kind: CmEventKind::ConnectRequest,
            id: conn.clone(),
            listen_id: Some(CmId { inner: l }),
            private_data: private_data[IpCmHeader::LEN..].to_vec(),
            ud: None,
            peer,
        });
    }
}
