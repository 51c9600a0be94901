//! Multicast on an ID (`rdma_join_multicast`, `rdma_leave_multicast`): on RoCE v2 a group
//! is an IP multicast group joined on the device's interface, so no subnet manager is
//! asked, and the ID's QP is attached to it through the verbs.
//!
//! Locks: `CmId` alone; the device's `Groups` (attach, detach) with no CM lock held;
//! `CmIdChannel` then `CmEvents` for the join's event.

use super::id::cm_err;
use super::objects::{CmEvent, CmId};
use super::qp_attr::gid_of;
use super::types::{CmEventKind, MULTICAST_QPN, PortSpace, RDMA_UDP_QKEY, UdParam};
use crate::error::Result;
use softrdma_proto::QpType;
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
        let bad = |why: String| Err(cm_err(verb, libc::EINVAL, why));
        if self.inner.ps == PortSpace::Tcp || self.qp().is_some_and(|q| q.qp_type() != QpType::Ud) {
            return bad(
                "only a UD ID (port space UDP, or IB with a UD QP) joins a multicast group".into(),
            );
        }
        if !group.is_multicast() {
            return bad(format!("{group} is not a multicast address"));
        }
        if group.is_ipv4() != dev.to_canonical().is_ipv4() {
            return bad(format!(
                "device {} is on {dev}, which cannot join the group {group}",
                self.inner.ctx.name()
            ));
        }
        let state = self.st().state;
        if !matches!(state, "ADDR_BOUND" | "ADDR_RESOLVED") {
            return bad(format!(
                "the ID is {state}: bind or resolve its address first (and join before \
                 resolving the route)"
            ));
        }
        if self.st().groups.iter().any(|(g, _)| *g == group) {
            return Err(cm_err(
                verb,
                libc::EADDRINUSE,
                format!("the ID has joined {group} already"),
            ));
        }
        if !send_only && let Some(qp) = self.qp() {
            qp.attach_mcast(gid_of(group)).map_err(|e| {
                if group.is_ipv6() && e.errno() == libc::EOPNOTSUPP {
                    // Linux's loopback interface carries no IPv6 multicast (`lo` is not
                    // marked for it): the device cannot carry the group.
                    cm_err(
                        verb,
                        libc::EOPNOTSUPP,
                        format!(
                            "device {} is on {dev}, whose interface carries no IPv6 \
                             multicast ({e}); use an IPv4 device, or one on an interface \
                             with multicast",
                            self.inner.ctx.name()
                        ),
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
            return Err(cm_err(
                "rdma_leave_multicast",
                libc::EADDRNOTAVAIL,
                format!("the ID has not joined {group}"),
            ));
        };
        if !send_only && let Some(qp) = self.qp() {
            // A QP attached elsewhere, or detached by its owner, has nothing to undo.
            let _ = qp.detach_mcast(gid_of(group));
        }
        Ok(())
    }
}
