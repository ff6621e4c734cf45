#include "dataplane/names.h"

#include <array>

namespace rg {
namespace {

// Order must match enum rg_event; names_test checks it.
constexpr std::array<EventName, RG_EV_MAX> kEvents{{
    {RG_EV_ROCE_PACKETS, "roce_packets", "roce_packets", "RoCE v2 packets seen", "roce_bytes"},
    {RG_EV_DSCP_REWRITTEN, "dscp_rewritten", "dscp_rewritten_packets", "RoCE packets whose DSCP was re-marked at egress", "dscp_rewritten_bytes"},
    {RG_EV_DSCP_REPAIRED, "dscp_repaired", "dscp_repaired_packets", "RoCE packets whose bleached DSCP was restored at ingress", "dscp_repaired_bytes"},
    {RG_EV_ENCAPSULATED, "encapsulated", "geneve_encapsulated_packets", "Packets Geneve-encapsulated", "geneve_encapsulated_bytes"},
    {RG_EV_DECAPSULATED, "decapsulated", "geneve_decapsulated_packets", "Packets Geneve-decapsulated", "geneve_decapsulated_bytes"},
    {RG_EV_OVERSIZE_PASSED, "oversize_passed", "oversize_packets", "Packets over the tunnel MTU (policy pass: sent unencapsulated)", "oversize_bytes", "policy", "pass"},
    {RG_EV_OVERSIZE_DROPPED, "oversize_dropped", "oversize_packets", "Packets over the tunnel MTU (policy drop)", "oversize_bytes", "policy", "drop"},
    {RG_EV_RETRANSMITS, "retransmits", "retransmitted_packets", "RoCE packets at or behind the highest PSN seen on their QP", "retransmitted_bytes"},
    {RG_EV_PSN_GAPS, "psn_gaps", "psn_gaps", "Forward PSN jumps"},
    {RG_EV_LOST_ESTIMATE, "lost_estimate", "estimated_lost_packets", "Packets missing in forward PSN jumps"},
    {RG_EV_NAK_SEQ_ERR, "nak_seq_err", "naks", "AETH NAKs with PSN sequence error", {}, "type", "seq_err"},
    {RG_EV_NAK_OTHER, "nak_other", "naks", "AETH NAKs with another code", {}, "type", "other"},
    {RG_EV_RNR_NAK, "rnr_nak", "naks", "AETH RNR NAKs", {}, "type", "rnr"},
    {RG_EV_CNP, "cnp", "cnp_packets", "Congestion notification packets", "cnp_bytes"},
    {RG_EV_ECN_CE, "ecn_ce", "ecn_ce_packets", "RoCE packets marked ECN CE", "ecn_ce_bytes"},
    {RG_EV_ECN_DROP, "ecn_drop", "ecn_dropped_packets", "Packets dropped on decap: outer CE over inner Not-ECT (RFC 6040)", "ecn_dropped_bytes"},
    {RG_EV_UNKNOWN_TUNNEL, "unknown_tunnel", "unknown_tunnel_packets", "Geneve packets from an unknown peer or VNI, left untouched", "unknown_tunnel_bytes"},
    {RG_EV_ENCAP_ERROR, "encap_error", "encap_errors", "Encapsulations that failed: TC egress sends the packet as it was when the kernel refuses the room, and drops it when the headers cannot be written; the XDP fast path drops it"},
    {RG_EV_FIB_MISS, "fib_miss", "fib_misses", "No route or neighbour to the tunnel peer; packet sent as it was"},
    {RG_EV_PARSE_TRUNC_L2, "trunc_l2", "parse_errors", "Ethernet or VLAN header cut short", {}, "reason", "trunc_l2"},
    {RG_EV_PARSE_VLAN_DEPTH, "vlan_depth", "parse_errors", "More than two VLAN tags", {}, "reason", "vlan_depth"},
    {RG_EV_PARSE_TRUNC_L3, "trunc_l3", "parse_errors", "IP header cut short or malformed", {}, "reason", "trunc_l3"},
    {RG_EV_PARSE_FRAGMENT, "fragment", "parse_errors", "UDP in an IP fragment", {}, "reason", "fragment"},
    {RG_EV_PARSE_IPV6_EXT, "ipv6_ext", "parse_errors", "IPv6 extension header (not walked)", {}, "reason", "ipv6_ext"},
    {RG_EV_PARSE_TRUNC_L4, "trunc_l4", "parse_errors", "UDP header cut short", {}, "reason", "trunc_l4"},
    {RG_EV_PARSE_TRUNC_BTH, "trunc_bth", "parse_errors", "UDP 4791 without room for BTH/AETH", {}, "reason", "trunc_bth"},
    {RG_EV_PARSE_GENEVE, "geneve", "parse_errors", "Geneve header malformed", {}, "reason", "geneve"},
    {RG_EV_QP_NEW, "qp_new", "qp_created", "Per-QP entries created"},
    {RG_EV_PARSE_BAD_BTH, "bad_bth", "parse_errors", "UDP 4791 without a valid RoCE v2 BTH (version, opcode, ICRC room)", {}, "reason", "bad_bth"},
    {RG_EV_GENEVE_BAD_CSUM, "geneve_bad_csum", "geneve_untouched_packets", "Geneve with a wrong outer IPv4 header checksum, left untouched", {}, "reason", "bad_csum"},
    {RG_EV_GENEVE_NOT_LOCAL, "geneve_not_local", "geneve_untouched_packets", "Geneve of a known tunnel to another outer destination, left untouched", {}, "reason", "not_local"},
    {RG_EV_GENEVE_CONTROL, "geneve_control", "geneve_untouched_packets", "Geneve control packets (O bit), left to the stack undecapsulated", {}, "reason", "control"},
    {RG_EV_GENEVE_CRITICAL, "geneve_critical", "geneve_critical_dropped_packets", "Geneve with critical options (C bit) on a configured tunnel, dropped", "geneve_critical_dropped_bytes"},
    {RG_EV_PSN_RESYNC, "psn_resync", "psn_resyncs", "PSN tracking restarted (QP idle, or a jump beyond any window)"},
    {RG_EV_XDP_FORWARDED, "xdp_forwarded", "xdp_forwarded_packets", "RoCE packets forwarded out of this interface from an XDP hook (fast path), past its qdisc", "xdp_forwarded_bytes"},
    {RG_EV_QP_EVICTED, "qp_evicted", "qp_evicted", "Per-QP entries that took the slot of a QP silent past the idle time"},
    {RG_EV_QP_UNTRACKED, "qp_untracked", "qp_untracked_packets", "RoCE packets of a QP the per-QP table had no slot for (every candidate slot held an active QP)"},
}};

// Order must match enum rg_peer_event; names_test checks it.
constexpr std::array<PeerEventName, RG_PEER_EV_MAX> kPeerEvents{{
    {RG_PEER_EV_ENCAPSULATED, "encapsulated", "roceguard_tunnel_encapsulated_packets_total",
     "Packets Geneve-encapsulated towards the peer"},
    {RG_PEER_EV_DECAPSULATED, "decapsulated", "roceguard_tunnel_decapsulated_packets_total",
     "Packets from the peer Geneve-decapsulated"},
    {RG_PEER_EV_OVERSIZE_PASSED, "oversize_passed", "roceguard_tunnel_oversize_packets_total",
     "Packets over the peer's tunnel MTU by policy: pass sent unencapsulated, drop dropped", "policy", "pass"},
    {RG_PEER_EV_OVERSIZE_DROPPED, "oversize_dropped", "roceguard_tunnel_oversize_packets_total",
     "Packets over the peer's tunnel MTU by policy: pass sent unencapsulated, drop dropped", "policy", "drop"},
    {RG_PEER_EV_FIB_MISS, "fib_miss", "roceguard_tunnel_fib_misses_total",
     "Packets for the peer with no route or neighbour to it; sent as they were"},
    {RG_PEER_EV_ENCAP_ERROR, "encap_error", "roceguard_tunnel_encap_errors_total",
     "Encapsulations towards the peer that failed (sent as it was, or dropped: roceguard_encap_errors_total)"},
    {RG_PEER_EV_SEQ_SENT, "sent", "roceguard_tunnel_sent_packets_total",
     "Packets sent into the tunnel to the peer with the sequence option (sending gateway)"},
    {RG_PEER_EV_SEQ_UNTRACKED, "untracked", "roceguard_tunnel_untracked_packets_total",
     "Packets from the peer with the sequence option whose stream found the stream table full"},
    {RG_PEER_EV_SHIELD_COPIES, "shield_copies", "roceguard_tunnel_shield_copies_total",
     "Second copies the loss shield sent to the peer (sending gateway)", {}, {},
     "roceguard_tunnel_shield_copy_bytes_total",
     "Bytes of the loss shield's second copies to the peer: what the shield adds to the WAN (sending gateway)"},
    {RG_PEER_EV_SHIELD_ELIMINATED, "shield_eliminated", "roceguard_tunnel_shield_eliminated_packets_total",
     "Packets from the peer dropped as the second copy of one that arrived already (receiving gateway)"},
    {RG_PEER_EV_SHIELD_COPY_ERROR, "shield_copy_errors", "roceguard_tunnel_shield_copy_errors_total",
     "Loss shield copies to the peer the kernel refused to send; the packet went once"},
    {RG_PEER_EV_SHIELD_UNCOPIED, "shield_uncopied", "roceguard_tunnel_shield_uncopied_packets_total",
     "Packets to the peer the loss shield covers but sent once: unnumbered (a GSO packet), or with the next hop unresolved"},
}};

}  // namespace

const PeerEventName& peer_event_name(rg_peer_event ev) { return kPeerEvents.at(static_cast<size_t>(ev)); }

const EventName& event_name(rg_event ev) { return kEvents.at(static_cast<size_t>(ev)); }

std::optional<rg_event> event_from_name(std::string_view name) {
  for (const auto& e : kEvents)
    if (e.name == name) return e.event;
  return std::nullopt;
}

std::string_view direction_name(rg_direction dir) {
  switch (dir) {
    case RG_DIR_EGRESS: return "egress";
    case RG_DIR_INGRESS: return "ingress";
    default: return "unknown";
  }
}

}  // namespace rg
