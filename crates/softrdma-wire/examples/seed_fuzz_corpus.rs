//! Writes every frame of the given pcap files into a fuzz corpus directory, one file per frame
//! named `<capture>-<frame>`:
//!
//! ```text
//! cargo run -p softrdma-wire --example seed_fuzz_corpus -- fuzz/corpus/parse_packet tests/data/*.pcap tests/data/extra/*.pcap
//! ```

use softrdma_wire::pcap::PcapReader;
use std::path::{Path, PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args_os().skip(1).map(PathBuf::from);
    let out = args
        .next()
        .ok_or("usage: seed_fuzz_corpus OUT_DIR PCAP...")?;
    std::fs::create_dir_all(&out)?;
    let mut written = 0;
    for pcap in args {
        let bytes = std::fs::read(&pcap)?;
        let stem = Path::new(&pcap)
            .file_stem()
            .and_then(|s| s.to_str())
            .ok_or("capture name is not UTF-8")?
            .to_owned();
        for (i, rec) in PcapReader::new(&bytes)?.enumerate() {
            std::fs::write(out.join(format!("{stem}-{:03}", i + 1)), rec?.data)?;
            written += 1;
        }
    }
    println!("wrote {written} frames to {}", out.display());
    Ok(())
}
