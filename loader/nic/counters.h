// RDMA NIC counters from sysfs: the NIC's own view of loss and congestion
// (hw_counters/ and the IBA port counters/), for the ports that carry a
// given network interface. Read on every call, never cached.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rg::nic {

inline constexpr const char* kSysfsRoot = "/sys";

struct RdmaPort {
  std::string device;  // ib device, e.g. mlx5_0, rxe0
  uint32_t port = 0;
};

struct NicCounter {
  std::string device;
  uint32_t port = 0;
  std::string interface;
  // node_exporter's node_infiniband_* name without prefix and _total, e.g.
  // out_of_sequence, port_data_received_bytes.
  std::string name;
  std::string file;    // hw_counters/<x> or counters/<x>, relative to the port
  uint64_t value = 0;  // in the unit the name says (bytes for *_bytes)
  uint64_t scale = 1;  // what the file's value was multiplied by
};

// Ports of RDMA devices bound to ifname: a GID of the port names it
// (gid_attrs/ndevs, how rxe and mlx5 both say it), the device hangs off the
// interface's PCI function (class/net/<if>/device/infiniband), or a soft
// device names it as its parent. Empty when the interface has no RDMA device.
std::vector<RdmaPort> rdma_ports_of(const std::string& ifname,
                                    const std::string& sysfs_root = kSysfsRoot);

// Every counter of every port of every interface that has one. Files that
// vanish or do not hold a number while being read are skipped: devices come
// and go, and a missing counter must not cost the rest.
std::vector<NicCounter> read_nic_counters(const std::vector<std::string>& interfaces,
                                          const std::string& sysfs_root = kSysfsRoot);

// Metric name (without roceguard_nic_ and _total) and scale for a counter
// file; dir is "hw_counters" or "counters". Empty name: not a counter.
struct NicCounterName {
  std::string name;
  uint64_t scale = 1;
};
NicCounterName nic_counter_name(const std::string& dir, const std::string& file);

}  // namespace rg::nic
