//! The address vector (`fid_av`): the fabric layer's [`AddressVector`], whose `fi_addr_t`
//! is the index of the name (an IP address and port) in insertion order, for
//! `FI_AV_TABLE` and `FI_AV_MAP` alike (a map may hand out any value; this one hands out
//! the table's).

use crate::abi::*;
use crate::domain::Domain;
use crate::entry::{self, enosys, guard_int, object};
use crate::sockaddr;
use softrdma_fabric::AddressVector;
use std::ffi::{c_char, c_int, c_void};
use std::sync::Arc;

/// An address vector.
#[repr(C)]
pub struct Av {
    fid: fid_av,
    /// The table, shared with the endpoints bound to it.
    pub av: Arc<AddressVector>,
    /// The name length of the domain's family (every name inserted has it).
    name_len: usize,
}

object!(Av, FI_CLASS_AV, AV_FI_OPS);

static AV_OPS: Ops<fi_ops_av> = Ops(fi_ops_av {
    size: size_of::<fi_ops_av>(),
    insert: av_insert as Slot,
    insertsvc: av_insertsvc as Slot,
    insertsym: enosys as Slot,
    remove: av_remove as Slot,
    lookup: av_lookup as Slot,
    straddr: av_straddr as Slot,
    av_set: enosys as Slot,
});

/// `fi_av_open`.
pub unsafe extern "C" fn av_open(
    domain: *mut fid_domain,
    attr: *mut fi_av_attr,
    av: *mut *mut fid_av,
    context: *mut c_void,
) -> c_int {
    guard_int(|| {
        let d = entry::get::<Domain>(domain.cast())?;
        // SAFETY: libfabric's attr, valid or null.
        let attr = unsafe { attr.as_ref() }.ok_or(FI_EINVAL)?;
        if av.is_null() {
            return Err(FI_EINVAL);
        }
        if attr.type_ > FI_AV_TABLE || attr.rx_ctx_bits != 0 || !attr.name.is_null() {
            // Named (shared) AVs and scalable endpoints' context bits are not offered.
            return Err(FI_ENOSYS);
        }
        let a = entry::open(Av {
            fid: fid_av {
                fid: fid {
                    fclass: FI_CLASS_AV,
                    context,
                    ops: &AV_FI_OPS.0,
                },
                ops: &AV_OPS.0,
            },
            av: Arc::new(AddressVector::new()),
            name_len: sockaddr::len_for(d.dev.info.ip),
        });
        // SAFETY: `av` is writable, checked non-null.
        unsafe { *av = a.cast() };
        Ok(0)
    })
}

/// `fi_av_insert`: `count` names laid end to end; each one that is not a name of this
/// domain's family gets `FI_ADDR_NOTAVAIL` and is not counted.
unsafe extern "C" fn av_insert(
    av: *mut fid_av,
    addr: *const c_void,
    count: usize,
    fi_addr: *mut fi_addr_t,
    flags: u64,
    _context: *mut c_void,
) -> c_int {
    guard_int(|| {
        let a = entry::get::<Av>(av.cast())?;
        if flags != 0 {
            return Err(FI_EBADFLAGS);
        }
        if addr.is_null() && count != 0 {
            return Err(FI_EINVAL);
        }
        let mut done = 0;
        for i in 0..count {
            // SAFETY: the caller's `count` names of this family's length at `addr`.
            let name = unsafe {
                sockaddr::from_c(addr.cast::<u8>().add(i * a.name_len).cast(), a.name_len)
            };
            let f = match name {
                Some(n) => {
                    done += 1;
                    a.av.insert(n)
                }
                None => FI_ADDR_UNSPEC,
            };
            if !fi_addr.is_null() {
                // SAFETY: the caller's array of `count` addresses.
                unsafe { *fi_addr.add(i) = f };
            }
        }
        Ok(done)
    })
}

/// `fi_av_insertsvc`: one host and port.
unsafe extern "C" fn av_insertsvc(
    av: *mut fid_av,
    node: *const c_char,
    service: *const c_char,
    fi_addr: *mut fi_addr_t,
    flags: u64,
    _context: *mut c_void,
) -> c_int {
    guard_int(|| {
        let a = entry::get::<Av>(av.cast())?;
        if flags != 0 {
            return Err(FI_EBADFLAGS);
        }
        if node.is_null() || service.is_null() {
            return Err(FI_EINVAL);
        }
        // SAFETY: C strings from the caller.
        let (n, s) = unsafe {
            (
                std::ffi::CStr::from_ptr(node).to_string_lossy(),
                std::ffi::CStr::from_ptr(service).to_string_lossy(),
            )
        };
        let port: u16 = s.parse().map_err(|_| FI_EINVAL)?;
        let ip: std::net::IpAddr = n.parse().map_err(|_| FI_EINVAL)?;
        let f = a.av.insert(std::net::SocketAddr::new(ip, port));
        if !fi_addr.is_null() {
            // SAFETY: the caller's address.
            unsafe { *fi_addr = f };
        }
        Ok(1)
    })
}

unsafe extern "C" fn av_remove(
    av: *mut fid_av,
    fi_addr: *mut fi_addr_t,
    count: usize,
    _flags: u64,
) -> c_int {
    guard_int(|| {
        let a = entry::get::<Av>(av.cast())?;
        if fi_addr.is_null() && count != 0 {
            return Err(FI_EINVAL);
        }
        for i in 0..count {
            // SAFETY: the caller's `count` addresses.
            let f = unsafe { *fi_addr.add(i) };
            a.av.remove(f).map_err(|_| FI_EINVAL)?;
        }
        Ok(0)
    })
}

unsafe extern "C" fn av_lookup(
    av: *mut fid_av,
    fi_addr: fi_addr_t,
    addr: *mut c_void,
    addrlen: *mut usize,
) -> c_int {
    guard_int(|| {
        let a = entry::get::<Av>(av.cast())?;
        if addrlen.is_null() {
            return Err(FI_EINVAL);
        }
        let name = a.av.lookup(fi_addr).map_err(|_| FI_ENODATA)?;
        copy_name(name, addr, addrlen)
    })
}

/// Copies `name` into the caller's `addr` of `*addrlen` bytes (as much as fits), and sets
/// `*addrlen` to its whole length: `-FI_ETOOSMALL` if it did not fit (`fi_getname`'s and
/// `fi_av_lookup`'s rule).
pub fn copy_name(
    name: std::net::SocketAddr,
    addr: *mut c_void,
    addrlen: *mut usize,
) -> Result<c_int, c_int> {
    let b = sockaddr::to_bytes(name);
    // SAFETY: the caller's length, checked non-null by each entry point.
    let room = unsafe { *addrlen };
    let n = if addr.is_null() { 0 } else { room.min(b.len()) };
    // SAFETY: `n <= room` bytes of the caller's buffer; its length back.
    unsafe {
        std::ptr::copy_nonoverlapping(b.as_ptr(), addr.cast::<u8>(), n);
        *addrlen = b.len();
    }
    if n < b.len() {
        Err(FI_ETOOSMALL)
    } else {
        Ok(0)
    }
}

unsafe extern "C" fn av_straddr(
    _av: *mut fid_av,
    addr: *const c_void,
    buf: *mut c_char,
    len: *mut usize,
) -> *const c_char {
    if len.is_null() {
        return std::ptr::null();
    }
    // SAFETY: a name at `addr`, as libfabric passes: its length follows from its family.
    let name = unsafe { sockaddr::from_c_sized(addr) };
    let s = match name {
        Some(n) => format!("fi_sockaddr_in{}://{n}", if n.is_ipv6() { "6" } else { "" }),
        None => "(not a softrdma name)".to_owned(),
    };
    // SAFETY: the caller's buffer of `*len` bytes; the whole length goes back.
    unsafe {
        let room = *len;
        *len = s.len() + 1;
        crate::entry::c_string_into(&s, buf, room)
    }
}
