//! Device counters, named as Linux rxe's `hw_counters`, and their publication.
//!
//! A soft device lives inside the process that opened it, so its counters do too. The
//! progress thread publishes them, at most once a second while they change and once when the
//! device closes, to `$XDG_RUNTIME_DIR/softrdma/NAME.PID` (or `/tmp/softrdma-UID/NAME.PID`),
//! one `name value` per line; `softrdma link show -s` adds up the files of live processes.

use softrdma_proto::endpoint::Counter;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The counter names, in the order `rdma statistic` prints rxe's, then softrdma's own
/// ([`Counter::HW`]).
pub const NAMES: [&str; Counter::HW.len()] = {
    let mut names = [""; Counter::HW.len()];
    let mut i = 0;
    while i < names.len() {
        names[i] = Counter::HW[i].name();
        i += 1;
    }
    names
};

/// Where counter files go.
pub fn dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) => PathBuf::from(d).join("softrdma"),
        // SAFETY: getuid has no preconditions and cannot fail.
        None => PathBuf::from(format!("/tmp/softrdma-{}", unsafe { libc::getuid() })),
    }
}

pub(crate) fn path(name: &str) -> PathBuf {
    dir().join(format!("{name}.{}", std::process::id()))
}

pub(crate) fn write(name: &str, counters: &[(&'static str, u64)]) {
    let d = dir();
    if std::fs::create_dir_all(&d).is_err() {
        return;
    }
    let text: String = counters.iter().map(|(k, v)| format!("{k} {v}\n")).collect();
    let tmp = d.join(format!(".{name}.{}.tmp", std::process::id()));
    // Write then rename, so that readers never see half a file.
    if std::fs::write(&tmp, text).is_ok() {
        let _ = std::fs::rename(&tmp, path(name));
    }
}

/// The counters of device `name`, summed over the live processes that have it open.
pub fn read(name: &str) -> Vec<(String, u64)> {
    let mut sum: BTreeMap<String, u64> = BTreeMap::new();
    let prefix = format!("{name}.");
    if let Ok(entries) = std::fs::read_dir(dir()) {
        for e in entries.flatten() {
            let file = e.file_name().to_string_lossy().into_owned();
            let Some(pid) = file.strip_prefix(&prefix) else {
                continue;
            };
            if !pid.chars().all(|c| c.is_ascii_digit())
                || !PathBuf::from(format!("/proc/{pid}")).exists()
            {
                continue;
            }
            for line in std::fs::read_to_string(e.path())
                .unwrap_or_default()
                .lines()
            {
                if let Some((k, v)) = line.split_once(' ') {
                    *sum.entry(k.to_owned()).or_default() += v.parse::<u64>().unwrap_or(0);
                }
            }
        }
    }
    NAMES
        .iter()
        .map(|n| (n.to_string(), sum.get(*n).copied().unwrap_or(0)))
        .collect()
}
