// Configuration parser: defaults, every table, environment and flag
// overrides, the messages that must name the offending key, and the option
// table every one of them (and --help, to_json, the README) derives from.
#include <gtest/gtest.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "cli/config_check.h"
#include "common/error.h"
#include "config/config.h"
#include "config/options.h"
#include "dataplane/attach.h"
#include "dataplane/tunnel_auth.h"

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
retry_cnt = 5
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
  EXPECT_EQ(cfg.nic.retry_cnt, 5);

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

TEST(Config, PeerVniOutOfRangeMessage) {
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
  apply_flags(cfg,
              {{"interfaces", {"eth7"}},
               {"dataplane.dscp", {"46"}},
               {"tunnel.mtu_policy", {"drop"}},
               {"metrics.listen", {"127.0.0.1:0"}}},
              p);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(cfg.interfaces, (std::vector<std::string>{"eth7"}));
  EXPECT_EQ(cfg.dscp, 46u);
  EXPECT_EQ(cfg.mtu_policy, RG_MTU_DROP);
  EXPECT_EQ(cfg.metrics_listen, "127.0.0.1:0");

  apply_flags(cfg, {{"dataplane.cnp_dscp", {"64"}}, {"tunnel.mtu_policy", {"maybe"}}}, p);
  ASSERT_EQ(p.errors.size(), 2u);
  EXPECT_EQ(p.errors[0], "--cnp-dscp: 64 is out of range 0..63");
}

TEST(Config, LoadConfigExitCodes) {
  ConfigSources none;
  none.environment = false;
  try {
    load_config(none);
    FAIL() << "no interface must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), kExitUsage);
    EXPECT_NE(std::string(e.what()).find("interfaces"), std::string::npos);
  }
  ConfigSources absent = none;
  absent.flags = {{"interfaces", {"rgld-absent9"}}};
  try {
    load_config(absent);
    FAIL() << "a missing interface must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), kExitNotFound);
    EXPECT_NE(std::string(e.what()).find("interface rgld-absent9 does not exist"), std::string::npos);
  }
  EXPECT_NO_THROW(load_config(absent, true)) << "--offline does not look for interfaces";
  ConfigSources lo = none;
  lo.flags = {{"interfaces", {"lo"}}};
  EXPECT_EQ(load_config(lo).interfaces.front(), "lo");
}

TEST(Config, HashFollowsTheConfiguration) {
  Config a = parse_ok("interfaces = [\"eth1\"]\n");
  Config b = parse_ok("[[interface]]\nname = \"eth1\"\n");
  Config c = parse_ok("interfaces = [\"eth1\"]\n[dataplane]\ndscp = 45\n");
  EXPECT_EQ(a.hash(), b.hash()) << "the two spellings are the same configuration";
  EXPECT_NE(a.hash(), c.hash());
  EXPECT_EQ(a.hash().size(), 16u);
}

// An environment for apply_environment: only these variables exist.
EnvLookup env_of(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

bool has_error(const ConfigProblems& p, const std::string& text) {
  for (const auto& e : p.errors)
    if (e.find(text) != std::string::npos) return true;
  return false;
}

// The kernel reads an interface name up to its first NUL, so "a0\0x" is a0
// again: listed with a0 it would be attached twice. It refuses ".", "..",
// '/', ':' and whitespace. And a name that is not text (not UTF-8, or with
// control characters) cannot be written into the attach record, JSON or a
// Prometheus label. Each is refused naming its key, from every source.
TEST(Config, InterfaceNamesAreNamesTheKernelReadsAsWritten) {
  ConfigProblems nul;
  Config cfg = parse_config_string("interfaces = [\"a0\\u0000x\", \"a0\"]\n", nul);
  EXPECT_TRUE(has_error(nul, "interfaces[0]: ")) << (nul.errors.empty() ? "accepted" : nul.errors.front());
  EXPECT_EQ(std::count(cfg.interfaces.begin(), cfg.interfaces.end(), "a0"), 1) << "a0 listed twice";
  for (const char* name : {".", "..", "a/b", "a:b", "a b", "a\\tb", "a\\u0001b", "a\\u007fb", "",
                           "sixteen-bytes-xx"}) {
    ConfigProblems p;
    parse_config_string("interfaces = [\"lo\", \"" + std::string(name) + "\"]\n", p);
    EXPECT_TRUE(has_error(p, "interfaces[1]: ")) << "\"" << name << "\" accepted";
  }
  for (const char* name : {"eth0", "ens1f0np0", "gw-\u00e9t\u00e9", "a_b.c@d", "123456789012345"}) {
    ConfigProblems p;
    parse_config_string("interfaces = [\"" + std::string(name) + "\"]\n", p);
    EXPECT_TRUE(p.ok()) << name << ": " << (p.errors.empty() ? "" : p.errors.front());
  }

  // Not UTF-8: only a flag or the environment can carry it (a TOML file is
  // UTF-8 by definition). Refused as usage, naming the key, and the message
  // itself is text.
  ConfigSources flag;
  flag.environment = false;
  flag.flags = {{"interfaces", {"\xffrg0"}}};
  try {
    load_config(flag, true);
    ADD_FAILURE() << "a name that is not UTF-8 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), kExitUsage) << e.what();
    EXPECT_NE(std::string(e.what()).find("--interface: \"\\xffrg0\""), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a configuration error: " << e.what();
  }
  ConfigProblems env;
  Config c;
  apply_environment(c, env, env_of({{"ROCEGUARD_INTERFACES", "lo,\xffrg0"}}));
  EXPECT_TRUE(has_error(env, "ROCEGUARD_INTERFACES[1]: ")) << (env.errors.empty() ? "accepted" : env.errors.front());
}

TEST(Environment, DefaultFileEnvironmentFlagInThatOrder) {
  ConfigProblems p;
  Config cfg = parse_config_string("[dataplane]\ndscp = 10\ncnp_dscp = 11\nqp_entries = 1024\n", p);
  apply_environment(cfg, p,
                    env_of({{"ROCEGUARD_DATAPLANE_DSCP", "20"},
                            {"ROCEGUARD_DATAPLANE_CNP_DSCP", "21"},
                            {"ROCEGUARD_INTERFACES", "eth1, eth2"},
                            {"ROCEGUARD_DATAPLANE_REMARK", "false"},
                            {"ROCEGUARD_DATAPLANE_TC_HANDLE", "0x99"},
                            {"ROCEGUARD_NIC_ACK_TIMEOUT", "500us"},
                            {"ROCEGUARD_TUNNEL_PEER",
                             R"([{ name = "west", local = "192.0.2.1", remote = "203.0.113.1", vni = 7 }])"}}));
  apply_flags(cfg, {{"dataplane.dscp", {"30"}}}, p);
  finish_config(cfg, p);
  ASSERT_TRUE(p.ok()) << p.errors.front();
  EXPECT_EQ(cfg.dscp, 30u) << "a flag beats the environment";
  EXPECT_EQ(cfg.cnp_dscp, 21u) << "the environment beats the file";
  EXPECT_EQ(cfg.qp_entries, 1024u) << "the file beats the default";
  EXPECT_EQ(cfg.interfaces, (std::vector<std::string>{"eth1", "eth2"}));
  EXPECT_FALSE(cfg.remark);
  EXPECT_EQ(cfg.tc_handle, 0x99u);
  EXPECT_EQ(cfg.nic.ack_timeout.exponent, 7);
  ASSERT_EQ(cfg.peers.size(), 1u);
  EXPECT_EQ(cfg.peers[0].vni, 7u);
  EXPECT_EQ(cfg.peers[0].mtu, cfg.tunnel_mtu);
}

TEST(Environment, ValidatedLikeFlagsAndNamed) {
  ConfigProblems from_env, from_flag;
  Config a, b;
  apply_environment(a, from_env, env_of({{"ROCEGUARD_DATAPLANE_DSCP", "64"}, {"ROCEGUARD_DATAPLANE_XDP_MODE", "offload"}}));
  apply_flags(b, {{"dataplane.dscp", {"64"}}, {"dataplane.xdp_mode", {"offload"}}}, from_flag);
  ASSERT_EQ(from_env.errors.size(), 2u);
  ASSERT_EQ(from_flag.errors.size(), 2u);
  EXPECT_EQ(from_env.errors[0], "ROCEGUARD_DATAPLANE_DSCP: 64 is out of range 0..63");
  EXPECT_EQ(from_flag.errors[0], "--dscp: 64 is out of range 0..63");
  EXPECT_EQ(from_env.errors[1], "ROCEGUARD_DATAPLANE_XDP_MODE: \"offload\" is not one of \"native\", \"skb\"");
  EXPECT_EQ(from_flag.errors[1], "--xdp-mode: \"offload\" is not one of \"native\", \"skb\"");

  ConfigProblems p;
  Config c;
  apply_environment(c, p,
                    env_of({{"ROCEGUARD_METRICS_PER_QP", "maybe"},
                            {"ROCEGUARD_NIC_RETRY_CNT", "9"},
                            {"ROCEGUARD_TUNNEL_PEER", R"([{ name = "w", local = "192.0.2.1", remote = "2001:db8::1", vni = 1 }])"}}));
  EXPECT_TRUE(has_error(p, "ROCEGUARD_METRICS_PER_QP: expected true or false, got \"maybe\"")) << p.errors.front();
  EXPECT_TRUE(has_error(p, "ROCEGUARD_NIC_RETRY_CNT: 9 is out of range 0..7"));
  EXPECT_TRUE(has_error(p, "ROCEGUARD_TUNNEL_PEER[0].remote: \"2001:db8::1\" and local"));
}

// Every option's path, from the table.
std::set<std::string> table_paths() {
  std::set<std::string> out;
  for (const auto& o : options()) out.insert(std::string(o.path));
  return out;
}

void flatten(const nlohmann::json& j, const std::string& prefix, std::set<std::string>& out) {
  if (!j.is_object()) {
    out.insert(prefix);
    return;
  }
  for (const auto& [k, v] : j.items()) flatten(v, prefix.empty() ? k : prefix + "." + k, out);
}

// The same configuration written back as TOML (JSON null: not written).
void to_toml(const nlohmann::json& j, toml::table& out) {
  for (const auto& [k, v] : j.items()) {
    if (v.is_object()) {
      toml::table t;
      to_toml(v, t);
      out.insert(k, t);
    } else if (v.is_array()) {
      toml::array a;
      for (const auto& e : v) {
        if (e.is_object()) {
          toml::table t;
          to_toml(e, t);
          a.push_back(t);
        } else {
          a.push_back(e.get<std::string>());
        }
      }
      out.insert(k, a);
    } else if (v.is_boolean()) {
      out.insert(k, v.get<bool>());
    } else if (v.is_number()) {
      out.insert(k, v.get<int64_t>());
    } else if (v.is_string()) {
      out.insert(k, v.get<std::string>());
    }
  }
}

std::string run_help() {
  std::string out;
  FILE* f = popen((std::string(RG_BIN) + " run --help 2>&1").c_str(), "r");
  if (!f) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  pclose(f);
  return out;
}

TEST(OptionSet, HelpReaderJsonAndEnvironmentAgree) {
  const std::set<std::string> paths = table_paths();
  ASSERT_GT(paths.size(), 20u);

  // to_json: exactly the table's options.
  ConfigProblems p;
  Config full = parse_config_string(R"(
interfaces = ["eth1"]
[[tunnel.peer]]
name = "west"
local = "192.0.2.1"
remote = "203.0.113.1"
vni = 7
mtu = 1400
routes = ["198.51.100.0/24"]
[nic]
gid_index = 3
)", p);
  ASSERT_TRUE(p.ok()) << p.errors.front();
  const nlohmann::json j = full.to_json();
  std::set<std::string> json_paths;
  flatten(j, "", json_paths);
  EXPECT_EQ(json_paths, paths);
  std::set<std::string> peer_keys, field_keys;
  for (const auto& [k, v] : j["tunnel"]["peer"][0].items()) peer_keys.insert(k);
  for (const auto& f : peer_fields()) field_keys.insert(std::string(f.key));
  EXPECT_EQ(peer_keys, field_keys);

  // The reader: takes every key to_json writes and gives the same back ...
  toml::table doc;
  to_toml(j, doc);
  ConfigProblems again;
  Config reread = parse_config(doc, again);
  ASSERT_TRUE(again.ok()) << again.errors.front();
  EXPECT_EQ(reread.to_json(), j);
  // ... reads each (a wrong type is refused under that key) and knows no other.
  for (const auto& path : paths) {
    const auto dot = path.find('.');
    const std::string text = dot == std::string::npos
                                 ? path + " = {}\n"
                                 : "[" + path.substr(0, dot) + "]\n" + path.substr(dot + 1) + " = {}\n";
    ConfigProblems wrong;
    parse_config_string(text, wrong);
    ASSERT_FALSE(wrong.errors.empty()) << path;
    EXPECT_EQ(wrong.errors[0].rfind(path + ":", 0), 0u) << wrong.errors[0];
    ConfigProblems unknown;
    parse_config_string(dot == std::string::npos ? path + "x = 1\n"
                                                 : "[" + path.substr(0, dot) + "]\n" + path.substr(dot + 1) + "x = 1\n",
                        unknown);
    ASSERT_EQ(unknown.errors.size(), 1u) << path;
    EXPECT_NE(unknown.errors[0].find(path + "x: unknown key"), std::string::npos) << unknown.errors[0];
  }

  // The environment: ROCEGUARD_<PATH> for every option, each one read.
  std::set<std::string> env_named;
  for (const auto& path : paths) {
    std::string var = "ROCEGUARD_" + path;
    for (auto& c : var) c = c == '.' ? '_' : static_cast<char>(toupper(c));
    ConfigProblems bad;
    Config c;
    apply_environment(c, bad, env_of({{var, "a/b"}}));
    ASSERT_FALSE(bad.errors.empty()) << var << " is not read";
    EXPECT_EQ(bad.errors[0].rfind(var, 0), 0u) << bad.errors[0];
    env_named.insert(path);
  }
  EXPECT_EQ(env_named, paths);

  // --help of run: every option with its variable, and the table's flags.
  const std::string help = run_help();
  std::set<std::string> help_paths;
  const std::regex row(R"(^  ([a-z_.]+)  (ROCEGUARD_[A-Z_]+)\b)");
  std::istringstream lines(help);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, row)) continue;
    help_paths.insert(m[1]);
    const Option* o = find_option(m[1].str());
    ASSERT_NE(o, nullptr) << line;
    EXPECT_EQ(o->env(), m[2].str());
  }
  EXPECT_EQ(help_paths, paths) << help;
  std::set<std::string> help_flags, table_flags;
  const std::regex flag(R"(--[a-z][a-z-]+)");
  const std::string options_part = help.substr(0, help.find("Configuration options"));
  for (std::sregex_iterator it(options_part.begin(), options_part.end(), flag), end; it != end; ++it)
    help_flags.insert(it->str());
  for (const auto& o : options())
    if (o.flag_of == FlagOf::kDaemon) table_flags.insert(o.long_flag());
  for (const char* other : {"--help", "--config", "--pin-path", "--reset-state", "--force", "--verbose"})
    table_flags.insert(other);
  EXPECT_EQ(help_flags, table_flags) << options_part;
}

TEST(OptionSet, ReadmeTableIsGenerated) {
  std::ifstream in(RG_OPERATOR_README);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  const std::string begin = "<!-- options: generated by `roceguard config options --markdown` -->\n";
  const std::string end = "<!-- options: end -->";
  const auto from = text.find(begin), to = text.find(end);
  ASSERT_NE(from, std::string::npos) << RG_OPERATOR_README;
  ASSERT_NE(to, std::string::npos);
  EXPECT_EQ(text.substr(from + begin.size(), to - from - begin.size()), options_markdown())
      << "regenerate the table with `roceguard config options --markdown`";
}

// The shipped file names no interface on purpose (where roceguard attaches
// is the administrator's choice): that is its one problem, so run refuses
// it, and naming an interface is all it takes to pass.
TEST(Validation, PackagedConfigLacksOnlyAnInterface) {
  ConfigProblems p;
  Config cfg = parse_config_file(RG_DEFAULT_CONFIG, p);
  check_config(cfg, true, p);
  EXPECT_TRUE(p.missing.empty() && p.absent_interfaces.empty());
  ASSERT_EQ(p.errors.size(), 1u) << (p.errors.empty() ? "accepted" : p.errors.back());
  EXPECT_TRUE(has_error(p, "interfaces: none given")) << p.errors.front();

  ConfigProblems named;
  Config edited = parse_config_file(RG_DEFAULT_CONFIG, named);
  edited.interfaces = {"eth1"};
  check_config(edited, true, named);
  EXPECT_TRUE(named.ok()) << (named.errors.empty() ? std::string("a missing interface") : named.errors.front());
}

TEST(Validation, RunsWhatRunRefuses) {
  auto offline_errors = [](std::string_view text) {
    ConfigProblems p;
    Config cfg = parse_config_string(text, p);
    check_config(cfg, true, p);
    return p;
  };
  EXPECT_TRUE(has_error(offline_errors("interfaces = []\n"), "interfaces: none given"));
  ConfigProblems v6 = offline_errors("interfaces = [\"lo\"]\n[metrics]\nlisten = \"[::]:9741\"\n");
  ConfigSources sources;
  sources.environment = false;
  sources.flags = {{"interfaces", {"lo"}}, {"metrics.listen", {"[::]:9741"}}};
  bool run_refuses = false;
  try {
    load_config(sources);
  } catch (const Error& e) {
    run_refuses = true;
    EXPECT_NE(std::string(e.what()).find("metrics.listen"), std::string::npos) << e.what();
  }
  EXPECT_EQ(run_refuses, !v6.ok()) << "config check and run disagree on [::]:9741";
}

// The probes' address: none by default, any numeric host:port or [v6]:port
// like the scrapes', never the scrapes' own.
TEST(Validation, HealthListenIsItsOwnAddress) {
  EXPECT_EQ(Config{}.health_listen, "");
  EXPECT_EQ(parse_ok("[metrics]\nhealth_listen = \"127.0.0.1:9742\"\n").health_listen, "127.0.0.1:9742");
  ConfigProblems named;
  parse_config_string("[metrics]\nhealth_listen = \"localhost:9742\"\n", named);
  EXPECT_TRUE(has_error(named, "metrics.health_listen: \"localhost\" is not an IPv4 address"));
  auto offline = [](std::string_view metrics, std::string_view health) {
    ConfigProblems p;
    Config cfg = parse_config_string("interfaces = [\"lo\"]\n[metrics]\nlisten = \"" + std::string(metrics) +
                                         "\"\nhealth_listen = \"" + std::string(health) + "\"\n",
                                     p);
    check_config(cfg, true, p);
    return p;
  };
  EXPECT_TRUE(offline("127.0.0.1:9741", "127.0.0.1:9742").ok());
  EXPECT_TRUE(offline("127.0.0.1:9741", "[::1]:9742").ok());
  EXPECT_TRUE(offline("127.0.0.1:9741", "127.0.0.2:9741").ok()) << "another address, the same port";
  for (auto [metrics, health] : {std::pair{"127.0.0.1:9741", "127.0.0.1:9741"}, std::pair{"0.0.0.0:9741", "127.0.0.1:9741"},
                                 std::pair{"127.0.0.1:9741", "0.0.0.0:9741"}})
    EXPECT_TRUE(has_error(offline(metrics, health), "metrics.health_listen: ")) << metrics << " " << health;
  ConfigSources flags;
  flags.environment = false;
  flags.flags = {{"interfaces", {"lo"}}, {"metrics.health_listen", {"192.0.2.77:9742"}}};
  try {
    load_config(flags);
    ADD_FAILURE() << "an address this host does not have was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("metrics.health_listen: 192.0.2.77 is not an address of this host"),
              std::string::npos) << e.what();
  }
}

TEST(Validation, PeerLocalMustBeThisHost) {
  ConfigProblems p;
  Config cfg = parse_config_string(R"(
interfaces = ["lo"]
[[tunnel.peer]]
name = "here"
local = "127.0.0.1"
remote = "203.0.113.1"
vni = 1
[[tunnel.peer]]
name = "elsewhere"
local = "192.0.2.77"
remote = "203.0.113.2"
vni = 2
)", p);
  check_config(cfg, false, p);
  ASSERT_EQ(p.missing.size(), 1u);
  EXPECT_EQ(p.missing[0].rfind("tunnel.peer[1].local: 192.0.2.77 is not an address of this host", 0), 0u) << p.missing[0];
  ConfigProblems offline;
  check_config(cfg, true, offline);
  EXPECT_TRUE(offline.ok());
}

// A peer's key_file: named relative to the configuration's directory, and
// refused by the checks (as by run) unless it holds one or two 128-bit keys
// in hex and no one but its owner may read or write it.
TEST(Validation, PeerKeyFileMustHoldKeysOnlyItsOwnerReads) {
  char dir_template[] = "/tmp/rg-keyfile-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } cleanup{dir};
  auto write = [&](const std::string& name, const std::string& text, mode_t mode) {
    std::ofstream(dir + "/" + name) << text;
    ASSERT_EQ(chmod((dir + "/" + name).c_str(), mode), 0);
  };
  write("one.key", "000102030405060708090a0b0c0d0e0f\n", 0600);
  write("two.key", "000102030405060708090a0b0c0d0e0f\nF0E1D2C3B4A5968778695A4B3C2D1E0F\n", 0400);
  write("shared.key", "000102030405060708090a0b0c0d0e0f\n", 0640);
  write("short.key", "000102030405060708090a0b0c0d0e\n", 0600);
  write("three.key",
        "000102030405060708090a0b0c0d0e0f\n000102030405060708090a0b0c0d0e0f\n000102030405060708090a0b0c0d0e0f\n",
        0600);
  write("not-hex.key", "000102030405060708090a0b0c0d0eXY\n", 0600);
  write("empty.key", "", 0600);
  auto check = [&](const std::string& file) {
    std::ofstream(dir + "/roceguard.toml") << "interfaces = [\"lo\"]\n[[tunnel.peer]]\nname = \"west\"\n"
                                              "local = \"127.0.0.1\"\nremote = \"203.0.113.1\"\nvni = 1\n"
                                              "key_file = \"" << file << "\"\n";
    ConfigProblems p;
    Config cfg = parse_config_file(dir + "/roceguard.toml", p);
    check_config(cfg, false, p);
    return std::make_pair(cfg, p);
  };
  auto [one, ok] = check("one.key");
  EXPECT_TRUE(ok.ok()) << (ok.errors.empty() ? "" : ok.errors.front());
  ASSERT_EQ(one.peers.size(), 1u);
  EXPECT_EQ(one.peers[0].key_file, dir + "/one.key") << "relative to the configuration's directory";
  EXPECT_EQ(read_key_file(dir + "/one.key").size(), 1u);
  const std::vector<TunnelKey> both = read_key_file(dir + "/two.key");
  ASSERT_EQ(both.size(), 2u) << "the current key and the next";
  EXPECT_EQ(both[1][0], 0xf0);
  EXPECT_EQ(both[1][15], 0x0f);
  EXPECT_TRUE(check(dir + "/two.key").second.ok()) << "an absolute path";
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"absent.key", "tunnel.peer[0].key_file: cannot be read: No such file or directory"},
      {"shared.key", "tunnel.peer[0].key_file: may be read or written by group or others (mode 0640): chmod 600 it"},
      {"short.key", "tunnel.peer[0].key_file: must hold one or two keys of 32 hexadecimal digits"},
      {"three.key", "tunnel.peer[0].key_file: must hold one or two keys of 32 hexadecimal digits"},
      {"not-hex.key", "tunnel.peer[0].key_file: must hold one or two keys of 32 hexadecimal digits"},
      {"empty.key", "tunnel.peer[0].key_file: must hold one or two keys of 32 hexadecimal digits"},
  };
  for (const auto& [file, want] : refused) {
    const ConfigProblems p = check(file).second;
    EXPECT_TRUE(has_error(p, want)) << file << ": " << (p.errors.empty() ? "no error" : p.errors.front());
  }
  ConfigProblems empty;
  parse_config_string("[[tunnel.peer]]\nname = \"west\"\nkey_file = \"\"\n", empty);
  EXPECT_TRUE(has_error(empty, "tunnel.peer[0].key_file: empty")) << "no key is said by leaving it out";
  // Offline (config check --offline) looks at no file of this machine.
  ConfigProblems offline;
  check_config(check("absent.key").first, true, offline);
  EXPECT_TRUE(offline.ok());
}

// dataplane.skb_priority: 0 (the default) leaves skb->priority alone; any
// u32 reaches the programs, an HTB class id written in hex as TOML allows.
TEST(SkbPriority, DefaultZeroAnyU32ReachesRodata) {
  EXPECT_EQ(Config{}.rodata().skb_priority, 0u);
  EXPECT_EQ(parse_ok("[dataplane]\nskb_priority = 0x10010\n").rodata().skb_priority, 0x10010u);
  EXPECT_EQ(parse_ok("[dataplane]\nskb_priority = 0xffffffff\n").rodata().skb_priority, 0xffffffffu);
  auto errs = errors_of("[dataplane]\nskb_priority = 0x100000000\n");
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_EQ(errs[0], "dataplane.skb_priority: 4294967296 is out of range 0..4294967295");
  EXPECT_EQ(errors_of("[dataplane]\nskb_priority = -1\n").size(), 1u);
}

// dataplane.xdp_forward: off by default; on, it reaches the programs, puts
// the ingress program at XDP where auto would pick TC ingress (a veth), and
// refuses a configured TC ingress hook.
TEST(XdpForward, OffByDefaultOnReachesRodataAndTakesXdp) {
  EXPECT_FALSE(Config{}.xdp_forward);
  EXPECT_EQ(Config{}.rodata().flags & RG_CFG_F_XDP_FORWARD, 0u);
  const Config on = parse_ok("[dataplane]\nxdp_forward = true\n");
  EXPECT_EQ(on.rodata().flags & RG_CFG_F_XDP_FORWARD, static_cast<__u32>(RG_CFG_F_XDP_FORWARD));
  EXPECT_EQ(on.rodata().flags & RG_CFG_F_DEFAULT, static_cast<__u32>(RG_CFG_F_DEFAULT));
  Config skb = parse_ok("[dataplane]\nxdp_forward = true\nxdp_mode = \"skb\"\n");
  EXPECT_EQ(planned_ingress_hook(skb, "lo"), IngressHook::kXdp) << "auto takes XDP for the fast path";
  skb.xdp_forward = false;
  EXPECT_EQ(planned_ingress_hook(skb, "lo"), IngressHook::kTc) << "and TC ingress without it";
  auto errs = errors_of("[dataplane]\nxdp_forward = true\ningress_hook = \"tc\"\n");
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_NE(errs[0].find("dataplane.xdp_forward"), std::string::npos) << errs[0];
  EXPECT_TRUE(errors_of("[dataplane]\nxdp_forward = true\ningress_hook = \"xdp\"\n").empty());
}

// The loss shield: tunnel.shield for every peer, a peer's own shield over
// it, both in the JSON (config check --print, the attach record) and in
// the rg_peer flags the map writer stores.
constexpr std::string_view kTwoPeers = R"(
[tunnel]
sequence = true
%s
[[tunnel.peer]]
name = "west"
local = "192.0.2.1"
remote = "203.0.113.1"
vni = 1
%s
[[tunnel.peer]]
name = "east"
local = "192.0.2.1"
remote = "203.0.113.2"
vni = 2
)";

std::string two_peers(const std::string& tunnel, const std::string& west) {
  std::string text(kTwoPeers);
  text.replace(text.find("%s"), 2, tunnel);
  text.replace(text.find("%s"), 2, west);
  return text;
}

TEST(Shield, OffByDefaultPeersInheritTheTunnelsAndMayOverrideIt) {
  Config plain = parse_ok(two_peers("", ""));
  EXPECT_EQ(plain.tunnel_shield, Shield::kOff);
  for (const auto& peer : plain.peers) {
    EXPECT_EQ(peer.shield, Shield::kOff);
    EXPECT_EQ(shield_flags(peer.shield), 0);
  }
  EXPECT_EQ(plain.to_json()["tunnel"]["shield"], "off");
  EXPECT_EQ(plain.to_json()["tunnel"]["peer"][0]["shield"], "off");

  Config all = parse_ok(two_peers("shield = \"all\"", ""));
  ASSERT_EQ(all.peers.size(), 2u);
  EXPECT_EQ(all.peers[0].shield, Shield::kAll);
  EXPECT_EQ(all.peers[1].shield, Shield::kAll);
  EXPECT_EQ(shield_flags(all.peers[0].shield), RG_PEER_F_SHIELD_ALL);

  Config mixed = parse_ok(two_peers("shield = \"control\"", "shield = \"off\""));
  EXPECT_EQ(mixed.peers[0].shield, Shield::kOff) << "the peer's own shield beats tunnel.shield";
  EXPECT_EQ(mixed.peers[1].shield, Shield::kControl);
  EXPECT_EQ(shield_flags(mixed.peers[1].shield), RG_PEER_F_SHIELD_CONTROL);
  const nlohmann::json j = mixed.to_json();
  EXPECT_EQ(j["tunnel"]["shield"], "control");
  EXPECT_EQ(j["tunnel"]["peer"][0]["shield"], "off");
  EXPECT_EQ(j["tunnel"]["peer"][1]["shield"], "control");
  EXPECT_NE(mixed.hash(), parse_ok(two_peers("shield = \"control\"", "")).hash());

  // Inherited from the environment as from the file: finish_config decides.
  ConfigProblems p;
  Config env = parse_config_string(two_peers("", "shield = \"control\""), p);
  apply_environment(env, p, env_of({{"ROCEGUARD_TUNNEL_SHIELD", "all"}}));
  finish_config(env, p);
  ASSERT_TRUE(p.ok()) << p.errors.front();
  EXPECT_EQ(env.peers[0].shield, Shield::kControl);
  EXPECT_EQ(env.peers[1].shield, Shield::kAll);
}

// Where the copies go: the original's 5-tuple unless configured, tunnel-
// wide or per peer; the path's flag goes with any shield, "auto" included.
TEST(Shield, PathIsTheSameUnlessConfiguredAndPeersMayOverrideIt) {
  Config plain = parse_ok(two_peers("shield = \"all\"", ""));
  EXPECT_EQ(plain.tunnel_shield_path, ShieldPath::kSame);
  for (const auto& peer : plain.peers) {
    EXPECT_EQ(peer.shield_path, ShieldPath::kSame);
    EXPECT_EQ(shield_flags(peer.shield, peer.shield_path), RG_PEER_F_SHIELD_ALL);
  }
  EXPECT_EQ(plain.to_json()["tunnel"]["shield_path"], "same");

  Config port = parse_ok(two_peers("shield = \"control\"\nshield_path = \"port\"", "shield_path = \"same\""));
  EXPECT_EQ(port.peers[0].shield_path, ShieldPath::kSame) << "the peer's own path beats tunnel.shield_path";
  EXPECT_EQ(port.peers[1].shield_path, ShieldPath::kPort);
  EXPECT_EQ(shield_flags(port.peers[1].shield, port.peers[1].shield_path),
            RG_PEER_F_SHIELD_CONTROL | RG_PEER_F_SHIELD_OTHER_PORT);
  EXPECT_EQ(shield_flags(Shield::kAuto, ShieldPath::kPort), RG_PEER_F_SHIELD_OTHER_PORT)
      << "auto's copies take the configured path too";
  const nlohmann::json j = port.to_json();
  EXPECT_EQ(j["tunnel"]["shield_path"], "port");
  EXPECT_EQ(j["tunnel"]["peer"][0]["shield_path"], "same");
  EXPECT_EQ(j["tunnel"]["peer"][1]["shield_path"], "port");

  ConfigProblems p;
  parse_config_string(two_peers("shield_path = \"other\"", ""), p);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.errors.front().find("tunnel.shield_path"), std::string::npos) << p.errors.front();
}

// "auto" is the daemon's to turn on: no flag in rg_peer.flags, and the
// threshold it decides by.
TEST(Shield, AutoIsTheDaemonsWithItsThreshold) {
  Config c = parse_ok(two_peers("shield = \"auto\"", ""));
  ASSERT_EQ(c.peers.size(), 2u);
  EXPECT_EQ(c.peers[0].shield, Shield::kAuto);
  EXPECT_EQ(shield_flags(Shield::kAuto), 0) << "off until `roceguard run` turns it on (rg_peer_ctl)";
  EXPECT_EQ(c.to_json()["tunnel"]["peer"][1]["shield"], "auto");
  EXPECT_EQ(c.shield_auto_loss_ppm, 500u) << "0.05 %";
  Config own = parse_ok(two_peers("shield_auto_loss_ppm = 2000", "shield = \"auto\""));
  EXPECT_EQ(own.peers[0].shield, Shield::kAuto);
  EXPECT_EQ(own.peers[1].shield, Shield::kOff);
  EXPECT_EQ(own.shield_auto_loss_ppm, 2000u);
  for (const char* bad : {"shield_auto_loss_ppm = 0", "shield_auto_loss_ppm = 1000001"}) {
    auto errs = errors_of(two_peers(bad, ""));
    ASSERT_EQ(errs.size(), 1u) << bad;
    EXPECT_EQ(errs[0].rfind("tunnel.shield_auto_loss_ppm: ", 0), 0u) << errs[0];
  }
  ConfigProblems p;
  Config env;
  apply_environment(env, p, env_of({{"ROCEGUARD_TUNNEL_SHIELD", "auto"}}));
  EXPECT_TRUE(p.errors.empty()) << p.errors.front();
  EXPECT_EQ(env.tunnel_shield, Shield::kAuto);
  auto errs = errors_of(two_peers("shield = \"twice\"", ""));
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_EQ(errs[0], "tunnel.shield: \"twice\" is not one of \"off\", \"control\", \"all\", \"auto\"");
}

TEST(Shield, NeedsTheSequenceOptionNamingWhereItWasSet) {
  auto without_sequence = [](std::string text) {
    text.erase(text.find("sequence = true\n"), 16);
    return text;
  };
  auto errs = errors_of(without_sequence(two_peers("shield = \"all\"", "")));
  ASSERT_EQ(errs.size(), 1u) << "one message for the peers that inherit it";
  EXPECT_EQ(errs[0].rfind("tunnel.shield: \"all\" needs tunnel.sequence = true", 0), 0u) << errs[0];
  errs = errors_of(without_sequence(two_peers("", "shield = \"control\"")));
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_EQ(errs[0].rfind("tunnel.peer[0].shield: \"control\" needs tunnel.sequence = true", 0), 0u) << errs[0];
  // Only a peer whose shield is on needs it: east still inherits "all".
  EXPECT_EQ(errors_of(without_sequence(two_peers("shield = \"all\"", "shield = \"off\""))).size(), 1u);
  EXPECT_TRUE(errors_of(without_sequence(two_peers("", "shield = \"off\""))).empty());
  EXPECT_TRUE(errors_of("[tunnel]\nshield = \"all\"\n").empty()) << "no peer, nothing shielded";
}

// The congestion loop's reports ride in the option's extension.
TEST(Congestion, NeedsTheSequenceOptionAndSetsItsFlag) {
  auto errs = errors_of("[tunnel]\ncongestion = \"on\"\n");
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_EQ(errs[0].rfind("tunnel.congestion: \"on\" needs tunnel.sequence = true", 0), 0u) << errs[0];
  EXPECT_TRUE(errors_of("[tunnel]\nsequence = true\ncongestion = \"on\"\n").empty());
  ConfigProblems p;
  Config on = parse_config_string("[tunnel]\nsequence = true\ncongestion = \"on\"\n", p);
  EXPECT_TRUE(on.tunnel_congestion);
  EXPECT_NE(on.rodata().flags & RG_CFG_F_CONGESTION, 0u);
  Config off = parse_config_string("[tunnel]\nsequence = true\n", p);
  EXPECT_FALSE(off.tunnel_congestion);
  EXPECT_EQ(off.rodata().flags & RG_CFG_F_CONGESTION, 0u);
}

}  // namespace
}  // namespace rg
