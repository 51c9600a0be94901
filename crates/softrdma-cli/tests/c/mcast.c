/*
 * UD multicast through the C API, two devices in one process (SOFTRDMA_CONFIG names
 * them). QP a (device 0) sends to the group ::ffff:239.49.0.1; attached are a itself, b
 * and c (device 1, b attached twice), and e (device 1, another Q_Key); d (device 1) is
 * not. Checks: a, b and c receive the SEND once each, with a GRH naming the group; d and
 * e receive nothing; after c detaches, b receives and c does not; bad attaches get
 * EINVAL. Exit status 0 when all of it holds; each failed check is printed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#include "check.h"

#define QKEY 0x11111111
#define SLOT 128

struct end {
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char buf[4 * SLOT];
};

static void make(struct end *e, struct ibv_context *ctx, struct ibv_pd *pd, uint32_t qkey)
{
	CHECK((e->cq = ibv_create_cq(ctx, 16, NULL, NULL, 0)));
	struct ibv_qp_init_attr qa = { .send_cq = e->cq, .recv_cq = e->cq, .qp_type = IBV_QPT_UD,
				       .cap = { .max_send_wr = 4, .max_recv_wr = 4,
						.max_send_sge = 1, .max_recv_sge = 1 } };
	CHECK((e->qp = ibv_create_qp(pd, &qa)));
	CHECK((e->mr = ibv_reg_mr(pd, e->buf, sizeof(e->buf), IBV_ACCESS_LOCAL_WRITE)));
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = qkey };
	CHECK(ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				       IBV_QP_QKEY) == 0);
	a.qp_state = IBV_QPS_RTR;
	CHECK(ibv_modify_qp(e->qp, &a, IBV_QP_STATE) == 0);
	a.qp_state = IBV_QPS_RTS;
	CHECK(ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0);
	for (int i = 1; i < 4; i++) {
		struct ibv_sge s = { (uintptr_t)(e->buf + i * SLOT), SLOT, e->mr->lkey };
		struct ibv_recv_wr w = { .wr_id = i, .sg_list = &s, .num_sge = 1 }, *bad;
		CHECK(ibv_post_recv(e->qp, &w, &bad) == 0);
	}
}

/* The next completion of `e`, waiting at most two seconds. */
static struct ibv_wc next(struct end *e)
{
	struct ibv_wc wc;
	time_t end = time(NULL) + 2;
	for (;;) {
		int n = ibv_poll_cq(e->cq, 1, &wc);
		CHECK(n >= 0);
		if (n == 1)
			return wc;
		CHECK(time(NULL) <= end);
	}
}

static int none(struct end *e)
{
	struct ibv_wc wc;
	return ibv_poll_cq(e->cq, 1, &wc) == 0;
}

/* A receive of `text` from `from`, with the group in the GRH's place for the IPv4 header
 * (its destination address, the last four bytes). */
static void got(struct end *e, struct end *from, const char *text)
{
	struct ibv_wc wc = next(e);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV);
	CHECK(wc.src_qp == from->qp->qp_num && (wc.wc_flags & IBV_WC_GRH));
	const char *slot = e->buf + wc.wr_id * SLOT;
	struct in_addr group;
	inet_pton(AF_INET, "239.49.0.1", &group);
	CHECK(memcmp(slot + 36, &group, 4) == 0);
	CHECK(strcmp(slot + 40, text) == 0);
}

static void send_to_group(struct end *a, struct ibv_ah *ah, const char *text)
{
	strcpy(a->buf, text);
	struct ibv_sge s = { (uintptr_t)a->buf, (uint32_t)strlen(text) + 1, a->mr->lkey };
	struct ibv_send_wr w = { .wr_id = 9, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED }, *bad;
	w.wr.ud.ah = ah;
	w.wr.ud.remote_qpn = 0xffffff;
	w.wr.ud.remote_qkey = QKEY;
	CHECK(ibv_post_send(a->qp, &w, &bad) == 0);
}

int main(void)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n == 2);
	struct ibv_context *c0 = ibv_open_device(list[0]), *c1 = ibv_open_device(list[1]);
	CHECK(c0 && c1);
	struct ibv_device_attr da;
	CHECK(ibv_query_device(c1, &da) == 0 && da.max_mcast_grp > 0 && da.max_mcast_qp_attach > 0);
	struct ibv_pd *p0 = ibv_alloc_pd(c0), *p1 = ibv_alloc_pd(c1);
	CHECK(p0 && p1);
	static struct end a, b, c, d, e;
	make(&a, c0, p0, QKEY);
	make(&b, c1, p1, QKEY);
	make(&c, c1, p1, QKEY);
	make(&d, c1, p1, QKEY);
	make(&e, c1, p1, 0x22222222);

	union ibv_gid g = { 0 };
	g.raw[10] = g.raw[11] = 0xff;
	inet_pton(AF_INET, "239.49.0.1", &g.raw[12]);
	CHECK(ibv_attach_mcast(a.qp, &g, 0) == 0);
	CHECK(ibv_attach_mcast(b.qp, &g, 0) == 0);
	CHECK(ibv_attach_mcast(b.qp, &g, 0) == 0); /* twice is once */
	CHECK(ibv_attach_mcast(c.qp, &g, 0) == 0);
	CHECK(ibv_attach_mcast(e.qp, &g, 0) == 0);

	/* Bad attaches. */
	union ibv_gid unicast;
	CHECK(ibv_query_gid(c1, 1, 1, &unicast) == 0);
	CHECK(ibv_attach_mcast(d.qp, &unicast, 0) == EINVAL);
	union ibv_gid v6 = { .raw = { 0xff, 0x0e } };
	CHECK(ibv_attach_mcast(d.qp, &v6, 0) == EINVAL); /* IPv6 group, IPv4 device */
	CHECK(ibv_detach_mcast(d.qp, &g, 0) == EINVAL);	 /* not attached */
	struct ibv_qp_init_attr rc = { .send_cq = d.cq, .recv_cq = d.cq, .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 1, .max_recv_wr = 1,
						.max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *rcqp = ibv_create_qp(p1, &rc);
	CHECK(rcqp && ibv_attach_mcast(rcqp, &g, 0) == EINVAL);
	CHECK(ibv_destroy_qp(rcqp) == 0);

	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1,
				  .grh = { .dgid = g, .sgid_index = 1, .hop_limit = 1 } };
	struct ibv_ah *ah = ibv_create_ah(p0, &aa);
	CHECK(ah);

	send_to_group(&a, ah, "first");
	struct ibv_wc wc = next(&a);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND);
	got(&a, &a, "first"); /* the sender's own QP is a member too */
	got(&b, &a, "first");
	got(&c, &a, "first");
	/* Device 1 handled the datagram for all its members at once: what b and c got, the
	 * others would have got by now. */
	CHECK(none(&b) && none(&c) && none(&d) && none(&e));

	CHECK(ibv_detach_mcast(c.qp, &g, 0) == 0);
	CHECK(ibv_detach_mcast(c.qp, &g, 0) == EINVAL);
	send_to_group(&a, ah, "second");
	wc = next(&a);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND);
	got(&a, &a, "second");
	got(&b, &a, "second");
	CHECK(none(&b) && none(&c) && none(&d) && none(&e));

	/* Destroying attached QPs detaches them. */
	CHECK(ibv_destroy_ah(ah) == 0);
	struct end *all[] = { &a, &b, &c, &d, &e };
	for (int i = 0; i < 5; i++) {
		CHECK(ibv_destroy_qp(all[i]->qp) == 0);
		CHECK(ibv_dereg_mr(all[i]->mr) == 0);
		CHECK(ibv_destroy_cq(all[i]->cq) == 0);
	}
	CHECK(ibv_dealloc_pd(p0) == 0 && ibv_dealloc_pd(p1) == 0);
	CHECK(ibv_close_device(c0) == 0 && ibv_close_device(c1) == 0);
	ibv_free_device_list(list);
	printf("multicast verified\n");
	return 0;
}
