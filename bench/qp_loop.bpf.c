// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The per-QP table's lookups in a loop inside one program run
 * (bench_qp_scale --loop): a test run's own cost (context, skb or frame,
 * timer) is paid once for QP_LOOP_KEYS lookups instead of once per lookup,
 * so what is left is the table. rg_qp4 is the loaded roceguard object's
 * table, filled from userspace (the benchmark reuses its fd); qp_keys the
 * keys to look up, in the order drawn. Each found entry has its packet
 * count raised atomically, as the accounting does, so the element's line
 * is written as on the data path. qp_keys_only walks the same keys without
 * the table: the floor subtracted.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "qp_loop.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1); /* the reused table's own size applies */
	__type(key, struct rg_qp4_key);
	__type(value, struct rg_qp_dir);
} rg_qp4 SEC(".maps");


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
	struct rg_qp_dir *d = bpf_map_lookup_elem(&rg_qp4, key);

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
