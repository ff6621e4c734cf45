#include "maps.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <net/if.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <unordered_set>

#include "error.h"

namespace rg {

namespace {

// The kernel's ENOTSUPP (include/linux/errno.h), not a userspace errno: what
// BPF_MAP_LOOKUP_BATCH answers for a map type without batch operations.
constexpr int kKernelEnotsupp = 524;

// Entries one batched lookup asks for: large enough that a scrape of a
// million QPs is a few hundred system calls, small enough that a walk
// holds little memory beyond what its caller keeps.
constexpr uint32_t kBatchEntries = 4096;

struct Owned {
  int fd = -1;
  ~Owned() {
    if (fd >= 0) close(fd);
  }
};

int open_pinned(const std::string& path) {
  int fd = bpf_obj_get(path.c_str());
  if (fd < 0)
    throw Error("cannot open pinned map " + path + ": " + errno_text(errno) +
                    " (is roceguard attached with this --pin-path? run `roceguard attach`)",
                kExitNotFound);
  return fd;
}

std::string type_name(uint32_t type) {
  const char* s = libbpf_bpf_map_type_str(static_cast<bpf_map_type>(type));
  return s ? s : "type " + std::to_string(type);
}

bool is_percpu(uint32_t type) {
  return type == BPF_MAP_TYPE_PERCPU_HASH || type == BPF_MAP_TYPE_LRU_PERCPU_HASH ||
         type == BPF_MAP_TYPE_PERCPU_ARRAY;
}

uint32_t round8(uint32_t n) { return (n + 7) & ~7u; }

int possible_cpus() {
  int ncpu = libbpf_num_possible_cpus();
  if (ncpu <= 0) throw Error("cannot count possible CPUs: " + errno_text(-ncpu));
  return ncpu;
}

// Size of one lookup result of a map: per-CPU maps return one 8-byte
// aligned slot per possible CPU.
uint32_t lookup_bytes(const MapUsage& u, uint32_t type) {
  return is_percpu(type) ? round8(u.value_size) * static_cast<uint32_t>(possible_cpus()) : u.value_size;
}

uint32_t map_type_of(int fd) {
  bpf_map_info info{};
  uint32_t len = sizeof(info);
  return bpf_obj_get_info_by_fd(fd, &info, &len) == 0 ? info.type : 0;
}

// get_next_key from a cursor that was deleted restarts at the first bucket,
// so a plain walk under LRU churn returns keys again, or never ends; this
// one returns each key once and takes a bounded number of steps.
size_t walk_by_next_key(int fd, uint32_t key_size, uint32_t value_bytes, uint32_t max_entries,
                        const EntryVisitor& visit) {
  std::unordered_set<std::string> returned;
  std::vector<uint8_t> key(key_size), next(key_size), value(std::max<uint32_t>(value_bytes, 1));
  const void* prev = nullptr;
  size_t visited = 0;
  const uint64_t max_steps = 4ull * max_entries + 16;
  for (uint64_t step = 0; visited < max_entries && step < max_steps; ++step) {
    if (bpf_map_get_next_key(fd, prev, next.data()) != 0) break;
    key.swap(next);
    prev = key.data();
    if (!returned.emplace(reinterpret_cast<const char*>(key.data()), key.size()).second) continue;
    if (bpf_map_lookup_elem(fd, key.data(), value.data()) != 0) continue;  // deleted meanwhile
    visit(key.data(), value.data());
    ++visited;
  }
  return visited;
}

}  // namespace

const MapLayout* pinned_map_layout(const std::string& name) {
  // Events are appended to rg_counters (roceguard.h), so an older, shorter
  // value of whole rg_counter slots is readable: the newer events read 0.
  static const MapLayout counters{BPF_MAP_TYPE_PERCPU_HASH, sizeof(rg_counter_key), sizeof(rg_counters),
                                  sizeof(rg_counter), sizeof(rg_counter)};
  static const MapLayout qp{BPF_MAP_TYPE_LRU_HASH, sizeof(rg_qp_key), sizeof(rg_qp_state),
                            sizeof(rg_qp_state), 1};
  static const MapLayout peers{BPF_MAP_TYPE_ARRAY, sizeof(uint32_t), sizeof(rg_peer), sizeof(rg_peer), 1};
  static const MapLayout route4{BPF_MAP_TYPE_LPM_TRIE, sizeof(rg_route4_key), sizeof(uint32_t),
                                sizeof(uint32_t), 1};
  static const MapLayout route6{BPF_MAP_TYPE_LPM_TRIE, sizeof(rg_route6_key), sizeof(uint32_t),
                                sizeof(uint32_t), 1};
  static const MapLayout decap{BPF_MAP_TYPE_HASH, sizeof(rg_decap_key), sizeof(uint32_t), sizeof(uint32_t), 1};
  static const MapLayout ifaces{BPF_MAP_TYPE_HASH, sizeof(uint32_t), sizeof(rg_iface), sizeof(rg_iface), 1};
  static const MapLayout peer_stats{BPF_MAP_TYPE_PERCPU_ARRAY, sizeof(uint32_t), sizeof(rg_peer_stats),
                                    sizeof(rg_peer_stats), 1};
  static const MapLayout streams{BPF_MAP_TYPE_HASH, sizeof(rg_tunnel_stream_key), sizeof(rg_tunnel_stream),
                                 sizeof(rg_tunnel_stream), 1};
  if (name == kMapPeerStats) return &peer_stats;
  if (name == kMapTunnelStreams) return &streams;
  if (name == kMapCounters) return &counters;
  if (name == kMapQp) return &qp;
  if (name == kMapPeers) return &peers;
  if (name == kMapRoute4) return &route4;
  if (name == kMapRoute6) return &route6;
  if (name == kMapDecap) return &decap;
  if (name == kMapIfaces) return &ifaces;
  return nullptr;
}

MapUsage map_info(int fd, const std::string& name) {
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

void check_map_layout(int fd, const std::string& name, const MapLayout& layout) {
  bpf_map_info info{};
  uint32_t len = sizeof(info);
  if (bpf_obj_get_info_by_fd(fd, &info, &len) != 0)
    throw Error("cannot read info of map " + name + ": " + errno_text(errno));
  std::string diff;
  auto add = [&diff](const std::string& what) { diff += (diff.empty() ? "" : ", ") + what; };
  if (info.type != layout.type)
    add("type " + type_name(info.type) + ", expected " + type_name(layout.type));
  if (info.key_size != layout.key_size)
    add("key_size " + std::to_string(info.key_size) + ", expected " + std::to_string(layout.key_size));
  const bool value_ok = info.value_size >= layout.value_size_min && info.value_size <= layout.value_size &&
                        info.value_size % layout.value_step == 0;
  if (!value_ok)
    add("value_size " + std::to_string(info.value_size) + ", expected " + std::to_string(layout.value_size));
  if (diff.empty()) return;
  throw Error("map " + name + " does not have the layout this roceguard reads (" + diff +
                  "): it was not created by this version of roceguard; refusing to read it. "
                  "`roceguard attach --reset-state` (or `run --reset-state`) replaces it; its contents are lost",
              kExitConflict);
}

size_t walk_map(int fd, uint32_t key_size, uint32_t value_bytes, uint32_t max_entries,
                const EntryVisitor& visit) {
  if (max_entries == 0) return 0;
  uint32_t chunk = std::min(max_entries, kBatchEntries);
  // The batch cursor is opaque: a bucket index for hash maps, a key for
  // arrays; either fits in the larger of the two.
  std::vector<uint8_t> cursor(std::max<size_t>(key_size, 8)), next_cursor(cursor.size());
  std::vector<uint8_t> keys, values;
  LIBBPF_OPTS(bpf_map_batch_opts, opts);
  size_t visited = 0;
  bool first = true;
  // The kernel walks a hash map bucket by bucket and never revisits one, so
  // churn cannot repeat a key; every call returns at least one entry or
  // ends the walk, which bounds the rounds. A bucket larger than the chunk
  // (ENOSPC) doubles it, at most up to max_entries.
  const uint64_t max_rounds = static_cast<uint64_t>(max_entries) + 64;
  for (uint64_t round = 0; visited < max_entries && round < max_rounds; ++round) {
    keys.resize(static_cast<size_t>(chunk) * key_size);
    values.resize(static_cast<size_t>(chunk) * std::max<uint32_t>(value_bytes, 1));
    uint32_t count = chunk;
    int rc = bpf_map_lookup_batch(fd, first ? nullptr : cursor.data(), next_cursor.data(), keys.data(),
                                  values.data(), &count, &opts);
    int err = rc ? errno : 0;
    if (err == ENOSPC && count == 0 && chunk < max_entries) {
      chunk = static_cast<uint32_t>(std::min<uint64_t>(2ull * chunk, max_entries));
      continue;
    }
    if (err && err != ENOENT) {
      if (first && (err == EINVAL || err == kKernelEnotsupp || err == EOPNOTSUPP))
        return walk_by_next_key(fd, key_size, value_bytes, max_entries, visit);
      throw Error("cannot read map entries: " + errno_text(err));
    }
    for (uint32_t i = 0; i < count && visited < max_entries; ++i, ++visited)
      visit(keys.data() + static_cast<size_t>(i) * key_size,
            values.data() + static_cast<size_t>(i) * std::max<uint32_t>(value_bytes, 1));
    if (err == ENOENT) break;
    cursor.swap(next_cursor);
    first = false;
  }
  return visited;
}

MapReader::MapReader(const std::string& pin_path) : owned_(true), pin_path_(pin_path) {
  counters_fd_ = open_pinned(pin_path + "/" + kMapCounters);
  try {
    qp_fd_ = open_pinned(pin_path + "/" + kMapQp);
    check_map_layout(counters_fd_, pin_path + "/" + kMapCounters, *pinned_map_layout(kMapCounters));
    check_map_layout(qp_fd_, pin_path + "/" + kMapQp, *pinned_map_layout(kMapQp));
  } catch (...) {
    close(counters_fd_);
    if (qp_fd_ >= 0) close(qp_fd_);
    throw;
  }
  counters_value_size_ = map_info(counters_fd_, kMapCounters).value_size;
  counters_max_ = map_info(counters_fd_, kMapCounters).max_entries;
  qp_max_ = map_info(qp_fd_, kMapQp).max_entries;
}

MapReader::MapReader(int counters_fd, int qp_fd) : counters_fd_(counters_fd), qp_fd_(qp_fd) {
  check_map_layout(counters_fd_, kMapCounters, *pinned_map_layout(kMapCounters));
  const MapUsage c = map_info(counters_fd_, kMapCounters);
  counters_value_size_ = c.value_size;
  counters_max_ = c.max_entries;
  if (qp_fd_ >= 0) {
    check_map_layout(qp_fd_, kMapQp, *pinned_map_layout(kMapQp));
    qp_max_ = map_info(qp_fd_, kMapQp).max_entries;
  }
}

MapReader::~MapReader() {
  if (!owned_) return;
  if (counters_fd_ >= 0) close(counters_fd_);
  if (qp_fd_ >= 0) close(qp_fd_);
}

std::vector<CounterRow> MapReader::counters() const {
  std::vector<CounterRow> rows;
  const int ncpu = possible_cpus();
  const uint32_t stride = round8(counters_value_size_);
  const size_t events = std::min<size_t>(counters_value_size_ / sizeof(rg_counter), RG_EV_MAX);
  walk_map(counters_fd_, sizeof(rg_counter_key), stride * static_cast<uint32_t>(ncpu), counters_max_,
           [&](const uint8_t* k, const uint8_t* v) {
             rg_counter_key key;
             std::memcpy(&key, k, sizeof(key));
             CounterRow row;
             row.ifindex = key.ifindex;
             row.direction = static_cast<rg_direction>(key.direction);
             for (int cpu = 0; cpu < ncpu; ++cpu)
               for (size_t e = 0; e < events; ++e) {
                 rg_counter c;
                 std::memcpy(&c, v + static_cast<size_t>(cpu) * stride + e * sizeof(rg_counter), sizeof(c));
                 row.ev[e].packets += c.packets;
                 row.ev[e].bytes += c.bytes;
               }
             rows.push_back(row);
           });
  return rows;
}

std::vector<QpRow> MapReader::qps() const {
  std::vector<QpRow> rows;
  if (qp_fd_ < 0) return rows;
  walk_map(qp_fd_, sizeof(rg_qp_key), sizeof(rg_qp_state), qp_max_, [&](const uint8_t* k, const uint8_t* v) {
    QpRow row;
    std::memcpy(&row.key, k, sizeof(row.key));
    std::memcpy(&row.state, v, sizeof(row.state));
    rows.push_back(row);
  });
  return rows;
}

std::vector<QpRow> MapReader::top_qps(size_t top, bool (*ranks_before)(const QpRow&, const QpRow&),
                                      size_t* entries) const {
  // A heap whose front is the kept row that ranks last: the one a better
  // row replaces.
  std::vector<QpRow> kept;
  size_t walked = 0;
  if (qp_fd_ >= 0 && top > 0)
    walked = walk_map(qp_fd_, sizeof(rg_qp_key), sizeof(rg_qp_state), qp_max_,
                      [&](const uint8_t* k, const uint8_t* v) {
                        QpRow row;
                        std::memcpy(&row.key, k, sizeof(row.key));
                        std::memcpy(&row.state, v, sizeof(row.state));
                        if (kept.size() < top) {
                          kept.push_back(row);
                          std::push_heap(kept.begin(), kept.end(), ranks_before);
                        } else if (ranks_before(row, kept.front())) {
                          std::pop_heap(kept.begin(), kept.end(), ranks_before);
                          kept.back() = row;
                          std::push_heap(kept.begin(), kept.end(), ranks_before);
                        }
                      });
  std::sort_heap(kept.begin(), kept.end(), ranks_before);
  if (entries) *entries = walked;
  return kept;
}

std::vector<PeerStatsRow> read_peer_stats(int fd) {
  check_map_layout(fd, kMapPeerStats, *pinned_map_layout(kMapPeerStats));
  const MapUsage u = map_info(fd, kMapPeerStats);
  const int ncpu = possible_cpus();
  const uint32_t stride = round8(u.value_size);
  std::vector<PeerStatsRow> rows;
  walk_map(fd, sizeof(uint32_t), stride * static_cast<uint32_t>(ncpu), u.max_entries,
           [&](const uint8_t* k, const uint8_t* v) {
             PeerStatsRow row;
             std::memcpy(&row.slot, k, sizeof(row.slot));
             bool any = false;
             for (int cpu = 0; cpu < ncpu; ++cpu) {
               rg_peer_stats s;
               std::memcpy(&s, v + static_cast<size_t>(cpu) * stride, sizeof(s));
               for (size_t e = 0; e < RG_PEER_EV_MAX; ++e) {
                 row.ev[e].packets += s.ev[e].packets;
                 row.ev[e].bytes += s.ev[e].bytes;
                 any |= s.ev[e].packets != 0;
               }
             }
             if (any) rows.push_back(row);
           });
  return rows;
}

std::vector<TunnelStreamRow> read_tunnel_streams(int fd) {
  check_map_layout(fd, kMapTunnelStreams, *pinned_map_layout(kMapTunnelStreams));
  const MapUsage u = map_info(fd, kMapTunnelStreams);
  std::vector<rg_tunnel_stream_key> keys;
  walk_map(fd, sizeof(rg_tunnel_stream_key), sizeof(rg_tunnel_stream), u.max_entries,
           [&](const uint8_t* k, const uint8_t*) {
             rg_tunnel_stream_key key;
             std::memcpy(&key, k, sizeof(key));
             keys.push_back(key);
           });
  // Read again under the value's lock: the window and the counters that
  // settle it must come from the same instant.
  std::vector<TunnelStreamRow> rows;
  for (const auto& key : keys) {
    TunnelStreamRow row;
    row.key = key;
    if (bpf_map_lookup_elem_flags(fd, &key, &row.state, BPF_F_LOCK) == 0) rows.push_back(row);
  }
  return rows;
}

std::vector<PeerStatsRow> MapReader::peer_stats() const {
  if (pin_path_.empty()) return {};
  Owned map{bpf_obj_get((pin_path_ + "/" + kMapPeerStats).c_str())};
  return map.fd < 0 ? std::vector<PeerStatsRow>{} : read_peer_stats(map.fd);
}

std::vector<TunnelStreamRow> MapReader::tunnel_streams() const {
  if (pin_path_.empty()) return {};
  Owned map{bpf_obj_get((pin_path_ + "/" + kMapTunnelStreams).c_str())};
  return map.fd < 0 ? std::vector<TunnelStreamRow>{} : read_tunnel_streams(map.fd);
}

MapUsage MapReader::info(int fd, const std::string& name) const { return map_info(fd, name); }

MapUsage MapReader::usage(int fd, const std::string& name) const {
  if (const MapLayout* layout = pinned_map_layout(name)) check_map_layout(fd, name, *layout);
  MapUsage u = info(fd, name);
  const uint32_t value_bytes = lookup_bytes(u, map_type_of(fd));
  if (name == kMapPeers) {
    // An array holds every key from creation: a peer slot is in use when
    // its family is set.
    walk_map(fd, u.key_size, value_bytes, u.max_entries, [&u](const uint8_t*, const uint8_t* v) {
      if (v[offsetof(rg_peer, family)] != 0) ++u.entries;
    });
    return u;
  }
  u.entries = static_cast<uint32_t>(
      walk_map(fd, u.key_size, value_bytes, u.max_entries, [](const uint8_t*, const uint8_t*) {}));
  return u;
}

std::vector<MapUsage> MapReader::usage_all(std::optional<uint32_t> qp_entries,
                                           std::optional<uint32_t> counters_entries) const {
  MapUsage counters = counters_entries ? info(counters_fd_, kMapCounters) : usage(counters_fd_, kMapCounters);
  if (counters_entries) counters.entries = *counters_entries;
  std::vector<MapUsage> out{counters};
  if (qp_fd_ >= 0) {
    MapUsage qp = qp_entries ? info(qp_fd_, kMapQp) : usage(qp_fd_, kMapQp);
    if (qp_entries) qp.entries = *qp_entries;
    out.push_back(qp);
  }
  if (pin_path_.empty()) return out;
  for (const char* name : kPinnedMaps) {
    if (name == kMapCounters || name == kMapQp) continue;
    Owned map{bpf_obj_get((pin_path_ + "/" + name).c_str())};
    if (map.fd < 0) continue;
    out.push_back(usage(map.fd, name));
  }
  return out;
}

uint64_t sum_packets(const std::vector<CounterRow>& rows, rg_direction dir, rg_event ev) {
  uint64_t n = 0;
  for (const auto& r : rows)
    if (r.direction == dir) n += r.ev[ev].packets;
  return n;
}

size_t prune_counters(int counters_fd, const std::set<uint32_t>& keep) {
  check_map_layout(counters_fd, kMapCounters, *pinned_map_layout(kMapCounters));
  const MapUsage u = map_info(counters_fd, kMapCounters);
  const uint32_t value_bytes = round8(u.value_size) * static_cast<uint32_t>(possible_cpus());
  // Collected first and deleted after: deleting under the walk's cursor
  // would move it.
  std::vector<rg_counter_key> stale;
  walk_map(counters_fd, sizeof(rg_counter_key), value_bytes, u.max_entries, [&](const uint8_t* k, const uint8_t*) {
    rg_counter_key key;
    std::memcpy(&key, k, sizeof(key));
    char name[IF_NAMESIZE];
    if (keep.count(key.ifindex) || if_indextoname(key.ifindex, name)) return;
    stale.push_back(key);
  });
  size_t removed = 0;
  for (const auto& key : stale) removed += bpf_map_delete_elem(counters_fd, &key) == 0;
  return removed;
}

bool migrate_counters(const std::string& pin_path, uint32_t value_size) {
  const std::string path = pin_path + "/" + kMapCounters;
  Owned old{bpf_obj_get(path.c_str())};
  if (old.fd < 0) return false;
  bpf_map_info info{};
  uint32_t len = sizeof(info);
  if (bpf_obj_get_info_by_fd(old.fd, &info, &len) != 0) return false;
  // Anything but a shorter value of whole counters is for the compatibility
  // check to name.
  if (info.type != BPF_MAP_TYPE_PERCPU_HASH || info.key_size != sizeof(rg_counter_key) ||
      info.value_size >= value_size || info.value_size % sizeof(rg_counter) != 0 || info.value_size == 0)
    return false;

  const int ncpu = possible_cpus();
  const uint32_t old_stride = round8(info.value_size), new_stride = round8(value_size);
  std::vector<std::pair<rg_counter_key, std::vector<uint8_t>>> entries;
  walk_map(old.fd, sizeof(rg_counter_key), old_stride * static_cast<uint32_t>(ncpu), info.max_entries,
           [&](const uint8_t* k, const uint8_t* v) {
             rg_counter_key key;
             std::memcpy(&key, k, sizeof(key));
             std::vector<uint8_t> value(static_cast<size_t>(new_stride) * ncpu, 0);
             for (int cpu = 0; cpu < ncpu; ++cpu)
               std::memcpy(value.data() + static_cast<size_t>(cpu) * new_stride,
                           v + static_cast<size_t>(cpu) * old_stride, info.value_size);
             entries.emplace_back(key, std::move(value));
           });

  LIBBPF_OPTS(bpf_map_create_opts, opts, .map_flags = info.map_flags);
  Owned fresh{bpf_map_create(BPF_MAP_TYPE_PERCPU_HASH, kMapCounters, sizeof(rg_counter_key), value_size,
                             info.max_entries, &opts)};
  if (fresh.fd < 0) throw Error("cannot create the migrated " + path + ": " + errno_text(errno));
  for (const auto& [key, value] : entries)
    if (bpf_map_update_elem(fresh.fd, &key, value.data(), BPF_NOEXIST) != 0)
      throw Error("cannot copy a counter into the migrated " + path + ": " + errno_text(errno));
  // Pinned beside the old map and renamed over it: the pin path always
  // holds one whole map, the old or the new.
  // No dot: bpffs refuses names with one (reserved, kernel/bpf/inode.c).
  const std::string staged = path + "_migrating";
  unlink(staged.c_str());
  if (bpf_obj_pin(fresh.fd, staged.c_str()) != 0)
    throw Error("cannot pin the migrated " + path + ": " + errno_text(errno));
  if (std::rename(staged.c_str(), path.c_str()) != 0) {
    int err = errno;
    unlink(staged.c_str());
    throw Error("cannot replace " + path + " with its migrated copy: " + errno_text(err));
  }
  return true;
}

}  // namespace rg
