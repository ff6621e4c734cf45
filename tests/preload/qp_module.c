// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * A module linked against libibverbs that a program loads with dlopen(), as
 * Python loads an extension, UCX its transports and Open MPI its components:
 * libibverbs then arrives after the program and LD_PRELOAD libraries have
 * been loaded, and outside the global scope when loaded RTLD_LOCAL.
 */
#include "qp_transitions.h"

__attribute__((visibility("default"))) void rg_module_connect_rc_qp(void)
{
	rg_connect_rc_qp(ibv_modify_qp);
}
