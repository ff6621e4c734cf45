// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The skb's headroom through gateway A (bench_veth_throughput --headroom).
 * Encapsulation at TC egress needs room before the frame: when the head
 * has less than bpf_skb_adjust_room asks for (or is shared), the kernel
 * reallocates it, a copy a NIC's receive buffer, with its 64 bytes and
 * more of headroom, seldom needs. Two tracepoints, each filtered on one of
 * the gateway's devices (its ifindex and the namespace's inode), count
 * skbs by headroom in 16-byte steps:
 *
 *   on_receive  netif_receive_skb on lan0: as each skb arrives from host
 *               A (data at the network header);
 *   on_queue    net_dev_queue on wan0: as each skb is queued to the
 *               device, after TC egress (data at the outer frame's start).
 *
 * A program that does not move the frame's start (DSCP and accounting)
 * leaves the second what it was before TC egress; an encapsulating one
 * takes its room from it, or gets a new head. Tracing only, no decision:
 * the benchmark reads the counts before and after each run. Tracepoints
 * with BTF arguments (kprobes and fentry are not there on every kernel
 * that has BTF); kernel structures are read with CO-RE, relocated against
 * the running kernel's BTF, so no vmlinux.h.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define HEADROOM_STEP 16
#define HEADROOM_BUCKETS 33 /* 0-15, 16-31, ..., 496-511, and 512 or more */

struct ns_common {
	unsigned int inum;
} __attribute__((preserve_access_index));

struct net {
	struct ns_common ns;
} __attribute__((preserve_access_index));

typedef struct {
	struct net *net;
} __attribute__((preserve_access_index)) possible_net_t;

struct net_device {
	int ifindex;
	possible_net_t nd_net;
} __attribute__((preserve_access_index));

struct sk_buff {
	struct net_device *dev;
	unsigned char *head;
	unsigned char *data;
} __attribute__((preserve_access_index));

#define HEADROOM_AT_RECEIVE 0
#define HEADROOM_AT_QUEUE 1

const volatile __u32 target_netns; /* the namespace's inode number */
const volatile __u32 receive_ifindex, queue_ifindex;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * HEADROOM_BUCKETS); /* HEADROOM_AT_* * HEADROOM_BUCKETS + bucket */
	__type(key, __u32);
	__type(value, __u64);
} headroom_hist SEC(".maps");

static __always_inline void count_on(struct sk_buff *skb, __u32 ifindex, __u32 where)
{
	struct net_device *dev = BPF_CORE_READ(skb, dev);
	unsigned long room;
	__u32 key;
	__u64 *n;

	if (!dev || BPF_CORE_READ(dev, ifindex) != (int)ifindex ||
	    BPF_CORE_READ(dev, nd_net.net, ns.inum) != target_netns)
		return;
	room = (unsigned long)BPF_CORE_READ(skb, data) - (unsigned long)BPF_CORE_READ(skb, head);
	room /= HEADROOM_STEP;
	key = where * HEADROOM_BUCKETS + (room < HEADROOM_BUCKETS - 1 ? room : HEADROOM_BUCKETS - 1);
	n = bpf_map_lookup_elem(&headroom_hist, &key);
	if (n)
		__sync_fetch_and_add(n, 1);
}

SEC("tp_btf/netif_receive_skb")
int BPF_PROG(on_receive, struct sk_buff *skb)
{
	count_on(skb, receive_ifindex, HEADROOM_AT_RECEIVE);
	return 0;
}

SEC("tp_btf/net_dev_queue")
int BPF_PROG(on_queue, struct sk_buff *skb)
{
	count_on(skb, queue_ifindex, HEADROOM_AT_QUEUE);
	return 0;
}
