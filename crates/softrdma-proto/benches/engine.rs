//! Engine cost per packet, without the payload copy: the memory behind the QPs checks keys
//! and bounds but copies nothing. Baselines in the same run: a 4 KiB memcpy and a 4 KiB
//! CRC-32 (the ICRC every packet needs), so figures can be read as ratios.
//!
//! `cargo bench -p softrdma-proto --bench engine`
#![allow(missing_docs)] // criterion_group! generates an undocumented function

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use softrdma_proto::sim::ConnectOpts;
use softrdma_proto::*;
use softrdma_wire::{IbPacket, Psn, Qpn};
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

/// Memory that checks like a real MR table but moves no bytes.
struct NullMemory;

impl NullMemory {
    fn ok(key: u32, addr: u64, len: u64) -> Result<(), MemError> {
        if key != 1 {
            return Err(MemError::InvalidKey(key));
        }
        if addr.checked_add(len).is_none_or(|end| end > 1 << 30) {
            return Err(MemError::OutOfBounds { key, addr, len });
        }
        Ok(())
    }
}

impl Memory for NullMemory {
    fn check(&self, _: Pd, key: u32, addr: u64, len: u64, _: Access) -> Result<(), MemError> {
        Self::ok(key, addr, len)
    }
    fn read(&self, _: Pd, key: u32, addr: u64, buf: &mut [u8], _: Access) -> Result<(), MemError> {
        Self::ok(key, addr, buf.len() as u64)
    }
    fn write(&self, _: Pd, key: u32, addr: u64, d: &[u8], _: Access) -> Result<(), MemError> {
        Self::ok(key, addr, d.len() as u64)
    }
    fn atomic(&self, _: Pd, key: u32, addr: u64, _: AtomicOp) -> Result<u64, MemError> {
        Self::ok(key, addr, 8).map(|()| 0)
    }
}

const IP_A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
const IP_B: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));

fn qp(qpn: u32, peer: u32, src: IpAddr, dst: IpAddr, mtu: Mtu) -> QueuePair {
    let opts = ConnectOpts {
        mtu,
        min_rnr_timer: 12,
        access: AccessFlags::all(),
        caps: QpCaps {
            max_send_wr: 4096,
            max_recv_wr: 4096,
            ..QpCaps::default()
        },
        ..ConnectOpts::default()
    };
    let mut cfg = opts.qp_config(Qpn::new(qpn));
    cfg.sq_sig_all = true;
    let av = AddressVector {
        src,
        dst,
        flow_label: 0,
        traffic_class: 0,
    };
    opts.rts_qp(
        cfg,
        Arc::new(NullMemory),
        av,
        Qpn::new(peer),
        Psn::new(0),
        Psn::new(0),
    )
}

/// Moves every pending packet of `from` into `to`; returns how many.
fn pump(
    from: &mut QueuePair,
    to: &mut QueuePair,
    src: IpAddr,
    dst: IpAddr,
    buf: &mut Vec<u8>,
) -> u64 {
    let mut n = 0;
    while let Some(t) = from.poll_transmit(Instant::ZERO, buf) {
        let pkt = IbPacket::new_checked(&buf[..t.len]).unwrap();
        to.handle_packet(Instant::ZERO, src, dst, &pkt);
        n += 1;
    }
    n
}

/// A signaled send WR of `len` bytes from the first region.
fn signaled(op: SendOp, len: u32) -> SendWr {
    let local = Sge {
        addr: 0x1000,
        length: len,
        lkey: 1,
    };
    SendWr::signaled(1, op, Payload::Sges(softrdma_proto::sg![local]))
}

/// A WRITE into the second region.
const WRITE: SendOp = SendOp::Write {
    remote_addr: 0x10_0000,
    rkey: 1,
};

/// Two connected QPs, `qpn` on A and `qpn + 1` on B.
fn pair(qpn: u32, mtu: Mtu) -> (QueuePair, QueuePair) {
    (
        qp(qpn, qpn + 1, IP_A, IP_B, mtu),
        qp(qpn + 1, qpn, IP_B, IP_A, mtu),
    )
}

fn benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("baseline");
    let src = vec![7u8; 4096];
    let mut dst = vec![0u8; 4096];
    g.throughput(Throughput::Elements(1));
    g.bench_function("memcpy_4k", |b| {
        b.iter(|| dst.copy_from_slice(black_box(&src)))
    });
    g.bench_function("crc32_4k", |b| b.iter(|| crc32fast::hash(black_box(&src))));
    g.finish();

    let mut g = c.benchmark_group("engine");
    // 64 KiB WRITEs: 16 packets of 4 KiB, one ACK; counted per request packet.
    let (mut a, mut bq) = pair(1, Mtu::M4096);
    let mut buf = Vec::with_capacity(4200);
    g.throughput(Throughput::Elements(16));
    g.bench_function("write_4k_segment_x16", |bch| {
        bch.iter(|| {
            a.post_send(signaled(WRITE, 65536)).unwrap();
            let n = pump(&mut a, &mut bq, IP_A, IP_B, &mut buf);
            pump(&mut bq, &mut a, IP_B, IP_A, &mut buf);
            assert_eq!(n, 16);
            black_box(a.poll_completion().unwrap());
        })
    });
    // 8-byte SENDs: SEND, receive, ACK, completions; counted per packet (2 per message).
    let (mut a, mut bq) = pair(3, Mtu::M1024);
    g.throughput(Throughput::Elements(2));
    g.bench_function("send_8b_round_trip", |bch| {
        bch.iter(|| {
            bq.post_recv(RecvWr {
                wr_id: 9,
                sg_list: softrdma_proto::sg![Sge {
                    addr: 0x2000,
                    length: 64,
                    lkey: 1,
                }],
            })
            .unwrap();
            a.post_send(signaled(SendOp::Send, 8)).unwrap();
            pump(&mut a, &mut bq, IP_A, IP_B, &mut buf);
            pump(&mut bq, &mut a, IP_B, IP_A, &mut buf);
            black_box(bq.poll_completion().unwrap());
            black_box(a.poll_completion().unwrap());
        })
    });
    // 8-byte WRITEs, a latency test's turn: WRITE, ACK, completion; counted per packet.
    let (mut a, mut bq) = pair(5, Mtu::M1024);
    g.bench_function("write_8b_round_trip", |bch| {
        bch.iter(|| {
            a.post_send(signaled(WRITE, 8)).unwrap();
            pump(&mut a, &mut bq, IP_A, IP_B, &mut buf);
            pump(&mut bq, &mut a, IP_B, IP_A, &mut buf);
            black_box(a.poll_completion().unwrap());
        })
    });
    g.finish();
}

criterion_group!(engine, benches);
criterion_main!(engine);
