#include "map_writer.h"

#include <bpf/bpf.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <utility>

#include "error.h"
#include "maps.h"

namespace rg {
namespace {

using Key = std::vector<uint8_t>;
using Entries = std::vector<std::pair<Key, uint32_t>>;

template <typename T>
Key key_bytes(const T& k) {
  return Key(reinterpret_cast<const uint8_t*>(&k), reinterpret_cast<const uint8_t*>(&k + 1));
}

// Writes every wanted key, then deletes every other key: the map ends up
// exactly as configured.
void sync(int fd, const char* name, size_t key_size, const Entries& wanted) {
  std::set<Key> keep;
  for (const auto& [k, v] : wanted) {
    if (bpf_map_update_elem(fd, k.data(), &v, BPF_ANY) != 0)
      throw Error(std::string("cannot write ") + name + ": " + errno_text(errno));
    keep.insert(k);
  }
  std::vector<Key> stale;
  Key key(key_size), next(key_size);
  const void* prev = nullptr;
  for (size_t guard = 0; guard < 1u << 20 && bpf_map_get_next_key(fd, prev, next.data()) == 0; ++guard) {
    key = next;
    prev = key.data();
    if (!keep.count(key)) stale.push_back(key);
  }
  for (const auto& k : stale) bpf_map_delete_elem(fd, k.data());
}

}  // namespace

void MapWriter::write_tunnels(const std::vector<PeerConfig>& peers) const {
  // Peers first, so that no route or decap entry points at a slot that is
  // not filled in yet; stale routes point at zeroed (unused) slots at worst.
  for (uint32_t i = 0; i < RG_MAX_PEERS; ++i) {
    rg_peer v{};
    if (i < peers.size()) {
      const auto& p = peers[i];
      v.vni = p.vni;
      v.mtu = static_cast<__u16>(p.mtu);
      v.family = static_cast<__u8>(p.remote.family);
      std::memcpy(v.local, p.local.bytes.data(), 16);
      std::memcpy(v.remote, p.remote.bytes.data(), 16);
    }
    if (bpf_map_update_elem(peers_fd_, &i, &v, BPF_ANY) != 0)
      throw Error("cannot write " + std::string(kMapPeers) + "[" + std::to_string(i) + "]: " + errno_text(errno));
  }

  Entries r4, r6, decap;
  for (uint32_t i = 0; i < peers.size(); ++i) {
    const auto& p = peers[i];
    for (const auto& r : p.routes) {
      if (r.addr.family == AF_INET) {
        rg_route4_key k{};
        k.prefixlen = r.len;
        std::memcpy(k.addr, r.addr.bytes.data(), 4);
        r4.push_back({key_bytes(k), i});
      } else {
        rg_route6_key k{};
        k.prefixlen = r.len;
        std::memcpy(k.addr, r.addr.bytes.data(), 16);
        r6.push_back({key_bytes(k), i});
      }
    }
    rg_decap_key d{};
    std::memcpy(d.remote, p.remote.bytes.data(), 16);
    d.family = static_cast<__u32>(p.remote.family);
    d.vni = p.vni;
    decap.push_back({key_bytes(d), i});
  }
  sync(route4_fd_, kMapRoute4, sizeof(rg_route4_key), r4);
  sync(route6_fd_, kMapRoute6, sizeof(rg_route6_key), r6);
  sync(decap_fd_, kMapDecap, sizeof(rg_decap_key), decap);
}

}  // namespace rg
