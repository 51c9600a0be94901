//! `softrdma doctor` for real inside the rxe VM (`../shared/rxe-peer`: Debian 12's kernel 6.1
//! with `rdma_rxe`, rdma-core 44): it must find rxe0, its GIDs with their types, and the
//! UDP 4791 conflict (rdma_rxe's tunnel socket, which no process holds).
//!
//! It needs root, qemu and the rxe-peer scripts, and boots its own VM (`vm7` on 10.77.0.8 by
//! default; `SOFTRDMA_DOCTOR_VM=NAME:IP` picks another) beside any other in the `rxepeer`
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

#[test]
#[ignore = "needs root, qemu and ../shared/rxe-peer"]
fn doctor_inside_the_rxe_vm() {
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
    let which = std::env::var("SOFTRDMA_DOCTOR_VM").unwrap_or_else(|_| "vm7:10.77.0.8".into());
    let (name, ip) = which
        .split_once(':')
        .expect("SOFTRDMA_DOCTOR_VM is NAME:IP");
    let vm = Vm {
        dir,
        name: name.to_owned(),
    };
    let o = vm.run("build-vm.sh", &["--quiet"]);
    assert!(o.status.success(), "build-vm.sh:\n{}", text(&o));
    let o = vm.run("run-vm.sh", &[name, ip]);
    assert!(o.status.success(), "run-vm.sh:\n{}", text(&o));
    let share = PathBuf::from(PEER_RUN).join("run").join(name).join("share");
    std::fs::copy(
        env!("CARGO_BIN_EXE_softrdma"),
        share.join("softrdma-doctor"),
    )
    .expect("copy the binary into the VM's share");

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
