/*
 * libfabric's verbs provider opens and closes a domain ITERS times while a second thread
 * maps, advises and unmaps memory without pause, as glibc's allocator does for any thread.
 * Each domain opens an MR cache; with libfabric's default memory monitor (memhooks) that
 * rewrites the code of libc's mmap, munmap and madvise on the first open and restores it on
 * the last close, and the other thread can run the half-written code. Under `softrdma exec`
 * the monitor is off and this must print "fi_domain_churn ok".
 * Usage: fi_domain_churn PROVIDER ITERS
 */
#include <pthread.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <sys/mman.h>

#include "check.h"

static volatile int stop;

static void *churn(void *arg)
{
	unsigned long *rounds = arg;
	while (!stop) {
		void *p = mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		CHECK(p != MAP_FAILED);
		CHECK(madvise(p, 1 << 16, MADV_DONTNEED) == 0);
		CHECK(munmap(p, 1 << 16) == 0);
		++*rounds;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	CHECK(argc == 3);
	int iters = atoi(argv[2]);
	struct fi_info *hints = fi_allocinfo(), *info;
	CHECK(hints);
	hints->ep_attr->type = FI_EP_RDM;
	hints->fabric_attr->prov_name = strdup(argv[1]);
	hints->caps = FI_MSG;
	hints->domain_attr->mr_mode =
		FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	CHECK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info) == 0);
	struct fid_fabric *fabric;
	CHECK(fi_fabric(info->fabric_attr, &fabric, NULL) == 0);
	unsigned long rounds = 0;
	pthread_t t;
	CHECK(pthread_create(&t, NULL, churn, &rounds) == 0);
	for (int i = 0; i < iters; i++) {
		struct fid_domain *domain;
		CHECK(fi_domain(fabric, info, &domain, NULL) == 0);
		CHECK(fi_close(&domain->fid) == 0);
	}
	stop = 1;
	CHECK(pthread_join(t, NULL) == 0);
	CHECK(rounds > 0);
	CHECK(fi_close(&fabric->fid) == 0);
	fi_freeinfo(info);
	fi_freeinfo(hints);
	printf("fi_domain_churn ok: %d domains, %lu maps alongside\n", iters, rounds);
	return 0;
}
