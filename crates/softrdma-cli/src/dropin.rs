//! `softrdma exec` and `softrdma env`: run unmodified RDMA programs on softrdma through the
//! drop-in libraries (`softrdma-capi`: `libibverbs.so.1`, which is `librdmacm.so.1` too, and
//! the stub `libmlx5.so.1` and `libefa.so.1`), and libfabric programs on its native
//! provider too (`softrdma-fi`, found through `FI_PROVIDER_PATH`).
//!
//! Where the libraries come from (an installed package, the build tree, or this binary
//! itself) is [`crate::libdir`]'s business.

use crate::libdir::lib_dir;
use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;

/// `LD_LIBRARY_PATH` with `dir` first.
fn library_path(dir: &Path) -> OsString {
    let mut v = OsString::from(dir);
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|o| !o.is_empty()) {
        v.push(":");
        v.push(old);
    }
    v
}

/// libfabric's own folder of providers, which `FI_PROVIDER_PATH` replaces when set.
#[cfg(target_arch = "aarch64")]
const LIBFABRIC_DEFAULT: &str = "/usr/lib/aarch64-linux-gnu/libfabric";
#[cfg(not(target_arch = "aarch64"))]
const LIBFABRIC_DEFAULT: &str = "/usr/lib/x86_64-linux-gnu/libfabric";

/// `FI_PROVIDER_PATH` with the native provider's folder first: before the caller's own
/// value, or before libfabric's default folder, which setting the variable would
/// otherwise drop. A leading `@` (libfabric's "register in this order") stays first.
fn provider_path(dir: &Path) -> OsString {
    let ours = dir.join(crate::libdir::FABRIC_PROVIDER);
    let ours = ours.parent().unwrap_or(dir).as_os_str().to_owned();
    let old = std::env::var_os("FI_PROVIDER_PATH").filter(|o| !o.is_empty());
    let (at, rest) = match old.as_ref().and_then(|o| o.to_str()) {
        Some(o) if o.starts_with('@') => ("@", OsString::from(&o[1..])),
        Some(o) => ("", OsString::from(o)),
        None => match old {
            Some(o) => ("", o),
            None => ("", OsString::from(LIBFABRIC_DEFAULT)),
        },
    };
    let mut v = OsString::from(at);
    v.push(ours);
    if !rest.is_empty() {
        v.push(":");
        v.push(rest);
    }
    v
}

/// libfabric's choice of memory monitor for its MR cache, and the value `softrdma exec` and
/// `softrdma env` give it unless the caller chose one.
///
/// libfabric 1.17's default monitor, `memhooks`, watches for freed memory by rewriting the
/// first bytes of libc's own `mmap`, `munmap`, `mremap`, `madvise`, `brk`, `shmat` and
/// `shmdt` with a jump, each time a domain opens the first MR cache (the verbs provider's
/// `fi_domain`) and back again when the last one closes. It does so while the process runs:
/// a thread that enters one of those functions (glibc's `malloc` and `free` do, to grow and
/// trim their heaps) during the `memcpy` runs half-written code. Under rxe no other thread of
/// the process is there; under the drop-in its own threads are (a device's progress, the
/// CM's), and CI saw `verbs;ofi_rxd` and `verbs;ofi_rxm` programs die of it: SIGSEGV in
/// `munmap` under `free`, glibc's "failed to register TLS destructor", a fault inside
/// libfabric at teardown. A C program that opens and closes domains while a second thread
/// maps and unmaps crashed in 10 of 11 runs with `memhooks`, none with this.
///
/// `userfaultfd`, the other monitor, is no way out: it registers cached buffers for
/// missing-page faults it never answers, so the drop-in's first write into an untouched page
/// of a received buffer would hang. Without a monitor there is no MR cache, and the verbs
/// provider registers on each use: softrdma's `ibv_reg_mr` pins nothing, so that is cheap.
const MR_CACHE_MONITOR: (&str, &str) = ("FI_MR_CACHE_MONITOR", "disabled");

/// `MR_CACHE_MONITOR`'s value: the caller's, where set, else ours.
fn mr_cache_monitor() -> OsString {
    std::env::var_os(MR_CACHE_MONITOR.0)
        .filter(|o| !o.is_empty())
        .unwrap_or_else(|| OsString::from(MR_CACHE_MONITOR.1))
}

/// A shell `export` of `name` as `value`, quoted.
fn export(name: &str, value: &OsString) -> String {
    format!(
        "export {name}='{}'",
        value.to_string_lossy().replace('\'', r"'\''")
    )
}

/// `softrdma env`: the shell lines that make the programs of this shell use softrdma.
pub fn env() -> ExitCode {
    match lib_dir() {
        Ok(dir) => {
            println!("{}", export("LD_LIBRARY_PATH", &library_path(&dir)));
            println!("{}", export("FI_PROVIDER_PATH", &provider_path(&dir)));
            println!("{}", export(MR_CACHE_MONITOR.0, &mr_cache_monitor()));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("softrdma env: {e}");
            ExitCode::from(2)
        }
    }
}

/// `softrdma exec -- PROGRAM ARGS`: replaces this process with the program, on softrdma
/// (so its exit status, or the signal that ended it, is the caller's to see). With `view`,
/// the program first gets the sysfs and /dev view of the devices (see [`crate::view`]);
/// where the kernel refuses it, the program runs without one, after a line that says why.
pub fn exec(program: &[OsString], view: bool) -> ExitCode {
    use std::os::unix::process::CommandExt;
    let Some((prog, args)) = program.split_first() else {
        eprintln!("softrdma exec: no program given (softrdma exec -- PROGRAM ARGS)");
        return ExitCode::from(2);
    };
    let dir = match lib_dir() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("softrdma exec: {e}");
            return ExitCode::from(2);
        }
    };
    if view {
        match softrdma::config::devices() {
            Ok(devs) => {
                if let Err(e) = crate::view::enter(&devs) {
                    eprintln!(
                        "softrdma exec: no /sys/class/infiniband or /dev/infiniband view ({e}); programs that look for devices there (UCX, Open MPI, pyverbs' rdma_cm tests) will not find softrdma's"
                    );
                }
            }
            Err(e) => eprintln!("softrdma exec: no devices: {e}"),
        }
    }
    let err = std::process::Command::new(prog)
        .args(args)
        .env("LD_LIBRARY_PATH", library_path(&dir))
        .env("FI_PROVIDER_PATH", provider_path(&dir))
        .env(MR_CACHE_MONITOR.0, mr_cache_monitor())
        .exec();
    eprintln!("softrdma exec: {}: {err}", Path::new(prog).display());
    ExitCode::from(if err.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    })
}
