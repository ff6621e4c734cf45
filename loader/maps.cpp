#include "maps.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <unistd.h>

#include <cerrno>

#include "error.h"

namespace rg {

namespace {

int open_pinned(const std::string& path) {
  int fd = bpf_obj_get(path.c_str());
  if (fd < 0)
    throw Error("cannot open pinned map " + path + ": " + errno_text(errno) +
                    " (is roceguard attached with this --pin-path? run `roceguard attach`)",
                kExitNotFound);
  return fd;
}

}  // namespace

MapReader::MapReader(const std::string& pin_path) : owned_(true), pin_path_(pin_path) {
  counters_fd_ = open_pinned(pin_path + "/" + kMapCounters);
  try {
    qp_fd_ = open_pinned(pin_path + "/" + kMapQp);
  } catch (...) {
    close(counters_fd_);
    throw;
  }
}

MapReader::MapReader(int counters_fd, int qp_fd) : counters_fd_(counters_fd), qp_fd_(qp_fd) {}

MapReader::~MapReader() {
  if (!owned_) return;
  if (counters_fd_ >= 0) close(counters_fd_);
  if (qp_fd_ >= 0) close(qp_fd_);
}

std::vector<CounterRow> MapReader::counters() const {
  std::vector<CounterRow> rows;
  int ncpu = libbpf_num_possible_cpus();
  if (ncpu <= 0) throw Error("cannot count possible CPUs: " + errno_text(ncpu));
  // Per-CPU values come back one per possible CPU, each rounded up to 8 bytes.
  std::vector<rg_counters> percpu(static_cast<size_t>(ncpu));
  rg_counter_key key{}, next{};
  const void* prev = nullptr;
  while (bpf_map_get_next_key(counters_fd_, prev, &next) == 0) {
    key = next;
    prev = &key;
    if (bpf_map_lookup_elem(counters_fd_, &key, percpu.data()) != 0) continue;  // deleted meanwhile
    CounterRow row;
    row.ifindex = key.ifindex;
    row.direction = static_cast<rg_direction>(key.direction);
    for (const auto& cpu : percpu)
      for (size_t e = 0; e < RG_EV_MAX; ++e) {
        row.ev[e].packets += cpu.ev[e].packets;
        row.ev[e].bytes += cpu.ev[e].bytes;
      }
    rows.push_back(row);
  }
  return rows;
}

std::vector<QpRow> MapReader::qps() const {
  std::vector<QpRow> rows;
  rg_qp_key key{}, next{};
  const void* prev = nullptr;
  while (bpf_map_get_next_key(qp_fd_, prev, &next) == 0) {
    key = next;
    prev = &key;
    QpRow row;
    row.key = key;
    if (bpf_map_lookup_elem(qp_fd_, &key, &row.state) != 0) continue;  // evicted meanwhile
    rows.push_back(row);
  }
  return rows;
}

MapUsage MapReader::info(int fd, const std::string& name) const {
  bpf_map_info info{};
  uint32_t len = sizeof(info);
  if (bpf_obj_get_info_by_fd(fd, &info, &len) != 0)
    throw Error("cannot read info of map " + name + ": " + errno_text(errno));
  MapUsage u;
  u.name = name;
  u.max_entries = info.max_entries;
  u.key_size = info.key_size;
  u.value_size = info.value_size;
  u.id = info.id;
  return u;
}

MapUsage MapReader::usage(int fd, const std::string& name) const {
  MapUsage u = info(fd, name);
  if (name == kMapPeers) {
    // An array holds every key from creation: a peer slot is in use when
    // its family is set.
    for (uint32_t i = 0; i < u.max_entries; ++i) {
      rg_peer peer{};
      if (bpf_map_lookup_elem(fd, &i, &peer) == 0 && peer.family != 0) ++u.entries;
    }
    return u;
  }
  std::vector<uint8_t> key(u.key_size), next(u.key_size);
  const void* prev = nullptr;
  while (bpf_map_get_next_key(fd, prev, next.data()) == 0) {
    key.swap(next);
    prev = key.data();
    ++u.entries;
  }
  return u;
}

std::vector<MapUsage> MapReader::usage_all(std::optional<uint32_t> qp_entries) const {
  MapUsage qp = qp_entries ? info(qp_fd_, kMapQp) : usage(qp_fd_, kMapQp);
  if (qp_entries) qp.entries = *qp_entries;
  std::vector<MapUsage> out{usage(counters_fd_, kMapCounters), qp};
  if (pin_path_.empty()) return out;
  for (const char* name : kPinnedMaps) {
    if (name == kMapCounters || name == kMapQp) continue;
    int fd = bpf_obj_get((pin_path_ + "/" + name).c_str());
    if (fd < 0) continue;
    try {
      out.push_back(usage(fd, name));
    } catch (...) {
      close(fd);
      throw;
    }
    close(fd);
  }
  return out;
}

uint64_t sum_packets(const std::vector<CounterRow>& rows, rg_direction dir, rg_event ev) {
  uint64_t n = 0;
  for (const auto& r : rows)
    if (r.direction == dir) n += r.ev[ev].packets;
  return n;
}

}  // namespace rg
