#include "nic/counters.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <utility>

#include "nic/sysfs.h"

namespace rg::nic {
namespace fs = std::filesystem;

namespace {

// IBA port counters (counters/) renamed as node_exporter's infiniband
// collector names them, so dashboards written for node_infiniband_* only
// need the prefix changed. Data counters count 4-byte words (IBA 16.1.3.5:
// PortXmitData/PortRcvData are "octets divided by 4").
struct PortCounterRename {
  std::string_view file;
  std::string_view name;
  uint64_t scale;
};
constexpr PortCounterRename kPortCounters[] = {
    {"port_rcv_data", "port_data_received_bytes", 4},
    {"port_xmit_data", "port_data_transmitted_bytes", 4},
    {"port_rcv_packets", "port_packets_received", 1},
    {"port_xmit_packets", "port_packets_transmitted", 1},
    {"port_rcv_errors", "port_errors_received", 1},
    {"port_xmit_discards", "port_discards_transmitted", 1},
    {"port_rcv_constraint_errors", "port_constraint_errors_received", 1},
    {"port_xmit_constraint_errors", "port_constraint_errors_transmitted", 1},
    {"port_xmit_wait", "port_transmit_wait", 1},
    {"unicast_rcv_packets", "unicast_packets_received", 1},
    {"unicast_xmit_packets", "unicast_packets_transmitted", 1},
    {"multicast_rcv_packets", "multicast_packets_received", 1},
    {"multicast_xmit_packets", "multicast_packets_transmitted", 1},
};

std::string metric_safe(std::string_view file) {
  std::string out;
  out.reserve(file.size());
  for (char ch : file) {
    unsigned char c = static_cast<unsigned char>(ch);
    out += std::isalnum(c) ? static_cast<char>(std::tolower(c)) : '_';
  }
  // The exporter appends _total; a driver name ending in it must not double it.
  constexpr std::string_view kTotal = "_total";
  if (out.size() > kTotal.size() && out.ends_with(kTotal)) out.resize(out.size() - kTotal.size());
  return out;
}

std::optional<uint32_t> port_number(const fs::path& p) {
  const std::string s = p.filename().string();
  if (s.empty() || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  return static_cast<uint32_t>(std::strtoul(s.c_str(), nullptr, 10));
}

using PortKey = std::pair<std::string, uint32_t>;

// Which netdevs each RDMA port serves, in one pass over the class directory.
std::map<PortKey, std::set<std::string>> port_netdevs(const std::string& sysfs_root,
                                                      const std::vector<std::string>& ifnames) {
  std::map<PortKey, std::set<std::string>> out;
  const fs::path ib = fs::path(sysfs_root) / "class/infiniband";
  for (const auto& dev : sorted_entries(ib)) {
    const std::string name = dev.filename().string();
    auto parent = read_attr(dev / "parent");  // rxe and siw name their netdev
    for (const auto& port_dir : sorted_entries(dev / "ports")) {
      auto port = port_number(port_dir);
      if (!port) continue;
      auto& netdevs = out[{name, *port}];
      if (parent) netdevs.insert(*parent);
      for (const auto& gid : sorted_entries(port_dir / "gid_attrs/ndevs"))
        if (auto nd = read_attr(gid); nd && !nd->empty()) netdevs.insert(*nd);
    }
  }
  // A PCI RDMA function without any GID populated yet (link down) still
  // belongs to the netdev of the same function.
  for (const auto& ifname : ifnames)
    for (const auto& dev : sorted_entries(fs::path(sysfs_root) / "class/net" / ifname /
                                          "device/infiniband"))
      for (const auto& port_dir : sorted_entries(ib / dev.filename() / "ports"))
        if (auto port = port_number(port_dir))
          out[{dev.filename().string(), *port}].insert(ifname);
  return out;
}

}  // namespace

NicCounterName nic_counter_name(const std::string& dir, const std::string& file) {
  // hw_counters/lifespan is how long the driver caches the values (ms), not
  // a counter.
  if (dir == "hw_counters" && file == "lifespan") return {};
  if (dir == "counters")
    for (const auto& r : kPortCounters)
      if (r.file == file) return {std::string(r.name), r.scale};
  return {metric_safe(file), 1};
}

std::vector<RdmaPort> rdma_ports_of(const std::string& ifname, const std::string& sysfs_root) {
  std::vector<RdmaPort> out;
  for (const auto& [key, netdevs] : port_netdevs(sysfs_root, {ifname}))
    if (netdevs.count(ifname)) out.push_back({key.first, key.second});
  return out;
}

std::vector<NicCounter> read_nic_counters(const std::vector<std::string>& interfaces,
                                          const std::string& sysfs_root) {
  std::vector<NicCounter> out;
  if (interfaces.empty()) return out;
  const auto ports = port_netdevs(sysfs_root, interfaces);
  const fs::path ib = fs::path(sysfs_root) / "class/infiniband";
  for (const auto& ifname : interfaces) {
    for (const auto& [key, netdevs] : ports) {
      if (!netdevs.count(ifname)) continue;
      const fs::path port_dir = ib / key.first / "ports" / std::to_string(key.second);
      std::set<std::string> taken;
      // Port counters first: where a driver repeats one in hw_counters
      // (rxe's link_downed), the IBA one keeps the plain name.
      for (const char* dir : {"counters", "hw_counters"}) {
        for (const auto& file : sorted_entries(port_dir / dir)) {
          const std::string fname = file.filename().string();
          NicCounterName n = nic_counter_name(dir, fname);
          if (n.name.empty()) continue;
          auto v = read_u64_attr(file);
          if (!v) continue;
          if (taken.count(n.name)) n.name = "hw_" + n.name;
          taken.insert(n.name);
          out.push_back({key.first, key.second, ifname, n.name, std::string(dir) + "/" + fname,
                         *v * n.scale, n.scale});
        }
      }
    }
  }
  return out;
}

}  // namespace rg::nic
