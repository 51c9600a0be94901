//! Multicast on an ID (`rdma_join_multicast`, `rdma_leave_multicast`): on RoCE v2 a group
//! is an IP multicast group joined on the device's interface, so no subnet manager is
//! asked, and the ID's QP is attached to it through the verbs.
//!
//! Locks: `CmId` alone; the device's `Groups` (attach, detach) with no CM lock held;
//! `CmIdChannel` then `CmEvents` for the join's event.

use super::objects::{CmEvent, CmId};
use super::qp_attr::gid_of;
use super::types::{CmEventKind, MULTICAST_QPN, PortSpace, RDMA_UDP_QKEY, UdParam};
use crate::error::{CmError, Error, Result};
use softrdma_proto::QpType;
use softrdma_proto::cma::IdVerb;
use std::net::IpAddr;

impl CmId {
    /// Joins the multicast group `group` (`rdma_join_multicast`): an ID of the UDP or IB
    /// port space whose address is bound or resolved (and not yet routed: rdma_cm's
    /// rule), on a device of the group's family. On RoCE v2 the group is an IP multicast
    /// group (its GID an IPv4 group's mapped address, or the IPv6 group itself), joined
    /// on the device's interface, so no subnet manager is asked. The ID's QP, if it has
    /// one, is attached to the group unless `send_only`, and a
    /// [`CmEventKind::MulticastJoin`] event follows, whose [`CmEvent::ud`] gives what a
    /// send to the group takes.
    pub fn join_multicast(&self, group: IpAddr, send_only: bool) -> Result<()> {
        let verb = "rdma_join_multicast";
        let group = group.to_canonical();
        let dev = self.inner.ctx.addr();
        let bad = |why: CmError| Err(Error::cm(verb, why));
        if self.inner.ps == PortSpace::Tcp || self.qp().is_some_and(|q| q.qp_type() != QpType::Ud) {
            return bad(CmError::JoinNotUd);
        }
        if !group.is_multicast() {
            return bad(CmError::NotMulticast { group });
        }
        if group.is_ipv4() != dev.to_canonical().is_ipv4() {
            return bad(CmError::JoinWrongFamily {
                device: self.inner.ctx.name().to_owned(),
                device_addr: dev,
                group,
            });
        }
        let state = self.st().state;
        if !state.allows(IdVerb::JoinMulticast) {
            return bad(CmError::JoinWrongState { state });
        }
        if self.st().groups.iter().any(|(g, _)| *g == group) {
            return Err(Error::cm(verb, CmError::AlreadyJoined { group }));
        }
        if !send_only && let Some(qp) = self.qp() {
            qp.attach_mcast(gid_of(group)).map_err(|e| {
                if group.is_ipv6() && e.errno() == libc::EOPNOTSUPP {
                    // Linux's loopback interface carries no IPv6 multicast (`lo` is not
                    // marked for it): the device cannot carry the group.
                    Error::cm(
                        verb,
                        CmError::NoIpv6Multicast {
                            device: self.inner.ctx.name().to_owned(),
                            device_addr: dev,
                            source: Box::new(e),
                        },
                    )
                } else {
                    e
                }
            })?;
        }
        self.st().groups.push((group, send_only));
        self.inner.chan().push(CmEvent {
            kind: CmEventKind::MulticastJoin { group },
            id: self.clone(),
            listen_id: None,
            private_data: vec![],
            peer: None,
            ud: Some(UdParam {
                qp_num: MULTICAST_QPN,
                qkey: RDMA_UDP_QKEY,
            }),
        });
        Ok(())
    }

    /// Leaves the multicast group `group` (`rdma_leave_multicast`): the ID's QP is
    /// detached from it. EADDRNOTAVAIL if the ID did not join it.
    pub fn leave_multicast(&self, group: IpAddr) -> Result<()> {
        let group = group.to_canonical();
        let joined = {
            let mut st = self.st();
            let at = st.groups.iter().position(|(g, _)| *g == group);
            at.map(|i| st.groups.remove(i))
        };
        let Some((_, send_only)) = joined else {
            return Err(Error::cm(
                "rdma_leave_multicast",
                CmError::NotJoined { group },
            ));
        };
        if !send_only && let Some(qp) = self.qp() {
            // A QP attached elsewhere, or detached by its owner, has nothing to undo.
            let _ = qp.detach_mcast(gid_of(group));
        }
        Ok(())
    }
}
