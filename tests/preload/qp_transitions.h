// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The two ibv_modify_qp() calls of an RC connection that libroceguard_qp.so
 * rewrites, made the way ibv_rc_pingpong makes them, for every test program
 * (linked, dlopened module, set-uid). The application's own values are
 * traffic class 32, timeout 14 and retry count 7, so a profile value and a
 * pass-through can be told apart.
 */
#pragma once

#include <stdio.h>

#include <infiniband/verbs.h>

typedef int (*rg_modify_qp_fn)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask);

static inline void rg_connect_rc_qp(rg_modify_qp_fn modify_qp)
{
	struct ibv_qp qp = { .qp_num = 7, .qp_type = IBV_QPT_RC };
	struct ibv_qp_attr rtr = {
		.qp_state = IBV_QPS_RTR,
		.ah_attr = { .is_global = 1, .grh = { .traffic_class = 32 } },
	};
	struct ibv_qp_attr rts = { .qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7 };
	int rtr_ret, rts_ret;

	rtr_ret = modify_qp(&qp, &rtr, IBV_QP_STATE | IBV_QP_AV);
	rts_ret = modify_qp(&qp, &rts, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT);
	printf("app: RTR returned %d\napp: RTS returned %d\n", rtr_ret, rts_ret);
	/* The interposer works on a copy: what the application passed stays. */
	printf("app: attr after the calls traffic_class=%u timeout=%u retry_cnt=%u\n",
	       rtr.ah_attr.grh.traffic_class, rts.timeout, rts.retry_cnt);
}
