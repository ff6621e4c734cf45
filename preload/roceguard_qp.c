// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * libroceguard_qp.so: LD_PRELOAD interposer of ibv_modify_qp() that applies
 * the roceguard NIC profile to every RC QP an unmodified application makes:
 *
 *   RESET/INIT -> RTR: GRH traffic class (whole ToS byte) when the address
 *                      vector has a GRH (always on RoCE);
 *   RTR -> RTS:        local ACK timeout exponent and retry count.
 *
 * Everything else reaches libibverbs untouched, and the caller's attribute
 * struct is never written. The profile comes from the environment, as
 * roceguard/nic_env.h spells it (names, formats and ranges):
 *
 *   ROCEGUARD_TC          traffic class byte 0..255 (DSCP 46 -> 184)
 *   ROCEGUARD_TIMEOUT     ACK timeout exponent 1..31 (4.096 us * 2^t)
 *   ROCEGUARD_RETRY_CNT   0..7
 *   ROCEGUARD_PROFILE     a file from `roceguard nic env` holding the above;
 *                         variables set in the environment win over it
 *   ROCEGUARD_QP_DEBUG=1  log each change on stderr
 *
 * Only calls that go through the dynamic linker's symbol lookup are seen.
 * NCCL loads libibverbs with dlopen() and resolves ibv_modify_qp with
 * dlsym() on that handle, which bypasses LD_PRELOAD; give NCCL the same
 * profile through its own variables (NCCL_IB_TC, NCCL_IB_TIMEOUT,
 * NCCL_IB_RETRY_CNT) from the same `roceguard nic env` file instead.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "roceguard/nic_env.h"

typedef int (*modify_qp_fn)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask);

struct rg_qp_profile {
	int tc;        /* -1: leave as the application set it */
	int timeout;
	int retry_cnt;
	int debug;
};

static struct rg_qp_profile profile = { -1, -1, -1, 0 };
static modify_qp_fn real_modify_qp;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static int parse_int(const char *name, const char *text, int lo, int hi)
{
	char *end;
	long v;

	if (!text || !*text)
		return -1;
	errno = 0;
	v = strtol(text, &end, 0);
	if (errno || *end || v < lo || v > hi) {
		fprintf(stderr, "libroceguard_qp: ignoring %s=%s (expected %d..%d)\n",
			name, text, lo, hi);
		return -1;
	}
	return (int)v;
}

static void set_value(struct rg_qp_profile *p, const char *name, const char *value)
{
	if (!strcmp(name, RG_ENV_TC))
		p->tc = parse_int(name, value, RG_ENV_TC_MIN, RG_ENV_TC_MAX);
	else if (!strcmp(name, RG_ENV_TIMEOUT))
		p->timeout = parse_int(name, value, RG_ENV_TIMEOUT_MIN, RG_ENV_TIMEOUT_MAX);
	else if (!strcmp(name, RG_ENV_RETRY_CNT))
		p->retry_cnt = parse_int(name, value, RG_ENV_RETRY_CNT_MIN, RG_ENV_RETRY_CNT_MAX);
}

/* KEY=VALUE lines as written by `roceguard nic env`; other keys ignored. */
static void load_file(struct rg_qp_profile *p, const char *path)
{
	char line[256];
	FILE *f = fopen(path, "re");

	if (!f) {
		fprintf(stderr, "libroceguard_qp: cannot open %s: %s\n", path, strerror(errno));
		return;
	}
	while (fgets(line, sizeof(line), f)) {
		char *eq = strchr(line, '=');

		if (line[0] == '#' || !eq)
			continue;
		*eq = '\0';
		eq[strcspn(eq + 1, "\r\n") + 1] = '\0';
		set_value(p, line, eq + 1);
	}
	fclose(f);
}

static void init(void)
{
	static const char *const names[] = { RG_ENV_TC, RG_ENV_TIMEOUT, RG_ENV_RETRY_CNT };
	const char *file = getenv(RG_ENV_PROFILE);

	/* The default version is the one a program linked today binds to. */
	real_modify_qp = (modify_qp_fn)dlvsym(RTLD_NEXT, "ibv_modify_qp", "IBVERBS_1.1");
	if (!real_modify_qp)
		real_modify_qp = (modify_qp_fn)dlsym(RTLD_NEXT, "ibv_modify_qp");
	if (file && *file)
		load_file(&profile, file);
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (getenv(names[i]))
			set_value(&profile, names[i], getenv(names[i]));
	profile.debug = getenv(RG_ENV_QP_DEBUG) && *getenv(RG_ENV_QP_DEBUG) == '1';
}

RG_EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask)
{
	struct ibv_qp_attr copy;

	pthread_once(&init_once, init);
	if (!real_modify_qp)
		return ENOSYS;
	if (!qp || !attr || qp->qp_type != IBV_QPT_RC || !(attr_mask & IBV_QP_STATE))
		return real_modify_qp(qp, attr, attr_mask);

	copy = *attr;
	if (copy.qp_state == IBV_QPS_RTR && (attr_mask & IBV_QP_AV) && copy.ah_attr.is_global &&
	    profile.tc >= 0) {
		if (profile.debug)
			fprintf(stderr, "libroceguard_qp: QP %u RTR traffic_class %u -> %d\n",
				qp->qp_num, copy.ah_attr.grh.traffic_class, profile.tc);
		copy.ah_attr.grh.traffic_class = (uint8_t)profile.tc;
	}
	/* Only where the application sets them itself (RTR -> RTS): adding
	 * them to other transitions would make the verbs call fail. */
	if (copy.qp_state == IBV_QPS_RTS && (attr_mask & IBV_QP_TIMEOUT) && profile.timeout >= 0) {
		if (profile.debug)
			fprintf(stderr, "libroceguard_qp: QP %u RTS timeout %u -> %d\n",
				qp->qp_num, copy.timeout, profile.timeout);
		copy.timeout = (uint8_t)profile.timeout;
	}
	if (copy.qp_state == IBV_QPS_RTS && (attr_mask & IBV_QP_RETRY_CNT) &&
	    profile.retry_cnt >= 0) {
		if (profile.debug)
			fprintf(stderr, "libroceguard_qp: QP %u RTS retry_cnt %u -> %d\n",
				qp->qp_num, copy.retry_cnt, profile.retry_cnt);
		copy.retry_cnt = (uint8_t)profile.retry_cnt;
	}
	return real_modify_qp(qp, &copy, attr_mask);
}
