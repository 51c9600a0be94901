//! The ports the process's rdma_cm IDs are bound to, and which binds conflict, by Linux's
//! rule (`cma_check_port` in drivers/infiniband/core/cma.c), so that programs see the
//! errors they see on Linux:
//! - two IDs of one port space and port conflict unless both set REUSEADDR, or both are
//!   address-family-only (AFONLY) and of different families;
//! - a conflict that involves a wildcard address is EADDRNOTAVAIL; two binds of one
//!   specific address are EADDRINUSE.
//!
//! An IPv4 ID is AFONLY unless the program says otherwise; an IPv6 one is as the host's
//! `net.ipv6.bindv6only` says (0 on Linux by default), so `[::]:P` takes IPv4 too and
//! `0.0.0.0:P` then conflicts with it, unless `RDMA_OPTION_ID_AFONLY` is set on both.
//!
//! Processes sharing a device meet each other's ports when they listen (the device's QP1
//! knows its listeners), as before; this table is the process's own, behind one leaf lock.

use softrdma::sync::{Lock, Rank};
use std::ffi::c_int;
use std::net::SocketAddr;

/// A bound ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Binding {
    /// The ID (its address, as a key).
    pub id: usize,
    /// Its port space (`RDMA_PS_TCP` and the others).
    pub ps: c_int,
    /// The address and port it bound.
    pub addr: SocketAddr,
    /// Whether it takes its own address family only.
    pub afonly: bool,
    /// `RDMA_OPTION_ID_REUSEADDR`.
    pub reuseaddr: bool,
}

static BOUND: Lock<Vec<Binding>> = Lock::new(Rank::CapiPorts, Vec::new());

/// The errno a bind of `new` gets among `bound`, or `None` if it may bind.
pub(crate) fn conflict(bound: &[Binding], new: &Binding) -> Option<c_int> {
    for cur in bound
        .iter()
        .filter(|b| b.id != new.id && b.ps == new.ps && b.addr.port() == new.addr.port())
    {
        if new.reuseaddr && cur.reuseaddr {
            continue;
        }
        if new.afonly && cur.afonly && new.addr.is_ipv4() != cur.addr.is_ipv4() {
            continue;
        }
        if new.addr.ip().is_unspecified() || cur.addr.ip().is_unspecified() {
            return Some(libc::EADDRNOTAVAIL);
        }
        if new.addr.ip() == cur.addr.ip() {
            return Some(libc::EADDRINUSE);
        }
    }
    None
}

/// Records `new` unless it conflicts (then the errno).
pub(crate) fn claim(new: Binding) -> Result<(), c_int> {
    let mut b = BOUND.lock();
    if let Some(e) = conflict(&b, &new) {
        return Err(e);
    }
    b.retain(|x| x.id != new.id);
    b.push(new);
    Ok(())
}

/// Forgets ID `id`'s port (its destruction).
pub(crate) fn release(id: usize) {
    BOUND.lock().retain(|x| x.id != id);
}

/// Whether an ID binding `addr` takes its own family only: the program's choice
/// (`option`), else always for IPv4, and for IPv6 as `net.ipv6.bindv6only` says.
pub(crate) fn afonly(addr: &SocketAddr, option: Option<bool>) -> bool {
    option.unwrap_or_else(|| {
        addr.is_ipv4()
            || std::fs::read_to_string("/proc/sys/net/ipv6/bindv6only")
                .is_ok_and(|s| s.trim() == "1")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(id: usize, addr: &str, afonly: bool, reuseaddr: bool) -> Binding {
        Binding {
            id,
            ps: 0x0106,
            addr: addr.parse().unwrap(),
            afonly,
            reuseaddr,
        }
    }

    #[test]
    fn wildcards_of_two_families_coexist_only_when_both_are_afonly() {
        let v6 = b(1, "[::]:7000", true, false);
        let v4 = b(2, "0.0.0.0:7000", true, false);
        assert_eq!(conflict(&[v6], &v4), None);
        let v6_all = b(1, "[::]:7000", false, false);
        assert_eq!(conflict(&[v6_all], &v4), Some(libc::EADDRNOTAVAIL));
    }

    #[test]
    fn one_port_twice_is_refused_as_linux_refuses_it() {
        let any = b(1, "0.0.0.0:7000", true, false);
        assert_eq!(
            conflict(&[any], &b(2, "0.0.0.0:7000", true, false)),
            Some(libc::EADDRNOTAVAIL)
        );
        assert_eq!(
            conflict(&[any], &b(2, "127.0.0.1:7000", true, false)),
            Some(libc::EADDRNOTAVAIL)
        );
        let one = b(1, "127.0.0.1:7000", true, false);
        assert_eq!(
            conflict(&[one], &b(2, "127.0.0.1:7000", true, false)),
            Some(libc::EADDRINUSE)
        );
        assert_eq!(conflict(&[one], &b(2, "127.0.0.2:7000", true, false)), None);
        assert_eq!(conflict(&[one], &b(2, "127.0.0.1:7001", true, false)), None);
        // REUSEADDR on both, another port space, or the ID itself: no conflict.
        assert_eq!(
            conflict(
                &[b(1, "0.0.0.0:7000", true, true)],
                &b(2, "0.0.0.0:7000", true, true)
            ),
            None
        );
        let mut udp = b(2, "0.0.0.0:7000", true, false);
        udp.ps = 0x0111;
        assert_eq!(conflict(&[any], &udp), None);
        assert_eq!(conflict(&[any], &b(1, "0.0.0.0:7000", true, false)), None);
    }

    #[test]
    fn ipv4_is_afonly_unless_told() {
        let a: SocketAddr = "0.0.0.0:1".parse().unwrap();
        assert!(afonly(&a, None));
        assert!(!afonly(&a, Some(false)));
        let a6: SocketAddr = "[::]:1".parse().unwrap();
        assert!(afonly(&a6, Some(true)));
    }
}
