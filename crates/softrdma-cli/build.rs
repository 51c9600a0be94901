//! Two facts the binary learns at build time:
//!
//! - **The git commit** it was built from, for `softrdma --version`: from `git` in a
//!   checkout, else from the `.cargo_vcs_info.json` that `cargo package` writes into a
//!   published crate, else "unknown".
//! - **Where the drop-in libraries are**, so that a release binary carries them
//!   (`src/libdir.rs`). The CLI depends on `softrdma-capi` and the stub crates, whose
//!   `cdylib`s cargo links into the profile's `deps/` folder before it compiles this
//!   binary (a binary waits for its dependencies' whole artifacts, not only their
//!   metadata). A build script cannot name that folder directly, but its own `OUT_DIR` is
//!   `<profile>/build/softrdma-cli-<hash>/out`, three levels below it. Cargo has no stable
//!   way to depend on another package's `cdylib` (artifact dependencies are nightly-only),
//!   which is why this path is derived rather than given.
//!
//! Release builds embed; debug builds, and clippy (which makes no `cdylib`), do not: a
//! debug binary runs from its build tree, where the libraries sit beside it.
//! `SOFTRDMA_EMBED=0` turns embedding off (for `cargo check --release`, which makes no
//! `cdylib` either).
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(softrdma_embed)");
    println!("cargo::rerun-if-env-changed=SOFTRDMA_EMBED");
    println!("cargo::rustc-env=SOFTRDMA_GIT_COMMIT={}", commit());

    let release = std::env::var("PROFILE").is_ok_and(|p| p == "release");
    let clippy = std::env::var("RUSTC_WORKSPACE_WRAPPER").is_ok_and(|w| w.contains("clippy"));
    let off = std::env::var("SOFTRDMA_EMBED").is_ok_and(|v| v == "0");
    if release && !clippy && !off {
        let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
        let deps = out
            .ancestors()
            .nth(3)
            .expect("OUT_DIR is <profile>/build/<pkg>-<hash>/out")
            .join("deps");
        println!("cargo::rustc-cfg=softrdma_embed");
        println!("cargo::rustc-env=SOFTRDMA_DEPS_DIR={}", deps.display());
    }
}

/// The commit this source is, as 12 hex digits, or "unknown". A published crate's own
/// record comes first: such a crate may sit inside someone else's git checkout.
fn commit() -> String {
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let vcs = dir.join(".cargo_vcs_info.json");
    if let Some(c) = vcs_info(&vcs) {
        println!("cargo::rerun-if-changed={}", vcs.display());
        return c;
    }
    let Some(c) = git(&dir, &["rev-parse", "--short=12", "HEAD"]) else {
        return "unknown".into();
    };
    // Rebuild when HEAD moves. A commit rewrites the branch's ref, a loose file under
    // refs/heads or a line of packed-refs. Cargo takes a watched file that does not exist
    // for a change on every build, so only what exists is watched (a folder is scanned
    // whole). A worktree keeps its HEAD apart from the refs it shares.
    let head = git(
        &dir,
        &["rev-parse", "--path-format=absolute", "--git-path", "HEAD"],
    );
    let common = git(
        &dir,
        &["rev-parse", "--path-format=absolute", "--git-common-dir"],
    );
    let mut watch: Vec<PathBuf> = head.into_iter().map(PathBuf::from).collect();
    if let Some(common) = common {
        let common = Path::new(&common);
        watch.extend([common.join("refs/heads"), common.join("packed-refs")]);
    }
    for p in watch.iter().filter(|p| p.exists()) {
        println!("cargo::rerun-if-changed={}", p.display());
    }
    c
}

/// The commit that `cargo package` recorded in a published crate.
fn vcs_info(vcs: &Path) -> Option<String> {
    let t = std::fs::read_to_string(vcs).ok()?;
    let at = t.find("\"sha1\"")?;
    let hex: String = t[at + 6..]
        .chars()
        .skip_while(|c| !c.is_ascii_hexdigit())
        .take_while(char::is_ascii_hexdigit)
        .take(12)
        .collect();
    (hex.len() == 12).then_some(hex)
}

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    let s = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (out.status.success() && !s.is_empty()).then_some(s)
}
