// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * A program that does not link libibverbs and reaches ibv_modify_qp only at
 * run time, in one of the ways applications do:
 *
 *   module-local PATH   dlopen a module linked against libibverbs, RTLD_LOCAL
 *   module-global PATH  the same, RTLD_GLOBAL
 *   verbs-global        dlopen libibverbs.so.1 RTLD_GLOBAL, then look
 *                       ibv_modify_qp up in the global scope
 *   no-verbs            look ibv_modify_qp up without libibverbs loaded
 *                       (only an LD_PRELOAD library can define it then)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>

#include "qp_transitions.h"

static int connect_through_module(const char *path, int scope)
{
	void *module = dlopen(path, RTLD_NOW | scope);
	void (*connect_rc_qp)(void);

	if (!module) {
		fprintf(stderr, "app: %s\n", dlerror());
		return 1;
	}
	connect_rc_qp = (void (*)(void))dlsym(module, "rg_module_connect_rc_qp");
	if (!connect_rc_qp) {
		fprintf(stderr, "app: %s\n", dlerror());
		return 1;
	}
	connect_rc_qp();
	return 0;
}

static int connect_through_global_scope(void)
{
	rg_modify_qp_fn modify_qp = (rg_modify_qp_fn)dlsym(RTLD_DEFAULT, "ibv_modify_qp");

	if (!modify_qp) {
		fprintf(stderr, "app: %s\n", dlerror());
		return 1;
	}
	rg_connect_rc_qp(modify_qp);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "module-local"))
		return connect_through_module(argv[2], RTLD_LOCAL);
	if (argc == 3 && !strcmp(argv[1], "module-global"))
		return connect_through_module(argv[2], RTLD_GLOBAL);
	if (argc == 2 && !strcmp(argv[1], "verbs-global")) {
		if (!dlopen("libibverbs.so.1", RTLD_NOW | RTLD_GLOBAL)) {
			fprintf(stderr, "app: %s\n", dlerror());
			return 1;
		}
		return connect_through_global_scope();
	}
	if (argc == 2 && !strcmp(argv[1], "no-verbs"))
		return connect_through_global_scope();
	fprintf(stderr, "usage: %s module-local|module-global PATH | verbs-global | no-verbs\n",
		argv[0]);
	return 2;
}
