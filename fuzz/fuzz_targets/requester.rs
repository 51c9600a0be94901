//! Feeds an RC requester, with SENDs, WRITEs, READs and atomics posted, arbitrary streams of
//! ACKs, NAKs, RNR NAKs, READ responses, atomic ACKs and timer firings: it must never panic,
//! never report a completion for a WR that was not posted, nor one twice, nor out of posting
//! order, and only ever send requests that parse with a valid ICRC. The same check runs over
//! the committed corpus in `cargo test` (`crates/softrdma-proto/tests/requester_fuzz.rs`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    softrdma_proto::fuzzing::requester(data);
});
