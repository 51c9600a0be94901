//! The values of both headers' enums and flags that the verbs read or answer with, under
//! their C names (`super::tests` checks each against the installed headers).

use std::ffi::c_int;

// `enum ibv_port_state`.
pub const IBV_PORT_NOP: c_int = 0;
pub const IBV_PORT_DOWN: c_int = 1;
pub const IBV_PORT_INIT: c_int = 2;
pub const IBV_PORT_ARMED: c_int = 3;
pub const IBV_PORT_ACTIVE: c_int = 4;
pub const IBV_PORT_ACTIVE_DEFER: c_int = 5;

// `enum ibv_atomic_cap`.
pub const IBV_ATOMIC_NONE: c_int = 0;
pub const IBV_ATOMIC_HCA: c_int = 1;
pub const IBV_ATOMIC_GLOB: c_int = 2;

// `IBV_LINK_LAYER_*`.
pub const IBV_LINK_LAYER_UNSPECIFIED: c_int = 0;
pub const IBV_LINK_LAYER_INFINIBAND: c_int = 1;
pub const IBV_LINK_LAYER_ETHERNET: c_int = 2;

// `enum ibv_gid_type`.
pub const IBV_GID_TYPE_IB: c_int = 0;
pub const IBV_GID_TYPE_ROCE_V1: c_int = 1;
pub const IBV_GID_TYPE_ROCE_V2: c_int = 2;

// `enum ibv_wr_opcode`.
pub const IBV_WR_RDMA_WRITE: c_int = 0;
pub const IBV_WR_RDMA_WRITE_WITH_IMM: c_int = 1;
pub const IBV_WR_SEND: c_int = 2;
pub const IBV_WR_SEND_WITH_IMM: c_int = 3;
pub const IBV_WR_RDMA_READ: c_int = 4;
pub const IBV_WR_ATOMIC_CMP_AND_SWP: c_int = 5;
pub const IBV_WR_ATOMIC_FETCH_AND_ADD: c_int = 6;
pub const IBV_WR_SEND_WITH_INV: c_int = 9;

// `enum ibv_qp_type`.
pub const IBV_QPT_RC: c_int = 2;
pub const IBV_QPT_UC: c_int = 3;
pub const IBV_QPT_UD: c_int = 4;
pub const IBV_QPT_XRC_SEND: c_int = 9;
pub const IBV_QPT_XRC_RECV: c_int = 10;

// `enum ibv_qp_state`.
pub const IBV_QPS_RESET: c_int = 0;
pub const IBV_QPS_INIT: c_int = 1;
pub const IBV_QPS_RTR: c_int = 2;
pub const IBV_QPS_RTS: c_int = 3;
pub const IBV_QPS_SQD: c_int = 4;
pub const IBV_QPS_SQE: c_int = 5;
pub const IBV_QPS_ERR: c_int = 6;

// `enum ibv_qp_attr_mask`: the attributes an `ibv_modify_qp` sets (and a query reports).
pub const IBV_QP_STATE: c_int = 1 << 0;
pub const IBV_QP_CUR_STATE: c_int = 1 << 1;
pub const IBV_QP_EN_SQD_ASYNC_NOTIFY: c_int = 1 << 2;
pub const IBV_QP_ACCESS_FLAGS: c_int = 1 << 3;
pub const IBV_QP_PKEY_INDEX: c_int = 1 << 4;
pub const IBV_QP_PORT: c_int = 1 << 5;
pub const IBV_QP_QKEY: c_int = 1 << 6;
pub const IBV_QP_AV: c_int = 1 << 7;
pub const IBV_QP_PATH_MTU: c_int = 1 << 8;
pub const IBV_QP_TIMEOUT: c_int = 1 << 9;
pub const IBV_QP_RETRY_CNT: c_int = 1 << 10;
pub const IBV_QP_RNR_RETRY: c_int = 1 << 11;
pub const IBV_QP_RQ_PSN: c_int = 1 << 12;
pub const IBV_QP_MAX_QP_RD_ATOMIC: c_int = 1 << 13;
pub const IBV_QP_ALT_PATH: c_int = 1 << 14;
pub const IBV_QP_MIN_RNR_TIMER: c_int = 1 << 15;
pub const IBV_QP_SQ_PSN: c_int = 1 << 16;
pub const IBV_QP_MAX_DEST_RD_ATOMIC: c_int = 1 << 17;
pub const IBV_QP_PATH_MIG_STATE: c_int = 1 << 18;
pub const IBV_QP_CAP: c_int = 1 << 19;
pub const IBV_QP_DEST_QPN: c_int = 1 << 20;
pub const IBV_QP_RATE_LIMIT: c_int = 1 << 25;

// `enum ibv_qp_init_attr_mask`.
pub const IBV_QP_INIT_ATTR_PD: u32 = 1 << 0;
pub const IBV_QP_INIT_ATTR_CREATE_FLAGS: u32 = 1 << 2;
pub const IBV_QP_INIT_ATTR_SEND_OPS_FLAGS: u32 = 1 << 6;

// `enum ibv_srq_attr_mask`, `enum ibv_srq_type` and `enum ibv_srq_init_attr_mask`.
pub const IBV_SRQ_MAX_WR: c_int = 1 << 0;
pub const IBV_SRQ_LIMIT: c_int = 1 << 1;
pub const IBV_SRQT_BASIC: c_int = 0;
pub const IBV_SRQ_INIT_ATTR_TYPE: u32 = 1 << 0;
pub const IBV_SRQ_INIT_ATTR_PD: u32 = 1 << 1;

// `enum ibv_wc_flags`: the completion has a GRH.
pub const IBV_WC_GRH: u32 = 1 << 0;

// `enum ibv_event_type`: the asynchronous events softrdma raises.
pub const IBV_EVENT_CQ_ERR: c_int = 0;
pub const IBV_EVENT_QP_FATAL: c_int = 1;
pub const IBV_EVENT_QP_REQ_ERR: c_int = 2;
pub const IBV_EVENT_QP_ACCESS_ERR: c_int = 3;
pub const IBV_EVENT_COMM_EST: c_int = 4;
pub const IBV_EVENT_SQ_DRAINED: c_int = 5;
pub const IBV_EVENT_PORT_ACTIVE: c_int = 9;
pub const IBV_EVENT_SRQ_LIMIT_REACHED: c_int = 15;
pub const IBV_EVENT_QP_LAST_WQE_REACHED: c_int = 16;

// `enum rdma_cm_event_type`: the events softrdma's connection manager raises.
pub const RDMA_CM_EVENT_ADDR_RESOLVED: c_int = 0;
pub const RDMA_CM_EVENT_ROUTE_RESOLVED: c_int = 2;
pub const RDMA_CM_EVENT_CONNECT_REQUEST: c_int = 4;
pub const RDMA_CM_EVENT_CONNECT_RESPONSE: c_int = 5;
pub const RDMA_CM_EVENT_UNREACHABLE: c_int = 7;
pub const RDMA_CM_EVENT_REJECTED: c_int = 8;
pub const RDMA_CM_EVENT_ESTABLISHED: c_int = 9;
pub const RDMA_CM_EVENT_DISCONNECTED: c_int = 10;
pub const RDMA_CM_EVENT_MULTICAST_JOIN: c_int = 12;
pub const RDMA_CM_EVENT_TIMEWAIT_EXIT: c_int = 15;

// `enum rdma_port_space`.
pub const RDMA_PS_IPOIB: c_int = 0x0002;
pub const RDMA_PS_TCP: c_int = 0x0106;
pub const RDMA_PS_UDP: c_int = 0x0111;
pub const RDMA_PS_IB: c_int = 0x013F;

// `rdma_set_option`'s levels and the options of `RDMA_OPTION_ID`.
pub const RDMA_OPTION_ID: c_int = 0;
pub const RDMA_OPTION_ID_TOS: c_int = 0;
pub const RDMA_OPTION_ID_REUSEADDR: c_int = 1;
pub const RDMA_OPTION_ID_AFONLY: c_int = 2;
pub const RDMA_OPTION_ID_ACK_TIMEOUT: c_int = 3;

// `RDMA_MAX_RESP_RES` and `RDMA_MAX_INIT_DEPTH`: the most the device allows.
pub const RDMA_MAX_RESP_RES: u8 = 0xFF;
pub const RDMA_MAX_INIT_DEPTH: u8 = 0xFF;

// `rdma_addrinfo.ai_flags`, and `AF_IB` (`<infiniband/ib.h>`, which softrdma does not
// resolve: it has no subnet administrator).
pub const RAI_PASSIVE: c_int = 1 << 0;
pub const RAI_NUMERICHOST: c_int = 1 << 1;
pub const AF_IB: c_int = 27;

// `enum rdma_cm_join_mc_attr_mask` and `enum rdma_cm_mc_join_flags`.
pub const RDMA_CM_JOIN_MC_ATTR_ADDRESS: u32 = 1 << 0;
pub const RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS: u32 = 1 << 1;
pub const RDMA_CM_JOIN_MC_ATTR_RESERVED: u32 = 1 << 2;
pub const RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER: u32 = 1;
pub const RDMA_MC_JOIN_FLAG_RESERVED: u32 = 2;
