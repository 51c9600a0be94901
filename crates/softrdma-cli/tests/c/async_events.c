/*
 * Asynchronous events through the drop-in: an SRQ that falls below its armed limit and a
 * CQ that overflows must each be reported on the context's async_fd, naming the object
 * (event.element.srq / .cq) with its user context. Run by tests/dropin.rs; prints
 * "async events named their objects" on success.
 */
#include <infiniband/verbs.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "self_qp.h"

static void die(const char *what)
{
	fprintf(stderr, "FAILED: %s (errno %d %s)\n", what, errno, strerror(errno));
	exit(1);
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	if (!list || !list[0])
		die("no device");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	if (!pd)
		die("open/alloc_pd");
	/* The send CQ holds one completion: three signaled SENDs overflow it. */
	struct ibv_cq *scq = ibv_create_cq(ctx, 1, (void *)0x5c, NULL, 0);
	struct ibv_cq *rcq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_srq_init_attr si = { .srq_context = (void *)0x54, .attr = { .max_wr = 8, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(pd, &si);
	if (!scq || !rcq || !srq)
		die("create CQs/SRQ");
	char *buf = calloc(1, 4096);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_qp_init_attr qi = { .send_cq = scq, .recv_cq = rcq, .srq = srq, .qp_type = IBV_QPT_RC,
				       .sq_sig_all = 1, .cap = { .max_send_wr = 8, .max_send_sge = 1 } };
	struct ibv_qp *qp = ibv_create_qp(pd, &qi);
	if (!mr || !qp)
		die("reg_mr/create_qp");
	if (connect_to_self(qp, ctx))
		die("connect the QP to itself");

	/* Six receives, limit 4: three SENDs leave three. */
	struct ibv_sge rs = { (uintptr_t)buf + 2048, 64, mr->lkey };
	for (int i = 0; i < 6; i++) {
		struct ibv_recv_wr r = { .wr_id = i, .sg_list = &rs, .num_sge = 1 }, *bad;
		if (ibv_post_srq_recv(srq, &r, &bad))
			die("post_srq_recv");
	}
	struct ibv_srq_attr lim = { .srq_limit = 4 };
	if (ibv_modify_srq(srq, &lim, IBV_SRQ_LIMIT))
		die("arm the SRQ limit");
	struct ibv_sge ss = { (uintptr_t)buf, 64, mr->lkey };
	for (int i = 0; i < 3; i++) {
		struct ibv_send_wr w = { .wr_id = 100 + i, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND }, *bad;
		if (ibv_post_send(qp, &w, &bad))
			die("post_send");
	}

	int seen_srq = 0, seen_cq = 0;
	if (fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK))
		die("O_NONBLOCK on async_fd");
	while (!(seen_srq && seen_cq)) {
		struct pollfd p = { .fd = ctx->async_fd, .events = POLLIN };
		if (poll(&p, 1, 10000) != 1)
			die(seen_srq ? "no CQ_ERR within 10 s" : "no SRQ_LIMIT_REACHED within 10 s");
		struct ibv_async_event e;
		if (ibv_get_async_event(ctx, &e)) {
			if (errno == EAGAIN)
				continue;
			die("ibv_get_async_event");
		}
		if (e.event_type == IBV_EVENT_SRQ_LIMIT_REACHED) {
			if (e.element.srq != srq || e.element.srq->srq_context != (void *)0x54)
				die("SRQ_LIMIT_REACHED names another SRQ");
			struct ibv_srq_attr q;
			if (ibv_query_srq(srq, &q) || q.srq_limit != 0)
				die("the limit is not disarmed after its event");
			seen_srq = 1;
		} else if (e.event_type == IBV_EVENT_CQ_ERR) {
			if (e.element.cq != scq || e.element.cq->cq_context != (void *)0x5c)
				die("CQ_ERR names another CQ");
			seen_cq = 1;
		}
		ibv_ack_async_event(&e);
	}
	printf("async events named their objects\n");
	return 0;
}
