/*
 * Conformance tests of the `softrdma` libfabric provider, through libfabric's own C API
 * (libfabric 1.17), in the shape of fabtests: unit tests of each object, functional
 * tests of data transfer between two endpoints of one process, and negative tests.
 *
 *   fi_conformance TEST
 *
 * Runs one test; prints "ok TEST" and exits 0 when it passes, or a line "FAIL ..." naming
 * the check that failed. tests/conformance.rs builds it and runs each test in its own
 * process, with FI_PROVIDER_PATH naming the provider under test.
 */
#include "common.h"
#include <poll.h>

/* rma.c's cases. */
void getinfo_rma(void);
void rma(void);
void rma_negative(void);
void atomic(void);
void cntr(void);
void cq_wait_fd(void);
/* msg.c's cases. */
void msg_connect(void);
void msg_reject(void);
void msg_negative(void);
void dgram(void);
void msg_counters(void);
void dgram_counters(void);
void msg_atomic(void);
void msg_unanswered(void);

const char *current;

/* ---- unit: getinfo ---------------------------------------------------------------- */

static void getinfo_rdm(void)
{
	struct fi_info *h = hints_rdm(FI_MSG | FI_TAGGED), *i = getinfo(h);
	CHECK(i->ep_attr->type == FI_EP_RDM);
	CHECK((i->caps & (FI_MSG | FI_TAGGED)) == (FI_MSG | FI_TAGGED));
	CHECK(i->addr_format == FI_SOCKADDR_IN || i->addr_format == FI_SOCKADDR_IN6);
	CHECK(!(i->domain_attr->mr_mode & FI_MR_LOCAL), "no registration for messages");
	CHECK(!strcmp(i->fabric_attr->name, "softrdma"));
	CHECK(i->domain_attr->name && !strncmp(i->domain_attr->name, "softrdma", 8));
	CHECK(i->tx_attr->inject_size >= 64 && i->ep_attr->max_msg_size >= (1 << 20));
	CHECK(i->ep_attr->mem_tag_format >> 63, "bit 63 of the tag format");
	CHECK(i->domain_attr->cq_data_size >= 4);
	CHECK(i->src_addr && i->src_addrlen == sizeof(struct sockaddr_in));
	CHECK(((struct sockaddr_in *)i->src_addr)->sin_addr.s_addr != 0, "a routable source");
	fi_freeinfo(i);
	fi_freeinfo(h);
}

/* Open MPI 4.1's hints, at its API version 1.5 and mr_mode 0. */
static void getinfo_ompi(void)
{
	struct fi_info *h = fi_allocinfo(), *i = NULL;
	h->mode = FI_CONTEXT | FI_CONTEXT2;
	h->ep_attr->type = FI_EP_RDM;
	h->caps = FI_TAGGED | FI_LOCAL_COMM | FI_REMOTE_COMM | FI_DIRECTED_RECV;
	h->tx_attr->msg_order = h->rx_attr->msg_order = FI_ORDER_SAS;
	h->tx_attr->op_flags = h->rx_attr->op_flags = FI_COMPLETION;
	h->domain_attr->threading = FI_THREAD_DOMAIN;
	h->domain_attr->cq_data_size = 4;
	h->domain_attr->av_type = FI_AV_MAP;
	h->domain_attr->resource_mgmt = FI_RM_ENABLED;
	h->fabric_attr->prov_name = strdup("softrdma");
	RC(fi_getinfo(FI_VERSION(1, 5), NULL, NULL, 0, h, &i), 0);
	CHECK(i->caps & FI_DIRECTED_RECV);
	CHECK(i->domain_attr->mr_mode == 0);
	CHECK(i->domain_attr->av_type == FI_AV_MAP, "the hint's AV type");
	CHECK(i->domain_attr->threading == FI_THREAD_DOMAIN, "the hint's threading");
	CHECK(i->tx_attr->op_flags == FI_COMPLETION, "the hint's op flags");
	fi_freeinfo(i);
	fi_freeinfo(h);
}

static void getinfo_node_service(void)
{
	struct fi_info *h = hints_rdm(FI_MSG), *i = NULL;
	RC(fi_getinfo(VERSION, "127.0.0.1", "7655", FI_SOURCE, h, &i), 0);
	CHECK(ntohs(((struct sockaddr_in *)i->src_addr)->sin_port) == 7655, "the service");
	fi_freeinfo(i);
	i = NULL;
	RC(fi_getinfo(VERSION, "127.0.0.9", "7656", 0, h, &i), 0);
	CHECK(i->dest_addr && ntohs(((struct sockaddr_in *)i->dest_addr)->sin_port) == 7656);
	fi_freeinfo(i);
	fi_freeinfo(h);
}

/* Every request softrdma cannot meet gets -FI_ENODATA. */
static void getinfo_negative(void)
{
	struct fi_info *i = NULL, *h;
#define NODATA(set)                                                                        \
	do {                                                                               \
		h = hints_rdm(FI_MSG);                                                     \
		set;                                                                       \
		RC(fi_getinfo(VERSION, NULL, NULL, 0, h, &i), -FI_ENODATA);                \
		fi_freeinfo(h);                                                            \
	} while (0)
	NODATA(h->caps |= FI_MULTICAST);
	NODATA(h->caps |= FI_RMA_EVENT);
	NODATA(h->caps |= FI_ATOMIC; h->domain_attr->mr_mode = FI_MR_LOCAL);
	NODATA(h->addr_format = FI_SOCKADDR_IB);
	NODATA(h->tx_attr->size = 1 << 30);
	NODATA(h->tx_attr->inject_size = 1 << 20);
	NODATA(h->tx_attr->iov_limit = 64);
	NODATA(h->ep_attr->max_msg_size = (size_t)1 << 40);
	NODATA(h->domain_attr->cq_data_size = 16);
	NODATA(h->domain_attr->name = strdup("no-such-device"));
	NODATA(free(h->fabric_attr->name); h->fabric_attr->name = strdup("no-such-fabric"));
	NODATA(h->ep_attr->tx_ctx_cnt = FI_SHARED_CONTEXT);
	NODATA(h->rx_attr->total_buffered_recv = 1 << 20);
#undef NODATA
}

/* ---- unit: fabric, domain, AV, CQ, EQ, MR, endpoint -------------------------------- */

static void fabric_domain(void)
{
	struct fi_info *h = hints_rdm(FI_MSG), *i = getinfo(h);
	struct fid_fabric *f;
	struct fid_domain *d;
	RC(fi_fabric(i->fabric_attr, &f, NULL), 0);
	RC(fi_domain(f, i, &d, NULL), 0);
	RC(fi_close(&d->fid), 0);
	RC(fi_close(&f->fid), 0);
	struct fi_fabric_attr bad = *i->fabric_attr;
	bad.name = "no-such-fabric";
	bad.prov_name = "softrdma";
	RC(fi_fabric(&bad, &f, NULL), -FI_ENODATA);
	fi_freeinfo(i);
	fi_freeinfo(h);
}

static void av(void)
{
	struct pair p;
	open_pair(&p, FI_MSG, 0);
	/* Three names at once, the middle one not a name at all. */
	char names[3 * 16];
	memcpy(names, p.a.name, 16);
	memset(names + 16, 0xee, 16);
	memcpy(names + 32, p.b.name, 16);
	fi_addr_t f[3];
	RC(fi_av_insert(p.a.av, names, 3, f, 0, NULL), 2);
	CHECK(f[1] == FI_ADDR_NOTAVAIL && f[0] != FI_ADDR_NOTAVAIL);
	CHECK(f[2] == p.a_to_b, "a name inserted again keeps its address");
	char back[64];
	size_t len = 4;
	RC(fi_av_lookup(p.a.av, f[0], back, &len), -FI_ETOOSMALL);
	CHECK(len == 16, "the whole length");
	len = sizeof back;
	RC(fi_av_lookup(p.a.av, f[0], back, &len), 0);
	CHECK(len == 16 && !memcmp(back, p.a.name, 16));
	char s[128];
	len = sizeof s;
	CHECK(fi_av_straddr(p.a.av, p.b.name, s, &len) == s && !strncmp(s, "fi_sockaddr_in://127.", 21), "%s", s);
	fi_addr_t svc;
	RC(fi_av_insertsvc(p.a.av, "127.0.0.200", "7000", &svc, 0, NULL), 1);
	RC(fi_av_remove(p.a.av, &svc, 1, 0), 0);
	len = sizeof back;
	RC(fi_av_lookup(p.a.av, svc, back, &len), -FI_ENODATA);
	RC(fi_av_insert(p.a.av, names, 1, f, 0x1234, NULL), -FI_EBADFLAGS);
	close_pair(&p);
}

static void cq(void)
{
	struct fi_info *h = hints_rdm(FI_MSG), *i = getinfo(h);
	struct fid_fabric *f;
	struct fid_domain *d;
	struct fid_cq *c;
	RC(fi_fabric(i->fabric_attr, &f, NULL), 0);
	RC(fi_domain(f, i, &d, NULL), 0);
	int formats[] = {FI_CQ_FORMAT_UNSPEC, FI_CQ_FORMAT_CONTEXT, FI_CQ_FORMAT_MSG,
			 FI_CQ_FORMAT_DATA, FI_CQ_FORMAT_TAGGED};
	for (int k = 0; k < 5; k++) {
		struct fi_cq_attr a = {.format = formats[k], .wait_obj = FI_WAIT_NONE};
		struct fi_cq_tagged_entry e;
		struct fi_cq_err_entry err = {0};
		RC(fi_cq_open(d, &a, &c, NULL), 0);
		RC(fi_cq_read(c, &e, 1), -FI_EAGAIN);
		RC(fi_cq_readerr(c, &err, 0), -FI_EAGAIN);
		RC(fi_cq_sread(c, &e, 1, NULL, 20), -FI_EAGAIN);
		RC(fi_close(&c->fid), 0);
	}
	struct fi_cq_attr bad = {.format = 99};
	RC(fi_cq_open(d, &bad, &c, NULL), -FI_ENOSYS);
	RC(fi_close(&d->fid), 0);
	RC(fi_close(&f->fid), 0);
	fi_freeinfo(i);
	fi_freeinfo(h);
}

static void eq(void)
{
	struct fi_info *h = hints_rdm(FI_MSG), *i = getinfo(h);
	struct fid_fabric *f;
	struct fid_eq *q;
	struct fi_eq_attr a = {.wait_obj = FI_WAIT_UNSPEC};
	RC(fi_fabric(i->fabric_attr, &f, NULL), 0);
	RC(fi_eq_open(f, &a, &q, NULL), 0);
	uint32_t ev;
	struct fi_eq_entry in = {.context = (void *)0x77, .data = 5}, out;
	RC(fi_eq_read(q, &ev, &out, sizeof out, 0), -FI_EAGAIN);
	RC(fi_eq_write(q, FI_NOTIFY, &in, sizeof in, 0), sizeof in);
	RC(fi_eq_read(q, &ev, &out, sizeof out, FI_PEEK), sizeof out);
	RC(fi_eq_sread(q, &ev, &out, sizeof out, 100, 0), sizeof out);
	CHECK(ev == FI_NOTIFY && out.context == (void *)0x77 && out.data == 5);
	RC(fi_eq_sread(q, &ev, &out, sizeof out, 20, 0), -FI_EAGAIN);
	int fd = -1;
	RC(fi_control(&q->fid, FI_GETWAIT, &fd), -FI_ENODATA);
	RC(fi_close(&q->fid), 0);

	/* With a descriptor (FI_WAIT_FD): readable exactly while events wait, and
	 * fi_trywait says the same; events come back in the order written. */
	a.wait_obj = FI_WAIT_FD;
	RC(fi_eq_open(f, &a, &q, NULL), 0);
	RC(fi_control(&q->fid, FI_GETWAIT, &fd), 0);
	CHECK(fd >= 0);
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	struct fid *fids[] = {&q->fid};
	RC(poll(&pfd, 1, 0), 0);
	RC(fi_trywait(f, fids, 1), 0);
	RC(fi_eq_write(q, FI_NOTIFY, &in, sizeof in, 0), sizeof in);
	struct fi_eq_entry in2 = {.context = (void *)0x78, .data = 6};
	RC(fi_eq_write(q, FI_NOTIFY, &in2, sizeof in2, 0), sizeof in2);
	RC(poll(&pfd, 1, 0), 1);
	RC(fi_trywait(f, fids, 1), -FI_EAGAIN);
	RC(fi_eq_read(q, &ev, &out, sizeof out - 1, 0), -FI_ETOOSMALL);
	RC(fi_eq_read(q, &ev, &out, sizeof out, 0), sizeof out);
	CHECK(out.context == (void *)0x77, "the first written comes first");
	RC(poll(&pfd, 1, 0), 1);
	RC(fi_eq_read(q, &ev, &out, sizeof out, 0), sizeof out);
	CHECK(out.context == (void *)0x78 && out.data == 6);
	RC(poll(&pfd, 1, 0), 0);
	RC(fi_trywait(f, fids, 1), 0);
	RC(fi_close(&q->fid), 0);
	RC(fi_close(&f->fid), 0);
	fi_freeinfo(i);
	fi_freeinfo(h);
}

static void mr(void)
{
	struct fi_info *h = hints_rdm(FI_MSG), *i = getinfo(h);
	struct fid_fabric *f;
	struct fid_domain *d;
	struct fid_mr *m;
	static char buf[4096];
	RC(fi_fabric(i->fabric_attr, &f, NULL), 0);
	RC(fi_domain(f, i, &d, NULL), 0);
	RC(fi_mr_reg(d, buf, sizeof buf, FI_SEND | FI_RECV, 0, 0, 0, &m, NULL), 0);
	CHECK(fi_mr_desc(m) == NULL, "messages need no descriptor");
	RC(fi_close(&m->fid), 0);
	/* Memory for peers has the provider's key; access bits outside libfabric's are
	 * refused. */
	RC(fi_mr_reg(d, buf, sizeof buf, FI_REMOTE_WRITE | FI_REMOTE_READ, 0, 0, 0, &m, NULL), 0);
	CHECK(fi_mr_key(m) != FI_KEY_NOTAVAIL && fi_mr_desc(m) == NULL);
	RC(fi_close(&m->fid), 0);
	RC(fi_close(&m->fid), -FI_EINVAL);
	RC(fi_mr_reg(d, buf, sizeof buf, 1ULL << 40, 0, 0, 0, &m, NULL), -FI_EOPNOTSUPP);
	RC(fi_mr_reg(d, NULL, sizeof buf, FI_REMOTE_WRITE, 0, 0, 0, &m, NULL), -FI_EINVAL);
	RC(fi_close(&d->fid), 0);
	RC(fi_close(&f->fid), 0);
	fi_freeinfo(i);
	fi_freeinfo(h);
}

static void ep_lifecycle(void)
{
	struct fi_info *h = hints_rdm(FI_MSG), *i = getinfo(h);
	struct fid_fabric *f;
	struct fid_domain *d;
	struct fid_ep *ep;
	struct fid_av *av;
	struct fid_cq *c;
	struct fi_av_attr aa = {0};
	struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_CONTEXT};
	char buf[64], name[64];
	size_t len = 0;
	RC(fi_fabric(i->fabric_attr, &f, NULL), 0);
	RC(fi_domain(f, i, &d, NULL), 0);
	RC(fi_endpoint(d, i, &ep, NULL), 0);
	RC(fi_enable(ep), -FI_ENOAV);
	RC(fi_av_open(d, &aa, &av, NULL), 0);
	RC(fi_ep_bind(ep, &av->fid, 0), 0);
	RC(fi_enable(ep), -FI_ENOCQ);
	RC(fi_send(ep, buf, 8, NULL, 0, NULL), -FI_EOPBADSTATE);
	RC(fi_recv(ep, buf, 8, NULL, 0, NULL), -FI_EOPBADSTATE);
	RC(fi_cq_open(d, &ca, &c, NULL), 0);
	/* A fid that is not this provider's. */
	struct fid fake = {.fclass = FI_CLASS_CQ};
	RC(fi_ep_bind(ep, &fake, FI_TRANSMIT), -FI_EINVAL);
	RC(fi_ep_bind(ep, &c->fid, FI_TRANSMIT | FI_RECV | (1ULL << 40)), -FI_EBADFLAGS);
	RC(fi_ep_bind(ep, &c->fid, FI_TRANSMIT | FI_RECV), 0);
	RC(fi_enable(ep), 0);
	RC(fi_ep_bind(ep, &c->fid, FI_TRANSMIT), -FI_EOPBADSTATE);
	RC(fi_getname(&ep->fid, NULL, &len), -FI_ETOOSMALL);
	CHECK(len == 16, "the name's length");
	RC(fi_getname(&ep->fid, name, &len), 0);
	CHECK(ntohs(((struct sockaddr_in *)name)->sin_port) != 0, "a port of its own");
	uint64_t flags = FI_TRANSMIT;
	RC(fi_control(&ep->fid, FI_GETOPSFLAG, &flags), 0);
	flags = FI_TRANSMIT | FI_COMPLETION;
	RC(fi_control(&ep->fid, FI_SETOPSFLAG, &flags), 0);
	flags = FI_TRANSMIT;
	RC(fi_control(&ep->fid, FI_GETOPSFLAG, &flags), 0);
	CHECK(flags == FI_COMPLETION);
	/* Pingpong's order of closing: the endpoint first, the objects it used after. */
	RC(fi_close(&ep->fid), 0);
	RC(fi_close(&c->fid), 0);
	RC(fi_close(&av->fid), 0);
	RC(fi_close(&d->fid), 0);
	RC(fi_close(&f->fid), 0);
	fi_freeinfo(i);
	fi_freeinfo(h);
}

/* ---- functional -------------------------------------------------------------------- */

/* Messages of every size class, each byte checked: eager, at the eager limit, by
 * rendezvous, zero-length. */
static void msg(void)
{
	struct pair p;
	open_pair(&p, FI_MSG, 0);
	size_t sizes[] = {0, 1, 64, 4096, 8192, 8193, 65536, 1 << 20, 4 << 20};
	char *tx = malloc(4 << 20), *rx = malloc(4 << 20);
	for (unsigned k = 0; k < sizeof sizes / sizeof *sizes; k++) {
		size_t n = sizes[k];
		fill(tx, n, k);
		memset(rx, 0, n);
		RC(fi_recv(p.b.ep, rx, n, NULL, FI_ADDR_UNSPEC, (void *)0xb0), 0);
		RC(fi_send(p.a.ep, tx, n, NULL, p.a_to_b, (void *)0xa0), 0);
		struct fi_cq_tagged_entry r = one(p.b.rxcq), t = one(p.a.txcq);
		CHECK(r.op_context == (void *)0xb0 && r.len == n && r.flags == (FI_RECV | FI_MSG),
		      "size %zu: len %zu flags %#lx", n, r.len, (unsigned long)r.flags);
		CHECK(r.buf == rx, "the receive's buffer");
		CHECK(same(rx, n, k), "size %zu: the bytes", n);
		CHECK(t.op_context == (void *)0xa0 && (t.flags & (FI_SEND | FI_MSG)) == (FI_SEND | FI_MSG));
	}
	free(tx);
	free(rx);
	close_pair(&p);
}

static void inject(void)
{
	struct pair p;
	open_pair(&p, FI_MSG, 0);
	char tx[64] = "injected", rx[64];
	RC(fi_recv(p.b.ep, rx, sizeof rx, NULL, FI_ADDR_UNSPEC, NULL), 0);
	RC(fi_inject(p.a.ep, tx, 9, p.a_to_b), 0);
	memset(tx, 0, sizeof tx); /* the buffer is the caller's again at once */
	struct fi_cq_tagged_entry r = one(p.b.rxcq);
	CHECK(r.len == 9 && !strcmp(rx, "injected"));
	none(p.a.txcq);
	static char big[1 << 16];
	RC(fi_inject(p.a.ep, big, p.info->tx_attr->inject_size + 1, p.a_to_b), -FI_EMSGSIZE);
	close_pair(&p);
}

static void tagged(void)
{
	struct pair p;
	open_pair(&p, FI_TAGGED, 0);
	char r1[32] = "", r2[32] = "", r3[32] = "";
	/* Posted: tag 2 exactly, then anything in 0x100..0x1ff. */
	RC(fi_trecv(p.b.ep, r1, sizeof r1, NULL, FI_ADDR_UNSPEC, 2, 0, (void *)1), 0);
	RC(fi_trecv(p.b.ep, r2, sizeof r2, NULL, FI_ADDR_UNSPEC, 0x100, 0xff, (void *)2), 0);
	RC(fi_tsend(p.a.ep, "to-any-1xx", 11, NULL, p.a_to_b, 0x1ab, NULL), 0);
	RC(fi_tsend(p.a.ep, "to-two", 7, NULL, p.a_to_b, 2, NULL), 0);
	struct fi_cq_tagged_entry x = one(p.b.rxcq), y = one(p.b.rxcq);
	struct fi_cq_tagged_entry *e2 = x.op_context == (void *)2 ? &x : &y;
	struct fi_cq_tagged_entry *e1 = x.op_context == (void *)1 ? &x : &y;
	CHECK(e1->op_context == (void *)1 && e2->op_context == (void *)2);
	CHECK(!strcmp(r1, "to-two") && e1->tag == 2 && (e1->flags & FI_TAGGED));
	CHECK(!strcmp(r2, "to-any-1xx") && e2->tag == 0x1ab, "the sender's tag");
	/* A tag nobody asked for waits; an untagged receive does not take it. */
	RC(fi_tsend(p.a.ep, "later", 6, NULL, p.a_to_b, 77, NULL), 0);
	none(p.b.rxcq);
	RC(fi_trecv(p.b.ep, r3, sizeof r3, NULL, FI_ADDR_UNSPEC, 77, 0, (void *)3), 0);
	CHECK(one(p.b.rxcq).op_context == (void *)3 && !strcmp(r3, "later"));
	for (int k = 0; k < 3; k++)
		one(p.a.txcq);
	close_pair(&p);
}

static void cq_data(void)
{
	struct pair p;
	open_pair(&p, FI_MSG | FI_TAGGED, 0);
	char rx[32];
	RC(fi_recv(p.b.ep, rx, sizeof rx, NULL, FI_ADDR_UNSPEC, NULL), 0);
	RC(fi_senddata(p.a.ep, "d", 2, NULL, 0xdeadbeefcafeULL, p.a_to_b, NULL), 0);
	struct fi_cq_tagged_entry e = one(p.b.rxcq);
	CHECK((e.flags & FI_REMOTE_CQ_DATA) && e.data == 0xdeadbeefcafeULL, "data %#lx",
	      (unsigned long)e.data);
	RC(fi_trecv(p.b.ep, rx, sizeof rx, NULL, FI_ADDR_UNSPEC, 9, 0, NULL), 0);
	RC(fi_tinjectdata(p.a.ep, "t", 2, 42, p.a_to_b, 9), 0);
	e = one(p.b.rxcq);
	CHECK((e.flags & FI_REMOTE_CQ_DATA) && e.data == 42 && e.tag == 9);
	close_pair(&p);
}

/* Messages sent before any receive is posted wait, in order, whole. */
static void unexpected(void)
{
	struct pair p;
	open_pair(&p, FI_MSG, 0);
	static char big[100000];
	fill(big, sizeof big, 3);
	RC(fi_send(p.a.ep, "first", 6, NULL, p.a_to_b, NULL), 0);
	RC(fi_send(p.a.ep, big, sizeof big, NULL, p.a_to_b, NULL), 0);
	one(p.a.txcq);
	none(p.b.rxcq);
	char r1[16];
	static char r2[100000];
	RC(fi_recv(p.b.ep, r1, sizeof r1, NULL, FI_ADDR_UNSPEC, NULL), 0);
	RC(fi_recv(p.b.ep, r2, sizeof r2, NULL, FI_ADDR_UNSPEC, NULL), 0);
	CHECK(one(p.b.rxcq).len == 6 && !strcmp(r1, "first"));
	CHECK(one(p.b.rxcq).len == sizeof big && same(r2, sizeof r2, 3));
	one(p.a.txcq);
	close_pair(&p);
}

/* A receive from one peer takes no other peer's message; fi_cq_readfrom names the
 * sender. */
static void directed_recv(void)
{
	struct pair p;
	open_pair(&p, FI_MSG | FI_DIRECTED_RECV | FI_SOURCE, 0);
	struct node c;
	open_node(&c, p.info, 0);
	fi_addr_t c_to_b = insert(&c, &p.b), b_to_c = insert(&p.b, &c);
	char rx[16] = "";
	RC(fi_recv(p.b.ep, rx, sizeof rx, NULL, p.b_to_a, (void *)0xa), 0);
	RC(fi_send(c.ep, "from-c", 7, NULL, c_to_b, NULL), 0);
	none(p.b.rxcq);
	RC(fi_send(p.a.ep, "from-a", 7, NULL, p.a_to_b, NULL), 0);
	struct fi_cq_tagged_entry e;
	fi_addr_t src = FI_ADDR_NOTAVAIL;
	double end = now() + 10;
	ssize_t r;
	while ((r = fi_cq_readfrom(p.b.rxcq, &e, 1, &src)) == -FI_EAGAIN)
		CHECK(now() < end, "no completion");
	CHECK(r == 1 && e.op_context == (void *)0xa && !strcmp(rx, "from-a"));
	CHECK(src == p.b_to_a, "the source is a: %lu", (unsigned long)src);
	RC(fi_recv(p.b.ep, rx, sizeof rx, NULL, b_to_c, NULL), 0);
	CHECK(one(p.b.rxcq).len == 7 && !strcmp(rx, "from-c"));
	one(p.a.txcq);
	one(c.txcq);
	close_node(&c);
	close_pair(&p);
}

static void cancel(void)
{
	struct pair p;
	open_pair(&p, FI_MSG | FI_TAGGED, 0);
	char rx[16];
	RC(fi_trecv(p.b.ep, rx, sizeof rx, NULL, FI_ADDR_UNSPEC, 5, 0, (void *)0xc), 0);
	RC(fi_cancel(&p.b.ep->fid, (void *)0xc), 0);
	struct fi_cq_err_entry err = one_error(p.b.rxcq);
	CHECK(err.err == FI_ECANCELED && err.op_context == (void *)0xc);
	CHECK(err.flags & FI_TAGGED);
	RC(fi_cancel(&p.b.ep->fid, (void *)0xc), -FI_ENOENT);
	close_pair(&p);
}

/* FI_PEEK finds a waiting message without taking it, or says FI_ENOMSG; FI_PEEK|FI_CLAIM
 * takes it for a later FI_CLAIM receive with the same context (Open MPI's MPI_Mprobe and
 * MPI_Mrecv), and FI_DISCARD drops a claimed one. */
static void peek_claim(void)
{
	struct pair p;
	open_pair(&p, FI_TAGGED, 0);
	struct fi_context ctx[3];
	struct fi_msg_tagged m = {.addr = FI_ADDR_UNSPEC, .tag = 7, .context = &ctx[0]};
	RC(fi_trecvmsg(p.b.ep, &m, FI_PEEK), 0);
	struct fi_cq_err_entry err = one_error(p.b.rxcq);
	CHECK(err.err == FI_ENOMSG && err.op_context == &ctx[0]);
	static char big[20000];
	fill(big, sizeof big, 4);
	RC(fi_tsenddata(p.a.ep, "seven", 6, NULL, 99, p.a_to_b, 7, NULL), 0);
	RC(fi_tsend(p.a.ep, big, sizeof big, NULL, p.a_to_b, 8, NULL), 0);
	one(p.a.txcq);
	struct fi_cq_tagged_entry e;
	for (;;) { /* until the message is there */
		RC(fi_trecvmsg(p.b.ep, &m, FI_PEEK), 0);
		ssize_t r = fi_cq_read(p.b.rxcq, &e, 1);
		if (r == 1)
			break;
		CHECK(r == -FI_EAVAIL);
		RC(fi_cq_readerr(p.b.rxcq, &err, 0), 1);
		CHECK(err.err == FI_ENOMSG);
	}
	CHECK(e.len == 6 && e.tag == 7 && e.data == 99 && (e.flags & FI_REMOTE_CQ_DATA), "the peek's entry");
	/* Claimed: no plain receive takes it any more. */
	m.context = &ctx[1];
	RC(fi_trecvmsg(p.b.ep, &m, FI_PEEK | FI_CLAIM), 0);
	CHECK(one(p.b.rxcq).op_context == &ctx[1]);
	char rx[16] = "", other[16];
	RC(fi_trecv(p.b.ep, other, sizeof other, NULL, FI_ADDR_UNSPEC, 7, 0, NULL), 0);
	none(p.b.rxcq);
	struct iovec iov = {.iov_base = rx, .iov_len = sizeof rx};
	struct fi_msg_tagged take = {.msg_iov = &iov, .iov_count = 1, .addr = FI_ADDR_UNSPEC,
				     .tag = 7, .context = &ctx[1]};
	RC(fi_trecvmsg(p.b.ep, &take, FI_CLAIM), 0);
	e = one(p.b.rxcq);
	CHECK(e.op_context == &ctx[1] && e.len == 6 && !strcmp(rx, "seven"));
	RC(fi_trecvmsg(p.b.ep, &take, FI_CLAIM), -FI_EINVAL);
	/* A claimed rendezvous message, dropped: its sender still completes. */
	struct fi_msg_tagged m8 = {.addr = FI_ADDR_UNSPEC, .tag = 8, .context = &ctx[2]};
	double end = now() + 10;
	for (;;) {
		RC(fi_trecvmsg(p.b.ep, &m8, FI_PEEK | FI_CLAIM), 0);
		if (fi_cq_read(p.b.rxcq, &e, 1) == 1)
			break;
		RC(fi_cq_readerr(p.b.rxcq, &err, 0), 1);
		CHECK(now() < end, "the big message never came");
	}
	CHECK(e.len == sizeof big);
	struct fi_msg_tagged drop = {.addr = FI_ADDR_UNSPEC, .tag = 8, .context = &ctx[2]};
	RC(fi_trecvmsg(p.b.ep, &drop, FI_CLAIM | FI_DISCARD), 0);
	CHECK(one(p.b.rxcq).len == 0);
	one(p.a.txcq);
	close_pair(&p);
}

/* A message longer than its receive: what fits lands, and an error entry says how much
 * did not. */
/* A multi-receive buffer (FI_MULTI_RECV): messages land one after another, each entry's
 * buf where its message lies, until less than FI_OPT_MIN_MULTI_RECV is left; the last
 * entry carries FI_MULTI_RECV. */
static void multi_recv(void)
{
	struct pair p;
	open_pair(&p, FI_MSG | FI_MULTI_RECV, 0);
	CHECK(p.info->caps & FI_MULTI_RECV);
	static char mb[16384], sb[12000];
	size_t min = 4096, len = sizeof min;
	RC(fi_setopt(&p.b.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, sizeof min), 0);
	min = 0;
	RC(fi_getopt(&p.b.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, &len), 0);
	CHECK(min == 4096);
	struct iovec iov = {.iov_base = mb, .iov_len = sizeof mb};
	struct fi_msg msg = {.msg_iov = &iov, .iov_count = 1, .addr = FI_ADDR_UNSPEC,
			     .context = (void *)5};
	RC(fi_recvmsg(p.b.ep, &msg, FI_MULTI_RECV), 0);
	/* 1000 + 10000 (by rendezvous) + 2000: 3384 bytes left, under 4096. */
	size_t sizes[3] = {1000, 10000, 2000};
	for (int k = 0; k < 3; k++) {
		fill(sb, sizes[k], k + 1);
		RC(fi_send(p.a.ep, sb, sizes[k], NULL, p.a_to_b, NULL), 0);
		one(p.a.txcq);
	}
	int released = 0;
	for (int k = 0; k < 3; k++) {
		struct fi_cq_tagged_entry e = one(p.b.rxcq);
		CHECK(e.op_context == (void *)5 && e.len == sizes[k], "len %zu", e.len);
		char *at = e.buf;
		CHECK(at >= mb && at + e.len <= mb + sizeof mb, "buf inside the buffer");
		CHECK(same(at, e.len, k + 1), "message %d's bytes", k);
		released += !!(e.flags & FI_MULTI_RECV);
		CHECK(!(e.flags & FI_MULTI_RECV) || k == 2, "released by the last");
	}
	CHECK(released == 1);
	/* Tagged multi-receive is not offered. */
	struct fi_msg_tagged t = {.msg_iov = &iov, .iov_count = 1, .addr = FI_ADDR_UNSPEC};
	RC(fi_trecvmsg(p.b.ep, &t, FI_MULTI_RECV), -FI_EOPNOTSUPP);
	close_pair(&p);
}

static void truncation(void)
{
	struct pair p;
	open_pair(&p, FI_MSG, 0);
	char tx[100], rx[10];
	static char big[50000], bigrx[1000];
	fill(tx, sizeof tx, 1);
	fill(big, sizeof big, 2);
	RC(fi_recv(p.b.ep, rx, sizeof rx, NULL, FI_ADDR_UNSPEC, (void *)1), 0);
	RC(fi_send(p.a.ep, tx, sizeof tx, NULL, p.a_to_b, NULL), 0);
	struct fi_cq_err_entry err = one_error(p.b.rxcq);
	CHECK(err.err == FI_ETRUNC && err.len == 10 && err.olen == 90, "len %zu olen %zu",
	      err.len, err.olen);
	CHECK(same(rx, sizeof rx, 1), "what fits lands");
	RC(fi_recv(p.b.ep, bigrx, sizeof bigrx, NULL, FI_ADDR_UNSPEC, (void *)2), 0);
	RC(fi_send(p.a.ep, big, sizeof big, NULL, p.a_to_b, NULL), 0);
	err = one_error(p.b.rxcq);
	CHECK(err.err == FI_ETRUNC && err.len == sizeof bigrx && err.olen == sizeof big - sizeof bigrx);
	CHECK(same(bigrx, sizeof bigrx, 2), "a rendezvous message too");
	one(p.a.txcq);
	one(p.a.txcq);
	close_pair(&p);
}

/* FI_SELECTIVE_COMPLETION: only operations with FI_COMPLETION report. */
static void selective_completion(void)
{
	struct pair p;
	open_pair(&p, FI_MSG, FI_SELECTIVE_COMPLETION);
	char rx[16];
	RC(fi_recv(p.b.ep, rx, sizeof rx, NULL, FI_ADDR_UNSPEC, NULL), 0);
	RC(fi_recv(p.b.ep, rx, sizeof rx, NULL, FI_ADDR_UNSPEC, NULL), 0);
	RC(fi_send(p.a.ep, "quiet", 6, NULL, p.a_to_b, (void *)1), 0);
	one(p.b.rxcq);
	none(p.a.txcq);
	struct iovec iov = {.iov_base = "loud", .iov_len = 5};
	struct fi_msg m = {.msg_iov = &iov, .iov_count = 1, .addr = p.a_to_b, .context = (void *)2};
	RC(fi_sendmsg(p.a.ep, &m, FI_COMPLETION), 0);
	one(p.b.rxcq);
	CHECK(one(p.a.txcq).op_context == (void *)2);
	close_pair(&p);
}

/* ---- negative ---------------------------------------------------------------------- */

static void bad_address(void)
{
	struct pair p;
	open_pair(&p, FI_MSG, 0);
	char b[8];
	RC(fi_send(p.a.ep, b, 8, NULL, 999, NULL), -FI_EINVAL);
	RC(fi_inject(p.a.ep, b, 8, FI_ADDR_NOTAVAIL), -FI_EINVAL);
	RC(fi_send(p.a.ep, NULL, 8, NULL, p.a_to_b, NULL), -FI_EINVAL);
	none(p.a.txcq);
	close_pair(&p);
}

static void not_offered(void)
{
	struct pair p;
	open_pair(&p, FI_MSG, 0);
	char b[8];
	/* An endpoint without FI_TAGGED refuses tagged operations. */
	RC(fi_tsend(p.a.ep, b, 8, NULL, p.a_to_b, 1, NULL), -FI_EOPNOTSUPP);
	/* An endpoint without FI_RMA and FI_ATOMIC refuses them. */
	RC(fi_write(p.a.ep, b, 8, NULL, p.a_to_b, 0, 0, NULL), -FI_EOPNOTSUPP);
	RC(fi_atomic(p.a.ep, b, 1, NULL, p.a_to_b, 0, 0, FI_UINT64, FI_SUM, NULL), -FI_EOPNOTSUPP);
	RC(fi_recvmsg(p.a.ep, &(struct fi_msg){0}, FI_MULTI_RECV), -FI_EOPNOTSUPP);
	/* FI_DISCARD means nothing without FI_CLAIM. */
	RC(fi_recvmsg(p.a.ep, &(struct fi_msg){0}, FI_DISCARD), -FI_EINVAL);
	close_pair(&p);
}

static const struct {
	const char *name;
	void (*run)(void);
} tests[] = {
	{"getinfo_rdm", getinfo_rdm},
	{"getinfo_ompi", getinfo_ompi},
	{"getinfo_node_service", getinfo_node_service},
	{"getinfo_negative", getinfo_negative},
	{"fabric_domain", fabric_domain},
	{"av", av},
	{"cq", cq},
	{"eq", eq},
	{"mr", mr},
	{"ep_lifecycle", ep_lifecycle},
	{"msg", msg},
	{"inject", inject},
	{"tagged", tagged},
	{"cq_data", cq_data},
	{"unexpected", unexpected},
	{"directed_recv", directed_recv},
	{"cancel", cancel},
	{"peek_claim", peek_claim},
	{"multi_recv", multi_recv},
	{"truncation", truncation},
	{"selective_completion", selective_completion},
	{"bad_address", bad_address},
	{"not_offered", not_offered},
	{"getinfo_rma", getinfo_rma},
	{"rma", rma},
	{"rma_negative", rma_negative},
	{"atomic", atomic},
	{"cntr", cntr},
	{"cq_wait_fd", cq_wait_fd},
	{"msg_connect", msg_connect},
	{"msg_reject", msg_reject},
	{"msg_negative", msg_negative},
	{"dgram", dgram},
	{"msg_counters", msg_counters},
	{"dgram_counters", dgram_counters},
	{"msg_atomic", msg_atomic},
	{"msg_unanswered", msg_unanswered},
};

int main(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[1], "--list")) {
		for (unsigned k = 0; k < sizeof tests / sizeof *tests; k++)
			puts(tests[k].name);
		return 0;
	}
	for (unsigned k = 0; argc == 2 && k < sizeof tests / sizeof *tests; k++) {
		if (strcmp(argv[1], tests[k].name))
			continue;
		current = tests[k].name;
		tests[k].run();
		printf("ok %s\n", current);
		return 0;
	}
	fprintf(stderr, "usage: fi_conformance TEST | --list\n");
	return 2;
}
