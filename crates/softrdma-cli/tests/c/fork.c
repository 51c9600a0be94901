/*
 * fork() with open contexts. The parent opens the device and sends through a QP
 * connected to itself, with its progress thread running, then forks. The child:
 *  - may not use the parent's objects: post, poll and create fail with EPERM;
 *  - destroys and closes them (0, and nothing of the parent's changes, no hang);
 *  - opens a device of its own on another address (set after the fork, through the
 *    parent's ibv_device pointer) and sends through it.
 * Then the parent sends again on its QP. Exit status 0 when all of it holds; each failed
 * check is printed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "self_qp.h"

#define CHECK(c)                                                                        \
	do {                                                                            \
		if (!(c)) {                                                             \
			fprintf(stderr, "%d: %s: failed (errno %d)\n", getpid(), #c, errno); \
			return 1;                                                       \
		}                                                                       \
	} while (0)

struct res {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char buf[128];
};

static int setup(struct res *r, struct ibv_device *dev)
{
	CHECK((r->ctx = ibv_open_device(dev)));
	CHECK((r->pd = ibv_alloc_pd(r->ctx)));
	CHECK((r->cq = ibv_create_cq(r->ctx, 16, NULL, NULL, 0)));
	struct ibv_qp_init_attr qa = { .send_cq = r->cq, .recv_cq = r->cq, .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 4, .max_recv_wr = 4,
						.max_send_sge = 1, .max_recv_sge = 1 } };
	CHECK((r->qp = ibv_create_qp(r->pd, &qa)));
	CHECK((r->mr = ibv_reg_mr(r->pd, r->buf, sizeof(r->buf), IBV_ACCESS_LOCAL_WRITE)));
	CHECK(connect_to_self(r->qp, r->ctx) == 0);
	return 0;
}

/* A SEND of `text` from the first half of the buffer into the second, both completions
 * checked, within two seconds. */
static int round_trip(struct res *r, const char *text)
{
	memset(r->buf, 0, sizeof(r->buf));
	strcpy(r->buf, text);
	struct ibv_sge rs = { (uintptr_t)(r->buf + 64), 64, r->mr->lkey };
	struct ibv_recv_wr rw = { .wr_id = 2, .sg_list = &rs, .num_sge = 1 }, *rbad;
	CHECK(ibv_post_recv(r->qp, &rw, &rbad) == 0);
	struct ibv_sge ss = { (uintptr_t)r->buf, 64, r->mr->lkey };
	struct ibv_send_wr sw = { .wr_id = 1, .sg_list = &ss, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *sbad;
	CHECK(ibv_post_send(r->qp, &sw, &sbad) == 0);
	int got = 0;
	time_t end = time(NULL) + 2;
	while (got < 2) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(r->cq, 1, &wc);
		CHECK(n >= 0);
		if (n == 1) {
			CHECK(wc.status == IBV_WC_SUCCESS);
			got++;
		}
		CHECK(time(NULL) <= end);
	}
	CHECK(strcmp(r->buf + 64, text) == 0);
	return 0;
}

static int teardown(struct res *r)
{
	CHECK(ibv_destroy_qp(r->qp) == 0);
	CHECK(ibv_dereg_mr(r->mr) == 0);
	CHECK(ibv_destroy_cq(r->cq) == 0);
	CHECK(ibv_dealloc_pd(r->pd) == 0);
	CHECK(ibv_close_device(r->ctx) == 0);
	return 0;
}

static int child(struct res *p, struct ibv_device *dev, const char *addr)
{
	struct ibv_sge s = { (uintptr_t)p->buf, 8, p->mr->lkey };
	struct ibv_send_wr w = { .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND }, *bad = NULL;
	CHECK(ibv_post_send(p->qp, &w, &bad) == EPERM && bad == &w);
	struct ibv_wc wc;
	errno = 0;
	CHECK(ibv_poll_cq(p->cq, 1, &wc) == -1 && errno == EPERM);
	errno = 0;
	CHECK(ibv_alloc_pd(p->ctx) == NULL && errno == EPERM);
	CHECK(ibv_req_notify_cq(p->cq, 0) == EPERM);
	CHECK(teardown(p) == 0);

	CHECK(setenv("SOFTRDMA_ADDR", addr, 1) == 0);
	struct res c;
	CHECK(setup(&c, dev) == 0);
	union ibv_gid gid;
	CHECK(ibv_query_gid(c.ctx, 1, 1, &gid) == 0);
	unsigned char last;
	CHECK(sscanf(addr, "%*d.%*d.%*d.%hhu", &last) == 1);
	CHECK(gid.raw[15] == last); /* the child's own address, not the parent's */
	CHECK(round_trip(&c, "from the child") == 0);
	CHECK(teardown(&c) == 0);
	return 0;
}

int main(int argc, char **argv)
{
	CHECK(argc == 2);
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n >= 1);
	struct res p;
	CHECK(setup(&p, list[0]) == 0);
	CHECK(round_trip(&p, "before the fork") == 0);
	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0)
		_exit(child(&p, list[0], argv[1]));
	int st;
	CHECK(waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CHECK(round_trip(&p, "after the fork") == 0);
	CHECK(teardown(&p) == 0);
	ibv_free_device_list(list);
	printf("fork: child and parent verified\n");
	return 0;
}
