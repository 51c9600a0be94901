//! UD peers found rather than connected (IBTA 12.11): the active side's SIDR_REQ, the
//! passive side's answer (`rdma_accept`/`rdma_reject` on a UD ID), and the agent's SIDR
//! events turned into ID events.
//!
//! Calls the host's agent. Locks: `CmAgent`, with `CmId` and `CmIdChannel` under it.

use super::objects::{CmId, Core, CoreSt, QpRef};
use super::types::{CmEventKind, ConnParam, RDMA_UDP_QKEY, UdParam};
use crate::error::{CmError, Error, Result};
use softrdma_proto::Instant;
use softrdma_proto::cm::CommId;
use softrdma_proto::cma::IdStep;
use softrdma_wire::cm::{self as wire, IpCmHeader, PrivateData, SidrRepRepr, SidrReqRepr};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Weak};

impl CmId {
    /// Asks the peer's service for its UD QP (the UD `rdma_connect`): a SIDR_REQ with the
    /// IP CM header and `param`'s private data; [`CmEventKind::Established`] brings the
    /// answer.
    pub(super) fn resolve_service(&self, param: &ConnParam) -> Result<()> {
        let (_, peer, pd) = self.request::<{ wire::private_len::SIDR_REQ }>(
            "rdma_connect",
            &param.private_data,
            ("a UD connect", true),
        )?;
        let req = SidrReqRepr {
            request_id: 0,
            pkey: 0xFFFF,
            service_id: wire::ip_service_id(self.inner.ps.code(), peer.port()),
            private_data: PrivateData(pd),
        };
        let core = &self.inner.core;
        let mut cs = core.agent();
        let id = cs.agent.sidr_request(core.now(), peer.ip(), req);
        cs.ids.insert(id, Arc::downgrade(&self.inner));
        self.st().comm = Some(id);
        self.moved(IdStep::Connecting);
        core.settle(&mut cs);
        Ok(())
    }

    /// Answers the SIDR_REQ this passive UD ID was made for with `status` (and, when
    /// valid, its QP and [`RDMA_UDP_QKEY`]).
    pub(super) fn answer_sidr(
        &self,
        verb: &'static str,
        status: u8,
        private_data: &[u8],
    ) -> Result<()> {
        let pd = PrivateData::from_slice(private_data).ok_or_else(|| {
            Error::cm(
                verb,
                CmError::PrivateDataTooLong {
                    message: "a UD answer",
                    len: private_data.len(),
                    max: wire::private_len::SIDR_REP,
                },
            )
        })?;
        let valid = status == wire::sidr_status::VALID;
        let (id, qp) = {
            let st = self.st();
            (st.comm, st.qp.as_ref().and_then(QpRef::get))
        };
        let Some(id) = id else {
            return Err(Error::cm(verb, CmError::NoSidrRequest));
        };
        let qpn = match qp {
            Some(q) => q.qp_num().value(),
            None if valid => {
                return Err(Error::cm(verb, CmError::NoQp));
            }
            None => 0,
        };
        let rep = wire::SidrRepRepr {
            request_id: 0,
            status,
            info: Default::default(),
            qpn: if valid { qpn } else { 0 },
            service_id: 0,
            qkey: if valid { RDMA_UDP_QKEY } else { 0 },
            private_data: pd,
        };
        self.on_agent(
            verb,
            |a, now| a.sidr_reply(now, id, rep),
            |cs| {
                // The agent keeps the answer for duplicates; the ID is done with the
                // exchange.
                cs.ids.remove(&id);
                {
                    let mut st = self.st();
                    st.comm = None;
                    st.sidr = None;
                }
                self.moved(IdStep::Resolved { valid });
            },
        )
    }
}

impl Core {
    /// A SIDR_REQ for a service: a passive ID for its listener and a connect request, or
    /// the answer that nobody here serves it.
    pub(super) fn on_sidr_req(
        &self,
        cs: &mut CoreSt,
        now: Instant,
        id: CommId,
        from: IpAddr,
        req: Box<SidrReqRepr>,
    ) {
        let listener = cs.listeners.get(&req.service_id).and_then(Weak::upgrade);
        let (Some(l), Ok(ip)) = (listener, IpCmHeader::parse(req.private_data.as_bytes())) else {
            // IBTA 12.11.2: nobody here serves it (or it lacks rdma_cm's header).
            let _ = cs.agent.sidr_reply(
                now,
                id,
                SidrRepRepr {
                    request_id: 0,
                    status: wire::sidr_status::SERVICE_ID_NOT_SUPPORTED,
                    info: Default::default(),
                    qpn: 0,
                    service_id: 0,
                    qkey: 0,
                    private_data: PrivateData::default(),
                },
            );
            return;
        };
        let from = SocketAddr::new(from, ip.src_port);
        let asked = (&req.private_data.as_bytes()[..], None);
        CmId::passive(cs, l, (from, id), asked, |st| st.sidr = Some(req.clone()));
    }

    /// The peer's SIDR_REP: the active UD ID is established with the peer's QP and Q_Key, or
    /// unresolved with its status.
    pub(super) fn on_sidr_rep(&self, cs: &mut CoreSt, id: CommId, rep: Box<SidrRepRepr>) {
        let Some(inner) = cs.ids.remove(&id).and_then(|w| w.upgrade()) else {
            return;
        };
        let cid = CmId { inner };
        cid.st().comm = None;
        if rep.status != wire::sidr_status::VALID {
            cid.moved(IdStep::Resolved { valid: false });
            cid.event(
                CmEventKind::Unresolved { status: rep.status },
                rep.private_data.as_bytes().to_vec(),
            );
            return;
        }
        cid.moved(IdStep::Resolved { valid: true });
        cid.event_with(
            CmEventKind::Established,
            rep.private_data.as_bytes().to_vec(),
            None,
            Some(UdParam {
                qp_num: rep.qpn,
                qkey: rep.qkey,
            }),
        );
    }
}
