//! Property tests: round trips for every header and opcode, 24-bit arithmetic across the wrap,
//! ICRC coverage, and parsers that never panic.

use proptest::prelude::*;
use softrdma_wire::bth::{Bth, BthRepr};
use softrdma_wire::ext::*;
use softrdma_wire::opcode::{Header, OPCODES, OpcodeInfo, PayloadKind};
use softrdma_wire::roce::{IpRepr, RoceFrame, RoceRepr};
use softrdma_wire::udp::UdpRepr;
use softrdma_wire::{ExtHeaders, IbPacket, IbRepr, Msn, Opcode, Psn, Qpn, fuzzing, icrc};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

fn qpn() -> impl Strategy<Value = Qpn> {
    (0u32..1 << 24).prop_map(Qpn::new)
}

fn bth_for(opcode: u8) -> impl Strategy<Value = BthRepr> {
    (
        any::<[bool; 6]>(),
        0u8..4,
        any::<u16>(),
        qpn(),
        0u32..1 << 24,
    )
        .prop_map(move |(f, pad_count, pkey, dest_qp, psn)| BthRepr {
            opcode: Opcode(opcode),
            solicited: f[0],
            mig_req: f[1],
            pad_count,
            pkey,
            fecn: f[2],
            becn: f[3],
            dest_qp,
            ack_req: f[4],
            psn: Psn::new(psn),
        })
}

fn reth() -> impl Strategy<Value = RethRepr> {
    any::<(u64, u32, u32)>().prop_map(|(va, rkey, len)| RethRepr { va, rkey, len })
}
fn aeth() -> impl Strategy<Value = AethRepr> {
    (any::<u8>(), 0u32..1 << 24).prop_map(|(s, m)| AethRepr {
        syndrome: Syndrome::from_u8(s),
        msn: Msn::new(m),
    })
}
fn atomic() -> impl Strategy<Value = AtomicEthRepr> {
    any::<(u64, u32, u64, u64)>().prop_map(|(va, rkey, swap_add, compare)| AtomicEthRepr {
        va,
        rkey,
        swap_add,
        compare,
    })
}
fn deth() -> impl Strategy<Value = DethRepr> {
    (any::<u32>(), qpn()).prop_map(|(qkey, src_qp)| DethRepr { qkey, src_qp })
}
fn feth() -> impl Strategy<Value = FethRepr> {
    (0u8..16, 0u8..4).prop_map(|(placement_type, selectivity)| FethRepr {
        placement_type,
        selectivity,
    })
}

/// Every extension header with arbitrary values; `for_opcode` keeps the ones an opcode needs.
fn all_ext() -> impl Strategy<Value = ExtHeaders> {
    (
        reth(),
        aeth(),
        atomic(),
        any::<u64>(),
        deth(),
        any::<u32>(),
        any::<u32>(),
        feth(),
    )
        .prop_map(|(r, a, at, orig, d, imm, inv, f)| ExtHeaders {
            reth: Some(r),
            aeth: Some(a),
            atomic_eth: Some(at),
            atomic_ack_eth: Some(AtomicAckEthRepr { orig }),
            deth: Some(d),
            imm_dt: Some(ImmDtRepr { imm }),
            ieth: Some(IethRepr { rkey: inv }),
            feth: Some(f),
        })
}

fn for_opcode(all: ExtHeaders, info: &OpcodeInfo) -> ExtHeaders {
    let keep = |h: Header| info.headers.contains(&h);
    ExtHeaders {
        reth: all.reth.filter(|_| keep(Header::Reth)),
        aeth: all.aeth.filter(|_| keep(Header::Aeth)),
        atomic_eth: all.atomic_eth.filter(|_| keep(Header::AtomicEth)),
        atomic_ack_eth: all.atomic_ack_eth.filter(|_| keep(Header::AtomicAckEth)),
        deth: all.deth.filter(|_| keep(Header::Deth)),
        imm_dt: all.imm_dt.filter(|_| keep(Header::ImmDt)),
        ieth: all.ieth.filter(|_| keep(Header::Ieth)),
        feth: all.feth.filter(|_| keep(Header::Feth)),
    }
}

/// An opcode from the table, a valid packet of it, and its payload.
fn packet() -> impl Strategy<Value = (BthRepr, ExtHeaders, Vec<u8>)> {
    (0..OPCODES.len())
        .prop_flat_map(|i| {
            let info = &OPCODES[i];
            let payload = match info.payload {
                PayloadKind::None => prop::collection::vec(any::<u8>(), 0..=0),
                PayloadKind::Fixed(n) => prop::collection::vec(any::<u8>(), n..=n),
                PayloadKind::Variable => prop::collection::vec(any::<u8>(), 0..600),
            };
            (Just(info), bth_for(info.opcode), all_ext(), payload)
        })
        .prop_map(|(info, mut bth, all, payload)| {
            bth.pad_count = softrdma_wire::packet::pad_for(payload.len());
            (bth, for_opcode(all, info), payload)
        })
}

fn ip_pair() -> impl Strategy<Value = (IpAddr, IpAddr)> {
    prop_oneof![
        any::<(u32, u32)>().prop_map(|(a, b)| (
            IpAddr::V4(Ipv4Addr::from_bits(a)),
            IpAddr::V4(Ipv4Addr::from_bits(b))
        )),
        any::<(u128, u128)>().prop_map(|(a, b)| (
            IpAddr::V6(Ipv6Addr::from_bits(a)),
            IpAddr::V6(Ipv6Addr::from_bits(b))
        )),
    ]
}

macro_rules! header_round_trips {
    ($($name:ident: $strategy:expr => $view:ident / $repr:ident;)*) => {$(
        proptest! {
            #[test]
            fn $name(repr in $strategy) {
                let mut buf = vec![0xAAu8; repr.buffer_len()];
                repr.emit(&mut $view::new_unchecked(&mut buf[..]));
                let view = $view::new_checked(&buf[..]).unwrap();
                prop_assert_eq!($repr::parse(&view).unwrap(), repr);
                prop_assert!($view::new_checked(&buf[..buf.len() - 1]).is_err());
            }
        }
    )*};
}

header_round_trips! {
    bth_round_trips: (0u8..=255).prop_flat_map(bth_for) => Bth / BthRepr;
    reth_round_trips: reth() => Reth / RethRepr;
    aeth_round_trips: aeth() => Aeth / AethRepr;
    atomic_eth_round_trips: atomic() => AtomicEth / AtomicEthRepr;
    atomic_ack_eth_round_trips:
        any::<u64>().prop_map(|orig| AtomicAckEthRepr { orig }) => AtomicAckEth / AtomicAckEthRepr;
    deth_round_trips: deth() => Deth / DethRepr;
    imm_round_trips: any::<u32>().prop_map(|imm| ImmDtRepr { imm }) => ImmDt / ImmDtRepr;
    ieth_round_trips: any::<u32>().prop_map(|rkey| IethRepr { rkey }) => Ieth / IethRepr;
    feth_round_trips: feth() => Feth / FethRepr;
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// build -> emit -> parse gives back the same packet, for every opcode.
    #[test]
    fn every_opcode_round_trips((bth, ext, payload) in packet(), (src, dst) in ip_pair(), sport in any::<u16>()) {
        let ib = IbRepr { bth, ext, payload: &payload };
        let mut buf = vec![0u8; ib.buffer_len()];
        prop_assert_eq!(ib.emit(&mut buf), Ok(buf.len()));
        let parsed_packet = IbPacket::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(IbRepr::parse(&parsed_packet).unwrap(), ib);

        let roce = RoceRepr {
            ip: IpRepr::for_addrs(src, dst).unwrap(),
            udp: UdpRepr { src_port: sport, dst_port: 4791, checksum: 0 },
            ib,
        };
        let mut buf = vec![0u8; roce.buffer_len()];
        prop_assert_eq!(roce.emit(&mut buf), Ok(buf.len()));
        let frame = RoceFrame::parse_ip(&buf).unwrap();
        prop_assert!(frame.icrc_ok());
        let mut back = RoceRepr::parse(&frame).unwrap();
        // The IP payload length is derived on emit.
        match (&mut back.ip, roce.ip) {
            (IpRepr::V4(b), IpRepr::V4(r)) => b.payload_len = r.payload_len,
            (IpRepr::V6(b), IpRepr::V6(r)) => b.payload_len = r.payload_len,
            _ => prop_assert!(false, "IP version changed"),
        }
        prop_assert_eq!(back, roce);
    }

    /// Emitting into a buffer of any length returns an error or the length; it never panics.
    #[test]
    fn emit_into_any_buffer_never_panics((bth, ext, payload) in packet(), len in 0usize..700) {
        let ib = IbRepr { bth, ext, payload: &payload };
        let mut buf = vec![0u8; len];
        match ib.emit(&mut buf) {
            Ok(n) => prop_assert!(n == ib.buffer_len() && n <= len),
            Err(_) => prop_assert!(len < ib.buffer_len()),
        }
    }

    /// The headers written alone, into a buffer of stale bytes, followed by the payload and
    /// the pad, are the bytes `emit` writes; and a too-short buffer is an error.
    #[test]
    fn headers_emitted_alone_equal_emit((bth, ext, payload) in packet(), stale in any::<u8>(), short in 0usize..64) {
        let ib = IbRepr { bth, ext, payload: &payload };
        let mut whole = vec![0u8; ib.buffer_len()];
        ib.emit(&mut whole).unwrap();
        let mut alone = vec![stale; whole.len()];
        let hlen = ib.emit_headers(payload.len(), &mut alone).unwrap();
        alone[hlen..hlen + payload.len()].copy_from_slice(&payload);
        let n = alone.len();
        alone[hlen + payload.len()..n - 4].fill(0);
        alone[n - 4..].fill(0);
        prop_assert_eq!(&alone, &whole);
        let short = short.min(hlen - 1);
        prop_assert!(ib.emit_headers(payload.len(), &mut alone[..short]).is_err());
    }

    /// A repr whose headers do not match its opcode is refused, not emitted.
    #[test]
    fn mismatched_headers_are_refused((bth, ext, payload) in packet(), extra in all_ext()) {
        let info = bth.opcode.info().unwrap();
        let mut wrong = ext;
        if info.headers.contains(&Header::Reth) {
            wrong.reth = None;
        } else {
            wrong.reth = extra.reth;
        }
        let ib = IbRepr { bth, ext: wrong, payload: &payload };
        let mut buf = vec![0u8; 2048];
        prop_assert!(ib.emit(&mut buf).is_err());
    }

    /// PSN/MSN/QPN arithmetic is modulo 2^24 with half-space ordering, including across the wrap.
    #[test]
    fn psn_arithmetic_wraps(
        a in prop_oneof![0u32..1 << 24, (1u32 << 24) - 512..1 << 24, 0u32..512],
        n in 0u32..1 << 23,
    ) {
        let p = Psn::new(a);
        let q = p.add(n);
        prop_assert!(q.value() < 1 << 24);
        prop_assert_eq!(q.value(), (a + n) % (1 << 24));
        prop_assert_eq!(q.sub(n), p);
        prop_assert_eq!(q.diff(p), n as i32);
        prop_assert_eq!(p.diff(q), -(n as i32));
        prop_assert_eq!(q.is_after(p), n != 0);
        prop_assert_eq!(p.is_before(q), n != 0);
        // Half the circle or more ahead is behind.
        let far = p.add((1 << 23) + n);
        prop_assert!(far.diff(p) < 0);
        prop_assert_eq!(Msn::new(a).add(n).value(), q.value());
        prop_assert_eq!(Qpn::new(a).next().value(), (a + 1) % (1 << 24));
    }

    /// CRC-32 detects every single-bit error in the bytes the ICRC covers, and the masked
    /// fields really are masked.
    #[test]
    fn icrc_detects_every_single_bit_flip(
        (bth, ext, payload) in packet().prop_filter("small", |p| p.2.len() < 64),
        (src, dst) in ip_pair(),
    ) {
        let roce = RoceRepr {
            ip: IpRepr::for_addrs(src, dst).unwrap(),
            udp: UdpRepr { src_port: 0xC000, dst_port: 4791, checksum: 0 },
            ib: IbRepr { bth, ext, payload: &payload },
        };
        let mut buf = vec![0u8; roce.buffer_len()];
        roce.emit(&mut buf).unwrap();
        let ip_len = roce.ip.header_len();
        let crc = |b: &[u8]| icrc::compute(&b[..ip_len], &b[ip_len..ip_len + 8], &b[ip_len + 8..b.len() - 4]);
        let good = crc(&buf).unwrap();
        prop_assert_eq!(&good.to_le_bytes()[..], &buf[buf.len() - 4..]);
        let masked = |i: usize| -> bool {
            let udp_sum = ip_len + 6..ip_len + 8;
            let bth4 = ip_len + 8 + 4;
            let ip_masked = if ip_len == 20 {
                i == 1 || i == 8 || i == 10 || i == 11
            } else {
                // Traffic class and flow label (low nibble of byte 0 and bytes 1-3), hop limit.
                (1..4).contains(&i) || i == 7
            };
            ip_masked || udp_sum.contains(&i) || i == bth4
        };
        for i in 0..buf.len() - 4 {
            for bit in 0..8 {
                let mut b = buf.clone();
                b[i] ^= 1 << bit;
                let v6_tc_nibble = ip_len == 40 && i == 0 && bit < 4;
                if masked(i) || v6_tc_nibble {
                    prop_assert_eq!(crc(&b), Ok(good), "byte {} bit {} is masked", i, bit);
                } else {
                    prop_assert_ne!(crc(&b), Ok(good), "byte {} bit {} is covered", i, bit);
                }
            }
        }
    }

    /// Parsers never panic on arbitrary bytes.
    #[test]
    fn parsers_never_panic_on_noise(data in prop::collection::vec(any::<u8>(), 0..512)) {
        fuzzing::check(&data);
    }

    /// Parsers never panic on damaged valid packets: cut short, bytes changed.
    #[test]
    fn parsers_never_panic_on_damaged_packets(
        (bth, ext, payload) in packet(),
        (src, dst) in ip_pair(),
        cut in any::<prop::sample::Index>(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
    ) {
        let roce = RoceRepr {
            ip: IpRepr::for_addrs(src, dst).unwrap(),
            udp: UdpRepr { src_port: 0xC000, dst_port: 4791, checksum: 0 },
            ib: IbRepr { bth, ext, payload: &payload },
        };
        let mut frame = vec![0u8; 14 + roce.buffer_len()];
        frame[12..14].copy_from_slice(if roce.ip.header_len() == 20 { &[0x08, 0x00] } else { &[0x86, 0xDD] });
        roce.emit(&mut frame[14..]).unwrap();
        for (at, v) in edits {
            let i = at.index(frame.len());
            frame[i] = v;
        }
        let end = cut.index(frame.len() + 1);
        fuzzing::check(&frame[..end]);
        fuzzing::check(&frame[14..end.max(14)]);
    }
}

proptest! {
    /// The direct ICRC of a packet a DF socket sends equals the ICRC over its real headers.
    #[test]
    fn icrc_compute_for_matches_compute((bth, ext, payload) in packet(), (src, dst) in ip_pair(), sport in any::<u16>()) {
        let roce = RoceRepr {
            ip: IpRepr::for_addrs(src, dst).unwrap(),
            udp: UdpRepr { src_port: sport, dst_port: 4791, checksum: 0 },
            ib: IbRepr { bth, ext, payload: &payload },
        };
        let mut buf = vec![0u8; roce.buffer_len()];
        roce.emit(&mut buf).unwrap();
        let ip = roce.ip.header_len();
        let n = buf.len();
        let direct = icrc::compute_for(src, dst, sport, &buf[ip + 8..n - 4]).unwrap();
        prop_assert_eq!(direct.to_le_bytes(), [buf[n - 4], buf[n - 3], buf[n - 2], buf[n - 1]]);
    }
}

proptest! {
    /// An ICRC fed in parts (a head of at least the BTH, then the rest in pieces) is the
    /// ICRC of the whole.
    #[test]
    fn icrc_in_parts_matches_compute_for(
        (bth, ext, payload) in packet(),
        v6 in any::<bool>(),
        sport in any::<u16>(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..4),
    ) {
        let (src, dst): (IpAddr, IpAddr) = if v6 {
            ("fe80::1".parse().unwrap(), "fd00::2".parse().unwrap())
        } else {
            (Ipv4Addr::new(10, 0, 0, 1).into(), Ipv4Addr::new(10, 0, 0, 2).into())
        };
        let ib = IbRepr { bth, ext, payload: &payload };
        let mut buf = vec![0u8; ib.buffer_len()];
        ib.emit(&mut buf).unwrap();
        buf.truncate(buf.len() - 4);
        // Where the head ends (at least the BTH) and the rest is cut.
        let mut at: Vec<usize> = cuts.iter().map(|c| 12 + c.index(buf.len() - 11)).collect();
        at.sort_unstable();
        let head = at.first().copied().unwrap_or(buf.len());
        let mut cache = icrc::IcrcPrefixes::new();
        let (crc, fed) = cache
            .compute_for_parts(src, dst, sport, &buf[..head], buf.len() - head, |r| {
                let mut from = head;
                for &to in at.iter().skip(1).chain([buf.len()].iter()) {
                    r.update(&buf[from..to]);
                    from = to;
                }
                from
            })
            .unwrap();
        prop_assert_eq!(fed, buf.len());
        prop_assert_eq!(crc, icrc::compute_for(src, dst, sport, &buf).unwrap());
    }
}

proptest! {
    /// A prefix cache gives what the direct computation gives, whatever mix of addresses,
    /// ports and lengths goes through it (slots collide, are evicted and hit again).
    #[test]
    fn icrc_prefix_cache_matches_compute_for(
        pkts in prop::collection::vec((packet(), 0usize..4, 0u16..2), 1..32),
        again in prop::collection::vec(any::<prop::sample::Index>(), 0..24),
    ) {
        // Few addresses and ports, so that slots are shared by packets that differ in one.
        let v4 = |x| IpAddr::V4(Ipv4Addr::new(10, 0, 0, x));
        let pairs = [(v4(1), v4(2)), (v4(1), v4(3)), (v4(4), v4(2)), ("fe80::1".parse().unwrap(), "fe80::2".parse().unwrap())];
        let mut cache = icrc::IcrcPrefixes::new();
        let bufs: Vec<_> = pkts.iter().map(|((bth, ext, payload), pair, sport)| {
            let (src, dst) = pairs[*pair];
            let ib = IbRepr { bth: *bth, ext: *ext, payload };
            let mut buf = vec![0u8; ib.buffer_len()];
            ib.emit(&mut buf).unwrap();
            buf.truncate(buf.len() - 4);
            (src, dst, 50000 + 8 * *sport, buf)
        }).collect();
        let order = (0..bufs.len()).chain(again.iter().map(|i| i.index(bufs.len())));
        for i in order {
            let (src, dst, sport, ib) = &bufs[i];
            prop_assert_eq!(
                cache.compute_for(*src, *dst, *sport, ib).unwrap(),
                icrc::compute_for(*src, *dst, *sport, ib).unwrap()
            );
        }
    }
}

proptest! {
    /// The identification of an IPv4 sender is recovered from the ICRC, and a corrupted
    /// packet is (almost always) told apart.
    #[test]
    fn ipv4_identification_is_recovered_from_the_icrc(
        (bth, ext, payload) in packet(),
        (a, b) in any::<(u32, u32)>(),
        ident in any::<u16>(),
        sport in any::<u16>(),
        flip in any::<prop::sample::Index>(),
    ) {
        let (src, dst) = (Ipv4Addr::from_bits(a), Ipv4Addr::from_bits(b));
        let mut ip = IpRepr::for_addrs(src.into(), dst.into()).unwrap();
        if let IpRepr::V4(r) = &mut ip { r.ident = ident; }
        let roce = RoceRepr {
            ip,
            udp: UdpRepr { src_port: sport, dst_port: 4791, checksum: 0 },
            ib: IbRepr { bth, ext, payload: &payload },
        };
        let mut buf = vec![0u8; roce.buffer_len()];
        roce.emit(&mut buf).unwrap();
        let n = buf.len();
        let ib = &buf[28..n - 4];
        let wire = u32::from_le_bytes([buf[n - 4], buf[n - 3], buf[n - 2], buf[n - 1]]);
        prop_assert_eq!(icrc::compute_for_ipv4_ident(src, dst, ident, sport, ib).unwrap(), wire);
        let basis = icrc::ipv4_ident_basis(ib.len());
        let c0 = icrc::compute_for(src.into(), dst.into(), sport, ib).unwrap();
        prop_assert_eq!(icrc::solve_ipv4_ident(&basis, c0, wire), Some(ident));
        // One flipped bit in the InfiniBand part is not explained by any identification.
        let mut bad = ib.to_vec();
        let bit = flip.index(bad.len() * 8);
        if bit / 8 != 4 {
            bad[bit / 8] ^= 1 << (bit % 8);
            let c0 = icrc::compute_for(src.into(), dst.into(), sport, &bad).unwrap();
            prop_assert_eq!(icrc::solve_ipv4_ident(&basis, c0, wire), None);
        }
    }
}

proptest! {
    /// Any 232 bytes under a CM header, for every CM attribute and some that are not:
    /// the parser never panics, and whatever parses re-emits to bytes that parse back to
    /// the same message (reserved bits cleared).
    #[test]
    fn cm_messages_parse_without_panicking_and_round_trip(
        attr in prop_oneof![0x0010u16..=0x001A, any::<u16>()],
        data in prop::collection::vec(any::<u8>(), 232),
        tid in any::<u64>(),
    ) {
        let mut mad = vec![1u8, 0x07, 2, 0x03, 0, 0, 0, 0];
        mad.extend(tid.to_be_bytes());
        mad.extend(attr.to_be_bytes());
        mad.extend([0, 0, 0, 0, 0, 0]);
        mad.extend(&data);
        fuzzing::check_cm(&mad);
        // Truncated anywhere: an error, never a panic.
        for cut in [0, 23, 24, 100, 255] {
            let _ = softrdma_wire::cm::CmMad::parse(&mad[..cut]);
        }
    }
}
