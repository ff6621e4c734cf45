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
 * roceguard/nic_env.h spells it (names, formats and ranges; values in plain
 * decimal; none at all in a set-uid or file-capability program):
 *
 *   ROCEGUARD_TC          traffic class byte 0..255 (DSCP 46 -> 184)
 *   ROCEGUARD_TIMEOUT     ACK timeout exponent 1..31 (4.096 us * 2^t)
 *   ROCEGUARD_RETRY_CNT   0..7
 *   ROCEGUARD_PROFILE     a file from `roceguard nic env` holding the above;
 *                         variables set in the environment win over it
 *   ROCEGUARD_QP_DEBUG=1  log each change on stderr
 *
 * Only calls that go through the dynamic linker's symbol lookup are seen:
 * those of the program and of any module linked against libibverbs, however
 * it was loaded. NCCL loads libibverbs with dlopen() and resolves
 * ibv_modify_qp with dlsym() on that handle, which bypasses LD_PRELOAD; give
 * NCCL the same profile through its own variables (NCCL_IB_TC,
 * NCCL_IB_TIMEOUT, NCCL_IB_RETRY_CNT) from the same `roceguard nic env` file
 * instead.
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
static pthread_once_t profile_once = PTHREAD_ONCE_INIT;
static modify_qp_fn real_modify_qp;
static int reported_missing;

/*
 * Plain decimal only, as `roceguard nic env` writes it. strtol(..., 0) read
 * "010" as octal 8 and the shell's arithmetic does too, while a person
 * means 10: a leading zero (or a sign, a blank, a 0x) is refused rather
 * than guessed, and the application's own value stays.
 */
static int parse_decimal(const char *name, const char *text, int lo, int hi)
{
	const char *digit;
	long v = 0;

	if (!text || !*text)
		return -1;
	for (digit = text; *digit >= '0' && *digit <= '9' && v <= hi; digit++)
		v = v * 10 + (*digit - '0');
	if (*digit || (text[0] == '0' && text[1]) || v < lo || v > hi) {
		fprintf(stderr, "libroceguard_qp: ignoring %s=%s (expected %d..%d in decimal, "
				"no leading zero)\n", name, text, lo, hi);
		return -1;
	}
	return (int)v;
}

static void set_value(struct rg_qp_profile *p, const char *name, const char *value)
{
	if (!strcmp(name, RG_ENV_TC))
		p->tc = parse_decimal(name, value, RG_ENV_TC_MIN, RG_ENV_TC_MAX);
	else if (!strcmp(name, RG_ENV_TIMEOUT))
		p->timeout = parse_decimal(name, value, RG_ENV_TIMEOUT_MIN, RG_ENV_TIMEOUT_MAX);
	else if (!strcmp(name, RG_ENV_RETRY_CNT))
		p->retry_cnt = parse_decimal(name, value, RG_ENV_RETRY_CNT_MIN, RG_ENV_RETRY_CNT_MAX);
}

/*
 * KEY=VALUE lines as written by `roceguard nic env`; other keys ignored.
 * Whole lines, however long: a fixed buffer would cut a long comment and
 * read its tail as a line of its own.
 */
static void load_file(struct rg_qp_profile *p, const char *path)
{
	char *line = NULL;
	size_t capacity = 0;
	FILE *f = fopen(path, "re");

	if (!f) {
		fprintf(stderr, "libroceguard_qp: cannot open %s: %s\n", path, strerror(errno));
		return;
	}
	while (getline(&line, &capacity, f) >= 0) {
		char *eq;

		line[strcspn(line, "\r\n")] = '\0';
		eq = strchr(line, '=');
		if (line[0] == '#' || !eq)
			continue;
		*eq = '\0';
		set_value(p, line, eq + 1);
	}
	free(line);
	fclose(f);
}

/*
 * secure_getenv(): in a set-uid or file-capability program the caller's
 * environment must neither steer the privileged program's QPs nor make it
 * open a file of the caller's choosing; such a program gets no profile.
 */
static void load_profile(void)
{
	static const char *const names[] = { RG_ENV_TC, RG_ENV_TIMEOUT, RG_ENV_RETRY_CNT };
	const char *file = secure_getenv(RG_ENV_PROFILE);
	const char *debug = secure_getenv(RG_ENV_QP_DEBUG);

	if (file && *file)
		load_file(&profile, file);
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		const char *value = secure_getenv(names[i]);

		if (value)
			set_value(&profile, names[i], value);
	}
	profile.debug = debug && *debug == '1';
}

/* The default version is the one a program linked today binds to. */
static modify_qp_fn lookup_modify_qp(void *handle)
{
	void *fn = dlvsym(handle, "ibv_modify_qp", "IBVERBS_1.1");

	return (modify_qp_fn)(fn ? fn : dlsym(handle, "ibv_modify_qp"));
}

/*
 * RTLD_NEXT searches the scope the program started with, plus what was
 * dlopened RTLD_GLOBAL. A module dlopened RTLD_LOCAL (a Python extension, a
 * UCX transport, an MPI component) brings libibverbs in a scope of its own,
 * where only its soname finds it; the module's ibv_modify_qp reference still
 * binds here, since the global scope is searched first. libibverbs can
 * arrive at any time, so the lookup runs at each call until it succeeds. The
 * RTLD_NOLOAD reference is kept: it keeps libibverbs mapped, and so the
 * cached pointer valid, if that module is unloaded.
 */
static modify_qp_fn find_real_modify_qp(void)
{
	modify_qp_fn fn = __atomic_load_n(&real_modify_qp, __ATOMIC_ACQUIRE);
	void *verbs;

	if (fn)
		return fn;
	fn = lookup_modify_qp(RTLD_NEXT);
	if (!fn) {
		verbs = dlopen("libibverbs.so.1", RTLD_NOLOAD | RTLD_LAZY);
		if (verbs) {
			fn = lookup_modify_qp(verbs);
			if (!fn)
				dlclose(verbs);
		}
	}
	if (fn)
		__atomic_store_n(&real_modify_qp, fn, __ATOMIC_RELEASE);
	return fn;
}

RG_EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask)
{
	modify_qp_fn real = find_real_modify_qp();
	struct ibv_qp_attr copy;

	/* What libibverbs answers when the provider has no modify_qp
	 * (rdma-core's verbs_dummy_ops). */
	if (!real) {
		if (!__atomic_exchange_n(&reported_missing, 1, __ATOMIC_RELAXED))
			fprintf(stderr, "libroceguard_qp: no libibverbs.so.1 in this process "
					"defines ibv_modify_qp; failing with EOPNOTSUPP\n");
		errno = EOPNOTSUPP;
		return EOPNOTSUPP;
	}
	pthread_once(&profile_once, load_profile);
	if (!qp || !attr || qp->qp_type != IBV_QPT_RC || !(attr_mask & IBV_QP_STATE))
		return real(qp, attr, attr_mask);

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
	return real(qp, &copy, attr_mask);
}
