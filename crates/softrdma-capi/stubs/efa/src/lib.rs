//! A stub libefa.so.1 (EFA direct verbs): every symbol and version node that perftest, libfabric and pyverbs import
//! from the real library (they are BIND_NOW, and perftest and libfabric have DT_NEEDED on it),
//! each failing as its C contract says: EOPNOTSUPP for an int (errno set too), NULL with
//! errno EOPNOTSUPP for a pointer, -1 for a size, false for a bool, nothing for void. No
//! softrdma device is an EFA device, so callers take their generic verbs paths.
//!
//! The symbol list is the union of those imports on Debian 12 (`objdump -T`), with each
//! function's return type from rdma-core 44's headers.

softrdma_stub_gen::stubs! {
    "EFA_1.0" ptr: efadv_create_driver_qp;
    "EFA_1.1" int: efadv_query_ah efadv_query_device;
    "EFA_1.1" ptr: efadv_create_qp_ex;
    "EFA_1.2" ptr: efadv_cq_from_ibv_cq_ex efadv_create_cq;
}
