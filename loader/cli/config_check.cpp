// The one validation run, attach and `config check` share: a configuration
// `config check` accepts is one run starts with, and the other way round.
// Kept apart from config/config.cpp because it looks at this machine (interfaces,
// addresses, the metrics endpoint's web configuration file), which the
// config fuzzer does not link, and at the data plane's attach record (config_check.h).
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "cli/config_check.h"
#include "common/error.h"
#include "dataplane/state.h"
#include "dataplane/tunnel_auth.h"
#include "metrics/web_config.h"

namespace rg {
namespace {

std::vector<Address> host_addresses() {
  std::vector<Address> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr) continue;
    Address a;
    a.family = i->ifa_addr->sa_family;
    if (a.family == AF_INET)
      std::memcpy(a.bytes.data(), &reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr, 4);
    else if (a.family == AF_INET6)
      std::memcpy(a.bytes.data(), &reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr, 16);
    else
      continue;
    out.push_back(a);
  }
  freeifaddrs(list);
  return out;
}

bool is_local(const Address& a, const std::vector<Address>& local) {
  for (const auto& l : local)
    if (l.family == a.family && l.bytes == a.bytes) return true;
  return false;
}

// "[::]:9741" -> "::", "0.0.0.0:9741" -> "0.0.0.0"; the form was checked
// when the option was read.
std::string listen_host(const std::string& listen) {
  if (!listen.empty() && listen[0] == '[') return listen.substr(1, listen.find(']') - 1);
  return listen.substr(0, listen.rfind(':'));
}

bool is_wildcard(const Address& a) {
  return std::all_of(a.bytes.begin(), a.bytes.end(), [](uint8_t b) { return b == 0; });
}

bool is_loopback(const Address& a) {
  return (a.family == AF_INET && a.bytes[0] == 127) ||
         (a.family == AF_INET6 && a.bytes[15] == 1 &&
          std::all_of(a.bytes.begin(), a.bytes.begin() + 15, [](uint8_t b) { return b == 0; }));
}

// The probes' address must not be the scrapes' (bind would fail at start):
// the same port on the same address, or on a wildcard covering the other.
void check_health_listen(const Config& cfg, ConfigProblems& p) {
  if (cfg.health_listen.empty()) return;
  auto port = [](const std::string& listen) { return listen.substr(listen.rfind(':') + 1); };
  if (port(cfg.health_listen) != port(cfg.metrics_listen) || port(cfg.health_listen) == "0") return;
  const auto health = parse_address(listen_host(cfg.health_listen));
  const auto metrics = parse_address(listen_host(cfg.metrics_listen));
  if (!health || !metrics) return;
  if (health->bytes == metrics->bytes || is_wildcard(*health) || is_wildcard(*metrics))
    p.errors.push_back("metrics.health_listen: " + in_quotes(cfg.health_listen) + " is where metrics.listen (" +
                       cfg.metrics_listen + ") serves; the probes need an address or port of their own");
}

// What the data plane and the attach record can hold, checked here so that a
// configuration past them is refused before anything is attached, not
// halfway through an attach. Peer and route counts against rg_peers,
// rg_decap and rg_route4/6 are checked where the peers are read
// (config/config.cpp).
void check_limits(const Config& cfg, ConfigProblems& p) {
  // rg_counters holds one entry per {ifindex, direction}.
  constexpr size_t kMaxInterfaces = RG_MAX_COUNTER_KEYS / RG_DIR_MAX;
  if (cfg.interfaces.size() > kMaxInterfaces)
    p.errors.push_back("interfaces: " + std::to_string(cfg.interfaces.size()) + " interfaces, at most " +
                       std::to_string(kMaxInterfaces) + " (the counter map holds " +
                       std::to_string(RG_MAX_COUNTER_KEYS) + " interface and direction pairs)");

  // The record as attach will write it, every number at its widest: the
  // configuration, and per interface its name, the largest ifindex and
  // program ids, and the longer XDP mode.
  State worst;
  worst.version = ROCEGUARD_VERSION;
  worst.config = cfg.to_json();
  worst.config_hash = cfg.hash();
  for (const auto& name : cfg.interfaces) {
    IfaceState is;
    is.name = name;
    is.ifindex = std::numeric_limits<int>::min();
    is.xdp_mode = "dispatcher";
    is.xdp_prog_id = is.tc_prog_id = is.tc_ingress_prog_id = is.tc_handle = std::numeric_limits<uint32_t>::max();
    is.tc_priority = std::numeric_limits<uint32_t>::max();
    worst.interfaces.push_back(is);
  }
  const size_t size = state_record_size(worst);
  if (size >= kStateValueSize)
    p.errors.push_back("tunnel.peer, interfaces: the attach record of this configuration takes up to " +
                       std::to_string(size) + " bytes, more than the " + std::to_string(kStateValueSize - 1) +
                       " the pinned record (" + kMapState + ") holds; use fewer peers, routes or interfaces");
}

}  // namespace

void check_config(const Config& cfg, bool offline, ConfigProblems& p) {
  if (cfg.interfaces.empty())
    p.errors.push_back(
        "interfaces: none given; use --interface IF, ROCEGUARD_INTERFACES or interfaces = [...] in the config");

  check_health_listen(cfg, p);
  check_limits(cfg, p);
  if (offline) return;

  // The web configuration and the certificate and key it names are files
  // of this machine.
  if (!cfg.web_config.empty()) {
    try {
      load_web_config(cfg.web_config);
    } catch (const Error& e) {
      p.errors.push_back(e.what());
    }
  }

  for (size_t i = 0; i < cfg.interfaces.size(); ++i)
    if (if_nametoindex(cfg.interfaces[i].c_str()) == 0)
      p.absent_interfaces.push_back("interfaces[" + std::to_string(i) + "]: interface " + cfg.interfaces[i] +
                          " does not exist (check `ip link`; in a container, use the host network)");

  // Read as the attach will, so that a key file it cannot use stops the
  // configuration here.
  for (size_t i = 0; i < cfg.peers.size(); ++i) {
    const std::string& file = cfg.peers[i].key_file;
    if (file.empty()) continue;
    try {
      read_key_file(file);
    } catch (const Error& e) {
      p.errors.push_back("tunnel.peer[" + std::to_string(i) + "].key_file: " + e.what() + " (" + file + ")");
    }
  }

  const std::vector<Address> local = host_addresses();
  for (size_t i = 0; i < cfg.peers.size(); ++i) {
    const Address& a = cfg.peers[i].local;
    if (a.family && !is_local(a, local))
      p.missing.push_back("tunnel.peer[" + std::to_string(i) + "].local: " + a.text +
                          " is not an address of this host (the outer source; check `ip addr`)");
  }
  for (const auto& [key, listen] : {std::pair{"metrics.listen", &cfg.metrics_listen},
                                     std::pair{"metrics.health_listen", &cfg.health_listen}}) {
    if (listen->empty()) continue;
    auto host = parse_address(listen_host(*listen));
    // Loopback is this host's on every host, listed or not: a fresh network
    // namespace or a minimal guest has lo down and no address on it yet.
    if (host && !is_wildcard(*host) && !is_loopback(*host) && !is_local(*host, local))
      p.missing.push_back(std::string(key) + ": " + host->text +
                          " is not an address of this host (use one from `ip addr`, 127.0.0.1 or 0.0.0.0)");
  }
}

Config load_config(const ConfigSources& sources, bool offline, bool wait_for_interfaces) {
  ConfigProblems p;
  Config cfg = resolve_config(sources, p);
  check_config(cfg, offline, p);
  if (!wait_for_interfaces) p.missing.insert(p.missing.begin(), p.absent_interfaces.begin(), p.absent_interfaces.end());
  if (!p.errors.empty()) {
    std::string msg = sources.file.empty() ? "invalid options:" : "invalid configuration " + sources.file + ":";
    for (const auto& e : p.errors) msg += "\n  " + e;
    for (const auto& e : p.missing) msg += "\n  " + e;
    throw Error(msg, kExitUsage);
  }
  if (!p.missing.empty()) {
    std::string msg = p.missing.front();
    for (size_t i = 1; i < p.missing.size(); ++i) msg += "\n  " + p.missing[i];
    throw Error(msg, kExitNotFound);
  }
  return cfg;
}

}  // namespace rg
