#include "dataplane/netfilter.h"

#include <arpa/inet.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter_ipv4/ip_tables.h>
#include <linux/netfilter_ipv6/ip6_tables.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <fstream>

#include "common/error.h"
#include "common/netlink.h"

namespace rg {

std::string NetfilterProbe::summary() const {
  std::string s;
  for (const auto& f : found) s += (s.empty() ? "" : "; ") + f;
  return s;
}

namespace {

std::string family_name(uint8_t family) {
  switch (family) {
    case NFPROTO_IPV4: return "ip";
    case NFPROTO_IPV6: return "ip6";
    case NFPROTO_INET: return "inet";
    case NFPROTO_NETDEV: return "netdev";
    default: return "family " + std::to_string(family);
  }
}

// The hooks a forwarded packet passes, by family; XDP runs before all of
// them, and a frame it redirects passes none.
bool forwarded_pass(uint8_t family, uint32_t hook) {
  switch (family) {
    case NFPROTO_IPV4:
    case NFPROTO_IPV6:
    case NFPROTO_INET:
      return hook == NF_INET_PRE_ROUTING || hook == NF_INET_FORWARD || hook == NF_INET_POST_ROUTING ||
             (family == NFPROTO_INET && hook == NF_INET_INGRESS);
    case NFPROTO_NETDEV:  // ingress and egress of a device
      return true;
    default:
      return false;
  }
}

std::string hook_name(uint8_t family, uint32_t hook) {
  if (family == NFPROTO_NETDEV) return hook == NF_NETDEV_INGRESS ? "ingress" : hook == NF_NETDEV_EGRESS ? "egress" : std::to_string(hook);
  switch (hook) {
    case NF_INET_PRE_ROUTING: return "prerouting";
    case NF_INET_FORWARD: return "forward";
    case NF_INET_POST_ROUTING: return "postrouting";
    case NF_INET_INGRESS: return "ingress";
    default: return std::to_string(hook);
  }
}

std::string rules_text(int n) { return std::to_string(n) + (n == 1 ? " rule" : " rules"); }

uint32_t be32_attr(const nlattr& a) {
  uint32_t v = 0;
  if (attr_len(a) >= sizeof(v)) std::memcpy(&v, attr_payload(a), sizeof(v));
  return ntohl(v);
}

constexpr uint16_t nft_type(uint16_t msg) { return static_cast<uint16_t>((NFNL_SUBSYS_NFTABLES << 8) | msg); }

}  // namespace

// ---- nftables ------------------------------------------------------------

std::optional<NftChain> parse_nft_chain(const nlmsghdr& msg) {
  if (msg.nlmsg_type != nft_type(NFT_MSG_NEWCHAIN) || msg.nlmsg_len < sizeof(nlmsghdr) + sizeof(nfgenmsg))
    return std::nullopt;
  NftChain c;
  c.family = payload<nfgenmsg>(msg)->nfgen_family;
  for_each_attr(msg, sizeof(nfgenmsg), [&](const nlattr& a) {
    switch (attr_type(a)) {
      case NFTA_CHAIN_TABLE: c.table = attr_string(a); break;
      case NFTA_CHAIN_NAME: c.name = attr_string(a); break;
      case NFTA_CHAIN_POLICY: c.policy = be32_attr(a); break;
      case NFTA_CHAIN_HOOK:
        for_each_nested(a, [&](const nlattr& h) {
          if (attr_type(h) == NFTA_HOOK_HOOKNUM) c.hook = be32_attr(h);
          if (attr_type(h) == NFTA_HOOK_DEV) c.device = attr_string(h);
          return true;
        });
        break;
      default: break;
    }
    return true;
  });
  return c;
}

std::optional<NftChainKey> parse_nft_rule(const nlmsghdr& msg) {
  if (msg.nlmsg_type != nft_type(NFT_MSG_NEWRULE) || msg.nlmsg_len < sizeof(nlmsghdr) + sizeof(nfgenmsg))
    return std::nullopt;
  NftChainKey k{payload<nfgenmsg>(msg)->nfgen_family, "", ""};
  for_each_attr(msg, sizeof(nfgenmsg), [&](const nlattr& a) {
    if (attr_type(a) == NFTA_RULE_TABLE) std::get<1>(k) = attr_string(a);
    if (attr_type(a) == NFTA_RULE_CHAIN) std::get<2>(k) = attr_string(a);
    return true;
  });
  return k;
}

std::vector<std::string> nft_findings(const std::vector<NftChain>& chains, const std::map<NftChainKey, int>& rules) {
  std::vector<std::string> out;
  for (const auto& c : chains) {
    if (!c.hook || !forwarded_pass(c.family, *c.hook)) continue;
    const auto r = rules.find({c.family, c.table, c.name});
    const int n = r == rules.end() ? 0 : r->second;
    const bool drop = c.policy && *c.policy == NF_DROP;
    if (n == 0 && !drop) continue;
    std::string what = "nftables chain " + family_name(c.family) + " " + c.table + " " + c.name + " (hook " +
                       hook_name(c.family, *c.hook) + (c.device.empty() ? "" : " device " + c.device) +
                       (drop ? ", policy drop" : "") + ")";
    what += n ? " has " + rules_text(n) : " drops what it sees";
    out.push_back(what);
  }
  return out;
}

namespace {

// One dump of the nftables ruleset's chains or rules, every family at once.
void nft_dump(NetlinkSocket& nl, uint16_t msg, const std::string& what, const NetlinkSocket::MessageFn& fn) {
  for (int attempt = 1;; ++attempt) {
    NetlinkRequest req("nftables " + what + " dump", nft_type(msg), NLM_F_DUMP);
    auto* g = req.header<nfgenmsg>();
    g->nfgen_family = NFPROTO_UNSPEC;
    g->version = NFNETLINK_V0;
    try {
      nl.request(req, fn);
      return;
    } catch (const NetlinkError& e) {
      // The ruleset changed during the dump: read it again, a few times.
      if (e.kernel() || e.error() != EINTR || attempt == 3) throw;
    }
  }
}

void probe_nftables(NetfilterProbe& p) {
  std::vector<NftChain> chains;
  std::map<NftChainKey, int> rules;
  try {
    NetlinkSocket nl(NETLINK_NETFILTER);
    nft_dump(nl, NFT_MSG_GETCHAIN, "chain", [&](const nlmsghdr& m) {
      if (auto c = parse_nft_chain(m)) chains.push_back(*c);
    });
    bool base = false;
    for (const auto& c : chains) base |= c.hook && forwarded_pass(c.family, *c.hook);
    if (!base) return;
    nft_dump(nl, NFT_MSG_GETRULE, "rule", [&](const nlmsghdr& m) {
      if (auto k = parse_nft_rule(m)) ++rules[*k];
    });
  } catch (const NetlinkError& e) {
    // No nfnetlink, or no nf_tables in this kernel: no nftables rule.
    if (e.error() == EPROTONOSUPPORT || e.error() == EOPNOTSUPP || e.error() == ENOENT) return;
    p.found.push_back(std::string("cannot read the nftables ruleset (") + e.what() + ")");
    return;
  }
  for (auto& f : nft_findings(chains, rules)) p.found.push_back(std::move(f));
}

}  // namespace

// ---- iptables-legacy -----------------------------------------------------

namespace {

const char* const kXtHookChain[5] = {"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"};

// The entry at offset off of t.entries: its target's offset and the next
// entry's, or false past the end.
bool xt_entry_at(const XtTable& t, size_t off, uint16_t& target_offset, uint16_t& next_offset) {
  const size_t head = t.ipv6 ? sizeof(ip6t_entry) : sizeof(ipt_entry);
  if (off + head > t.entries.size()) return false;
  const char* e = t.entries.data() + off;
  if (t.ipv6) {
    std::memcpy(&target_offset, e + offsetof(ip6t_entry, target_offset), sizeof(target_offset));
    std::memcpy(&next_offset, e + offsetof(ip6t_entry, next_offset), sizeof(next_offset));
  } else {
    std::memcpy(&target_offset, e + offsetof(ipt_entry, target_offset), sizeof(target_offset));
    std::memcpy(&next_offset, e + offsetof(ipt_entry, next_offset), sizeof(next_offset));
  }
  return next_offset >= head && off + next_offset <= t.entries.size();
}

// The built-in chain's policy drops: its entry at the underflow is the
// standard target with verdict DROP.
bool xt_policy_drops(const XtTable& t, unsigned h) {
  uint16_t target_offset = 0, next_offset = 0;
  if (!xt_entry_at(t, t.underflow[h], target_offset, next_offset)) return false;
  const size_t target = t.underflow[h] + target_offset;
  if (target + sizeof(xt_standard_target) > t.underflow[h] + next_offset) return false;
  xt_standard_target st;
  std::memcpy(&st, t.entries.data() + target, sizeof(st));
  if (std::strncmp(st.target.u.user.name, XT_STANDARD_TARGET, sizeof(st.target.u.user.name)) != 0) return false;
  return st.verdict == -NF_DROP - 1;
}

}  // namespace

std::vector<std::string> xt_findings(const XtTable& t) {
  std::vector<std::string> out;
  const std::string tool = t.ipv6 ? "ip6tables-legacy" : "iptables-legacy";
  for (unsigned h : {NF_INET_PRE_ROUTING, NF_INET_FORWARD, NF_INET_POST_ROUTING}) {
    if (!(t.valid_hooks & (1u << h))) continue;
    // The chain's rules lie between its first entry and its policy.
    int n = 0;
    size_t off = t.hook_entry[h];
    for (size_t steps = 0; off < t.underflow[h] && steps < t.entries.size(); ++steps) {
      uint16_t target_offset = 0, next_offset = 0;
      if (!xt_entry_at(t, off, target_offset, next_offset)) break;
      ++n;
      off += next_offset;
    }
    if (n == 0 && t.hook_entry[h] != t.underflow[h]) n = 1;  // entries unreadable: at least one
    const bool drop = xt_policy_drops(t, h);
    if (n == 0 && !drop) continue;
    std::string what = tool + " chain " + t.name + " " + kXtHookChain[h] + (drop ? " (policy DROP)" : "");
    what += n ? " has " + rules_text(n) : " drops what it sees";
    out.push_back(what);
  }
  return out;
}

namespace {

// Reads one legacy table through a socket of the family (any socket will
// do; the kernel wants CAP_NET_ADMIN).
XtTable read_xt_table(int fd, bool ipv6, const std::string& name) {
  XtTable t;
  t.ipv6 = ipv6;
  t.name = name;
  const int level = ipv6 ? SOL_IPV6 : SOL_IP;
  static_assert(sizeof(ipt_getinfo) == sizeof(ip6t_getinfo));
  ipt_getinfo info{};
  if (name.size() >= sizeof(info.name)) throw Error("table name too long: " + name);
  std::memcpy(info.name, name.c_str(), name.size());
  socklen_t len = sizeof(info);
  if (getsockopt(fd, level, ipv6 ? IP6T_SO_GET_INFO : IPT_SO_GET_INFO, &info, &len) != 0)
    throw Error("cannot read table " + name + ": " + errno_text(errno));
  t.valid_hooks = info.valid_hooks;
  std::memcpy(t.hook_entry, info.hook_entry, sizeof(t.hook_entry));
  std::memcpy(t.underflow, info.underflow, sizeof(t.underflow));
  static_assert(sizeof(ipt_get_entries) == sizeof(ip6t_get_entries));
  std::vector<char> buf(sizeof(ipt_get_entries) + info.size);
  auto* req = reinterpret_cast<ipt_get_entries*>(buf.data());
  std::memcpy(req->name, info.name, sizeof(req->name));
  req->size = info.size;
  len = static_cast<socklen_t>(buf.size());
  // A table changed between the two reads answers EAGAIN: its entries
  // are then left out, and only hook_entry and underflow speak.
  if (getsockopt(fd, level, ipv6 ? IP6T_SO_GET_ENTRIES : IPT_SO_GET_ENTRIES, buf.data(), &len) == 0)
    t.entries.assign(buf.begin() + sizeof(ipt_get_entries), buf.end());
  return t;
}

void probe_xtables(NetfilterProbe& p, bool ipv6) {
  const std::string names_file = ipv6 ? "/proc/net/ip6_tables_names" : "/proc/net/ip_tables_names";
  std::ifstream in(names_file);
  if (!in) return;  // no legacy ip(6)tables in this kernel
  std::vector<std::string> tables;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) tables.push_back(line);
  if (tables.empty()) return;
  const std::string tool = ipv6 ? "ip6tables-legacy" : "iptables-legacy";
  const int fd = socket(ipv6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, IPPROTO_UDP);
  if (fd < 0) {
    p.found.push_back("cannot read the " + tool + " tables (" + errno_text(errno) + ")");
    return;
  }
  for (const auto& name : tables) {
    try {
      for (auto& f : xt_findings(read_xt_table(fd, ipv6, name))) p.found.push_back(std::move(f));
    } catch (const Error& e) {
      p.found.push_back("cannot read the " + tool + " tables (" + e.what() + ")");
    }
  }
  close(fd);
}

}  // namespace

NetfilterProbe probe_netfilter() {
  NetfilterProbe p;
  probe_nftables(p);
  probe_xtables(p, false);
  probe_xtables(p, true);
  return p;
}

}  // namespace rg
