// The kernel's own VXLAN device between the lab's gateways, what a user
// would run instead of roceguard's Geneve: `vx0` in both gateways, VNI
// kLabVni, UDP 4789, the gateways' WAN addresses as local and remote, the
// outer TOS inherited from the inner packet (`tos inherit`, so a DSCP set
// before the device reaches the WAN) and the outer TTL roceguard's Geneve
// writes. Host A's and host B's IPv4 prefixes are routed through it in
// place of the plain routes over the WAN; the destructor puts those back
// and deletes the devices. Used by `roceguard lab --tunnel-kind vxlan` and
// the throughput benchmark's vxlan case.
#pragma once

#include <cstdint>
#include <vector>

#include "lab/topology.h"
#include "wan/wan.h"

namespace rg::lab {

inline constexpr const char* kVxlanDevice = "vx0";
inline constexpr uint16_t kVxlanPort = RG_WAN_VXLAN_UDP_PORT;
// VXLAN's own bytes on the WAN: outer IPv4 (20), UDP (8), VXLAN (8) and the
// inner Ethernet header (14).
inline constexpr unsigned kVxlanOverhead = 50;

class KernelVxlan {
 public:
  // wan_mtu: the largest outer packet the WAN takes; vx0 gets that less
  // kVxlanOverhead. Throws rg::Error, leaving nothing behind.
  KernelVxlan(const Topology& topo, unsigned wan_mtu);
  ~KernelVxlan();
  KernelVxlan(const KernelVxlan&) = delete;
  KernelVxlan& operator=(const KernelVxlan&) = delete;

  unsigned mtu() const { return mtu_; }
  // Packets vx0 of gateway n has sent (its link statistics).
  uint64_t tx_packets(Node n) const;

 private:
  void restore() noexcept;
  const Topology& topo_;
  unsigned mtu_;
  std::vector<Node> made_;
};

}  // namespace rg::lab
