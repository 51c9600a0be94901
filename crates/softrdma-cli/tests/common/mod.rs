//! What the CLI tests that run real programs share: the `softrdma` binary with a runtime
//! directory of the test's own, `softrdma exec`, spawning under a time limit, servers that
//! die with their test, and waiting for a TCP port to listen.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long one program may run (the tests run debug builds, several at once).
pub const LIMIT: Duration = Duration::from_secs(120);

pub fn softrdma() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_softrdma"));
    c.env_remove("SOFTRDMA_CONFIG").env(
        "XDG_RUNTIME_DIR",
        std::env::temp_dir().join(format!("softrdma-rt-{}", std::process::id())),
    );
    c
}

/// A device config file of the test's own (`NAME addr IP` lines), removed when dropped.
pub struct DeviceConfig(std::path::PathBuf);

impl DeviceConfig {
    /// Writes `text` to a file named after `tag` and this process.
    pub fn new(tag: &str, text: &str) -> Self {
        let p = std::env::temp_dir().join(format!("softrdma-{tag}-{}.conf", std::process::id()));
        std::fs::write(&p, text).unwrap();
        Self(p)
    }

    /// Makes `c` open these devices (`SOFTRDMA_CONFIG`) instead of `SOFTRDMA_ADDR`'s.
    pub fn apply<'a>(&self, c: &'a mut Command) -> &'a mut Command {
        c.env_remove("SOFTRDMA_ADDR")
            .env("SOFTRDMA_CONFIG", &self.0)
    }
}

impl Drop for DeviceConfig {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `softrdma exec -- PROGRAM ARGS` with the device on `addr`.
pub fn exec(addr: &str, program: &str, args: &[&str]) -> Command {
    need(program);
    let mut c = softrdma();
    c.env("SOFTRDMA_ADDR", addr)
        .arg("exec")
        .arg("--")
        .arg(program)
        .args(args);
    c
}

/// The Debian package of each program, for the message when it is missing.
pub fn package(program: &str) -> &'static str {
    match program {
        p if p.starts_with("ib_") => "perftest",
        "qperf" => "qperf",
        p if p.starts_with("ucx_") => "ucx-utils",
        "mpicc.openmpi" | "mpirun.openmpi" => "openmpi-bin libopenmpi-dev",
        "fi_info" | "fi_pingpong" => "libfabric-bin",
        "rping" => "rdmacm-utils",
        "make" => "make",
        "setpriv" | "unshare" => "util-linux",
        "gcc" => "gcc",
        _ => "ibverbs-utils",
    }
}

pub fn need(program: &str) {
    if program.contains('/') {
        return;
    }
    let found = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()));
    assert!(
        found,
        "{program} is not installed: apt-get install {} (scripts/test does)",
        package(program)
    );
}

pub fn spawn(c: &mut Command) -> Child {
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{c:?}: {e}"))
}

/// Waits for `child` for at most [`LIMIT`], then kills it and fails.
pub fn wait(child: Child, what: &str) -> Output {
    wait_for(child, what, LIMIT)
}

/// Waits for `child` for at most `limit`, then kills it and fails.
pub fn wait_for(child: Child, what: &str, limit: Duration) -> Output {
    drain(child).wait(what, limit)
}

/// A child whose output is read from the moment it is handed over (see [`drain`]).
pub struct Draining {
    pid: u32,
    rx: std::sync::mpsc::Receiver<std::io::Result<Output>>,
}

/// Reads `child`'s output on a thread from now on, so that a chatty child never blocks
/// on a full pipe while the test does something else before it waits.
pub fn drain(child: Child) -> Draining {
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    Draining { pid, rx }
}

impl Draining {
    /// Waits for the child for at most `limit`, then kills it and fails.
    pub fn wait(self, what: &str, limit: Duration) -> Output {
        match self.rx.recv_timeout(limit) {
            Ok(o) => o.unwrap(),
            Err(_) => {
                // SAFETY: kill(2) takes no pointers; `pid` is our own child's.
                unsafe { libc::kill(self.pid as i32, libc::SIGKILL) };
                panic!("{what} ran longer than {limit:?}");
            }
        }
    }
}

/// A server that is killed if the test ends (or fails) before it is waited for, so that no
/// process outlives its test holding a port.
pub struct Server(pub Option<Child>);

impl Server {
    pub fn child(&mut self) -> &mut Child {
        self.0.as_mut().expect("not yet waited for")
    }

    pub fn wait(mut self, what: &str) -> Output {
        wait(self.0.take().expect("waited once"), what)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Whether TCP `port` is listening on this host (/proc/net/tcp and tcp6, state 0A).
pub fn listening(port: u16) -> bool {
    let want = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let mut it = l.split_whitespace();
                let local = it.nth(1).unwrap_or("");
                let state = it.nth(1).unwrap_or("");
                local.ends_with(&want) && state == "0A"
            })
        })
    })
}

/// Waits until `port` listens, or `server` has ended (then its output says why).
pub fn wait_listen(port: u16, server: &mut Child) {
    let deadline = Instant::now() + LIMIT;
    while !listening(port) {
        if server.try_wait().unwrap().is_some() || Instant::now() > deadline {
            return;
        }
        std::thread::yield_now();
    }
}

/// Runs `server` through `softrdma exec` with its device on `addrs.0`, and once its TCP
/// `port` listens, `client` (with the server's address appended) on `addrs.1`; both must
/// succeed. Their outputs.
pub fn pair_at(
    addrs: (&str, &str),
    port: u16,
    server: (&str, &[&str]),
    client: (&str, &[&str]),
) -> (String, String) {
    let what = format!("{} {}", server.0, server.1.join(" "));
    let (s, c) = pair_outputs(addrs, port, server, client);
    both_succeeded(&what, &s, &c)
}

/// [`pair_at`] without the verdict: the server's and the client's outputs, whatever their
/// exit status.
pub fn pair_outputs(
    addrs: (&str, &str),
    port: u16,
    server: (&str, &[&str]),
    client: (&str, &[&str]),
) -> (Output, Output) {
    let what = format!("{} {}", server.0, server.1.join(" "));
    let mut s = Server(Some(spawn(&mut exec(addrs.0, server.0, server.1))));
    wait_listen(port, s.child());
    let mut cargs: Vec<&str> = client.1.to_vec();
    cargs.push("127.0.0.1");
    let c = wait(spawn(&mut exec(addrs.1, client.0, &cargs)), &what);
    (s.wait(&what), c)
}

/// Waits for `server` after its `client` ended; both must have succeeded. Their outputs.
pub fn both_ok(what: &str, server: Server, client: Output) -> (String, String) {
    both_succeeded(what, &server.wait(what), &client)
}

/// A server's and its client's outputs, once both must have succeeded.
pub fn both_succeeded(what: &str, s: &Output, client: &Output) -> (String, String) {
    let (st, ct) = (text(s), text(client));
    assert!(
        s.status.success() && client.status.success(),
        "{what}: server {:?}, client {:?}\n--- server\n{st}\n--- client\n{ct}",
        s.status,
        client.status
    );
    (st, ct)
}

/// The output of `client`, run again while it says "Couldn't connect" (a server listens
/// only once its device is up), for at most `patience`.
pub fn retry_connect(mut client: impl FnMut() -> Output, patience: Duration) -> Output {
    let deadline = Instant::now() + patience;
    loop {
        let o = client();
        let err = String::from_utf8_lossy(&o.stderr);
        if o.status.success() || !err.contains("Couldn't connect") || Instant::now() > deadline {
            return o;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `o`'s output, once `what` succeeded and its output has each of `want`.
pub fn says_all(what: &str, o: &Output, want: &[&str]) -> String {
    let t = text(o);
    assert!(o.status.success(), "{what}: {:?}\n{t}", o.status);
    for w in want {
        assert!(t.contains(w), "{what} lacks {w:?}:\n{t}");
    }
    t
}

/// Runs `ip` (iproute2) with `args`, which must succeed (the namespace tests).
pub fn ip(args: &[&str]) {
    let o = Command::new("ip")
        .args(args)
        .output()
        .expect("ip (iproute2)");
    assert!(o.status.success(), "ip {}: {}", args.join(" "), text(&o));
}

/// The error blocks of a memcheck log whose stack passes through the drop-in (softrdma's
/// own code), that is, the invalid reads and writes and the uses of uninitialised values
/// it causes; libfabric's and the program's own are not ours to judge.
pub fn drop_in_errors(log: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut block: Vec<&str> = Vec::new();
    let flush = |block: &mut Vec<&str>, out: &mut Vec<String>| {
        let b = block.join("\n");
        let bad = [
            "Invalid read",
            "Invalid write",
            "Invalid free",
            "uninitialised",
            "Mismatched free",
            "overlap",
        ];
        if bad.iter().any(|w| b.contains(w)) && (b.contains("softrdma") || b.contains("libibverbs"))
        {
            out.push(b);
        }
        block.clear();
    };
    for l in log.lines().filter(|l| l.starts_with("==")) {
        let body = l.split_once("== ").map_or("", |(_, b)| b);
        if body.is_empty() {
            flush(&mut block, &mut out);
        } else {
            block.push(l);
        }
    }
    flush(&mut block, &mut out);
    out
}

/// The valgrind command line the memcheck tests run a program under.
pub const MEMCHECK: [&str; 3] = ["valgrind", "--error-limit=no", "--num-callers=40"];

/// Fails with the drop-in's errors in memcheck log `log` of `what`, if it has any.
pub fn assert_memcheck_clean(what: &str, log: &str) {
    assert!(
        log.contains("ERROR SUMMARY"),
        "{what}: memcheck did not run:\n{log}"
    );
    let errors = drop_in_errors(log);
    assert!(
        errors.is_empty(),
        "memcheck: {what}: the drop-in made {} error(s):\n{}",
        errors.len(),
        errors.join("\n\n")
    );
}

/// Open MPI over UCX on softrdma: `pml ucx`, no BTL that could carry the traffic, and UCX
/// limited to its verbs transports on softrdma's device (the MPI tests of dropin.rs and
/// mpi.rs).
pub const OMPI_UCX: [&str; 10] = [
    "--mca",
    "pml",
    "ucx",
    "--mca",
    "btl",
    "^vader,tcp,openib,uct",
    "-x",
    "UCX_TLS=rc_verbs,ud_verbs,self",
    "-x",
    "UCX_NET_DEVICES=softrdma0:1",
];

/// The workspace's root (README.md, scripts/, crates/).
pub fn workspace() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Builds `examples/c/NAME.c` or a C test (see [`c_test`]) with gcc against Debian's
/// headers, linked with `-libverbs` as any C program is, and with `libs` too (`-lrdmacm`).
pub fn build_c_with(src: &Path, name: &str, libs: &[&str]) -> PathBuf {
    need("gcc");
    assert!(
        Path::new("/usr/include/infiniband/verbs.h").is_file(),
        "<infiniband/verbs.h> is missing: apt-get install libibverbs-dev (scripts/test does)"
    );
    let out = std::env::temp_dir().join(format!("softrdma-c-{name}-{}", std::process::id()));
    let o = Command::new("gcc")
        .args(["-O2", "-Wall", "-Werror", "-o"])
        .arg(&out)
        .arg(src)
        .arg("-libverbs")
        .args(libs)
        .output()
        .unwrap();
    assert!(o.status.success(), "gcc {}: {}", src.display(), text(&o));
    out
}

/// A C test of this crate's `tests/c/`.
pub fn c_test(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/c")
        .join(file)
}
