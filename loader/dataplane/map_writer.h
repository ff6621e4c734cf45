// The one writer of roceguard's tunnel maps (rg_peers, rg_route4/6,
// rg_decap), beside MapReader: the configuration's peers become map entries,
// and the maps end up holding exactly what is configured.
//
// A peer's slot follows its identity (outer family, remote address, VNI),
// not its place in the configuration: what the slot holds for it (its
// sequence numbering and epoch, its counters, the streams tracked from it)
// is the peer's, and stays its own across reorders and restarts. A slot
// whose occupant changes is cleared (rg_peer_stats, rg_tunnel_streams) and
// numbers in a new epoch, never as a continuation of another peer's.
#pragma once

#include <cstdint>
#include <vector>

#include "config/config.h"
#include "roceguard/roceguard.h"

namespace rg {

class MapWriter {
 public:
  // Borrows the maps' fds; not closed.
  // peer_stats_fd and streams_fd (rg_peer_stats, rg_tunnel_streams): -1
  // when absent, and then nothing is cleared.
  // guard_fd and retired_fd (rg_peer_guard, rg_tunnel_retired): likewise.
  MapWriter(int peers_fd, int route4_fd, int route6_fd, int decap_fd, int peer_stats_fd = -1, int streams_fd = -1,
            int guard_fd = -1, int retired_fd = -1)
      : peers_fd_(peers_fd),
        route4_fd_(route4_fd),
        route6_fd_(route6_fd),
        decap_fd_(decap_fd),
        peer_stats_fd_(peer_stats_fd),
        streams_fd_(streams_fd),
        guard_fd_(guard_fd),
        retired_fd_(retired_fd) {}

  // Every entry of the four maps, as raw key and value bytes.
  struct Snapshot {
    using Entries = std::vector<std::pair<std::vector<uint8_t>, std::vector<uint8_t>>>;
    Entries peers, route4, route6, decap;
  };
  Snapshot snapshot() const;

  // Where write_tunnels put the peers: slots[i] is peers[i]'s; changed
  // lists the slots whose occupant changed (given to another peer, or
  // emptied), whose state was cleared.
  struct Placement {
    std::vector<uint32_t> slots;
    std::vector<uint32_t> changed;
  };

  // Where write_tunnels would put the peers now, writing nothing: what the
  // slots' keys (rg_peer_auth) are written by before the slots themselves.
  Placement place(const std::vector<PeerConfig>& peers) const;

  // Writes every peer slot (unused ones zeroed), then the routes and decap
  // keys. A peer already in a slot keeps it, a new one takes the lowest
  // free one. Keys the configuration no longer has go before new ones come,
  // so a map at max_entries (or left full by an earlier failure) still
  // takes the new configuration. Throws rg::Error naming the map the kernel
  // refused.
  Placement write_tunnels(const std::vector<PeerConfig>& peers) const;

  // Puts the maps back exactly as snapshot() found them.
  void restore(const Snapshot& s) const;

 private:
  // Empties what the slot's previous occupant left: its counters and
  // numbering on every CPU (which restart in an epoch none of them had)
  // and the streams tracked from it, the counts of its evicted streams and
  // its untracked copies.
  void clear_slot(uint32_t slot) const;

  int peers_fd_, route4_fd_, route6_fd_, decap_fd_, peer_stats_fd_, streams_fd_, guard_fd_, retired_fd_;
};


}  // namespace rg
