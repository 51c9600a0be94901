//! Moving a WR's data between its scatter/gather list and packets, through [`Memory`] and
//! its checks.
//!
//! Owns the gather of a send's payload and the scatter of received data into SGEs, shared
//! by the requester (send payloads, READ responses, atomic results) and the responder
//! (receives). Calls only [`Memory`].

use super::*;
use crate::memory::{Access, MemError};

/// The `len` bytes of a send's data at `offset` as one range of memory (its key and first
/// address), when they lie inside one SGE.
pub(super) fn within_one_sge(payload: &Payload, mut offset: u64, len: u64) -> Option<Sge> {
    let Payload::Sges(sges) = payload else {
        return None;
    };
    for s in sges {
        let l = u64::from(s.length);
        if offset < l {
            return (offset + len <= l).then_some(Sge {
                addr: s.addr + offset,
                length: len as u32,
                lkey: s.lkey,
            });
        }
        offset -= l;
    }
    None
}

/// Reads `out.len()` bytes of a send's data starting at `offset`.
pub(crate) fn gather(
    mem: &dyn Memory,
    pd: Pd,
    payload: &Payload,
    offset: u64,
    out: &mut [u8],
) -> Result<(), MemError> {
    match payload {
        Payload::Inline(v) => {
            let o = offset as usize;
            out.copy_from_slice(&v[o..o + out.len()]);
            Ok(())
        }
        Payload::Sges(sges) => {
            pieces(sges, offset, out.len(), |lkey, addr, range| {
                mem.read(pd, lkey, addr, &mut out[range], Access::LocalRead)
            })?;
            Ok(())
        }
    }
}

/// Why a scatter failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScatterError {
    /// The data does not fit in the SGEs.
    TooLong,
    /// An SGE was refused.
    Mem(MemError),
}

/// Writes `data` into the SGEs starting at byte `offset` of the list.
pub(crate) fn scatter(
    mem: &dyn Memory,
    pd: Pd,
    sges: &[Sge],
    offset: u64,
    data: &[u8],
) -> Result<(), ScatterError> {
    let placed = pieces(sges, offset, data.len(), |lkey, addr, range| {
        mem.write(pd, lkey, addr, &data[range], Access::LocalWrite)
    })
    .map_err(ScatterError::Mem)?;
    if placed < data.len() {
        Err(ScatterError::TooLong)
    } else {
        Ok(())
    }
}

/// Walks the SGEs for `len` bytes of their data from byte `offset` of the list, handing
/// `each` one piece at a time: its key, its address, and where it falls in the `len`
/// bytes. Returns how many of the `len` bytes the list held (fewer when it ends first).
#[inline(always)]
fn pieces<E>(
    sges: &[Sge],
    mut offset: u64,
    len: usize,
    mut each: impl FnMut(u32, u64, core::ops::Range<usize>) -> Result<(), E>,
) -> Result<usize, E> {
    let mut at = 0;
    for s in sges {
        if at == len {
            break;
        }
        let l = u64::from(s.length);
        if offset >= l {
            offset -= l;
            continue;
        }
        let n = ((l - offset) as usize).min(len - at);
        each(s.lkey, s.addr + offset, at..at + n)?;
        at += n;
        offset = 0;
    }
    Ok(at)
}
