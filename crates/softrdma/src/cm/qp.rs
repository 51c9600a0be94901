//! An ID's QP: creating or attaching it (rdma_cm's QP type per port space), and
//! `rdma_init_qp_attr` for a QP the program moves itself, from the connection's
//! parameters as the REQ and REP carry them (the values are `qp_attr`'s).
//!
//! Calls the verbs (create, modify). Locks: `CmId` alone, then a QP's when it is modified.

use super::objects::{CmId, QpRef};
use super::qp_attr::{Conn, active_conn, for_state, passive_conn, ready};
use super::types::{ConnParam, PortSpace};
use crate::error::{CmError, Error, Result};
use crate::verbs::qp::{ProtectionDomain, QpInitAttr, QueuePair};
use softrdma_proto::cma::qp_attr::NoAttrs;
use softrdma_proto::{QpAttr, QpState, QpType};
use softrdma_wire::cm::ReqRepr;
use std::sync::Arc;

/// The QP number and SRQ bit a REQ or REP announces: the attached QP's, else the
/// program's own QP's from `param` (as librdmacm passes `id->qp ? id->qp->qp_num :
/// conn_param->qp_num`); EINVAL with neither.
pub(super) fn announced_qp(
    verb: &'static str,
    qp: Option<&QueuePair>,
    param: &ConnParam,
) -> Result<(u32, bool)> {
    match (qp, param.qp_num) {
        (Some(q), _) => Ok((q.qp_num().value(), q.has_srq())),
        (None, Some(n)) => Ok((n.value(), param.srq)),
        (None, None) => Err(Error::cm(verb, CmError::NoQpToAnnounce)),
    }
}

impl CmId {
    /// Creates the ID's QP on `pd` (`rdma_create_qp`): an RC QP in the TCP or IB port
    /// space, moved to INIT (the connection brings it to RTS); a UD QP in the UDP or IB
    /// port space, moved to RTS at once with [`RDMA_UDP_QKEY`](super::types::RDMA_UDP_QKEY).
    pub fn create_qp(&self, pd: &ProtectionDomain, init: QpInitAttr) -> Result<Arc<QueuePair>> {
        self.check_qp_type(init.qp_type)?;
        let qp = Arc::new(pd.create_qp(init)?);
        ready(&qp)?;
        self.set_qp(Some(QpRef::Owned(qp.clone())));
        Ok(qp)
    }

    /// Makes `qp` the ID's QP (a QP the caller created and keeps: the ID holds it weakly,
    /// and the CM moves it to RTR and RTS as the connection forms), moving it to INIT (RC)
    /// or RTS (UD) if it is in RESET (`rdma_create_qp` of librdmacm, whose QP is the
    /// library's own).
    pub fn attach_qp(&self, qp: &Arc<QueuePair>) -> Result<()> {
        self.check_qp_type(qp.qp_type())?;
        if qp.query().state == Some(QpState::Reset) {
            ready(qp)?;
        }
        self.set_qp(Some(QpRef::Attached(Arc::downgrade(qp))));
        Ok(())
    }

    /// Whether a QP of type `t` fits the ID's port space (rdma_cm's rule: TCP is RC, UDP
    /// is UD, IB takes either).
    pub(super) fn check_qp_type(&self, t: QpType) -> Result<()> {
        let fits = match self.inner.ps {
            PortSpace::Tcp => t == QpType::Rc,
            PortSpace::Udp => t == QpType::Ud,
            PortSpace::Ib => t != QpType::Uc,
        };
        if fits {
            return Ok(());
        }
        Err(Error::cm(
            "rdma_create_qp",
            CmError::QpTypeMismatch {
                qp_type: t,
                port_space: format!("{:?}", self.inner.ps),
            },
        ))
    }

    /// Whether the ID finds a UD peer (SIDR) rather than connecting: the UDP port space,
    /// or the IB one with a UD QP.
    pub(super) fn is_ud(&self) -> bool {
        match self.inner.ps {
            PortSpace::Udp => true,
            PortSpace::Tcp => false,
            PortSpace::Ib => self.qp().is_some_and(|q| q.qp_type() == QpType::Ud),
        }
    }

    /// Forgets the ID's QP (`rdma_destroy_qp`).
    pub fn detach_qp(&self) {
        self.set_qp(None);
    }

    /// Sets the ID's QP and publishes its line again (the QPN shows in it).
    pub(super) fn set_qp(&self, qp: Option<QpRef>) {
        self.st().qp = qp;
        self.publish(None);
    }

    /// The attributes that move the ID's QP to `state` (`rdma_init_qp_attr`), for a
    /// caller that moves its own QP: INIT (RC: port, P_Key index and every remote access;
    /// UD: and [`RDMA_UDP_QKEY`](super::types::RDMA_UDP_QKEY)); RTR and RTS once the connection's parameters are known
    /// (a passive ID from its connect request on, an active one from the peer's REP on;
    /// a UD QP needs none).
    pub fn init_qp_attr(&self, state: QpState) -> Result<QpAttr> {
        let verb = "rdma_init_qp_attr";
        let ud = self.is_ud();
        let (local, peer) = (self.inner.ctx.addr(), self.peer_addr());
        let conn = {
            let st = self.st();
            match (&st.req, &st.rep, st.listening) {
                (Some(req), Some(rep), _) => Some(active_conn(
                    req,
                    rep,
                    &st.param.as_ref().unwrap_or(&ConnParam::default()).offer(),
                    self.inner.ctx.active_mtu(),
                )),
                (Some(req), None, None) if st.passive => {
                    let param = st.param.clone().unwrap_or(ConnParam {
                        responder_resources: req.initiator_depth,
                        initiator_depth: req.responder_resources,
                        ..ConnParam::default()
                    });
                    drop(st);
                    self.passive_conn_opt(&param)
                }
                _ => None,
            }
        };
        let conn = conn.as_ref().zip(peer).map(|(c, p)| (c, local, p.ip()));
        for_state(state, ud, conn).map_err(|e| {
            let why = match e {
                NoAttrs::NoConnection => CmError::NoConnParams { state },
                NoAttrs::NotAMove => CmError::NoQpAttrs { state },
            };
            Error::cm(verb, why)
        })
    }

    /// [`Self::passive_conn`] for the request this passive ID holds, if it holds one.
    pub(super) fn passive_conn_opt(&self, param: &ConnParam) -> Option<Conn> {
        let req = self.st().req.clone()?;
        Some(self.passive_conn(&req, param))
    }

    /// The passive side's connection: it sends from the REQ's PSN and expects its own
    /// (see the module docs).
    pub(super) fn passive_conn(&self, req: &ReqRepr, param: &ConnParam) -> Conn {
        let (rq_psn, ack_timeout) = {
            let st = self.st();
            (st.rq_psn, st.ack_timeout)
        };
        let mtu = self.inner.ctx.active_mtu();
        passive_conn(req, &param.offer(), rq_psn, ack_timeout, mtu)
    }
}
