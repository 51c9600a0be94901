//! `softrdma exec` and `softrdma env`: run unmodified RDMA programs on softrdma through the
//! drop-in libraries (`softrdma-capi`: `libibverbs.so.1`, which is `librdmacm.so.1` too, and
//! the stub `libmlx5.so.1` and `libefa.so.1`).
//!
//! Cargo builds the libraries beside this binary (in its directory, or in `deps/` below it
//! when they were built as its dependencies) under cargo's names. The loader wants the
//! SONAMEs, so a directory `softrdma-lib/` next to them holds one symlink per SONAME; both
//! `libibverbs.so.1` and `librdmacm.so.1` point at the same file, which glibc then maps
//! once (it matches the second by SONAME and inode). The directory is made on first use,
//! each link atomically (a new link renamed over the old), so concurrent runs agree.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The SONAMEs and the cargo file that serves each.
const LIBS: &[(&str, &str)] = &[
    ("libibverbs.so.1", "libsoftrdma_capi.so"),
    ("librdmacm.so.1", "libsoftrdma_capi.so"),
    ("libmlx5.so.1", "libsoftrdma_stub_mlx5.so"),
    ("libefa.so.1", "libsoftrdma_stub_efa.so"),
];

/// Why the libraries cannot be offered.
#[derive(Debug, thiserror::Error)]
pub enum DropinError {
    /// They were not built.
    #[error(
        "the drop-in libraries are not built ({} is missing next to {}): run `cargo build --release` in the softrdma checkout",
        .missing, .exe.display()
    )]
    NotBuilt {
        /// The cargo file looked for.
        missing: &'static str,
        /// This binary.
        exe: PathBuf,
    },
    /// The link directory could not be made.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DropinError + '_ {
    move |source| DropinError::Io {
        path: path.to_owned(),
        source,
    }
}

/// The directory to put on `LD_LIBRARY_PATH`, made if needed.
pub fn lib_dir() -> Result<PathBuf, DropinError> {
    let exe = std::env::current_exe().map_err(|e| DropinError::Io {
        path: "/proc/self/exe".into(),
        source: e,
    })?;
    let bin = exe.parent().unwrap_or(Path::new("/"));
    // Cargo leaves a copy in the binary's directory when the library's own package was
    // built, and refreshes the one in deps/ when this binary is: the newer is the build.
    let find = |file: &'static str| {
        [bin.join(file), bin.join("deps").join(file)]
            .into_iter()
            .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
            .max()
            .map(|(_, p)| p)
            .ok_or(DropinError::NotBuilt {
                missing: file,
                exe: exe.clone(),
            })
    };
    let dir = bin.join("softrdma-lib");
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    for (soname, file) in LIBS {
        let target = find(file)?;
        let link = dir.join(soname);
        if std::fs::read_link(&link).is_ok_and(|t| t == target) {
            continue;
        }
        let tmp = dir.join(format!(".{soname}.{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&target, &tmp).map_err(io(&tmp))?;
        std::fs::rename(&tmp, &link).map_err(io(&link))?;
    }
    Ok(dir)
}

/// `LD_LIBRARY_PATH` with `dir` first.
fn library_path(dir: &Path) -> OsString {
    let mut v = OsString::from(dir);
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|o| !o.is_empty()) {
        v.push(":");
        v.push(old);
    }
    v
}

/// `softrdma env`: the shell lines that make the programs of this shell use softrdma.
pub fn env() -> ExitCode {
    match lib_dir() {
        Ok(dir) => {
            let p = library_path(&dir);
            println!(
                "export LD_LIBRARY_PATH='{}'",
                p.to_string_lossy().replace('\'', r"'\''")
            );
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
        .exec();
    eprintln!("softrdma exec: {}: {err}", Path::new(prog).display());
    ExitCode::from(if err.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    })
}
