//! `softrdma pcap verify` and `decode` as a user runs them: real process, real files.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/data")
        .join(name)
}

/// The shared rxe captures and the project's own extra ones.
fn captures() -> Vec<PathBuf> {
    let mut v: Vec<_> = [data(""), data("extra")]
        .iter()
        .flat_map(|d| std::fs::read_dir(d).unwrap())
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "pcap"))
        .collect();
    v.sort();
    assert_eq!(v.len(), 15, "the bundled captures are present");
    v
}

/// Runs a command to completion, failing the test if it takes longer than a minute.
fn run(mut cmd: Command) -> Output {
    let (tx, rx) = std::sync::mpsc::channel();
    let what = format!("{cmd:?}");
    std::thread::spawn(move || tx.send(cmd.output()));
    match rx.recv_timeout(std::time::Duration::from_secs(60)) {
        Ok(out) => out.unwrap_or_else(|e| panic!("{what} does not start: {e}")),
        Err(_) => panic!("{what} ran for more than 60 s"),
    }
}

fn softrdma(args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_softrdma"));
    cmd.args(args);
    run(cmd)
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

#[test]
fn verify_good_captures_exits_0() {
    let good: Vec<String> = captures()
        .into_iter()
        .filter(|p| !p.ends_with("pyroce_rc.pcap"))
        .map(|p| p.display().to_string())
        .collect();
    let args: Vec<&str> = ["pcap", "verify"]
        .into_iter()
        .chain(good.iter().map(String::as_str))
        .collect();
    let o = softrdma(&args);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let out = stdout(&o);
    assert_eq!(out.lines().count(), good.len());
    let rc = data("rc_pingpong.pcap").display().to_string();
    assert!(
        out.contains(&format!(
            "{rc}: 40 RoCE packets, 40 ICRC ok, 0 ICRC bad, 0 malformed\n"
        )),
        "{out}"
    );
}

#[test]
fn verify_reports_the_corrupted_packet_and_exits_1() {
    let f = data("pyroce_rc.pcap").display().to_string();
    let o = softrdma(&["pcap", "verify", &f]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stdout(&o),
        format!("{f}: 22 RoCE packets, 21 ICRC ok, 1 ICRC bad, 0 malformed\n")
    );
}

#[test]
fn verify_counts_malformed_packets() {
    // A capture whose one RoCE packet has a reserved opcode, written with the crate's writer.
    let src = std::fs::read(data("rc_pingpong.pcap")).unwrap();
    let reader = softrdma_wire::pcap::PcapReader::new(&src).unwrap();
    let mut w = softrdma_wire::pcap::PcapWriter::new(Vec::new(), 1).unwrap();
    for rec in reader {
        let rec = rec.unwrap();
        if softrdma_wire::RoceFrame::parse_ethernet(rec.data).is_ok() {
            let mut bytes = rec.data.to_vec();
            bytes[14 + 20 + 8] = 0x15; // BTH opcode: reserved
            w.write_packet(std::time::Duration::ZERO, &bytes).unwrap();
            break;
        }
    }
    let dir = tempdir();
    let path = dir.join("malformed.pcap");
    std::fs::write(&path, w.into_inner().unwrap()).unwrap();
    let p = path.display().to_string();
    let o = softrdma(&["pcap", "verify", &p]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stdout(&o),
        format!("{p}: 1 RoCE packets, 0 ICRC ok, 0 ICRC bad, 1 malformed\n")
    );
    let o = softrdma(&["pcap", "decode", &p]);
    assert!(stdout(&o).contains("[Malformed: reserved or unknown opcode 0x15]"));
}

fn tempdir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("softrdma-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn unreadable_or_non_pcap_files_exit_2_with_a_message() {
    let o = softrdma(&["pcap", "verify", "/nonexistent/x.pcap"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("cannot read /nonexistent/x.pcap"), "{err}");

    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let o = softrdma(&["pcap", "decode", manifest]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("not a classic pcap file"), "{err}");

    // One bad file among good ones: the good ones are still reported.
    let good = data("ud_pingpong.pcap").display().to_string();
    let o = softrdma(&["pcap", "verify", manifest, &good]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stdout(&o).contains("10 RoCE packets"));
}

const ALWAYS: &[&str] = &[
    "frame",
    "src",
    "dst",
    "sport",
    "opcode",
    "opcode_name",
    "se",
    "ack_req",
    "pad",
    "pkey",
    "dqpn",
    "psn",
    "payload_len",
    "icrc_ok",
];
const OPTIONAL: &[&str] = &[
    "reth",
    "aeth",
    "deth",
    "atomic",
    "atomic_ack",
    "imm",
    "ieth",
    "feth",
    "mad",
];

fn decode_json(path: &Path) -> Vec<Value> {
    let o = softrdma(&["pcap", "decode", "--json", &path.display().to_string()]);
    assert_eq!(o.status.code(), Some(0));
    stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect()
}

#[test]
fn decode_json_has_exactly_the_documented_keys() {
    let mut seen_optional = std::collections::BTreeSet::new();
    for path in captures() {
        let packets = decode_json(&path);
        assert!(!packets.is_empty());
        let mut last_frame = 0;
        for p in &packets {
            let o = p.as_object().expect("an object");
            for k in ALWAYS {
                assert!(o.contains_key(*k), "{}: missing {k} in {p}", path.display());
            }
            for k in o.keys() {
                assert!(
                    ALWAYS.contains(&k.as_str()) || OPTIONAL.contains(&k.as_str()),
                    "unexpected key {k}"
                );
                if OPTIONAL.contains(&k.as_str()) {
                    seen_optional.insert(k.clone());
                }
            }
            let frame = o["frame"].as_u64().expect("integer frame");
            assert!(frame > last_frame, "capture order");
            last_frame = frame;
            for k in [
                "sport",
                "opcode",
                "pad",
                "pkey",
                "dqpn",
                "psn",
                "payload_len",
            ] {
                assert!(o[k].is_u64(), "{k} is an integer");
            }
            assert!(o["se"].is_boolean() && o["ack_req"].is_boolean());
            assert!(
                o["src"]
                    .as_str()
                    .unwrap()
                    .parse::<std::net::IpAddr>()
                    .is_ok()
            );
        }
    }
    for k in ["reth", "aeth", "deth", "atomic", "atomic_ack", "mad"] {
        assert!(seen_optional.contains(k), "{k} appears in some capture");
    }
}

#[test]
fn decode_names_cm_messages_on_qp1() {
    let packets = decode_json(&data("rping.pcap"));
    let names: Vec<&str> = packets
        .iter()
        .filter_map(|p| p.get("mad"))
        .map(|m| m["attr_name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "ConnectRequest",
            "ConnectReply",
            "ReadyToUse",
            "DisconnectRequest",
            "DisconnectReply"
        ]
    );
    let o = softrdma(&["pcap", "decode", &data("rping.pcap").display().to_string()]);
    let text = stdout(&o);
    assert!(text.lines().next().unwrap().ends_with("CM: ConnectRequest"));
    assert!(text.contains("RC RDMA Read Response Only QP=0x00001e"));
}

/// Parses a tshark field: hex with 0x, or decimal; empty is absent.
fn num(s: &str) -> Option<u64> {
    if s.is_empty() {
        None
    } else if let Some(h) = s.strip_prefix("0x") {
        Some(u64::from_str_radix(h, 16).unwrap())
    } else {
        Some(s.parse().unwrap())
    }
}

const TSHARK_FIELDS: &[&str] = &[
    "frame.number",
    "infiniband.bth.opcode",
    "infiniband.bth.destqp",
    "infiniband.bth.psn",
    "infiniband.bth.a",
    "infiniband.reth.va",
    "infiniband.reth.r_key",
    "infiniband.reth.dmalen",
    "infiniband.aeth.syndrome",
    "infiniband.aeth.msn",
    "infiniband.deth.q_key",
    "infiniband.deth.srcqp",
    "infiniband.atomiceth.swapdt",
    "infiniband.atomiceth.cmpdt",
    "infiniband.atomicacketh.origremdt",
];

fn tshark(path: &Path) -> Vec<Vec<Option<u64>>> {
    let mut cmd = Command::new("tshark");
    cmd.args(["-n", "-r"]).arg(path).args([
        "-Y",
        "udp.dstport==4791",
        "-T",
        "fields",
        "-E",
        "separator=|",
        "-E",
        "occurrence=f",
    ]);
    for f in TSHARK_FIELDS {
        cmd.args(["-e", f]);
    }
    let o = cmd
        .output()
        .unwrap_or_else(|e| panic!("tshark is needed for this test (apt-get install tshark): {e}"));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| l.split('|').map(num).collect())
        .collect()
}

#[test]
fn decode_json_agrees_with_tshark() {
    let mut compared = 0;
    for path in captures() {
        let ours = decode_json(&path);
        let theirs = tshark(&path);
        assert_eq!(ours.len(), theirs.len(), "{}: packet count", path.display());
        for (p, t) in ours.iter().zip(&theirs) {
            let g = |a: &str, b: &str| p.get(a).and_then(|h| h.get(b)).and_then(Value::as_u64);
            let is_atomic = p.get("atomic").is_some();
            // tshark files the AtomicETH's VA and R_Key under the RETH fields.
            let (va, rkey) = if is_atomic {
                (g("atomic", "va"), g("atomic", "rkey"))
            } else {
                (g("reth", "va"), g("reth", "rkey"))
            };
            let expected = vec![
                p["frame"].as_u64(),
                p["opcode"].as_u64(),
                p["dqpn"].as_u64(),
                p["psn"].as_u64(),
                Some(u64::from(p["ack_req"].as_bool().unwrap())),
                va,
                rkey,
                g("reth", "len"),
                g("aeth", "syndrome"),
                g("aeth", "msn"),
                g("deth", "qkey"),
                g("deth", "src_qp"),
                g("atomic", "swap_add"),
                g("atomic", "compare"),
                g("atomic_ack", "orig"),
            ];
            assert_eq!(&expected, t, "{}: {p}", path.display());
            compared += 1;
        }
    }
    assert_eq!(compared, 218 + 76 + 100, "compared every packet");
}
