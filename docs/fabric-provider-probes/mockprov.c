/* Minimal external libfabric provider used only to probe libfabric 1.17's loader
 * and core behaviour (registration, name filtering, info ordering, rxm/rxd layering).
 * getinfo returns MSG, RDM and DGRAM infos filtered by ep type / caps / mode;
 * fabric() returns -FI_ENOSYS.  Env: MOCK_LOG=1 logs hints; MOCK_SET_PROVNAME=1 sets
 * fabric_attr->prov_name in returned infos; MOCK_NO_LAYER=1 presets the core's
 * private disable_layering byte in fi_provider.context (internal, for the experiment);
 * MOCK_NOFILTER=1 returns all three infos whatever the hints (shows the core does not filter). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>
#include <rdma/providers/fi_prov.h>

static int logon;
#define CAPS_RDM (FI_MSG|FI_TAGGED|FI_RMA|FI_ATOMIC|FI_SEND|FI_RECV|FI_READ|FI_WRITE|FI_REMOTE_READ|FI_REMOTE_WRITE|FI_DIRECTED_RECV|FI_MULTI_RECV|FI_SOURCE|FI_LOCAL_COMM|FI_REMOTE_COMM)
#define CAPS_MSG (FI_MSG|FI_RMA|FI_ATOMIC|FI_SEND|FI_RECV|FI_READ|FI_WRITE|FI_REMOTE_READ|FI_REMOTE_WRITE|FI_LOCAL_COMM|FI_REMOTE_COMM)
#define CAPS_DGRAM (FI_MSG|FI_SEND|FI_RECV|FI_MULTI_RECV|FI_SOURCE|FI_LOCAL_COMM|FI_REMOTE_COMM)

static struct fi_info *mk(enum fi_ep_type t, uint64_t caps)
{
	struct fi_info *i = fi_allocinfo();
	struct sockaddr_in *sin = calloc(1, sizeof *sin);
	i->caps = caps;
	i->addr_format = FI_SOCKADDR_IN;
	sin->sin_family = AF_INET; sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	i->src_addr = sin; i->src_addrlen = sizeof *sin;
	i->tx_attr->caps = caps & ~(FI_RECV|FI_REMOTE_READ|FI_REMOTE_WRITE|FI_DIRECTED_RECV|FI_MULTI_RECV|FI_SOURCE);
	i->tx_attr->op_flags = FI_COMPLETION|FI_INJECT|FI_TRANSMIT_COMPLETE|FI_INJECT_COMPLETE|FI_DELIVERY_COMPLETE;
	i->tx_attr->msg_order = FI_ORDER_SAS; i->tx_attr->inject_size = 64;
	i->tx_attr->size = 1024; i->tx_attr->iov_limit = 4; i->tx_attr->rma_iov_limit = 4;
	i->rx_attr->caps = caps & ~(FI_SEND|FI_READ|FI_WRITE);
	i->rx_attr->op_flags = FI_COMPLETION|FI_MULTI_RECV; i->rx_attr->msg_order = FI_ORDER_SAS;
	i->rx_attr->size = 1024; i->rx_attr->iov_limit = 4;
	i->ep_attr->type = t; i->ep_attr->protocol = FI_PROTO_UNSPEC; i->ep_attr->protocol_version = 1;
	i->ep_attr->max_msg_size = t == FI_EP_DGRAM ? 4000 : (1UL << 30);
	i->ep_attr->mem_tag_format = 0xAAAAAAAAAAAAAAAAULL;
	i->ep_attr->tx_ctx_cnt = 1; i->ep_attr->rx_ctx_cnt = 1;
	i->domain_attr->name = strdup("lo");
	i->domain_attr->threading = FI_THREAD_SAFE;
	i->domain_attr->control_progress = FI_PROGRESS_AUTO;
	i->domain_attr->data_progress = FI_PROGRESS_AUTO;
	i->domain_attr->resource_mgmt = FI_RM_ENABLED;
	i->domain_attr->av_type = FI_AV_UNSPEC;
	i->domain_attr->mr_mode = FI_MR_LOCAL|FI_MR_ALLOCATED|FI_MR_PROV_KEY|FI_MR_VIRT_ADDR;
	i->domain_attr->mr_key_size = 4; i->domain_attr->cq_data_size = 8;
	i->domain_attr->cq_cnt = 256; i->domain_attr->ep_cnt = 256;
	i->domain_attr->tx_ctx_cnt = 256; i->domain_attr->rx_ctx_cnt = 256;
	i->domain_attr->max_ep_tx_ctx = 1; i->domain_attr->max_ep_rx_ctx = 1;
	i->domain_attr->max_ep_srx_ctx = 1; i->domain_attr->cntr_cnt = 256;
	i->domain_attr->mr_iov_limit = 1; i->domain_attr->mr_cnt = 65536;
	i->domain_attr->caps = FI_LOCAL_COMM|FI_REMOTE_COMM;
	i->fabric_attr->name = strdup("127.0.0.1/8");
	i->fabric_attr->prov_version = FI_VERSION(0, 1);
	if (getenv("MOCK_SET_PROVNAME"))
		i->fabric_attr->prov_name = strdup("softrdma");
	return i;
}

static int ok(const struct fi_info *h, const struct fi_info *p)
{
	if (!h) return 1;
	if (h->ep_attr && h->ep_attr->type && h->ep_attr->type != p->ep_attr->type) return 0;
	if (h->caps & ~p->caps) return 0;
	if (h->ep_attr && h->ep_attr->rx_ctx_cnt == FI_SHARED_CONTEXT) { /* srx: allow */ }
	if (h->addr_format && h->addr_format != FI_SOCKADDR_IN && h->addr_format != FI_SOCKADDR) return 0;
	/* provider requires FI_MR_LOCAL: hints must allow it (1.5+ semantics) */
	if (h->domain_attr && h->domain_attr->mr_mode && !(h->domain_attr->mr_mode & FI_MR_LOCAL)) return 0;
	return 1;
}

static int mock_getinfo(uint32_t version, const char *node, const char *service,
			uint64_t flags, const struct fi_info *hints, struct fi_info **info)
{
	struct fi_info *cand[3], *head = NULL, *tail = NULL;
	int k;
	if (logon) {
		fprintf(stderr, "[mock getinfo] version=%u.%u node=%s service=%s flags=0x%llx",
			FI_MAJOR(version), FI_MINOR(version), node ? node : "-", service ? service : "-",
			(unsigned long long) flags);
		if (hints)
			fprintf(stderr, " hints: prov_name=%s ep_type=%d caps=0x%llx mode=0x%llx mr_mode=0x%x addr_format=%u rx_ctx_cnt=%zd tx.size=%zu rx.size=%zu dest=%p\n",
				hints->fabric_attr && hints->fabric_attr->prov_name ? hints->fabric_attr->prov_name : "(null)",
				hints->ep_attr ? hints->ep_attr->type : -1, (unsigned long long) hints->caps,
				(unsigned long long) hints->mode, hints->domain_attr ? hints->domain_attr->mr_mode : -1,
				hints->addr_format, hints->ep_attr ? (ssize_t) hints->ep_attr->rx_ctx_cnt : -2,
				hints->tx_attr ? hints->tx_attr->size : 0, hints->rx_attr ? hints->rx_attr->size : 0,
				hints->dest_addr);
		if (hints) fprintf(stderr, "[mock hints ptrs] ep_attr=%p domain_attr=%p tx_attr=%p rx_attr=%p fabric name=%s\n", (void*)hints->ep_attr, (void*)hints->domain_attr, (void*)hints->tx_attr, (void*)hints->rx_attr, hints->fabric_attr && hints->fabric_attr->name ? hints->fabric_attr->name : "(null)");
		else
			fprintf(stderr, " hints: NULL\n");
	}
	cand[0] = mk(FI_EP_RDM, CAPS_RDM);
	cand[1] = mk(FI_EP_MSG, CAPS_MSG);
	cand[2] = mk(FI_EP_DGRAM, CAPS_DGRAM);
	for (k = 0; k < 3; k++) {
		if (!getenv("MOCK_NOFILTER") && !ok(hints, cand[k])) { fi_freeinfo(cand[k]); continue; }
		if (hints && hints->caps) { /* narrow caps to what was asked, like ofi_alter_info */
			cand[k]->caps = hints->caps | (cand[k]->caps & (FI_LOCAL_COMM|FI_REMOTE_COMM));
		}
		if (!head) head = cand[k]; else tail->next = cand[k];
		tail = cand[k];
	}
	*info = head;
	return head ? 0 : -FI_ENODATA;
}

static int mock_fabric(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context)
{
	(void) fabric; (void) context;
	if (logon)
		fprintf(stderr, "[mock fabric] attr name=%s prov_name=%s prov_version=0x%x api_version=0x%x\n",
			attr->name, attr->prov_name, attr->prov_version, attr->api_version);
	return -FI_ENOSYS;
}

static void mock_cleanup(void) { if (logon) fprintf(stderr, "[mock cleanup]\n"); }

static struct fi_provider mock_prov = {
	.name = "softrdma",
	.version = FI_VERSION(0, 1),
	.fi_version = FI_VERSION(1, 17),
	.getinfo = mock_getinfo,
	.fabric = mock_fabric,
	.cleanup = mock_cleanup,
};

FI_EXT_INI
{
	logon = getenv("MOCK_LOG") != NULL;
	if (logon) fprintf(stderr, "[mock fi_prov_ini called]\n");
	if (getenv("MOCK_NO_LAYER"))
		((unsigned char *) &mock_prov.context)[5] = 1; /* ofi_prov_context.disable_layering */
	return &mock_prov;
}
