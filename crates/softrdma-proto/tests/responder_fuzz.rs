//! The responder fuzz check, over structured random packets (which reach far deeper than
//! noise) and over the fuzz target's committed corpus.

mod common;
use common::replay_corpus;
use proptest::prelude::*;
use softrdma_proto::QpType;
use softrdma_proto::fuzzing::{encode, responder};
use softrdma_wire::opcode::{Header, OPCODES, PayloadKind};
use softrdma_wire::*;

fn request_opcodes(t: QpType) -> Vec<u8> {
    let tr = match t {
        QpType::Rc => Transport::Rc,
        QpType::Uc => Transport::Uc,
        QpType::Ud => Transport::Ud,
    };
    OPCODES
        .iter()
        .filter(|i| i.transport == tr)
        .map(|i| i.opcode)
        .collect()
}

prop_compose! {
    fn packet(t: QpType, base: u32)(
        op in prop::sample::select(request_opcodes(t)),
        dpsn in -3i32..6,
        key in prop_oneof![Just(0x100u32), Just(0x200), Just(0x300), Just(0x400), any::<u32>()],
        va in prop_oneof![0x1000u64..0x2100, 0x3000u64..0x3100, any::<u64>()],
        len in prop_oneof![0u32..1200, any::<u32>()],
        payload in prop::collection::vec(any::<u8>(), 0..600),
        qkey in prop_oneof![Just(0x1111_1111u32), any::<u32>()],
        swap in any::<u64>(),
        flags in any::<(bool, bool)>(),
    ) -> Vec<u8> {
        let info = Opcode(op).info().unwrap();
        let mut ext = ExtHeaders::default();
        for h in info.headers {
            match h {
                Header::Reth => ext.reth = Some(RethRepr { va, rkey: key, len }),
                Header::AtomicEth => ext.atomic_eth = Some(AtomicEthRepr { va, rkey: key, swap_add: swap, compare: swap }),
                Header::Deth => ext.deth = Some(DethRepr { qkey, src_qp: Qpn::new(0x22) }),
                Header::ImmDt => ext.imm_dt = Some(ImmDtRepr { imm: 7 }),
                Header::Ieth => ext.ieth = Some(IethRepr { rkey: key }),
                Header::Aeth => ext.aeth = Some(AethRepr { syndrome: Syndrome::ACK_UNLIMITED, msn: Msn::new(0) }),
                Header::AtomicAckEth => ext.atomic_ack_eth = Some(AtomicAckEthRepr { orig: swap }),
                Header::Feth => ext.feth = Some(FethRepr::default()),
            }
        }
        let payload = match info.payload {
            PayloadKind::None => vec![],
            PayloadKind::Fixed(n) => vec![1; n],
            PayloadKind::Variable => payload,
        };
        let ib = IbRepr {
            bth: BthRepr {
                opcode: Opcode(op),
                solicited: flags.0,
                mig_req: false,
                pad_count: 0,
                pkey: 0xFFFF,
                fecn: false,
                becn: false,
                dest_qp: Qpn::new(0x11),
                ack_req: flags.1,
                psn: Psn::new(base).add(dpsn as u32),
            },
            ext,
            payload: &payload,
        };
        let mut buf = vec![0u8; ib.buffer_len()];
        ib.emit(&mut buf).unwrap();
        buf
    }
}

fn stream(t: QpType) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(packet(t, 0x00FF_FFFE), 1..24).prop_map(move |pkts| encode(t, &pkts))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn rc_responder_holds_its_invariants(data in stream(QpType::Rc)) {
        responder(&data);
    }

    #[test]
    fn uc_responder_holds_its_invariants(data in stream(QpType::Uc)) {
        responder(&data);
    }

    #[test]
    fn ud_responder_holds_its_invariants(data in stream(QpType::Ud)) {
        responder(&data);
    }

    #[test]
    fn noise_never_panics(data in prop::collection::vec(any::<u8>(), 0..800)) {
        responder(&data);
    }
}

#[test]
fn fuzz_corpus_holds_the_invariants() {
    replay_corpus("responder", responder);
}
