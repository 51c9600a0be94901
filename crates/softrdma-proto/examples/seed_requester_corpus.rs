//! Writes the requester fuzz corpus: streams of an ideal responder (every WR template
//! answered), of the usual faults (a sequence NAK, an RNR NAK, an access error, silence until
//! the retries run out, duplicated and reordered responses), and random ones from a fixed
//! seed, in the format `softrdma_proto::fuzzing::requester` reads.
//!
//! ```text
//! cargo run -p softrdma-proto --example seed_requester_corpus -- fuzz/corpus/requester
//! ```

use rand::{Rng, SeedableRng};
use std::path::PathBuf;

/// The answers of an ideal responder to all eight templates, posted at once: PSN offsets 0
/// (SEND), 1-4 (SEND), 5-7 (WRITE), 8-10 (READ), 11 and 12 (atomics), 13 (SEND), 14 (READ).
fn ideal() -> Vec<[u8; 5]> {
    vec![
        [0, 0, 0x1F, 1, 0],
        [0, 4, 0x1F, 2, 0],
        [0, 7, 0x1F, 3, 0],
        [4, 8, 0, 0, 0],
        [4, 9, 1, 0, 0],
        [4, 10, 2, 1, 188],
        [5, 11, 0, 0, 1],
        [5, 12, 0, 0, 5],
        [0, 13, 0x1F, 7, 0],
        [4, 14, 3, 1, 100],
    ]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .ok_or("usage: seed_requester_corpus OUT_DIR")?;
    std::fs::create_dir_all(&out)?;
    let mut seeds: Vec<(String, u8, Vec<[u8; 5]>)> = vec![("ideal".into(), 0xFF, ideal())];
    let with = |before: Vec<[u8; 5]>| before.into_iter().chain(ideal()).collect::<Vec<_>>();
    seeds.push((
        "seq-nak".into(),
        0xFF,
        with(vec![[1, 2, 0, 0, 0], [6, 0, 1, 0, 0]]),
    ));
    seeds.push((
        "rnr-nak".into(),
        0xFF,
        with(vec![[2, 0, 1, 0, 0], [6, 0, 20, 0, 0]]),
    ));
    seeds.push((
        "access-error".into(),
        0xFF,
        vec![[0, 4, 0x1F, 2, 0], [3, 5, 2, 2, 0]],
    ));
    seeds.push(("silence".into(), 0xFF, vec![[6, 0, 255, 0, 0]; 40]));
    let mut dup = ideal();
    dup.extend(ideal());
    seeds.push(("duplicated".into(), 0xFF, dup));
    let mut rev = ideal();
    rev.reverse();
    seeds.push(("reversed".into(), 0xFF, rev));
    seeds.push((
        "read-gap".into(),
        0b1000,
        vec![
            [4, 0, 0, 0, 0],
            [4, 2, 2, 1, 188],
            [6, 0, 3, 0, 0],
            [4, 1, 1, 0, 0],
            [4, 2, 2, 1, 188],
        ],
    ));
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(12);
    for i in 0..12 {
        let n = rng.random_range(4..60);
        let evs = (0..n)
            .map(|_| {
                [
                    rng.random_range(0..8),
                    rng.random_range(0..20),
                    rng.random(),
                    rng.random(),
                    rng.random(),
                ]
            })
            .collect();
        seeds.push((format!("random-{i}"), rng.random(), evs));
    }
    for (name, first, evs) in seeds {
        let mut bytes = vec![first];
        for e in evs {
            bytes.extend_from_slice(&e);
        }
        let got = softrdma_proto::fuzzing::requester(&bytes);
        println!("{name}: {got:?}");
        std::fs::write(out.join(name), bytes)?;
    }
    Ok(())
}
