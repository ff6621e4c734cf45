// The lab's removal of what crashed runs left (namespaces and pin
// directories named <prefix>-<pid>-<node> whose pid is gone) takes only its
// own prefix's: a prefix with regex characters in it must not reach another
// prefix's namespaces or pins. Creates a decoy namespace and pin directory
// of a neighbouring prefix and one stale pair of its own, removes them all
// afterwards, even on failure.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "lab/lab_run.h"
#include "lab/proc.h"
#include "lab/topology.h"

namespace {

namespace fs = std::filesystem;

bool netns_exists(const std::string& name) { return fs::exists("/run/netns/" + name); }

class StaleCleanup : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(geteuid(), 0u) << "needs root (network namespaces, bpffs)";
    ASSERT_EQ(rg::lab::run({"sh", "-c", "mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf"}).status, 0);
    // A pid that ran and is gone: a child reaped here.
    pid_t child = fork();
    if (child == 0) _exit(0);
    waitpid(child, nullptr, 0);
    const std::string tag = std::to_string(getpid());
    const std::string dead = std::to_string(child);
    // "+" is a regex quantifier: as a pattern, "rgsc+<tag>" matches the
    // decoy prefix "rgscc<tag>" and not itself. (bpffs refuses names with
    // a dot, so "." cannot stand in.)
    prefix_ = "rgsc+" + tag;
    own_ = prefix_ + "-" + dead + "-a";
    decoy_ = "rgscc" + tag + "-" + dead + "-a";
    for (const auto& n : {own_, decoy_}) {
      ASSERT_EQ(rg::lab::run({"ip", "netns", "add", n}).status, 0) << n;
      ASSERT_EQ(mkdir(("/sys/fs/bpf/" + n).c_str(), 0700), 0) << n;
    }
  }

  void TearDown() override {
    for (const auto& n : {own_, decoy_}) {
      if (n.empty()) continue;
      rg::lab::run({"ip", "netns", "del", n});
      rmdir(("/sys/fs/bpf/" + n).c_str());
    }
  }

  std::string prefix_, own_, decoy_;
};

TEST_F(StaleCleanup, RemovesItsOwnPrefixOnlyEvenWithRegexCharacters) {
  EXPECT_EQ(rg::lab::Topology::cleanup_stale(prefix_), 1);
  rg::lab::remove_stale_pins(prefix_);
  EXPECT_FALSE(netns_exists(own_)) << "the stale namespace of this prefix is removed";
  EXPECT_FALSE(fs::exists("/sys/fs/bpf/" + own_)) << "the stale pins of this prefix are removed";
  EXPECT_TRUE(netns_exists(decoy_)) << "another prefix's namespace survives";
  EXPECT_TRUE(fs::exists("/sys/fs/bpf/" + decoy_)) << "another prefix's pins survive";
}

}  // namespace
