//! Errors of the verbs API: each names the verb and what was wrong, and [`Error::errno`]
//! gives the errno a C caller of that verb would see (for the C ABI). The connection
//! manager's refusals are [`CmError`]s (in `error/cm.rs`).

mod cm;
mod share;
pub use cm::{CmError, PortHolder};
pub use share::ShareError;

/// Result of a verb.
pub type Result<T> = std::result::Result<T, Error>;

/// Why a verb failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Access flags that ask for remote write or remote atomic without local write
    /// (`ibv_reg_mr(3)`: a region a peer may write must be locally writable too).
    #[error("{verb}: access {access:?}: REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE")]
    AccessNeedsLocalWrite {
        /// `ibv_reg_mr`.
        verb: &'static str,
        /// The flags asked for.
        access: softrdma_proto::AccessFlags,
    },
    /// A null address for memory to register.
    #[error("{verb}: addr is null")]
    NullAddress {
        /// `ibv_reg_mr`.
        verb: &'static str,
    },
    /// A copy into or out of a region that does not lie inside it.
    #[error(
        "{verb}: {len} bytes at offset {offset} do not lie inside the {region_len}-byte region"
    )]
    OutsideRegion {
        /// `MemoryRegion::read` or `MemoryRegion::write`.
        verb: &'static str,
        /// The offset asked for.
        offset: u64,
        /// The bytes asked for.
        len: u64,
        /// The region's length.
        region_len: u64,
    },
    /// An address handle without a destination GID (RoCE routes by GID).
    #[error("ibv_create_ah: grh.dgid is ::, and RoCE needs a destination GID")]
    NoDestinationGid,
    /// A line of the device config file that does not parse.
    #[error("device config, line {line}: {why}: {text:?}")]
    ConfigLine {
        /// The line's number, from 1.
        line: usize,
        /// Its text.
        text: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A device bound to a network interface that does not exist or has no address.
    #[error("ibv_open_device: {device}: interface {netdev} does not exist or has no address")]
    NoInterface {
        /// The device.
        device: String,
        /// The interface it is bound to.
        netdev: String,
    },
    /// A count beyond what the device supports (a CQ's entries, a QP's or SRQ's work
    /// requests, scatter-gather entries or inline bytes).
    #[error("{verb}: {attr} = {requested} is out of range (the device allows {min}..={max})")]
    OutOfRange {
        /// The verb, as in libibverbs.
        verb: &'static str,
        /// The attribute, as in libibverbs' structs (`cqe`, `cap.max_send_wr`, ...).
        attr: &'static str,
        /// What was asked for.
        requested: u64,
        /// The smallest value allowed.
        min: u64,
        /// The largest value allowed.
        max: u64,
    },
    /// A work request ID that already has a buffer in flight (the `*_owned` posts).
    #[error("{verb}: wr_id {wr_id} already has a buffer in flight")]
    WrIdInFlight {
        /// `ibv_post_send` or `ibv_post_recv`.
        verb: &'static str,
        /// The work request ID.
        wr_id: u64,
    },
    /// `ibv_req_notify_cq` on a CQ that has no completion channel.
    #[error("ibv_req_notify_cq: the CQ was created without a completion channel")]
    NoChannel,
    /// A modify-QP the state table refuses.
    #[error(transparent)]
    Modify(#[from] softrdma_proto::ModifyError),
    /// A post the QP refuses.
    #[error(transparent)]
    Post(#[from] softrdma_proto::PostError),
    /// No device of that name.
    #[error("ibv_open_device: no device named {0:?}")]
    NoDevice(String),
    /// A call of the system's rdma-core on a kernel device failed.
    #[error("{verb} on the kernel device {device}: {source}")]
    Kernel {
        /// The verb.
        verb: &'static str,
        /// The device's name.
        device: String,
        /// rdma-core's errno.
        source: std::io::Error,
    },
    /// A verb that softrdma does not run on kernel devices yet.
    #[error(
        "{verb}: {device} is a kernel RDMA device, and softrdma does not run this on kernel \
         devices yet (it lists and queries them, `softrdma devinfo -d {device}`, and runs \
         RC, UC and UD QPs on them through `softrdma::kernel`); use rdma-core for it, or a \
         softrdma device"
    )]
    KernelDevice {
        /// The verb.
        verb: &'static str,
        /// The device's name.
        device: String,
    },
    /// Port 4791 is taken on the device's address, by something that does not share it:
    /// a softrdma process opened with `SOFTRDMA_SHARE=0` (this one or the other), another
    /// user's, or the kernel's rdma_rxe.
    #[error(
        "ibv_open_device: {addr}:4791 is already in use by something that does not share it \
         (a softrdma process with SOFTRDMA_SHARE=0, another user's softrdma, or the \
         kernel's rdma_rxe; `ss -uap sport = 4791` names it). Give this process its own \
         loopback address with SOFTRDMA_ADDR=127.0.0.N, or stop the other user of the port"
    )]
    AddrInUse {
        /// The address.
        addr: std::net::IpAddr,
    },
    /// The device on `addr` could not be shared with the processes that have it open.
    #[error("ibv_open_device: sharing the device on {addr}: {source}")]
    Share {
        /// The device's address.
        addr: std::net::IpAddr,
        /// What went wrong.
        source: ShareError,
    },
    /// A connection manager verb that was refused (see [`CmError`], which gives the errno).
    #[error("{verb}: {why}")]
    Cm {
        /// The rdma_cm verb.
        verb: &'static str,
        /// Why it was refused.
        why: CmError,
    },
    /// `SOFTRDMA_FAULTS` (or a fault specification given another way) did not parse.
    #[error("ibv_open_device: SOFTRDMA_FAULTS={spec:?}: {source}")]
    Faults {
        /// The specification.
        spec: String,
        /// What was wrong with it.
        source: softrdma_proto::faults::FaultsError,
    },
    /// An environment variable that must hold an IP address does not.
    #[error("{var}={value:?} is not an IP address: {source}")]
    BadAddr {
        /// The variable (`SOFTRDMA_ADDR`).
        var: &'static str,
        /// Its value.
        value: String,
        /// Why it did not parse.
        source: std::net::AddrParseError,
    },
    /// A multicast attach or detach that cannot be (see [`McastError`]).
    #[error("{verb}: {gid}: {why}")]
    Multicast {
        /// `ibv_attach_mcast` or `ibv_detach_mcast`.
        verb: &'static str,
        /// The group's GID.
        gid: std::net::Ipv6Addr,
        /// Why.
        why: McastError,
    },
    /// An operating-system call failed.
    #[error("{verb}: {source}")]
    Io {
        /// What was being done.
        verb: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Why a multicast attach or detach was refused (each EINVAL, as the kernel's
/// `ib_attach_mcast` and rxe refuse them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum McastError {
    /// Only UD QPs join groups.
    #[error("only UD QPs can be attached to a multicast group")]
    NotUd,
    /// The GID is not a multicast address (IPv6 ff00::/8, or IPv4 224.0.0.0/4 mapped).
    #[error("not a multicast GID (ff00::/8, or ::ffff:224.0.0.0/100 for IPv4)")]
    NotMulticast,
    /// An IPv4 group on an IPv6 device, or the other way round.
    #[error("the group's address family is not the device's")]
    WrongFamily,
    /// A detach from a group the QP is not attached to.
    #[error("the QP is not attached to this group")]
    NotAttached,
}

impl Error {
    /// The errno a C caller of the verb would see, as libibverbs and rxe return them:
    /// EINVAL for a bad argument, ENOMEM for a full queue (as `ibv_post_send` reports it),
    /// EBUSY for a WR ID in use, ENODEV, EADDRINUSE, and the operating system's own error
    /// where it refused.
    pub fn errno(&self) -> i32 {
        use softrdma_proto::PostError;
        match self {
            Error::AccessNeedsLocalWrite { .. }
            | Error::NullAddress { .. }
            | Error::OutsideRegion { .. }
            | Error::NoDestinationGid
            | Error::ConfigLine { .. }
            | Error::OutOfRange { .. }
            | Error::NoChannel
            | Error::Faults { .. }
            | Error::BadAddr { .. }
            | Error::Multicast { .. }
            | Error::Modify(_) => libc::EINVAL,
            Error::WrIdInFlight { .. } => libc::EBUSY,
            Error::Post(PostError::QueueFull { .. }) => libc::ENOMEM,
            Error::Post(_) => libc::EINVAL,
            Error::NoDevice(_) | Error::NoInterface { .. } => libc::ENODEV,
            Error::AddrInUse { .. } => libc::EADDRINUSE,
            Error::Kernel { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            Error::KernelDevice { .. } => libc::EOPNOTSUPP,
            Error::Cm { why, .. } => why.errno(),
            Error::Share { source, .. } => source.errno(),
            Error::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
        }
    }

    /// An [`Error::OutOfRange`] unless `min <= requested <= max`.
    pub(crate) fn check_range(
        verb: &'static str,
        attr: &'static str,
        requested: impl Into<u64>,
        min: impl Into<u64>,
        max: impl Into<u64>,
    ) -> Result<()> {
        let (requested, min, max) = (requested.into(), min.into(), max.into());
        if (min..=max).contains(&requested) {
            Ok(())
        } else {
            Err(Error::OutOfRange {
                verb,
                attr,
                requested,
                min,
                max,
            })
        }
    }

    /// An [`Error::Cm`]: `verb` refused for `why`.
    pub(crate) fn cm(verb: &'static str, why: CmError) -> Self {
        Error::Cm { verb, why }
    }

    /// An [`Error::Kernel`] from the thread's errno, for a kernel call that failed.
    pub(crate) fn kernel(verb: &'static str, device: &str) -> Self {
        Error::Kernel {
            verb,
            device: device.to_owned(),
            source: std::io::Error::last_os_error(),
        }
    }

    /// An [`Error::Kernel`] from a call that returned `rc`, an errno (rdma-core's query
    /// verbs return it, of either sign).
    pub(crate) fn kernel_rc(verb: &'static str, device: &str, rc: i32) -> Self {
        Error::Kernel {
            verb,
            device: device.to_owned(),
            source: std::io::Error::from_raw_os_error(rc.saturating_abs()),
        }
    }

    pub(crate) fn io(verb: &'static str) -> impl FnOnce(std::io::Error) -> Self {
        move |source| Error::Io { verb, source }
    }
}
