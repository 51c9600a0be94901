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
    mut offset: u64,
    out: &mut [u8],
) -> Result<(), MemError> {
    match payload {
        Payload::Inline(v) => {
            let o = offset as usize;
            out.copy_from_slice(&v[o..o + out.len()]);
            Ok(())
        }
        Payload::Sges(sges) => {
            let mut at = 0;
            for s in sges {
                if at == out.len() {
                    break;
                }
                let l = u64::from(s.length);
                if offset >= l {
                    offset -= l;
                    continue;
                }
                let n = ((l - offset) as usize).min(out.len() - at);
                mem.read(
                    pd,
                    s.lkey,
                    s.addr + offset,
                    &mut out[at..at + n],
                    Access::LocalRead,
                )?;
                at += n;
                offset = 0;
            }
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
    mut offset: u64,
    data: &[u8],
) -> Result<(), ScatterError> {
    let mut at = 0;
    for s in sges {
        if at == data.len() {
            break;
        }
        let l = u64::from(s.length);
        if offset >= l {
            offset -= l;
            continue;
        }
        let n = ((l - offset) as usize).min(data.len() - at);
        mem.write(
            pd,
            s.lkey,
            s.addr + offset,
            &data[at..at + n],
            Access::LocalWrite,
        )
        .map_err(ScatterError::Mem)?;
        at += n;
        offset = 0;
    }
    if at < data.len() {
        Err(ScatterError::TooLong)
    } else {
        Ok(())
    }
}
