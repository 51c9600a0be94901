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
