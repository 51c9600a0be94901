//! Drawing a workload's operations from its mix and building the WR each one posts.
//!
//! Owns no state; reads the model's layout from `workload/mod.rs`.

use super::*;

pub(super) fn pick_kind(cfg: &WorkloadConfig, rng: &mut ChaCha8Rng) -> Kind {
    let atomic = |rng: &mut ChaCha8Rng| {
        if rng.random_bool(0.5) {
            Kind::FetchAdd
        } else {
            Kind::CompareSwap
        }
    };
    match (cfg.transport, cfg.mix) {
        (QpType::Ud, _) => Kind::Send,
        (_, OpMix::Send) => Kind::Send,
        (_, OpMix::Write) => Kind::Write,
        (QpType::Rc, OpMix::Read) => Kind::Read,
        (QpType::Rc, OpMix::Atomic) => atomic(rng),
        (QpType::Rc, OpMix::Mixed) => match rng.random_range(0..4) {
            0 => Kind::Send,
            1 => Kind::Write,
            2 => Kind::Read,
            _ => atomic(rng),
        },
        // UC: READ and atomics do not exist; use SEND and WRITE.
        (_, _) => {
            if rng.random_bool(0.5) {
                Kind::Send
            } else {
                Kind::Write
            }
        }
    }
}

pub(super) fn make_wr(
    cfg: &WorkloadConfig,
    l: &Layout,
    i: u32,
    k: usize,
    op: &Op,
    ka: u32,
    kb: u32,
) -> SendWr {
    let src = l.data(i, op.slot);
    let payload = |addr: u64, len: u32| {
        Payload::Sges(crate::sg![Sge {
            addr,
            length: len,
            lkey: ka,
        }])
    };
    let imm = (i << 24) ^ k as u32;
    let (op_, payload) = match op.kind {
        Kind::Send => (
            if op.imm {
                SendOp::SendWithImm(imm)
            } else {
                SendOp::Send
            },
            if op.size <= 64 && !op.imm {
                Payload::Inline(pattern(i, k as u64, op.size as usize))
            } else {
                payload(src, op.size)
            },
        ),
        Kind::Write => {
            let remote_addr = l.data(i, unique_slot(cfg, op));
            let w = if op.imm {
                SendOp::WriteWithImm {
                    remote_addr,
                    rkey: kb,
                    imm,
                }
            } else {
                SendOp::Write {
                    remote_addr,
                    rkey: kb,
                }
            };
            (w, payload(src, op.size))
        }
        Kind::Read => (
            SendOp::Read {
                remote_addr: l.read(i, op.slot),
                rkey: kb,
            },
            payload(l.read(i, op.slot), op.size),
        ),
        Kind::FetchAdd => (
            SendOp::FetchAdd {
                remote_addr: l.counter(i),
                rkey: kb,
                add: op.add_or_swap,
            },
            payload(l.atomic(i, op.slot), 8),
        ),
        Kind::CompareSwap => (
            SendOp::CompareSwap {
                remote_addr: l.counter(i),
                rkey: kb,
                compare: op.compare,
                swap: op.add_or_swap,
            },
            payload(l.atomic(i, op.slot), 8),
        ),
    };
    SendWr {
        ud: (cfg.transport == QpType::Ud).then_some(UdDest {
            src: IP_A,
            ip: IP_B,
            qpn: Qpn::new(QPN_B + i),
            qkey: ConnectOpts::default().qkey,
            traffic_class: 0,
        }),
        ..SendWr::signaled(k as u64, op_, payload)
    }
}

fn unique_slot(_cfg: &WorkloadConfig, op: &Op) -> u64 {
    op.slot
}
