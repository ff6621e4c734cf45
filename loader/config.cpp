#include "config.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <functional>
#include <set>
#include <sstream>

#include "error.h"
#include "nic/profile.h"

namespace rg {
namespace {

std::string_view type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::date: return "a date";
    case toml::node_type::time: return "a time";
    case toml::node_type::date_time: return "a date-time";
    default: return "nothing";
  }
}

std::string in_quotes(std::string_view s) { return "\"" + std::string(s) + "\""; }

// A key as the file spells it: bare where TOML allows, quoted otherwise, so
// an empty or odd key ("" = 1) is still named in the message.
std::string key_text(std::string_view k) {
  const bool bare = !k.empty() && std::all_of(k.begin(), k.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '_' || c == '-';
  });
  return bare ? std::string(k) : in_quotes(k);
}

// One table being read: remembers which keys were consumed so that any
// other key is reported as unknown, with the full dotted path.
class Reader {
 public:
  Reader(const toml::table& t, std::string path, ConfigProblems& p)
      : t_(t), path_(std::move(path)), p_(p) {}

  std::string key(std::string_view k) const {
    return path_.empty() ? std::string(k) : path_ + "." + std::string(k);
  }

  const toml::node* get(std::string_view k) {
    seen_.insert(std::string(k));
    return t_.get(k);
  }

  void error(const std::string& key, const std::string& msg) { p_.errors.push_back(key + ": " + msg); }

  void integer(std::string_view k, uint32_t& out, int64_t lo, int64_t hi) {
    const toml::node* n = get(k);
    if (!n) return;
    const auto* v = n->as_integer();
    if (!v) {
      error(key(k), "expected an integer, got " + std::string(type_name(*n)));
      return;
    }
    int64_t x = v->get();
    if (x < lo || x > hi) {
      error(key(k), std::to_string(x) + " is out of range " + std::to_string(lo) + ".." +
                        std::to_string(hi));
      return;
    }
    out = static_cast<uint32_t>(x);
  }

  void boolean(std::string_view k, bool& out) {
    const toml::node* n = get(k);
    if (!n) return;
    const auto* v = n->as_boolean();
    if (!v) {
      error(key(k), "expected true or false, got " + std::string(type_name(*n)));
      return;
    }
    out = v->get();
  }

  bool string(std::string_view k, std::string& out) {
    const toml::node* n = get(k);
    if (!n) return false;
    const auto* v = n->as_string();
    if (!v) {
      error(key(k), "expected a string, got " + std::string(type_name(*n)));
      return false;
    }
    out = v->get();
    return true;
  }

  const toml::table* table(std::string_view k) {
    const toml::node* n = get(k);
    if (!n) return nullptr;
    if (!n->is_table()) {
      error(key(k), "expected a table, got " + std::string(type_name(*n)));
      return nullptr;
    }
    return n->as_table();
  }

  const toml::array* array(std::string_view k) {
    const toml::node* n = get(k);
    if (!n) return nullptr;
    if (!n->is_array()) {
      error(key(k), "expected an array, got " + std::string(type_name(*n)));
      return nullptr;
    }
    return n->as_array();
  }

  // Call after all get()s: anything not asked for is a typo or an option
  // this version does not have; silently ignoring it would hide both.
  void reject_unknown() {
    for (const auto& [k, v] : t_) {
      (void)v;
      if (!seen_.count(std::string(k.str())))
        error(key(key_text(k.str())), "unknown key (check the spelling against the commented default roceguard.toml)");
    }
  }

 private:
  const toml::table& t_;
  std::string path_;
  ConfigProblems& p_;
  std::set<std::string> seen_;
};

bool valid_ifname(const std::string& name, std::string& why) {
  if (name.empty()) {
    why = "interface name is empty";
    return false;
  }
  if (name.size() >= IFNAMSIZ) {
    why = in_quotes(name) + " is longer than " + std::to_string(IFNAMSIZ - 1) + " characters";
    return false;
  }
  for (char c : name)
    if (c == '/' || c == ':' || isspace(static_cast<unsigned char>(c))) {
      why = in_quotes(name) + " is not a valid interface name";
      return false;
    }
  return true;
}

bool valid_listen(const std::string& s, std::string& why) {
  std::string host, port;
  if (!s.empty() && s[0] == '[') {
    auto close = s.find(']');
    if (close == std::string::npos || close + 1 >= s.size() || s[close + 1] != ':') {
      why = in_quotes(s) + " is not host:port or [v6]:port";
      return false;
    }
    host = s.substr(1, close - 1);
    port = s.substr(close + 2);
    in6_addr a6;
    if (inet_pton(AF_INET6, host.c_str(), &a6) != 1) {
      why = in_quotes(host) + " is not an IPv6 address";
      return false;
    }
  } else {
    auto colon = s.rfind(':');
    if (colon == std::string::npos || s.find(':') != colon) {
      why = in_quotes(s) + " is not host:port or [v6]:port";
      return false;
    }
    host = s.substr(0, colon);
    port = s.substr(colon + 1);
    in_addr a4;
    if (inet_pton(AF_INET, host.c_str(), &a4) != 1) {
      why = in_quotes(host) + " is not an IPv4 address (use [addr]:port for IPv6)";
      return false;
    }
  }
  unsigned p = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (ec != std::errc() || end != port.data() + port.size() || port.empty() || p > 65535) {
    why = "port " + in_quotes(port) + " is not a number in 0..65535";
    return false;
  }
  return true;
}

bool set_mtu_policy(const std::string& s, rg_mtu_policy& out) {
  if (s == "pass") out = RG_MTU_PASS;
  else if (s == "drop") out = RG_MTU_DROP;
  else return false;
  return true;
}

bool set_xdp_mode(const std::string& s, XdpMode& out) {
  if (s == "native") out = XdpMode::kNative;
  else if (s == "skb") out = XdpMode::kSkb;
  else return false;
  return true;
}

void add_interface(Config& cfg, const std::string& key, const std::string& name,
                   ConfigProblems& p) {
  std::string why;
  if (!valid_ifname(name, why)) {
    p.errors.push_back(key + ": " + why);
    return;
  }
  for (const auto& i : cfg.interfaces)
    if (i == name) {
      p.errors.push_back(key + ": interface " + in_quotes(name) + " is listed twice");
      return;
    }
  cfg.interfaces.push_back(name);
}

void parse_interfaces(Reader& root, Config& cfg, ConfigProblems& p) {
  const toml::array* list = root.array("interfaces");
  const toml::array* tables = root.array("interface");
  if (list && tables)
    p.errors.push_back("interfaces: give either interfaces = [...] or [[interface]] tables, not both");
  if (list) {
    for (size_t i = 0; i < list->size(); ++i) {
      std::string key = "interfaces[" + std::to_string(i) + "]";
      const auto* s = (*list)[i].as_string();
      if (!s) {
        p.errors.push_back(key + ": expected a string, got " + std::string(type_name((*list)[i])));
        continue;
      }
      add_interface(cfg, key, s->get(), p);
    }
  }
  if (tables) {
    for (size_t i = 0; i < tables->size(); ++i) {
      std::string key = "interface[" + std::to_string(i) + "]";
      const auto* t = (*tables)[i].as_table();
      if (!t) {
        p.errors.push_back(key + ": expected a table, got " + std::string(type_name((*tables)[i])));
        continue;
      }
      Reader r(*t, key, p);
      std::string name;
      if (!r.string("name", name)) {
        if (!t->get("name")) p.errors.push_back(key + ".name: missing");
      } else {
        add_interface(cfg, key + ".name", name, p);
      }
      r.reject_unknown();
    }
  }
}

void parse_peer(const toml::table& t, const std::string& key, Config& cfg, ConfigProblems& p) {
  Reader r(t, key, p);
  PeerConfig peer;
  peer.mtu = cfg.tunnel_mtu;
  bool named = r.string("name", peer.name);
  if (!named && !t.get("name")) r.error(key + ".name", "missing");

  std::string local, remote;
  bool have_local = r.string("local", local), have_remote = r.string("remote", remote);
  if (!have_local && !t.get("local")) r.error(key + ".local", "missing (outer source address)");
  if (!have_remote && !t.get("remote")) r.error(key + ".remote", "missing (outer destination address)");
  if (have_local) {
    if (auto a = parse_address(local)) peer.local = *a;
    else r.error(key + ".local", in_quotes(local) + " is not an IPv4 or IPv6 address");
  }
  if (have_remote) {
    if (auto a = parse_address(remote)) peer.remote = *a;
    else r.error(key + ".remote", in_quotes(remote) + " is not an IPv4 or IPv6 address");
  }
  if (peer.local.family && peer.remote.family && peer.local.family != peer.remote.family)
    r.error(key + ".remote", in_quotes(remote) + " and local " + in_quotes(local) +
                                 " mix IPv4 and IPv6; one tunnel uses one family");

  const toml::node* vni = t.get("vni");
  if (!vni) r.error(key + ".vni", "missing");
  r.integer("vni", peer.vni, 0, kMaxVni);

  int family = peer.remote.family ? peer.remote.family : peer.local.family;
  uint32_t min_mtu = family == AF_INET6 ? kMinMtuV6 : kMinMtuV4;
  r.integer("mtu", peer.mtu, min_mtu, kMaxMtu);
  if (!t.get("mtu") && peer.mtu < min_mtu)
    r.error(key + ".mtu", "tunnel.mtu " + std::to_string(peer.mtu) +
                              " is below the IPv6 minimum " + std::to_string(min_mtu) +
                              "; set a larger mtu for this peer");

  if (const toml::array* routes = r.array("routes")) {
    for (size_t i = 0; i < routes->size(); ++i) {
      std::string rkey = key + ".routes[" + std::to_string(i) + "]";
      const auto* s = (*routes)[i].as_string();
      if (!s) {
        r.error(rkey, "expected a string, got " + std::string(type_name((*routes)[i])));
        continue;
      }
      std::string why;
      auto pfx = parse_prefix(s->get(), why);
      if (!pfx) {
        r.error(rkey, why);
        continue;
      }
      peer.routes.push_back(*pfx);
    }
  }
  r.reject_unknown();
  cfg.peers.push_back(std::move(peer));
}

// Uniqueness across peers: each would otherwise silently shadow another in
// the maps (a route or decap key can point at one peer only).
void check_peers(const Config& cfg, ConfigProblems& p) {
  if (cfg.peers.size() > RG_MAX_PEERS)
    p.errors.push_back("tunnel.peer: " + std::to_string(cfg.peers.size()) +
                       " peers, at most " + std::to_string(RG_MAX_PEERS));
  size_t nroutes = 0;
  for (size_t i = 0; i < cfg.peers.size(); ++i) {
    const auto& a = cfg.peers[i];
    std::string key = "tunnel.peer[" + std::to_string(i) + "]";
    nroutes += a.routes.size();
    for (size_t j = 0; j < i; ++j) {
      const auto& b = cfg.peers[j];
      std::string other = "tunnel.peer[" + std::to_string(j) + "]";
      if (!a.name.empty() && a.name == b.name)
        p.errors.push_back(key + ".name: " + in_quotes(a.name) + " is already used by " + other);
      if (a.vni == b.vni)
        p.errors.push_back(key + ".vni: " + std::to_string(a.vni) + " is already used by " + other);
    }
    for (size_t r = 0; r < a.routes.size(); ++r) {
      std::string rkey = key + ".routes[" + std::to_string(r) + "]";
      for (size_t j = 0; j <= i; ++j) {
        const auto& b = cfg.peers[j];
        size_t end = j == i ? r : b.routes.size();
        for (size_t s = 0; s < end; ++s) {
          const auto& x = a.routes[r];
          const auto& y = b.routes[s];
          if (x.addr.family == y.addr.family && x.len == y.len && x.addr.bytes == y.addr.bytes)
            p.errors.push_back(rkey + ": " + x.text + " is already routed by tunnel.peer[" +
                               std::to_string(j) + "].routes[" + std::to_string(s) + "]");
        }
      }
    }
  }
  if (nroutes > RG_MAX_ROUTES)
    p.errors.push_back("tunnel.peer: " + std::to_string(nroutes) + " routes, at most " +
                       std::to_string(RG_MAX_ROUTES) + " per address family");
}

}  // namespace

std::optional<Address> parse_address(const std::string& text) {
  Address a;
  a.text = text;
  if (inet_pton(AF_INET, text.c_str(), a.bytes.data()) == 1) {
    a.family = AF_INET;
    return a;
  }
  if (inet_pton(AF_INET6, text.c_str(), a.bytes.data()) == 1) {
    a.family = AF_INET6;
    return a;
  }
  return std::nullopt;
}

std::optional<Prefix> parse_prefix(const std::string& text, std::string& why) {
  auto slash = text.find('/');
  if (slash == std::string::npos) {
    why = in_quotes(text) + " is not a prefix: write address/length, e.g. 198.51.100.0/24";
    return std::nullopt;
  }
  auto addr = parse_address(text.substr(0, slash));
  if (!addr) {
    why = in_quotes(text) + ": " + in_quotes(text.substr(0, slash)) + " is not an IPv4 or IPv6 address";
    return std::nullopt;
  }
  std::string len_text = text.substr(slash + 1);
  unsigned len = 0;
  unsigned max = addr->family == AF_INET ? 32 : 128;
  auto [end, ec] = std::from_chars(len_text.data(), len_text.data() + len_text.size(), len);
  if (len_text.empty() || ec != std::errc() || end != len_text.data() + len_text.size() || len > max) {
    why = in_quotes(text) + ": prefix length " + in_quotes(len_text) + " is out of range 0.." +
          std::to_string(max);
    return std::nullopt;
  }
  // Host bits set usually means a typo in the length; the LPM trie would
  // silently match the shorter network.
  for (unsigned bit = len; bit < max; ++bit)
    if (addr->bytes[bit / 8] & (0x80 >> (bit % 8))) {
      why = in_quotes(text) + " has host bits set beyond /" + std::to_string(len);
      return std::nullopt;
    }
  Prefix p;
  p.addr = *addr;
  p.len = static_cast<uint8_t>(len);
  p.text = text;
  return p;
}

Config parse_config(const toml::table& doc, ConfigProblems& p) {
  Config cfg;
  Reader root(doc, "", p);
  parse_interfaces(root, cfg, p);

  if (const toml::table* dp = root.table("dataplane")) {
    Reader r(*dp, "dataplane", p);
    r.integer("dscp", cfg.dscp, 0, 63);
    r.integer("cnp_dscp", cfg.cnp_dscp, 0, 63);
    r.integer("outer_ttl", cfg.outer_ttl, 1, 255);
    r.integer("qp_entries", cfg.qp_entries, kMinQpEntries, kMaxQpEntries);
    r.boolean("accounting", cfg.accounting);
    r.boolean("remark", cfg.remark);
    r.boolean("repair", cfg.repair);
    r.integer("tc_handle", cfg.tc_handle, 1, 0xffffffffLL);
    r.integer("tc_priority", cfg.tc_priority, 1, 0xffff);
    std::string mode;
    if (r.string("xdp_mode", mode) && !set_xdp_mode(mode, cfg.xdp_mode))
      r.error("dataplane.xdp_mode", in_quotes(mode) + " is not one of \"native\", \"skb\"");
    r.reject_unknown();
  }

  if (const toml::table* tun = root.table("tunnel")) {
    Reader r(*tun, "tunnel", p);
    r.integer("mtu", cfg.tunnel_mtu, kMinMtuV4, kMaxMtu);
    std::string policy;
    if (r.string("mtu_policy", policy) && !set_mtu_policy(policy, cfg.mtu_policy))
      r.error("tunnel.mtu_policy", in_quotes(policy) + " is not one of \"pass\", \"drop\"");
    if (const toml::array* peers = r.array("peer")) {
      for (size_t i = 0; i < peers->size(); ++i) {
        std::string key = "tunnel.peer[" + std::to_string(i) + "]";
        const auto* t = (*peers)[i].as_table();
        if (!t) {
          p.errors.push_back(key + ": expected a table, got " + std::string(type_name((*peers)[i])));
          continue;
        }
        parse_peer(*t, key, cfg, p);
      }
    }
    r.reject_unknown();
    check_peers(cfg, p);
  }

  if (const toml::table* m = root.table("metrics")) {
    Reader r(*m, "metrics", p);
    std::string listen;
    if (r.string("listen", listen)) {
      std::string why;
      if (valid_listen(listen, why)) cfg.metrics_listen = listen;
      else r.error("metrics.listen", why);
    }
    r.boolean("per_qp", cfg.per_qp);
    r.integer("top_qps", cfg.top_qps, 1, 10000);
    r.reject_unknown();
  }

  if (const toml::table* nic = root.table("nic")) {
    for (auto& msg : nic::validate_nic_table(*nic)) p.errors.push_back(msg);
    cfg.nic = *nic;
  }

  root.reject_unknown();
  return cfg;
}

Config parse_config_string(std::string_view text, ConfigProblems& p) {
  try {
    toml::table doc = toml::parse(text);
    return parse_config(doc, p);
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    p.errors.push_back("line " + std::to_string(b.line) + ", column " + std::to_string(b.column) +
                       ": " + std::string(e.description()));
    return Config{};
  }
}

Config parse_config_file(const std::string& path, ConfigProblems& p) {
  try {
    toml::table doc = toml::parse_file(path);
    return parse_config(doc, p);
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    if (!b)
      p.errors.push_back(std::string(e.description()));
    else
      p.errors.push_back("line " + std::to_string(b.line) + ", column " + std::to_string(b.column) +
                         ": " + std::string(e.description()));
    return Config{};
  }
}

void apply_overrides(Config& cfg, const ConfigOverrides& ov, ConfigProblems& p) {
  if (!ov.interfaces.empty()) {
    cfg.interfaces.clear();
    for (const auto& i : ov.interfaces) add_interface(cfg, "--interface", i, p);
  }
  auto range = [&](const char* flag, const std::optional<uint32_t>& v, uint32_t& out, uint32_t lo,
                   uint32_t hi) {
    if (!v) return;
    if (*v < lo || *v > hi)
      p.errors.push_back(std::string(flag) + ": " + std::to_string(*v) + " is out of range " +
                         std::to_string(lo) + ".." + std::to_string(hi));
    else
      out = *v;
  };
  range("--dscp", ov.dscp, cfg.dscp, 0, 63);
  range("--cnp-dscp", ov.cnp_dscp, cfg.cnp_dscp, 0, 63);
  range("--qp-entries", ov.qp_entries, cfg.qp_entries, kMinQpEntries, kMaxQpEntries);
  range("--tc-handle", ov.tc_handle, cfg.tc_handle, 1, 0xffffffffu);
  range("--tc-priority", ov.tc_priority, cfg.tc_priority, 1, 0xffff);
  if (ov.mtu_policy && !set_mtu_policy(*ov.mtu_policy, cfg.mtu_policy))
    p.errors.push_back("--tunnel-mtu-policy: " + in_quotes(*ov.mtu_policy) +
                       " is not one of \"pass\", \"drop\"");
  if (ov.xdp_mode && !set_xdp_mode(*ov.xdp_mode, cfg.xdp_mode))
    p.errors.push_back("--xdp-mode: " + in_quotes(*ov.xdp_mode) + " is not one of \"native\", \"skb\"");
  if (ov.metrics_listen) {
    std::string why;
    if (valid_listen(*ov.metrics_listen, why)) cfg.metrics_listen = *ov.metrics_listen;
    else p.errors.push_back("--metrics-listen: " + why);
  }
}

void check_host(const Config& cfg, ConfigProblems& p) {
  for (size_t i = 0; i < cfg.interfaces.size(); ++i)
    if (if_nametoindex(cfg.interfaces[i].c_str()) == 0)
      p.errors.push_back("interfaces[" + std::to_string(i) + "]: interface " + cfg.interfaces[i] +
                         " does not exist (check `ip link`; in a container, use the host network)");
}

Config load_config(const std::string& file, const ConfigOverrides& ov) {
  ConfigProblems p;
  Config cfg = file.empty() ? Config{} : parse_config_file(file, p);
  apply_overrides(cfg, ov, p);
  if (p.ok() && cfg.interfaces.empty())
    p.errors.push_back("interfaces: none given; use --interface IF or interfaces = [...] in the config");
  if (!p.ok()) {
    std::string msg = file.empty() ? "invalid options:" : "invalid configuration " + file + ":";
    for (const auto& e : p.errors) msg += "\n  " + e;
    throw Error(msg, kExitUsage);
  }
  ConfigProblems host;
  check_host(cfg, host);
  if (!host.ok()) {
    std::string msg = host.errors.front();
    for (size_t i = 1; i < host.errors.size(); ++i) msg += "\n  " + host.errors[i];
    throw Error(msg, kExitNotFound);
  }
  return cfg;
}

rg_config Config::rodata() const {
  rg_config c{};
  c.dscp = static_cast<__u8>(dscp);
  c.cnp_dscp = static_cast<__u8>(cnp_dscp);
  c.mtu_policy = static_cast<__u8>(mtu_policy);
  c.outer_ttl = static_cast<__u8>(outer_ttl);
  c.psn_jump_max = RG_DEFAULT_PSN_JUMP_MAX;
  c.qp_idle_ms = RG_DEFAULT_QP_IDLE_MS;
  c.flags = RG_CFG_F_ENCAP | RG_CFG_F_DECAP;
  if (remark) c.flags |= RG_CFG_F_REMARK;
  if (repair) c.flags |= RG_CFG_F_REPAIR;
  if (accounting) c.flags |= RG_CFG_F_ACCOUNT;
  return c;
}

nlohmann::json Config::to_json() const {
  nlohmann::json peers_json = nlohmann::json::array();
  for (const auto& peer : peers) {
    nlohmann::json routes = nlohmann::json::array();
    for (const auto& r : peer.routes) routes.push_back(r.text);
    peers_json.push_back({{"name", peer.name},
                          {"local", peer.local.text},
                          {"remote", peer.remote.text},
                          {"vni", peer.vni},
                          {"mtu", peer.mtu},
                          {"routes", routes}});
  }
  return {
      {"interfaces", interfaces},
      {"dataplane",
       {{"dscp", dscp},
        {"cnp_dscp", cnp_dscp},
        {"outer_ttl", outer_ttl},
        {"accounting", accounting},
        {"remark", remark},
        {"repair", repair},
        {"qp_entries", qp_entries},
        {"tc_handle", tc_handle},
        {"tc_priority", tc_priority},
        {"xdp_mode", xdp_mode == XdpMode::kNative ? "native" : "skb"}}},
      {"tunnel",
       {{"mtu", tunnel_mtu},
        {"mtu_policy", mtu_policy == RG_MTU_DROP ? "drop" : "pass"},
        {"peer", peers_json}}},
      {"metrics", {{"listen", metrics_listen}, {"per_qp", per_qp}, {"top_qps", top_qps}}},
  };
}

std::string Config::hash() const {
  // FNV-1a over the canonical JSON: stable across runs and builds, unlike
  // std::hash.
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : to_json().dump()) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace rg
