//! Packets waiting to be sent together: their bytes, or their headers and a payload lent
//! from a registered region, with where each goes; `send` sends them.

use crate::sync::Lock;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

mod send;

/// A region that lends payload bytes to zero-copy sends (the device's region table holds
/// them): a queued packet keeps it alive until the flush has handed its bytes to the kernel.
pub(crate) trait LentRegion: Send + Sync {
    /// Its key.
    fn key(&self) -> u32;
    /// The lent payload `addr..addr + len`, as a pointer valid while `self` lives; `None` if
    /// the range is not inside it or it does not lend.
    fn lent_ptr(&self, addr: u64, len: u64) -> Option<*const u8>;
}

/// Where lent payloads come from (the device's region table).
pub(crate) trait Lender {
    /// Region `key`, if it lends its bytes to sends.
    fn lend_region(&self, key: u32) -> Option<Arc<dyn LentRegion>>;
}

/// What a packet built in place is: its length, destination, lent payload, the source
/// address and UDP port its owed ICRC is for (see [`SendBatch::push_with`]), and its IP
/// TOS (traffic class) byte.
pub(crate) type Built = (
    usize,
    SocketAddr,
    Option<softrdma_proto::Lent>,
    Option<(IpAddr, u16)>,
    u8,
);

/// One queued packet: where its bytes are in the batch, and where it goes.
#[derive(Clone, Copy)]
struct Queued {
    /// Its bytes in the batch, `data[at..at + len]`: the whole packet, or with `ext` all of
    /// it but the payload.
    at: usize,
    len: usize,
    dst: SocketAddr,
    /// Its IPv4 TOS or IPv6 traffic class byte (0: the socket's own, which is 0).
    tos: u8,
    /// The IPv4 ID its ICRC is currently right for (the engine writes it for 0).
    ident: u16,
    /// The payload it takes from a region instead (a zero-copy send).
    ext: Option<Ext>,
    /// Built without its ICRC, which is owed for the source address and UDP port given
    /// here if it goes on a wire (see [`SendBatch::settle_icrc`]).
    owed: Option<(IpAddr, u16)>,
}

impl Queued {
    /// Its length on the wire.
    fn wire_len(&self) -> usize {
        self.len + self.ext.map_or(0, |e| e.len)
    }
}

/// A payload a queued packet takes from a region that the batch holds.
#[derive(Clone, Copy)]
struct Ext {
    /// The region, in the batch's `held`.
    region: usize,
    /// Its address in the region and its length.
    addr: u64,
    len: usize,
    /// Where it goes: after this many of the packet's bytes in the batch.
    at: usize,
}

/// A send batch's last route: path id, destination, connected socket.
type Route = (
    u64,
    SocketAddr,
    Option<std::sync::Weak<Lock<super::tx::Conn>>>,
);

/// Packets waiting to be sent together.
#[derive(Default)]
pub struct SendBatch {
    /// The packets, back to back in `data[..used]`. `data` keeps its length (the room it
    /// once needed) across flushes, so that a packet built in place is never zeroed first.
    data: Vec<u8>,
    used: usize,
    pkts: Vec<Queued>,
    /// Messages of the last flush, kept to spare allocations: (first packet, count, GSO size).
    groups: Vec<(usize, usize, usize)>,
    /// ICRC patches for IPv4 IDs other than 0.
    patches: softrdma_proto::endpoint::check::IdentPatches,
    /// The last destination looked up (with its path's id) and its connected socket: a
    /// thread mostly sends to one, and this spares a lock and a hash per flush. Weak, so that
    /// a thread's batch does not keep a closed device's socket open.
    route: Option<Route>,
    /// The regions that queued packets take payloads from, held until the flush has handed
    /// their bytes to the kernel (which copies them before the send call returns).
    held: Vec<Arc<dyn LentRegion>>,
    /// Whether a queued packet owes its ICRC, and the CRCs of the fixed part of those
    /// packets, per length (made on the first).
    owes: bool,
    icrc: Option<Box<softrdma_wire::icrc::IcrcPrefixes>>,
}

impl SendBatch {
    /// Room for `n` more bytes after the queued packets; where they start.
    fn room(&mut self, n: usize) -> usize {
        if self.data.len() < self.used + n {
            self.data.resize(self.used + n, 0);
        }
        self.used
    }

    /// Queues the packet of `len` bytes at `at` (the end of the queued ones).
    fn queue(
        &mut self,
        at: usize,
        len: usize,
        (dst, tos): (SocketAddr, u8),
        ext: Option<Ext>,
        owed: Option<(IpAddr, u16)>,
    ) {
        self.used = at + len;
        self.owes |= owed.is_some();
        self.pkts.push(Queued {
            at,
            len,
            dst,
            tos,
            ident: 0,
            ext,
            owed,
        });
    }

    /// Computes the ICRC of every packet built without it (for an IPv4 ID of 0, which the
    /// connected sockets' patches start from): those left after the same-host rings took
    /// theirs go on a wire.
    pub(crate) fn settle_icrc(&mut self) {
        if !std::mem::take(&mut self.owes) {
            return;
        }
        let icrc = self.icrc.get_or_insert_with(Default::default);
        for i in 0..self.pkts.len() {
            let p = self.pkts[i];
            let Some((src, sport)) = p.owed else {
                continue;
            };
            if p.len < 4 {
                continue;
            }
            let (s, d) = softrdma_proto::qp::icrc_pair(src, p.dst.ip());
            let crc = match p.ext {
                None => icrc
                    .compute_for(s, d, sport, &self.data[p.at..p.at + p.len - 4])
                    .unwrap_or(0),
                Some(e) => {
                    let payload = self.held[e.region]
                        .lent_ptr(e.addr, e.len as u64)
                        .unwrap_or(self.data.as_ptr());
                    let head = &self.data[p.at..p.at + e.at];
                    let pad = &self.data[p.at + e.at..p.at + p.len - 4];
                    icrc.compute_for_parts(s, d, sport, head, e.len + pad.len(), |r| {
                        // SAFETY: `hold` checked the range, and `held` keeps the region
                        // alive until the flush.
                        r.update(unsafe { std::slice::from_raw_parts(payload, e.len) });
                        r.update(pad);
                    })
                    .map_or(0, |(c, ())| c)
                }
            };
            let at = p.at + p.len - 4;
            self.data[at..at + 4].copy_from_slice(&crc.to_le_bytes());
            self.pkts[i].owed = None;
        }
    }

    /// Holds the region a lent payload comes from until the flush, and says where the
    /// payload is; `None` if the region no longer lends it (deregistered since the engine
    /// checked it, or the range is outside it).
    fn hold(&mut self, table: &impl Lender, l: &softrdma_proto::Lent) -> Option<Ext> {
        // A batch mostly sends from one or two regions: a look along `held` spares the
        // table's lock and a reference count per packet.
        let region = match self.held.iter().rposition(|r| r.key() == l.key) {
            Some(i) => i,
            None => {
                self.held.push(table.lend_region(l.key)?);
                self.held.len() - 1
            }
        };
        self.held[region].lent_ptr(l.addr, u64::from(l.len))?;
        Some(Ext {
            region,
            addr: l.addr,
            len: l.len as usize,
            at: usize::from(l.at),
        })
    }

    /// The pieces of packet `p` in order: its bytes in the batch, or with a lent payload
    /// the headers, the payload where it lies, and the pad and ICRC.
    fn pieces(&self, p: &Queued) -> [(*const u8, usize); 3] {
        let base = self.data[p.at..].as_ptr();
        match p.ext {
            None => [(base, p.len), (base, 0), (base, 0)],
            Some(e) => {
                // `hold` checked the range, and `held` keeps the region alive.
                let payload = self.held[e.region]
                    .lent_ptr(e.addr, e.len as u64)
                    .unwrap_or(base);
                // SAFETY: `e.at <= p.len`: the engine's headers come before its pad and ICRC.
                let tail = unsafe { base.add(e.at) };
                [(base, e.at), (payload, e.len), (tail, p.len - e.at)]
            }
        }
    }

    /// A copy of packet `p`, whole (for a capture).
    fn packet_bytes(&self, p: &Queued) -> std::borrow::Cow<'_, [u8]> {
        if p.ext.is_none() {
            return std::borrow::Cow::Borrowed(&self.data[p.at..p.at + p.len]);
        }
        let mut v = vec![0u8; p.wire_len()];
        let mut at = 0;
        for (ptr, len) in self.pieces(p) {
            if v.len() < at + len {
                v.resize(at + len, 0);
            }
            // SAFETY: each piece lies in `data` or in a region `held` keeps alive, and `v`
            // has room for it; a copy, not a reference, since a region's bytes may be
            // changing (see `crate::device::regions`).
            unsafe { std::ptr::copy_nonoverlapping(ptr, v.as_mut_ptr().add(at), len) };
            at += len;
        }
        v.truncate(at);
        std::borrow::Cow::Owned(v)
    }

    /// Adds a packet (a copy of `bytes`): the fault injector's, which built it whole.
    pub fn push(&mut self, bytes: &[u8], dst: SocketAddr, tos: u8) {
        let at = self.room(bytes.len());
        self.data[at..at + bytes.len()].copy_from_slice(bytes);
        self.queue(at, bytes.len(), (dst, tos), None, None);
    }

    /// Adds a packet built in place: `build(buf, at)` writes it at `buf[at..]` (growing `buf`
    /// as it needs) and says how long it is, where it goes and, for a zero-copy send, which
    /// payload of `table` it takes; or gives `None` for no packet. Returns `Some(true)` when
    /// it queued one, `Some(false)` when it dropped one whose region went away after the
    /// engine lent it (retransmission then finds the key gone and fails the WR).
    pub fn push_with(
        &mut self,
        table: &impl Lender,
        build: impl FnOnce(&mut Vec<u8>, usize) -> Option<Built>,
    ) -> Option<bool> {
        let at = self.used;
        let (len, dst, lent, owed, tos) = build(&mut self.data, at)?;
        let ext = match lent {
            None => None,
            Some(l) => match self.hold(table, &l) {
                Some(e) => Some(e),
                None => return Some(false),
            },
        };
        self.queue(at, len, (dst, tos), ext, owed);
        Some(true)
    }

    /// Every queued packet, whole, with its destination and TOS byte, in order.
    pub fn packets(&self) -> impl Iterator<Item = (std::borrow::Cow<'_, [u8]>, SocketAddr, u8)> {
        self.pkts
            .iter()
            .map(|p| (self.packet_bytes(p), p.dst, p.tos))
    }

    /// Offers every queued packet, as its pieces in order (unused pieces are empty) and
    /// its destination, to `take`, and keeps those it does not take, in order (the
    /// same-host path takes the packets its rings carry). Empties the batch if it takes
    /// them all.
    pub(crate) fn divert(
        &mut self,
        mut take: impl FnMut(&[(*const u8, usize); 3], SocketAddr) -> bool,
    ) {
        let mut pkts = std::mem::take(&mut self.pkts);
        pkts.retain(|p| !take(&self.pieces(p), p.dst));
        self.pkts = pkts;
        if self.pkts.is_empty() {
            self.clear();
        }
    }

    /// Drops every queued packet (and the regions they held).
    pub fn clear(&mut self) {
        self.used = 0;
        self.owes = false;
        self.pkts.clear();
        self.held.clear();
    }

    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.pkts.is_empty()
    }

    /// The first byte of every queued packet, in order.
    pub fn first_bytes(&self) -> impl Iterator<Item = u8> + '_ {
        self.pkts.iter().map(|p| self.data[p.at])
    }

    /// Moves every packet of `other` to the end of this batch.
    pub fn append(&mut self, other: &mut SendBatch) {
        let n = other.used;
        let base = self.room(n);
        self.data[base..base + n].copy_from_slice(&other.data[..n]);
        self.used += n;
        let regions = self.held.len();
        self.held.append(&mut other.held);
        self.owes |= std::mem::take(&mut other.owes);
        self.pkts.extend(other.pkts.drain(..).map(|mut p| {
            p.at += base;
            if let Some(e) = &mut p.ext {
                e.region += regions;
            }
            p
        }));
        other.used = 0;
    }
}
