// rg_xdp_ingress on multi-buffer (jumbo) frames. BPF_PROG_TEST_RUN hands an
// XDP program a frame larger than one page as a first buffer of less than a
// page plus fragments, as a driver does at a 9000-byte MTU: the headers are
// in the first buffer, the rest of a 4096-byte RoCE payload is not. Each
// case checks the whole frame comes out as it should and is counted whole.
#include <gtest/gtest.h>

#include <unistd.h>

#include <string>

#include "harness.h"

namespace rg::test {
namespace {

// RoCE v2 with a full 4096-byte path-MTU payload (IBA 9.7.7: the largest).
constexpr size_t kJumboPayload = 4096;

Bth send_bth(uint32_t qp, uint32_t psn) {
  Bth b;
  b.opcode = kOpSendOnly;
  b.dest_qp = qp;
  b.psn = psn;
  return b;
}

PacketBuilder jumbo_roce(uint32_t qp, uint32_t psn) {
  PacketBuilder p;
  p.eth(kPeerMac, kDevMac).ipv4("198.51.100.10", "198.51.100.20").dscp(0).udp(49200, kRoceV2Port)
      .bth(send_bth(qp, psn)).payload(kJumboPayload);
  return p;
}

// Geneve from the standard IPv4 peer to this gateway (Dataplane::tunnels).
Bytes jumbo_geneve(const Bytes& inner) {
  PacketBuilder p;
  p.eth(kDevMac, kPeerMac).ipv4(kPeer4, kLocal4).dscp(46).udp(51000, kGenevePort)
      .udp_csum(UdpCsum::kZero).geneve(kVni4).payload(inner);
  return p.build();
}

// The test runner builds fragments only past one page of linear data.
void expect_multi_buffer(const Bytes& frame) {
  ASSERT_GT(frame.size(), static_cast<size_t>(sysconf(_SC_PAGESIZE))) << "not a multi-buffer frame";
}

TEST(MultiBuffer, RoceIsRepairedAndAccountedWhole) {
  Dataplane dp;
  PacketBuilder p = jumbo_roce(0x21, 500);
  Bytes in = p.build();
  expect_multi_buffer(in);
  Verdict r = dp.xdp(in);
  EXPECT_EQ(r.ret, kXdpPass);
  EXPECT_EQ(hex(r.out), hex(p.dscp(46).build()));
  EXPECT_TRUE(parse(r.out).icrc_ok) << "the payload in the fragments must come out untouched";
  EXPECT_EQ(dp.events(RG_DIR_INGRESS), (Events{{"roce_packets", 1}, {"dscp_repaired", 1}, {"qp_new", 1}}));
  EXPECT_EQ(dp.bytes(RG_DIR_INGRESS, RG_EV_ROCE_PACKETS), in.size());
  EXPECT_EQ(dp.bytes(RG_DIR_INGRESS, RG_EV_DSCP_REPAIRED), in.size());
  rg_qp_dir d = dp.qp(RG_DIR_INGRESS, 0x21);
  EXPECT_EQ(d.packets, 1u);
  EXPECT_EQ(d.bytes, in.size());
}

TEST(MultiBuffer, PsnGapBetweenJumboFrames) {
  Dataplane dp;
  dp.xdp(jumbo_roce(0x22, 10).build());
  dp.xdp(jumbo_roce(0x22, 11).build());
  dp.xdp(jumbo_roce(0x22, 14).build());
  rg_qp_dir d = dp.qp(RG_DIR_INGRESS, 0x22);
  EXPECT_EQ(d.packets, 3u);
  EXPECT_EQ(d.bytes, 3 * jumbo_roce(0x22, 10).build().size());
  EXPECT_EQ(d.gaps, 1u);
  EXPECT_EQ(d.lost, 2u);
}

TEST(MultiBuffer, GeneveIsDecapsulatedAndInnerCountedWhole) {
  Dataplane dp;
  dp.tunnels();
  PacketBuilder inner = jumbo_roce(0x23, 7);
  Bytes enc = jumbo_geneve(inner.build());
  expect_multi_buffer(enc);
  Verdict r = dp.xdp(enc);
  EXPECT_EQ(r.ret, kXdpPass);
  // Addressed to this device, as the stack must receive it; the inner DSCP repaired.
  Bytes want = inner.dscp(46).build();
  std::copy(enc.begin(), enc.begin() + 12, want.begin());
  EXPECT_EQ(hex(r.out), hex(want));
  EXPECT_TRUE(parse(r.out).icrc_ok);
  EXPECT_EQ(dp.events(RG_DIR_INGRESS),
            (Events{{"decapsulated", 1}, {"roce_packets", 1}, {"dscp_repaired", 1}, {"qp_new", 1}}));
  EXPECT_EQ(dp.bytes(RG_DIR_INGRESS, RG_EV_DECAPSULATED), want.size());
  EXPECT_EQ(dp.bytes(RG_DIR_INGRESS, RG_EV_DSCP_REPAIRED), want.size());
  EXPECT_EQ(dp.bytes(RG_DIR_INGRESS, RG_EV_ROCE_PACKETS), want.size());
  EXPECT_EQ(dp.qp(RG_DIR_INGRESS, 0x23).bytes, want.size());
}

TEST(MultiBuffer, UnknownTunnelCountedWholeAndLeftAlone) {
  Dataplane dp;
  Bytes enc = jumbo_geneve(jumbo_roce(0x24, 1).build());
  expect_multi_buffer(enc);
  Verdict r = dp.xdp(enc);
  EXPECT_EQ(r.ret, kXdpPass);
  EXPECT_EQ(hex(r.out), hex(enc));
  EXPECT_EQ(dp.bytes(RG_DIR_INGRESS, RG_EV_UNKNOWN_TUNNEL), enc.size());
}

}  // namespace
}  // namespace rg::test
