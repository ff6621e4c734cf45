// The lab topology's own guarantees: names carry the tag and pid, and
// leftovers of a crashed run are found and removed.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

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
