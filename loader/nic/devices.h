// RDMA device discovery: libibverbs for ports and GIDs, sysfs where verbs
// has no answer (GID type on old providers, the bound netdev, the driver).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace rg::nic {

struct GidEntry {
  int index = 0;
  std::string gid;      // "fe80::...", "::ffff:192.0.2.1"
  std::string type;     // "IB/RoCE v1" or "RoCE v2"
  std::string netdev;   // bound netdev of this entry, "" if none
  std::string address;  // IPv4/IPv6 the GID carries, "" for link-local GIDs
};

struct PortInfo {
  int num = 0;
  std::string state;       // "ACTIVE", "DOWN", ...
  std::string link_layer;  // "Ethernet", "InfiniBand"
  int active_mtu = 0;      // bytes
  int active_mtu_enum = 0; // enum ibv_mtu, what a QP's path_mtu takes
  std::string netdev;
  std::vector<GidEntry> gids;
};

struct DeviceInfo {
  std::string name;    // "rxe0", "mlx5_0"
  std::string driver;  // "rxe", "mlx5_core", ... ("" if unknown)
  std::string node_guid;
  std::vector<PortInfo> ports;

  bool is_mlx5() const;
};

// Every RDMA device. Empty when there is none (no provider, no driver).
// sysfs_root is /sys/class/infiniband except in tests.
std::vector<DeviceInfo> discover(const std::string& sysfs_root = "/sys/class/infiniband");

// The RoCE v2 GID index to use for address (or the first RoCE v2 GID with an
// IPv4 address when address is empty) on the port. nullopt if there is none.
std::optional<int> roce_v2_gid_index(const PortInfo& port, const std::string& address = "");

// Devices with a port bound to one of the interfaces (all when empty).
std::vector<DeviceInfo> select(const std::vector<DeviceInfo>& devices,
                               const std::vector<std::string>& interfaces);

nlohmann::json to_json(const std::vector<DeviceInfo>& devices);
std::vector<std::string> to_text(const std::vector<DeviceInfo>& devices);

// "no RDMA device found [on eth0, eth1] (...how to get one)".
std::string no_device_message(const std::vector<std::string>& interfaces);

}  // namespace rg::nic
