//! Moving an ID's QPs by rdma_cm's rules: a new QP to where rdma_cm leaves it (RC in
//! INIT, UD in RTS), and a connected QP to RTS. The rules themselves (the attributes, the
//! path a REQ carries, how both sides derive a connection) are pure, in
//! `softrdma_proto::cma::qp_attr`; this file only applies them through the verbs (the
//! QP's `Qp` lock). No lock of the CM.

use crate::error::Result;
use crate::verbs::qp::QueuePair;
pub(super) use softrdma_proto::cma::qp_attr::{
    Conn, active_conn, for_state, gid_of, init_attr, passive_conn, path,
};
use softrdma_proto::cma::qp_attr::{rtr_attr, rts_attr};
use softrdma_proto::{QpAttr, QpState, QpType};
use softrdma_wire::Psn;
use std::net::IpAddr;

/// Moves a new QP to where rdma_cm leaves it: an RC QP to INIT (the connection brings it
/// to RTS), a UD QP through to RTS with [`RDMA_UDP_QKEY`](super::types::RDMA_UDP_QKEY) (it needs no peer).
pub(super) fn ready(qp: &QueuePair) -> Result<()> {
    if qp.qp_type() != QpType::Ud {
        return to_init(qp);
    }
    qp.modify(&init_attr(true))?;
    qp.modify(&QpAttr {
        state: Some(QpState::Rtr),
        ..Default::default()
    })?;
    qp.modify(&QpAttr {
        state: Some(QpState::Rts),
        sq_psn: Some(Psn::new(0)),
        ..Default::default()
    })
}

/// Moves a new QP to INIT with every remote access right, as rdma_cm's QPs get.
pub(super) fn to_init(qp: &QueuePair) -> Result<()> {
    qp.modify(&init_attr(false))
}

/// Moves a connected QP through RTR to RTS with connection `c` between `local` and `peer`.
pub(super) fn to_rts(qp: &QueuePair, local: IpAddr, peer: IpAddr, c: Conn) -> Result<()> {
    qp.modify(&rtr_attr(local, peer, &c))?;
    qp.modify(&rts_attr(&c))
}

/// A random first PSN (24 bits).
pub(super) fn random_psn() -> u32 {
    rand::random::<u32>() & 0xFF_FFFF
}
