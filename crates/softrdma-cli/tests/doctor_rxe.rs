//! softrdma's tools for real inside the rxe VM (`../shared/rxe-peer`: Debian 12's kernel
//! 6.1 with `rdma_rxe`, rdma-core 44):
//! - `softrdma doctor` must find rxe0, its GIDs with their types, and the UDP 4791 conflict
//!   (rdma_rxe's tunnel socket, which no process holds);
//! - `softrdma devinfo` must list rxe0 beside softrdma0 and print what rdma-core's
//!   `ibv_devinfo` prints of it, through the kernel backend (`softrdma::kernel`).
//!
//! It needs root, qemu and the rxe-peer scripts. Each test boots its own VM (`vm7` on
//! 10.77.0.8 and `vm8` on 10.77.0.9 by default; `SOFTRDMA_DOCTOR_VM` and
//! `SOFTRDMA_KERNEL_VM`, as `NAME:IP`, pick others) beside any other in the `rxepeer`
//! namespace, and stops only that VM. The binary is copied into the VM's share (the VM runs
//! the same Debian 12 glibc). Run: `cargo test -p softrdma-cli --test doctor_rxe --
//! --ignored`.

mod common;
#[path = "common/doctor.rs"]
mod doctor;

use common::{spawn, text, wait};
use doctor::assert_rxe_vm;
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Output};

const PEER_RUN: &str = "/tmp/softrdma-rxe-peer";

/// This test's VM; stopped (that one alone) when the test ends.
struct Vm {
    dir: PathBuf,
    name: String,
}

impl Vm {
    fn script(&self, name: &str) -> Command {
        let mut c = Command::new(self.dir.join(name));
        c.env("RXE_PEER_DIR", PEER_RUN);
        c
    }

    /// Runs a script of rxe-peer under the common time limit.
    fn run(&self, script: &str, args: &[&str]) -> Output {
        wait(spawn(self.script(script).args(args)), script)
    }

    fn exec(&self, cmd: &str) -> Output {
        let mut c = self.script("vmexec.sh");
        c.env("TIMEOUT", "90").arg(&self.name).arg(cmd);
        wait(spawn(&mut c), cmd)
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        let name = self.name.clone();
        let _ = self.run("stop-vm.sh", &[&name]);
    }
}

/// Boots this test's VM (`var`, `NAME:IP`, else `default`) with the binary in its share
/// as `/host/softrdma-doctor`; the VM and its address.
fn boot(var: &str, default: &str) -> (Vm, String) {
    let dir = std::env::var_os("SOFTRDMA_RXE_PEER").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/rxe-peer"),
        PathBuf::from,
    );
    assert!(
        dir.join("run-vm.sh").exists(),
        "rxe-peer scripts not found at {}",
        dir.display()
    );
    assert!(nix::unistd::geteuid().is_root(), "this test needs root");
    let which = std::env::var(var).unwrap_or_else(|_| default.into());
    let (name, ip) = which.split_once(':').expect("NAME:IP");
    let vm = Vm {
        dir,
        name: name.to_owned(),
    };
    // The tests of this file boot at once; build-vm.sh rewrites the one image each time.
    static BUILD: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let o = {
        let _one = BUILD.lock().unwrap_or_else(|p| p.into_inner());
        vm.run("build-vm.sh", &["--quiet"])
    };
    assert!(o.status.success(), "build-vm.sh:\n{}", text(&o));
    let o = vm.run("run-vm.sh", &[name, ip]);
    assert!(o.status.success(), "run-vm.sh:\n{}", text(&o));
    let share = PathBuf::from(PEER_RUN).join("run").join(name).join("share");
    std::fs::copy(
        env!("CARGO_BIN_EXE_softrdma"),
        share.join("softrdma-doctor"),
    )
    .expect("copy the binary into the VM's share");
    (vm, ip.to_owned())
}

#[test]
#[ignore = "needs root, qemu and ../shared/rxe-peer"]
fn doctor_inside_the_rxe_vm() {
    let (vm, ip) = boot("SOFTRDMA_DOCTOR_VM", "vm7:10.77.0.8");
    let ip = ip.as_str();

    let o = vm.exec("/host/softrdma-doctor doctor --json");
    assert_eq!(
        o.status.code(),
        Some(1),
        "softrdma0 cannot bind beside rxe, so doctor reports it broken:\n{}",
        text(&o)
    );
    let r: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", text(&o)));
    assert_rxe_vm(&r, ip);

    // What ibv_devinfo in the VM says agrees, and softrdma really cannot take the port.
    let o = vm.exec("ibv_devinfo -l");
    assert!(text(&o).contains("rxe0"), "{}", text(&o));
    let o = vm.exec("timeout 20 /host/softrdma-doctor service");
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("4791"), "{}", text(&o));
}

/// The value of each `key:` line of an `ibv_devinfo` listing, in order (a key that
/// repeats, as `GID[...]` does not, keeps its first).
fn fields(out: &str) -> Vec<(String, String)> {
    out.lines()
        .filter_map(|l| l.trim().split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

/// softrdma's `devinfo` lists the VM's kernel rxe0 beside its own device, and, through the
/// system's rdma-core loaded at run time, prints what rdma-core's `ibv_devinfo -v` prints
/// of it: the GUIDs, firmware and vendor, the limits, the port's state and MTUs, and every
/// GID with its type. A Rust program opening rxe0 for verbs is told plainly that it is a
/// kernel device.
#[test]
#[ignore = "needs root, qemu and ../shared/rxe-peer"]
fn devinfo_lists_and_queries_the_kernel_rxe_device() {
    let (vm, ip) = boot("SOFTRDMA_KERNEL_VM", "vm8:10.77.0.9");
    let o = vm.exec("/host/softrdma-doctor devinfo -l");
    assert!(o.status.success(), "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("2 HCAs found:"), "{t}");
    assert!(t.contains("\tsoftrdma0") && t.contains("\trxe0"), "{t}");
    let ours = vm.exec("/host/softrdma-doctor devinfo -v -d rxe0");
    assert!(ours.status.success(), "{}", text(&ours));
    let theirs = vm.exec("ibv_devinfo -v -d rxe0");
    assert!(theirs.status.success(), "{}", text(&theirs));
    let (ours, theirs) = (text(&ours), text(&theirs));
    let (o, t) = (fields(&ours), fields(&theirs));
    let get = |v: &[(String, String)], k: &str| {
        v.iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("no {k}:\n{ours}\n---\n{theirs}"))
    };
    for k in [
        "hca_id",
        "fw_ver",
        "node_guid",
        "sys_image_guid",
        "vendor_id",
        "vendor_part_id",
        "hw_ver",
        "phys_port_cnt",
        "max_mr_size",
        "page_size_cap",
        "max_qp",
        "max_qp_wr",
        "max_sge",
        "max_cq",
        "max_cqe",
        "max_mr",
        "max_pd",
        "max_qp_rd_atom",
        "max_res_rd_atom",
        "max_qp_init_rd_atom",
        "atomic_cap",
        "max_mcast_grp",
        "max_ah",
        "max_srq",
        "max_srq_wr",
        "max_pkeys",
        "local_ca_ack_delay",
        "port",
        "state",
        "max_mtu",
        "active_mtu",
        "link_layer",
        "max_msg_sz",
        "gid_tbl_len",
    ] {
        assert_eq!(get(&o, k), get(&t, k), "{k}:\n{ours}\n---\n{theirs}");
    }
    // Every GID line of rdma-core's, in softrdma's: the IPv4-mapped one of the VM's
    // address as RoCE v2 among them.
    let gid_lines = |s: &str| -> Vec<String> {
        s.lines()
            .filter(|l| l.trim_start().starts_with("GID["))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect()
    };
    assert_eq!(
        gid_lines(&ours),
        gid_lines(&theirs),
        "{ours}\n---\n{theirs}"
    );
    assert!(
        gid_lines(&ours)
            .iter()
            .any(|l| l.ends_with(&format!("::ffff:{ip}, RoCE v2"))),
        "{ours}"
    );
}
