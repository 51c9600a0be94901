//! Writes one responder fuzz input per capture: the capture's request packets, in order, as
//! `softrdma_proto::fuzzing::packets` reads them.
//!
//! ```text
//! cargo run -p softrdma-proto --example seed_responder_corpus -- fuzz/corpus/responder tests/data/*.pcap tests/data/extra/*.pcap
//! ```

use softrdma_proto::QpType;
use softrdma_proto::fuzzing::encode;
use softrdma_wire::pcap::PcapReader;
use softrdma_wire::{RoceFrame, Transport};
use std::path::{Path, PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args_os().skip(1).map(PathBuf::from);
    let out = args
        .next()
        .ok_or("usage: seed_responder_corpus OUT_DIR PCAP...")?;
    std::fs::create_dir_all(&out)?;
    for pcap in args {
        let bytes = std::fs::read(&pcap)?;
        let mut by_type: Vec<(QpType, Vec<Vec<u8>>)> = vec![
            (QpType::Rc, vec![]),
            (QpType::Uc, vec![]),
            (QpType::Ud, vec![]),
        ];
        for rec in PcapReader::new(&bytes)? {
            let Ok(f) = RoceFrame::parse_ethernet(rec?.data) else {
                continue;
            };
            let info = f.ib().info();
            let slot = match info.transport {
                Transport::Rc => 0,
                Transport::Uc => 1,
                Transport::Ud => 2,
                Transport::Cnp => continue,
            };
            if !info.is_response {
                by_type[slot].1.push(f.ib().as_bytes().to_vec());
            }
        }
        let stem = Path::new(&pcap)
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("capture");
        for (t, pkts) in by_type {
            if !pkts.is_empty() {
                let name = format!("{stem}-{t:?}").to_lowercase();
                std::fs::write(out.join(name), encode(t, &pkts))?;
            }
        }
    }
    Ok(())
}
