//! The kernel's view of softrdma's devices, for `softrdma exec`.
//!
//! Some programs look for RDMA devices the kernel's way before they ask libibverbs: UCX
//! drops a device whose `/dev/infiniband/<dev_name>` is not a read-write character device,
//! pyverbs' rdma_cm tests list `/sys/class/infiniband/DEV/device/net/`, Open MPI reads
//! `device/driver`. softrdma has no kernel device, so `exec` gives the program a private
//! mount namespace in which those paths exist:
//! - `/sys/class` is a copy of the real one (every class bound in from the real sysfs)
//!   with `infiniband/` and `infiniband_verbs/` holding softrdma's devices, as described
//!   by `softrdma::config::sysfs`;
//! - `/dev` is a copy of the real one (every entry bound in) with `infiniband/uverbsN` and
//!   `infiniband/rdma_cm`, each a bind of `/dev/null`: a real read-write character device
//!   that the drop-in never reads.
//!
//! Root needs only a mount namespace. Anyone else gets a user namespace too, in which the
//! caller's uid and gid map to themselves: the program keeps its identity and is not
//! root there either (its capabilities end at `execve`). Nothing outside the namespace
//! changes; it ends with the program. The process must be single-threaded (a kernel rule
//! for `unshare(CLONE_NEWUSER)`), which `softrdma exec` is.

use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sched::{CloneFlags, unshare};
use softrdma::config::DeviceInfo;
use softrdma::config::sysfs::{self, Node};
use std::path::{Path, PathBuf};

/// Why the view could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    /// The namespaces could not be made.
    #[error(
        "unshare({what}): {errno}: {}",
        if *.rootless {
            "this kernel or container forbids unprivileged user namespaces (sysctl user.max_user_namespaces, kernel.unprivileged_userns_clone, AppArmor's userns restriction, or a seccomp profile); root can allow them, or run softrdma exec as root, which needs only a mount namespace"
        } else {
            "mount namespaces are forbidden here (a seccomp profile, or a container without CAP_SYS_ADMIN)"
        }
    )]
    Unshare {
        /// The flags asked for.
        what: &'static str,
        /// Whether a user namespace was asked for.
        rootless: bool,
        /// The kernel's answer.
        errno: nix::Error,
    },
    /// A step inside the namespace failed.
    #[error("{step} {}: {source}", .path.display())]
    Step {
        /// What was being done.
        step: &'static str,
        /// On which path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

fn step<'a>(step: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> ViewError + 'a {
    move |source| ViewError::Step {
        step,
        path: path.to_owned(),
        source,
    }
}

/// Binds `src` (and every mount below it: a tree with mounts of its own may only be bound
/// whole) onto `dst`.
fn bind(src: &Path, dst: &Path) -> Result<(), ViewError> {
    mount(
        Some(src),
        dst,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(std::io::Error::from)
    .map_err(step("bind onto", dst))
}

/// Makes `dst` (an empty directory) a copy of `src` without the entries named in `skip`:
/// directories and files are bound in, symbolic links made again.
fn mirror(src: &Path, dst: &Path, skip: &[&str]) -> Result<(), ViewError> {
    for e in std::fs::read_dir(src).map_err(step("read", src))? {
        let e = e.map_err(step("read", src))?;
        let name = e.file_name();
        if skip.iter().any(|s| name == *s) {
            continue;
        }
        let (from, to) = (e.path(), dst.join(&name));
        let ty = e.file_type().map_err(step("stat", &from))?;
        if ty.is_symlink() {
            let target = std::fs::read_link(&from).map_err(step("read link", &from))?;
            std::os::unix::fs::symlink(target, &to).map_err(step("make link", &to))?;
        } else if ty.is_dir() {
            std::fs::create_dir(&to).map_err(step("make directory", &to))?;
            bind(&from, &to)?;
        } else {
            std::fs::File::create(&to).map_err(step("make file", &to))?;
            bind(&from, &to)?;
        }
    }
    Ok(())
}

/// Writes a device tree below `root`.
fn write_tree(root: &Path, tree: &[(String, Node)]) -> Result<(), ViewError> {
    for (rel, node) in tree {
        let p = root.join(rel);
        if let Some(dir) = p.parent() {
            std::fs::create_dir_all(dir).map_err(step("make directory", dir))?;
        }
        match node {
            Node::File(s) => std::fs::write(&p, s).map_err(step("write", &p))?,
            Node::Link(t) => std::os::unix::fs::symlink(t, &p).map_err(step("make link", &p))?,
            Node::Dir => std::fs::create_dir_all(&p).map_err(step("make directory", &p))?,
        }
    }
    Ok(())
}

/// Enters the private namespaces and builds the view of `devices` (the process's device
/// list, in order). On error the process may be in new namespaces, and `/sys/class` may
/// be replaced already, but `/dev` is the real one: the caller can run the program
/// without a view.
pub fn enter(devices: &[DeviceInfo]) -> Result<(), ViewError> {
    let (uid, gid) = (nix::unistd::geteuid(), nix::unistd::getegid());
    let rootless = !uid.is_root();
    let (flags, what) = if rootless {
        (
            CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS,
            "CLONE_NEWUSER|CLONE_NEWNS",
        )
    } else {
        (CloneFlags::CLONE_NEWNS, "CLONE_NEWNS")
    };
    unshare(flags).map_err(|errno| ViewError::Unshare {
        what,
        rootless,
        errno,
    })?;
    if rootless {
        // The caller's ids map to themselves; setgroups must be denied before an
        // unprivileged process may write a gid map.
        for (file, text) in [
            ("/proc/self/uid_map", format!("{uid} {uid} 1")),
            ("/proc/self/setgroups", "deny".to_owned()),
            ("/proc/self/gid_map", format!("{gid} {gid} 1")),
        ] {
            std::fs::write(file, text).map_err(step("write", Path::new(file)))?;
        }
    }
    // Nothing mounted here may reach the namespace this one was copied from.
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(std::io::Error::from)
    .map_err(step("make private", Path::new("/")))?;

    let stage = std::env::temp_dir().join(format!("softrdma-view.{}", std::process::id()));
    let _ = std::fs::remove_dir(&stage);
    std::fs::create_dir(&stage).map_err(step("make directory", &stage))?;
    let built = build(&stage, devices);
    // The binds made from the stage keep its tmpfs alive; the stage itself goes.
    let _ = umount2(&stage, MntFlags::MNT_DETACH);
    let _ = std::fs::remove_dir(&stage);
    built
}

fn build(stage: &Path, devices: &[DeviceInfo]) -> Result<(), ViewError> {
    mount(
        Some("softrdma"),
        stage,
        Some("tmpfs"),
        MsFlags::MS_NOSUID,
        Some("mode=0755,size=16m"),
    )
    .map_err(std::io::Error::from)
    .map_err(step("mount tmpfs on", stage))?;
    let cpus = softrdma::config::online_cpus();

    let class = stage.join("class");
    std::fs::create_dir(&class).map_err(step("make directory", &class))?;
    let ours = ["infiniband", "infiniband_verbs"];
    mirror(Path::new(sysfs::CLASS), &class, &ours)?;
    for (i, d) in devices.iter().enumerate() {
        write_tree(&class, &sysfs::tree(i, d, &cpus))?;
    }

    let dev = stage.join("dev");
    std::fs::create_dir(&dev).map_err(step("make directory", &dev))?;
    mirror(Path::new("/dev"), &dev, &["infiniband"])?;
    let ib = dev.join("infiniband");
    std::fs::create_dir(&ib).map_err(step("make directory", &ib))?;
    let nodes = (0..devices.len())
        .map(|i| format!("uverbs{i}"))
        .chain(["rdma_cm".to_owned()]);
    for n in nodes {
        let p = ib.join(n);
        std::fs::File::create(&p).map_err(step("make file", &p))?;
        bind(Path::new("/dev/null"), &p)?;
    }

    bind(&class, Path::new(sysfs::CLASS))?;
    bind(&dev, Path::new("/dev"))
}
