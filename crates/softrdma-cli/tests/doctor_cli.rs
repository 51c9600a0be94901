//! `softrdma doctor` on fixture hosts (`tests/data/doctor/*`, described in its README): each
//! tree stands for a whole host through `--root`, and each has its expected verdicts.

mod common;
#[path = "common/doctor.rs"]
mod doctor;

use common::{softrdma, spawn, wait};
use doctor::{assert_rxe_vm, check, expect, field as text};
use serde_json::Value;
use std::path::PathBuf;
use std::process::Output;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/doctor")
        .join(name)
}

/// Runs doctor under the common time limit; the environment that would point it at a device
/// config is cleared, so only the fixture speaks.
fn doctor(args: &[&str]) -> Output {
    let mut c = softrdma();
    c.arg("doctor")
        .args(args)
        .env_remove("SOFTRDMA_ADDR")
        .env("NO_COLOR", "1");
    wait(spawn(&mut c), "softrdma doctor")
}

/// The JSON report and the exit status for a fixture.
fn report(name: &str, extra: &[&str]) -> (Value, i32) {
    let root = fixture(name);
    let mut args = vec!["--json", "--root", root.to_str().expect("utf-8 path")];
    args.extend_from_slice(extra);
    let o = doctor(&args);
    let out = String::from_utf8_lossy(&o.stdout);
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| {
        panic!(
            "{name}: not JSON ({e}): {out}\n{}",
            String::from_utf8_lossy(&o.stderr)
        )
    });
    (v, o.status.code().expect("exited"))
}

#[test]
fn host_with_nothing_warns_and_points_to_softrdma_exec() {
    let (r, code) = report("nothing", &[]);
    assert_eq!(code, 0, "nothing is broken, RDMA is merely absent: {r:#}");
    expect(
        &r,
        &[
            ("modules.loaded", "warn"),
            ("devices", "warn"),
            ("libibverbs", "warn"),
            ("memlock", "ok"),
            ("firewall", "ok"),
            ("libibverbs.devices", "warn"),
            ("softrdma.config", "ok"),
            ("softrdma.softrdma0.addr", "ok"),
            ("softrdma.softrdma0.port", "ok"),
            ("softrdma.service", "ok"),
            ("softrdma.exec_view", "ok"),
        ],
    );
    let e = check(&r, "libibverbs.devices");
    assert!(text(e, "detail").contains("No IB devices found"), "{e:#}");
    assert!(
        text(e, "reason").contains("no RDMA driver is loaded"),
        "{e:#}"
    );
    assert!(text(e, "fix").contains("softrdma exec -- PROGRAM"), "{e:#}");
    assert_eq!(r["summary"]["fail"], 0);
}

/// The sysfs, /proc and module list of the rxe VM (Debian 12, kernel 6.1, rdma-core 44).
#[test]
fn rxe_vm_finds_rxe0_its_gids_and_the_4791_conflict() {
    let (r, code) = report("rxe", &[]);
    assert_eq!(code, 1, "softrdma0 cannot bind 4791 beside rxe");
    assert_rxe_vm(&r, "10.77.0.8");
    assert_eq!(
        check(&r, "port.rxe0/1.gids")["data"][0]["gid"],
        "fe80::5054:ff:fe77:8"
    );
}

#[test]
fn mlx5_roce_v1_and_v2_gids_and_a_firmware_older_than_its_driver() {
    let (r, code) = report("mlx5", &[]);
    assert_eq!(code, 0, "warnings only: {r:#}");
    expect(
        &r,
        &[
            ("modules.mlx5_ib", "ok"),
            ("device.mlx5_0", "ok"),
            ("device.mlx5_0.fw", "warn"),
            ("port.mlx5_0/1", "ok"),
            ("port.mlx5_0/1.gid_index", "ok"),
            ("provider.mlx5_0", "ok"),
            ("memlock", "warn"),
            ("firewall", "ok"),
            ("libibverbs.devices", "ok"),
        ],
    );
    let gids = check(&r, "port.mlx5_0/1.gids")["data"]
        .as_array()
        .expect("GIDs")
        .clone();
    let types: Vec<&str> = gids
        .iter()
        .map(|g| g["type"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        types,
        [
            "IB/RoCE v1",
            "RoCE v2",
            "IB/RoCE v1",
            "RoCE v2",
            "IB/RoCE v1",
            "RoCE v2"
        ]
    );
    let idx = check(&r, "port.mlx5_0/1.gid_index");
    assert_eq!(idx["data"]["ipv4"], 3, "the RoCE v2 one, not the v1 at 2");
    assert_eq!(idx["data"]["ipv6"], 5);
    assert!(
        idx["notes"][0].as_str().unwrap_or("").contains("not -g 0"),
        "{idx:#}"
    );
    let fw = check(&r, "device.mlx5_0.fw");
    assert!(text(fw, "detail").contains("16.28.4512"), "{fw:#}");
    assert!(text(fw, "detail").contains("5.8-1.0.1"), "{fw:#}");
    assert!(text(fw, "reason").contains("16.35"), "{fw:#}");
    assert!(text(check(&r, "port.mlx5_0/1.mtu"), "detail").contains("active MTU 4096"));
    // Policy drop, with an explicit accept for 4791.
    assert!(text(check(&r, "firewall"), "detail").contains("passes"));
}

#[test]
fn module_without_its_provider_package() {
    let (r, code) = report("no_provider", &[]);
    assert_eq!(code, 1);
    expect(
        &r,
        &[
            ("modules.mlx5_ib", "ok"),
            ("device.mlx5_0.fw", "ok"),
            ("libibverbs", "ok"),
            ("provider.mlx5_0", "fail"),
            ("libibverbs.devices", "fail"),
        ],
    );
    let p = check(&r, "provider.mlx5_0");
    assert!(text(p, "fix").contains("ibverbs-providers"), "{p:#}");
    assert!(
        text(p, "reason").contains("no userspace device-specific driver found"),
        "{p:#}"
    );
    let e = check(&r, "libibverbs.devices");
    assert!(text(e, "reason").contains("no mlx5 provider"), "{e:#}");
    assert!(text(e, "fix").contains("softrdma exec -- PROGRAM"), "{e:#}");
}

#[test]
fn container_without_dev_infiniband() {
    let (r, code) = report("container", &[]);
    assert_eq!(code, 1);
    expect(
        &r,
        &[
            ("device.mlx5_0", "ok"),
            ("provider.mlx5_0", "ok"),
            ("devfiles.uverbs", "fail"),
            ("devfiles.rdma_cm", "fail"),
            ("libibverbs.devices", "fail"),
        ],
    );
    let d = check(&r, "devfiles.uverbs");
    assert!(text(d, "reason").contains("container"), "{d:#}");
    assert!(
        text(d, "fix").contains("--device=/dev/infiniband/uverbs0"),
        "{d:#}"
    );
    assert!(text(check(&r, "libibverbs.devices"), "reason").contains("container"));
}

#[test]
fn low_memlock_limit() {
    let (r, code) = report("memlock", &[]);
    assert_eq!(code, 1);
    expect(&r, &[("memlock", "fail"), ("libibverbs.devices", "ok")]);
    let m = check(&r, "memlock");
    assert_eq!(text(m, "detail"), "64 KiB");
    assert!(
        text(m, "reason").contains("Cannot allocate memory"),
        "{m:#}"
    );
    assert!(text(m, "fix").contains("ulimit -l unlimited"), "{m:#}");
}

#[test]
fn port_4791_taken_by_another_program_but_not_by_softrdma_itself() {
    let (r, code) = report("port_taken", &[]);
    assert_eq!(code, 1);
    expect(
        &r,
        &[
            ("softrdma.config", "ok"),
            ("softrdma.softrdma0.port", "ok"),
            ("softrdma.soft1.addr", "ok"),
            ("softrdma.soft1.port", "fail"),
            ("softrdma.soft2.addr", "fail"),
            ("softrdma.service", "ok"),
            ("softrdma.exec_view", "warn"),
        ],
    );
    let p = check(&r, "softrdma.soft1.port");
    assert!(
        text(p, "detail").contains("pid 4242 (roce-gateway)"),
        "{p:#}"
    );
    assert!(text(check(&r, "softrdma.softrdma0.port"), "detail").contains("in use by softrdma"));
    assert!(text(check(&r, "softrdma.service"), "detail").contains("pid 4300"));
}

#[test]
fn nic_driver_without_its_rdma_half_gets_the_ordered_modprobe_line() {
    let (r, code) = report("nic_only", &[]);
    assert_eq!(code, 1);
    expect(
        &r,
        &[
            ("modules.mlx5_ib", "fail"),
            ("modules.ib_uverbs", "fail"),
            ("modules.rdma_ucm", "fail"),
            ("devices", "fail"),
            ("libibverbs.devices", "fail"),
        ],
    );
    assert_eq!(
        text(check(&r, "modules.mlx5_ib"), "fix"),
        "modprobe ib_core && modprobe mlx5_ib"
    );
    assert_eq!(
        text(check(&r, "modules.rdma_ucm"), "fix"),
        "modprobe ib_core && modprobe mlx5_ib && modprobe ib_uverbs && modprobe rdma_ucm"
    );
}

#[test]
fn firewall_dropping_udp_4791() {
    let (r, code) = report("firewall", &[]);
    assert_eq!(code, 1);
    let f = check(&r, "firewall");
    assert_eq!(f["verdict"], "fail", "{f:#}");
    assert!(
        text(f, "detail").contains("--dport 4000:5000 -j DROP"),
        "{f:#}"
    );
    assert!(text(f, "fix").contains("--dport 4791 -j ACCEPT"), "{f:#}");
}

#[test]
fn one_device_only() {
    let (r, _) = report("port_taken", &["-d", "soft1"]);
    let ids: Vec<&str> = r["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .filter_map(|c| c["id"].as_str())
        .collect();
    assert!(ids.contains(&"softrdma.soft1.port"), "{ids:?}");
    assert!(
        !ids.iter()
            .any(|i| i.contains("softrdma0") || i.contains("soft2")),
        "{ids:?}"
    );
    let (r, _) = report("mlx5", &["-d", "mlx5_0"]);
    assert!(
        !r["checks"]
            .as_array()
            .expect("checks")
            .iter()
            .any(|c| c["id"] == "softrdma.softrdma0.addr")
    );
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let root = fixture("mlx5");
    let o = doctor(&["--root", root.to_str().expect("utf-8"), "-d", "mlx9_9"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no device named mlx9_9"), "{err}");
    assert!(err.contains("mlx5_0"), "{err}");
    let o = doctor(&["--root", "/nonexistent/doctor/root"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a directory"));
}

#[test]
fn text_output_is_grouped_by_layer_plain_without_a_terminal() {
    let root = fixture("rxe");
    let o = doctor(&["--root", root.to_str().expect("utf-8")]);
    assert_eq!(o.status.code(), Some(1));
    let s = String::from_utf8_lossy(&o.stdout);
    assert!(!s.contains('\x1b'), "no colour into a pipe: {s}");
    let at = |h: &str| {
        s.find(&format!("\n{h}\n"))
            .unwrap_or_else(|| panic!("no {h}: {s}"))
    };
    assert!(at("Kernel modules") < at("Devices and ports"));
    assert!(at("Devices and ports") < at("User space"));
    assert!(at("User space") < at("softrdma"));
    assert!(
        s.contains("GID[  1] ::ffff:10.77.0.8  RoCE v2  eth0"),
        "{s}"
    );
    let line = s
        .lines()
        .find(|l| l.contains("softrdma0 port 4791"))
        .unwrap_or_else(|| panic!("{s}"));
    assert!(line.trim_start().starts_with('✗'), "{line}");
    assert!(s.contains("fix: use the kernel's rxe"), "{s}");
    assert!(s.ends_with("1 broken, 1 warning, 21 fine\n"), "{s}");
}

/// A host tree made at test time (what git cannot hold: FIFOs, symbolic link loops, modes,
/// huge files), removed when the test ends.
struct TempHost(PathBuf);

impl TempHost {
    fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("softrdma-doctor-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        Self(dir)
    }

    /// A copy of a fixture, its symbolic links kept as links.
    fn copy_of(fixture_name: &str) -> Self {
        fn copy(from: &std::path::Path, to: &std::path::Path) {
            for e in std::fs::read_dir(from).expect("fixture dir") {
                let e = e.expect("entry");
                let (src, dst) = (e.path(), to.join(e.file_name()));
                let t = e.file_type().expect("file type");
                if t.is_symlink() {
                    let target = std::fs::read_link(&src).expect("link");
                    std::os::unix::fs::symlink(target, &dst).expect("symlink");
                } else if t.is_dir() {
                    std::fs::create_dir(&dst).expect("mkdir");
                    copy(&src, &dst);
                } else {
                    std::fs::copy(&src, &dst).expect("copy");
                }
            }
        }
        let h = Self::new(fixture_name);
        copy(&fixture(fixture_name), &h.0);
        h
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.0.join(rel)
    }

    /// Writes a file, making its directories.
    fn write(&self, rel: &str, bytes: impl AsRef<[u8]>) {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        // A copied fixture's file may be reached through a link; replace it, not its target.
        let _ = std::fs::remove_file(&p);
        std::fs::write(&p, bytes).expect("write");
    }

    /// A symbolic link at `rel` pointing to `target`.
    fn link(&self, rel: &str, target: &str) {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        let _ = std::fs::remove_file(&p);
        std::os::unix::fs::symlink(target, &p).expect("symlink");
    }

    /// Runs doctor on this tree; the JSON report (if it printed one), the exit status, and
    /// stderr. Fails the test on a panic or a kill (a hang ends in `wait`'s time limit).
    fn doctor(&self, extra: &[&str]) -> (Value, i32, String) {
        let root = self.0.to_str().expect("utf-8 path").to_owned();
        let mut args = vec!["--json", "--root", &root];
        args.extend_from_slice(extra);
        let o = doctor(&args);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(!err.contains("panicked"), "doctor panicked: {err}");
        let code = o.status.code().unwrap_or_else(|| panic!("killed: {err}"));
        let out = String::from_utf8_lossy(&o.stdout);
        let v = serde_json::from_str(&out).unwrap_or(Value::Null);
        (v, code, err)
    }
}

impl Drop for TempHost {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Every read of a broken host ends in a verdict: junk, non-UTF-8 bytes, empty files,
/// prefixes out of range, symbolic link loops, a FIFO, a link to `/dev/zero` and a file far
/// larger than any doctor reads. None may panic, hang, or stop the report.
#[test]
fn a_broken_host_gets_verdicts_not_a_panic_or_a_hang() {
    let h = TempHost::new("broken");
    let arch = std::env::consts::ARCH;
    h.write(
        "proc/modules",
        b"rdma_rxe 1 0 - Live\n\xff\xfe garbage\n\n ib_core\nib_uverbs 2 1 \xc3(,rdma_rxe, Live\n",
    );
    h.write("proc/self/status", b"");
    h.write(
        "proc/self/limits",
        b"Max locked memory     lots   of-it   bytes\n",
    );
    h.write("proc/sys/kernel/osrelease", b"");
    h.write(
        "proc/net/udp",
        b"  sl  local_address rem_address\n junk\n 0: ZZZZZZZZ:12B7 0 0 0 0 0 0 x 0 y\n 1: 0100007F:12B7\n\xff\xff\xff\n 2: 0100007F:\n",
    );
    // 64 MiB of zeros (sparse: no disk), far past what doctor reads of a text file.
    let big = std::fs::File::create({
        h.write("proc/net/udp6", b"");
        h.path("proc/net/udp6")
    })
    .expect("udp6");
    big.set_len(64 << 20).expect("sparse file");
    h.write(
        "proc/net/fib_trie",
        b"Main:\n  +-- 0.0.0.0/0\n     |-- 127.0.0.1\n        /40 host LOCAL\n        /255 host LOCAL\n        /x host LOCAL\n",
    );
    // A FIFO no one writes: opening it for reading would block forever.
    let fifo =
        std::ffi::CString::new(h.path("proc/net/if_inet6").to_str().expect("utf-8")).expect("path");
    std::fs::create_dir_all(h.path("proc/net")).expect("mkdir");
    // SAFETY: mkfifo(3) reads a NUL-terminated path that lives through the call.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0, "mkfifo");
    h.write("proc/net/unix", b"");
    h.link("proc/1/environ", "/dev/zero");
    h.link("proc/1/cgroup", "cgroup");
    h.link("proc/4242/fd", "fd");
    std::fs::create_dir_all(h.path("proc/4243/cmdline")).expect("a directory as cmdline");
    h.write("proc/sys/user/max_user_namespaces", b"\xff");

    // rxe0 with a broken sysfs: junk, empty and loops among good values.
    let dev = "sys/devices/virtual/infiniband/rxe0";
    h.link("sys/class/infiniband/rxe0", &format!("../../../{dev}"));
    h.link("sys/class/infiniband/loop0", "loop0");
    h.write(&format!("{dev}/node_desc"), b"\xff\xfe");
    h.write(&format!("{dev}/node_type"), b"");
    h.write(&format!("{dev}/parent"), b"eth0\n");
    h.link(&format!("{dev}/device"), "device");
    h.write(&format!("{dev}/ports/1/state"), b"");
    h.write(&format!("{dev}/ports/1/phys_state"), b"\xff: \xff");
    h.write(&format!("{dev}/ports/1/link_layer"), b"Ethernet\n");
    h.write(&format!("{dev}/ports/1/gids/0"), b"zz:zz not a gid\n");
    h.write(&format!("{dev}/ports/1/gids/1"), b"");
    h.write(
        &format!("{dev}/ports/1/gids/2"),
        b"0000:0000:0000:0000:0000:ffff:0a00:0001\n",
    );
    h.write(&format!("{dev}/ports/1/gid_attrs/types/2"), b"RoCE v2\n");
    h.link(&format!("{dev}/ports/1/gid_attrs/ndevs/2"), "2");
    h.link(&format!("{dev}/ports/2"), "2");
    h.write("sys/class/net/eth0/mtu", b"not a number\n");
    h.write("sys/class/infiniband_verbs/abi_version", b"six\n");
    h.write("sys/class/infiniband_verbs/uverbs0/ibdev", b"rxe0\n");
    h.write("sys/class/infiniband_verbs/uverbs0/abi_version", b"");
    h.link("dev/infiniband", "infiniband");
    h.link(
        &format!("usr/lib/{arch}-linux-gnu/libibverbs.so.1"),
        "/dev/zero",
    );
    h.write("etc/libibverbs.d/rxe.driver", b"\xffdriver\n driver\n");
    h.write(
        "etc/nftables.conf",
        b"}}}\ntable inet f {\n chain input {\n  type filter hook input priority 0; policy drop;\n  udp dport { 4791, \n",
    );
    h.write(
        "etc/iptables/rules.v4",
        b"*filter\n:INPUT\n-A INPUT -j\n-A INPUT --dport\nCOMMIT\n",
    );

    let (r, code, err) = h.doctor(&[]);
    assert!(
        code == 0 || code == 1,
        "a verdict, not an error ({code}): {err}"
    );
    for id in [
        "modules.loaded",
        "device.rxe0",
        "port.rxe0/1",
        "port.rxe0/1.gids",
        "port.rxe0/1.gid_index",
        "memlock",
        "firewall",
        "libibverbs.devices",
        "softrdma.softrdma0.port",
        "softrdma.exec_view",
    ] {
        check(&r, id);
    }
    // Only the one good GID is kept.
    let gids = &check(&r, "port.rxe0/1.gids")["data"];
    assert_eq!(gids.as_array().map(Vec::len), Some(1), "{gids:#}");
    assert_eq!(gids[0]["index"], 2);
    // An empty state is a port that is not up, not a crash.
    assert_eq!(check(&r, "port.rxe0/1")["verdict"], "fail");
    // The unreadable limit is said to be unreadable.
    assert_eq!(check(&r, "memlock")["verdict"], "warn");
    // The FIFO and /dev/zero were not read as files: no library, no address list.
    assert_eq!(check(&r, "libibverbs")["verdict"], "fail");

    // The same tree as text, and with a device named.
    let root = h.0.to_str().expect("utf-8");
    let o = doctor(&["--root", root, "-d", "rxe0"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert!(matches!(o.status.code(), Some(0 | 1)), "{err}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("rxe0/1 GIDs"));
}

/// The per-device ABI check, with libibverbs' own words, and the global one.
#[test]
fn kernel_abi_outside_the_providers_range() {
    let h = TempHost::copy_of("mlx5");
    let uverbs = "sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/infiniband_verbs/uverbs0";
    h.write(&format!("{uverbs}/abi_version"), "2\n");
    let (r, code, _) = h.doctor(&[]);
    assert_eq!(code, 1);
    expect(
        &r,
        &[("provider.mlx5_0", "fail"), ("libibverbs.devices", "fail")],
    );
    let p = check(&r, "provider.mlx5_0");
    assert!(
        text(p, "reason")
            .contains("Driver mlx5 does not support the kernel ABI of 2 (supports 1 to 1)"),
        "{p:#}"
    );
    assert!(text(check(&r, "libibverbs.devices"), "reason").contains("kernel ABI 2"));

    h.write(&format!("{uverbs}/abi_version"), "1\n");
    h.write("sys/class/infiniband_verbs/abi_version", "7\n");
    let (r, code, _) = h.doctor(&[]);
    assert_eq!(code, 1);
    expect(
        &r,
        &[("abi.uverbs", "fail"), ("libibverbs.devices", "fail")],
    );
    assert!(text(check(&r, "abi.uverbs"), "reason").contains("kernel ABI version 7"));
}

/// A provider built for another libibverbs is named with the file this one would load.
#[test]
fn provider_for_another_libibverbs() {
    let h = TempHost::copy_of("mlx5");
    let dir = format!("usr/lib/{}-linux-gnu/libibverbs", std::env::consts::ARCH);
    std::fs::rename(
        h.path(&format!("{dir}/libmlx5-rdmav34.so")),
        h.path(&format!("{dir}/libmlx5-rdmav25.so")),
    )
    .expect("rename");
    let (r, code, _) = h.doctor(&[]);
    assert_eq!(code, 1);
    let p = check(&r, "provider.mlx5_0");
    assert_eq!(p["verdict"], "fail", "{p:#}");
    assert!(
        text(p, "reason").contains("only libmlx5-rdmav34.so"),
        "{p:#}"
    );
    assert!(text(p, "detail").contains("rdmav25"), "{p:#}");
}

/// A device file the user may not open: "Couldn't get context", with the chmod/udev fix.
#[test]
fn device_file_without_permission() {
    use std::os::unix::fs::PermissionsExt as _;
    let h = TempHost::copy_of("mlx5");
    std::fs::set_permissions(
        h.path("dev/infiniband/uverbs0"),
        std::fs::Permissions::from_mode(0o444),
    )
    .expect("chmod");
    let (r, code, _) = h.doctor(&[]);
    assert_eq!(code, 1);
    let d = check(&r, "devfiles.uverbs");
    assert_eq!(d["verdict"], "fail", "{d:#}");
    assert!(text(d, "reason").contains("Couldn't get context"), "{d:#}");
    assert!(text(d, "fix").contains("udev rule"), "{d:#}");
}

/// An Intel NIC driver without irdma is most often a NIC without RDMA: a warning with the
/// line that would load it, not a failure on every host with an X710.
#[test]
fn intel_nic_without_irdma_is_only_a_warning() {
    let h = TempHost::copy_of("nothing");
    let modules = std::fs::read_to_string(h.path("proc/modules")).unwrap_or_default();
    h.write(
        "proc/modules",
        format!("{modules}ice 1093632 0 - Live 0x0000000000000000\n"),
    );
    let (r, code, _) = h.doctor(&[]);
    assert_eq!(code, 0, "{r:#}");
    expect(
        &r,
        &[("modules.irdma", "warn"), ("libibverbs.devices", "warn")],
    );
    assert!(text(check(&r, "modules.irdma"), "fix").contains("modprobe irdma"));
}

/// An empty device config gives softrdma no device at all, which doctor says.
#[test]
fn empty_device_config() {
    let h = TempHost::copy_of("nothing");
    h.write("etc/softrdma", "# nothing here\n");
    let (r, code, _) = h.doctor(&[]);
    assert_eq!(code, 0);
    let c = check(&r, "softrdma.config");
    assert_eq!(c["verdict"], "warn", "{c:#}");
    assert!(text(c, "detail").starts_with("none"), "{c:#}");
}

/// Doctor on the machine running the tests: whatever it has (RDMA or not, rdma-core or
/// not, root or not), doctor gives a report and a verdict (0 or 1), never an error or a
/// panic. Nothing else about the host is asserted.
#[test]
fn the_real_host_gets_a_report() {
    let cfg = std::env::temp_dir().join(format!("softrdma-doctor-cfg-{}", std::process::id()));
    let mut c = softrdma();
    c.args(["doctor", "--json"])
        .env_remove("SOFTRDMA_ADDR")
        .env("XDG_CONFIG_HOME", &cfg)
        .env("NO_COLOR", "1");
    let o = wait(spawn(&mut c), "softrdma doctor");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        matches!(o.status.code(), Some(0 | 1)),
        "{:?}: {err}",
        o.status
    );
    let r: Value = serde_json::from_slice(&o.stdout).expect("JSON");
    for id in [
        "memlock",
        "firewall",
        "libibverbs.devices",
        "softrdma.config",
    ] {
        check(&r, id);
    }
    let s = &r["summary"];
    let n = |k: &str| s[k].as_u64().expect("count");
    assert_eq!(
        n("ok") + n("warn") + n("fail"),
        r["checks"].as_array().map_or(0, Vec::len) as u64
    );
    assert_eq!(n("fail") > 0, o.status.code() == Some(1));
}

/// Root in a default Docker container has no CAP_SYS_ADMIN, so `softrdma exec` cannot make
/// its mount namespace there.
#[test]
fn root_without_cap_sys_admin_cannot_give_exec_its_view() {
    let h = TempHost::copy_of("rxe");
    let status = std::fs::read_to_string(h.path("proc/self/status")).expect("status");
    let docker: String = status
        .lines()
        .map(|l| {
            if l.starts_with("CapEff:") {
                // Docker's default set: no CAP_SYS_ADMIN (bit 21).
                "CapEff:\t00000000a80425fb".to_owned()
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    h.write("proc/self/status", docker);
    let (r, _, _) = h.doctor(&[]);
    let c = check(&r, "softrdma.exec_view");
    assert_eq!(c["verdict"], "warn", "{c:#}");
    assert!(text(c, "fix").contains("SYS_ADMIN"), "{c:#}");
}

/// A ConnectX on the PCI bus that no driver took ("No IB devices found" from a driver not
/// installed right): the whole stack's modprobe line, in order, from ib_core up.
#[test]
fn connectx_without_a_driver() {
    let h = TempHost::copy_of("nothing");
    let pci = "sys/bus/pci/devices/0000:3b:00.0";
    h.write(&format!("{pci}/vendor"), "0x15b3\n");
    h.write(&format!("{pci}/device"), "0x1017\n");
    h.write(&format!("{pci}/class"), "0x020000\n");
    // A VF left unbound (for a VM) and an Intel NIC are no concern of this check.
    h.write("sys/bus/pci/devices/0000:3b:00.2/vendor", "0x15b3\n");
    h.write("sys/bus/pci/devices/0000:3b:00.2/class", "0x020000\n");
    h.link("sys/bus/pci/devices/0000:3b:00.2/physfn", "../0000:3b:00.0");
    h.write("sys/bus/pci/devices/0000:5e:00.0/vendor", "0x8086\n");
    h.write("sys/bus/pci/devices/0000:5e:00.0/class", "0x020000\n");
    let (r, code, _) = h.doctor(&[]);
    assert_eq!(code, 1, "{r:#}");
    let c = check(&r, "modules.pci.0000:3b:00.0");
    assert_eq!(c["verdict"], "fail", "{c:#}");
    assert!(text(c, "detail").contains("mlx5_core"), "{c:#}");
    let stack = "modprobe ib_core && modprobe mlx5_core && modprobe mlx5_ib && modprobe ib_uverbs && modprobe rdma_ucm";
    assert!(text(c, "fix").contains(stack), "{c:#}");
    let e = check(&r, "libibverbs.devices");
    assert_eq!(e["verdict"], "fail", "{e:#}");
    assert!(
        text(e, "reason").contains("0000:3b:00.0 has no driver"),
        "{e:#}"
    );
    assert!(!r.to_string().contains("0000:5e:00.0"));
    assert!(!r.to_string().contains("0000:3b:00.2"));
}
