/*
 * What every conformance case shares: the checks, the hints, opening a node (fabric,
 * domain, AV, two CQs, an enabled endpoint) and a pair of them that know each other, and
 * reading completions within a time limit.
 */
#ifndef FI_CONFORMANCE_COMMON_H
#define FI_CONFORMANCE_COMMON_H
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_tagged.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The case running (fi_conformance.c defines it). */
extern const char *current;

#define FAIL(...)                                                                          \
	do {                                                                               \
		fprintf(stderr, "FAIL %s line %d: ", current, __LINE__);                   \
		fprintf(stderr, __VA_ARGS__);                                              \
		fputc('\n', stderr);                                                       \
		exit(1);                                                                   \
	} while (0)
#define CHECK(cond, ...)                                                                   \
	do {                                                                               \
		if (!(cond)) {                                                             \
			fprintf(stderr, "FAIL %s line %d: %s ", current, __LINE__, #cond); \
			fprintf(stderr, "" __VA_ARGS__);                                   \
			fputc('\n', stderr);                                               \
			exit(1);                                                           \
		}                                                                          \
	} while (0)
#define RC(call, want)                                                                     \
	do {                                                                               \
		long r_ = (long)(call);                                                    \
		if (r_ != (long)(want))                                                    \
			FAIL("%s = %ld (%s), want %ld", #call, r_, fi_strerror((int)-r_),  \
			     (long)(want));                                                \
	} while (0)

#define VERSION FI_VERSION(1, 17)

static inline struct fi_info *hints_rdm(uint64_t caps)
{
	struct fi_info *h = fi_allocinfo();
	CHECK(h, "fi_allocinfo");
	h->ep_attr->type = FI_EP_RDM;
	h->caps = caps;
	h->mode = FI_CONTEXT;
	h->fabric_attr->prov_name = strdup("softrdma");
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	return h;
}

static inline struct fi_info *getinfo(struct fi_info *hints)
{
	struct fi_info *info = NULL;
	RC(fi_getinfo(VERSION, NULL, NULL, 0, hints, &info), 0);
	CHECK(!strcmp(info->fabric_attr->prov_name, "softrdma"), "got %s",
	      info->fabric_attr->prov_name);
	return info;
}

/* One endpoint with all it needs. */
struct node {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_cq *txcq, *rxcq;
	struct fid_ep *ep;
	struct fid_cntr *cntr;
	char name[64];
	size_t namelen;
};

/* A node whose endpoint counts what `counts` names (FI_SEND, FI_RECV, ...) on a counter
 * of its own (n->cntr), bound before enable; none when `counts` is 0. */
static inline void open_node_counted(struct node *n, struct fi_info *info, uint64_t tx_bind,
				     uint64_t counts);

static inline void open_node(struct node *n, struct fi_info *info, uint64_t tx_bind)
{
	open_node_counted(n, info, tx_bind, 0);
}

static inline void open_node_counted(struct node *n, struct fi_info *info, uint64_t tx_bind,
				     uint64_t counts)
{
	struct fi_cq_attr cq = {.format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_NONE};
	struct fi_av_attr av = {.type = FI_AV_TABLE};
	memset(n, 0, sizeof *n);
	n->info = fi_dupinfo(info);
	RC(fi_fabric(info->fabric_attr, &n->fabric, NULL), 0);
	RC(fi_domain(n->fabric, info, &n->domain, NULL), 0);
	RC(fi_av_open(n->domain, &av, &n->av, NULL), 0);
	RC(fi_cq_open(n->domain, &cq, &n->txcq, NULL), 0);
	RC(fi_cq_open(n->domain, &cq, &n->rxcq, NULL), 0);
	RC(fi_endpoint(n->domain, info, &n->ep, NULL), 0);
	RC(fi_ep_bind(n->ep, &n->av->fid, 0), 0);
	RC(fi_ep_bind(n->ep, &n->txcq->fid, FI_TRANSMIT | tx_bind), 0);
	RC(fi_ep_bind(n->ep, &n->rxcq->fid, FI_RECV), 0);
	if (counts) {
		RC(fi_cntr_open(n->domain, NULL, &n->cntr, NULL), 0);
		RC(fi_ep_bind(n->ep, &n->cntr->fid, counts), 0);
	}
	RC(fi_enable(n->ep), 0);
	n->namelen = sizeof n->name;
	RC(fi_getname(&n->ep->fid, n->name, &n->namelen), 0);
}

static inline void close_node(struct node *n)
{
	RC(fi_close(&n->ep->fid), 0);
	if (n->cntr)
		RC(fi_close(&n->cntr->fid), 0);
	RC(fi_close(&n->rxcq->fid), 0);
	RC(fi_close(&n->txcq->fid), 0);
	RC(fi_close(&n->av->fid), 0);
	RC(fi_close(&n->domain->fid), 0);
	RC(fi_close(&n->fabric->fid), 0);
	fi_freeinfo(n->info);
}

/* Inserts b's name into a's AV: its fi_addr. */
static inline fi_addr_t insert(struct node *a, struct node *b)
{
	fi_addr_t f = FI_ADDR_NOTAVAIL;
	RC(fi_av_insert(a->av, b->name, 1, &f, 0, NULL), 1);
	CHECK(f != FI_ADDR_NOTAVAIL, "an address");
	return f;
}

static inline double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* Reads one entry from cq within 10 s; an error entry fails the test. */
static inline struct fi_cq_tagged_entry one(struct fid_cq *cq)
{
	struct fi_cq_tagged_entry e;
	double end = now() + 10;
	for (;;) {
		ssize_t r = fi_cq_read(cq, &e, 1);
		if (r == 1)
			return e;
		if (r == -FI_EAVAIL) {
			struct fi_cq_err_entry err = {0};
			fi_cq_readerr(cq, &err, 0);
			FAIL("error entry: %s (context %p)", fi_strerror(err.err), err.op_context);
		}
		CHECK(r == -FI_EAGAIN, "fi_cq_read = %zd", r);
		CHECK(now() < end, "no completion within 10 s");
	}
}

/* Reads the error entry that must come within 10 s. */
static inline struct fi_cq_err_entry one_error(struct fid_cq *cq)
{
	struct fi_cq_err_entry err = {0};
	struct fi_cq_tagged_entry e;
	double end = now() + 10;
	for (;;) {
		ssize_t r = fi_cq_read(cq, &e, 1);
		if (r == -FI_EAVAIL) {
			RC(fi_cq_readerr(cq, &err, 0), 1);
			return err;
		}
		CHECK(r == -FI_EAGAIN, "fi_cq_read = %zd, want an error entry", r);
		CHECK(now() < end, "no error entry within 10 s");
	}
}

/* Nothing comes on cq for 200 ms. */
static inline void none(struct fid_cq *cq)
{
	struct fi_cq_tagged_entry e;
	double end = now() + 0.2;
	while (now() < end)
		RC(fi_cq_read(cq, &e, 1), -FI_EAGAIN);
}

static inline void fill(char *b, size_t n, int seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (char)(i * 7 + seed);
}

static inline int same(const char *b, size_t n, int seed)
{
	for (size_t i = 0; i < n; i++)
		if (b[i] != (char)(i * 7 + seed))
			return 0;
	return 1;
}

struct pair {
	struct fi_info *info;
	struct node a, b;
	fi_addr_t a_to_b, b_to_a;
};

static inline void open_pair(struct pair *p, uint64_t caps, uint64_t tx_bind)
{
	struct fi_info *h = hints_rdm(caps);
	p->info = getinfo(h);
	fi_freeinfo(h);
	open_node(&p->a, p->info, tx_bind);
	open_node(&p->b, p->info, tx_bind);
	p->a_to_b = insert(&p->a, &p->b);
	p->b_to_a = insert(&p->b, &p->a);
}

static inline void close_pair(struct pair *p)
{
	close_node(&p->a);
	close_node(&p->b);
	fi_freeinfo(p->info);
}

#endif
