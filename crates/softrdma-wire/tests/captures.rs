//! Every RoCE v2 packet in the bundled rxe captures parses, has the right ICRC, and re-emits to
//! exactly its own bytes.

use softrdma_wire::ethernet::EthernetRepr;
use softrdma_wire::pcap::PcapReader;
use softrdma_wire::{Error, IbRepr, NotRoceReason, RoceFrame, RoceRepr};
use std::path::PathBuf;

fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data")
}

/// RoCE v2 packets per capture, as counted by `tshark -Y udp.dstport==4791`.
const EXPECTED: &[(&str, usize)] = &[
    ("ib_atomic_lat.pcap", 10),
    ("ib_read_lat.pcap", 20),
    ("ib_send_lat.pcap", 20),
    ("ib_write_bw.pcap", 25),
    ("ib_write_lat.pcap", 20),
    ("pyroce_rc.pcap", 22),
    ("rc_pingpong.pcap", 40),
    ("rping.pcap", 41),
    ("uc_pingpong.pcap", 10),
    ("ud_pingpong.pcap", 10),
    ("extra/ib_read_bw.pcap", 20),
    ("extra/ib_send_lat_3b.pcap", 20),
    ("extra/rc_pingpong_2k.pcap", 24),
    ("extra/rc_pingpong_ipv6.pcap", 12),
    ("extra/softrdma_rxe_rc.pcap", 100),
];

struct Outcome {
    roce: usize,
    bad_icrc: Vec<usize>,
}

fn check_file(name: &str) -> Outcome {
    let bytes = std::fs::read(data_dir().join(name)).expect("capture is readable");
    let reader = PcapReader::new(&bytes).expect("capture is a pcap");
    let mut out = Outcome {
        roce: 0,
        bad_icrc: vec![],
    };
    for (i, rec) in reader.enumerate() {
        let frame_no = i + 1;
        let rec = rec.expect("record is whole");
        let frame = match RoceFrame::parse_ethernet(rec.data) {
            Ok(f) => f,
            Err(Error::NotRoce(
                NotRoceReason::UdpPort(_)
                | NotRoceReason::IpProtocol(_)
                | NotRoceReason::EtherType(_),
            )) => continue,
            Err(e) => panic!("{name} frame {frame_no}: {e}"),
        };
        out.roce += 1;
        if !frame.icrc_ok() {
            out.bad_icrc.push(frame_no);
        }

        // What a UDP socket sees (addresses, source port, the InfiniBand part) is enough to
        // recover the IPv4 identification rxe used, and with it to verify the ICRC.
        if let (softrdma_wire::IpRepr::V4(ip), true) = (frame.ip(), frame.icrc_ok()) {
            let ib = frame.ib().without_icrc();
            let sport = frame.udp().src_port();
            let c0 =
                softrdma_wire::icrc::compute_for(ip.src.into(), ip.dst.into(), sport, ib).unwrap();
            let basis = softrdma_wire::icrc::ipv4_ident_basis(ib.len());
            assert_eq!(
                softrdma_wire::icrc::solve_ipv4_ident(&basis, c0, frame.ib().icrc()),
                Some(ip.ident),
                "{name} frame {frame_no}"
            );
        }

        // The InfiniBand part alone: everything but the ICRC, which needs IP and UDP.
        let ib = frame.ib();
        let repr = IbRepr::parse(ib).expect("parses");
        let mut buf = vec![0u8; repr.buffer_len()];
        assert_eq!(repr.emit(&mut buf), Ok(ib.as_bytes().len()));
        let n = buf.len() - 4;
        assert_eq!(
            buf[..n],
            ib.as_bytes()[..n],
            "{name} frame {frame_no}: IB part"
        );

        // The whole packet from the IP header, ICRC recomputed.
        let whole = RoceRepr::parse(&frame).expect("parses");
        let mut buf = vec![0u8; whole.buffer_len()];
        whole.emit(&mut buf).expect("emits");
        let (_, ip_packet) = EthernetRepr::parse(rec.data).unwrap();
        let original = &ip_packet[..buf.len()];
        if frame.icrc_ok() {
            assert_eq!(buf, original, "{name} frame {frame_no}: whole packet");
        } else {
            let n = buf.len() - 4;
            assert_eq!(buf[..n], original[..n], "{name} frame {frame_no}");
            assert_ne!(buf[n..], original[n..]);
        }
    }
    out
}

#[test]
fn every_capture_decodes_verifies_and_reemits() {
    let mut files = vec![];
    for dir in ["", "extra/"] {
        for e in std::fs::read_dir(data_dir().join(dir)).unwrap() {
            let name = e.unwrap().file_name().into_string().unwrap();
            if name.ends_with(".pcap") {
                files.push(format!("{dir}{name}"));
            }
        }
    }
    files.sort();
    let mut expected: Vec<_> = EXPECTED.iter().map(|(n, _)| n.to_string()).collect();
    expected.sort();
    assert_eq!(files, expected, "every bundled capture is checked");
    for &(name, count) in EXPECTED {
        let out = check_file(name);
        assert_eq!(out.roce, count, "{name}: RoCE packets");
        if name == "pyroce_rc.pcap" {
            assert_eq!(out.bad_icrc.len(), 1, "{name}: exactly one corrupted ICRC");
        } else {
            assert!(
                out.bad_icrc.is_empty(),
                "{name}: bad ICRC in frames {:?}",
                out.bad_icrc
            );
        }
    }
}
