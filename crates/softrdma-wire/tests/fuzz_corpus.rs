//! Runs the fuzz target's check over its committed corpus (seeded from the captures, plus
//! anything a fuzzing run has added), and over the capture files themselves, so CI exercises
//! the fuzz target without nightly or cargo-fuzz.

use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn fuzz_corpus_passes_the_fuzz_check() {
    let dir = root().join("fuzz/corpus/parse_packet");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).expect("the corpus is committed") {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        softrdma_wire::fuzzing::check(&data);
        n += 1;
    }
    assert!(n >= 497, "corpus has {n} inputs");
}

#[test]
fn whole_captures_pass_the_fuzz_check() {
    for dir in ["tests/data", "tests/data/extra"] {
        for entry in std::fs::read_dir(root().join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|x| x == "pcap") {
                softrdma_wire::fuzzing::check(&std::fs::read(&path).unwrap());
            }
        }
    }
}
