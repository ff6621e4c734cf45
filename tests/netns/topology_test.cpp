// The lab topology's own guarantees: names carry the tag and pid, and
// leftovers of a crashed run are found and removed.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include <algorithm>

#include "lab/lab_gateway.h"
#include "lab/proc.h"
#include "lab/topology.h"
#include "lab_fixture.h"

namespace rg::test {
namespace {

bool netns_exists(const std::string& name) {
  return access(("/run/netns/" + name).c_str(), F_OK) == 0;
}

TEST(Topology, NamesCarryTagAndPidAndAreRemoved) {
  ASSERT_EQ(geteuid(), 0u) << "network namespaces need root";
  std::vector<std::string> names;
  {
    lab::Topology topo(kTag);
    for (lab::Node n : lab::kNodes) {
      names.push_back(topo.netns(n));
      EXPECT_EQ(topo.netns(n).rfind(std::string(kTag) + "-" + std::to_string(getpid()) + "-", 0), 0u);
      EXPECT_TRUE(netns_exists(topo.netns(n)));
    }
  }
  for (const auto& n : names) EXPECT_FALSE(netns_exists(n)) << n;
}

// A lab gateway with a tunnel peer grants the peer's next-hop lease as
// `roceguard run` does (the lab's and the benchmarks' tunnels use the
// cache as a deployment does).
TEST(Topology, LabGatewayHoldsTheNextHopLeaseAsTheDaemonDoes) {
  ASSERT_EQ(geteuid(), 0u) << "network namespaces need root";
  ensure_bpffs();
  lab::Topology topo(kTag);
  const lab::Addresses a = topo.addr();
  const std::string pin = "/sys/fs/bpf/" + std::string(kTag) + "-" + std::to_string(getpid()) + "-lease";
  // The lease map of the gateway's egress program (not pinned), opened by id.
  auto lease = [](const lab::Gateway& gw) {
    rg_nexthop_lease l{};
    const int prog = bpf_prog_get_fd_by_id(gw.state().interfaces.at(0).tc_prog_id);
    if (prog < 0) return l;
    uint32_t ids[64] = {};
    bpf_prog_info info{};
    info.nr_map_ids = 64;
    info.map_ids = reinterpret_cast<uint64_t>(ids);
    uint32_t len = sizeof(info);
    const int got = bpf_obj_get_info_by_fd(prog, &info, &len);
    close(prog);
    for (uint32_t i = 0; got == 0 && i < std::min(info.nr_map_ids, 64u); ++i) {
      const int fd = bpf_map_get_fd_by_id(ids[i]);
      bpf_map_info m{};
      uint32_t mlen = sizeof(m);
      if (fd >= 0 && bpf_obj_get_info_by_fd(fd, &m, &mlen) == 0 && std::string(m.name) == kMapNexthopLease) {
        uint32_t slot = 0;
        bpf_map_lookup_elem(fd, &slot, &l);
      }
      if (fd >= 0) close(fd);
    }
    return l;
  };
  lab::Gateway gw(topo, lab::Node::kGatewayA, pin,
                  lab::gateway_config(a.gw_a_wan4, a.gw_b_wan4, "203.0.113.0/24", true));
  const rg_nexthop_lease l = lease(gw);
  EXPECT_NE(l.gen, 0u) << "the peer's route has one next hop: cacheable";
  EXPECT_GT(l.until_ns, 0u) << "leased";
}

TEST(Topology, CleanupStaleRemovesOnlyDeadOwners) {
  ASSERT_EQ(geteuid(), 0u) << "network namespaces need root";
  pid_t dead = fork();
  ASSERT_GE(dead, 0);
  if (dead == 0) _exit(0);
  ASSERT_EQ(waitpid(dead, nullptr, 0), dead);
  const std::string stale = std::string(kTag) + "-" + std::to_string(dead) + "-hA";
  const std::string live = std::string(kTag) + "-" + std::to_string(getpid()) + "-zz";
  lab::run_checked({"ip", "netns", "add", stale});
  lab::run_checked({"ip", "netns", "add", live});

  EXPECT_GE(lab::Topology::cleanup_stale(kTag), 1);
  EXPECT_FALSE(netns_exists(stale));
  EXPECT_TRUE(netns_exists(live));
  lab::run({"ip", "netns", "del", live});
  lab::run({"ip", "netns", "del", stale});
}

}  // namespace
}  // namespace rg::test
