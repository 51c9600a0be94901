//! softrdma's verbs types to and from rdma-core's C structs: what the kernel backend hands
//! the system's libibverbs and reads back from it. Pure functions, no I/O; the drop-in
//! (`softrdma-capi`) shares the QP attributes' one (`to_ibv_qp_attr`).

use softrdma_abi::*;
use softrdma_proto::{
    Completion, Mtu, Payload, QpAttr, QpState, QpType, RecvWr, SendFlags, SendOp, SendWr, WcFlags,
    WcOpcode, WcStatus,
};
use softrdma_wire::Qpn;
use std::ffi::{c_int, c_uint};
use std::net::{IpAddr, Ipv6Addr};

/// The GID a RoCE v2 packet to or from `ip` carries: the address, IPv4-mapped for IPv4.
pub fn gid_of_ip(ip: IpAddr) -> Ipv6Addr {
    match ip.to_canonical() {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    }
}

/// `enum ibv_qp_type`'s value.
pub fn qp_type(t: QpType) -> c_int {
    match t {
        QpType::Rc => IBV_QPT_RC,
        QpType::Uc => IBV_QPT_UC,
        QpType::Ud => IBV_QPT_UD,
    }
}

/// `attr` as C's `ibv_qp_attr`, with the `IBV_QP_*` mask of the attributes it sets. Unset
/// ones read as their defaults: the state RESET, `mtu`, port 1. `sgid_index` finds the
/// index of the source GID of an address vector (0 where it finds none).
pub fn to_ibv_qp_attr(
    r: &QpAttr,
    mtu: Mtu,
    sgid_index: impl Fn(IpAddr) -> Option<usize>,
) -> (ibv_qp_attr, c_int) {
    let mut m = 0;
    let mut bit = |set: bool, b: c_int| {
        if set {
            m |= b;
        }
    };
    bit(r.state.is_some(), IBV_QP_STATE);
    bit(r.access_flags.is_some(), IBV_QP_ACCESS_FLAGS);
    bit(r.pkey_index.is_some(), IBV_QP_PKEY_INDEX);
    bit(r.port.is_some(), IBV_QP_PORT);
    bit(r.qkey.is_some(), IBV_QP_QKEY);
    bit(r.av.is_some(), IBV_QP_AV);
    bit(r.path_mtu.is_some(), IBV_QP_PATH_MTU);
    bit(r.timeout.is_some(), IBV_QP_TIMEOUT);
    bit(r.retry_cnt.is_some(), IBV_QP_RETRY_CNT);
    bit(r.rnr_retry.is_some(), IBV_QP_RNR_RETRY);
    bit(r.rq_psn.is_some(), IBV_QP_RQ_PSN);
    bit(r.max_rd_atomic.is_some(), IBV_QP_MAX_QP_RD_ATOMIC);
    bit(r.min_rnr_timer.is_some(), IBV_QP_MIN_RNR_TIMER);
    bit(r.sq_psn.is_some(), IBV_QP_SQ_PSN);
    bit(r.max_dest_rd_atomic.is_some(), IBV_QP_MAX_DEST_RD_ATOMIC);
    bit(r.dest_qpn.is_some(), IBV_QP_DEST_QPN);
    let mut o = ibv_qp_attr::default();
    let state = r.state.unwrap_or(QpState::Reset);
    o.qp_state = state as c_int;
    o.cur_qp_state = state as c_int;
    o.path_mtu = r.path_mtu.unwrap_or(mtu) as c_int;
    o.path_mig_state = 0; // IBV_MIG_MIGRATED: there is no alternate path
    o.qkey = r.qkey.unwrap_or(0);
    o.rq_psn = r.rq_psn.map_or(0, |p| p.value());
    o.sq_psn = r.sq_psn.map_or(0, |p| p.value());
    o.dest_qp_num = r.dest_qpn.map_or(0, |n| n.value());
    o.qp_access_flags = r.access_flags.map_or(0, |f| f.bits());
    if let Some(av) = r.av {
        o.ah_attr = ibv_ah_attr {
            grh: ibv_global_route {
                dgid: ibv_gid {
                    raw: gid_of_ip(av.dst).octets(),
                },
                flow_label: av.flow_label,
                sgid_index: sgid_index(av.src).unwrap_or(0) as u8,
                hop_limit: 1,
                traffic_class: av.traffic_class,
            },
            is_global: 1,
            port_num: 1,
            ..Default::default()
        };
    }
    o.pkey_index = r.pkey_index.unwrap_or(0);
    o.en_sqd_async_notify = u8::from(r.en_sqd_async_notify.unwrap_or(false));
    o.max_rd_atomic = r.max_rd_atomic.unwrap_or(0);
    o.max_dest_rd_atomic = r.max_dest_rd_atomic.unwrap_or(0);
    o.min_rnr_timer = r.min_rnr_timer.unwrap_or(0);
    o.port_num = r.port.unwrap_or(1);
    o.timeout = r.timeout.unwrap_or(0);
    o.retry_cnt = r.retry_cnt.unwrap_or(0);
    o.rnr_retry = r.rnr_retry.unwrap_or(0);
    (o, m)
}

/// A send WR's C form: the opcode, flags, immediate word and the union, with the SGE list
/// left for the caller to point at (`sg_list`, `num_sge`), since its storage is theirs, and
/// a UD WR's address handle for the caller to set (the union's `ud`).
pub(super) fn send_wr_head(w: &SendWr) -> ibv_send_wr {
    let rdma = |remote_addr, rkey| ibv_wr_union {
        rdma: ibv_rdma { remote_addr, rkey },
    };
    let atomic = |remote_addr, rkey, compare_add, swap| ibv_wr_union {
        atomic: ibv_atomic {
            remote_addr,
            compare_add,
            swap,
            rkey,
        },
    };
    let none = rdma(0, 0);
    let (opcode, imm, wr) = match w.op {
        SendOp::Send => (IBV_WR_SEND, 0, none),
        SendOp::SendWithImm(i) => (IBV_WR_SEND_WITH_IMM, i.to_be(), none),
        SendOp::SendWithInv(k) => (IBV_WR_SEND_WITH_INV, k, none),
        SendOp::Write { remote_addr, rkey } => (IBV_WR_RDMA_WRITE, 0, rdma(remote_addr, rkey)),
        SendOp::WriteWithImm {
            remote_addr,
            rkey,
            imm,
        } => (
            IBV_WR_RDMA_WRITE_WITH_IMM,
            imm.to_be(),
            rdma(remote_addr, rkey),
        ),
        SendOp::Read { remote_addr, rkey } => (IBV_WR_RDMA_READ, 0, rdma(remote_addr, rkey)),
        SendOp::CompareSwap {
            remote_addr,
            rkey,
            compare,
            swap,
        } => (
            IBV_WR_ATOMIC_CMP_AND_SWP,
            0,
            atomic(remote_addr, rkey, compare, swap),
        ),
        SendOp::FetchAdd {
            remote_addr,
            rkey,
            add,
        } => (
            IBV_WR_ATOMIC_FETCH_AND_ADD,
            0,
            atomic(remote_addr, rkey, add, 0),
        ),
    };
    let mut flags = w.flags;
    if matches!(w.payload, Payload::Inline(_)) {
        flags |= SendFlags::INLINE;
    }
    ibv_send_wr {
        wr_id: w.wr_id,
        next: std::ptr::null_mut(),
        sg_list: std::ptr::null_mut(),
        num_sge: 0,
        opcode,
        // softrdma's SendFlags are IBV_SEND_FENCE, _SIGNALED, _SOLICITED, _INLINE, bit
        // for bit.
        send_flags: flags.bits() as c_uint,
        imm_data: imm,
        wr,
        xrc_remote_srqn: 0,
        _bind_or_tso: [0; 6],
    }
}

/// The SGEs of a send WR's payload (an inline payload is one SGE over its bytes, with no
/// key, as C programs post it).
pub(super) fn send_sges(p: &Payload) -> smallvec::SmallVec<[ibv_sge; 2]> {
    match p {
        Payload::Sges(s) => s
            .iter()
            .map(|s| ibv_sge {
                addr: s.addr,
                length: s.length,
                lkey: s.lkey,
            })
            .collect(),
        Payload::Inline(v) if v.is_empty() => smallvec::SmallVec::new(),
        Payload::Inline(v) => smallvec::smallvec![ibv_sge {
            addr: v.as_ptr() as u64,
            length: v.len() as u32,
            lkey: 0,
        }],
    }
}

/// The SGEs of a receive WR.
pub(super) fn recv_sges(w: &RecvWr) -> smallvec::SmallVec<[ibv_sge; 2]> {
    w.sg_list
        .iter()
        .map(|s| ibv_sge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        })
        .collect()
}

/// `enum ibv_wc_status` in order of value.
const STATUSES: [WcStatus; 22] = [
    WcStatus::Success,
    WcStatus::LocLenErr,
    WcStatus::LocQpOpErr,
    WcStatus::LocEecOpErr,
    WcStatus::LocProtErr,
    WcStatus::WrFlushErr,
    WcStatus::MwBindErr,
    WcStatus::BadRespErr,
    WcStatus::LocAccessErr,
    WcStatus::RemInvReqErr,
    WcStatus::RemAccessErr,
    WcStatus::RemOpErr,
    WcStatus::RetryExcErr,
    WcStatus::RnrRetryExcErr,
    WcStatus::LocRddViolErr,
    WcStatus::RemInvRdReqErr,
    WcStatus::RemAbortErr,
    WcStatus::InvEecnErr,
    WcStatus::InvEecStateErr,
    WcStatus::FatalErr,
    WcStatus::RespTimeoutErr,
    WcStatus::GeneralErr,
];

/// A completion from rdma-core's `ibv_wc`. A status or opcode outside the enums (a
/// provider newer than these tables) reads as `GeneralErr`, and as `Send`.
pub(super) fn completion(w: &ibv_wc) -> Completion {
    let status = usize::try_from(w.status)
        .ok()
        .and_then(|s| STATUSES.get(s))
        .copied()
        .unwrap_or(WcStatus::GeneralErr);
    let opcode = match w.opcode {
        1 => WcOpcode::RdmaWrite,
        2 => WcOpcode::RdmaRead,
        3 => WcOpcode::CompSwap,
        4 => WcOpcode::FetchAdd,
        5 => WcOpcode::BindMw,
        6 => WcOpcode::LocalInv,
        128 => WcOpcode::Recv,
        129 => WcOpcode::RecvRdmaWithImm,
        _ => WcOpcode::Send,
    };
    let wc_flags = WcFlags::from_bits_truncate(w.wc_flags);
    Completion {
        wr_id: w.wr_id,
        status,
        opcode,
        byte_len: w.byte_len,
        imm_data: if wc_flags.contains(WcFlags::WITH_IMM) {
            u32::from_be(w.imm_data)
        } else {
            0
        },
        invalidated_rkey: if wc_flags.contains(WcFlags::WITH_INV) {
            w.imm_data
        } else {
            0
        },
        qp_num: Qpn::new(w.qp_num & 0xff_ffff),
        src_qp: Qpn::new(w.src_qp & 0xff_ffff),
        wc_flags,
        solicited: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use softrdma_proto::{AccessFlags, AddressVector, sg};
    use softrdma_wire::Psn;

    #[test]
    fn statuses_have_their_c_values() {
        for (i, s) in STATUSES.iter().enumerate() {
            assert_eq!(*s as usize, i, "{s}");
        }
    }

    #[test]
    fn a_write_with_immediate_goes_out_in_network_order() {
        let w = SendWr::signaled(
            7,
            SendOp::WriteWithImm {
                remote_addr: 0x1000,
                rkey: 0x55,
                imm: 0x0102_0304,
            },
            Payload::Sges(sg![softrdma_proto::Sge {
                addr: 0x2000,
                length: 8,
                lkey: 3
            }]),
        );
        let c = send_wr_head(&w);
        assert_eq!(c.opcode, IBV_WR_RDMA_WRITE_WITH_IMM);
        assert_eq!(c.imm_data, 0x0102_0304u32.to_be());
        assert_eq!(c.send_flags, 2, "IBV_SEND_SIGNALED");
        // SAFETY: a WRITE's union member is `rdma`.
        let r = unsafe { c.wr.rdma };
        assert_eq!((r.remote_addr, r.rkey), (0x1000, 0x55));
        assert_eq!(send_sges(&w.payload).len(), 1);
    }

    #[test]
    fn an_inline_payload_is_one_keyless_sge_flagged_inline() {
        let w = SendWr::signaled(1, SendOp::Send, Payload::Inline(vec![1, 2, 3]));
        let c = send_wr_head(&w);
        assert_eq!(c.send_flags & 8, 8, "IBV_SEND_INLINE");
        let s = send_sges(&w.payload);
        assert_eq!((s[0].length, s[0].lkey), (3, 0));
    }

    #[test]
    fn a_received_immediate_reads_in_host_order() {
        let w = ibv_wc {
            wr_id: 9,
            status: 0,
            opcode: 129,
            byte_len: 4,
            imm_data: 0xaabb_ccddu32.to_be(),
            qp_num: 0x11,
            wc_flags: 2,
            ..Default::default()
        };
        let c = completion(&w);
        assert_eq!(c.opcode, WcOpcode::RecvRdmaWithImm);
        assert_eq!(c.imm_data, 0xaabb_ccdd);
        assert_eq!(c.qp_num, Qpn::new(0x11));
        let bad = completion(&ibv_wc {
            status: 99,
            opcode: 77,
            ..Default::default()
        });
        assert_eq!(
            (bad.status, bad.opcode),
            (WcStatus::GeneralErr, WcOpcode::Send)
        );
    }

    #[test]
    fn an_rtr_modify_sets_the_mask_and_the_path() {
        let a = QpAttr {
            state: Some(QpState::Rtr),
            path_mtu: Some(Mtu::M1024),
            dest_qpn: Some(Qpn::new(0x12)),
            rq_psn: Some(Psn::new(5)),
            max_dest_rd_atomic: Some(1),
            min_rnr_timer: Some(12),
            access_flags: Some(AccessFlags::REMOTE_WRITE),
            av: Some(AddressVector {
                src: "10.0.0.1".parse().unwrap(),
                dst: "10.0.0.2".parse().unwrap(),
                flow_label: 0,
                traffic_class: 0,
            }),
            ..Default::default()
        };
        let (c, m) = to_ibv_qp_attr(&a, Mtu::M4096, |_| Some(1));
        assert_eq!(
            m,
            IBV_QP_STATE
                | IBV_QP_PATH_MTU
                | IBV_QP_DEST_QPN
                | IBV_QP_RQ_PSN
                | IBV_QP_MAX_DEST_RD_ATOMIC
                | IBV_QP_MIN_RNR_TIMER
                | IBV_QP_ACCESS_FLAGS
                | IBV_QP_AV
        );
        assert_eq!((c.qp_state, c.path_mtu, c.dest_qp_num), (2, 3, 0x12));
        assert_eq!(c.ah_attr.grh.sgid_index, 1);
        assert_eq!(
            Ipv6Addr::from(c.ah_attr.grh.dgid.raw),
            "::ffff:10.0.0.2".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(c.ah_attr.is_global, 1);
    }
}
