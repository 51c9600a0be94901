//! The requester fuzz check, over structured random streams of responses and timer firings
//! and over the fuzz target's committed corpus: whatever the responder says, no completion
//! is reported for a WR that was not posted, none twice, and all in posting order.
//!
//! `REQ_FUZZ_CASES=N` runs N structured streams instead of 2000: a longer campaign on
//! stable Rust, where `cargo fuzz` (nightly) is not at hand.

mod common;
use common::{cases, replay_corpus};
use proptest::prelude::*;
use softrdma_proto::fuzzing::requester;

/// One event of the stream: kinds weighted towards the responses that move a requester.
fn event() -> impl Strategy<Value = [u8; 5]> {
    (
        prop_oneof![
            4 => Just(0u8),
            2 => Just(1u8),
            1 => Just(2u8),
            1 => Just(3u8),
            3 => Just(4u8),
            1 => Just(5u8),
            2 => Just(6u8),
            1 => Just(7u8),
        ],
        prop_oneof![4 => 0u8..40, 1 => any::<u8>()],
        any::<[u8; 3]>(),
    )
        .prop_map(|(k, p, [a, b, c])| [k, p, a, b, c])
}

fn stream() -> impl Strategy<Value = Vec<u8>> {
    (any::<u8>(), prop::collection::vec(event(), 0..80)).prop_map(|(first, evs)| {
        let mut v = vec![first];
        for e in evs {
            v.extend_from_slice(&e);
        }
        v
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases("REQ_FUZZ_CASES", 2000)))]

    #[test]
    fn requester_holds_its_invariants(data in stream()) {
        requester(&data);
    }

    #[test]
    fn noise_never_panics(data in prop::collection::vec(any::<u8>(), 0..600)) {
        requester(&data);
    }
}

#[test]
fn fuzz_corpus_holds_the_invariants() {
    let mut statuses = std::collections::BTreeSet::new();
    replay_corpus("requester", |data| {
        let got = requester(data);
        statuses.extend(got.into_iter().map(|(_, s)| format!("{s:?}")));
    });
    // The corpus reaches success and each way a requester ends, or the check proves little.
    for s in [
        "Success",
        "RetryExcErr",
        "RemAccessErr",
        "BadRespErr",
        "WrFlushErr",
    ] {
        assert!(statuses.contains(s), "no {s} in {statuses:?}");
    }
}
