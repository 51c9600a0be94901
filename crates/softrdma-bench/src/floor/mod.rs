//! The raw-UDP baselines, subcommands of this binary that `compare` runs on itself: the
//! floors under softrdma's figures. A busy-poll ping-pong (`pingpong`) and a GSO+GRO
//! blaster (`blast`), each also run as a RoCE endpoint must at the least (`--roce`).
//!
//! Its files: `spin` (the busy-poll receive and its watch for a silent peer), `pingpong`,
//! `blast`, and `mmsg` (the `sendmmsg`/`recvmmsg`/cmsg code). Each baseline runs on the
//! thread of `main` and prints its figure as one JSON line on stdout.

mod blast;
mod mmsg;
mod pingpong;
mod spin;

pub(crate) use blast::{udp_blast_recv, udp_blast_send};
pub(crate) use pingpong::{Ends, udp_pingpong_client, udp_pingpong_server};
