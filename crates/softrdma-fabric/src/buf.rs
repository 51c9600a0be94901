//! The memory an operation works on: a buffer the endpoint owns until the operation's
//! completion hands it back (the Rust face), or memory its caller owns and promises to
//! keep valid until then (the C face, where `fi_send` and `fi_recv` take a pointer).
//!
//! A buffer that goes to the device by registration (a rendezvous send, the receive a
//! rendezvous READ lands in, an RMA) becomes a [`Registered`] for as long as the device
//! may touch it, and turns back into the same kind of buffer afterwards.

use softrdma::{AccessFlags, MemoryRegion, ProtectionDomain};

/// The memory of one operation.
pub struct Buf(Inner);

enum Inner {
    Owned(Vec<u8>),
    /// The caller's memory, `len` bytes at `addr` (see [`Buf::raw`]).
    Raw {
        addr: usize,
        len: usize,
    },
}

impl Buf {
    /// The caller's memory, `len` bytes at `ptr` (as `fi_recv`'s `buf`): the completion
    /// names it again and gives nothing back.
    ///
    /// # Safety
    /// `ptr..ptr + len` must be valid for reads and writes, and not be touched by the
    /// caller, from this call until the operation's completion is read (or the endpoint
    /// is closed); the device and peers with its key may read and write it until then.
    pub unsafe fn raw(ptr: *mut u8, len: usize) -> Self {
        Self(Inner::Raw {
            addr: ptr as usize,
            len,
        })
    }

    /// The memory's address (a completion's `buf`).
    pub fn addr(&self) -> u64 {
        match &self.0 {
            Inner::Owned(v) => v.as_ptr() as u64,
            Inner::Raw { addr, .. } => *addr as u64,
        }
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        match &self.0 {
            Inner::Owned(v) => v,
            Inner::Raw { len: 0, .. } => &[],
            // SAFETY: `Buf::raw`'s caller keeps the memory valid and untouched until the
            // operation completes, and the buffer lives only as long as the operation.
            Inner::Raw { addr, len } => unsafe {
                std::slice::from_raw_parts(*addr as *const u8, *len)
            },
        }
    }

    /// The bytes, to fill.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        match &mut self.0 {
            Inner::Owned(v) => v,
            Inner::Raw { len: 0, .. } => &mut [],
            // SAFETY: as `as_slice`; `&mut self` makes this the only view.
            Inner::Raw { addr, len } => unsafe {
                std::slice::from_raw_parts_mut(*addr as *mut u8, *len)
            },
        }
    }

    /// An owned buffer back as its vector; the caller's memory gives an empty one.
    pub fn into_vec(self) -> Vec<u8> {
        match self.0 {
            Inner::Owned(v) => v,
            Inner::Raw { .. } => Vec::new(),
        }
    }

    /// Registers the first `len` bytes (at most all of them) for the device with
    /// `access`.
    pub(crate) fn register(
        self,
        pd: &ProtectionDomain,
        len: usize,
        access: AccessFlags,
    ) -> softrdma::Result<Registered> {
        match self.0 {
            Inner::Owned(mut v) => {
                let cap = v.len();
                v.truncate(len);
                let mr = pd.register(v, access)?;
                Ok(Registered {
                    mr,
                    back: Back::Owned { cap },
                })
            }
            Inner::Raw { addr, len: cap } => {
                // SAFETY: `Buf::raw`'s contract covers `addr..addr + cap`, and the region
                // lives no longer than the operation.
                let mr = unsafe { pd.register_raw(addr as *mut u8, len.min(cap), access)? };
                Ok(Registered {
                    mr,
                    back: Back::Raw { addr, len: cap },
                })
            }
        }
    }
}

impl Buf {
    /// Where `len` bytes from `off` of this buffer lie, as a completion names a message in
    /// a multi-receive buffer: the same memory for the caller's (`Buf::raw`), nothing for
    /// an owned vector (which comes back whole with the buffer's last completion).
    pub(crate) fn view(&self, off: usize, len: usize) -> Buf {
        match &self.0 {
            Inner::Raw { addr, len: cap } if off.saturating_add(len) <= *cap => Self(Inner::Raw {
                addr: addr + off,
                len,
            }),
            _ => Self(Inner::Owned(Vec::new())),
        }
    }
}

impl From<Vec<u8>> for Buf {
    fn from(v: Vec<u8>) -> Self {
        Self(Inner::Owned(v))
    }
}

impl std::ops::Deref for Buf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::ops::DerefMut for Buf {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

impl PartialEq<Vec<u8>> for Buf {
    fn eq(&self, other: &Vec<u8>) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl PartialEq<[u8]> for Buf {
    fn eq(&self, other: &[u8]) -> bool {
        self.as_slice() == other
    }
}

impl std::fmt::Debug for Buf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Inner::Owned(v) => write!(f, "Buf({} bytes)", v.len()),
            Inner::Raw { addr, len } => write!(f, "Buf({len} bytes at {addr:#x})"),
        }
    }
}

/// A buffer registered with the device while an operation uses it.
pub(crate) struct Registered {
    pub(crate) mr: MemoryRegion,
    back: Back,
}

/// What the buffer was before its registration.
enum Back {
    /// An owned vector of `cap` bytes (of which the region may hold fewer).
    Owned {
        cap: usize,
    },
    Raw {
        addr: usize,
        len: usize,
    },
}

impl Registered {
    /// The buffer again, once the device is done with it, at its whole length.
    pub(crate) fn back(self) -> Buf {
        match self.back {
            Back::Owned { cap } => {
                let mut v = self.mr.into_vec().unwrap_or_default();
                v.resize(cap, 0);
                Buf::from(v)
            }
            Back::Raw { addr, len } => Buf(Inner::Raw { addr, len }),
        }
    }
}
