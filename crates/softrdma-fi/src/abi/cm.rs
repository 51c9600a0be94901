//! libfabric 1.17's structs and constants for connected endpoints (`fi_endpoint.h`,
//! `fi_eq.h`, `fi_cm.h`): the passive endpoint and the EQ's connection entries, their
//! layouts checked at compile time against the figures measured from the installed
//! headers (`docs/fabric-provider.md` §2.2).

#![allow(non_camel_case_types, missing_docs, dead_code)]

use super::{fi_info, fi_ops_cm, fi_ops_ep, fid};
use std::ffi::c_int;

#[repr(C)]
pub struct fid_pep {
    pub fid: fid,
    pub ops: *const fi_ops_ep,
    pub cm: *const fi_ops_cm,
}

#[repr(C)]
pub struct fi_eq_cm_entry {
    pub fid: *mut fid,
    pub info: *mut fi_info,
    // Private data follows (`uint8_t data[]`).
}

layout! {
    fid_pep 40 { ops 24 cm 32 }
    fi_eq_cm_entry 16 { fid 0 info 8 }
}

pub const FI_EP_MSG: u32 = 1;
pub const FI_EP_DGRAM: u32 = 2;
pub const FI_CLASS_PEP: usize = 9;
pub const FI_CLASS_CONNREQ: usize = 18;
/// EQ events (`enum` in `fi_eq.h`).
pub const FI_CONNREQ: u32 = 1;
pub const FI_CONNECTED: u32 = 2;
pub const FI_SHUTDOWN: u32 = 3;
pub const FI_ENOEQ: c_int = 261;
pub const FI_ECONNREFUSED: c_int = 111;
pub const FI_EISCONN: c_int = 106;
pub const FI_ENOTCONN: c_int = 107;
pub const FI_OPT_CM_DATA_SIZE: c_int = 1;
