//! `softrdma pcap verify` and `softrdma pcap decode`.
//!
//! Exit codes: 0 when every RoCE v2 packet is well formed with a good ICRC (verify) or the file
//! was decoded (decode); 1 when verify found a bad or malformed packet; 2 when a file cannot be
//! read or is not a classic pcap.

use serde_json::{Map, Value, json};
use softrdma_wire::mad::MadHeader;
use softrdma_wire::pcap::{LINKTYPE_ETHERNET, LINKTYPE_RAW, PcapReader, PcapRecord};
use softrdma_wire::{Error, IbRepr, Qpn, RoceFrame};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Why a command could not run at all (exit status 2).
#[derive(Debug)]
pub enum Fatal {
    /// A file could not be read or is not a supported capture.
    Input(String),
    /// Standard output was closed (`| head`): stop quietly, as other Unix tools do.
    OutputClosed,
    /// Standard output failed otherwise.
    Output(std::io::Error),
}

impl std::fmt::Display for Fatal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fatal::Input(s) => f.write_str(s),
            Fatal::OutputClosed => f.write_str("output closed"),
            Fatal::Output(e) => write!(f, "cannot write output: {e}"),
        }
    }
}

/// What one frame of a capture turned out to be.
enum Frame<'a> {
    /// Not RoCE v2: skipped.
    Other,
    /// A RoCE v2 packet.
    Roce(RoceFrame<'a>),
    /// UDP to port 4791 that does not parse.
    Malformed(Error),
}

fn classify(linktype: u32, data: &[u8]) -> Frame<'_> {
    let parsed = match linktype {
        LINKTYPE_RAW => RoceFrame::parse_ip(data),
        _ => RoceFrame::parse_ethernet(data),
    };
    match parsed {
        Ok(f) => Frame::Roce(f),
        Err(Error::NotRoce(_)) => Frame::Other,
        Err(e) => Frame::Malformed(e),
    }
}

struct Capture {
    bytes: Vec<u8>,
}

impl Capture {
    fn open(path: &Path) -> Result<Self, Fatal> {
        let bytes = std::fs::read(path)
            .map_err(|e| Fatal::Input(format!("cannot read {}: {e}", path.display())))?;
        let cap = Self { bytes };
        cap.reader(path)?;
        Ok(cap)
    }

    fn reader(&self, path: &Path) -> Result<PcapReader<'_>, Fatal> {
        let r = PcapReader::new(&self.bytes)
            .map_err(|e| Fatal::Input(format!("{}: {e}", path.display())))?;
        match r.header().linktype {
            LINKTYPE_ETHERNET | LINKTYPE_RAW => Ok(r),
            t => Err(Fatal::Input(format!(
                "{}: link type {t} is not supported (Ethernet or raw IP)",
                path.display()
            ))),
        }
    }

    /// Every record, numbered from 1; a truncated tail is an error.
    fn records(&self, path: &Path) -> Result<(u32, Vec<(usize, PcapRecord<'_>)>), Fatal> {
        let r = self.reader(path)?;
        let linktype = r.header().linktype;
        let mut out = Vec::new();
        for (i, rec) in r.enumerate() {
            let rec = rec.map_err(|e| Fatal::Input(format!("{}: {e}", path.display())))?;
            out.push((i + 1, rec));
        }
        Ok((linktype, out))
    }
}

#[derive(Default)]
struct Tally {
    roce: usize,
    ok: usize,
    bad: usize,
    malformed: usize,
}

/// `softrdma pcap verify FILE...`
pub fn verify(files: &[PathBuf], out: &mut impl Write) -> Result<ExitCode, Fatal> {
    let mut worst = 0u8;
    for path in files {
        let tally = match Capture::open(path).and_then(|c| tally(&c, path)) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("softrdma: {e}");
                worst = 2;
                continue;
            }
        };
        writeln!(
            out,
            "{}: {} RoCE packets, {} ICRC ok, {} ICRC bad, {} malformed",
            path.display(),
            tally.roce,
            tally.ok,
            tally.bad,
            tally.malformed
        )
        .map_err(io_fatal)?;
        if tally.bad + tally.malformed > 0 {
            worst = worst.max(1);
        }
    }
    Ok(ExitCode::from(worst))
}

fn tally(cap: &Capture, path: &Path) -> Result<Tally, Fatal> {
    let (linktype, records) = cap.records(path)?;
    let mut t = Tally::default();
    for (_, rec) in &records {
        match classify(linktype, rec.data) {
            Frame::Other => {}
            Frame::Roce(f) => {
                t.roce += 1;
                if f.icrc_ok() {
                    t.ok += 1;
                } else {
                    t.bad += 1;
                }
            }
            Frame::Malformed(_) => {
                t.roce += 1;
                t.malformed += 1;
            }
        }
    }
    Ok(t)
}

fn io_fatal(e: std::io::Error) -> Fatal {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        Fatal::OutputClosed
    } else {
        Fatal::Output(e)
    }
}

/// `softrdma pcap decode [--json] FILE`
pub fn decode(path: &Path, json: bool, out: &mut impl Write) -> Result<ExitCode, Fatal> {
    let cap = Capture::open(path)?;
    let (linktype, records) = cap.records(path)?;
    let t0 = records.first().map_or(0, |(_, r)| r.timestamp_ns());
    for (n, rec) in &records {
        let line = match classify(linktype, rec.data) {
            Frame::Other => continue,
            Frame::Malformed(e) => {
                if json {
                    eprintln!("softrdma: {}: frame {n}: malformed: {e}", path.display());
                    continue;
                }
                format!(
                    "{n:>5} {:>12} {:>15} → {:<15} RRoCE {} [Malformed: {e}]",
                    rel_time(rec, t0),
                    "?",
                    "?",
                    rec.orig_len
                )
            }
            Frame::Roce(f) if json => to_json(*n, &f).to_string(),
            Frame::Roce(f) => summary(*n, rec, t0, &f),
        };
        writeln!(out, "{line}").map_err(io_fatal)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn rel_time(rec: &PcapRecord<'_>, t0: u64) -> String {
    let ns = rec.timestamp_ns().saturating_sub(t0);
    format!("{}.{:06}", ns / 1_000_000_000, (ns % 1_000_000_000) / 1000)
}

/// The MAD header of a packet to QP1, if it carries one.
fn mad(f: &RoceFrame<'_>) -> Option<MadHeader> {
    (f.ib().bth().dest_qp() == Qpn::GSI)
        .then(|| MadHeader::parse(f.ib().payload()).ok())
        .flatten()
}

/// A line in the style of tshark's summary: number, time, addresses, protocol, length, info.
fn summary(n: usize, rec: &PcapRecord<'_>, t0: u64, f: &RoceFrame<'_>) -> String {
    let ib = f.ib();
    let info = match mad(f) {
        Some(m) if m.mgmt_class == softrdma_wire::mad::CLASS_CM => format!("CM: {}", m.attr_name()),
        Some(m) => format!(
            "MAD: {} {} {}",
            m.class_name(),
            m.method_name(),
            m.attr_name()
        ),
        None => format!(
            "{} QP={:#08x} PSN={}",
            ib.info().display,
            ib.bth().dest_qp().value(),
            ib.bth().psn()
        ),
    };
    let icrc = if f.icrc_ok() { "" } else { " [ICRC bad]" };
    format!(
        "{n:>5} {:>12} {:>15} → {:<15} RRoCE {} {info}{icrc}",
        rel_time(rec, t0),
        f.ip().src(),
        f.ip().dst(),
        rec.orig_len
    )
}

/// The JSON object of one packet; the keys are part of the command's interface.
fn to_json(n: usize, f: &RoceFrame<'_>) -> Value {
    let ib = f.ib();
    let bth = ib.bth();
    let mut o = Map::new();
    o.insert("frame".into(), json!(n));
    o.insert("src".into(), json!(f.ip().src().to_string()));
    o.insert("dst".into(), json!(f.ip().dst().to_string()));
    o.insert("sport".into(), json!(f.udp().src_port()));
    o.insert("opcode".into(), json!(bth.opcode().0));
    o.insert("opcode_name".into(), json!(ib.info().name));
    o.insert("se".into(), json!(bth.solicited()));
    o.insert("ack_req".into(), json!(bth.ack_req()));
    o.insert("pad".into(), json!(bth.pad_count()));
    o.insert("pkey".into(), json!(bth.pkey()));
    o.insert("dqpn".into(), json!(bth.dest_qp().value()));
    o.insert("psn".into(), json!(bth.psn().value()));
    o.insert("payload_len".into(), json!(ib.payload().len()));
    o.insert("icrc_ok".into(), json!(f.icrc_ok()));
    // A checked packet always parses; the headers below are exactly its opcode's.
    if let Ok(r) = IbRepr::parse(ib) {
        let x = r.ext;
        if let Some(h) = x.reth {
            o.insert(
                "reth".into(),
                json!({"va": h.va, "rkey": h.rkey, "len": h.len}),
            );
        }
        if let Some(h) = x.aeth {
            o.insert(
                "aeth".into(),
                json!({"syndrome": h.syndrome.to_u8(), "msn": h.msn.value()}),
            );
        }
        if let Some(h) = x.deth {
            o.insert(
                "deth".into(),
                json!({"qkey": h.qkey, "src_qp": h.src_qp.value()}),
            );
        }
        if let Some(h) = x.atomic_eth {
            o.insert(
                "atomic".into(),
                json!({"va": h.va, "rkey": h.rkey, "swap_add": h.swap_add, "compare": h.compare}),
            );
        }
        if let Some(h) = x.atomic_ack_eth {
            o.insert("atomic_ack".into(), json!({"orig": h.orig}));
        }
        if let Some(h) = x.imm_dt {
            o.insert("imm".into(), json!(h.imm));
        }
        if let Some(h) = x.ieth {
            o.insert("ieth".into(), json!(h.rkey));
        }
    }
    if let Some(h) = ib.feth() {
        o.insert("feth".into(), json!(h.word()));
    }
    if let Some(m) = mad(f) {
        o.insert(
            "mad".into(),
            json!({
                "mgmt_class": m.mgmt_class,
                "class_name": m.class_name(),
                "method": m.method,
                "method_name": m.method_name(),
                "attr_id": m.attr_id,
                "attr_name": m.attr_name(),
            }),
        );
    }
    Value::Object(o)
}
