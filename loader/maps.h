// The one reader of roceguard's BPF maps, for the CLI and the exporter.
// Values are read from the kernel on every call and never cached, so a
// loader restart neither resets nor double-counts anything.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "roceguard/roceguard.h"

namespace rg {

// Names of the maps in the BPF object; pinned as <pin_path>/<name>.
inline constexpr const char* kMapCounters = "rg_counters";
inline constexpr const char* kMapQp = "rg_qp";
inline constexpr const char* kMapPeers = "rg_peers";
inline constexpr const char* kMapRoute4 = "rg_route4";
inline constexpr const char* kMapRoute6 = "rg_route6";
inline constexpr const char* kMapDecap = "rg_decap";
inline constexpr std::array<const char*, 6> kPinnedMaps{kMapCounters, kMapQp,    kMapPeers,
                                                        kMapRoute4,   kMapRoute6, kMapDecap};

struct CounterRow {
  uint32_t ifindex = 0;
  rg_direction direction = RG_DIR_EGRESS;
  std::array<rg_counter, RG_EV_MAX> ev{};  // summed over CPUs
};

struct QpRow {
  rg_qp_key key{};
  rg_qp_state state{};
};

struct MapUsage {
  std::string name;
  uint32_t max_entries = 0;
  uint32_t entries = 0;
  uint32_t key_size = 0;
  uint32_t value_size = 0;
  uint32_t id = 0;
};

class MapReader {
 public:
  // Opens the maps pinned under pin_path; throws rg::Error naming the
  // missing pin and how to create it.
  explicit MapReader(const std::string& pin_path);
  // Borrows already-open fds (tests, a running loader). Not closed.
  MapReader(int counters_fd, int qp_fd);
  ~MapReader();
  MapReader(const MapReader&) = delete;
  MapReader& operator=(const MapReader&) = delete;

  std::vector<CounterRow> counters() const;
  std::vector<QpRow> qps() const;
  // Type and capacity only: usage() also counts entries, a walk of every key.
  MapUsage info(int fd, const std::string& name) const;
  MapUsage usage(int fd, const std::string& name) const;
  // qp_entries: the QP map's fill when the caller has just read it with
  // qps(), which spares a second walk of up to max_entries keys.
  std::vector<MapUsage> usage_all(std::optional<uint32_t> qp_entries = std::nullopt) const;

  int counters_fd() const { return counters_fd_; }
  int qp_fd() const { return qp_fd_; }

 private:
  int counters_fd_ = -1;
  int qp_fd_ = -1;
  bool owned_ = false;
  std::string pin_path_;
};

// Sum of one event over all rows with the given direction (any interface).
uint64_t sum_packets(const std::vector<CounterRow>& rows, rg_direction dir, rg_event ev);

}  // namespace rg
