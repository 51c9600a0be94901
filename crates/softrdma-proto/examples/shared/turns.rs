//! What the two turn examples share: the connected pair and the WRITE of each turn.

use softrdma_proto::sim::{ConnectOpts, Host, LinkFaults, Sim};
use softrdma_proto::*;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

/// A's address.
pub const IP_A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
/// B's address.
pub const IP_B: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
/// A's QP.
pub const QA: u32 = 0x11;
/// B's QP.
pub const QB: u32 = 0x22;

/// The turn count the command line asks for (1000 by default).
pub fn turns() -> u64 {
    std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000)
}

/// Two hosts with a 4 KiB region each and an RC pair between them, connected by the
/// simulator, which does nothing else; and the regions' keys (A's, B's).
pub fn pair() -> (Vec<Host>, u32, u32) {
    let all = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let (mem_a, mem_b) = (Arc::new(SimMemory::new(0xA)), Arc::new(SimMemory::new(0xB)));
    let ka = mem_a.register(Pd(1), 0x1000, 4096, all);
    let kb = mem_b.register(Pd(1), 0x1000, 4096, all);
    let mut sim = Sim::new(1, LinkFaults::default(), 1);
    sim.add_endpoint(IP_A, mem_a);
    sim.add_endpoint(IP_B, mem_b);
    sim.connect(0, QA, 1, QB, ConnectOpts::default());
    (std::mem::take(&mut sim.endpoints), ka, kb)
}

/// Turn `i`'s signaled 8-byte WRITE from A's region to B's.
pub fn write(i: u64, ka: u32, kb: u32) -> SendWr {
    let op = SendOp::Write {
        remote_addr: 0x1000,
        rkey: kb,
    };
    let local = Sge {
        addr: 0x1000,
        length: 8,
        lkey: ka,
    };
    SendWr::signaled(i, op, Payload::Sges(softrdma_proto::sg![local]))
}
