//! The QP-attribute rules of rdma_cm: where a new QP is left (RC in INIT, UD in RTS),
//! every remote access right, the RoCE v2 path a REQ carries, and the RTR and RTS
//! attributes of a connection as both sides derive them from its REQ and REP
//! (`rdma_init_qp_attr`).
//!
//! Pure functions: the caller (`softrdma::cm`) moves its QPs with what they return.

use crate::{AccessFlags, AddressVector, Mtu, QpAttr, QpState};
use softrdma_wire::cm::{PathRepr, RepRepr, ReqRepr};
use softrdma_wire::{Psn, Qpn};
use std::net::{IpAddr, Ipv6Addr};

/// The ACK timeout our QPs get and our REQs announce (4.096 µs × 2^14 = 67 ms, as
/// `ibv_rc_pingpong`'s).
pub const ACK_TIMEOUT: u8 = 14;

/// The Q_Key of rdma_cm's UD QPs (`RDMA_UDP_QKEY` in `<rdma/rdma_cma.h>`).
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;

/// The access rights rdma_cm gives its QPs: every remote one.
pub const ALL_ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_ATOMIC);

/// What a side offers for its connection (`struct rdma_conn_param`'s numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offer {
    /// RDMA READs and atomics this side answers at once.
    pub responder_resources: u8,
    /// RDMA READs and atomics this side has outstanding.
    pub initiator_depth: u8,
    /// Transport retries (0-7).
    pub retry_count: u8,
    /// RNR retries (0-7; 7 is infinite).
    pub rnr_retry_count: u8,
}

/// What a connected QP is brought to RTS with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conn {
    /// The peer's QPN.
    pub dest_qpn: u32,
    /// The first PSN this side's receive queue expects.
    pub rq_psn: u32,
    /// The first PSN this side sends.
    pub sq_psn: u32,
    /// The path MTU: the smaller of the REQ's and this side's.
    pub mtu: Mtu,
    /// The local ACK timeout (4.096 µs × 2^n).
    pub timeout: u8,
    /// Transport retries.
    pub retry: u8,
    /// RNR retries.
    pub rnr_retry: u8,
    /// RDMA READs and atomics this side may have outstanding.
    pub rd_atomic: u8,
    /// RDMA READs and atomics this side answers at once.
    pub dest_rd_atomic: u8,
    /// The traffic class of the REQ's primary path, which both sides' QPs send with.
    pub tclass: u8,
}

/// A RoCE v2 path between two addresses: GIDs are the addresses (IPv4-mapped), LIDs the
/// permissive 0xFFFF as rxe sends them, hop limit 64, with the ID's type of service and
/// ACK timeout (ours by default).
pub fn path(local: IpAddr, remote: IpAddr, tos: u8, ack_timeout: Option<u8>) -> PathRepr {
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

/// The MTU a REQ's path MTU `code` and this side's `ours` agree on: the smaller (ours if
/// the code names none).
pub fn mtu_min(code: u8, ours: Mtu) -> Mtu {
    [Mtu::M256, Mtu::M512, Mtu::M1024, Mtu::M2048, Mtu::M4096]
        .into_iter()
        .find(|m| *m as u8 == code)
        .map_or(ours, |m| m.min(ours))
}

/// The active side's connection: it sends from the REP's PSN and expects its REQ's, and
/// waits for ACKs as long as its REQ announced.
pub fn active_conn(req: &ReqRepr, rep: &RepRepr, ours: &Offer, mtu: Mtu) -> Conn {
    Conn {
        dest_qpn: rep.local_qpn,
        rq_psn: req.starting_psn,
        sq_psn: rep.starting_psn,
        mtu: mtu_min(req.path_mtu, mtu),
        timeout: req.primary.local_ack_timeout.max(1),
        retry: ours.retry_count,
        rnr_retry: rep.rnr_retry_count,
        rd_atomic: ours.initiator_depth.min(rep.responder_resources).max(1),
        dest_rd_atomic: ours.responder_resources.max(1),
        tclass: req.primary.traffic_class,
    }
}

/// The passive side's connection: it sends from the REQ's PSN and expects `rq_psn`, the
/// one it drew when the REQ came; its ACK timeout is the ID's own if it set one.
pub fn passive_conn(
    req: &ReqRepr,
    ours: &Offer,
    rq_psn: u32,
    ack_timeout: Option<u8>,
    mtu: Mtu,
) -> Conn {
    Conn {
        dest_qpn: req.local_qpn,
        rq_psn,
        sq_psn: req.starting_psn,
        mtu: mtu_min(req.path_mtu, mtu),
        timeout: ack_timeout.unwrap_or(req.primary.local_ack_timeout).max(1),
        retry: req.retry_count,
        rnr_retry: ours.rnr_retry_count.min(7),
        rd_atomic: ours.initiator_depth.min(req.responder_resources).max(1),
        dest_rd_atomic: ours.responder_resources.max(1),
        tclass: req.primary.traffic_class,
    }
}

/// The move to INIT: port 1, P_Key index 0, and every remote access right (RC) or
/// [`RDMA_UDP_QKEY`] (UD).
pub fn init_attr(ud: bool) -> QpAttr {
    QpAttr {
        state: Some(QpState::Init),
        pkey_index: Some(0),
        port: Some(1),
        qkey: ud.then_some(RDMA_UDP_QKEY),
        access_flags: (!ud).then_some(ALL_ACCESS),
        ..Default::default()
    }
}

/// The move to RTR.
pub fn rtr_attr(local: IpAddr, peer: IpAddr, c: &Conn) -> QpAttr {
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
pub fn rts_attr(c: &Conn) -> QpAttr {
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

/// Why [`for_state`] has no attributes to give.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoAttrs {
    /// RTR and RTS of a connected QP need the connection's parameters: a connect request,
    /// or the peer's reply.
    NoConnection,
    /// Only INIT, RTR and RTS have attributes to give.
    NotAMove,
}

/// The attributes that move an ID's QP to `state` (`rdma_init_qp_attr`): INIT from
/// [`init_attr`]; RTR and RTS of a UD QP need nothing more (RTS starts at PSN 0); those of
/// a connected QP come from `conn` (its connection and the two addresses).
pub fn for_state(
    state: QpState,
    ud: bool,
    conn: Option<(&Conn, IpAddr, IpAddr)>,
) -> Result<QpAttr, NoAttrs> {
    match (state, ud) {
        (QpState::Init, _) => Ok(init_attr(ud)),
        (QpState::Rtr | QpState::Rts, true) => Ok(QpAttr {
            state: Some(state),
            sq_psn: (state == QpState::Rts).then_some(Psn::new(0)),
            ..Default::default()
        }),
        (QpState::Rtr | QpState::Rts, false) => {
            let (c, local, peer) = conn.ok_or(NoAttrs::NoConnection)?;
            Ok(if state == QpState::Rtr {
                rtr_attr(local, peer, c)
            } else {
                rts_attr(c)
            })
        }
        _ => Err(NoAttrs::NotAMove),
    }
}

/// The GID of an IP address (an IPv4 address's is its mapped form).
pub fn gid_of(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req() -> ReqRepr {
        ReqRepr {
            local_qpn: 0x11,
            responder_resources: 4,
            initiator_depth: 2,
            starting_psn: 100,
            retry_count: 5,
            path_mtu: Mtu::M1024 as u8,
            primary: path(
                "10.0.0.1".parse().unwrap(),
                "10.0.0.2".parse().unwrap(),
                0x20,
                Some(16),
            ),
            ..ReqRepr::default()
        }
    }

    const OFFER: Offer = Offer {
        responder_resources: 8,
        initiator_depth: 8,
        retry_count: 6,
        rnr_retry_count: 9,
    };

    /// Both sides derive one connection from the REQ and REP: each sends from the PSN the
    /// other expects, at the smaller MTU, with no more READs outstanding than the other
    /// answers, and with the REQ's traffic class.
    #[test]
    fn both_sides_agree_on_the_connection() {
        let req = req();
        let rep = RepRepr {
            local_qpn: 0x22,
            starting_psn: 200,
            responder_resources: 3,
            rnr_retry_count: 7,
            ..RepRepr::default()
        };
        let a = active_conn(&req, &rep, &OFFER, Mtu::M4096);
        let p = passive_conn(&req, &OFFER, 200, None, Mtu::M4096);
        assert_eq!((a.dest_qpn, a.sq_psn, a.rq_psn), (0x22, 200, 100));
        assert_eq!((p.dest_qpn, p.sq_psn, p.rq_psn), (0x11, 100, 200));
        assert_eq!((a.mtu, p.mtu), (Mtu::M1024, Mtu::M1024));
        assert_eq!((a.rd_atomic, p.rd_atomic), (3, 4));
        assert_eq!(
            (a.timeout, p.timeout, a.tclass, p.tclass),
            (16, 16, 0x20, 0x20)
        );
        assert_eq!(p.rnr_retry, 7, "at most 7");
        assert_eq!(passive_conn(&req, &OFFER, 1, Some(3), Mtu::M512).timeout, 3);
        assert_eq!(
            passive_conn(&req, &OFFER, 1, None, Mtu::M512).mtu,
            Mtu::M512
        );
    }

    /// INIT has attributes for any QP, RTR and RTS of a connected one only with its
    /// connection; RESET and the others have none.
    #[test]
    fn attributes_per_state() {
        assert_eq!(init_attr(false).access_flags, Some(ALL_ACCESS));
        assert_eq!(init_attr(true).qkey, Some(RDMA_UDP_QKEY));
        assert_eq!(
            for_state(QpState::Rtr, false, None),
            Err(NoAttrs::NoConnection)
        );
        assert_eq!(
            for_state(QpState::Reset, false, None),
            Err(NoAttrs::NotAMove)
        );
        let ud = for_state(QpState::Rts, true, None).unwrap();
        assert_eq!(ud.sq_psn, Some(Psn::new(0)));
        let c = passive_conn(&req(), &OFFER, 7, None, Mtu::M4096);
        let l: IpAddr = "10.0.0.2".parse().unwrap();
        let p: IpAddr = "10.0.0.1".parse().unwrap();
        let rtr = for_state(QpState::Rtr, false, Some((&c, l, p))).unwrap();
        assert_eq!(rtr.dest_qpn, Some(Qpn::new(0x11)));
        assert_eq!(rtr.rq_psn, Some(Psn::new(7)));
        assert_eq!(gid_of(l), "::ffff:10.0.0.2".parse::<Ipv6Addr>().unwrap());
    }
}
