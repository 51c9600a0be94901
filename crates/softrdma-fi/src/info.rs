//! `fi_getinfo`'s provider half: which endpoints softrdma offers for the application's
//! hints, one `fi_info` per softrdma device whose address suits them.
//!
//! libfabric's core filters nothing for an external provider (`docs/fabric-provider.md`
//! §0.2), so every hint is checked here, as libfabric's own providers check theirs: a
//! hint asking for more than softrdma has drops the info, and the application sees
//! `-FI_ENODATA` when none is left. What is returned follows libfabric's rules for
//! altering a template by the hints (§3.2): the hints' primary caps, their thread and
//! progress models and AV type when given, their default op flags.
//!
//! The infos are built with `calloc`, `malloc` and `strdup`, because libfabric frees them
//! with `free()`. Runs on the calling thread; no locks.

use crate::abi::*;
use crate::sockaddr;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};

/// The fabric's name: every softrdma device is on it.
pub const FABRIC_NAME: &str = "softrdma";
/// The largest message (a rendezvous READ moves it whole).
pub const MAX_MSG: usize = 1 << 30;
/// Inject size: an eager message, copied at the post.
pub const INJECT: usize = softrdma_fabric::EAGER_MAX;
/// Operations in flight per queue.
pub const QUEUE: usize = 1024;
/// Bytes of remote CQ data a message carries on an RDM endpoint (in its header).
pub const CQ_DATA: usize = 8;
/// On a MSG endpoint (the SEND's immediate).
pub const MSG_CQ_DATA: usize = 4;

/// What RMA and atomics add to an endpoint's capabilities: they need the application to
/// take the provider's keys and name regions by virtual address.
const RMA_CAPS: u64 = FI_RMA | FI_ATOMIC | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
/// The memory registration mode RMA needs (`FI_MR_BASIC`'s, spelled out).
const RMA_MR_MODE: c_int = FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ALLOCATED;

/// The reliable-datagram endpoint's capabilities.
pub const RDM_CAPS: u64 = FI_MSG
    | FI_TAGGED
    | FI_MULTI_RECV
    | RMA_CAPS
    | FI_SEND
    | FI_RECV
    | FI_DIRECTED_RECV
    | FI_SOURCE
    | FI_LOCAL_COMM
    | FI_REMOTE_COMM;
/// The connected endpoint's capabilities.
pub const MSG_CAPS: u64 = FI_MSG | RMA_CAPS | FI_SEND | FI_RECV | FI_LOCAL_COMM | FI_REMOTE_COMM;

/// The datagram endpoint's capabilities.
pub const DGRAM_CAPS: u64 = FI_MSG | FI_SEND | FI_RECV | FI_LOCAL_COMM | FI_REMOTE_COMM;

/// What an endpoint type offers.
pub struct Offer {
    /// `FI_EP_RDM`, `FI_EP_MSG` or `FI_EP_DGRAM`.
    pub ep_type: u32,
    /// Its capabilities.
    pub caps: u64,
    /// Bytes of remote CQ data.
    pub cq_data: usize,
    /// Its tag format (0: no tags).
    pub tag_format: u64,
    /// Whether a message is at most one MTU of the device (a datagram).
    pub one_mtu: bool,
    /// The order its sends keep (`FI_ORDER_SAS`, or none for datagrams).
    pub order: u64,
}

impl Offer {
    /// The largest message on `dev`.
    pub fn max_msg(&self, dev: &Device) -> usize {
        if self.one_mtu { dev.mtu } else { MAX_MSG }
    }

    /// The largest inject on `dev`.
    pub fn inject(&self, dev: &Device) -> usize {
        INJECT.min(self.max_msg(dev))
    }
}

/// The endpoint types, in the order `fi_getinfo` gives them.
pub const OFFERS: [Offer; 3] = [
    Offer {
        ep_type: FI_EP_RDM,
        caps: RDM_CAPS,
        cq_data: CQ_DATA,
        tag_format: TAG_FORMAT,
        one_mtu: false,
        order: FI_ORDER_SAS,
    },
    Offer {
        ep_type: FI_EP_MSG,
        caps: MSG_CAPS,
        cq_data: MSG_CQ_DATA,
        tag_format: 0,
        one_mtu: false,
        order: FI_ORDER_SAS,
    },
    Offer {
        ep_type: FI_EP_DGRAM,
        caps: DGRAM_CAPS,
        cq_data: MSG_CQ_DATA,
        tag_format: 0,
        one_mtu: true,
        order: FI_ORDER_NONE,
    },
];

/// The offer for `ep_type`.
pub fn offer(ep_type: u32) -> Option<&'static Offer> {
    OFFERS.iter().find(|o| o.ep_type == ep_type)
}

/// Caps libfabric calls primary: an application that names some names all it wants.
const PRIMARY: u64 = FI_MSG
    | FI_RMA
    | FI_TAGGED
    | FI_ATOMIC
    | FI_READ
    | FI_WRITE
    | FI_SEND
    | FI_RECV
    | FI_REMOTE_READ
    | FI_REMOTE_WRITE
    | FI_DIRECTED_RECV
    | (1 << 5) // FI_MULTICAST
    | (1 << 6) // FI_COLLECTIVE
    | (1 << 47) // FI_HMEM
    | (1 << 48) // FI_VARIABLE_MSG
    | (1 << 58); // FI_NAMED_RX_CTX
/// Secondary caps given whether asked or not.
const DEFAULT_SECONDARY: u64 = FI_LOCAL_COMM | FI_REMOTE_COMM;
/// Default op flags an application may set on the endpoint.
const TX_OP_FLAGS: u64 =
    FI_COMPLETION | FI_INJECT | FI_INJECT_COMPLETE | FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE;
const RX_OP_FLAGS: u64 = FI_COMPLETION | FI_MULTI_RECV;
/// The tag format: all 64 bits match (bit 63 set, as Open MPI needs).
const TAG_FORMAT: u64 = 0xAAAA_AAAA_AAAA_AAAA;

/// One device softrdma offers: its name and address.
pub use softrdma_fabric::DomainInfo as Device;

/// softrdma's devices, as its configuration names them.
pub fn devices() -> Vec<Device> {
    softrdma_fabric::Fabric.domains()
}

/// What a request asks, read from C.
struct Request<'a> {
    version: u32,
    src: Option<SocketAddr>,
    dest: Option<SocketAddr>,
    hints: Option<&'a fi_info>,
}

/// Reads `p` if it is not null.
///
/// # Safety
/// `p` must be null or valid for reads.
unsafe fn opt<'a, T>(p: *const T) -> Option<&'a T> {
    // SAFETY: by this function's contract.
    unsafe { p.as_ref() }
}

/// The string at `p`, if not null.
///
/// # Safety
/// `p` must be null or a NUL-terminated string.
pub unsafe fn c_str(p: *const c_char) -> Option<String> {
    // SAFETY: by this function's contract.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// `node`/`service` as an address: a numeric or resolvable host (or none: any address)
/// and a port (or none: 0).
///
/// # Safety
/// Each must be null or a NUL-terminated string.
unsafe fn resolve(
    node: *const c_char,
    service: *const c_char,
) -> Result<Option<SocketAddr>, c_int> {
    // SAFETY: by this function's contract.
    let s =
        |p: *const c_char| unsafe { (!p.is_null()).then(|| CStr::from_ptr(p).to_string_lossy()) };
    let (node, service) = (s(node), s(service));
    let port: u16 = match &service {
        Some(svc) => svc.parse().map_err(|_| FI_EINVAL)?,
        None => 0,
    };
    match node {
        None if service.is_none() => Ok(None),
        None => Ok(Some(SocketAddr::new(IpAddr::from([0, 0, 0, 0]), port))),
        Some(n) => (n.as_ref(), port)
            .to_socket_addrs()
            .map_err(|_| FI_ENODATA)?
            .next()
            .map(Some)
            .ok_or(FI_ENODATA),
    }
}

/// The provider's `getinfo`.
///
/// # Safety
/// The arguments are libfabric's: valid or null, `info` writable.
pub unsafe extern "C" fn getinfo(
    version: u32,
    node: *const c_char,
    service: *const c_char,
    flags: u64,
    hints: *const fi_info,
    info: *mut *mut fi_info,
) -> c_int {
    crate::entry::guard_int(|| {
        if info.is_null() {
            return Err(FI_EINVAL);
        }
        // SAFETY: libfabric's pointers, valid or null.
        let hints = unsafe { opt(hints) };
        // SAFETY: as above.
        let named = unsafe { resolve(node, service)? };
        let (mut src, mut dest) = if flags & FI_SOURCE != 0 {
            (named, None)
        } else {
            (None, named)
        };
        if let Some(h) = hints {
            // SAFETY: libfabric's hints: their addresses are valid for their lengths.
            unsafe {
                src = src.or_else(|| sockaddr::from_c(h.src_addr, h.src_addrlen));
                dest = dest.or_else(|| sockaddr::from_c(h.dest_addr, h.dest_addrlen));
            }
        }
        let req = Request {
            version,
            src,
            dest,
            hints,
        };
        let mut head: *mut fi_info = std::ptr::null_mut();
        let mut tail = &mut head;
        for dev in devices() {
            for offer in &OFFERS {
                if let Some(i) = ep_info(&req, &dev, offer) {
                    *tail = i;
                    // SAFETY: `i` was just allocated by `ep_info`.
                    tail = unsafe { &mut (*i).next };
                }
            }
        }
        if head.is_null() {
            return Err(FI_ENODATA);
        }
        // SAFETY: `info` is writable, checked non-null above.
        unsafe { *info = head };
        Ok(0)
    })
}

/// The info a connection request to `local` from `peer` comes with (`FI_CONNREQ`): a MSG
/// endpoint's, on the device of `local`, its `handle` the request.
pub fn connreq_info(
    version: u32,
    local: SocketAddr,
    peer: SocketAddr,
    handle: *mut fid,
) -> Option<*mut fi_info> {
    let dev = devices().into_iter().find(|d| d.ip == local.ip())?;
    let req = Request {
        version,
        src: Some(local),
        dest: Some(peer),
        hints: None,
    };
    let i = ep_info(&req, &dev, offer(FI_EP_MSG)?)?;
    // SAFETY: `i` was just allocated by `ep_info`.
    unsafe { (*i).handle = handle };
    Some(i)
}

/// Whether `want` asks for nothing outside `have`.
fn within(want: u64, have: u64) -> bool {
    want & !have == 0
}

/// The info of `offer`'s endpoint type on `dev`, if the request allows it.
fn ep_info(req: &Request<'_>, dev: &Device, offer: &Offer) -> Option<*mut fi_info> {
    // The device's own address, with the port asked for.
    let port = req.src.map_or(0, |s| s.port());
    if let Some(s) = req.src
        && !s.ip().is_unspecified()
        && s.ip() != dev.ip
    {
        return None;
    }
    if let Some(d) = req.dest
        && d.is_ipv4() != dev.ip.is_ipv4()
    {
        return None;
    }
    let format = if dev.ip.is_ipv4() {
        FI_SOCKADDR_IN
    } else {
        FI_SOCKADDR_IN6
    };
    let all = offer.caps;
    let mut caps = all;
    let mut ep_flags = (0, 0);
    let (mut threading, mut progress, mut av_type) = (FI_THREAD_SAFE, FI_PROGRESS_AUTO, 0);
    let (max_msg, inject) = (offer.max_msg(dev), offer.inject(dev));
    let mut sizes = (inject, QUEUE, QUEUE);
    if let Some(h) = req.hints {
        // SAFETY: libfabric's hints: each attr pointer valid or null.
        let (dom, ep, tx, rx, fab) = unsafe {
            (
                opt(h.domain_attr),
                opt(h.ep_attr),
                opt(h.tx_attr),
                opt(h.rx_attr),
                opt(h.fabric_attr),
            )
        };
        if !within(h.caps, all) {
            return None;
        }
        // Whether the application takes RMA's registration mode.
        let mr_rma = dom.is_none_or(|d| mr_mode_ok(req.version, d.mr_mode, RMA_CAPS));
        if h.caps == 0 && !mr_rma {
            // Asked for nothing in particular, by an application whose registrations
            // RMA could not use: everything else.
            caps &= !RMA_CAPS;
        }
        if h.caps != 0 {
            caps = h.caps & PRIMARY | (all & DEFAULT_SECONDARY) | (h.caps & !PRIMARY);
            if caps & (FI_MSG | FI_TAGGED) != 0 && caps & (FI_SEND | FI_RECV) == 0 {
                caps |= FI_SEND | FI_RECV;
            }
        }
        match h.addr_format {
            FI_FORMAT_UNSPEC | FI_SOCKADDR => {}
            f if f == format => {}
            _ => return None,
        }
        if let Some(ep) = ep {
            if ![FI_EP_UNSPEC, offer.ep_type].contains(&ep.type_)
                || ep.protocol != 0
                || ep.max_msg_size > max_msg
                || ep.msg_prefix_size != 0
                || ep.tx_ctx_cnt > 1
                || ep.rx_ctx_cnt > 1
                || ep.auth_key_size != 0
            {
                return None;
            }
        }
        if let Some(d) = dom {
            // SAFETY: a domain name in the hints is a C string or null.
            let name = unsafe { c_str(d.name) };
            if name.is_some_and(|n| n != dev.name)
                || d.cq_data_size > offer.cq_data
                || !mr_mode_ok(req.version, d.mr_mode, caps)
                || d.av_type > FI_AV_TABLE
                || d.auth_key_size != 0
                || d.max_ep_tx_ctx > 1
                || d.max_ep_rx_ctx > 1
                || d.max_ep_srx_ctx > 0
                || d.max_ep_stx_ctx > 0
            {
                return None;
            }
            if d.threading != 0 {
                threading = d.threading;
            }
            if d.data_progress != FI_PROGRESS_UNSPEC {
                progress = d.data_progress;
            }
            av_type = d.av_type;
        }
        if let Some(f) = fab
            // SAFETY: a fabric name in the hints is a C string or null.
            && let Some(n) = unsafe { c_str(f.name) }
            && n != FABRIC_NAME
        {
            return None;
        }
        if let Some(tx) = tx {
            if !within(tx.caps, all)
                || !within(tx.op_flags, TX_OP_FLAGS)
                || !within(tx.msg_order, offer.order)
                || !within(tx.comp_order, FI_ORDER_NONE)
                || tx.inject_size > inject
                || tx.size > QUEUE
                || tx.iov_limit > 1
                || tx.rma_iov_limit > 1
            {
                return None;
            }
            ep_flags.0 = tx.op_flags;
            if tx.inject_size != 0 {
                sizes.0 = tx.inject_size;
            }
            if tx.size != 0 {
                sizes.1 = tx.size;
            }
        }
        if let Some(rx) = rx {
            if !within(rx.caps, all)
                || !within(rx.op_flags, RX_OP_FLAGS)
                || !within(rx.msg_order, offer.order)
                || !within(rx.comp_order, FI_ORDER_NONE)
                || rx.total_buffered_recv > 0
                || rx.size > QUEUE
                || rx.iov_limit > 1
            {
                return None;
            }
            ep_flags.1 = rx.op_flags;
            if rx.size != 0 {
                sizes.2 = rx.size;
            }
        }
    }
    let src = SocketAddr::new(dev.ip, port);
    // SAFETY: every allocation is checked; each string and struct is libfabric's to free.
    unsafe {
        let i = alloc_info()?;
        let info = &mut *i;
        info.caps = caps;
        info.mode = 0;
        info.addr_format = format;
        (info.src_addr, info.src_addrlen) = sockaddr::malloced(src);
        if let Some(d) = req.dest {
            (info.dest_addr, info.dest_addrlen) = sockaddr::malloced(d);
        }
        let tx = &mut *info.tx_attr;
        tx.caps = caps;
        tx.op_flags = ep_flags.0;
        tx.msg_order = offer.order;
        tx.comp_order = FI_ORDER_NONE;
        tx.inject_size = sizes.0;
        tx.size = sizes.1;
        tx.iov_limit = 1;
        tx.rma_iov_limit = 1;
        let rx = &mut *info.rx_attr;
        rx.caps = caps;
        rx.op_flags = ep_flags.1;
        rx.msg_order = offer.order;
        rx.comp_order = FI_ORDER_NONE;
        rx.size = sizes.2;
        rx.iov_limit = 1;
        let ep = &mut *info.ep_attr;
        ep.type_ = offer.ep_type;
        ep.protocol_version = u32::from(softrdma_fabric::wire::VERSION);
        ep.max_msg_size = max_msg;
        ep.mem_tag_format = offer.tag_format;
        ep.tx_ctx_cnt = 1;
        ep.rx_ctx_cnt = 1;
        let d = &mut *info.domain_attr;
        d.name = strdup(&dev.name);
        d.threading = threading;
        d.control_progress = FI_PROGRESS_AUTO;
        d.data_progress = progress;
        d.resource_mgmt = FI_RM_ENABLED;
        d.av_type = av_type;
        d.mr_mode = if caps & (FI_RMA | FI_ATOMIC) == 0 {
            0
        } else if req.version < fi_version(1, 5) {
            FI_MR_BASIC
        } else {
            RMA_MR_MODE
        };
        d.mr_key_size = 4;
        d.cq_data_size = offer.cq_data;
        d.cq_cnt = 1024;
        d.ep_cnt = 1024;
        d.tx_ctx_cnt = 1024;
        d.rx_ctx_cnt = 1024;
        d.max_ep_tx_ctx = 1;
        d.max_ep_rx_ctx = 1;
        d.cntr_cnt = 1024;
        d.mr_iov_limit = 1;
        d.caps = FI_LOCAL_COMM | FI_REMOTE_COMM;
        d.mr_cnt = 65536;
        let f = &mut *info.fabric_attr;
        f.name = strdup(FABRIC_NAME);
        // prov_name stays null: the core writes it (§0.3).
        f.prov_version = crate::PROVIDER_VERSION;
        f.api_version = req.version;
        if d.name.is_null() || f.name.is_null() || info.src_addr.is_null() {
            free_info(i);
            return None;
        }
        Some(i)
    }
}

/// Whether the application's `mr_mode` (under API `version`) lets it use what `caps`
/// need. Messages need no registration at all, so any mode does for them; RMA needs the
/// provider's keys and virtual addresses.
fn mr_mode_ok(version: u32, mr_mode: c_int, caps: u64) -> bool {
    if caps & (FI_RMA | FI_ATOMIC) == 0 {
        return true;
    }
    // Before API 1.5, FI_MR_UNSPEC (0) let the provider choose.
    version < fi_version(1, 5) && mr_mode == 0
        || mr_mode & FI_MR_BASIC != 0
        || mr_mode & RMA_MR_MODE == RMA_MR_MODE
}

/// An `fi_info` with its five attribute structs, zeroed, from `calloc`.
unsafe fn alloc_info() -> Option<*mut fi_info> {
    fn z<T>() -> *mut T {
        // SAFETY: calloc of one T; null is checked by the caller.
        unsafe { libc::calloc(1, size_of::<T>()).cast() }
    }
    let i: *mut fi_info = z();
    if i.is_null() {
        return None;
    }
    // SAFETY: `i` is a fresh zeroed fi_info.
    unsafe {
        (*i).tx_attr = z();
        (*i).rx_attr = z();
        (*i).ep_attr = z();
        (*i).domain_attr = z();
        (*i).fabric_attr = z();
        let r = &*i;
        if r.tx_attr.is_null()
            || r.rx_attr.is_null()
            || r.ep_attr.is_null()
            || r.domain_attr.is_null()
            || r.fabric_attr.is_null()
        {
            free_info(i);
            return None;
        }
    }
    Some(i)
}

/// Frees one info as `fi_freeinfo` would (for an info never handed to libfabric).
///
/// # Safety
/// `i` must come from [`alloc_info`], its pointers from `malloc` or null.
pub unsafe fn free_info(i: *mut fi_info) {
    // SAFETY: by this function's contract, every pointer is malloc'd or null.
    unsafe {
        let r = &*i;
        if let Some(d) = r.domain_attr.as_ref() {
            libc::free(d.name.cast());
        }
        if let Some(f) = r.fabric_attr.as_ref() {
            libc::free(f.name.cast());
            libc::free(f.prov_name.cast());
        }
        for p in [
            r.src_addr,
            r.dest_addr,
            r.tx_attr.cast::<c_void>(),
            r.rx_attr.cast(),
            r.ep_attr.cast(),
            r.domain_attr.cast(),
            r.fabric_attr.cast(),
        ] {
            libc::free(p);
        }
        libc::free(i.cast());
    }
}

/// `s` in memory from `malloc`, or null.
fn strdup(s: &str) -> *mut c_char {
    let c = std::ffi::CString::new(s).unwrap_or_default();
    // SAFETY: `c` is a valid C string; strdup copies it.
    unsafe { libc::strdup(c.as_ptr()) }
}
