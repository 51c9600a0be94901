//! Every command README.md shows is run by a test. This file finds them all (the lines of
//! its `sh` blocks, the inline commands, the `run:` steps of the CI job and the `RUN` and
//! `CMD` lines of the container recipe) and holds each to an entry of [`COMMANDS`]: run
//! here, verbatim, with this build's `softrdma` first on `PATH`, or named as run by another
//! test. A command added to the README without a test, or changed, fails this test.

mod common;

use common::{LIMIT, Server, both_ok, listening, need, spawn, text, wait, workspace};
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

/// How a README command is proved.
#[derive(Debug, Clone, Copy)]
enum How {
    /// Run here; it must succeed and print this.
    Run(&'static str),
    /// A server, run here in the background until it is ready; the next entry is its
    /// client, and both must succeed.
    Server(Ready),
    /// Run by another test or by CI, named here.
    Elsewhere(&'static str),
}

/// When a server is ready for its client.
#[derive(Debug, Clone, Copy)]
enum Ready {
    /// It listens on this TCP port.
    Tcp(u16),
    /// It listens on this rdma_cm port (`softrdma res show cm_id`).
    Cm(u16),
}

use How::{Elsewhere, Run, Server as Serve};

const INSTALL: &str =
    "tests/install.rs: cargo_install_gives_a_binary_that_runs_programs_on_its_own";
const DEB: &str = "tests/install.rs: debian_package_installs_runs_and_leaves_nothing_on_a_fresh_root (its fresh-root.sh runs the same apt install)";

/// The README's commands, in its order, each with its proof.
const COMMANDS: &[(&str, How)] = &[
    (
        "cargo install --locked --path crates/softrdma-cli",
        Elsewhere(INSTALL),
    ),
    (
        "cargo install softrdma-cli",
        Elsewhere("tests/install.rs: packaged_crates_install_as_from_crates_io"),
    ),
    ("./scripts/deb", Elsewhere(DEB)),
    (
        "sudo apt install ./target/debian/softrdma_*_amd64.deb",
        Elsewhere(DEB),
    ),
    (
        "cargo run --release -p softrdma-cli -- demo",
        Elsewhere(".ci/run (the main job)"),
    ),
    ("./scripts/test", Elsewhere(".ci/run (the test command)")),
    ("softrdma exec -- ibv_devinfo", Run("hca_id:\tsoftrdma0")),
    (
        "softrdma exec -- ibv_rc_pingpong -g 1 &",
        Serve(Ready::Tcp(18515)),
    ),
    (
        "softrdma exec -- ibv_rc_pingpong -g 1 127.0.0.1",
        Run("bytes in"),
    ),
    ("softrdma doctor", Run("broken")),
    ("softrdma devinfo", Run("softrdma0")),
    ("softrdma exec -- ib_write_bw &", Serve(Ready::Tcp(18515))),
    ("softrdma exec -- ib_write_bw 127.0.0.1", Run("BW average")),
    (
        "softrdma exec -- rping -s -v -C 3 -a 127.0.0.1 &",
        Serve(Ready::Cm(7174)),
    ),
    (
        "softrdma exec -- rping -c -v -V -C 3 -a 127.0.0.1",
        Run("ping data"),
    ),
    ("softrdma exec -- fi_info -p verbs", Run("provider: verbs")),
    (
        "softrdma exec -- fi_pingpong -p 'verbs;ofi_rxm' -e rdm -c &",
        Serve(Ready::Tcp(47592)),
    ),
    (
        "softrdma exec -- fi_pingpong -p 'verbs;ofi_rxm' -e rdm -c 127.0.0.1",
        Run("bytes"),
    ),
    (
        "softrdma exec -- fi_info -p softrdma",
        Run("provider: softrdma"),
    ),
    (
        "softrdma exec -- fi_pingpong -p softrdma -e rdm -c &",
        Serve(Ready::Tcp(47592)),
    ),
    (
        "softrdma exec -- fi_pingpong -p softrdma -e rdm -c 127.0.0.1",
        Run("bytes"),
    ),
    (
        "softrdma exec -- fi_pingpong -p softrdma -e msg -c &",
        Serve(Ready::Tcp(47592)),
    ),
    (
        "softrdma exec -- fi_pingpong -p softrdma -e msg -c 127.0.0.1",
        Run("bytes"),
    ),
    (
        "mpicc.openmpi -o mpi_ring crates/softrdma-cli/tests/c/mpi_ring.c",
        Run(""),
    ),
    (
        "softrdma exec -- mpirun.openmpi -np 2 --mca pml ucx -x UCX_TLS=rc_verbs,ud_verbs,self -x UCX_NET_DEVICES=softrdma0:1 ./mpi_ring",
        Run("ok sum=3"),
    ),
    (
        "cargo run --release -p softrdma --example six_steps",
        Elsewhere(".ci/run (after the interop tests' release build)"),
    ),
    (
        "cargo run --release -p softrdma-fabric --example six_steps",
        Elsewhere(".ci/run (after the interop tests' release build)"),
    ),
    (
        "source <(softrdma completions bash)",
        Run("-F _softrdma softrdma"),
    ),
    // The CI job.
    (
        "apt-get update && apt-get install -y --no-install-recommends build-essential ca-certificates curl git ibverbs-utils libibverbs-dev librdmacm-dev",
        Elsewhere("scripts/test (the same packages, and more)"),
    ),
    (
        "cargo install --locked --path softrdma/crates/softrdma-cli",
        Elsewhere(INSTALL),
    ),
    ("softrdma exec -- make check", Run("softrdma0")),
    // The container recipe.
    (
        "apt-get update && apt-get install -y ./softrdma_*.deb ibverbs-utils build-essential libibverbs-dev",
        Elsewhere(DEB),
    ),
];

/// The commands README.md shows, in order.
fn readme_commands(readme: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut block: Option<&str> = None;
    for line in readme.lines() {
        let t = line.trim();
        if let Some(lang) = t.strip_prefix("```") {
            // A block this test cannot read would let a command through untested.
            assert!(
                block.is_some() || ["sh", "yaml", "dockerfile"].contains(&lang),
                "README.md has a ```{lang} block: use sh (commands), yaml or dockerfile"
            );
            block = if block.is_some() { None } else { Some(lang) };
            continue;
        }
        assert!(
            block.is_none() || !t.ends_with('\\') && !t.ends_with("run: |"),
            "README.md continues a command over lines, which this test reads one by one: {t}"
        );
        match block {
            Some("sh") if !t.is_empty() && !t.starts_with('#') => out.push(t.to_owned()),
            Some("yaml") => {
                if let Some(cmd) = t.strip_prefix("- run: ") {
                    out.push(cmd.to_owned());
                }
            }
            Some("dockerfile") => {
                if let Some(cmd) = t.strip_prefix("RUN ") {
                    out.push(cmd.to_owned());
                } else if let Some(json) = t.strip_prefix("CMD ") {
                    let words: Vec<String> = serde_json::from_str(json).expect("CMD [...]");
                    out.push(words.join(" "));
                }
            }
            None => {
                // Inline commands: code spans that start as a command does and are whole
                // (a script, or three words or more with no placeholder such as PROGRAM);
                // `softrdma exec` alone names a subcommand.
                for (i, span) in line.split('`').enumerate() {
                    let starts = ["cargo ", "sudo ", "softrdma ", "apt "];
                    let words: Vec<&str> = span.split_whitespace().collect();
                    let placeholder = words
                        .iter()
                        .any(|w| w.len() > 1 && w.chars().all(|c| c.is_ascii_uppercase()));
                    let whole = span.starts_with("./scripts/")
                        || (starts.iter().any(|s| span.starts_with(s))
                            && words.len() >= 3
                            && !placeholder);
                    if i % 2 == 1 && whole {
                        out.push(span.to_owned());
                    }
                }
            }
            _ => {}
        }
    }
    // Each once, where it first appears.
    let mut seen = std::collections::HashSet::new();
    out.retain(|c| seen.insert(c.clone()));
    out
}

/// A scratch folder: `softrdma` (this build) in `bin/`, the checkout's `crates/` linked in,
/// and a project whose `make check` lists the RDMA devices.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Self {
        let d = std::env::temp_dir().join(format!("softrdma-readme-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("bin")).unwrap();
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_softrdma"), d.join("bin/softrdma")).unwrap();
        std::os::unix::fs::symlink(workspace().join("crates"), d.join("crates")).unwrap();
        std::fs::write(d.join("Makefile"), "check:\n\tibv_devices\n").unwrap();
        Self(d)
    }

    /// `bash -c CMD` in the folder.
    fn bash(&self, cmd: &str) -> Command {
        let path = format!(
            "{}:{}",
            self.0.join("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut c = Command::new("bash");
        c.arg("-c")
            .arg(cmd)
            .current_dir(&self.0)
            .env("PATH", path)
            .env("XDG_RUNTIME_DIR", self.0.join("run"))
            .env_remove("SOFTRDMA_ADDR")
            .env_remove("SOFTRDMA_CONFIG")
            // Open MPI refuses root without these; CI runs as root.
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
        c
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Waits until `ready` holds, or the server has ended.
fn wait_ready(s: &Scratch, ready: Ready, server: &mut std::process::Child) {
    let end = Instant::now() + LIMIT;
    loop {
        let up = match ready {
            Ready::Tcp(port) => listening(port),
            Ready::Cm(port) => {
                let o = s.bash("softrdma res show cm_id").output().unwrap();
                text(&o)
                    .lines()
                    .any(|l| l.contains("state LISTEN") && l.contains(&format!(":{port} ")))
            }
        };
        if up || server.try_wait().unwrap().is_some() || Instant::now() > end {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// The program a command runs (after `softrdma exec --`), for the message when it is
/// missing.
fn program(cmd: &str) -> Option<&str> {
    let rest = cmd.strip_prefix("softrdma exec -- ").unwrap_or(cmd);
    let p = rest.split_whitespace().next()?;
    (!p.contains('/') && !["softrdma", "source"].contains(&p)).then_some(p)
}

#[test]
fn every_readme_command_is_run_by_a_test() {
    let readme = std::fs::read_to_string(workspace().join("README.md")).unwrap();
    assert!(
        readme.len() < 10 * 1024,
        "README.md is {} bytes, over 10 KB",
        readme.len()
    );
    let shown = readme_commands(&readme);
    let listed: Vec<&str> = COMMANDS.iter().map(|(c, _)| *c).collect();
    assert_eq!(
        shown, listed,
        "README.md's commands and this test's list differ: give each new command its test"
    );
    // The README starts with the two commands for a fresh clone.
    let first_block: Vec<&String> = shown
        .iter()
        .filter(|c| {
            !c.starts_with("cargo install") && !c.contains("scripts/deb") && !c.starts_with("sudo")
        })
        .take(2)
        .collect();
    assert_eq!(
        first_block,
        [
            "cargo run --release -p softrdma-cli -- demo",
            "./scripts/test"
        ]
    );

    let s = Scratch::new();
    let mut i = 0;
    while i < COMMANDS.len() {
        let (cmd, how) = COMMANDS[i];
        if let (Some(p), Run(_) | Serve(_)) = (program(cmd), how) {
            need(p);
        }
        match how {
            Elsewhere(by) => eprintln!("{cmd}: run by {by}"),
            Run(want) => {
                let mut c = s.bash(cmd);
                if cmd.starts_with("source ") {
                    c = s.bash(&format!("{cmd} && complete -p softrdma"));
                }
                let o = wait(spawn(&mut c), cmd);
                let t = text(&o);
                // doctor exits 1 when something is broken on this host; it must still
                // have run its checks.
                let ok =
                    o.status.success() || (cmd == "softrdma doctor" && o.status.code() == Some(1));
                assert!(ok && t.contains(want), "{cmd}: {:?}\n{t}", o.status);
            }
            Serve(ready) => {
                let server_cmd = cmd.trim_end_matches('&').trim_end();
                let mut server = Server(Some(spawn(&mut s.bash(&format!("exec {server_cmd}")))));
                wait_ready(&s, ready, server.child());
                i += 1;
                let (client, Run(want)) = COMMANDS[i] else {
                    panic!("{cmd}: a server's next entry must be its client");
                };
                let o = wait(spawn(&mut s.bash(client)), client);
                let (st, ct) = both_ok(cmd, server, o);
                assert!(
                    ct.contains(want),
                    "{client}: no {want:?}\n{ct}\n--- server\n{st}"
                );
            }
        }
        i += 1;
    }
}
