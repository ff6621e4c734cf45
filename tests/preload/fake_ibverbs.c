// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * A stand-in libibverbs.so.1 for testing libroceguard_qp.so on hosts without
 * an RDMA device: ibv_modify_qp@@IBVERBS_1.1 prints the attributes it
 * received (what the NIC would have been given) and succeeds.
 */
#include <stdio.h>

#include <infiniband/verbs.h>

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask)
{
	if ((attr_mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_RTR && (attr_mask & IBV_QP_AV))
		printf("libibverbs: QP %u RTR traffic_class=%u\n", qp->qp_num,
		       attr->ah_attr.grh.traffic_class);
	if ((attr_mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_RTS)
		printf("libibverbs: QP %u RTS timeout=%u retry_cnt=%u\n", qp->qp_num, attr->timeout,
		       attr->retry_cnt);
	return 0;
}
