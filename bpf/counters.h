/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
#ifndef RG_BPF_COUNTERS_H
#define RG_BPF_COUNTERS_H

#include "maps.h"

/* This CPU's counters for {ifindex, direction}, created on first use. */
static __always_inline struct rg_counters *rg_counters_get(__u32 ifindex, __u32 dir)
{
	struct rg_counter_key key = { .ifindex = ifindex, .direction = dir };
	struct rg_counters *c;
	__u32 zero_idx = 0;
	void *zero;

	c = bpf_map_lookup_elem(&rg_counters, &key);
	if (c)
		return c;
	zero = bpf_map_lookup_elem(&rg_zero, &zero_idx);
	if (!zero)
		return NULL;
	bpf_map_update_elem(&rg_counters, &key, zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(&rg_counters, &key);
}

static __always_inline void rg_count_n(struct rg_counters *c, __u32 ev, __u64 packets,
				       __u64 bytes)
{
	if (!c || ev >= RG_EV_MAX)
		return;
	c->ev[ev].packets += packets;
	c->ev[ev].bytes += bytes;
}

static __always_inline void rg_count(struct rg_counters *c, __u32 ev, __u64 bytes)
{
	rg_count_n(c, ev, 1, bytes);
}

#endif
