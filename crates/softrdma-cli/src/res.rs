//! `softrdma res show`: the resources (QPs, CQs, MRs, PDs, CM IDs) every process holds on each
//! device, in the layout of iproute2's `rdma res show`, from what each process publishes
//! (`softrdma::stats::resources`).

use crate::error::CliError;
use clap::{Args, Subcommand};
use softrdma::config;
use softrdma::stats::Resource;
use std::process::ExitCode;

/// `softrdma res`.
#[derive(Debug, Subcommand)]
pub enum ResCommand {
    /// Show the resources of every process on each device, as `rdma res show` does.
    #[command(after_help = "Example:\n  softrdma res show qp link softrdma0 -d")]
    Show(ShowArgs),
}

/// What `softrdma res show` shows.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// `qp`, `cq`, `mr`, `pd`, `cm_id` or `srq`; none: a count of each per device.
    object: Option<String>,
    /// Only this device: `link DEV[/1]` or `dev DEV`.
    #[arg(num_args = 0..=2, trailing_var_arg = true)]
    filter: Vec<String>,
    /// JSON output, as `rdma -j`.
    #[arg(short = 'j', long = "json")]
    json: bool,
    /// More detail: `-d` adds keys and CQs, `-dd` a QP's peer, retries, RNR NAKs, packet
    /// counts and last error.
    #[arg(short = 'd', long = "details", action = clap::ArgAction::Count)]
    details: u8,
}

/// Runs `softrdma res`.
pub fn run(cmd: &ResCommand) -> ExitCode {
    let ResCommand::Show(a) = cmd;
    match show(a, &mut std::io::stdout().lock()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("softrdma res: {e}");
            ExitCode::from(1)
        }
    }
}

const OBJECTS: [&str; 6] = ["qp", "cq", "mr", "pd", "cm_id", "srq"];

/// Which keys one kind prints, in order, at each detail level: (published key, shown
/// key, hex in text, detail level).
fn layout(kind: &str) -> &'static [(&'static str, &'static str, bool, u8)] {
    match kind {
        "qp" => &[
            ("lqpn", "lqpn", true, 0),
            ("rqpn", "rqpn", true, 0),
            ("type", "type", false, 0),
            ("state", "state", false, 0),
            ("rq-psn", "rq-psn", false, 0),
            ("sq-psn", "sq-psn", false, 0),
            ("pdn", "pdn", false, 0),
            ("sq-cq", "sq-cqn", false, 1),
            ("rq-cq", "rq-cqn", false, 1),
            ("peer", "peer", false, 2),
            ("retries", "retries", false, 2),
            ("timeouts", "timeouts", false, 2),
            ("rnr-naks-sent", "rnr-naks-sent", false, 2),
            ("rnr-naks-rcvd", "rnr-naks-rcvd", false, 2),
            ("sent", "sent-pkts", false, 2),
            ("rcvd", "rcvd-pkts", false, 2),
            ("last-error", "last-error", false, 2),
        ],
        "cq" => &[
            ("cqe", "cqe", false, 0),
            ("users", "users", false, 0),
            ("cqn", "cqn", false, 0),
        ],
        "mr" => &[
            ("mrn", "mrn", false, 0),
            ("rkey", "rkey", true, 1),
            ("lkey", "lkey", true, 1),
            ("iova", "iova", true, 1),
            ("mrlen", "mrlen", false, 0),
            ("pdn", "pdn", false, 0),
            ("access", "access", true, 1),
        ],
        "pd" => &[("users", "users", false, 0), ("pdn", "pdn", false, 0)],
        "cm_id" => &[
            ("cm-idn", "cm-idn", false, 0),
            ("lqpn", "lqpn", false, 0),
            ("qp-type", "qp-type", false, 0),
            ("state", "state", false, 0),
            ("ps", "ps", false, 0),
            ("src-addr", "src-addr", false, 0),
            ("dst-addr", "dst-addr", false, 0),
        ],
        _ => &[],
    }
}

fn show(a: &ShowArgs, out: &mut impl std::io::Write) -> Result<(), CliError> {
    let bad = |what: String| CliError::Usage(what);
    if let Some(o) = &a.object
        && !OBJECTS.contains(&o.as_str())
    {
        return Err(bad(format!(
            "unknown object \"{o}\": one of {}",
            OBJECTS.join(", ")
        )));
    }
    let only = match a.filter.as_slice() {
        [] => None,
        [k, v] if k == "link" || k == "dev" => Some(v.split('/').next().unwrap_or(v).to_owned()),
        f => {
            return Err(bad(format!(
                "unknown filter \"{}\": link DEV/1 or dev DEV",
                f.join(" ")
            )));
        }
    };
    let devs = config::devices()?;
    if let Some(n) = &only
        && !devs.iter().any(|d| d.name == *n)
    {
        return Err(CliError::NoDevice(n.clone()));
    }
    let mut json = Vec::new();
    let io = |e: std::io::Error| CliError::Io {
        what: "standard output".into(),
        source: e,
    };
    for (index, d) in devs.iter().enumerate() {
        if only.as_ref().is_some_and(|n| *n != d.name) {
            continue;
        }
        let (all, procs) = softrdma::stats::resources(&softrdma::stats::key(&d.name, d.addr));
        let Some(object) = &a.object else {
            let count = |k: &str| all.iter().filter(|r| r.kind == k).count();
            if a.json {
                json.push(serde_json::json!({
                    "ifindex": index, "ifname": d.name,
                    "pd": count("pd"), "cq": count("cq"), "qp": count("qp"),
                    "cm_id": count("cm_id"), "mr": count("mr"), "ctx": procs, "srq": 0,
                }));
            } else {
                writeln!(
                    out,
                    "{index}: {}: pd {} cq {} qp {} cm_id {} mr {} ctx {procs} srq 0",
                    d.name,
                    count("pd"),
                    count("cq"),
                    count("qp"),
                    count("cm_id"),
                    count("mr")
                )
                .map_err(io)?;
            }
            continue;
        };
        for r in all.iter().filter(|r| r.kind == *object) {
            if a.json {
                json.push(to_json(r, index, &d.name, a.details));
            } else {
                writeln!(out, "{}", to_text(r, &d.name, a.details)).map_err(io)?;
            }
        }
    }
    if a.json {
        writeln!(out, "{}", serde_json::Value::Array(json)).map_err(io)?;
    }
    Ok(())
}

/// Whether a QP of type `t` has key `k` (a UD QP has no peer QP).
fn applies(r: &Resource, k: &str) -> bool {
    !(r.kind == "qp" && r.get("type") == Some("UD") && matches!(k, "rqpn" | "rq-psn" | "peer"))
}

/// One resource as a line of text, as `rdma res show` prints it.
fn to_text(r: &Resource, dev: &str, details: u8) -> String {
    let mut s = if r.kind == "qp" || r.kind == "cm_id" {
        format!("link {dev}/1")
    } else {
        format!("dev {dev}")
    };
    for &(key, shown, hex, level) in layout(&r.kind) {
        if level > details || !applies(r, key) {
            continue;
        }
        let Some(v) = r.get(key) else { continue };
        match v.parse::<u64>() {
            Ok(n) if hex => s.push_str(&format!(" {shown} {n:#x}")),
            _ => s.push_str(&format!(" {shown} {v}")),
        }
        if key == "sq-psn" && matches!(r.get("type"), Some("RC" | "UC")) {
            s.push_str(" path-mig-state MIGRATED");
        }
    }
    format!("{s} pid {} comm {}", r.pid, r.comm)
}

/// One resource as a JSON object, as `rdma -j res show` prints it (numbers as numbers).
fn to_json(r: &Resource, index: usize, dev: &str, details: u8) -> serde_json::Value {
    let mut m = serde_json::Map::new();
    m.insert("ifindex".into(), index.into());
    if r.kind == "qp" || r.kind == "cm_id" {
        m.insert("ifname".into(), dev.into());
        m.insert("port".into(), 1.into());
    } else {
        m.insert("dev".into(), dev.into());
    }
    for &(key, shown, _, level) in layout(&r.kind) {
        if level > details || !applies(r, key) {
            continue;
        }
        let Some(v) = r.get(key) else { continue };
        let val = v
            .parse::<u64>()
            .map_or_else(|_| serde_json::Value::from(v), serde_json::Value::from);
        m.insert(shown.into(), val);
        if key == "sq-psn" && matches!(r.get("type"), Some("RC" | "UC")) {
            m.insert("path-mig-state".into(), "MIGRATED".into());
        }
    }
    m.insert("pid".into(), r.pid.into());
    m.insert("comm".into(), r.comm.clone().into());
    serde_json::Value::Object(m)
}
