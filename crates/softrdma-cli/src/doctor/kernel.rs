//! The kernel modules: which RDMA modules are loaded (`/proc/modules`, built-ins from
//! `modules.builtin`) and available (`/lib/modules/RELEASE/modules.dep`), and the lines that
//! load the missing ones in the order the stack needs: ib_core, then the NIC driver and
//! its RDMA half, then ib_uverbs and rdma_ucm (which brings rdma_cm).

use super::{Check, Layer, Root, list_or_none};
use std::collections::{BTreeMap, BTreeSet};

/// The RDMA modules doctor reports on, in the order they load.
pub const RDMA_MODULES: [&str; 17] = [
    "ib_core",
    "mlx5_core",
    "mlx5_ib",
    "mlx4_core",
    "mlx4_ib",
    "bnxt_re",
    "irdma",
    "qedr",
    "efa",
    "rdma_rxe",
    "siw",
    "ib_uverbs",
    "iw_cm",
    "ib_cm",
    "rdma_cm",
    "rdma_ucm",
    "ib_umad",
];

/// A NIC driver and the module that gives it an RDMA device, and whether every NIC that
/// driver runs can do RDMA (a ConnectX can; many Intel, Broadcom and QLogic NICs cannot).
pub const PAIRS: [(&str, &str, bool); 6] = [
    ("mlx5_core", "mlx5_ib", true),
    ("mlx4_core", "mlx4_ib", true),
    ("bnxt_en", "bnxt_re", false),
    ("ice", "irdma", false),
    ("i40e", "irdma", false),
    ("qede", "qedr", false),
];

/// Modules that create RDMA devices.
pub const DEVICE_DRIVERS: [&str; 8] = [
    "mlx5_ib", "mlx4_ib", "bnxt_re", "irdma", "qedr", "efa", "rdma_rxe", "siw",
];

/// What is known about the host's modules.
#[derive(Debug, Default)]
pub struct Modules {
    /// Loaded modules and, for each, the modules using it.
    pub loaded: BTreeMap<String, Vec<String>>,
    /// Whether `/proc/modules` could be read.
    pub readable: bool,
    /// Whether `/proc` is there but `/proc/modules` is not: a kernel without loadable modules.
    pub no_modules: bool,
    /// Modules built into the kernel.
    pub builtin: BTreeSet<String>,
    /// Modules installed for the running kernel; `None` when `/lib/modules/RELEASE` has no
    /// `modules.dep` (an initramfs, a container without the host's modules).
    pub available: Option<BTreeSet<String>>,
    /// The kernel release (`uname -r`).
    pub release: Option<String>,
    /// Mellanox/NVIDIA network functions on the PCI bus with no driver bound: the PCI
    /// address and the core driver that would take them.
    pub unbound: Vec<(String, &'static str)>,
}

/// Mellanox's (now NVIDIA's) PCI vendor id.
const MELLANOX: &str = "0x15b3";

/// The core driver for a Mellanox PCI device id: ConnectX-3 and its VFs (0x1003 to 0x1012)
/// are mlx4's, ConnectX-4 and everything after (0x1013 on, BlueField) mlx5's.
fn mellanox_driver(device: &str) -> &'static str {
    match u32::from_str_radix(device.trim_start_matches("0x"), 16) {
        Ok(0x1003..=0x1012) => "mlx4_core",
        _ => "mlx5_core",
    }
}

/// `kernel/drivers/infiniband/hw/mlx5/mlx5_ib.ko.xz` → `mlx5_ib`.
fn module_name(path: &str) -> Option<String> {
    let file = path.rsplit('/').next()?;
    let stem = file.split(".ko").next()?;
    (!stem.is_empty()).then(|| stem.replace('-', "_"))
}

impl Modules {
    /// Reads the modules of the host below `root`.
    pub fn survey(root: &Root) -> Self {
        let mut m = Modules::default();
        if let Some(text) = root.read("/proc/modules") {
            m.readable = true;
            for line in text.lines() {
                let f: Vec<&str> = line.split_whitespace().collect();
                let Some(name) = f.first() else { continue };
                let users = f
                    .get(3)
                    .map(|u| {
                        u.split(',')
                            .filter(|x| !x.is_empty() && *x != "-")
                            .map(str::to_owned)
                            .collect()
                    })
                    .unwrap_or_default();
                m.loaded.insert((*name).to_owned(), users);
            }
        }
        // A kernel built without loadable modules has no /proc/modules; what is built in
        // and has parameters shows in /sys/module.
        m.no_modules = !m.readable && root.exists("/proc/self");
        if m.no_modules {
            for name in root.list("/sys/module") {
                if RDMA_MODULES.contains(&name.as_str()) || PAIRS.iter().any(|p| p.0 == name) {
                    m.builtin.insert(name);
                }
            }
        }
        m.release = root
            .read("/proc/sys/kernel/osrelease")
            .filter(|r| !r.is_empty() && !r.contains('/'));
        if let Some(rel) = &m.release {
            let dir = format!("/lib/modules/{rel}");
            if let Some(b) = root.read(&format!("{dir}/modules.builtin")) {
                m.builtin.extend(b.lines().filter_map(module_name));
            }
            if let Some(dep) = root.read(&format!("{dir}/modules.dep")) {
                let mut avail: BTreeSet<String> = dep
                    .lines()
                    .filter_map(|l| l.split(':').next())
                    .filter_map(module_name)
                    .collect();
                avail.extend(m.builtin.iter().cloned());
                m.available = Some(avail);
            }
        }
        // A ConnectX with no driver at all is the plainest "driver not installed right":
        // the NIC is not even an IP interface. Network (0x02xxxx) physical functions only.
        for pci in root.list("/sys/bus/pci/devices") {
            let dir = format!("/sys/bus/pci/devices/{pci}");
            let is = |f: &str, want: &str| {
                root.read(&format!("{dir}/{f}"))
                    .is_some_and(|v| v.starts_with(want))
            };
            // An SR-IOV VF (it has a physfn) is often left unbound on purpose, for a VM.
            if is("vendor", MELLANOX)
                && is("class", "0x02")
                && !root.exists(&format!("{dir}/driver"))
                && !root.exists(&format!("{dir}/physfn"))
            {
                let device = root.read(&format!("{dir}/device")).unwrap_or_default();
                m.unbound.push((pci, mellanox_driver(&device)));
            }
        }
        m
    }

    /// Loaded, or built in.
    pub fn has(&self, name: &str) -> bool {
        self.loaded.contains_key(name) || self.builtin.contains(name)
    }

    /// Installed for this kernel; `None` when that cannot be known.
    pub fn installed(&self, name: &str) -> Option<bool> {
        self.available.as_ref().map(|a| a.contains(name))
    }

    /// The RDMA device drivers loaded.
    pub fn device_drivers(&self) -> Vec<&'static str> {
        DEVICE_DRIVERS.into_iter().filter(|d| self.has(d)).collect()
    }

    /// The NIC pairs whose NIC half is loaded.
    pub fn nic_pairs(&self) -> Vec<(&'static str, &'static str, bool)> {
        PAIRS.into_iter().filter(|p| self.has(p.0)).collect()
    }

    /// The NIC pairs whose NIC half is loaded and RDMA half is not. Where the pair's third
    /// field is true every NIC of that driver can do RDMA, so the missing half is a fault;
    /// otherwise (an Intel or Broadcom NIC) it may be a NIC without RDMA at all.
    pub fn halfless(&self) -> Vec<(&'static str, &'static str, bool)> {
        self.nic_pairs()
            .into_iter()
            .filter(|p| !self.has(p.1))
            .collect()
    }

    /// The modprobe line that loads the missing modules up to and including `target`, in the
    /// stack's order.
    pub fn load_line(&self, target: &str) -> String {
        let mut order: Vec<&str> = vec!["ib_core"];
        for (nic, ib, _) in self.nic_pairs() {
            order.push(nic);
            order.push(ib);
        }
        if !order.contains(&target) && target != "ib_uverbs" && target != "rdma_ucm" {
            order.push(target);
        }
        order.extend(["ib_uverbs", "rdma_ucm"]);
        let upto = order
            .iter()
            .position(|m| *m == target)
            .unwrap_or(order.len() - 1);
        self.modprobe(&order[..=upto])
    }

    /// `modprobe A && modprobe B ...` for those of `order` not loaded yet, in that order;
    /// the last one alone when all are.
    pub fn modprobe(&self, order: &[&str]) -> String {
        let missing: Vec<String> = order
            .iter()
            .filter(|m| !self.has(m))
            .map(|m| format!("modprobe {m}"))
            .collect();
        match (missing.is_empty(), order.last()) {
            (true, Some(last)) => format!("modprobe {last}"),
            _ => missing.join(" && "),
        }
    }

    /// The whole stack for a NIC not driven yet: ib_core, its core driver and RDMA half,
    /// ib_uverbs and rdma_ucm.
    pub fn stack_for(&self, core: &str) -> String {
        let ib = PAIRS.iter().find(|p| p.0 == core).map_or("", |p| p.1);
        let order: Vec<&str> = ["ib_core", core, ib, "ib_uverbs", "rdma_ucm"]
            .into_iter()
            .filter(|m| !m.is_empty())
            .collect();
        self.modprobe(&order)
    }
}

/// The kernel modules layer.
///
/// `devices` are the RDMA devices found, each as its name and rdma-core provider: what this
/// layer needs of the layer above it, passed down (hw's own checks use [`Modules`]).
pub fn check(m: &Modules, devices: &[(&str, Option<&str>)], out: &mut Vec<Check>) {
    let l = Layer::Modules;
    if m.no_modules {
        let built: Vec<&str> = m.builtin.iter().map(String::as_str).collect();
        out.push(
            Check::warn(l, "modules.loaded", "RDMA modules")
                .detail(format!("this kernel has no loadable modules (built in: {})", list_or_none(&built)))
                .why("a kernel without module support has only the RDMA drivers built into it, and none can be loaded.")
                .fix("softrdma exec -- PROGRAM (no kernel module needed), or boot a kernel with CONFIG_MODULES and the RDMA drivers"),
        );
    } else if !m.readable {
        out.push(
            Check::warn(l, "modules.loaded", "RDMA modules")
                .detail("/proc/modules cannot be read")
                .why("without /proc the loaded modules cannot be known, so the checks below rely on /sys alone.")
                .fix("mount -t proc proc /proc"),
        );
    }
    let loaded: Vec<&str> = RDMA_MODULES.iter().copied().filter(|x| m.has(x)).collect();
    let available: Vec<&str> = RDMA_MODULES
        .iter()
        .copied()
        .filter(|x| !m.has(x) && m.installed(x) == Some(true))
        .collect();
    let drivers = m.device_drivers();
    if m.readable {
        let halfless = m.halfless().into_iter().find(|p| p.2);
        let mut c = if let (true, Some((nic, ib, _))) = (drivers.is_empty(), halfless) {
            Check::warn(l, "modules.loaded", "RDMA modules")
                .detail(format!("no RDMA driver loaded (loaded: {})", list_or_none(&loaded)))
                .why(format!("{nic} is loaded without {ib}, so the kernel has no RDMA device (\"No IB devices found\")."))
                .fix(m.load_line("rdma_ucm"))
        } else if drivers.is_empty() {
            let fix = if m.installed("rdma_rxe") == Some(true) {
                "softrdma exec -- PROGRAM (no kernel module needed), or Soft-RoCE in the kernel: modprobe rdma_rxe && rdma link add rxe0 type rxe netdev IFACE"
            } else {
                "softrdma exec -- PROGRAM (no kernel module needed)"
            };
            Check::warn(l, "modules.loaded", "RDMA modules")
                .detail(format!("no RDMA driver loaded (loaded: {})", list_or_none(&loaded)))
                .why("with no RDMA driver the kernel has no RDMA device, which is what \"No IB devices found\" means here.")
                .fix(fix)
        } else {
            Check::ok(l, "modules.loaded", "RDMA modules")
                .detail(format!("loaded: {}", loaded.join(", ")))
        };
        match &m.available {
            Some(_) => {
                c = c.note(format!(
                    "available, not loaded: {}",
                    list_or_none(&available)
                ))
            }
            None => {
                c = c.note(format!(
                    "no /lib/modules/{}/modules.dep: which modules are installed is unknown",
                    m.release.as_deref().unwrap_or("RELEASE")
                ))
            }
        }
        out.push(c.data(serde_json::json!({
            "loaded": loaded,
            "available": m.available.as_ref().map(|_| &available),
            "release": m.release,
        })));
    }

    // A ConnectX no driver took: its core driver, then the rest of the stack, in order.
    for (pci, core) in &m.unbound {
        let fix = match m.installed(core) {
            Some(false) => format!(
                "install the kernel's modules (Debian: linux-image-{0}; Ubuntu: linux-modules-extra-{0}) or MLNX_OFED, then {1}",
                m.release.as_deref().unwrap_or("$(uname -r)"),
                m.stack_for(core)
            ),
            _ if m.has(core) => {
                format!("echo {pci} > /sys/bus/pci/drivers/{core}/bind, and see dmesg | grep {pci}")
            }
            _ => m.stack_for(core),
        };
        out.push(
            Check::fail(l, format!("modules.pci.{pci}"), format!("NIC {pci}"))
                .detail(format!("a Mellanox/NVIDIA NIC with no driver bound (wants {core})"))
                .why(format!(
                    "no driver has taken this NIC, so it has neither an IP interface nor an RDMA device: {core} is not loaded, not installed for this kernel, or failed on the NIC's firmware."
                ))
                .fix(fix),
        );
    }

    // A NIC driver without its RDMA half: the NIC works for IP, and there is no RDMA device.
    for (nic, ib, always) in m.nic_pairs() {
        let id = format!("modules.{ib}");
        if m.has(ib) {
            out.push(Check::ok(l, id, ib).detail(format!("loaded, after {nic}")));
            continue;
        }
        let mut c = if always {
            Check::fail(l, id, ib)
        } else {
            Check::warn(l, id, ib)
        };
        c = c.detail(format!("not loaded, though {nic} is"));
        let why = format!(
            "{nic} drives the NIC for IP, but without {ib} it has no RDMA device{}.",
            if always {
                ""
            } else {
                " (if this NIC can do RDMA at all)"
            }
        );
        c = match m.installed(ib) {
            Some(false) => c
                .why(format!("{why} This kernel has no {ib} module installed."))
                .fix(format!(
                    "install the kernel's RDMA modules (Debian: linux-image-{0}; Ubuntu: linux-modules-extra-{0}), then {1}",
                    m.release.as_deref().unwrap_or("$(uname -r)"),
                    m.load_line(ib)
                )),
            _ => c.why(why).fix(m.load_line(ib)),
        };
        out.push(c);
    }

    // The user-space access modules matter once there is something to reach.
    if !drivers.is_empty() || !devices.is_empty() || m.nic_pairs().iter().any(|p| p.2) {
        let core = if m.has("ib_core") {
            Check::ok(l, "modules.ib_core", "ib_core").detail("loaded")
        } else if !m.readable {
            Check::warn(l, "modules.ib_core", "ib_core").detail("unknown")
        } else {
            Check::fail(l, "modules.ib_core", "ib_core")
                .detail("not loaded")
                .why("every RDMA driver needs ib_core first.")
                .fix(m.load_line("ib_core"))
        };
        out.push(core);
        for (name, what) in [
            (
                "ib_uverbs",
                "programs reach RDMA devices only through ib_uverbs (/dev/infiniband/uverbsN); without it libibverbs finds no device.",
            ),
            (
                "rdma_ucm",
                "programs that connect through rdma_cm (rping, perftest -R, MPI, NVMe-oF) need rdma_ucm and rdma_cm (/dev/infiniband/rdma_cm).",
            ),
        ] {
            let id = format!("modules.{name}");
            if m.has(name) {
                let detail = if name == "rdma_ucm" {
                    format!(
                        "loaded{}",
                        if m.has("rdma_cm") {
                            ", with rdma_cm"
                        } else {
                            ""
                        }
                    )
                } else {
                    "loaded".to_owned()
                };
                out.push(Check::ok(l, id, name).detail(detail));
            } else if !m.readable {
                continue;
            } else {
                out.push(
                    Check::fail(l, id, name)
                        .detail("not loaded")
                        .why(what)
                        .fix(m.load_line(name)),
                );
            }
        }
    }

    // rdma_rxe holds UDP 4791 on every address from the moment it loads.
    if m.has("rdma_rxe") {
        let rxe: Vec<&str> = devices
            .iter()
            .filter(|(_, provider)| *provider == Some("rxe"))
            .map(|(name, _)| *name)
            .collect();
        let undo = if rxe.is_empty() {
            "modprobe -r rdma_rxe".to_owned()
        } else {
            let dels: Vec<String> = rxe
                .iter()
                .map(|d| format!("rdma link delete {d}"))
                .collect();
            format!("{} && modprobe -r rdma_rxe", dels.join(" && "))
        };
        out.push(
            Check::warn(l, "modules.rdma_rxe_port", "rdma_rxe and softrdma")
                .detail("rdma_rxe is loaded and holds UDP port 4791")
                .why("the kernel's Soft-RoCE binds UDP 4791 on every address, so softrdma's devices cannot bind theirs; use the kernel's rxe, or unload it to use softrdma.")
                .fix(undo),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(loaded: &[&str]) -> Modules {
        Modules {
            loaded: loaded
                .iter()
                .map(|m| ((*m).to_owned(), Vec::new()))
                .collect(),
            readable: true,
            ..Modules::default()
        }
    }

    #[test]
    fn load_line_keeps_the_stack_order_and_skips_what_is_loaded() {
        let m = with(&["mlx5_core", "ib_core"]);
        assert_eq!(m.load_line("mlx5_ib"), "modprobe mlx5_ib");
        assert_eq!(
            m.load_line("rdma_ucm"),
            "modprobe mlx5_ib && modprobe ib_uverbs && modprobe rdma_ucm"
        );
        let bare = with(&["mlx5_core"]);
        assert_eq!(
            bare.load_line("mlx5_ib"),
            "modprobe ib_core && modprobe mlx5_ib"
        );
    }

    #[test]
    fn the_whole_stack_for_a_nic_without_a_driver() {
        let m = with(&["ib_core"]);
        assert_eq!(
            m.stack_for("mlx4_core"),
            "modprobe mlx4_core && modprobe mlx4_ib && modprobe ib_uverbs && modprobe rdma_ucm"
        );
        let all = with(&["ib_core", "mlx5_core", "mlx5_ib", "ib_uverbs", "rdma_ucm"]);
        assert_eq!(all.stack_for("mlx5_core"), "modprobe rdma_ucm");
        assert_eq!(mellanox_driver("0x1007"), "mlx4_core");
        assert_eq!(mellanox_driver("0x101d"), "mlx5_core");
        assert_eq!(mellanox_driver("junk"), "mlx5_core");
    }

    #[test]
    fn module_names_from_paths() {
        assert_eq!(
            module_name("kernel/drivers/infiniband/hw/mlx5/mlx5_ib.ko.xz").as_deref(),
            Some("mlx5_ib")
        );
        assert_eq!(
            module_name("kernel/net/rdma-x.ko").as_deref(),
            Some("rdma_x")
        );
    }
}
