// The harness lends each configuration's loaded object to one case after
// another (harness.h, LoadedObject). These cases prove that a case cannot
// see what the one before it left: a case that writes every map it can,
// then a case on the same object, compared map by map with an object
// loaded for it alone.
#include <gtest/gtest.h>

#include <bpf/libbpf.h>

#include <set>
#include <string>

#include "harness.h"
#include "dataplane/nexthop_lease.h"

namespace rg::test {
namespace {

PacketBuilder tunneled(const char* dst, uint32_t qp) {
  PacketBuilder p;
  p.eth(kPeerMac, kDevMac).ipv4("198.51.100.10", dst).udp(49200, kRoceV2Port);
  Bth b;
  b.opcode = kOpSendOnly;
  b.dest_qp = qp;
  b.psn = 100;
  p.bth(b).payload(64);
  return p;
}

// Leaves something in every map the programs or the loader write: the
// tunnel tables, counters, both QP tables, the tunnel's sequence streams
// and per-peer counters, the next-hop cache and its leases, the fast path's
// device map and the interface table.
void dirty_every_map(Dataplane& dp) {
  dp.tunnels();
  dp.forward_to(other_dev_ifindex());
  dp.iface(other_dev_ifindex(), kOtherDevMac);
  NexthopLeases leases(bpf_map__fd(dp.skel()->maps.rg_nh_leases), harness_peers());
  leases.invalidate();
  for (uint32_t qp : {0x21u, 0x22u}) {
    const Verdict out = dp.tc(tunneled("203.0.113.20", qp).build());
    ASSERT_TRUE(parse(out.out).geneve) << "not encapsulated";
    // What the far end receives: decapsulated, accounted at ingress.
    Bytes back = out.out;
    std::swap_ranges(back.begin(), back.begin() + 6, back.begin() + 6);
    dp.xdp(back);
  }
  PacketBuilder v6 = tunneled("203.0.113.20", 0x23);
  v6.ipv6("2001:db8:5::10", "2001:db8:6::20");
  dp.tc(v6.build());
  dp.age_qps();
}

// With the tunnel's sequence option on, so its stream table fills too.
rg_config isolation_config() {
  rg_config c = test_config();
  c.flags |= RG_CFG_F_TUNNEL_SEQ;
  return c;
}

std::set<std::string> differing_maps(const MapImage& a, const MapImage& b) {
  std::set<std::string> names;
  for (const auto& [name, entries] : a) {
    auto it = b.find(name);
    if (it == b.end() || it->second != entries) names.insert(name);
  }
  return names;
}

TEST(Isolation, ACaseFindsEveryMapAsAFreshLoadLeavesIt) {
  const Dataplane fresh(isolation_config(), Dataplane::FreshLoad{});
  const MapImage loaded = fresh.image();
  roceguard* first = nullptr;
  {
    Dataplane dp(isolation_config());
    first = dp.skel();
    ASSERT_NO_FATAL_FAILURE(dirty_every_map(dp));
    // The case above did reach every map it can change; the scratch maps
    // (rg_zero, rg_tunnel_stream_zero) are never written.
    const std::set<std::string> dirty = differing_maps(loaded, dp.image());
    for (const char* name : {"rg_counters", "rg_qp4", "rg_qp6", "rg_peers", "rg_route4", "rg_route6",
                             "rg_decap", "rg_nexthops", "rg_nh_leases", "rg_xdp_tx", "rg_ifaces",
                             "rg_peer_stats", "rg_tunnel_streams", "rg_encap_buf"})
      EXPECT_TRUE(dirty.count(name)) << name << " was left as the load had it";
  }
  const Dataplane next(isolation_config());
  EXPECT_EQ(next.skel(), first) << "the object was loaded again instead of lent";
  EXPECT_EQ(image_difference(loaded, next.image()), "");
}

// Two cases at once get two objects, each as loaded.
TEST(Isolation, CasesHeldTogetherGetObjectsOfTheirOwn) {
  Dataplane a(isolation_config());
  ASSERT_NO_FATAL_FAILURE(dirty_every_map(a));
  const Dataplane b(isolation_config());
  EXPECT_NE(a.skel(), b.skel());
  const Dataplane fresh(isolation_config(), Dataplane::FreshLoad{});
  EXPECT_EQ(image_difference(fresh.image(), b.image()), "");
}

}  // namespace
}  // namespace rg::test
