// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * An RDMA application linked against libibverbs (DT_NEEDED), like
 * ibv_rc_pingpong: its ibv_modify_qp@IBVERBS_1.1 reference is what an
 * LD_PRELOAD library interposes. Also built linked against
 * libroceguard_qp.so itself, for the set-uid test (where the loader ignores
 * LD_PRELOAD paths).
 */
#include "qp_transitions.h"

int main(void)
{
	rg_connect_rc_qp(ibv_modify_qp);
	return 0;
}
