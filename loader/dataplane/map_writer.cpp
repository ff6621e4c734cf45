#include "dataplane/map_writer.h"

#include <bpf/bpf.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <string>
#include <utility>

#include "common/error.h"
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

void MapWriter::write_tunnels(const std::vector<PeerConfig>& peers) const {
  // Peers first, so that no route or decap entry points at a slot that is
  // not filled in yet; stale routes point at zeroed (unused) slots at worst.
  Entries slots;
  for (uint32_t i = 0; i < RG_MAX_PEERS; ++i) {
    rg_peer v{};
    if (i < peers.size()) {
      const auto& p = peers[i];
      v.vni = p.vni;
      v.mtu = static_cast<__u16>(p.mtu);
      v.family = static_cast<__u8>(p.remote.family);
      v.flags = shield_flags(p.shield, p.shield_path);
      std::memcpy(v.local, p.local.bytes.data(), 16);
      std::memcpy(v.remote, p.remote.bytes.data(), 16);
    }
    slots.push_back({bytes_of(i), bytes_of(v)});
  }
  sync(peers_fd_, kMapPeers, slots);

  Entries r4, r6, decap;
  for (uint32_t i = 0; i < peers.size(); ++i) {
    const auto& p = peers[i];
    for (const auto& r : p.routes) {
      if (r.addr.family == AF_INET) {
        rg_route4_key k{};
        k.prefixlen = r.len;
        std::memcpy(k.addr, r.addr.bytes.data(), 4);
        r4.push_back({bytes_of(k), bytes_of(i)});
      } else {
        rg_route6_key k{};
        k.prefixlen = r.len;
        std::memcpy(k.addr, r.addr.bytes.data(), 16);
        r6.push_back({bytes_of(k), bytes_of(i)});
      }
    }
    rg_decap_key d{};
    std::memcpy(d.remote, p.remote.bytes.data(), 16);
    d.family = static_cast<__u32>(p.remote.family);
    d.vni = p.vni;
    decap.push_back({bytes_of(d), bytes_of(i)});
  }
  sync(route4_fd_, kMapRoute4, r4);
  sync(route6_fd_, kMapRoute6, r6);
  sync(decap_fd_, kMapDecap, decap);
}

}  // namespace rg
