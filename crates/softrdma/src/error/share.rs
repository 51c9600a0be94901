//! Why a device could not be shared with the other processes that have it open (see
//! `device::share`). Below every layer: it names only addresses, pids and system errors.

use std::net::IpAddr;

/// What went wrong while joining a shared device.
#[derive(Debug, thiserror::Error)]
pub enum ShareError {
    /// `IP:4791` is bound by something that is not this user's softrdma.
    #[error("{0}:4791 is held by something that does not answer as a softrdma device owner")]
    Foreign(IpAddr),
    /// The owner speaks another protocol version.
    #[error(
        "the device's owner (pid {pid}) speaks sharing protocol v{theirs}, this library v{ours}: \
         close the programs of the other softrdma version, or give this one its own address \
         with SOFTRDMA_ADDR=127.0.0.N"
    )]
    Version {
        /// The owner's pid.
        pid: u32,
        /// Its version.
        theirs: u32,
        /// Ours.
        ours: u32,
    },
    /// The owner's socket belongs to another user.
    #[error(
        "the device's control socket is held by uid {uid} (pid {pid}), not by this user: \
         refusing to share a device with another user"
    )]
    OtherUser {
        /// Their uid.
        uid: u32,
        /// Their pid.
        pid: i32,
    },
    /// The owner did not answer in time, or answered nonsense.
    #[error("the device's owner (pid {pid}) {what}")]
    Owner {
        /// The owner's pid.
        pid: u32,
        /// What it did.
        what: String,
    },
    /// A system call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The error.
        source: std::io::Error,
    },
}

impl ShareError {
    /// The errno a C caller sees.
    pub fn errno(&self) -> i32 {
        match self {
            ShareError::Foreign(_) => libc::EADDRINUSE,
            ShareError::Version { .. } => libc::EPROTO,
            ShareError::OtherUser { .. } => libc::EACCES,
            ShareError::Owner { .. } => libc::ETIMEDOUT,
            ShareError::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
        }
    }
}
