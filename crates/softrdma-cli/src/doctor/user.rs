//! User space: the device files, rdma-core's library and providers and their ABI against
//! the kernel's, RLIMIT_MEMLOCK, the firewall, and, from all of that, what rdma-core's own
//! `ibv_get_device_list` would return ("No IB devices found" explained).
//!
//! The last check infers the list rather than asking the system's libibverbs: loading it
//! into doctor would run every provider's constructor in this process (and print their
//! warnings), would find softrdma's drop-in instead whenever doctor runs under `softrdma
//! exec`, and could not look below `--root`. libibverbs keeps a device when exactly these
//! hold (rdma-core 44, `libibverbs/init.c`): a directory `class/infiniband_verbs/uverbsN`
//! with an `ibdev`, a `/dev/infiniband/uverbsN` that `stat` finds, the global
//! `abi_version` within 3..6, and a provider, named in `/etc/libibverbs.d/*.driver` and
//! loaded from `libNAME-rdmavPABI.so`, that matches the device and its `abi_version`.

use super::hw::{IbDevice, ib_module};
use super::kernel::Modules;
use super::{Check, Ctx, Layer, Verdict, firewall};
use serde_json::json;

/// The uverbs ABI range libibverbs accepts (`IB_USER_VERBS_MIN/MAX_ABI_VERSION`).
const UVERBS_ABI: (u32, u32) = (3, 6);

/// The device ABI range each provider accepts (`match_min/max_abi_version` in rdma-core
/// 44); providers not listed accept any.
fn provider_abi(provider: &str) -> Option<(u32, u32)> {
    match provider {
        "mlx5" => Some((1, 1)),
        "mlx4" => Some((2, 4)),
        "rxe" => Some((1, 2)),
        _ => None,
    }
}

/// The most of `libibverbs.so.1` read in search of its symbol version (the real one is
/// about 150 KiB).
const MAX_LIB: u64 = 64 << 20;

/// The library directories rdma-core installs into.
fn lib_dirs() -> Vec<String> {
    let triplet = format!("{}-linux-gnu", std::env::consts::ARCH);
    vec![
        format!("/usr/lib/{triplet}"),
        "/usr/lib64".into(),
        "/usr/lib".into(),
        format!("/lib/{triplet}"),
    ]
}

/// A `uverbsN` of `/sys/class/infiniband_verbs`.
#[derive(Debug)]
struct Uverbs {
    /// `uverbs0`, also the name of its device file.
    node: String,
    /// The RDMA device it exposes (`ibdev`).
    ibdev: Option<String>,
    /// The device's ABI (`abi_version`), which the provider must accept.
    abi: Option<u32>,
}

/// The rdma-core install found below the root.
#[derive(Debug)]
struct Rdmacore {
    /// Where libibverbs.so.1 is.
    lib: Option<String>,
    /// The provider ABI it loads (`IBVERBS_PRIVATE_34` → 34).
    pabi: Option<u32>,
    /// Provider directories that exist.
    provider_dirs: Vec<String>,
    /// Names in `/etc/libibverbs.d/*.driver`.
    drivers: Vec<String>,
}

/// The provider ABI libibverbs loads, from its `IBVERBS_PRIVATE_N` symbol version.
fn find_pabi(bytes: &[u8]) -> Option<u32> {
    let tag = b"IBVERBS_PRIVATE_";
    bytes.windows(tag.len()).enumerate().find_map(|(i, w)| {
        if w != tag {
            return None;
        }
        let digits: String = bytes[i + tag.len()..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .map(|b| *b as char)
            .collect();
        digits.parse().ok()
    })
}

impl Rdmacore {
    /// Finds the library, its provider ABI, the provider directories and the drivers
    /// registered in `/etc/libibverbs.d`.
    fn survey(ctx: &Ctx) -> Self {
        let root = &ctx.root;
        let mut lib = None;
        let mut pabi = None;
        let mut provider_dirs = Vec::new();
        for d in lib_dirs() {
            let so = format!("{d}/libibverbs.so.1");
            // The dynamic loader needs a file there: a dangling link, or a link to
            // anything else, is no library.
            if lib.is_none() && root.is_file(&so) {
                // The symbol version names the provider ABI; the library is a few hundred
                // KiB, read once (and no more than MAX_LIB of whatever stands there).
                pabi = root.bytes(&so, MAX_LIB).and_then(|b| find_pabi(&b));
                lib = Some(so);
            }
            let pd = format!("{d}/libibverbs");
            if root.exists(&pd) {
                provider_dirs.push(pd);
            }
        }
        let mut drivers = Vec::new();
        for f in root.list("/etc/libibverbs.d") {
            if let Some(text) = root.read(&format!("/etc/libibverbs.d/{f}")) {
                for line in text.lines() {
                    let mut w = line.split_whitespace();
                    if let (Some("driver"), Some(n)) = (w.next(), w.next()) {
                        drivers.push(n.to_owned());
                    }
                }
            }
        }
        Self {
            lib,
            pabi,
            provider_dirs,
            drivers,
        }
    }

    /// The provider files for `p` (`libmlx5-rdmav34.so`), with their PABI.
    fn provider_files(&self, ctx: &Ctx, p: &str) -> Vec<(String, Option<u32>)> {
        let prefix = format!("lib{p}-rdmav");
        let mut v = Vec::new();
        for d in &self.provider_dirs {
            for f in ctx.root.list(d) {
                if let Some(rest) = f.strip_prefix(&prefix) {
                    let n = rest.strip_suffix(".so").and_then(|n| n.parse().ok());
                    v.push((format!("{d}/{f}"), n));
                }
            }
        }
        v
    }
}

/// The `uverbsN` entries of `/sys/class/infiniband_verbs`.
fn survey_uverbs(ctx: &Ctx) -> Vec<Uverbs> {
    let base = "/sys/class/infiniband_verbs";
    ctx.root
        .list(base)
        .into_iter()
        .filter(|n| n.starts_with("uverbs"))
        .map(|node| Uverbs {
            ibdev: ctx.root.read(&format!("{base}/{node}/ibdev")),
            abi: ctx
                .root
                .read(&format!("{base}/{node}/abi_version"))
                .and_then(|s| s.parse().ok()),
            node,
        })
        .collect()
}

/// Why this looks like a container, if it does.
fn container(ctx: &Ctx) -> Option<String> {
    let r = &ctx.root;
    if r.exists("/.dockerenv") {
        return Some("/.dockerenv exists".into());
    }
    if r.exists("/run/.containerenv") {
        return Some("/run/.containerenv exists".into());
    }
    if let Some(env) = r.bytes("/proc/1/environ", 1 << 20) {
        if let Some(v) = env
            .split(|b| *b == 0)
            .find_map(|kv| kv.strip_prefix(b"container="))
        {
            return Some(format!("container={}", String::from_utf8_lossy(v)));
        }
    }
    let cg = r.read("/proc/1/cgroup").unwrap_or_default();
    ["docker", "kubepods", "containerd", "libpod", "lxc"]
        .into_iter()
        .find(|k| cg.contains(k))
        .map(|k| format!("/proc/1/cgroup names {k}"))
}

/// Whether this user may open the device file read-write.
///
/// On the live host that is `access(2)` on a character device. Below a fixture root the
/// file is a regular stand-in (git keeps no device nodes, nor their owners), and asking
/// `access(2)` there would judge the tester's rights on the checkout, not the fixture
/// user's: a root tester may open anything, and a read-only checkout refuses every write.
/// So there a stand-in counts as openable unless it has no write bit at all, which is how
/// a test says "permission denied" for the fixture's (non-root) user.
fn can_open(ctx: &Ctx, abs: &str) -> Result<(), DevFileError> {
    let p = ctx.root.path(abs);
    let meta = std::fs::metadata(&p).map_err(DevFileError::Missing)?;
    if !ctx.root.live() {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = meta.permissions().mode() & 0o7777;
        return if mode & 0o222 == 0 && ctx.me.euid != 0 {
            Err(DevFileError::Mode(mode))
        } else {
            Ok(())
        };
    }
    use std::os::unix::fs::FileTypeExt as _;
    if !meta.file_type().is_char_device() {
        return Err(DevFileError::NotCharDevice);
    }
    nix::unistd::access(
        &p,
        nix::unistd::AccessFlags::R_OK | nix::unistd::AccessFlags::W_OK,
    )
    .map_err(DevFileError::Access)
}

/// Why a device file cannot be opened read-write; its text is the check's detail.
#[derive(Debug, thiserror::Error)]
enum DevFileError {
    /// It is not there, or cannot be looked at.
    #[error("{0}")]
    Missing(std::io::Error),
    /// A fixture's stand-in without a write bit (see [`can_open`]).
    #[error("no read-write access (mode {0:04o})")]
    Mode(u32),
    /// Something other than a device node stands there.
    #[error("not a character device")]
    NotCharDevice,
    /// `access(2)` refused read-write.
    #[error("no read-write access ({0})")]
    Access(nix::errno::Errno),
}

/// The user-space layer.
pub fn check(ctx: &Ctx, m: &Modules, devices: &[IbDevice], out: &mut Vec<Check>) {
    let l = Layer::UserSpace;
    let uverbs = survey_uverbs(ctx);
    let rc = Rdmacore::survey(ctx);
    let in_container = container(ctx);
    // Why each kernel device would be missing from libibverbs' list.
    let mut dropped: Vec<(String, String, String)> = Vec::new();
    let mut listed: Vec<String> = Vec::new();

    // Device files.
    let dev_dir = ctx.root.exists("/dev/infiniband");
    let docker_fix = |nodes: &[String]| {
        let devs: Vec<String> = nodes
            .iter()
            .map(|n| format!("--device=/dev/infiniband/{n}"))
            .collect();
        format!(
            "docker run {} --ulimit memlock=-1 ... (podman: the same flags; Kubernetes: the RDMA shared device plugin)",
            devs.join(" ")
        )
    };
    if !uverbs.is_empty() || m.has("ib_uverbs") {
        let mut bad = Vec::new();
        let mut good = Vec::new();
        for u in uverbs
            .iter()
            .filter(|u| u.ibdev.as_deref().is_none_or(|d| ctx.wants(d)))
        {
            match can_open(ctx, &format!("/dev/infiniband/{}", u.node)) {
                Ok(()) => good.push(u.node.clone()),
                Err(e) => bad.push((u.node.clone(), e.to_string())),
            }
        }
        let c = if uverbs.is_empty() {
            Check::warn(l, "devfiles.uverbs", "/dev/infiniband/uverbs*")
                .detail("ib_uverbs is loaded but exposes no device")
                .why("no RDMA driver has made a device for ib_uverbs to expose.")
                .fix("see Devices and ports above")
        } else if bad.is_empty() {
            Check::ok(l, "devfiles.uverbs", "/dev/infiniband/uverbs*")
                .detail(format!("{} read-write", good.join(", ")))
        } else {
            let names: Vec<String> = bad.iter().map(|b| b.0.clone()).collect();
            let mut c = Check::fail(l, "devfiles.uverbs", "/dev/infiniband/uverbs*").detail(
                bad.iter()
                    .map(|(n, e)| format!("{n}: {e}"))
                    .collect::<Vec<_>>()
                    .join("; "),
            );
            let all_nodes: Vec<String> = names
                .iter()
                .cloned()
                .chain(std::iter::once("rdma_cm".to_owned()))
                .collect();
            c = match (&in_container, dev_dir) {
                (Some(why), false) => c
                    .why(format!(
                        "this is a container ({why}) started without /dev/infiniband, so libibverbs skips every device (\"No IB devices found\")."
                    ))
                    .fix(docker_fix(&all_nodes)),
                (None, false) => c
                    .why("the kernel has the devices but /dev/infiniband is missing, so libibverbs skips them; udev has not made the nodes.")
                    .fix("udevadm trigger --subsystem-match=infiniband_verbs --action=add"),
                (_, true) if bad.iter().any(|b| b.1.contains("access")) => c
                    .why("the device files exist but this user may not open them read-write, so ibv_open_device fails (\"Couldn't get context\").")
                    .fix("chmod 0666 /dev/infiniband/uverbs* (for good: a udev rule with MODE=\"0666\", or a group such as rdma: usermod -aG rdma $USER)"),
                (Some(why), true) => c
                    .why(format!("this is a container ({why}) given only some of the device files."))
                    .fix(docker_fix(&all_nodes)),
                (None, true) => c
                    .why("some device files are missing, so libibverbs skips those devices.")
                    .fix("udevadm trigger --subsystem-match=infiniband_verbs --action=add"),
            };
            c
        };
        out.push(c);
        for (n, e) in &bad {
            let dev = uverbs
                .iter()
                .find(|u| u.node == *n)
                .and_then(|u| u.ibdev.clone())
                .unwrap_or_else(|| n.clone());
            let cause = if in_container.is_some() && !dev_dir {
                "a container without /dev/infiniband".to_owned()
            } else {
                format!("/dev/infiniband/{n}: {e}")
            };
            dropped.push((dev, cause, "see devfiles.uverbs".into()));
        }
    }
    if m.has("rdma_ucm") || ctx.root.exists("/dev/infiniband/rdma_cm") {
        let c = match can_open(ctx, "/dev/infiniband/rdma_cm") {
            Ok(()) => {
                Check::ok(l, "devfiles.rdma_cm", "/dev/infiniband/rdma_cm").detail("read-write")
            }
            Err(e) => {
                let c = Check::fail(l, "devfiles.rdma_cm", "/dev/infiniband/rdma_cm")
                    .detail(e.to_string())
                    .why("rdma_cm programs (rping, perftest -R, MPI) open this file to connect.");
                match &in_container {
                    Some(_) if !dev_dir => c.fix(docker_fix(&["rdma_cm".to_owned()])),
                    _ => c.fix("modprobe rdma_ucm && ls -l /dev/infiniband/rdma_cm"),
                }
            }
        };
        out.push(c);
    }

    // The library itself.
    let any_kernel_dev = !devices.is_empty();
    match &rc.lib {
        Some(lib) => out.push(Check::ok(l, "libibverbs", "libibverbs").detail(format!(
            "{lib} (provider ABI rdmav{})",
            rc.pabi.map_or("?".into(), |p| p.to_string())
        ))),
        None => {
            let c = if any_kernel_dev {
                Check::fail(l, "libibverbs", "libibverbs")
            } else {
                Check::warn(l, "libibverbs", "libibverbs")
            };
            out.push(
                c.detail("rdma-core's libibverbs.so.1 is not installed")
                    .why("RDMA programs need the system's libibverbs to reach the kernel's devices (softrdma exec brings its own).")
                    .fix("apt install libibverbs1 ibverbs-providers (RHEL: dnf install libibverbs)"),
            );
        }
    }

    // The kernel's uverbs ABI.
    let abi = ctx
        .root
        .read("/sys/class/infiniband_verbs/abi_version")
        .and_then(|s| s.parse::<u32>().ok());
    let abi_ok = match abi {
        Some(v) if (UVERBS_ABI.0..=UVERBS_ABI.1).contains(&v) => {
            out.push(
                Check::ok(l, "abi.uverbs", "kernel verbs ABI").detail(format!(
                    "{v} (libibverbs takes {} to {})",
                    UVERBS_ABI.0, UVERBS_ABI.1
                )),
            );
            true
        }
        Some(v) => {
            out.push(
                Check::fail(l, "abi.uverbs", "kernel verbs ABI")
                    .detail(format!("{v}, outside libibverbs' {} to {}", UVERBS_ABI.0, UVERBS_ABI.1))
                    .why(format!("libibverbs refuses the kernel (\"Fatal: kernel ABI version {v} doesn't match library version {}\"), so it lists no device.", UVERBS_ABI.1))
                    .fix("upgrade rdma-core to the kernel's generation (apt install --only-upgrade libibverbs1 ibverbs-providers)"),
            );
            false
        }
        None => true,
    };

    // A provider per device.
    for d in devices.iter().filter(|d| ctx.wants(&d.name)) {
        let id = format!("provider.{}", d.name);
        let title = format!("{} provider", d.name);
        let u = uverbs.iter().find(|u| u.ibdev.as_deref() == Some(&d.name));
        let Some(p) = d.provider else {
            out.push(
                Check::warn(l, id, title)
                    .detail("unknown driver")
                    .why("doctor does not know which rdma-core provider drives this device.")
                    .fix("ls /etc/libibverbs.d/"),
            );
            continue;
        };
        let files = rc.provider_files(ctx, p);
        let want = rc.pabi;
        let matching = files.iter().find(|(_, n)| want.is_none() || *n == want);
        let registered = rc.drivers.iter().any(|x| x == p);
        let pkg_fix =
            "apt install ibverbs-providers (RHEL: dnf install libibverbs; MLNX_OFED ships its own)";
        let c = if files.is_empty() || !registered {
            let missing = match (files.is_empty(), registered) {
                (true, false) => {
                    format!("neither lib{p}-rdmav*.so nor /etc/libibverbs.d/{p}.driver")
                }
                (true, true) => format!("no lib{p}-rdmav*.so"),
                _ => format!("no /etc/libibverbs.d/{p}.driver"),
            };
            dropped.push((
                d.name.clone(),
                format!("no {p} provider installed"),
                pkg_fix.into(),
            ));
            Check::fail(l, id, title)
                .detail(format!("{p}: {missing}"))
                .why(format!(
                    "{} made the device but rdma-core's {p} provider is not installed, so libibverbs skips it (\"no userspace device-specific driver found\", then \"No IB devices found\").",
                    ib_module(p)
                ))
                .fix(pkg_fix)
        } else if matching.is_none() {
            let have: Vec<String> = files.iter().map(|f| f.0.clone()).collect();
            dropped.push((
                d.name.clone(),
                format!("the {p} provider is for another libibverbs"),
                pkg_fix.into(),
            ));
            Check::fail(l, id, title)
                .detail(format!(
                    "{} (libibverbs wants rdmav{})",
                    have.join(", "),
                    want.map_or("?".into(), |w| w.to_string())
                ))
                .why(format!(
                    "the {p} provider was built for another libibverbs: this one loads only lib{p}-rdmav{}.so, so it skips the device.",
                    want.map_or("?".into(), |w| w.to_string())
                ))
                .fix("install libibverbs1 and ibverbs-providers from the same rdma-core release")
        } else {
            let file = matching.map(|f| f.0.clone()).unwrap_or_default();
            match (u.and_then(|u| u.abi), provider_abi(p)) {
                (Some(v), Some((lo, hi))) if v < lo || v > hi => {
                    dropped.push((
                        d.name.clone(),
                        format!("kernel ABI {v} outside the {p} provider's {lo} to {hi}"),
                        "match rdma-core to the kernel".into(),
                    ));
                    Check::fail(l, id, title)
                        .detail(format!("{file}, kernel device ABI {v}"))
                        .why(format!("libibverbs says \"Driver {p} does not support the kernel ABI of {v} (supports {lo} to {hi})\" and skips the device."))
                        .fix("install the rdma-core release that matches this kernel (or the kernel that matches rdma-core)")
                }
                (abi_v, _) => Check::ok(l, id, title).detail(format!(
                    "{file}{}",
                    abi_v.map_or(String::new(), |v| format!(", kernel device ABI {v}"))
                )),
            }
        };
        out.push(c);
    }

    // Memory.
    out.push(memlock(ctx, any_kernel_dev));

    // The firewall.
    out.push(firewall::check(ctx));

    // What libibverbs would list.
    for u in &uverbs {
        let Some(dev) = &u.ibdev else { continue };
        if !abi_ok || rc.lib.is_none() {
            continue;
        }
        if dropped.iter().any(|d| &d.0 == dev) {
            continue;
        }
        if devices.iter().any(|d| &d.name == dev) {
            listed.push(dev.clone());
        }
    }
    let no_uverbs: Vec<&str> = devices
        .iter()
        .filter(|d| !uverbs.iter().any(|u| u.ibdev.as_deref() == Some(&d.name)))
        .map(|d| d.name.as_str())
        .collect();
    for d in &no_uverbs {
        dropped.push((
            (*d).to_owned(),
            "no /sys/class/infiniband_verbs entry (ib_uverbs)".into(),
            m.load_line("ib_uverbs"),
        ));
    }
    out.push(explain(
        m,
        devices,
        &listed,
        &dropped,
        abi_ok,
        rc.lib.is_some(),
    ));
}

/// "No IB devices found" explained: what rdma-core's libibverbs would list, and for each
/// kernel device it would leave out, why (`dropped`: device, cause, fix). With nothing
/// listed the causes are gathered into one reason, and `softrdma exec` is always offered.
fn explain(
    m: &Modules,
    devices: &[IbDevice],
    listed: &[String],
    dropped: &[(String, String, String)],
    abi_ok: bool,
    have_lib: bool,
) -> Check {
    let l = Layer::UserSpace;
    let id = "libibverbs.devices";
    let title = "ibv_get_device_list";
    let instead = "softrdma exec -- PROGRAM runs the program on softrdma instead";
    let data = json!({
        "listed": listed,
        "dropped": dropped.iter().map(|(d, why, _)| json!({"device": d, "cause": why})).collect::<Vec<_>>(),
    });
    if !listed.is_empty() {
        let mut c = Check::ok(l, id, title)
            .detail(format!(
                "rdma-core's libibverbs would list {}",
                listed.join(", ")
            ))
            .data(data);
        for (d, why, _) in dropped {
            c = c.note(format!("but not {d}: {why}"));
        }
        if !dropped.is_empty() {
            c.verdict = Verdict::Warn;
            c = c.why("some kernel devices are invisible to RDMA programs (see above).");
        }
        return c;
    }
    let mut causes: Vec<String> = Vec::new();
    let mut fix: Option<String> = None;
    if !have_lib {
        causes.push("rdma-core's libibverbs is not installed".into());
    }
    if !abi_ok {
        causes.push("the kernel's verbs ABI is outside libibverbs' range".into());
    }
    if devices.is_empty() {
        let drivers = m.device_drivers();
        let halfless = m.halfless();
        if let Some((pci, core)) = m.unbound.first() {
            causes.push(format!(
                "the NIC at {pci} has no driver ({core} is not loaded)"
            ));
            fix = Some(m.stack_for(core));
        } else if !halfless.is_empty() {
            causes.extend(halfless.iter().map(|(nic, ib, always)| {
                format!(
                    "{nic} is loaded without {ib}{}",
                    if *always {
                        ""
                    } else {
                        " (if this NIC can do RDMA at all)"
                    }
                )
            }));
            // The fix for the pair that is surely a fault, else for the first.
            fix = halfless
                .iter()
                .find(|p| p.2)
                .or(halfless.first())
                .map(|p| m.load_line(p.1));
        } else if drivers.is_empty() {
            causes.push("no RDMA driver is loaded, so the kernel has no RDMA device".into());
        } else {
            causes.push(format!(
                "{} is loaded but made no device (firmware too old, or a port mode without RDMA; for rxe and siw, no link added)",
                drivers.join(", ")
            ));
        }
    }
    for (d, why, f) in dropped {
        causes.push(format!("{d}: {why}"));
        if fix.is_none() && !f.starts_with("see ") {
            fix = Some(f.clone());
        }
    }
    // Broken when a device exists and is not reached, or a NIC that surely does RDMA lacks
    // its RDMA half. An Intel or Broadcom NIC without irdma or bnxt_re is most often a NIC
    // without RDMA: a warning, or every host with an X710 would fail.
    let broken = !devices.is_empty() || !m.unbound.is_empty() || m.halfless().iter().any(|p| p.2);
    let c = if broken {
        Check::fail(l, id, title)
    } else {
        Check::warn(l, id, title)
    };
    c.detail("rdma-core's libibverbs would find no device (\"No IB devices found\")")
        .why(format!("{}.", causes.join("; ")))
        .fix(match fix {
            Some(f) => format!("{f}; or: {instead}"),
            None => instead.to_owned(),
        })
        .data(data)
}

/// Parses a limits value (`unlimited` or bytes).
fn parse_limit(s: &str) -> Option<Option<u64>> {
    if s == "unlimited" {
        Some(None)
    } else {
        s.parse().ok().map(Some)
    }
}

/// A byte count as `64 KiB`, `8 MiB`.
fn human(b: u64) -> String {
    if b >= 1 << 30 && b % (1 << 30) == 0 {
        format!("{} GiB", b >> 30)
    } else if b >= 1 << 20 && b % (1 << 20) == 0 {
        format!("{} MiB", b >> 20)
    } else if b >= 1 << 10 && b % (1 << 10) == 0 {
        format!("{} KiB", b >> 10)
    } else {
        format!("{b} bytes")
    }
}

/// Below this a registration of a few MiB (perftest's defaults with its queues, a UCX
/// pool) fails with ENOMEM.
const MEMLOCK_LOW: u64 = 8 << 20;

/// RLIMIT_MEMLOCK against what `ibv_reg_mr` on a kernel device needs; softrdma pins
/// nothing, so without kernel devices a low limit is only a warning.
fn memlock(ctx: &Ctx, kernel_devs: bool) -> Check {
    let l = Layer::UserSpace;
    let (id, title) = ("memlock", "RLIMIT_MEMLOCK");
    let fix = "ulimit -l unlimited (for good: \"* - memlock unlimited\" in /etc/security/limits.d/rdma.conf and LimitMEMLOCK=infinity for services; containers: --ulimit memlock=-1)";
    let line = ctx.root.read("/proc/self/limits").and_then(|t| {
        t.lines()
            .find(|l| l.starts_with("Max locked memory"))
            .map(str::to_owned)
    });
    let Some(line) = line else {
        return Check::warn(l, id, title)
            .detail("unknown (no /proc/self/limits)")
            .why("the locked-memory limit cannot be read.")
            .fix("ulimit -l");
    };
    let f: Vec<&str> = line["Max locked memory".len()..]
        .split_whitespace()
        .collect();
    let Some(soft) = f.first().and_then(|s| parse_limit(s)) else {
        return Check::warn(l, id, title)
            .detail(format!("unreadable: {line}"))
            .why("the limits line is not in the kernel's format.")
            .fix("ulimit -l");
    };
    let shown = soft.map_or("unlimited".to_owned(), human);
    match soft {
        None => Check::ok(l, id, title).detail("unlimited"),
        Some(_) if ctx.me.ipc_lock => Check::ok(l, id, title)
            .detail(format!("{shown}, which CAP_IPC_LOCK lifts (root)")),
        Some(b) if b < MEMLOCK_LOW => {
            let c = if kernel_devs {
                Check::fail(l, id, title)
            } else {
                Check::warn(l, id, title)
            };
            c.detail(shown)
                .why(format!(
                    "the kernel pins every registered region against this limit, so ibv_reg_mr of a few MiB fails (\"ibv_reg_mr failed: Cannot allocate memory\"){}.",
                    if kernel_devs { "" } else { "; softrdma pins nothing, so only kernel devices would mind" }
                ))
                .fix(fix)
        }
        Some(_) if !kernel_devs => Check::ok(l, id, title)
            .detail(format!("{shown} (softrdma pins nothing; kernel RDMA devices would want it unlimited)")),
        Some(_) => Check::warn(l, id, title)
            .detail(shown)
            .why("enough for small tests, but MPI, UCX and large registrations pin more and want it unlimited.")
            .fix(fix),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pabi_from_the_symbol_version() {
        assert_eq!(find_pabi(b"\0GLIBC_2.2\0IBVERBS_PRIVATE_34\0"), Some(34));
        assert_eq!(find_pabi(b"IBVERBS_1.1"), None);
    }

    #[test]
    fn limits_and_sizes() {
        assert_eq!(parse_limit("unlimited"), Some(None));
        assert_eq!(parse_limit("65536"), Some(Some(65536)));
        assert_eq!(parse_limit("x"), None);
        assert_eq!(human(65536), "64 KiB");
        assert_eq!(human(8 << 20), "8 MiB");
        assert_eq!(human(1000), "1000 bytes");
    }
}
