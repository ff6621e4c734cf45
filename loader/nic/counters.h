// RDMA NIC counters from sysfs: the NIC's own view of loss and congestion
// (hw_counters/ and the IBA port counters/), for the ports that carry a
// given network interface. Read on every call, never cached.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rg::nic {

inline constexpr const char* kSysfsRoot = "/sys";

struct RdmaPort {
  std::string device;  // ib device, e.g. mlx5_0, rxe0
  uint32_t port = 0;
};

enum class NicValueKind { Counter, Gauge };

// One meaning of the NIC's hw_counters, and the file each driver says it in.
// This table is the only place a driver's names are known: the exporter
// publishes a meaning as roceguard_nic_<metric>_total{driver=...} whatever
// file it came from. The names are mlx5's, which bnxt_re adopted in 2025 and
// monitoring already knows. A row without a metric only gives its files a
// kind (bnxt_re's resource counts and high-water marks are gauges).
struct NicMeaning {
  std::string_view metric;  // roceguard_nic_<metric>_total; "" for none
  std::string_view help;
  NicValueKind kind;
  // The file names under hw_counters/ for each driver, alternatives
  // separated by '|' (the first one present wins), a trailing '*' matching
  // any rest; "" where the driver has no such counter.
  std::string_view mlx5, rxe, bnxt_re;
};
const std::vector<NicMeaning>& nic_meanings();

// The RDMA driver name the driver label carries ("mlx5", "rxe", "bnxt_re")
// for the kernel driver sysfs names (ib_device_driver: "mlx5_core",
// "bnxt_en", "rxe"); other drivers keep their name. Only these three have
// rows in nic_meanings(): another driver's hw_counters are exported under
// their file names alone.
std::string rdma_driver_name(const std::string& kernel_driver);

// The row of nic_meanings() that names file of driver, nullptr for none.
const NicMeaning* nic_meaning_of(std::string_view driver, std::string_view file);

struct NicCounter {
  std::string device;
  uint32_t port = 0;
  std::string interface;
  std::string driver;  // rdma_driver_name(), "" if sysfs does not say
  std::string dir;     // "hw_counters" or "counters"
  std::string file;    // the file's name in dir, as the driver spells it
  // counters/: node_exporter's node_infiniband_* name without prefix and
  // _total, e.g. port_data_received_bytes. hw_counters/: the meaning's
  // metric (nic_meanings()), "" when the file has none.
  std::string name;
  NicValueKind kind = NicValueKind::Counter;
  uint64_t value = 0;  // in the unit the name says (bytes for *_bytes)
  uint64_t scale = 1;  // what the file's value was multiplied by
  const NicMeaning* meaning = nullptr;  // the nic_meanings() row name is from; nullptr when name is not one
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
// file; dir is "hw_counters" or "counters". Empty name: not a counter. The
// port counters (counters/, the same on every driver) are exported under
// this name; a hw_counters file under its meaning and its own file name.
struct NicCounterName {
  std::string name;
  uint64_t scale = 1;
};
NicCounterName nic_counter_name(const std::string& dir, const std::string& file);

}  // namespace rg::nic
