//! libibverbs (`libibverbs.so.1`, IBVERBS_1.0-1.14 and the provider symbols) over
//! softrdma's verbs, one module per kind of object and verb:
//! - the devices and contexts ([`context`], what every verb reaches its objects through),
//!   fork support ([`fork`]) and the C objects ([`objects`]);
//! - the device verbs ([`device`]: list, open, close), the queries ([`query`]) and the
//!   sysfs files ([`sysfs`]);
//! - protection domains ([`pd`]), memory regions ([`mr`]), address handles ([`ah`]),
//!   completion queues and channels ([`cq`]), shared receive queues ([`srq`]);
//! - queue pairs: creation ([`qp`]), attributes ([`qp_attr`]), the post verbs ([`post`]),
//!   the `ibv_wr_*` builders ([`qp_ex`]) and multicast ([`mcast`]);
//! - asynchronous events ([`async_event`]), the string and rate helpers ([`strings`]), and
//!   the verbs softrdma does not implement ([`unsupported`]).
//!
//! The modules depend on each other in one order: `fork`, `context`, `objects`, then the
//! verbs of each object, and `device` last, whose `verbs_context` table names the verbs of
//! the others.

pub(crate) mod ah;
pub(crate) mod async_event;
pub(crate) mod context;
pub(crate) mod cq;
pub(crate) mod device;
pub(crate) mod fork;
pub(crate) mod mcast;
pub(crate) mod mr;
pub(crate) mod objects;
pub(crate) mod pd;
pub(crate) mod post;
pub(crate) mod qp;
pub(crate) mod qp_attr;
pub(crate) mod qp_ex;
pub(crate) mod query;
pub(crate) mod srq;
pub(crate) mod strings;
pub(crate) mod sysfs;
pub(crate) mod unsupported;
