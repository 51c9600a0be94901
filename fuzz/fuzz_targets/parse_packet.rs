//! Feeds arbitrary bytes to every softrdma-wire parser (Ethernet frame, IP packet, InfiniBand
//! packet, pcap file, MAD header) and checks that whatever parses re-emits and parses back the
//! same. The same check runs over the committed corpus in `cargo test`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    softrdma_wire::fuzzing::check(data);
});
