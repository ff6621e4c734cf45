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
#include <vector>

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

// Counter help says what one count is; the `driver` label says whose file.
const std::vector<NicMeaning> kMeanings = {
    // metric, help, kind,
    //   mlx5 (drivers/infiniband/hw/mlx5/counters.c),
    //   rxe (drivers/infiniband/sw/rxe/rxe_hw_counters.c),
    //   bnxt_re (drivers/infiniband/hw/bnxt_re/hw_counters.c: the names
    //     before and after the 2025 rename to mlx5's)
    {"out_of_sequence",
     "Packets the responder received with a PSN beyond the expected one and dropped (a gap: something before it was lost)",
     NicValueKind::Counter, "out_of_sequence", "out_of_seq_request", "oos_drop_count|out_of_sequence"},
    {"packet_seq_err",
     "NAKs with the PSN sequence error syndrome the requester received: its peer saw a gap and asked for a resend",
     NicValueKind::Counter, "packet_seq_err", "rcvd_seq_err", "seq_err_naks_rcvd|packet_seq_err"},
    {"implied_nak_seq_err",
     "Responses the requester found missing from a later ACK or read response (an implied NAK) and resent for",
     NicValueKind::Counter, "implied_nak_seq_err", "", "missing_resp|implied_nak_seq_err"},
    {"local_ack_timeout_err",
     "Times the requester's ACK timer ran out and it resent (the QP's local ACK timeout)",
     NicValueKind::Counter, "local_ack_timeout_err", "", "to_retransmits|local_ack_timeout_err"},
    {"duplicate_request",
     "Requests the responder received again (a resend of something it already had)",
     NicValueKind::Counter, "duplicate_request", "duplicate_request", "dup_req|duplicate_request"},
    {"rnr_nak_retry_err",
     "RNR NAKs the requester received (its peer had no receive buffer) and retried after the RNR timer",
     NicValueKind::Counter, "rnr_nak_retry_err", "rcvd_rnr_err", "rnr_naks_rcvd|rnr_nak_retry_err"},
    {"np_cnp_sent",
     "Congestion notification packets sent as notification point (for ECN-marked packets received)",
     NicValueKind::Counter, "np_cnp_sent", "", "tx_cnp_pkts|np_cnp_pkts"},
    {"rp_cnp_handled",
     "Congestion notification packets handled as reaction point (each slows a sending QP down)",
     NicValueKind::Counter, "rp_cnp_handled", "", "rx_cnp_pkts|rp_cnp_handled"},
    {"np_ecn_marked_roce_packets",
     "RoCE packets received with the ECN congestion-experienced mark",
     NicValueKind::Counter, "np_ecn_marked_roce_packets", "", "rx_ecn_marked_pkts|np_ecn_marked_roce_packets"},
    {"req_transport_retries_exceeded",
     "Requests that ran out of transport retries; each moved its QP to the error state (IBV_WC_RETRY_EXC_ERR)",
     NicValueKind::Counter, "req_transport_retries_exceeded", "retry_exceeded_err", "max_retry_exceeded"},
    {"req_rnr_retries_exceeded",
     "Requests that ran out of RNR retries; each moved its QP to the error state (IBV_WC_RNR_RETRY_EXC_ERR)",
     NicValueKind::Counter, "req_rnr_retries_exceeded", "retry_rnr_exceeded_err", ""},
    // Not events: how many resources exist now and the most there were.
    {"", "", NicValueKind::Gauge, "", "", "active_*|watermark_*|db_fifo_register"},
};

std::string_view files_of(const NicMeaning& m, std::string_view driver) {
  if (driver == "mlx5") return m.mlx5;
  if (driver == "rxe") return m.rxe;
  if (driver == "bnxt_re") return m.bnxt_re;
  return {};
}

// The alternatives of a '|'-separated list, in order.
std::vector<std::string_view> alternatives(std::string_view list) {
  std::vector<std::string_view> out;
  while (!list.empty()) {
    const size_t bar = list.find('|');
    out.push_back(list.substr(0, bar));
    list = bar == std::string_view::npos ? std::string_view{} : list.substr(bar + 1);
  }
  return out;
}

bool matches(std::string_view pattern, std::string_view file) {
  if (pattern.ends_with('*')) return file.starts_with(pattern.substr(0, pattern.size() - 1));
  return pattern == file;
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

const std::vector<NicMeaning>& nic_meanings() { return kMeanings; }

std::string rdma_driver_name(const std::string& kernel_driver) {
  // The ib device hangs off the PCI function (mlx5_core, bnxt_en) or, on
  // some kernels, the auxiliary device (mlx5_ib.rdma, bnxt_re.rdma).
  if (kernel_driver.starts_with("mlx5_")) return "mlx5";
  if (kernel_driver.starts_with("bnxt_")) return "bnxt_re";
  return kernel_driver;
}

const NicMeaning* nic_meaning_of(std::string_view driver, std::string_view file) {
  for (const auto& m : kMeanings)
    for (std::string_view pattern : alternatives(files_of(m, driver)))
      if (matches(pattern, file)) return &m;
  return nullptr;
}

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
      const std::string driver = rdma_driver_name(ib_device_driver(ib / key.first));
      // Each meaning once per port, from the first of its alternatives
      // present: meaning -> (alternative, index in out).
      std::map<const NicMeaning*, std::pair<size_t, size_t>> meant;
      for (const char* dir : {"counters", "hw_counters"}) {
        const bool hw = std::string_view(dir) == "hw_counters";
        for (const auto& file : sorted_entries(port_dir / dir)) {
          const std::string fname = file.filename().string();
          NicCounterName n = nic_counter_name(dir, fname);
          if (n.name.empty()) continue;
          auto v = read_u64_attr(file);
          if (!v) continue;
          NicCounter c{key.first, key.second, ifname, driver, dir, fname, n.name,
                       NicValueKind::Counter, *v * n.scale, n.scale};
          if (hw) {
            c.name.clear();
            if (const NicMeaning* m = nic_meaning_of(driver, fname)) {
              c.kind = m->kind;
              if (!m->metric.empty()) {
                const auto alts = alternatives(files_of(*m, driver));
                const size_t alt = static_cast<size_t>(
                    std::find_if(alts.begin(), alts.end(),
                                 [&](std::string_view a) { return matches(a, fname); }) -
                    alts.begin());
                auto [it, fresh] = meant.try_emplace(m, alt, out.size());
                if (!fresh && alt < it->second.first) it->second = {alt, out.size()};
              }
            }
          }
          out.push_back(std::move(c));
        }
      }
      for (const auto& [m, chosen] : meant) {
        out[chosen.second].name = std::string(m->metric);
        out[chosen.second].meaning = m;
      }
    }
  }
  return out;
}

}  // namespace rg::nic
