//! Finding and loading the system's `libibverbs.so.1` at run time.
//!
//! The library is never linked: a host without rdma-core runs softrdma as before, and a
//! program under `softrdma exec`, whose `LD_LIBRARY_PATH` names the drop-in's
//! `libibverbs.so.1` first, still reaches the system's by its real path. Only the standard
//! library folders are looked in, and a file under a folder named for softrdma (the
//! drop-in's) is never taken; `SOFTRDMA_KERNEL_VERBS` names another file, or `0` turns
//! the backend off.
//!
//! The library is opened once per process, `RTLD_NOW | RTLD_LOCAL`, and never closed: its
//! providers (`librxe-rdmav34.so`, `libmlx5.so.1`) hold pointers into it for the life of
//! the process. Where a `libibverbs.so.1` that is not the system's is already loaded in
//! the process (the drop-in, in a C program under `softrdma exec`), the system's library
//! is opened in a link-map namespace of its own (`dlmopen`), so that its providers bind to
//! it and never to the drop-in.

use softrdma_abi::{
    ibv_ah, ibv_ah_attr, ibv_comp_channel, ibv_context, ibv_cq, ibv_device, ibv_device_attr,
    ibv_gid, ibv_gid_entry, ibv_mr, ibv_pd, ibv_port_attr, ibv_qp, ibv_qp_attr, ibv_qp_init_attr,
    ibv_srq, ibv_srq_init_attr,
};
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The folders rdma-core's `libibverbs.so.1` is installed in, on Debian and its kin
/// (multiarch) and on Fedora and its kin (`lib64`), in the loader's order.
fn system_dirs() -> Vec<PathBuf> {
    let multiarch = format!("{}-linux-gnu", std::env::consts::ARCH);
    [
        format!("/usr/lib/{multiarch}"),
        format!("/lib/{multiarch}"),
        "/usr/lib64".into(),
        "/lib64".into(),
        "/usr/lib".into(),
        "/lib".into(),
    ]
    .into_iter()
    .map(PathBuf::from)
    .collect()
}

/// Where the system's library is: `SOFTRDMA_KERNEL_VERBS` if set (`None` for `0`), else
/// the first standard folder that has a `libibverbs.so.1` not of softrdma's.
pub(crate) fn find() -> Option<PathBuf> {
    match std::env::var_os("SOFTRDMA_KERNEL_VERBS") {
        Some(v) if v == "0" => None,
        Some(v) => Some(PathBuf::from(v)),
        None => system_dirs()
            .into_iter()
            .map(|d| d.join("libibverbs.so.1"))
            .find(|p| p.is_file() && !is_softrdmas(p)),
    }
}

/// Whether `p`, followed through its links, lies under a folder named for softrdma, where
/// the drop-in's libraries live (its package's folder, its runtime folder, a build tree).
fn is_softrdmas(p: &Path) -> bool {
    let real = std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    real.parent()
        .is_some_and(|d| d.to_string_lossy().contains("softrdma"))
}

type GetDeviceList = unsafe extern "C" fn(*mut c_int) -> *mut *mut ibv_device;
type FreeDeviceList = unsafe extern "C" fn(*mut *mut ibv_device);
type GetDeviceGuid = unsafe extern "C" fn(*mut ibv_device) -> u64;
type OpenDevice = unsafe extern "C" fn(*mut ibv_device) -> *mut ibv_context;
type CloseDevice = unsafe extern "C" fn(*mut ibv_context) -> c_int;
type QueryDevice = unsafe extern "C" fn(*mut ibv_context, *mut ibv_device_attr) -> c_int;
type QueryPort = unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr) -> c_int;
type QueryGid = unsafe extern "C" fn(*mut ibv_context, u8, c_int, *mut ibv_gid) -> c_int;
type AllocPd = unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_pd;
type DeallocPd = unsafe extern "C" fn(*mut ibv_pd) -> c_int;
type RegMr = unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, c_int) -> *mut ibv_mr;
type DeregMr = unsafe extern "C" fn(*mut ibv_mr) -> c_int;
type CreateCq = unsafe extern "C" fn(
    *mut ibv_context,
    c_int,
    *mut c_void,
    *mut ibv_comp_channel,
    c_int,
) -> *mut ibv_cq;
type CreateCompChannel = unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_comp_channel;
type DestroyCompChannel = unsafe extern "C" fn(*mut ibv_comp_channel) -> c_int;
type GetCqEvent =
    unsafe extern "C" fn(*mut ibv_comp_channel, *mut *mut ibv_cq, *mut *mut c_void) -> c_int;
type AckCqEvents = unsafe extern "C" fn(*mut ibv_cq, u32);
type CreateSrq = unsafe extern "C" fn(*mut ibv_pd, *mut ibv_srq_init_attr) -> *mut ibv_srq;
type DestroySrq = unsafe extern "C" fn(*mut ibv_srq) -> c_int;
type CreateAh = unsafe extern "C" fn(*mut ibv_pd, *mut ibv_ah_attr) -> *mut ibv_ah;
type DestroyAh = unsafe extern "C" fn(*mut ibv_ah) -> c_int;
type DestroyCq = unsafe extern "C" fn(*mut ibv_cq) -> c_int;
type CreateQp = unsafe extern "C" fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp;
type ModifyQp = unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int;
type DestroyQp = unsafe extern "C" fn(*mut ibv_qp) -> c_int;
type QueryGidEx =
    unsafe extern "C" fn(*mut ibv_context, u32, u32, *mut ibv_gid_entry, u32, usize) -> c_int;

/// The entry points of rdma-core's libibverbs that the backend calls, resolved once.
pub(crate) struct Library {
    pub(crate) get_device_list: GetDeviceList,
    pub(crate) free_device_list: FreeDeviceList,
    pub(crate) get_device_guid: GetDeviceGuid,
    pub(crate) open_device: OpenDevice,
    pub(crate) close_device: CloseDevice,
    pub(crate) query_device: QueryDevice,
    pub(crate) query_port: QueryPort,
    pub(crate) query_gid: QueryGid,
    /// `_ibv_query_gid_ex` (rdma-core 30 and later): a GID with its type.
    pub(crate) query_gid_ex: Option<QueryGidEx>,
    pub(crate) alloc_pd: AllocPd,
    pub(crate) dealloc_pd: DeallocPd,
    pub(crate) reg_mr: RegMr,
    pub(crate) dereg_mr: DeregMr,
    pub(crate) create_cq: CreateCq,
    pub(crate) destroy_cq: DestroyCq,
    pub(crate) create_qp: CreateQp,
    pub(crate) modify_qp: ModifyQp,
    pub(crate) destroy_qp: DestroyQp,
    pub(crate) create_comp_channel: CreateCompChannel,
    pub(crate) destroy_comp_channel: DestroyCompChannel,
    pub(crate) get_cq_event: GetCqEvent,
    pub(crate) ack_cq_events: AckCqEvents,
    pub(crate) create_srq: CreateSrq,
    pub(crate) destroy_srq: DestroySrq,
    pub(crate) create_ah: CreateAh,
    pub(crate) destroy_ah: DestroyAh,
    /// Where it was loaded from.
    pub(crate) path: PathBuf,
}

/// The function at `p` as the function pointer type `F`.
///
/// # Safety
/// `p` is the address of a function whose C prototype `F` is, and `F` is a function
/// pointer type.
unsafe fn func<F: Copy>(p: *mut c_void) -> F {
    assert_eq!(
        size_of::<F>(),
        size_of::<*mut c_void>(),
        "a function pointer"
    );
    // SAFETY: the caller's promise; the sizes are equal (checked).
    unsafe { std::mem::transmute_copy(&p) }
}

/// The process's one load of the library: `None` where there is none (or it lacks an entry
/// point the backend needs, which is then said once on stderr).
pub(crate) fn get() -> Option<&'static Library> {
    static LIB: OnceLock<Option<Library>> = OnceLock::new();
    LIB.get_or_init(|| {
        let path = find()?;
        match load(&path) {
            Ok(l) => Some(l),
            Err(e) => {
                // A library that is there but cannot be used is worth one line: the user
                // may expect its devices. A host without one hears nothing.
                eprintln!("softrdma: the kernel's RDMA devices are not listed: {e}");
                None
            }
        }
    })
    .as_ref()
}

/// The text of `dlerror()`, or `what` when it has none.
fn dl_error(what: &str) -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string that stays valid until the
    // next dl call of this thread; it is copied at once.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        what.to_owned()
    } else {
        // SAFETY: as above, non-NULL.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

/// Whether a library that answers to `libibverbs.so.1` is loaded in the process already
/// and is not the file at `path` (the drop-in is, in a C program under `softrdma exec`).
fn other_verbs_loaded(path: &Path) -> bool {
    // SAFETY: a NUL-terminated name; RTLD_NOLOAD only looks, and a handle it returns is
    // closed again (which drops the count it added, never the library).
    let h = unsafe {
        libc::dlopen(
            c"libibverbs.so.1".as_ptr(),
            libc::RTLD_NOW | libc::RTLD_NOLOAD,
        )
    };
    if h.is_null() {
        return false;
    }
    let mut map: *mut libc::c_void = std::ptr::null_mut();
    // SAFETY: `h` is a live handle; RTLD_DI_LINKMAP writes one pointer into `map`.
    let ok = unsafe { libc::dlinfo(h, libc::RTLD_DI_LINKMAP, (&raw mut map).cast()) } == 0;
    let name = if ok && !map.is_null() {
        // SAFETY: RTLD_DI_LINKMAP gives the handle's `struct link_map`, whose second word
        // is `l_name`, a NUL-terminated path owned by the loader.
        let l_name = unsafe { *map.cast::<*const c_char>().add(1) };
        (!l_name.is_null()).then(|| {
            // SAFETY: as above; copied before the handle closes.
            unsafe { CStr::from_ptr(l_name) }
                .to_string_lossy()
                .into_owned()
        })
    } else {
        None
    };
    // SAFETY: the handle dlopen gave above, closed once.
    unsafe { libc::dlclose(h) };
    let same = |n: &str| std::fs::canonicalize(n).ok() == std::fs::canonicalize(path).ok();
    !name.as_deref().is_some_and(same)
}

fn load(path: &Path) -> Result<Library, String> {
    let c = CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("{}: a path with a NUL byte", path.display()))?;
    let flags = libc::RTLD_NOW | libc::RTLD_LOCAL;
    let h = if other_verbs_loaded(path) {
        // SAFETY: a NUL-terminated path; a new namespace keeps its symbols apart.
        unsafe { libc::dlmopen(libc::LM_ID_NEWLM, c.as_ptr(), flags) }
    } else {
        // SAFETY: a NUL-terminated path.
        unsafe { libc::dlopen(c.as_ptr(), flags) }
    };
    if h.is_null() {
        return Err(dl_error(&format!("{}: dlopen failed", path.display())));
    }
    let sym = |name: &CStr| -> Result<*mut c_void, String> {
        // SAFETY: a live handle (never closed) and a NUL-terminated name.
        let p = unsafe { libc::dlsym(h, name.as_ptr()) };
        if p.is_null() {
            Err(format!(
                "{}: no {} ({})",
                path.display(),
                name.to_string_lossy(),
                dl_error("not found")
            ))
        } else {
            Ok(p)
        }
    };
    // SAFETY (each `func` below): the symbol is rdma-core's function of that name, whose C
    // prototype in <infiniband/verbs.h> is the type it becomes.
    let f = |name: &CStr| sym(name);
    // SAFETY: as said above.
    unsafe {
        Ok(Library {
            get_device_list: func::<GetDeviceList>(f(c"ibv_get_device_list")?),
            free_device_list: func::<FreeDeviceList>(f(c"ibv_free_device_list")?),
            get_device_guid: func::<GetDeviceGuid>(f(c"ibv_get_device_guid")?),
            open_device: func::<OpenDevice>(f(c"ibv_open_device")?),
            close_device: func::<CloseDevice>(f(c"ibv_close_device")?),
            query_device: func::<QueryDevice>(f(c"ibv_query_device")?),
            query_port: func::<QueryPort>(f(c"ibv_query_port")?),
            query_gid: func::<QueryGid>(f(c"ibv_query_gid")?),
            query_gid_ex: f(c"_ibv_query_gid_ex").ok().map(|p| func::<QueryGidEx>(p)),
            alloc_pd: func::<AllocPd>(f(c"ibv_alloc_pd")?),
            dealloc_pd: func::<DeallocPd>(f(c"ibv_dealloc_pd")?),
            reg_mr: func::<RegMr>(f(c"ibv_reg_mr")?),
            dereg_mr: func::<DeregMr>(f(c"ibv_dereg_mr")?),
            create_cq: func::<CreateCq>(f(c"ibv_create_cq")?),
            destroy_cq: func::<DestroyCq>(f(c"ibv_destroy_cq")?),
            create_qp: func::<CreateQp>(f(c"ibv_create_qp")?),
            modify_qp: func::<ModifyQp>(f(c"ibv_modify_qp")?),
            destroy_qp: func::<DestroyQp>(f(c"ibv_destroy_qp")?),
            create_comp_channel: func::<CreateCompChannel>(f(c"ibv_create_comp_channel")?),
            destroy_comp_channel: func::<DestroyCompChannel>(f(c"ibv_destroy_comp_channel")?),
            get_cq_event: func::<GetCqEvent>(f(c"ibv_get_cq_event")?),
            ack_cq_events: func::<AckCqEvents>(f(c"ibv_ack_cq_events")?),
            create_srq: func::<CreateSrq>(f(c"ibv_create_srq")?),
            destroy_srq: func::<DestroySrq>(f(c"ibv_destroy_srq")?),
            create_ah: func::<CreateAh>(f(c"ibv_create_ah")?),
            destroy_ah: func::<DestroyAh>(f(c"ibv_destroy_ah")?),
            path: path.to_path_buf(),
        })
    }
}
