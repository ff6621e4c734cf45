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

/*
 * Per-QP state, one slot per QP and direction (roceguard.h: the slot
 * tables), IPv4 and IPv6 apart so an IPv4 slot is one cache line. Their
 * sizes are set by the loader at load time (rg_qp_slots() of the entries
 * wanted), and so are their bucket counts below. BPF_F_MMAPABLE starts the
 * slots on a page, so every slot begins a cache line, and lets userspace
 * read a table without copying it.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, RG_QP_BUCKET_SLOTS);
	__type(key, __u32);
	__type(value, struct rg_qp4_slot);
} rg_qp4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, RG_QP_BUCKET_SLOTS);
	__type(key, __u32);
	__type(value, struct rg_qp6_slot);
} rg_qp6 SEC(".maps");

/* Buckets of rg_qp4 and rg_qp6: max_entries / RG_QP_BUCKET_SLOTS. */
const volatile __u32 rg_qp4_buckets = 1;
const volatile __u32 rg_qp6_buckets = 1;

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

/*
 * The next hop towards each peer slot, per CPU, and each slot's lease on it
 * (see struct rg_nexthop). Not pinned: a cache, and a lease belongs to the
 * process that loaded this object and renews it.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RG_MAX_PEERS);
	__type(key, __u32);
	__type(value, struct rg_nexthop);
} rg_nexthops SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RG_MAX_PEERS);
	__type(key, __u32);
	__type(value, struct rg_nexthop_lease);
} rg_nh_leases SEC(".maps");

/*
 * The devices the XDP fast path may redirect to (forward.h): the attached
 * ones, written by the loader that attached this object's programs. Not
 * pinned: it names the devices of one object's attachments.
 */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, RG_MAX_IFACES);
	__type(key, __u32);   /* ifindex */
	__type(value, __u32); /* the same ifindex */
} rg_xdp_tx SEC(".maps");

/* The attached interfaces' own addresses; the loader writes one before attaching to it. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, RG_MAX_IFACES);
	__type(key, __u32); /* ifindex */
	__type(value, struct rg_iface);
} rg_ifaces SEC(".maps");

/*
 * Per peer slot: this CPU's counters and its sequence stream towards the
 * peer. Per-CPU, so numbering a packet is a plain increment.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RG_MAX_PEERS);
	__type(key, __u32);
	__type(value, struct rg_peer_stats);
} rg_peer_stats SEC(".maps");

/*
 * Per peer slot: what `roceguard run` decides (the feedback to send, the
 * shield "auto" turned on) and what the peer's option said, per CPU (see
 * struct rg_peer_ctl, struct rg_peer_rx). Not pinned: they belong to the
 * process that loaded this object, as its next-hop leases do.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RG_MAX_PEERS);
	__type(key, __u32);
	__type(value, struct rg_peer_ctl);
} rg_peer_ctl SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RG_MAX_PEERS);
	__type(key, __u32);
	__type(value, struct rg_peer_rx);
} rg_peer_rx SEC(".maps");

/*
 * Per peer slot: the congestion loop's decision (struct rg_peer_cc), not
 * pinned as rg_peer_ctl; and its phantom queue with what it marked
 * (struct rg_peer_pq), pinned with the other counters.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RG_MAX_PEERS);
	__type(key, __u32);
	__type(value, struct rg_peer_cc);
} rg_peer_cc SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RG_MAX_PEERS);
	__type(key, __u32);
	__type(value, struct rg_peer_pq);
} rg_peer_pq SEC(".maps");

/*
 * Per peer slot and QP (slot << 32 | destination QP), when the congestion
 * loop last sent the QP a CNP (rg_congestion_cnp); LRU: a QP that stopped
 * is forgotten. Not pinned.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, __u64);
} rg_cnp_at SEC(".maps");

/*
 * Streams arriving from the peers. One stream's packets reach this gateway
 * on any CPU (RSS spreads them by inner flow), hence the lock; a spin-locked
 * value cannot live in an LRU map, so the data path never evicts: a full
 * table leaves new streams untracked (RG_PEER_EV_SEQ_UNTRACKED,
 * rg_peer_untracked), and `roceguard run` evicts the idle ones
 * (rg_tunnel_retired).
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, RG_MAX_TUNNEL_STREAMS);
	__type(key, struct rg_tunnel_stream_key);
	__type(value, struct rg_tunnel_stream);
} rg_tunnel_streams SEC(".maps");

/* Per peer slot: see struct rg_peer_guard, struct rg_tunnel_retired. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RG_MAX_PEERS);
	__type(key, __u32);
	__type(value, struct rg_peer_guard);
} rg_peer_guard SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RG_MAX_PEERS);
	__type(key, __u32);
	__type(value, struct rg_tunnel_retired);
} rg_tunnel_retired SEC(".maps");

/*
 * Per peer slot: bpf_ktime_get_ns() of the last arrival from the peer whose
 * stream could not be tracked; 0 = none. Shared by all CPUs, as the egress
 * that reads it runs on any of them (rg_tunnel_eliminates). Not pinned: a
 * new process starts by saying it eliminates, until an arrival says again
 * that it cannot.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RG_MAX_PEERS);
	__type(key, __u32);
	__type(value, __u64);
} rg_peer_untracked SEC(".maps");

/* Per peer slot: the tunnel's keys (struct rg_peer_auth). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RG_MAX_PEERS);
	__type(key, __u32);
	__type(value, struct rg_peer_auth);
} rg_peer_auth SEC(".maps");

/*
 * All-zero rg_tunnel_stream used to create a stream from the packet path.
 * Plain bytes: the verifier refuses bpf_map_update_elem() a source value
 * that holds a bpf_spin_lock; the new entry's lock starts at zero anyway.
 */
struct rg_tunnel_stream_blank {
	__u8 bytes[sizeof(struct rg_tunnel_stream)];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rg_tunnel_stream_blank);
} rg_tunnel_stream_zero SEC(".maps");

/* Defaults compiled in; the loader overrides them before load. */
const volatile struct rg_config rg_cfg = {
	.dscp = RG_DEFAULT_DSCP,
	.cnp_dscp = RG_DEFAULT_CNP_DSCP,
	.mtu_policy = RG_MTU_PASS,
	.outer_ttl = RG_DEFAULT_OUTER_TTL,
	.flags = RG_CFG_F_DEFAULT,
	.psn_jump_max = RG_DEFAULT_PSN_JUMP_MAX,
	.qp_idle_ms = RG_DEFAULT_QP_IDLE_MS,
	.tunnel_opt_class = RG_TUNNEL_OPT_CLASS_DEFAULT,
	.tunnel_opt_type = RG_TUNNEL_OPT_TYPE_DEFAULT,
};

#endif
