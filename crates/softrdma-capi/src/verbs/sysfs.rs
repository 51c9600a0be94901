//! The sysfs files rdma-core's tools read: a device's come from softrdma (there is no
//! kernel device behind it), any other path from the file system.

use super::context::devices;
use crate::ffi::{Ret, entry};
use std::ffi::{CStr, c_char, c_int};
use std::sync::OnceLock;

/// The online CPUs (`0-1`), which a device's sysfs calls local to it.
fn online_cpus() -> &'static str {
    static CPUS: OnceLock<String> = OnceLock::new();
    CPUS.get_or_init(softrdma::config::online_cpus)
}

/// `ibv_read_sysfs_file`: a device's files come from softrdma (there is no kernel device
/// behind it); any other path is read from the file system.
pub unsafe extern "C" fn ibv_read_sysfs_file(
    dir: *const c_char,
    file: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> c_int {
    entry("ibv_read_sysfs_file", Ret::MINUS_ONE, |v| {
        if dir.is_null() || file.is_null() || buf.is_null() || size == 0 {
            return Err(v.quiet(libc::EINVAL));
        }
        // SAFETY: C strings from the caller.
        let (dir, file) = unsafe { (CStr::from_ptr(dir), CStr::from_ptr(file)) };
        let (dir, file) = (dir.to_string_lossy(), file.to_string_lossy());
        let path = format!("{}/{file}", dir.trim_end_matches('/'));
        let infos: Vec<_> = devices().iter().map(|d| d.info.clone()).collect();
        let text = match softrdma::config::sysfs::read(&infos, online_cpus(), &path) {
            Some(Ok(t)) => t,
            Some(Err(())) => return Err(v.quiet(libc::ENOENT)),
            // At most `size` bytes, as rdma-core's one read(2) (a file that never ends,
            // such as /dev/zero, must not be read whole).
            None => {
                use std::io::Read;
                let mut b = Vec::new();
                match std::fs::File::open(&path)
                    .and_then(|f| f.take(size as u64).read_to_end(&mut b))
                {
                    Ok(_) => String::from_utf8_lossy(&b).into_owned(),
                    Err(e) => return Err(v.quiet(e.raw_os_error().unwrap_or(libc::EIO))),
                }
            }
        };
        let b = text.as_bytes();
        let mut n = b.len().min(size);
        // SAFETY: the caller's buffer has `size` bytes; every write below is within it.
        unsafe {
            std::ptr::copy_nonoverlapping(b.as_ptr().cast::<c_char>(), buf, n);
            // As rdma-core: the newline becomes the terminator (and is not counted), else
            // a terminator follows when there is room; contents that fill the buffer
            // unterminated are a failure, not a string the caller would read past.
            if n > 0 && *buf.add(n - 1) == b'\n' as c_char {
                n -= 1;
                *buf.add(n) = 0;
            } else if n < size {
                *buf.add(n) = 0;
            } else {
                return Err(v.quiet(libc::EOVERFLOW));
            }
        }
        Ok(n as c_int)
    })
}

/// `ibv_get_sysfs_path`.
pub extern "C" fn ibv_get_sysfs_path() -> *const c_char {
    c"/sys".as_ptr()
}
