//! libfabric 1.17's structs and constants for RMA, atomics and counters (`fi_rma.h`,
//! `fi_atomic.h`, `fi_eq.h`), their layouts checked at compile time against the figures
//! measured from the installed headers (`docs/fabric-provider.md` §2.2).

#![allow(non_camel_case_types, missing_docs, dead_code)]

use super::{Slot, fi_addr_t, fid, iovec};
use std::ffi::{c_int, c_void};

#[repr(C)]
pub struct fi_rma_iov {
    pub addr: u64,
    pub len: usize,
    pub key: u64,
}

#[repr(C)]
pub struct fi_rma_ioc {
    pub addr: u64,
    pub count: usize,
    pub key: u64,
}

#[repr(C)]
pub struct fi_msg_rma {
    pub msg_iov: *const iovec,
    pub desc: *mut *mut c_void,
    pub iov_count: usize,
    pub addr: fi_addr_t,
    pub rma_iov: *const fi_rma_iov,
    pub rma_iov_count: usize,
    pub context: *mut c_void,
    pub data: u64,
}

#[repr(C)]
pub struct fi_ioc {
    pub addr: *mut c_void,
    pub count: usize,
}

#[repr(C)]
pub struct fi_msg_atomic {
    pub msg_iov: *const fi_ioc,
    pub desc: *mut *mut c_void,
    pub iov_count: usize,
    pub addr: fi_addr_t,
    pub rma_iov: *const fi_rma_ioc,
    pub rma_iov_count: usize,
    pub datatype: u32,
    pub op: u32,
    pub context: *mut c_void,
    pub data: u64,
}

#[repr(C)]
pub struct fi_atomic_attr {
    pub count: usize,
    pub size: usize,
}

#[repr(C)]
pub struct fi_cntr_attr {
    pub events: u32,
    pub wait_obj: u32,
    pub wait_set: *mut c_void,
    pub flags: u64,
}

#[repr(C)]
pub struct fi_ops_cntr {
    pub size: usize,
    pub read: Slot,
    pub readerr: Slot,
    pub add: Slot,
    pub set: Slot,
    pub wait: Slot,
    pub adderr: Slot,
    pub seterr: Slot,
}

#[repr(C)]
pub struct fid_cntr {
    pub fid: fid,
    pub ops: *const fi_ops_cntr,
}

layout! {
    fi_rma_iov 24 { addr 0 len 8 key 16 }
    fi_rma_ioc 24 { addr 0 count 8 key 16 }
    fi_msg_rma 64 { msg_iov 0 desc 8 iov_count 16 addr 24 rma_iov 32 rma_iov_count 40
        context 48 data 56 }
    fi_ioc 16 { addr 0 count 8 }
    fi_msg_atomic 72 { msg_iov 0 desc 8 iov_count 16 addr 24 rma_iov 32 rma_iov_count 40
        datatype 48 op 52 context 56 data 64 }
    fi_atomic_attr 16 { count 0 size 8 }
    fi_cntr_attr 24 { events 0 wait_obj 4 wait_set 8 flags 16 }
    fi_ops_cntr 64 { read 8 readerr 16 add 24 set 32 wait 40 adderr 48 seterr 56 }
    fid_cntr 32 { ops 24 }
}

/// The target's events on an RMA (`FI_RMA_EVENT`): not offered.
pub const FI_RMA_EVENT: u64 = 1 << 56;
/// `fi_query_atomic`'s flags: the fetching and the comparing forms.
pub const FI_FETCH_ATOMIC: u64 = 1 << 58;
pub const FI_COMPARE_ATOMIC: u64 = 1 << 59;
/// `enum fi_datatype`: the two this provider's atomics take.
pub const FI_INT64: u32 = 6;
pub const FI_UINT64: u32 = 7;
/// `enum fi_op`: the three this provider's atomics do.
pub const FI_SUM: u32 = 2;
pub const FI_ATOMIC_READ: u32 = 10;
pub const FI_CSWAP: u32 = 12;
/// The end of the point-to-point ops and datatypes (anything past is not an op).
pub const FI_ATOMIC_OP_LAST: u32 = 19;
pub const FI_DATATYPE_LAST: u32 = 14;
/// `enum fi_cntr_events`.
pub const FI_CNTR_EVENTS_COMP: u32 = 0;
pub const FI_EACCES: c_int = 13;
