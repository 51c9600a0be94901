//! The IB CM exchange of a real rdma_cm connection between two Linux rxe hosts
//! (`rping.pcap`: REQ, REP, RTU, then DREQ and DREP) decodes to the values Wireshark's
//! InfiniBand dissector shows for it (but one, where Wireshark is wrong), and every MAD
//! re-emits to exactly its own 256 bytes.

use softrdma_wire::cm::{
    CmMad, CmMessage, GSI_QKEY, GSI_QPN, IpCmHeader, TransportService, parse_ip_service_id,
};
use softrdma_wire::pcap::PcapReader;
use softrdma_wire::{IbRepr, RoceFrame};
use std::net::IpAddr;
use std::path::PathBuf;

/// The CM MADs of the capture, in order, with the frame numbers tshark gives them.
fn mads() -> Vec<(usize, CmMad, Vec<u8>)> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/rping.pcap");
    let bytes = std::fs::read(path).expect("capture is readable");
    let mut out = vec![];
    for (i, rec) in PcapReader::new(&bytes).expect("pcap").enumerate() {
        let rec = rec.expect("record is whole");
        let Ok(frame) = RoceFrame::parse_ethernet(rec.data) else {
            continue;
        };
        let ib = IbRepr::parse(frame.ib()).expect("parses");
        if ib.bth.dest_qp.value() != GSI_QPN {
            continue;
        }
        let deth = ib.ext.deth.expect("a GSI MAD travels in UD packets");
        assert_eq!(deth.qkey, GSI_QKEY, "frame {}", i + 1);
        assert_eq!(deth.src_qp.value(), GSI_QPN, "frame {}", i + 1);
        let payload = frame.ib().payload().to_vec();
        let mad = CmMad::parse(&payload).unwrap_or_else(|e| panic!("frame {}: {e}", i + 1));
        out.push((i + 1, mad, payload));
    }
    out
}

#[test]
fn rxe_cm_messages_decode_as_wireshark_shows_them() {
    let mads = mads();
    let names: Vec<_> = mads.iter().map(|(f, m, _)| (*f, m.msg.name())).collect();
    assert_eq!(
        names,
        [
            (1, "REQ"),
            (2, "REP"),
            (3, "RTU"),
            (40, "DREQ"),
            (41, "DREP")
        ]
    );
    // One transaction ID for the whole connection, both ways.
    assert!(mads.iter().all(|(_, m, _)| m.tid == 0x0000_0002_17e3_f10c));

    let CmMessage::Req(req) = mads[0].1.msg else {
        unreachable!()
    };
    assert_eq!(req.local_comm_id, 0x0cf1_e317);
    assert_eq!(parse_ip_service_id(req.service_id), Some((0x06, 7174)));
    assert_eq!(req.local_ca_guid, 0x5054_00ff_fe77_0003);
    assert_eq!((req.local_qkey, req.local_qpn), (0, 0x1e));
    assert_eq!((req.responder_resources, req.initiator_depth), (1, 1));
    assert_eq!(req.transport, TransportService::Rc);
    assert_eq!(req.remote_cm_response_timeout, 0x14);
    assert_eq!(req.local_cm_response_timeout, 0x14);
    assert_eq!(req.starting_psn, 0x95cb62);
    assert_eq!(
        (req.pkey, req.path_mtu, req.max_cm_retries),
        (0xFFFF, 3, 15)
    );
    let p = req.primary;
    assert_eq!((p.local_lid, p.remote_lid), (0xFFFF, 0xFFFF));
    assert_eq!(
        p.local_gid,
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 77, 0, 3]
    );
    assert_eq!(
        p.remote_gid,
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 77, 0, 2]
    );
    // Wireshark 3.4 shows 0x00992 here, from the wrong bits: the kernel writes the flow
    // label in the top 20 bits of the word at byte 88 (IBTA table 106), which hold
    // 99 2d d0 00, so 0x992dd with a packet rate of 0.
    assert_eq!((p.flow_label, p.packet_rate), (0x992dd, 0));
    assert_eq!((p.traffic_class, p.hop_limit), (0, 0x40));
    assert_eq!((p.sl, p.local_ack_timeout), (0, 0x13));
    assert_eq!(req.alternate, Default::default());
    let ip = IpCmHeader::parse(req.private_data.as_bytes()).expect("rdma_cm's header");
    assert_eq!(ip.version, 0);
    assert_eq!(ip.src_port, 0xd249);
    assert_eq!(ip.src, IpAddr::from([10, 77, 0, 3]));
    assert_eq!(ip.dst, IpAddr::from([10, 77, 0, 2]));

    let CmMessage::Rep(rep) = mads[1].1.msg else {
        unreachable!()
    };
    assert_eq!(rep.local_comm_id, 0x17ed_98c4);
    assert_eq!(rep.remote_comm_id, req.local_comm_id);
    assert_eq!((rep.local_qkey, rep.local_qpn), (0, 0x1e));
    assert_eq!(rep.starting_psn, 0x7437c6);
    assert_eq!((rep.responder_resources, rep.initiator_depth), (1, 1));
    assert_eq!(rep.target_ack_delay, 0x0f);
    assert_eq!(rep.failover_accepted, 0);
    assert!(!rep.end_to_end_flow_control && !rep.srq);
    assert_eq!(rep.rnr_retry_count, 7);
    assert_eq!(rep.local_ca_guid, 0x5054_00ff_fe77_0002);

    let CmMessage::Rtu(rtu) = mads[2].1.msg else {
        unreachable!()
    };
    assert_eq!(
        (rtu.local_comm_id, rtu.remote_comm_id),
        (0x0cf1_e317, 0x17ed_98c4)
    );
    let CmMessage::Dreq(dreq) = mads[3].1.msg else {
        unreachable!()
    };
    assert_eq!(
        (dreq.local_comm_id, dreq.remote_comm_id, dreq.remote_qpn),
        (0x0cf1_e317, 0x17ed_98c4, 0x1e)
    );
    let CmMessage::Drep(drep) = mads[4].1.msg else {
        unreachable!()
    };
    assert_eq!(
        (drep.local_comm_id, drep.remote_comm_id),
        (0x17ed_98c4, 0x0cf1_e317)
    );
}

#[test]
fn rxe_cm_messages_reemit_byte_for_byte() {
    for (frame, mad, bytes) in mads() {
        assert_eq!(
            mad.to_bytes()[..],
            bytes[..256],
            "frame {frame}: {}",
            mad.msg.name()
        );
    }
}
