//! librdmacm (`librdmacm.so.1`, RDMACM_1.0-1.3) over `softrdma::cm`, served by this same
//! library under its second name, split as rdma-core's `librdmacm` is:
//! - the connection manager of `cma.c`: its devices ([`device`]), the C objects and the
//!   lifecycle of channels and IDs ([`id`]), events ([`event`]), the connection verbs
//!   ([`conn`]), the QP and SRQ of an ID ([`qp`]) and multicast ([`mcast`]);
//! - the endpoint helpers `rdma_create_ep` & co ([`ep`]);
//! - `rdma_getaddrinfo` ([`addrinfo`], librdmacm's `addrinfo.c`);
//! - the rsocket calls, not implemented yet ([`unsupported`]).
//!
//! The structs callers read directly are in [`crate::abi::rdmacm`].
//!
//! Each C object is a `#[repr(C)]` box whose first field is the public struct, so the
//! caller's pointer is the box's. An ID's Rust `CmId` keeps the box's address
//! ([`softrdma::cm::CmId::user`]), which is how an event finds the C ID it is for; an ID
//! being destroyed clears it first, and events of IDs already destroyed are dropped.
//!
//! The device of an ID is the one whose address the ID binds to or resolves from (the
//! first device when the address says nothing), opened once per process for the CM and
//! kept open, as librdmacm keeps its devices: `id->verbs` is that context.
//!
//! The modules depend on each other in this order only (each on those before it):
//! `device`, `id`, `event`, then `conn`, `qp` and `mcast`, then `ep`.

pub(crate) mod addrinfo;
pub(crate) mod conn;
pub(crate) mod device;
pub(crate) mod ep;
pub(crate) mod event;
pub(crate) mod id;
pub(crate) mod mcast;
mod ports;
pub(crate) mod qp;
pub(crate) mod unsupported;
