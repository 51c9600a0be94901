//! softrdma's side: the configured devices and whether their addresses exist here, who
//! holds each device's UDP port 4791 (from `/proc/net/udp` and `udp6`, sockets mapped to
//! processes through `/proc/PID/fd`; a socket no process holds is the kernel's, as
//! rdma_rxe's tunnel socket is), whether `softrdma service` runs, and whether `softrdma
//! exec` can give programs their sysfs and `/dev` view (user namespaces).
//!
//! With the real root the devices are those `softrdma link show` lists (the config file
//! that `$SOFTRDMA_CONFIG`, `$XDG_CONFIG_HOME` or `/etc/softrdma` names, and
//! `$SOFTRDMA_ADDR`); below another root they are `ROOT/etc/softrdma`'s, or the default
//! device on 127.0.0.1. Addresses are looked up in `/proc/net/fib_trie` (IPv4) and
//! `/proc/net/if_inet6`, which every user may read.

use super::kernel::Modules;
use super::{Check, Ctx, Layer, list_or_none};
use softrdma::config::{self, Binding, DeviceSpec};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// RoCE v2's port.
const ROCE_PORT: u16 = 4791;

/// A configured device, or why the configuration could not be read.
pub type Configured = Result<Vec<DeviceSpec>, String>;

/// The configured softrdma devices as seen through the root.
pub fn configured(ctx: &Ctx) -> Configured {
    if ctx.root.live() {
        return config::specs().map_err(|e| {
            format!(
                "{}: {e}",
                config::config_path()
                    .map_or("the device config".into(), |p| p.display().to_string())
            )
        });
    }
    match ctx.root.read("/etc/softrdma") {
        Some(text) => config::parse(&text).map_err(|e| format!("/etc/softrdma: {e}")),
        None => Ok(vec![DeviceSpec {
            name: "softrdma0".into(),
            binding: Binding::Addr(config::LOOPBACK),
        }]),
    }
}

/// A UDP socket of `/proc/net/udp[6]`.
#[derive(Debug, Clone)]
struct UdpSock {
    /// Local address (the unspecified one for a wildcard bind).
    addr: IpAddr,
    /// Local port.
    port: u16,
    /// The owning uid.
    uid: u32,
    /// The socket's inode (0 for a kernel socket with no file).
    inode: u64,
}

/// The kernel prints each 32-bit word of an address in host order.
fn parse_hex_addr(hex: &str) -> Option<IpAddr> {
    let word = |s: &str| u32::from_str_radix(s, 16).ok().map(u32::to_ne_bytes);
    match hex.len() {
        8 => Some(IpAddr::V4(Ipv4Addr::from(word(hex)?))),
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                b[i * 4..i * 4 + 4].copy_from_slice(&word(hex.get(i * 8..i * 8 + 8)?)?);
            }
            Some(IpAddr::V6(Ipv6Addr::from(b)))
        }
        _ => None,
    }
}

/// The UDP sockets of `/proc/net/udp` and `udp6`; lines that do not parse are skipped.
fn udp_sockets(ctx: &Ctx) -> Vec<UdpSock> {
    let mut v = Vec::new();
    for f in ["/proc/net/udp", "/proc/net/udp6"] {
        let Some(text) = ctx.root.read(f) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let t: Vec<&str> = line.split_whitespace().collect();
            let Some((a, p)) = t.get(1).and_then(|x| x.split_once(':')) else {
                continue;
            };
            let (Some(addr), Ok(port)) = (parse_hex_addr(a), u16::from_str_radix(p, 16)) else {
                continue;
            };
            v.push(UdpSock {
                addr,
                port,
                uid: t.get(7).and_then(|x| x.parse().ok()).unwrap_or(0),
                inode: t.get(9).and_then(|x| x.parse().ok()).unwrap_or(0),
            });
        }
    }
    v
}

/// Socket inode → (pid, command) for the sockets asked about, from `/proc/PID/fd`.
fn owners(ctx: &Ctx, inodes: &[u64]) -> BTreeMap<u64, (u32, String)> {
    let mut out = BTreeMap::new();
    if inodes.iter().all(|i| *i == 0) {
        return out;
    }
    for pid in ctx.root.list("/proc") {
        let Ok(n) = pid.parse::<u32>() else { continue };
        let Ok(fds) = std::fs::read_dir(ctx.root.path(&format!("/proc/{pid}/fd"))) else {
            continue;
        };
        for fd in fds.filter_map(|e| e.ok()) {
            let Ok(target) = std::fs::read_link(fd.path()) else {
                continue;
            };
            let t = target.to_string_lossy();
            let Some(ino) = t
                .strip_prefix("socket:[")
                .and_then(|s| s.strip_suffix(']'))
                .and_then(|s| s.parse::<u64>().ok())
            else {
                continue;
            };
            if ino != 0 && inodes.contains(&ino) {
                let comm = ctx
                    .root
                    .read(&format!("/proc/{pid}/comm"))
                    .unwrap_or_default();
                out.entry(ino).or_insert((n, comm));
            }
        }
    }
    out
}

/// The host's local addresses: `host LOCAL` entries of fib_trie (a `/32` is one address,
/// `127.0.0.0/8` a whole range) and if_inet6; `None` when neither file can be read.
struct Locals {
    /// IPv4 local routes, as address and prefix length.
    v4: Vec<(Ipv4Addr, u8)>,
    /// IPv6 addresses.
    v6: Vec<Ipv6Addr>,
}

impl Locals {
    /// Reads both files below the root.
    fn read(ctx: &Ctx) -> Option<Self> {
        let trie = ctx.root.read("/proc/net/fib_trie");
        let inet6 = ctx.root.read("/proc/net/if_inet6");
        if trie.is_none() && inet6.is_none() {
            return None;
        }
        let mut v4 = Vec::new();
        let mut last: Option<Ipv4Addr> = None;
        for line in trie.unwrap_or_default().lines() {
            let s = line.trim_start_matches([' ', '|', '+', '-']).trim();
            if let Ok(a) = s.parse::<Ipv4Addr>() {
                last = Some(a);
            } else if let Some(rest) = s.strip_prefix('/') {
                let mut w = rest.split_whitespace();
                // A prefix longer than 32 is not IPv4's; it is junk, and would overflow
                // the mask below.
                let len = w
                    .next()
                    .and_then(|x| x.parse::<u8>().ok())
                    .filter(|l| *l <= 32);
                if let (Some(a), Some(len), Some("host"), Some("LOCAL")) =
                    (last, len, w.next(), w.next())
                {
                    if !v4.contains(&(a, len)) {
                        v4.push((a, len));
                    }
                }
            }
        }
        let v6 = inet6
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .filter_map(|h| u128::from_str_radix(h, 16).ok())
            .map(Ipv6Addr::from)
            .collect();
        Some(Self { v4, v6 })
    }

    /// Whether `a` is local.
    fn has(&self, a: IpAddr) -> bool {
        match a {
            IpAddr::V4(a) => self.v4.iter().any(|(net, len)| {
                let mask = u32::MAX.checked_shl(32 - u32::from(*len)).unwrap_or(0);
                u32::from(a) & mask == u32::from(*net) & mask
            }),
            IpAddr::V6(a) => self.v6.contains(&a),
        }
    }
}

/// The abstract socket names the devices' owners listen on (`@softrdma/UID/IP`).
fn softrdma_listeners(ctx: &Ctx) -> Vec<(String, u64)> {
    ctx.root
        .read("/proc/net/unix")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter_map(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            let path = t.get(7)?;
            let name = path.strip_prefix("@softrdma/")?;
            let inode = t.get(6)?.parse().ok()?;
            (!name.contains("/ep/")).then(|| (name.to_owned(), inode))
        })
        .collect()
}

/// A device's address, or `None` with the reason it has none.
fn address(ctx: &Ctx, spec: &DeviceSpec) -> Result<(IpAddr, Option<String>), String> {
    if ctx.root.live() {
        return config::resolve(spec)
            .map(|d| (d.addr, d.netdev))
            .map_err(|e| e.to_string());
    }
    match &spec.binding {
        Binding::Addr(a) => Ok((*a, None)),
        Binding::Netdev(n) => {
            if ctx.root.exists(&format!("/sys/class/net/{n}")) {
                // The interface's IPv4 address is not in any file below a root; its port
                // is judged on the wildcard address.
                Ok((IpAddr::V4(Ipv4Addr::UNSPECIFIED), Some(n.clone())))
            } else {
                Err(format!("no interface named {n}"))
            }
        }
    }
}

/// The softrdma layer.
pub fn check(ctx: &Ctx, m: &Modules, devs: Configured, out: &mut Vec<Check>) {
    let l = Layer::Softrdma;
    let specs = match devs {
        Ok(s) => s,
        Err(e) => {
            out.push(
                Check::fail(l, "softrdma.config", "device config")
                    .detail(e)
                    .why("softrdma refuses a config file it cannot parse, so no program can open a device.")
                    .fix("softrdma link show (then fix or delete the file)"),
            );
            return;
        }
    };
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    let file = if ctx.root.live() {
        config::config_path().map(|p| p.display().to_string())
    } else {
        ctx.root
            .exists("/etc/softrdma")
            .then(|| "/etc/softrdma".to_owned())
    };
    let detail = format!(
        "{} ({})",
        list_or_none(&names),
        file.as_deref()
            .unwrap_or("no config file: the default device")
    );
    // A config file that names no device is read as it stands: softrdma then has no
    // device at all, rather than its default one.
    out.push(if specs.is_empty() {
        Check::warn(l, "softrdma.config", "device config")
            .detail(detail)
            .why("the config file names no device, so programs run by softrdma exec find none (\"No IB devices found\").")
            .fix("softrdma link add softrdma0 addr 127.0.0.1 (or delete the empty file to get that default)")
    } else {
        Check::ok(l, "softrdma.config", "device config").detail(detail)
    });
    let locals = Locals::read(ctx);
    let socks = udp_sockets(ctx);
    let roce: Vec<&UdpSock> = socks.iter().filter(|s| s.port == ROCE_PORT).collect();
    let inodes: Vec<u64> = roce.iter().map(|s| s.inode).collect();
    let owners = owners(ctx, &inodes);
    let listeners = softrdma_listeners(ctx);
    let uid = ctx.me.euid;
    for spec in specs.iter().filter(|s| ctx.wants(&s.name)) {
        let n = &spec.name;
        let (addr, netdev) = match address(ctx, spec) {
            Ok(x) => x,
            Err(e) => {
                out.push(
                    Check::fail(l, format!("softrdma.{n}.addr"), format!("{n} address"))
                        .detail(e)
                        .why("the device is bound to an interface this host does not have, so it cannot open.")
                        .fix(format!("softrdma link delete {n} && softrdma link add {n} netdev IFACE")),
                );
                continue;
            }
        };
        let where_ = netdev
            .as_deref()
            .map_or(String::new(), |d| format!(" on {d}"));
        let (aid, atitle) = (format!("softrdma.{n}.addr"), format!("{n} address"));
        out.push(match &locals {
            _ if addr.is_unspecified() => Check::ok(l, aid, atitle).detail(format!("interface{where_}")),
            None => Check::warn(l, aid, atitle)
                .detail(format!("{addr}: the host's addresses cannot be read"))
                .why("neither /proc/net/fib_trie nor /proc/net/if_inet6 can be read, so whether the address exists is unknown.")
                .fix("ip addr"),
            Some(loc) if loc.has(addr) => Check::ok(l, aid, atitle).detail(format!("{addr}{where_}")),
            Some(_) => Check::fail(l, aid, atitle)
                .detail(format!("{addr} is not an address of this host"))
                .why("the device binds its address, and the kernel refuses to bind an address no interface has (EADDRNOTAVAIL).")
                .fix(if addr.is_loopback() {
                    "ip link set dev lo up".to_owned()
                } else {
                    format!("ip addr add {addr}/24 dev IFACE, or softrdma link delete {n} && softrdma link add {n} addr IP")
                }),
        });

        // Who holds IP:4791: a socket on the address itself or on the wildcard of its family.
        let holders: Vec<&&UdpSock> = roce
            .iter()
            .filter(|s| {
                s.addr == addr
                    || addr.is_unspecified()
                    // An IPv6 wildcard socket without IPV6_V6ONLY would block IPv4 too, but
                    // /proc does not show the flag, and rxe's (the usual one) sets it.
                    || (s.addr.is_unspecified() && s.addr.is_ipv4() == addr.is_ipv4())
            })
            .collect();
        let scope_name = format!("{uid}/{addr}");
        let owner_sock = listeners
            .iter()
            .find(|(nm, _)| *nm == scope_name || nm.starts_with(&format!("{scope_name}%")));
        let id = format!("softrdma.{n}.port");
        let title = format!("{n} port {ROCE_PORT}");
        let c = if holders.is_empty() {
            Check::ok(l, id, title).detail(format!(
                "{addr}:{ROCE_PORT} is free (the first program to open {n} takes it)"
            ))
        } else {
            let mut who = Vec::new();
            let mut foreign = Vec::new();
            let mut kernel = false;
            for s in &holders {
                match owners.get(&s.inode) {
                    Some((pid, comm)) => {
                        who.push(format!("pid {pid} ({comm})"));
                        // A member or the owner of this device is fine: sharing is how
                        // softrdma works. Anything else holding the port blocks it.
                        if owner_sock.is_none() || s.uid != uid {
                            foreign.push(format!("pid {pid} ({comm}) on {}", s.addr));
                        }
                    }
                    None if s.inode == 0 || (s.uid == 0 && (m.has("rdma_rxe") || uid == 0)) => {
                        kernel = true;
                        who.push(format!("the kernel on {} (no process)", s.addr));
                    }
                    None => {
                        who.push(format!(
                            "uid {} on {} (a process doctor cannot see)",
                            s.uid, s.addr
                        ));
                        if s.uid != uid || owner_sock.is_none() {
                            foreign.push(format!("uid {}'s process on {}", s.uid, s.addr));
                        }
                    }
                }
            }
            if kernel {
                let fix = if m.has("rdma_rxe") {
                    "use the kernel's rxe for RDMA here, or free the port: rdma link delete rxe0 && modprobe -r rdma_rxe".to_owned()
                } else {
                    "find the kernel user of UDP 4791 (a RoCE driver's tunnel socket): ss -uapn 'sport = :4791'".to_owned()
                };
                Check::fail(l, id, title)
                    .detail(format!("held by {}", who.join(", ")))
                    .why(format!(
                        "{} holds UDP 4791 in the kernel, so softrdma cannot bind {addr}:{ROCE_PORT} (EADDRINUSE) and {n} does not open.",
                        if m.has("rdma_rxe") { "rdma_rxe" } else { "a kernel socket" }
                    ))
                    .fix(fix)
            } else if !foreign.is_empty() {
                Check::fail(l, id, title)
                    .detail(format!("held by {}", who.join(", ")))
                    .why(format!(
                        "{} holds the port and is not softrdma's owner of {n}, so {n} cannot bind it (EADDRINUSE).",
                        foreign[0]
                    ))
                    .fix(if file.is_some() {
                        format!("stop that program, or move {n}: softrdma link delete {n} && softrdma link add {n} addr OTHER_IP")
                    } else {
                        "stop that program, or run on another address: SOFTRDMA_ADDR=127.0.0.2 softrdma exec -- PROGRAM".to_owned()
                    })
            } else {
                Check::ok(l, id, title).detail(format!("in use by softrdma: {}", who.join(", ")))
            }
        };
        out.push(c);
    }

    out.push(service(ctx));
    out.push(exec_view(ctx));
}

/// Whether `softrdma service` runs.
fn service(ctx: &Ctx) -> Check {
    let l = Layer::Softrdma;
    let mut pids = Vec::new();
    for pid in ctx.root.list("/proc") {
        if pid.parse::<u32>().is_err() {
            continue;
        }
        let Some(cmd) = ctx.root.bytes(&format!("/proc/{pid}/cmdline"), 1 << 20) else {
            continue;
        };
        let args: Vec<&[u8]> = cmd.split(|b| *b == 0).collect();
        let prog = args
            .first()
            .map(|a| a.rsplit(|b| *b == b'/').next().unwrap_or(a));
        if prog == Some(b"softrdma".as_slice()) && args.get(1) == Some(&b"service".as_slice()) {
            pids.push(pid);
        }
    }
    let c = Check::ok(l, "softrdma.service", "device service");
    if pids.is_empty() {
        c.detail("not running (nothing needs it: the first program to open a device owns it)")
    } else {
        c.detail(format!("running, pid {}", pids.join(", ")))
    }
}

/// Whether `softrdma exec` can make its private view (user and mount namespaces).
fn exec_view(ctx: &Ctx) -> Check {
    let l = Layer::Softrdma;
    let (id, title) = ("softrdma.exec_view", "exec's device view");
    let read = |p: &str| ctx.root.read(p).and_then(|s| s.parse::<i64>().ok());
    if ctx.me.euid == 0 {
        // Root skips the user namespace and unshares a mount namespace directly, which
        // takes CAP_SYS_ADMIN: root in a default Docker container does not have it.
        return if ctx.me.sys_admin {
            Check::ok(l, id, title).detail("root: a mount namespace is all it needs")
        } else {
            Check::warn(l, id, title)
                .detail("root without CAP_SYS_ADMIN (a container?)")
                .why("softrdma exec as root makes a mount namespace, which needs CAP_SYS_ADMIN, so programs run without the /sys/class/infiniband and /dev/infiniband views UCX, Open MPI and pyverbs look for (plain libibverbs programs still work).")
                .fix("run the container with --cap-add SYS_ADMIN, or run softrdma exec as an ordinary user (a user namespace instead)")
        };
    }
    let blocked = if read("/proc/sys/user/max_user_namespaces") == Some(0) {
        Some((
            "user.max_user_namespaces is 0",
            "sysctl -w user.max_user_namespaces=15000",
        ))
    } else if read("/proc/sys/kernel/unprivileged_userns_clone") == Some(0) {
        Some((
            "kernel.unprivileged_userns_clone is 0",
            "sysctl -w kernel.unprivileged_userns_clone=1",
        ))
    } else if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == Some(1) {
        Some((
            "AppArmor restricts unprivileged user namespaces",
            "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 (or an AppArmor profile for softrdma with userns)",
        ))
    } else {
        None
    };
    match blocked {
        None => Check::ok(l, id, title).detail("unprivileged user namespaces allowed"),
        Some((what, fix)) => Check::warn(l, id, title)
            .detail(what)
            .why("softrdma exec then runs programs without /sys/class/infiniband and /dev/infiniband views, which UCX, Open MPI and pyverbs look for (plain libibverbs programs still work).")
            .fix(format!("{fix}, or run softrdma exec as root")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_endian = "little")]
    fn proc_net_addresses() {
        assert_eq!(
            parse_hex_addr("0100007F"),
            Some(IpAddr::V4(Ipv4Addr::LOCALHOST))
        );
        assert_eq!(
            parse_hex_addr("00000000000000000000000000000000"),
            Some(IpAddr::V6(Ipv6Addr::UNSPECIFIED))
        );
        assert_eq!(
            parse_hex_addr("0000000000000000FFFF00000100007F"),
            Some(IpAddr::V6(Ipv4Addr::LOCALHOST.to_ipv6_mapped()))
        );
        assert_eq!(parse_hex_addr("xyz"), None);
    }
}
