// The option table (see options.h) and what is derived from it that does
// not need the command-line library: typed values from TOML nodes and from
// text, environment and flag overrides, and the option list for the docs.
#include "config/options.h"

#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <sstream>

#include "config/config.h"
#include "nic/profile.h"

namespace rg {
namespace {

ValueSpec spec_of(OptionType type, int64_t min = 1, int64_t max = 0, bool hex = false) {
  ValueSpec s;
  s.type = type;
  s.min = min;
  s.max = max;
  s.hex = hex;
  return s;
}

std::string type_text(const ValueSpec& spec) {
  switch (spec.type) {
    case OptionType::kInteger: return "integer";
    case OptionType::kBoolean: return "boolean";
    case OptionType::kString: return "string";
    case OptionType::kStringList: return "list of strings";
    case OptionType::kTableList: return "array of tables";
  }
  return "?";
}

std::string number_text(int64_t v, bool hex) {
  if (!hex || v < 0) return std::to_string(v);
  std::ostringstream o;
  o << "0x" << std::hex << v;
  return o.str();
}

// Decimal, or 0x/0o/0b as TOML writes integers; the whole text or nothing.
std::optional<int64_t> parse_integer(std::string_view t) {
  bool negative = false;
  if (!t.empty() && (t[0] == '-' || t[0] == '+')) {
    negative = t[0] == '-';
    t.remove_prefix(1);
  }
  int base = 10;
  if (t.size() > 2 && t[0] == '0') {
    const char b = static_cast<char>(std::tolower(static_cast<unsigned char>(t[1])));
    base = b == 'x' ? 16 : b == 'o' ? 8 : b == 'b' ? 2 : 10;
    if (base != 10) t.remove_prefix(2);
  }
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v, base);
  if (t.empty() || ec != std::errc() || end != t.data() + t.size() || v > (1ull << 62)) return std::nullopt;
  return negative ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
}

// Range and choices of a typed value; the messages every source shares.
bool within_spec(const ValueSpec& spec, const OptionValue& v, const std::string& key, ConfigProblems& p) {
  if (spec.type == OptionType::kInteger && spec.min <= spec.max) {
    const int64_t x = std::get<int64_t>(v);
    if (x < spec.min || x > spec.max) {
      p.errors.push_back(key + ": " + std::to_string(x) + " is out of range " + std::to_string(spec.min) + ".." +
                         std::to_string(spec.max));
      return false;
    }
  }
  if (spec.type == OptionType::kString && !spec.choices.empty()) {
    const auto& s = std::get<std::string>(v);
    for (const auto& [value, why] : spec.refused)
      if (s == value) {
        p.errors.push_back(key + ": " + in_quotes(s) + " " + std::string(why));
        return false;
      }
    if (std::find(spec.choices.begin(), spec.choices.end(), s) == spec.choices.end()) {
      std::string list;
      for (auto c : spec.choices) list += (list.empty() ? "" : ", ") + in_quotes(c);
      p.errors.push_back(key + ": " + in_quotes(s) + " is not one of " + list);
      return false;
    }
  }
  return true;
}

// "0..63", "pass, drop", or "": what an option or a peer field may be.
std::string spec_range_text(const ValueSpec& spec) {
  if (spec.type == OptionType::kInteger && spec.min <= spec.max)
    return number_text(spec.min, spec.hex) + ".." + number_text(spec.max, spec.hex);
  std::string list;
  for (auto c : spec.choices) list += (list.empty() ? "" : ", ") + std::string(c);
  return list;
}

// The key of a list's element: flags are repeated, not indexed.
std::string element_key(const std::string& key, size_t i) {
  return !key.empty() && key[0] == '-' ? key : key + "[" + std::to_string(i) + "]";
}

Option u32(std::string_view path, std::string_view flag, int64_t min, int64_t max, uint32_t Config::*member,
           std::string_view help, bool hex = false) {
  Option o;
  o.path = path;
  o.flag = flag;
  o.flag_of = flag.empty() ? FlagOf::kNone : FlagOf::kDaemon;
  o.spec = spec_of(OptionType::kInteger, min, max, hex);
  o.help = help;
  o.set = [member](Config& c, const OptionValue& v, const std::string&, ConfigProblems&) {
    c.*member = static_cast<uint32_t>(std::get<int64_t>(v));
  };
  o.get = [member](const Config& c) { return nlohmann::json(c.*member); };
  return o;
}

Option boolean(std::string_view path, bool Config::*member, std::string_view help) {
  Option o;
  o.path = path;
  o.spec = spec_of(OptionType::kBoolean);
  o.help = help;
  o.set = [member](Config& c, const OptionValue& v, const std::string&, ConfigProblems&) {
    c.*member = std::get<bool>(v);
  };
  o.get = [member](const Config& c) { return nlohmann::json(c.*member); };
  return o;
}

// A string naming one of an enum's values: the names are the choices.
template <class E, size_t N>
Option choice(std::string_view path, std::string_view flag, E Config::*member,
              const std::array<std::pair<std::string_view, E>, N>& names, std::string_view help) {
  Option o;
  o.path = path;
  o.flag = flag;
  o.flag_of = flag.empty() ? FlagOf::kNone : FlagOf::kDaemon;
  o.spec = spec_of(OptionType::kString);
  for (const auto& n : names) o.spec.choices.push_back(n.first);
  o.help = help;
  o.set = [member, names](Config& c, const OptionValue& v, const std::string&, ConfigProblems&) {
    for (const auto& n : names)
      if (n.first == std::get<std::string>(v)) c.*member = n.second;
  };
  o.get = [member, names](const Config& c) {
    for (const auto& n : names)
      if (n.second == c.*member) return nlohmann::json(std::string(n.first));
    return nlohmann::json();
  };
  return o;
}

// A [nic] key: the NIC profile checks its values (nic::set), so its
// messages are the same whether the value came from the file or here.
Option nic_option(std::string_view path, std::string_view flag, OptionType type, std::string_view help,
                  std::function<nlohmann::json(const nic::Profile&)> get) {
  Option o;
  o.path = path;
  o.flag = flag;
  o.flag_of = flag.empty() ? FlagOf::kNone : FlagOf::kNic;
  o.spec = spec_of(type);
  o.help = help;
  const std::string name(path.substr(path.find('.') + 1));
  o.set = [name](Config& c, const OptionValue& v, const std::string& key, ConfigProblems& p) {
    nic::Value value;
    if (const auto* i = std::get_if<int64_t>(&v)) value = *i;
    else if (const auto* s = std::get_if<std::string>(&v)) value = *s;
    else if (const auto* l = std::get_if<std::vector<std::string>>(&v)) value = *l;
    if (auto err = nic::set(c.nic, name, value)) {
      // "nic.<name>: why" from the profile, renamed after the source.
      const std::string own = "nic." + name;
      p.errors.push_back(err->rfind(own, 0) == 0 ? key + err->substr(own.size()) : key + ": " + *err);
    }
  };
  o.get = [get](const Config& c) { return get(c.nic); };
  return o;
}

// The shield's settings, for tunnel.shield and a peer's shield alike.
constexpr std::array<std::pair<std::string_view, Shield>, 4> kShieldNames{
    {{"off", Shield::kOff}, {"control", Shield::kControl}, {"all", Shield::kAll}, {"auto", Shield::kAuto}}};

ValueSpec shield_spec() {
  ValueSpec s = spec_of(OptionType::kString);
  for (const auto& n : kShieldNames) s.choices.push_back(n.first);
  return s;
}

constexpr std::array<std::pair<std::string_view, ShieldPath>, 2> kShieldPathNames{
    {{"same", ShieldPath::kSame}, {"port", ShieldPath::kPort}}};

ValueSpec shield_path_spec() {
  ValueSpec s = spec_of(OptionType::kString);
  for (const auto& n : kShieldPathNames) s.choices.push_back(n.first);
  return s;
}

ShieldPath shield_path_of(const OptionValue& v) {
  for (const auto& n : kShieldPathNames)
    if (n.first == std::get<std::string>(v)) return n.second;
  return ShieldPath::kSame;  // not reached: the value passed the choices
}

std::string_view shield_path_name(ShieldPath p) {
  for (const auto& n : kShieldPathNames)
    if (n.second == p) return n.first;
  return "?";
}

Shield shield_of(const OptionValue& v) {
  for (const auto& n : kShieldNames)
    if (n.first == std::get<std::string>(v)) return n.second;
  return Shield::kOff;  // not reached: the value passed the choices
}

void set_address(Address& out, const OptionValue& v, const std::string& key, ConfigProblems& p) {
  const auto& text = std::get<std::string>(v);
  auto a = parse_address(text);
  if (!a) {
    p.errors.push_back(key + ": " + in_quotes(text) + " is not an IPv4 or IPv6 address");
    return;
  }
  const std::string why = unusable_tunnel_endpoint(*a);
  if (why.empty()) out = *a;
  else p.errors.push_back(key + ": " + a->text + " " + why + ": a tunnel endpoint must be a unicast address");
}

std::vector<PeerField> make_peer_fields() {
  std::vector<PeerField> f;
  f.push_back({"name", spec_of(OptionType::kString), "missing", "names the peer in logs and metrics; unique",
               [](PeerConfig& peer, const OptionValue& v, const std::string&, ConfigProblems&) {
                 peer.name = std::get<std::string>(v);
               },
               [](const PeerConfig& peer) { return nlohmann::json(peer.name); }});
  f.push_back({"local", spec_of(OptionType::kString), "missing (outer source address)",
               "outer source address: an address of this gateway",
               [](PeerConfig& peer, const OptionValue& v, const std::string& key, ConfigProblems& p) {
                 set_address(peer.local, v, key, p);
               },
               [](const PeerConfig& peer) { return nlohmann::json(peer.local.text); }});
  f.push_back({"remote", spec_of(OptionType::kString), "missing (outer destination address)",
               "outer destination address: the far gateway, same family as local",
               [](PeerConfig& peer, const OptionValue& v, const std::string& key, ConfigProblems& p) {
                 set_address(peer.remote, v, key, p);
               },
               [](const PeerConfig& peer) { return nlohmann::json(peer.remote.text); }});
  f.push_back({"vni", spec_of(OptionType::kInteger, 0, kMaxVni), "missing", "Geneve VNI, unique per peer",
               [](PeerConfig& peer, const OptionValue& v, const std::string&, ConfigProblems&) {
                 peer.vni = static_cast<uint32_t>(std::get<int64_t>(v));
               },
               [](const PeerConfig& peer) { return nlohmann::json(peer.vni); }});
  f.push_back({"mtu", spec_of(OptionType::kInteger, kMinMtuV4, kMaxMtu), "",
               "largest outer packet towards this peer; default tunnel.mtu, at least 1280 for IPv6",
               [](PeerConfig& peer, const OptionValue& v, const std::string&, ConfigProblems&) {
                 peer.mtu = static_cast<uint32_t>(std::get<int64_t>(v));
                 peer.mtu_given = true;
               },
               [](const PeerConfig& peer) { return nlohmann::json(peer.mtu); }});
  f.push_back({"shield", shield_spec(), "",
               "the loss shield towards this peer: off, control, all or auto; default tunnel.shield",
               [](PeerConfig& peer, const OptionValue& v, const std::string&, ConfigProblems&) {
                 peer.shield = shield_of(v);
                 peer.shield_given = true;
               },
               [](const PeerConfig& peer) { return nlohmann::json(std::string(shield_name(peer.shield))); }});
  f.push_back({"shield_path", shield_path_spec(), "",
               "where the shield's copies to this peer go: same or port; default tunnel.shield_path",
               [](PeerConfig& peer, const OptionValue& v, const std::string&, ConfigProblems&) {
                 peer.shield_path = shield_path_of(v);
                 peer.shield_path_given = true;
               },
               [](const PeerConfig& peer) {
                 return nlohmann::json(std::string(shield_path_name(peer.shield_path)));
               }});
  f.push_back({"key_file", spec_of(OptionType::kString), "",
               "file of the tunnel's key (32 hex digits; a second line: the next key, accepted too) that "
               "authenticates the sequence option; the far gateway needs the same; none: unauthenticated",
               [](PeerConfig& peer, const OptionValue& v, const std::string& key, ConfigProblems& p) {
                 peer.key_file = std::get<std::string>(v);
                 if (peer.key_file.empty()) p.errors.push_back(key + ": empty; leave it out for no key");
               },
               [](const PeerConfig& peer) {
                 return peer.key_file.empty() ? nlohmann::json(nullptr) : nlohmann::json(peer.key_file);
               }});
  f.push_back({"routes", spec_of(OptionType::kStringList), "", "inner destination prefixes sent through this peer",
               [](PeerConfig& peer, const OptionValue& v, const std::string& key, ConfigProblems& p) {
                 const auto& list = std::get<std::vector<std::string>>(v);
                 for (size_t i = 0; i < list.size(); ++i) {
                   std::string why;
                   if (auto pfx = parse_prefix(list[i], why)) peer.routes.push_back(*pfx);
                   else p.errors.push_back(element_key(key, i) + ": " + why);
                 }
               },
               [](const PeerConfig& peer) {
                 nlohmann::json routes = nlohmann::json::array();
                 for (const auto& r : peer.routes) routes.push_back(r.text);
                 return routes;
               }});
  return f;
}

std::string toml_key(std::string_view k) {
  const bool bare = !k.empty() && std::all_of(k.begin(), k.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '_' || c == '-';
  });
  return bare ? std::string(k) : in_quotes(k);
}

// One [[tunnel.peer]] table against the peer fields.
PeerConfig read_peer(const toml::table& t, const std::string& key, ConfigProblems& p) {
  PeerConfig peer;
  for (const auto& [k, node] : t) {
    const std::string_view name = k.str();
    const std::string fkey = key + "." + toml_key(name);
    auto field = std::find_if(peer_fields().begin(), peer_fields().end(),
                              [name](const PeerField& f) { return f.key == name; });
    if (field == peer_fields().end()) {
      p.errors.push_back(fkey + ": unknown key (check the spelling against the commented default roceguard.toml)");
      continue;
    }
    if (auto v = value_from_toml(field->spec, node, fkey, p))
      if (within_spec(field->spec, *v, fkey, p)) field->set(peer, *v, fkey, p);
  }
  for (const auto& f : peer_fields())
    if (!f.missing.empty() && !t.get(f.key)) p.errors.push_back(key + "." + std::string(f.key) + ": " + std::string(f.missing));
  if (peer.local.family && peer.remote.family && peer.local.family != peer.remote.family)
    p.errors.push_back(key + ".remote: " + in_quotes(peer.remote.text) + " and local " + in_quotes(peer.local.text) +
                       " mix IPv4 and IPv6; one tunnel uses one family");
  const int family = peer.remote.family ? peer.remote.family : peer.local.family;
  if (peer.mtu_given && family == AF_INET6 && peer.mtu < kMinMtuV6)
    p.errors.push_back(key + ".mtu: " + std::to_string(peer.mtu) + " is out of range " + std::to_string(kMinMtuV6) +
                       ".." + std::to_string(kMaxMtu));
  return peer;
}

std::vector<Option> make_options() {
  std::vector<Option> o;
  {
    Option i;
    i.path = "interfaces";
    i.flag = "-i,--interface";
    i.flag_of = FlagOf::kDaemon;
    i.spec = spec_of(OptionType::kStringList);
    i.help = "interfaces to attach to (also [[interface]] tables with a name); a flag replaces the file's list";
    i.set = [](Config& c, const OptionValue& v, const std::string& key, ConfigProblems& p) {
      c.interfaces.clear();
      const auto& list = std::get<std::vector<std::string>>(v);
      for (size_t n = 0; n < list.size(); ++n) add_interface(c, element_key(key, n), list[n], p);
    };
    i.get = [](const Config& c) { return nlohmann::json(c.interfaces); };
    o.push_back(i);
  }

  o.push_back(u32("dataplane.dscp", "--dscp", 0, 63, &Config::dscp, "DSCP for RoCE data, ACKs and NAKs"));
  o.push_back(u32("dataplane.cnp_dscp", "--cnp-dscp", 0, 63, &Config::cnp_dscp,
                  "DSCP for congestion notification packets"));
  o.push_back(u32("dataplane.skb_priority", "--skb-priority", 0, 0xffffffffLL, &Config::skb_priority,
                  "skb->priority TC egress gives RoCE and CNPs for this host's qdisc; 0 = leave it. HTB class "
                  "major:minor is major * 0x10000 + minor (1:10 = 0x10010); band n of a prio qdisc M: is "
                  "M * 0x10000 + n + 1; mqprio and a VLAN egress-qos-map map the value itself",
                  true));
  o.push_back(u32("dataplane.outer_ttl", "", 1, 255, &Config::outer_ttl, "Geneve outer TTL / hop limit"));
  o.push_back(boolean("dataplane.accounting", &Config::accounting, "per-QP retransmit/loss accounting"));
  o.push_back(boolean("dataplane.remark", &Config::remark, "egress: re-mark DSCP (ECN bits are kept)"));
  o.push_back(boolean("dataplane.repair", &Config::repair, "ingress: restore a bleached DSCP"));
  o.push_back(u32("dataplane.qp_entries", "--qp-entries", kMinQpEntries, kMaxQpEntries, &Config::qp_entries,
                  "QP directions each per-QP table (rg_qp4, rg_qp6) is sized to hold, in 3/2 as many slots; changing it needs --reset-state"));
  o.push_back(u32("dataplane.qp_idle_ms", "--qp-idle-ms", 0, 0xffffffffLL, &Config::qp_idle_ms,
                  "a QP silent this long restarts its PSN tracking (a resync, not a loss); 0 = never"));
  o.push_back(u32("dataplane.psn_jump_max", "--psn-jump-max", 0, (1u << 23) - 1, &Config::psn_jump_max,
                  "a PSN move further than this, either way, restarts a QP's tracking; 0 = never"));
  o.push_back(u32("dataplane.tc_handle", "--tc-handle", 1, 0xffffffffLL, &Config::tc_handle,
                  "TC filter handle (egress, and ingress where the ingress hook is tc); detach removes exactly these filters", true));
  o.push_back(u32("dataplane.tc_priority", "--tc-priority", 1, 0xffff, &Config::tc_priority,
                  "TC filter priority (egress, and ingress where the ingress hook is tc)", true));
  o.push_back(choice("dataplane.tc_attach", "--tc-attach", &Config::tc_attach,
                     std::array<std::pair<std::string_view, TcAttach>, 3>{{{"auto", TcAttach::kAuto},
                                                                           {"tcx", TcAttach::kTcx},
                                                                           {"clsact", TcAttach::kClsact}}},
                     "how the TC programs attach: tcx (Linux 6.6+; a link that runs first on its hook), clsact "
                     "(a filter at tc_handle/tc_priority, behind every tcx program), or auto: tcx where the kernel "
                     "has it, clsact where it does not"));
  o.push_back(choice("dataplane.xdp_mode", "--xdp-mode", &Config::xdp_mode,
                     std::array<std::pair<std::string_view, XdpMode>, 2>{{{"native", XdpMode::kNative},
                                                                          {"skb", XdpMode::kSkb}}},
                     "XDP attach mode: native (driver) or skb (generic)"));
  o.push_back(choice("dataplane.ingress_hook", "--ingress-hook", &Config::ingress_hook,
                     std::array<std::pair<std::string_view, IngressHook>, 3>{{{"auto", IngressHook::kAuto},
                                                                              {"xdp", IngressHook::kXdp},
                                                                              {"tc", IngressHook::kTc}}},
                     "where the ingress program runs: xdp, tc (TC ingress), or auto: native XDP unless the "
                     "device is a veth or the kernel's VXLAN or Geneve, xdp_mode is skb or the driver refuses "
                     "native XDP, TC ingress then"));
  {
    Option forward = boolean("dataplane.xdp_forward", &Config::xdp_forward,
                             "the XDP gateway fast path: RoCE that would be forwarded from one attached interface "
                             "to another is forwarded by the XDP program itself (encapsulated as TC egress would), "
                             "skipping the stack and the egress qdisc; needs the ingress program at XDP (auto picks "
                             "it then), and a veth target whose peer runs XDP or GRO");
    forward.flag = "--xdp-forward";
    forward.flag_of = FlagOf::kDaemon;
    o.push_back(forward);
  }
  {
    Option attach = boolean("dataplane.attach", &Config::attach_dataplane,
                            "false: exporter only, for hosts whose hardware RNIC sends RoCE past TC/XDP: `run` "
                            "serves NIC counters and the NIC profile state and attaches no program");
    attach.flag = "--dataplane";
    attach.flag_of = FlagOf::kDaemon;
    o.push_back(attach);
  }

  o.push_back(u32("tunnel.mtu", "", kMinMtuV4, kMaxMtu, &Config::tunnel_mtu,
                  "largest outer IP packet; peers inherit it (1280+ for IPv6 peers)"));
  o.push_back(choice("tunnel.mtu_policy", "--tunnel-mtu-policy", &Config::mtu_policy,
                     std::array<std::pair<std::string_view, rg_mtu_policy>, 2>{{{"pass", RG_MTU_PASS},
                                                                                {"drop", RG_MTU_DROP}}},
                     "over the tunnel MTU: pass unencapsulated, or drop"));
  o.push_back(boolean("tunnel.sequence", &Config::tunnel_sequence,
                      "number every packet sent into a tunnel (a 12-byte Geneve option; 20 bytes with the send "
                      "time in one packet in 16 of each stream) so the far gateway counts exact loss, reordering "
                      "and one-way delay"));
  o.push_back(u32("tunnel.sequence_option_class", "", RG_TUNNEL_OPT_CLASS_MIN, 0xffff,
                  &Config::tunnel_opt_class,
                  "Geneve option class of the sequence option (experimental-use range, RFC 8926 section 7.1); "
                  "both gateways of a tunnel use the same",
                  true));
  {
    Option shield = choice("tunnel.shield", "", &Config::tunnel_shield, kShieldNames,
                           "the loss shield: each numbered packet of a kind is sent twice, the far gateway keeps "
                           "the first copy to arrive; control: what a Go-Back-N sender waits for (ACK, NAK, CNP, "
                           "READ, atomics, ACK requests, the first resend of a burst), all: every RoCE packet, "
                           "auto: all while the peer "
                           "reports a raw loss of at least tunnel.shield_auto_loss_ppm and no congestion "
                           "(`roceguard run` only); peers inherit it; needs tunnel.sequence");
    shield.spec = shield_spec();
    o.push_back(shield);
  }
  o.push_back(choice("tunnel.shield_path", "", &Config::tunnel_shield_path, kShieldPathNames,
                     "where the shield's copy goes: same, right behind the original on its outer 5-tuple (the "
                     "two keep their order); port, with another outer UDP source port, which the WAN's ECMP may "
                     "carry on another path (loss on one path spares the other copy, but where the paths' "
                     "delays cross, a packet's first copy can overtake its predecessor's: reordering for the "
                     "host); peers inherit it"));
  o.push_back(u32("tunnel.shield_auto_loss_ppm", "", 1, 1000000, &Config::shield_auto_loss_ppm,
                  "shield \"auto\": the raw loss, in parts per million of the packets sent, that the peer must "
                  "report for 3 seconds in a row to turn the shield on; it goes off after 30 seconds below "
                  "half of it"));
  o.push_back(choice("tunnel.congestion", "", &Config::tunnel_congestion,
                     std::array<std::pair<std::string_view, bool>, 2>{{{"off", false}, {"on", true}}},
                     "the congestion loop (`roceguard run` only; docs/design.md section 18): each gateway reports "
                     "to every peer the rate and queueing delay at which the peer's packets arrive, models each "
                     "peer's WAN bottleneck from those reports and runs a phantom queue draining a little under "
                     "the bottleneck; its backlog tells the sending hosts (tunnel.congestion_signal), so their "
                     "DCQCN slows down before the WAN's queue fills; off by default; needs tunnel.sequence, on "
                     "both gateways of a tunnel"));
  o.push_back(choice("tunnel.congestion_signal", "", &Config::congestion_signal,
                     std::array<std::pair<std::string_view, uint32_t>, 3>{
                         {{"both", RG_CC_F_CNP | RG_CC_F_MARK_CE}, {"cnp", RG_CC_F_CNP}, {"ce", RG_CC_F_MARK_CE}}},
                     "what the congestion loop tells the sending hosts: cnp, CNPs this gateway makes from the far "
                     "host's ACKs and sends the QP's own host within microseconds (needs the TC ingress hook: "
                     "dataplane.ingress_hook, auto on veths and tunnel devices); ce, inner CE marks the far host "
                     "answers with CNPs a WAN round trip later; both"));
  o.push_back(choice("tunnel.congestion_pace", "", &Config::congestion_pace,
                     std::array<std::pair<std::string_view, bool>, 2>{{{"auto", true}, {"off", false}}},
                     "the congestion loop's pacing: auto, TC egress stamps each frame to a peer with its earliest "
                     "departure time (skb->tstamp), when the peer's phantom queue reaches it, while every attached "
                     "interface's qdisc holds packets until then (fq, at the root or on every queue of mq, with room "
                     "for 20 ms of a peer's traffic per flow: docs/runbook.md), so the peer's traffic leaves at a "
                     "little under the bottleneck's rate; off, never; the XDP fast path, which passes no qdisc, "
                     "never paces"));
  {
    Option peers;
    peers.path = "tunnel.peer";
    peers.spec = spec_of(OptionType::kTableList);
    peers.help = "one table per far gateway (fields: tunnel.peer[].*)";
    peers.set = [](Config& c, const OptionValue& v, const std::string& key, ConfigProblems& p) {
      const auto& list = std::get<toml::array>(v);
      c.peers.clear();
      for (size_t i = 0; i < list.size(); ++i) {
        const std::string pkey = key + "[" + std::to_string(i) + "]";
        if (const auto* t = list[i].as_table()) c.peers.push_back(read_peer(*t, pkey, p));
        else p.errors.push_back(pkey + ": expected a table, got " + std::string(toml_type_name(list[i])));
      }
    };
    peers.get = [](const Config& c) {
      nlohmann::json list = nlohmann::json::array();
      for (const auto& peer : c.peers) {
        nlohmann::json j = nlohmann::json::object();
        for (const auto& f : peer_fields()) j[std::string(f.key)] = f.get(peer);
        list.push_back(j);
      }
      return list;
    };
    o.push_back(peers);
  }

  {
    Option listen;
    listen.path = "metrics.listen";
    listen.flag = "--metrics-listen";
    listen.flag_of = FlagOf::kDaemon;
    listen.spec = spec_of(OptionType::kString);
    listen.help = "Prometheus /metrics address, IPv4:port or [v6]:port";
    listen.set = [](Config& c, const OptionValue& v, const std::string& key, ConfigProblems& p) {
      std::string why;
      if (valid_listen(std::get<std::string>(v), why)) c.metrics_listen = std::get<std::string>(v);
      else p.errors.push_back(key + ": " + why);
    };
    listen.get = [](const Config& c) { return nlohmann::json(c.metrics_listen); };
    o.push_back(listen);
  }
  {
    Option health;
    health.path = "metrics.health_listen";
    health.flag = "--health-listen";
    health.flag_of = FlagOf::kDaemon;
    health.spec = spec_of(OptionType::kString);
    health.help = "liveness /livez and readiness /readyz address, IPv4:port or [v6]:port, apart from /metrics; "
                  "empty: none";
    health.set = [](Config& c, const OptionValue& v, const std::string& key, ConfigProblems& p) {
      const auto& text = std::get<std::string>(v);
      std::string why;
      if (text.empty() || valid_listen(text, why)) c.health_listen = text;
      else p.errors.push_back(key + ": " + why);
    };
    health.get = [](const Config& c) { return nlohmann::json(c.health_listen); };
    o.push_back(health);
  }
  {
    Option web;
    web.path = "metrics.web_config";
    web.flag = "--web-config";
    web.flag_of = FlagOf::kDaemon;
    web.spec = spec_of(OptionType::kString);
    web.help = "web configuration file of /metrics (TLS, basic auth; node_exporter's web.config.file "
               "format, a subset), an absolute path; empty: plain HTTP, no authentication";
    web.set = [](Config& c, const OptionValue& v, const std::string& key, ConfigProblems& p) {
      // The service's working directory is not the operator's: a relative
      // path would name another file under systemd than in a shell.
      const auto& path = std::get<std::string>(v);
      if (path.empty() || path.front() == '/') c.web_config = path;
      else p.errors.push_back(key + ": " + in_quotes(path) + " is not an absolute path");
    };
    web.get = [](const Config& c) { return nlohmann::json(c.web_config); };
    o.push_back(web);
  }
  o.push_back(boolean("metrics.per_qp", &Config::per_qp, "per-QP series, capped to top_qps"));
  o.push_back(u32("metrics.top_qps", "", 1, 10000, &Config::top_qps, "per-QP series exported (worst first)"));

  using nic::Profile;
  o.push_back(nic_option("nic.ack_timeout", "--ack-timeout", OptionType::kString,
                         "local ACK timeout as a duration (500us, 8ms), rounded up to 4.096 us * 2^t",
                         [](const Profile& n) { return nlohmann::json(n.ack_timeout_text); }));
  o.push_back(nic_option("nic.retry_cnt", "--retry-cnt", OptionType::kInteger,
                         "transport retries 0..7 (7 is seven, not infinite)",
                         [](const Profile& n) { return nlohmann::json(n.retry_cnt); }));
  o.push_back(nic_option("nic.rnr_retry", "--rnr-retry", OptionType::kInteger, "RNR retries 0..7 (7 = infinite)",
                         [](const Profile& n) { return nlohmann::json(n.rnr_retry); }));
  o.push_back(nic_option("nic.min_rnr_timer", "--min-rnr-timer", OptionType::kInteger,
                         "IBA RNR timer code 0..31 (12 = 0.64 ms)",
                         [](const Profile& n) { return nlohmann::json(n.min_rnr_timer); }));
  o.push_back(nic_option("nic.dscp", "--dscp", OptionType::kInteger, "data DSCP 0..63 the NIC sets",
                         [](const Profile& n) { return nlohmann::json(n.dscp); }));
  o.push_back(nic_option("nic.cnp_dscp", "--cnp-dscp", OptionType::kInteger, "CNP DSCP 0..63 the NIC sets",
                         [](const Profile& n) { return nlohmann::json(n.cnp_dscp); }));
  o.push_back(nic_option("nic.ecn", "--ecn", OptionType::kInteger, "ECN bits of the ToS byte: 0, 1 or 2",
                         [](const Profile& n) { return nlohmann::json(n.ecn); }));
  o.push_back(nic_option("nic.gid_index", "--gid-index", OptionType::kInteger,
                         "GID index 0..255 for `nic env`; default: discovered",
                         [](const Profile& n) { return n.gid_index ? nlohmann::json(*n.gid_index) : nlohmann::json(); }));
  o.push_back(nic_option("nic.interfaces", "-i,--interface", OptionType::kStringList,
                         "netdevs whose RDMA devices `nic` manages; default: interfaces",
                         [](const Profile& n) { return nlohmann::json(n.interfaces); }));
  return o;
}

// The flag as the docs show it: `nic`'s flags belong to that command.
std::string flag_text(const Option& o) {
  return o.flag_of == FlagOf::kNic ? o.long_flag() + " (nic)" : o.long_flag();
}

std::string json_text(const nlohmann::json& j, bool hex) {
  if (j.is_null()) return "";
  if (j.is_string()) return j.get<std::string>();
  if (j.is_number_integer()) return number_text(j.get<int64_t>(), hex);
  if (j.is_array()) {
    std::string s = "[";
    for (const auto& e : j) s += (s.size() > 1 ? ", " : "") + (e.is_string() ? in_quotes(e.get<std::string>()) : e.dump());
    return s + "]";
  }
  return j.dump();
}

}  // namespace

std::string_view shield_name(Shield s) {
  for (const auto& n : kShieldNames)
    if (n.second == s) return n.first;
  return "?";
}

std::string Option::env() const {
  std::string name = "ROCEGUARD_";
  for (char c : path) name += c == '.' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return name;
}

std::string Option::long_flag() const {
  const auto at = flag.find("--");
  return at == std::string_view::npos ? "" : std::string(flag.substr(at));
}

std::string Option::range_text() const { return spec_range_text(spec); }

std::string Option::default_text() const { return json_text(get(Config{}), spec.hex); }

const std::vector<Option>& options() {
  static const std::vector<Option> table = make_options();
  return table;
}

const std::vector<PeerField>& peer_fields() {
  static const std::vector<PeerField> fields = make_peer_fields();
  return fields;
}

const Option* find_option(std::string_view path) {
  for (const auto& o : options())
    if (o.path == path) return &o;
  return nullptr;
}

bool is_section(std::string_view name) {
  for (const auto& o : options())
    if (o.path.size() > name.size() && o.path.substr(0, name.size()) == name && o.path[name.size()] == '.')
      return true;
  return false;
}

std::optional<OptionValue> value_from_toml(const ValueSpec& spec, const toml::node& node, const std::string& key,
                                           ConfigProblems& p) {
  auto wrong = [&](const char* expected) -> std::optional<OptionValue> {
    p.errors.push_back(key + ": expected " + expected + ", got " + std::string(toml_type_name(node)));
    return std::nullopt;
  };
  switch (spec.type) {
    case OptionType::kInteger:
      if (const auto* v = node.as_integer()) return OptionValue(v->get());
      return wrong("an integer");
    case OptionType::kBoolean:
      if (const auto* v = node.as_boolean()) return OptionValue(v->get());
      return wrong("true or false");
    case OptionType::kString:
      if (const auto* v = node.as_string()) return OptionValue(v->get());
      return wrong("a string");
    case OptionType::kStringList: {
      const auto* a = node.as_array();
      if (!a) return wrong("an array");
      std::vector<std::string> list;
      for (size_t i = 0; i < a->size(); ++i) {
        if (const auto* s = (*a)[i].as_string()) list.push_back(s->get());
        else p.errors.push_back(element_key(key, i) + ": expected a string, got " + std::string(toml_type_name((*a)[i])));
      }
      return OptionValue(std::move(list));
    }
    case OptionType::kTableList:
      if (const auto* a = node.as_array()) return OptionValue(*a);
      return wrong("an array");
  }
  return std::nullopt;
}

std::optional<OptionValue> value_from_text(const ValueSpec& spec, const std::vector<std::string>& texts,
                                           const std::string& key, ConfigProblems& p) {
  if (spec.type == OptionType::kStringList) return OptionValue(texts);
  const std::string text = texts.empty() ? "" : texts.back();
  switch (spec.type) {
    case OptionType::kInteger:
      if (auto v = parse_integer(text)) return OptionValue(*v);
      p.errors.push_back(key + ": expected an integer, got " + in_quotes(text));
      return std::nullopt;
    case OptionType::kBoolean:
      if (text == "true" || text == "1") return OptionValue(true);
      if (text == "false" || text == "0") return OptionValue(false);
      p.errors.push_back(key + ": expected true or false, got " + in_quotes(text));
      return std::nullopt;
    case OptionType::kTableList:
      // Tables have no flat spelling: the text is a TOML inline array.
      try {
        toml::table doc = toml::parse("value = " + text);
        if (const auto* a = doc["value"].as_array()) return OptionValue(*a);
        p.errors.push_back(key + ": expected a TOML array of inline tables, [{ name = ..., ... }]");
      } catch (const toml::parse_error& e) {
        p.errors.push_back(key + ": not a TOML array of inline tables: " + std::string(e.description()));
      }
      return std::nullopt;
    default:
      return OptionValue(text);
  }
}

void assign(const Option& opt, Config& cfg, const OptionValue& value, const std::string& key, ConfigProblems& p) {
  if (within_spec(opt.spec, value, key, p)) opt.set(cfg, value, key, p);
}

void apply_environment(Config& cfg, ConfigProblems& p, const EnvLookup& lookup) {
  for (const auto& opt : options()) {
    const std::string name = opt.env();
    const char* text = lookup ? lookup(name.c_str()) : std::getenv(name.c_str());
    if (!text) continue;
    std::vector<std::string> texts;
    if (opt.spec.type == OptionType::kStringList) {
      // One variable holds the whole list: "eth1,eth2" or "eth1 eth2".
      std::string item;
      for (const char* c = text;; ++c) {
        if (*c == '\0' || *c == ',' || std::isspace(static_cast<unsigned char>(*c))) {
          if (!item.empty()) texts.push_back(item);
          item.clear();
          if (*c == '\0') break;
        } else {
          item += *c;
        }
      }
    } else {
      texts.push_back(text);
    }
    if (auto v = value_from_text(opt.spec, texts, name, p)) assign(opt, cfg, *v, name, p);
  }
}

void apply_flags(Config& cfg, const FlagValues& flags, ConfigProblems& p) {
  for (const auto& [path, texts] : flags) {
    const Option* opt = find_option(path);
    if (!opt) continue;
    const std::string key = opt->long_flag().empty() ? std::string(opt->path) : opt->long_flag();
    if (auto v = value_from_text(opt->spec, texts, key, p)) assign(*opt, cfg, *v, key, p);
  }
}

std::string options_text() {
  std::ostringstream o;
  o << "Configuration options: file key, environment variable, flag; range; default\n"
       "(precedence: default < file < environment < flag)\n";
  auto row = [&](const std::string& key, const std::string& env, const std::string& flag, const std::string& range,
                 const std::string& def, std::string_view help) {
    o << "  " << key << "  " << env << (flag.empty() ? "" : "  " + flag) << (range.empty() ? "" : "  " + range)
      << (def.empty() ? "" : "  default " + def) << "\n      " << help << "\n";
  };
  for (const auto& opt : options()) {
    row(std::string(opt.path), opt.env(), flag_text(opt), opt.range_text(), opt.default_text(), opt.help);
    if (opt.spec.type == OptionType::kTableList)
      for (const auto& f : peer_fields()) {
        const std::string range = spec_range_text(f.spec);
        o << "    ." << f.key << (range.empty() ? "" : "  " + range) << (f.missing.empty() ? "" : "  required")
          << "  " << f.help << "\n";
      }
  }
  return o.str();
}

std::string options_markdown() {
  std::ostringstream o;
  auto code = [](const std::string& s) { return s.empty() ? std::string() : "`" + s + "`"; };
  o << "| key | environment | flag | type | range | default | meaning |\n"
    << "|---|---|---|---|---|---|---|\n";
  for (const auto& opt : options()) {
    o << "| " << code(std::string(opt.path)) << " | " << code(opt.env()) << " | " << code(opt.long_flag()) << (opt.flag_of == FlagOf::kNic ? " (nic)" : "") << " | "
      << type_text(opt.spec) << " | " << opt.range_text() << " | " << code(opt.default_text()) << " | " << opt.help
      << " |\n";
    if (opt.spec.type == OptionType::kTableList)
      for (const auto& f : peer_fields()) {
        const std::string range = spec_range_text(f.spec);
        o << "| " << code(std::string(opt.path) + "[]." + std::string(f.key)) << " | | | " << type_text(f.spec) << " | "
          << range << " | " << (f.missing.empty() ? "" : "required") << " | " << f.help << " |\n";
      }
  }
  return o.str();
}

// Text for a troff page: backslashes and a leading control character
// escaped, hyphens as minus signs (they are typed as such).
std::string troff_text(std::string_view in) {
  std::string out;
  for (char c : in) {
    if (c == '\\') out += "\\e";
    else if (c == '-') out += "\\-";
    else out += c;
  }
  if (!out.empty() && (out[0] == '.' || out[0] == '\'')) out.insert(0, "\\&");
  return out;
}

std::string options_man() {
  std::ostringstream o;
  auto item = [&](const std::string& key, const std::string& type, const std::string& range,
                  const std::string& def, const std::string& env, const std::string& flag, std::string_view help) {
    o << ".TP\n.B " << troff_text(key) << "\n" << troff_text(type);
    if (!range.empty()) o << "; " << troff_text(range);
    if (!def.empty()) o << "; default \\fB" << troff_text(def) << "\\fR";
    o << "\n.br\n" << troff_text(help) << "\n";
    if (!env.empty() || !flag.empty()) {
      o << ".br\n";
      if (!env.empty()) o << "Environment \\fB" << troff_text(env) << "\\fR";
      if (!flag.empty()) o << (env.empty() ? "Flag" : ", flag") << " \\fB" << troff_text(flag) << "\\fR";
      o << ".\n";
    }
  };
  for (const auto& opt : options()) {
    std::string flag = opt.long_flag();
    if (!flag.empty()) flag += opt.flag_of == FlagOf::kNic ? " (nic)" : "";
    item(std::string(opt.path), type_text(opt.spec), opt.range_text(), opt.default_text(), opt.env(), flag, opt.help);
    if (opt.spec.type == OptionType::kTableList)
      for (const auto& f : peer_fields())
        item(std::string(opt.path) + "[]." + std::string(f.key), type_text(f.spec),
             spec_range_text(f.spec) + (f.missing.empty() ? "" : spec_range_text(f.spec).empty() ? "required" : "; required"),
             "", "", "", f.help);
  }
  return o.str();
}

nlohmann::json options_json() {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& opt : options()) {
    out.push_back({{"key", opt.path}, {"environment", opt.env()}, {"flag", opt.long_flag()},
                   {"flag_of", opt.flag_of == FlagOf::kNic      ? nlohmann::json{"nic"}
                               : opt.flag_of == FlagOf::kDaemon ? nlohmann::json{"run", "attach", "config check"}
                                                                : nlohmann::json::array()},
                   {"type", type_text(opt.spec)}, {"range", opt.range_text()}, {"default", opt.default_text()},
                   {"meaning", opt.help}});
    if (opt.spec.type == OptionType::kTableList)
      for (const auto& f : peer_fields())
        out.push_back({{"key", std::string(opt.path) + "[]." + std::string(f.key)}, {"environment", ""},
                       {"flag", ""}, {"flag_of", nlohmann::json::array()}, {"type", type_text(f.spec)}, {"range", spec_range_text(f.spec)},
                       {"default", f.missing.empty() ? "" : "required"}, {"meaning", f.help}});
  }
  return out;
}

}  // namespace rg
