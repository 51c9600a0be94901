/* Load libfabric with dlopen(RTLD_LOCAL) (as a Rust test harness or a plugin host would)
 * and count providers named "softrdma": shows whether a provider DSO without DT_NEEDED
 * on libfabric.so.1 can still resolve fi_* symbols.  usage: dlopen_local */
#include <stdio.h>
#include <string.h>
#include <dlfcn.h>
#include <rdma/fabric.h>
int main(void)
{
	void *h = dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL);
	int (*gi)(uint32_t, const char *, const char *, uint64_t, const struct fi_info *, struct fi_info **);
	struct fi_info *info, *cur; int n = 0;
	if (!h) { printf("dlopen: %s\n", dlerror()); return 1; }
	gi = (void *) dlsym(h, "fi_getinfo");
	if (gi(FI_VERSION(1, 17), NULL, NULL, FI_PROV_ATTR_ONLY, NULL, &info)) { printf("getinfo failed\n"); return 1; }
	for (cur = info; cur; cur = cur->next)
		if (!strcmp(cur->fabric_attr->prov_name, "softrdma")) n++;
	printf("softrdma providers registered: %d\n", n);
	return 0;
}
