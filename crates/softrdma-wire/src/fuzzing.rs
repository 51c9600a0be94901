//! The checks the fuzz target and the corpus test share. Not a stable API.
//!
//! [`check`] feeds one input to every parser and asserts the round-trip invariants; it panics
//! only when an invariant is broken, which is exactly what the fuzzer looks for.

use crate::mad::MadHeader;
use crate::packet::{IbPacket, IbRepr};
use crate::pcap::PcapReader;
use crate::roce::{RoceFrame, RoceRepr};

/// Largest packet the checks re-emit (an Ethernet jumbo frame).
const MAX: usize = 9216;

/// Runs every parser over `data` as an Ethernet frame, an IP packet, an InfiniBand packet and a
/// pcap file, and checks that whatever parses re-emits to something that parses back to the
/// same repr.
pub fn check(data: &[u8]) {
    if let Ok(frame) = RoceFrame::parse_ethernet(data) {
        check_frame(&frame);
    }
    if let Ok(frame) = RoceFrame::parse_ip(data) {
        check_frame(&frame);
    }
    if let Ok(p) = IbPacket::new_checked(data) {
        check_ib(&p);
    }
    if let Ok(reader) = PcapReader::new(data) {
        for rec in reader.take(64) {
            match rec {
                Ok(r) => {
                    if let Ok(frame) = RoceFrame::parse_ethernet(r.data) {
                        check_frame(&frame);
                    }
                }
                Err(_) => break,
            }
        }
    }
    let _ = MadHeader::parse(data).map(|h| (h.class_name(), h.method_name(), h.attr_name()));
    check_cm(data);
    if let Some(ud) = data.get(crate::bth::Bth::<&[u8]>::LEN + crate::ext::Deth::<&[u8]>::LEN..) {
        // A UD packet to QP1: the MAD after BTH and DETH.
        check_cm(ud);
    }
}

/// A CM MAD that parses re-emits to 256 bytes that parse back to it, and its IP CM
/// header, if it has one, does the same.
pub fn check_cm(data: &[u8]) {
    use crate::cm::{CmMad, CmMessage, IpCmHeader};
    let Ok(mad) = CmMad::parse(data) else {
        return;
    };
    let bytes = mad.to_bytes();
    assert_eq!(CmMad::parse(&bytes), Ok(mad), "a parsed CM MAD re-emits");
    let pd: &[u8] = match &mad.msg {
        CmMessage::Req(r) => r.private_data.as_bytes(),
        CmMessage::SidrReq(r) => r.private_data.as_bytes(),
        _ => return,
    };
    if let Ok(h) = IpCmHeader::parse(pd)
        && h.src.is_ipv4() == h.dst.is_ipv4()
    {
        let mut b = [0u8; IpCmHeader::LEN];
        h.emit(&mut b);
        assert_eq!(IpCmHeader::parse(&b), Ok(h), "an IP CM header re-emits");
    }
}

fn check_ib(p: &IbPacket<&[u8]>) {
    let repr = IbRepr::parse(p).expect("a checked packet parses");
    let mut buf = [0u8; MAX];
    let n = repr.emit(&mut buf).expect("a parsed repr emits");
    assert_eq!(n, repr.buffer_len());
    let again = IbPacket::new_checked(&buf[..n]).expect("an emitted packet checks");
    assert_eq!(IbRepr::parse(&again).expect("parses"), repr);
    // A buffer one byte short is an error, not a panic.
    assert!(repr.emit(&mut buf[..n - 1]).is_err());
}

fn check_frame(frame: &RoceFrame<'_>) {
    let _ = frame.icrc_ok();
    check_ib(frame.ib());
    let repr = RoceRepr::parse(frame).expect("a checked frame parses");
    let mut buf = [0u8; MAX];
    let Ok(n) = repr.emit(&mut buf) else {
        // Only a repr that cannot fit its IP length field may fail, and parsing proved it fits.
        panic!("a parsed frame re-emits");
    };
    let again = RoceFrame::parse_ip(&buf[..n]).expect("an emitted frame parses");
    assert!(again.icrc_ok(), "emit computes the ICRC");
    // IPv4 options and Ethernet padding are not represented; everything else must survive.
    assert_eq!(RoceRepr::parse(&again).expect("parses"), repr);
}
