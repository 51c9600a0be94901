//! The check the responder fuzz target and its tests share. Not a stable API.
//!
//! [`responder`] feeds a sequence of arbitrary packets to a QP with registered memory and
//! asserts what must hold whatever arrives: no panic; every write lands inside a registered
//! region of the QP's protection domain that allows it (checked by an independent audit of
//! every call the engine makes); a region without REMOTE_WRITE, or in another protection
//! domain, is never changed; and everything the QP sends parses, with a valid ICRC.

use crate::memory::{Access, AtomicOp, MemError, Memory, Pd, SimMemory};
use crate::qp::{QpConfig, QueuePair, icrc_for};
use crate::state::QpAttr;
use crate::types::*;
use softrdma_wire::{IbPacket, Psn, Qpn};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};

/// One registered region as the audit knows it.
#[derive(Debug, Clone, Copy)]
struct Known {
    key: u32,
    pd: Pd,
    addr: u64,
    len: u64,
    access: AccessFlags,
}

/// Regions of the fuzzed responder: read-write, read-only, receive buffers, another PD.
const REGIONS: [Known; 4] = [
    Known {
        key: 0x100,
        pd: Pd(1),
        addr: 0x1000,
        len: 4096,
        access: AccessFlags::all(),
    },
    Known {
        key: 0x200,
        pd: Pd(1),
        addr: 0x3000,
        len: 4096,
        access: AccessFlags::REMOTE_READ,
    },
    Known {
        key: 0x300,
        pd: Pd(1),
        addr: 0x5000,
        len: 4096,
        access: AccessFlags::LOCAL_WRITE,
    },
    Known {
        key: 0x400,
        pd: Pd(2),
        addr: 0x1000,
        len: 4096,
        access: AccessFlags::all(),
    },
];

/// Memory that checks every successful access against its own table before passing it on.
struct Audit {
    inner: SimMemory,
    violations: Mutex<Vec<String>>,
}

impl Audit {
    fn audit(&self, pd: Pd, key: u32, addr: u64, len: u64, access: Access) {
        let ok = REGIONS.iter().any(|r| {
            r.key == key
                && r.pd == pd
                && addr >= r.addr
                && addr + len <= r.addr + r.len
                && r.access.contains(access.required())
        });
        if !ok {
            self.violations
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(format!(
                    "{access:?} of {len} bytes at {addr:#x} with key {key:#x} in {pd:?}"
                ));
        }
    }
}

impl Memory for Audit {
    fn check(&self, pd: Pd, key: u32, addr: u64, len: u64, access: Access) -> Result<(), MemError> {
        self.inner.check(pd, key, addr, len, access)
    }
    fn read(
        &self,
        pd: Pd,
        key: u32,
        addr: u64,
        buf: &mut [u8],
        access: Access,
    ) -> Result<(), MemError> {
        self.inner.read(pd, key, addr, buf, access)
    }
    fn write(
        &self,
        pd: Pd,
        key: u32,
        addr: u64,
        data: &[u8],
        access: Access,
    ) -> Result<(), MemError> {
        let r = self.inner.write(pd, key, addr, data, access);
        if r.is_ok() {
            self.audit(pd, key, addr, data.len() as u64, access);
        }
        r
    }
    fn atomic(&self, pd: Pd, key: u32, addr: u64, op: AtomicOp) -> Result<u64, MemError> {
        let r = self.inner.atomic(pd, key, addr, op);
        if r.is_ok() {
            self.audit(pd, key, addr, 8, Access::RemoteAtomic);
        }
        r
    }
}

/// Splits fuzz input into a transport choice and length-prefixed packets.
pub fn packets(data: &[u8]) -> (QpType, Vec<&[u8]>) {
    let qp_type = match data.first().copied().unwrap_or(0) % 3 {
        0 => QpType::Rc,
        1 => QpType::Uc,
        _ => QpType::Ud,
    };
    let mut out = Vec::new();
    let mut rest = data.get(1..).unwrap_or(&[]);
    while rest.len() >= 2 {
        let n = usize::from(u16::from_be_bytes([rest[0], rest[1]]));
        rest = &rest[2..];
        let n = n.min(rest.len());
        out.push(&rest[..n]);
        rest = &rest[n..];
    }
    (qp_type, out)
}

/// Encodes packets in the format [`packets`] reads.
pub fn encode(qp_type: QpType, pkts: &[Vec<u8>]) -> Vec<u8> {
    let mut out = vec![match qp_type {
        QpType::Rc => 0,
        QpType::Uc => 1,
        QpType::Ud => 2,
    }];
    for p in pkts {
        out.extend_from_slice(&(p.len() as u16).to_be_bytes());
        out.extend_from_slice(p);
    }
    out
}

const ME: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
const PEER: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));

/// Runs the packets in `data` into a responder and checks the invariants; panics on a
/// violation.
pub fn responder(data: &[u8]) {
    let (qp_type, pkts) = packets(data);
    let inner = SimMemory::new(0);
    for r in REGIONS {
        inner.register_with_key(r.key, r.pd, r.addr, r.len as usize, r.access);
    }
    inner.fill(0x200, 0, &[0xAB; 4096]);
    inner.fill(0x400, 0, &[0xCD; 4096]);
    let mem = Arc::new(Audit {
        inner,
        violations: Mutex::new(Vec::new()),
    });
    let mut qp = QueuePair::new(
        QpConfig {
            qpn: Qpn::new(0x11),
            qp_type,
            pd: Pd(1),
            caps: crate::QpCaps::default(),
            sq_sig_all: false,
            srq: None,
            port_mtu: Mtu::M256,
            udp_sport: None,
        },
        mem.clone(),
    );
    // Expect the first packet's PSN, so that the fuzzer reaches past the sequence check.
    let first_psn = pkts
        .iter()
        .find_map(|p| IbPacket::new_checked(*p).ok())
        .map_or(Psn::new(0), |p| p.bth().psn());
    let ud = qp_type == QpType::Ud;
    let rc = qp_type == QpType::Rc;
    let attrs = [
        QpAttr {
            state: Some(QpState::Init),
            pkey_index: Some(0),
            port: Some(1),
            access_flags: (!ud).then_some(AccessFlags::all()),
            qkey: ud.then_some(0x1111_1111),
            ..Default::default()
        },
        QpAttr {
            state: Some(QpState::Rtr),
            av: (!ud).then_some(AddressVector {
                src: ME,
                dst: PEER,
                flow_label: 0,
            }),
            path_mtu: (!ud).then_some(Mtu::M256),
            dest_qpn: (!ud).then_some(Qpn::new(0x22)),
            rq_psn: (!ud).then_some(first_psn),
            max_dest_rd_atomic: rc.then_some(4),
            min_rnr_timer: rc.then_some(1),
            ..Default::default()
        },
        QpAttr {
            state: Some(QpState::Rts),
            sq_psn: Some(Psn::new(0)),
            timeout: rc.then_some(1),
            retry_cnt: rc.then_some(2),
            rnr_retry: rc.then_some(2),
            max_rd_atomic: rc.then_some(4),
            ..Default::default()
        },
    ];
    for a in &attrs {
        qp.modify(a)
            .expect("the fuzz set-up follows the modify rules");
    }
    for i in 0..8u64 {
        let _ = qp.post_recv(RecvWr {
            wr_id: i,
            sg_list: vec![Sge {
                addr: 0x5000 + i * 512,
                length: 512,
                lkey: 0x300,
            }],
        });
    }
    let mut now = Instant::ZERO;
    let mut buf = Vec::new();
    for p in pkts {
        if let Ok(pkt) = IbPacket::new_checked(p) {
            qp.handle_packet(now, PEER, ME, &pkt);
        }
        while let Some(t) = qp.poll_transmit(now, &mut buf) {
            let out = &buf[..t.len];
            let parsed = IbPacket::new_checked(out).expect("what the QP sends parses");
            let n = out.len();
            let wire = u32::from_le_bytes([out[n - 4], out[n - 3], out[n - 2], out[n - 1]]);
            assert_eq!(icrc_for(t.src, t.dst, t.src_port, &out[..n - 4]), wire);
            assert!(
                parsed.info().is_response || !rc,
                "a responder only responds"
            );
        }
        now = now.add(core::time::Duration::from_micros(100));
        if qp.poll_timeout().is_some_and(|t| t <= now) {
            qp.handle_timeout(now);
        }
        while qp.poll_completion().is_some() {}
    }
    let v = mem.violations.lock().unwrap_or_else(|e| e.into_inner());
    assert!(v.is_empty(), "writes outside what was allowed: {v:?}");
    assert_eq!(
        mem.inner.snapshot(0x200),
        Some(vec![0xAB; 4096]),
        "read-only region changed"
    );
    assert_eq!(
        mem.inner.snapshot(0x400),
        Some(vec![0xCD; 4096]),
        "other PD's region changed"
    );
}
