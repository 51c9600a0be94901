//! Each way a packet can be wrong gives the error that names it.

use softrdma_wire::roce::{IpRepr, RoceFrame, RoceRepr};
use softrdma_wire::udp::UdpRepr;
use softrdma_wire::{
    BthRepr, Error, ExtHeaders, IbPacket, IbRepr, Layer, NotRoceReason, Opcode, Psn, Qpn, RethRepr,
};
use std::net::Ipv4Addr;

/// An Ethernet frame holding an RC WRITE ONLY of `payload`, plus the offset of its BTH.
fn frame(payload: &[u8]) -> (Vec<u8>, usize) {
    let ib = IbRepr {
        bth: BthRepr {
            opcode: Opcode::RC_RDMA_WRITE_ONLY,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            pkey: 0xFFFF,
            fecn: false,
            becn: false,
            dest_qp: Qpn::new(0x11),
            ack_req: true,
            psn: Psn::new(7),
        },
        ext: ExtHeaders {
            reth: Some(RethRepr {
                va: 0x1000,
                rkey: 0x42,
                len: payload.len() as u32,
            }),
            ..Default::default()
        },
        payload,
    };
    let repr = RoceRepr {
        ip: IpRepr::for_addrs(
            Ipv4Addr::new(127, 0, 0, 2).into(),
            Ipv4Addr::new(127, 0, 0, 3).into(),
        )
        .unwrap(),
        udp: UdpRepr {
            src_port: 0xC000,
            dst_port: 4791,
            checksum: 0,
        },
        ib,
    };
    let mut f = vec![0u8; 14 + repr.buffer_len()];
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    repr.emit(&mut f[14..]).unwrap();
    (f, 14 + 20 + 8)
}

fn parse(f: &[u8]) -> Result<(), Error> {
    RoceFrame::parse_ethernet(f).map(|_| ())
}

#[test]
fn good_frame_parses() {
    let (f, _) = frame(b"hello");
    let parsed = RoceFrame::parse_ethernet(&f).unwrap();
    assert!(parsed.icrc_ok());
    assert_eq!(parsed.ib().payload(), b"hello");
    assert_eq!(parsed.ib().bth().pad_count(), 3);
}

#[test]
fn truncation_names_the_layer() {
    let (f, bth) = frame(b"hello");
    // Cut inside the RETH; fix the IP and UDP lengths so only the IB part is short.
    let ib = IbPacket::new_checked(&f[bth..bth + 20]);
    assert_eq!(
        ib.unwrap_err(),
        Error::Truncated {
            layer: Layer::Reth,
            need: 28,
            have: 20
        }
    );
    assert!(matches!(
        IbPacket::new_checked(&f[bth..bth + 5]),
        Err(Error::Truncated {
            layer: Layer::Bth,
            ..
        })
    ));
    assert!(matches!(
        parse(&f[..f.len() - 1]),
        Err(Error::Truncated {
            layer: Layer::Ipv4,
            ..
        })
    ));
    assert!(matches!(
        parse(&f[..10]),
        Err(Error::Truncated {
            layer: Layer::Ethernet,
            ..
        })
    ));
}

#[test]
fn opcodes_are_checked() {
    let (mut f, bth) = frame(b"hello");
    f[bth] = 0x15;
    assert_eq!(parse(&f), Err(Error::UnknownOpcode(0x15)));
    f[bth] = 0x4A; // RD
    assert_eq!(parse(&f), Err(Error::UnknownOpcode(0x4A)));
    f[bth] = 0x2C; // an RDMA READ request on UC
    assert_eq!(parse(&f), Err(Error::OpcodeNotValidForTransport(0x2C)));
    f[bth] = 0x6A; // an RDMA WRITE on UD
    assert_eq!(parse(&f), Err(Error::OpcodeNotValidForTransport(0x6A)));
}

#[test]
fn version_and_pad_are_checked() {
    let (mut f, bth) = frame(b"hello");
    f[bth + 1] |= 0x01;
    assert_eq!(parse(&f), Err(Error::BadVersion(1)));

    // A WRITE ONLY with no payload cannot carry a pad.
    let (mut f, bth) = frame(b"");
    f[bth + 1] |= 0x20;
    assert_eq!(parse(&f), Err(Error::PadTooLarge { pad: 2, payload: 0 }));
}

#[test]
fn lengths_are_checked() {
    // An ACK carries no payload: give it four bytes.
    let (mut f, bth) = frame(b"abcd");
    f[bth] = Opcode::RC_ACKNOWLEDGE.0;
    assert!(matches!(
        parse(&f),
        Err(Error::LengthMismatch {
            layer: Layer::Payload,
            ..
        })
    ));
    // A UDP length that disagrees with the IP length.
    let (mut f, _) = frame(b"abcd");
    f[14 + 20 + 5] += 1;
    assert!(matches!(
        parse(&f),
        Err(Error::LengthMismatch {
            layer: Layer::Udp,
            ..
        })
    ));
    // Payload and pad that do not fill whole words.
    let (f, bth) = frame(b"abcd");
    let ib = &f[bth..f.len() - 1];
    assert!(matches!(
        IbPacket::new_checked(ib),
        Err(Error::LengthMismatch {
            layer: Layer::Payload,
            ..
        })
    ));
}

#[test]
fn other_traffic_is_not_roce() {
    let (mut f, _) = frame(b"x");
    f[14 + 20 + 3] = 53; // UDP port 4789
    assert!(matches!(
        parse(&f),
        Err(Error::NotRoce(NotRoceReason::UdpPort(_)))
    ));
    let (mut f, _) = frame(b"x");
    f[14 + 9] = 6; // TCP
    assert_eq!(parse(&f), Err(Error::NotRoce(NotRoceReason::IpProtocol(6))));
    let (mut f, _) = frame(b"x");
    f[12..14].copy_from_slice(&[0x08, 0x06]); // ARP
    assert_eq!(
        parse(&f),
        Err(Error::NotRoce(NotRoceReason::EtherType(0x0806)))
    );
}

#[test]
fn fragments_are_refused() {
    let (mut f, _) = frame(b"x");
    f[14 + 6] |= 0x20; // more fragments
    assert_eq!(parse(&f), Err(Error::Fragmented));
}

#[test]
fn errors_read_well() {
    assert_eq!(
        Error::Truncated {
            layer: Layer::Reth,
            need: 28,
            have: 20
        }
        .to_string(),
        "truncated RETH: need 28 bytes, have 20"
    );
    assert_eq!(
        Error::OpcodeNotValidForTransport(0x2C).to_string(),
        "opcode 0x2c is not valid for its transport"
    );
}
