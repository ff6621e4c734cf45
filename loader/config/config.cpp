// Reading the configuration: the TOML walk (every key looked up in the
// option table, anything else refused), the checks across options, and the
// canonical JSON form. Options themselves are declared in options.cpp.
#include "config/config.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <functional>
#include <set>
#include <sstream>

#include "common/error.h"
#include "common/text.h"
#include "nic/profile.h"

namespace rg {
namespace {


// A key as the file spells it: bare where TOML allows, quoted otherwise, so
// an empty or odd key ("" = 1) is still named in the message.
std::string key_text(std::string_view k) {
  const bool bare = !k.empty() && std::all_of(k.begin(), k.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '_' || c == '-';
  });
  return bare ? std::string(k) : in_quotes(k);
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

// The far gateway tells the two copies of a packet apart from a lost one
// by their sequence number: no shield without the sequence option. Named
// where the shield was set: the peer's own key, else tunnel.shield once.
void check_shield(const Config& cfg, ConfigProblems& p) {
  if (cfg.tunnel_sequence) return;
  bool inherited = false;
  for (size_t i = 0; i < cfg.peers.size(); ++i) {
    const auto& peer = cfg.peers[i];
    if (peer.shield == Shield::kOff) continue;
    if (!peer.shield_given) {
      inherited = true;
      continue;
    }
    p.errors.push_back("tunnel.peer[" + std::to_string(i) + "].shield: " + in_quotes(shield_name(peer.shield)) +
                       " needs tunnel.sequence = true (the far gateway tells a copy from a loss by its "
                       "sequence number)");
  }
  if (inherited)
    p.errors.push_back("tunnel.shield: " + in_quotes(shield_name(cfg.tunnel_shield)) +
                       " needs tunnel.sequence = true (the far gateway tells a copy from a loss by its "
                       "sequence number)");
}

// The reports ride in the sequence option's extension.
void check_congestion(const Config& cfg, ConfigProblems& p) {
  if (cfg.tunnel_congestion && !cfg.tunnel_sequence)
    p.errors.push_back(
        "tunnel.congestion: \"on\" needs tunnel.sequence = true (the reports ride in the option's extension)");
}

// Every string of the configuration goes into the attach record (JSON),
// some into metrics labels (a peer's name): one that is not text is refused
// naming its key, where a dump would fail later with no key at all.
// Interfaces were checked as they were read (add_interface).
void check_text(const nlohmann::json& j, const std::string& key, ConfigProblems& p) {
  if (j.is_string()) {
    const auto& s = j.get_ref<const std::string&>();
    if (!is_text(s)) p.errors.push_back(key + ": " + in_quotes(s) + " is not UTF-8 text (or has control characters)");
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) check_text(j[i], key + "[" + std::to_string(i) + "]", p);
  } else if (j.is_object()) {
    for (const auto& [k, v] : j.items()) check_text(v, key.empty() ? k : key + "." + k, p);
  }
}

}  // namespace

uint8_t shield_flags(Shield s, ShieldPath path) {
  // The path applies to whatever turns the copies on, "auto" included.
  const uint8_t where = path == ShieldPath::kPort ? RG_PEER_F_SHIELD_OTHER_PORT : 0;
  switch (s) {
    case Shield::kOff: return where;
    case Shield::kControl: return RG_PEER_F_SHIELD_CONTROL | where;
    case Shield::kAll: return RG_PEER_F_SHIELD_ALL | where;
    case Shield::kAuto: return where;  // turned on by `roceguard run` (rg_peer_ctl), not configured
  }
  return where;
}

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

std::string unusable_tunnel_endpoint(const Address& a) {
  const uint8_t* b = a.bytes.data();
  if (a.family == AF_INET) {
    const uint32_t v = (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
    if (v == 0) return "is the unspecified address";
    if (v == 0xffffffff) return "is the broadcast address";
    if ((b[0] & 0xf0) == 0xe0) return "is a multicast address";
    return "";
  }
  static const std::array<uint8_t, 12> v4_mapped{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::all_of(a.bytes.begin(), a.bytes.end(), [](uint8_t x) { return x == 0; }))
    return "is the unspecified address";
  if (b[0] == 0xff) return "is a multicast address";
  // The data plane builds an IPv6 outer header for it, which no IPv4-only
  // far gateway would receive (RFC 4291 section 2.5.5.2: not for the wire).
  if (std::equal(v4_mapped.begin(), v4_mapped.end(), b))
    return "is an IPv4-mapped IPv6 address (write the IPv4 address itself)";
  return "";
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

// printable(): a message quotes what it was given, as text, whatever bytes
// that was.
std::string in_quotes(std::string_view s) { return "\"" + printable(s) + "\""; }

std::string_view toml_type_name(const toml::node& n) {
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

// The kernel's rules (dev_valid_name) on the name as the kernel would read
// it, which ends at a NUL: "a0\0x" is a0 to it. Beyond them, the name must
// be text, as the attach record (JSON) and the metrics' labels hold it.
bool valid_ifname(const std::string& name, std::string& why) {
  if (name.empty()) {
    why = "interface name is empty";
    return false;
  }
  if (name.find('\0') != std::string::npos) {
    why = in_quotes(name) + " contains a NUL byte: the kernel reads the name only up to it";
    return false;
  }
  if (name.size() >= IFNAMSIZ) {
    why = in_quotes(name) + " is longer than " + std::to_string(IFNAMSIZ - 1) + " bytes";
    return false;
  }
  if (name == "." || name == ".." ||
      std::any_of(name.begin(), name.end(),
                  [](char c) { return c == '/' || c == ':' || isspace(static_cast<unsigned char>(c)); })) {
    why = in_quotes(name) + " is not a valid interface name (no '/', ':' or whitespace; not . or ..)";
    return false;
  }
  if (!is_text(name)) {
    why = in_quotes(name) +
          " is not UTF-8 text (or has control characters), which the attach record and the metrics' labels "
          "cannot hold; rename the interface (ip link set dev OLD name NEW)";
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

namespace {

constexpr std::string_view kUnknownKey =
    "unknown key (check the spelling against the commented default roceguard.toml)";

// Reads one option's node; the option table says what it may be.
void read_option(const Option& opt, const toml::node& node, Config& cfg, ConfigProblems& p) {
  const std::string key(opt.path);
  if (auto v = value_from_toml(opt.spec, node, key, p)) assign(opt, cfg, *v, key, p);
}

// [[interface]] tables: the other spelling of interfaces = [...].
void read_interface_tables(const toml::array& tables, Config& cfg, ConfigProblems& p) {
  cfg.interfaces.clear();
  for (size_t i = 0; i < tables.size(); ++i) {
    std::string key = "interface[" + std::to_string(i) + "]";
    const auto* t = tables[i].as_table();
    if (!t) {
      p.errors.push_back(key + ": expected a table, got " + std::string(toml_type_name(tables[i])));
      continue;
    }
    for (const auto& [k, v] : *t) {
      if (k.str() != "name") {
        p.errors.push_back(key + "." + key_text(k.str()) + ": " + std::string(kUnknownKey));
        continue;
      }
      if (const auto* s = v.as_string())
        add_interface(cfg, key + ".name", s->get(), p);
      else
        p.errors.push_back(key + ".name: expected a string, got " + std::string(toml_type_name(v)));
    }
    if (!t->get("name")) p.errors.push_back(key + ".name: missing");
  }
}

void read_document(const toml::table& doc, Config& cfg, ConfigProblems& p) {
  if (doc.get("interfaces") && doc.get("interface"))
    p.errors.push_back("interfaces: give either interfaces = [...] or [[interface]] tables, not both");
  for (const auto& [k, node] : doc) {
    const std::string name(k.str());
    if (const Option* opt = find_option(name)) {
      read_option(*opt, node, cfg, p);
    } else if (name == "interface") {
      if (const auto* a = node.as_array()) read_interface_tables(*a, cfg, p);
      else p.errors.push_back("interface: expected an array, got " + std::string(toml_type_name(node)));
    } else if (is_section(name)) {
      const auto* table = node.as_table();
      if (!table) {
        p.errors.push_back(name + ": expected a table, got " + std::string(toml_type_name(node)));
      } else if (name == "nic") {
        // The NIC profile reads its own table (and names its keys nic.*).
        for (auto& msg : nic::read_table(cfg.nic, *table)) p.errors.push_back(msg);
      } else {
        for (const auto& [sk, snode] : *table) {
          if (const Option* opt = find_option(name + "." + std::string(sk.str())))
            read_option(*opt, snode, cfg, p);
          else
            p.errors.push_back(name + "." + key_text(sk.str()) + ": " + std::string(kUnknownKey));
        }
      }
    } else {
      p.errors.push_back(key_text(name) + ": " + std::string(kUnknownKey));
    }
  }
}

void report_syntax(const toml::parse_error& e, ConfigProblems& p) {
  const auto& b = e.source().begin;
  if (!b)
    p.errors.push_back(std::string(e.description()));
  else
    p.errors.push_back("line " + std::to_string(b.line) + ", column " + std::to_string(b.column) + ": " +
                       std::string(e.description()));
}

}  // namespace

void finish_config(Config& cfg, ConfigProblems& p) {
  for (size_t i = 0; i < cfg.peers.size(); ++i) {
    auto& peer = cfg.peers[i];
    if (!peer.shield_given) peer.shield = cfg.tunnel_shield;
    if (!peer.shield_path_given) peer.shield_path = cfg.tunnel_shield_path;
    if (peer.mtu_given) continue;
    peer.mtu = cfg.tunnel_mtu;
    if (peer.remote.family == AF_INET6 && peer.mtu < kMinMtuV6)
      p.errors.push_back("tunnel.peer[" + std::to_string(i) + "].mtu: tunnel.mtu " + std::to_string(peer.mtu) +
                         " is below the IPv6 minimum " + std::to_string(kMinMtuV6) +
                         "; set a larger mtu for this peer");
  }
  check_peers(cfg, p);
  check_shield(cfg, p);
  check_congestion(cfg, p);
  check_text(cfg.to_json(), "", p);
  if (cfg.xdp_forward && cfg.ingress_hook == IngressHook::kTc)
    p.errors.push_back("dataplane.xdp_forward: the fast path runs in the XDP hook, but dataplane.ingress_hook is tc; "
                       "set it to xdp or auto");
}

void read_config_file(const std::string& path, Config& cfg, ConfigProblems& p) {
  try {
    read_document(toml::parse_file(path), cfg, p);
  } catch (const toml::parse_error& e) {
    report_syntax(e, p);
  }
  // A key file beside the configuration is named relative to it, whatever
  // the directory the loader runs in.
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  for (PeerConfig& peer : cfg.peers)
    if (!peer.key_file.empty() && peer.key_file.front() != '/') peer.key_file = dir + peer.key_file;
}

Config parse_config(const toml::table& doc, ConfigProblems& p) {
  Config cfg;
  read_document(doc, cfg, p);
  finish_config(cfg, p);
  return cfg;
}

Config parse_config_string(std::string_view text, ConfigProblems& p) {
  try {
    return parse_config(toml::parse(text), p);
  } catch (const toml::parse_error& e) {
    report_syntax(e, p);
    return Config{};
  }
}

Config parse_config_file(const std::string& path, ConfigProblems& p) {
  Config cfg;
  read_config_file(path, cfg, p);
  finish_config(cfg, p);
  return cfg;
}

Config resolve_config(const ConfigSources& sources, ConfigProblems& p) {
  Config cfg;
  if (!sources.file.empty()) read_config_file(sources.file, cfg, p);
  if (sources.environment) apply_environment(cfg, p);
  apply_flags(cfg, sources.flags, p);
  finish_config(cfg, p);
  return cfg;
}

rg_config Config::rodata() const {
  rg_config c{};
  c.dscp = static_cast<__u8>(dscp);
  c.cnp_dscp = static_cast<__u8>(cnp_dscp);
  c.mtu_policy = static_cast<__u8>(mtu_policy);
  c.outer_ttl = static_cast<__u8>(outer_ttl);
  c.psn_jump_max = psn_jump_max;
  c.qp_idle_ms = qp_idle_ms;
  c.skb_priority = skb_priority;
  c.flags = RG_CFG_F_ENCAP | RG_CFG_F_DECAP;
  if (remark) c.flags |= RG_CFG_F_REMARK;
  if (repair) c.flags |= RG_CFG_F_REPAIR;
  if (accounting) c.flags |= RG_CFG_F_ACCOUNT;
  if (tunnel_sequence) c.flags |= RG_CFG_F_TUNNEL_SEQ;
  if (tunnel_sequence && tunnel_congestion) c.flags |= RG_CFG_F_CONGESTION;
  if (xdp_forward) c.flags |= RG_CFG_F_XDP_FORWARD;
  if (std::any_of(peers.begin(), peers.end(), [](const PeerConfig& p) { return !p.key_file.empty(); }))
    c.flags |= RG_CFG_F_TUNNEL_AUTH;
  c.tunnel_opt_class = static_cast<__u16>(tunnel_opt_class);
  c.tunnel_opt_type = RG_TUNNEL_OPT_TYPE_DEFAULT;
  return c;
}

// Every option under its path; peers as an array of their fields.
nlohmann::json Config::to_json() const {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& opt : options()) {
    nlohmann::json* at = &out;
    std::string_view path = opt.path;
    for (auto dot = path.find('.'); dot != std::string_view::npos; dot = path.find('.')) {
      at = &(*at)[std::string(path.substr(0, dot))];
      path.remove_prefix(dot + 1);
    }
    (*at)[std::string(path)] = opt.get(*this);
  }
  return out;
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
