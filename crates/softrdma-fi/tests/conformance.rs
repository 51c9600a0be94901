//! The provider's conformance tests (tests/c/fi_conformance.c, rma.c and msg.c), run through libfabric's
//! own C API: libfabric 1.17 loads the provider built with this test from
//! `FI_PROVIDER_PATH`, as it would for any program. Each case runs in a process of its
//! own, on a loopback address of its own, under a time limit.
//!
//! Needs gcc and libfabric-dev (`.ci/run` installs them); without them the tests fail
//! saying so.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The newest of cargo's copies of the provider beside this test binary.
fn provider() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    [
        deps.join("libsoftrdma_fi.so"),
        deps.join("../libsoftrdma_fi.so"),
    ]
    .into_iter()
    .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
    .max()
    .map(|(_, p)| p)
    .expect("cargo builds the provider's cdylib with its tests")
}

/// A folder holding only the provider, under the name an install gives it, and the
/// conformance program, built once per test process.
fn setup() -> &'static (PathBuf, PathBuf) {
    static S: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    S.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("softrdma-fi-conf-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let prov = dir.join("prov");
        std::fs::create_dir_all(&prov).unwrap();
        std::os::unix::fs::symlink(provider(), prov.join("libsoftrdma-fi.so")).unwrap();
        let bin = dir.join("fi_conformance");
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/fi_conformance.c");
        let o = Command::new("gcc")
            .args([
                "-O1",
                "-g",
                "-Wall",
                "-Werror",
                "-Wno-format-zero-length",
                "-o",
            ])
            .arg(&bin)
            .arg(&src)
            .arg(src.with_file_name("rma.c"))
            .arg(src.with_file_name("msg.c"))
            .arg("-lfabric")
            .output()
            .expect("gcc (apt install gcc libfabric-dev)");
        assert!(
            o.status.success(),
            "building fi_conformance.c (apt install gcc libfabric-dev): {}",
            String::from_utf8_lossy(&o.stderr)
        );
        (prov, bin)
    })
}

/// Runs case `name` on device address `addr`; its output must say it passed.
fn case(name: &str, addr: &str) {
    let (prov, bin) = setup();
    let o = Command::new("timeout")
        .args(["-k", "5", "60"])
        .arg(bin)
        .arg(name)
        .env("FI_PROVIDER_PATH", prov)
        .env("SOFTRDMA_ADDR", addr)
        .env_remove("SOFTRDMA_CONFIG")
        .env_remove("FI_PROVIDER")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && out.contains(&format!("ok {name}")),
        "{name}: {:?}\n{out}{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
}

macro_rules! cases {
    ($($name:ident $addr:literal,)*) => {
        $(
            #[test]
            fn $name() {
                case(stringify!($name), $addr);
            }
        )*

        /// The program's list of cases is this file's.
        #[test]
        fn every_case_of_the_program_runs_here() {
            let (_, bin) = setup();
            let o = Command::new(bin).arg("--list").output().unwrap();
            let listed: Vec<String> =
                String::from_utf8_lossy(&o.stdout).lines().map(str::to_owned).collect();
            let here: Vec<String> = [$(stringify!($name)),*].iter().map(|s| s.to_string()).collect();
            assert_eq!(listed, here);
        }
    };
}

cases! {
    getinfo_rdm "127.0.88.1",
    getinfo_ompi "127.0.88.2",
    getinfo_node_service "127.0.0.1",
    getinfo_negative "127.0.88.4",
    fabric_domain "127.0.88.5",
    av "127.0.88.6",
    cq "127.0.88.7",
    eq "127.0.88.8",
    mr "127.0.88.9",
    ep_lifecycle "127.0.88.10",
    msg "127.0.88.11",
    inject "127.0.88.12",
    tagged "127.0.88.13",
    cq_data "127.0.88.14",
    unexpected "127.0.88.15",
    directed_recv "127.0.88.16",
    cancel "127.0.88.17",
    peek_claim "127.0.88.22",
    multi_recv "127.0.88.33",
    truncation "127.0.88.18",
    selective_completion "127.0.88.19",
    bad_address "127.0.88.20",
    not_offered "127.0.88.21",
    getinfo_rma "127.0.88.23",
    rma "127.0.88.24",
    rma_negative "127.0.88.25",
    atomic "127.0.88.26",
    cntr "127.0.88.27",
    cq_wait_fd "127.0.88.32",
    msg_connect "127.0.88.28",
    msg_reject "127.0.88.29",
    msg_negative "127.0.88.30",
    dgram "127.0.88.31",
    msg_counters "127.0.88.34",
    dgram_counters "127.0.88.35",
    msg_atomic "127.0.88.36",
    msg_unanswered "127.0.88.37",
}
