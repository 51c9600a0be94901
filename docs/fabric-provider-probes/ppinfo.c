/* Call fi_getinfo with exactly fi_pingpong 1.17's hints (util/pingpong.c main() + -p/-e/-m)
 * and print the returned list in order.  usage: ppinfo <prov> <msg|rdm|dgram> [tagged] */
#include <stdio.h>
#include <string.h>
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>
int main(int argc, char **argv)
{
	struct fi_info *hints = fi_allocinfo(), *info, *cur;
	int ret;
	hints->ep_attr->type = !strcmp(argv[2], "msg") ? FI_EP_MSG :
			       !strcmp(argv[2], "rdm") ? FI_EP_RDM : FI_EP_DGRAM;
	hints->caps = FI_MSG;
	if (argc > 3) { hints->caps &= ~FI_MSG; hints->caps |= FI_TAGGED; }
	hints->mode = FI_CONTEXT | FI_CONTEXT2 | FI_MSG_PREFIX;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR;
	if (strcmp(argv[1], "-"))
		hints->fabric_attr->prov_name = strdup(argv[1]);
	ret = fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), NULL, NULL, 0, hints, &info);
	if (ret) { printf("fi_getinfo: %d (%s)\n", ret, fi_strerror(-ret)); return 1; }
	for (cur = info; cur; cur = cur->next)
	{
		char a[64], b[1024], c[256];
		fi_tostr_r(a, sizeof a, &cur->ep_attr->type, FI_TYPE_EP_TYPE);
		fi_tostr_r(b, sizeof b, &cur->caps, FI_TYPE_CAPS);
		fi_tostr_r(c, sizeof c, &cur->mode, FI_TYPE_MODE);
		printf("%-18s %-12s mr_mode=0x%x mode=[%s] caps=[%s]\n", cur->fabric_attr->prov_name, a,
		       cur->domain_attr->mr_mode, c, b);
	}
	fi_freeinfo(info); fi_freeinfo(hints);
	return 0;
}
