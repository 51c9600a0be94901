//! RMA and atomics on the reliable-datagram endpoint (`fi_write`, `fi_writedata`,
//! `fi_read`, `fi_atomic`, `fi_fetch_atomic`, `fi_compare_atomic`): WRITEs, READs and
//! atomics to a peer's region (a [`Region`] of its domain), over the connection a send
//! would take. A WRITE with remote CQ data is followed on that connection by a WRITEDATA
//! header, which takes one of the target's receive slots and completes there with the
//! data and the length (`FI_REMOTE_CQ_DATA`): the connection's order puts it after the
//! WRITE's bytes.
//!
//! Runs under the endpoint's lock, from its calls and its progress.

use super::{Endpoint, Out, Queued, State, Wr};
use crate::buf::Buf;
use crate::cq::{Completion, flags};
use crate::domain::{Access, Domain, Region};
use crate::error::{FabricError, Result};
use crate::matching::{FI_ADDR_UNSPEC, FiAddr};
use crate::wire::{Header, Op};
use softrdma::{AccessFlags, SendOp};
use std::sync::Arc;

/// Options of an RMA or atomic.
#[derive(Debug, Clone, Copy, Default)]
pub struct RmaOpts {
    /// Remote CQ data for the target's completion (`fi_writedata`; writes only).
    pub data: Option<u64>,
    /// No completion entry (`fi_inject_write`, or an operation without `FI_COMPLETION`
    /// on an endpoint bound with `FI_SELECTIVE_COMPLETION`): counters still count it,
    /// and a failure still gives an error entry.
    pub silent: bool,
}

/// An atomic on one 8-byte-aligned 64-bit word of a peer's region; the device gives back
/// the word's value before the operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicOp {
    /// Adds to it (`fi_atomic` with `FI_SUM`); completes as a write.
    Add(u64),
    /// Adds to it and gives back the value before (`fi_fetch_atomic` with `FI_SUM`).
    FetchAdd(u64),
    /// Gives back its value (`fi_fetch_atomic` with `FI_ATOMIC_READ`).
    Read,
    /// Stores `swap` if it equals `compare`, and gives back the value before
    /// (`fi_compare_atomic` with `FI_CSWAP`).
    CompareSwap {
        /// The value it must hold.
        compare: u64,
        /// The value stored if it does.
        swap: u64,
    },
}

impl Endpoint {
    /// The domain the endpoint is on.
    pub fn domain(&self) -> Arc<Domain> {
        self.st().dom.clone()
    }

    /// Registers `buf` on the endpoint's domain for peers to reach with `access`
    /// (`fi_mr_reg`).
    pub fn register(&self, buf: Vec<u8>, access: Access) -> Result<Region> {
        self.domain().register(buf, access)
    }

    /// Writes `buf` at `addr` of `dest`'s region `key` (`fi_write`; with `opts.data`,
    /// `fi_writedata`, whose 64 bits the target's completion carries). The completion
    /// gives `buf` back.
    pub fn write(
        &self,
        dest: FiAddr,
        buf: impl Into<Buf>,
        (addr, key): (u64, u64),
        opts: RmaOpts,
        context: u64,
    ) -> Result<()> {
        let op = SendOp::Write {
            remote_addr: addr,
            rkey: rkey(key, "fi_write")?,
        };
        let buf = buf.into();
        let len = buf.len() as u64;
        let mut st = self.st();
        let c = st.rma(
            dest,
            buf,
            op,
            (flags::RMA | flags::WRITE, opts.silent),
            context,
        )?;
        if let Some(data) = opts.data {
            let hdr = Header {
                op: Op::WriteData,
                tagged: false,
                tag: 0,
                data: Some(data),
                len,
                msg_id: 0,
            };
            let q = Queued {
                out: Out::Bytes(hdr.emit().to_vec()),
                op: SendOp::Send,
                wr: Wr::Fin,
            };
            st.enqueue(c, q);
        }
        Ok(())
    }

    /// Reads `buf.len()` bytes at `addr` of `dest`'s region `key` into `buf` (`fi_read`);
    /// the completion gives `buf` back, filled.
    pub fn read(
        &self,
        dest: FiAddr,
        buf: impl Into<Buf>,
        (addr, key): (u64, u64),
        opts: RmaOpts,
        context: u64,
    ) -> Result<()> {
        no_data(opts, "fi_read")?;
        let op = SendOp::Read {
            remote_addr: addr,
            rkey: rkey(key, "fi_read")?,
        };
        let f = (flags::RMA | flags::READ, opts.silent);
        self.st().rma(dest, buf.into(), op, f, context).map(drop)
    }

    /// Applies `op` to the 64-bit word at `addr` (8-byte aligned) of `dest`'s region
    /// `key`. `result` (8 bytes) comes back in the completion holding the word's value
    /// before (in host order), for every op but [`AtomicOp::Add`], which completes as a
    /// write.
    pub fn atomic(
        &self,
        dest: FiAddr,
        op: AtomicOp,
        (addr, key): (u64, u64),
        result: impl Into<Buf>,
        opts: RmaOpts,
        context: u64,
    ) -> Result<()> {
        no_data(opts, "fi_atomic")?;
        let result = result.into();
        let (send_op, kind) = atomic_op(op, (addr, key), &result)?;
        let f = (flags::ATOMIC | kind, opts.silent);
        self.st().rma(dest, result, send_op, f, context).map(drop)
    }
}

/// The device's operation for atomic `op` on the word at `addr` of region `key`, and the
/// completion's kind (`FI_WRITE` for an add that fetches nothing, else `FI_READ`), after
/// checking the 8-byte `result` buffer and the alignment; for any endpoint type.
pub(crate) fn atomic_op(
    op: AtomicOp,
    (addr, key): (u64, u64),
    result: &Buf,
) -> Result<(SendOp, u64)> {
    if result.len() != 8 {
        return Err(FabricError::Invalid {
            what: "fi_atomic",
            why: format!("the result buffer has {} bytes, not 8", result.len()),
        });
    }
    // IBTA 9.4.5: an atomic's address is 8-byte aligned (the responder would NAK it as an
    // invalid request and end the connection).
    if addr % 8 != 0 {
        return Err(FabricError::Invalid {
            what: "fi_atomic",
            why: format!("address {addr:#x} is not 8-byte aligned"),
        });
    }
    let rkey = rkey(key, "fi_atomic")?;
    let fetch_add = |add| SendOp::FetchAdd {
        remote_addr: addr,
        rkey,
        add,
    };
    Ok(match op {
        AtomicOp::Add(add) => (fetch_add(add), flags::WRITE),
        AtomicOp::FetchAdd(add) => (fetch_add(add), flags::READ),
        AtomicOp::Read => (fetch_add(0), flags::READ),
        AtomicOp::CompareSwap { compare, swap } => (
            SendOp::CompareSwap {
                remote_addr: addr,
                rkey,
                compare,
                swap,
            },
            flags::READ,
        ),
    })
}

/// Refuses remote CQ data on an operation that cannot carry it.
pub(crate) fn no_data(opts: RmaOpts, what: &'static str) -> Result<()> {
    match opts.data {
        Some(_) => Err(FabricError::Invalid {
            what,
            why: "only a write carries remote CQ data".into(),
        }),
        None => Ok(()),
    }
}

/// A region key as the device takes it: 32 bits.
pub(crate) fn rkey(key: u64, what: &'static str) -> Result<u32> {
    u32::try_from(key).map_err(|_| FabricError::Invalid {
        what,
        why: format!("key {key:#x} is not one this provider gives (32 bits)"),
    })
}

impl State {
    /// Queues `op` from or into `buf` on the connection to `dest`, whose index it gives;
    /// it completes with `flags`, silently with `silent`.
    fn rma(
        &mut self,
        dest: FiAddr,
        buf: Buf,
        op: SendOp,
        (flags, silent): (u64, bool),
        context: u64,
    ) -> Result<usize> {
        let peer = self.av.lookup(dest)?;
        let c = self.conn_to(peer)?;
        let len = buf.len();
        let reg = buf.register(self.dom.pd(), len, AccessFlags::LOCAL_WRITE)?;
        let q = Queued {
            out: Out::Registered,
            op,
            wr: Wr::Rma {
                context,
                flags,
                reg,
                silent,
            },
        };
        self.enqueue(c, q);
        Ok(c)
    }

    /// A peer's WRITE with remote CQ data landed (`len` bytes): its completion.
    pub(super) fn remote_write(&self, len: usize, data: u64) {
        self.rx_cq.push(Completion {
            context: 0,
            flags: flags::RMA | flags::REMOTE_WRITE | flags::REMOTE_CQ_DATA,
            len,
            buf: Vec::new().into(),
            data: Some(data),
            tag: 0,
            src: FI_ADDR_UNSPEC,
            error: 0,
            olen: 0,
            offset: 0,
        });
    }
}
