//! Feeds arbitrary packet sequences to an RC, UC or UD responder with registered memory: it
//! must never panic, never write outside a region, never write without the access right,
//! and only ever send packets that parse with a valid ICRC. The same check runs over the
//! committed corpus in `cargo test` (`crates/softrdma-proto/tests/responder_fuzz.rs`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    softrdma_proto::fuzzing::responder(data);
});
