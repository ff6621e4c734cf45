// The leases on the egress program's next-hop cache (the map rg_nh_leases, see
// struct rg_nexthop). A peer's cached next hop is used only while its
// lease runs and carries the cache entry's generation; this process grants
// the leases, renews them while it runs, and moves every peer to a new
// generation on each route, neighbour or link event, so that no packet
// takes a next hop the kernel no longer has after the event is read. A
// peer whose route spreads over several next hops gets no lease: one
// cached hop would take every flow of it to one of them.
#pragma once

#include <cstdint>
#include <vector>

#include "config/config.h"

namespace rg {

// Whether the kernel's route from local to remote (UDP to the Geneve
// port) has one next hop: RTM_GETROUTE with RTM_F_FIB_MATCH answers the
// route entry itself, which names RTA_MULTIPATH or a nexthop object
// (RTA_NH_ID, possibly a group) otherwise. No route is no single path.
bool single_path_route(const Address& local, const Address& remote);

class NexthopLeases {
 public:
  // How long a lease runs without renewal: a daemon killed without its
  // revoke() leaves the cache unused after this.
  static constexpr uint64_t kLeaseNs = 3'000'000'000ull;

  // Borrows lease_fd (rg_nh_leases of the loaded object); slots[i] is
  // peers[i]'s rg_peers slot (none given: their positions, as a test's
  // maps written by hand have them). The generations go on from the highest the
  // map holds, so that a slot's cached hop of an earlier holder of the map
  // (a reload's previous peers) is never current again; slots no peer
  // holds lose their lease.
  NexthopLeases(int lease_fd, std::vector<PeerConfig> peers, std::vector<uint32_t> slots = {});

  // A new generation for every peer, each granted or refused by its route
  // as it is now; what the cache holds is no longer current. Call on every
  // route, neighbour or link event, and when events may have been lost.
  void invalidate();
  // Extends the current leases by kLeaseNs from now.
  void renew();
  // Ends every lease: the programs route every packet by bpf_fib_lookup.
  void revoke();

  uint32_t generation() const { return gen_; }
  size_t granted() const;

 private:
  void write(uint64_t until_ns) const;

  int fd_;
  std::vector<PeerConfig> peers_;
  std::vector<uint32_t> slots_;
  std::vector<bool> cacheable_;
  uint32_t gen_ = 0;
};

}  // namespace rg
