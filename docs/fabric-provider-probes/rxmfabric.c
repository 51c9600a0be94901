/* Open the fabric of a "softrdma;ofi_rxm" info to see what ofi_rxm asks the core
 * provider (ofi_get_core_info_fabric) and what reaches the provider's fabric(). */
#include <stdio.h>
#include <string.h>
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>
int main(void)
{
	struct fi_info *hints = fi_allocinfo(), *info;
	struct fid_fabric *fab;
	int ret;
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_MSG;
	hints->fabric_attr->prov_name = strdup("softrdma;ofi_rxm");
	ret = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info);
	printf("getinfo %d first=%s\n", ret, ret ? "-" : info->fabric_attr->prov_name);
	if (ret) return 1;
	fprintf(stderr, "---- fi_fabric(%s, name=%s)\n", info->fabric_attr->prov_name, info->fabric_attr->name);
	ret = fi_fabric(info->fabric_attr, &fab, NULL);
	printf("fi_fabric -> %d (%s)\n", ret, fi_strerror(-ret));
	return 0;
}
