//! Feeds arbitrary streams of MADs, consumer verbs and time to a CM agent: it must never
//! panic, only send MADs that parse, and end every exchange under way once nothing more
//! arrives. The same check runs over the committed corpus in `cargo test`
//! (`crates/softrdma-proto/tests/cm_fuzz.rs`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    softrdma_proto::fuzzing::cm_agent(data);
});
