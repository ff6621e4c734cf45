#include "dataplane/maps.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <net/if.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "common/error.h"

namespace rg {

namespace {

// The kernel's ENOTSUPP (include/linux/errno.h), not a userspace errno: what
// BPF_MAP_LOOKUP_BATCH answers for a map type without batch operations.
constexpr int kKernelEnotsupp = 524;

// Entries one batched lookup asks for: large enough that a scrape of a
// million QPs is a few hundred system calls, small enough that a walk
// holds little memory beyond what its caller keeps. Per-CPU values are
// large (every CPU's slot), so a batch is also bounded in bytes.
constexpr uint32_t kBatchEntries = 4096;
constexpr size_t kBatchBytes = 1u << 20;

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

// The info of the map pinned at path; nullopt when none is.
std::optional<bpf_map_info> pinned_info(const std::string& path) {
  Owned m{bpf_obj_get(path.c_str())};
  if (m.fd < 0) return std::nullopt;
  bpf_map_info info{};
  uint32_t len = sizeof(info);
  if (bpf_obj_get_info_by_fd(m.fd, &info, &len) != 0) return std::nullopt;
  return info;
}

// Anything but a shorter value of whole counters is for the compatibility
// check to name.
bool is_earlier_counters(const bpf_map_info& info, uint32_t value_size) {
  return info.type == BPF_MAP_TYPE_PERCPU_HASH && info.key_size == sizeof(rg_counter_key) &&
         info.value_size < value_size && info.value_size % sizeof(rg_counter) == 0 && info.value_size != 0;
}

bool is_legacy_peer_stats(const bpf_map_info& info) {
  return info.type == BPF_MAP_TYPE_PERCPU_ARRAY && info.key_size == sizeof(uint32_t) &&
         info.value_size == sizeof(LegacyPeerStats);
}

bool is_legacy_tunnel_streams(const bpf_map_info& info) {
  return info.type == BPF_MAP_TYPE_HASH && info.key_size == sizeof(rg_tunnel_stream_key) &&
         info.value_size == sizeof(LegacyTunnelStream);
}

}  // namespace

// No dot in the staged name: bpffs refuses names with one (reserved,
// kernel/bpf/inode.c).
void pin_replacing(int fd, const std::string& path) {
  const std::string staged = path + "_migrating";
  unlink(staged.c_str());
  if (bpf_obj_pin(fd, staged.c_str()) != 0) throw Error("cannot pin " + path + ": " + errno_text(errno));
  if (std::rename(staged.c_str(), path.c_str()) != 0) {
    int err = errno;
    unlink(staged.c_str());
    throw Error("cannot replace " + path + ": " + errno_text(err));
  }
}

bool counters_need_migration(const std::string& pin_path, uint32_t value_size) {
  auto info = pinned_info(pin_path + "/" + kMapCounters);
  return info && is_earlier_counters(*info, value_size);
}

bool peer_stats_need_migration(const std::string& pin_path) {
  auto info = pinned_info(pin_path + "/" + kMapPeerStats);
  return info && is_legacy_peer_stats(*info);
}

bool tunnel_streams_need_migration(const std::string& pin_path) {
  auto info = pinned_info(pin_path + "/" + kMapTunnelStreams);
  return info && is_legacy_tunnel_streams(*info);
}

const MapLayout* pinned_map_layout(const std::string& name) {
  // Events are appended to rg_counters (roceguard.h), so an older, shorter
  // value of whole rg_counter slots is readable: the newer events read 0.
  static const MapLayout counters{BPF_MAP_TYPE_PERCPU_HASH, sizeof(rg_counter_key), sizeof(rg_counters),
                                  sizeof(rg_counter), sizeof(rg_counter)};
  static const MapLayout qp4{BPF_MAP_TYPE_ARRAY, sizeof(uint32_t), sizeof(rg_qp4_slot), sizeof(rg_qp4_slot), 1};
  static const MapLayout qp6{BPF_MAP_TYPE_ARRAY, sizeof(uint32_t), sizeof(rg_qp6_slot), sizeof(rg_qp6_slot), 1};
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
  static const MapLayout peer_guard{BPF_MAP_TYPE_PERCPU_ARRAY, sizeof(uint32_t), sizeof(rg_peer_guard),
                                    sizeof(rg_peer_guard), 1};
  static const MapLayout retired{BPF_MAP_TYPE_ARRAY, sizeof(uint32_t), sizeof(rg_tunnel_retired),
                                 sizeof(rg_tunnel_retired), 1};
  static const MapLayout peer_pq{BPF_MAP_TYPE_ARRAY, sizeof(uint32_t), sizeof(rg_peer_pq), sizeof(rg_peer_pq), 1};
  if (name == kMapPeerPq) return &peer_pq;
  if (name == kMapPeerStats) return &peer_stats;
  if (name == kMapPeerGuard) return &peer_guard;
  if (name == kMapTunnelRetired) return &retired;
  if (name == kMapTunnelStreams) return &streams;
  if (name == kMapCounters) return &counters;
  if (name == kMapQp4) return &qp4;
  if (name == kMapQp6) return &qp6;
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
                  "): it was not created by this version of roceguard; refusing to read it. `roceguard attach` "
                  "(or `run`) of this version carries over the maps of the earlier builds it knows; "
                  "`--reset-state` replaces any other, its contents lost",
              kExitConflict);
}

size_t walk_map(int fd, uint32_t key_size, uint32_t value_bytes, uint32_t max_entries,
                const EntryVisitor& visit) {
  if (max_entries == 0) return 0;
  const size_t value_stride = std::max<uint32_t>(value_bytes, 1);
  uint32_t chunk = static_cast<uint32_t>(
      std::min<size_t>({max_entries, kBatchEntries, std::max<size_t>(1, kBatchBytes / value_stride)}));
  // The batch cursor is opaque: a bucket index for hash maps, a key for
  // arrays; either fits in the larger of the two.
  std::vector<uint8_t> cursor(std::max<size_t>(key_size, 8)), next_cursor(cursor.size());
  // Not zeroed: the kernel writes every entry it returns, and a walk of a
  // small map must not pay for clearing a whole batch (a counters read,
  // two CPUs' slots times 512 keys, is half a megabyte).
  std::unique_ptr<uint8_t[]> keys, values;
  uint32_t allocated = 0;
  LIBBPF_OPTS(bpf_map_batch_opts, opts);
  size_t visited = 0;
  bool first = true;
  // The kernel walks a hash map bucket by bucket and never revisits one, so
  // churn cannot repeat a key; every call returns at least one entry or
  // ends the walk, which bounds the rounds. A bucket larger than the chunk
  // (ENOSPC) doubles it, at most up to max_entries.
  const uint64_t max_rounds = static_cast<uint64_t>(max_entries) + 64;
  for (uint64_t round = 0; visited < max_entries && round < max_rounds; ++round) {
    if (allocated < chunk) {
      keys = std::make_unique_for_overwrite<uint8_t[]>(static_cast<size_t>(chunk) * key_size);
      values = std::make_unique_for_overwrite<uint8_t[]>(static_cast<size_t>(chunk) * value_stride);
      allocated = chunk;
    }
    uint32_t count = chunk;
    int rc = bpf_map_lookup_batch(fd, first ? nullptr : cursor.data(), next_cursor.data(), keys.get(),
                                  values.get(), &count, &opts);
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
      visit(keys.get() + static_cast<size_t>(i) * key_size, values.get() + static_cast<size_t>(i) * value_stride);
    if (err == ENOENT) break;
    cursor.swap(next_cursor);
    first = false;
  }
  return visited;
}

uint32_t QpSlotTable::check(int fd, int family) {
  const char* name = family == AF_INET ? kMapQp4 : kMapQp6;
  const MapUsage u = map_info(fd, name);
  bpf_map_info info{};
  uint32_t len = sizeof(info);
  if (bpf_obj_get_info_by_fd(fd, &info, &len) != 0)
    throw Error(std::string("cannot read info of map ") + name + ": " + errno_text(errno));
  const uint32_t want = family == AF_INET ? sizeof(rg_qp4_slot) : sizeof(rg_qp6_slot);
  if (info.type != BPF_MAP_TYPE_ARRAY || !(info.map_flags & BPF_F_MMAPABLE) || u.value_size != want ||
      u.max_entries % RG_QP_BUCKET_SLOTS != 0)
    throw Error(std::string("map ") + name +
                    " is no per-QP slot table of this roceguard (an array of whole buckets, mmapable); refusing to "
                    "read it. `roceguard attach` (or `run`) of this version carries over the tables of the earlier "
                    "builds it knows; `--reset-state` replaces any other, its contents lost",
                kExitConflict);
  return u.max_entries;
}

QpSlotTable::QpSlotTable(int fd, int family, bool writable) : family_(family) {
  const char* name = family == AF_INET ? kMapQp4 : kMapQp6;
  const uint32_t want = family == AF_INET ? sizeof(rg_qp4_slot) : sizeof(rg_qp6_slot);
  slots_ = check(fd, family);
  slot_size_ = want;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  length_ = (static_cast<size_t>(slots_) * want + page - 1) / page * page;
  void* p = mmap(nullptr, length_, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) throw Error(std::string("cannot map ") + name + ": " + errno_text(errno));
  base_ = static_cast<uint8_t*>(p);
}

QpSlotTable::~QpSlotTable() {
  if (base_) munmap(base_, length_);
}

rg_qp_slot_head* QpSlotTable::slot(uint32_t i) const {
  return reinterpret_cast<rg_qp_slot_head*>(base_ + static_cast<size_t>(i) * slot_size_);
}

namespace {

// The address words of a QP's key as the programs hash and compare them.
void qp_addr_words(const rg_qp_key& qp, int family, uint64_t words[4]) {
  std::memset(words, 0, 4 * sizeof(uint64_t));
  if (family == AF_INET) {
    std::memcpy(words, qp.src, 4);
    std::memcpy(reinterpret_cast<uint8_t*>(words) + 4, qp.dst, 4);
  } else {
    std::memcpy(words, qp.src, 16);
    std::memcpy(words + 2, qp.dst, 16);
  }
}

}  // namespace

void QpSlotTable::probe_of(const rg_qp_key& qp, uint32_t dir, uint32_t bucket[2], uint32_t home[2]) const {
  uint64_t words[4];
  qp_addr_words(qp, family_, words);
  const uint64_t h = rg_qp_hash(reinterpret_cast<const __u64*>(words), family_ == AF_INET ? 1 : 4,
                                rg_qp_id(qp.dest_qp, dir, 0));
  for (int b = 0; b < 2; ++b) {
    bucket[b] = rg_qp_bucket(h, b, buckets());
    home[b] = rg_qp_home(h, b);
  }
}

bool QpSlotTable::matches(const rg_qp_slot_head* s, const rg_qp_key& qp, uint32_t dir) const {
  uint64_t words[4];
  qp_addr_words(qp, family_, words);
  const __u32 id = __atomic_load_n(&s->id, __ATOMIC_ACQUIRE);
  return id == rg_qp_id(qp.dest_qp, dir, RG_QP_SLOT_READY) &&
         std::memcmp(s + 1, words, family_ == AF_INET ? 8 : 32) == 0;
}

uint32_t QpSlotTable::walk(const Visitor& visit) const {
  uint32_t n = 0;
  for (uint32_t i = 0; i < slots_; ++i) {
    const rg_qp_slot_head* s = slot(i);
    const __u32 id = __atomic_load_n(&s->id, __ATOMIC_ACQUIRE);
    if (rg_qp_id_state(id) != RG_QP_SLOT_READY) continue;
    rg_qp_slot_head copy;
    std::memcpy(&copy, s, sizeof(copy));
    rg_qp_key qp{};
    qp.family = static_cast<uint32_t>(family_);
    const size_t addr = family_ == AF_INET ? 4 : 16;
    std::memcpy(qp.src, reinterpret_cast<const uint8_t*>(s + 1), addr);
    std::memcpy(qp.dst, reinterpret_cast<const uint8_t*>(s + 1) + addr, addr);
    qp.dest_qp = id & RG_QP_ID_QP_MASK;
    visit(qp, (id >> RG_QP_ID_DIR_SHIFT) & 1 ? RG_DIR_INGRESS : RG_DIR_EGRESS, copy);
    ++n;
  }
  return n;
}

const rg_qp_slot_head* QpSlotTable::find(const rg_qp_key& qp, uint32_t dir) const {
  uint32_t bucket[2], home[2];
  probe_of(qp, dir, bucket, home);
  bool done[2] = {false, false};
  for (uint32_t j = 0; j < RG_QP_BUCKET_SLOTS && !(done[0] && done[1]); ++j)
    for (int b = 0; b < 2; ++b) {
      if (done[b]) continue;
      const rg_qp_slot_head* s = slot(bucket[b] * RG_QP_BUCKET_SLOTS + ((home[b] + j) & (RG_QP_BUCKET_SLOTS - 1)));
      if (__atomic_load_n(&s->id, __ATOMIC_ACQUIRE) == RG_QP_SLOT_EMPTY)
        done[b] = true;
      else if (matches(s, qp, dir))
        return s;
    }
  return nullptr;
}

bool QpSlotTable::place(const rg_qp_key& qp, uint32_t dir, const rg_qp_dir& value, uint32_t last_seen) {
  if (const rg_qp_slot_head* there = find(qp, dir)) {  // already there: overwrite
    auto* s = const_cast<rg_qp_slot_head*>(there);
    s->dir = value;
    s->last_seen = last_seen;
    return true;
  }
  uint32_t bucket[2], home[2];
  probe_of(qp, dir, bucket, home);
  // As rg_qp_scan: the emptier bucket's home, or the other's if they hold
  // as many; else the emptier bucket's first free slot, else the other's.
  rg_qp_slot_head* first_free[2] = {nullptr, nullptr};
  uint32_t step[2] = {RG_QP_BUCKET_SLOTS, RG_QP_BUCKET_SLOTS}, used[2] = {0, 0};
  for (uint32_t j = 0; j < RG_QP_BUCKET_SLOTS; ++j)
    for (int b = 0; b < 2; ++b) {
      rg_qp_slot_head* s = slot(bucket[b] * RG_QP_BUCKET_SLOTS + ((home[b] + j) & (RG_QP_BUCKET_SLOTS - 1)));
      const uint32_t st = rg_qp_id_state(s->id);
      if (st == RG_QP_SLOT_EMPTY || st == RG_QP_SLOT_ABANDONED) {
        if (!first_free[b]) first_free[b] = s, step[b] = j;
      } else {
        ++used[b];
      }
    }
  int b = used[1] < used[0];
  if (step[b] != 0 && step[!b] == 0 && used[0] == used[1])
    b = !b;
  else if (step[b] == RG_QP_BUCKET_SLOTS)
    b = !b;
  rg_qp_slot_head* s = first_free[b];
  if (!s) return false;
  uint64_t words[4];
  qp_addr_words(qp, family_, words);
  std::memcpy(s + 1, words, family_ == AF_INET ? 8 : 32);
  s->dir = value;
  s->last_seen = last_seen;
  __atomic_store_n(&s->id, rg_qp_id(qp.dest_qp, dir, RG_QP_SLOT_READY), __ATOMIC_RELEASE);
  return true;
}

uint32_t qp_clock_now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  const uint64_t ns = static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
  return static_cast<uint32_t>(ns >> RG_QP_CLOCK_SHIFT);
}

MapReader::MapReader(const std::string& pin_path) : owned_(true), pin_path_(pin_path) {
  try {
    counters_fd_ = open_pinned(pin_path + "/" + kMapCounters);
    qp_.v4 = open_pinned(pin_path + "/" + kMapQp4);
    qp_.v6 = open_pinned(pin_path + "/" + kMapQp6);
    check_map_layout(counters_fd_, pin_path + "/" + kMapCounters, *pinned_map_layout(kMapCounters));
    check_map_layout(qp_.v4, pin_path + "/" + kMapQp4, *pinned_map_layout(kMapQp4));
    check_map_layout(qp_.v6, pin_path + "/" + kMapQp6, *pinned_map_layout(kMapQp6));
    qp_max_ = {QpSlotTable::check(qp_.v4, AF_INET), QpSlotTable::check(qp_.v6, AF_INET6)};
  } catch (...) {
    for (int fd : {counters_fd_, qp_.v4, qp_.v6})
      if (fd >= 0) close(fd);
    throw;
  }
  counters_value_size_ = map_info(counters_fd_, kMapCounters).value_size;
  counters_max_ = map_info(counters_fd_, kMapCounters).max_entries;
}

MapReader::MapReader(int counters_fd, QpMaps qp) : counters_fd_(counters_fd), qp_(qp) {
  check_map_layout(counters_fd_, kMapCounters, *pinned_map_layout(kMapCounters));
  const MapUsage c = map_info(counters_fd_, kMapCounters);
  counters_value_size_ = c.value_size;
  counters_max_ = c.max_entries;
  if (qp_.v4 >= 0) {
    check_map_layout(qp_.v4, kMapQp4, *pinned_map_layout(kMapQp4));
    qp_max_.v4 = QpSlotTable::check(qp_.v4, AF_INET);
  }
  if (qp_.v6 >= 0) {
    check_map_layout(qp_.v6, kMapQp6, *pinned_map_layout(kMapQp6));
    qp_max_.v6 = QpSlotTable::check(qp_.v6, AF_INET6);
  }
}

MapReader::~MapReader() {
  if (!owned_) return;
  for (int fd : {counters_fd_, qp_.v4, qp_.v6})
    if (fd >= 0) close(fd);
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

namespace {

std::string qp_identity(const rg_qp_key& k) { return std::string(reinterpret_cast<const char*>(&k), sizeof(k)); }

// The QP a per-family table key (rg_qp4_key or rg_qp6_key) names.
template <typename Key>
rg_qp_key qp_of(const Key& key) {
  rg_qp_key k{};
  k.family = sizeof(key.src) == 4 ? AF_INET : AF_INET6;
  std::memcpy(k.src, key.src, sizeof(key.src));
  std::memcpy(k.dst, key.dst, sizeof(key.dst));
  k.dest_qp = key.dest_qp;
  return k;
}

uint32_t walk_qp_table(const QpSlotTable* t, const std::function<void(const QpRow&, rg_direction)>& visit) {
  if (!t) return 0;
  return t->walk([&](const rg_qp_key& qp, rg_direction d, const rg_qp_slot_head& slot) {
    QpRow row;
    row.key = qp;
    row.state.dir[d] = slot.dir;
    row.state.last_seen_ns[d] = qp_clock_ns(slot.last_seen);
    visit(row, d);
  });
}

}  // namespace

const QpSlotTable* MapReader::slots(int family) const {
  std::unique_ptr<QpSlotTable>& t = family == AF_INET ? slots4_ : slots6_;
  const int fd = family == AF_INET ? qp_.v4 : qp_.v6;
  if (!t && fd >= 0) t = std::make_unique<QpSlotTable>(fd, family);
  return t.get();
}

QpEntries MapReader::walk_qps(const std::function<void(const QpRow&, rg_direction)>& visit) const {
  return {walk_qp_table(slots(AF_INET), visit), walk_qp_table(slots(AF_INET6), visit)};
}

void MapReader::join_other_direction(QpRow& row, rg_direction have) const {
  const uint32_t other = have == RG_DIR_EGRESS ? RG_DIR_INGRESS : RG_DIR_EGRESS;
  const QpSlotTable* t = slots(row.key.family);
  const rg_qp_slot_head* s = t ? t->find(row.key, other) : nullptr;
  row.state.dir[other] = s ? s->dir : rg_qp_dir{};
  row.state.last_seen_ns[other] = s ? qp_clock_ns(s->last_seen) : 0;
}

std::vector<QpRow> MapReader::qps() const {
  std::vector<QpRow> rows;
  std::unordered_map<std::string, size_t> index;
  walk_qps([&](const QpRow& half, rg_direction d) {
    auto [it, added] = index.emplace(qp_identity(half.key), rows.size());
    if (added)
      rows.push_back(half);
    else
      rows[it->second].state.dir[d] = half.state.dir[d], rows[it->second].state.last_seen_ns[d] = half.state.last_seen_ns[d];
  });
  return rows;
}

std::vector<QpRow> MapReader::top_qps(size_t top, bool (*ranks_before)(const QpRow&, const QpRow&),
                                      QpEntries* entries) const {
  // A heap whose front is the kept entry that ranks last: the one a better
  // entry replaces. Twice top entries: both directions of one QP may be
  // among them.
  struct Half {
    QpRow row;
    rg_direction dir;
  };
  std::vector<Half> kept;
  const size_t keep = 2 * top;
  auto later = [ranks_before](const Half& a, const Half& b) { return ranks_before(a.row, b.row); };
  QpEntries walked;
  if (top > 0)
    walked = walk_qps([&](const QpRow& row, rg_direction d) {
      if (kept.size() < keep) {
        kept.push_back({row, d});
        std::push_heap(kept.begin(), kept.end(), later);
      } else if (ranks_before(row, kept.front().row)) {
        std::pop_heap(kept.begin(), kept.end(), later);
        kept.back() = {row, d};
        std::push_heap(kept.begin(), kept.end(), later);
      }
    });
  std::vector<QpRow> out;
  std::unordered_set<std::string> seen;
  for (Half& h : kept) {
    if (!seen.insert(qp_identity(h.row.key)).second) continue;
    join_other_direction(h.row, h.dir);
    out.push_back(h.row);
  }
  std::sort(out.begin(), out.end(), ranks_before);
  if (out.size() > top) out.resize(top);
  if (entries) *entries = walked;
  return out;
}

std::vector<PeerStatsRow> read_peer_stats(int fd, int guard_fd, int retired_fd, int pq_fd) {
  check_map_layout(fd, kMapPeerStats, *pinned_map_layout(kMapPeerStats));
  const MapUsage u = map_info(fd, kMapPeerStats);
  const int ncpu = possible_cpus();
  const uint32_t stride = round8(u.value_size);
  std::map<uint32_t, PeerStatsRow> rows;
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
             if (any) rows[row.slot] = row;
           });
  auto row_of = [&](const uint8_t* k) -> PeerStatsRow& {
    uint32_t slot;
    std::memcpy(&slot, k, sizeof(slot));
    PeerStatsRow& row = rows[slot];
    row.slot = slot;
    return row;
  };
  if (guard_fd >= 0) {
    check_map_layout(guard_fd, kMapPeerGuard, *pinned_map_layout(kMapPeerGuard));
    const uint32_t gstride = round8(sizeof(rg_peer_guard));
    walk_map(guard_fd, sizeof(uint32_t), gstride * static_cast<uint32_t>(ncpu), map_info(guard_fd, kMapPeerGuard).max_entries,
             [&](const uint8_t* k, const uint8_t* v) {
               rg_peer_guard sum{};
               for (int cpu = 0; cpu < ncpu; ++cpu) {
                 rg_peer_guard g;
                 std::memcpy(&g, v + static_cast<size_t>(cpu) * gstride, sizeof(g));
                 sum.untracked_copied += g.untracked_copied;
                 sum.auth_bad += g.auth_bad;
                 sum.auth_missing += g.auth_missing;
                 sum.auth_next += g.auth_next;
               }
               if (sum.untracked_copied || sum.auth_bad || sum.auth_missing || sum.auth_next) row_of(k).guard = sum;
             });
  }
  if (retired_fd >= 0) {
    check_map_layout(retired_fd, kMapTunnelRetired, *pinned_map_layout(kMapTunnelRetired));
    walk_map(retired_fd, sizeof(uint32_t), sizeof(rg_tunnel_retired),
             map_info(retired_fd, kMapTunnelRetired).max_entries, [&](const uint8_t* k, const uint8_t* v) {
               rg_tunnel_retired r;
               std::memcpy(&r, v, sizeof(r));
               if (r.evicted) row_of(k).retired = r;
             });
  }
  if (pq_fd >= 0) {
    check_map_layout(pq_fd, kMapPeerPq, *pinned_map_layout(kMapPeerPq));
    walk_map(pq_fd, sizeof(uint32_t), sizeof(rg_peer_pq), map_info(pq_fd, kMapPeerPq).max_entries,
             [&](const uint8_t* k, const uint8_t* v) {
               rg_peer_pq q;
               std::memcpy(&q, v, sizeof(q));
               q.lock = {};
               // empty_at_ns is a time, not a count: the presentation turns
               // it into the backlog at the moment of reading.
               if (q.packets) row_of(k).pq = q;
             });
  }
  std::vector<PeerStatsRow> out;
  for (auto& [slot, row] : rows) out.push_back(row);
  return out;
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
  // Absent under the pins of a build before them: nothing to add.
  Owned guard{bpf_obj_get((pin_path_ + "/" + kMapPeerGuard).c_str())};
  Owned retired{bpf_obj_get((pin_path_ + "/" + kMapTunnelRetired).c_str())};
  Owned pq{bpf_obj_get((pin_path_ + "/" + kMapPeerPq).c_str())};
  return map.fd < 0 ? std::vector<PeerStatsRow>{} : read_peer_stats(map.fd, guard.fd, retired.fd, pq.fd);
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
  if (name == kMapQp4 || name == kMapQp6) {
    // A slot table is an array, every slot an entry to the kernel: its
    // entries are the slots holding a QP direction.
    const int family = name == kMapQp4 ? AF_INET : AF_INET6;
    const QpSlotTable* mine = fd == (family == AF_INET ? qp_.v4 : qp_.v6) ? slots(family) : nullptr;
    std::optional<QpSlotTable> other;
    if (!mine) mine = &other.emplace(fd, family);
    u.entries = mine->walk([](const rg_qp_key&, rg_direction, const rg_qp_slot_head&) {});
    return u;
  }
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

std::vector<MapUsage> MapReader::usage_all(std::optional<QpEntries> qp_entries,
                                           std::optional<uint32_t> counters_entries) const {
  MapUsage counters = counters_entries ? info(counters_fd_, kMapCounters) : usage(counters_fd_, kMapCounters);
  if (counters_entries) counters.entries = *counters_entries;
  std::vector<MapUsage> out{counters};
  for (auto [fd, name, walked] : {std::tuple{qp_.v4, kMapQp4, qp_entries ? qp_entries->v4 : 0u},
                                  std::tuple{qp_.v6, kMapQp6, qp_entries ? qp_entries->v6 : 0u}}) {
    if (fd < 0) continue;
    if (!qp_entries) {
      out.push_back(usage(fd, name));
      continue;
    }
    MapUsage qp = info(fd, name);
    qp.entries = walked;
    out.push_back(qp);
  }
  if (pin_path_.empty()) return out;
  for (const char* name : kPinnedMaps) {
    if (name == kMapCounters || name == kMapQp4 || name == kMapQp6) continue;
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

CounterMigration::CounterMigration(int old_fd, int new_fd, uint32_t key_size, uint32_t max_entries,
                                   uint32_t old_value_size, uint32_t value_size, uint32_t first_word,
                                   std::map<uint64_t, std::vector<uint8_t>> copied)
    : old_fd_(old_fd), new_fd_(new_fd), key_size_(key_size), max_entries_(max_entries),
      old_value_size_(old_value_size), value_size_(value_size), first_word_(first_word), copied_(std::move(copied)) {}

namespace {

// A key of at most 8 bytes as the number CounterMigration files its copy under.
uint64_t key_id(const uint8_t* k, uint32_t key_size) {
  uint64_t id = 0;
  std::memcpy(&id, k, std::min<size_t>(key_size, sizeof(id)));
  return id;
}

}  // namespace

CounterMigration::~CounterMigration() {
  close(old_fd_);
  close(new_fd_);
}

size_t CounterMigration::carry_since_copy() const {
  const int ncpu = possible_cpus();
  const uint32_t old_stride = round8(old_value_size_), new_stride = round8(value_size_);
  const uint32_t words = old_value_size_ / sizeof(uint64_t);
  size_t gained = 0;
  std::vector<uint8_t> now(static_cast<size_t>(new_stride) * ncpu);
  walk_map(old_fd_, key_size_, old_stride * static_cast<uint32_t>(ncpu), max_entries_,
           [&](const uint8_t* k, const uint8_t* v) {
             auto it = copied_.find(key_id(k, key_size_));
             // Per CPU and counter: what the old map holds less what was copied
             // (counters only grow; a smaller value was reset by someone: nothing to add).
             std::vector<uint64_t> delta(static_cast<size_t>(words) * ncpu, 0);
             bool any = false;
             for (int cpu = 0; cpu < ncpu; ++cpu)
               for (uint32_t w = first_word_; w < words; ++w) {
                 const size_t at = static_cast<size_t>(cpu) * old_stride + w * sizeof(uint64_t);
                 uint64_t was = 0, is = 0;
                 std::memcpy(&is, v + at, sizeof(is));
                 if (it != copied_.end()) std::memcpy(&was, it->second.data() + at, sizeof(was));
                 if (is > was) delta[static_cast<size_t>(cpu) * words + w] = is - was, any = true;
               }
             if (!any) return;
             if (bpf_map_lookup_elem(new_fd_, k, now.data()) != 0) std::fill(now.begin(), now.end(), 0);
             for (int cpu = 0; cpu < ncpu; ++cpu)
               for (uint32_t w = first_word_; w < words; ++w) {
                 const size_t at = static_cast<size_t>(cpu) * new_stride + w * sizeof(uint64_t);
                 uint64_t n = 0;
                 std::memcpy(&n, now.data() + at, sizeof(n));
                 n += delta[static_cast<size_t>(cpu) * words + w];
                 std::memcpy(now.data() + at, &n, sizeof(n));
               }
             if (bpf_map_update_elem(new_fd_, k, now.data(), BPF_ANY) == 0) ++gained;
           });
  return gained;
}

std::unique_ptr<CounterMigration> migrate_counters(const std::string& pin_path, uint32_t value_size) {
  const std::string path = pin_path + "/" + kMapCounters;
  Owned old{bpf_obj_get(path.c_str())};
  if (old.fd < 0) return nullptr;
  bpf_map_info info{};
  uint32_t len = sizeof(info);
  if (bpf_obj_get_info_by_fd(old.fd, &info, &len) != 0 || !is_earlier_counters(info, value_size)) return nullptr;

  const int ncpu = possible_cpus();
  const uint32_t old_stride = round8(info.value_size), new_stride = round8(value_size);
  std::vector<std::pair<rg_counter_key, std::vector<uint8_t>>> entries;
  std::map<uint64_t, std::vector<uint8_t>> copied;
  walk_map(old.fd, sizeof(rg_counter_key), old_stride * static_cast<uint32_t>(ncpu), info.max_entries,
           [&](const uint8_t* k, const uint8_t* v) {
             rg_counter_key key;
             std::memcpy(&key, k, sizeof(key));
             std::vector<uint8_t> value(static_cast<size_t>(new_stride) * ncpu, 0);
             for (int cpu = 0; cpu < ncpu; ++cpu)
               std::memcpy(value.data() + static_cast<size_t>(cpu) * new_stride,
                           v + static_cast<size_t>(cpu) * old_stride, info.value_size);
             entries.emplace_back(key, std::move(value));
             copied[key_id(k, sizeof(rg_counter_key))].assign(v, v + static_cast<size_t>(old_stride) * ncpu);
           });

  LIBBPF_OPTS(bpf_map_create_opts, opts, .map_flags = info.map_flags);
  Owned fresh{bpf_map_create(BPF_MAP_TYPE_PERCPU_HASH, kMapCounters, sizeof(rg_counter_key), value_size,
                             info.max_entries, &opts)};
  if (fresh.fd < 0) throw Error("cannot create the migrated " + path + ": " + errno_text(errno));
  for (const auto& [key, value] : entries)
    if (bpf_map_update_elem(fresh.fd, &key, value.data(), BPF_NOEXIST) != 0)
      throw Error("cannot copy a counter into the migrated " + path + ": " + errno_text(errno));
  pin_replacing(fresh.fd, path);
  auto done = std::make_unique<CounterMigration>(old.fd, fresh.fd, sizeof(rg_counter_key), info.max_entries,
                                                 info.value_size, value_size, 0, std::move(copied));
  old.fd = fresh.fd = -1;  // the migration holds them now
  return done;
}

namespace {

// A count this build keeps in 32 bits, from one kept in 64: its low 32
// bits, the count modulo 2^32 that the programs' own adds keep.
uint32_t low32(uint64_t v) { return static_cast<uint32_t>(v); }

// A count this build keeps in 16 bits: the count modulo 2^16.
uint16_t low16(uint64_t v) { return static_cast<uint16_t>(v); }

rg_qp_dir from_legacy(const LegacyQpDir& o) {
  rg_qp_dir d{};
  d.packets = o.packets;
  d.bytes = o.bytes;
  d.max_psn = o.max_psn;
  d.flags = o.flags;
  d.retransmits = low32(o.retransmits);
  d.lost = low32(o.lost);
  d.cnp = low32(o.cnp);
  d.ecn_ce = low32(o.ecn_ce);
  d.gaps = low16(o.gaps);
  d.nak_seq_err = low16(o.nak_seq_err);
  d.nak_other = low16(o.nak_other);
  d.rnr_nak = low16(o.rnr_nak);
  return d;
}

// The slot clock of a CLOCK_MONOTONIC time in nanoseconds (earlier builds
// kept bpf_ktime_get_coarse_ns(), the same clock).
uint32_t qp_clock_of(uint64_t ns) { return static_cast<uint32_t>(ns >> RG_QP_CLOCK_SHIFT); }

}  // namespace

namespace {

// The BTF of a map the loader creates itself (a migrated one), written out
// as libbpf writes the BPF object's, so `bpftool map dump` shows its fields
// as it shows the others'; for rg_tunnel_streams it is also how the kernel
// finds the value's bpf_spin_lock, which the programs take and BPF_F_LOCK
// reads need. Offsets come from roceguard.h (offsetof), so a field stays
// where the header puts it.
class MapBtf {
 public:
  struct Field {
    const char* name;
    int type;
    size_t offset;
  };

  explicit MapBtf(const char* map) : map_(map), types_(btf__new_empty()) {
    if (!types_) throw Error(std::string("cannot build the BTF of ") + map_ + ": " + errno_text(errno));
    u8 = check(btf__add_int(types_, "__u8", 1, 0));
    u16 = check(btf__add_int(types_, "__u16", 2, 0));
    u32 = check(btf__add_int(types_, "__u32", 4, 0));
    u64 = check(btf__add_int(types_, "__u64", 8, 0));
    s32 = check(btf__add_int(types_, "__s32", 4, BTF_INT_SIGNED));
  }
  ~MapBtf() { btf__free(types_); }
  MapBtf(const MapBtf&) = delete;
  MapBtf& operator=(const MapBtf&) = delete;

  int array(int elem, uint32_t n) { return check(btf__add_array(types_, u32, elem, n)); }
  int add_struct(const char* name, size_t size, std::initializer_list<Field> fields) {
    const int id = check(btf__add_struct(types_, name, static_cast<uint32_t>(size)));
    for (const Field& f : fields)
      check(btf__add_field(types_, f.name, f.type, static_cast<uint32_t>(f.offset * 8), 0));
    return id;
  }
  // The same with bit fields: offsets and sizes in bits (size 0: no bit field).
  struct Member {
    const char* name;
    int type;
    uint32_t bit_offset;
    uint32_t bits;
  };
  int add_struct_bits(const char* name, size_t size, std::initializer_list<Member> members) {
    const int id = check(btf__add_struct(types_, name, static_cast<uint32_t>(size)));
    for (const Member& m : members) check(btf__add_field(types_, m.name, m.type, m.bit_offset, m.bits));
    return id;
  }
  // Loaded into the kernel; the fd lives as long as this object.
  int fd() {
    if (int err = btf__load_into_kernel(types_))
      throw Error(std::string("cannot load the BTF of ") + map_ + " into the kernel: " + errno_text(-err));
    return btf__fd(types_);
  }

  int u8 = 0, u16 = 0, u32 = 0, u64 = 0, s32 = 0;

 private:
  int check(int id) {
    if (id < 0) throw Error(std::string("cannot build the BTF of ") + map_ + ": " + errno_text(-id));
    return id;
  }

  const char* map_;
  btf* types_;
};

int create_with_btf(MapBtf& b, bpf_map_type type, const char* name, uint32_t key_size, uint32_t value_size,
                    int key, int value, uint32_t max_entries, uint32_t map_flags) {
  LIBBPF_OPTS(bpf_map_create_opts, opts, .btf_fd = static_cast<__u32>(b.fd()),
              .btf_key_type_id = static_cast<__u32>(key), .btf_value_type_id = static_cast<__u32>(value),
              .map_flags = map_flags);
  const int fd = bpf_map_create(type, name, key_size, value_size, max_entries, &opts);
  if (fd < 0) throw Error(std::string("cannot create ") + name + ": " + errno_text(errno));
  return fd;
}

int create_peer_stats_map(uint32_t max_entries, uint32_t map_flags) {
  MapBtf b(kMapPeerStats);
  const int counter = b.add_struct("rg_counter", sizeof(rg_counter),
                                   {{"packets", b.u64, offsetof(rg_counter, packets)},
                                    {"bytes", b.u64, offsetof(rg_counter, bytes)}});
  const int events = b.array(counter, RG_PEER_EV_MAX);
  const int lanes = b.array(b.u32, RG_TUNNEL_LANES);
  const int value = b.add_struct("rg_peer_stats", sizeof(rg_peer_stats),
                                 {{"epoch", b.u16, offsetof(rg_peer_stats, epoch)},
                                  {"reserved0", b.u16, offsetof(rg_peer_stats, reserved0)},
                                  {"reserved1", b.u32, offsetof(rg_peer_stats, reserved1)},
                                  {"ev", events, offsetof(rg_peer_stats, ev)},
                                  {"tx_seq", lanes, offsetof(rg_peer_stats, tx_seq)}});
  return create_with_btf(b, BPF_MAP_TYPE_PERCPU_ARRAY, kMapPeerStats, sizeof(uint32_t), sizeof(rg_peer_stats), b.u32,
                         value, max_entries, map_flags);
}

// A per-QP slot table of this build's layout (rg_qp4 or rg_qp6 by family)
// meant for entries QP directions, with the BTF the BPF object gives it
// (the slot, its head and rg_qp_dir by their members), so `bpftool map
// dump` shows the fields of a table the loader created as of one libbpf
// created.
int create_qp_table(int family, uint32_t entries) {
  const bool v4 = family == AF_INET;
  const char* name = v4 ? kMapQp4 : kMapQp6;
  MapBtf b(name);
  const int addr = b.array(b.u8, v4 ? 4 : 16);
  // max_psn and resend_next share the 32 bits before flags (qp_accounting.h).
  constexpr uint32_t psn_bits = (offsetof(rg_qp_dir, flags) - sizeof(uint32_t)) * 8;
  auto at = [](size_t offset) { return static_cast<uint32_t>(offset * 8); };
  const int dir = b.add_struct_bits("rg_qp_dir", sizeof(rg_qp_dir),
                                    {{"packets", b.u64, at(offsetof(rg_qp_dir, packets)), 0},
                                     {"bytes", b.u64, at(offsetof(rg_qp_dir, bytes)), 0},
                                     {"max_psn", b.u32, psn_bits, 24},
                                     {"resend_next", b.u32, psn_bits + 24, 8},
                                     {"flags", b.u32, at(offsetof(rg_qp_dir, flags)), 0},
                                     {"retransmits", b.u32, at(offsetof(rg_qp_dir, retransmits)), 0},
                                     {"lost", b.u32, at(offsetof(rg_qp_dir, lost)), 0},
                                     {"cnp", b.u32, at(offsetof(rg_qp_dir, cnp)), 0},
                                     {"ecn_ce", b.u32, at(offsetof(rg_qp_dir, ecn_ce)), 0},
                                     {"gaps", b.u16, at(offsetof(rg_qp_dir, gaps)), 0},
                                     {"nak_seq_err", b.u16, at(offsetof(rg_qp_dir, nak_seq_err)), 0},
                                     {"nak_other", b.u16, at(offsetof(rg_qp_dir, nak_other)), 0},
                                     {"rnr_nak", b.u16, at(offsetof(rg_qp_dir, rnr_nak)), 0}});
  // The id word as its fields (the programs' union of the word and them).
  const int head = b.add_struct_bits("rg_qp_slot_head", sizeof(rg_qp_slot_head),
                                     {{"dest_qp", b.u32, 0, 24},
                                      {"direction", b.u32, RG_QP_ID_DIR_SHIFT, 4},
                                      {"state", b.u32, RG_QP_ID_STATE_SHIFT, 4},
                                      {"last_seen", b.u32, at(offsetof(rg_qp_slot_head, last_seen)), 0},
                                      {"dir", dir, at(offsetof(rg_qp_slot_head, dir)), 0}});
  const int value = v4 ? b.add_struct("rg_qp4_slot", sizeof(rg_qp4_slot),
                                      {{"head", head, offsetof(rg_qp4_slot, head)},
                                       {"src", addr, offsetof(rg_qp4_slot, src)},
                                       {"dst", addr, offsetof(rg_qp4_slot, dst)}})
                       : b.add_struct("rg_qp6_slot", sizeof(rg_qp6_slot),
                                      {{"head", head, offsetof(rg_qp6_slot, head)},
                                       {"src", addr, offsetof(rg_qp6_slot, src)},
                                       {"dst", addr, offsetof(rg_qp6_slot, dst)}});
  return create_with_btf(b, BPF_MAP_TYPE_ARRAY, name, sizeof(uint32_t),
                         v4 ? sizeof(rg_qp4_slot) : sizeof(rg_qp6_slot), b.u32, value, rg_qp_slots(entries),
                         BPF_F_MMAPABLE);
}

// The old stream's counters added to into's (a stream of either layout).
template <typename Stream>
void add_stream_counts(Stream& into, const LegacyTunnelStream& old) {
  into.received += old.received;
  into.lost += old.lost;
  into.reordered += old.reordered;
  into.duplicated += old.duplicated;
  into.resyncs += old.resyncs;
  into.delay_sum_ns += old.delay_sum_ns;
  for (size_t k = 0; k < RG_TUNNEL_DELAY_BUCKETS; ++k) into.delay[k] += old.delay[k];
}

void add_stream(rg_tunnel_stream& into, const LegacyTunnelStream& old) {
  into.max_seq = old.max_seq;
  into.last_ns = std::max<uint64_t>(into.last_ns, old.last_ns);
  add_stream_counts(into, old);
}

// What now counted beyond was, counter by counter (a counter that went
// down was reset by someone: nothing to add); false when nothing did.
bool stream_gain(const LegacyTunnelStream& now, const LegacyTunnelStream& was, LegacyTunnelStream& gain) {
  auto more = [](uint64_t is, uint64_t before) { return is > before ? is - before : 0; };
  gain = LegacyTunnelStream{};
  gain.received = more(now.received, was.received);
  gain.lost = more(now.lost, was.lost);
  gain.reordered = more(now.reordered, was.reordered);
  gain.duplicated = more(now.duplicated, was.duplicated);
  gain.resyncs = more(now.resyncs, was.resyncs);
  gain.delay_sum_ns = more(now.delay_sum_ns, was.delay_sum_ns);
  bool any = gain.received || gain.lost || gain.reordered || gain.duplicated || gain.resyncs || gain.delay_sum_ns;
  for (size_t k = 0; k < RG_TUNNEL_DELAY_BUCKETS; ++k) any |= (gain.delay[k] = more(now.delay[k], was.delay[k])) != 0;
  return any;
}

// This build's stream key of the old stream of peer's sending CPU.
rg_tunnel_stream_key stream_key_of_cpu(uint32_t peer, uint32_t cpu) {
  return {peer, (cpu & RG_TUNNEL_CPU_MASK) << RG_TUNNEL_LANE_BITS};
}

}  // namespace

int create_tunnel_streams_map(uint32_t max_entries, uint32_t map_flags) {
  MapBtf b(kMapTunnelStreams);
  const int lock = b.add_struct("bpf_spin_lock", sizeof(bpf_spin_lock), {{"val", b.u32, 0}});
  const int window = b.array(b.u64, RG_TUNNEL_WINDOW_WORDS);
  const int delay = b.array(b.u64, RG_TUNNEL_DELAY_BUCKETS);
  const int runs = b.array(b.u64, RG_TUNNEL_RUN_BUCKETS);
  const int key = b.add_struct("rg_tunnel_stream_key", sizeof(rg_tunnel_stream_key),
                               {{"peer", b.u32, offsetof(rg_tunnel_stream_key, peer)},
                                {"stream", b.u32, offsetof(rg_tunnel_stream_key, stream)}});
  const int value = b.add_struct("rg_tunnel_stream", sizeof(rg_tunnel_stream),
                                 {{"lock", lock, offsetof(rg_tunnel_stream, lock)},
                                  {"max_seq", b.u32, offsetof(rg_tunnel_stream, max_seq)},
                                  {"epoch", b.u16, offsetof(rg_tunnel_stream, epoch)},
                                  {"delay_floor_at", b.u16, offsetof(rg_tunnel_stream, delay_floor_at)},
                                  {"delay_floor_us", b.s32, offsetof(rg_tunnel_stream, delay_floor_us)},
                                  {"window", window, offsetof(rg_tunnel_stream, window)},
                                  {"last_ns", b.u64, offsetof(rg_tunnel_stream, last_ns)},
                                  {"received", b.u64, offsetof(rg_tunnel_stream, received)},
                                  {"lost", b.u64, offsetof(rg_tunnel_stream, lost)},
                                  {"reordered", b.u64, offsetof(rg_tunnel_stream, reordered)},
                                  {"duplicated", b.u64, offsetof(rg_tunnel_stream, duplicated)},
                                  {"resyncs", b.u64, offsetof(rg_tunnel_stream, resyncs)},
                                  {"delay_sum_ns", b.u64, offsetof(rg_tunnel_stream, delay_sum_ns)},
                                  {"delay", delay, offsetof(rg_tunnel_stream, delay)},
                                  {"loss_runs", runs, offsetof(rg_tunnel_stream, loss_runs)}});
  return create_with_btf(b, BPF_MAP_TYPE_HASH, kMapTunnelStreams, sizeof(rg_tunnel_stream_key),
                         sizeof(rg_tunnel_stream), key, value, max_entries, map_flags);
}

std::unique_ptr<CounterMigration> migrate_peer_stats(const std::string& pin_path) {
  const std::string path = pin_path + "/" + kMapPeerStats;
  Owned old{bpf_obj_get(path.c_str())};
  if (old.fd < 0) return nullptr;
  bpf_map_info info{};
  uint32_t len = sizeof(info);
  if (bpf_obj_get_info_by_fd(old.fd, &info, &len) != 0) return nullptr;
  if (!is_legacy_peer_stats(info)) return nullptr;

  const int ncpu = possible_cpus();
  const uint32_t old_stride = round8(sizeof(LegacyPeerStats)), new_stride = round8(sizeof(rg_peer_stats));
  // The events are the same words in both layouts; the word before them
  // (sequence number, epoch) is no counter.
  static_assert(offsetof(LegacyPeerStats, ev) == offsetof(rg_peer_stats, ev) &&
                offsetof(rg_peer_stats, ev) % sizeof(uint64_t) == 0);
  constexpr uint32_t kFirstEventWord = offsetof(rg_peer_stats, ev) / sizeof(uint64_t);
  Owned fresh{create_peer_stats_map(info.max_entries, info.map_flags)};
  std::vector<uint8_t> value(static_cast<size_t>(new_stride) * ncpu);
  std::map<uint64_t, std::vector<uint8_t>> copied;
  walk_map(old.fd, sizeof(uint32_t), old_stride * static_cast<uint32_t>(ncpu), info.max_entries,
           [&](const uint8_t* k, const uint8_t* v) {
             copied[key_id(k, sizeof(uint32_t))].assign(v, v + static_cast<size_t>(old_stride) * ncpu);
             std::fill(value.begin(), value.end(), 0);
             bool any = false;
             for (int cpu = 0; cpu < ncpu; ++cpu) {
               LegacyPeerStats o;
               std::memcpy(&o, v + static_cast<size_t>(cpu) * old_stride, sizeof(o));
               rg_peer_stats n{};  // epoch and tx_seq 0: a new numbering
               for (uint32_t e = 0; e < kLegacyPeerEvents; ++e) {
                 n.ev[e] = o.ev[e];
                 any |= o.ev[e].packets || o.ev[e].bytes;
               }
               std::memcpy(value.data() + static_cast<size_t>(cpu) * new_stride, &n, sizeof(n));
             }
             if (any && bpf_map_update_elem(fresh.fd, k, value.data(), BPF_ANY) != 0)
               throw Error("cannot copy a peer's counters into the migrated " + path + ": " + errno_text(errno));
           });
  pin_replacing(fresh.fd, path);
  auto done = std::make_unique<CounterMigration>(old.fd, fresh.fd, sizeof(uint32_t), info.max_entries,
                                                 static_cast<uint32_t>(sizeof(LegacyPeerStats)),
                                                 static_cast<uint32_t>(sizeof(rg_peer_stats)), kFirstEventWord,
                                                 std::move(copied));
  old.fd = fresh.fd = -1;  // the migration holds them now
  return done;
}

StreamMigration::StreamMigration(int old_fd, int new_fd, uint32_t max_entries, size_t streams,
                                 std::map<std::pair<uint32_t, uint32_t>, LegacyTunnelStream> copied)
    : old_fd_(old_fd), new_fd_(new_fd), max_entries_(max_entries), streams_(streams), copied_(std::move(copied)) {}

StreamMigration::~StreamMigration() {
  close(old_fd_);
  close(new_fd_);
}

size_t StreamMigration::carry_since_copy() const {
  // Gains of several old streams that share one new stream (CPUs beyond
  // the stream field) are summed first, each new stream written once.
  std::map<std::pair<uint32_t, uint32_t>, LegacyTunnelStream> gains;
  walk_map(old_fd_, sizeof(rg_tunnel_stream_key), sizeof(LegacyTunnelStream), max_entries_,
           [&](const uint8_t* k, const uint8_t* v) {
             rg_tunnel_stream_key key;
             LegacyTunnelStream now, gain;
             std::memcpy(&key, k, sizeof(key));
             std::memcpy(&now, v, sizeof(now));
             auto it = copied_.find({key.peer, key.stream});
             if (!stream_gain(now, it != copied_.end() ? it->second : LegacyTunnelStream{}, gain)) return;
             const rg_tunnel_stream_key to = stream_key_of_cpu(key.peer, key.stream);
             add_stream_counts(gains[{to.peer, to.stream}], gain);
           });
  size_t gained = 0;
  for (const auto& [k, gain] : gains) {
    const rg_tunnel_stream_key key{k.first, k.second};
    rg_tunnel_stream value{};
    const bool there = bpf_map_lookup_elem_flags(new_fd_, &key, &value, BPF_F_LOCK) == 0;
    if (!there) std::fill(std::begin(value.window), std::end(value.window), ~0ull);
    add_stream_counts(value, gain);
    if (bpf_map_update_elem(new_fd_, &key, &value, there ? BPF_F_LOCK : BPF_NOEXIST) == 0) ++gained;
  }
  return gained;
}

std::unique_ptr<StreamMigration> migrate_tunnel_streams(const std::string& pin_path, uint32_t max_entries,
                                                        uint32_t map_flags) {
  const std::string path = pin_path + "/" + kMapTunnelStreams;
  Owned old{bpf_obj_get(path.c_str())};
  if (old.fd < 0) return nullptr;
  bpf_map_info info{};
  uint32_t len = sizeof(info);
  if (bpf_obj_get_info_by_fd(old.fd, &info, &len) != 0) return nullptr;
  if (!is_legacy_tunnel_streams(info)) return nullptr;

  // The CPU goes where this build's stream field has it (12 bits): a CPU
  // beyond them shares the stream of the CPU it wraps to, so its counts
  // are added to that one's rather than lost. The old window is dropped
  // (a new epoch restarts the tracking), so values are read without the
  // lock: a count the old programs add meanwhile is all a torn read costs.
  std::map<std::pair<uint32_t, uint32_t>, rg_tunnel_stream> streams;
  std::map<std::pair<uint32_t, uint32_t>, LegacyTunnelStream> copied;
  walk_map(old.fd, sizeof(rg_tunnel_stream_key), sizeof(LegacyTunnelStream), info.max_entries,
           [&](const uint8_t* k, const uint8_t* v) {
             rg_tunnel_stream_key key;
             LegacyTunnelStream o;
             std::memcpy(&key, k, sizeof(key));
             std::memcpy(&o, v, sizeof(o));
             copied[{key.peer, key.stream}] = o;
             const rg_tunnel_stream_key to = stream_key_of_cpu(key.peer, key.stream);
             auto [it, added] = streams.try_emplace({to.peer, to.stream});
             if (added) std::fill(std::begin(it->second.window), std::end(it->second.window), ~0ull);
             add_stream(it->second, o);
           });

  Owned fresh{create_tunnel_streams_map(max_entries, map_flags)};
  for (const auto& [k, value] : streams) {
    const rg_tunnel_stream_key key{k.first, k.second};
    if (bpf_map_update_elem(fresh.fd, &key, &value, BPF_NOEXIST) != 0)
      throw Error("cannot copy a stream into the migrated " + path + " (" + std::to_string(streams.size()) +
                  " streams, " + std::to_string(max_entries) + " at most): " + errno_text(errno));
  }
  pin_replacing(fresh.fd, path);
  auto done = std::make_unique<StreamMigration>(old.fd, fresh.fd, info.max_entries, streams.size(), std::move(copied));
  old.fd = fresh.fd = -1;  // the migration holds them now
  return done;
}

namespace {

// Sets the read-only global name (a __u32 of the object's .rodata) of an
// opened, not yet loaded object.
void set_rodata_u32(struct bpf_object* obj, const char* name, uint32_t value) {
  const btf* types = bpf_object__btf(obj);
  bpf_map* rodata = nullptr;
  bpf_map* m = nullptr;
  bpf_object__for_each_map(m, obj) {
    const std::string n = bpf_map__name(m);
    if (n.size() >= 7 && n.compare(n.size() - 7, 7, ".rodata") == 0) rodata = m;
  }
  const int sec = types ? btf__find_by_name_kind(types, ".rodata", BTF_KIND_DATASEC) : -1;
  size_t size = 0;
  const void* initial = rodata ? bpf_map__initial_value(rodata, &size) : nullptr;
  if (sec > 0 && initial) {
    std::vector<uint8_t> data(static_cast<const uint8_t*>(initial), static_cast<const uint8_t*>(initial) + size);
    const btf_type* t = btf__type_by_id(types, static_cast<uint32_t>(sec));
    const btf_var_secinfo* v = btf_var_secinfos(t);
    for (uint16_t i = 0; i < btf_vlen(t); ++i, ++v) {
      const btf_type* var = btf__type_by_id(types, v->type);
      if (std::strcmp(btf__name_by_offset(types, var->name_off), name) != 0) continue;
      if (v->size != sizeof(value) || v->offset + sizeof(value) > size) break;
      std::memcpy(data.data() + v->offset, &value, sizeof(value));
      if (int err = bpf_map__set_initial_value(rodata, data.data(), size))
        throw Error(std::string("cannot set ") + name + ": " + errno_text(err));
      return;
    }
  }
  throw Error(std::string("BPF object has no read-only ") + name);
}

}  // namespace

void set_qp_entries(struct bpf_object* obj, uint32_t entries) {
  const uint32_t slots = rg_qp_slots(entries);
  for (const char* name : {kMapQp4, kMapQp6}) {
    bpf_map* m = bpf_object__find_map_by_name(obj, name);
    if (!m) throw Error(std::string("BPF object has no map ") + name);
    if (int err = bpf_map__set_max_entries(m, slots))
      throw Error(std::string("cannot size ") + name + " to " + std::to_string(slots) + " slots: " + errno_text(err));
  }
  set_rodata_u32(obj, "rg_qp4_buckets", slots / RG_QP_BUCKET_SLOTS);
  set_rodata_u32(obj, "rg_qp6_buckets", slots / RG_QP_BUCKET_SLOTS);
}

void link_xdp_forward(struct bpf_object* obj) {
  bpf_map* next = bpf_object__find_map_by_name(obj, kMapXdpNext);
  bpf_program* prog = bpf_object__find_program_by_name(obj, "rg_xdp_forward");
  if (!next || !prog) throw Error(std::string("BPF object has no ") + (next ? "rg_xdp_forward" : kMapXdpNext));
  const uint32_t key = 0;
  const int fd = bpf_program__fd(prog);
  if (fd < 0) throw Error("internal: rg_xdp_forward was not loaded");
  if (bpf_map_update_elem(bpf_map__fd(next), &key, &fd, BPF_ANY) != 0)
    throw Error(std::string("cannot put rg_xdp_forward into ") + kMapXdpNext + ": " + errno_text(errno));
}

std::optional<bool> pinned_xdp_forward_linked(const std::string& pin_path) {
  Owned next{bpf_obj_get((pin_path + "/" + kMapXdpNext).c_str())};
  if (next.fd < 0) return std::nullopt;
  const uint32_t key = 0;
  uint32_t prog_id = 0;  // a program array answers a lookup with the program's id
  return bpf_map_lookup_elem(next.fd, &key, &prog_id) == 0;
}

namespace {

// What the old direction now counted beyond was (a count that went down
// was reset by someone: nothing to add), added to into; false when nothing.
bool add_qp_gain(rg_qp_dir& into, const LegacyQpDir& now, const LegacyQpDir& was) {
  auto more = [](uint64_t is, uint64_t before) { return is > before ? is - before : 0; };
  const LegacyQpDir g{more(now.packets, was.packets), more(now.bytes, was.bytes),
                      more(now.retransmits, was.retransmits), more(now.gaps, was.gaps),
                      more(now.lost, was.lost), more(now.nak_seq_err, was.nak_seq_err),
                      more(now.nak_other, was.nak_other), more(now.rnr_nak, was.rnr_nak),
                      more(now.cnp, was.cnp), more(now.ecn_ce, was.ecn_ce), 0, 0};
  if (!(g.packets | g.bytes | g.retransmits | g.gaps | g.lost | g.nak_seq_err | g.nak_other | g.rnr_nak | g.cnp |
        g.ecn_ce))
    return false;
  into.packets += g.packets;
  into.bytes += g.bytes;
  into.retransmits += low32(g.retransmits);
  into.lost += low32(g.lost);
  into.cnp += low32(g.cnp);
  into.ecn_ce += low32(g.ecn_ce);
  into.gaps += low16(g.gaps);
  into.nak_seq_err += low16(g.nak_seq_err);
  into.nak_other += low16(g.nak_other);
  into.rnr_nak += low16(g.rnr_nak);
  return true;
}

// The table of qp's family of the pair v4/v6.
QpSlotTable& table_of(const rg_qp_key& qp, QpSlotTable& v4, QpSlotTable& v6) {
  return qp.family == AF_INET ? v4 : v6;
}

}  // namespace

QpMigration::QpMigration(int old_fd, int v4_fd, int v6_fd, uint32_t max_entries, size_t carried,
                         std::map<std::string, LegacyQpState> copied)
    : old_fd_(old_fd), v4_fd_(v4_fd), v6_fd_(v6_fd), max_entries_(max_entries), carried_(carried),
      copied_(std::move(copied)) {}

QpMigration::~QpMigration() {
  close(old_fd_);
  close(v4_fd_);
  close(v6_fd_);
}

size_t QpMigration::carry_since_copy() const {
  size_t gained = 0;
  QpSlotTable v4(v4_fd_, AF_INET, true), v6(v6_fd_, AF_INET6, true);
  walk_map(old_fd_, sizeof(rg_qp_key), sizeof(LegacyQpState), max_entries_, [&](const uint8_t* k, const uint8_t* v) {
    rg_qp_key key;
    LegacyQpState now;
    std::memcpy(&key, k, sizeof(key));
    std::memcpy(&now, v, sizeof(now));
    auto it = copied_.find(std::string(reinterpret_cast<const char*>(k), sizeof(key)));
    QpSlotTable& t = table_of(key, v4, v6);
    for (uint32_t d = 0; d < RG_DIR_MAX; ++d) {
      const LegacyQpDir& o = now.dir[d];
      if (o.packets == 0 && o.flags == 0) continue;  // this direction never seen
      const LegacyQpDir was = it != copied_.end() ? it->second.dir[d] : LegacyQpDir{};
      const rg_qp_slot_head* s = t.find(key, d);
      rg_qp_dir value = s ? s->dir : from_legacy(o);  // met first after the copy: it comes whole
      if (s && !add_qp_gain(value, o, was)) continue;
      gained += t.place(key, d, value, s ? s->last_seen : qp_clock_of(now.last_seen_ns));
    }
  });
  return gained;
}

std::unique_ptr<QpMigration> migrate_qp_table(const std::string& pin_path, uint32_t entries) {
  const std::string path = pin_path + "/" + kMapQpLegacy;
  Owned old{bpf_obj_get(path.c_str())};
  if (old.fd < 0) return nullptr;
  bpf_map_info info{};
  uint32_t len = sizeof(info);
  if (bpf_obj_get_info_by_fd(old.fd, &info, &len) != 0)
    throw Error("cannot read info of map " + path + ": " + errno_text(errno));
  if (info.type != BPF_MAP_TYPE_LRU_HASH || info.key_size != sizeof(rg_qp_key) ||
      info.value_size != sizeof(LegacyQpState))
    throw Error("map " + path + " is no per-QP table of an earlier roceguard (type " + type_name(info.type) +
                    ", key_size " + std::to_string(info.key_size) + ", value_size " +
                    std::to_string(info.value_size) +
                    "); refusing to read it. `roceguard attach --reset-state` (or `run --reset-state`) removes it",
                kExitConflict);

  Owned v4{create_qp_table(AF_INET, entries)};
  Owned v6{create_qp_table(AF_INET6, entries)};
  size_t carried = 0;
  std::map<std::string, LegacyQpState> copied;
  {
    QpSlotTable t4(v4.fd, AF_INET, true), t6(v6.fd, AF_INET6, true);
    walk_map(old.fd, sizeof(rg_qp_key), sizeof(LegacyQpState), info.max_entries,
             [&](const uint8_t* k, const uint8_t* v) {
               rg_qp_key key;
               LegacyQpState st;
               std::memcpy(&key, k, sizeof(key));
               std::memcpy(&st, v, sizeof(st));
               copied.emplace(std::string(reinterpret_cast<const char*>(k), sizeof(key)), st);
               for (uint32_t d = 0; d < RG_DIR_MAX; ++d) {
                 const LegacyQpDir& o = st.dir[d];
                 if (o.packets == 0 && o.flags == 0) continue;  // this direction never seen
                 // A QP whose two buckets are full is not carried (the table
                 // is meant for entries; the old one may hold more).
                 carried += table_of(key, t4, t6).place(key, d, from_legacy(o), qp_clock_of(st.last_seen_ns));
               }
             });
  }
  pin_replacing(v4.fd, pin_path + "/" + kMapQp4);
  pin_replacing(v6.fd, pin_path + "/" + kMapQp6);
  auto done = std::make_unique<QpMigration>(old.fd, v4.fd, v6.fd, info.max_entries, carried, std::move(copied));
  old.fd = v4.fd = v6.fd = -1;  // the migration holds them now
  return done;
}

namespace {

rg_qp_dir from_v80(const QpDirV80& o) {
  rg_qp_dir d{};
  d.packets = o.packets;
  d.bytes = o.bytes;
  d.max_psn = o.max_psn;
  d.resend_next = o.resend_next;
  d.flags = o.flags;
  d.retransmits = low32(o.retransmits);
  d.lost = low32(o.lost);
  d.cnp = low32(o.cnp);
  d.ecn_ce = low32(o.ecn_ce);
  d.gaps = low16(o.gaps);
  d.nak_seq_err = low16(o.nak_seq_err);
  d.nak_other = low16(o.nak_other);
  d.rnr_nak = low16(o.rnr_nak);
  return d;
}

// An entry of either LRU value as the 80-byte one.
QpDirV80 widen(const uint8_t* v, uint32_t value_size) {
  QpDirV80 w{};
  if (value_size == sizeof(QpDirV80)) {
    std::memcpy(&w, v, sizeof(w));
    return w;
  }
  QpDirV64 o;
  std::memcpy(&o, v, sizeof(o));
  w.packets = o.packets;
  w.bytes = o.bytes;
  w.max_psn = o.max_psn;
  w.resend_next = o.resend_next;
  w.flags = o.flags;
  w.last_seen_ns = o.last_seen_ns;
  w.retransmits = o.retransmits;
  w.lost = o.lost;
  w.cnp = o.cnp;
  w.ecn_ce = o.ecn_ce;
  w.gaps = o.gaps;
  w.nak_seq_err = o.nak_seq_err;
  w.nak_other = o.nak_other;
  w.rnr_nak = o.rnr_nak;
  return w;
}

// What the old entry now counted beyond was (a count that went down was
// reset by someone, or wrapped: nothing to add), added to into, modulo
// 2^32 or 2^16 where into keeps 32 or 16 bits; false when nothing.
bool add_v80_gain(rg_qp_dir& into, const QpDirV80& now, const QpDirV80& was) {
  auto more = [](uint64_t is, uint64_t before) { return is > before ? is - before : 0; };
  const uint64_t packets = more(now.packets, was.packets), bytes = more(now.bytes, was.bytes),
                 retransmits = more(now.retransmits, was.retransmits), lost = more(now.lost, was.lost),
                 cnp = more(now.cnp, was.cnp), ecn_ce = more(now.ecn_ce, was.ecn_ce),
                 gaps = more(now.gaps, was.gaps), nak_seq_err = more(now.nak_seq_err, was.nak_seq_err),
                 nak_other = more(now.nak_other, was.nak_other), rnr_nak = more(now.rnr_nak, was.rnr_nak);
  if (!(packets | bytes | retransmits | lost | cnp | ecn_ce | gaps | nak_seq_err | nak_other | rnr_nak)) return false;
  into.packets += packets;
  into.bytes += bytes;
  into.retransmits += low32(retransmits);
  into.lost += low32(lost);
  into.cnp += low32(cnp);
  into.ecn_ce += low32(ecn_ce);
  into.gaps += low16(gaps);
  into.nak_seq_err += low16(nak_seq_err);
  into.nak_other += low16(nak_other);
  into.rnr_nak += low16(rnr_nak);
  return true;
}

bool is_lru_qp_table(const bpf_map_info& info, uint32_t key_size) {
  return info.type == BPF_MAP_TYPE_LRU_HASH && info.key_size == key_size &&
         (info.value_size == sizeof(QpDirV80) || info.value_size == sizeof(QpDirV64));
}

// The QP and direction of a key of an LRU table (rg_qp4_key or rg_qp6_key).
std::pair<rg_qp_key, uint32_t> qp_of_table_key(const uint8_t* k, uint32_t key_size) {
  if (key_size == sizeof(rg_qp4_key)) {
    rg_qp4_key key;
    std::memcpy(&key, k, sizeof(key));
    return {qp_of(key), key.direction};
  }
  rg_qp6_key key;
  std::memcpy(&key, k, sizeof(key));
  return {qp_of(key), key.direction};
}

}  // namespace

bool qp_values_need_migration(const std::string& pin_path, const std::string& name, uint32_t entries) {
  const uint32_t key_size = name == kMapQp4 ? sizeof(rg_qp4_key) : name == kMapQp6 ? sizeof(rg_qp6_key) : 0;
  if (!key_size) return false;
  auto info = pinned_info(pin_path + "/" + name);
  return info && is_lru_qp_table(*info, key_size) && info->max_entries == entries;
}

QpValueMigration::QpValueMigration(std::vector<Table> tables) : tables_(std::move(tables)) {}

QpValueMigration::~QpValueMigration() {
  for (const Table& t : tables_) {
    close(t.old_fd);
    close(t.new_fd);
  }
}

size_t QpValueMigration::carried() const {
  size_t n = 0;
  for (const Table& t : tables_) n += t.copied.size();
  return n;
}

size_t QpValueMigration::carry_since_copy() const {
  size_t gained = 0;
  for (const Table& t : tables_) {
    QpSlotTable slots(t.new_fd, t.key_size == sizeof(rg_qp4_key) ? AF_INET : AF_INET6, true);
    walk_map(t.old_fd, t.key_size, t.value_size, t.max_entries, [&](const uint8_t* k, const uint8_t* v) {
      const QpDirV80 now = widen(v, t.value_size);
      auto it = t.copied.find(std::string(reinterpret_cast<const char*>(k), t.key_size));
      const QpDirV80 was = it != t.copied.end() ? it->second : QpDirV80{};
      const auto [qp, d] = qp_of_table_key(k, t.key_size);
      const rg_qp_slot_head* s = slots.find(qp, d);
      rg_qp_dir value = s ? s->dir : from_v80(now);  // met first after the copy: it comes whole
      if (s && !add_v80_gain(value, now, was)) return;
      gained += slots.place(qp, d, value, s ? s->last_seen : qp_clock_of(now.last_seen_ns));
    });
  }
  return gained;
}

std::unique_ptr<QpValueMigration> migrate_qp_values(const std::string& pin_path, uint32_t entries) {
  std::vector<QpValueMigration::Table> tables;
  auto release = [&tables] {
    for (auto& t : tables) {
      if (t.old_fd >= 0) close(t.old_fd);
      if (t.new_fd >= 0) close(t.new_fd);
    }
  };
  try {
    for (const uint32_t key_size : {uint32_t{sizeof(rg_qp4_key)}, uint32_t{sizeof(rg_qp6_key)}}) {
      const bool v4 = key_size == sizeof(rg_qp4_key);
      const std::string path = pin_path + "/" + (v4 ? kMapQp4 : kMapQp6);
      Owned old{bpf_obj_get(path.c_str())};
      if (old.fd < 0) continue;
      bpf_map_info info{};
      uint32_t len = sizeof(info);
      if (bpf_obj_get_info_by_fd(old.fd, &info, &len) != 0 || !is_lru_qp_table(info, key_size)) continue;
      Owned fresh{create_qp_table(v4 ? AF_INET : AF_INET6, entries)};
      QpValueMigration::Table t;
      t.key_size = key_size;
      t.value_size = info.value_size;
      t.max_entries = info.max_entries;
      {
        QpSlotTable slots(fresh.fd, v4 ? AF_INET : AF_INET6, true);
        walk_map(old.fd, key_size, info.value_size, info.max_entries, [&](const uint8_t* k, const uint8_t* v) {
          const QpDirV80 o = widen(v, info.value_size);
          const auto [qp, d] = qp_of_table_key(k, key_size);
          // A QP whose two buckets are full is not carried.
          if (slots.place(qp, d, from_v80(o), qp_clock_of(o.last_seen_ns)))
            t.copied.emplace(std::string(reinterpret_cast<const char*>(k), key_size), o);
        });
      }
      pin_replacing(fresh.fd, path);
      t.old_fd = old.fd;
      t.new_fd = fresh.fd;
      old.fd = fresh.fd = -1;  // the migration holds them now
      tables.push_back(std::move(t));
    }
  } catch (...) {
    release();
    throw;
  }
  if (tables.empty()) return nullptr;
  return std::make_unique<QpValueMigration>(std::move(tables));
}

void remove_legacy_qp_table(const std::string& pin_path) {
  const std::string path = pin_path + "/" + kMapQpLegacy;
  if (unlink(path.c_str()) != 0 && errno != ENOENT)
    throw Error("cannot remove the earlier per-QP table " + path + ": " + errno_text(errno));
}

}  // namespace rg
