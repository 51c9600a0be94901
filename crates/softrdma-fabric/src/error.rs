//! What the fabric layer refuses, with the libfabric error number each maps to
//! ([`FabricError::errno`]), so that a C face can return it unchanged.

use crate::matching::FiAddr;
use thiserror::Error;

/// A refusal of the fabric layer.
#[derive(Debug, Error)]
pub enum FabricError {
    /// A verbs call underneath failed.
    #[error(transparent)]
    Verbs(#[from] softrdma::Error),
    /// An address that is not (or no longer) in the address vector.
    #[error("address {0} is not in the address vector")]
    NotInAv(FiAddr),
    /// A connection to a peer failed; what was queued for it fails with it.
    #[error("the connection to {peer} failed: {why}")]
    Connection {
        /// The peer's endpoint address.
        peer: std::net::SocketAddr,
        /// What the connection manager said.
        why: String,
    },
    /// A call the endpoint's state does not allow now (not yet connected, or no longer).
    #[error("{what}: {why}")]
    State {
        /// The call.
        what: &'static str,
        /// What the state is.
        why: String,
    },
    /// An argument outside what the call takes.
    #[error("{what}: {why}")]
    Invalid {
        /// The call.
        what: &'static str,
        /// What was wrong.
        why: String,
    },
}

impl FabricError {
    /// The libfabric error number (positive; the C API returns its negative).
    pub fn errno(&self) -> i32 {
        match self {
            FabricError::Verbs(e) => e.errno(),
            FabricError::NotInAv(_) | FabricError::Invalid { .. } => libc_einval(),
            FabricError::Connection { .. } => 111, // FI_ECONNREFUSED
            FabricError::State { .. } => 258,      // FI_EOPBADSTATE
        }
    }
}

const fn libc_einval() -> i32 {
    22 // FI_EINVAL
}

/// The fabric layer's result.
pub type Result<T> = std::result::Result<T, FabricError>;
