//! Endpoint names as C sees them: `struct sockaddr_in` and `sockaddr_in6` (the
//! `FI_SOCKADDR_IN`/`_IN6` formats), to and from Rust's `SocketAddr`. A name is
//! the endpoint's IP address and the port it listens on: never a GID index.

use std::ffi::c_void;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// The C bytes of `a` (16 for IPv4, 28 for IPv6), as socket2 lays them out.
pub fn to_bytes(a: SocketAddr) -> Vec<u8> {
    let s = socket2::SockAddr::from(a);
    // SAFETY: `as_ptr` points at the address's `len()` bytes, all written (socket2 zeroes
    // its storage before it fills it).
    unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<u8>(), s.len() as usize).to_vec() }
}

/// The address in `len` bytes at `p`, if they hold a `sockaddr_in` or `sockaddr_in6`.
///
/// # Safety
/// `p` must be valid for `len` bytes of reads, or null.
pub unsafe fn from_c(p: *const c_void, len: usize) -> Option<SocketAddr> {
    if p.is_null() || len < size_of::<libc::sa_family_t>() {
        return None;
    }
    // SAFETY: `len` bytes at `p`, by this function's contract.
    let b = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) };
    from_bytes(b)
}

/// The address at `p`, its length known from its family.
///
/// # Safety
/// `p` must be null, or point to a family field followed by that family's whole struct.
pub unsafe fn from_c_sized(p: *const c_void) -> Option<SocketAddr> {
    if p.is_null() {
        return None;
    }
    // SAFETY: a family field at `p`, by this function's contract.
    let family = unsafe { p.cast::<libc::sa_family_t>().read_unaligned() };
    let len = match i32::from(family) {
        libc::AF_INET => size_of::<libc::sockaddr_in>(),
        libc::AF_INET6 => size_of::<libc::sockaddr_in6>(),
        _ => return None,
    };
    // SAFETY: that family's whole struct, by this function's contract.
    unsafe { from_c(p, len) }
}

/// The address in `b`, if it holds a `sockaddr_in` or `sockaddr_in6`.
pub fn from_bytes(b: &[u8]) -> Option<SocketAddr> {
    let family = u16::from_ne_bytes([*b.first()?, *b.get(1)?]);
    let port = u16::from_be_bytes([*b.get(2)?, *b.get(3)?]);
    match i32::from(family) {
        libc::AF_INET if b.len() >= size_of::<libc::sockaddr_in>() => {
            let ip = Ipv4Addr::new(b[4], b[5], b[6], b[7]);
            Some(SocketAddr::V4(SocketAddrV4::new(ip, port)))
        }
        libc::AF_INET6 if b.len() >= size_of::<libc::sockaddr_in6>() => {
            let ip: [u8; 16] = b[8..24].try_into().ok()?;
            let scope = u32::from_ne_bytes(b[24..28].try_into().ok()?);
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(ip),
                port,
                0,
                scope,
            )))
        }
        _ => None,
    }
}

/// The C bytes of `a` in memory from `malloc`, for an `fi_info` that libfabric frees:
/// the pointer and length.
pub fn malloced(a: SocketAddr) -> (*mut c_void, usize) {
    let b = to_bytes(a);
    // SAFETY: a fresh allocation of `b.len()` bytes, filled from `b`.
    unsafe {
        let p = libc::malloc(b.len());
        if p.is_null() {
            return (std::ptr::null_mut(), 0);
        }
        std::ptr::copy_nonoverlapping(b.as_ptr(), p.cast::<u8>(), b.len());
        (p, b.len())
    }
}

/// The name length of an address family.
pub fn len_for(ip: IpAddr) -> usize {
    match ip {
        IpAddr::V4(_) => size_of::<libc::sockaddr_in>(),
        IpAddr::V6(_) => size_of::<libc::sockaddr_in6>(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_go_to_c_and_back() {
        for a in ["127.0.0.5:7000", "[::1]:9", "[fe80::1%3]:4791"] {
            let a: SocketAddr = a.parse().unwrap();
            let b = to_bytes(a);
            assert_eq!(b.len(), len_for(a.ip()));
            assert_eq!(from_bytes(&b), Some(a));
        }
        assert_eq!(from_bytes(&[2, 0, 1]), None, "too short for its family");
        assert_eq!(from_bytes(&[99; 16]), None, "no such family");
    }
}
