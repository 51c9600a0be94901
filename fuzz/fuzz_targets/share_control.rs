//! Feeds arbitrary events to a shared device's control plane (the owner's): members that
//! connect, send records raw or well formed and hang up, this process's own draws and
//! listens, time passing. It must never panic, never give a QPN to two processes or from
//! quarantine, and keep its forwarding routes equal to who holds what. The same check
//! runs over random inputs in `cargo test` (`device::share::control::tests`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    softrdma::fuzzing::share_control(data);
});
