// Shared pieces of the end-to-end tests: a fresh lab per test, temporary
// directories and tshark captures that clean up after themselves, the
// generator run with its receiver, and the lossy-tunnel scenario that both
// the data plane alone and the `roceguard` binary must pass.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dataplane/maps.h"
#include "lab/proc.h"
#include "lab/roce_gen.h"
#include "lab/topology.h"
#include "lab/wan.h"

namespace rg::test {

inline constexpr const char* kTag = "rgnx";

// bpffs at /sys/fs/bpf, mounted if it is not.
void ensure_bpffs();

class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// One captured packet as tshark decodes it; layers outermost first.
struct CapturedPacket {
  std::vector<int> dscp;    // one per IP header
  std::vector<int> dports;  // one per UDP header
};

// tshark on the WAN router's interface facing gateway A, keeping the UDP
// that host A and gateway A send (IPv4 or IPv6): what leaves gateway A
// towards B. Ready once it has seen a probe of its own, so no packet sent
// after construction is missed; packets() stops it and leaves the probes out.
class Capture {
 public:
  Capture(const lab::Topology& topo, bool v6, const std::string& dir);
  ~Capture();
  std::vector<CapturedPacket> packets();

 private:
  std::string pcap_, log_;
  std::unique_ptr<lab::Child> child_;
};

struct Traffic {
  lab::SenderStats sent;
  lab::ReceiverStats received;
};

// What one run of the lossy-tunnel scenario left behind: the generator's and
// the WAN's figures, both gateways' counters and the capture between gateway
// A and the WAN.
struct LossyTunnel {
  lab::SenderConfig cfg;
  Traffic t;
  uint64_t dropped = 0;  // Geneve from gateway A that the WAN dropped
  std::vector<CounterRow> gw_a, gw_b;
  std::vector<CapturedPacket> captured;

  // Gateway A encapsulates (egress), gateway B decapsulates (ingress).
  uint64_t egress_a(rg_event ev) const { return sum_packets(gw_a, RG_DIR_EGRESS, ev); }
  uint64_t ingress_b(rg_event ev) const { return sum_packets(gw_b, RG_DIR_INGRESS, ev); }
  uint64_t ingress_a(rg_event ev) const { return sum_packets(gw_a, RG_DIR_INGRESS, ev); }
};

// Reads one gateway's counters, from whatever attached its data plane.
using CounterSource = std::function<std::vector<CounterRow>()>;

// The assertions every lossy-tunnel run must pass, whoever attached the data
// plane: every message delivered with DSCP 46 across the loss, only Geneve
// with DSCP 46 outside and inside on the wire, and counters that agree with
// the generator and the WAN (the loss rule is docs/design.md §5).
void expect_lossy_tunnel_delivered(const LossyTunnel& run);

// The lab, the WAN (bleaching, no loss yet) and a scratch directory.
class LabTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  // Runs the generator from host A to host B and, once it is done, waits
  // (bounded) until the receiver has counted expected_at_b(sent) packets.
  Traffic run_traffic(lab::SenderConfig cfg, lab::ReceiverConfig rcfg = {},
                      const std::function<uint64_t(const lab::SenderStats&)>& expected_at_b = {});
  // The two halves of run_traffic, for tests that act while traffic flows.
  std::unique_ptr<lab::Receiver> start_receiver(const lab::ReceiverConfig& rcfg);
  std::unique_ptr<lab::Sender> make_sender(const lab::SenderConfig& cfg);
  std::string sender_addr(bool v6) const;
  std::string receiver_addr(bool v6) const;

  // The lossy-tunnel scenario, once roceguard runs on both gateways: the WAN
  // bleaches every outer header and drops 2 % of the RoCE and Geneve it
  // carries (either way), host A sends 1000
  // messages on each of 4 QPs to host B (IPv4, DSCP 0), and tshark watches
  // the wire between gateway A and the WAN. Returns once host B has seen
  // every packet the WAN let through (bounded wait).
  LossyTunnel run_lossy_tunnel(const CounterSource& gw_a, const CounterSource& gw_b);

  std::unique_ptr<lab::Topology> topo_;
  std::unique_ptr<lab::Wan> wan_;
  std::unique_ptr<TempDir> tmp_;
};

// "sent=... dropped=..." lines the test log keeps as the run's figures.
void report(const std::string& test, const std::map<std::string, uint64_t>& figures);
std::string dscp_histogram(const std::array<uint64_t, 64>& h);

}  // namespace rg::test
