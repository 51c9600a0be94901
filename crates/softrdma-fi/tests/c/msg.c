/*
 * Conformance cases of connected (MSG) endpoints, in the shape of fabtests' cm and msg
 * tests: a passive endpoint, a connection request read from the EQ with its info, the
 * accept, FI_CONNECTED on both sides with the right fids and private data, messages both
 * ways, and FI_SHUTDOWN; a rejected request as an error entry; and the negative cases.
 * And of datagram (DGRAM) endpoints: datagrams up to the MTU, and what they refuse. And
 * counters on both (fabtests' cntr test, on MSG and DGRAM).
 */
#include "common.h"
#include <poll.h>

struct conn {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_eq *eq;
	struct fid_pep *pep;
	struct fid_domain *sdom, *cdom;
	struct fid_ep *sep, *cep;
	struct fid_cq *scq, *ccq;
	struct fi_info *req;
};

static struct fi_info *hints_msg_caps(uint64_t caps)
{
	struct fi_info *h = hints_rdm(caps);
	h->ep_attr->type = FI_EP_MSG;
	return h;
}

static struct fi_info *hints_msg(void)
{
	struct fi_info *h = hints_rdm(FI_MSG);
	h->ep_attr->type = FI_EP_MSG;
	return h;
}

/* One active endpoint on domain d of info i, bound to eq and a CQ of its own. */
static void active(struct conn *c, struct fid_domain *d, struct fi_info *i, struct fid_ep **ep,
		   struct fid_cq **cq)
{
	struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_DATA};
	RC(fi_cq_open(d, &cqa, cq, NULL), 0);
	RC(fi_endpoint(d, i, ep, NULL), 0);
	RC(fi_ep_bind(*ep, &c->eq->fid, 0), 0);
	RC(fi_ep_bind(*ep, &(*cq)->fid, FI_TRANSMIT | FI_RECV), 0);
	RC(fi_enable(*ep), 0);
}

/* Reads one EQ event within 10 s: its number, the entry in e. The EQ has a descriptor
 * (FI_WAIT_FD), which must poll readable once the event is there: the endpoints'
 * progress threads bring the events. */
static uint32_t event(struct fid_eq *eq, struct fi_eq_cm_entry *e, size_t len)
{
	uint32_t ev = 0;
	int fd = -1;
	RC(fi_control(&eq->fid, FI_GETWAIT, &fd), 0);
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	RC(poll(&pfd, 1, 10000), 1);
	ssize_t r = fi_eq_sread(eq, &ev, e, len, 0, 0);
	CHECK(r >= (ssize_t)sizeof *e, "fi_eq_sread = %zd (%s)", r, fi_strerror((int)-r));
	return ev;
}

/* A passive endpoint and a client that asked it for a connection, for the caps `caps`;
 * the request read. */
static void request_caps(struct conn *c, const void *data, size_t len, uint64_t caps)
{
	struct fi_info *h = caps ? hints_msg_caps(caps) : hints_msg();
	struct fi_eq_attr eqa = {.wait_obj = FI_WAIT_FD};
	memset(c, 0, sizeof *c);
	c->info = getinfo(h);
	fi_freeinfo(h);
	CHECK(c->info->ep_attr->type == FI_EP_MSG && !(c->info->caps & FI_TAGGED));
	CHECK(c->info->domain_attr->cq_data_size == 4);
	RC(fi_fabric(c->info->fabric_attr, &c->fabric, NULL), 0);
	RC(fi_eq_open(c->fabric, &eqa, &c->eq, NULL), 0);
	RC(fi_passive_ep(c->fabric, c->info, &c->pep, NULL), 0);
	RC(fi_pep_bind(c->pep, &c->eq->fid, 0), 0);
	RC(fi_listen(c->pep), 0);
	size_t cm = 0, optlen = sizeof cm;
	RC(fi_getopt(&c->pep->fid, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, &cm, &optlen), 0);
	CHECK(cm >= 32, "cm data size %zu", cm);
	char name[64];
	size_t namelen = sizeof name;
	RC(fi_getname(&c->pep->fid, name, &namelen), 0);
	CHECK(((struct sockaddr_in *)name)->sin_port != 0, "the listener's port");
	RC(fi_domain(c->fabric, c->info, &c->cdom, NULL), 0);
	active(c, c->cdom, c->info, &c->cep, &c->ccq);
	RC(fi_connect(c->cep, name, data, len), 0);
	struct {
		struct fi_eq_cm_entry e;
		char data[64];
	} ev;
	CHECK(event(c->eq, &ev.e, sizeof ev) == FI_CONNREQ);
	CHECK(ev.e.fid == &c->pep->fid, "the request names the passive endpoint");
	CHECK(ev.e.info && ev.e.info->handle, "an info with a handle");
	CHECK(ev.e.info->ep_attr->type == FI_EP_MSG && ev.e.info->dest_addr);
	CHECK(!memcmp(ev.data, data, len), "the private data");
	c->req = ev.e.info;
}

static void request(struct conn *c, const void *data, size_t len)
{
	request_caps(c, data, len, 0);
}

/* The server's end of a requested connection (counting what `counts` names on `cntr`,
 * if given), accepted, and FI_CONNECTED read on both sides. */
static void accepted(struct conn *c, struct fid_cntr *cntr, uint64_t counts, int recvs,
		     char (*rb)[64])
{
	struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_DATA};
	RC(fi_cq_open(c->sdom, &cqa, &c->scq, NULL), 0);
	RC(fi_endpoint(c->sdom, c->req, &c->sep, NULL), 0);
	RC(fi_ep_bind(c->sep, &c->eq->fid, 0), 0);
	RC(fi_ep_bind(c->sep, &c->scq->fid, FI_TRANSMIT | FI_RECV), 0);
	if (cntr)
		RC(fi_ep_bind(c->sep, &cntr->fid, counts), 0);
	RC(fi_enable(c->sep), 0);
	for (int k = 0; k < recvs; k++)
		RC(fi_recv(c->sep, rb[k], sizeof rb[k], NULL, 0, NULL), 0);
	RC(fi_accept(c->sep, NULL, 0), 0);
	struct fi_eq_cm_entry e;
	CHECK(event(c->eq, &e, sizeof e) == FI_CONNECTED);
	CHECK(event(c->eq, &e, sizeof e) == FI_CONNECTED);
}

static void close_conn(struct conn *c)
{
	if (c->sep) {
		RC(fi_close(&c->sep->fid), 0);
		RC(fi_close(&c->scq->fid), 0);
		RC(fi_close(&c->sdom->fid), 0);
	}
	RC(fi_close(&c->cep->fid), 0);
	RC(fi_close(&c->ccq->fid), 0);
	RC(fi_close(&c->cdom->fid), 0);
	RC(fi_close(&c->pep->fid), 0);
	RC(fi_close(&c->eq->fid), 0);
	RC(fi_close(&c->fabric->fid), 0);
	fi_freeinfo(c->req);
	fi_freeinfo(c->info);
}

static struct fi_cq_data_entry one_data(struct fid_cq *cq)
{
	struct fi_cq_data_entry e;
	double end = now() + 10;
	ssize_t r;
	while ((r = fi_cq_read(cq, &e, 1)) == -FI_EAGAIN)
		CHECK(now() < end, "no completion within 10 s");
	CHECK(r == 1, "fi_cq_read = %zd", r);
	return e;
}

void msg_connect(void)
{
	struct conn c;
	request(&c, "hello", 5);
	static char sb[8192], rb[8192], cb[100000];
	/* A receive posted before the accept waits for the connection. */
	RC(fi_domain(c.fabric, c.req, &c.sdom, NULL), 0);
	active(&c, c.sdom, c.req, &c.sep, &c.scq);
	RC(fi_recv(c.sep, rb, sizeof rb, NULL, 0, (void *)1), 0);
	RC(fi_accept(c.sep, "welcome", 7), 0);
	struct {
		struct fi_eq_cm_entry e;
		char data[64];
	} ev[2];
	/* Both sides' FI_CONNECTED, in either order, each with its own fid. */
	int server = 0, client = 0;
	for (int k = 0; k < 2; k++) {
		ssize_t r = fi_eq_sread(c.eq, &(uint32_t){0}, &ev[k], sizeof ev[k], 10000, 0);
		CHECK(r >= (ssize_t)sizeof ev[k].e, "fi_eq_sread = %zd", r);
		if (ev[k].e.fid == &c.sep->fid)
			server++;
		if (ev[k].e.fid == &c.cep->fid) {
			client++;
			CHECK(r == sizeof ev[k].e + 7 && !memcmp(ev[k].data, "welcome", 7),
			      "the accept's private data (%zd bytes)", r);
		}
	}
	CHECK(server == 1 && client == 1, "server %d client %d", server, client);
	char peer[64];
	size_t plen = sizeof peer;
	RC(fi_getpeer(c.cep, peer, &plen), 0);
	/* Messages both ways: inline, large, with 32 bits of remote CQ data. */
	fill(sb, sizeof sb, 5);
	RC(fi_senddata(c.cep, sb, 3000, NULL, 0xabcd1234, 0, (void *)2), 0);
	struct fi_cq_data_entry e = one_data(c.scq);
	CHECK(e.op_context == (void *)1 && e.len == 3000 && (e.flags & FI_REMOTE_CQ_DATA) &&
		      e.data == 0xabcd1234,
	      "len %zu flags %#lx data %#lx", e.len, (unsigned long)e.flags, (unsigned long)e.data);
	CHECK(same(rb, 3000, 5));
	CHECK(one_data(c.ccq).op_context == (void *)2);
	RC(fi_senddata(c.cep, sb, 8, NULL, 1ULL << 40, 0, NULL), -FI_EINVAL);
	RC(fi_recv(c.cep, cb, sizeof cb, NULL, 0, (void *)3), 0);
	RC(fi_inject(c.sep, sb, 16, 0), 0);
	e = one_data(c.ccq);
	CHECK(e.op_context == (void *)3 && e.len == 16 && same(cb, 16, 5));
	/* The server's end: the client hears FI_SHUTDOWN, its posted receive flushes. */
	RC(fi_recv(c.cep, cb, sizeof cb, NULL, 0, (void *)4), 0);
	RC(fi_shutdown(c.sep, 0), 0);
	CHECK(event(c.eq, &ev[0].e, sizeof ev[0]) == FI_SHUTDOWN && ev[0].e.fid == &c.cep->fid);
	struct fi_cq_err_entry err = {0};
	struct fi_cq_data_entry d;
	double end = now() + 10;
	while (fi_cq_read(c.ccq, &d, 1) != -FI_EAVAIL)
		CHECK(now() < end, "no flush");
	RC(fi_cq_readerr(c.ccq, &err, 0), 1);
	CHECK(err.op_context == (void *)4 && err.err == FI_ECANCELED, "err %d", err.err);
	RC(fi_send(c.cep, sb, 8, NULL, 0, NULL), -FI_EOPBADSTATE);
	close_conn(&c);
}

void msg_reject(void)
{
	struct conn c;
	request(&c, "", 0);
	RC(fi_reject(c.pep, c.req->handle, "no", 2), 0);
	/* The handle is spent. */
	RC(fi_reject(c.pep, c.req->handle, NULL, 0), -FI_EINVAL);
	struct fi_eq_cm_entry e;
	uint32_t ev;
	double end = now() + 10;
	ssize_t r;
	while ((r = fi_eq_read(c.eq, &ev, &e, sizeof e, 0)) == -FI_EAGAIN)
		CHECK(now() < end, "no event");
	RC(r, -FI_EAVAIL);
	struct fi_eq_err_entry err = {0};
	RC(fi_eq_readerr(c.eq, &err, 0), sizeof err);
	CHECK(err.fid == &c.cep->fid && err.err == FI_ECONNREFUSED, "err %d", err.err);
	close_conn(&c);
}

/* A request read and neither accepted nor rejected is refused when its EQ closes (the
 * listener gone with it): the client hears the refusal at once, not after its connect
 * times out. */
void msg_unanswered(void)
{
	struct fi_info *h = hints_msg(), *i = getinfo(h);
	fi_freeinfo(h);
	struct fid_fabric *f;
	struct fid_eq *seq, *ceq;
	struct fid_pep *pep;
	struct fi_eq_attr eqa = {.wait_obj = FI_WAIT_FD};
	RC(fi_fabric(i->fabric_attr, &f, NULL), 0);
	RC(fi_eq_open(f, &eqa, &seq, NULL), 0);
	RC(fi_eq_open(f, &eqa, &ceq, NULL), 0);
	RC(fi_passive_ep(f, i, &pep, NULL), 0);
	RC(fi_pep_bind(pep, &seq->fid, 0), 0);
	RC(fi_listen(pep), 0);
	char name[64];
	size_t namelen = sizeof name;
	RC(fi_getname(&pep->fid, name, &namelen), 0);
	struct fid_domain *d;
	struct fid_ep *ep;
	struct fid_cq *cq;
	struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_DATA};
	RC(fi_domain(f, i, &d, NULL), 0);
	RC(fi_cq_open(d, &cqa, &cq, NULL), 0);
	RC(fi_endpoint(d, i, &ep, NULL), 0);
	RC(fi_ep_bind(ep, &ceq->fid, 0), 0);
	RC(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
	RC(fi_enable(ep), 0);
	RC(fi_connect(ep, name, NULL, 0), 0);
	struct fi_eq_cm_entry e;
	CHECK(event(seq, &e, sizeof e) == FI_CONNREQ);
	fi_freeinfo(e.info);
	RC(fi_close(&pep->fid), 0);
	RC(fi_close(&seq->fid), 0);
	uint32_t ev;
	double end = now() + 10;
	ssize_t r;
	while ((r = fi_eq_read(ceq, &ev, &e, sizeof e, 0)) == -FI_EAGAIN)
		CHECK(now() < end, "no refusal within 10 s");
	RC(r, -FI_EAVAIL);
	struct fi_eq_err_entry err = {0};
	RC(fi_eq_readerr(ceq, &err, 0), sizeof err);
	CHECK(err.fid == &ep->fid && err.err == FI_ECONNREFUSED, "err %d", err.err);
	RC(fi_close(&ep->fid), 0);
	RC(fi_close(&cq->fid), 0);
	RC(fi_close(&d->fid), 0);
	RC(fi_close(&ceq->fid), 0);
	RC(fi_close(&f->fid), 0);
	fi_freeinfo(i);
}

void msg_negative(void)
{
	struct fi_info *h = hints_msg(), *i = getinfo(h), *r = NULL;
	/* Tags and atomics are not offered on MSG endpoints. */
	h->caps = FI_TAGGED;
	RC(fi_getinfo(VERSION, NULL, NULL, 0, h, &r), -FI_ENODATA);
	h->caps = FI_MSG;
	h->domain_attr->cq_data_size = 8;
	RC(fi_getinfo(VERSION, NULL, NULL, 0, h, &r), -FI_ENODATA);
	struct fid_fabric *f;
	struct fid_domain *d;
	struct fid_ep *ep;
	struct fid_cq *cq;
	struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_DATA};
	RC(fi_fabric(i->fabric_attr, &f, NULL), 0);
	RC(fi_domain(f, i, &d, NULL), 0);
	RC(fi_cq_open(d, &cqa, &cq, NULL), 0);
	RC(fi_endpoint(d, i, &ep, NULL), 0);
	RC(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
	/* Without an EQ a MSG endpoint cannot be enabled; before it is, nothing goes. */
	RC(fi_enable(ep), -FI_ENOEQ);
	char b[8];
	RC(fi_send(ep, b, 8, NULL, 0, NULL), -FI_EOPBADSTATE);
	RC(fi_connect(ep, NULL, NULL, 0), -FI_EOPBADSTATE);
	RC(fi_close(&ep->fid), 0);
	/* An enabled endpoint that is not connected: sends are refused, not queued. */
	struct fid_eq *eq;
	struct fi_eq_attr eqa = {.wait_obj = FI_WAIT_UNSPEC};
	RC(fi_eq_open(f, &eqa, &eq, NULL), 0);
	RC(fi_endpoint(d, i, &ep, NULL), 0);
	RC(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
	RC(fi_ep_bind(ep, &eq->fid, 0), 0);
	RC(fi_enable(ep), 0);
	RC(fi_send(ep, b, 8, NULL, 0, NULL), -FI_EOPBADSTATE);
	RC(fi_accept(ep, NULL, 0), -FI_EINVAL);
	RC(fi_connect(ep, NULL, NULL, 0), -FI_EINVAL);
	char big[64] = {0};
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(1)};
	inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr);
	RC(fi_connect(ep, &sin, big, sizeof big), -FI_EINVAL);
	/* An RDM endpoint has no connection verbs. */
	RC(fi_close(&ep->fid), 0);
	RC(fi_close(&eq->fid), 0);
	RC(fi_close(&cq->fid), 0);
	RC(fi_close(&d->fid), 0);
	RC(fi_close(&f->fid), 0);
	struct pair p;
	open_pair(&p, FI_MSG, 0);
	RC(fi_connect(p.a.ep, &sin, NULL, 0), -FI_EOPNOTSUPP);
	RC(fi_shutdown(p.a.ep, 0), -FI_EOPNOTSUPP);
	close_pair(&p);
	fi_freeinfo(i);
	fi_freeinfo(h);
}

/* Counters on a connected endpoint: the server's counts its receives and its sends, an
 * inject too (it writes no CQ entry); they are bound before enable, as on RDM. */
void msg_counters(void)
{
	struct conn c;
	request(&c, "", 0);
	struct fid_cntr *cntr;
	RC(fi_domain(c.fabric, c.req, &c.sdom, NULL), 0);
	RC(fi_cntr_open(c.sdom, NULL, &cntr, NULL), 0);
	static char sb[64], rb[2][64], cb[64];
	accepted(&c, cntr, FI_SEND | FI_RECV, 2, rb);
	CHECK(fi_cntr_read(cntr) == 0);
	RC(fi_send(c.cep, sb, 8, NULL, 0, NULL), 0);
	RC(fi_send(c.cep, sb, 16, NULL, 0, NULL), 0);
	RC(fi_cntr_wait(cntr, 2, 10000), 0);
	RC(fi_recv(c.cep, cb, sizeof cb, NULL, 0, (void *)7), 0);
	RC(fi_inject(c.sep, sb, 8, 0), 0);
	RC(fi_cntr_wait(cntr, 3, 10000), 0);
	CHECK(fi_cntr_read(cntr) == 3 && fi_cntr_readerr(cntr) == 0);
	/* The client's two sends and its receive. */
	int got = 0;
	for (int k = 0; k < 3; k++)
		got += one_data(c.ccq).op_context == (void *)7;
	CHECK(got == 1, "the client's receive completed");
	RC(fi_close(&c.sep->fid), 0);
	RC(fi_close(&cntr->fid), 0);
	RC(fi_close(&c.scq->fid), 0);
	RC(fi_close(&c.sdom->fid), 0);
	c.sep = NULL;
	close_conn(&c);
}

/* Counters on datagram endpoints: the sender's counts its sends (an inject too), the
 * receiver's its receives. */
/* Atomics on a connected endpoint, as on RDM (64-bit add, fetch-add, read, compare-and-
 * swap), into a region of the server's; a misaligned target is refused at once. */
void msg_atomic(void)
{
	struct conn c;
	request_caps(&c, "", 0, FI_MSG | FI_RMA | FI_ATOMIC);
	CHECK(c.info->caps & FI_ATOMIC, "caps %#lx", (unsigned long)c.info->caps);
	RC(fi_domain(c.fabric, c.req, &c.sdom, NULL), 0);
	accepted(&c, NULL, 0, 0, NULL);
	static uint64_t target[2] = {5, 0};
	struct fid_mr *m;
	RC(fi_mr_reg(c.sdom, target, sizeof target, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &m,
		     NULL),
	   0);
	uint64_t key = fi_mr_key(m), w = (uint64_t)(uintptr_t)target, v = 10, old = 0, cmp;
	RC(fi_atomic(c.cep, &v, 1, NULL, 0, w, key, FI_UINT64, FI_SUM, (void *)1), 0);
	struct fi_cq_data_entry e = one_data(c.ccq);
	CHECK(e.op_context == (void *)1 && (e.flags & (FI_ATOMIC | FI_WRITE)) == (FI_ATOMIC | FI_WRITE));
	CHECK(target[0] == 15, "added: %lu", (unsigned long)target[0]);
	RC(fi_fetch_atomic(c.cep, &v, 1, NULL, &old, NULL, 0, w, key, FI_UINT64, FI_SUM, (void *)2),
	   0);
	e = one_data(c.ccq);
	CHECK(e.op_context == (void *)2 && (e.flags & (FI_ATOMIC | FI_READ)) == (FI_ATOMIC | FI_READ));
	CHECK(old == 15 && target[0] == 25, "fetched %lu", (unsigned long)old);
	RC(fi_fetch_atomic(c.cep, NULL, 1, NULL, &old, NULL, 0, w, key, FI_UINT64, FI_ATOMIC_READ,
			   (void *)3),
	   0);
	CHECK(one_data(c.ccq).op_context == (void *)3 && old == 25, "read %lu", (unsigned long)old);
	cmp = 25, v = 99;
	RC(fi_compare_atomic(c.cep, &v, 1, NULL, &cmp, NULL, &old, NULL, 0, w, key, FI_UINT64,
			     FI_CSWAP, (void *)4),
	   0);
	CHECK(one_data(c.ccq).op_context == (void *)4 && old == 25 && target[0] == 99);
	RC(fi_atomic(c.cep, &v, 1, NULL, 0, w + 4, key, FI_UINT64, FI_SUM, NULL), -FI_EINVAL);
	RC(fi_close(&m->fid), 0);
	close_conn(&c);
}

void dgram_counters(void)
{
	struct fi_info *h = hints_rdm(FI_MSG), *i;
	h->ep_attr->type = FI_EP_DGRAM;
	i = getinfo(h);
	struct node a, b;
	open_node_counted(&a, i, 0, FI_SEND);
	open_node_counted(&b, i, 0, FI_RECV);
	fi_addr_t to_b = insert(&a, &b);
	static char sb[64], rb[3][64];
	for (int k = 0; k < 3; k++)
		RC(fi_recv(b.ep, rb[k], sizeof rb[k], NULL, FI_ADDR_UNSPEC, NULL), 0);
	RC(fi_send(a.ep, sb, 8, NULL, to_b, NULL), 0);
	RC(fi_send(a.ep, sb, 16, NULL, to_b, NULL), 0);
	RC(fi_inject(a.ep, sb, 8, to_b), 0);
	RC(fi_cntr_wait(a.cntr, 3, 10000), 0);
	RC(fi_cntr_wait(b.cntr, 3, 10000), 0);
	CHECK(fi_cntr_read(a.cntr) == 3 && fi_cntr_read(b.cntr) == 3);
	CHECK(fi_cntr_readerr(a.cntr) == 0 && fi_cntr_readerr(b.cntr) == 0);
	close_node(&a);
	close_node(&b);
	fi_freeinfo(i);
	fi_freeinfo(h);
}

void dgram(void)
{
	struct fi_info *h = hints_rdm(FI_MSG), *i;
	h->ep_attr->type = FI_EP_DGRAM;
	i = getinfo(h);
	size_t max = i->ep_attr->max_msg_size;
	CHECK(i->ep_attr->type == FI_EP_DGRAM && max >= 1024 && max <= 4096, "max %zu", max);
	CHECK(i->tx_attr->inject_size <= max && !(i->caps & (FI_RMA | FI_TAGGED)));
	struct node a, b;
	open_node(&a, i, 0);
	open_node(&b, i, 0);
	fi_addr_t to_b = insert(&a, &b), to_a = insert(&b, &a);
	static char sb[8192], rb[3][8192];
	for (int k = 0; k < 3; k++)
		RC(fi_recv(b.ep, rb[k], max, NULL, FI_ADDR_UNSPEC, (void *)(uintptr_t)(k + 1)), 0);
	fill(sb, max, 3);
	RC(fi_senddata(a.ep, sb, 100, NULL, 0x12345678, to_b, (void *)10), 0);
	RC(fi_send(a.ep, sb, max, NULL, to_b, (void *)11), 0);
	RC(fi_inject(a.ep, sb, 8, to_b), 0);
	/* Datagrams keep no order: each receive takes whichever comes next. */
	int seen = 0;
	for (int k = 0; k < 3; k++) {
		struct fi_cq_tagged_entry e = one(b.rxcq);
		int slot = (int)(uintptr_t)e.op_context - 1;
		CHECK(slot == k, "receives complete in the order posted (%d)", slot);
		if (e.len == 100) {
			CHECK((e.flags & FI_REMOTE_CQ_DATA) && e.data == 0x12345678 &&
			      same(rb[slot], 100, 3));
			seen |= 1;
		} else if (e.len == max) {
			CHECK(same(rb[slot], max, 3), "the full datagram's bytes");
			seen |= 2;
		} else {
			CHECK(e.len == 8 && same(rb[slot], 8, 3), "len %zu", e.len);
			seen |= 4;
		}
	}
	CHECK(seen == 7, "all three came");
	void *c1 = one(a.txcq).op_context, *c2 = one(a.txcq).op_context;
	CHECK((c1 == (void *)10 && c2 == (void *)11) || (c1 == (void *)11 && c2 == (void *)10));
	none(a.txcq);
	/* Back the other way. */
	RC(fi_recv(a.ep, rb[0], 64, NULL, FI_ADDR_UNSPEC, (void *)4), 0);
	RC(fi_send(b.ep, sb, 64, NULL, to_a, NULL), 0);
	CHECK(one(a.rxcq).op_context == (void *)4 && same(rb[0], 64, 3));
	/* Refused: over one datagram, over the inject size, RMA, tags. */
	RC(fi_send(a.ep, sb, max + 1, NULL, to_b, NULL), -FI_EMSGSIZE);
	RC(fi_inject(a.ep, sb, i->tx_attr->inject_size + 1, to_b), -FI_EMSGSIZE);
	RC(fi_write(a.ep, sb, 8, NULL, to_b, 0, 0, NULL), -FI_EOPNOTSUPP);
	RC(fi_tsend(a.ep, sb, 8, NULL, to_b, 1, NULL), -FI_EOPNOTSUPP);
	RC(fi_send(a.ep, sb, 8, NULL, 99, NULL), -FI_EINVAL);
	close_node(&a);
	close_node(&b);
	fi_freeinfo(i);
	fi_freeinfo(h);
}
