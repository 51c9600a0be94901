//! `rdma_getaddrinfo` and `rdma_freeaddrinfo`, as librdmacm (rdma-core 44) has them.
//!
//! Callers lean on more than the man page says, so this follows librdmacm's behaviour:
//! - With no node and no service, the hints themselves are the answer: their flags,
//!   family, QP type and port space, and copies of their addresses. libfabric's verbs
//!   provider asks this way for every interface address (`vrb_get_rai_id`).
//! - Otherwise the system's `getaddrinfo` resolves them, with the hints turned into socket
//!   hints (the QP type picks the socket type, the port space the protocol), and the first
//!   result is the source (`RAI_PASSIVE`) or the destination address. A hint's source
//!   address is kept when the result has none.
//! - Every block of the result is `malloc`ed, and `rdma_freeaddrinfo` `free`s each: callers
//!   swap addresses in and out with their own `malloc` and `free` (libfabric replaces
//!   `ai_src_addr` with a `sockaddr_ib` of its own), so nothing here may come from another
//!   allocator.
//!
//! No locks, no threads: each call works on its arguments alone.

use crate::abi::*;
use crate::ffi::{Ret, Verb, entry};
use std::ffi::{c_char, c_int};
use std::ptr::null_mut;

/// A `malloc`ed copy of `len` bytes at `src` (a caller's sockaddr); NULL when out of memory.
///
/// # Safety
/// `src` points to `len` readable bytes.
unsafe fn copy_addr(src: *const libc::sockaddr, len: libc::socklen_t) -> *mut libc::sockaddr {
    let len = len as usize;
    // SAFETY: a fresh block of `len` bytes (at least one, so never a NULL success).
    let dst = unsafe { libc::malloc(len.max(1)) }.cast::<u8>();
    if !dst.is_null() {
        // SAFETY: `len` bytes each side, per the contract; the blocks are distinct.
        unsafe { std::ptr::copy_nonoverlapping(src.cast::<u8>(), dst, len) };
    }
    dst.cast()
}

/// The socket hints librdmacm derives from `h` (`ucma_convert_to_ai`).
fn socket_hints(h: &rdma_addrinfo) -> libc::addrinfo {
    // SAFETY: all-zero is a valid addrinfo for hints.
    let mut ai: libc::addrinfo = unsafe { std::mem::zeroed() };
    if h.ai_flags & RAI_PASSIVE != 0 {
        ai.ai_flags = libc::AI_PASSIVE;
    }
    if h.ai_flags & RAI_NUMERICHOST != 0 {
        ai.ai_flags |= libc::AI_NUMERICHOST;
    }
    if h.ai_family != AF_IB {
        ai.ai_family = h.ai_family;
    }
    ai.ai_socktype = match h.ai_qp_type {
        IBV_QPT_RC | IBV_QPT_UC | IBV_QPT_XRC_SEND | IBV_QPT_XRC_RECV => libc::SOCK_STREAM,
        IBV_QPT_UD => libc::SOCK_DGRAM,
        _ => 0,
    };
    ai.ai_protocol = match h.ai_port_space {
        RDMA_PS_TCP => libc::IPPROTO_TCP,
        RDMA_PS_IPOIB | RDMA_PS_UDP => libc::IPPROTO_UDP,
        _ => 0,
    };
    ai
}

/// Fills `rai` from the system's first answer for `node` and `service`
/// (`ucma_getaddrinfo`): 0, a getaddrinfo error (`EAI_*`, negative) or -1 with errno.
///
/// # Safety
/// `node`, `service` NULL or C strings.
unsafe fn resolve(
    v: Verb,
    node: *const c_char,
    service: *const c_char,
    h: &rdma_addrinfo,
    rai: &mut rdma_addrinfo,
) -> c_int {
    let hints = socket_hints(h);
    let mut list: *mut libc::addrinfo = null_mut();
    // SAFETY: C strings or NULL, valid hints, a valid result pointer.
    let rc = unsafe { libc::getaddrinfo(node, service, &hints, &mut list) };
    if rc != 0 || list.is_null() {
        let rc = if rc != 0 { rc } else { libc::EAI_NONAME };
        // SAFETY: gai_strerror returns a static C string for any code.
        let why = unsafe { std::ffi::CStr::from_ptr(libc::gai_strerror(rc)) };
        v.fail(
            libc::EADDRNOTAVAIL,
            &format_args!("getaddrinfo: {}", why.to_string_lossy()),
        );
        return rc;
    }
    // SAFETY: the first entry of the list getaddrinfo returned, freed below.
    let ai = unsafe { &*list };
    rai.ai_qp_type = match (h.ai_qp_type, ai.ai_socktype) {
        (0, libc::SOCK_DGRAM) => IBV_QPT_UD,
        (0, _) => IBV_QPT_RC,
        (t, _) => t,
    };
    rai.ai_port_space = match (h.ai_port_space, ai.ai_protocol) {
        (0, libc::IPPROTO_UDP) => RDMA_PS_UDP,
        (0, _) => RDMA_PS_TCP,
        (p, _) => p,
    };
    rai.ai_family = ai.ai_family;
    // SAFETY: getaddrinfo's address, of its length.
    let addr = unsafe { copy_addr(ai.ai_addr, ai.ai_addrlen) };
    let passive = ai.ai_flags & libc::AI_PASSIVE != 0;
    if passive {
        rai.ai_flags = RAI_PASSIVE;
        (rai.ai_src_addr, rai.ai_src_len) = (addr, ai.ai_addrlen);
    } else {
        (rai.ai_dst_addr, rai.ai_dst_len) = (addr, ai.ai_addrlen);
    }
    // SAFETY: the list getaddrinfo returned, freed once.
    unsafe { libc::freeaddrinfo(list) };
    if addr.is_null() {
        v.fail(libc::ENOMEM, &"out of memory");
        return -1;
    }
    0
}

/// The largest address a caller may hand in through the hints: a `sockaddr_storage`.
const MAX_ADDR: libc::socklen_t = size_of::<libc::sockaddr_storage>() as libc::socklen_t;

/// `rdma_getaddrinfo` (see the module docs): 0 and a chain of one entry in `*res`, or -1
/// with errno (or getaddrinfo's negative `EAI_*` code when it fails to resolve).
///
/// # Safety
/// `node`, `service` NULL or C strings; `hints` NULL or valid, its addresses of their
/// stated lengths; `res` a valid pointer.
pub unsafe extern "C" fn rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    entry("rdma_getaddrinfo", Ret::MINUS_ONE, |v| {
        v.ensure(
            !res.is_null() && (!node.is_null() || !service.is_null() || !hints.is_null()),
            libc::EINVAL,
            &"no node, service or hints, or no result pointer",
        )?;
        // SAFETY: all-zero is valid hints (librdmacm's `nohints`).
        let none: rdma_addrinfo = unsafe { std::mem::zeroed() };
        let h = if hints.is_null() {
            &none
        } else {
            // SAFETY: the caller's hints, valid per the contract.
            unsafe { &*hints }
        };
        for (what, a, len) in [
            ("ai_src_addr", h.ai_src_addr, h.ai_src_len),
            ("ai_dst_addr", h.ai_dst_addr, h.ai_dst_len),
        ] {
            v.ensure(
                len == 0 || (!a.is_null() && len <= MAX_ADDR),
                libc::EINVAL,
                &format_args!(
                    "hints->{what} is NULL or longer than a sockaddr_storage ({len} bytes)"
                ),
            )?;
        }
        // SAFETY: calloc of one zeroed rdma_addrinfo (all-zero is valid); checked.
        let rai = unsafe { libc::calloc(1, size_of::<rdma_addrinfo>()) }.cast::<rdma_addrinfo>();
        v.ensure(!rai.is_null(), libc::ENOMEM, &"out of memory")?;
        // SAFETY: the block just allocated, ours alone.
        let r = unsafe { &mut *rai };
        let rc = if !node.is_null() || !service.is_null() {
            // SAFETY: per the contract.
            unsafe { resolve(v, node, service, h, r) }
        } else {
            r.ai_flags = h.ai_flags;
            r.ai_family = h.ai_family;
            r.ai_qp_type = h.ai_qp_type;
            r.ai_port_space = h.ai_port_space;
            if h.ai_dst_len > 0 {
                // SAFETY: checked above: a pointer to `ai_dst_len` bytes.
                r.ai_dst_addr = unsafe { copy_addr(h.ai_dst_addr, h.ai_dst_len) };
                r.ai_dst_len = h.ai_dst_len;
            }
            0
        };
        if rc == 0 && r.ai_src_len == 0 && h.ai_src_len > 0 {
            // SAFETY: checked above: a pointer to `ai_src_len` bytes.
            r.ai_src_addr = unsafe { copy_addr(h.ai_src_addr, h.ai_src_len) };
            r.ai_src_len = h.ai_src_len;
        }
        let lost = (r.ai_src_len > 0 && r.ai_src_addr.is_null())
            || (r.ai_dst_len > 0 && r.ai_dst_addr.is_null());
        if rc != 0 || lost {
            // SAFETY: the chain just made, freed once.
            unsafe { rdma_freeaddrinfo(rai) };
            // resolve's failure, recorded there (a negative EAI_* code, or -1).
            if rc != 0 {
                return Ok(rc);
            }
            return v.err(libc::ENOMEM, &"out of memory");
        }
        // SAFETY: the caller's pointer.
        unsafe { *res = rai };
        Ok(0)
    })
}

/// `rdma_freeaddrinfo`: frees each entry of the chain and every block it points to.
///
/// # Safety
/// `res` NULL or a chain `rdma_getaddrinfo` made (its blocks possibly swapped for other
/// `malloc`ed ones by the caller), freed once.
pub unsafe extern "C" fn rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
    entry("rdma_freeaddrinfo", Ret::VOID, |_| {
        let mut p = res;
        while !p.is_null() {
            // SAFETY: an entry of the chain, live until freed below.
            let r = unsafe { &*p };
            let next = r.ai_next;
            for block in [
                r.ai_connect,
                r.ai_route,
                r.ai_src_canonname.cast(),
                r.ai_dst_canonname.cast(),
                r.ai_src_addr.cast(),
                r.ai_dst_addr.cast(),
                p.cast(),
            ] {
                // SAFETY: NULL or a malloc'ed block, per the contract; freed once.
                unsafe { libc::free(block) };
            }
            p = next;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn sin(ip: Ipv4Addr, port: u16) -> libc::sockaddr_in {
        // SAFETY: all-zero is a valid sockaddr_in.
        let mut s: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        s.sin_family = libc::AF_INET as libc::sa_family_t;
        s.sin_port = port.to_be();
        s.sin_addr.s_addr = u32::from(ip).to_be();
        s
    }

    #[test]
    fn hints_alone_are_the_answer() {
        let mut src = sin(Ipv4Addr::new(10, 0, 0, 1), 0);
        // SAFETY: all-zero is valid hints.
        let mut h: rdma_addrinfo = unsafe { std::mem::zeroed() };
        h.ai_flags = RAI_PASSIVE;
        h.ai_family = libc::AF_INET;
        h.ai_port_space = RDMA_PS_TCP;
        h.ai_qp_type = IBV_QPT_RC;
        h.ai_src_addr = (&raw mut src).cast();
        h.ai_src_len = size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let mut res = null_mut();
        // SAFETY: valid hints and result pointer.
        let rc = unsafe { rdma_getaddrinfo(null_mut(), null_mut(), &h, &mut res) };
        assert_eq!(rc, 0);
        // SAFETY: the result just returned.
        let r = unsafe { &*res };
        assert_eq!(
            (r.ai_flags, r.ai_family, r.ai_qp_type),
            (RAI_PASSIVE, libc::AF_INET, IBV_QPT_RC)
        );
        assert_eq!(r.ai_src_len, h.ai_src_len);
        assert_ne!(
            r.ai_src_addr, h.ai_src_addr,
            "a copy, not the caller's block"
        );
        // SAFETY: a sockaddr_in copy.
        let got = unsafe { *r.ai_src_addr.cast::<libc::sockaddr_in>() };
        assert_eq!(got.sin_addr.s_addr, src.sin_addr.s_addr);
        assert!(r.ai_dst_addr.is_null());
        // The caller may swap a block for its own malloc'ed one, as libfabric does.
        // SAFETY: the result's own block, replaced by another malloc'ed one.
        unsafe {
            libc::free((*res).ai_src_addr.cast());
            (*res).ai_src_addr = libc::malloc(48).cast();
            rdma_freeaddrinfo(res);
        }
    }

    #[test]
    fn a_node_resolves_to_the_destination_and_keeps_the_hints_source() {
        let mut src = sin(Ipv4Addr::LOCALHOST, 0);
        // SAFETY: all-zero is valid hints.
        let mut h: rdma_addrinfo = unsafe { std::mem::zeroed() };
        h.ai_flags = RAI_NUMERICHOST;
        h.ai_port_space = RDMA_PS_TCP;
        h.ai_src_addr = (&raw mut src).cast();
        h.ai_src_len = size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let mut res = null_mut();
        // SAFETY: C strings, valid hints and result pointer.
        let rc = unsafe { rdma_getaddrinfo(c"127.0.0.2".as_ptr(), c"7471".as_ptr(), &h, &mut res) };
        assert_eq!(rc, 0);
        // SAFETY: the result just returned.
        let r = unsafe { &*res };
        assert_eq!(
            (r.ai_flags, r.ai_qp_type, r.ai_port_space),
            (0, IBV_QPT_RC, RDMA_PS_TCP)
        );
        // SAFETY: an AF_INET destination.
        let dst = unsafe { *r.ai_dst_addr.cast::<libc::sockaddr_in>() };
        assert_eq!(u16::from_be(dst.sin_port), 7471);
        assert_eq!(
            Ipv4Addr::from(u32::from_be(dst.sin_addr.s_addr)),
            Ipv4Addr::new(127, 0, 0, 2)
        );
        assert_eq!(r.ai_src_len, h.ai_src_len);
        // SAFETY: the chain just made.
        unsafe { rdma_freeaddrinfo(res) };
    }

    #[test]
    fn nothing_to_resolve_and_bad_hints_are_refused() {
        let mut res = null_mut();
        // SAFETY: NULL node, service and hints are refused before any read.
        let rc = unsafe { rdma_getaddrinfo(null_mut(), null_mut(), null_mut(), &mut res) };
        assert_eq!(rc, -1);
        // SAFETY: all-zero is valid hints.
        let mut h: rdma_addrinfo = unsafe { std::mem::zeroed() };
        h.ai_src_len = 16;
        // SAFETY: a length with a NULL address is refused before any read.
        let rc = unsafe { rdma_getaddrinfo(null_mut(), null_mut(), &h, &mut res) };
        assert_eq!(rc, -1);
        assert!(res.is_null());
    }
}
