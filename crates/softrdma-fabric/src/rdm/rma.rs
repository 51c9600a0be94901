//! RMA on the reliable-datagram endpoint (`fi_write`, `fi_writedata`, `fi_read`): memory
//! registered for peers ([`Region`], its key good on every connection of the endpoint, as
//! they share one protection domain), and WRITEs and READs to a peer's region, over the
//! connection a send would take. A WRITE with remote CQ data takes one of the target's
//! receive slots and completes there with the data (`FI_REMOTE_CQ_DATA`).
//!
//! Runs under the endpoint's lock, from its calls and its progress.

use super::{Endpoint, Out, Queued, State, Wr};
use crate::buf::Buf;
use crate::cq::{Completion, flags};
use crate::error::Result;
use crate::matching::{FI_ADDR_UNSPEC, FiAddr};
use softrdma::{AccessFlags, MemoryRegion, SendOp};

/// What peers may do to a [`Region`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read it (`FI_REMOTE_READ`).
    Read,
    /// Write it (`FI_REMOTE_WRITE`).
    Write,
    /// Both.
    ReadWrite,
}

impl Access {
    fn flags(self) -> AccessFlags {
        match self {
            Access::Read => AccessFlags::REMOTE_READ,
            Access::Write => AccessFlags::REMOTE_WRITE,
            Access::ReadWrite => AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
        }
    }
}

/// Memory that peers of the endpoint read or write (`fid_mr`), by [`Region::key`] and
/// addresses from [`Region::addr`] on.
#[derive(Debug)]
pub struct Region(MemoryRegion);

impl Region {
    /// The key peers name it by (`fi_mr_key`).
    pub fn key(&self) -> u64 {
        u64::from(self.0.rkey())
    }

    /// The address of its first byte, as peers name it (`FI_MR_VIRT_ADDR`).
    pub fn addr(&self) -> u64 {
        self.0.addr()
    }

    /// A copy of its bytes now.
    pub fn to_vec(&self) -> Vec<u8> {
        self.0.to_vec()
    }

    /// Deregisters it (`fi_close`) and gives its buffer back.
    pub fn into_vec(self) -> Option<Vec<u8>> {
        self.0.into_vec()
    }
}

impl Endpoint {
    /// Registers `buf` for peers to reach with `access` (`fi_mr_reg`).
    pub fn register(&self, buf: Vec<u8>, access: Access) -> Result<Region> {
        let a = AccessFlags::LOCAL_WRITE | access.flags();
        Ok(Region(self.st().pd.register(buf, a)?))
    }

    /// Registers the caller's memory for peers to reach with `access` (`fi_mr_reg` on the
    /// C face).
    ///
    /// # Safety
    /// As [`Buf::raw`], until the region is dropped.
    pub unsafe fn register_raw(&self, ptr: *mut u8, len: usize, access: Access) -> Result<Region> {
        let a = AccessFlags::LOCAL_WRITE | access.flags();
        // SAFETY: forwarded from this function's contract.
        Ok(Region(unsafe { self.st().pd.register_raw(ptr, len, a)? }))
    }

    /// Writes `buf` at `addr` of `dest`'s region `key` (`fi_write`; with `data`,
    /// `fi_writedata`, whose low 32 bits the target's completion carries). The
    /// completion gives `buf` back.
    pub fn write(
        &self,
        dest: FiAddr,
        buf: impl Into<Buf>,
        addr: u64,
        key: u64,
        data: Option<u32>,
        context: u64,
    ) -> Result<()> {
        let rkey = rkey(key)?;
        let op = match data {
            Some(imm) => SendOp::WriteWithImm {
                remote_addr: addr,
                rkey,
                imm,
            },
            None => SendOp::Write {
                remote_addr: addr,
                rkey,
            },
        };
        self.st()
            .rma(dest, buf.into(), op, flags::RMA | flags::WRITE, context)
    }

    /// Reads `buf.len()` bytes at `addr` of `dest`'s region `key` into `buf` (`fi_read`);
    /// the completion gives `buf` back, filled.
    pub fn read(
        &self,
        dest: FiAddr,
        buf: impl Into<Buf>,
        addr: u64,
        key: u64,
        context: u64,
    ) -> Result<()> {
        let op = SendOp::Read {
            remote_addr: addr,
            rkey: rkey(key)?,
        };
        self.st()
            .rma(dest, buf.into(), op, flags::RMA | flags::READ, context)
    }
}

/// A region key as the device takes it: 32 bits.
fn rkey(key: u64) -> Result<u32> {
    u32::try_from(key).map_err(|_| crate::error::FabricError::Invalid {
        what: "fi_write/fi_read",
        why: format!("key {key:#x} is not one this provider gives (32 bits)"),
    })
}

impl State {
    fn rma(&mut self, dest: FiAddr, buf: Buf, op: SendOp, flags: u64, context: u64) -> Result<()> {
        let peer = self.av.lookup(dest)?;
        let c = self.conn_to(peer)?;
        let len = buf.len();
        let reg = buf.register(&self.pd, len, AccessFlags::LOCAL_WRITE)?;
        let q = Queued {
            out: Out::Registered,
            op,
            wr: Wr::Rma {
                context,
                flags,
                reg,
                silent: false,
            },
        };
        self.enqueue(c, q);
        Ok(())
    }

    /// A peer's WRITE with remote CQ data landed (`len` bytes): its completion.
    pub(super) fn remote_write(&self, len: usize, imm: u32) {
        self.rx_cq.push(Completion {
            context: 0,
            flags: flags::RMA | flags::REMOTE_WRITE | flags::REMOTE_CQ_DATA,
            len,
            buf: Vec::new().into(),
            data: Some(u64::from(imm)),
            tag: 0,
            src: FI_ADDR_UNSPEC,
            error: 0,
            olen: 0,
        });
    }
}
