//! Open MPI (Debian's 4.1) over softrdma, unmodified, with tests/c/mpi_check.c: every byte
//! checked through point-to-point (a ring, and a sweep from 1 B to 1 MiB between ranks 0
//! and 1), `MPI_Allreduce`, `MPI_Alltoall` and one-sided `MPI_Put`/`MPI_Get`, on 4 ranks:
//! - over libfabric: `--mca pml cm --mca mtl ofi` with softrdma's native provider
//!   (`softrdma`, `softrdma-fi`), with `verbs;ofi_rxm` and with
//!   `verbs;ofi_rxd` (there in passive-target epochs, see its test), the one-sided
//!   operations through `osc pt2pt` over the same MTL, and
//!   no BTL but `self`, so that nothing but libfabric can carry a byte between ranks;
//! - over UCX: `--mca pml ucx --mca osc ucx`, UCX limited to its verbs transports;
//! - across 4 network namespaces joined by a bridge, each a host of its own with its
//!   device on its own address, one `mpirun` launching a rank on each through an rsh agent
//!   that enters the namespace, over UCX, over the native `softrdma` provider and over
//!   `verbs;ofi_rxm`.

mod common;

use common::*;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// mpi_check.c, built once per test process.
fn mpi_check() -> &'static PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        need("mpicc.openmpi");
        let bin = std::env::temp_dir().join(format!("softrdma-mpi-check-{}", std::process::id()));
        let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/c/mpi_check.c");
        let o = Command::new("mpicc.openmpi")
            .args(["-O2", "-Wall", "-Werror", "-o"])
            .arg(&bin)
            .arg(&src)
            .output()
            .unwrap();
        assert!(o.status.success(), "mpicc: {}", text(&o));
        bin
    })
}

/// mpirun's own time limit, under the test's: a job that hangs is ended by mpirun, whose
/// message names the ranks (with `--get-stack-traces`, and their stacks where gdb's
/// `gstack` is installed) instead of the test killing it blind.
const MPI_TIMEOUT: &str = "90";

/// One MPI job at a time: each runs 4 ranks and their daemons on a 2-core machine.
static ONE_JOB: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// mpirun's arguments for `np` ranks, with root's permission when root.
fn mpirun_args(np: usize) -> Vec<String> {
    let mut a: Vec<String> = vec!["-np".into(), np.to_string(), "--oversubscribe".into()];
    a.extend([
        "--timeout".into(),
        MPI_TIMEOUT.into(),
        "--get-stack-traces".into(),
    ]);
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        a.push("--allow-run-as-root".into());
    }
    a
}

/// The wrapper that gives each rank its device address from its rank.
fn per_rank(base: &str, shared: bool) -> Vec<String> {
    let addr = if shared {
        format!("{base}.2")
    } else {
        format!("{base}.$((2 + OMPI_COMM_WORLD_RANK))")
    };
    vec![
        "sh".into(),
        "-c".into(),
        format!("SOFTRDMA_ADDR={addr} exec \"$@\""),
        "rank".into(),
        mpi_check().to_str().unwrap().into(),
    ]
}

const OFI: [&str; 10] = [
    "--mca", "pml", "cm", "--mca", "mtl", "ofi", "--mca", "osc", "pt2pt", "--mca",
];

/// Runs mpi_check on 4 ranks with `mca` (MCA flags), each rank's device per [`per_rank`];
/// its output, which must say the program passed.
fn run(what: &str, base: &str, shared: bool, mca: &[&str]) -> String {
    let mut args = mpirun_args(4);
    args.extend(mca.iter().map(|s| s.to_string()));
    args.extend(per_rank(base, shared));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let o = wait(
        spawn(&mut exec(&format!("{base}.1"), "mpirun.openmpi", &args)),
        what,
    );
    passed(what, &o)
}

/// mpirun's output, which must say that mpi_check passed on 4 ranks, sweep included.
fn passed(what: &str, o: &std::process::Output) -> String {
    let t = text(o);
    assert!(
        o.status.success()
            && t.contains("mpi_check ok ranks=4")
            && t.contains("sweep 1 B to 1 MiB ok"),
        "{what}: {:?}\n{t}",
        o.status
    );
    t
}

fn ofi(provider: &str) -> Vec<&str> {
    let mut v = OFI.to_vec();
    v.extend(["btl", "self", "--mca", "mtl_ofi_provider_include", provider]);
    v
}

#[test]
fn mpi_over_libfabric_native_softrdma_on_four_devices() {
    run("mtl ofi softrdma", "127.0.105", false, &ofi("softrdma"));
}

#[test]
fn mpi_over_libfabric_native_softrdma_on_one_shared_device() {
    run(
        "mtl ofi softrdma, one device",
        "127.0.106",
        true,
        &ofi("softrdma"),
    );
}

#[test]
fn mpi_over_libfabric_verbs_rxm_on_four_devices() {
    run(
        "mtl ofi verbs;ofi_rxm",
        "127.0.101",
        false,
        &ofi("verbs;ofi_rxm"),
    );
}

#[test]
fn mpi_over_libfabric_verbs_rxm_on_one_shared_device() {
    run(
        "mtl ofi verbs;ofi_rxm, one device",
        "127.0.102",
        true,
        &ofi("verbs;ofi_rxm"),
    );
}

/// Over `ofi_rxd` the one-sided operations run in passive-target epochs
/// (`MPI_CHECK_RMA=lock`): Open MPI 4.1's `osc pt2pt` can hang in `MPI_Win_fence` over
/// rxd, with libfabric's own `udp;ofi_rxd` as well (3 runs in 10 there, softrdma nowhere in
/// the path), while its lock and unlock complete.
#[test]
fn mpi_over_libfabric_verbs_rxd_on_four_devices() {
    let mut mca = ofi("verbs;ofi_rxd");
    mca.extend(["-x", "MPI_CHECK_RMA=lock"]);
    let t = run("mtl ofi verbs;ofi_rxd", "127.0.103", false, &mca);
    assert!(
        t.contains("one-sided put/get ok (passive-target epochs)"),
        "{t}"
    );
}

/// The UCX flags: Open MPI over UCX's verbs transports only, one-sided operations too.
fn ucx() -> Vec<&'static str> {
    let mut v = OMPI_UCX.to_vec();
    v.extend(["--mca", "osc", "ucx", "--mca", "pml_ucx_verbose", "0"]);
    v
}

#[test]
fn mpi_over_ucx_with_one_sided_osc_ucx() {
    run("pml ucx + osc ucx", "127.0.104", false, &ucx());
}

/// Five network namespaces made by the test: a switch (`sw`, a bridge) and four hosts,
/// each with a veth to the bridge and an address `net.(1 + i)/24`. Removed when dropped.
struct Hosts {
    prefix: String,
    net: &'static str,
}

impl Hosts {
    fn new(net: &'static str) -> Option<Self> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("NOTICE: not root: the test across network namespaces cannot run");
            return None;
        }
        let id = std::process::id() % 100000;
        let h = Self {
            prefix: format!("srm{id}"),
            net,
        };
        let sw = h.ns("sw");
        ip(&["netns", "add", &sw]);
        ip(&["-n", &sw, "link", "add", "br0", "type", "bridge"]);
        ip(&["-n", &sw, "link", "set", "br0", "up"]);
        for i in 1..=4 {
            let n = h.ns(&format!("h{i}"));
            ip(&["netns", "add", &n]);
            ip(&["-n", &n, "link", "set", "lo", "up"]);
            let (v, b) = (format!("{}v{i}", h.prefix), format!("{}b{i}", h.prefix));
            ip(&[
                "link", "add", &v, "netns", &n, "type", "veth", "peer", "name", &b, "netns", &sw,
            ]);
            ip(&["-n", &sw, "link", "set", &b, "master", "br0"]);
            ip(&["-n", &sw, "link", "set", &b, "up"]);
            ip(&["-n", &n, "addr", "add", &format!("{net}.{i}/24"), "dev", &v]);
            ip(&["-n", &n, "link", "set", &v, "up"]);
        }
        Some(h)
    }

    fn ns(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for n in ["sw", "h1", "h2", "h3", "h4"] {
            let _ = Command::new("ip")
                .args(["netns", "del", &self.ns(n)])
                .status();
        }
    }
}

/// The rsh agent mpirun launches its daemons with (`--mca plm_rsh_agent`): `AGENT HOST
/// COMMAND...` runs the command in HOST's namespace, under HOST's name (a UTS namespace of
/// its own), with HOST's device address and runtime directory, through `softrdma exec`
/// (`ip netns exec` mounts a /sys of its own, so the device view is made there), as ssh
/// would on a host with softrdma installed.
fn agent(h: &Hosts) -> PathBuf {
    let p = std::env::temp_dir().join(format!("softrdma-rsh-{}", std::process::id()));
    let rt = std::env::temp_dir().join(format!("softrdma-rt-{}", std::process::id()));
    let script = format!(
        r#"#!/bin/sh
# softrdma's test rsh agent: HOST COMMAND...
host=$1; shift
case "$host" in h1) i=1;; h2) i=2;; h3) i=3;; h4) i=4;; *) echo "unknown host $host" >&2; exit 255;; esac
exec ip netns exec {prefix}$host unshare --uts env SOFTRDMA_ADDR={net}.$i XDG_RUNTIME_DIR={rt}-$host {bin} exec -- sh -c 'hostname "$0"; eval "$1"' "$host" "$*"
"#,
        prefix = h.prefix,
        net = h.net,
        rt = rt.display(),
        bin = env!("CARGO_BIN_EXE_softrdma"),
    );
    std::fs::write(&p, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// Runs mpi_check with one rank on each of the 4 hosts: mpirun itself runs on h1 (through
/// the agent, so under h1's name and address), launching the others through the agent.
fn run_across(h: &Hosts, what: &str, mca: &[&str]) -> String {
    need("mpirun.openmpi");
    let agent = agent(h);
    let mut cmd = format!(
        "mpirun.openmpi -np 4 --host h1,h2,h3,h4 --timeout {MPI_TIMEOUT} --get-stack-traces --mca plm_rsh_agent {} --mca oob_tcp_if_include {net}.0/24",
        agent.display(),
        net = h.net
    );
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        cmd.push_str(" --allow-run-as-root");
    }
    for a in mca {
        cmd.push_str(&format!(" '{a}'"));
    }
    cmd.push_str(&format!(" {}", mpi_check().display()));
    let mut c = Command::new(&agent);
    c.args(["h1", &cmd]).env_remove("SOFTRDMA_CONFIG");
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let o = wait(spawn(&mut c), what);
    let t = passed(what, &o);
    let _ = std::fs::remove_file(&agent);
    assert!(
        t.contains("hosts: h1 h2 h3 h4"),
        "{what}: the ranks did not run one per host:\n{t}"
    );
    t
}

#[test]
fn mpi_runs_across_four_hosts_in_network_namespaces() {
    let Some(h) = Hosts::new("10.231.0") else {
        return;
    };
    run_across(&h, "across hosts: pml ucx + osc ucx", &ucx());
    run_across(&h, "across hosts: mtl ofi softrdma", &ofi("softrdma"));
    run_across(
        &h,
        "across hosts: mtl ofi verbs;ofi_rxm",
        &ofi("verbs;ofi_rxm"),
    );
}
