/*
 * For the C tests: connects an RC QP to itself through the device's RoCE v2 GID (index 1),
 * RESET -> INIT -> RTR -> RTS, so that one process can send and receive.
 */
#ifndef SOFTRDMA_SELF_QP_H
#define SOFTRDMA_SELF_QP_H

#include <infiniband/verbs.h>

/* 0 on success, else the failing step's return. */
static int connect_to_self(struct ibv_qp *qp, struct ibv_context *ctx)
{
	union ibv_gid gid;
	int r = ibv_query_gid(ctx, 1, 1, &gid);
	if (r)
		return r;
	struct ibv_qp_attr init = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				    .qp_access_flags = IBV_ACCESS_LOCAL_WRITE };
	struct ibv_qp_attr rtr = {
		.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = qp->qp_num,
		.max_dest_rd_atomic = 1, .min_rnr_timer = 1,
		.ah_attr = { .is_global = 1, .grh = { .dgid = gid, .sgid_index = 1 }, .port_num = 1 },
	};
	struct ibv_qp_attr rts = { .qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7,
				   .rnr_retry = 7, .max_rd_atomic = 1 };
	/* Each transition with the attributes it must be given. */
	struct {
		struct ibv_qp_attr *attr;
		int mask;
	} steps[] = {
		{ &init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS },
		{ &rtr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER },
		{ &rts, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC },
	};
	for (unsigned i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
		r = ibv_modify_qp(qp, steps[i].attr, steps[i].mask);
		if (r)
			return r;
	}
	return 0;
}

#endif
