//! Devices and ports, from `/sys/class/infiniband`: each device's driver, firmware and
//! netdev; each port's state, physical state, link layer, rate and MTU; the GID table with
//! each entry's type and netdev; and the GID index to pass for RoCE v2.

use super::kernel::Modules;
use super::{Check, Ctx, Layer, Root};
use serde_json::json;
use std::net::Ipv6Addr;

/// One entry of a port's GID table.
#[derive(Debug, Clone)]
pub struct Gid {
    /// Its index (`-g`/`-x`).
    pub index: u32,
    /// The GID.
    pub gid: Ipv6Addr,
    /// `IB/RoCE v1` or `RoCE v2` (`gid_attrs/types/N`).
    pub kind: Option<String>,
    /// The netdev it belongs to (`gid_attrs/ndevs/N`).
    pub ndev: Option<String>,
}

impl Gid {
    /// Whether the entry is RoCE v2 (routable, UDP-encapsulated).
    fn is_v2(&self) -> bool {
        self.kind.as_deref() == Some("RoCE v2")
    }
}

/// A port of a device.
#[derive(Debug, Clone)]
pub struct Port {
    /// Port number.
    pub num: u32,
    /// `4: ACTIVE`.
    pub state: Option<String>,
    /// `5: LinkUp`.
    pub phys_state: Option<String>,
    /// `Ethernet` or `InfiniBand`.
    pub link_layer: Option<String>,
    /// `100 Gb/sec (4X EDR)`.
    pub rate: Option<String>,
    /// The non-empty GID entries.
    pub gids: Vec<Gid>,
}

/// A device of `/sys/class/infiniband`.
#[derive(Debug, Clone)]
pub struct IbDevice {
    /// Its name (`mlx5_0`, `rxe0`).
    pub name: String,
    /// `1: CA`.
    pub node_type: Option<String>,
    /// Firmware version (empty for rxe and siw).
    pub fw_ver: Option<String>,
    /// The driver of the PCI function behind it (`device/driver`: `mlx5_core`); `None` for
    /// a virtual device.
    pub driver: Option<String>,
    /// The netdevs behind it: `parent` (rxe, siw) or `device/net/*`.
    pub netdevs: Vec<String>,
    /// The rdma-core provider that drives it (`mlx5`, `rxe`).
    pub provider: Option<&'static str>,
    /// Its ports.
    pub ports: Vec<Port>,
}

/// The rdma-core provider for a device: by the driver of its PCI function, else (a virtual
/// device has none) by its name or node description.
pub fn provider_for(
    name: &str,
    driver: Option<&str>,
    node_desc: Option<&str>,
) -> Option<&'static str> {
    let by_driver = match driver {
        Some("mlx5_core") => Some("mlx5"),
        Some("mlx4_core") => Some("mlx4"),
        Some("bnxt_en") => Some("bnxt_re"),
        Some("ice" | "i40e") => Some("irdma"),
        Some("qede") => Some("qedr"),
        Some("efa") => Some("efa"),
        Some("vmw_pvrdma") => Some("vmw_pvrdma"),
        Some("hns3") => Some("hns"),
        Some("erdma") => Some("erdma"),
        Some("cxgb4") => Some("cxgb4"),
        Some("mana") => Some("mana"),
        _ => None,
    };
    by_driver.or_else(|| {
        let desc = node_desc.unwrap_or("");
        if name.starts_with("rxe") || desc == "rxe" {
            Some("rxe")
        } else if name.starts_with("siw") || desc.starts_with("siw") {
            Some("siw")
        } else {
            None
        }
    })
}

/// The module that makes a provider's devices (`mlx5` → `mlx5_ib`).
pub fn ib_module(provider: &str) -> &'static str {
    match provider {
        "mlx5" => "mlx5_ib",
        "mlx4" => "mlx4_ib",
        "bnxt_re" => "bnxt_re",
        "irdma" => "irdma",
        "qedr" => "qedr",
        "efa" => "efa",
        "rxe" => "rdma_rxe",
        "siw" => "siw",
        _ => "its RDMA driver",
    }
}

/// A GID as sysfs prints it; `None` for anything else.
fn parse_gid(s: &str) -> Option<Ipv6Addr> {
    // sysfs writes 8 groups of 4 hex digits, which Ipv6Addr parses as is.
    s.trim().parse().ok()
}

/// Reads the devices below `root`.
pub fn survey(root: &Root) -> Vec<IbDevice> {
    let mut out = Vec::new();
    for name in root.list("/sys/class/infiniband") {
        let base = format!("/sys/class/infiniband/{name}");
        let driver = root.link_name(&format!("{base}/device/driver"));
        let node_desc = root.read(&format!("{base}/node_desc"));
        let mut netdevs: Vec<String> = root
            .read(&format!("{base}/parent"))
            .into_iter()
            .filter(|p| !p.is_empty())
            .collect();
        for n in root.list(&format!("{base}/device/net")) {
            if !netdevs.contains(&n) {
                netdevs.push(n);
            }
        }
        let mut ports = Vec::new();
        for p in root.list(&format!("{base}/ports")) {
            let Ok(num) = p.parse::<u32>() else { continue };
            let pb = format!("{base}/ports/{p}");
            let mut gids = Vec::new();
            // rxe's table has 1024 entries and mlx5's 255; bound the walk all the same.
            for g in root.list(&format!("{pb}/gids")).into_iter().take(4096) {
                let Ok(index) = g.parse::<u32>() else {
                    continue;
                };
                let Some(gid) = root
                    .read(&format!("{pb}/gids/{g}"))
                    .as_deref()
                    .and_then(parse_gid)
                else {
                    continue;
                };
                if gid.is_unspecified() {
                    continue;
                }
                gids.push(Gid {
                    index,
                    gid,
                    kind: root
                        .read(&format!("{pb}/gid_attrs/types/{g}"))
                        .filter(|s| !s.is_empty()),
                    ndev: root
                        .read(&format!("{pb}/gid_attrs/ndevs/{g}"))
                        .filter(|s| !s.is_empty()),
                });
            }
            ports.push(Port {
                num,
                state: root.read(&format!("{pb}/state")),
                phys_state: root.read(&format!("{pb}/phys_state")),
                link_layer: root.read(&format!("{pb}/link_layer")),
                rate: root.read(&format!("{pb}/rate")),
                gids,
            });
        }
        out.push(IbDevice {
            provider: provider_for(&name, driver.as_deref(), node_desc.as_deref()),
            node_type: root.read(&format!("{base}/node_type")),
            fw_ver: root.read(&format!("{base}/fw_ver")),
            driver,
            netdevs,
            ports,
            name,
        });
    }
    out
}

/// `4: ACTIVE` → `ACTIVE`; `?` for a value that is missing or empty.
fn word(s: &Option<String>) -> &str {
    s.as_deref()
        .map(|s| s.split_once(": ").map_or(s, |(_, w)| w).trim())
        .filter(|w| !w.is_empty())
        .unwrap_or("?")
}

/// Which firmware minor (`xx.35.yyyy`) NVIDIA pairs with each MLNX_OFED release, from its
/// release notes. A heuristic: cards past end of life stay on older firmware for good.
const OFED_FW: [(&str, u32); 13] = [
    ("5.4", 31),
    ("5.5", 32),
    ("5.6", 33),
    ("5.7", 34),
    ("5.8", 35),
    ("5.9", 36),
    ("23.04", 37),
    ("23.07", 38),
    ("23.10", 39),
    ("24.01", 40),
    ("24.04", 41),
    ("24.07", 42),
    ("24.10", 43),
];

/// A PCI device's firmware next to its driver's version (`ethtool -i` too, on the live
/// host), and the MLNX_OFED firmware heuristic; `None` for a virtual device.
fn fw_check(ctx: &Ctx, m: &Modules, d: &IbDevice) -> Option<Check> {
    let l = Layer::Devices;
    let driver = d.driver.as_deref()?;
    let id = format!("device.{}.fw", d.name);
    let title = format!("{} firmware", d.name);
    // An in-tree driver has no version of its own; MLNX_OFED and other out-of-tree
    // drivers set one.
    let version = ctx.root.read(&format!("/sys/module/{driver}/version"));
    let mut ethtool_fw = None;
    if ctx.root.live() {
        if let Some(nd) = d.netdevs.first() {
            if let Some(text) = super::run_quiet("ethtool", &["-i", nd]) {
                ethtool_fw = text
                    .lines()
                    .find_map(|l| l.strip_prefix("firmware-version:"))
                    .map(|s| s.trim().to_owned());
            }
        }
    }
    let drv = match &version {
        Some(v) => format!("{driver} {v} (out of tree)"),
        None => format!(
            "{driver} in-tree (kernel {})",
            m.release.as_deref().unwrap_or("?")
        ),
    };
    let fw = d.fw_ver.clone().unwrap_or_default();
    if fw.is_empty() {
        return Some(
            Check::warn(l, id, title)
                .detail(format!("no firmware version; driver {drv}"))
                .why("a PCI device that reports no firmware version did not finish initialising, which is one cause of \"No IB devices found\".")
                .fix(format!("dmesg | grep -i {driver}")),
        );
    }
    let mut c = Check::ok(l, id.clone(), title.clone()).detail(format!("fw {fw}, driver {drv}"));
    if let Some(e) = ethtool_fw {
        c = c.note(format!("ethtool -i: firmware-version {e}"));
    }
    let minor: Option<u32> = fw.split('.').nth(1).and_then(|x| x.parse().ok());
    if let (Some(v), Some(minor), true) = (&version, minor, driver.starts_with("mlx")) {
        if let Some((rel, want)) = OFED_FW
            .iter()
            .find(|(rel, _)| v.starts_with(rel) && v[rel.len()..].starts_with(['-', '.']))
        {
            if minor < *want {
                let major = fw.split('.').next().unwrap_or("xx");
                c.verdict = super::Verdict::Warn;
                c = c
                    .why(format!(
                        "MLNX_OFED {rel} comes with firmware {major}.{want}.x and this card runs {fw}: firmware older than its driver is the mismatch behind devices that vanish or refuse verbs (unless the card is past end of life)."
                    ))
                    .fix(format!(
                        "mlxfwmanager --online -u -d {} (or flash the firmware of MLNX_OFED {rel} with mstflint)",
                        d.name
                    ));
            }
        }
    }
    Some(c)
}

/// The devices and ports layer.
pub fn check(ctx: &Ctx, m: &Modules, devices: &[IbDevice], out: &mut Vec<Check>) {
    let l = Layer::Devices;
    if devices.is_empty() {
        let drivers = m.device_drivers();
        let halfless = m.halfless().into_iter().find(|p| p.2);
        let c = if let (true, Some((nic, ib, _))) = (drivers.is_empty(), halfless) {
            Check::fail(l, "devices", "RDMA devices")
                .detail(format!(
                    "none in /sys/class/infiniband, though {nic} is loaded"
                ))
                .why(format!(
                    "{nic} runs the NIC for IP only until {ib} gives it an RDMA device."
                ))
                .fix(m.load_line(ib))
        } else if drivers.is_empty() {
            Check::warn(l, "devices", "RDMA devices")
                .detail("none in /sys/class/infiniband")
                .why("no RDMA driver is loaded, so rdma-core's tools say \"No IB devices found\".")
                .fix("softrdma exec -- PROGRAM runs a program on softrdma's devices instead")
        } else if drivers == ["rdma_rxe"] || drivers == ["siw"] {
            let kind = if drivers[0] == "siw" { "siw" } else { "rxe" };
            Check::warn(l, "devices", "RDMA devices")
                .detail(format!("none, though {} is loaded", drivers[0]))
                .why(format!(
                    "{} makes a device only when one is added on a netdev.",
                    drivers[0]
                ))
                .fix(format!("rdma link add {kind}0 type {kind} netdev IFACE"))
        } else {
            Check::fail(l, "devices", "RDMA devices")
                .detail(format!("none, though {} is loaded", drivers.join(", ")))
                .why("the driver is loaded but made no device: the firmware is too old for the driver, the port is in a mode without RDMA, or the NIC failed to start.")
                .fix(format!("dmesg | grep -iE '{}'", drivers.join("|")))
        };
        out.push(c);
        return;
    }
    for d in devices.iter().filter(|d| ctx.wants(&d.name)) {
        let how = match (&d.driver, d.provider) {
            (Some(drv), _) => format!("driver {drv}"),
            (None, Some(p)) => format!("virtual ({})", ib_module(p)),
            (None, None) => "virtual".to_owned(),
        };
        out.push(
            Check::ok(l, format!("device.{}", d.name), d.name.clone())
                .detail(format!(
                    "{how}, node type {}, netdev {}",
                    word(&d.node_type),
                    if d.netdevs.is_empty() {
                        "none".into()
                    } else {
                        d.netdevs.join(", ")
                    }
                ))
                .data(json!({
                    "driver": d.driver,
                    "provider": d.provider,
                    "fw_ver": d.fw_ver,
                    "netdevs": d.netdevs,
                    "node_type": d.node_type,
                })),
        );
        if let Some(c) = fw_check(ctx, m, d) {
            out.push(c);
        }
        // Every RDMA device has at least one port; none readable means its sysfs directory
        // is broken or half gone (a device being removed, a bad copy of sysfs).
        if d.ports.is_empty() {
            out.push(
                Check::warn(l, format!("device.{}.ports", d.name), format!("{} ports", d.name))
                    .detail(format!("no readable port under /sys/class/infiniband/{}/ports", d.name))
                    .why("a device whose ports cannot be read cannot be checked, and programs may fail to query it (\"Couldn't get device attributes\").")
                    .fix(format!("ls -l /sys/class/infiniband/{}/ && rdma link show", d.name)),
            );
        }
        for p in &d.ports {
            port_checks(ctx, d, p, out);
        }
    }
}

/// The netdev behind a port: the one its GIDs name, else the device's first.
fn netdev_of(d: &IbDevice, p: &Port) -> Option<String> {
    p.gids
        .iter()
        .find_map(|g| g.ndev.clone())
        .or_else(|| d.netdevs.first().cloned())
}

/// A port's state, its MTU against its netdev's, its GID table and the GID index to use.
fn port_checks(ctx: &Ctx, d: &IbDevice, p: &Port, out: &mut Vec<Check>) {
    let l = Layer::Devices;
    let key = format!("{}/{}", d.name, p.num);
    let ethernet = p.link_layer.as_deref() == Some("Ethernet");
    let netdev = netdev_of(d, p);
    let state = word(&p.state);
    let phys = word(&p.phys_state);
    let detail = format!(
        "{state}, {phys}, {}, {}",
        p.link_layer.as_deref().unwrap_or("?"),
        p.rate.as_deref().unwrap_or("rate ?")
    );
    let c = if state == "ACTIVE" {
        Check::ok(l, format!("port.{key}"), key.clone()).detail(detail)
    } else {
        let (why, fix) = if phys == "Disabled" || phys == "Polling" || phys == "?" {
            let nd = netdev.clone().unwrap_or_else(|| "IFACE".into());
            (
                "the link is not up: the interface is down, or no cable or peer is there."
                    .to_owned(),
                if ethernet {
                    format!("ip link set dev {nd} up (then check the cable and the switch port)")
                } else {
                    format!(
                        "ibportstate -D 0 {} enable (then check the cable and the switch port)",
                        p.num
                    )
                },
            )
        } else if !ethernet && state == "INIT" {
            (
                "an InfiniBand port stays INIT until a subnet manager brings it up.".to_owned(),
                "systemctl start opensm (on one host of the fabric, or on the switch)".to_owned(),
            )
        } else {
            (
                format!(
                    "the port is {state} and queue pairs cannot reach RTR until it is ACTIVE (\"Failed to modify QP to RTR\")."
                ),
                format!("rdma link show {key}"),
            )
        };
        Check::fail(l, format!("port.{key}"), key.clone())
            .detail(detail)
            .why(why)
            .fix(fix)
    };
    out.push(c);

    if ethernet {
        let c = match &netdev {
            Some(nd) => match ctx
                .root
                .read(&format!("/sys/class/net/{nd}/mtu"))
                .and_then(|m| m.parse::<usize>().ok())
            {
                Some(mtu) => match softrdma::Mtu::for_netdev(mtu) {
                    Some(active) => Check::ok(l, format!("port.{key}.mtu"), format!("{key} MTU"))
                        .detail(format!("netdev {nd} MTU {mtu} → active MTU {}", active.bytes())),
                    None => Check::fail(l, format!("port.{key}.mtu"), format!("{key} MTU"))
                        .detail(format!("netdev {nd} MTU {mtu}"))
                        .why("the netdev MTU is below what the smallest RoCE MTU (256) plus its headers needs.")
                        .fix(format!("ip link set dev {nd} mtu 1500")),
                },
                None => Check::warn(l, format!("port.{key}.mtu"), format!("{key} MTU"))
                    .detail(format!("netdev {nd} has no readable MTU"))
                    .why("the netdev behind the port is not in /sys/class/net (another network namespace?).")
                    .fix(format!("ip link show {nd}")),
            },
            None => Check::warn(l, format!("port.{key}.mtu"), format!("{key} MTU"))
                .detail("no netdev behind the port")
                .why("a RoCE port without a netdev has no IP address, so it has no RoCE v2 GID.")
                .fix(format!("rdma link show {key}")),
        };
        out.push(c);
    }

    let gid_lines: Vec<String> = p
        .gids
        .iter()
        .map(|g| {
            format!(
                "GID[{:>3}] {}  {}  {}",
                g.index,
                g.gid,
                g.kind.as_deref().unwrap_or("?"),
                g.ndev.as_deref().unwrap_or("-")
            )
        })
        .collect();
    let mut c = Check::ok(l, format!("port.{key}.gids"), format!("{key} GIDs"))
        .detail(format!(
            "{} entr{}",
            p.gids.len(),
            if p.gids.len() == 1 { "y" } else { "ies" }
        ))
        .data(json!(
            p.gids
                .iter()
                .map(|g| json!({
                    "index": g.index,
                    "gid": g.gid.to_string(),
                    "type": g.kind,
                    "ndev": g.ndev,
                }))
                .collect::<Vec<_>>()
        ));
    for line in gid_lines {
        c = c.note(line);
    }
    if p.gids.is_empty() {
        c.verdict = super::Verdict::Fail;
        c = c
            .why("a port with an empty GID table cannot address anyone.")
            .fix(format!("rdma link show {key}"));
    }
    out.push(c);
    out.push(gid_index(ctx, &key, ethernet, netdev.as_deref(), p));
}

/// An IPoIB netdev (ARPHRD_INFINIBAND is 32).
fn is_ipoib(ctx: &Ctx, ndev: &str) -> bool {
    ctx.root
        .read(&format!("/sys/class/net/{ndev}/type"))
        .as_deref()
        == Some("32")
}

/// The GID index to pass for RoCE v2 over IPv4 and IPv6, with the traps of index 0
/// (RoCE v1 or link-local) and of an IPoIB GID; on InfiniBand, the port GID.
fn gid_index(ctx: &Ctx, key: &str, ethernet: bool, netdev: Option<&str>, p: &Port) -> Check {
    let l = Layer::Devices;
    let id = format!("port.{key}.gid_index");
    let title = format!("{key} GID index");
    if !ethernet {
        return Check::ok(l, id, title)
            .detail("InfiniBand: -g 0 (the port GID); addresses are LIDs, not IP")
            .note("the IP address of IPoIB (ib0) is for rdma_cm and the out-of-band exchange, not a GID index");
    }
    let v4 = p
        .gids
        .iter()
        .find(|g| g.is_v2() && g.gid.to_ipv4_mapped().is_some());
    let v6 = p.gids.iter().find(|g| {
        g.is_v2() && g.gid.to_ipv4_mapped().is_none() && g.gid.segments()[0] & 0xffc0 != 0xfe80
    });
    let v4_any = p.gids.iter().find(|g| g.gid.to_ipv4_mapped().is_some());
    let ipoib: Vec<&Gid> = p
        .gids
        .iter()
        .filter(|g| g.ndev.as_deref().is_some_and(|n| is_ipoib(ctx, n)))
        .collect();
    let show = |g: Option<&Gid>| match g {
        Some(g) => format!("-g {0} / -x {0} ({1})", g.index, g.gid),
        None => "none".to_owned(),
    };
    let detail = format!("RoCE v2 over IPv4: {}; over IPv6: {}", show(v4), show(v6));
    let data = json!({
        "ipv4": v4.map(|g| g.index),
        "ipv6": v6.map(|g| g.index),
    });
    let mut c = Check::ok(l, id, title).detail(detail).data(data);
    let index0 = p.gids.iter().find(|g| g.index == 0);
    if let Some(g0) = index0 {
        let what = if g0.gid.segments()[0] & 0xffc0 == 0xfe80 {
            "link-local"
        } else {
            "not RoCE v2"
        };
        if g0.kind.as_deref() != Some("RoCE v2") || what == "link-local" {
            c = c.note(format!(
                "not -g 0: index 0 is {} {what}, which the default of many tools picks and which does not route",
                g0.kind.as_deref().unwrap_or("?")
            ));
        }
    }
    let nd = netdev.unwrap_or("IFACE");
    if !ipoib.is_empty() {
        c.verdict = super::Verdict::Warn;
        c = c
            .why(format!(
                "GID {} belongs to IPoIB netdev {}, an InfiniBand interface, which is not what a RoCE program means.",
                ipoib[0].index,
                ipoib[0].ndev.as_deref().unwrap_or("?")
            ))
            .fix(format!("pass the RoCE v2 index of the Ethernet netdev: {}", show(v4)));
    } else if v4.is_none() && v6.is_none() {
        c.verdict = super::Verdict::Fail;
        c = if let Some(g) = v4_any {
            c.why(format!(
                "the IPv4 GID {} is {} only, and RoCE v2 peers (rxe, softrdma, most fabrics) do not speak v1.",
                g.index,
                g.kind.as_deref().unwrap_or("?")
            ))
            .fix(format!("cma_roce_mode -d DEV -p {} -m 2 (and use RoCE v2 at the peer)", p.num))
        } else {
            c.why(format!(
                "{nd} has no IP address, and a RoCE v2 GID exists only for an address."
            ))
            .fix(format!("ip addr add ADDR/PREFIX dev {nd}"))
        };
    } else if v4.is_none() {
        c.verdict = super::Verdict::Warn;
        c = c
            .why(format!(
                "{nd} has no IPv4 address, so IPv4 peers have no GID to reach."
            ))
            .fix(format!("ip addr add ADDR/PREFIX dev {nd}"));
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn providers_by_driver_and_name() {
        assert_eq!(
            provider_for("mlx5_0", Some("mlx5_core"), None),
            Some("mlx5")
        );
        assert_eq!(
            provider_for("rocep59s0f0", Some("mlx5_core"), None),
            Some("mlx5")
        );
        assert_eq!(provider_for("rxe0", None, Some("rxe")), Some("rxe"));
        assert_eq!(provider_for("foo", None, Some("rxe")), Some("rxe"));
        assert_eq!(provider_for("foo", None, None), None);
    }

    #[test]
    fn gids_parse_as_sysfs_writes_them() {
        let g = parse_gid("0000:0000:0000:0000:0000:ffff:0a4d:0008").unwrap();
        assert_eq!(
            g.to_ipv4_mapped(),
            Some(std::net::Ipv4Addr::new(10, 77, 0, 8))
        );
        assert!(
            parse_gid("0000:0000:0000:0000:0000:0000:0000:0000")
                .unwrap()
                .is_unspecified()
        );
        assert!(parse_gid("zz").is_none());
    }
}
