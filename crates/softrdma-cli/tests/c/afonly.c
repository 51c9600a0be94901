/*
 * rdma_cm's wildcard listens per address family, as on Linux: with RDMA_OPTION_ID_AFONLY
 * set, a listener on [::]:P and one on 0.0.0.0:P coexist, and an IPv4 connect reaches the
 * IPv4 one; without it, [::]:P covers IPv4 too, so binding 0.0.0.0:P fails with
 * EADDRNOTAVAIL (Linux's cma_check_port: a conflict with a wildcard), as does a second
 * 0.0.0.0 bind of one port, and a second bind of one specific address is EADDRINUSE;
 * with REUSEADDR on both, two binds of one port coexist. Arguments: the base port and the
 * device's address. Prints "afonly ok" when all of it holds; the first failed check
 * otherwise (exit 1).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <rdma/rdma_cma.h>

#include "check.h"

static struct sockaddr_in6 any6(int port) {
	struct sockaddr_in6 a = {0};
	a.sin6_family = AF_INET6;
	a.sin6_addr = in6addr_any;
	a.sin6_port = htons(port);
	return a;
}

static struct sockaddr_in any4(int port) {
	struct sockaddr_in a = {0};
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_ANY);
	a.sin_port = htons(port);
	return a;
}

static struct rdma_cm_id *id_on(struct rdma_event_channel *ch) {
	struct rdma_cm_id *id;
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0);
	return id;
}

static void expect(struct rdma_event_channel *ch, enum rdma_cm_event_type want,
		   struct rdma_cm_id **id) {
	struct rdma_cm_event *e;
	CHECK(rdma_get_cm_event(ch, &e) == 0);
	if (e->event != want) {
		fprintf(stderr, "expected %s, got %s\n", rdma_event_str(want),
			rdma_event_str(e->event));
		exit(1);
	}
	if (id)
		*id = e->id;
	rdma_ack_cm_event(e);
}

int main(int argc, char **argv) {
	int port = argc > 1 ? atoi(argv[1]) : 7600;
	struct rdma_event_channel *ch6 = rdma_create_event_channel(),
				  *ch4 = rdma_create_event_channel(),
				  *chc = rdma_create_event_channel();
	CHECK(ch6 && ch4 && chc);

	/* AFONLY on [::]:P, then 0.0.0.0:P: both listen. */
	struct rdma_cm_id *l6 = id_on(ch6), *l4 = id_on(ch4);
	int one = 1;
	CHECK(rdma_set_option(l6, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &one, sizeof one) == 0);
	struct sockaddr_in6 a6 = any6(port);
	CHECK(rdma_bind_addr(l6, (struct sockaddr *)&a6) == 0);
	CHECK(rdma_listen(l6, 4) == 0);
	struct sockaddr_in a4 = any4(port);
	CHECK(rdma_bind_addr(l4, (struct sockaddr *)&a4) == 0);
	CHECK(rdma_listen(l4, 4) == 0);

	/* An IPv4 connect reaches the IPv4 listener. */
	struct rdma_cm_id *c = id_on(chc), *req;
	struct sockaddr_in dst = any4(port);
	dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	CHECK(rdma_resolve_addr(c, NULL, (struct sockaddr *)&dst, 2000) == 0);
	expect(chc, RDMA_CM_EVENT_ADDR_RESOLVED, NULL);
	CHECK(rdma_resolve_route(c, 2000) == 0);
	expect(chc, RDMA_CM_EVENT_ROUTE_RESOLVED, NULL);
	struct ibv_qp_init_attr qa = {0};
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 1;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	qa.qp_type = IBV_QPT_RC;
	CHECK(rdma_create_qp(c, NULL, &qa) == 0);
	struct rdma_conn_param cp = {0};
	cp.retry_count = 7;
	CHECK(rdma_connect(c, &cp) == 0);
	/* On the IPv4 listener's channel: the IPv6 one (AFONLY) does not take it. */
	expect(ch4, RDMA_CM_EVENT_CONNECT_REQUEST, &req);
	CHECK(rdma_reject(req, NULL, 0) == 0);
	expect(chc, RDMA_CM_EVENT_REJECTED, NULL);
	rdma_destroy_id(req);
	rdma_destroy_qp(c);
	rdma_destroy_id(c);

	/* Without AFONLY, [::]:Q covers IPv4: 0.0.0.0:Q is taken. */
	struct rdma_cm_id *m6 = id_on(ch6), *m4 = id_on(ch4), *m4b = id_on(ch4);
	struct sockaddr_in6 b6 = any6(port + 1);
	CHECK(rdma_bind_addr(m6, (struct sockaddr *)&b6) == 0);
	CHECK(rdma_listen(m6, 4) == 0);
	struct sockaddr_in b4 = any4(port + 1);
	errno = 0;
	CHECK(rdma_bind_addr(m4, (struct sockaddr *)&b4) != 0 && errno == EADDRNOTAVAIL);

	/* Two IPv4 wildcard binds of one port: the second is EADDRNOTAVAIL. */
	struct sockaddr_in c4 = any4(port + 2);
	CHECK(rdma_bind_addr(m4, (struct sockaddr *)&c4) == 0);
	errno = 0;
	CHECK(rdma_bind_addr(m4b, (struct sockaddr *)&c4) != 0 && errno == EADDRNOTAVAIL);

	/* One specific address twice: EADDRINUSE; with REUSEADDR on both, they coexist. */
	struct rdma_cm_id *s1 = id_on(ch4), *s2 = id_on(ch4), *r1 = id_on(ch4), *r2 = id_on(ch4);
	struct sockaddr_in d4 = any4(port + 3);
	CHECK(argc > 2 && inet_pton(AF_INET, argv[2], &d4.sin_addr) == 1);
	CHECK(rdma_bind_addr(s1, (struct sockaddr *)&d4) == 0);
	errno = 0;
	CHECK(rdma_bind_addr(s2, (struct sockaddr *)&d4) != 0 && errno == EADDRINUSE);
	CHECK(rdma_set_option(r1, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof one) == 0);
	CHECK(rdma_set_option(r2, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof one) == 0);
	struct sockaddr_in e4 = any4(port + 4);
	CHECK(rdma_bind_addr(r1, (struct sockaddr *)&e4) == 0);
	CHECK(rdma_bind_addr(r2, (struct sockaddr *)&e4) == 0);
	/* A destroyed ID's port is free again. */
	rdma_destroy_id(s1);
	CHECK(rdma_bind_addr(s2, (struct sockaddr *)&d4) == 0);

	rdma_destroy_id(s2);
	rdma_destroy_id(r1);
	rdma_destroy_id(r2);
	rdma_destroy_id(m4b);
	rdma_destroy_id(m4);
	rdma_destroy_id(m6);
	rdma_destroy_id(l4);
	rdma_destroy_id(l6);
	printf("afonly ok\n");
	return 0;
}
