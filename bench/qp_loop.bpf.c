// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The reference per-QP table's lookups in a loop inside one program run
 * (bench_qp_scale --loop-rounds): a test run's own cost (context, skb or
 * frame, timer) is paid once for QP_LOOP_KEYS lookups instead of once per
 * lookup, so what is left is the table. The reference is the layout the
 * data path had before its slot tables: an LRU hash keyed by rg_qp4_key
 * with the 64-byte value (qp_loop.h), qp_lru4, sized and filled from
 * userspace by the benchmark; qp_lru6, its IPv6 twin, is never looked up:
 * it is there for its memory (an LRU hash preallocates every element).
 * qp_keys holds the keys to look up, in the order drawn. Each found entry
 * has its packet count raised atomically, as the accounting did, so the
 * element's line is written as on the data path. qp_keys_only walks the
 * same keys without the table: the floor subtracted from both tables'
 * runs (qp_datapath.bpf.c is the other table's).
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "qp_loop.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1); /* set before load: the size measured */
	__type(key, struct rg_qp4_key);
	__type(value, struct qp_dir_v64);
} qp_lru4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1); /* set before load: the size measured */
	__type(key, struct rg_qp6_key);
	__type(value, struct qp_dir_v64);
} qp_lru6 SEC(".maps");

struct walk {
	__u64 found;
	int table;
};

static long step(__u32 i, void *arg)
{
	struct walk *w = arg;
	__u32 k = i & (QP_LOOP_KEYS - 1);
	struct rg_qp4_key *key = bpf_map_lookup_elem(&qp_keys, &k);

	if (!key)
		return 1;
	if (!w->table) {
		w->found += key->dest_qp & 1;
		return 0;
	}
	struct qp_dir_v64 *d = bpf_map_lookup_elem(&qp_lru4, key);

	if (d) {
		__sync_fetch_and_add(&d->packets, 1);
		w->found++;
	}
	return 0;
}

static int walk(int table)
{
	struct walk w = { .found = 0, .table = table };
	__u32 zero = 0;
	__u64 *found;

	bpf_loop(QP_LOOP_KEYS, step, &w, 0);
	found = bpf_map_lookup_elem(&qp_found, &zero);
	if (found)
		*found = w.found;
	return XDP_PASS;
}

SEC("xdp")
int qp_lookups(struct xdp_md *ctx)
{
	return walk(1);
}

SEC("xdp")
int qp_keys_only(struct xdp_md *ctx)
{
	return walk(0);
}
