/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The one header shared by the BPF programs and the C++ loader: map keys and
 * values, counter enums and the load-time configuration. Anything that
 * crosses the user/kernel boundary is defined here and nowhere else.
 */
#ifndef ROCEGUARD_ROCEGUARD_H
#define ROCEGUARD_ROCEGUARD_H

#include <linux/bpf.h> /* struct bpf_spin_lock */
#include <linux/types.h>

#define RG_ROCE_UDP_PORT 4791
#define RG_GENEVE_UDP_PORT 6081
#define RG_GENEVE_PROTO_TEB 0x6558 /* inner Ethernet frame (RFC 8926 §3.4) */

#define RG_DEFAULT_DSCP 46
#define RG_DEFAULT_CNP_DSCP 48
#define RG_DEFAULT_OUTER_TTL 64
#define RG_DEFAULT_TUNNEL_MTU 1500
#define RG_DEFAULT_QP_ENTRIES 65536
/*
 * PSN tracking of a QP restarts (and counts a resync instead of a gap or a
 * retransmission) when the QP was silent this long: rxe and rdma_cm reuse QP
 * numbers within seconds, and a new QP starts at a random PSN.
 */
#define RG_DEFAULT_QP_IDLE_MS 5000
/*
 * ... or when its PSN moves further than this, either way. A hook sees a
 * forward jump of k when k-1 packets in flight were lost at once, and a
 * go-back-N retransmission goes back at most what was in flight; 2^20 packets
 * is over a second of 100 Gb/s at a 4096-byte MTU, more than any RoCE window
 * (the bandwidth-delay product) holds. A re-created QP's random start PSN
 * lands beyond it 15 times in 16.
 */
#define RG_DEFAULT_PSN_JUMP_MAX (1u << 20)
#define RG_MAX_PEERS 256
#define RG_MAX_ROUTES 4096
#define RG_MAX_COUNTER_KEYS 512 /* {ifindex, direction} pairs */
/*
 * Tunnel sequence streams a receiving gateway tracks: one per peer, sending
 * CPU of that peer and lane (rg_tunnel_stream_key), so 64 peers of 16 CPUs
 * each using all 16 lanes.
 */
#define RG_MAX_TUNNEL_STREAMS 16384

/* Geneve outer UDP source port range for ECMP entropy (RFC 8926 §3.3). */
#define RG_ENTROPY_PORT_MIN 49152
#define RG_ENTROPY_PORT_MASK 0x3fff

#define RG_PSN_MASK 0xffffffu /* 24-bit PSN */
#define RG_PSN_HALF 0x800000u /* serial-number arithmetic window */

/*
 * BTH opcode: transport in the top 3 bits, operation in the low 5
 * (IBA 9.2; the CNP opcode is from the RoCE v2 annex, A17).
 */
#define RG_BTH_TRANSPORT_RC 0x00
#define RG_BTH_TRANSPORT_UC 0x20
#define RG_BTH_TRANSPORT_RD 0x40
#define RG_BTH_TRANSPORT_UD 0x60
#define RG_BTH_TRANSPORT_CNP 0x80
#define RG_BTH_TRANSPORT_XRC 0xa0
#define RG_BTH_TRANSPORT_MASK 0xe0
#define RG_BTH_OPCODE_READ_REQUEST 0x0c
#define RG_BTH_OPCODE_ACK 0x11
#define RG_BTH_OPCODE_ATOMIC_ACK 0x12
#define RG_BTH_OPCODE_CNP 0x81
#define RG_BTH_TVER_MASK 0x0f /* low nibble of BTH byte 1; version 0 only */
#define RG_ICRC_LEN 4

#define RG_AETH_SYNDROME_KIND_MASK 0xe0
#define RG_AETH_KIND_ACK 0x00
#define RG_AETH_KIND_RNR_NAK 0x20
#define RG_AETH_KIND_NAK 0x60
#define RG_AETH_NAK_PSN_SEQ_ERR 0x60

enum rg_direction {
	RG_DIR_EGRESS = 0,
	RG_DIR_INGRESS = 1,
	RG_DIR_MAX,
};

/*
 * Counter events. Userspace names them with rg_event_names (loader/dataplane/names.cpp);
 * a unit test checks that table against RG_EV_MAX. Append only: the index is
 * the position in the pinned per-CPU value, so reordering would shift
 * counters carried over from an earlier loader.
 */
enum rg_event {
	RG_EV_ROCE_PACKETS = 0,    /* RoCE v2 packets seen (after decap on ingress) */
	RG_EV_DSCP_REWRITTEN,      /* egress: DSCP changed to the configured class */
	RG_EV_DSCP_REPAIRED,       /* ingress: bleached DSCP restored */
	RG_EV_ENCAPSULATED,        /* egress: Geneve encapsulated */
	RG_EV_DECAPSULATED,        /* ingress: Geneve stripped */
	RG_EV_OVERSIZE_PASSED,     /* egress: over tunnel MTU, sent unencapsulated */
	RG_EV_OVERSIZE_DROPPED,    /* egress: over tunnel MTU, dropped by policy */
	RG_EV_RETRANSMITS,         /* PSN at or below the highest seen on the QP */
	RG_EV_PSN_GAPS,            /* forward PSN jumps (events) */
	RG_EV_LOST_ESTIMATE,       /* packets missing in those jumps */
	RG_EV_NAK_SEQ_ERR,         /* AETH NAK, PSN sequence error */
	RG_EV_NAK_OTHER,           /* AETH NAK, any other code */
	RG_EV_RNR_NAK,             /* AETH RNR NAK */
	RG_EV_CNP,                 /* congestion notification packets */
	RG_EV_ECN_CE,              /* RoCE packets carrying ECN CE */
	RG_EV_ECN_DROP,            /* RFC 6040: outer CE over inner Not-ECT, dropped */
	RG_EV_UNKNOWN_TUNNEL,      /* Geneve from an unknown peer or VNI, untouched */
	RG_EV_ENCAP_ERROR,         /* encapsulation refused by the kernel, passed */
	RG_EV_FIB_MISS,            /* no route/neighbour to the tunnel peer, passed */
	RG_EV_PARSE_TRUNC_L2,      /* Ethernet or VLAN header cut short */
	RG_EV_PARSE_VLAN_DEPTH,    /* more than two VLAN tags */
	RG_EV_PARSE_TRUNC_L3,      /* IP header cut short or malformed */
	RG_EV_PARSE_FRAGMENT,      /* UDP in an IP fragment: cannot be classified */
	RG_EV_PARSE_IPV6_EXT,      /* IPv6 extension header: not walked, passed */
	RG_EV_PARSE_TRUNC_L4,      /* UDP header cut short */
	RG_EV_PARSE_TRUNC_BTH,     /* UDP 4791 without room for a BTH (or AETH) */
	RG_EV_PARSE_GENEVE,        /* Geneve header malformed, untouched */
	RG_EV_QP_NEW,              /* QP entries created (evictions among them: RG_EV_QP_EVICTED) */
	RG_EV_PARSE_BAD_BTH,       /* UDP 4791 that is no RoCE v2: BTH version, opcode, no ICRC room */
	RG_EV_GENEVE_BAD_CSUM,     /* Geneve with a wrong outer IPv4 header checksum, untouched */
	RG_EV_GENEVE_NOT_LOCAL,    /* Geneve of a known tunnel to another outer destination, untouched */
	RG_EV_GENEVE_CONTROL,      /* Geneve control packet (O bit): payload not forwarded, untouched */
	RG_EV_GENEVE_CRITICAL,     /* Geneve with critical options (C bit) on our tunnel: dropped */
	RG_EV_PSN_RESYNC,          /* PSN tracking restarted: QP idle, or a jump no window allows */
	RG_EV_XDP_FORWARDED,       /* egress: forwarded out of this device from an XDP hook (fast path) */
	RG_EV_QP_EVICTED,          /* QP entries that took the slot of a QP silent past the idle time */
	RG_EV_QP_UNTRACKED,        /* RoCE packets of a QP the table had no slot for (all candidates active) */
	RG_EV_MAX,
};

/* Per-CPU counter value; summed over CPUs when read. */
struct rg_counter {
	__u64 packets;
	__u64 bytes;
};

struct rg_counter_key {
	__u32 ifindex;
	__u32 direction; /* enum rg_direction */
};

/*
 * Every event of one {ifindex, direction} in one value, so the packet path
 * does a single map lookup however many events it records.
 */
struct rg_counters {
	struct rg_counter ev[RG_EV_MAX];
};

/*
 * A QP's flow as the programs derive it from a packet, either family:
 * addresses in 16 bytes, IPv4 in the first 4 and the rest zero. It seeds the
 * Geneve entropy hash, and userspace shows QPs by it; the per-QP tables are
 * keyed by the compact per-family forms below.
 */
struct rg_qp_key {
	__u8 src[16];
	__u8 dst[16];
	__u32 dest_qp;
	__u32 family; /* AF_INET or AF_INET6 */
};

/*
 * Keys of the per-QP tables: one entry per QP and direction, so an entry
 * holds only the direction a hook saw (a gateway sees most keys in one
 * direction), and IPv4 QPs take a 16-byte key (rg_qp4) where IPv6 ones take
 * 40 (rg_qp6).
 */
struct rg_qp4_key {
	__u8 src[4];
	__u8 dst[4];
	__u32 dest_qp;
	__u32 direction; /* enum rg_direction */
};

struct rg_qp6_key {
	__u8 src[16];
	__u8 dst[16];
	__u32 dest_qp;
	__u32 direction;
};

/*
 * What one direction of a QP looked like at this hook: the part of a slot
 * of the per-QP tables (below) that the accounting updates, the same for
 * both families. The fields every packet touches come first. The rarer
 * counts are 32 bits (userspace reads every count as 64); gaps and the
 * three NAK kinds, which count loss events and NAKs rather than packets,
 * are 16 bits in one 64-bit word, each raised by compare-and-swap and
 * wrapping at 2^16 on its own. A wrap of a count reads in Prometheus as a
 * counter reset, which rate() and increase() take in their stride (a
 * 32-bit count of ECN CE marks at millions a second wraps in an hour or
 * so; 65 536 NAKs of one QP between two scrapes are a QP that is broken).
 */
struct rg_qp_dir {
	__u64 packets;
	__u64 bytes;
	__u32 max_psn : 24;    /* highest PSN seen, serial arithmetic */
	__u32 resend_next : 8; /* with RG_QP_F_RESENDING: low byte of the PSN after the last one resent */
	__u32 flags;           /* RG_QP_F_* */
	__u32 retransmits; /* egress: resent; ingress: duplicate/retransmission received */
	__u32 lost;
	__u32 cnp;
	__u32 ecn_ce;
	__u16 gaps;        /* the four in one word: RG_QP_RARE_* */
	__u16 nak_seq_err;
	__u16 nak_other;
	__u16 rnr_nak;
};

/* Bit offsets of the 16-bit counts in their 64-bit word (little endian). */
#define RG_QP_RARE_GAPS 0
#define RG_QP_RARE_NAK_SEQ_ERR 16
#define RG_QP_RARE_NAK_OTHER 32
#define RG_QP_RARE_RNR_NAK 48

/*
 * The per-QP tables, rg_qp4 and rg_qp6, are arrays of slots: one slot per
 * QP direction, 64 bytes for IPv4 (a cache line) and 128 for IPv6. Slots
 * are grouped in buckets of RG_QP_BUCKET_SLOTS (512 bytes of IPv4). A QP
 * direction has two candidate buckets and a home slot in each, all from
 * one 64-bit hash of its key (rg_qp_hash: each half chooses a bucket by a
 * multiply and a home by its low bits). Its probe sequence goes from the
 * two homes onwards in step, wrapping within each bucket: home 0, home 1,
 * home 0 + 1, home 1 + 1, ... An insert takes a home slot when it can,
 * else a free slot of the emptier bucket (bpf/qp_table.h has the rule); a
 * slot never becomes empty again, so a lookup follows the sequence and
 * leaves a bucket at its first empty slot. Most QPs are found in a home
 * slot: one cache line, or two read side by side.
 *
 * A slot's state (RG_QP_SLOT_*) is in its id word, beside the QP number
 * and the direction, so that claiming a slot is one compare-and-swap; the
 * data path claims, publishes and checks for a twin as bpf/qp_table.h
 * describes. The table is sized at load to RG_QP_SLOTS_PER_ENTRY_NUM /
 * _DEN slots per QP direction it is meant to hold (rg_qp_slots()).
 */
#define RG_QP_BUCKET_SLOTS 8
#define RG_QP_SLOTS_PER_ENTRY_NUM 3
#define RG_QP_SLOTS_PER_ENTRY_DEN 2

enum rg_qp_slot_state {
	RG_QP_SLOT_EMPTY = 0,   /* never used: ends a bucket's lookup */
	RG_QP_SLOT_CLAIMED = 1, /* taken by an insert, the key being written */
	RG_QP_SLOT_KEYED = 2,   /* key written, the insert checking for a twin */
	RG_QP_SLOT_READY = 3,   /* holds the QP direction of its key */
	RG_QP_SLOT_ABANDONED = 4, /* an insert that found a twin left it: free again */
};

#define RG_QP_ID_QP_MASK 0xffffffu
#define RG_QP_ID_DIR_SHIFT 24
#define RG_QP_ID_STATE_SHIFT 28

static inline __u32 rg_qp_id(__u32 dest_qp, __u32 direction, __u32 state)
{
	return (dest_qp & RG_QP_ID_QP_MASK) | (direction & 1) << RG_QP_ID_DIR_SHIFT |
	       state << RG_QP_ID_STATE_SHIFT;
}

static inline __u32 rg_qp_id_state(__u32 id)
{
	return id >> RG_QP_ID_STATE_SHIFT;
}

/*
 * The slot's clock: bpf_ktime_get_coarse_ns() >> RG_QP_CLOCK_SHIFT, about
 * a millisecond, 32 bits, wrapping after 52 days (compared as a signed
 * difference).
 */
#define RG_QP_CLOCK_SHIFT 20

struct rg_qp_slot_head {
	union {
		__u32 id; /* rg_qp_id() */
		struct {
			__u32 dest_qp : 24;
			__u32 direction : 4; /* enum rg_direction */
			__u32 state : 4;     /* enum rg_qp_slot_state */
		};
	};
	__u32 last_seen; /* RG_QP_CLOCK_SHIFT units of CLOCK_MONOTONIC: the last packet */
	struct rg_qp_dir dir;
};

struct rg_qp4_slot {
	struct rg_qp_slot_head head;
	__u8 src[4];
	__u8 dst[4];
} __attribute__((aligned(64)));

struct rg_qp6_slot {
	struct rg_qp_slot_head head;
	__u8 src[16];
	__u8 dst[16];
} __attribute__((aligned(64)));

/* Slots a table meant to hold entries QP directions takes: whole buckets. */
static inline __u32 rg_qp_slots(__u32 entries)
{
	__u64 slots = ((__u64)entries * RG_QP_SLOTS_PER_ENTRY_NUM + RG_QP_SLOTS_PER_ENTRY_DEN - 1) /
		      RG_QP_SLOTS_PER_ENTRY_DEN;

	slots = (slots + RG_QP_BUCKET_SLOTS - 1) / RG_QP_BUCKET_SLOTS * RG_QP_BUCKET_SLOTS;
	return slots > 0xfffffffcu ? 0xfffffffcu : (__u32)slots;
}

/* splitmix64's finaliser */
static inline __u64 rg_qp_mix(__u64 x)
{
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

/*
 * The hash of a key: its addresses as 64-bit words (an IPv4 pair is one,
 * an IPv6 pair four) folded through rg_qp_mix with the id word of its
 * QP number and direction (state 0).
 */
static inline __u64 rg_qp_hash(const __u64 *addr_words, int n, __u32 id)
{
	__u64 h = rg_qp_mix((__u64)id + 0x9e3779b97f4a7c15ULL);
	int i;

	for (i = 0; i < 4; i++)
		if (i < n)
			h = rg_qp_mix(h ^ addr_words[i]);
	return h;
}

/* Candidate bucket 0 from the hash's low half, 1 from its high half. */
static inline __u32 rg_qp_bucket(__u64 hash, int second, __u32 buckets)
{
	__u32 h = second ? (__u32)(hash >> 32) : (__u32)hash;
	__u32 b = (__u32)(((__u64)h * buckets) >> 32);

	if (second && b == (__u32)(((__u64)(__u32)hash * buckets) >> 32))
		b = b + 1 < buckets ? b + 1 : 0; /* never the first one twice */
	return b;
}

/*
 * The key's home slot in candidate bucket 0 or 1: the low bits of the half
 * of the hash that chose the bucket (the multiply reads its high bits).
 */
static inline __u32 rg_qp_home(__u64 hash, int second)
{
	return (__u32)(second ? hash >> 32 : hash) & (RG_QP_BUCKET_SLOTS - 1);
}

#define RG_QP_F_SEEN (1u << 0)
#define RG_QP_F_READ_PENDING (1u << 1) /* READ request: the next PSN may jump */
#define RG_QP_F_RESYNC (1u << 2)       /* idle: the next PSN restarts the tracking */
/*
 * A retransmission was seen since the highest PSN last moved, and
 * resend_next says where its burst goes on: a retransmission anywhere else
 * starts another burst (the loss shield's "control" copies the first packet
 * of each, bpf/geneve.h).
 */
#define RG_QP_F_RESENDING (1u << 3)
/*
 * With RG_QP_F_READ_PENDING, flags >> RG_QP_READ_SPAN_SHIFT is how far the
 * next request PSN may be ahead without a gap: the READ's response packets.
 */
#define RG_QP_READ_SPAN_SHIFT 8

struct rg_route4_key {
	__u32 prefixlen;
	__u8 addr[4];
};

struct rg_route6_key {
	__u32 prefixlen;
	__u8 addr[16];
};

struct rg_peer {
	__u32 vni;      /* 24 bits */
	__u16 mtu;      /* largest outer IP packet allowed on the tunnel */
	__u8 family;    /* outer: AF_INET or AF_INET6; 0 = unused slot */
	__u8 flags;     /* RG_PEER_F_* */
	__u8 local[16]; /* outer source address */
	__u8 remote[16];/* outer destination address */
};

/*
 * The next hop towards a tunnel peer, cached per CPU by the egress program
 * after a successful bpf_fib_lookup (rg_nexthops), so later packets to the
 * peer skip the route lookup. An entry is used only while it carries the
 * generation its peer's lease (rg_nh_leases) has now and that lease
 * has not run out: `roceguard run` bumps the generation on every route,
 * neighbour and link event of rtnetlink and renews the lease while it
 * runs, and grants none to a peer whose route spreads over several next
 * hops. Without a running daemon no lease is current, and every packet is
 * routed by bpf_fib_lookup.
 */
/*
 * The loss shield towards a peer (rg_peer.flags): the sending gateway sends
 * a second copy of a numbered packet right after it, on the same outer
 * 5-tuple with the same sequence number, and the receiving gateway drops
 * whichever copy arrives second (rg_tunnel_stream_update). CONTROL copies
 * what a Go-Back-N sender waits for when it is lost (ACK, NAK, CNP, READ
 * and atomic requests and responses, a packet asking for an ACK); ALL
 * copies every RoCE packet. Neither set: off.
 */
#define RG_PEER_F_SHIELD_CONTROL (1u << 0)
#define RG_PEER_F_SHIELD_ALL (1u << 1)
#define RG_PEER_F_SHIELD_MASK (RG_PEER_F_SHIELD_CONTROL | RG_PEER_F_SHIELD_ALL)
/*
 * tunnel.shield_path = "port": the copy leaves with the outer UDP source
 * port XOR RG_SHIELD_PORT_FLIP (still in the entropy range), so the WAN's
 * ECMP may carry it on another path than the original: loss on one path
 * then spares the other copy, at the price of the two paths' delays
 * crossing (a packet's first arrival overtaking its predecessor's).
 */
#define RG_PEER_F_SHIELD_OTHER_PORT (1u << 2)
#define RG_SHIELD_PORT_FLIP 0x2000

struct rg_nexthop {
	__u32 gen;         /* the lease's gen when filled; 0 = empty */
	__u32 ifindex;     /* egress device */
	__u8 dmac[6];
	__u8 smac[6];
	__u16 mtu;         /* the route's MTU towards the peer */
	__u16 ip_csum;     /* outer IPv4: its header's fixed words summed (rg_ipv4_csum_fixed); 0 for IPv6 */
	__u8 dscp;         /* the outer packets' class it was looked up for: rules may route by it */
	__u8 reserved[3];
	__u32 filled;      /* bpf_ktime_get_coarse_ns() >> 20 when filled (about ms; compared by difference) */
};

struct rg_nexthop_lease {
	__u64 until_ns;    /* bpf_ktime_get_coarse_ns() clock; 0 = no lease */
	__u32 gen;         /* 0 = not cacheable */
	__u32 reserved;
};

struct rg_decap_key {
	__u8 remote[16]; /* outer source address of arriving Geneve */
	__u32 family;
	__u32 vni;
};

enum rg_mtu_policy {
	RG_MTU_PASS = 0, /* send unencapsulated (re-marked) */
	RG_MTU_DROP = 1,
};

#define RG_CFG_F_REMARK (1u << 0)     /* egress DSCP re-mark */
#define RG_CFG_F_REPAIR (1u << 1)     /* ingress DSCP repair */
#define RG_CFG_F_ACCOUNT (1u << 2)    /* per-QP accounting */
#define RG_CFG_F_ENCAP (1u << 3)      /* egress Geneve encapsulation */
#define RG_CFG_F_DECAP (1u << 4)      /* ingress Geneve decapsulation */
#define RG_CFG_F_TUNNEL_SEQ (1u << 5) /* egress: Geneve sequence/timestamp option */
#define RG_CFG_F_XDP_FORWARD (1u << 6) /* XDP: forward RoCE between attached devices (fast path) */
/*
 * Tests only: fill the outer headers with 0xff before writing them. It stays
 * in the ABI because the tests cannot work without it: bpf_skb_adjust_room()
 * zeroes the room it inserts, so only the program itself can make a header
 * field it forgets to set visible. The loader never sets it, and the
 * verifier prunes the branch then (rg_cfg is frozen read-only data).
 */
#define RG_CFG_F_POISON (1u << 7)
/*
 * A tunnel peer has a key (rg_peer_auth): the programs sign and check the
 * option's MAC. Without it the verifier prunes that code: a configuration
 * without keys pays nothing for them, in instructions or in checks.
 */
#define RG_CFG_F_TUNNEL_AUTH (1u << 8)
/*
 * The congestion loop (tunnel.congestion = "on", docs/design.md section
 * 18): TC egress runs each peer's phantom queue and marks inner CE by it,
 * and the option's extension carries congestion reports. Without it the
 * verifier prunes that code.
 */
#define RG_CFG_F_CONGESTION (1u << 9)
#define RG_CFG_F_DEFAULT                                                      \
	(RG_CFG_F_REMARK | RG_CFG_F_REPAIR | RG_CFG_F_ACCOUNT | RG_CFG_F_ENCAP | \
	 RG_CFG_F_DECAP)

/* Read-only global of the BPF object (rg_cfg); set before load. */
struct rg_config {
	__u8 dscp;        /* class for RoCE data and ACK/NAK, 0..63 */
	__u8 cnp_dscp;    /* class for CNPs, 0..63 */
	__u8 mtu_policy;  /* enum rg_mtu_policy */
	__u8 outer_ttl;   /* outer IPv4 TTL / IPv6 hop limit */
	__u32 flags;      /* RG_CFG_F_* */
	__u32 psn_jump_max; /* PSN distance that restarts tracking; 0 = none */
	__u32 qp_idle_ms;   /* silence that restarts a QP's tracking; 0 = none */
	/*
	 * skb->priority the TC egress program gives RoCE v2 (CNPs included)
	 * for the qdisc of the interface it runs on; 0 = left as it is.
	 */
	__u32 skb_priority;
	__u16 tunnel_opt_class; /* Geneve option class of the sequence option */
	__u8 tunnel_opt_type;   /* its type; the high (critical) bit is clear */
	__u8 reserved0;
	/*
	 * This load's sequence epoch, 1 to RG_TUNNEL_EPOCH_MASK: a peer's per-CPU slot of
	 * rg_peer_stats takes it when it numbers its first packet, so it
	 * changes exactly when the numbering restarts from 0 (the map was
	 * created anew: a reboot, --reset-state), and the receiving gateway
	 * sees a restart however close the new numbers are to the old ones.
	 */
	__u16 tunnel_epoch;
	__u16 reserved1;
};

/* Geneve base header (RFC 8926 §3.4), network byte order on the wire. */
struct rg_genevehdr {
	__u8 ver_optlen;  /* version (2 bits) | option length in 4-byte words */
	__u8 flags;       /* O (0x80) | C (0x40) */
	__be16 proto;
	__u8 vni[3];
	__u8 reserved;
};

#define RG_GENEVE_F_OAM 0x80
#define RG_GENEVE_F_CRITICAL 0x40

/*
 * An interface roceguard is attached to, by ifindex. XDP cannot read its
 * device's MAC address, and a decapsulated frame must carry it as its
 * destination or the stack treats the inner packet as another host's.
 */
#define RG_MAX_IFACES 256

/*
 * A VLAN device sits on this interface and its frames' tags can reach XDP
 * outside the frame (receive VLAN offload, or a veth whose peer transmits
 * the tag as metadata): the XDP program cannot tell a tagged frame, which
 * the stack hands to that VLAN device, from an untagged one, so the fast
 * path leaves every frame received here to the stack.
 */
#define RG_IFACE_F_VLAN_UNSEEN (1u << 0)

struct rg_iface {
	__u8 mac[6];
	__u16 flags; /* RG_IFACE_F_* */
};

/*
 * The tunnel sequence option (RFC 8926 §3.5): gateway A numbers what it
 * sends into each tunnel so gateway B counts exact loss, reordering,
 * duplication and one-way delay. The class is one of the experimental-use
 * range 0xFF00-0xFFFF (RFC 8926 §7.1) and configurable; the type's high bit
 * (critical) is clear, so a receiver that does not know it skips it.
 *
 * A stream is {peer, epoch, sending CPU, lane}: each CPU of gateway A
 * numbers its own packets in its own per-CPU slot, so the fast path needs no
 * atomic operation and no lock; gateway B tracks every stream on its own.
 * A lane is one outer UDP source port (and IPv6 flow label): with the option
 * on, a flow's entropy is one of RG_TUNNEL_LANES values, and each lane is
 * numbered on its own, so one stream follows one WAN path and the paths'
 * different delays are not taken for loss or reordering. The epoch
 * (rg_config.tunnel_epoch) marks a restart of the numbering.
 *
 * Every numbered packet carries 12 bytes (struct rg_tunnel_opt): with
 * Geneve's 50, 62 bytes fit the 64 of headroom a NIC's skb has, so the
 * encapsulation does not reallocate it. One number in RG_TUNNEL_EXT_EVERY
 * of each stream (seq % RG_TUNNEL_EXT_EVERY == 0) carries 8 bytes more
 * (struct rg_tunnel_opt_ext): its send time, for the one-way delay, and
 * the feedback of the loss shield's "auto" mode, what the sender measures
 * of the traffic it receives from the peer. The type is 2: 0.2's option
 * (type 1, 20 bytes in every packet) is another option to this build, and
 * this one to 0.2; a pair tracks its tunnels once both ends run 0.3.
 */
#define RG_TUNNEL_OPT_CLASS_DEFAULT 0xff52
#define RG_TUNNEL_OPT_CLASS_MIN 0xff00
#define RG_TUNNEL_OPT_TYPE_DEFAULT 0x02
#define RG_GENEVE_OPT_TYPE_CRITICAL 0x80

struct rg_tunnel_opt {
	__be16 opt_class;
	__u8 type;
	__u8 length;     /* 3 reserved bits | data length in 4-byte words */
	__be32 stream;   /* flags (4) | epoch (12) | sending CPU of gateway A (12) | lane (4) */
	__be32 seq;      /* per stream, from 0, wrapping */
};

/* After rg_tunnel_opt in one packet in RG_TUNNEL_EXT_EVERY of a stream. */
struct rg_tunnel_opt_ext {
	__be32 sent_us;  /* send time at gateway A, rg_tunnel_clock_ns() / 1000, low 32 bits */
	__be32 feedback; /* RG_FEEDBACK_*: gateway A's measure of what it receives from B */
};
/*
 * Last in the option (after the extension, if any) when the tunnel has a
 * key: SipHash-2-4 of the option's fields and the tunnel's outer addresses
 * and VNI under the key (docs/design.md section 14, "Authentication"), its
 * 64-bit result high word first. Such an option's type is the configured
 * one with RG_TUNNEL_OPT_TYPE_AUTH set, so a build that knows no keys
 * skips it as someone else's option.
 */
struct rg_tunnel_opt_mac {
	__be32 hi;
	__be32 lo;
};
#define RG_TUNNEL_OPT_TYPE_AUTH 0x40
#define RG_TUNNEL_OPT_WORDS ((sizeof(struct rg_tunnel_opt) - 4) / 4)
#define RG_TUNNEL_OPT_EXT_WORDS (RG_TUNNEL_OPT_WORDS + sizeof(struct rg_tunnel_opt_ext) / 4)
#define RG_TUNNEL_OPT_MAC_WORDS (sizeof(struct rg_tunnel_opt_mac) / 4)

/*
 * SipHash-2-4's state (v0..v3) once it has taken the words every option of
 * one direction of a tunnel starts with: the outer source and destination
 * addresses and the VNI. The loader computes it per key; the programs take
 * the option's own words from there.
 */
struct rg_sip_state {
	__u64 v[4];
};

/* Keys a receiving gateway accepts from one peer: the current one and the next (a rotation). */
#define RG_TUNNEL_MAX_KEYS 2

/*
 * Per peer slot, the tunnel's keys (rg_peer_auth), written by the loader.
 * Not pinned: the keys live no longer than the programs that use them.
 */
struct rg_peer_auth {
	struct rg_sip_state tx;                     /* the key this gateway signs with, from (local, remote, VNI) */
	struct rg_sip_state rx[RG_TUNNEL_MAX_KEYS]; /* each key it accepts, from (remote, local, VNI) */
	__u32 keys;                                 /* keys in rx; 0 = no key: options unauthenticated */
	__u32 reserved;
};
#define RG_TUNNEL_EXT_EVERY 16

#define RG_TUNNEL_LANE_BITS 4
#define RG_TUNNEL_LANES (1u << RG_TUNNEL_LANE_BITS)
#define RG_TUNNEL_CPU_MASK 0xfffu
#define RG_TUNNEL_EPOCH_SHIFT 16
#define RG_TUNNEL_EPOCH_MASK 0xfffu
/* The part of the option's stream that names a stream of one epoch: CPU and lane. */
#define RG_TUNNEL_STREAM_ID_MASK 0xffffu
/* The stream field's flags. */
#define RG_TUNNEL_F_COPIED (1u << 28)     /* this number is sent twice: the shield copies it */
#define RG_TUNNEL_F_ELIMINATES (1u << 29) /* the sender drops the second copies it receives */
#define RG_TUNNEL_F_MASK (0xfu << 28)

/*
 * The feedback word: the raw loss of the peer's packets on the way here
 * (before the shield's elimination), in parts per million over the last
 * measurement period, and whether the one-way delay rose with it
 * (congestion, which copies make worse). Written by `roceguard run`
 * (rg_peer_ctl); 0 (not VALID): no measure.
 */
#define RG_FEEDBACK_LOSS_MASK 0xfffffu
#define RG_FEEDBACK_CONGESTED (1u << 30)
#define RG_FEEDBACK_VALID (1u << 31)
/*
 * With the congestion loop on, every other extension of a stream carries a
 * congestion report instead (RG_FEEDBACK_REPORT set, RG_FEEDBACK_VALID
 * clear, so a gateway that knows no reports takes it for "no measure"):
 * what this gateway measures of the peer's packets over its last report
 * period. The delivery rate in kbit/s as mantissa << exponent (13 and 5
 * bits: within 1/8192 of the rate), and, with RG_REPORT_F_DELAY, the mean
 * queueing delay of the stamped arrivals in RG_REPORT_DELAY_UNIT_US units
 * (the field's largest value: that much or more).
 */
#define RG_FEEDBACK_REPORT (1u << 29)
#define RG_REPORT_F_DELAY (1u << 28)
#define RG_REPORT_DELAY_MASK 0x3ffu
#define RG_REPORT_DELAY_UNIT_US 16
#define RG_REPORT_RATE_SHIFT 10
#define RG_REPORT_RATE_MANT_BITS 13
#define RG_REPORT_RATE_EXP_BITS 5

/*
 * Receiving side: a hole in the last RG_TUNNEL_WINDOW sequence numbers of a
 * stream is a late packet still to come; it counts as lost once that many
 * newer packets arrived, or once the stream was silent RG_TUNNEL_SETTLE_NS.
 * A duplicate is recognised while its number is inside the window, so the
 * shield's second copy is eliminated unless a thousand packets of its
 * stream overtook it. A new epoch, or a jump beyond RG_TUNNEL_SEQ_JUMP_MAX
 * either way (a sender without epochs whose state was reset), restarts the
 * stream's tracking instead.
 */
#define RG_TUNNEL_WINDOW 1024
#define RG_TUNNEL_WINDOW_WORDS (RG_TUNNEL_WINDOW / 64)
#define RG_TUNNEL_SETTLE_NS 1000000000ull
#define RG_TUNNEL_SEQ_JUMP_MAX (1u << 20)
/*
 * A stream silent this long is evicted by `roceguard run`, its counts kept
 * per peer (rg_tunnel_retired): far past the settling of its holes, so
 * only a sender that stopped (or a stream forged once) goes.
 */
#define RG_TUNNEL_STREAM_IDLE_NS (10 * RG_TUNNEL_SETTLE_NS)
/*
 * A receiving gateway that could not track one of a peer's streams (the
 * table full) does not say it eliminates (RG_TUNNEL_F_ELIMINATES) in what
 * it sends that peer until this long after the last such arrival: the
 * peer's shield copies only to a gateway that drops the second copies.
 */
#define RG_TUNNEL_UNTRACKED_HOLD_NS RG_TUNNEL_SETTLE_NS
/* Queueing delay buckets: bucket k holds delays up to 2^k microseconds, the last one the rest. */
#define RG_TUNNEL_DELAY_BUCKETS 24
/*
 * The one-way delay's floor is a windowed minimum, as BBR keeps its minimum
 * round trip: a sample below it, or any once it is RG_TUNNEL_FLOOR_WINDOW
 * units (2^30 ns, so 10.7 s) old, takes its place. A route change, or a
 * step of either gateway's clock, moves it within a window; a queue that
 * stands longer becomes part of it.
 */
#define RG_TUNNEL_FLOOR_UNIT_SHIFT 30
#define RG_TUNNEL_FLOOR_WINDOW 10
#define RG_TUNNEL_FLOOR_SET 0x8000u
#define RG_TUNNEL_FLOOR_AT_MASK 0x7fffu
/*
 * Loss run buckets: bucket k counts gaps of 2^k to 2^(k+1) - 1 consecutive
 * numbers as they open (1, 2-3, 4-7, ...), the last one the rest.
 */
#define RG_TUNNEL_RUN_BUCKETS 8

/*
 * Per-peer events, counted per CPU in rg_peer_stats (index = peer slot).
 * Append only, as rg_event.
 */
enum rg_peer_event {
	RG_PEER_EV_ENCAPSULATED = 0, /* egress: encapsulated towards the peer */
	RG_PEER_EV_DECAPSULATED,     /* ingress: stripped, sent by the peer */
	RG_PEER_EV_OVERSIZE_PASSED,  /* egress: over the peer's MTU, sent unencapsulated */
	RG_PEER_EV_OVERSIZE_DROPPED, /* egress: over the peer's MTU, dropped */
	RG_PEER_EV_FIB_MISS,         /* egress: no route/neighbour to the peer */
	RG_PEER_EV_ENCAP_ERROR,      /* egress: encapsulation refused by the kernel */
	RG_PEER_EV_SEQ_SENT,         /* egress: sent with the sequence option */
	RG_PEER_EV_SEQ_UNTRACKED,    /* ingress: sequence option, stream table full */
	RG_PEER_EV_SHIELD_COPIES,    /* egress: second copies sent (bytes: the extra WAN bytes) */
	RG_PEER_EV_SHIELD_ELIMINATED, /* ingress: copies dropped because the other one arrived first */
	RG_PEER_EV_SHIELD_COPY_ERROR, /* egress: the kernel refused to send the copy */
	RG_PEER_EV_SHIELD_UNCOPIED,  /* egress: shielded but sent once: unnumbered (a GSO skb) */
	RG_PEER_EV_MAX,
};

/* Per-CPU value of rg_peer_stats. */
struct rg_peer_stats {
	__u16 epoch;     /* the epoch this CPU's streams to the peer number in; 0 = none yet */
	__u16 reserved0;
	__u32 reserved1;
	struct rg_counter ev[RG_PEER_EV_MAX];
	__u32 tx_seq[RG_TUNNEL_LANES]; /* next sequence number of each lane's stream */
};

/*
 * Per peer slot, what `roceguard run` decides while it runs (rg_peer_ctl):
 * the feedback this gateway sends the peer, and the shield the "auto"
 * mode turned on towards it (added to rg_peer.flags). Not pinned: both
 * belong to the process that writes them, and start at 0 with it. Each
 * holds until until_ns only, which the daemon renews as the next-hop
 * lease: once it stops (killed, or stopped with the programs left
 * attached), the programs send no measure and no "auto" shield.
 */
struct rg_peer_ctl {
	__u64 until_ns;  /* bpf_ktime_get_coarse_ns() clock; past it: as all 0 */
	__u32 feedback;  /* RG_FEEDBACK_*, sent in the option's extension */
	__u8 shield;     /* RG_PEER_F_SHIELD_*: on by tunnel.shield = "auto" */
	__u8 reserved[3];
};

/* Per peer slot and CPU, what the peer's numbered packets said (rg_peer_rx). */
struct rg_peer_rx {
	__u64 copied;    /* first arrivals of numbers the peer sent twice (RG_TUNNEL_F_COPIED) */
	__u64 at_ns;     /* CLOCK_MONOTONIC of the last extension; 0 = none yet */
	__u32 feedback;  /* the last extension's feedback, a report's excepted */
	__u32 flags;     /* the last extension's stream flags (RG_TUNNEL_F_*) */
	__u64 report_at_ns; /* CLOCK_MONOTONIC of the last congestion report; 0 = none yet */
	__u32 report;    /* the last congestion report (RG_FEEDBACK_REPORT) */
	__u32 delay_n;   /* stamped first arrivals: the queueing delays summed in delay_sum_us */
	__u64 delay_sum_us;
};

/*
 * Per peer slot, the congestion loop's decision (rg_peer_cc), written by
 * `roceguard run` every tick with a short lifetime, as rg_peer_ctl: once
 * it stops, the programs mark nothing and send no report. Not pinned.
 *
 * The phantom queue (rg_peer_pq) is a queue of the peer's encapsulated
 * bytes that drains at the model's rate and holds nothing back: each
 * packet adds its length, time drains it. An ECN-capable inner packet that
 * finds the backlog (its own bytes included) above mark_min_ns is marked
 * CE with a probability that grows linearly to 1 at mark_max_ns, as a
 * RED queue of a data-centre switch marks on its depth (HULL, NSDI 2012).
 */
struct rg_peer_cc {
	__u64 until_ns;     /* bpf_ktime_get_coarse_ns() clock; past it: as all 0 */
	__u32 report;       /* the report sent to the peer (RG_FEEDBACK_REPORT); 0: none */
	__u32 ps_per_byte;  /* the phantom queue drains a byte in this many picoseconds; 0: no marks */
	__u32 mark_min_ns;  /* backlog above which marking starts */
	__u32 mark_max_ns;  /* backlog at which every ECN-capable packet is marked */
	__u32 mark_scale;   /* 2^32 / (mark_max_ns - mark_min_ns): the probability per ns above min */
	__u32 cap_ns;       /* the backlog's bound: the queue never holds more */
	__u32 flags;        /* RG_CC_F_*: the signals the queue sends */
	__u32 cnp_gap_ns;   /* RG_CC_F_CNP: at most one CNP per QP in this long */
};
/*
 * The signals: inner CE on what TC egress sends the peer (the far host,
 * DCQCN's notification point, answers it with a CNP a WAN round trip
 * later), and CNPs this gateway makes itself from the peer's ACKs towards
 * the sending host (TC ingress), a loop of microseconds.
 */
#define RG_CC_F_MARK_CE (1u << 0)
#define RG_CC_F_CNP (1u << 1)
/*
 * Pacing: TC egress stamps each frame to the peer with its earliest
 * departure time (skb->tstamp, CLOCK_MONOTONIC), the time the phantom queue
 * reaches it: the peer's aggregate leaves at the queue's drain rate where
 * the WAN device's qdisc honours the stamp (fq). Never earlier than the
 * stamp before it, on any CPU.
 */
#define RG_CC_F_PACE (1u << 2)

/*
 * Per peer slot, the phantom queue and what it did (rg_peer_pq; shared by
 * the CPUs: the queue under its lock, the CNP counts by atomic adds).
 */
struct rg_peer_pq {
	struct bpf_spin_lock lock;
	__u32 reserved;
	__u64 empty_at_ns;  /* bpf_ktime_get_ns() at which the backlog drains */
	__u64 packets;      /* into the queue (the shield's copies count) */
	__u64 bytes;
	__u64 marked;       /* inner CE set */
	__u64 not_ect;      /* chosen to be marked but Not-ECT or CE already: left as they were */
	__u64 capped;       /* arrivals that found the backlog at its bound */
	__u64 cnps;         /* CNPs made from the peer's ACKs and sent to the host */
	__u64 cnp_errors;   /* CNPs the kernel refused to send */
};

/*
 * Per peer slot and CPU, what the receiving gateway could not do for the
 * peer's numbered packets (rg_peer_guard). A map of its own: rg_peer_stats
 * keeps its sequence numbers after its events, so a new event there would
 * move them.
 */
struct rg_peer_guard {
	/*
	 * Arrivals of numbers the peer sent twice (RG_TUNNEL_F_COPIED) whose
	 * stream found the table full: delivered without elimination, so
	 * both copies of each reached the host.
	 */
	__u64 untracked_copied;
	/* Options of a peer with a key, ignored (the packet decapsulated without them): */
	__u64 auth_bad;     /* a MAC that none of the peer's keys gives */
	__u64 auth_missing; /* no MAC */
	/* Options the peer's second key verified: a rotation under way. */
	__u64 auth_next;
};

/*
 * Per peer slot, the streams `roceguard run` evicted from rg_tunnel_streams
 * (silent RG_TUNNEL_STREAM_IDLE_NS) and their counts, so the peer's totals
 * do not fall when a stream goes (rg_tunnel_retired; written by the daemon
 * alone).
 */
struct rg_tunnel_retired {
	__u64 evicted;
	__u64 received;
	__u64 lost;        /* holes included: a stream this silent has settled them */
	__u64 reordered;
	__u64 duplicated;
	__u64 duplicates_delivered; /* the duplicated of streams without an epoch */
	__u64 resyncs;
	__u64 delay_sum_ns;
	__u64 delay[RG_TUNNEL_DELAY_BUCKETS];
	__u64 loss_runs[RG_TUNNEL_RUN_BUCKETS];
};

struct rg_tunnel_stream_key {
	__u32 peer;    /* peer slot at the receiving gateway */
	__u32 stream;  /* sending CPU and lane at the peer (RG_TUNNEL_STREAM_ID_MASK) */
};

/* One stream as the receiving gateway tracks it; updated under lock. */
struct rg_tunnel_stream {
	struct bpf_spin_lock lock;
	__u32 max_seq;     /* highest sequence number arrived */
	__u16 epoch;       /* the sender's epoch of the numbers tracked */
	/*
	 * When delay_floor_us was taken: RG_TUNNEL_FLOOR_SET | CLOCK_MONOTONIC
	 * in units of 2^RG_TUNNEL_FLOOR_UNIT_SHIFT ns, modulo 2^15; 0: no floor yet.
	 */
	__u16 delay_floor_at;
	/*
	 * The floor of the one-way delay: the smallest arrival time minus send
	 * stamp (us, signed) over the last RG_TUNNEL_FLOOR_WINDOW units, that
	 * is the path's propagation delay plus the offset between the two
	 * gateways' clocks. delay and delay_sum_ns hold what each stamped
	 * arrival spent above it: the queueing delay, a difference of two
	 * readings of the sender's clock and two of the receiver's, which
	 * needs no clock shared.
	 */
	__s32 delay_floor_us;
	/*
	 * A ring: bit (s % RG_TUNNEL_WINDOW) says whether s arrived (or
	 * precedes the stream), for s in (max_seq - RG_TUNNEL_WINDOW, max_seq].
	 */
	__u64 window[RG_TUNNEL_WINDOW_WORDS];
	__u64 last_ns;     /* CLOCK_MONOTONIC of the last arrival */
	__u64 received;
	__u64 lost;        /* holes that left the window or settled */
	__u64 reordered;   /* arrivals behind max_seq that filled a hole */
	__u64 duplicated;
	__u64 resyncs;
	__u64 delay_sum_ns; /* queueing delays summed */
	__u64 delay[RG_TUNNEL_DELAY_BUCKETS]; /* queueing delays per bucket, not cumulative */
	/*
	 * Gaps by length when they opened (a later arrival may still fill
	 * one): the loss runs. Runs of 2 or more are correlated loss, which
	 * the shield's copies (sent back to back) do not survive.
	 */
	__u64 loss_runs[RG_TUNNEL_RUN_BUCKETS];
};

#ifndef __BPF__
#ifdef __cplusplus
#define RG_STATIC_ASSERT static_assert
#else
#define RG_STATIC_ASSERT _Static_assert
#endif
RG_STATIC_ASSERT(sizeof(struct rg_counter) == 16, "rg_counter layout");
RG_STATIC_ASSERT(sizeof(struct rg_counter_key) == 8, "rg_counter_key layout");
RG_STATIC_ASSERT(sizeof(struct rg_counters) == 16 * RG_EV_MAX, "rg_counters layout");
RG_STATIC_ASSERT(sizeof(struct rg_qp_key) == 40, "rg_qp_key layout");
RG_STATIC_ASSERT(sizeof(struct rg_qp4_key) == 16, "rg_qp4_key layout");
RG_STATIC_ASSERT(sizeof(struct rg_qp6_key) == 40, "rg_qp6_key layout");
RG_STATIC_ASSERT(sizeof(struct rg_qp_dir) == 48, "rg_qp_dir layout");
RG_STATIC_ASSERT(sizeof(struct rg_qp_slot_head) == 56, "rg_qp_slot_head layout");
RG_STATIC_ASSERT(sizeof(struct rg_qp4_slot) == 64, "rg_qp4_slot layout: a cache line");
RG_STATIC_ASSERT(sizeof(struct rg_qp6_slot) == 128, "rg_qp6_slot layout: two cache lines");
RG_STATIC_ASSERT(sizeof(struct rg_route4_key) == 8, "rg_route4_key layout");
RG_STATIC_ASSERT(sizeof(struct rg_route6_key) == 20, "rg_route6_key layout");
RG_STATIC_ASSERT(sizeof(struct rg_peer) == 40, "rg_peer layout");
RG_STATIC_ASSERT(sizeof(struct rg_decap_key) == 24, "rg_decap_key layout");
RG_STATIC_ASSERT(sizeof(struct rg_nexthop) == 32, "rg_nexthop layout");
RG_STATIC_ASSERT(sizeof(struct rg_nexthop_lease) == 16, "rg_nexthop_lease layout");
RG_STATIC_ASSERT(sizeof(struct rg_config) == 28, "rg_config layout");
RG_STATIC_ASSERT(sizeof(struct rg_genevehdr) == 8, "rg_genevehdr layout");
RG_STATIC_ASSERT(sizeof(struct rg_iface) == 8, "rg_iface layout");
RG_STATIC_ASSERT(sizeof(struct rg_tunnel_opt) == 12, "rg_tunnel_opt layout");
RG_STATIC_ASSERT(sizeof(struct rg_tunnel_opt_ext) == 8, "rg_tunnel_opt_ext layout");
RG_STATIC_ASSERT(sizeof(struct rg_peer_ctl) == 16, "rg_peer_ctl layout");
RG_STATIC_ASSERT(sizeof(struct rg_peer_rx) == 48, "rg_peer_rx layout");
RG_STATIC_ASSERT(sizeof(struct rg_peer_cc) == 40, "rg_peer_cc layout");
RG_STATIC_ASSERT(sizeof(struct rg_peer_pq) == 72, "rg_peer_pq layout");
RG_STATIC_ASSERT(sizeof(struct rg_peer_stats) == 8 + 16 * RG_PEER_EV_MAX + 4 * RG_TUNNEL_LANES, "rg_peer_stats layout");
RG_STATIC_ASSERT(sizeof(struct rg_tunnel_stream_key) == 8, "rg_tunnel_stream_key layout");
RG_STATIC_ASSERT(sizeof(struct rg_peer_guard) == 32, "rg_peer_guard layout");
RG_STATIC_ASSERT(sizeof(struct rg_tunnel_opt_mac) == 8, "rg_tunnel_opt_mac layout");
RG_STATIC_ASSERT(sizeof(struct rg_peer_auth) == 32 * (1 + RG_TUNNEL_MAX_KEYS) + 8, "rg_peer_auth layout");
RG_STATIC_ASSERT(sizeof(struct rg_tunnel_retired) ==
			 8 * 8 + 8 * RG_TUNNEL_DELAY_BUCKETS + 8 * RG_TUNNEL_RUN_BUCKETS,
		 "rg_tunnel_retired layout");
RG_STATIC_ASSERT(sizeof(struct rg_tunnel_stream) ==
			 64 + 8 + 8 * RG_TUNNEL_WINDOW_WORDS + 8 * RG_TUNNEL_DELAY_BUCKETS + 8 * RG_TUNNEL_RUN_BUCKETS,
		 "rg_tunnel_stream layout");
#endif

#endif /* ROCEGUARD_ROCEGUARD_H */
