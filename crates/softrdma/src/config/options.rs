//! How a device is opened. Every `SOFTRDMA_*` variable that shapes an open device is read
//! here, once, by [`DeviceOptions::from_env`] (and the default device's address by
//! [`default_addr`]); `Context::open_with` uses only the options it is given.

use crate::error::{Error, Result};
use softrdma_proto::faults::LinkFaults;
use std::net::{IpAddr, Ipv4Addr};

/// The address of the default device: `$SOFTRDMA_ADDR`, else 127.0.0.1.
pub fn default_addr() -> Result<IpAddr> {
    match std::env::var("SOFTRDMA_ADDR") {
        Ok(s) => s.parse().map_err(|e| Error::BadAddr {
            var: "SOFTRDMA_ADDR",
            value: s,
            source: e,
        }),
        Err(_) => Ok(IpAddr::V4(Ipv4Addr::LOCALHOST)),
    }
}

/// How a device is opened: fault injection, capture and the send path's choices. Every
/// `SOFTRDMA_*` variable that shapes an open device is read here, once, by
/// [`DeviceOptions::from_env`]; `Context::open_with` uses only what it is given.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceOptions {
    /// Faults applied to every packet sent.
    pub faults: Option<LinkFaults>,
    /// A pcap file for every packet sent and received.
    pub pcap: Option<String>,
    /// Zero-copy sends: payloads of a KiB and more leave straight from owned regions (the
    /// kernel copies them from there) instead of through a copy in the send batch. Off by
    /// default: on loopback here the kernel copies a send of many pieces far slower than a
    /// send of one (2.2x the time per byte in its copy), which cost more than the copy saved
    /// (write-bw 1 MiB 5.2 against 6.3 GB/s).
    pub zero_copy: bool,
    /// UDP GSO and GRO: runs of equal packets leave in one send, and arrive in one receive
    /// (on by default; `SOFTRDMA_NO_GSO` turns them off).
    pub gso: bool,
    /// GSO toward every destination, not only loopback (`SOFTRDMA_GSO=always`).
    pub gso_everywhere: bool,
    /// Send from a socket connected to each peer, which spares the kernel a route lookup
    /// per packet (on by default; `SOFTRDMA_CONNECTED=0` turns it off; a capture does too,
    /// since it records every packet with IP ID 0).
    pub connected: bool,
    /// Share the device with this user's other processes that open it (on by default;
    /// `SOFTRDMA_SHARE=0` binds the port alone, and fails if another process has it).
    pub share: bool,
    /// Between processes that share a device, move packets through shared-memory rings
    /// instead of UDP (on by default; `SOFTRDMA_SHM=0` forces the UDP path, for tests and
    /// measurements).
    pub shm: bool,
    /// Between processes that share a device, let a process place its RDMA WRITEs in the
    /// target's memory itself, with one cross-memory copy (`process_vm_writev`), once the
    /// target checked the R_Key and granted the range (on by default where the kernel
    /// allows it; `SOFTRDMA_CMA=0` sends them through the rings, for measurements).
    pub cma: bool,
    /// Between processes that share a device, have the kernel steer each member's
    /// datagrams from remote peers to the member's own socket, instead of through the
    /// device's owner (on by default; `SOFTRDMA_STEER=0` keeps them forwarded, for
    /// measurements).
    pub steer: bool,
    /// For tests: how long the same-host path waits before each lookup of a QPN's
    /// process, as a slow device owner would make it (zero; no variable sets it).
    #[doc(hidden)]
    pub route_lookup_delay: std::time::Duration,
}

impl Default for DeviceOptions {
    fn default() -> Self {
        Self {
            faults: None,
            pcap: None,
            zero_copy: false,
            gso: true,
            gso_everywhere: false,
            connected: true,
            share: true,
            shm: true,
            cma: true,
            steer: true,
            route_lookup_delay: std::time::Duration::ZERO,
        }
    }
}

impl DeviceOptions {
    /// The options `SOFTRDMA_FAULTS`, `SOFTRDMA_PCAP`, `SOFTRDMA_ZERO_COPY=1`,
    /// `SOFTRDMA_NO_GSO`, `SOFTRDMA_GSO=always`, `SOFTRDMA_CONNECTED=0` and
    /// `SOFTRDMA_SHARE=0`, `SOFTRDMA_SHM=0`, `SOFTRDMA_CMA=0` and `SOFTRDMA_STEER=0` ask
    /// for.
    pub fn from_env() -> Result<Self> {
        Ok(Self {
            gso: std::env::var_os("SOFTRDMA_NO_GSO").is_none(),
            gso_everywhere: std::env::var("SOFTRDMA_GSO").is_ok_and(|v| v == "always"),
            connected: std::env::var("SOFTRDMA_CONNECTED").map_or(true, |v| v != "0"),
            share: std::env::var("SOFTRDMA_SHARE").map_or(true, |v| v != "0"),
            shm: std::env::var("SOFTRDMA_SHM").map_or(true, |v| v != "0"),
            cma: std::env::var("SOFTRDMA_CMA").map_or(true, |v| v != "0"),
            steer: std::env::var("SOFTRDMA_STEER").map_or(true, |v| v != "0"),
            route_lookup_delay: std::time::Duration::ZERO,
            faults: match std::env::var("SOFTRDMA_FAULTS") {
                Ok(s) => Some(LinkFaults::parse(&s).map_err(|e| Error::Faults {
                    spec: s.clone(),
                    source: e,
                })?),
                Err(_) => None,
            },
            pcap: std::env::var("SOFTRDMA_PCAP").ok(),
            zero_copy: std::env::var("SOFTRDMA_ZERO_COPY").is_ok_and(|v| v == "1"),
        })
    }
}
