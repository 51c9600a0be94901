//! The CM agent's fuzz check (`softrdma_proto::fuzzing::cm_agent`), over structured
//! random streams of MADs, consumer verbs and time, and over the fuzz target's committed
//! corpus: no panic, every MAD sent parses, and every exchange under way ends.
//!
//! `CM_FUZZ_CASES=N` runs N streams instead of 1000.

mod common;
use common::{cases, replay_corpus};
use proptest::prelude::*;
use softrdma_proto::fuzzing::cm_agent;

fn step() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        2 => any::<u8>().prop_map(|b| vec![0, b]),
        1 => any::<u8>().prop_map(|b| vec![1, b]),
        4 => (0u8..12, prop::collection::vec(any::<u8>(), 0..64), any::<u8>()).prop_map(
            |(attr, body, pick)| {
                let mut v = vec![2, attr, body.len() as u8, pick | 1];
                v.extend(body);
                v
            }
        ),
        2 => any::<u8>().prop_map(|b| vec![3, b]),
        3 => (any::<u8>(), any::<u8>()).prop_map(|(v, p)| vec![4, v, p]),
        1 => Just(vec![5]),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases("CM_FUZZ_CASES", 1000)))]

    #[test]
    fn the_agent_holds_its_invariants(steps in prop::collection::vec(step(), 0..60)) {
        cm_agent(&steps.concat());
    }

    #[test]
    fn noise_never_panics(data in prop::collection::vec(any::<u8>(), 0..600)) {
        cm_agent(&data);
    }
}

#[test]
fn fuzz_corpus_holds_the_invariants() {
    replay_corpus("cm_agent", cm_agent);
}
