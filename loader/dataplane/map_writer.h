// The one writer of roceguard's tunnel maps (rg_peers, rg_route4/6,
// rg_decap), beside MapReader: the configuration's peers become map entries,
// and the maps end up holding exactly what is configured.
#pragma once

#include <cstdint>
#include <vector>

#include "config/config.h"

namespace rg {

class MapWriter {
 public:
  // Borrows the maps' fds; not closed.
  MapWriter(int peers_fd, int route4_fd, int route6_fd, int decap_fd)
      : peers_fd_(peers_fd), route4_fd_(route4_fd), route6_fd_(route6_fd), decap_fd_(decap_fd) {}

  // Every entry of the four maps, as raw key and value bytes.
  struct Snapshot {
    using Entries = std::vector<std::pair<std::vector<uint8_t>, std::vector<uint8_t>>>;
    Entries peers, route4, route6, decap;
  };
  Snapshot snapshot() const;

  // Writes every peer slot (unused ones zeroed), then the routes and decap
  // keys. Keys the configuration no longer has go before new ones come,
  // so a map at max_entries (or left full by an earlier failure) still
  // takes the new configuration. Throws rg::Error naming the map the kernel
  // refused.
  void write_tunnels(const std::vector<PeerConfig>& peers) const;

  // Puts the maps back exactly as snapshot() found them.
  void restore(const Snapshot& s) const;

 private:
  int peers_fd_, route4_fd_, route6_fd_, decap_fd_;
};

}  // namespace rg
