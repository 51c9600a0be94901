//! Feeds arbitrary receives and peer headers to the receive side of softrdma-fabric's RDM
//! protocol: header parsing and tag matching. It must never panic, lose a message or a
//! receive, or match one twice. The same check runs over random inputs in `cargo test`
//! (`softrdma_fabric::fuzzing`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    softrdma_fabric::fuzzing::rdm_receive(data);
});
