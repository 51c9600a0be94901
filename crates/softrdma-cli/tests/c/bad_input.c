/*
 * Bad input through the C API of the drop-in libibverbs: each case must get the errno of
 * its C contract and no crash. Run by tests/dropin.rs through `softrdma exec`; prints each
 * failed check and exits 1, or prints "all bad-input checks passed".
 */
#include <infiniband/verbs.h>
#include <errno.h>
#include <stdio.h>
#include <unistd.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <string.h>

#include "self_qp.h"

static int failed;

#define CHECK(cond, ...)                                                  \
	do {                                                              \
		if (!(cond)) {                                            \
			fprintf(stderr, "FAILED %s:%d: ", __FILE__, __LINE__); \
			fprintf(stderr, __VA_ARGS__);                     \
			fprintf(stderr, " (errno %d %s)\n", errno, strerror(errno)); \
			failed = 1;                                       \
		}                                                         \
	} while (0)

static struct ibv_qp *rc_qp(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr a = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 2, .max_recv_sge = 2 },
	};
	return ibv_create_qp(pd, &a);
}

int main(void)
{
	/* NULL where the API allows it: the count of ibv_get_device_list. */
	struct ibv_device **list = ibv_get_device_list(NULL);
	CHECK(list && list[0], "ibv_get_device_list(NULL)");
	if (!list || !list[0])
		return 1;
	struct ibv_context *ctx = ibv_open_device(list[0]);
	CHECK(ctx, "ibv_open_device");
	if (!ctx)
		return 1;

	/* NULL where it does not: EINVAL, no crash. */
	errno = 0;
	CHECK(!ibv_alloc_pd(NULL) && errno == EINVAL, "ibv_alloc_pd(NULL)");
	errno = 0;
	CHECK(!ibv_reg_mr(NULL, &errno, 4, 0) && errno == EINVAL, "ibv_reg_mr(NULL pd)");
	CHECK(ibv_dereg_mr(NULL) == EINVAL, "ibv_dereg_mr(NULL)");
	CHECK(ibv_dealloc_pd(NULL) == EINVAL, "ibv_dealloc_pd(NULL)");
	CHECK(ibv_destroy_cq(NULL) == EINVAL, "ibv_destroy_cq(NULL)");
	CHECK(ibv_destroy_qp(NULL) == EINVAL, "ibv_destroy_qp(NULL)");

	struct ibv_pd *pd = ibv_alloc_pd(ctx), *pd2 = ibv_alloc_pd(ctx);
	CHECK(pd && pd2, "ibv_alloc_pd");
	errno = 0;
	CHECK(!ibv_create_qp(pd, NULL) && errno == EINVAL, "ibv_create_qp(pd, NULL)");

	/* Queries out of range. */
	struct ibv_port_attr pa;
	CHECK(ibv_query_port(ctx, 2, &pa) == EINVAL, "ibv_query_port(port 2)");
	union ibv_gid gid;
	CHECK(ibv_query_gid(ctx, 1, 4096, &gid) == -1, "ibv_query_gid(index 4096)");
	struct ibv_device_attr da;
	CHECK(ibv_query_device(ctx, &da) == 0, "ibv_query_device");

	/* A CQ too big, or of no entries: EINVAL. NULL channel and context are allowed. */
	errno = 0;
	CHECK(!ibv_create_cq(ctx, da.max_cqe + 1, NULL, NULL, 0) && errno == EINVAL,
	      "ibv_create_cq(max_cqe + 1)");
	errno = 0;
	CHECK(!ibv_create_cq(ctx, 0, NULL, NULL, 0) && errno == EINVAL, "ibv_create_cq(0)");
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	CHECK(cq, "ibv_create_cq(16)");

	/* A QP type softrdma does not have: EOPNOTSUPP. */
	struct ibv_qp_init_attr xrc = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_XRC_SEND,
					.cap = { .max_send_wr = 1 } };
	errno = 0;
	CHECK(!ibv_create_qp(pd, &xrc) && errno == EOPNOTSUPP, "ibv_create_qp(XRC)");

	struct ibv_qp *qp = rc_qp(pd, cq);
	CHECK(qp, "ibv_create_qp(RC)");
	char *buf = calloc(1, 4096);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *mr2 = ibv_reg_mr(pd2, buf + 2048, 2048, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr && mr2, "ibv_reg_mr");

	/* A range that is not all mapped is refused with EFAULT, as the kernel refuses to pin
	 * it, instead of faulting later when a peer's WRITE reaches it. */
	long pg = sysconf(_SC_PAGESIZE);
	char *hole = mmap(NULL, 3 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(hole != MAP_FAILED && munmap(hole + pg, pg) == 0, "mmap with a hole");
	errno = 0;
	CHECK(!ibv_reg_mr(pd, hole, 3 * pg, IBV_ACCESS_LOCAL_WRITE) && errno == EFAULT,
	      "ibv_reg_mr over an unmapped page");
	struct ibv_mr *edge = ibv_reg_mr(pd, hole, pg, IBV_ACCESS_LOCAL_WRITE);
	CHECK(edge && ibv_dereg_mr(edge) == 0, "ibv_reg_mr of the mapped page before the hole");
	munmap(hole, pg);
	munmap(hole + 2 * pg, pg);
	/* Remote write without local write: EINVAL (IBTA 10.6.3.1). */
	errno = 0;
	CHECK(!ibv_reg_mr(pd, buf, 64, IBV_ACCESS_REMOTE_WRITE) && errno == EINVAL,
	      "ibv_reg_mr(REMOTE_WRITE without LOCAL_WRITE)");

	/* Destroying what is still in use: EBUSY. */
	CHECK(ibv_dealloc_pd(pd) == EBUSY, "ibv_dealloc_pd with a QP and an MR");
	CHECK(ibv_destroy_cq(cq) == EBUSY, "ibv_destroy_cq with a QP");

	/* Posting to a QP in RESET: EINVAL, and bad_wr names the WR. */
	struct ibv_sge sge = { (uintptr_t)buf, 64, mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad = NULL;
	CHECK(ibv_post_send(qp, &wr, &bad) == EINVAL && bad == &wr, "ibv_post_send in RESET");
	struct ibv_recv_wr rwr = { .wr_id = 2, .sg_list = &sge, .num_sge = 1 }, *rbad = NULL;
	CHECK(ibv_post_recv(qp, &rwr, &rbad) == EINVAL && rbad == &rwr, "ibv_post_recv in RESET");

	/* A transition the table does not have: RESET -> RTS. */
	struct ibv_qp_attr bad_attr = { .qp_state = IBV_QPS_RTS };
	CHECK(ibv_modify_qp(qp, &bad_attr, IBV_QP_STATE) == EINVAL, "modify RESET -> RTS");

	CHECK(connect_to_self(qp, ctx) == 0, "connect the QP to itself");

	/* Too many SGEs (the QP has 2): EINVAL, nothing posted. */
	struct ibv_sge three[3] = { sge, sge, sge };
	wr.sg_list = three;
	wr.num_sge = 3;
	bad = NULL;
	CHECK(ibv_post_send(qp, &wr, &bad) == EINVAL && bad == &wr, "ibv_post_send with 3 SGEs");

	/* A count far past the array (garbage in num_sge) is refused before the list is read:
	 * reading a million SGEs from a three-entry array would fault (and memcheck sees it). */
	wr.num_sge = 1 << 20;
	bad = NULL;
	CHECK(ibv_post_send(qp, &wr, &bad) == EINVAL && bad == &wr, "ibv_post_send with 2^20 SGEs");
	struct ibv_recv_wr huge = { .wr_id = 3, .sg_list = three, .num_sge = 1 << 20 }, *hbad = NULL;
	CHECK(ibv_post_recv(qp, &huge, &hbad) == EINVAL && hbad == &huge, "ibv_post_recv with 2^20 SGEs");

	/* An inline send longer than the QP's max_inline_data is refused before it is copied
	 * (its length runs past the buffer). */
	struct ibv_sge long_inline = { (uintptr_t)buf, 1u << 30, 0 };
	wr.sg_list = &long_inline;
	wr.num_sge = 1;
	wr.send_flags = IBV_SEND_INLINE;
	bad = NULL;
	CHECK(ibv_post_send(qp, &wr, &bad) == EINVAL && bad == &wr, "ibv_post_send inline of 1 GiB");
	wr.send_flags = IBV_SEND_SIGNALED;

	/* ibv_poll_cq with num_entries 0 returns 0; a negative count is refused. */
	struct ibv_wc wc;
	CHECK(ibv_poll_cq(cq, 0, &wc) == 0, "ibv_poll_cq(0)");
	CHECK(ibv_poll_cq(cq, -1, &wc) < 0, "ibv_poll_cq(-1)");

	/* An lkey from another PD: the post is accepted, its completion is a local
	 * protection error (IBTA 10.6.3.1: the key must belong to the QP's PD). */
	struct ibv_sge other = { (uintptr_t)buf + 2048, 64, mr2->lkey };
	wr.sg_list = &other;
	wr.num_sge = 1;
	wr.wr_id = 7;
	CHECK(ibv_post_send(qp, &wr, &bad) == 0, "ibv_post_send with another PD's lkey");
	int n;
	do
		n = ibv_poll_cq(cq, 1, &wc);
	while (n == 0);
	CHECK(n == 1 && wc.wr_id == 7 && wc.status == IBV_WC_LOC_PROT_ERR,
	      "completion of the other PD's lkey: n %d status %s", n,
	      n == 1 ? ibv_wc_status_str(wc.status) : "-");

	/* Verbs softrdma does not implement: EOPNOTSUPP. */
	errno = 0;
	CHECK(!ibv_alloc_mw(pd, IBV_MW_TYPE_1) && errno == EOPNOTSUPP, "ibv_alloc_mw");
	struct ibv_alloc_dm_attr dm = { .length = 64 };
	errno = 0;
	CHECK(!ibv_alloc_dm(ctx, &dm) && errno == EOPNOTSUPP, "ibv_alloc_dm");
	/* ibv_rereg_mr with no change asked: IBV_REREG_MR_ERR_INPUT, EINVAL. */
	errno = 0;
	CHECK(ibv_rereg_mr(mr, 0, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_INPUT && errno == EINVAL,
	      "ibv_rereg_mr(flags 0)");
	struct ibv_cq_init_attr_ex cx = { .cqe = 4, .wc_flags = IBV_WC_EX_WITH_FLOW_TAG };
	errno = 0;
	CHECK(!ibv_create_cq_ex(ctx, &cx) && errno == EOPNOTSUPP, "ibv_create_cq_ex(FLOW_TAG)");

	CHECK(ibv_destroy_qp(qp) == 0, "ibv_destroy_qp");
	CHECK(ibv_dereg_mr(mr) == 0 && ibv_dereg_mr(mr2) == 0, "ibv_dereg_mr");
	CHECK(ibv_destroy_cq(cq) == 0, "ibv_destroy_cq");
	CHECK(ibv_dealloc_pd(pd) == 0 && ibv_dealloc_pd(pd2) == 0, "ibv_dealloc_pd");
	CHECK(ibv_close_device(ctx) == 0, "ibv_close_device");
	ibv_free_device_list(list);
	free(buf);
	if (failed)
		return 1;
	printf("all bad-input checks passed\n");
	return 0;
}
