/*
 * Conformance cases of RMA, atomics, counters and CQ descriptors (fabtests' rma, atomic and cntr tests
 * in shape): functional cases between two endpoints of one process, and their negative
 * cases (wrong keys, lengths past a region, ops and datatypes not offered).
 */
#include "common.h"
#include <poll.h>

#define RMA_CAPS (FI_MSG | FI_RMA | FI_ATOMIC)

/* Registers len bytes at buf for peers with access: its key. */
static struct fid_mr *reg(struct node *n, void *buf, size_t len, uint64_t access)
{
	struct fid_mr *m;
	RC(fi_mr_reg(n->domain, buf, len, access, 0, 0, 0, &m, NULL), 0);
	return m;
}

void getinfo_rma(void)
{
	struct fi_info *h = hints_rdm(FI_RMA | FI_ATOMIC), *i = getinfo(h);
	int need = FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ALLOCATED;
	CHECK((i->caps & (FI_RMA | FI_ATOMIC)) == (FI_RMA | FI_ATOMIC));
	CHECK((i->domain_attr->mr_mode & need) == need, "mr_mode %#x", i->domain_attr->mr_mode);
	CHECK(i->domain_attr->mr_key_size >= 4 && i->tx_attr->rma_iov_limit >= 1);
	CHECK(i->domain_attr->cntr_cnt > 0, "counters offered");
	fi_freeinfo(i);
	/* RMA for an application that takes neither the provider's keys nor virtual
	 * addresses: nothing. */
	struct fi_info *r = NULL;
	h->domain_attr->mr_mode = 0;
	RC(fi_getinfo(VERSION, NULL, NULL, 0, h, &r), -FI_ENODATA);
	/* The same application asking for nothing in particular gets messages. */
	h->caps = 0;
	i = getinfo(h);
	CHECK(!(i->caps & (FI_RMA | FI_ATOMIC)) && (i->caps & FI_TAGGED), "caps %#lx",
	      (unsigned long)i->caps);
	CHECK(i->domain_attr->mr_mode == 0);
	fi_freeinfo(i);
	fi_freeinfo(h);
}

void rma(void)
{
	struct pair p;
	open_pair(&p, RMA_CAPS, 0);
	static char target[65536], src[65536], back[65536];
	struct fid_mr *m = reg(&p.b, target, sizeof target, FI_REMOTE_READ | FI_REMOTE_WRITE);
	uint64_t key = fi_mr_key(m), base = (uint64_t)(uintptr_t)target;
	CHECK(key != FI_KEY_NOTAVAIL);
	fill(src, sizeof src, 3);
	/* A write, then a read of it back. */
	RC(fi_write(p.a.ep, src, 40000, NULL, p.a_to_b, base + 100, key, (void *)1), 0);
	struct fi_cq_tagged_entry e = one(p.a.txcq);
	CHECK(e.op_context == (void *)1 && (e.flags & (FI_RMA | FI_WRITE)) == (FI_RMA | FI_WRITE),
	      "flags %#lx", (unsigned long)e.flags);
	CHECK(same(target + 100, 40000, 3), "the write landed");
	RC(fi_read(p.a.ep, back, 40000, NULL, p.a_to_b, base + 100, key, (void *)2), 0);
	e = one(p.a.txcq);
	CHECK(e.op_context == (void *)2 && (e.flags & FI_READ));
	CHECK(same(back, 40000, 3), "read back what was written");
	/* A write with 64 bits of remote CQ data: the target's CQ has it. */
	RC(fi_writedata(p.a.ep, src, 64, NULL, 0x1122334455667788ULL, p.a_to_b, base, key,
			(void *)3),
	   0);
	e = one(p.b.rxcq);
	CHECK((e.flags & FI_REMOTE_CQ_DATA) && e.data == 0x1122334455667788ULL && e.len == 64,
	      "flags %#lx data %#lx len %zu", (unsigned long)e.flags, (unsigned long)e.data, e.len);
	CHECK(one(p.a.txcq).op_context == (void *)3);
	/* An inject: the buffer is the caller's again at once, and no entry comes. */
	char small[32];
	fill(small, sizeof small, 9);
	RC(fi_inject_write(p.a.ep, small, sizeof small, p.a_to_b, base + 5000, key), 0);
	memset(small, 0, sizeof small);
	/* writemsg and readv, one element each. */
	struct iovec iov = {.iov_base = src, .iov_len = 16};
	struct fi_rma_iov rio = {.addr = base + 6000, .len = 16, .key = key};
	struct fi_msg_rma msg = {.msg_iov = &iov, .iov_count = 1, .addr = p.a_to_b,
				 .rma_iov = &rio, .rma_iov_count = 1, .context = (void *)4};
	RC(fi_writemsg(p.a.ep, &msg, FI_COMPLETION), 0);
	CHECK(one(p.a.txcq).op_context == (void *)4, "the inject wrote no entry");
	CHECK(same(target + 5000, 32, 9) && same(target + 6000, 16, 3));
	struct iovec riov = {.iov_base = back, .iov_len = 32};
	RC(fi_readv(p.a.ep, &riov, NULL, 1, p.a_to_b, base + 5000, key, (void *)5), 0);
	CHECK(one(p.a.txcq).op_context == (void *)5 && same(back, 32, 9));
	none(p.a.txcq);
	RC(fi_close(&m->fid), 0);
	close_pair(&p);
}

void rma_negative(void)
{
	struct pair p;
	open_pair(&p, RMA_CAPS, 0);
	static char target[4096], src[8192];
	struct fid_mr *m = reg(&p.b, target, sizeof target, FI_REMOTE_WRITE);
	uint64_t key = fi_mr_key(m), base = (uint64_t)(uintptr_t)target;
	/* A wrong key and a length past the region: the target refuses, the initiator's
	 * CQ says so. */
	RC(fi_write(p.a.ep, src, 8, NULL, p.a_to_b, base, key ^ 0x100, (void *)1), 0);
	struct fi_cq_err_entry err = one_error(p.a.txcq);
	CHECK(err.op_context == (void *)1 && err.err == FI_EACCES, "err %d", err.err);
	RC(fi_write(p.a.ep, src, 8192, NULL, p.a_to_b, base, key, (void *)2), 0);
	err = one_error(p.a.txcq);
	CHECK(err.op_context == (void *)2 && err.err == FI_EACCES, "err %d", err.err);
	/* Reading a region registered for writes only. */
	RC(fi_read(p.a.ep, src, 8, NULL, p.a_to_b, base, key, (void *)3), 0);
	err = one_error(p.a.txcq);
	CHECK(err.op_context == (void *)3 && err.err == FI_EACCES, "err %d", err.err);
	/* Refused at the call: a key wider than the provider's, an address not in the AV,
	 * an inject over the inject size. */
	RC(fi_write(p.a.ep, src, 8, NULL, p.a_to_b, base, 1ULL << 40, NULL), -FI_EINVAL);
	RC(fi_write(p.a.ep, src, 8, NULL, 77, base, key, NULL), -FI_EINVAL);
	RC(fi_inject_write(p.a.ep, src, 8192 + 1, p.a_to_b, base, key), -FI_EMSGSIZE);
	/* And still working after all that. */
	RC(fi_write(p.a.ep, src, 8, NULL, p.a_to_b, base, key, (void *)4), 0);
	CHECK(one(p.a.txcq).op_context == (void *)4);
	RC(fi_close(&m->fid), 0);
	close_pair(&p);
}

void atomic(void)
{
	struct pair p;
	open_pair(&p, RMA_CAPS, 0);
	static uint64_t words[4];
	struct fid_mr *m = reg(&p.b, words, sizeof words, FI_REMOTE_READ | FI_REMOTE_WRITE);
	uint64_t key = fi_mr_key(m), w = (uint64_t)(uintptr_t)&words[1];
	uint64_t v = 5, old = 0, cmp = 0;
	struct fi_atomic_attr attr;
	size_t count = 0;
	RC(fi_query_atomic(p.a.domain, FI_UINT64, FI_SUM, &attr, 0), 0);
	CHECK(attr.count == 1 && attr.size == 8);
	RC(fi_query_atomic(p.a.domain, FI_INT64, FI_CSWAP, &attr, FI_COMPARE_ATOMIC), 0);
	RC(fi_query_atomic(p.a.domain, FI_UINT64, FI_ATOMIC_READ, &attr, FI_FETCH_ATOMIC), 0);
	RC(fi_query_atomic(p.a.domain, FI_UINT32, FI_SUM, &attr, 0), -FI_EOPNOTSUPP);
	RC(fi_query_atomic(p.a.domain, FI_UINT64, FI_MIN, &attr, 0), -FI_EOPNOTSUPP);
	RC(fi_query_atomic(p.a.domain, FI_UINT64, FI_ATOMIC_OP_LAST, &attr, 0), -FI_EINVAL);
	RC(fi_atomicvalid(p.a.ep, FI_UINT64, FI_SUM, &count), 0);
	CHECK(count == 1);
	RC(fi_compare_atomicvalid(p.a.ep, FI_UINT64, FI_SUM, &count), -FI_EOPNOTSUPP);
	/* Add, fetch-and-add, read, compare-and-swap (taken and not). */
	RC(fi_atomic(p.a.ep, &v, 1, NULL, p.a_to_b, w, key, FI_UINT64, FI_SUM, (void *)1), 0);
	struct fi_cq_tagged_entry e = one(p.a.txcq);
	CHECK(e.op_context == (void *)1 && (e.flags & (FI_ATOMIC | FI_WRITE)) == (FI_ATOMIC | FI_WRITE));
	v = 10;
	RC(fi_fetch_atomic(p.a.ep, &v, 1, NULL, &old, NULL, p.a_to_b, w, key, FI_UINT64, FI_SUM,
			   (void *)2),
	   0);
	e = one(p.a.txcq);
	CHECK(e.op_context == (void *)2 && (e.flags & (FI_ATOMIC | FI_READ)) == (FI_ATOMIC | FI_READ));
	CHECK(old == 5, "fetched %lu", (unsigned long)old);
	RC(fi_fetch_atomic(p.a.ep, NULL, 1, NULL, &old, NULL, p.a_to_b, w, key, FI_UINT64,
			   FI_ATOMIC_READ, (void *)3),
	   0);
	CHECK(one(p.a.txcq).op_context == (void *)3 && old == 15, "read %lu", (unsigned long)old);
	cmp = 15, v = 99;
	RC(fi_compare_atomic(p.a.ep, &v, 1, NULL, &cmp, NULL, &old, NULL, p.a_to_b, w, key,
			     FI_INT64, FI_CSWAP, (void *)4),
	   0);
	CHECK(one(p.a.txcq).op_context == (void *)4 && old == 15 && words[1] == 99);
	cmp = 1, v = 7;
	RC(fi_compare_atomic(p.a.ep, &v, 1, NULL, &cmp, NULL, &old, NULL, p.a_to_b, w, key,
			     FI_INT64, FI_CSWAP, (void *)5),
	   0);
	CHECK(one(p.a.txcq).op_context == (void *)5 && old == 99 && words[1] == 99, "not taken");
	/* An inject adds too. */
	v = 1;
	RC(fi_inject_atomic(p.a.ep, &v, 1, p.a_to_b, w, key, FI_UINT64, FI_SUM), 0);
	RC(fi_fetch_atomic(p.a.ep, NULL, 1, NULL, &old, NULL, p.a_to_b, w, key, FI_UINT64,
			   FI_ATOMIC_READ, (void *)6),
	   0);
	CHECK(one(p.a.txcq).op_context == (void *)6 && old == 100, "read %lu", (unsigned long)old);
	/* Refused at the call: ops, datatypes and counts not offered, a misaligned word. */
	RC(fi_atomic(p.a.ep, &v, 1, NULL, p.a_to_b, w, key, FI_UINT64, FI_MAX, NULL), -FI_EOPNOTSUPP);
	RC(fi_atomic(p.a.ep, &v, 1, NULL, p.a_to_b, w, key, FI_DOUBLE, FI_SUM, NULL), -FI_EOPNOTSUPP);
	RC(fi_atomic(p.a.ep, &v, 1, NULL, p.a_to_b, w, key, 99, FI_SUM, NULL), -FI_EINVAL);
	RC(fi_atomic(p.a.ep, &v, 2, NULL, p.a_to_b, w, key, FI_UINT64, FI_SUM, NULL), -FI_EINVAL);
	RC(fi_atomic(p.a.ep, &v, 1, NULL, p.a_to_b, w + 4, key, FI_UINT64, FI_SUM, NULL), -FI_EINVAL);
	RC(fi_fetch_atomic(p.a.ep, &v, 1, NULL, NULL, NULL, p.a_to_b, w, key, FI_UINT64, FI_SUM, NULL),
	   -FI_EINVAL);
	/* A wrong key: the target refuses. */
	RC(fi_atomic(p.a.ep, &v, 1, NULL, p.a_to_b, w, key ^ 0x100, FI_UINT64, FI_SUM, (void *)7), 0);
	struct fi_cq_err_entry err = one_error(p.a.txcq);
	CHECK(err.op_context == (void *)7 && err.err == FI_EACCES, "err %d", err.err);
	CHECK(words[1] == 100);
	RC(fi_close(&m->fid), 0);
	close_pair(&p);
}

void cntr(void)
{
	struct pair p;
	open_pair(&p, RMA_CAPS, FI_SELECTIVE_COMPLETION);
	struct fid_cntr *sent, *got, *rma;
	struct fi_cntr_attr attr = {.events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_UNSPEC};
	RC(fi_cntr_open(p.a.domain, &attr, &sent, NULL), 0);
	RC(fi_cntr_open(p.b.domain, &attr, &got, NULL), 0);
	RC(fi_cntr_open(p.a.domain, NULL, &rma, NULL), 0);
	/* Bound after enable: too late. */
	RC(fi_ep_bind(p.a.ep, &sent->fid, FI_SEND), -FI_EOPBADSTATE);
	/* A fresh endpoint for each side, with the counters bound before enable. */
	struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_TAGGED};
	struct fid_ep *a, *b;
	struct fid_cq *acq, *bcq;
	RC(fi_cq_open(p.a.domain, &cqa, &acq, NULL), 0);
	RC(fi_cq_open(p.b.domain, &cqa, &bcq, NULL), 0);
	RC(fi_endpoint(p.a.domain, p.info, &a, NULL), 0);
	RC(fi_endpoint(p.b.domain, p.info, &b, NULL), 0);
	RC(fi_ep_bind(a, &sent->fid, FI_REMOTE_WRITE), -FI_EOPNOTSUPP);
	RC(fi_ep_bind(a, &sent->fid, FI_SEND), 0);
	RC(fi_ep_bind(a, &rma->fid, FI_WRITE | FI_READ), 0);
	RC(fi_ep_bind(b, &got->fid, FI_RECV), 0);
	RC(fi_ep_bind(a, &p.a.av->fid, 0), 0);
	RC(fi_ep_bind(b, &p.b.av->fid, 0), 0);
	RC(fi_ep_bind(a, &acq->fid, FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION), 0);
	RC(fi_ep_bind(b, &bcq->fid, FI_TRANSMIT | FI_RECV), 0);
	RC(fi_enable(a), 0);
	RC(fi_enable(b), 0);
	char name[64];
	size_t len = sizeof name;
	fi_addr_t to_b;
	RC(fi_getname(&b->fid, name, &len), 0);
	RC(fi_av_insert(p.a.av, name, 1, &to_b, 0, NULL), 1);
	static char rb[4][8192], sb[8192], target[64];
	for (int k = 0; k < 4; k++)
		RC(fi_recv(b, rb[k], sizeof rb[k], NULL, FI_ADDR_UNSPEC, NULL), 0);
	/* Sends with no CQ entry (selective, and an inject) still count. */
	RC(fi_send(a, sb, 8, NULL, to_b, NULL), 0);
	RC(fi_inject(a, sb, 8, to_b), 0);
	RC(fi_send(a, sb, 8000, NULL, to_b, NULL), 0);
	RC(fi_cntr_wait(sent, 3, 10000), 0);
	RC(fi_cntr_wait(got, 3, 10000), 0);
	CHECK(fi_cntr_read(sent) == 3 && fi_cntr_readerr(sent) == 0);
	none(acq);
	/* RMA counts on FI_WRITE and FI_READ; a refused one counts as an error. */
	struct fid_mr *m = reg(&p.b, target, sizeof target, FI_REMOTE_READ | FI_REMOTE_WRITE);
	uint64_t key = fi_mr_key(m), base = (uint64_t)(uintptr_t)target;
	RC(fi_write(a, sb, 8, NULL, to_b, base, key, NULL), 0);
	RC(fi_read(a, sb, 8, NULL, to_b, base, key, NULL), 0);
	RC(fi_cntr_wait(rma, 2, 10000), 0);
	RC(fi_write(a, sb, 8, NULL, to_b, base, key ^ 0x100, NULL), 0);
	RC(fi_cntr_wait(rma, 3, 10000), -FI_EAVAIL);
	CHECK(fi_cntr_read(rma) == 2 && fi_cntr_readerr(rma) == 1);
	/* add, set, adderr, seterr; a wait that times out. */
	RC(fi_cntr_add(rma, 5), 0);
	RC(fi_cntr_seterr(rma, 0), 0);
	RC(fi_cntr_adderr(rma, 2), 0);
	CHECK(fi_cntr_read(rma) == 7 && fi_cntr_readerr(rma) == 2);
	RC(fi_cntr_set(rma, 1), 0);
	RC(fi_cntr_wait(rma, 2, 50), -FI_ETIMEDOUT);
	RC(fi_close(&m->fid), 0);
	RC(fi_close(&a->fid), 0);
	RC(fi_close(&b->fid), 0);
	RC(fi_close(&acq->fid), 0);
	RC(fi_close(&bcq->fid), 0);
	RC(fi_close(&sent->fid), 0);
	RC(fi_close(&got->fid), 0);
	RC(fi_close(&rma->fid), 0);
	/* A closed counter is not one. */
	CHECK(fi_cntr_read(rma) == 0);
	close_pair(&p);
}

/* A CQ with a descriptor (FI_WAIT_FD): fi_trywait, then poll(2) until a completion came
 * while the program slept. */
void cq_wait_fd(void)
{
	struct pair p;
	open_pair(&p, FI_MSG, 0);
	struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_FD};
	struct fid_cq *cq;
	struct fid_ep *ep;
	int fd = -1;
	RC(fi_cq_open(p.b.domain, &cqa, &cq, NULL), 0);
	RC(fi_control(&cq->fid, FI_GETWAIT, &fd), 0);
	CHECK(fd >= 0, "a descriptor");
	RC(fi_control(&p.b.rxcq->fid, FI_GETWAIT, &fd), -FI_ENODATA);
	RC(fi_control(&cq->fid, FI_GETWAIT, &fd), 0);
	RC(fi_endpoint(p.b.domain, p.info, &ep, NULL), 0);
	RC(fi_ep_bind(ep, &p.b.av->fid, 0), 0);
	RC(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
	RC(fi_enable(ep), 0);
	char name[64], rb[64];
	size_t len = sizeof name;
	fi_addr_t to;
	RC(fi_getname(&ep->fid, name, &len), 0);
	RC(fi_av_insert(p.a.av, name, 1, &to, 0, NULL), 1);
	RC(fi_recv(ep, rb, sizeof rb, NULL, FI_ADDR_UNSPEC, (void *)7), 0);
	struct fid *fids[1] = {&cq->fid};
	RC(fi_trywait(p.a.fabric, fids, 1), 0);
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	RC(poll(&pfd, 1, 0), 0);
	RC(fi_send(p.a.ep, "wake", 4, NULL, to, NULL), 0);
	RC(poll(&pfd, 1, 10000), 1);
	RC(fi_trywait(p.a.fabric, fids, 1), -FI_EAGAIN);
	struct fi_cq_tagged_entry e;
	RC(fi_cq_read(cq, &e, 1), 1);
	CHECK(e.op_context == (void *)7 && e.len == 4 && !memcmp(rb, "wake", 4));
	RC(poll(&pfd, 1, 0), 0);
	/* Only CQs with a descriptor are waited on. */
	struct fid *other[1] = {&p.b.rxcq->fid};
	RC(fi_trywait(p.a.fabric, other, 1), -FI_EINVAL);
	other[0] = &ep->fid;
	RC(fi_trywait(p.a.fabric, other, 1), -FI_EINVAL);
	RC(fi_close(&ep->fid), 0);
	RC(fi_close(&cq->fid), 0);
	close_pair(&p);
}
