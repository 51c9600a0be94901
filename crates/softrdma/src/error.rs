//! Errors of the verbs API: each names the verb and what was wrong.

/// Result of a verb.
pub type Result<T> = std::result::Result<T, Error>;

/// Why a verb failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An attribute of the call is invalid.
    #[error("{verb}: invalid {attr}: {why}")]
    InvalidAttr {
        /// The verb, as in libibverbs (`ibv_reg_mr`, ...).
        verb: &'static str,
        /// The offending attribute.
        attr: &'static str,
        /// What is wrong with it.
        why: String,
    },
    /// A modify-QP the state table refuses.
    #[error(transparent)]
    Modify(#[from] softrdma_proto::ModifyError),
    /// A post the QP refuses.
    #[error(transparent)]
    Post(#[from] softrdma_proto::PostError),
    /// No device of that name.
    #[error("ibv_open_device: no device named {0:?}")]
    NoDevice(String),
    /// Port 4791 is taken on the device's address.
    #[error(
        "ibv_open_device: {addr}:4791 is already in use (another softrdma process or the \
         kernel's rdma_rxe?). Give this process its own loopback address with \
         SOFTRDMA_ADDR=127.0.0.N, or stop the other user of the port"
    )]
    AddrInUse {
        /// The address.
        addr: std::net::IpAddr,
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

impl Error {
    pub(crate) fn attr(verb: &'static str, attr: &'static str, why: impl Into<String>) -> Self {
        Error::InvalidAttr {
            verb,
            attr,
            why: why.into(),
        }
    }

    pub(crate) fn io(verb: &'static str) -> impl FnOnce(std::io::Error) -> Self {
        move |source| Error::Io { verb, source }
    }
}
