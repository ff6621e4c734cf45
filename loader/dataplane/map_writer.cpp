#include "dataplane/map_writer.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <set>
#include <string>
#include <utility>

#include "common/error.h"
#include "dataplane/bpf_object.h"
#include "dataplane/maps.h"

namespace rg {
namespace {

using Bytes = std::vector<uint8_t>;
using Entries = MapWriter::Snapshot::Entries;

template <typename T>
Bytes bytes_of(const T& v) {
  return Bytes(reinterpret_cast<const uint8_t*>(&v), reinterpret_cast<const uint8_t*>(&v + 1));
}

struct MapShape {
  uint32_t key_size = 0, value_size = 0, max_entries = 0;
};

MapShape shape_of(int fd, const char* name) {
  bpf_map_info info{};
  uint32_t len = sizeof(info);
  if (bpf_obj_get_info_by_fd(fd, &info, &len) != 0)
    throw Error(std::string("cannot read map ") + name + ": " + errno_text(errno));
  return {info.key_size, info.value_size, info.max_entries};
}

// Every key of the map; bounded by max_entries (and a little slack for keys
// added meanwhile by nobody: we hold the pin lock).
std::vector<Bytes> keys_of(int fd, const MapShape& shape) {
  std::vector<Bytes> keys;
  Bytes key(shape.key_size), next(shape.key_size);
  const void* prev = nullptr;
  for (size_t guard = 0; guard <= shape.max_entries && bpf_map_get_next_key(fd, prev, next.data()) == 0; ++guard) {
    keys.push_back(next);
    key = next;
    prev = key.data();
  }
  return keys;
}

Entries entries_of(int fd, const char* name) {
  MapShape shape = shape_of(fd, name);
  Entries out;
  Bytes value(shape.value_size);
  for (const auto& k : keys_of(fd, shape))
    if (bpf_map_lookup_elem(fd, k.data(), value.data()) == 0) out.push_back({k, value});
  return out;
}

// Makes the map hold exactly wanted: deletes the keys it does not have
// first (room for the new ones even at max_entries), leaves the entries it
// already has untouched, then writes the rest. Kept keys never disappear,
// so lookups of them never miss meanwhile.
void sync(int fd, const char* name, const Entries& wanted) {
  MapShape shape = shape_of(fd, name);
  std::set<Bytes> keep;
  for (const auto& [k, v] : wanted) keep.insert(k);
  for (const auto& k : keys_of(fd, shape))
    if (!keep.count(k) && bpf_map_delete_elem(fd, k.data()) != 0 && errno != ENOENT)
      throw Error(std::string("cannot delete a stale entry of ") + name + ": " + errno_text(errno));
  Bytes current(shape.value_size);
  for (const auto& [k, v] : wanted) {
    if (bpf_map_lookup_elem(fd, k.data(), current.data()) == 0 && current == v) continue;
    if (bpf_map_update_elem(fd, k.data(), v.data(), BPF_ANY) != 0)
      throw Error(std::string("cannot write ") + name + " (" + std::to_string(wanted.size()) + " entries, " +
                  std::to_string(shape.max_entries) + " at most): " + errno_text(errno) +
                  "; --reset-state recreates the pinned maps");
  }
}

}  // namespace

MapWriter::Snapshot MapWriter::snapshot() const {
  return {entries_of(peers_fd_, kMapPeers), entries_of(route4_fd_, kMapRoute4), entries_of(route6_fd_, kMapRoute6),
          entries_of(decap_fd_, kMapDecap)};
}

void MapWriter::restore(const Snapshot& s) const {
  // Routes and decap keys first, so that none points at a slot that is
  // not filled in; the same order as write_tunnels reversed.
  sync(decap_fd_, kMapDecap, s.decap);
  sync(route6_fd_, kMapRoute6, s.route6);
  sync(route4_fd_, kMapRoute4, s.route4);
  sync(peers_fd_, kMapPeers, s.peers);
}

bool same_peer(const rg_peer& a, const rg_peer& b) {
  if (a.family != b.family) return false;
  return !a.family || (a.vni == b.vni && std::memcmp(a.remote, b.remote, sizeof(a.remote)) == 0);
}

void MapWriter::clear_slot(uint32_t slot) const {
  if (peer_stats_fd_ >= 0) {
    // A per-CPU value: every possible CPU's, each rounded up to 8 bytes.
    const MapShape shape = shape_of(peer_stats_fd_, kMapPeerStats);
    const int ncpu = libbpf_num_possible_cpus();
    if (ncpu <= 0) throw Error("cannot count the possible CPUs: " + errno_text(-ncpu));
    const size_t stride = (shape.value_size + 7) / 8 * 8;
    Bytes values(stride * static_cast<size_t>(ncpu));
    std::set<uint16_t> had;
    if (bpf_map_lookup_elem(peer_stats_fd_, &slot, values.data()) == 0)
      for (int c = 0; c < ncpu; ++c) {
        uint16_t epoch = 0;
        std::memcpy(&epoch, values.data() + stride * c + offsetof(rg_peer_stats, epoch), sizeof(epoch));
        had.insert(epoch & RG_TUNNEL_EPOCH_MASK);
      }
    // Set, not left 0 for the load's: the load's may be the one the
    // previous occupant numbered in, and the far side must see a restart.
    uint16_t epoch = 0;
    for (int guard = 0; guard < 64 && (epoch == 0 || had.count(epoch)); ++guard) epoch = new_tunnel_epoch();
    std::fill(values.begin(), values.end(), 0);
    for (int c = 0; c < ncpu; ++c)
      std::memcpy(values.data() + stride * c + offsetof(rg_peer_stats, epoch), &epoch, sizeof(epoch));
    if (bpf_map_update_elem(peer_stats_fd_, &slot, values.data(), BPF_ANY) != 0)
      throw Error(std::string("cannot clear ") + kMapPeerStats + "[" + std::to_string(slot) + "]: " +
                  errno_text(errno));
  }
  if (streams_fd_ >= 0) {
    const MapShape shape = shape_of(streams_fd_, kMapTunnelStreams);
    for (const auto& k : keys_of(streams_fd_, shape)) {
      rg_tunnel_stream_key key{};
      std::memcpy(&key, k.data(), std::min(sizeof(key), k.size()));
      if (key.peer == slot && bpf_map_delete_elem(streams_fd_, k.data()) != 0 && errno != ENOENT)
        throw Error(std::string("cannot delete a stream of ") + kMapTunnelStreams + ": " + errno_text(errno));
    }
  }
  // What the slot's receiving side kept of its previous occupant: the
  // counts of its evicted streams, its untracked copies and rejected options.
  for (const auto& [fd, name] : {std::pair{guard_fd_, kMapPeerGuard}, std::pair{retired_fd_, kMapTunnelRetired}}) {
    if (fd < 0) continue;
    bpf_map_info info{};
    uint32_t len = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd, &info, &len) != 0)
      throw Error(std::string("cannot read map ") + name + ": " + errno_text(errno));
    const bool per_cpu = info.type == BPF_MAP_TYPE_PERCPU_ARRAY;
    const int ncpu = per_cpu ? libbpf_num_possible_cpus() : 1;
    Bytes zero((info.value_size + 7) / 8 * 8 * static_cast<size_t>(std::max(ncpu, 1)));
    if (bpf_map_update_elem(fd, &slot, zero.data(), BPF_ANY) != 0)
      throw Error(std::string("cannot clear ") + name + "[" + std::to_string(slot) + "]: " + errno_text(errno));
  }
}

namespace {

rg_peer peer_value(const PeerConfig& p) {
  rg_peer v{};
  v.vni = p.vni;
  v.mtu = static_cast<__u16>(p.mtu);
  v.family = static_cast<__u8>(p.remote.family);
  v.flags = shield_flags(p.shield, p.shield_path);
  std::memcpy(v.local, p.local.bytes.data(), 16);
  std::memcpy(v.remote, p.remote.bytes.data(), 16);
  return v;
}

}  // namespace

MapWriter::Placement MapWriter::place(const std::vector<PeerConfig>& peers) const {
  std::vector<rg_peer> had(RG_MAX_PEERS), want(RG_MAX_PEERS);
  for (uint32_t s = 0; s < RG_MAX_PEERS; ++s)
    if (bpf_map_lookup_elem(peers_fd_, &s, &had[s]) != 0) had[s] = rg_peer{};

  // Each peer's slot: the one that holds it already, else the lowest free.
  Placement out;
  out.slots.assign(peers.size(), RG_MAX_PEERS);
  std::vector<bool> taken(RG_MAX_PEERS, false);
  std::vector<rg_peer> values;
  for (const auto& p : peers) values.push_back(peer_value(p));
  for (size_t i = 0; i < values.size(); ++i)
    for (uint32_t s = 0; s < RG_MAX_PEERS; ++s)
      if (!taken[s] && had[s].family && same_peer(had[s], values[i])) {
        out.slots[i] = s;
        taken[s] = true;
        break;
      }
  for (size_t i = 0, s = 0; i < values.size(); ++i) {
    if (out.slots[i] != RG_MAX_PEERS) continue;
    while (s < RG_MAX_PEERS && taken[s]) ++s;
    if (s == RG_MAX_PEERS) throw Error("more than " + std::to_string(RG_MAX_PEERS) + " peers");
    out.slots[i] = static_cast<uint32_t>(s);
    taken[s] = true;
  }
  for (size_t i = 0; i < values.size(); ++i) want[out.slots[i]] = values[i];
  for (uint32_t s = 0; s < RG_MAX_PEERS; ++s)
    if (!same_peer(had[s], want[s])) out.changed.push_back(s);
  return out;
}

MapWriter::Placement MapWriter::write_tunnels(const std::vector<PeerConfig>& peers) const {
  const Placement out = place(peers);
  std::vector<rg_peer> want(RG_MAX_PEERS);
  for (size_t i = 0; i < peers.size(); ++i) want[out.slots[i]] = peer_value(peers[i]);
  std::set<uint32_t> changed(out.changed.begin(), out.changed.end());

  Entries r4, r6, decap;
  for (size_t i = 0; i < peers.size(); ++i) {
    const auto& p = peers[i];
    const uint32_t slot = out.slots[i];
    for (const auto& r : p.routes) {
      if (r.addr.family == AF_INET) {
        rg_route4_key k{};
        k.prefixlen = r.len;
        std::memcpy(k.addr, r.addr.bytes.data(), 4);
        r4.push_back({bytes_of(k), bytes_of(slot)});
      } else {
        rg_route6_key k{};
        k.prefixlen = r.len;
        std::memcpy(k.addr, r.addr.bytes.data(), 16);
        r6.push_back({bytes_of(k), bytes_of(slot)});
      }
    }
    rg_decap_key d{};
    std::memcpy(d.remote, p.remote.bytes.data(), 16);
    d.family = static_cast<__u32>(p.remote.family);
    d.vni = p.vni;
    decap.push_back({bytes_of(d), bytes_of(slot)});
  }
  auto without_changed = [&](const Entries& all) {
    Entries kept;
    for (const auto& [k, v] : all) {
      uint32_t slot = 0;
      std::memcpy(&slot, v.data(), sizeof(slot));
      if (!changed.count(slot)) kept.push_back({k, v});
    }
    return kept;
  };
  auto slots_of = [&](bool changed_empty) {
    Entries e;
    for (uint32_t s = 0; s < RG_MAX_PEERS; ++s)
      e.push_back({bytes_of(s), bytes_of(changed_empty && changed.count(s) ? rg_peer{} : want[s])});
    return e;
  };
  if (!changed.empty()) {
    // A changing slot is emptied first, with every route and decap key
    // that names it (the old occupant's, or the new one's arriving early),
    // so that no packet meets one peer's state under another's identity
    // while its state is cleared.
    sync(peers_fd_, kMapPeers, slots_of(true));
    sync(route4_fd_, kMapRoute4, without_changed(r4));
    sync(route6_fd_, kMapRoute6, without_changed(r6));
    sync(decap_fd_, kMapDecap, without_changed(decap));
    for (uint32_t s : out.changed) clear_slot(s);
  }
  // Peers first, so that no route or decap entry points at a slot that is
  // not filled in yet.
  sync(peers_fd_, kMapPeers, slots_of(false));
  sync(route4_fd_, kMapRoute4, r4);
  sync(route6_fd_, kMapRoute6, r6);
  sync(decap_fd_, kMapDecap, decap);
  return out;
}

}  // namespace rg
