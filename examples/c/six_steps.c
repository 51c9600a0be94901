/*
 * The classic six steps of an RDMA program, in C against <infiniband/verbs.h>:
 * ibv_open_device -> ibv_alloc_pd -> ibv_create_cq -> ibv_create_qp -> ibv_reg_mr ->
 * ibv_post_send. Two RC QPs of one device are connected to each other (through the
 * device's RoCE v2 GID); QP a SENDs a message into a receive of QP b, then RDMA WRITEs
 * into b's region, and every completion and every byte is checked.
 *
 * Build and run on softrdma (no RDMA NIC, no kernel module, no root):
 *   gcc -O2 -Wall -o six_steps examples/c/six_steps.c -libverbs
 *   softrdma exec -- ./six_steps
 * It exits 0 and prints "SEND and RDMA WRITE verified" when all went right.
 */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#define SIZE 4096

static void die(const char *what)
{
	perror(what);
	exit(1);
}

struct end {
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char *buf;
};

/* Waits for one completion and checks it. */
static void expect(struct ibv_cq *cq, uint64_t wr_id, enum ibv_wc_opcode op, uint32_t len)
{
	struct ibv_wc wc;
	int n;

	do
		n = ibv_poll_cq(cq, 1, &wc);
	while (n == 0);
	if (n < 0)
		die("ibv_poll_cq");
	if (wc.status != IBV_WC_SUCCESS) {
		fprintf(stderr, "wr %llu: %s\n", (unsigned long long)wc.wr_id,
			ibv_wc_status_str(wc.status));
		exit(1);
	}
	if (wc.wr_id != wr_id || wc.opcode != op || (len && wc.byte_len != len)) {
		fprintf(stderr, "unexpected completion: wr %llu opcode %d len %u\n",
			(unsigned long long)wc.wr_id, wc.opcode, wc.byte_len);
		exit(1);
	}
}

/* RESET -> INIT -> RTR -> RTS, connected to remote QP number `dest` at `gid`. */
static void connect_qp(struct ibv_qp *qp, uint32_t dest, union ibv_gid *gid, int gid_index)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.port_num = 1,
		.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
	};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					 IBV_QP_ACCESS_FLAGS))
		die("modify to INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.rq_psn = 0;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *gid;
	a.ah_attr.grh.sgid_index = gid_index;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					 IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
					 IBV_QP_MIN_RNR_TIMER))
		die("modify to RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 0;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					 IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		die("modify to RTS");
}

int main(void)
{
	int num, gid_index = 1;
	struct ibv_device **list = ibv_get_device_list(&num);
	if (!list || num == 0)
		die("ibv_get_device_list (no RDMA device)");

	/* 1. Open a device. */
	struct ibv_context *ctx = ibv_open_device(list[0]);
	if (!ctx)
		die("ibv_open_device");
	printf("device %s\n", ibv_get_device_name(list[0]));
	union ibv_gid gid;
	if (ibv_query_gid(ctx, 1, gid_index, &gid))
		die("ibv_query_gid");

	/* 2. Allocate a protection domain. */
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	if (!pd)
		die("ibv_alloc_pd");

	/* 3. Create a completion queue. */
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!cq)
		die("ibv_create_cq");

	struct end e[2];
	for (int i = 0; i < 2; i++) {
		/* 4. Create a queue pair. */
		struct ibv_qp_init_attr init = {
			.send_cq = cq,
			.recv_cq = cq,
			.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
				 .max_recv_sge = 1 },
			.qp_type = IBV_QPT_RC,
			.sq_sig_all = 1,
		};
		e[i].qp = ibv_create_qp(pd, &init);
		if (!e[i].qp)
			die("ibv_create_qp");

		/* 5. Register memory. */
		e[i].buf = calloc(1, SIZE);
		if (!e[i].buf)
			die("calloc");
		e[i].mr = ibv_reg_mr(pd, e[i].buf, SIZE,
				     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
		if (!e[i].mr)
			die("ibv_reg_mr");
	}
	connect_qp(e[0].qp, e[1].qp->qp_num, &gid, gid_index);
	connect_qp(e[1].qp, e[0].qp->qp_num, &gid, gid_index);
	printf("QP %#x <-> QP %#x\n", e[0].qp->qp_num, e[1].qp->qp_num);

	/* b posts a receive for a's SEND. */
	struct ibv_sge rsge = { (uintptr_t)e[1].buf, SIZE, e[1].mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 1, .sg_list = &rsge, .num_sge = 1 }, *bad_rwr;
	if (ibv_post_recv(e[1].qp, &rwr, &bad_rwr))
		die("ibv_post_recv");

	/* 6. Post a send. */
	const char msg[] = "hello over RDMA";
	strcpy(e[0].buf, msg);
	struct ibv_sge sge = { (uintptr_t)e[0].buf, sizeof(msg), e[0].mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 2, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND }, *bad;
	if (ibv_post_send(e[0].qp, &wr, &bad))
		die("ibv_post_send SEND");
	/* The SEND and the receive complete in either order on the shared CQ. */
	for (int got = 0; got < 2; got++) {
		struct ibv_wc wc;
		int n;
		do
			n = ibv_poll_cq(cq, 1, &wc);
		while (n == 0);
		if (n < 0 || wc.status != IBV_WC_SUCCESS) {
			fprintf(stderr, "SEND completion: %s\n",
				n < 0 ? "poll failed" : ibv_wc_status_str(wc.status));
			return 1;
		}
		if (wc.wr_id == 1 && (wc.opcode != IBV_WC_RECV || wc.byte_len != sizeof(msg))) {
			fprintf(stderr, "bad receive completion\n");
			return 1;
		}
	}
	if (strcmp(e[1].buf, msg)) {
		fprintf(stderr, "received %.32s\n", e[1].buf);
		return 1;
	}

	/* An RDMA WRITE into b's region, at an offset. */
	for (int i = 0; i < SIZE / 2; i++)
		e[0].buf[i] = (char)(i * 7);
	sge.length = SIZE / 2;
	wr.wr_id = 3;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.wr.rdma.remote_addr = (uintptr_t)e[1].buf + SIZE / 2;
	wr.wr.rdma.rkey = e[1].mr->rkey;
	if (ibv_post_send(e[0].qp, &wr, &bad))
		die("ibv_post_send WRITE");
	expect(cq, 3, IBV_WC_RDMA_WRITE, 0);
	if (memcmp(e[1].buf + SIZE / 2, e[0].buf, SIZE / 2)) {
		fprintf(stderr, "the WRITE's bytes differ\n");
		return 1;
	}
	printf("SEND and RDMA WRITE verified\n");

	for (int i = 0; i < 2; i++) {
		if (ibv_destroy_qp(e[i].qp) || ibv_dereg_mr(e[i].mr))
			die("destroy");
		free(e[i].buf);
	}
	if (ibv_destroy_cq(cq) || ibv_dealloc_pd(pd) || ibv_close_device(ctx))
		die("teardown");
	ibv_free_device_list(list);
	return 0;
}
