//! The address vector (`fi_av`): the peers an endpoint sends to, each an IP address and
//! port (never a GID index), named by a small integer, [`FiAddr`], in the order inserted
//! (`FI_AV_TABLE`). Also the form an endpoint's own address takes in a connection
//! request's private data, so that the passive side can say who a message came from.
//!
//! Threads and locks: `FabricAv` (softrdma's ranked lock) around the table, held for a
//! lookup or an insert only, under an endpoint's `FabricEp` or alone.

use crate::Map;
use crate::error::{FabricError, Result};
use crate::matching::{FI_ADDR_UNSPEC, FiAddr};
use softrdma::sync::{Guard, Lock, Rank};
use std::net::{IpAddr, SocketAddr};

/// The peers an endpoint sends to (`fid_av`, `FI_AV_TABLE`).
#[derive(Debug)]
pub struct AddressVector {
    table: Lock<Table>,
}

impl Default for AddressVector {
    fn default() -> Self {
        Self {
            table: Lock::new(Rank::FabricAv, Table::default()),
        }
    }
}

#[derive(Debug, Default)]
struct Table {
    addrs: Vec<Option<SocketAddr>>,
    by_addr: Map<SocketAddr, FiAddr>,
}

impl AddressVector {
    /// An empty address vector.
    pub fn new() -> Self {
        Self::default()
    }

    fn table(&self) -> Guard<'_, Table> {
        self.table.lock()
    }

    /// Inserts `addr` (`fi_av_insert`): its index, the one it had if it is in already.
    pub fn insert(&self, addr: SocketAddr) -> FiAddr {
        let mut t = self.table();
        if let Some(&f) = t.by_addr.get(&addr) {
            return f;
        }
        let f = t.addrs.len() as FiAddr;
        t.addrs.push(Some(addr));
        t.by_addr.insert(addr, f);
        f
    }

    /// The address of `f` (`fi_av_lookup`).
    pub fn lookup(&self, f: FiAddr) -> Result<SocketAddr> {
        let t = self.table();
        usize::try_from(f)
            .ok()
            .and_then(|i| t.addrs.get(i).copied().flatten())
            .ok_or(FabricError::NotInAv(f))
    }

    /// The index of `addr`, or [`FI_ADDR_UNSPEC`] when it is not in the vector (a message
    /// from it then completes with that source, `FI_ADDR_NOTAVAIL`).
    pub fn index_of(&self, addr: &SocketAddr) -> FiAddr {
        self.table()
            .by_addr
            .get(addr)
            .copied()
            .unwrap_or(FI_ADDR_UNSPEC)
    }

    /// Removes `f` (`fi_av_remove`); its index is not given out again.
    pub fn remove(&self, f: FiAddr) -> Result<()> {
        let mut t = self.table();
        let addr = usize::try_from(f)
            .ok()
            .and_then(|i| t.addrs.get_mut(i))
            .and_then(Option::take)
            .ok_or(FabricError::NotInAv(f))?;
        t.by_addr.remove(&addr);
        Ok(())
    }
}

/// Bytes of an endpoint address in a connection request: a version, the family (4 or 6),
/// the port and 16 bytes of address (an IPv4 one mapped).
pub(crate) const WIRE_LEN: usize = 20;

/// `addr` as a connection request's private data carries it.
pub(crate) fn to_wire(addr: SocketAddr) -> [u8; WIRE_LEN] {
    let mut b = [0u8; WIRE_LEN];
    b[0] = 1;
    let ip = match addr.ip() {
        IpAddr::V4(v4) => {
            b[1] = 4;
            v4.to_ipv6_mapped()
        }
        IpAddr::V6(v6) => {
            b[1] = 6;
            v6
        }
    };
    b[2..4].copy_from_slice(&addr.port().to_be_bytes());
    b[4..20].copy_from_slice(&ip.octets());
    b
}

/// The endpoint address in a connection request's private data (which the CM pads with
/// zeroes); `None` if it holds none.
pub(crate) fn from_wire(b: &[u8]) -> Option<SocketAddr> {
    let b = b.get(..WIRE_LEN)?;
    let port = u16::from_be_bytes([b[2], b[3]]);
    let v6 = std::net::Ipv6Addr::from(<[u8; 16]>::try_from(&b[4..20]).ok()?);
    let ip = match (b[0], b[1]) {
        (1, 4) => IpAddr::V4(v6.to_ipv4_mapped()?),
        (1, 6) => IpAddr::V6(v6),
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inserts_are_indexed_in_order_and_removed_ones_stay_gone() {
        let av = AddressVector::new();
        let (a, b): (SocketAddr, SocketAddr) =
            ("127.0.0.1:1".parse().unwrap(), "[::1]:2".parse().unwrap());
        assert_eq!((av.insert(a), av.insert(b), av.insert(a)), (0, 1, 0));
        assert_eq!(av.lookup(1).unwrap(), b);
        assert_eq!(av.index_of(&b), 1);
        av.remove(1).unwrap();
        assert!(matches!(av.lookup(1), Err(FabricError::NotInAv(1))));
        assert_eq!(av.index_of(&b), FI_ADDR_UNSPEC);
        assert!(av.remove(1).is_err());
        assert!(av.lookup(u64::MAX).is_err());
        assert_eq!(av.insert(b), 2, "a new index, never a removed one's");
    }

    #[test]
    fn endpoint_addresses_survive_the_private_data() {
        for a in ["127.0.0.7:9000", "[::1]:7"] {
            let a: SocketAddr = a.parse().unwrap();
            let mut pd = to_wire(a).to_vec();
            pd.resize(56, 0);
            assert_eq!(from_wire(&pd), Some(a));
        }
        assert_eq!(from_wire(&[0; 56]), None);
        assert_eq!(from_wire(&[1, 4]), None);
    }
}
