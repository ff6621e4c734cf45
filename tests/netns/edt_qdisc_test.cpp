// Which qdiscs hold a packet until the departure time TC egress stamps
// (qdisc_honours_edt, the congestion loop's pacing), on veth devices in a
// namespace of the test's own: fq at the root or on every queue of mq does;
// anything else sends at once. The host kernel has no sch_fq, so the cases
// with fq run in the VM tier (tests/vm/test_packets.sh, Debian's kernel);
// here they are left out of discovery (tests/netns/CMakeLists.txt).
#include <gtest/gtest.h>
#include <net/if.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "dataplane/hooks.h"
#include "lab/proc.h"
#include "lab/topology.h"

namespace {

class EdtQdiscBase : public ::testing::Test {
 protected:
  void SetUp() override {
    ns_ = "rgedt-" + std::to_string(getpid());
    rg::lab::run({"ip", "netns", "del", ns_});
    ASSERT_EQ(rg::lab::run({"ip", "netns", "add", ns_}).status, 0);
    // One TX queue, and a device with four (mq is for multiqueue devices).
    sh({"ip", "link", "add", "one", "type", "veth", "peer", "name", "one-peer"});
    sh({"ip", "link", "add", "four", "numtxqueues", "4", "type", "veth", "peer", "name", "four-peer", "numtxqueues",
        "4"});
    for (const char* dev : {"one", "one-peer", "four", "four-peer"}) sh({"ip", "link", "set", dev, "up"});
  }
  void TearDown() override { rg::lab::run({"ip", "netns", "del", ns_}); }

  void sh(std::vector<std::string> argv) {
    argv.insert(argv.begin(), {"ip", "netns", "exec", ns_});
    const auto r = rg::lab::run(argv);
    ASSERT_EQ(r.status, 0) << r.err;
  }
  void tc(std::vector<std::string> argv) {
    argv.insert(argv.begin(), {"tc", "-n", ns_});
    const auto r = rg::lab::run(argv);
    ASSERT_EQ(r.status, 0) << r.err;
  }
  // qdisc_honours_edt on ifname, from inside the namespace.
  bool honours(const std::string& ifname, std::string* what) {
    rg::lab::NetnsGuard in(ns_);
    const int ifindex = static_cast<int>(if_nametoindex(ifname.c_str()));
    EXPECT_GT(ifindex, 0) << ifname;
    return rg::qdisc_honours_edt(ifindex, what);
  }

  std::string ns_;
};

class EdtQdisc : public EdtQdiscBase {};
class EdtQdiscFq : public EdtQdiscBase {};

TEST_F(EdtQdisc, QdiscsOtherThanFqSendAtOnce) {
  std::string what;
  tc({"qdisc", "replace", "dev", "one", "root", "pfifo"});
  EXPECT_FALSE(honours("one", &what));
  EXPECT_EQ(what, "pfifo");
  tc({"qdisc", "replace", "dev", "one", "root", "handle", "1:", "htb", "default", "10"});
  EXPECT_FALSE(honours("one", &what));
  EXPECT_EQ(what, "htb");
  tc({"qdisc", "del", "dev", "one", "root"});
  tc({"qdisc", "replace", "dev", "one", "root", "noqueue"});
  EXPECT_FALSE(honours("one", &what));
  EXPECT_EQ(what, "noqueue");
  // A clsact (roceguard's own hooks) is no queue.
  tc({"qdisc", "add", "dev", "four", "clsact"});
  tc({"qdisc", "replace", "dev", "four", "root", "handle", "8001:", "mq"});
  EXPECT_FALSE(honours("four", &what));
  EXPECT_NE(what.find("mq of 4 queues, 0 fq"), std::string::npos) << what;
}

TEST_F(EdtQdiscFq, FqAloneOrOnEveryQueueOfMqHoldsUntilTheStamp) {
  std::string what;
  // Left out of the host's discovery; run by hand on a kernel without
  // sch_fq, it says why it cannot run instead of failing.
  if (rg::lab::run({"tc", "-n", ns_, "qdisc", "replace", "dev", "one", "root", "fq"}).status != 0)
    GTEST_SKIP() << "this kernel has no fq qdisc (sch_fq); the VM tier runs this case";
  EXPECT_TRUE(honours("one", &what));
  EXPECT_EQ(what, "fq");
  tc({"qdisc", "replace", "dev", "four", "root", "handle", "8001:", "mq"});
  for (int q = 1; q <= 4; ++q)
    tc({"qdisc", "replace", "dev", "four", "parent", "8001:" + std::to_string(q), "fq"});
  EXPECT_TRUE(honours("four", &what));
  EXPECT_EQ(what, "mq of 4 fq");
  // One queue without fq sends its share of the stamped frames at once.
  tc({"qdisc", "replace", "dev", "four", "parent", "8001:3", "pfifo"});
  EXPECT_FALSE(honours("four", &what));
  EXPECT_EQ(what, "mq of 4 queues, 3 fq");
}

}  // namespace
