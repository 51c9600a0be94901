//! Where the drop-in libraries come from: the folder `softrdma exec` and `softrdma env` put
//! on a program's `LD_LIBRARY_PATH`.
//!
//! The folder holds one file per SONAME: `libibverbs.so.1` (which is `librdmacm.so.1`
//! too: that name is a symlink to it, and glibc maps the library once, matching the second
//! name by SONAME and inode) and the stub providers `libmlx5.so.1` and `libefa.so.1`; and
//! a folder `fabric/` with the native libfabric provider, `libsoftrdma-fi.so`, alone
//! (libfabric loads every `*fi.so` of a folder on `FI_PROVIDER_PATH`). It is the first
//! of:
//!
//! 1. **An installed package's private folder**, `../lib/softrdma/` beside the binary
//!    (`/usr/lib/softrdma` for `/usr/bin/softrdma`). It is never written to.
//! 2. **A build tree's own libraries.** Cargo builds them beside the binary (in its folder,
//!    or in `deps/` below it when they were built as its dependencies) under cargo's
//!    names; a folder `softrdma-lib/` next to them holds one symlink per SONAME, made on
//!    first use, each link atomically (a new link renamed over the old), so concurrent
//!    runs agree.
//! 3. **The copies inside this binary.** A release build embeds the libraries (see
//!    `build.rs`), so that `cargo install` gives a binary that runs programs on its own.
//!    On first use they are written into `$XDG_CACHE_HOME/softrdma/` (or `~/.cache`, or a
//!    private folder `/tmp/softrdma-lib-UID` when there is no home), in a folder named by
//!    the version and a hash of their contents. The folder is filled under a temporary
//!    name of its own, synced, and renamed into place, so a reader never sees half of it
//!    (not even after a crash), and two versions never share one. A folder whose files do
//!    not have the embedded sizes is written again.
//!
//! Runs on the calling thread; no locks.

use std::hash::Hasher;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The SONAMEs and the cargo file that serves each. A name whose file already served an
/// earlier name becomes a symlink to it.
const LIBS: &[(&str, &str)] = &[
    ("libibverbs.so.1", "libsoftrdma_capi.so"),
    ("librdmacm.so.1", "libsoftrdma_capi.so"),
    ("libmlx5.so.1", "libsoftrdma_stub_mlx5.so"),
    ("libefa.so.1", "libsoftrdma_stub_efa.so"),
    (FABRIC_PROVIDER, "libsoftrdma_fi.so"),
];

/// The native libfabric provider, in its own folder.
pub const FABRIC_PROVIDER: &str = "fabric/libsoftrdma-fi.so";

/// The libraries this binary carries, by cargo file name.
#[cfg(softrdma_embed)]
const EMBEDDED: &[(&str, &[u8])] = &[
    (
        "libsoftrdma_capi.so",
        include_bytes!(concat!(env!("SOFTRDMA_DEPS_DIR"), "/libsoftrdma_capi.so")),
    ),
    (
        "libsoftrdma_stub_mlx5.so",
        include_bytes!(concat!(
            env!("SOFTRDMA_DEPS_DIR"),
            "/libsoftrdma_stub_mlx5.so"
        )),
    ),
    (
        "libsoftrdma_stub_efa.so",
        include_bytes!(concat!(
            env!("SOFTRDMA_DEPS_DIR"),
            "/libsoftrdma_stub_efa.so"
        )),
    ),
    (
        "libsoftrdma_fi.so",
        include_bytes!(concat!(env!("SOFTRDMA_DEPS_DIR"), "/libsoftrdma_fi.so")),
    ),
];
/// A debug build carries none: it runs from its build tree.
#[cfg(not(softrdma_embed))]
const EMBEDDED: &[(&str, &[u8])] = &[];

/// Why the libraries cannot be offered.
#[derive(Debug, thiserror::Error)]
pub enum LibDirError {
    /// Neither installed, nor built beside the binary, nor carried by it.
    #[error(
        "the drop-in libraries are missing: no {} beside {}, no build tree, and this is a debug build, which carries none (build with `cargo build --release`, or install with `cargo install --path crates/softrdma-cli`)",
        .installed.display(), .exe.display()
    )]
    Missing {
        /// The installed folder looked for.
        installed: PathBuf,
        /// This binary.
        exe: PathBuf,
    },
    /// A folder or file could not be made.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The cache folder is not safely ours.
    #[error("{}: {why}; remove it or set XDG_CACHE_HOME", .path.display())]
    Unsafe {
        /// The folder.
        path: PathBuf,
        /// What is wrong with it.
        why: &'static str,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> LibDirError + '_ {
    move |source| LibDirError::Io {
        path: path.to_owned(),
        source,
    }
}

/// The folder to put on `LD_LIBRARY_PATH`, made if needed.
pub fn lib_dir() -> Result<PathBuf, LibDirError> {
    let exe = std::env::current_exe().map_err(io(Path::new("/proc/self/exe")))?;
    let bin = exe.parent().unwrap_or(Path::new("/"));
    let installed = bin.parent().unwrap_or(bin).join("lib/softrdma");
    if installed.join(LIBS[0].0).is_file() {
        return Ok(installed);
    }
    match build_tree(bin) {
        Ok(Some(dir)) => return Ok(dir),
        // A build tree the user may not write to: the copies inside serve as well.
        Err(e) if EMBEDDED.is_empty() => return Err(e),
        _ => {}
    }
    if !EMBEDDED.is_empty() {
        return write_embedded(&cache_root()?, EMBEDDED);
    }
    Err(LibDirError::Missing { installed, exe })
}

/// The build tree's link folder, when every library was built beside `bin`.
fn build_tree(bin: &Path) -> Result<Option<PathBuf>, LibDirError> {
    // Cargo leaves a copy in the binary's directory when the library's own package was
    // built, and refreshes the one in deps/ when this binary is: the newer is the build.
    let find = |file: &str| {
        [bin.join(file), bin.join("deps").join(file)]
            .into_iter()
            .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
            .max()
            .map(|(_, p)| p)
    };
    let mut targets = Vec::new();
    for (soname, file) in LIBS {
        match find(file) {
            Some(t) => targets.push((*soname, t)),
            None => return Ok(None),
        }
    }
    let dir = bin.join("softrdma-lib");
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    for (soname, target) in targets {
        let link = dir.join(soname);
        if std::fs::read_link(&link).is_ok_and(|t| t == target) {
            continue;
        }
        let (parent, name) = split(&link);
        std::fs::create_dir_all(parent).map_err(io(parent))?;
        let tmp = parent.join(format!(".{name}.{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&target, &tmp).map_err(io(&tmp))?;
        std::fs::rename(&tmp, &link).map_err(io(&link))?;
    }
    Ok(Some(dir))
}

/// A path's folder and file name.
fn split(p: &Path) -> (&Path, String) {
    (
        p.parent().unwrap_or(Path::new("/")),
        p.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    )
}

/// The folder the embedded libraries are written into, one per version and contents.
fn cache_root() -> Result<PathBuf, LibDirError> {
    let home = std::env::var_os("XDG_CACHE_HOME")
        .filter(|x| Path::new(x).is_absolute())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|h| Path::new(h).is_absolute())
                .map(|h| PathBuf::from(h).join(".cache"))
        });
    if let Some(h) = home {
        let root = h.join("softrdma");
        if std::fs::create_dir_all(&root).is_ok() {
            return Ok(root);
        }
    }
    // No usable home: a folder of our own in the shared temporary folder, which must be
    // ours alone, as anyone could have made it first.
    let uid = nix::unistd::getuid().as_raw();
    let root = std::env::temp_dir().join(format!("softrdma-lib-{uid}"));
    match std::fs::DirBuilder::new().mode(0o700).create(&root) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io(&root)(e)),
    }
    let m = std::fs::symlink_metadata(&root).map_err(io(&root))?;
    let why = if !m.is_dir() {
        Some("not a folder")
    } else if m.uid() != uid {
        Some("owned by another user")
    } else if m.permissions().mode() & 0o022 != 0 {
        Some("writable by others")
    } else {
        None
    };
    match why {
        Some(why) => Err(LibDirError::Unsafe { path: root, why }),
        None => Ok(root),
    }
}

/// Whether `dir` holds every library of `libs` whole (each file of its embedded size).
fn complete(dir: &Path, libs: &[(&str, &[u8])]) -> bool {
    LIBS.iter().all(|(soname, file)| {
        let want = libs.iter().find(|(n, _)| n == file).map(|(_, b)| b.len());
        let have = std::fs::metadata(dir.join(soname))
            .ok()
            .map(|m| m.len() as usize);
        want.is_none() || want == have
    })
}

/// Writes `libs` (by cargo name) into a folder of their own under `root`, once, and gives
/// it.
fn write_embedded(root: &Path, libs: &[(&str, &[u8])]) -> Result<PathBuf, LibDirError> {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for (name, bytes) in libs {
        h.write(name.as_bytes());
        h.write(bytes);
    }
    let dir = root.join(format!(
        "lib-{}-{:016x}",
        env!("CARGO_PKG_VERSION"),
        h.finish()
    ));
    if complete(&dir, libs) {
        return Ok(dir);
    }
    // A name no other writer can hold, even one of the same pid in another namespace
    // sharing this home: create_dir fails rather than reuse a folder.
    let tmp = root.join(format!(
        ".lib-{}-{:016x}",
        std::process::id(),
        rand::random::<u64>()
    ));
    std::fs::create_dir(&tmp).map_err(io(&tmp))?;
    let filled = fill(&tmp, libs).and_then(|()| {
        std::fs::File::open(&tmp)
            .and_then(|d| d.sync_all())
            .map_err(io(&tmp))
    });
    if let Err(e) = filled {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    if dir.exists() && !complete(&dir, libs) {
        // Torn by an older version of this code, or by hand: replaced.
        let _ = std::fs::remove_dir_all(&dir);
    }
    if let Err(e) = std::fs::rename(&tmp, &dir) {
        let _ = std::fs::remove_dir_all(&tmp);
        // Another process made it first; theirs is as good.
        if !complete(&dir, libs) {
            return Err(io(&dir)(e));
        }
    }
    Ok(dir)
}

/// Writes each SONAME into `dir`: the first name a file serves as the file, the rest as
/// links to it.
fn fill(dir: &Path, libs: &[(&str, &[u8])]) -> Result<(), LibDirError> {
    let mut written: Vec<(&str, &str)> = Vec::new();
    for (soname, file) in LIBS {
        let path = dir.join(soname);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        if let Some((first, _)) = written.iter().find(|(_, f)| f == file) {
            std::os::unix::fs::symlink(first, &path).map_err(io(&path))?;
            continue;
        }
        let Some((_, bytes)) = libs.iter().find(|(n, _)| n == file) else {
            continue;
        };
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::File::create(&path)?;
            std::io::Write::write_all(&mut f, bytes)?;
            f.set_permissions(std::fs::Permissions::from_mode(0o755))?;
            f.sync_all()
        };
        write().map_err(io(&path))?;
        written.push((soname, file));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The embedded libraries land under their SONAMEs, librdmacm as a link to
    /// libibverbs, and a second call finds the folder without writing it again.
    #[test]
    fn embedded_libraries_are_written_once_under_their_sonames() {
        let tmp = std::env::temp_dir().join(format!("softrdma-libdir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).unwrap();
        let libs: &[(&str, &[u8])] = &[
            ("libsoftrdma_capi.so", b"capi"),
            ("libsoftrdma_stub_mlx5.so", b"mlx5"),
            ("libsoftrdma_stub_efa.so", b"efa"),
        ];
        let dir = write_embedded(&tmp, libs).unwrap();
        assert!(dir.starts_with(&tmp));
        assert_eq!(std::fs::read(dir.join("libibverbs.so.1")).unwrap(), b"capi");
        assert_eq!(
            std::fs::read_link(dir.join("librdmacm.so.1")).unwrap(),
            Path::new("libibverbs.so.1")
        );
        assert_eq!(std::fs::read(dir.join("libefa.so.1")).unwrap(), b"efa");
        let mode = std::fs::metadata(dir.join("libmlx5.so.1")).unwrap().mode();
        assert_eq!(mode & 0o777, 0o755);
        let before = std::fs::metadata(dir.join("libibverbs.so.1"))
            .unwrap()
            .modified()
            .unwrap();
        assert_eq!(write_embedded(&tmp, libs).unwrap(), dir);
        let after = std::fs::metadata(dir.join("libibverbs.so.1"))
            .unwrap()
            .modified()
            .unwrap();
        assert_eq!(before, after);
        // Other contents, another folder.
        let other: &[(&str, &[u8])] = &[("libsoftrdma_capi.so", b"capi2"), libs[1], libs[2]];
        assert_ne!(write_embedded(&tmp, other).unwrap(), dir);
        // A torn folder (a file cut short) is written again.
        std::fs::write(dir.join("libefa.so.1"), b"").unwrap();
        assert_eq!(write_embedded(&tmp, libs).unwrap(), dir);
        assert_eq!(std::fs::read(dir.join("libefa.so.1")).unwrap(), b"efa");
        // No temporary folder is left behind.
        let left: Vec<_> = std::fs::read_dir(&tmp)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
            .collect();
        assert!(left.is_empty(), "{left:?}");
        let _ = std::fs::remove_dir_all(&tmp);
    }
}
