// Configuration parser: defaults, every table, flag overrides, and the
// messages that must name the offending key.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include "config.h"
#include "error.h"

namespace rg {
namespace {

Config parse_ok(std::string_view text) {
  ConfigProblems p;
  Config cfg = parse_config_string(text, p);
  EXPECT_TRUE(p.ok()) << (p.errors.empty() ? "" : p.errors.front());
  return cfg;
}

std::vector<std::string> errors_of(std::string_view text) {
  ConfigProblems p;
  parse_config_string(text, p);
  return p.errors;
}

TEST(Config, EmptyFileGivesDefaults) {
  Config cfg = parse_ok("");
  EXPECT_TRUE(cfg.interfaces.empty());
  EXPECT_EQ(cfg.dscp, 46u);
  EXPECT_EQ(cfg.cnp_dscp, 48u);
  EXPECT_EQ(cfg.qp_entries, static_cast<uint32_t>(RG_DEFAULT_QP_ENTRIES));
  EXPECT_EQ(cfg.tunnel_mtu, 1500u);
  EXPECT_EQ(cfg.mtu_policy, RG_MTU_PASS);
  EXPECT_EQ(cfg.metrics_listen, "127.0.0.1:9741");
  EXPECT_EQ(cfg.tc_handle, kDefaultTcHandle);
  EXPECT_EQ(cfg.tc_priority, kDefaultTcPriority);
  rg_config ro = cfg.rodata();
  EXPECT_EQ(ro.flags, static_cast<__u32>(RG_CFG_F_DEFAULT));
  EXPECT_EQ(ro.outer_ttl, RG_DEFAULT_OUTER_TTL);
}

TEST(Config, EveryTable) {
  Config cfg = parse_ok(R"(
interfaces = ["eth1", "eth2"]
[dataplane]
dscp = 26
cnp_dscp = 40
remark = false
repair = true
accounting = false
qp_entries = 4096
outer_ttl = 32
tc_handle = 0x1234
tc_priority = 7
xdp_mode = "skb"
[tunnel]
mtu = 9000
mtu_policy = "drop"
[[tunnel.peer]]
name = "west"
local = "192.0.2.1"
remote = "203.0.113.1"
vni = 16777215
routes = ["198.51.100.0/24", "2001:db8:2::/48"]
[[tunnel.peer]]
name = "east"
local = "2001:db8::1"
remote = "2001:db8::2"
vni = 0
mtu = 1400
[metrics]
listen = "[::1]:9999"
per_qp = true
top_qps = 5
[nic]
)");
  EXPECT_EQ(cfg.interfaces, (std::vector<std::string>{"eth1", "eth2"}));
  EXPECT_EQ(cfg.dscp, 26u);
  EXPECT_EQ(cfg.qp_entries, 4096u);
  EXPECT_EQ(cfg.tc_handle, 0x1234u);
  EXPECT_EQ(cfg.xdp_mode, XdpMode::kSkb);
  ASSERT_EQ(cfg.peers.size(), 2u);
  EXPECT_EQ(cfg.peers[0].mtu, 9000u) << "a peer inherits tunnel.mtu";
  EXPECT_EQ(cfg.peers[0].vni, 16777215u);
  EXPECT_EQ(cfg.peers[0].remote.family, AF_INET);
  ASSERT_EQ(cfg.peers[0].routes.size(), 2u);
  EXPECT_EQ(cfg.peers[0].routes[1].addr.family, AF_INET6);
  EXPECT_EQ(cfg.peers[0].routes[1].len, 48);
  EXPECT_EQ(cfg.peers[1].mtu, 1400u);
  EXPECT_EQ(cfg.peers[1].local.family, AF_INET6);
  EXPECT_TRUE(cfg.per_qp);
  EXPECT_EQ(cfg.top_qps, 5u);
  EXPECT_TRUE(cfg.nic.has_value());

  rg_config ro = cfg.rodata();
  EXPECT_EQ(ro.dscp, 26);
  EXPECT_EQ(ro.cnp_dscp, 40);
  EXPECT_EQ(ro.outer_ttl, 32);
  EXPECT_EQ(ro.mtu_policy, RG_MTU_DROP);
  EXPECT_FALSE(ro.flags & RG_CFG_F_REMARK);
  EXPECT_TRUE(ro.flags & RG_CFG_F_REPAIR);
  EXPECT_FALSE(ro.flags & RG_CFG_F_ACCOUNT);
  EXPECT_TRUE(ro.flags & RG_CFG_F_ENCAP);
  EXPECT_TRUE(ro.flags & RG_CFG_F_DECAP);
}

TEST(Config, InterfaceTables) {
  Config cfg = parse_ok("[[interface]]\nname = \"eth3\"\n[[interface]]\nname = \"eth4\"\n");
  EXPECT_EQ(cfg.interfaces, (std::vector<std::string>{"eth3", "eth4"}));
}

TEST(Config, IssueExampleMessage) {
  auto errs = errors_of(R"(
[[tunnel.peer]]
name = "a"
local = "192.0.2.1"
remote = "203.0.113.1"
vni = 1
[[tunnel.peer]]
name = "b"
local = "192.0.2.1"
remote = "203.0.113.2"
vni = 16777216
)");
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_EQ(errs[0], "tunnel.peer[1].vni: 16777216 is out of range 0..16777215");
}

TEST(Config, ReportsEveryProblemAtOnce) {
  auto errs = errors_of("bogus = 1\n[dataplane]\ndscp = 99\ncnp_dscp = \"x\"\n");
  ASSERT_EQ(errs.size(), 3u);
  auto has = [&](const std::string& key) {
    for (const auto& e : errs)
      if (e.rfind(key + ":", 0) == 0) return true;
    return false;
  };
  EXPECT_TRUE(has("bogus"));
  EXPECT_TRUE(has("dataplane.dscp"));
  EXPECT_TRUE(has("dataplane.cnp_dscp"));
}

TEST(Config, Prefixes) {
  std::string why;
  auto p = parse_prefix("2001:db8:2::/48", why);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->len, 48);
  EXPECT_TRUE(parse_prefix("0.0.0.0/0", why));
  EXPECT_TRUE(parse_prefix("198.51.100.7/32", why));
  EXPECT_FALSE(parse_prefix("198.51.100.7/31", why));
  EXPECT_NE(why.find("host bits"), std::string::npos);
  EXPECT_FALSE(parse_prefix("198.51.100.0/33", why));
  EXPECT_FALSE(parse_prefix("198.51.100.0/", why));
  EXPECT_FALSE(parse_prefix("198.51.100.0/2x", why));
  EXPECT_FALSE(parse_prefix("example.org/24", why));
}

TEST(Config, FlagsOverrideTheFile) {
  ConfigProblems p;
  Config cfg = parse_config_string("interfaces = [\"eth1\"]\n[dataplane]\ndscp = 10\n", p);
  ConfigOverrides ov;
  ov.interfaces = {"eth7"};
  ov.dscp = 46;
  ov.mtu_policy = "drop";
  ov.metrics_listen = "127.0.0.1:0";
  apply_overrides(cfg, ov, p);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(cfg.interfaces, (std::vector<std::string>{"eth7"}));
  EXPECT_EQ(cfg.dscp, 46u);
  EXPECT_EQ(cfg.mtu_policy, RG_MTU_DROP);
  EXPECT_EQ(cfg.metrics_listen, "127.0.0.1:0");

  ConfigOverrides bad;
  bad.cnp_dscp = 64;
  bad.mtu_policy = "maybe";
  apply_overrides(cfg, bad, p);
  ASSERT_EQ(p.errors.size(), 2u);
  EXPECT_EQ(p.errors[0], "--cnp-dscp: 64 is out of range 0..63");
}

TEST(Config, LoadConfigExitCodes) {
  ConfigOverrides none;
  try {
    load_config("", none);
    FAIL() << "no interface must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), kExitUsage);
    EXPECT_NE(std::string(e.what()).find("interfaces"), std::string::npos);
  }
  ConfigOverrides absent;
  absent.interfaces = {"rgld-absent9"};
  try {
    load_config("", absent);
    FAIL() << "a missing interface must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), kExitNotFound);
    EXPECT_NE(std::string(e.what()).find("interface rgld-absent9 does not exist"), std::string::npos);
  }
  ConfigOverrides lo;
  lo.interfaces = {"lo"};
  EXPECT_EQ(load_config("", lo).interfaces.front(), "lo");
}

TEST(Config, HashFollowsTheConfiguration) {
  Config a = parse_ok("interfaces = [\"eth1\"]\n");
  Config b = parse_ok("[[interface]]\nname = \"eth1\"\n");
  Config c = parse_ok("interfaces = [\"eth1\"]\n[dataplane]\ndscp = 45\n");
  EXPECT_EQ(a.hash(), b.hash()) << "the two spellings are the same configuration";
  EXPECT_NE(a.hash(), c.hash());
  EXPECT_EQ(a.hash().size(), 16u);
}

}  // namespace
}  // namespace rg
