// Jumbo frames through roceguard's XDP program attached natively: a veth
// pair at a 9000-byte MTU between two namespaces, RoCE with a 4096-byte
// payload (a 4096 path MTU) from the generator across it. veth refuses a
// single-buffer XDP program above about 3.5 KB of MTU, so this attaches at
// all only because the program takes multi-buffer frames, and every frame
// must be counted whole.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "dataplane/maps.h"
#include "lab/proc.h"
#include "lab/roce_gen.h"
#include "lab/topology.h"
#include "lab_fixture.h"
#include "roceguard/roceguard.h"

namespace rg::test {
namespace {

using namespace std::chrono_literals;

constexpr int kJumboMtu = 9000;
constexpr size_t kPathMtuPayload = 4096;
// Ethernet, IPv4 without options and UDP in front of what the receiver reads.
constexpr uint64_t kL2ToL4 = 14 + 20 + 8;

// Two namespaces joined by one veth pair at kJumboMtu: the sender's end in
// the first, the receiver's (where roceguard attaches) in the second.
class JumboVeth {
 public:
  JumboVeth()
      : sender_(std::string(kTag) + "-" + std::to_string(getpid()) + "-jumbo-tx"),
        receiver_(std::string(kTag) + "-" + std::to_string(getpid()) + "-jumbo-rx") {
    lab::run_checked({"ip", "netns", "add", sender_});
    lab::run_checked({"ip", "netns", "add", receiver_});
    lab::run_checked({"ip", "-n", sender_, "link", "add", "jumbo0", "mtu", std::to_string(kJumboMtu), "type",
                      "veth", "peer", "name", "jumbo1", "netns", receiver_, "mtu", std::to_string(kJumboMtu)});
    lab::run_checked({"ip", "-n", sender_, "addr", "add", "192.0.2.1/24", "dev", "jumbo0"});
    lab::run_checked({"ip", "-n", receiver_, "addr", "add", "192.0.2.2/24", "dev", "jumbo1"});
    for (const auto& [ns, dev] : {std::pair{sender_, "jumbo0"}, std::pair{receiver_, "jumbo1"}}) {
      lab::run_checked({"ip", "-n", ns, "link", "set", "lo", "up"});
      lab::run_checked({"ip", "-n", ns, "link", "set", dev, "up"});
    }
  }
  ~JumboVeth() {
    lab::run({"ip", "netns", "del", sender_});
    lab::run({"ip", "netns", "del", receiver_});
  }
  const std::string& sender() const { return sender_; }
  const std::string& receiver() const { return receiver_; }

 private:
  std::string sender_, receiver_;
};

// `roceguard attach` in a namespace with this process's bpffs, detached (and
// its pins removed) however the test ends.
class Attached {
 public:
  Attached(std::string netns, std::string ifname)
      : netns_(std::move(netns)), pin_("/sys/fs/bpf/" + netns_) {
    result_ = lab::run(lab::netns_exec_argv(
        netns_, {ROCEGUARD_BIN, "attach", "-i", ifname, "--xdp-mode", "native", "--ingress-hook", "xdp",
                     "--pin-path", pin_}));
  }
  ~Attached() {
    lab::run(lab::netns_exec_argv(netns_, {ROCEGUARD_BIN, "detach", "--pin-path", pin_}));
    lab::run({"rm", "-rf", pin_});
  }
  bool ok() const { return result_.status == 0; }
  std::string output() const { return result_.out + result_.err; }
  const std::string& pin_path() const { return pin_; }

 private:
  std::string netns_, pin_;
  lab::RunResult result_;
};

TEST(Jumbo, NativeXdpAtMtu9000CountsWholeFrames) {
  ASSERT_EQ(geteuid(), 0u) << "network namespaces need root";
  ensure_bpffs();
  JumboVeth net;
  Attached rg(net.receiver(), "jumbo1");
  ASSERT_TRUE(rg.ok()) << "native XDP at MTU " << kJumboMtu << " refused:\n" << rg.output();
  // Native ("xdp"), not the generic hook a driver refusal would need.
  std::string link = lab::run_checked({"ip", "-n", net.receiver(), "-d", "link", "show", "jumbo1"});
  EXPECT_NE(link.find("prog/xdp "), std::string::npos) << link;
  EXPECT_EQ(link.find("xdpgeneric"), std::string::npos) << link;

  std::unique_ptr<lab::Receiver> rx;
  {
    lab::NetnsGuard in(net.receiver());
    rx = std::make_unique<lab::Receiver>(lab::ReceiverConfig{});
  }
  rx->start();
  lab::SenderConfig cfg;
  cfg.peer = "192.0.2.2";
  cfg.qps.count = 2;
  cfg.messages = 50;
  cfg.payload = kPathMtuPayload;
  cfg.tos = 0;  // bleached: the XDP program repairs it
  cfg.timeout = 200ms;
  cfg.duration = 60s;
  std::unique_ptr<lab::Sender> tx;
  {
    lab::NetnsGuard in(net.sender());
    tx = std::make_unique<lab::Sender>(cfg);
  }
  lab::SenderStats sent = tx->run();
  // Bounded wait for the last packets to be read.
  for (int i = 0; i < 100 && rx->stats().packets < sent.packets; ++i) std::this_thread::sleep_for(50ms);
  rx->stop();
  lab::ReceiverStats got = rx->stats();

  EXPECT_EQ(sent.qps_done, 2u);
  EXPECT_EQ(got.delivered, 2u * 50u);
  EXPECT_EQ(got.packets, sent.packets);
  EXPECT_EQ(got.dscp[RG_DEFAULT_DSCP], got.packets) << "every jumbo frame repaired and delivered";

  std::vector<CounterRow> rows = MapReader(rg.pin_path()).counters();
  uint64_t roce = 0, roce_bytes = 0;
  for (const CounterRow& r : rows)
    if (r.direction == RG_DIR_INGRESS) {
      roce += r.ev[RG_EV_ROCE_PACKETS].packets;
      roce_bytes += r.ev[RG_EV_ROCE_PACKETS].bytes;
    }
  EXPECT_EQ(roce, got.packets);
  EXPECT_EQ(roce_bytes, got.bytes + got.packets * kL2ToL4) << "frames counted whole, not their first buffer";
  EXPECT_EQ(sum_packets(rows, RG_DIR_INGRESS, RG_EV_DSCP_REPAIRED), got.packets);
  EXPECT_EQ(sum_packets(rows, RG_DIR_INGRESS, RG_EV_PSN_GAPS), 0u);
}

}  // namespace
}  // namespace rg::test
