// The lab network: five network namespaces (seven with the bulk senders)
// joined by veth pairs,
//
//   host A ── gateway A ══ WAN router ══ gateway B ── host B
//   eth0     lan0   wan0   to-a  to-b    wan0   lan0   eth0
//            bulk0                       bulk0
//              │                           │
//        bulk sender A                bulk sender     (both optional)
//            eth0                        eth0
//
// with static routes so host A reaches host B through both gateways. The WAN
// router is where testbed/wan/wan.bpf.c runs; roceguard runs on the gateways.
// The bulk sender is a cloud-side neighbour of host B: its traffic shares
// gateway B's lan0 with the RoCE traffic and never crosses the WAN. Bulk
// sender A is a fabric-side neighbour of gateway A whose traffic goes to the
// WAN router itself: it shares gateway A's wan0 (the uplink) with the RoCE
// traffic. The two bulk senders also reach each other across the WAN (the
// cross traffic of `roceguard lab --wan-cross`), never host A or host B.
// Only documentation prefixes are used:
//
//   host A side  192.0.2.0/24       2001:db8:1::/64
//   A-WAN link   198.51.100.0/30    2001:db8:a::/64
//   WAN-B link   198.51.100.4/30    2001:db8:b::/64
//   bulk-B link  198.51.100.8/30    2001:db8:c::/64
//   bulk-A link  198.51.100.12/30   2001:db8:d::/64
//   VXLAN link   198.51.100.16/30   (lab/kernel_vxlan.h, gateway to gateway)
//   host B side  203.0.113.0/24     2001:db8:2::/64
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace rg::lab {

enum class Node { kHostA = 0, kGatewayA, kWan, kGatewayB, kHostB, kBulk, kBulkA };
// The path from host A to host B, present in every topology.
inline constexpr std::array<Node, 5> kNodes{Node::kHostA, Node::kGatewayA, Node::kWan,
                                            Node::kGatewayB, Node::kHostB};
std::string_view node_suffix(Node n);  // "hA", "gwA", "wan", "gwB", "hB", "bulk", "bulkA"

// The thread that constructs it enters the network namespace; the destructor
// returns it to where it was. Sockets opened meanwhile stay in the namespace
// for their whole life, so this is how the lab opens sockets in a node.
class NetnsGuard {
 public:
  explicit NetnsGuard(const std::string& netns);
  ~NetnsGuard();
  NetnsGuard(const NetnsGuard&) = delete;
  NetnsGuard& operator=(const NetnsGuard&) = delete;

 private:
  int saved_fd_ = -1;
};

struct Addresses {
  const char* host_a4 = "192.0.2.1";
  const char* gw_a_lan4 = "192.0.2.254";
  const char* gw_a_wan4 = "198.51.100.1";
  const char* wan_a4 = "198.51.100.2";
  const char* wan_b4 = "198.51.100.5";
  const char* gw_b_wan4 = "198.51.100.6";
  const char* gw_b_lan4 = "203.0.113.254";
  const char* host_b4 = "203.0.113.1";
  const char* host_a6 = "2001:db8:1::1";
  const char* gw_a_lan6 = "2001:db8:1::fe";
  const char* gw_a_wan6 = "2001:db8:a::1";
  const char* wan_a6 = "2001:db8:a::2";
  const char* wan_b6 = "2001:db8:b::2";
  const char* gw_b_wan6 = "2001:db8:b::1";
  const char* gw_b_lan6 = "2001:db8:2::fe";
  const char* host_b6 = "2001:db8:2::1";
  const char* gw_b_bulk4 = "198.51.100.9";
  const char* bulk4 = "198.51.100.10";
  const char* gw_b_bulk6 = "2001:db8:c::1";
  const char* bulk6 = "2001:db8:c::2";
  const char* gw_a_bulk4 = "198.51.100.13";
  const char* bulk_a4 = "198.51.100.14";
  const char* gw_a_bulk6 = "2001:db8:d::1";
  const char* bulk_a6 = "2001:db8:d::2";
  const char* gw_a_vx4 = "198.51.100.17";
  const char* gw_b_vx4 = "198.51.100.18";
};

class Topology {
 public:
  // Namespaces are named <prefix>-<pid>-<node>. Builds everything (with
  // bulk_senders, the two bulk senders' namespaces too) or, on any failure,
  // removes what it built and throws rg::Error.
  explicit Topology(const std::string& prefix, bool bulk_senders = false);
  ~Topology();
  Topology(const Topology&) = delete;
  Topology& operator=(const Topology&) = delete;

  // Throws rg::Error for a bulk sender of a topology built without them.
  const std::string& netns(Node n) const;
  bool has_bulk_senders() const { return bulk_senders_; }
  const Addresses& addr() const { return addr_; }
  int ifindex(Node n, const std::string& ifname) const;
  std::string mac(Node n, const std::string& ifname) const;

  // argv run inside node n like `ip netns exec` runs it (own mount
  // namespace, the node's /sys) but with this process's bpffs on
  // /sys/fs/bpf, so pins made inside are the files seen outside and outlive
  // the command.
  std::vector<std::string> exec_argv(Node n, const std::vector<std::string>& argv) const;
  // UDP from host A to host B and back (v4 and v6), retried a bounded number
  // of times: proves the path and resolves every neighbour on it.
  void check_path() const;

  // Readies the lab for the XDP fast path. A veth takes frames another
  // device's XDP program redirects into it only while its peer runs NAPI,
  // which an XDP program or GRO turns on: every veth of the path has GRO on
  // from the start (against reordering, see build()). What is left: the
  // hosts' checksums complete, as a NIC puts them
  // on a wire: a veth hands a local sender's UDP checksum on unfinished
  // (CHECKSUM_PARTIAL), which only the skb knows; a frame redirected
  // without its skb would arrive with it wrong.
  void accept_xdp_redirects() const;

  // UDP GRO for forwarding on the gateways' LAN-facing veths (lan0):
  // `ethtool -K lan0 gro on rx-udp-gro-forwarding on`. Datagrams of one
  // flow that arrive back to back are then merged by GRO (udp_gro_receive
  // without a socket) and forwarded as one GSO skb up to the gateway's
  // egress, where roceguard's TC program sees them; off by default, as a
  // router's NIC without it. Returns whether both report it on afterwards
  // (`ethtool -k`).
  bool forward_udp_gro() const;

  // For bursts (a UDP_SEGMENT send at host A is one GSO skb): the frames
  // on every link the lab treats as a wire are single datagrams, as a
  // NIC puts them there. Host A's eth0 segments UDP in software
  // (tx-udp-segmentation off), as an RNIC sends a burst back to back; the
  // gateways' wan0 segment the Geneve they send in software
  // (tx-udp_tnl-segmentation off), after their TC egress has seen the
  // GSO skb, as a NIC without tunnel segmentation does. Without the latter
  // a GSO Geneve skb would reach the WAN's delay line whole, and a packet
  // socket cannot describe a UDP tunnel GSO skb in its virtio-net header:
  // it drops it.
  void segment_like_nics() const;

  // Deletes namespaces <prefix>-<pid>-* whose pid no longer runs: what a
  // crashed run left behind. Returns how many it removed.
  static int cleanup_stale(const std::string& prefix);

  // The pid in name when name is <prefix>-<pid>-<node> (node: letters),
  // else 0. The prefix is compared as text: a pattern built from it would
  // read the user's "+" or "*" as regex syntax and take, then delete,
  // another prefix's namespaces and pins.
  static pid_t run_pid_of(const std::string& name, const std::string& prefix);

 private:
  void build();
  void destroy() noexcept;

  std::array<std::string, 7> names_;
  bool bulk_senders_ = false;
  Addresses addr_;
  std::vector<std::string> created_;
};

// The MAC address of ifname in the named network namespace, as text.
std::string link_mac(const std::string& netns, const std::string& ifname);

// Topology::exec_argv for any named network namespace (/run/netns/NAME).
std::vector<std::string> netns_exec_argv(const std::string& netns, const std::vector<std::string>& argv);

}  // namespace rg::lab
