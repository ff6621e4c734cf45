/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Maps of the roceguard object. Every map names its key and value types so
 * `bpftool map dump` prints named fields. The loader pins them (and reuses
 * compatible pinned ones) under its pin path; plain `bpftool prog loadall`
 * gets private, unpinned maps.
 */
#ifndef RG_BPF_MAPS_H
#define RG_BPF_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "roceguard/roceguard.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, RG_MAX_COUNTER_KEYS);
	__type(key, struct rg_counter_key);
	__type(value, struct rg_counters);
} rg_counters SEC(".maps");

/* All-zero rg_counters used to create a counter entry from the packet path. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rg_counters);
} rg_zero SEC(".maps");

/* Per-QP state; max_entries is set by the loader at load time. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, RG_DEFAULT_QP_ENTRIES);
	__type(key, struct rg_qp_key);
	__type(value, struct rg_qp_state);
} rg_qp SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RG_MAX_PEERS);
	__type(key, __u32);
	__type(value, struct rg_peer);
} rg_peers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, RG_MAX_ROUTES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct rg_route4_key);
	__type(value, __u32); /* index into rg_peers */
} rg_route4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, RG_MAX_ROUTES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct rg_route6_key);
	__type(value, __u32);
} rg_route6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, RG_MAX_PEERS);
	__type(key, struct rg_decap_key);
	__type(value, __u32); /* index into rg_peers */
} rg_decap SEC(".maps");

/* The attached interfaces' own addresses; the loader writes one before attaching to it. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, RG_MAX_IFACES);
	__type(key, __u32); /* ifindex */
	__type(value, struct rg_iface);
} rg_ifaces SEC(".maps");

/* Defaults compiled in; the loader overrides them before load. */
const volatile struct rg_config rg_cfg = {
	.dscp = RG_DEFAULT_DSCP,
	.cnp_dscp = RG_DEFAULT_CNP_DSCP,
	.mtu_policy = RG_MTU_PASS,
	.outer_ttl = RG_DEFAULT_OUTER_TTL,
	.flags = RG_CFG_F_DEFAULT,
	.psn_jump_max = RG_DEFAULT_PSN_JUMP_MAX,
	.qp_idle_ms = RG_DEFAULT_QP_IDLE_MS,
};

#endif
