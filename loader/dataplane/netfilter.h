// Whether a netfilter rule could apply to IPv4/IPv6 packets this host
// forwards: what the XDP fast path (dataplane.xdp_forward, docs/design.md
// section 16) would carry past it. Read from the network namespace the
// loader runs in, and only read:
//
//   * nftables (iptables-nft too): the base chains of the ip, ip6, inet and
//     netdev families, dumped over NETLINK_NETFILTER, on a hook a forwarded
//     packet passes (prerouting, forward, postrouting; inet's and netdev's
//     ingress, netdev's egress) that hold a rule or whose policy is drop;
//   * iptables-legacy and ip6tables-legacy: for each table in
//     /proc/net/ip_tables_names (ip6_tables_names), its PREROUTING, FORWARD
//     and POSTROUTING chains (those it has) that hold a rule or whose policy
//     is DROP, read with IPT_SO_GET_INFO and IPT_SO_GET_ENTRIES.
#pragma once

#include <linux/netlink.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace rg {

struct NetfilterProbe {
  // One line per chain that applies, e.g. "nftables chain inet filter
  // forward (hook forward) has 3 rules", or a ruleset that could not be
  // read ("cannot read ..."): what is not known counts as applying.
  std::vector<std::string> found;
  bool applies() const { return !found.empty(); }
  // found, joined by "; ".
  std::string summary() const;
};

// Never throws: a failure to read goes into found.
NetfilterProbe probe_netfilter();

// ---- the parsers, apart for the tests ----------------------------------

// An nftables chain as NFT_MSG_NEWCHAIN (a dump's answer) gives it.
struct NftChain {
  uint8_t family = 0;  // NFPROTO_*
  std::string table;
  std::string name;
  std::optional<uint32_t> hook;    // a base chain's NF_INET_* / NF_NETDEV_*
  std::optional<uint32_t> policy;  // NF_ACCEPT, NF_DROP
  std::string device;              // netdev: the chain's device, if one
};
// nullopt for a message that is no chain.
std::optional<NftChain> parse_nft_chain(const nlmsghdr& msg);

// The family, table and chain of an nftables rule (NFT_MSG_NEWRULE).
using NftChainKey = std::tuple<uint8_t, std::string, std::string>;
std::optional<NftChainKey> parse_nft_rule(const nlmsghdr& msg);

// What of chains applies to forwarded packets, given each chain's rules.
std::vector<std::string> nft_findings(const std::vector<NftChain>& chains, const std::map<NftChainKey, int>& rules);

// One legacy table as IPT_SO_GET_INFO and IPT_SO_GET_ENTRIES answer (the
// IPv6 ones the same): the hooks it has, where each built-in chain's rules
// start (hook_entry) and where its policy is (underflow), offsets into
// entries.
struct XtTable {
  bool ipv6 = false;
  std::string name;
  unsigned valid_hooks = 0;
  unsigned hook_entry[5] = {};
  unsigned underflow[5] = {};
  std::vector<char> entries;
};
std::vector<std::string> xt_findings(const XtTable& t);

}  // namespace rg
