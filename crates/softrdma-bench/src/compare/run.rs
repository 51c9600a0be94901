//! What every family of `compare` runs with: this binary, the `softrdma` binary, the
//! pinning, the time limit of a run and the seconds of a bandwidth run. The families add
//! their runners to [`Run`] in their own files.

use crate::pair::Pin;
use std::time::Duration;

/// The settings of one `compare`, shared by every run.
pub(super) struct Run {
    /// This binary, which runs the raw-UDP baselines.
    pub(super) me: String,
    /// The `softrdma` binary.
    pub(super) sr: String,
    /// Where the server and the client run.
    pub(super) pin: Pin,
    /// How long a client may run before it is killed.
    pub(super) limit: Duration,
    /// Seconds per bandwidth run, as an argument.
    pub(super) secs: String,
}
