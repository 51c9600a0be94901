//! Memory regions (`struct ibv_mr`): a buffer registered with the device's region table.
//!
//! The region's bytes are reached only through raw-pointer copies (see
//! `crate::device::regions`): a peer may be writing them at the same time.

use crate::device::regions::{MrInner, MrTable};
use crate::error::{Error, Result};
use softrdma_proto::AccessFlags;
use std::sync::Arc;

/// A registered memory region (`struct ibv_mr`). Dropping it deregisters it.
pub struct MemoryRegion {
    pub(crate) inner: Arc<MrInner>,
    pub(crate) table: Arc<MrTable>,
}

const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<MemoryRegion>();
};

impl std::fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("addr", &format_args!("{:#x}", self.inner.addr))
            .field("len", &self.inner.len)
            .field("lkey", &format_args!("{:#x}", self.inner.key))
            .finish()
    }
}

impl MemoryRegion {
    /// The local key.
    pub fn lkey(&self) -> u32 {
        self.inner.key
    }
    /// The remote key.
    pub fn rkey(&self) -> u32 {
        self.inner.key
    }
    /// The region's first virtual address (what peers put in RETHs).
    pub fn addr(&self) -> u64 {
        self.inner.addr
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.inner.len as usize
    }
    /// Never true: regions have at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }
    /// Access rights.
    pub fn access(&self) -> AccessFlags {
        self.inner.access
    }
    /// An SGE over `len` bytes at `offset` of the region.
    pub fn sge(&self, offset: u64, len: u32) -> softrdma_proto::Sge {
        softrdma_proto::Sge {
            addr: self.inner.addr + offset,
            length: len,
            lkey: self.inner.key,
        }
    }

    fn outside(&self, verb: &'static str, offset: usize, len: usize) -> Error {
        Error::OutsideRegion {
            verb,
            offset: offset as u64,
            len: len as u64,
            region_len: self.inner.len,
        }
    }

    /// Copies `buf.len()` bytes at `offset` out of the region.
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
        let p = self
            .inner
            .range(self.inner.addr + offset as u64, buf.len() as u64)
            .ok_or_else(|| self.outside("MemoryRegion::read", offset, buf.len()))?;
        // SAFETY: the range is inside the region, which `self` keeps alive.
        unsafe { std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }

    /// Copies `data` into the region at `offset`.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        let p = self
            .inner
            .range(self.inner.addr + offset as u64, data.len() as u64)
            .ok_or_else(|| self.outside("MemoryRegion::write", offset, data.len()))?;
        // SAFETY: the range is inside the region, which `self` keeps alive.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
        Ok(())
    }

    /// Deregisters the region and gives back the buffer it owned (`None` for a raw region,
    /// or while the device is still using it).
    pub fn into_vec(self) -> Option<Vec<u8>> {
        let me = std::mem::ManuallyDrop::new(self);
        // SAFETY: `me` is never used or dropped again, so each field is moved out exactly
        // once; `MemoryRegion::drop` does not run (`take_owned` deregisters instead).
        let (inner, table) = unsafe { (std::ptr::read(&me.inner), std::ptr::read(&me.table)) };
        let key = inner.key;
        drop(inner);
        table.take_owned(key)
    }

    /// A copy of the whole region.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0; self.len()];
        // The range is the whole region, so this cannot fail.
        let _ = self.read(0, &mut v);
        v
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        self.table.deregister(self.inner.key);
    }
}
