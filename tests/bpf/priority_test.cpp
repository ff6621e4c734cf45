// skb->priority at TC egress (dataplane.skb_priority): every RoCE v2 packet,
// CNPs included, leaves with the configured priority, re-marked or not,
// encapsulated or not; anything else, and everything when the option is 0,
// keeps the priority the stack gave it. BPF_PROG_TEST_RUN carries
// __sk_buff.priority in and out, so each case starts from a priority of its
// own and reads back what the program left.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "harness.h"

namespace rg::test {
namespace {

// HTB class 1:10, as the lab's uplink scheduler has it.
constexpr uint32_t kRocePriority = (1u << 16) | 0x10;
// What the stack would have set: ip_forward() maps the TOS to 0..7.
constexpr uint32_t kStackPriority = 3;

Bth bth(uint8_t opcode) {
  Bth b;
  b.opcode = opcode;
  b.dest_qp = 0x21;
  b.psn = 500;
  return b;
}

PacketBuilder roce(uint8_t opcode, bool v6 = false) {
  PacketBuilder p;
  p.eth(kPeerMac, kDevMac);
  if (v6) p.ipv6("2001:db8:5::10", "2001:db8:5::20");
  else p.ipv4("198.51.100.10", "198.51.100.20");
  p.udp(49200, kRoceV2Port).bth(bth(opcode));
  if (opcode == kOpAck) p.aeth(kSynAck, 7);
  else p.payload(opcode == kOpCnp ? 16 : 64);
  return p;
}

rg_config with_priority(uint32_t skb_priority) {
  rg_config cfg = test_config();
  cfg.skb_priority = skb_priority;
  return cfg;
}

struct PriorityCase {
  std::string name;
  Bytes in;
  bool roce;  // gets the configured priority
};

void PrintTo(const PriorityCase& c, std::ostream* os) { *os << c.name; }

std::vector<PriorityCase> priority_cases() {
  std::vector<PriorityCase> c;
  c.push_back({"Ipv4SendRemarked", roce(kOpSendOnly).dscp(26).build(), true});
  c.push_back({"Ipv4SendAlreadyInClass", roce(kOpSendOnly).dscp(RG_DEFAULT_DSCP).build(), true});
  c.push_back({"Ipv6SendRemarked", roce(kOpSendOnly, true).dscp(26).build(), true});
  c.push_back({"Ipv4Ack", roce(kOpAck).build(), true});
  c.push_back({"Ipv4Cnp", roce(kOpCnp).build(), true});
  c.push_back({"Ipv6Cnp", roce(kOpCnp, true).build(), true});
  c.push_back({"OtherUdp", PacketBuilder().eth(kPeerMac, kDevMac).ipv4("198.51.100.10", "198.51.100.20")
                               .udp(49200, 4790).payload(64).build(), false});
  c.push_back({"Tcp", PacketBuilder().eth(kPeerMac, kDevMac).ipv4("198.51.100.10", "198.51.100.20")
                          .ip_proto(6).payload(40).build(), false});
  c.push_back({"Arp", PacketBuilder().eth(kPeerMac, kDevMac).ethertype(kEthArp).payload(28).build(), false});
  // UDP 4791 whose BTH is no RoCE v2 (transport header version 1): not
  // classified, not touched.
  Bytes bad_version = roce(kOpSendOnly).build();
  bad_version[14 + 20 + 8 + 1] |= 0x01;
  c.push_back({"BthVersion1", bad_version, false});
  return c;
}

class SkbPriority : public ::testing::TestWithParam<PriorityCase> {};

TEST_P(SkbPriority, RoceGetsTheConfiguredPriorityOthersKeepTheirs) {
  const PriorityCase& tc = GetParam();
  Dataplane dp(with_priority(kRocePriority));
  Verdict r = dp.tc_with_priority(tc.in, kStackPriority);
  EXPECT_EQ(r.ret, kTcPass);
  EXPECT_EQ(r.skb_priority, tc.roce ? kRocePriority : kStackPriority);
}

TEST_P(SkbPriority, ZeroLeavesEveryPriorityAlone) {
  const PriorityCase& tc = GetParam();
  Dataplane dp(with_priority(0));
  EXPECT_EQ(dp.tc_with_priority(tc.in, kStackPriority).skb_priority, kStackPriority);
  EXPECT_EQ(dp.tc_with_priority(tc.in, 0).skb_priority, 0u);
}

INSTANTIATE_TEST_SUITE_P(Cases, SkbPriority, ::testing::ValuesIn(priority_cases()),
                         [](const auto& info) { return info.param.name; });

// The test itself relies on the kernel copying __sk_buff.priority both
// ways; a kernel that dropped either direction would make the cases above
// pass or fail for the wrong reason.
TEST(SkbPriorityTestRun, ContextPriorityRoundTrips) {
  Dataplane dp(with_priority(0));
  const Bytes other = PacketBuilder().eth(kPeerMac, kDevMac).ipv4("198.51.100.10", "198.51.100.20")
                          .udp(49200, 4790).payload(64).build();
  for (uint32_t p : {1u, 7u, kRocePriority, 0xffffffffu}) EXPECT_EQ(dp.tc_with_priority(other, p).skb_priority, p);
}

// The priority is the local scheduler's, independent of the DSCP switch.
TEST(SkbPriorityConfig, SetWithRemarkOff) {
  rg_config cfg = with_priority(kRocePriority);
  cfg.flags &= ~RG_CFG_F_REMARK;
  Dataplane dp(cfg);
  const Bytes in = roce(kOpSendOnly).dscp(26).build();
  Verdict r = dp.tc_with_priority(in, kStackPriority);
  EXPECT_EQ(r.out, in);
  EXPECT_EQ(r.skb_priority, kRocePriority);
}

// Encapsulation keeps the skb: the outer packet, IPv4 or IPv6, is queued by
// the same priority, and a CNP going through the tunnel too.
TEST(SkbPriorityConfig, EncapsulatedOuterPacketCarriesIt) {
  Dataplane dp(with_priority(kRocePriority));
  dp.tunnels();
  struct Tunnelled {
    std::string name;
    PacketBuilder in;
  };
  std::vector<Tunnelled> cases;
  cases.push_back({"Ipv4", roce(kOpSendOnly)});
  cases.back().in.ipv4("198.51.100.10", "203.0.113.20");
  cases.push_back({"Ipv6", roce(kOpSendOnly, true)});
  cases.back().in.ipv6("2001:db8:5::10", "2001:db8:6::20");
  cases.push_back({"Ipv4Cnp", roce(kOpCnp)});
  cases.back().in.ipv4("198.51.100.10", "203.0.113.20");
  for (const auto& c : cases) {
    const Bytes in = c.in.build();
    Verdict r = dp.tc_with_priority(in, kStackPriority);
    EXPECT_EQ(r.ret, kTcPass) << c.name;
    EXPECT_GT(r.out.size(), in.size()) << c.name << ": not encapsulated";
    EXPECT_EQ(r.skb_priority, kRocePriority) << c.name;
  }
  EXPECT_EQ(dp.events(RG_DIR_EGRESS).at("encapsulated"), cases.size());
}

}  // namespace
}  // namespace rg::test
