//! `softrdma doctor`: why RDMA does not work on this host, and how to fix it.
//!
//! Contract:
//! - Every check reads the host through one root directory (`--root DIR`, default `/`):
//!   `/proc`, `/sys`, `/dev`, `/lib/modules`, `/etc` and `/usr/lib` are taken below it, so a
//!   fixture tree stands for a whole host. Only with the real root (`/`) does doctor also
//!   ask the running system what no file shows: the live firewall (`nft list ruleset`,
//!   `iptables-save`), `ethtool -i`, and softrdma's configured devices as `softrdma link`
//!   sees them (`$SOFTRDMA_CONFIG` and friends). Under another root the device config is
//!   `ROOT/etc/softrdma` alone (or the default device), and the firewall is the boot-time
//!   rules in `ROOT/etc/nftables.conf` and `ROOT/etc/iptables/rules.v4`. Whose view it is
//!   (uid, CAP_IPC_LOCK, RLIMIT_MEMLOCK) comes from `ROOT/proc/self/status` and `limits`,
//!   so a fixture says it too; device nodes, which git cannot hold, may be regular files
//!   there (and count as openable unless they have no write bit).
//! - Nothing is changed: doctor only reads files and runs read-only commands, each
//!   killed after 10 s.
//! - No input makes doctor panic or hang: files are read only when they are regular files,
//!   at most 16 MiB of each, without blocking, and bytes that are not UTF-8 are replaced;
//!   what cannot be read or parsed counts as absent and is judged as such (a warning or a
//!   failure with its reason), never as an error of doctor's own.
//! - Each check has a stable id (`modules.mlx5_ib`, `port.rxe0/1.gid_index`, ...), a layer
//!   (kernel modules, devices and ports, user space, softrdma) and a verdict: ✓ fine,
//!   ! worth knowing (RDMA may still work), ✗ broken. A ! or ✗ carries a one-sentence
//!   reason and the command that fixes it.
//! - Output is one line per check, grouped by layer, in colour only on a terminal; `--json`
//!   prints one JSON object (`checks`, `summary`) instead.
//! - Exit status: 0 when nothing is broken (warnings allowed), 1 when a check is ✗, 2 when
//!   doctor itself could not run (a root that is not a directory, an unknown `-d DEV`).

mod firewall;
mod hw;
mod kernel;
mod soft;
mod user;

use clap::Args;
use serde_json::{Value, json};
use std::fmt::Write as _;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Flags of `softrdma doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print one JSON object (every check with its id, verdict, reason and fix) instead of
    /// the checklist.
    #[arg(long)]
    json: bool,
    /// Only this device (a kernel RDMA device such as mlx5_0 or rxe0, or a softrdma device).
    #[arg(short = 'd', long = "ib-dev")]
    ib_dev: Option<String>,
    /// Read the host below this directory instead of `/` (for tests and for inspecting
    /// another system's files).
    #[arg(long, default_value = "/")]
    root: PathBuf,
}

/// How bad a check's finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    /// Fine.
    Ok,
    /// Worth knowing; RDMA may still work.
    Warn,
    /// Broken: doctor exits 1.
    Fail,
}

impl Verdict {
    /// The checklist's mark.
    fn mark(self) -> &'static str {
        match self {
            Verdict::Ok => "✓",
            Verdict::Warn => "!",
            Verdict::Fail => "✗",
        }
    }

    /// The word for `--json`.
    fn word(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Warn => "warn",
            Verdict::Fail => "fail",
        }
    }

    /// The mark's ANSI colour on a terminal.
    fn colour(self) -> &'static str {
        match self {
            Verdict::Ok => "\x1b[32m",
            Verdict::Warn => "\x1b[33m",
            Verdict::Fail => "\x1b[31m",
        }
    }
}

/// The layer a check belongs to, in the order they are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Layer {
    /// Kernel modules and their load order.
    Modules,
    /// `/sys/class/infiniband` devices, ports, GIDs, firmware.
    Devices,
    /// Device files, providers, ABI, memlock, firewall, what libibverbs would list.
    UserSpace,
    /// softrdma's own devices.
    Softrdma,
}

impl Layer {
    /// Every layer, in print order.
    const ALL: [Layer; 4] = [
        Layer::Modules,
        Layer::Devices,
        Layer::UserSpace,
        Layer::Softrdma,
    ];

    /// The heading printed above the layer.
    fn title(self) -> &'static str {
        match self {
            Layer::Modules => "Kernel modules",
            Layer::Devices => "Devices and ports",
            Layer::UserSpace => "User space",
            Layer::Softrdma => "softrdma",
        }
    }

    /// The layer's name in `--json`.
    fn key(self) -> &'static str {
        match self {
            Layer::Modules => "modules",
            Layer::Devices => "devices",
            Layer::UserSpace => "user",
            Layer::Softrdma => "softrdma",
        }
    }
}

/// One line of the checklist.
#[derive(Debug, Clone)]
pub struct Check {
    /// Stable id for scripts and tests.
    pub id: String,
    /// Where it is printed.
    pub layer: Layer,
    /// How bad it is.
    pub verdict: Verdict,
    /// The short label printed before the finding.
    pub title: String,
    /// What was found, in a few words.
    pub detail: String,
    /// Why it is a problem (one sentence), for a ! or ✗.
    pub reason: Option<String>,
    /// The command that fixes it.
    pub fix: Option<String>,
    /// Further lines printed under the check (a GID table, the causes found).
    pub notes: Vec<String>,
    /// Structured findings for `--json`.
    pub data: Value,
}

impl Check {
    /// A check with only its verdict, id and title.
    fn new(
        layer: Layer,
        verdict: Verdict,
        id: impl Into<String>,
        title: impl Into<String>,
    ) -> Self {
        Self {
            id: id.into(),
            layer,
            verdict,
            title: title.into(),
            detail: String::new(),
            reason: None,
            fix: None,
            notes: Vec::new(),
            data: Value::Null,
        }
    }

    /// A fine check.
    pub fn ok(layer: Layer, id: impl Into<String>, title: impl Into<String>) -> Self {
        Self::new(layer, Verdict::Ok, id, title)
    }

    /// A warning.
    pub fn warn(layer: Layer, id: impl Into<String>, title: impl Into<String>) -> Self {
        Self::new(layer, Verdict::Warn, id, title)
    }

    /// A failure.
    pub fn fail(layer: Layer, id: impl Into<String>, title: impl Into<String>) -> Self {
        Self::new(layer, Verdict::Fail, id, title)
    }

    /// Sets what was found.
    pub fn detail(mut self, d: impl Into<String>) -> Self {
        self.detail = d.into();
        self
    }

    /// Sets the reason.
    pub fn why(mut self, r: impl Into<String>) -> Self {
        self.reason = Some(r.into());
        self
    }

    /// Sets the fixing command.
    pub fn fix(mut self, f: impl Into<String>) -> Self {
        self.fix = Some(f.into());
        self
    }

    /// Adds a line under the check.
    pub fn note(mut self, n: impl Into<String>) -> Self {
        self.notes.push(n.into());
        self
    }

    /// Sets the structured findings.
    pub fn data(mut self, v: Value) -> Self {
        self.data = v;
        self
    }

    /// The check as one object of `--json`'s `checks`.
    fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "layer": self.layer.key(),
            "verdict": self.verdict.word(),
            "title": self.title,
            "detail": self.detail,
            "reason": self.reason,
            "fix": self.fix,
            "notes": self.notes,
            "data": self.data,
        })
    }
}

/// The host as seen below the root directory. Every read goes through here, so that a
/// fixture tree stands for a host.
#[derive(Debug)]
pub struct Root {
    /// The directory that stands for `/`.
    dir: PathBuf,
    /// Whether it is the running system's `/`.
    live: bool,
}

impl Root {
    /// A root; `live` when it is the running system's `/`.
    pub fn new(dir: &Path) -> Self {
        let live = dir.canonicalize().is_ok_and(|d| d == Path::new("/"));
        Self {
            dir: dir.to_owned(),
            live,
        }
    }

    /// Whether this is the running system, so that commands may be run and live state asked.
    pub fn live(&self) -> bool {
        self.live
    }

    /// An absolute path of the host, below the root.
    pub fn path(&self, abs: &str) -> PathBuf {
        self.dir.join(abs.trim_start_matches('/'))
    }

    /// A file's text, without trailing white space; `None` if it cannot be read (sysfs
    /// answers EINVAL for an empty GID's type, which counts as absent). Bytes that are not
    /// UTF-8 become U+FFFD, so one bad byte spoils a value, not the whole file; what
    /// follows [`MAX_TEXT`] is left out.
    pub fn read(&self, abs: &str) -> Option<String> {
        self.bytes(abs, MAX_TEXT)
            .map(|b| String::from_utf8_lossy(&b).trim_end().to_owned())
    }

    /// Up to `limit` bytes of a regular file; `None` for anything else. Only regular files
    /// are opened, and without blocking: a FIFO or a device (a fixture's `/proc/net/udp`
    /// linked to `/dev/zero`, say) would otherwise hang doctor or fill its memory. `/proc`
    /// and sysfs files are regular files, so the live host reads as before.
    pub fn bytes(&self, abs: &str, limit: u64) -> Option<Vec<u8>> {
        use std::io::Read as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let p = self.path(abs);
        if !std::fs::metadata(&p).ok()?.is_file() {
            return None;
        }
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
            .open(&p)
            .ok()?;
        let mut v = Vec::new();
        f.take(limit).read_to_end(&mut v).ok()?;
        Some(v)
    }

    /// The names in a directory, sorted; empty if it cannot be read.
    pub fn list(&self, abs: &str) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.path(abs))
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort_by_key(|a| natural(a));
        v
    }

    /// Whether the path is a regular file, following links (a dangling link is not).
    pub fn is_file(&self, abs: &str) -> bool {
        std::fs::metadata(self.path(abs)).is_ok_and(|m| m.is_file())
    }

    /// Whether the path exists (a dangling link counts).
    pub fn exists(&self, abs: &str) -> bool {
        std::fs::symlink_metadata(self.path(abs)).is_ok()
    }

    /// The last component of a symbolic link's target (`device/driver` → `mlx5_core`).
    pub fn link_name(&self, abs: &str) -> Option<String> {
        std::fs::read_link(self.path(abs))
            .ok()
            .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()))
    }
}

/// The most of a text file doctor reads: far beyond any `/proc` or sysfs file it asks
/// for (`/proc/net/udp` with 100,000 sockets is 13 MiB), and a bound on a fixture's junk.
pub const MAX_TEXT: u64 = 16 << 20;

/// How long a command doctor runs (`nft`, `iptables-save`, `ethtool`) may take before it
/// is killed and counted as not answering: a hung netlink call must not hang doctor.
const COMMAND_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Runs a read-only command on the live host with no input; its standard output (at
/// most [`MAX_TEXT`]) if it exits 0 within [`COMMAND_LIMIT`], else `None` (not installed,
/// not allowed, failed, or killed for taking too long).
pub fn run_quiet(cmd: &str, args: &[&str]) -> Option<String> {
    use std::io::Read as _;
    use std::process::{Command, Stdio};
    let mut child = Command::new(cmd)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    // The output is read on a thread so that a command writing more than a pipe holds
    // does not block before it exits.
    let stdout = child.stdout.take()?;
    let reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = stdout.take(MAX_TEXT).read_to_end(&mut v);
        v
    });
    let deadline = std::time::Instant::now() + COMMAND_LIMIT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            _ => {
                // Our own child, by its handle.
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    // After a kill the reader is left behind, not joined: a grandchild could still hold
    // the pipe open.
    if !status?.success() {
        return None;
    }
    let out = reader.join().ok()?;
    Some(String::from_utf8_lossy(&out).into_owned())
}

/// Sorts `uverbs10` after `uverbs9` and `gids/10` after `gids/9`.
fn natural(s: &str) -> (String, u64) {
    let digits = s.len() - s.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let (head, tail) = s.split_at(s.len() - digits);
    (head.to_owned(), tail.parse().unwrap_or(0))
}

/// What the process reading the host is allowed: from `ROOT/proc/self/status`, so that a
/// fixture says whose view it is (with the real root it is this process).
#[derive(Debug, Clone, Copy)]
pub struct Me {
    /// Effective uid (1000 when the status cannot be read: an ordinary user).
    pub euid: u32,
    /// Whether CAP_IPC_LOCK is effective (memlock limits do not apply then).
    pub ipc_lock: bool,
    /// Whether CAP_SYS_ADMIN is effective (root's `softrdma exec` needs it for a mount
    /// namespace; root in a container often lacks it).
    pub sys_admin: bool,
}

impl Me {
    /// Reads `ROOT/proc/self/status`; an unreadable one is an ordinary user with no
    /// capabilities, the view that finds the most to warn about.
    fn read(root: &Root) -> Self {
        let status = root.read("/proc/self/status").unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(str::trim)
                .map(str::to_owned)
        };
        let euid = field("Uid:")
            .and_then(|u| u.split_whitespace().nth(1).and_then(|e| e.parse().ok()))
            .unwrap_or(1000);
        let caps = field("CapEff:").and_then(|c| u64::from_str_radix(&c, 16).ok());
        // CAP_IPC_LOCK is capability 14, CAP_SYS_ADMIN 21.
        let has = |bit: u32| caps.is_some_and(|c| c & (1 << bit) != 0);
        Self {
            euid,
            ipc_lock: has(14),
            sys_admin: has(21),
        }
    }
}

/// Everything the checks share: the root, the caller, the device filter.
pub struct Ctx {
    /// The host.
    pub root: Root,
    /// Who is asking.
    pub me: Me,
    /// `-d DEV`.
    pub only: Option<String>,
}

impl Ctx {
    /// Whether device `name` passes the `-d` filter.
    pub fn wants(&self, name: &str) -> bool {
        self.only.as_deref().is_none_or(|d| d == name)
    }
}

/// Runs `softrdma doctor`.
pub fn run(a: &DoctorArgs) -> ExitCode {
    if !a.root.is_dir() {
        eprintln!(
            "softrdma doctor: --root {}: not a directory",
            a.root.display()
        );
        return ExitCode::from(2);
    }
    let root = Root::new(&a.root);
    let ctx = Ctx {
        me: Me::read(&root),
        root,
        only: a.ib_dev.clone(),
    };
    let checks = match diagnose(&ctx) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("softrdma doctor: {e}");
            return ExitCode::from(2);
        }
    };
    let text = if a.json {
        let mut s = render_json(&ctx, &checks).to_string();
        s.push('\n');
        s
    } else {
        let colour = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
        render_text(&ctx, &checks, colour)
    };
    use std::io::Write as _;
    if let Err(e) = std::io::stdout().lock().write_all(text.as_bytes()) {
        eprintln!("softrdma doctor: cannot write the report: {e}");
        return ExitCode::from(2);
    }
    if checks.iter().any(|c| c.verdict == Verdict::Fail) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// Runs every check, in layer order.
pub fn diagnose(ctx: &Ctx) -> Result<Vec<Check>, String> {
    let modules = kernel::Modules::survey(&ctx.root);
    let devices = hw::survey(&ctx.root);
    let soft_devs = soft::configured(ctx);
    if let Some(d) = &ctx.only {
        let soft_names: Vec<&str> = soft_devs
            .as_ref()
            .map(|v| v.iter().map(|s| s.name.as_str()).collect())
            .unwrap_or_default();
        if !devices.iter().any(|k| k.name == *d) && !soft_names.contains(&d.as_str()) {
            let kernel_names: Vec<&str> = devices.iter().map(|k| k.name.as_str()).collect();
            return Err(format!(
                "no device named {d} (kernel RDMA devices: {}; softrdma devices: {})",
                list_or_none(&kernel_names),
                list_or_none(&soft_names)
            ));
        }
    }
    let mut out = Vec::new();
    let seen: Vec<(&str, Option<&str>)> = devices
        .iter()
        .map(|d| (d.name.as_str(), d.provider))
        .collect();
    kernel::check(&modules, &seen, &mut out);
    hw::check(ctx, &modules, &devices, &mut out);
    user::check(ctx, &modules, &devices, &mut out);
    soft::check(ctx, &modules, soft_devs, &mut out);
    out.sort_by_key(|c| c.layer);
    Ok(out)
}

/// `a, b, c`, or `none`.
pub fn list_or_none(v: &[&str]) -> String {
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

/// How many checks are fine, warnings, broken.
fn summary(checks: &[Check]) -> (usize, usize, usize) {
    let n = |v| checks.iter().filter(|c| c.verdict == v).count();
    (n(Verdict::Ok), n(Verdict::Warn), n(Verdict::Fail))
}

/// The `--json` report: the root, the device asked for, every check and the summary.
fn render_json(ctx: &Ctx, checks: &[Check]) -> Value {
    let (ok, warn, fail) = summary(checks);
    json!({
        "root": ctx.root.dir.display().to_string(),
        "device": ctx.only,
        "checks": checks.iter().map(Check::to_json).collect::<Vec<_>>(),
        "summary": {"ok": ok, "warn": warn, "fail": fail},
    })
}

/// The checklist: one heading per layer, one line per check, its notes, reason and fix
/// indented below it, and a summary line.
fn render_text(ctx: &Ctx, checks: &[Check], colour: bool) -> String {
    let paint = |v: Verdict, s: &str| {
        if colour {
            format!("{}{s}\x1b[0m", v.colour())
        } else {
            s.to_owned()
        }
    };
    let bold = |s: &str| {
        if colour {
            format!("\x1b[1m{s}\x1b[0m")
        } else {
            s.to_owned()
        }
    };
    let width = checks
        .iter()
        .map(|c| c.title.chars().count())
        .max()
        .unwrap_or(0)
        .min(28);
    let mut s = String::new();
    if !ctx.root.live() {
        let _ = writeln!(
            s,
            "softrdma doctor: the host below {}",
            ctx.root.dir.display()
        );
    }
    for layer in Layer::ALL {
        let mine: Vec<&Check> = checks.iter().filter(|c| c.layer == layer).collect();
        if mine.is_empty() {
            continue;
        }
        let _ = writeln!(s, "{}", bold(layer.title()));
        for c in mine {
            let _ = writeln!(
                s,
                "  {} {:width$}  {}",
                paint(c.verdict, c.verdict.mark()),
                c.title,
                c.detail
            );
            let pad = " ".repeat(width + 6);
            for n in &c.notes {
                let _ = writeln!(s, "{pad}{n}");
            }
            if let Some(r) = &c.reason {
                let _ = writeln!(s, "{pad}why: {r}");
            }
            if let Some(f) = &c.fix {
                let _ = writeln!(s, "{pad}fix: {}", bold(f));
            }
        }
        s.push('\n');
    }
    let (ok, warn, fail) = summary(checks);
    let _ = writeln!(
        s,
        "{} broken, {} warning{}, {} fine",
        fail,
        warn,
        if warn == 1 { "" } else { "s" },
        ok
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn natural_order_puts_ten_after_nine() {
        let mut v = vec!["uverbs10", "uverbs9", "uverbs1"];
        v.sort_by_key(|a| natural(a));
        assert_eq!(v, ["uverbs1", "uverbs9", "uverbs10"]);
    }

    #[test]
    fn text_is_plain_without_a_terminal() {
        let ctx = Ctx {
            root: Root::new(Path::new("/nonexistent-doctor-root")),
            me: Me {
                euid: 1000,
                ipc_lock: false,
                sys_admin: false,
            },
            only: None,
        };
        let checks = vec![
            Check::fail(Layer::Modules, "modules.x", "x")
                .detail("gone")
                .why("it is gone.")
                .fix("modprobe x"),
        ];
        let t = render_text(&ctx, &checks, false);
        assert!(!t.contains('\x1b'), "{t}");
        assert!(t.contains("  ✗ x  gone\n"), "{t}");
        assert!(t.contains("fix: modprobe x\n"), "{t}");
        assert!(render_text(&ctx, &checks, true).contains("\x1b[31m✗"));
    }
}
