// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The lab's lossy WAN: TC ingress on each interface of the WAN router
 * namespace. It does to traffic what a public cloud or metro link does to
 * RoCE: DSCP rewritten to 0 (outer header only: a tunnel's inner packet is
 * payload to the WAN), a share of packets lost, optionally congestion marks.
 * Counters per {ingress ifindex, class} let tests compare what roceguard saw
 * with what the WAN did.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "csum.h"
#include "roceguard/roceguard.h"
#include "wan.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rg_wan_config);
} wan_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 64);
	__type(key, struct rg_wan_key);
	__type(value, struct rg_wan_stats);
} wan_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__type(key, __u32);
	__type(value, struct rg_wan_direction);
} wan_directions SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__type(key, __u32);
	__type(value, struct rg_wan_hold);
} wan_hold SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, RG_WAN_SEQ_STREAMS);
	__type(key, struct rg_wan_seq_key);
	__type(value, struct rg_wan_seq);
} wan_seq SEC(".maps");

#define WAN_ECN_MASK 0x03
#define WAN_ECN_CE 0x03

static __always_inline struct rg_wan_stats *wan_stats_get(__u32 ifindex, __u32 cls)
{
	struct rg_wan_key key = { .ifindex = ifindex, .cls = cls };
	struct rg_wan_stats zero = {}, *s;

	s = bpf_map_lookup_elem(&wan_stats, &key);
	if (s)
		return s;
	bpf_map_update_elem(&wan_stats, &key, &zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(&wan_stats, &key);
}

/* True with probability ppm / 10^6. */
static __always_inline int wan_chance(__u32 ppm)
{
	return ppm && bpf_get_prandom_u32() % RG_WAN_PPM < ppm;
}

static __always_inline struct rg_wan_direction *wan_direction(__u32 ifindex)
{
	struct rg_wan_direction zero = {}, *d;

	d = bpf_map_lookup_elem(&wan_directions, &ifindex);
	if (d)
		return d;
	bpf_map_update_elem(&wan_directions, &ifindex, &zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(&wan_directions, &ifindex);
}

/* Bucket of a loss run of n >= 1 packets: the smallest i with n <= 2^i. */
static __always_inline __u32 wan_run_bucket(__u32 n)
{
	__u32 i;

	for (i = 0; i < RG_WAN_RUN_BUCKETS - 1; i++)
		if (n <= (1u << i))
			return i;
	return RG_WAN_RUN_BUCKETS - 1;
}

/* Whether an eligible packet is lost; keeps the direction's run lengths. */
static __always_inline int wan_lose(const struct rg_wan_config *cfg, struct rg_wan_direction *d)
{
	int lost;

	if (cfg->burst_leave_ppm) {
		if (d && d->bad)
			d->bad = !wan_chance(cfg->burst_leave_ppm);
		else if (d)
			d->bad = wan_chance(cfg->burst_enter_ppm);
		lost = d && d->bad;
	} else {
		lost = wan_chance(cfg->loss_ppm);
	}
	if (!d)
		return lost;
	if (lost) {
		d->run++;
	} else if (d->run) {
		__sync_fetch_and_add(&d->runs[wan_run_bucket(d->run)], 1);
		d->run = 0;
	}
	return lost;
}

/*
 * A Geneve packet the WAN just passed or dropped: if it carries the
 * sequence option first, the number it carries joins its stream. A newer
 * number finishes the stream's previous one, which counts if no copy of it
 * passed; the user side adds each stream's newest number when none of its
 * copies passed either (Wan::seq_loss). udp_off: the outer UDP header.
 */
static __always_inline void wan_seq_track(struct __sk_buff *skb, const struct rg_wan_config *cfg, __u32 udp_off,
					  int dropped, struct rg_wan_stats *st)
{
	struct rg_wan_seq zero = {}, *s;
	struct rg_wan_seq_key key = {};
	struct rg_genevehdr gnv;
	struct rg_tunnel_opt opt;
	int all_dropped = 0, late = 0;
	__u32 seq;

	if (bpf_skb_load_bytes(skb, udp_off + sizeof(struct udphdr), &gnv, sizeof(gnv)))
		return;
	/* Version 0, and an option area long enough for the option. */
	if ((gnv.ver_optlen >> 6) || (gnv.ver_optlen & 0x3f) * 4 < sizeof(opt))
		return;
	if (bpf_skb_load_bytes(skb, udp_off + sizeof(struct udphdr) + sizeof(gnv), &opt, sizeof(opt)))
		return;
	if (opt.opt_class != bpf_htons(cfg->seq_opt_class) || opt.type != cfg->seq_opt_type ||
	    ((opt.length & 0x1f) != RG_TUNNEL_OPT_WORDS && (opt.length & 0x1f) != RG_TUNNEL_OPT_EXT_WORDS))
		return;
	key.ifindex = skb->ifindex;
	/* The flags differ between numbers of one stream (a copied one says so). */
	key.stream = bpf_ntohl(opt.stream) & ~RG_TUNNEL_F_MASK;
	seq = bpf_ntohl(opt.seq);
	s = bpf_map_lookup_elem(&wan_seq, &key);
	if (!s) {
		bpf_map_update_elem(&wan_seq, &key, &zero, BPF_NOEXIST);
		s = bpf_map_lookup_elem(&wan_seq, &key);
	}
	if (!s) {
		if (st)
			st->seq_untracked++;
		return;
	}
	bpf_spin_lock(&s->lock);
	if (!s->started || (__s32)(seq - s->seq) > 0) {
		if (s->started && !s->passed) {
			all_dropped = 1;
			s->unseen++;
		}
		s->started = 1;
		s->seq = seq;
		s->passed = 0;
	} else if (seq != s->seq) {
		late = 1;
	}
	if (!late && !dropped) {
		/* The receiver will see this number, and so the holes before it. */
		s->passed = 1;
		s->unseen = 0;
	}
	bpf_spin_unlock(&s->lock);
	if (st) {
		st->seq_all_dropped += all_dropped;
		st->seq_late += late;
	}
}

static __always_inline __u32 wan_class(__be16 dport)
{
	return rg_wan_udp_class(bpf_ntohs(dport));
}

/* The kernel forwards what survived, or the delay line does: every UDP
 * packet when RG_WAN_F_HOLD is set and its direction has a hold device,
 * and TCP (l4proto) with RG_WAN_F_HOLD_TCP. ICMP, ARP and neighbour
 * discovery always cross at once, and TCP without the flag. */
static __always_inline int wan_forward(struct __sk_buff *skb, const struct rg_wan_config *cfg, __u32 cls,
				       __u8 l4proto)
{
	__u32 ifindex = skb->ifindex;
	struct rg_wan_hold *hold;

	if (!(cfg->flags & RG_WAN_F_HOLD))
		return TC_ACT_OK;
	if (cls == RG_WAN_NOT_UDP && !((cfg->flags & RG_WAN_F_HOLD_TCP) && l4proto == IPPROTO_TCP))
		return TC_ACT_OK;
	hold = bpf_map_lookup_elem(&wan_hold, &ifindex);
	if (!hold)
		return TC_ACT_OK;
	return bpf_redirect(hold->ifindex, 0);
}

SEC("tc")
int wan_ingress(struct __sk_buff *skb)
{
	const __u32 zero_idx = 0;
	const struct rg_wan_config *cfg;
	struct rg_wan_stats *st;
	void *data, *data_end;
	struct ethhdr *eth;
	__u8 *tos_byte = NULL;
	__be16 *ip_word = NULL; /* IPv4: version/IHL + TOS, covered by the checksum */
	__sum16 *ip_check = NULL;
	__u8 tos = 0, l4proto = 0;
	void *l4 = NULL;
	__u32 cls = RG_WAN_NOT_UDP, udp_off = 0;

	cfg = bpf_map_lookup_elem(&wan_config, &zero_idx);
	if (!cfg)
		return TC_ACT_OK;

	bpf_skb_pull_data(skb, sizeof(struct ethhdr) + sizeof(struct ipv6hdr) + sizeof(struct udphdr));
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	eth = data;
	if ((void *)(eth + 1) > data_end)
		goto account;

	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);

		if ((void *)(ip + 1) > data_end || ip->ihl < 5)
			goto account;
		tos_byte = &ip->tos;
		ip_word = (__be16 *)ip;
		ip_check = &ip->check;
		tos = ip->tos;
		l4proto = ip->protocol;
		/* Later fragments carry no UDP header. */
		if (!(ip->frag_off & bpf_htons(0x1fff)))
			l4 = (void *)ip + ip->ihl * 4;
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);

		if ((void *)(ip6 + 1) > data_end)
			goto account;
		tos_byte = (__u8 *)ip6;
		tos = (ip6->priority << 4) | (ip6->flow_lbl[0] >> 4);
		l4proto = ip6->nexthdr;
		l4 = ip6 + 1;
	}

	if (l4 && l4proto == IPPROTO_UDP) {
		struct udphdr *udp = l4;

		if ((void *)(udp + 1) <= data_end) {
			cls = wan_class(udp->dest);
			udp_off = (__u32)((long)udp - (long)data);
		}
	}

account:
	st = wan_stats_get(skb->ifindex, cls);
	if (st) {
		st->packets++;
		st->bytes += skb->len;
	}
	if (cls != RG_WAN_NOT_UDP &&
	    (!(cfg->flags & RG_WAN_F_ROCE_ONLY) || cls == RG_WAN_ROCE || cls == RG_WAN_GENEVE ||
	     cls == RG_WAN_VXLAN)) {
		int lost = wan_lose(cfg, wan_direction(skb->ifindex));

		if (cls == RG_WAN_GENEVE && cfg->seq_opt_class)
			wan_seq_track(skb, cfg, udp_off, lost, st);
		if (lost) {
			if (st)
				st->dropped++;
			return TC_ACT_SHOT;
		}
		if ((tos & WAN_ECN_MASK) && (tos & WAN_ECN_MASK) != WAN_ECN_CE &&
		    wan_chance(cfg->ce_ppm)) {
			tos |= WAN_ECN_CE;
			if (st)
				st->ce_marked++;
		}
	}
	if ((cfg->flags & RG_WAN_F_BLEACH) && (tos >> 2)) {
		tos &= WAN_ECN_MASK;
		if (st)
			st->bleached++;
	}
	if (!tos_byte)
		return wan_forward(skb, cfg, cls, l4proto);

	/* Pointers are still valid: nothing above changed the packet. */
	if (ip_word) {
		struct iphdr *ip = (void *)ip_word;
		__be16 old, new;

		if ((void *)(ip + 1) <= data_end && ip->tos != tos) {
			old = *ip_word;
			ip->tos = tos;
			new = *ip_word;
			rg_csum_replace2(ip_check, old, new);
		}
	} else {
		__u8 *b = tos_byte;

		if ((void *)(b + 2) <= data_end) {
			/* IPv6 traffic class: low nibble of byte 0, high nibble of byte 1. */
			b[0] = (b[0] & 0xf0) | (tos >> 4);
			b[1] = (b[1] & 0x0f) | (tos << 4);
		}
	}
	return wan_forward(skb, cfg, cls, l4proto);
}
