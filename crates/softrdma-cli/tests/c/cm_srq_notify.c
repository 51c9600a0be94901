/*
 * rdma_create_srq and rdma_notify through librdmacm, one process, two devices (SOFTRDMA_CONFIG
 * names them: argv[1] serves, argv[2] connects), a channel per side. The client's ID gets an
 * SRQ from rdma_create_srq, and rdma_create_qp gives it to the QP; the server's connect
 * request says the client's QP has an SRQ (the REQ's bit), the client's ESTABLISHED says the
 * server's has none. The server calls rdma_notify(IBV_EVENT_COMM_EST) after its accept and
 * gets one ESTABLISHED. A SEND from the server lands in the client's SRQ. Misuse: another
 * rdma_notify event, a notify on the listener, a second SRQ, an XRC or untyped
 * rdma_create_srq_ex. Exit status 0 when all of it holds; each failed check is printed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include "check.h"

/* The channel's next event, which must be `type` and come within five seconds. */
static struct rdma_cm_event *expect(struct rdma_event_channel *ch, enum rdma_cm_event_type type)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	CHECK(poll(&p, 1, 5000) == 1);
	struct rdma_cm_event *ev;
	CHECK(rdma_get_cm_event(ch, &ev) == 0);
	if (ev->event != type)
		fprintf(stderr, "got %s, not %s\n", rdma_event_str(ev->event), rdma_event_str(type));
	CHECK(ev->event == type);
	return ev;
}

/* Nothing more on the channel for a while. */
static int quiet(struct rdma_event_channel *ch)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	return poll(&p, 1, 300) == 0;
}

static struct ibv_wc next(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	time_t end = time(NULL) + 5;
	for (;;) {
		int n = ibv_poll_cq(cq, 1, &wc);
		CHECK(n >= 0);
		if (n == 1)
			return wc;
		CHECK(time(NULL) <= end);
	}
}

int main(int argc, char **argv)
{
	CHECK(argc == 3);
	struct sockaddr_in saddr = { .sin_family = AF_INET, .sin_port = htons(7557) };
	struct sockaddr_in caddr = { .sin_family = AF_INET };
	CHECK(inet_pton(AF_INET, argv[1], &saddr.sin_addr) == 1);
	CHECK(inet_pton(AF_INET, argv[2], &caddr.sin_addr) == 1);
	struct rdma_event_channel *sch = rdma_create_event_channel(), *cch = rdma_create_event_channel();
	CHECK(sch && cch);

	struct rdma_cm_id *listen, *client, *server;
	CHECK(rdma_create_id(sch, &listen, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_bind_addr(listen, (struct sockaddr *)&saddr) == 0);
	CHECK(rdma_listen(listen, 4) == 0);
	errno = 0;
	CHECK(rdma_notify(listen, IBV_EVENT_COMM_EST) == -1 && errno == EINVAL);

	CHECK(rdma_create_id(cch, &client, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_resolve_addr(client, (struct sockaddr *)&caddr, (struct sockaddr *)&saddr,
				2000) == 0);
	rdma_ack_cm_event(expect(cch, RDMA_CM_EVENT_ADDR_RESOLVED));
	CHECK(rdma_resolve_route(client, 2000) == 0);
	rdma_ack_cm_event(expect(cch, RDMA_CM_EVENT_ROUTE_RESOLVED));

	/* The client's SRQ, on the device's default PD. */
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 8, .max_sge = 1 } };
	CHECK(rdma_create_srq(client, NULL, &sa) == 0);
	CHECK(client->srq && client->pd && sa.attr.max_wr >= 8);
	errno = 0;
	CHECK(rdma_create_srq(client, NULL, &sa) == -1 && errno == EEXIST);
	struct ibv_qp_init_attr qa = { .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 4, .max_send_sge = 1,
						.max_recv_sge = 1 } };
	CHECK(rdma_create_qp(client, NULL, &qa) == 0);
	CHECK(client->qp->srq == client->srq);

	static char cbuf[64], sbuf[64];
	struct ibv_mr *cmr = ibv_reg_mr(client->pd, cbuf, sizeof cbuf, IBV_ACCESS_LOCAL_WRITE);
	CHECK(cmr);
	struct ibv_sge sge = { (uintptr_t)cbuf, sizeof cbuf, cmr->lkey };
	struct ibv_recv_wr rw = { .wr_id = 77, .sg_list = &sge, .num_sge = 1 }, *bad_rw;
	CHECK(ibv_post_srq_recv(client->srq, &rw, &bad_rw) == 0);

	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1,
				      .retry_count = 7, .rnr_retry_count = 7 };
	CHECK(rdma_connect(client, &cp) == 0);

	struct rdma_cm_event *ev = expect(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	server = ev->id;
	CHECK(ev->param.conn.srq == 1);
	rdma_ack_cm_event(ev);
	struct ibv_qp_init_attr sqa = { .qp_type = IBV_QPT_RC,
					.cap = { .max_send_wr = 4, .max_recv_wr = 4,
						 .max_send_sge = 1, .max_recv_sge = 1 } };
	CHECK(rdma_create_qp(server, NULL, &sqa) == 0);
	CHECK(rdma_accept(server, &cp) == 0);
	/* Traffic may come before the RTU: the CM is told, and establishes at most once. */
	CHECK(rdma_notify(server, IBV_EVENT_COMM_EST) == 0);
	errno = 0;
	CHECK(rdma_notify(server, IBV_EVENT_PATH_MIG) == -1 && errno == EINVAL);
	rdma_ack_cm_event(expect(sch, RDMA_CM_EVENT_ESTABLISHED));
	ev = expect(cch, RDMA_CM_EVENT_ESTABLISHED);
	CHECK(ev->param.conn.srq == 0);
	rdma_ack_cm_event(ev);
	CHECK(quiet(sch));
	CHECK(rdma_notify(server, IBV_EVENT_COMM_EST) == 0);
	CHECK(quiet(sch));

	/* A SEND from the server lands in the client's SRQ. */
	struct ibv_mr *smr = ibv_reg_mr(server->pd, sbuf, sizeof sbuf, IBV_ACCESS_LOCAL_WRITE);
	CHECK(smr);
	strcpy(sbuf, "through the SRQ");
	CHECK(rdma_post_send(server, NULL, sbuf, strlen(sbuf) + 1, smr, IBV_SEND_SIGNALED) == 0);
	struct ibv_wc wc = next(server->send_cq);
	CHECK(wc.status == IBV_WC_SUCCESS);
	wc = next(client->recv_cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 77 && wc.qp_num == client->qp->qp_num);
	CHECK(strcmp(cbuf, "through the SRQ") == 0);

	CHECK(rdma_disconnect(client) == 0);
	rdma_ack_cm_event(expect(cch, RDMA_CM_EVENT_DISCONNECTED));
	rdma_ack_cm_event(expect(sch, RDMA_CM_EVENT_DISCONNECTED));
	rdma_destroy_qp(client);
	rdma_destroy_srq(client);
	CHECK(client->srq == NULL);

	struct ibv_srq_init_attr_ex xa = { .attr = { .max_wr = 4, .max_sge = 1 } };
	errno = 0;
	CHECK(rdma_create_srq_ex(client, &xa) == -1 && errno == EINVAL);
	xa.comp_mask = IBV_SRQ_INIT_ATTR_TYPE;
	xa.srq_type = IBV_SRQT_XRC;
	errno = 0;
	CHECK(rdma_create_srq_ex(client, &xa) == -1 && errno == EOPNOTSUPP);
	xa.srq_type = IBV_SRQT_BASIC;
	CHECK(rdma_create_srq_ex(client, &xa) == 0 && client->srq && xa.pd == client->pd);
	rdma_destroy_srq(client);

	ibv_dereg_mr(cmr);
	ibv_dereg_mr(smr);
	rdma_destroy_qp(server);
	CHECK(rdma_destroy_id(server) == 0);
	CHECK(rdma_destroy_id(client) == 0);
	CHECK(rdma_destroy_id(listen) == 0);
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
	printf("cm srq and notify verified\n");
	return 0;
}
