//! softrdma installs like any other tool. Both tests are `#[ignore]`d: each builds a release
//! of its own (minutes), and the second needs root and Debian's package mirror. CI runs
//! them (`.ci/run`: `cargo test --release -p softrdma-cli --test install -- --ignored`).
//!
//! - `cargo install` into an empty `--root` (with the user's `CARGO_HOME`, so that crates
//!   already downloaded are not fetched again), with its build tree deleted afterwards, gives a
//!   binary that runs unmodified programs on its own: the drop-in libraries and the native
//!   libfabric provider travel inside it (`src/libdir.rs`), and `fi_info -p softrdma`
//!   finds the provider through `softrdma exec`.
//! - The crates as `cargo package` makes them for crates.io, installed with `cargo
//!   install` (each softrdma crate from its packaged source, everything else from
//!   crates.io), give the same binary: `cargo install softrdma-cli` will work once they
//!   are published.
//! - The Debian package (`scripts/deb`, with the provider in `/usr/lib/softrdma/fabric/`)
//!   installs on a fresh Debian 12 root made with
//!   mmdebstrap, runs `softrdma doctor`, `ibv_devinfo`, an `ibv_rc_pingpong` pair and
//!   `softrdma demo` there, and leaves nothing behind when removed
//!   (`tests/install/fresh-root.sh`).

mod common;

use common::{Server, both_ok, says_all, spawn, text, wait, wait_for, wait_listen, workspace};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A folder of the test's own under /tmp, empty, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!("softrdma-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `cargo ARGS --root ROOT --target-dir TARGET` (an install), deletes the build tree,
/// and proves that the installed binary alone runs `softrdma env`, `ibv_devinfo` and an
/// `ibv_rc_pingpong` pair (on TCP port `port`), with an empty home, where it puts its
/// libraries.
fn install_and_run(what: &str, args: &[std::ffi::OsString], port: u16) {
    let tmp = Scratch::new(what);
    let (root, target, home) = (tmp.0.join("root"), tmp.0.join("target"), tmp.0.join("home"));
    std::fs::create_dir_all(&home).unwrap();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let start = Instant::now();
    let o = wait_for(
        spawn(
            Command::new(cargo)
                .args(args)
                .arg("--root")
                .arg(&root)
                .arg("--target-dir")
                .arg(&target),
        ),
        what,
        Duration::from_secs(30 * 60),
    );
    assert!(o.status.success(), "{what}: {}", text(&o));
    eprintln!("{what} took {:.0} s", start.elapsed().as_secs_f64());
    std::fs::remove_dir_all(&target).unwrap();
    let installed: Vec<_> = std::fs::read_dir(root.join("bin"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        installed,
        ["softrdma"],
        "{what} put only the binary in bin/"
    );

    let bin = root.join("bin/softrdma");
    let run = |args: &[&str]| {
        let mut c = Command::new(&bin);
        c.args(args)
            .current_dir(&tmp.0)
            .env("HOME", &home)
            .env("XDG_RUNTIME_DIR", tmp.0.join("run"))
            .env("SOFTRDMA_ADDR", "127.0.0.61")
            .env("PATH", "/usr/bin:/bin")
            .env_remove("XDG_CACHE_HOME")
            .env_remove("LD_LIBRARY_PATH")
            .env_remove("SOFTRDMA_CONFIG");
        c
    };
    let o = run(&["env"]).output().unwrap();
    let cache = home.join(".cache/softrdma");
    assert!(
        o.status.success()
            && String::from_utf8_lossy(&o.stdout).contains(&*cache.to_string_lossy()),
        "softrdma env: {}",
        text(&o)
    );
    let o = wait(
        spawn(&mut run(&["exec", "--", "ibv_devinfo"])),
        "ibv_devinfo",
    );
    says_all("ibv_devinfo", &o, &["softrdma0"]);
    // libfabric finds the native provider the binary wrote out beside the drop-in.
    let o = wait(
        spawn(&mut run(&["exec", "--", "fi_info", "-p", "softrdma"])),
        "fi_info",
    );
    says_all(
        "fi_info -p softrdma",
        &o,
        &["provider: softrdma", "FI_EP_RDM", "domain: softrdma0"],
    );
    // The pair, on a TCP port of this test's own.
    let port = port.to_string();
    let pp = ["exec", "--", "ibv_rc_pingpong", "-g", "1", "-p", &port];
    let mut server = Server(Some(spawn(&mut run(&pp))));
    wait_listen(port.parse().unwrap(), server.child());
    let client = wait(spawn(run(&pp).arg("127.0.0.1")), "ibv_rc_pingpong client");
    let (_, c) = both_ok("ibv_rc_pingpong", server, client);
    assert!(c.contains("bytes in"), "{c}");
}

/// `cargo install --path crates/softrdma-cli` into an empty root, from a build tree of its
/// own that is then deleted; the installed binary runs programs on its own.
#[test]
#[ignore = "a release build of its own: run by CI with --ignored"]
fn cargo_install_gives_a_binary_that_runs_programs_on_its_own() {
    let path = workspace().join("crates/softrdma-cli");
    let args = ["install", "--locked", "--path"].map(std::ffi::OsString::from);
    let mut args = args.to_vec();
    args.push(path.into());
    install_and_run("cargo-install", &args, 18561);
}

/// The crates as `cargo package` makes them for crates.io (so without the workspace, the
/// tests, or anything outside each package's folder), installed as `cargo install
/// softrdma-cli` would install them once published: each softrdma crate from its
/// packaged source (a `[patch.crates-io]`), everything else from crates.io.
#[test]
#[ignore = "a release build of its own: run by CI with --ignored"]
fn packaged_crates_install_as_from_crates_io() {
    let tmp = Scratch::new("package");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let o = wait_for(
        spawn(
            Command::new(&cargo)
                .args(["package", "--workspace", "--exclude", "softrdma-bench"])
                .args(["--no-verify", "--allow-dirty", "--target-dir"])
                .arg(tmp.0.join("target"))
                .current_dir(workspace()),
        ),
        "cargo package",
        Duration::from_secs(10 * 60),
    );
    assert!(o.status.success(), "cargo package: {}", text(&o));
    let src = tmp.0.join("src");
    std::fs::create_dir_all(&src).unwrap();
    // No profile travels with a published crate: this build has cargo's default release
    // profile (16 codegen units, no LTO), unlike the workspace's.
    let mut args: Vec<std::ffi::OsString> = vec!["install".into()];
    for e in std::fs::read_dir(tmp.0.join("target/package")).unwrap() {
        let p = e.unwrap().path();
        let Some(name) = p.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some(stem) = name.strip_suffix(".crate") else {
            continue;
        };
        let o = Command::new("tar")
            .arg("-xzf")
            .arg(&p)
            .arg("-C")
            .arg(&src)
            .output()
            .unwrap();
        assert!(o.status.success(), "tar {name}: {}", text(&o));
        let krate = stem.rsplit_once('-').map_or(stem, |(k, _)| k);
        if krate == "softrdma-cli" {
            args.extend(["--path".into(), src.join(stem).into_os_string()]);
        } else {
            let dir = src.join(stem);
            args.extend([
                "--config".into(),
                format!(
                    "patch.crates-io.{krate}.path={:?}",
                    dir.display().to_string()
                )
                .into(),
            ]);
        }
    }
    assert!(
        args.iter().any(|a| a == "--path"),
        "cargo package made no softrdma-cli crate"
    );
    install_and_run("cargo-install-packaged", &args, 18562);
}

/// `scripts/deb` builds `softrdma_VERSION_ARCH.deb`, and `tests/install/fresh-root.sh`
/// proves it on a fresh Debian 12 root (see the module docs).
#[test]
#[ignore = "root, mmdebstrap and Debian's mirror: run by CI with --ignored"]
fn debian_package_installs_runs_and_leaves_nothing_on_a_fresh_root() {
    let start = Instant::now();
    let o = wait_for(
        spawn(Command::new(workspace().join("scripts/deb")).current_dir(workspace())),
        "scripts/deb",
        Duration::from_secs(20 * 60),
    );
    assert!(o.status.success(), "scripts/deb: {}", text(&o));
    let deb = workspace().join(String::from_utf8_lossy(&o.stdout).trim());
    let name = deb.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with("softrdma_") && name.ends_with(".deb") && deb.is_file(),
        "scripts/deb made {}",
        deb.display()
    );
    eprintln!("scripts/deb took {:.0} s", start.elapsed().as_secs_f64());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/install/fresh-root.sh");
    // timeout(1) signals its whole process group, so that mmdebstrap, apt and the
    // programs in the root end with the script, whose EXIT trap removes the root.
    let o = wait_for(
        spawn(
            Command::new("timeout")
                .args(["--kill-after=20s", "900"])
                .arg(script)
                .arg(&deb),
        ),
        "fresh-root.sh",
        Duration::from_secs(16 * 60),
    );
    eprintln!("{}", text(&o));
    says_all(
        "fresh-root.sh",
        &o,
        &[
            "0 broken",
            "hca_id:\tsoftrdma0",
            "bytes in",
            "all operations checked: ok",
            "nothing left behind",
        ],
    );
}
