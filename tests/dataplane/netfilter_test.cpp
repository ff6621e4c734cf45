// The netfilter probe's parsers (dataplane/netfilter.h): nftables chains and
// rules as a NETLINK_NETFILTER dump answers them, built with the loader's
// own request builder, and iptables-legacy tables as IPT_SO_GET_INFO and
// IPT_SO_GET_ENTRIES answer them. No kernel involved.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter_ipv4/ip_tables.h>

#include <cstring>

#include "common/netlink.h"
#include "dataplane/netfilter.h"

namespace rg {
namespace {

constexpr uint16_t nft(uint16_t msg) { return static_cast<uint16_t>((NFNL_SUBSYS_NFTABLES << 8) | msg); }

NetlinkRequest chain_msg(uint8_t family, const std::string& table, const std::string& name,
                         std::optional<uint32_t> hook, std::optional<uint32_t> policy) {
  NetlinkRequest m("chain", nft(NFT_MSG_NEWCHAIN));
  m.header<nfgenmsg>()->nfgen_family = family;
  m.put_string(NFTA_CHAIN_TABLE, table);
  m.put_string(NFTA_CHAIN_NAME, name);
  if (hook) {
    nlattr* n = m.nest_start(NFTA_CHAIN_HOOK);
    m.put_u32(NFTA_HOOK_HOOKNUM, htonl(*hook));
    m.put_u32(NFTA_HOOK_PRIORITY, htonl(0));
    m.nest_end(n);
  }
  if (policy) m.put_u32(NFTA_CHAIN_POLICY, htonl(*policy));
  m.put_string(NFTA_CHAIN_TYPE, "filter");
  return m;
}

TEST(NetfilterProbe, ParsesAnNftablesBaseChain) {
  auto m = chain_msg(NFPROTO_INET, "filter", "forward", NF_INET_FORWARD, NF_DROP);
  auto c = parse_nft_chain(*m.message());
  ASSERT_TRUE(c);
  EXPECT_EQ(c->family, NFPROTO_INET);
  EXPECT_EQ(c->table, "filter");
  EXPECT_EQ(c->name, "forward");
  ASSERT_TRUE(c->hook);
  EXPECT_EQ(*c->hook, static_cast<uint32_t>(NF_INET_FORWARD));
  ASSERT_TRUE(c->policy);
  EXPECT_EQ(*c->policy, static_cast<uint32_t>(NF_DROP));

  auto regular = chain_msg(NFPROTO_IPV4, "filter", "mine", std::nullopt, std::nullopt);
  auto r = parse_nft_chain(*regular.message());
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->hook);

  NetlinkRequest other("table", nft(NFT_MSG_NEWTABLE));
  other.header<nfgenmsg>()->nfgen_family = NFPROTO_IPV4;
  EXPECT_FALSE(parse_nft_chain(*other.message()));
}

TEST(NetfilterProbe, ParsesAnNftablesRulesChain) {
  NetlinkRequest m("rule", nft(NFT_MSG_NEWRULE));
  m.header<nfgenmsg>()->nfgen_family = NFPROTO_IPV6;
  m.put_string(NFTA_RULE_TABLE, "filter");
  m.put_string(NFTA_RULE_CHAIN, "FORWARD");
  auto k = parse_nft_rule(*m.message());
  ASSERT_TRUE(k);
  EXPECT_EQ(*k, (NftChainKey{NFPROTO_IPV6, "filter", "FORWARD"}));
}

// Chains on a hook a forwarded packet passes count when they hold a rule
// or drop by policy; input, output and empty accepting chains do not.
TEST(NetfilterProbe, NamesTheChainsForwardedPacketsPass) {
  std::vector<NftChain> chains = {
      {NFPROTO_IPV4, "filter", "FORWARD", NF_INET_FORWARD, NF_ACCEPT, ""},
      {NFPROTO_IPV4, "filter", "INPUT", NF_INET_LOCAL_IN, NF_DROP, ""},
      {NFPROTO_IPV6, "filter", "FORWARD", NF_INET_FORWARD, NF_DROP, ""},
      {NFPROTO_INET, "t", "pre", NF_INET_PRE_ROUTING, NF_ACCEPT, ""},
      {NFPROTO_INET, "t", "post", NF_INET_POST_ROUTING, NF_ACCEPT, ""},
      {NFPROTO_INET, "t", "empty", NF_INET_FORWARD, NF_ACCEPT, ""},
      {NFPROTO_IPV4, "filter", "mine", std::nullopt, std::nullopt, ""},
      {NFPROTO_ARP, "filter", "in", 0, NF_DROP, ""},
  };
  std::map<NftChainKey, int> rules = {{{NFPROTO_IPV4, "filter", "FORWARD"}, 3},
                                      {{NFPROTO_IPV4, "filter", "INPUT"}, 1},
                                      {{NFPROTO_INET, "t", "post"}, 1},
                                      {{NFPROTO_IPV4, "filter", "mine"}, 5}};
  auto f = nft_findings(chains, rules);
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[0], "nftables chain ip filter FORWARD (hook forward) has 3 rules");
  EXPECT_EQ(f[1], "nftables chain ip6 filter FORWARD (hook forward, policy drop) drops what it sees");
  EXPECT_EQ(f[2], "nftables chain inet t post (hook postrouting) has 1 rule");
}

// A legacy table's entries: rule entries of a given size, then the policy
// (a standard target) of each built-in chain.
struct Blob {
  std::vector<char> bytes;
  size_t add(int verdict, const char* target = XT_STANDARD_TARGET) {
    const size_t off = bytes.size();
    const size_t size = XT_ALIGN(sizeof(ipt_entry)) + XT_ALIGN(sizeof(xt_standard_target));
    bytes.resize(off + size);
    ipt_entry e{};
    e.target_offset = XT_ALIGN(sizeof(ipt_entry));
    e.next_offset = static_cast<uint16_t>(size);
    std::memcpy(bytes.data() + off, &e, sizeof(e));
    xt_standard_target t{};
    t.target.u.user.target_size = XT_ALIGN(sizeof(xt_standard_target));
    std::strncpy(t.target.u.user.name, target, sizeof(t.target.u.user.name) - 1);
    t.verdict = verdict;
    std::memcpy(bytes.data() + off + e.target_offset, &t, sizeof(t));
    return off;
  }
};

TEST(NetfilterProbe, ReadsALegacyTablesChains) {
  constexpr int kAccept = -NF_ACCEPT - 1, kDrop = -NF_DROP - 1;
  Blob b;
  XtTable t;
  t.name = "filter";
  t.valid_hooks = (1u << NF_INET_LOCAL_IN) | (1u << NF_INET_FORWARD) | (1u << NF_INET_LOCAL_OUT);
  // INPUT: one rule, policy DROP (not a hook forwarded packets pass).
  t.hook_entry[NF_INET_LOCAL_IN] = static_cast<unsigned>(b.add(kDrop));
  t.underflow[NF_INET_LOCAL_IN] = static_cast<unsigned>(b.add(kDrop));
  // FORWARD: two rules, policy ACCEPT.
  t.hook_entry[NF_INET_FORWARD] = static_cast<unsigned>(b.add(kDrop));
  b.add(kAccept, "LOG");
  t.underflow[NF_INET_FORWARD] = static_cast<unsigned>(b.add(kAccept));
  // OUTPUT: nothing.
  t.hook_entry[NF_INET_LOCAL_OUT] = t.underflow[NF_INET_LOCAL_OUT] = static_cast<unsigned>(b.add(kAccept));
  b.add(0, "ERROR");
  t.entries = b.bytes;
  auto f = xt_findings(t);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0], "iptables-legacy chain filter FORWARD has 2 rules");

  // No rule, but the policy drops.
  Blob d;
  XtTable empty;
  empty.name = "filter";
  empty.valid_hooks = 1u << NF_INET_FORWARD;
  empty.hook_entry[NF_INET_FORWARD] = empty.underflow[NF_INET_FORWARD] = static_cast<unsigned>(d.add(kDrop));
  empty.entries = d.bytes;
  f = xt_findings(empty);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0], "iptables-legacy chain filter FORWARD (policy DROP) drops what it sees");
  std::memcpy(empty.entries.data() + XT_ALIGN(sizeof(ipt_entry)) + offsetof(xt_standard_target, verdict), &kAccept,
              sizeof(kAccept));
  EXPECT_TRUE(xt_findings(empty).empty());
}

}  // namespace
}  // namespace rg
