//! The checks the fuzz targets and their tests share. Not a stable API.
//!
//! [`requester`] feeds an RC requester with posted SENDs, WRITEs, READs and atomics an
//! adversarial stream of ACKs, NAKs, RNR NAKs, READ responses, atomic ACKs and timer firings,
//! and asserts: no panic; no completion for a WR that was not posted, none twice, and all in
//! the order the WRs were posted (IBTA 10.8.5: a send queue completes in order); and
//! everything it sends is a request that parses, with a valid ICRC.
//!
//! [`responder`] feeds a sequence of arbitrary packets to a QP with registered memory and
//! asserts what must hold whatever arrives: no panic; every write lands inside a registered
//! region of the QP's protection domain that allows it (checked by an independent audit of
//! every call the engine makes); a region without REMOTE_WRITE, or in another protection
//! domain, is never changed; and everything the QP sends parses, with a valid ICRC.

use crate::memory::{Access, AtomicOp, MemError, Memory, Pd, SimMemory};
use crate::qp::{QueuePair, icrc_for};
use crate::sim::ConnectOpts;
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

/// The fuzzed QP (number 0x11, peer 0x22 at `PEER`, MTU 256, protection domain 1), brought
/// to RTS with `rq_psn` and `sq_psn`, and for RC with short timeouts and two retries.
fn fuzzed_qp(
    qp_type: QpType,
    mem: Arc<dyn Memory>,
    sq_sig_all: bool,
    rq_psn: Psn,
    sq_psn: Psn,
) -> QueuePair {
    let opts = ConnectOpts {
        qp_type,
        mtu: Mtu::M256,
        timeout: 1,
        retry_cnt: 2,
        rnr_retry: 2,
        min_rnr_timer: 1,
        max_rd_atomic: 4,
        sq_psn: 0,
        qkey: 0x1111_1111,
        access: AccessFlags::all(),
        caps: crate::QpCaps::default(),
    };
    let mut cfg = opts.qp_config(Qpn::new(0x11));
    cfg.sq_sig_all = sq_sig_all;
    let av = AddressVector {
        src: ME,
        dst: PEER,
        flow_label: 0,
        traffic_class: 0,
    };
    opts.rts_qp(cfg, mem, av, Qpn::new(0x22), rq_psn, sq_psn)
}

/// What a QP sent, checked: it parses and its ICRC is right.
fn sent<'b>(t: &crate::qp::Transmit, buf: &'b [u8]) -> IbPacket<&'b [u8]> {
    let out = &buf[..t.len];
    let n = out.len();
    let wire = u32::from_le_bytes([out[n - 4], out[n - 3], out[n - 2], out[n - 1]]);
    assert_eq!(icrc_for(t.src, t.dst, t.src_port, &out[..n - 4]), wire);
    IbPacket::new_checked(out).expect("what the QP sends parses")
}
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
    // Expect the first packet's PSN, so that the fuzzer reaches past the sequence check.
    let first_psn = pkts
        .iter()
        .find_map(|p| IbPacket::new_checked(*p).ok())
        .map_or(Psn::new(0), |p| p.bth().psn());
    let mut qp = fuzzed_qp(qp_type, mem.clone(), false, first_psn, Psn::new(0));
    let rc = qp_type == QpType::Rc;
    for i in 0..8u64 {
        let _ = qp.post_recv(RecvWr {
            wr_id: i,
            sg_list: crate::sg![Sge {
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
            let parsed = sent(&t, &buf);
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

/// WRs the requester fuzz check posts, by index: SENDs, a WRITE, READs and atomics, each a
/// few packets long at the MTU of 256 bytes.
fn template(i: u8, wr_id: u64) -> SendWr {
    let local = |addr: u64, length: u32| {
        Payload::Sges(crate::sg![Sge {
            addr,
            length,
            lkey: 0x100,
        }])
    };
    let (op, payload) = match i % 8 {
        0 => (SendOp::Send, local(0x1000, 100)),
        1 => (SendOp::Send, local(0x1000, 1000)),
        2 => (
            SendOp::Write {
                remote_addr: 0x9000,
                rkey: 0x77,
            },
            local(0x1400, 600),
        ),
        3 => (
            SendOp::Read {
                remote_addr: 0x9000,
                rkey: 0x77,
            },
            local(0x1800, 700),
        ),
        4 => (
            SendOp::CompareSwap {
                remote_addr: 0x9000,
                rkey: 0x77,
                compare: 1,
                swap: 2,
            },
            local(0x1C00, 8),
        ),
        5 => (
            SendOp::FetchAdd {
                remote_addr: 0x9008,
                rkey: 0x77,
                add: 3,
            },
            local(0x1C08, 8),
        ),
        6 => (SendOp::Send, Payload::Sges(crate::sg![])),
        _ => (
            SendOp::Read {
                remote_addr: 0x9100,
                rkey: 0x77,
            },
            local(0x1D00, 100),
        ),
    };
    SendWr::signaled(wr_id, op, payload)
}

/// Runs the stream in `data` into an RC requester and checks the invariants; panics on a
/// violation. Returns the completions' WR IDs and statuses, in order (for tests that check
/// what the streams reach).
///
/// Format: a byte whose bits choose which of eight WR templates are posted first (none: a
/// READ and a SEND), then events of five bytes `[kind, psn, a, b, c]`. A response's PSN is
/// one the requester has used (`psn` picks it), or, with its two top bits set, one near the
/// first. Kinds: ACK, sequence NAK, RNR NAK, another NAK (or a reserved syndrome), READ
/// response (`a` picks first/middle/last/only, `b` and `c` the length), atomic ACK, time
/// passing (`a` × 37 µs, firing the timers that are due), and posting another WR (`a`).
pub fn requester(data: &[u8]) -> Vec<(u64, WcStatus)> {
    use softrdma_wire::{
        AethRepr, AtomicAckEthRepr, BthRepr, ExtHeaders, IbRepr, Msn, NakCode, Opcode, Syndrome,
    };
    let inner = SimMemory::new(0);
    inner.register_with_key(0x100, Pd(1), 0x1000, 0x2000, AccessFlags::all());
    let mem: Arc<dyn Memory> = Arc::new(inner);
    let sq_psn = Psn::new(0xFF_FFF0);
    let mut qp = fuzzed_qp(QpType::Rc, mem, true, Psn::new(0), sq_psn);
    let mut posted: Vec<u64> = Vec::new();
    let mut done = 0usize;
    let mut seen = Vec::new();
    let post = |qp: &mut QueuePair, posted: &mut Vec<u64>, t: u8| {
        let id = 1000 + posted.len() as u64;
        if qp.post_send(template(t, id)).is_ok() {
            posted.push(id);
        }
    };
    let first = data.first().copied().unwrap_or(0);
    let first = if first == 0 { 0b1010 } else { first };
    for t in 0..8u8 {
        if first & (1 << t) != 0 {
            post(&mut qp, &mut posted, t);
        }
    }
    let mut now = Instant::ZERO;
    let mut buf = Vec::new();
    // PSNs used so far, as an offset from `sq_psn` one past the highest.
    let mut used = 0u32;
    let mut step =
        |qp: &mut QueuePair, now: Instant, used: &mut u32, done: &mut usize, posted: &[u64]| {
            while let Some(t) = qp.poll_transmit(now, &mut buf) {
                let pkt = sent(&t, &buf);
                assert!(!pkt.info().is_response, "a requester only requests");
                let off = pkt.bth().psn().diff(sq_psn);
                assert!(off >= 0, "a PSN before the first: {off}");
                // A READ request holds the PSNs of all its responses.
                let span = pkt
                    .reth()
                    .filter(|_| pkt.info().operation == softrdma_wire::Operation::ReadRequest)
                    .map_or(1, |r| r.len().div_ceil(256).max(1));
                *used = (*used).max(off as u32 + span);
            }
            while let Some(wc) = qp.poll_completion() {
                assert!(
                    *done < posted.len(),
                    "a completion for a WR never posted: {wc:?}, after {done} of {posted:?}"
                );
                assert_eq!(
                    wc.wr_id, posted[*done],
                    "completions out of order or twice: {wc:?}"
                );
                *done += 1;
                seen.push((wc.wr_id, wc.status));
            }
        };
    step(&mut qp, now, &mut used, &mut done, &posted);
    for ev in data.get(1..).unwrap_or(&[]).chunks_exact(5) {
        let (kind, sel, a, b, c) = (ev[0], ev[1], ev[2], ev[3], ev[4]);
        let psn = if sel & 0xC0 == 0xC0 {
            sq_psn.add(u32::from(sel & 0x3F)).sub(8)
        } else {
            sq_psn.add(u32::from(sel) % (used + 2))
        };
        let mut ext = ExtHeaders::default();
        let mut payload = Vec::new();
        let aeth = |syndrome| {
            Some(AethRepr {
                syndrome,
                msn: Msn::new(u32::from(b)),
            })
        };
        let opcode = match kind % 8 {
            0 => {
                ext.aeth = aeth(Syndrome::Ack { credits: a & 0x1F });
                Opcode::RC_ACKNOWLEDGE
            }
            1 => {
                ext.aeth = aeth(Syndrome::Nak(NakCode::PsnSequenceError));
                Opcode::RC_ACKNOWLEDGE
            }
            2 => {
                ext.aeth = aeth(Syndrome::RnrNak { timer: a & 0x1F });
                Opcode::RC_ACKNOWLEDGE
            }
            3 => {
                ext.aeth = aeth(Syndrome::from_u8(if a & 0x80 != 0 {
                    a
                } else {
                    0x60 | (a % 8)
                }));
                Opcode::RC_ACKNOWLEDGE
            }
            4 => {
                let len = if b & 1 == 0 {
                    256
                } else {
                    usize::from(c) % 257
                };
                payload = vec![0x5A; len];
                let (op, with_aeth) = match a % 4 {
                    0 => (0x0D, true),
                    1 => (0x0E, false),
                    2 => (0x0F, true),
                    _ => (0x10, true),
                };
                if with_aeth {
                    ext.aeth = aeth(Syndrome::ACK_UNLIMITED);
                }
                Opcode(op)
            }
            5 => {
                ext.aeth = aeth(Syndrome::ACK_UNLIMITED);
                ext.atomic_ack_eth = Some(AtomicAckEthRepr {
                    orig: u64::from_be_bytes([a, b, c, a, b, c, a, b]),
                });
                Opcode(0x12)
            }
            6 => {
                now = now.add(core::time::Duration::from_micros(u64::from(a) * 37 + 1));
                if qp.poll_timeout().is_some_and(|t| t <= now) {
                    qp.handle_timeout(now);
                }
                step(&mut qp, now, &mut used, &mut done, &posted);
                continue;
            }
            _ => {
                post(&mut qp, &mut posted, a);
                step(&mut qp, now, &mut used, &mut done, &posted);
                continue;
            }
        };
        let ib = IbRepr {
            bth: BthRepr::new(opcode, Qpn::new(0x11), psn),
            ext,
            payload: &payload,
        };
        let mut pkt = vec![0u8; ib.buffer_len()];
        if ib.emit(&mut pkt).is_ok()
            && let Ok(p) = IbPacket::new_checked(&pkt[..])
        {
            qp.handle_packet(now, PEER, ME, &p);
        }
        step(&mut qp, now, &mut used, &mut done, &posted);
    }
    seen
}

/// Drives a CM agent with a byte string read as a stream of steps, and checks what must
/// hold whatever the peer sends and the consumer does: no panic, every MAD the agent
/// sends parses, and once time runs far ahead with nothing more arriving, only
/// established connections are left (every exchange under way ended, every TIMEWAIT
/// passed). Each step is an opcode byte and its arguments:
///
/// * 0: connect (the next byte picks the REQ's timeout and retry count);
/// * 1: listen on the next byte's service (ports 0-3);
/// * 2: a MAD from the peer: an attribute byte and up to 232 bytes of message
///   (length-prefixed by one byte; the MAD's communication IDs are taken from the
///   agent's connections when the next byte says so, so that states are reached);
/// * 3: time runs on by the next byte's milliseconds;
/// * 4: a consumer verb (next byte) on the connection the byte after picks;
/// * 5: the agent's last MAD comes back to it as if the peer had sent it (a duplicate).
pub fn cm_agent(data: &[u8]) {
    use crate::cm::{CmAgent, CmConfig, CmEvent, CmState, CommId};
    use softrdma_wire::cm::{CmMad, RepRepr, ReqRepr, ip_service_id, port_space};
    let mut agent: CmAgent<u8> = CmAgent::new(
        CmConfig {
            ca_guid: 0xA,
            ..CmConfig::default()
        },
        7,
    );
    let mut now = Instant::from_nanos(1);
    let mut ids: Vec<CommId> = vec![];
    let mut last: Option<[u8; 256]> = None;
    let service = |b: u8| ip_service_id(port_space::TCP, u16::from(b % 4));
    let req = |b: u8| ReqRepr {
        service_id: service(b),
        local_qpn: 0x100 + u32::from(b),
        responder_resources: 1,
        initiator_depth: 1,
        remote_cm_response_timeout: b % 20,
        starting_psn: 1,
        local_cm_response_timeout: b % 20,
        retry_count: 7,
        pkey: 0xFFFF,
        path_mtu: 3,
        rnr_retry_count: 7,
        max_cm_retries: b % 16,
        ..ReqRepr::default()
    };
    let drain = |agent: &mut CmAgent<u8>, ids: &mut Vec<CommId>, last: &mut Option<[u8; 256]>| {
        while let Some((_, mad)) = agent.poll_transmit() {
            let b = mad.to_bytes();
            assert_eq!(CmMad::parse(&b), Ok(mad), "the agent sends what parses");
            *last = Some(b);
        }
        while let Some(ev) = agent.poll_event() {
            if let CmEvent::ReqReceived { id, .. } | CmEvent::SidrReqReceived { id, .. } = ev {
                ids.push(id);
            }
        }
    };
    let mut rest = data;
    while let Some((&op, tail)) = rest.split_first() {
        rest = tail;
        let mut arg = || {
            let (&b, t) = rest.split_first().unwrap_or((&0, &[]));
            rest = t;
            b
        };
        match op % 6 {
            0 => {
                let b = arg();
                ids.push(agent.connect(now, 1, req(b)));
            }
            1 => {
                let _ = agent.listen(service(arg()));
            }
            2 => {
                let attr = 0x0010 + u16::from(arg() % 12);
                let n = usize::from(arg()).min(232);
                let pick = arg();
                let mut mad = [0u8; 256];
                mad[..4].copy_from_slice(&[1, 7, 2, 3]);
                mad[16..18].copy_from_slice(&attr.to_be_bytes());
                let take = n.min(rest.len());
                mad[24..24 + take].copy_from_slice(&rest[..take]);
                rest = &rest[take..];
                if pick & 1 == 1 && !ids.is_empty() {
                    // Address one of our connections (as the receiver's ID, where most
                    // messages keep it).
                    let id = ids[usize::from(pick >> 1) % ids.len()];
                    mad[28..32].copy_from_slice(&id.to_be_bytes());
                }
                agent.handle_mad(now, 1, &mad);
            }
            3 => {
                now = now.add(std::time::Duration::from_millis(u64::from(arg())));
                agent.handle_timeout(now);
            }
            4 => {
                let verb = arg();
                let pick = arg();
                let Some(&id) = ids.get(usize::from(pick) % ids.len().max(1)) else {
                    continue;
                };
                let rep = RepRepr {
                    local_qpn: 0x200,
                    starting_psn: 2,
                    responder_resources: 1,
                    initiator_depth: 1,
                    target_ack_delay: 15,
                    rnr_retry_count: 7,
                    ..RepRepr::default()
                };
                // Misuse is refused with an error, never a panic.
                let _ = match verb % 7 {
                    0 => agent.accept(now, id, rep),
                    1 => agent.reject(now, id, 28, &[1, 2, 3]),
                    2 => agent.ready_to_use(id, &[]),
                    3 => agent.disconnect(now, id, &[]),
                    4 => agent.mra(id, verb >> 3),
                    5 => agent.establish(id),
                    _ => {
                        agent.destroy(now, id);
                        Ok(())
                    }
                };
            }
            _ => {
                if let Some(b) = last {
                    agent.handle_mad(now, 1, &b);
                }
            }
        }
        drain(&mut agent, &mut ids, &mut last);
    }
    // Nothing more arrives: every exchange under way ends within its retries (at most 16
    // sends and a TIMEWAIT per connection, however many timers share an instant).
    for _ in 0..(ids.len() + 1) * 40 {
        let Some(t) = agent.poll_timeout() else { break };
        now = now.max(t);
        agent.handle_timeout(now);
        drain(&mut agent, &mut ids, &mut last);
    }
    assert_eq!(
        agent.poll_timeout(),
        None,
        "timers left after the exchanges ended"
    );
    for id in ids {
        if let Some(s) = agent.state(id) {
            assert!(
                matches!(
                    s,
                    CmState::Established
                        | CmState::ReqRcvd
                        | CmState::MraReqSent
                        | CmState::RepRcvd
                        | CmState::MraRepSent
                        | CmState::DreqRcvd
                ),
                "connection {id:#x} left in {s:?}, which waits on the peer"
            );
        }
    }
}
