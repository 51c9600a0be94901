/*
 * A stand-in for the system's libibverbs.so.1 with one kernel device, "fake0", for the
 * tests of softrdma's kernel backend on a host without RDMA devices (softrdma loads it
 * through SOFTRDMA_KERNEL_VERBS). It answers the listing and the queries the backend makes
 * with rxe-like figures; the verbs objects' entry points are there (the backend resolves
 * them all at load) and fail with ENOSYS.
 */
#include <infiniband/verbs.h>
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static struct ibv_device fake0 = {
	.node_type = IBV_NODE_CA,
	.transport_type = IBV_TRANSPORT_IB,
	.name = "fake0",
	.dev_name = "uverbs9",
};

struct ibv_device **ibv_get_device_list(int *num)
{
	struct ibv_device **l = calloc(2, sizeof(*l));
	if (!l)
		return NULL;
	l[0] = &fake0;
	if (num)
		*num = 1;
	return l;
}

void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

__be64 ibv_get_device_guid(struct ibv_device *d)
{
	(void)d;
	return htobe64(0x0011223344556677ULL);
}

struct ibv_context *ibv_open_device(struct ibv_device *d)
{
	struct ibv_context *c = calloc(1, sizeof(*c));
	if (c)
		c->device = d;
	return c;
}

int ibv_close_device(struct ibv_context *c)
{
	free(c);
	return 0;
}

int ibv_query_device(struct ibv_context *c, struct ibv_device_attr *a)
{
	(void)c;
	memset(a, 0, sizeof(*a));
	strcpy(a->fw_ver, "9.8.7");
	a->node_guid = htobe64(0x0011223344556677ULL);
	a->sys_image_guid = htobe64(0x0011223344556677ULL);
	a->max_mr_size = ~0ULL;
	a->vendor_id = 0xffffff;
	a->max_qp = 1048560;
	a->max_qp_wr = 1048576;
	a->atomic_cap = IBV_ATOMIC_HCA;
	a->max_pkeys = 64;
	a->phys_port_cnt = 1;
	return 0;
}

#undef ibv_query_port
int ibv_query_port(struct ibv_context *c, uint8_t port, struct _compat_ibv_port_attr *p)
{
	(void)c;
	if (port != 1)
		return EINVAL;
	/* The exported symbol's struct: ibv_port_attr without its last field. */
	struct ibv_port_attr *a = (struct ibv_port_attr *)p;
	memset(a, 0, offsetof(struct ibv_port_attr, port_cap_flags2));
	a->state = IBV_PORT_ACTIVE;
	a->max_mtu = IBV_MTU_4096;
	a->active_mtu = IBV_MTU_1024;
	a->gid_tbl_len = 4;
	a->max_msg_sz = 0x80000000;
	a->link_layer = IBV_LINK_LAYER_ETHERNET;
	return 0;
}

static const uint8_t gids[2][16] = {
	{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55},
	{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 99, 0, 7},
};

int ibv_query_gid(struct ibv_context *c, uint8_t port, int index, union ibv_gid *gid)
{
	(void)c;
	if (port != 1 || index < 0 || index >= 4)
		return -1;
	memset(gid, 0, sizeof(*gid));
	if (index < 2)
		memcpy(gid->raw, gids[index], 16);
	return 0;
}

int _ibv_query_gid_ex(struct ibv_context *c, uint32_t port, uint32_t index,
		      struct ibv_gid_entry *e, uint32_t flags, size_t size)
{
	(void)c;
	(void)flags;
	if (port != 1 || index >= 4 || size < sizeof(*e))
		return EINVAL;
	if (index >= 2)
		return ENODATA;
	memset(e, 0, sizeof(*e));
	memcpy(e->gid.raw, gids[index], 16);
	e->gid_index = index;
	e->port_num = port;
	e->gid_type = IBV_GID_TYPE_ROCE_V2;
	return 0;
}

/* The verbs objects: present, and refused. */
struct ibv_pd *ibv_alloc_pd(struct ibv_context *c)
{
	(void)c;
	errno = ENOSYS;
	return NULL;
}

int ibv_dealloc_pd(struct ibv_pd *p)
{
	(void)p;
	return ENOSYS;
}

#undef ibv_reg_mr
struct ibv_mr *ibv_reg_mr(struct ibv_pd *p, void *a, size_t l, int f)
{
	(void)p, (void)a, (void)l, (void)f;
	errno = ENOSYS;
	return NULL;
}

int ibv_dereg_mr(struct ibv_mr *m)
{
	(void)m;
	return ENOSYS;
}

struct ibv_cq *ibv_create_cq(struct ibv_context *c, int n, void *u, struct ibv_comp_channel *ch,
			     int v)
{
	(void)c, (void)n, (void)u, (void)ch, (void)v;
	errno = ENOSYS;
	return NULL;
}

int ibv_destroy_cq(struct ibv_cq *c)
{
	(void)c;
	return ENOSYS;
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *p, struct ibv_qp_init_attr *a)
{
	(void)p, (void)a;
	errno = ENOSYS;
	return NULL;
}

int ibv_modify_qp(struct ibv_qp *q, struct ibv_qp_attr *a, int m)
{
	(void)q, (void)a, (void)m;
	return ENOSYS;
}

int ibv_destroy_qp(struct ibv_qp *q)
{
	(void)q;
	return ENOSYS;
}

struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *c)
{
	(void)c;
	errno = ENOSYS;
	return NULL;
}

int ibv_destroy_comp_channel(struct ibv_comp_channel *c)
{
	(void)c;
	return ENOSYS;
}

int ibv_get_cq_event(struct ibv_comp_channel *c, struct ibv_cq **cq, void **ctx)
{
	(void)c, (void)cq, (void)ctx;
	errno = ENOSYS;
	return -1;
}

void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int n)
{
	(void)cq, (void)n;
}

struct ibv_srq *ibv_create_srq(struct ibv_pd *p, struct ibv_srq_init_attr *a)
{
	(void)p, (void)a;
	errno = ENOSYS;
	return NULL;
}

int ibv_destroy_srq(struct ibv_srq *s)
{
	(void)s;
	return ENOSYS;
}

struct ibv_ah *ibv_create_ah(struct ibv_pd *p, struct ibv_ah_attr *a)
{
	(void)p, (void)a;
	errno = ENOSYS;
	return NULL;
}

int ibv_destroy_ah(struct ibv_ah *a)
{
	(void)a;
	return ENOSYS;
}
