/* fi_getinfo with Open MPI 4.1.4 mtl/ofi hints (mtl_ofi_component.c:598-640, defaults:
 * single-threaded, tag_mode auto, progress unspec, av map) and its include-list
 * selection (prefix match, common_ofi.c:251-266).  usage: ompiinfo <include-name> */
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>
int main(int argc, char **argv)
{
	struct fi_info *hints = fi_allocinfo(), *info, *cur;
	int ret, n = 0;
	hints->mode = FI_CONTEXT | FI_CONTEXT2;
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_TAGGED | FI_LOCAL_COMM | FI_REMOTE_COMM | FI_DIRECTED_RECV;
	hints->tx_attr->msg_order = FI_ORDER_SAS;
	hints->rx_attr->msg_order = FI_ORDER_SAS;
	hints->rx_attr->op_flags = FI_COMPLETION;
	hints->tx_attr->op_flags = FI_COMPLETION;
	hints->domain_attr->threading = FI_THREAD_DOMAIN;
	hints->domain_attr->cq_data_size = sizeof(int);
	hints->domain_attr->control_progress = FI_PROGRESS_UNSPEC;
	hints->domain_attr->data_progress = FI_PROGRESS_UNSPEC;
	hints->domain_attr->av_type = FI_AV_MAP;
	hints->domain_attr->resource_mgmt = FI_RM_ENABLED;
	ret = fi_getinfo(FI_VERSION(1, 5), NULL, NULL, 0ULL, hints, &info);
	if (ret) { printf("fi_getinfo: %d (%s)\n", ret, fi_strerror(-ret)); return 1; }
	for (cur = info; cur; cur = cur->next, n++) {
		int sel = argc > 1 && !strncasecmp(cur->fabric_attr->prov_name, argv[1], strlen(argv[1]));
		printf("%2d %-18s %s\n", n, cur->fabric_attr->prov_name, sel ? "<- matches include list" : "");
	}
	return 0;
}
