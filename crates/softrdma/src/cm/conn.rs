//! The connection verbs of an ID: `rdma_connect` (a REQ), `rdma_accept` (a REP),
//! `rdma_reject`, `rdma_establish` (an RTU), `rdma_notify` and `rdma_disconnect`, each run
//! on the caller's thread against the host's agent, which sends what it produces there.
//!
//! Calls the agent (through `host::Core`), the QP-attribute policy and the verbs (QP
//! modify). Locks: `CmId` alone or under `CmAgent`; a QP's with neither held.

use super::agent::AgentGuard;
use super::objects::{CmId, QpRef};
use super::qp::announced_qp;
use super::qp_attr::{path, random_psn, to_rts};
use super::types::{ConnParam, NotifyEvent};
use crate::error::{CmError, Error, Result};
use softrdma_proto::cm::{CmAgent, CommId};
use softrdma_proto::cma::{IdStep, IdVerb};
use softrdma_proto::{Instant, QpAttr, QpState};
use softrdma_wire::cm::{
    self as wire, IpCmHeader, PathRepr, PrivateData, RepRepr, ReqRepr, TransportService, rej_reason,
};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// The response timeout our REQs carry, both ways: 4.096 µs × 2^17 = 537 ms.
pub(super) const RESPONSE_TIMEOUT: u8 = 17;
/// How often a REQ, REP or DREQ of ours is resent: with [`RESPONSE_TIMEOUT`], a peer that
/// never answers is reported unreachable after 7 × 539 ms, 3.8 s.
pub(super) const MAX_CM_RETRIES: u8 = 6;

impl CmId {
    /// Asks the resolved peer to connect (`rdma_connect`); a UD ID asks for the peer's
    /// QP instead (a SIDR_REQ).
    pub fn connect(&self, param: &ConnParam) -> Result<()> {
        if self.is_ud() {
            return self.resolve_service(param);
        }
        let verb = "rdma_connect";
        let (local, peer, pd) = self.request::<{ wire::private_len::REQ }>(
            verb,
            &param.private_data,
            ("a connect", false),
        )?;
        let qp = self.qp();
        let (local_qpn, srq) = announced_qp(verb, qp.as_deref(), param)?;
        let req = ReqRepr {
            local_comm_id: 0,
            service_id: wire::ip_service_id(self.inner.ps.code(), peer.port()),
            local_ca_guid: 0,
            local_qkey: 0,
            local_qpn,
            responder_resources: param.responder_resources,
            local_eecn: 0,
            initiator_depth: param.initiator_depth,
            remote_eecn: 0,
            remote_cm_response_timeout: RESPONSE_TIMEOUT,
            transport: TransportService::Rc,
            end_to_end_flow_control: false,
            // What our receive queue expects first (see the module docs).
            starting_psn: random_psn(),
            local_cm_response_timeout: RESPONSE_TIMEOUT,
            retry_count: param.retry_count.min(7),
            pkey: 0xFFFF,
            path_mtu: self.inner.ctx.active_mtu() as u8,
            rdc_exists: false,
            rnr_retry_count: param.rnr_retry_count.min(7),
            max_cm_retries: MAX_CM_RETRIES,
            // IBTA 12.6.5: whether the sender's QP takes its receives from an SRQ (the
            // REP's bit says the same of the acceptor's, IBTA 12.6.8).
            srq,
            primary: {
                let st = self.st();
                path(local.ip(), peer.ip(), st.tos, st.ack_timeout)
            },
            alternate: PathRepr::default(),
            sap_supported: false,
            private_data: PrivateData(pd),
        };
        let core = &self.inner.core;
        let mut cs = core.agent();
        let id = cs.agent.connect(core.now(), peer.ip(), req);
        cs.ids.insert(id, Arc::downgrade(&self.inner));
        {
            let mut st = self.st();
            st.comm = Some(id);
            st.req = Some(Box::new(req));
            st.param = Some(param.clone());
        }
        self.moved(IdStep::Connecting);
        core.settle(&mut cs);
        Ok(())
    }

    /// What a REQ or SIDR_REQ of this ID needs: its address, its resolved peer's, and the
    /// private data of `N` bytes with the IP CM header (Annex A11.6) before `user`. Errors
    /// name `verb`: `user` longer than the message carries (`what.0` names the message),
    /// a route not resolved, or a request already under way (`what.1`: a SIDR_REQ's).
    pub(super) fn request<const N: usize>(
        &self,
        verb: &'static str,
        user: &[u8],
        what: (&'static str, bool),
    ) -> Result<(SocketAddr, SocketAddr, [u8; N])> {
        let user_max = N - IpCmHeader::LEN;
        if user.len() > user_max {
            return Err(Error::cm(
                verb,
                CmError::PrivateDataTooLong {
                    message: what.0,
                    len: user.len(),
                    max: user_max,
                },
            ));
        }
        let st = self.st();
        let (Some(local), Some(peer)) = (st.local, st.peer) else {
            return Err(Error::cm(verb, CmError::RouteNotResolved));
        };
        if st.comm.is_some() {
            return Err(Error::cm(verb, CmError::AlreadyConnecting { ud: what.1 }));
        }
        if !st.state.allows(IdVerb::Connect) {
            let state = st.state;
            return Err(Error::cm(verb, CmError::WrongState { state }));
        }
        let mut pd = [0u8; N];
        IpCmHeader {
            version: 0,
            src_port: local.port(),
            src: local.ip(),
            dst: peer.ip(),
        }
        .emit(&mut pd);
        pd[IpCmHeader::LEN..IpCmHeader::LEN + user.len()].copy_from_slice(user);
        Ok((local, peer, pd))
    }

    /// Accepts the connection request this ID was made for (`rdma_accept`): its QP goes
    /// to RTS, and the REP carries `param`. A UD ID answers its SIDR_REQ with its QP.
    pub fn accept(&self, param: &ConnParam) -> Result<()> {
        let verb = "rdma_accept";
        if self.st().sidr.is_some() {
            return self.answer_sidr(verb, wire::sidr_status::VALID, &param.private_data);
        }
        let (id, req, peer, qp) = {
            let st = self.st();
            let (Some(id), Some(req), Some(peer)) = (st.comm, st.req.clone(), st.peer) else {
                return Err(Error::cm(verb, CmError::NoConnectRequest));
            };
            if !st.state.allows(IdVerb::Accept) {
                let state = st.state;
                return Err(Error::cm(verb, CmError::WrongState { state }));
            }
            (id, req, peer, st.qp.as_ref().and_then(QpRef::get))
        };
        let (local_qpn, srq) = announced_qp(verb, qp.as_deref(), param)?;
        let pd = PrivateData::from_slice(&param.private_data).ok_or_else(|| {
            Error::cm(
                verb,
                CmError::PrivateDataTooLong {
                    message: "an accept",
                    len: param.private_data.len(),
                    max: wire::private_len::REP,
                },
            )
        })?;
        let conn = self.passive_conn(&req, param);
        let rq_psn = conn.rq_psn;
        // The program's own QP it moves itself, with init_qp_attr's values (these).
        if let Some(qp) = &qp {
            to_rts(qp, self.inner.ctx.addr(), peer.ip(), conn)?;
        }
        let rep = RepRepr {
            local_comm_id: 0,
            remote_comm_id: 0,
            local_qkey: 0,
            local_qpn,
            local_eecn: 0,
            starting_psn: rq_psn,
            responder_resources: param.responder_resources,
            initiator_depth: param.initiator_depth,
            target_ack_delay: crate::config::limits::LOCAL_CA_ACK_DELAY as u8,
            failover_accepted: 0,
            end_to_end_flow_control: false,
            rnr_retry_count: param.rnr_retry_count.min(7),
            srq,
            local_ca_guid: 0,
            private_data: pd,
        };
        self.on_agent(
            verb,
            |a, now| a.accept(now, id, rep),
            |_| {
                self.st().param = Some(param.clone());
                self.moved(IdStep::Accepted);
            },
        )
    }

    /// Rejects the connection request this ID was made for (`rdma_reject`), with the
    /// consumer's reason (28) and `private_data` (at most 148 bytes).
    pub fn reject(&self, private_data: &[u8]) -> Result<()> {
        self.reject_for(rej_reason::CONSUMER_DEFINED, private_data)
    }

    /// Rejects the connection request with `reason` (a REJ reason code, such as
    /// `rej_reason::VENDOR_OPTION_NOT_SUPPORTED` for `rdma_reject_ece`).
    pub fn reject_for(&self, reason: u16, private_data: &[u8]) -> Result<()> {
        if self.st().sidr.is_some() {
            return self.answer_sidr("rdma_reject", wire::sidr_status::REJECTED, private_data);
        }
        self.agent_verb("rdma_reject", |a, now, id| {
            a.reject(now, id, reason, private_data)
        })
    }

    /// Sends the RTU after a [`CmEventKind::ConnectResponse`] (`rdma_establish`).
    pub fn establish(&self) -> Result<()> {
        self.agent_verb("rdma_establish", |a, _, id| a.ready_to_use(id, &[]))
    }

    /// Tells the CM of an event seen on the ID's QP (`rdma_notify`): only
    /// [`NotifyEvent::CommEstablished`], traffic that arrived on a passive ID's QP before
    /// the peer's RTU did, which then stands in for the RTU (IBTA 12.9.6.2), with an
    /// [`CmEventKind::Established`] event. Nothing happens on an established ID.
    pub fn notify(&self, event: NotifyEvent) -> Result<()> {
        match event {
            NotifyEvent::CommEstablished => {
                self.agent_verb("rdma_notify", |a, _, id| a.establish(id))
            }
        }
    }

    /// Ends the connection (`rdma_disconnect`): its QP goes to ERROR (its WRs flush), and
    /// the peer gets a DREQ, or the DREP for its own.
    pub fn disconnect(&self) -> Result<()> {
        // Nothing already accepted is lost: the peer hears of every message this side took
        // before it hears of the end (its requester would flush a send whose ACK came
        // after the DREQ, though the send had landed).
        super::dev::send_deferred_acks(&self.inner.ctx);
        if let Some(qp) = self.qp() {
            let _ = qp.modify(&QpAttr {
                state: Some(QpState::Error),
                ..Default::default()
            });
        }
        self.agent_verb("rdma_disconnect", |a, now, id| a.disconnect(now, id, &[]))?;
        self.moved(IdStep::Disconnected);
        Ok(())
    }

    pub(super) fn agent_verb(
        &self,
        verb: &'static str,
        f: impl FnOnce(
            &mut CmAgent<IpAddr>,
            Instant,
            CommId,
        ) -> std::result::Result<(), softrdma_proto::cm::CmError>,
    ) -> Result<()> {
        let Some(id) = self.st().comm else {
            return Err(Error::cm(verb, CmError::NoConnection));
        };
        self.on_agent(verb, |a, now| f(a, now, id), |_| {})
    }

    /// Runs `f` on the agent under its lock, then `then` (still under it, so that what
    /// the ID records is in place before any answer can be dispatched), then sends what
    /// the agent made. A refusal by the agent is `verb`'s, and nothing else runs.
    pub(super) fn on_agent(
        &self,
        verb: &'static str,
        f: impl FnOnce(
            &mut CmAgent<IpAddr>,
            Instant,
        ) -> std::result::Result<(), softrdma_proto::cm::CmError>,
        then: impl FnOnce(&mut AgentGuard<'_>),
    ) -> Result<()> {
        let core = &self.inner.core;
        let mut cs = core.agent();
        f(&mut cs.agent, core.now())
            .map_err(|e| Error::cm(verb, CmError::Refused { source: e }))?;
        then(&mut cs);
        core.settle(&mut cs);
        Ok(())
    }
}
