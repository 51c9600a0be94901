//! A device as the kernel's sysfs would show it: the files that rdma-core, pyverbs, UCX
//! and Open MPI read under `/sys/class/infiniband/DEV` and
//! `/sys/class/infiniband_verbs/uverbsN`, with the contents rxe's would have.
//!
//! One description has two readers: the drop-in's `ibv_read_sysfs_file` answers from it,
//! and `softrdma exec` writes it into a private mount namespace, so that programs which
//! look for devices the kernel's way (`ls /sys/class/infiniband/DEV/device/net/`,
//! `readlink device/driver`) find softrdma's. Pure data: no I/O.

use super::DeviceInfo;
use super::limits::GID_TBL_LEN;
use std::net::{IpAddr, Ipv6Addr};

/// One node of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    /// A regular file and its contents (a sysfs attribute, newline-terminated).
    File(String),
    /// A symbolic link and its target.
    Link(String),
    /// An empty directory.
    Dir,
}

/// The directory under which every path of [`tree`] lies.
pub const CLASS: &str = "/sys/class";

/// The name of the driver a device reports (`device/driver`'s target's last component).
pub const DRIVER: &str = "softrdma";

/// The LID of an IPv4 device's port: the low 16 bits of its address (0 for IPv6), so that
/// LID-addressed AHs work within its /16. The drop-in maps such a DLID back to an address.
pub fn port_lid(addr: IpAddr) -> u16 {
    match addr {
        IpAddr::V4(a) => u32::from(a) as u16,
        IpAddr::V6(_) => 0,
    }
}

/// A GID as the kernel prints one (`%pI6`: eight groups of four hex digits).
fn gid_text(g: &Ipv6Addr) -> String {
    g.segments()
        .iter()
        .map(|s| format!("{s:04x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// A GUID as sysfs prints one (four groups of four hex digits).
fn guid_text(guid: u64) -> String {
    guid.to_be_bytes()
        .chunks(2)
        .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
        .collect::<Vec<_>>()
        .join(":")
}

/// The device's tree, as paths relative to [`CLASS`] (`infiniband/softrdma0/node_guid`),
/// for the device at `index` of the list (its verbs node is `uverbs{index}`). `cpus` is
/// the online CPU list (`0-1`), which the device reports as local to it.
pub fn tree(index: usize, d: &DeviceInfo, cpus: &str) -> Vec<(String, Node)> {
    let dev = format!("infiniband/{}", d.name);
    let port = format!("{dev}/ports/1");
    let attr = super::device_attr(d.addr);
    let file = |p: String, s: String| (p, Node::File(s + "\n"));
    let mut v = vec![
        file(format!("{dev}/node_guid"), guid_text(attr.node_guid)),
        file(
            format!("{dev}/sys_image_guid"),
            guid_text(attr.sys_image_guid),
        ),
        file(format!("{dev}/node_type"), "1: CA".into()),
        file(format!("{dev}/node_desc"), format!("softrdma {}", d.name)),
        file(format!("{dev}/fw_ver"), attr.fw_ver.clone()),
        file(format!("{dev}/hca_type"), "0".into()),
        file(format!("{dev}/hw_rev"), "0".into()),
        file(format!("{dev}/board_id"), "softrdma".into()),
        file(format!("{port}/state"), "4: ACTIVE".into()),
        file(format!("{port}/phys_state"), "5: LinkUp".into()),
        file(format!("{port}/link_layer"), "Ethernet".into()),
        // What the port's attributes say (1X, 2.5 Gb/s), as rxe on a link of no speed.
        file(format!("{port}/rate"), "2.5 Gb/sec (1X SDR)".into()),
        file(format!("{port}/lid"), format!("0x{:x}", port_lid(d.addr))),
        file(format!("{port}/sm_lid"), "0x0".into()),
        file(format!("{port}/sm_sl"), "0".into()),
        file(format!("{port}/lid_mask_count"), "0".into()),
        file(
            format!("{port}/cap_mask"),
            format!("0x{:08x}", (1u32 << 16) | (1 << 26)),
        ),
        file(format!("{port}/pkeys/0"), "0xffff".into()),
        // The PCI-style device directory: its netdev, its driver, its locality.
        file(format!("{dev}/device/numa_node"), "-1".into()),
        file(format!("{dev}/device/local_cpulist"), cpus.to_owned()),
        file(format!("{dev}/device/local_cpus"), cpu_mask(cpus)),
        (format!("{dev}/device/.driver/{DRIVER}"), Node::Dir),
        (
            format!("{dev}/device/driver"),
            Node::Link(format!(".driver/{DRIVER}")),
        ),
        file(
            format!("infiniband_verbs/uverbs{index}/ibdev"),
            d.name.clone(),
        ),
        file(
            format!("infiniband_verbs/uverbs{index}/abi_version"),
            "1".into(),
        ),
        file(
            format!("infiniband_verbs/uverbs{index}/dev"),
            format!("231:{}", 192 + index),
        ),
        file("infiniband_verbs/abi_version".into(), "6".into()),
    ];
    if let Some(n) = &d.netdev {
        v.push((
            format!("{dev}/device/net/{n}"),
            Node::Link(format!("{CLASS}/net/{n}")),
        ));
    }
    let gids = super::gid_table(d.addr);
    for i in 0..GID_TBL_LEN as usize {
        let g = gids.get(i).copied().unwrap_or(Ipv6Addr::UNSPECIFIED);
        v.push(file(format!("{port}/gids/{i}"), gid_text(&g)));
    }
    for i in 0..gids.len() {
        v.push(file(
            format!("{port}/gid_attrs/types/{i}"),
            "RoCE v2".into(),
        ));
        if let Some(n) = &d.netdev {
            v.push(file(format!("{port}/gid_attrs/ndevs/{i}"), n.clone()));
        }
    }
    v
}

/// A CPU list (`0-3,8`) as the kernel's hex mask (`10f`), for `local_cpus`.
fn cpu_mask(list: &str) -> String {
    let mut bits: Vec<u32> = Vec::new();
    let mut set = |c: usize| {
        let w = c / 32;
        if bits.len() <= w {
            bits.resize(w + 1, 0);
        }
        bits[w] |= 1 << (c % 32);
    };
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(a), Ok(b)) = (a.parse::<usize>(), b.parse::<usize>()) {
            // A bound on a hostile or garbled list: sysfs masks stop at 8192 CPUs.
            (a..=b.min(8191)).for_each(&mut set);
        }
    }
    if bits.is_empty() {
        bits.push(0);
    }
    bits.iter()
        .rev()
        .map(|w| format!("{w:08x}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The contents of the file at `path` (absolute, under [`CLASS`]) in the trees of
/// `devices`: `Some(Ok(text))` for a file of ours, `Some(Err(()))` for a path inside one of
/// our directories that names no file, `None` for a path that is not ours.
pub fn read(devices: &[DeviceInfo], cpus: &str, path: &str) -> Option<Result<String, ()>> {
    let rel = path.strip_prefix(CLASS)?.trim_start_matches('/');
    let rel = rel.trim_end_matches('/');
    for (i, d) in devices.iter().enumerate() {
        let roots = [
            format!("infiniband/{}", d.name),
            format!("infiniband_verbs/uverbs{i}"),
        ];
        let inside = roots.iter().any(|r| {
            rel == r
                || rel
                    .strip_prefix(r.as_str())
                    .is_some_and(|t| t.starts_with('/'))
        });
        if !inside && rel != "infiniband_verbs/abi_version" {
            continue;
        }
        return Some(
            tree(i, d, cpus)
                .into_iter()
                .find_map(|(p, n)| match n {
                    Node::File(s) if p == rel => Some(s),
                    _ => None,
                })
                .ok_or(()),
        );
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use softrdma_proto::Mtu;

    fn lo() -> DeviceInfo {
        DeviceInfo {
            name: "softrdma0".into(),
            netdev: Some("lo".into()),
            netdev_mtu: 65536,
            addr: "127.0.0.1".parse().unwrap(),
            scope_id: 0,
            active_mtu: Mtu::M4096,
        }
    }

    #[test]
    fn files_read_as_rxe_prints_them() {
        let d = [lo()];
        let r = |p: &str| read(&d, "0-1", p);
        for (path, text) in [
            (
                "/sys/class/infiniband/softrdma0/ports/1/gids/1",
                "0000:0000:0000:0000:0000:ffff:7f00:0001\n",
            ),
            (
                "/sys/class/infiniband/softrdma0/ports/1/gid_attrs/types/1",
                "RoCE v2\n",
            ),
            ("/sys/class/infiniband/softrdma0/ports/1/lid", "0x1\n"),
            ("/sys/class/infiniband_verbs/uverbs0/ibdev", "softrdma0\n"),
            (
                "/sys/class/infiniband/softrdma0/device/local_cpus",
                "00000003\n",
            ),
        ] {
            assert_eq!(r(path), Some(Ok(text.into())), "{path}");
        }
        // Empty slots read as zero GIDs, but have no type, as rxe's.
        assert!(r("/sys/class/infiniband/softrdma0/ports/1/gids/1023").is_some_and(|t| t.is_ok()));
        assert_eq!(
            r("/sys/class/infiniband/softrdma0/ports/1/gid_attrs/types/2"),
            Some(Err(()))
        );
        assert_eq!(r("/sys/class/infiniband/softrdma0/nothing"), Some(Err(())));
        assert_eq!(r("/sys/class/infiniband/softrdma01/node_guid"), None);
        assert_eq!(r("/sys/class/net/lo/mtu"), None);
    }

    #[test]
    fn the_tree_names_netdev_and_driver() {
        let t = tree(0, &lo(), "0");
        assert!(t.contains(&(
            "infiniband/softrdma0/device/net/lo".into(),
            Node::Link("/sys/class/net/lo".into())
        )));
        assert!(t.contains(&(
            "infiniband/softrdma0/device/driver".into(),
            Node::Link(".driver/softrdma".into())
        )));
    }

    #[test]
    fn cpu_masks() {
        assert_eq!(cpu_mask("0"), "00000001");
        assert_eq!(cpu_mask("0-3,8"), "0000010f");
        assert_eq!(cpu_mask("32"), "00000001,00000000");
        assert_eq!(cpu_mask("garbage"), "00000000");
    }
}
