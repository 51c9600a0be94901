//! The QP-attribute policy of rdma_cm: where a new QP is left (RC in INIT, UD in RTS),
//! every remote access right, the RoCE v2 path a REQ carries, and the RTR and RTS
//! attributes of a connection as both sides derive them from its REQ and REP.
//!
//! Pure functions, but for `ready`, `to_init` and `to_rts`, which modify a QP through the
//! verbs (its `Qp` lock). No lock of the CM.

use super::types::{ConnParam, RDMA_UDP_QKEY};
use crate::error::Result;
use crate::verbs::qp::QueuePair;
use softrdma_proto::{AccessFlags, AddressVector, Mtu, QpAttr, QpState, QpType};
use softrdma_wire::cm::{PathRepr, RepRepr, ReqRepr};
use softrdma_wire::{Psn, Qpn};
use std::net::IpAddr;

/// The ACK timeout our QPs get and our REQs announce (4.096 µs × 2^14 = 67 ms, as
/// `ibv_rc_pingpong`'s).
pub(super) const ACK_TIMEOUT: u8 = 14;

/// Moves a new QP to where rdma_cm leaves it: an RC QP to INIT (the connection brings it
/// to RTS), a UD QP through to RTS with [`RDMA_UDP_QKEY`] (it needs no peer).
pub(super) fn ready(qp: &QueuePair) -> Result<()> {
    if qp.qp_type() != QpType::Ud {
        return to_init(qp);
    }
    qp.modify(&QpAttr {
        state: Some(QpState::Init),
        pkey_index: Some(0),
        port: Some(1),
        qkey: Some(RDMA_UDP_QKEY),
        ..Default::default()
    })?;
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

/// The access rights rdma_cm gives its QPs: every remote one.
pub(super) const ALL_ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_ATOMIC);

/// Moves a new QP to INIT with every remote access right, as rdma_cm's QPs get.
pub(super) fn to_init(qp: &QueuePair) -> Result<()> {
    qp.modify(&QpAttr {
        state: Some(QpState::Init),
        pkey_index: Some(0),
        port: Some(1),
        access_flags: Some(ALL_ACCESS),
        ..Default::default()
    })
}

/// A RoCE v2 path between two addresses: GIDs are the addresses (IPv4-mapped), LIDs the
/// permissive 0xFFFF as rxe sends them, hop limit 64, with the ID's type of service and
/// ACK timeout (ours by default).
pub(super) fn path(local: IpAddr, remote: IpAddr, tos: u8, ack_timeout: Option<u8>) -> PathRepr {
    PathRepr {
        local_lid: 0xFFFF,
        remote_lid: 0xFFFF,
        local_gid: gid_of(local).octets(),
        remote_gid: gid_of(remote).octets(),
        hop_limit: 64,
        traffic_class: tos,
        local_ack_timeout: ack_timeout.unwrap_or(ACK_TIMEOUT),
        ..PathRepr::default()
    }
}

pub(super) fn mtu_min(code: u8, ours: Mtu) -> Mtu {
    [Mtu::M256, Mtu::M512, Mtu::M1024, Mtu::M2048, Mtu::M4096]
        .into_iter()
        .find(|m| *m as u8 == code)
        .map_or(ours, |m| m.min(ours))
}

/// What a connected QP is brought to RTS with.
pub(super) struct Conn {
    pub(super) dest_qpn: u32,
    pub(super) rq_psn: u32,
    pub(super) sq_psn: u32,
    pub(super) mtu: Mtu,
    pub(super) timeout: u8,
    pub(super) retry: u8,
    pub(super) rnr_retry: u8,
    pub(super) rd_atomic: u8,
    pub(super) dest_rd_atomic: u8,
    /// The traffic class of the REQ's primary path, which both sides' QPs send with.
    pub(super) tclass: u8,
}

/// The active side's connection: it sends from the REP's PSN and expects its REQ's, and
/// waits for ACKs as long as its REQ announced.
pub(super) fn active_conn(req: &ReqRepr, rep: &RepRepr, param: &ConnParam, ours: Mtu) -> Conn {
    Conn {
        dest_qpn: rep.local_qpn,
        rq_psn: req.starting_psn,
        sq_psn: rep.starting_psn,
        mtu: mtu_min(req.path_mtu, ours),
        timeout: req.primary.local_ack_timeout.max(1),
        retry: param.retry_count,
        rnr_retry: rep.rnr_retry_count,
        rd_atomic: param.initiator_depth.min(rep.responder_resources).max(1),
        dest_rd_atomic: param.responder_resources.max(1),
        tclass: req.primary.traffic_class,
    }
}

/// The move to RTR.
pub(super) fn rtr_attr(local: IpAddr, peer: IpAddr, c: &Conn) -> QpAttr {
    QpAttr {
        state: Some(QpState::Rtr),
        av: Some(AddressVector {
            src: local,
            dst: peer,
            flow_label: 0,
            traffic_class: c.tclass,
        }),
        path_mtu: Some(c.mtu),
        dest_qpn: Some(Qpn::new(c.dest_qpn)),
        rq_psn: Some(Psn::new(c.rq_psn)),
        max_dest_rd_atomic: Some(c.dest_rd_atomic),
        min_rnr_timer: Some(12),
        ..Default::default()
    }
}

/// The move to RTS.
pub(super) fn rts_attr(c: &Conn) -> QpAttr {
    QpAttr {
        state: Some(QpState::Rts),
        sq_psn: Some(Psn::new(c.sq_psn)),
        timeout: Some(c.timeout),
        retry_cnt: Some(c.retry.min(7)),
        rnr_retry: Some(c.rnr_retry),
        max_rd_atomic: Some(c.rd_atomic),
        ..Default::default()
    }
}

pub(super) fn to_rts(qp: &QueuePair, local: IpAddr, peer: IpAddr, c: Conn) -> Result<()> {
    qp.modify(&rtr_attr(local, peer, &c))?;
    qp.modify(&rts_attr(&c))
}

pub(super) fn random_psn() -> u32 {
    rand::random::<u32>() & 0xFF_FFFF
}

/// The GID of an IP address (an IPv4 address's is its mapped form).
pub(super) fn gid_of(ip: IpAddr) -> std::net::Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}
