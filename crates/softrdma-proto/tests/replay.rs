//! Replays the RC conversations of real rxe captures against our engine.
//!
//! Responder: rxe's request packets go into our QP, set up with the capture's QPNs, PSNs,
//! keys, addresses and memory contents; our ACKs, READ responses and atomic ACKs must equal
//! rxe's byte for byte. Requester: the same work requests posted to our QP must produce rxe's
//! request packets byte for byte, and rxe's responses must complete them with rxe's data.
//!
//! Only the IPv4 identification differs legitimately (rxe numbers its packets; a UDP socket
//! with DF sends 0), and with it the ICRC on the wire: our ICRC is recomputed over the
//! capture's own IP and UDP headers and must then equal rxe's.

use softrdma_proto::sim::ConnectOpts;
use softrdma_proto::*;
use softrdma_wire::ethernet::EthernetRepr;
use softrdma_wire::pcap::PcapReader;
use softrdma_wire::{IbPacket, Operation, Psn, Qpn, RoceFrame, icrc};
use std::net::IpAddr;
use std::sync::Arc;

const MTU: Mtu = Mtu::M1024;

#[derive(Debug, Clone)]
struct Pkt {
    frame: usize,
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    ip_header: Vec<u8>,
    udp: Vec<u8>,
    ib: Vec<u8>,
}

impl Pkt {
    fn ib(&self) -> IbPacket<&[u8]> {
        IbPacket::new_checked(&self.ib[..]).unwrap()
    }
}

fn load(name: &str) -> Vec<Pkt> {
    let path = format!("{}/../../tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    let bytes = std::fs::read(&path).unwrap();
    let mut out = Vec::new();
    for (i, rec) in PcapReader::new(&bytes).unwrap().enumerate() {
        let rec = rec.unwrap();
        let Ok(f) = RoceFrame::parse_ethernet(rec.data) else {
            continue;
        };
        if f.ib().bth().dest_qp() == Qpn::GSI {
            continue;
        }
        let (_, ip) = EthernetRepr::parse(rec.data).unwrap();
        let hl = f.ip_header().len();
        out.push(Pkt {
            frame: i + 1,
            src: f.ip().src(),
            dst: f.ip().dst(),
            sport: f.udp().src_port(),
            ip_header: f.ip_header().to_vec(),
            udp: ip[hl..hl + 8].to_vec(),
            ib: f.ib().as_bytes().to_vec(),
        });
    }
    out
}

/// Our packet must be rxe's, but for the ICRC, which is checked over rxe's headers.
fn assert_same(ours: &[u8], our_sport: u16, theirs: &Pkt, what: &str) {
    let n = ours.len();
    assert_eq!(n, theirs.ib.len(), "{what}: frame {}: length", theirs.frame);
    assert_eq!(
        ours[..n - 4],
        theirs.ib[..n - 4],
        "{what}: frame {}: InfiniBand headers and payload",
        theirs.frame
    );
    assert_eq!(
        our_sport, theirs.sport,
        "{what}: frame {}: UDP source port",
        theirs.frame
    );
    let crc = icrc::compute(&theirs.ip_header, &theirs.udp, &ours[..n - 4]).unwrap();
    assert_eq!(
        crc.to_le_bytes(),
        theirs.ib[n - 4..],
        "{what}: frame {}: ICRC",
        theirs.frame
    );
}

fn all_access() -> AccessFlags {
    AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC
}

#[allow(clippy::too_many_arguments)]
fn rc_qp(
    qpn: Qpn,
    mem: Arc<SimMemory>,
    src: IpAddr,
    dst: IpAddr,
    flow_label: u32,
    dest: Qpn,
    rq: Psn,
    sq: Psn,
) -> QueuePair {
    let opts = ConnectOpts {
        mtu: MTU,
        min_rnr_timer: 12,
        access: all_access(),
        caps: QpCaps {
            max_send_wr: 4096,
            max_recv_wr: 4096,
            ..QpCaps::default()
        },
        ..ConnectOpts::default()
    };
    let mut cfg = opts.qp_config(qpn);
    cfg.sq_sig_all = true;
    let av = AddressVector {
        src,
        dst,
        flow_label,
        traffic_class: 0,
    };
    opts.rts_qp(cfg, mem, av, dest, rq, sq)
}

/// A conversation in which `x` sends requests to `y`.
struct Conv {
    x: IpAddr,
    y: IpAddr,
    qpn_x: Qpn,
    qpn_y: Qpn,
    /// The path's flow label: 0 when rxe derived the source port from the QPNs, otherwise
    /// one that gives the port the capture shows (rdma_cm sets a flow label in the path).
    flow_label: u32,
    requests: Vec<Pkt>,
    responses: Vec<Pkt>,
    /// Requests and responses in capture order.
    events: Vec<Pkt>,
}

fn conversations(pkts: &[Pkt]) -> Vec<Conv> {
    let mut out = Vec::new();
    let hosts: Vec<IpAddr> = {
        let mut h = vec![pkts[0].src, pkts[0].dst];
        h.dedup();
        h
    };
    for (x, y) in [(hosts[0], hosts[1]), (hosts[1], hosts[0])] {
        let is_req = |p: &Pkt| p.src == x && !p.ib().info().is_response;
        let is_resp = |p: &Pkt| p.src == y && p.ib().info().is_response;
        let requests: Vec<Pkt> = pkts.iter().filter(|p| is_req(p)).cloned().collect();
        let responses: Vec<Pkt> = pkts.iter().filter(|p| is_resp(p)).cloned().collect();
        if requests.is_empty() || responses.is_empty() {
            continue;
        }
        let events = pkts
            .iter()
            .filter(|p| is_req(p) || is_resp(p))
            .cloned()
            .collect();
        let (qpn_x, qpn_y) = (
            responses[0].ib().bth().dest_qp(),
            requests[0].ib().bth().dest_qp(),
        );
        let sport = requests[0].sport;
        let flow_label = if sport == softrdma_wire::rxe_udp_sport(qpn_x, qpn_y) {
            0
        } else {
            u32::from(sport & 0x3FFF)
        };
        out.push(Conv {
            x,
            y,
            qpn_x,
            qpn_y,
            flow_label,
            requests,
            responses,
            events,
        });
    }
    out
}

/// Registers, under rxe's R_Keys, the memory the requests touch, with the atomic target
/// holding what the first atomic ACK says it held.
fn remote_memory(c: &Conv) -> Arc<SimMemory> {
    let mem = Arc::new(SimMemory::new(0));
    let mut ranges: Vec<(u32, u64, u64)> = Vec::new();
    let mut add = |rkey: u32, va: u64, len: u64| match ranges.iter_mut().find(|r| r.0 == rkey) {
        Some(r) => {
            let end = (r.1 + r.2).max(va + len);
            r.1 = r.1.min(va);
            r.2 = end - r.1;
        }
        None => ranges.push((rkey, va, len.max(8))),
    };
    for p in &c.requests {
        let ib = p.ib();
        if let Some(r) = ib.reth() {
            add(r.rkey(), r.va(), u64::from(r.len()));
        }
        if let Some(a) = ib.atomic_eth() {
            add(a.rkey(), a.va(), 8);
        }
    }
    for &(rkey, va, len) in &ranges {
        assert!(mem.register_with_key(rkey, Pd(1), va, len as usize, all_access()));
    }
    // The value before the first atomic is what the first atomic ACK returns.
    let first_atomic = c.requests.iter().find(|q| q.ib().atomic_eth().is_some());
    let first_ack = c
        .responses
        .iter()
        .find(|s| s.ib().info().operation == Operation::AtomicAcknowledge);
    if let (Some(q), Some(ack)) = (first_atomic, first_ack) {
        let (qi, ai) = (q.ib(), ack.ib());
        let a = qi.atomic_eth().unwrap();
        let orig = ai.atomic_ack_eth().unwrap().orig();
        let base = ranges.iter().find(|x| x.0 == a.rkey()).unwrap().1;
        mem.fill(a.rkey(), (a.va() - base) as usize, &orig.to_ne_bytes());
    }
    mem
}

/// Just before a READ request is replayed, its target holds what rxe's responses to it
/// carried (the peer may have changed it between READs, as rping does).
fn fill_for_read(mem: &SimMemory, c: &Conv, req: &Pkt) {
    let ib = req.ib();
    let Some(r) = ib
        .reth()
        .filter(|_| ib.info().operation == Operation::ReadRequest)
    else {
        return;
    };
    let mtu = MTU.bytes() as u64;
    let base = ib.bth().psn();
    let npkts = u64::from(r.len()).div_ceil(mtu).max(1) as i32;
    for s in c.responses.iter().filter(|s| s.frame > req.frame) {
        let sb = s.ib();
        let d = sb.bth().psn().diff(base);
        if sb.info().operation == Operation::ReadResponse && (0..npkts).contains(&d) {
            let off = region_offset(c, r.rkey(), r.va());
            mem.fill(r.rkey(), (off + d as u64 * mtu) as usize, sb.payload());
        }
    }
}

/// Offset of `va` in the region `remote_memory` registered for `rkey`.
fn region_offset(c: &Conv, rkey: u32, va: u64) -> u64 {
    let lowest = c
        .requests
        .iter()
        .filter_map(|p| {
            let ib = p.ib();
            ib.reth()
                .map(|r| (r.rkey(), r.va()))
                .or(ib.atomic_eth().map(|a| (a.rkey(), a.va())))
        })
        .filter(|&(k, _)| k == rkey)
        .map(|(_, v)| v)
        .min()
        .unwrap_or(va);
    va - lowest
}

const LOCAL_KEY: u32 = 0x5A5A_5A00;
const LOCAL_VA: u64 = 0x7000_0000_0000;
const LOCAL_LEN: usize = 1 << 22;

fn replay_responder(c: &Conv) -> usize {
    let mem = remote_memory(c);
    assert!(mem.register_with_key(LOCAL_KEY, Pd(1), LOCAL_VA, LOCAL_LEN, all_access()));
    let mem_view = mem.clone();
    let first = c.requests[0].ib().bth().psn();
    let mut qp = rc_qp(
        c.qpn_y,
        mem,
        c.y,
        c.x,
        c.flow_label,
        c.qpn_x,
        first,
        Psn::new(0),
    );
    for i in 0..1000u64 {
        qp.post_recv(RecvWr {
            wr_id: i,
            sg_list: softrdma_proto::sg![Sge {
                addr: LOCAL_VA + i * 4096,
                length: 4096,
                lkey: LOCAL_KEY,
            }],
        })
        .unwrap();
    }
    let mut ours = Vec::new();
    let mut buf = Vec::new();
    let now = Instant::ZERO;
    for r in &c.requests {
        fill_for_read(&mem_view, c, r);
        qp.handle_packet(now, c.x, c.y, &r.ib());
        while let Some(t) = qp.poll_transmit(now, &mut buf) {
            ours.push((buf[..t.len].to_vec(), t.src_port));
        }
    }
    assert_eq!(ours.len(), c.responses.len(), "responses");
    for ((o, sport), theirs) in ours.iter().zip(&c.responses) {
        assert_same(o, *sport, theirs, "responder");
    }
    // Every SEND was received whole.
    let sends = c
        .requests
        .iter()
        .filter(|p| p.ib().info().operation == Operation::Send && p.ib().info().ends_message())
        .count();
    let recvs = std::iter::from_fn(|| qp.poll_completion())
        .filter(|wc| wc.status == WcStatus::Success)
        .count();
    assert_eq!(recvs, sends);
    ours.len()
}

fn replay_requester(c: &Conv) -> usize {
    let mem = Arc::new(SimMemory::new(0));
    assert!(mem.register_with_key(LOCAL_KEY, Pd(1), LOCAL_VA, LOCAL_LEN, all_access()));
    // Rebuild the work requests from the request packets, message by message.
    let mut wrs = Vec::new();
    let mut at = 0u64;
    let mut msg: Vec<&Pkt> = Vec::new();
    for p in &c.requests {
        let ib = p.ib();
        if ib.info().starts_message() {
            msg.clear();
        }
        msg.push(p);
        if !ib.info().ends_message() {
            continue;
        }
        let data: Vec<u8> = msg.iter().flat_map(|m| m.ib().payload().to_vec()).collect();
        let first = msg[0].ib();
        let last = ib;
        let (op, len) = match last.info().operation {
            Operation::Send => (
                match last.imm_dt() {
                    Some(i) => SendOp::SendWithImm(i.imm()),
                    None => SendOp::Send,
                },
                data.len() as u64,
            ),
            Operation::Write => {
                let r = first.reth().unwrap();
                let (remote_addr, rkey) = (r.va(), r.rkey());
                (
                    match last.imm_dt() {
                        Some(i) => SendOp::WriteWithImm {
                            remote_addr,
                            rkey,
                            imm: i.imm(),
                        },
                        None => SendOp::Write { remote_addr, rkey },
                    },
                    data.len() as u64,
                )
            }
            Operation::ReadRequest => {
                let r = first.reth().unwrap();
                (
                    SendOp::Read {
                        remote_addr: r.va(),
                        rkey: r.rkey(),
                    },
                    u64::from(r.len()),
                )
            }
            Operation::FetchAdd => {
                let a = first.atomic_eth().unwrap();
                (
                    SendOp::FetchAdd {
                        remote_addr: a.va(),
                        rkey: a.rkey(),
                        add: a.swap_add(),
                    },
                    8,
                )
            }
            Operation::CompareSwap => {
                let a = first.atomic_eth().unwrap();
                (
                    SendOp::CompareSwap {
                        remote_addr: a.va(),
                        rkey: a.rkey(),
                        compare: a.compare(),
                        swap: a.swap_add(),
                    },
                    8,
                )
            }
            op => panic!("unexpected request {op:?}"),
        };
        if matches!(last.info().operation, Operation::Send | Operation::Write) {
            mem.fill(LOCAL_KEY, at as usize, &data);
        }
        let mut flags = SendFlags::SIGNALED;
        if last.bth().solicited() {
            flags |= SendFlags::SOLICITED;
        }
        wrs.push(SendWr {
            wr_id: wrs.len() as u64,
            op,
            payload: Payload::Sges(softrdma_proto::sg![Sge {
                addr: LOCAL_VA + at,
                length: len as u32,
                lkey: LOCAL_KEY,
            }]),
            flags,
            ud: None,
        });
        at += len.next_multiple_of(64);
    }
    let first = c.requests[0].ib().bth().psn();
    let mut qp = rc_qp(
        c.qpn_x,
        mem.clone(),
        c.x,
        c.y,
        c.flow_label,
        c.qpn_y,
        Psn::new(0),
        first,
    );
    for w in wrs.iter().cloned() {
        qp.post_send(w).unwrap();
    }
    let now = Instant::ZERO;
    let mut buf = Vec::new();
    let mut compared = 0;
    for e in &c.events {
        if e.src == c.x {
            let t = qp
                .poll_transmit(now, &mut buf)
                .unwrap_or_else(|| panic!("frame {}: we had nothing to send", e.frame));
            assert_same(&buf[..t.len], t.src_port, e, "requester");
            compared += 1;
        } else {
            qp.handle_packet(now, c.y, c.x, &e.ib());
        }
    }
    assert!(
        qp.poll_transmit(now, &mut buf).is_none(),
        "nothing more to send"
    );
    let wcs: Vec<_> = std::iter::from_fn(|| qp.poll_completion()).collect();
    assert_eq!(wcs.len(), wrs.len());
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    // READ data and atomic results are what rxe returned.
    for (w, wr) in wcs.iter().zip(&wrs) {
        let Payload::Sges(s) = &wr.payload else {
            unreachable!()
        };
        let got = &mem.snapshot(LOCAL_KEY).unwrap()[(s[0].addr - LOCAL_VA) as usize..]
            [..s[0].length as usize];
        if let SendOp::FetchAdd { .. } = wr.op {
            assert_eq!(w.opcode, WcOpcode::FetchAdd);
            assert!(c.responses.iter().any(|r| {
                r.ib()
                    .atomic_ack_eth()
                    .map(|a| a.orig().to_ne_bytes().to_vec())
                    == Some(got.to_vec())
            }));
        }
        if let SendOp::Read { .. } = wr.op {
            assert_eq!(w.byte_len as usize, got.len());
            assert!(
                c.responses
                    .iter()
                    .any(|r| r.ib().info().operation == Operation::ReadResponse
                        && !r.ib().payload().is_empty()
                        && got.starts_with(r.ib().payload()))
            );
        }
    }
    compared
}

fn replay(name: &str) -> (usize, usize) {
    let pkts = load(name);
    let convs = conversations(&pkts);
    assert!(!convs.is_empty(), "{name}: an RC conversation");
    let mut n = (0, 0);
    for c in &convs {
        n.0 += replay_responder(c);
        n.1 += replay_requester(c);
    }
    n
}

macro_rules! replay_tests {
    ($($name:ident: $file:literal,)*) => {$(
        #[test]
        fn $name() {
            let (resp, req) = replay($file);
            assert!(resp > 0 && req > 0, "{}: {resp} responses and {req} requests compared", $file);
        }
    )*};
}

replay_tests! {
    rc_pingpong: "rc_pingpong.pcap",
    ib_send_lat: "ib_send_lat.pcap",
    ib_write_lat: "ib_write_lat.pcap",
    ib_write_bw: "ib_write_bw.pcap",
    ib_read_lat: "ib_read_lat.pcap",
    ib_atomic_lat: "ib_atomic_lat.pcap",
    rping: "rping.pcap",
    ib_read_bw: "extra/ib_read_bw.pcap",
    rc_pingpong_2k: "extra/rc_pingpong_2k.pcap",
    rc_pingpong_ipv6: "extra/rc_pingpong_ipv6.pcap",
    ib_send_lat_3b: "extra/ib_send_lat_3b.pcap",
}
