//! Round trips of every CM message through a whole MAD, the reserved values parsing
//! refuses, and the Annex A11 service IDs and IP CM header.

use super::*;
use crate::error::Error;
use core::net::{IpAddr, Ipv6Addr};

fn req() -> ReqRepr {
    ReqRepr {
        local_comm_id: 0x0cf1_e317,
        service_id: ip_service_id(port_space::TCP, 7174),
        local_ca_guid: 0x5054_00ff_fe77_0003,
        local_qkey: 0,
        local_qpn: 0x1e,
        responder_resources: 1,
        local_eecn: 0,
        initiator_depth: 1,
        remote_eecn: 0,
        remote_cm_response_timeout: 20,
        transport: TransportService::Rc,
        end_to_end_flow_control: false,
        starting_psn: 0x95cb62,
        local_cm_response_timeout: 20,
        retry_count: 7,
        pkey: 0xFFFF,
        path_mtu: 3,
        rdc_exists: false,
        rnr_retry_count: 7,
        max_cm_retries: 15,
        srq: false,
        primary: PathRepr {
            local_lid: 0xFFFF,
            remote_lid: 0xFFFF,
            flow_label: 0x992,
            hop_limit: 64,
            local_ack_timeout: 19,
            ..PathRepr::default()
        },
        alternate: PathRepr::default(),
        sap_supported: false,
        private_data: PrivateData::default(),
    }
}

#[test]
fn every_message_round_trips_through_a_mad() {
    let msgs = [
        CmMessage::Req(req()),
        CmMessage::Rep(RepRepr {
            local_comm_id: 1,
            remote_comm_id: 2,
            local_qpn: 0xABCDEF,
            starting_psn: 0x123456,
            responder_resources: 4,
            initiator_depth: 3,
            target_ack_delay: 15,
            failover_accepted: 2,
            end_to_end_flow_control: true,
            rnr_retry_count: 7,
            srq: true,
            local_ca_guid: 9,
            private_data: PrivateData::from_slice(b"hello").unwrap(),
            ..RepRepr::default()
        }),
        CmMessage::Rej(RejRepr {
            local_comm_id: 1,
            remote_comm_id: 2,
            message: MessageRef::Req,
            reason: rej_reason::CONSUMER_DEFINED,
            ari: Info {
                len: 3,
                data: PrivateData::from_slice(&[1, 2, 3]).unwrap(),
            },
            private_data: PrivateData::from_slice(&[7; 148]).unwrap(),
        }),
        CmMessage::Mra(MraRepr {
            local_comm_id: 5,
            remote_comm_id: 6,
            message: MessageRef::Rep,
            service_timeout: 31,
            private_data: PrivateData::default(),
        }),
        CmMessage::Rtu(RtuRepr {
            local_comm_id: 1,
            remote_comm_id: 2,
            private_data: PrivateData::from_slice(&[0xAA; 224]).unwrap(),
        }),
        CmMessage::Dreq(DreqRepr {
            local_comm_id: 1,
            remote_comm_id: 2,
            remote_qpn: 0xFFFFFF,
            private_data: PrivateData::default(),
        }),
        CmMessage::Drep(DrepRepr {
            local_comm_id: 1,
            remote_comm_id: 2,
            private_data: PrivateData::default(),
        }),
        CmMessage::Lap(LapRepr {
            local_comm_id: 1,
            remote_comm_id: 2,
            remote_qpn: 3,
            remote_cm_response_timeout: 17,
            alternate: PathRepr {
                flow_label: 0xFFFFF,
                traffic_class: 0xAB,
                sl: 15,
                subnet_local: true,
                local_ack_timeout: 31,
                packet_rate: 63,
                ..PathRepr::default()
            },
            private_data: PrivateData::default(),
        }),
        CmMessage::Apr(AprRepr {
            local_comm_id: 1,
            remote_comm_id: 2,
            status: ap_status::UNSUPPORTED,
            info: Info::default(),
            private_data: PrivateData::default(),
        }),
        CmMessage::SidrReq(SidrReqRepr {
            request_id: 77,
            pkey: 0xFFFF,
            service_id: ip_service_id(port_space::UDP, 7174),
            private_data: PrivateData::default(),
        }),
        CmMessage::SidrRep(SidrRepRepr {
            request_id: 77,
            status: sidr_status::VALID,
            info: Info::default(),
            qpn: 0x42,
            service_id: ip_service_id(port_space::UDP, 7174),
            qkey: 0x1234_5678,
            private_data: PrivateData::default(),
        }),
    ];
    for msg in msgs {
        let mad = CmMad {
            tid: 0x0000_0002_17e3_f10c,
            attr_mod: 0,
            msg,
        };
        let bytes = mad.to_bytes();
        assert_eq!(CmMad::parse(&bytes), Ok(mad), "{}", msg.name());
    }
}

#[test]
fn reserved_values_are_named() {
    let mut b = CmMad {
        tid: 1,
        attr_mod: 0,
        msg: CmMessage::Req(req()),
    }
    .to_bytes();
    // Transport service type RD.
    b[24 + 43] = (b[24 + 43] & !0x06) | 2 << 1;
    let e = CmMad::parse(&b).unwrap_err();
    assert!(e.to_string().contains("REQ transport service type"), "{e}");
    // Path MTU 0.
    let mut b = CmMad {
        tid: 1,
        attr_mod: 0,
        msg: CmMessage::Req(ReqRepr {
            path_mtu: 0,
            ..req()
        }),
    }
    .to_bytes();
    assert!(
        CmMad::parse(&b)
            .unwrap_err()
            .to_string()
            .contains("path packet payload MTU")
    );
    b[2] = 1;
    assert!(
        CmMad::parse(&b)
            .unwrap_err()
            .to_string()
            .contains("class version")
    );
    assert!(matches!(
        CmMad::parse(&b[..255]),
        Err(Error::Truncated { .. })
    ));
}

#[test]
fn service_ids_and_the_ip_header() {
    assert_eq!(
        ip_service_id(port_space::TCP, 7174),
        0x0000_0000_0106_1c06,
        "the REQ of rping.pcap"
    );
    assert_eq!(
        parse_ip_service_id(0x0000_0000_0106_1c06),
        Some((0x06, 7174))
    );
    assert_eq!(parse_ip_service_id(0x1000_0000_0106_1c06), None);
    for (src, dst) in [
        (IpAddr::from([10, 77, 0, 3]), IpAddr::from([10, 77, 0, 2])),
        (
            IpAddr::from(Ipv6Addr::LOCALHOST),
            IpAddr::from(Ipv6Addr::LOCALHOST),
        ),
    ] {
        let h = IpCmHeader {
            version: 0,
            src_port: 0xd249,
            src,
            dst,
        };
        let mut pd = [0u8; private_len::REQ];
        h.emit(&mut pd);
        assert_eq!(IpCmHeader::parse(&pd), Ok(h));
    }
}
