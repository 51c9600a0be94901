//! Device counters, named as Linux rxe's `hw_counters`, and their publication.
//!
//! A soft device lives inside the process that opened it, so its counters do too. The
//! progress thread publishes them, at most once a second while they change and once when the
//! device closes, to `$XDG_RUNTIME_DIR/softrdma/NAME.PID` (or `/tmp/softrdma-UID/NAME.PID`),
//! one `name value` per line, where NAME is the device's [`key`] (its name and address:
//! `softrdma0` moved to another address by `SOFTRDMA_ADDR` is another device). A process that closes the device adds its last counters to
//! `NAME.retired` and removes its file; a reader does the same for the file of a process
//! that died without closing (its last published counters). Both hold an exclusive
//! `flock` on `NAME.lock` meanwhile, so each file is added once. `softrdma link show -s`
//! shows the sum of the live files and the retired one: the device's counters over every
//! process that ever used it (as rxe's `hw_counters` count for the device, not a process).

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

/// The name the files of the device `name` on `addr` go under: devices on different
/// addresses that have the same name (`softrdma0` moved by `SOFTRDMA_ADDR`) are different
/// devices, with counters and resources of their own.
pub fn key(name: &str, addr: std::net::IpAddr) -> String {
    format!("{name}@{addr}")
}

pub(crate) fn path(name: &str) -> PathBuf {
    dir().join(format!("{name}.{}", std::process::id()))
}

pub(crate) fn write(name: &str, counters: &[(&'static str, u64)]) {
    let text: String = counters.iter().map(|(k, v)| format!("{k} {v}\n")).collect();
    replace(&path(name), &text);
}

/// Puts `text` in file `to` of [`dir`] whole (written aside, then renamed, so that a
/// reader never sees half a file); true if it is there.
pub(crate) fn replace(to: &std::path::Path, text: &str) -> bool {
    let d = dir();
    if std::fs::create_dir_all(&d).is_err() {
        return false;
    }
    let name = to.file_name().unwrap_or_default().to_string_lossy();
    let tmp = d.join(format!(".{name}.{}.tmp", std::process::id()));
    std::fs::write(&tmp, text).is_ok() && std::fs::rename(&tmp, to).is_ok()
}

/// The files `NAME.PID` + `suffix` of device `name` in [`dir`], each with whether its
/// process lives.
fn process_files(name: &str, suffix: &str) -> Vec<(PathBuf, bool)> {
    let prefix = format!("{name}.");
    let Ok(entries) = std::fs::read_dir(dir()) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let file = e.file_name().to_string_lossy().into_owned();
            let pid = file.strip_prefix(&prefix)?.strip_suffix(suffix)?;
            if pid.is_empty() || !pid.chars().all(|c| c.is_ascii_digit()) {
                return None;
            }
            let alive = PathBuf::from(format!("/proc/{pid}")).exists();
            Some((e.path(), alive))
        })
        .collect()
}

/// Adds the `name value` lines of `text` into `sum`.
fn add(sum: &mut BTreeMap<String, u64>, text: &str) {
    for line in text.lines() {
        if let Some((k, v)) = line.split_once(' ') {
            let e = sum.entry(k.to_owned()).or_default();
            *e = e.saturating_add(v.parse::<u64>().unwrap_or(0));
        }
    }
}

/// Holds `NAME.lock` exclusively while it lives (see the module docs): the lock goes
/// with the descriptor.
struct Lock(#[allow(dead_code)] std::fs::File);

impl Lock {
    fn take(name: &str) -> Option<Self> {
        use std::os::fd::AsRawFd;
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir().join(format!("{name}.lock")))
            .ok()?;
        // SAFETY: flock on a descriptor the File owns; released when it closes.
        (unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } == 0).then_some(Self(f))
    }
}

/// Adds counter file `file` (a process's, `NAME.PID`) to `NAME.retired` and removes it;
/// the caller holds the lock.
fn fold(name: &str, file: &std::path::Path) {
    let Ok(text) = std::fs::read_to_string(file) else {
        return;
    };
    let retired = dir().join(format!("{name}.retired"));
    let mut sum = BTreeMap::new();
    add(
        &mut sum,
        &std::fs::read_to_string(&retired).unwrap_or_default(),
    );
    add(&mut sum, &text);
    let out: String = sum.iter().map(|(k, v)| format!("{k} {v}\n")).collect();
    if replace(&retired, &out) {
        let _ = std::fs::remove_file(file);
    }
}

/// This process closes device `name`: its last counters (just written) join the
/// retired ones.
pub(crate) fn retire(name: &str) {
    if let Some(_l) = Lock::take(name) {
        fold(name, &path(name));
    }
}

/// The counters of device `name` (its [`key`]), summed over every process that has used
/// it: the live ones, and those that have closed it or died (see the module docs).
pub fn read(name: &str) -> Vec<(String, u64)> {
    let mut sum: BTreeMap<String, u64> = BTreeMap::new();
    let lock = Lock::take(name);
    for (file, alive) in process_files(name, "") {
        if alive {
            add(&mut sum, &std::fs::read_to_string(file).unwrap_or_default());
        } else if lock.is_some() {
            fold(name, &file);
        }
    }
    add(
        &mut sum,
        &std::fs::read_to_string(dir().join(format!("{name}.retired"))).unwrap_or_default(),
    );
    NAMES
        .iter()
        .map(|n| (n.to_string(), sum.get(*n).copied().unwrap_or(0)))
        .collect()
}

/// One resource a process holds on a device, as it published it (see `softrdma res
/// show`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    /// The process.
    pub pid: u32,
    /// Its command name (`/proc/PID/comm`).
    pub comm: String,
    /// `qp`, `cq`, `mr`, `pd` or `cm_id`.
    pub kind: String,
    /// Its attributes, in the order published: numbers in decimal, names as words.
    pub fields: Vec<(String, String)>,
}

impl Resource {
    /// Attribute `key`, if published.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Parses one process's resource file: its pid and command, then its resources.
fn parse_resources(text: &str) -> Vec<Resource> {
    let mut lines = text.lines();
    let Some(head) = lines.next() else {
        return Vec::new();
    };
    let words: Vec<&str> = head.split(' ').collect();
    let (pid, comm) = match words[..] {
        ["proc", "pid", pid, "comm", ref comm @ ..] => (pid.parse().unwrap_or(0), comm.join(" ")),
        _ => return Vec::new(),
    };
    lines
        .filter_map(|l| {
            let mut w = l.split(' ');
            let kind = w.next()?.to_owned();
            let rest: Vec<&str> = w.collect();
            let fields = rest
                .chunks_exact(2)
                .map(|p| (p[0].to_owned(), p[1].to_owned()))
                .collect();
            Some(Resource {
                pid,
                comm: comm.clone(),
                kind,
                fields,
            })
        })
        .collect()
}

/// The QPNs that process `pid` last published for device `name` (a dead owner's, for its
/// successor to quarantine); none if its file is gone.
pub(crate) fn qpns_of(name: &str, pid: u32) -> Vec<u32> {
    let path = dir().join(format!("{name}.{pid}.res"));
    parse_resources(&std::fs::read_to_string(path).unwrap_or_default())
        .iter()
        .filter(|r| r.kind == "qp")
        .filter_map(|r| r.get("lqpn")?.parse().ok())
        .collect()
}

/// Every resource of device `name` (its [`key`]) in every live process, and how many processes have
/// published (each process that has the device open and has created anything). The
/// files of processes that died are removed.
pub fn resources(name: &str) -> (Vec<Resource>, usize) {
    let (mut all, mut procs) = (Vec::new(), 0);
    for (file, alive) in process_files(name, ".res") {
        if !alive {
            let _ = std::fs::remove_file(file);
            continue;
        }
        procs += 1;
        all.extend(parse_resources(
            &std::fs::read_to_string(file).unwrap_or_default(),
        ));
    }
    all.sort_by_key(|r| r.pid);
    (all, procs)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dead owner's QPNs are read back from the resource file it last published, as
    /// its successor quarantines them; a process with no file has none.
    #[test]
    fn a_dead_processs_qpns_are_read_from_its_last_file() {
        let name = format!("qtest{}", std::process::id());
        let _ = std::fs::create_dir_all(dir());
        let path = dir().join(format!("{name}.4000000001.res"));
        std::fs::write(
            &path,
            "proc pid 4000000001 comm x\n\
             qp lqpn 1193046 type RC state RTS\n\
             cq cqn 3 cqe 16\n\
             qp lqpn 42 type UD state RTS\n",
        )
        .unwrap();
        assert_eq!(qpns_of(&name, 4000000001), vec![1193046, 42]);
        let _ = std::fs::remove_file(path);
        assert!(qpns_of(&name, 4000000001).is_empty());
    }
}
