#include "nic/devices.h"

#include <arpa/inet.h>
#include <endian.h>
#include <net/if.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "common/text.h"
#include "nic/sysfs.h"

namespace fs = std::filesystem;

namespace rg::nic {

namespace {

std::string gid_text(const uint8_t raw[16]) {
  char buf[INET6_ADDRSTRLEN];
  inet_ntop(AF_INET6, raw, buf, sizeof(buf));
  return buf;
}

// The IP address a RoCE GID is derived from: IPv4-mapped for IPv4, the GID
// itself for a global IPv6 address, nothing for the link-local one.
std::string gid_address(const uint8_t raw[16]) {
  static constexpr uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  char buf[INET6_ADDRSTRLEN];
  if (std::equal(v4mapped, v4mapped + 12, raw)) {
    inet_ntop(AF_INET, raw + 12, buf, sizeof(buf));
    return buf;
  }
  if (raw[0] == 0xfe && (raw[1] & 0xc0) == 0x80) return "";
  return gid_text(raw);
}

bool gid_is_zero(const uint8_t raw[16]) {
  return std::all_of(raw, raw + 16, [](uint8_t b) { return b == 0; });
}

const char* port_state_name(ibv_port_state s) {
  switch (s) {
    case IBV_PORT_DOWN: return "DOWN";
    case IBV_PORT_INIT: return "INIT";
    case IBV_PORT_ARMED: return "ARMED";
    case IBV_PORT_ACTIVE: return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER: return "ACTIVE_DEFER";
    default: return "NOP";
  }
}

const char* gid_type_name(uint32_t t) {
  switch (t) {
    case IBV_GID_TYPE_IB: return "IB";
    case IBV_GID_TYPE_ROCE_V1: return "IB/RoCE v1";
    case IBV_GID_TYPE_ROCE_V2: return "RoCE v2";
    default: return "unknown";
  }
}

struct ContextCloser {
  void operator()(ibv_context* c) const { ibv_close_device(c); }
};

void fill_gids(ibv_context* ctx, const fs::path& port_dir, PortInfo& port, int gid_tbl_len,
               int port_count) {
  // Provider-independent path first; older kernels lack the ioctl behind it.
  // The table call answers for every port of the device at once.
  std::vector<ibv_gid_entry> entries(static_cast<size_t>(std::max(gid_tbl_len, 1)) *
                                     std::max(port_count, 1));
  ssize_t n = ibv_query_gid_table(ctx, entries.data(), entries.size(), 0);
  if (n >= 0) {
    for (ssize_t i = 0; i < n; i++) {
      const ibv_gid_entry& e = entries[i];
      if (e.port_num != static_cast<uint32_t>(port.num)) continue;
      GidEntry g;
      g.index = static_cast<int>(e.gid_index);
      g.gid = gid_text(e.gid.raw);
      g.type = gid_type_name(e.gid_type);
      g.address = gid_address(e.gid.raw);
      char ifname[IF_NAMESIZE] = {};
      if (e.ndev_ifindex && if_indextoname(e.ndev_ifindex, ifname)) g.netdev = ifname;
      port.gids.push_back(g);
    }
    std::sort(port.gids.begin(), port.gids.end(),
              [](const GidEntry& a, const GidEntry& b) { return a.index < b.index; });
    return;
  }
  for (int i = 0; i < gid_tbl_len; i++) {
    ibv_gid gid;
    if (ibv_query_gid(ctx, port.num, i, &gid) || gid_is_zero(gid.raw)) continue;
    GidEntry g;
    g.index = i;
    g.gid = gid_text(gid.raw);
    g.address = gid_address(gid.raw);
    // The verbs call above has no type: sysfs names it.
    g.type = read_attr(port_dir / "gid_attrs" / "types" / std::to_string(i)).value_or("");
    g.netdev = read_attr(port_dir / "gid_attrs" / "ndevs" / std::to_string(i)).value_or("");
    port.gids.push_back(g);
  }
}

}  // namespace

bool DeviceInfo::is_mlx5() const {
  return driver == "mlx5_core" || name.rfind("mlx5_", 0) == 0;
}

std::vector<DeviceInfo> discover(const std::string& sysfs_root) {
  std::vector<DeviceInfo> out;
  int num = 0;
  ibv_device** list = ibv_get_device_list(&num);
  if (!list) return out;
  std::unique_ptr<ibv_device*, void (*)(ibv_device**)> guard(list, ibv_free_device_list);
  for (int d = 0; d < num; d++) {
    DeviceInfo dev;
    dev.name = ibv_get_device_name(list[d]);
    fs::path dev_dir = fs::path(sysfs_root) / dev.name;
    std::error_code ec;
    dev.driver = ib_device_driver(dev_dir);
    char guid[32];
    uint64_t g = be64toh(ibv_get_device_guid(list[d]));
    std::snprintf(guid, sizeof(guid), "%04x:%04x:%04x:%04x", unsigned(g >> 48 & 0xffff),
                  unsigned(g >> 32 & 0xffff), unsigned(g >> 16 & 0xffff), unsigned(g & 0xffff));
    dev.node_guid = guid;

    std::unique_ptr<ibv_context, ContextCloser> ctx(ibv_open_device(list[d]));
    if (!ctx) {
      out.push_back(dev);
      continue;
    }
    ibv_device_attr attr{};
    if (ibv_query_device(ctx.get(), &attr)) attr.phys_port_cnt = 0;
    for (int p = 1; p <= attr.phys_port_cnt; p++) {
      ibv_port_attr pa{};
      if (ibv_query_port(ctx.get(), p, &pa)) continue;
      PortInfo port;
      port.num = p;
      port.state = port_state_name(pa.state);
      port.link_layer = pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand";
      port.active_mtu_enum = pa.active_mtu;
      port.active_mtu = 128 << pa.active_mtu;
      fs::path port_dir = dev_dir / "ports" / std::to_string(p);
      fill_gids(ctx.get(), port_dir, port, pa.gid_tbl_len, attr.phys_port_cnt);
      for (const auto& gid : port.gids)
        if (!gid.netdev.empty()) {
          port.netdev = gid.netdev;
          break;
        }
      if (port.netdev.empty()) {
        // A port without GIDs yet (netdev down) still names its netdev.
        for (const auto& e : fs::directory_iterator(dev_dir / "device" / "net", ec)) {
          port.netdev = e.path().filename().string();
          break;
        }
      }
      dev.ports.push_back(port);
    }
    out.push_back(dev);
  }
  return out;
}

std::optional<int> roce_v2_gid_index(const PortInfo& port, const std::string& address) {
  for (const auto& g : port.gids) {
    if (g.type != "RoCE v2" || g.address.empty()) continue;
    if (address.empty() ? g.address.find(':') == std::string::npos : g.address == address)
      return g.index;
  }
  return std::nullopt;
}

std::vector<DeviceInfo> select(const std::vector<DeviceInfo>& devices,
                               const std::vector<std::string>& interfaces) {
  if (interfaces.empty()) return devices;
  std::vector<DeviceInfo> out;
  for (const auto& d : devices)
    for (const auto& p : d.ports)
      if (std::find(interfaces.begin(), interfaces.end(), p.netdev) != interfaces.end()) {
        out.push_back(d);
        break;
      }
  return out;
}

std::string no_device_message(const std::vector<std::string>& interfaces) {
  std::string on;
  for (const auto& i : interfaces) on += (on.empty() ? " on " : ", ") + i;
  return "no RDMA device found" + on +
         " (no RDMA driver bound; for soft-RoCE: `rdma link add rxe0 type rxe netdev <interface>`)";
}

nlohmann::json to_json(const std::vector<DeviceInfo>& devices) {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& d : devices) {
    // Names are bytes (a netdev may be renamed to anything but NUL, '/' and
    // whitespace); JSON carries text, so each goes out as printable() shows it.
    nlohmann::json jd{{"name", printable(d.name)}, {"driver", printable(d.driver)}, {"node_guid", printable(d.node_guid)},
                      {"ports", nlohmann::json::array()}};
    for (const auto& p : d.ports) {
      nlohmann::json jp{{"port", p.num},         {"state", p.state},
                        {"link_layer", p.link_layer}, {"active_mtu", p.active_mtu},
                        {"netdev", printable(p.netdev)}, {"gids", nlohmann::json::array()},
                        {"roce_v2_gid_index", nlohmann::json::object()}};
      for (const auto& g : p.gids) {
        jp["gids"].push_back({{"index", g.index}, {"gid", g.gid}, {"type", g.type},
                              {"netdev", printable(g.netdev)}, {"address", g.address}});
        if (g.type == "RoCE v2" && !g.address.empty())
          jp["roce_v2_gid_index"][g.address] = g.index;
      }
      jd["ports"].push_back(jp);
    }
    arr.push_back(jd);
  }
  return nlohmann::json{{"devices", arr}};
}

std::vector<std::string> to_text(const std::vector<DeviceInfo>& devices) {
  std::vector<std::string> out;
  char buf[256];
  for (const auto& d : devices) {
    std::snprintf(buf, sizeof(buf), "%s  driver %s  node_guid %s", printable(d.name).c_str(),
                  d.driver.empty() ? "?" : printable(d.driver).c_str(), printable(d.node_guid).c_str());
    out.emplace_back(buf);
    for (const auto& p : d.ports) {
      std::snprintf(buf, sizeof(buf), "  port %d  %s  %s  mtu %d  netdev %s", p.num,
                    p.state.c_str(), p.link_layer.c_str(), p.active_mtu,
                    p.netdev.empty() ? "-" : printable(p.netdev).c_str());
      out.emplace_back(buf);
      for (const auto& g : p.gids) {
        std::snprintf(buf, sizeof(buf), "    gid %-3d %-40s %-11s %s", g.index, g.gid.c_str(),
                      g.type.c_str(), printable(g.netdev).c_str());
        out.emplace_back(buf);
      }
      for (const auto& g : p.gids)
        if (g.type == "RoCE v2" && !g.address.empty()) {
          std::snprintf(buf, sizeof(buf), "    RoCE v2 GID index for %s: %d", g.address.c_str(),
                        g.index);
          out.emplace_back(buf);
        }
    }
  }
  return out;
}

}  // namespace rg::nic
