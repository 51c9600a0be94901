//! Soft devices: names bound to a network interface or an address, kept in a config file.
//!
//! The file is looked up in `$SOFTRDMA_CONFIG`, then `$XDG_CONFIG_HOME/softrdma` (or
//! `~/.config/softrdma`), then `/etc/softrdma`; the first that exists is used. Each line is
//! `NAME netdev IFACE` or `NAME addr IP`; `#` starts a comment. With no file there is one
//! device, `softrdma0`, on 127.0.0.1, or on `$SOFTRDMA_ADDR` if set (so two processes on one
//! host can use 127.0.0.2 and 127.0.0.3).

pub mod limits;
pub mod options;
pub mod sysfs;

pub use limits::{DeviceAttr, MAX_CQE, PortAttr, device_attr, port_attr};
pub use options::{DeviceOptions, default_addr};

use crate::error::{Error, Result};
use softrdma_proto::Mtu;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

/// How a device is bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Binding {
    /// To a network interface's address.
    Netdev(String),
    /// To an address.
    Addr(IpAddr),
}

/// A device as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSpec {
    /// Name (`softrdma0`, ...).
    pub name: String,
    /// Binding.
    pub binding: Binding,
}

/// A device resolved against the machine's interfaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Name.
    pub name: String,
    /// The interface it runs on, if known.
    pub netdev: Option<String>,
    /// The interface's MTU.
    pub netdev_mtu: usize,
    /// The address the device binds.
    pub addr: IpAddr,
    /// IPv6 scope (interface index) for a link-local address.
    pub scope_id: u32,
    /// The active path MTU: the largest IB MTU that fits the netdev MTU, as rxe computes it.
    pub active_mtu: Mtu,
}

/// The config files tried, in order.
pub fn config_candidates() -> Vec<PathBuf> {
    let mut v = Vec::new();
    if let Some(p) = std::env::var_os("SOFTRDMA_CONFIG") {
        v.push(PathBuf::from(p));
    }
    match std::env::var_os("XDG_CONFIG_HOME") {
        Some(x) => v.push(PathBuf::from(x).join("softrdma")),
        None => {
            if let Some(h) = std::env::var_os("HOME") {
                v.push(PathBuf::from(h).join(".config/softrdma"));
            }
        }
    }
    v.push(PathBuf::from("/etc/softrdma"));
    v
}

/// The config file in use, if any.
pub fn config_path() -> Option<PathBuf> {
    config_candidates().into_iter().find(|p| p.is_file())
}

/// Where `link add` writes: the file in use, else the first candidate.
pub fn write_path() -> PathBuf {
    config_path().unwrap_or_else(|| config_candidates().remove(0))
}

/// Parses a config file's text.
pub fn parse(text: &str) -> Result<Vec<DeviceSpec>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        let bad = |why: &'static str| Error::ConfigLine {
            line: i + 1,
            text: line.to_owned(),
            why,
        };
        let binding = match f.as_slice() {
            [_, "netdev", iface] => Binding::Netdev((*iface).to_owned()),
            [_, "addr", ip] => Binding::Addr(ip.parse().map_err(|_| bad("not an IP address"))?),
            _ => return Err(bad("expected NAME netdev IFACE or NAME addr IP")),
        };
        if out.iter().any(|d: &DeviceSpec| d.name == f[0]) {
            return Err(bad("device defined twice"));
        }
        out.push(DeviceSpec {
            name: f[0].to_owned(),
            binding,
        });
    }
    Ok(out)
}

/// Renders specs as a config file.
pub fn render(specs: &[DeviceSpec]) -> String {
    let mut s = String::from("# softrdma devices: NAME netdev IFACE | NAME addr IP\n");
    for d in specs {
        match &d.binding {
            Binding::Netdev(i) => s.push_str(&format!("{} netdev {i}\n", d.name)),
            Binding::Addr(a) => s.push_str(&format!("{} addr {a}\n", d.name)),
        }
    }
    s
}

/// The configured devices (the default device when there is no config file).
pub fn specs() -> Result<Vec<DeviceSpec>> {
    match config_path() {
        Some(p) => {
            let text = std::fs::read_to_string(&p).map_err(|e| Error::Io {
                verb: "reading the device config",
                source: e,
            })?;
            let mut specs = parse(&text)?;
            // SOFTRDMA_ADDR moves the default (first) device for this process.
            if std::env::var_os("SOFTRDMA_ADDR").is_some() {
                if let Some(first) = specs.first_mut() {
                    let addr = default_addr()?;
                    first.binding = Binding::Addr(addr);
                }
            }
            Ok(specs)
        }
        None => {
            let addr = default_addr()?;
            Ok(vec![DeviceSpec {
                name: "softrdma0".into(),
                binding: Binding::Addr(addr),
            }])
        }
    }
}

struct Iface {
    name: String,
    index: u32,
    addr: IpAddr,
}

fn interfaces() -> Vec<Iface> {
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for a in addrs {
        let Some(sa) = a.address else { continue };
        let ip = if let Some(v4) = sa.as_sockaddr_in() {
            IpAddr::V4(v4.ip())
        } else if let Some(v6) = sa.as_sockaddr_in6() {
            IpAddr::V6(v6.ip())
        } else {
            continue;
        };
        let index = nix::net::if_::if_nametoindex(a.interface_name.as_str()).unwrap_or(0);
        out.push(Iface {
            name: a.interface_name,
            index,
            addr: ip,
        });
    }
    out
}

fn netdev_mtu(iface: &str) -> usize {
    std::fs::read_to_string(format!("/sys/class/net/{iface}/mtu"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1500)
}

/// Resolves a spec against the machine: its address, interface and MTU.
pub fn resolve(spec: &DeviceSpec) -> Result<DeviceInfo> {
    let ifaces = interfaces();
    let (netdev, addr) = match &spec.binding {
        Binding::Netdev(name) => {
            let mine: Vec<&Iface> = ifaces.iter().filter(|i| &i.name == name).collect();
            if mine.is_empty() {
                return Err(Error::NoInterface {
                    device: spec.name.clone(),
                    netdev: name.clone(),
                });
            }
            // IPv4 first, as GID index 1 on rxe; else a global IPv6, else the link-local.
            let pick = mine
                .iter()
                .find(|i| i.addr.is_ipv4())
                .or_else(|| mine.iter().find(|i| !is_link_local(i.addr)))
                .unwrap_or(&mine[0]);
            (Some(name.clone()), pick.addr)
        }
        Binding::Addr(a) => (
            ifaces
                .iter()
                .find(|i| i.addr == *a)
                .map(|i| i.name.clone())
                // All of 127.0.0.0/8 is on the loopback interface.
                .or_else(|| a.is_loopback().then(|| "lo".to_owned())),
            *a,
        ),
    };
    let scope_id = if is_link_local(addr) {
        ifaces
            .iter()
            .find(|i| i.addr == addr)
            .map_or(0, |i| i.index)
    } else {
        0
    };
    let netdev_mtu = netdev.as_deref().map_or(1500, netdev_mtu);
    // rxe: the largest IB MTU not above the netdev MTU minus the RoCE headers.
    let active_mtu = Mtu::for_netdev(netdev_mtu).unwrap_or(Mtu::M256);
    Ok(DeviceInfo {
        name: spec.name.clone(),
        netdev,
        netdev_mtu,
        addr,
        scope_id,
        active_mtu,
    })
}

/// The device that `rdma_resolve_addr` takes for `dst` when the caller names no source,
/// as the kernel's rdma_cm does: the device on the route's egress interface. The kernel is
/// asked for the route by connecting a UDP socket to `dst` (no packet leaves) and reading
/// the source address it picked, which follows the routing table and its rules. `None`
/// when no device is on that route (or the kernel has none to `dst`).
pub fn route_device(devices: &[DeviceInfo], dst: IpAddr) -> Option<usize> {
    let dst = dst.to_canonical();
    let src = route_source(dst)?;
    // The interfaces are read only when no device has the source address itself.
    let netdev = || {
        interfaces()
            .into_iter()
            .find(|i| i.addr == src)
            .map(|i| i.name)
            .or_else(|| src.is_loopback().then(|| "lo".to_owned()))
    };
    choose_route_device(devices, dst, src, netdev)
}

/// The source address the kernel would send from to `dst`.
fn route_source(dst: IpAddr) -> Option<IpAddr> {
    let bind: std::net::SocketAddr = match dst {
        IpAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        IpAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let s = std::net::UdpSocket::bind(bind).ok()?;
    s.connect((dst, softrdma_wire::ROCE_V2_PORT)).ok()?;
    Some(s.local_addr().ok()?.ip().to_canonical())
}

/// [`route_device`]'s choice, given the route's source address `src` and (asked only when
/// needed) its interface: the device that has `src`; else a device on that interface of
/// `dst`'s family (every address of 127.0.0.0/8 is on `lo`, whichever the kernel picked).
/// A device of the other family is no answer: it has no GID to send from that the peer
/// could answer (the kernel's rdma_cm finds no device either, ENODEV).
fn choose_route_device(
    devices: &[DeviceInfo],
    dst: IpAddr,
    src: IpAddr,
    netdev: impl FnOnce() -> Option<String>,
) -> Option<usize> {
    if let Some(i) = devices.iter().position(|d| d.addr.to_canonical() == src) {
        return Some(i);
    }
    let netdev = netdev()?;
    let on = |d: &DeviceInfo| d.netdev.as_deref() == Some(netdev.as_str());
    devices
        .iter()
        .position(|d| on(d) && d.addr.to_canonical().is_ipv4() == dst.is_ipv4())
}

fn is_link_local(a: IpAddr) -> bool {
    matches!(a, IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80)
}

/// Every configured device, resolved.
pub fn devices() -> Result<Vec<DeviceInfo>> {
    specs()?.iter().map(resolve).collect()
}

/// The GID table of a device on `addr`, in rxe's order: the link-local GID made from the
/// node GUID, then the address (IPv4-mapped for IPv4; a global IPv6 address as is).
pub fn gid_table(addr: IpAddr) -> Vec<Ipv6Addr> {
    let guid = node_guid(addr).to_be_bytes();
    let mut ll = [0u8; 16];
    ll[0] = 0xfe;
    ll[1] = 0x80;
    ll[8..].copy_from_slice(&guid);
    let ll = Ipv6Addr::from(ll);
    match addr {
        IpAddr::V4(a) => vec![ll, a.to_ipv6_mapped()],
        IpAddr::V6(a) if is_link_local(addr) => vec![a],
        IpAddr::V6(a) => vec![ll, a],
    }
}

/// The IP address RoCE v2 reaches a GID at (the packet's IP destination or source).
///
/// A GID is an IPv6 address, IPv4-mapped for IPv4, so most GIDs are their address. The
/// exception is the link-local GID of a softrdma device on IPv4 (index 0 of
/// [`gid_table`]): on rxe that GID is the netdev's real IPv6 link-local address, which
/// programs that keep GID index 0 (libfabric's verbs provider, `FI_VERBS_GID_IDX` unset)
/// send to; a softrdma device has no such address, so its link-local GID is made
/// reversible (`fe80::2ff:AAff:feBB:CCDD` from `AA.BB.CC.DD`, see [`node_guid`]) and is
/// reached at that IPv4 address, on this host or another. A link-local GID not of this
/// form is a real IPv6 link-local address (an rxe peer's), reached as such.
pub fn gid_addr(gid: Ipv6Addr) -> IpAddr {
    let o = gid.octets();
    if o[..8] == [0xfe, 0x80, 0, 0, 0, 0, 0, 0]
        && [o[8], o[9], o[11], o[12]] == [0x02, 0xff, 0xff, 0xfe]
    {
        return IpAddr::V4(Ipv4Addr::new(o[10], o[13], o[14], o[15]));
    }
    IpAddr::V6(gid).to_canonical()
}

/// A node GUID derived from the address, in the EUI-64 form rxe derives from a MAC.
pub fn node_guid(addr: IpAddr) -> u64 {
    let b = match addr {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    };
    u64::from_be_bytes([0x02, b[11], b[12], 0xff, 0xfe, b[13], b[14], b[15]])
}

/// The online CPUs as the kernel lists them (`0-1`), which a device's sysfs view calls
/// local to it ([`sysfs::tree`]); `0` if the list cannot be read.
pub fn online_cpus() -> String {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "0".into())
}

/// The loopback address.
pub const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(addr: &str, netdev: &str) -> DeviceInfo {
        DeviceInfo {
            name: addr.into(),
            netdev: Some(netdev.into()),
            netdev_mtu: 1500,
            addr: addr.parse().unwrap(),
            scope_id: 0,
            active_mtu: Mtu::M1024,
        }
    }

    #[test]
    fn an_ipv4_devices_link_local_gid_reaches_its_address() {
        for a in [
            Ipv4Addr::LOCALHOST,
            Ipv4Addr::new(10, 77, 0, 2),
            Ipv4Addr::new(192, 168, 255, 1),
        ] {
            let gids = gid_table(IpAddr::V4(a));
            assert_eq!(gid_addr(gids[0]), IpAddr::V4(a), "{:?}", gids[0]);
            assert_eq!(gid_addr(gids[1]), IpAddr::V4(a));
        }
        // An rxe peer's link-local GID (from its MAC) stays an IPv6 address.
        let rxe: Ipv6Addr = "fe80::5054:ff:fe12:3456".parse().unwrap();
        assert_eq!(gid_addr(rxe), IpAddr::V6(rxe));
        let v6: Ipv6Addr = "fd00::1".parse().unwrap();
        assert_eq!(gid_addr(v6), IpAddr::V6(v6));
    }

    #[test]
    fn the_route_picks_the_device_on_its_egress_interface() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let devs = [
            dev("127.0.0.5", "lo"),
            dev("10.77.0.1", "veth0"),
            dev("::1", "lo"),
        ];
        // The source address the kernel picked is a device's.
        assert_eq!(
            choose_route_device(&devs, ip("10.77.0.2"), ip("10.77.0.1"), || Some(
                "veth0".into()
            )),
            Some(1)
        );
        assert_eq!(
            choose_route_device(&devs, ip("::1"), ip("::1"), || Some("lo".into())),
            Some(2)
        );
        // 127.0.0.9 goes out from 127.0.0.1 on lo: the IPv4 device there.
        assert_eq!(
            choose_route_device(&devs, ip("127.0.0.9"), ip("127.0.0.1"), || Some(
                "lo".into()
            )),
            Some(0)
        );
        // No device on the route's interface.
        assert_eq!(
            choose_route_device(&devs, ip("192.0.2.1"), ip("192.0.2.7"), || Some(
                "eth0".into()
            )),
            None
        );
        // Only a device of the other family on the route's interface.
        assert_eq!(
            choose_route_device(&devs[2..3], ip("127.0.0.9"), ip("127.0.0.1"), || Some(
                "lo".into()
            )),
            None
        );
        // The kernel itself, on this host's loopback.
        let real = [dev("::1", "lo"), dev("127.0.0.3", "lo")];
        assert_eq!(route_device(&real, ip("127.0.0.2")), Some(1));
        assert_eq!(route_device(&real, ip("::1")), Some(0));
        assert_eq!(route_device(&real, ip("::ffff:127.0.0.2")), Some(1));
    }

    #[test]
    fn parses_and_renders() {
        let specs = parse("# c\nsr0 netdev eth0\n\nsr1 addr 10.0.0.1 # x\n").unwrap();
        assert_eq!(specs.len(), 2);
        assert_eq!(specs[1].binding, Binding::Addr("10.0.0.1".parse().unwrap()));
        assert_eq!(parse(&render(&specs)).unwrap(), specs);
        assert!(
            parse("sr0 netdev")
                .unwrap_err()
                .to_string()
                .contains("line 1")
        );
        assert!(parse("a addr 1.2.3.4\na addr 1.2.3.5").is_err());
        assert!(parse("a addr nope").is_err());
    }

    #[test]
    fn loopback_resolves_with_rxe_mtu_rule() {
        let d = resolve(&DeviceSpec {
            name: "x".into(),
            binding: Binding::Netdev("lo".into()),
        })
        .unwrap();
        assert_eq!(d.addr, LOOPBACK);
        assert_eq!(d.active_mtu, Mtu::M4096);
        assert_eq!(Mtu::for_netdev(1500), Some(Mtu::M1024));
        assert_eq!(
            gid_table(LOOPBACK)[1],
            "::ffff:127.0.0.1".parse::<Ipv6Addr>().unwrap()
        );
    }
}
