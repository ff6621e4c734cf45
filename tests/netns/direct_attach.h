// Attaches roceguard's programs with nothing but the skeleton and libbpf:
// the data plane on its own, without the loader, so the end-to-end tests can
// tell a data-plane failure from a loader failure.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "dataplane/maps.h"

struct roceguard;  // the generated skeleton

namespace rg::test {

struct TunnelPeer {
  std::string local;   // outer source address (this gateway)
  std::string remote;  // outer destination address (the far gateway)
  uint32_t vni = 100;
  std::string route;   // inner prefix sent through the tunnel, "203.0.113.0/24"
};

class DirectAttach {
 public:
  enum class Hook { kTcEgress, kXdp };
  // Native XDP, or the kernel's generic XDP (on veth, only the generic path
  // recomputes skb->pkt_type when the program changes the destination MAC).
  enum class XdpMode { kNative, kGeneric };
  // Loads a private copy of the object (unpinned maps) and attaches one
  // program to ifname in netns. A peer fills rg_peers/rg_route4 for the TC
  // program and rg_decap for XDP.
  DirectAttach(const std::string& netns, const std::string& ifname, Hook hook,
               const std::optional<TunnelPeer>& peer, XdpMode xdp_mode = XdpMode::kNative);
  ~DirectAttach();
  DirectAttach(const DirectAttach&) = delete;
  DirectAttach& operator=(const DirectAttach&) = delete;

  int counters_fd() const;
  rg::QpMaps qp_maps() const;

 private:
  std::string netns_;
  int ifindex_ = 0;
  Hook hook_;
  uint32_t xdp_flags_ = 0;
  bool created_qdisc_ = false;
  bool attached_ = false;
  ::roceguard* skel_ = nullptr;
};

}  // namespace rg::test
