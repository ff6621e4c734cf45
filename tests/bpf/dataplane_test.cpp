// Packet-level tests of rg_tc_egress and rg_xdp_ingress. Every case builds
// its input with the shared packet builder, runs it through
// BPF_PROG_TEST_RUN and checks the verdict, the exact output bytes and the
// counters as the loader's map reader sees them.
#include <gtest/gtest.h>

#include <pthread.h>
#include <sched.h>
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <time.h>

#include <barrier>
#include <functional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "dataplane/names.h"
#include "dataplane/nexthop_lease.h"

namespace rg::test {
namespace {

enum class Hook { kTc, kXdp };

std::string hook_name(Hook h) { return h == Hook::kTc ? "Tc" : "Xdp"; }

Verdict run(Dataplane& dp, Hook h, const Bytes& in) { return h == Hook::kTc ? dp.tc(in) : dp.xdp(in); }
Verdict run_repeated(Dataplane& dp, Hook h, const Bytes& in, uint32_t repeat) {
  return h == Hook::kTc ? dp.tc(in, repeat) : dp.xdp(in, repeat);
}
uint32_t pass_verdict(Hook h) { return h == Hook::kTc ? kTcPass : kXdpPass; }
rg_direction dir_of(Hook h) { return h == Hook::kTc ? RG_DIR_EGRESS : RG_DIR_INGRESS; }

// Opcodes beyond the builder's common ones (IBA 9.2): transport in the top
// three bits (RC 0x00, UC 0x20, RD 0x40, UD 0x60, XRC 0xa0).
inline constexpr uint8_t kOpRcCompareSwap = 0x13;
inline constexpr uint8_t kOpRcFetchAdd = 0x14;
inline constexpr uint8_t kOpRcSendOnlyInvalidate = 0x17;
inline constexpr uint8_t kOpRcFlush = 0x1c;
inline constexpr uint8_t kOpRcAtomicWrite = 0x1d;
inline constexpr uint8_t kOpUdSendOnly = 0x64;
inline constexpr uint8_t kOpXrcSendOnly = 0xa4;
inline constexpr uint8_t kOpXrcReadRequest = 0xac;
inline constexpr uint8_t kOpXrcAck = 0xb1;
inline constexpr uint8_t kOpXrcFlush = 0xbc;

Bth bth(uint8_t opcode, uint32_t dest_qp = 0x11, uint32_t psn = 100) {
  Bth b;
  b.opcode = opcode;
  b.dest_qp = dest_qp;
  b.psn = psn;
  return b;
}

// RoCE v2 between two hosts of the private fabric; no tunnel route matches.
PacketBuilder roce4(uint8_t opcode = kOpSendOnly, uint32_t qp = 0x11, uint32_t psn = 100) {
  PacketBuilder p;
  p.eth(kPeerMac, kDevMac).ipv4("198.51.100.10", "198.51.100.20").udp(49200, kRoceV2Port)
      .bth(bth(opcode, qp, psn));
  if (opcode == kOpAck) p.aeth(kSynAck, 7);
  if (opcode == kOpCnp) p.payload(16);
  else if (opcode != kOpAck) p.payload(64);
  return p;
}

PacketBuilder roce6(uint8_t opcode = kOpSendOnly, uint32_t qp = 0x11, uint32_t psn = 100) {
  PacketBuilder p = roce4(opcode, qp, psn);
  p.ipv6("2001:db8:5::10", "2001:db8:5::20").flow_label(0xabcde);
  return p;
}

// An IPv4 Record Route option with room for n addresses (RFC 791): a real
// option, so tshark has nothing to warn about.
Bytes record_route(size_t n) {
  Bytes o = {7, static_cast<uint8_t>(3 + 4 * n), 4};
  o.resize(3 + 4 * n, 0);
  return o;
}

// Same, towards the prefixes behind the tunnel peers.
PacketBuilder tunneled4(uint32_t qp = 0x11, uint32_t psn = 100) {
  PacketBuilder p = roce4(kOpSendOnly, qp, psn);
  p.ipv4("198.51.100.10", "203.0.113.20");
  return p;
}

PacketBuilder tunneled6(uint32_t qp = 0x11, uint32_t psn = 100) {
  PacketBuilder p = roce4(kOpSendOnly, qp, psn);
  p.ipv6("2001:db8:5::10", "2001:db8:6::20").flow_label(0x54321);
  return p;
}

Bytes delivered(Bytes inner, const Bytes& outer, const Mac& dev_mac = kDevMac);

// ---------------------------------------------------------------------------
// DSCP re-mark (TC) and repair (XDP): same rule, both hooks.

struct RemarkCase {
  std::string name;
  PacketBuilder in;
  uint8_t want_dscp;
  Events extra;  // events besides roce_packets, the rewrite and qp_new
};

std::vector<RemarkCase> remark_cases() {
  std::vector<RemarkCase> c;
  c.push_back({"Ipv4Send", roce4(), 46, {}});
  c.push_back({"Ipv6Send", roce6(), 46, {}});
  c.push_back({"Ipv4WriteWithReth",
               roce4(kOpWriteOnly).reth(0x7f0000001000ull, 0x1234, 64), 46, {}});
  c.push_back({"Ipv4ReadRequest", roce4(kOpReadRequest).reth(0x1000, 0x99, 4096).payload(0),
               46, {}});
  c.push_back({"Ipv4ReadResponse", roce4(kOpReadResponseOnly).aeth(kSynAck, 1), 46, {}});
  c.push_back({"Ipv4Ack", roce4(kOpAck), 46, {}});
  c.push_back({"Ipv6Ack", roce6(kOpAck), 46, {}});
  c.push_back({"Ipv4NakSeqErr", roce4(kOpAck).aeth(kSynNakSeqErr, 3), 46, {{"nak_seq_err", 1}}});
  c.push_back({"Ipv6NakSeqErr", roce6(kOpAck).aeth(kSynNakSeqErr, 3), 46, {{"nak_seq_err", 1}}});
  c.push_back({"Ipv4NakRemoteAccess", roce4(kOpAck).aeth(kSynNakRemoteAccess, 3), 46,
               {{"nak_other", 1}}});
  c.push_back({"Ipv4RnrNak", roce4(kOpAck).aeth(kSynRnrNak, 3), 46, {{"rnr_nak", 1}}});
  c.push_back({"Ipv4Cnp", roce4(kOpCnp), 48, {{"cnp", 1}}});
  c.push_back({"Ipv6Cnp", roce6(kOpCnp), 48, {{"cnp", 1}}});
  c.push_back({"Ipv4UcSend", roce4(kOpUcSendOnly), 46, {}});
  c.push_back({"Ipv4Vlan", roce4().vlan(100), 46, {}});
  c.push_back({"Ipv4QinQ", roce4().vlan(100, kEthQinQ).vlan(200), 46, {}});
  c.push_back({"Ipv6QinQ", roce6().vlan(100, kEthQinQ).vlan(200), 46, {}});
  c.push_back({"Ipv4DoubleCTag", roce4().vlan(100).vlan(200), 46, {}});
  c.push_back({"Ipv4OptionsIhl7", roce4().ip_options({0x94, 0x04, 0, 0, 0x01, 0x01, 0x01, 0x00}),
               46, {}});
  c.push_back({"Ipv4OptionsIhl15", roce4().ip_options(record_route(9)), 46, {}});
  c.push_back({"Ipv4OptionsAndQinQ",
               roce4().vlan(7, kEthQinQ).vlan(8).ip_options(record_route(9)), 46, {}});
  c.push_back({"Ipv4UdpChecksumZero", roce4().udp_csum(UdpCsum::kZero), 46, {}});
  c.push_back({"Ipv4FromDscp63", roce4().dscp(63), 46, {}});
  c.push_back({"Ipv6FromDscp63FlowLabelMax", roce6().tos(0xff).flow_label(0xfffff), 46,
               {{"ecn_ce", 1}}});
  for (uint8_t ecn = 0; ecn < 4; ++ecn) {
    Events e;
    if (ecn == 3) e["ecn_ce"] = 1;
    c.push_back({"Ipv4Ecn" + std::to_string(ecn), roce4().dscp(0).ecn(ecn), 46, e});
    c.push_back({"Ipv6Ecn" + std::to_string(ecn), roce6().dscp(10).ecn(ecn), 46, e});
  }
  c.push_back({"Ipv4AlreadyMarked", roce4().dscp(46).ecn(2), 46, {}});
  c.push_back({"Ipv6CnpAlreadyMarked", roce6(kOpCnp).dscp(48).ecn(1), 48, {{"cnp", 1}}});
  return c;
}

void PrintTo(const RemarkCase& c, std::ostream* os) { *os << c.name; }

class Remark : public ::testing::TestWithParam<std::tuple<RemarkCase, Hook>> {};

TEST_P(Remark, SetsClassKeepsEverythingElse) {
  const auto& [tc, hook] = GetParam();
  Dataplane dp;
  Bytes in = tc.in.build();
  View vin = parse(in);
  ASSERT_TRUE(vin.roce);

  Verdict r = run(dp, hook, in);

  EXPECT_EQ(r.ret, pass_verdict(hook));
  ASSERT_EQ(r.out.size(), in.size());
  // The builder computes the IPv4 checksum from scratch and the ICRC
  // masks DSCP/ECN, so this also checks the incremental checksum update.
  PacketBuilder want = tc.in;
  want.dscp(tc.want_dscp);
  EXPECT_EQ(hex(r.out), hex(want.build()));

  View v = parse(r.out);
  EXPECT_EQ(v.dscp(), tc.want_dscp);
  EXPECT_EQ(v.ecn(), vin.ecn()) << "ECN must never change";
  if (v.family == 4) {
    EXPECT_TRUE(v.ipv4_csum_ok);
  } else {
    EXPECT_EQ(v.flow_label, vin.flow_label) << "flow label untouched";
  }
  EXPECT_TRUE(v.udp_csum_ok);
  EXPECT_TRUE(v.icrc_ok);

  Events want_ev = tc.extra;
  want_ev["roce_packets"] = 1;
  want_ev["qp_new"] = 1;
  if (vin.dscp() != tc.want_dscp) want_ev[hook == Hook::kTc ? "dscp_rewritten" : "dscp_repaired"] = 1;
  EXPECT_EQ(dp.events(dir_of(hook)), want_ev);
  EXPECT_EQ(dp.bytes(dir_of(hook), RG_EV_ROCE_PACKETS), in.size());
}

INSTANTIATE_TEST_SUITE_P(
    , Remark, ::testing::Combine(::testing::ValuesIn(remark_cases()),
                                 ::testing::Values(Hook::kTc, Hook::kXdp)),
    [](const auto& info) {
      return std::get<0>(info.param).name + hook_name(std::get<1>(info.param));
    });

// Every re-marked frame of the table, through both hooks, as tshark sees it.
TEST(OracleTables, RemarkCases) {
  std::vector<Bytes> emitted;
  std::vector<TsharkRow> want;
  Dataplane dp;
  for (const auto& tc : remark_cases()) {
    for (Hook h : {Hook::kTc, Hook::kXdp}) {
      Bytes in = tc.in.build();
      emitted.push_back(run(dp, h, in).out);
      View v = parse(in);
      bool v6 = v.family == 6;
      TsharkRow w;
      w[v6 ? "ipv6.tclass.dscp" : "ip.dsfield.dscp"] = std::to_string(tc.want_dscp);
      w[v6 ? "ipv6.tclass.ecn" : "ip.dsfield.ecn"] = std::to_string(v.ecn());
      w["udp.checksum.status"] = v.udp_csum ? "1" : "3";
      if (!v6) w["ip.checksum.status"] = "1";
      w["infiniband.bth.opcode"] = std::to_string(v.bth.opcode);
      w["infiniband.bth.psn"] = std::to_string(v.bth.psn);
      want.push_back(w);
    }
  }
  std::vector<TsharkRow> rows = tshark(emitted, "remark-table");
  ASSERT_EQ(rows.size(), want.size());
  for (size_t i = 0; i < rows.size(); ++i) expect_tshark_row(rows[i], want[i], i);
}

TEST(RemarkConfig, ConfiguredClassesAreUsed) {
  rg_config cfg = test_config();
  cfg.dscp = 26;
  cfg.cnp_dscp = 34;
  Dataplane dp(cfg);
  EXPECT_EQ(parse(dp.tc(roce4().build()).out).dscp(), 26);
  EXPECT_EQ(parse(dp.tc(roce6(kOpCnp).build()).out).dscp(), 34);
  EXPECT_EQ(parse(dp.xdp(roce4().ecn(1).build()).out).tos, (26 << 2) | 1);
}

TEST(RemarkConfig, DisabledLeavesDscp) {
  rg_config cfg = test_config();
  cfg.flags &= ~(RG_CFG_F_REMARK | RG_CFG_F_REPAIR);
  Dataplane dp(cfg);
  Bytes in = roce4().dscp(0).build();
  EXPECT_EQ(dp.tc(in).out, in);
  EXPECT_EQ(dp.xdp(in).out, in);
  EXPECT_EQ(dp.events(RG_DIR_EGRESS), (Events{{"roce_packets", 1}, {"qp_new", 1}}));
}

// ---------------------------------------------------------------------------
// Everything that is not RoCE v2 leaves byte-identical with the pass verdict.

struct PassCase {
  std::string name;
  Bytes in;
  std::string error;  // the parse-error event expected, "" for none
  // BPF_PROG_TEST_RUN refuses an skb whose IP header is cut short (the
  // stack never hands TC such a packet); XDP gets them from the wire.
  bool xdp_only = false;
  Hook hook = Hook::kTc;
};

void PrintTo(const PassCase& c, std::ostream* os) { *os << c.name; }

Bytes cut(Bytes b, size_t len) {
  b.resize(len);
  return b;
}

// Ethernet pads frames to 60 bytes (before the FCS); the padding is not
// part of the IP packet.
Bytes padded(Bytes b) {
  if (b.size() < 60) b.resize(60, 0);
  return b;
}

std::vector<PassCase> pass_cases() {
  std::vector<PassCase> c;
  Bytes arp = PacketBuilder().ethertype(kEthArp).payload(28).build();
  c.push_back({"Arp", arp, ""});
  c.push_back({"Ipv4Tcp4791",
               PacketBuilder().ipv4("198.51.100.10", "198.51.100.20").ip_proto(6)
                   .payload({0xc0, 0x00, 0x12, 0xb7, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xff,
                             0xff, 0, 0, 0, 0})
                   .build(),
               ""});
  c.push_back({"Ipv4Icmp", PacketBuilder().ipv4("198.51.100.10", "198.51.100.20").ip_proto(1)
                               .payload({8, 0, 0xf7, 0xff, 0, 0, 0, 0}).build(), ""});
  c.push_back({"Ipv4UdpOtherPort", roce4().udp(49200, 4790).build(), ""});
  c.push_back({"Ipv4UdpSourcePort4791", roce4().udp(kRoceV2Port, 49200).build(), ""});
  c.push_back({"Ipv6UdpOtherPort", roce6().udp(49200, 53).build(), ""});
  c.push_back({"Ipv4FirstFragment", roce4().fragment(true, 0).build(), "fragment"});
  c.push_back({"Ipv4LaterFragment", roce4().fragment(false, 185).build(), "fragment"});
  c.push_back({"Ipv6DestOptions", roce6().ipv6_ext(60).build(), "ipv6_ext"});
  c.push_back({"Ipv6HopByHop", roce6().ipv6_ext(0, {0x05, 0x02, 0, 0}).build(), "ipv6_ext"});
  c.push_back({"Ipv6Fragment", roce6().ipv6_ext(44, {0, 0, 0, 0, 0, 1}).build(), "ipv6_ext"});
  c.push_back({"TruncatedVlanTag", cut(roce4().vlan(5).build(), 16), "trunc_l2"});
  c.push_back({"ThreeVlanTags", roce4().vlan(1, kEthQinQ).vlan(2).vlan(3).build(), "vlan_depth"});
  c.push_back({"TruncatedIpv4", cut(roce4().build(), 14 + 19), "trunc_l3", true});
  c.push_back({"Ipv4OptionsCut", cut(roce4().ip_options(record_route(9)).build(), 14 + 50),
               "trunc_l3"});
  Bytes ihl4 = roce4().build();
  ihl4[14] = 0x44;
  c.push_back({"Ipv4IhlBelow5", ihl4, "trunc_l3"});
  Bytes v6in4 = roce4().build();
  v6in4[14] = 0x65;
  c.push_back({"Ipv4EthertypeVersion6", v6in4, "trunc_l3"});
  c.push_back({"TruncatedIpv6", cut(roce6().build(), 14 + 39), "trunc_l3", true});
  c.push_back({"TruncatedUdpIpv4", cut(roce4().build(), 14 + 20 + 7), "trunc_l4"});
  c.push_back({"TruncatedUdpIpv6", cut(roce6().build(), 14 + 40 + 4), "trunc_l4"});
  c.push_back({"Udp4791Empty",
               PacketBuilder().ipv4("198.51.100.10", "198.51.100.20").udp(49200, kRoceV2Port)
                   .build(),
               "trunc_bth"});
  c.push_back({"Udp4791ShortBthIpv4", cut(roce4().build(), 14 + 20 + 8 + 11), "trunc_bth"});
  c.push_back({"Udp4791ShortBthIpv6", cut(roce6().build(), 14 + 40 + 8 + 6), "trunc_bth"});
  c.push_back({"AckWithoutAeth", cut(roce4(kOpAck).build(), 14 + 20 + 8 + 12 + 3), "trunc_bth"});
  c.push_back({"Udp4791ShortBthVlan", cut(roce4().vlan(9).build(), 18 + 20 + 8 + 4),
               "trunc_bth"});
  c.push_back({"Udp4791ShortInPaddedFrame",
               padded(PacketBuilder().ipv4("198.51.100.10", "198.51.100.20")
                          .udp(49200, kRoceV2Port).payload(4).build()),
               "trunc_bth"});
  // An ACK cut after the BTH: 54 bytes on the wire become 60.
  c.push_back({"AckWithoutAethInPaddedFrame",
               padded(PacketBuilder().ipv4("198.51.100.10", "198.51.100.20")
                          .udp(49200, kRoceV2Port).bth(bth(kOpAck)).icrc(false).build()),
               "trunc_bth"});
  // UDP/4791 that is not RoCE v2 must not buy the RoCE class or a QP entry.
  const std::string http = "GET / HTTP/1.1\r\nHost: 198.51.100.20\r\n\r\n";
  c.push_back({"Udp4791HttpGet",
               PacketBuilder().ipv4("198.51.100.10", "198.51.100.20").udp(49200, kRoceV2Port)
                   .payload(Bytes(http.begin(), http.end())).build(),
               "bad_bth"});
  Bytes tver = roce4().build();
  tver[14 + 20 + 8 + 1] |= 0x01;  // transport header version 1
  c.push_back({"BthVersion1", tver, "bad_bth"});
  Bytes tver6 = roce6().build();
  tver6[14 + 40 + 8 + 1] |= 0x0f;
  c.push_back({"BthVersion15Ipv6", tver6, "bad_bth"});
  c.push_back({"RcReservedOpcode", roce4(0x18).build(), "bad_bth"});
  c.push_back({"RcResyncIsRdOnly", roce4(0x15).build(), "bad_bth"});
  c.push_back({"UcReadRequest", roce4(0x2c).build(), "bad_bth"});
  c.push_back({"RdTransport", roce4(0x44).build(), "bad_bth"});
  c.push_back({"UdWrite", roce4(0x6a).build(), "bad_bth"});
  c.push_back({"CnpRangeNotCnp", roce4(0x80).build(), "bad_bth"});
  c.push_back({"VendorOpcode", roce4(0xc0).build(), "bad_bth"});
  c.push_back({"NoRoomForIcrc", roce4().payload(0).icrc(false).build(), "bad_bth"});
  c.push_back({"AckNoRoomForIcrc", roce4(kOpAck).icrc(false).build(), "bad_bth"});
  c.push_back({"ReadRequestWithoutReth", roce4(kOpReadRequest).payload(8).build(), "trunc_bth"});
  std::vector<PassCase> both;
  for (const auto& one : c) {
    for (Hook h : {Hook::kTc, Hook::kXdp}) {
      // Where the ingress cases run rg_tc_ingress, the test runner refuses them as it does at egress.
      if (one.xdp_only && (h == Hook::kTc || ingress_at_tc())) continue;
      both.push_back(one);
      both.back().hook = h;
      both.back().name += hook_name(h);
    }
  }
  return both;
}

class Passthrough : public ::testing::TestWithParam<PassCase> {};

TEST_P(Passthrough, ByteIdenticalWithPassVerdict) {
  const PassCase& tc = GetParam();
  const Hook hook = tc.hook;
  Dataplane dp;
  dp.tunnels();
  Verdict r = run(dp, hook, tc.in);
  EXPECT_EQ(r.ret, pass_verdict(hook));
  EXPECT_EQ(hex(r.out), hex(tc.in));
  Events want;
  if (!tc.error.empty()) want[tc.error] = 1;
  EXPECT_EQ(dp.events(dir_of(hook)), want);
  if (!tc.error.empty()) {
    EXPECT_EQ(dp.bytes(dir_of(hook), *event_from_name(tc.error)), tc.in.size());
  }
  EXPECT_TRUE(dp.qps().empty());
}

INSTANTIATE_TEST_SUITE_P(, Passthrough, ::testing::ValuesIn(pass_cases()),
                         [](const auto& info) { return info.param.name; });

// ---------------------------------------------------------------------------
// Geneve encapsulation at TC egress.

// What the outer headers must be, byte for byte, given the parts a test
// cannot predict (entropy port, IPv6 flow label) read from the output.
Bytes expected_encap(const Bytes& remarked_inner, bool outer6, uint16_t sport,
                     uint32_t flow_label, uint8_t ttl = RG_DEFAULT_OUTER_TTL) {
  View in = parse(remarked_inner);
  PacketBuilder p;
  p.eth(kPeerMac, kDevMac);
  if (outer6)
    p.ipv6(kLocal6, kPeer6).flow_label(flow_label);
  else
    p.ipv4(kLocal4, kPeer4).ip_id(0).df(true);
  p.tos(in.tos).ttl(ttl).udp(sport, kGenevePort).udp_csum(UdpCsum::kZero)
      .geneve(outer6 ? kVni6 : kVni4).payload(remarked_inner);
  return p.build();
}

struct EncapCase {
  std::string name;
  PacketBuilder inner;
  bool outer6;
  uint8_t want_dscp;
};

std::vector<EncapCase> encap_cases() {
  std::vector<EncapCase> c;
  for (uint8_t ecn = 0; ecn < 4; ++ecn) {
    c.push_back({"Ipv4InIpv4Ecn" + std::to_string(ecn), tunneled4().ecn(ecn), false, 46});
    c.push_back({"Ipv6InIpv6Ecn" + std::to_string(ecn), tunneled6().ecn(ecn), true, 46});
  }
  PacketBuilder cnp = tunneled4();
  cnp.bth(bth(kOpCnp)).payload(16);
  c.push_back({"CnpIpv4", cnp, false, 48});
  PacketBuilder ack = tunneled6();
  ack.bth(bth(kOpAck)).aeth(kSynNakSeqErr, 9).payload(0);
  c.push_back({"NakIpv6", ack, true, 46});
  c.push_back({"Ipv4OptionsInner", tunneled4().ip_options(record_route(2)), false, 46});
  c.push_back({"LargeInner", tunneled4().payload(1024), false, 46});
  return c;
}

void PrintTo(const EncapCase& c, std::ostream* os) { *os << c.name; }

class Encap : public ::testing::TestWithParam<EncapCase> {};

TEST_P(Encap, OuterHeadersFieldByField) {
  const EncapCase& tc = GetParam();
  Dataplane dp;
  dp.tunnels();
  Bytes in = tc.inner.build();
  PacketBuilder remarked = tc.inner;
  remarked.dscp(tc.want_dscp);
  Bytes want_inner = remarked.build();

  Verdict r = dp.tc(in);

  EXPECT_EQ(r.ret, kTcPass) << "the peer is reached through the same device";
  size_t room = tc.outer6 ? 14 + 40 + 8 + 8 : 14 + 20 + 8 + 8;
  ASSERT_EQ(r.out.size(), in.size() + room);
  View v = parse(r.out);
  ASSERT_TRUE(v.geneve);
  EXPECT_EQ(v.dst, kPeerMac) << "next hop MAC from bpf_fib_lookup";
  EXPECT_EQ(v.src, kDevMac);
  EXPECT_EQ(v.family, tc.outer6 ? 6 : 4);
  EXPECT_EQ(v.dscp(), tc.want_dscp) << "outer DSCP = inner DSCP after re-mark";
  EXPECT_EQ(v.ecn(), parse(in).ecn()) << "RFC 6040 normal mode copies ECN";
  EXPECT_EQ(v.ttl, RG_DEFAULT_OUTER_TTL);
  EXPECT_EQ(v.saddr, ip_addr(tc.outer6 ? kLocal6 : kLocal4));
  EXPECT_EQ(v.daddr, ip_addr(tc.outer6 ? kPeer6 : kPeer4));
  if (!tc.outer6) {
    EXPECT_TRUE(v.df);
    EXPECT_TRUE(v.ipv4_csum_ok);
    EXPECT_EQ(v.ip_len, r.out.size() - 14);
  } else {
    EXPECT_EQ(v.ip_len, r.out.size() - 54);
    EXPECT_EQ(v.flow_label & 0x3fff, v.sport & 0x3fff) << "flow label from the same hash";
  }
  EXPECT_GE(v.sport, 49152);
  EXPECT_EQ(v.dport, kGenevePort);
  EXPECT_EQ(v.udp_csum, 0);
  EXPECT_EQ(v.udp_len, r.out.size() - v.l4);
  EXPECT_EQ(v.gnv_ver, 0);
  EXPECT_EQ(v.gnv_optlen, 0);
  EXPECT_EQ(v.gnv_flags, 0);
  EXPECT_EQ(v.gnv_proto, 0x6558);
  EXPECT_EQ(v.vni, tc.outer6 ? kVni6 : kVni4);
  EXPECT_EQ(hex(slice(r.out, v.inner)), hex(want_inner));
  EXPECT_EQ(hex(r.out), hex(expected_encap(want_inner, tc.outer6, v.sport, v.flow_label)));

  Events e = dp.events(RG_DIR_EGRESS);
  EXPECT_EQ(e["encapsulated"], 1u);
  EXPECT_EQ(e["roce_packets"], 1u);
  EXPECT_EQ(dp.bytes(RG_DIR_EGRESS, RG_EV_ENCAPSULATED), in.size());
}

INSTANTIATE_TEST_SUITE_P(, Encap, ::testing::ValuesIn(encap_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(OracleTables, EncapCases) {
  std::vector<Bytes> emitted;
  std::vector<TsharkRow> want;
  Dataplane dp;
  dp.tunnels();
  for (const auto& tc : encap_cases()) {
    Bytes in = tc.inner.build();
    emitted.push_back(dp.tc(in).out);
    View v = parse(in);
    std::string d = std::to_string(tc.want_dscp), e = std::to_string(v.ecn());
    std::string outer = tc.outer6 ? "ipv6.tclass." : "ip.dsfield.";
    TsharkRow w;
    w["frame.protocols"] = std::string("eth:ethertype:") + (tc.outer6 ? "ipv6" : "ip") +
                           ":udp:geneve:eth:ethertype:" + (v.family == 6 ? "ipv6" : "ip") +
                           ":udp:infiniband";
    w[outer + "dscp"] = d + "," + d;
    w[outer + "ecn"] = e + "," + e;
    w["geneve.proto_type"] = "0x6558";
    w["udp.checksum.status"] = "3,1";
    if (!tc.outer6) w["ip.checksum.status"] = "1,1";
    w["infiniband.bth.psn"] = std::to_string(v.bth.psn);
    want.push_back(w);
  }
  std::vector<TsharkRow> rows = tshark(emitted, "encap-table");
  ASSERT_EQ(rows.size(), want.size());
  for (size_t i = 0; i < rows.size(); ++i) expect_tshark_row(rows[i], want[i], i);
}

TEST(EncapEntropy, StablePerFlowDifferentAcrossQps) {
  Dataplane dp;
  dp.tunnels();
  auto sport = [&](const Bytes& f) { return parse(dp.tc(f).out).sport; };
  uint16_t a = sport(tunneled4(0x100, 1).build());
  EXPECT_EQ(sport(tunneled4(0x100, 2).payload(7).build()), a) << "same QP, other packet";
  EXPECT_EQ(sport(tunneled4(0x100, 3).dscp(0).ecn(3).build()), a) << "DSCP/ECN not hashed";
  std::set<uint16_t> ports;
  for (uint32_t qp = 0x100; qp < 0x100 + 16; ++qp) {
    uint16_t p = sport(tunneled4(qp).build());
    EXPECT_GE(p, 49152);
    ports.insert(p);
  }
  EXPECT_GE(ports.size(), 15u) << "16 QPs should spread over the 14-bit port range";
  PacketBuilder other_src = tunneled4(0x100);
  other_src.ipv4("198.51.100.11", "203.0.113.20");
  EXPECT_NE(sport(other_src.build()), a) << "inner source address is part of the flow";
}

TEST(EncapConfig, OuterTtlFromConfig) {
  rg_config cfg = test_config();
  cfg.outer_ttl = 17;
  Dataplane dp(cfg);
  dp.tunnels();
  Verdict r4 = dp.tc(tunneled4().build());
  Verdict r6 = dp.tc(tunneled6().build());
  EXPECT_EQ(parse(r4.out).ttl, 17);
  EXPECT_TRUE(parse(r4.out).ipv4_csum_ok);
  EXPECT_EQ(parse(r6.out).ttl, 17);
}

TEST(EncapRoutes, Ipv4InnerOverIpv6Outer) {
  Dataplane dp;
  dp.tunnels();
  dp.route("203.0.113.128", 25, 1);  // longest prefix wins
  Bytes in = tunneled4().ipv4("198.51.100.10", "203.0.113.200").build();
  Verdict r = dp.tc(in);
  View v = parse(r.out);
  ASSERT_TRUE(v.geneve);
  EXPECT_EQ(v.family, 6);
  EXPECT_EQ(v.vni, kVni6);
  EXPECT_EQ(parse_inner(r.out).family, 4);
  EXPECT_EQ(parse(dp.tc(tunneled4().build()).out).family, 4) << "the /24 still goes via IPv4";
}

TEST(EncapRoutes, Ipv6InnerOverIpv4OuterRoundTrip) {
  Dataplane dp;
  dp.tunnels();
  dp.route("2001:db8:6:4::", 64, 0);
  PacketBuilder p = tunneled6().ipv6("2001:db8:5::10", "2001:db8:6:4::20").flow_label(7).ecn(2);
  Bytes enc = dp.tc(p.build()).out;
  View v = parse(enc);
  ASSERT_TRUE(v.geneve);
  EXPECT_EQ(v.family, 4);
  EXPECT_EQ(v.vni, kVni4);
  EXPECT_TRUE(v.ipv4_csum_ok);
  EXPECT_EQ(v.tos, (46 << 2) | 2);
  Verdict r = dp.xdp(enc);
  EXPECT_EQ(r.ret, kXdpPass);
  EXPECT_EQ(hex(r.out), hex(delivered(p.dscp(46).build(), enc)));
}

TEST(EncapRoutes, NoRouteNoEncap) {
  Dataplane dp;
  dp.tunnels();
  Bytes in = roce4().build();
  Verdict r = dp.tc(in);
  EXPECT_EQ(r.ret, kTcPass);
  EXPECT_EQ(r.out.size(), in.size());
  EXPECT_EQ(parse(r.out).dscp(), 46);
  EXPECT_EQ(dp.events(RG_DIR_EGRESS).count("encapsulated"), 0u);
}

TEST(EncapRoutes, NonRoceTowardsTunnelUntouched) {
  Dataplane dp;
  dp.tunnels();
  Bytes in = tunneled4().udp(1000, 2000).build();
  Verdict r = dp.tc(in);
  EXPECT_EQ(r.ret, kTcPass);
  EXPECT_EQ(r.out, in);
  EXPECT_TRUE(dp.events(RG_DIR_EGRESS).empty());
}

TEST(EncapRoutes, VlanTaggedIsRemarkedNotEncapsulated) {
  Dataplane dp;
  dp.tunnels();
  PacketBuilder p = tunneled4().vlan(10);
  Verdict r = dp.tc(p.build());
  EXPECT_EQ(r.ret, kTcPass);
  EXPECT_EQ(hex(r.out), hex(p.dscp(46).build()));
}

TEST(EncapRoutes, UnreachablePeerCountsFibMiss) {
  Dataplane dp;
  dp.peer(0, kLocal4, kUnreachable4, kVni4);
  dp.route(kRemoteNet4, 24, 0);
  PacketBuilder p = tunneled4();
  Verdict r = dp.tc(p.build());
  EXPECT_EQ(r.ret, kTcPass);
  EXPECT_EQ(hex(r.out), hex(p.dscp(46).build())) << "sent re-marked, unencapsulated";
  EXPECT_EQ(dp.events(RG_DIR_EGRESS),
            (Events{{"roce_packets", 1}, {"dscp_rewritten", 1}, {"qp_new", 1}, {"fib_miss", 1}}));
}

TEST(EncapRoutes, EmptyPeerSlotIgnored) {
  Dataplane dp;
  dp.route(kRemoteNet4, 24, 5);  // slot 5 never written: family 0
  PacketBuilder p = tunneled4();
  Verdict r = dp.tc(p.build());
  EXPECT_EQ(hex(r.out), hex(p.dscp(46).build()));
}

// How the encapsulated packet leaves: TC_ACT_UNSPEC when the peer is on this
// device, a redirect when it is behind another one or still unresolved.
inline constexpr uint32_t kTcRedirect = 7;

TEST(EncapNextHop, PeerBehindOtherDeviceIsRedirected) {
  Dataplane dp;
  dp.peer(0, kOtherLocal4, kOtherPeer4, kVni4);
  dp.peer(1, kOtherLocal6, kOtherPeer6, kVni6);
  dp.route(kRemoteNet4, 24, 0);
  dp.route(kRemoteNet6, 48, 1);
  for (const Bytes& in : {tunneled4().build(), tunneled6().build()}) {
    Verdict r = dp.tc(in);
    EXPECT_EQ(r.ret, kTcRedirect);
    View v = parse(r.out);
    ASSERT_TRUE(v.geneve);
    EXPECT_EQ(v.dst, kOtherPeerMac);
    EXPECT_EQ(v.src, kOtherDevMac) << "source MAC of the device the packet leaves by";
  }
  EXPECT_EQ(dp.events(RG_DIR_EGRESS)["encapsulated"], 2u);
}

TEST(EncapNextHop, UnresolvedNeighbourUsesRedirectNeigh) {
  Dataplane dp;
  dp.peer(0, kLocal4, kNoNeigh4, kVni4);
  dp.peer(1, kLocal6, kNoNeigh6, kVni6);
  dp.route(kRemoteNet4, 24, 0);
  dp.route(kRemoteNet6, 48, 1);
  for (const Bytes& in : {tunneled4().build(), tunneled6().build()}) {
    Verdict r = dp.tc(in);
    EXPECT_EQ(r.ret, kTcRedirect) << "bpf_redirect_neigh resolves and fills the MACs";
    View v = parse(r.out);
    ASSERT_TRUE(v.geneve);
    EXPECT_EQ(v.daddr, ip_addr(v.family == 4 ? kNoNeigh4 : kNoNeigh6));
  }
  EXPECT_EQ(dp.events(RG_DIR_EGRESS).count("fib_miss"), 0u);
}

// Kernel routes, rules, addresses and sysctls one test changes in the test namespace;
// undone when the test ends, failed or not, so the next test sees the plain
// topology.
class KernelRoutes {
 public:
  KernelRoutes() = default;
  KernelRoutes(const KernelRoutes&) = delete;
  KernelRoutes& operator=(const KernelRoutes&) = delete;
  ~KernelRoutes() {
    for (auto it = undo_.rbegin(); it != undo_.rend(); ++it) {
      try {
        run_command(*it);
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
      }
    }
  }
  // object is what follows `ip` ("-6 route", "-4 rule", "-4 addr"); spec what follows `add`.
  void add(const std::string& object, const std::string& spec) {
    run_command("ip " + object + " add " + spec);
    undo_.push_back("ip " + object + " del " + spec);
  }
  void sysctl(const std::string& path, const std::string& value) {
    std::string old = run_command("cat " + path);
    while (!old.empty() && old.back() == '\n') old.pop_back();
    run_command("echo " + value + " > " + path);
    undo_.push_back("echo " + old + " > " + path);
  }

 private:
  std::vector<std::string> undo_;
};

// Outer peers off-link for both devices, reached by a host route through the
// second device while the default route points at the first.
inline constexpr const char* kRoutedPeer4 = "198.51.100.66";
inline constexpr const char* kRoutedPeer6 = "2001:db8:7::66";

struct OuterRouteCase {
  const char* name;
  bool outer6;
};
void PrintTo(const OuterRouteCase& c, std::ostream* os) { *os << c.name; }

class EncapOuterRoute : public ::testing::TestWithParam<OuterRouteCase> {
 protected:
  const char* peer() const { return GetParam().outer6 ? kRoutedPeer6 : kRoutedPeer4; }
  const char* fam() const { return GetParam().outer6 ? "-6 " : "-4 "; }
  // The tunnel to the routed peer, sourced from kDev's address unless told.
  void tunnel(Dataplane& dp, const char* local = nullptr) const {
    if (!local) local = GetParam().outer6 ? kLocal6 : kLocal4;
    dp.peer(0, local, peer(), kVni4);
    dp.route(kRemoteNet4, 24, 0);
  }
  std::string via(bool other) const {
    if (GetParam().outer6)
      return std::string("via ") + (other ? kOtherPeer6 : kPeer6) + " dev " + (other ? kOtherDev : kDev);
    return std::string("via ") + (other ? kOtherPeer4 : kPeer4) + " dev " + (other ? kOtherDev : kDev);
  }
  std::string host_prefix() const { return std::string(peer()) + (GetParam().outer6 ? "/128" : "/32"); }
};

// The kernel's own choice (`ip route get peer`) is the host route through the
// other device; the attached device's default route must not win.
TEST_P(EncapOuterRoute, MoreSpecificRouteThroughOtherDeviceWins) {
  KernelRoutes routes;
  routes.add(fam() + std::string("route"), "default " + via(false));
  routes.add(fam() + std::string("route"), host_prefix() + " " + via(true));
  ASSERT_NE(run_command("ip " + std::string(fam()) + "route get " + peer()).find(kOtherDev), std::string::npos);
  Dataplane dp;
  tunnel(dp);
  Verdict r = dp.tc(tunneled4().build());
  EXPECT_EQ(r.ret, kTcRedirect);
  View v = parse(r.out);
  ASSERT_TRUE(v.geneve);
  EXPECT_EQ(v.dst, kOtherPeerMac);
  EXPECT_EQ(v.src, kOtherDevMac);
}

// A policy rule on packets arriving from the attached device is about
// forwarded traffic; the gateway's own outer packets are output, as the
// kernel's own tunnels route them.
TEST_P(EncapOuterRoute, InputInterfaceRulesDoNotApply) {
  KernelRoutes routes;
  routes.add(fam() + std::string("route"), host_prefix() + " " + via(true));
  routes.add(fam() + std::string("route"), host_prefix() + " " + via(false) + " table 100");
  routes.add(fam() + std::string("rule"), std::string("iif ") + kDev + " lookup 100 priority 100");
  Dataplane dp;
  tunnel(dp);
  Verdict r = dp.tc(tunneled4().build());
  EXPECT_EQ(r.ret, kTcRedirect);
  View v = parse(r.out);
  ASSERT_TRUE(v.geneve);
  EXPECT_EQ(v.dst, kOtherPeerMac);
}

// A rule by class (DSCP 46 to a premium uplink) applies to the outer packet
// by the DSCP it carries, as it does to the kernel's own tunnels (`ip route
// get PEER tos 0xb8`): the lookup carries it, and a cached next hop serves
// only the class it was looked up for. IPv4 rules compare the TOS bits alone
// (the kernel refuses `tos 0xb8` there; 0x18 is what it compares of 0xb8),
// IPv6 rules the DSCP; neither the ECN bits.
TEST_P(EncapOuterRoute, ClassRulesSeeTheOuterDscp) {
  KernelRoutes routes;
  routes.add(fam() + std::string("route"), host_prefix() + " " + via(false));
  routes.add(fam() + std::string("route"), host_prefix() + " " + via(true) + " table 100");
  routes.add(fam() + std::string("rule"),
             std::string(GetParam().outer6 ? "tos 0xb8" : "tos 0x18") + " lookup 100 priority 100");
  ASSERT_NE(run_command("ip " + std::string(fam()) + "route get " + peer() + " tos 0xb8").find(kOtherDev),
            std::string::npos);
  rg_config cfg = test_config();
  cfg.flags &= ~(RG_CFG_F_REMARK | RG_CFG_F_REPAIR);  // the frames keep their classes
  Dataplane dp(cfg);
  tunnel(dp);
  PeerConfig peer_cfg;
  peer_cfg.local = *parse_address(GetParam().outer6 ? kLocal6 : kLocal4);
  peer_cfg.remote = *parse_address(peer());
  NexthopLeases leases(bpf_map__fd(dp.skel()->maps.rg_nh_leases), {peer_cfg});
  leases.invalidate();
  ASSERT_EQ(leases.granted(), 1u);
  // Twice through: the lookups (filling the cache), then with a cache.
  for (int round = 0; round < 2; ++round) {
    for (uint8_t dscp : {46, 0, 46, 26}) {
      SCOPED_TRACE(::testing::Message() << "round " << round << ", DSCP " << int(dscp));
      for (uint8_t ecn : {0, 2}) {
        View v = parse(dp.tc(tunneled4().dscp(dscp).ecn(ecn).build()).out);
        ASSERT_TRUE(v.geneve);
        EXPECT_EQ(v.dscp(), dscp);
        EXPECT_EQ(v.dst, dscp == 46 ? kOtherPeerMac : kPeerMac) << "ECN " << int(ecn);
      }
    }
  }
}

// Equal-cost paths to the peer: the outer UDP source port (and IPv6 flow
// label) is each QP's entropy, and the lookup sees it, so with the L4 hash
// policy different QPs take different paths, as the kernel's Geneve does.
// The tunnel source sits on the loopback device, as on a gateway with two
// uplinks: IPv4 multipath prefers the next hop whose device owns the source
// address (fib_select_multipath), which would pin every QP to one path.
// Such a route gets no next-hop lease (a cached hop would pin every QP to
// one path too): asked for one as `roceguard run` asks, the QPs still spread.
TEST_P(EncapOuterRoute, EcmpSpreadsQpsOverPaths) {
  const std::string sysctl = GetParam().outer6 ? "/proc/sys/net/ipv6/fib_multipath_hash_policy"
                                               : "/proc/sys/net/ipv4/fib_multipath_hash_policy";
  const char* local = GetParam().outer6 ? "2001:db8:7::1" : "203.0.113.250";
  KernelRoutes routes;
  routes.sysctl(sysctl, "1");
  routes.add(fam() + std::string("addr"), std::string(local) + (GetParam().outer6 ? "/128" : "/32") + " dev lo");
  routes.add(fam() + std::string("route"), host_prefix() + " nexthop " + via(false) + " nexthop " + via(true));
  Dataplane dp;
  tunnel(dp, local);
  PeerConfig peer_cfg;
  peer_cfg.local = *parse_address(local);
  peer_cfg.remote = *parse_address(peer());
  NexthopLeases leases(bpf_map__fd(dp.skel()->maps.rg_nh_leases), {peer_cfg});
  leases.invalidate();
  EXPECT_EQ(leases.granted(), 0u);
  std::set<Mac> next_hops;
  for (uint32_t qp = 1; qp <= 64; ++qp) {
    View v = parse(dp.tc(tunneled4(qp, 1).build()).out);
    ASSERT_TRUE(v.geneve);
    next_hops.insert(v.dst);
  }
  EXPECT_EQ(next_hops, (std::set<Mac>{kPeerMac, kOtherPeerMac}));
}

INSTANTIATE_TEST_SUITE_P(Families, EncapOuterRoute,
                         ::testing::Values(OuterRouteCase{"Ipv4Outer", false},
                                           OuterRouteCase{"Ipv6Outer", true}),
                         [](const auto& info) { return std::string(info.param.name); });

// The next-hop cache (struct rg_nexthop): the egress program keeps, per CPU
// and peer, what bpf_fib_lookup found, and uses it instead of a lookup only
// under a current lease (rg_nh_leases), as `roceguard run` grants them.

// The harness's two tunnels (slots kPeerSlot4, kPeerSlot6) as the loader
// configures them, for NexthopLeases.
// One slot's cache entries, one per possible CPU.
std::vector<rg_nexthop> nexthops(const Dataplane& dp, uint32_t slot) {
  std::vector<rg_nexthop> v(static_cast<size_t>(libbpf_num_possible_cpus()));
  EXPECT_EQ(bpf_map__lookup_elem(dp.skel()->maps.rg_nexthops, &slot, sizeof(slot), v.data(),
                                 v.size() * sizeof(rg_nexthop), 0),
            0);
  return v;
}

void set_nexthops(const Dataplane& dp, uint32_t slot, const rg_nexthop& nh) {
  std::vector<rg_nexthop> v(static_cast<size_t>(libbpf_num_possible_cpus()), nh);
  ASSERT_EQ(bpf_map__update_elem(dp.skel()->maps.rg_nexthops, &slot, sizeof(slot), v.data(),
                                 v.size() * sizeof(rg_nexthop), 0),
            0);
}

// The entries filled under generation gen (those of the CPUs that ran the program).
std::vector<rg_nexthop> filled(const Dataplane& dp, uint32_t slot, uint32_t gen) {
  std::vector<rg_nexthop> out;
  for (const auto& nh : nexthops(dp, slot))
    if (nh.gen == gen) out.push_back(nh);
  return out;
}

Mac mac_of(const uint8_t* b) {
  Mac m{};
  std::copy(b, b + m.size(), m.begin());
  return m;
}

inline const Mac kPlantedMac = {0x02, 0x00, 0x00, 0x00, 0xee, 0x01};

// The outer IPv4 header's fixed words to kPeer4 summed as RFC 1071 does
// (identification 0, DF, the default TTL and UDP, both addresses), what a
// cache entry's ip_csum holds, in the byte order it is stored in.
uint16_t fixed_ip_csum4() {
  auto word = [](const uint8_t* b) { return static_cast<uint32_t>(b[0] << 8 | b[1]); };
  const Address local = *parse_address(kLocal4), remote = *parse_address(kPeer4);
  uint32_t sum = 0x4000 + (RG_DEFAULT_OUTER_TTL << 8 | IPPROTO_UDP);
  for (const Address* a : {&local, &remote}) sum += word(a->bytes.data()) + word(a->bytes.data() + 2);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return htons(static_cast<uint16_t>(sum));
}

// A cache entry that names kPlantedMac: a frame addressed to it was built
// from the cache, not from a lookup (the kernel knows no such neighbour).
// For kPeerSlot4 it carries the outer IPv4 header's checksum part. It
// serves the class the tests' frames are re-marked to.
rg_nexthop planted(uint32_t gen, uint16_t mtu = 0xffff, uint16_t ip_csum = fixed_ip_csum4()) {
  rg_nexthop nh{};
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &now);  // bpf_ktime_get_coarse_ns's clock: filled just now
  nh.filled = static_cast<uint32_t>((static_cast<uint64_t>(now.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(now.tv_nsec)) >> 20);
  nh.dscp = RG_DEFAULT_DSCP;
  nh.ip_csum = ip_csum;
  nh.gen = gen;
  nh.ifindex = if_nametoindex(kDev);
  std::copy(kPlantedMac.begin(), kPlantedMac.end(), nh.dmac);
  std::copy(kDevMac.begin(), kDevMac.end(), nh.smac);
  nh.mtu = mtu;
  return nh;
}

TEST(NexthopCache, FilledByTheLookupThenUsedUntilTheGenerationMoves) {
  Dataplane dp;
  dp.tunnels();
  NexthopLeases leases(bpf_map__fd(dp.skel()->maps.rg_nh_leases), harness_peers());
  leases.invalidate();
  ASSERT_EQ(leases.granted(), 2u) << "both harness peers are on a connected route";
  const uint32_t g1 = leases.generation();
  for (const Bytes& in : {tunneled4().build(), tunneled6().build()}) {
    View v = parse(dp.tc(in).out);
    ASSERT_TRUE(v.geneve);
    EXPECT_EQ(v.dst, kPeerMac);
  }
  for (uint32_t slot : {kPeerSlot4, kPeerSlot6}) {
    SCOPED_TRACE(slot);
    auto f = filled(dp, slot, g1);
    ASSERT_EQ(f.size(), 1u) << "one CPU ran the program once";
    EXPECT_EQ(f[0].ifindex, if_nametoindex(kDev));
    EXPECT_EQ(mac_of(f[0].dmac), kPeerMac);
    EXPECT_EQ(mac_of(f[0].smac), kDevMac);
    EXPECT_EQ(f[0].mtu, 1500) << "the device's MTU, from the second lookup";
  }
  EXPECT_EQ(filled(dp, kPeerSlot4, g1)[0].ip_csum, fixed_ip_csum4());
  EXPECT_EQ(filled(dp, kPeerSlot6, g1)[0].ip_csum, 0) << "IPv6 has no header checksum";

  // A planted entry of the current generation is what the next frames take.
  set_nexthops(dp, kPeerSlot4, planted(g1));
  set_nexthops(dp, kPeerSlot6, planted(g1, 0xffff, 0));
  for (const Bytes& in : {tunneled4().build(), tunneled6().build()}) {
    Verdict r = dp.tc(in);
    EXPECT_EQ(r.ret, kTcPass) << "the cached device is this one";
    View v = parse(r.out);
    ASSERT_TRUE(v.geneve);
    EXPECT_EQ(v.dst, kPlantedMac);
    EXPECT_EQ(v.src, kDevMac);
    if (v.family == AF_INET) {
      EXPECT_TRUE(v.ipv4_csum_ok);
    }
  }

  // A route, neighbour or link event: a new generation, so the next frame
  // is routed by the lookup again and refills the cache.
  leases.invalidate();
  const uint32_t g2 = leases.generation();
  ASSERT_NE(g2, g1);
  for (const Bytes& in : {tunneled4().build(), tunneled6().build()}) {
    View v = parse(dp.tc(in).out);
    ASSERT_TRUE(v.geneve);
    EXPECT_EQ(v.dst, kPeerMac);
  }
  for (uint32_t slot : {kPeerSlot4, kPeerSlot6}) {
    auto f = filled(dp, slot, g2);
    ASSERT_EQ(f.size(), 1u);
    EXPECT_EQ(mac_of(f[0].dmac), kPeerMac);
  }
  EXPECT_EQ(dp.events(RG_DIR_EGRESS)["encapsulated"], 6u);
}

// The cached entry is the outer IPv4 header's template: a packet adds its
// DSCP, ECN and length to the entry's fixed part and sums nothing else. A
// planted part one off shows in every frame's checksum, by exactly that one,
// whatever the frame's size and DSCP; the lookup path computes the part
// itself, so its frames stay valid.
TEST(NexthopCache, OuterIpv4ChecksumIsTheCachedPartPlusThePacketsWords) {
  Dataplane dp;
  dp.tunnels();
  NexthopLeases leases(bpf_map__fd(dp.skel()->maps.rg_nh_leases), harness_peers());
  leases.invalidate();
  const uint16_t good = fixed_ip_csum4();
  const uint16_t off = htons(static_cast<uint16_t>(ntohs(good) + 1));
  set_nexthops(dp, kPeerSlot4, planted(leases.generation(), 0xffff, off));
  for (size_t payload : {16u, 700u, 1300u}) {
    for (uint8_t dscp : {0, 26, 46}) {
      SCOPED_TRACE(::testing::Message() << payload << " bytes, DSCP " << int(dscp));
      PacketBuilder b = tunneled4();
      b.payload(payload).dscp(dscp);
      const Bytes out = dp.tc(b.build()).out;
      View v = parse(out);
      ASSERT_TRUE(v.geneve);
      ASSERT_EQ(v.dst, kPlantedMac) << "built from the cache";
      EXPECT_FALSE(v.ipv4_csum_ok);
      // The header as the program wrote it, checksum included, sums to
      // 0xfffe (one's complement): one more than a valid header's 0xffff.
      uint32_t sum = 0;
      for (size_t i = 0; i < 20; i += 2) sum += out[v.l3 + i] << 8 | out[v.l3 + i + 1];
      while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
      EXPECT_EQ(sum, 0xfffeu);
    }
  }
  set_nexthops(dp, kPeerSlot4, planted(leases.generation()));
  EXPECT_TRUE(parse(dp.tc(tunneled4().build()).out).ipv4_csum_ok);
  leases.revoke();
  set_nexthops(dp, kPeerSlot4, planted(0, 0xffff, off));
  View v = parse(dp.tc(tunneled4().build()).out);
  EXPECT_EQ(v.dst, kPeerMac) << "routed by the lookup";
  EXPECT_TRUE(v.ipv4_csum_ok);
}

// Without a running lease (none granted, revoked, run out, or generation 0)
// the cache is neither used nor filled.
TEST(NexthopCache, NotUsedWithoutACurrentLease) {
  Dataplane dp;
  dp.tunnels();
  const int lease_fd = bpf_map__fd(dp.skel()->maps.rg_nh_leases);
  struct Case {
    const char* what;
    rg_nexthop_lease lease;
  };
  const uint64_t far = ~0ull;
  for (const Case& c : {Case{"never granted", {0, 0, 0}}, Case{"run out", {1, 7, 0}},
                        Case{"generation 0", {far, 0, 0}}}) {
    SCOPED_TRACE(c.what);
    ASSERT_EQ(bpf_map_update_elem(lease_fd, &kPeerSlot4, &c.lease, BPF_ANY), 0);
    set_nexthops(dp, kPeerSlot4, planted(c.lease.gen));
    View v = parse(dp.tc(tunneled4().build()).out);
    ASSERT_TRUE(v.geneve);
    EXPECT_EQ(v.dst, kPeerMac) << "routed by the lookup";
    for (const auto& nh : nexthops(dp, kPeerSlot4)) EXPECT_EQ(mac_of(nh.dmac), kPlantedMac) << "not refilled";
  }
  // Revoked: what a daemon leaves when it stops.
  NexthopLeases leases(lease_fd, harness_peers());
  leases.invalidate();
  set_nexthops(dp, kPeerSlot4, planted(leases.generation()));
  ASSERT_EQ(parse(dp.tc(tunneled4().build()).out).dst, kPlantedMac);
  leases.revoke();
  EXPECT_EQ(leases.granted(), 0u);
  EXPECT_EQ(parse(dp.tc(tunneled4().build()).out).dst, kPeerMac);
}

// Not every input of the kernel's lookup announces its change (a path MTU
// learned from ICMP does not), so a current entry serves a bounded time
// (RG_NEXTHOP_MAX_AGE_NS, one second) after its fill, then the lookup
// routes the next frame and fills it again.
TEST(NexthopCache, AnEntryServesABoundedTime) {
  Dataplane dp;
  dp.tunnels();
  NexthopLeases leases(bpf_map__fd(dp.skel()->maps.rg_nh_leases), harness_peers());
  leases.invalidate();
  set_nexthops(dp, kPeerSlot4, planted(leases.generation()));
  ASSERT_EQ(parse(dp.tc(tunneled4().build()).out).dst, kPlantedMac) << "a fresh entry is used";
  leases.renew();
  usleep(1'300'000);  // past the bound; the lease (3 s) still runs
  leases.renew();
  EXPECT_EQ(parse(dp.tc(tunneled4().build()).out).dst, kPeerMac) << "routed by the lookup";
  size_t refilled = 0;
  for (const auto& nh : filled(dp, kPeerSlot4, leases.generation())) refilled += mac_of(nh.dmac) == kPeerMac;
  EXPECT_EQ(refilled, 1u) << "and filled again, on the CPU that ran it";
}

// The cached MTU is the route's, and the oversize policy applies to it as
// to the lookup's: a route locked to 1300 bytes keeps a 1400-byte outer
// packet out of the tunnel on the cached path too.
TEST(NexthopCache, RouteMtuIsCachedAndEnforced) {
  KernelRoutes routes;
  routes.add("-4 route", std::string(kPeer4) + "/32 dev " + kDev + " mtu lock 1300");
  Dataplane dp;
  dp.tunnels();
  NexthopLeases leases(bpf_map__fd(dp.skel()->maps.rg_nh_leases), harness_peers());
  leases.invalidate();
  ASSERT_TRUE(parse(dp.tc(tunneled4().build()).out).geneve);
  auto f = filled(dp, kPeerSlot4, leases.generation());
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].mtu, 1300);
  PacketBuilder big = tunneled4();
  big.payload(1000);
  big.payload(1000 + 1400 - 36 - big.build().size());  // an outer IP packet of 1400 bytes
  ASSERT_EQ(big.build().size() + 36, 1400u);
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(i);
    Verdict r = dp.tc(big.build());
    EXPECT_FALSE(parse(r.out).geneve) << "sent unencapsulated (pass policy)";
  }
  EXPECT_EQ(dp.events(RG_DIR_EGRESS)["oversize_passed"], 2u);
  EXPECT_EQ(filled(dp, kPeerSlot4, leases.generation()).size(), 1u) << "the cache entry stays";
}

// The frame built from the cache is byte for byte the one built from the
// lookup, for every encapsulation case.
TEST(NexthopCache, CachedFramesAreTheLookupsFrames) {
  Dataplane plain, cached;
  plain.tunnels();
  cached.tunnels();
  NexthopLeases leases(bpf_map__fd(cached.skel()->maps.rg_nh_leases), harness_peers());
  leases.invalidate();
  for (const EncapCase& c : encap_cases()) {
    SCOPED_TRACE(c.name);
    const Bytes in = c.inner.build();
    const Verdict want = plain.tc(in);
    ASSERT_TRUE(parse(want.out).geneve);
    for (int i = 0; i < 2; ++i) {  // the filling run, then the cached one
      const Verdict got = cached.tc(in);
      EXPECT_EQ(got.ret, want.ret);
      EXPECT_EQ(hex(got.out), hex(want.out));
    }
  }
  // Filled on each CPU the runs took.
  EXPECT_GE(filled(cached, kPeerSlot4, leases.generation()).size(), 1u);
  EXPECT_GE(filled(cached, kPeerSlot6, leases.generation()).size(), 1u);
}

// The tunnel MTU guard: the outer IP packet is inner frame + 36 (IPv4) or
// + 56 (IPv6) bytes.
TEST(MtuGuard, ExactFitIsEncapsulated) {
  Dataplane dp;
  Bytes in = tunneled4().build();
  dp.tunnels(static_cast<uint16_t>(in.size() + 36));
  Verdict r = dp.tc(in);
  EXPECT_TRUE(parse(r.out).geneve);
  EXPECT_EQ(parse(r.out).ip_len, in.size() + 36);
}

TEST(MtuGuard, PassPolicySendsUnencapsulated) {
  Dataplane dp;
  PacketBuilder p = tunneled4();
  Bytes in = p.build();
  dp.tunnels(static_cast<uint16_t>(in.size() + 35));
  Verdict r = dp.tc(in);
  EXPECT_EQ(r.ret, kTcPass);
  EXPECT_EQ(hex(r.out), hex(p.dscp(46).build()));
  EXPECT_EQ(dp.events(RG_DIR_EGRESS),
            (Events{{"roce_packets", 1}, {"dscp_rewritten", 1}, {"qp_new", 1},
                    {"oversize_passed", 1}}));
  EXPECT_EQ(dp.bytes(RG_DIR_EGRESS, RG_EV_OVERSIZE_PASSED), in.size());
}

TEST(MtuGuard, PassPolicyIpv6Outer) {
  Dataplane dp;
  PacketBuilder p = tunneled6();
  Bytes in = p.build();
  dp.tunnels(static_cast<uint16_t>(in.size() + 55));
  Verdict r = dp.tc(in);
  EXPECT_EQ(r.ret, kTcPass);
  EXPECT_EQ(hex(r.out), hex(p.dscp(46).build()));
  EXPECT_EQ(dp.events(RG_DIR_EGRESS)["oversize_passed"], 1u);
}

TEST(MtuGuard, DropPolicyDrops) {
  rg_config cfg = test_config();
  cfg.mtu_policy = RG_MTU_DROP;
  Dataplane dp(cfg);
  Bytes in = tunneled4().payload(1500).build();
  dp.tunnels(1500);
  Verdict r = dp.tc(in);
  EXPECT_EQ(r.ret, kTcShot);
  EXPECT_EQ(dp.events(RG_DIR_EGRESS),
            (Events{{"roce_packets", 1}, {"dscp_rewritten", 1}, {"qp_new", 1},
                    {"oversize_dropped", 1}}));
  // A packet that fits is still encapsulated under the drop policy.
  EXPECT_TRUE(parse(dp.tc(tunneled4().build()).out).geneve);
}

// A tunnel MTU above the egress device's MTU must not let a packet through
// that the device cannot carry: the device MTU is the guard then.
class DeviceMtuGuard : public ::testing::TestWithParam<std::tuple<bool, uint8_t>> {};

TEST_P(DeviceMtuGuard, PolicyAppliesAboveDeviceMtu) {
  const auto& [outer6, policy] = GetParam();
  rg_config cfg = test_config();
  cfg.mtu_policy = policy;
  Dataplane dp(cfg);
  dp.tunnels(9000);
  // 1501 bytes of outer IP on a 1500-byte device.
  size_t inner = 1501 - (outer6 ? 56 : 36);
  PacketBuilder p = outer6 ? tunneled6() : tunneled4();
  size_t fixed = p.build().size() - 64;
  p.payload(inner - fixed);
  Bytes in = p.build();
  ASSERT_EQ(in.size(), inner);
  Verdict r = dp.tc(in);
  Events e = dp.events(RG_DIR_EGRESS);
  EXPECT_EQ(e.count("encapsulated"), 0u);
  EXPECT_EQ(e.count("fib_miss"), 0u);
  if (policy == RG_MTU_DROP) {
    EXPECT_EQ(r.ret, kTcShot);
    EXPECT_EQ(e["oversize_dropped"], 1u);
  } else {
    EXPECT_EQ(r.ret, kTcPass);
    EXPECT_EQ(hex(r.out), hex(p.dscp(46).build()));
    EXPECT_EQ(e["oversize_passed"], 1u);
  }
  // One byte less fits the device and is encapsulated.
  p.payload(inner - fixed - 1);
  Verdict fits = dp.tc(p.build());
  EXPECT_EQ(fits.ret, kTcPass);
  ASSERT_TRUE(parse(fits.out).geneve);
  EXPECT_EQ(fits.out.size(), 14u + 1500);
}

INSTANTIATE_TEST_SUITE_P(, DeviceMtuGuard,
                         ::testing::Combine(::testing::Bool(),
                                            ::testing::Values(uint8_t{RG_MTU_PASS},
                                                              uint8_t{RG_MTU_DROP})),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "Ipv6" : "Ipv4") +
                                  (std::get<1>(info.param) == RG_MTU_DROP ? "Drop" : "Pass");
                         });

// ---------------------------------------------------------------------------
// Geneve decapsulation at XDP ingress.

// Geneve as a Linux geneve device or another gateway would send it.
PacketBuilder geneve_from(const std::string& src, const std::string& dst, uint32_t vni,
                          const Bytes& inner, uint8_t outer_tos = 46 << 2) {
  PacketBuilder p;
  p.eth(kDevMac, kPeerMac);
  if (ip_addr(src).size() == 4)
    p.ipv4(src, dst);
  else
    p.ipv6(src, dst);
  p.tos(outer_tos).udp(51000, kGenevePort).udp_csum(UdpCsum::kZero).geneve(vni).payload(inner);
  return p;
}

// The inner frame as the stack must receive it: addressed to this device,
// from the outer frame's sender.
Bytes delivered(Bytes inner, const Bytes& outer, const Mac& dev_mac) {
  std::copy(dev_mac.begin(), dev_mac.end(), inner.begin());
  std::copy(outer.begin() + 6, outer.begin() + 12, inner.begin() + 6);
  return inner;
}

TEST(Decap, RoundTripIpv4Outer) {
  Dataplane dp;
  dp.tunnels();
  PacketBuilder p = tunneled4().dscp(0).ecn(2);
  Bytes enc = dp.tc(p.build()).out;
  ASSERT_TRUE(parse(enc).geneve);
  Verdict r = dp.xdp(enc);
  EXPECT_EQ(r.ret, kXdpPass);
  EXPECT_EQ(hex(r.out), hex(delivered(p.dscp(46).build(), enc)));
  // Same {src, dst, QP} as egress, other direction: an entry of its own.
  EXPECT_EQ(dp.events(RG_DIR_INGRESS), (Events{{"decapsulated", 1}, {"roce_packets", 1}, {"qp_new", 1}}));
  EXPECT_EQ(dp.qp(RG_DIR_INGRESS, 0x11).packets, 1u);
  EXPECT_EQ(dp.qp(RG_DIR_EGRESS, 0x11).packets, 1u);
  EXPECT_EQ(dp.qps().size(), 1u) << "one QP, its two directions joined";
  EXPECT_EQ(dp.bytes(RG_DIR_INGRESS, RG_EV_DECAPSULATED), r.out.size());
}

TEST(Decap, RoundTripIpv6Outer) {
  Dataplane dp;
  dp.tunnels();
  PacketBuilder p = tunneled6().ecn(1);
  Bytes enc = dp.tc(p.build()).out;
  ASSERT_EQ(parse(enc).family, 6);
  Verdict r = dp.xdp(enc);
  EXPECT_EQ(r.ret, kXdpPass);
  EXPECT_EQ(hex(r.out), hex(delivered(p.dscp(46).build(), enc)));
  EXPECT_EQ(parse(r.out).flow_label, 0x54321u);
}

TEST(Decap, RoundTripCnp) {
  Dataplane dp;
  dp.tunnels();
  PacketBuilder cnp = tunneled4();
  cnp.bth(bth(kOpCnp)).payload(16);
  Bytes enc = dp.tc(cnp.build()).out;
  Verdict r = dp.xdp(enc);
  EXPECT_EQ(hex(r.out), hex(delivered(cnp.dscp(48).build(), enc)));
}

TEST(Decap, RestoresBleachedInnerDscp) {
  Dataplane dp;
  dp.tunnels();
  PacketBuilder inner = roce4().dscp(0).ecn(2);
  Bytes in = geneve_from(kPeer4, kLocal4, kVni4, inner.build(), 0).build();
  Verdict r = dp.xdp(in);
  EXPECT_EQ(r.ret, kXdpPass);
  EXPECT_EQ(hex(r.out), hex(delivered(inner.dscp(46).build(), in)));
  EXPECT_EQ(dp.events(RG_DIR_INGRESS),
            (Events{{"decapsulated", 1}, {"roce_packets", 1}, {"dscp_repaired", 1},
                    {"qp_new", 1}}));
}

TEST(Decap, SkipsNonCriticalOptions) {
  Dataplane dp;
  dp.tunnels();
  Bytes inner = roce6().dscp(46).build();
  Bytes opts = {0x01, 0x02, 0x03, 0x02, 1, 2, 3, 4, 5, 6, 7, 8};  // one 8-byte option
  PacketBuilder p;
  p.eth(kDevMac, kPeerMac).ipv4(kPeer4, kLocal4).udp(51000, kGenevePort)
      .udp_csum(UdpCsum::kZero).geneve(kVni4, opts).payload(inner);
  Bytes in = p.build();
  Verdict r = dp.xdp(in);
  EXPECT_EQ(r.ret, kXdpPass);
  EXPECT_EQ(hex(r.out), hex(delivered(inner, in)));
}

// RFC 8926 §3.5: a critical option this endpoint does not understand means
// the packet is dropped, whether or not a kernel geneve socket is there.
TEST(Decap, CriticalOptionIsDropped) {
  Dataplane dp;
  dp.tunnels();
  for (const Bytes& in :
       {geneve_from(kPeer4, kLocal4, kVni4, roce4().build())
            .geneve(kVni4, {0x01, 0x02, 0x83, 0x01, 0, 0, 0, 0}, RG_GENEVE_F_CRITICAL)
            .build(),
        geneve_from(kPeer6, kLocal6, kVni6, roce6().build())
            .geneve(kVni6, {}, RG_GENEVE_F_CRITICAL | RG_GENEVE_F_OAM)
            .build()}) {
    EXPECT_EQ(dp.xdp(in).ret, kXdpDrop);
  }
  EXPECT_EQ(dp.events(RG_DIR_INGRESS), (Events{{"geneve_critical", 2}}));
  EXPECT_TRUE(dp.qps().empty());
}

// The outer IPv4 header checksum covers its options too.
TEST(Decap, OuterIpv4OptionsAreAccepted) {
  Dataplane dp;
  dp.tunnels();
  Bytes inner = roce4().dscp(46).build();
  Bytes in = geneve_from(kPeer4, kLocal4, kVni4, inner).ip_options(record_route(9)).build();
  Verdict r = dp.xdp(in);
  EXPECT_EQ(r.ret, kXdpPass);
  EXPECT_EQ(hex(r.out), hex(delivered(inner, in)));
}

TEST(Decap, NonRoceInnerIsDecapsulated) {
  Dataplane dp;
  dp.tunnels();
  Bytes inner = PacketBuilder().ipv4("198.51.100.10", "198.51.100.20").tos(0x10).ip_proto(6)
                    .payload(20).build();
  Bytes in = geneve_from(kPeer4, kLocal4, kVni4, inner).build();
  Verdict r = dp.xdp(in);
  EXPECT_EQ(r.ret, kXdpPass);
  EXPECT_EQ(hex(r.out), hex(delivered(inner, in))) << "DSCP is only restored on RoCE";
  EXPECT_EQ(dp.events(RG_DIR_INGRESS), (Events{{"decapsulated", 1}}));
}

struct UntouchedGeneve {
  std::string name;
  Bytes in;
  std::string event;
};

std::vector<UntouchedGeneve> untouched_geneve_cases() {
  Bytes inner = roce4().build();
  std::vector<UntouchedGeneve> c;
  c.push_back({"UnknownPeer", geneve_from("192.0.2.77", kLocal4, kVni4, inner).build(),
               "unknown_tunnel"});
  c.push_back({"UnknownVni", geneve_from(kPeer4, kLocal4, kVni4 + 1, inner).build(),
               "unknown_tunnel"});
  c.push_back({"PeerOfOtherFamily", geneve_from("2001:db8::77", kLocal6, kVni6, inner).build(),
               "unknown_tunnel"});
  c.push_back({"VniOfOtherPeer", geneve_from(kPeer6, kLocal6, kVni4, inner).build(),
               "unknown_tunnel"});
  // Only what is addressed to this gateway's local address for the peer.
  c.push_back({"OtherOuterDestination", geneve_from(kPeer4, "192.0.2.9", kVni4, inner).build(),
               "geneve_not_local"});
  c.push_back({"OtherOuterDestinationIpv6",
               geneve_from(kPeer6, "2001:db8::9", kVni6, inner).build(), "geneve_not_local"});
  c.push_back({"PeerAddressAsDestination", geneve_from(kPeer4, kPeer4, kVni4, inner).build(),
               "geneve_not_local"});
  Bytes csum = geneve_from(kPeer4, kLocal4, kVni4, inner).build();
  csum[14 + 11] ^= 0x01;
  c.push_back({"BadOuterIpv4Checksum", csum, "geneve_bad_csum"});
  Bytes csum_opts = geneve_from(kPeer4, kLocal4, kVni4, inner).ip_options(record_route(2)).build();
  csum_opts[14 + 20 + 5] ^= 0x10;  // inside the options: only the checksum can tell
  c.push_back({"BadOuterIpv4ChecksumOverOptions", csum_opts, "geneve_bad_csum"});
  // RFC 8926 §3.4: a control packet's payload must not be forwarded.
  PacketBuilder control = geneve_from(kPeer4, kLocal4, kVni4, inner);
  control.geneve(kVni4, {}, RG_GENEVE_F_OAM);
  c.push_back({"ControlPacket", control.build(), "geneve_control"});
  PacketBuilder ipproto = geneve_from(kPeer4, kLocal4, kVni4, slice(inner, 14));
  ipproto.geneve(kVni4, {}, 0, 0x0800);
  c.push_back({"InnerIpNotEthernet", ipproto.build(), "geneve"});
  Bytes v1 = geneve_from(kPeer4, kLocal4, kVni4, inner).build();
  v1[14 + 20 + 8] |= 0x40;  // version 1
  c.push_back({"Version1", v1, "geneve"});
  Bytes optlen = geneve_from(kPeer4, kLocal4, kVni4, Bytes(8, 0)).build();
  optlen[14 + 20 + 8] = 63;  // 252 bytes of options that are not there
  c.push_back({"OptionsPastEnd", optlen, "geneve"});
  c.push_back({"ShortGeneveHeader", cut(geneve_from(kPeer4, kLocal4, kVni4, inner).build(),
                                        14 + 20 + 8 + 6),
               "geneve"});
  return c;
}

void PrintTo(const UntouchedGeneve& c, std::ostream* os) { *os << c.name; }

class DecapUntouched : public ::testing::TestWithParam<UntouchedGeneve> {};

TEST_P(DecapUntouched, LeftAsItCame) {
  const auto& tc = GetParam();
  Dataplane dp;
  dp.tunnels();
  Verdict r = dp.xdp(tc.in);
  EXPECT_EQ(r.ret, kXdpPass);
  EXPECT_EQ(hex(r.out), hex(tc.in));
  EXPECT_EQ(dp.events(RG_DIR_INGRESS), (Events{{tc.event, 1}}));
}

INSTANTIATE_TEST_SUITE_P(, DecapUntouched, ::testing::ValuesIn(untouched_geneve_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(Decap, DisabledLeavesGeneve) {
  rg_config cfg = test_config();
  cfg.flags &= ~RG_CFG_F_DECAP;
  Dataplane dp(cfg);
  dp.tunnels();
  Bytes in = geneve_from(kPeer4, kLocal4, kVni4, roce4().build()).build();
  EXPECT_EQ(dp.xdp(in).out, in);
}

// RFC 6040 §4.2, Figure 4, every outer x inner ECN combination.
struct EcnCase {
  uint8_t outer, inner;
  int want;  // resulting inner ECN, -1 = drop
};

std::vector<EcnCase> rfc6040_cases() {
  // rows: inner Not-ECT, ECT(0), ECT(1), CE; columns: outer Not-ECT, ECT(0), ECT(1), CE
  const int table[4][4] = {{0, 0, 0, -1}, {2, 2, 1, 3}, {1, 1, 1, 3}, {3, 3, 3, 3}};
  const uint8_t codepoint[4] = {0, 2, 1, 3};  // Not-ECT, ECT(0), ECT(1), CE
  std::vector<EcnCase> c;
  for (int i = 0; i < 4; ++i)
    for (int o = 0; o < 4; ++o) c.push_back({codepoint[o], codepoint[i], table[i][o]});
  return c;
}

std::string ecn_name(uint8_t e) {
  static const char* n[] = {"NotEct", "Ect1", "Ect0", "Ce"};
  return n[e];
}

void PrintTo(const EcnCase& c, std::ostream* os) {
  *os << "outer " << int(c.outer) << " inner " << int(c.inner);
}

class Rfc6040 : public ::testing::TestWithParam<EcnCase> {};

TEST_P(Rfc6040, DecapsulationEcn) {
  const EcnCase& tc = GetParam();
  Dataplane dp;
  dp.tunnels();
  PacketBuilder inner = roce6().dscp(46).ecn(tc.inner);
  Bytes in = geneve_from(kPeer4, kLocal4, kVni4, inner.build(), (46 << 2) | tc.outer).build();
  Verdict r = dp.xdp(in);
  Events e = dp.events(RG_DIR_INGRESS);
  if (tc.want < 0) {
    EXPECT_EQ(r.ret, kXdpDrop);
    EXPECT_EQ(e, (Events{{"decapsulated", 1}, {"ecn_drop", 1}}));
    return;
  }
  EXPECT_EQ(r.ret, kXdpPass);
  EXPECT_EQ(hex(r.out), hex(delivered(inner.ecn(tc.want).build(), in)));
  EXPECT_EQ(e["ecn_ce"], tc.want == 3 ? 1u : 0u);
  EXPECT_EQ(e.count("ecn_drop"), 0u);
}

INSTANTIATE_TEST_SUITE_P(, Rfc6040, ::testing::ValuesIn(rfc6040_cases()),
                         [](const auto& info) {
                           return "Outer" + ecn_name(info.param.outer) + "Inner" +
                                  ecn_name(info.param.inner);
                         });

TEST(Rfc6040Ipv4Inner, ChecksumStaysValidWhenCeIsSet) {
  Dataplane dp;
  dp.tunnels();
  PacketBuilder inner = roce4().dscp(46).ecn(2).ip_options({0x94, 0x04, 0, 0});
  Bytes in = geneve_from(kPeer6, kLocal6, kVni6, inner.build(), (46 << 2) | 3).build();
  Verdict r = dp.xdp(in);
  View v = parse(r.out);
  EXPECT_EQ(v.ecn(), 3);
  EXPECT_TRUE(v.ipv4_csum_ok);
  EXPECT_EQ(hex(r.out), hex(delivered(inner.ecn(3).build(), in)));
}

TEST(Rfc6040Ipv4Inner, CeAndDscpRepairTogether) {
  Dataplane dp;
  dp.tunnels();
  PacketBuilder inner = roce4().dscp(0).ecn(1);
  Bytes in = geneve_from(kPeer4, kLocal4, kVni4, inner.build(), 3).build();
  Verdict r = dp.xdp(in);
  EXPECT_EQ(hex(r.out), hex(delivered(inner.dscp(46).ecn(3).build(), in)));
  EXPECT_TRUE(parse(r.out).ipv4_csum_ok);
  EXPECT_EQ(dp.events(RG_DIR_INGRESS),
            (Events{{"decapsulated", 1}, {"roce_packets", 1}, {"dscp_repaired", 1},
                    {"ecn_ce", 1}, {"qp_new", 1}}));
}

// Whatever the outer frame was sent to (broadcast, multicast, another
// host's address on a flooded or shared segment), the inner frame reaches
// the stack addressed to this interface: the stack forwards nothing else.
struct OuterDestination {
  std::string name;
  Mac dst;
};

std::vector<OuterDestination> outer_destinations() {
  return {{"Broadcast", {0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
          {"Ipv4Multicast", {0x01, 0x00, 0x5e, 0x00, 0x00, 0x01}},
          {"Ipv6Multicast", {0x33, 0x33, 0x00, 0x00, 0x00, 0x01}},
          {"OtherHost", {0x02, 0x00, 0x00, 0x00, 0x0d, 0x01}}};
}

void PrintTo(const OuterDestination& d, std::ostream* os) { *os << d.name; }

class DecapDestinationMac
    : public ::testing::TestWithParam<std::tuple<OuterDestination, bool>> {};

TEST_P(DecapDestinationMac, InnerFrameIsAddressedToTheInterface) {
  const auto& [dest, v6] = GetParam();
  Dataplane dp;
  dp.tunnels();
  Bytes inner = (v6 ? roce6() : roce4()).dscp(46).build();
  PacketBuilder p = v6 ? geneve_from(kPeer6, kLocal6, kVni6, inner) : geneve_from(kPeer4, kLocal4, kVni4, inner);
  Bytes in = p.eth(dest.dst, kPeerMac).build();
  Verdict r = dp.xdp(in);
  EXPECT_EQ(r.ret, kXdpPass);
  ASSERT_GE(r.out.size(), 14u);
  Mac dst, src;
  std::copy(r.out.begin(), r.out.begin() + 6, dst.begin());
  std::copy(r.out.begin() + 6, r.out.begin() + 12, src.begin());
  EXPECT_EQ(dst, kDevMac);
  EXPECT_EQ(src, kPeerMac);
  EXPECT_EQ(hex(r.out), hex(delivered(inner, in)));
  EXPECT_EQ(dp.events(RG_DIR_INGRESS), (Events{{"decapsulated", 1}, {"roce_packets", 1}, {"qp_new", 1}}));
}

INSTANTIATE_TEST_SUITE_P(, DecapDestinationMac,
                         ::testing::Combine(::testing::ValuesIn(outer_destinations()), ::testing::Bool()),
                         [](const auto& info) {
                           return std::get<0>(info.param).name +
                                  (std::get<1>(info.param) ? "Ipv6Outer" : "Ipv4Outer");
                         });

// The loader rewrites the entry when the interface's address changes.
TEST(Decap, FollowsTheInterfaceAddress) {
  Dataplane dp;
  dp.tunnels();
  const Mac changed = {0x02, 0x00, 0x00, 0x00, 0x0a, 0x99};
  Bytes inner = roce4().dscp(46).build();
  Bytes in = geneve_from(kPeer4, kLocal4, kVni4, inner).build();
  EXPECT_EQ(hex(dp.xdp(in).out), hex(delivered(inner, in)));
  dp.iface(dev_ifindex(), changed);
  EXPECT_EQ(hex(dp.xdp(in).out), hex(delivered(inner, in, changed)));
}

// Without the interface's address there is nothing to address the inner
// frame to: Geneve on an interface the loader did not register is left alone.
TEST(Decap, UnregisteredInterfaceLeavesGeneve) {
  Dataplane dp;
  dp.tunnels();
  const uint32_t ifindex = static_cast<uint32_t>(dev_ifindex());
  ASSERT_EQ(bpf_map__delete_elem(dp.skel()->maps.rg_ifaces, &ifindex, sizeof(ifindex), 0), 0);
  Bytes in = geneve_from(kPeer4, kLocal4, kVni4, roce4().build()).build();
  Verdict r = dp.xdp(in);
  EXPECT_EQ(r.ret, kXdpPass);
  EXPECT_EQ(hex(r.out), hex(in));
  EXPECT_EQ(dp.events(RG_DIR_INGRESS), (Events{{"unknown_tunnel", 1}}));
}

TEST(Decap, OuterVlanTagIsStrippedToo) {
  Dataplane dp;
  dp.tunnels();
  Bytes inner = roce6().dscp(46).build();
  Bytes in = geneve_from(kPeer6, kLocal6, kVni6, inner).vlan(42).build();
  Verdict r = dp.xdp(in);
  EXPECT_EQ(r.ret, kXdpPass);
  EXPECT_EQ(hex(r.out), hex(delivered(inner, in)));
}

// ---------------------------------------------------------------------------
// PSN accounting.

struct Psn {
  Dataplane dp;
  explicit Psn(const rg_config& cfg = test_config()) : dp(cfg) {}
  // Sends one packet of dest QP qp through the hook.
  void send(Hook h, uint32_t psn, uint8_t opcode = kOpSendOnly, uint32_t qp = 0x11) {
    send(h, roce4(opcode, qp, psn));
  }
  void send(Hook h, const PacketBuilder& p) {
    Verdict r = run(dp, h, p.build());
    EXPECT_EQ(r.ret, pass_verdict(h));
  }
};

// A READ request of dma_len bytes at psn (RC, or XRC with its XRCETH).
PacketBuilder read_request(uint32_t psn, uint32_t dma_len, bool xrc = false) {
  if (!xrc) return roce4(kOpReadRequest, 0x11, psn).reth(0x1000, 0x99, dma_len).payload(0);
  Bytes ext = {0, 0, 0, 0x42};  // XRCETH: XRC SRQ 0x42
  const Bytes reth = {0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 0x99, static_cast<uint8_t>(dma_len >> 24),
                      static_cast<uint8_t>(dma_len >> 16), static_cast<uint8_t>(dma_len >> 8),
                      static_cast<uint8_t>(dma_len)};
  ext.insert(ext.end(), reth.begin(), reth.end());
  return roce4(kOpXrcReadRequest, 0x11, psn).payload(ext);
}

class PsnAccounting : public ::testing::TestWithParam<Hook> {};

TEST_P(PsnAccounting, InOrder) {
  Psn t;
  for (uint32_t psn = 10; psn < 20; ++psn) t.send(GetParam(), psn);
  rg_qp_dir d = t.dp.qp(dir_of(GetParam()), 0x11);
  EXPECT_EQ(d.packets, 10u);
  EXPECT_EQ(d.retransmits, 0u);
  EXPECT_EQ(d.gaps, 0u);
  EXPECT_EQ(d.lost, 0u);
  EXPECT_EQ(d.max_psn, 19u);
  EXPECT_EQ(d.flags & RG_QP_F_SEEN, RG_QP_F_SEEN);
  Events e = t.dp.events(dir_of(GetParam()));
  EXPECT_EQ(e.count("retransmits") + e.count("psn_gaps") + e.count("lost_estimate"), 0u);
  EXPECT_EQ(e["roce_packets"], 10u);
  EXPECT_EQ(e["qp_new"], 1u);
}

TEST_P(PsnAccounting, GapOfK) {
  Psn t;
  t.send(GetParam(), 10);
  t.send(GetParam(), 15);  // 11..14 missing
  t.send(GetParam(), 16);
  t.send(GetParam(), 18);  // 17 missing
  rg_qp_dir d = t.dp.qp(dir_of(GetParam()), 0x11);
  EXPECT_EQ(d.gaps, 2u);
  EXPECT_EQ(d.lost, 5u);
  EXPECT_EQ(d.retransmits, 0u);
  EXPECT_EQ(d.max_psn, 18u);
  Events e = t.dp.events(dir_of(GetParam()));
  EXPECT_EQ(e["psn_gaps"], 2u);
  EXPECT_EQ(e["lost_estimate"], 5u);
}

TEST_P(PsnAccounting, DuplicateAndRewind) {
  Psn t;
  for (uint32_t psn : {10u, 11u, 12u, 12u, 11u, 13u}) t.send(GetParam(), psn);
  rg_qp_dir d = t.dp.qp(dir_of(GetParam()), 0x11);
  EXPECT_EQ(d.retransmits, 2u);
  EXPECT_EQ(d.gaps, 0u);
  EXPECT_EQ(d.max_psn, 13u);
  EXPECT_EQ(t.dp.events(dir_of(GetParam()))["retransmits"], 2u);
}

TEST_P(PsnAccounting, WrapAround) {
  Psn t;
  for (uint32_t psn : {0xfffffdu, 0xfffffeu, 0xffffffu, 0u, 1u}) t.send(GetParam(), psn);
  rg_qp_dir d = t.dp.qp(dir_of(GetParam()), 0x11);
  EXPECT_EQ(d.retransmits, 0u);
  EXPECT_EQ(d.gaps, 0u);
  EXPECT_EQ(d.max_psn, 1u);
  t.send(GetParam(), 0xffffff);  // behind across the wrap
  t.send(GetParam(), 4);         // 2, 3 missing
  d = t.dp.qp(dir_of(GetParam()), 0x11);
  EXPECT_EQ(d.retransmits, 1u);
  EXPECT_EQ(d.gaps, 1u);
  EXPECT_EQ(d.lost, 2u);
  EXPECT_EQ(d.max_psn, 4u);
}

TEST_P(PsnAccounting, GapAcrossWrap) {
  Psn t;
  t.send(GetParam(), 0xfffffe);
  t.send(GetParam(), 2);  // 0xffffff, 0, 1 missing
  rg_qp_dir d = t.dp.qp(dir_of(GetParam()), 0x11);
  EXPECT_EQ(d.gaps, 1u);
  EXPECT_EQ(d.lost, 3u);
  EXPECT_EQ(d.retransmits, 0u);
}

// Serial arithmetic alone: no jump bound.
TEST_P(PsnAccounting, HalfWindowIsBehind) {
  rg_config cfg = test_config();
  cfg.psn_jump_max = 0;
  Psn t(cfg);
  t.send(GetParam(), 0);
  t.send(GetParam(), 0x800000);  // exactly half the space: not ahead
  rg_qp_dir d = t.dp.qp(dir_of(GetParam()), 0x11);
  EXPECT_EQ(d.retransmits, 1u);
  EXPECT_EQ(d.gaps, 0u);
  EXPECT_EQ(d.max_psn, 0u);
}

TEST_P(PsnAccounting, ReadRequestIsNotAGap) {
  Psn t;
  t.send(GetParam(), 10);
  t.send(GetParam(), 11, kOpReadRequest);  // responses take PSNs 11..18
  t.send(GetParam(), 19);
  rg_qp_dir d = t.dp.qp(dir_of(GetParam()), 0x11);
  EXPECT_EQ(d.gaps, 0u);
  EXPECT_EQ(d.lost, 0u);
  EXPECT_EQ(d.max_psn, 19u);
  EXPECT_EQ(d.flags & RG_QP_F_READ_PENDING, 0u);
  t.send(GetParam(), 22);  // a real gap after the READ is counted again
  d = t.dp.qp(dir_of(GetParam()), 0x11);
  EXPECT_EQ(d.gaps, 1u);
  EXPECT_EQ(d.lost, 2u);
}

// ... and with the default bound, half the space away is a new QP.
TEST_P(PsnAccounting, HalfWindowAwayIsAResync) {
  Psn t;
  t.send(GetParam(), 0);
  t.send(GetParam(), 0x800000);
  rg_qp_dir d = t.dp.qp(dir_of(GetParam()), 0x11);
  EXPECT_EQ(d.retransmits + d.gaps, 0u);
  EXPECT_EQ(d.max_psn, 0x800000u);
  EXPECT_EQ(t.dp.events(dir_of(GetParam()))["psn_resync"], 1u);
}

// rxe and rdma_cm reuse QP numbers quickly; the new QP starts at a random PSN.
TEST_P(PsnAccounting, RecreatedQpAheadIsAResyncNotLoss) {
  Psn t;
  for (uint32_t psn : {100u, 101u, 102u, 0x3a0000u, 0x3a0001u}) t.send(GetParam(), psn);
  rg_qp_dir d = t.dp.qp(dir_of(GetParam()), 0x11);
  EXPECT_EQ(d.gaps, 0u);
  EXPECT_EQ(d.lost, 0u);
  EXPECT_EQ(d.retransmits, 0u);
  EXPECT_EQ(d.max_psn, 0x3a0001u);
  Events e = t.dp.events(dir_of(GetParam()));
  EXPECT_EQ(e["psn_resync"], 1u);
  EXPECT_EQ(e.count("psn_gaps") + e.count("lost_estimate"), 0u);
  t.send(GetParam(), 0x3a0003);  // a real gap after the restart still counts
  d = t.dp.qp(dir_of(GetParam()), 0x11);
  EXPECT_EQ(d.gaps, 1u);
  EXPECT_EQ(d.lost, 1u);
}

TEST_P(PsnAccounting, RecreatedQpBehindIsAResyncNotRetransmits) {
  Psn t;
  for (uint32_t psn : {0x3a0000u, 0x3a0001u, 100u, 101u, 102u}) t.send(GetParam(), psn);
  rg_qp_dir d = t.dp.qp(dir_of(GetParam()), 0x11);
  EXPECT_EQ(d.retransmits, 0u);
  EXPECT_EQ(d.gaps, 0u);
  EXPECT_EQ(d.max_psn, 102u);
  EXPECT_EQ(t.dp.events(dir_of(GetParam()))["psn_resync"], 1u);
}

TEST_P(PsnAccounting, IdleQpRestartsTracking) {
  Psn t;
  for (uint32_t psn : {100u, 101u, 102u}) t.send(GetParam(), psn);
  t.dp.age_qps();
  t.send(GetParam(), 5000);  // within the jump bound: only the silence tells
  t.send(GetParam(), 5001);
  rg_qp_dir d = t.dp.qp(dir_of(GetParam()), 0x11);
  EXPECT_EQ(d.gaps, 0u);
  EXPECT_EQ(d.lost, 0u);
  EXPECT_EQ(d.retransmits, 0u);
  EXPECT_EQ(d.max_psn, 5001u);
  EXPECT_EQ(d.packets, 5u) << "the row is kept, only the PSN tracking restarts";
  EXPECT_EQ(t.dp.events(dir_of(GetParam()))["psn_resync"], 1u);
}

// FLUSH and ATOMIC WRITE (IBA 1.5, rxe since Linux 6.2), atomics and SEND
// with invalidate each take one request PSN.
TEST_P(PsnAccounting, EveryRequestOpcodeTakesAPsn) {
  Psn t;
  uint32_t psn = 10;
  for (uint8_t op : {kOpSendOnly, kOpRcFlush, kOpWriteOnly, kOpRcAtomicWrite, kOpRcCompareSwap,
                     kOpRcFetchAdd, kOpRcSendOnlyInvalidate, kOpRcFlush, kOpSendOnly})
    t.send(GetParam(), psn++, op);
  rg_qp_dir d = t.dp.qp(dir_of(GetParam()), 0x11);
  EXPECT_EQ(d.gaps, 0u);
  EXPECT_EQ(d.lost, 0u);
  EXPECT_EQ(d.retransmits, 0u);
  EXPECT_EQ(d.max_psn, psn - 1);
  t.send(GetParam(), psn - 1, kOpRcFlush);  // a resent FLUSH is a retransmission
  EXPECT_EQ(t.dp.qp(dir_of(GetParam()), 0x11).retransmits, 1u);
}

TEST_P(PsnAccounting, XrcRequestsAreTracked) {
  Psn t;
  t.send(GetParam(), 10, kOpXrcSendOnly);
  t.send(GetParam(), 11, kOpXrcFlush);
  t.send(GetParam(), 15, kOpXrcSendOnly);  // 12..14 missing
  t.send(GetParam(), 15, kOpXrcSendOnly);
  rg_qp_dir d = t.dp.qp(dir_of(GetParam()), 0x11);
  EXPECT_EQ(d.gaps, 1u);
  EXPECT_EQ(d.lost, 3u);
  EXPECT_EQ(d.retransmits, 1u);
  EXPECT_EQ(d.max_psn, 15u);
}

// A READ's responses take ceil(length / path MTU) PSNs; with the path MTU
// unknown the smallest (256) bounds the span, never more.
TEST_P(PsnAccounting, ReadForgivesOnlyItsResponses) {
  Psn t;
  t.send(GetParam(), 10);
  t.send(GetParam(), read_request(11, 64));
  t.send(GetParam(), read_request(11, 64));  // resent READ
  t.send(GetParam(), 40);                    // 12..39 missing
  rg_qp_dir d = t.dp.qp(dir_of(GetParam()), 0x11);
  EXPECT_EQ(d.retransmits, 1u);
  EXPECT_EQ(d.gaps, 1u);
  EXPECT_EQ(d.lost, 28u);
  EXPECT_EQ(d.max_psn, 40u);
}

TEST_P(PsnAccounting, ReadSpanFollowsDmaLength) {
  Psn t;
  t.send(GetParam(), 10);
  t.send(GetParam(), read_request(11, 4096));  // up to 16 responses: 11..26
  t.send(GetParam(), 27);
  t.send(GetParam(), read_request(28, 4097, true));  // XRC, up to 17: 28..44
  t.send(GetParam(), 50);                            // 45..49 missing
  t.send(GetParam(), read_request(51, 0));           // one response, no payload
  t.send(GetParam(), 52);
  rg_qp_dir d = t.dp.qp(dir_of(GetParam()), 0x11);
  EXPECT_EQ(d.gaps, 1u);
  EXPECT_EQ(d.lost, 5u);
  EXPECT_EQ(d.retransmits, 0u);
  EXPECT_EQ(d.max_psn, 52u);
}

TEST_P(PsnAccounting, AcksCnpsAndResponsesDoNotMovePsn) {
  Psn t;
  t.send(GetParam(), 10);
  t.send(GetParam(), 500, kOpAck);
  t.send(GetParam(), 0, kOpCnp);
  t.send(GetParam(), 900, kOpReadResponseOnly);
  t.send(GetParam(), 11);
  rg_qp_dir d = t.dp.qp(dir_of(GetParam()), 0x11);
  EXPECT_EQ(d.packets, 5u);
  EXPECT_EQ(d.gaps + d.retransmits, 0u);
  EXPECT_EQ(d.max_psn, 11u);
  EXPECT_EQ(d.cnp, 1u);
}

// One per-QP counter, whatever its width.
using QpField = uint64_t (*)(const rg_qp_dir&);
template <auto Member>
uint64_t qp_field(const rg_qp_dir& d) {
  return d.*Member;
}

struct NakCase {
  std::string name;
  uint8_t opcode, syndrome;
  uint8_t ecn;
  std::string event;
  QpField field;
};

void PrintTo(const NakCase& c, std::ostream* os) { *os << c.name; }

class NakAccounting : public ::testing::TestWithParam<std::tuple<NakCase, Hook>> {};

TEST_P(NakAccounting, CountedInCountersAndPerQp) {
  const auto& [tc, hook] = GetParam();
  Dataplane dp;
  PacketBuilder p = roce4(tc.opcode, 0x77, 5).ecn(tc.ecn);
  if (tc.opcode == kOpAck) p.aeth(tc.syndrome, 1);
  if (tc.opcode == kOpXrcAck) p.aeth(tc.syndrome, 1).payload(0);
  run(dp, hook, p.build());
  p.bth(bth(tc.opcode, 0x77, 6));
  run(dp, hook, p.build());
  EXPECT_EQ(dp.events(dir_of(hook))[tc.event], 2u);
  rg_qp_dir d = dp.qp(dir_of(hook), 0x77);
  EXPECT_EQ(tc.field(d), 2u);
  EXPECT_EQ(d.packets, 2u);
  EXPECT_EQ(d.retransmits, 0u) << "NAKs and CNPs carry no request PSN";
  for (QpField f : {&qp_field<&rg_qp_dir::nak_seq_err>, &qp_field<&rg_qp_dir::nak_other>,
                    &qp_field<&rg_qp_dir::rnr_nak>, &qp_field<&rg_qp_dir::cnp>, &qp_field<&rg_qp_dir::ecn_ce>})
    if (f != tc.field) {
      EXPECT_EQ(f(d), 0u);
    }
  rg_qp_dir other = dp.qp(hook == Hook::kTc ? RG_DIR_INGRESS : RG_DIR_EGRESS, 0x77);
  EXPECT_EQ(other.packets, 0u) << "the other direction is kept apart";
}

INSTANTIATE_TEST_SUITE_P(
    , NakAccounting,
    ::testing::Combine(
        ::testing::Values(
            NakCase{"NakSeqErr", kOpAck, kSynNakSeqErr, 0, "nak_seq_err", &qp_field<&rg_qp_dir::nak_seq_err>},
            NakCase{"NakInvalidRequest", kOpAck, 0x61, 0, "nak_other", &qp_field<&rg_qp_dir::nak_other>},
            NakCase{"NakRemoteOp", kOpAck, 0x63, 0, "nak_other", &qp_field<&rg_qp_dir::nak_other>},
            NakCase{"RnrNak", kOpAck, kSynRnrNak, 0, "rnr_nak", &qp_field<&rg_qp_dir::rnr_nak>},
            NakCase{"XrcNakSeqErr", kOpXrcAck, kSynNakSeqErr, 0, "nak_seq_err",
                    &qp_field<&rg_qp_dir::nak_seq_err>},
            NakCase{"XrcRnrNak", kOpXrcAck, kSynRnrNak, 0, "rnr_nak", &qp_field<&rg_qp_dir::rnr_nak>},
            NakCase{"Cnp", kOpCnp, 0, 0, "cnp", &qp_field<&rg_qp_dir::cnp>},
            NakCase{"EcnCe", kOpWriteOnly, 0, 3, "ecn_ce", &qp_field<&rg_qp_dir::ecn_ce>}),
        ::testing::Values(Hook::kTc, Hook::kXdp)),
    [](const auto& info) {
      return std::get<0>(info.param).name + hook_name(std::get<1>(info.param));
    });

INSTANTIATE_TEST_SUITE_P(, PsnAccounting, ::testing::Values(Hook::kTc, Hook::kXdp),
                         [](const auto& info) { return hook_name(info.param); });

// The thresholds are the loader's to set; 0 turns a rule off.
TEST(PsnResyncConfig, BoundsAreConfigurable) {
  rg_config cfg = test_config();
  cfg.psn_jump_max = 1u << 22;
  cfg.qp_idle_ms = 0;
  Psn t(cfg);
  for (uint32_t psn : {100u, 101u, 102u}) t.send(Hook::kXdp, psn);
  t.dp.age_qps();
  t.send(Hook::kXdp, 0x3a0000);
  rg_qp_dir d = t.dp.qp(RG_DIR_INGRESS, 0x11);
  EXPECT_EQ(d.gaps, 1u);
  EXPECT_EQ(d.lost, 3800985u) << "within a 2^22 bound the jump is a loss";
  EXPECT_EQ(t.dp.events(RG_DIR_INGRESS).count("psn_resync"), 0u);
}

// Every transport RoCE v2 carries is still RoCE after the BTH checks.
TEST(BthValidation, DefinedOpcodesOfEveryTransportAreRoce) {
  for (uint8_t op : {kOpSendOnly, kOpRcFlush, kOpRcAtomicWrite, kOpRcCompareSwap, kOpUcSendOnly,
                     kOpUdSendOnly, kOpXrcSendOnly, kOpXrcFlush}) {
    for (Hook h : {Hook::kTc, Hook::kXdp}) {
      Dataplane dp;
      PacketBuilder p = roce4(op).dscp(0);
      Verdict r = run(dp, h, p.build());
      EXPECT_EQ(hex(r.out), hex(p.dscp(46).build())) << "opcode " << int(op);
      EXPECT_EQ(dp.events(dir_of(h))["roce_packets"], 1u) << "opcode " << int(op);
    }
  }
}

TEST(QpTable, KeyedByAddressesAndQp) {
  Dataplane dp;
  dp.tc(roce4(kOpSendOnly, 1, 1).build());
  dp.tc(roce4(kOpSendOnly, 2, 1).build());
  dp.tc(roce6(kOpSendOnly, 1, 1).build());
  dp.xdp(roce4(kOpSendOnly, 1, 1).build());  // same key, other direction
  std::vector<QpRow> rows = dp.qps();
  ASSERT_EQ(rows.size(), 3u);
  for (const auto& row : rows) {
    if (row.key.family == AF_INET) {
      EXPECT_EQ(Bytes(row.key.src, row.key.src + 4), ip_addr("198.51.100.10"));
      EXPECT_EQ(Bytes(row.key.dst, row.key.dst + 4), ip_addr("198.51.100.20"));
      EXPECT_EQ(Bytes(row.key.src + 4, row.key.src + 16), Bytes(12, 0));
    } else {
      EXPECT_EQ(row.key.family, static_cast<uint32_t>(AF_INET6));
      EXPECT_EQ(Bytes(row.key.dst, row.key.dst + 16), ip_addr("2001:db8:5::20"));
    }
    EXPECT_NE(row.state.last_seen_ns[RG_DIR_EGRESS], 0u);
  }
  EXPECT_EQ(dp.events(RG_DIR_EGRESS)["qp_new"], 3u);
  EXPECT_EQ(dp.events(RG_DIR_INGRESS)["qp_new"], 1u) << "each direction of a QP is an entry of its own";
}

// The harness sizes the table for 1024 QP directions: 1536 slots in
// buckets of 8, each QP direction with two candidate buckets.
TEST(QpTable, HoldsEveryQpItIsSizedFor) {
  Dataplane dp;
  for (uint32_t qp = 1; qp <= 512; ++qp) {
    dp.tc(roce4(kOpSendOnly, qp, 1).build());
    dp.xdp(roce4(kOpSendOnly, qp, 1).build());
  }
  EXPECT_EQ(dp.events(RG_DIR_EGRESS)["qp_new"], 512u);
  EXPECT_EQ(dp.events(RG_DIR_INGRESS)["qp_new"], 512u);
  EXPECT_EQ(dp.events(RG_DIR_EGRESS)["qp_untracked"] + dp.events(RG_DIR_INGRESS)["qp_untracked"], 0u);
  size_t both = 0;
  for (const auto& row : dp.qps()) both += row.state.dir[RG_DIR_EGRESS].packets == 1 && row.state.dir[RG_DIR_INGRESS].packets == 1;
  EXPECT_EQ(both, 512u);
}

// Past what it holds, a table of QPs that all send keeps them and counts
// the packets of the QPs it has no slot for: none is evicted.
TEST(QpTable, FullOfActiveQpsKeepsThemAndCountsTheRestUntracked) {
  Dataplane dp;
  const uint32_t qps = 3000;
  for (uint32_t qp = 1; qp <= qps; ++qp) dp.tc(roce4(kOpSendOnly, qp, 1).build());
  const size_t entries = dp.qps().size();
  EXPECT_GE(entries, 1024u) << "at least what it is sized for";
  EXPECT_LE(entries, 1536u) << "at most a QP direction per slot";
  Events e = dp.events(RG_DIR_EGRESS);
  EXPECT_EQ(e["qp_new"], entries);
  EXPECT_EQ(e["qp_evicted"], 0u);
  EXPECT_EQ(e["qp_untracked"], qps - entries);
  EXPECT_EQ(e["roce_packets"], qps);
  // The first QP keeps its slot and counts on.
  dp.tc(roce4(kOpSendOnly, 1, 2).build());
  EXPECT_EQ(dp.qp(RG_DIR_EGRESS, 1).packets, 2u);
}

// A QP silent past the idle time gives its slot to a new one: the one
// silent the longest among the new QP's candidates.
TEST(QpTable, FullTableEvictsAQpSilentPastTheIdleTime) {
  Dataplane dp;
  const uint32_t qps = 3000;
  for (uint32_t qp = 1; qp <= qps; ++qp) dp.tc(roce4(kOpSendOnly, qp, 1).build());
  const size_t entries = dp.qps().size();
  const uint64_t untracked = dp.events(RG_DIR_EGRESS)["qp_untracked"];
  ASSERT_GT(untracked, 0u);
  dp.age_qps();
  // QPs beyond those tracked: each takes the slot of a silent one.
  uint32_t fresh = 0;
  for (uint32_t qp = qps + 1; qp <= qps + 16; ++qp, ++fresh) dp.tc(roce4(kOpSendOnly, qp, 7).build());
  Events e = dp.events(RG_DIR_EGRESS);
  EXPECT_EQ(e["qp_evicted"], fresh);
  EXPECT_EQ(e["qp_new"], entries + fresh);
  EXPECT_EQ(e["qp_untracked"], untracked) << "no packet of the new QPs went untracked";
  EXPECT_EQ(dp.qps().size(), entries) << "each took a slot, none added one";
  for (uint32_t qp = qps + 1; qp <= qps + 16; ++qp) EXPECT_EQ(dp.qp(RG_DIR_EGRESS, qp).packets, 1u) << qp;
}

TEST(QpTable, AccountingDisabledKeepsEventCountersOnly) {
  rg_config cfg = test_config();
  cfg.flags &= ~RG_CFG_F_ACCOUNT;
  Dataplane dp(cfg);
  dp.xdp(roce4(kOpCnp).build());
  EXPECT_TRUE(dp.qps().empty());
  EXPECT_EQ(dp.events(RG_DIR_INGRESS),
            (Events{{"roce_packets", 1}, {"cnp", 1}, {"dscp_repaired", 1}}));
}

TEST(QpTable, IngressCountsDecapsulatedPackets) {
  Dataplane dp;
  dp.tunnels();
  Bytes a = geneve_from(kPeer4, kLocal4, kVni4, roce4(kOpSendOnly, 9, 1).build()).build();
  Bytes b = geneve_from(kPeer4, kLocal4, kVni4, roce4(kOpSendOnly, 9, 4).build()).build();
  dp.xdp(a);
  dp.xdp(b);
  rg_qp_dir d = dp.qp(RG_DIR_INGRESS, 9);
  EXPECT_EQ(d.gaps, 1u);
  EXPECT_EQ(d.lost, 2u);
}

// ---------------------------------------------------------------------------
// One QP's packets arrive on several CPUs at once (RSS spreads flows, and on a
// gateway the egress and ingress hooks share the QP's entry): the per-QP
// counts must stay exact. Each thread is pinned to its own CPU and runs the
// program many times per BPF_PROG_TEST_RUN, so the runs overlap in time.

unsigned online_cpus() {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 1 ? static_cast<unsigned>(n) : 1;
}

void pin_to_cpu(unsigned cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu % online_cpus(), &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

// Runs body(thread index) on `threads` threads pinned to different CPUs.
void on_every_cpu(unsigned threads, const std::function<void(unsigned)>& body) {
  std::vector<std::thread> pool;
  std::vector<std::string> errors(threads);
  for (unsigned i = 0; i < threads; ++i)
    pool.emplace_back([&, i] {
      pin_to_cpu(i);
      try {
        body(i);
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  for (auto& t : pool) t.join();
  for (const auto& e : errors) ASSERT_EQ(e, "");
}

inline constexpr unsigned kConcurrentThreads = 4;  // more than CPUs is fine: they interleave
inline constexpr uint32_t kRepeat = 20000;

class ConcurrentQp : public ::testing::TestWithParam<Hook> {};

// Every thread sends the same PSN of one QP per round; rounds advance by 10.
// Whichever packet of a round comes first is the one jump (a gap of 9), every
// other packet of the round is at the highest PSN seen: a retransmission.
TEST_P(ConcurrentQp, CountsAreExact) {
  const uint32_t rounds = 5;
  Dataplane dp;
  std::barrier round_start(kConcurrentThreads);
  const size_t len = roce4().build().size();
  on_every_cpu(kConcurrentThreads, [&](unsigned) {
    for (uint32_t r = 0; r < rounds; ++r) {
      round_start.arrive_and_wait();
      Verdict v = run_repeated(dp, GetParam(), roce4(kOpSendOnly, 0x11, 100 + 10 * r).build(), kRepeat);
      if (v.ret != pass_verdict(GetParam())) throw std::runtime_error("verdict " + std::to_string(v.ret));
    }
  });
  const uint64_t per_round = uint64_t{kConcurrentThreads} * kRepeat;
  rg_qp_dir d = dp.qp(dir_of(GetParam()), 0x11);
  EXPECT_EQ(d.packets, rounds * per_round);
  EXPECT_EQ(d.bytes, rounds * per_round * len);
  EXPECT_EQ(d.retransmits, rounds * (per_round - 1));
  EXPECT_EQ(d.gaps, rounds - 1);
  EXPECT_EQ(d.lost, 9 * (rounds - 1));
  EXPECT_EQ(d.max_psn, 100 + 10 * (rounds - 1));
  Events e = dp.events(dir_of(GetParam()));
  EXPECT_EQ(e["roce_packets"], rounds * per_round);
  EXPECT_EQ(e["retransmits"], rounds * (per_round - 1));
  EXPECT_EQ(e["psn_gaps"], rounds - 1);
  EXPECT_EQ(e["lost_estimate"], 9 * (rounds - 1));
  EXPECT_EQ(e["qp_new"], 1u);
}

// All threads meet each new QP at the same moment: it is new once.
TEST_P(ConcurrentQp, NewQpCountedOnce) {
  const uint32_t qps = 400;
  Dataplane dp;
  std::barrier qp_start(kConcurrentThreads);
  on_every_cpu(kConcurrentThreads, [&](unsigned) {
    for (uint32_t qp = 1; qp <= qps; ++qp) {
      qp_start.arrive_and_wait();
      run(dp, GetParam(), roce4(kOpSendOnly, qp, 1).build());
    }
  });
  EXPECT_EQ(dp.events(dir_of(GetParam()))["qp_new"], qps);
  for (uint32_t qp : {1u, qps / 2, qps}) {
    rg_qp_dir d = dp.qp(dir_of(GetParam()), qp);
    EXPECT_EQ(d.packets, kConcurrentThreads);
    EXPECT_EQ(d.retransmits, kConcurrentThreads - 1);
  }
}

INSTANTIATE_TEST_SUITE_P(Hooks, ConcurrentQp, ::testing::Values(Hook::kTc, Hook::kXdp),
                         [](const auto& info) { return hook_name(info.param); });

// A gateway's two hooks meet the same QP at once: each direction's counts
// are exact and each direction's entry is created once.
TEST(ConcurrentQpHooks, EgressAndIngressEachCreateTheirEntryOnce) {
  Dataplane dp;
  on_every_cpu(2, [&](unsigned i) {
    run_repeated(dp, i == 0 ? Hook::kTc : Hook::kXdp, roce4(kOpSendOnly, 0x11, 100).build(), kRepeat);
  });
  for (rg_direction dir : {RG_DIR_EGRESS, RG_DIR_INGRESS}) {
    rg_qp_dir d = dp.qp(dir, 0x11);
    EXPECT_EQ(d.packets, kRepeat);
    EXPECT_EQ(d.retransmits, kRepeat - 1);
  }
  EXPECT_EQ(dp.events(RG_DIR_EGRESS)["qp_new"], 1u);
  EXPECT_EQ(dp.events(RG_DIR_INGRESS)["qp_new"], 1u);
  EXPECT_EQ(dp.qps().size(), 1u);
}

// ---------------------------------------------------------------------------

// The XDP gateway fast path (RG_CFG_F_XDP_FORWARD): a RoCE frame arriving
// on one attached device that the stack would forward out of another is
// forwarded by rg_xdp_ingress itself, and must leave exactly as the slow
// path would send it: forwarded by the kernel (TTL down by one, the next
// hop's MACs), then through rg_tc_egress on the device it went out of.

rg_config with_flags(rg_config c, uint32_t flags) {
  c.flags |= flags;
  return c;
}

rg_config forward_config() { return with_flags(test_config(), RG_CFG_F_XDP_FORWARD); }

// A harness data plane with the fast path on and both devices its targets.
struct ForwardPlane {
  Dataplane dp;
  explicit ForwardPlane(const rg_config& cfg = forward_config()) : dp(cfg) {
    dp.tunnels();
    dp.forward_to(dev_ifindex());
    dp.forward_to(other_dev_ifindex());
  }
};

// The LAN behind kOtherDev, where tunneled4/6's sources are.
inline constexpr const char* kLanNet4 = "198.51.100.0";
inline constexpr const char* kLanNet6 = "2001:db8:5::";

// The inner prefixes of the tunnel routes, routed by the kernel too: out
// of kDev towards the peer, where the tunnel starts.
// And the LAN's, behind kOtherDev, where the frames from_lan come from.
void route_remote_nets(KernelRoutes& routes, const char* via4 = kPeer4, const char* via6 = kPeer6) {
  routes.add("-4 route", std::string(kRemoteNet4) + "/24 via " + via4 + " dev " + kDev);
  routes.add("-6 route", std::string(kRemoteNet6) + "/48 via " + via6 + " dev " + kDev);
  routes.add("-4 route", std::string(kLanNet4) + "/25 via " + kOtherPeer4 + " dev " + kOtherDev);
  routes.add("-6 route", std::string(kLanNet6) + "/48 via " + kOtherPeer6 + " dev " + kOtherDev);
}

// inner (from a LAN host: tunneled4/6's sources) as a host behind kOtherDev hands it to this gateway, and as
// the kernel forwards it out of kDev (after the ingress program's repair).
PacketBuilder from_lan(PacketBuilder inner) { return inner.eth(kOtherDevMac, kOtherPeerMac).ttl(64); }
PacketBuilder forwarded(PacketBuilder inner, uint8_t dscp) {
  return inner.eth(kPeerMac, kDevMac).ttl(63).dscp(dscp);
}

Events without_forwarded(Events e) {
  e.erase("xdp_forwarded");
  return e;
}

TEST(XdpForward, EncapsulatesAsTheStackAndTcEgressWould) {
  KernelRoutes routes;
  route_remote_nets(routes);
  ForwardPlane f;
  Dataplane slow;
  slow.tunnels();
  uint64_t n = 0;
  for (const EncapCase& c : encap_cases()) {
    // IPv4 options are the stack's to act on when it forwards (record route
    // writes into them): that frame goes to the stack, in
    // LeavesWhatTheStackWouldNotForwardToIt.
    if (c.name == "Ipv4OptionsInner") continue;
    SCOPED_TRACE(c.name);
    const Verdict got = f.dp.xdp_at(from_lan(c.inner).build(), other_dev_ifindex());
    const Verdict want = slow.tc(forwarded(c.inner, c.want_dscp).build());
    ASSERT_TRUE(parse(want.out).geneve);
    EXPECT_EQ(got.ret, kXdpRedirect);
    EXPECT_EQ(hex(got.out), hex(want.out));
    ++n;
  }
  const Events egress = f.dp.events(RG_DIR_EGRESS);
  EXPECT_EQ(egress.at("xdp_forwarded"), n);
  EXPECT_EQ(egress.at("encapsulated"), n);
  EXPECT_EQ(without_forwarded(egress), slow.events(RG_DIR_EGRESS)) << "TC egress's counters, no more";
  EXPECT_EQ(f.dp.events(RG_DIR_INGRESS).at("roce_packets"), n) << "counted on arrival too, as at XDP today";
}

// The shield's copy is bpf_clone_redirect's, at TC egress: the fast path
// leaves a shielded peer's frames to the stack, and only that peer's.
TEST(XdpForward, LeavesAShieldedPeerToTcEgress) {
  KernelRoutes routes;
  route_remote_nets(routes);
  ForwardPlane f;
  f.dp.shield(kPeerSlot4, RG_PEER_F_SHIELD_CONTROL);
  const Bytes in = from_lan(tunneled4()).build();
  const Verdict r = f.dp.xdp_at(in, other_dev_ifindex());
  EXPECT_EQ(r.ret, kXdpPass);
  EXPECT_FALSE(parse(r.out).geneve) << "left to the stack, unencapsulated";
  EXPECT_EQ(f.dp.events(RG_DIR_EGRESS).count("xdp_forwarded"), 0u);
  f.dp.shield(kPeerSlot4, 0);
  EXPECT_EQ(f.dp.xdp_at(in, other_dev_ifindex()).ret, kXdpRedirect) << "unshielded again: forwarded";
  f.dp.peer_ctl(kPeerSlot4, 0, RG_PEER_F_SHIELD_ALL);
  EXPECT_EQ(f.dp.xdp_at(in, other_dev_ifindex()).ret, kXdpPass) << "shielded by \"auto\": left to TC egress";
}

// The congestion loop's phantom queue on the fast path: a frame the XDP
// program encapsulates goes through its peer's queue as it would at TC
// egress, and leaves byte for byte as TC egress marks it: CE on an
// ECN-capable inner header, IPv4 (checksum following) and IPv6 alike,
// Not-ECT and CE as they were; the queues count the same. Without a current
// decision it neither marks nor queues.
TEST(CongestionXdpForward, MarksThroughThePeersPhantomQueueAsTcEgress) {
  KernelRoutes routes;
  route_remote_nets(routes);
  ForwardPlane f(with_flags(forward_config(), RG_CFG_F_CONGESTION));
  Dataplane slow(with_flags(test_config(), RG_CFG_F_CONGESTION));
  slow.tunnels();
  rg_peer_cc cc = cc_of(kSlowDrain, 0, 1);
  for (uint32_t slot : {kPeerSlot4, kPeerSlot6}) {
    f.dp.peer_cc(slot, cc);
    slow.peer_cc(slot, cc);
  }
  for (bool v6 : {false, true}) {
    for (uint8_t ecn : {0, 1, 2, 3}) {
      SCOPED_TRACE(std::string(v6 ? "IPv6" : "IPv4") + " ECN " + std::to_string(ecn));
      const PacketBuilder inner = (v6 ? tunneled6() : tunneled4()).ecn(ecn);
      const Verdict got = f.dp.xdp_at(from_lan(inner).build(), other_dev_ifindex());
      const Verdict want = slow.tc(forwarded(inner, 46).build());
      ASSERT_EQ(got.ret, kXdpRedirect);
      EXPECT_EQ(hex(got.out), hex(want.out));
      const View in = parse_inner(got.out);
      ASSERT_TRUE(in.roce);
      EXPECT_EQ(in.ecn(), ecn == 1 || ecn == 2 ? 3 : ecn);
      EXPECT_TRUE(in.icrc_ok);
      if (!v6) {
        EXPECT_TRUE(in.ipv4_csum_ok);
      }
    }
  }
  for (uint32_t slot : {kPeerSlot4, kPeerSlot6}) {
    const rg_peer_pq got = f.dp.peer_pq(slot), want = slow.peer_pq(slot);
    EXPECT_EQ(got.packets, 4u);
    EXPECT_EQ(got.packets, want.packets);
    EXPECT_EQ(got.bytes, want.bytes);
    EXPECT_EQ(got.marked, 2u);
    EXPECT_EQ(got.marked, want.marked);
    EXPECT_EQ(got.not_ect, 2u);
    EXPECT_EQ(got.not_ect, want.not_ect);
  }
  // The daemon stopped renewing the decision: forwarded as it came, unqueued.
  cc.until_ns = 1;
  f.dp.peer_cc(kPeerSlot4, cc);
  const Verdict r = f.dp.xdp_at(from_lan(tunneled4().ecn(2)).build(), other_dev_ifindex());
  ASSERT_EQ(r.ret, kXdpRedirect);
  EXPECT_EQ(parse_inner(r.out).ecn(), 2);
  EXPECT_EQ(f.dp.peer_pq(kPeerSlot4).packets, 4u);
}

// The next-hop cache serves the fast path as it serves TC egress.
TEST(XdpForward, UsesTheNextHopCache) {
  KernelRoutes routes;
  route_remote_nets(routes);
  ForwardPlane f;
  NexthopLeases leases(bpf_map__fd(f.dp.skel()->maps.rg_nh_leases), harness_peers());
  leases.invalidate();
  set_nexthops(f.dp, kPeerSlot4, planted(leases.generation()));
  const Verdict r = f.dp.xdp_at(from_lan(tunneled4()).build(), other_dev_ifindex());
  EXPECT_EQ(r.ret, kXdpRedirect);
  View v = parse(r.out);
  ASSERT_TRUE(v.geneve);
  EXPECT_EQ(v.dst, kPlantedMac);
}

// With the sequence option the fast path numbers what it encapsulates as
// TC egress does: the same option, the same numbers (one CPU, so one
// stream in each object), the same bytes around it; only the timestamp and
// the stream (which CPU) are masked.
class XdpForwardOnOneCpu : public OnOneCpu {};

TEST_F(XdpForwardOnOneCpu, NumbersWhatItEncapsulatesAsTcEgress) {
  KernelRoutes routes;
  route_remote_nets(routes);
  Dataplane fast(with_flags(forward_config(), RG_CFG_F_TUNNEL_SEQ)),
      slow(with_flags(test_config(), RG_CFG_F_TUNNEL_SEQ));
  fast.tunnels();
  slow.tunnels();
  fast.forward_to(dev_ifindex());
  fast.forward_to(other_dev_ifindex());
  // Outer Ethernet, IPv4, UDP and Geneve: then the option's class, type,
  // length, stream (4), number (4) and timestamp (8).
  constexpr size_t kOpt = 14 + 20 + 8 + 8, kStream = kOpt + 4, kSent = kOpt + 12;
  auto masked = [](Bytes b) {
    std::fill(b.begin() + kStream, b.begin() + kStream + 4, 0);
    std::fill(b.begin() + kSent, b.begin() + kSent + 8, 0);
    return b;
  };
  for (uint32_t psn : {100u, 101u}) {
    SCOPED_TRACE(psn);
    const Verdict got = fast.xdp_at(from_lan(tunneled4(0x11, psn)).build(), other_dev_ifindex());
    const Verdict want = slow.tc(forwarded(tunneled4(0x11, psn), 46).build());
    EXPECT_EQ(got.ret, kXdpRedirect);
    ASSERT_EQ(got.out.size(), want.out.size()) << "the option is there";
    ASSERT_GT(got.out.size(), kSent + 8);
    EXPECT_EQ(hex(masked(got.out)), hex(masked(want.out)));
  }
}

// Decapsulated RoCE for a host behind the other device goes there directly,
// as the kernel would forward it: TTL down by one, that host's MAC.
TEST(XdpForward, SendsDecapsulatedRoceOnToTheLan) {
  KernelRoutes routes;
  route_remote_nets(routes);  // the inner sources: behind the tunnel, back by kDev
  ForwardPlane f;
  for (bool v6 : {false, true}) {
    SCOPED_TRACE(v6 ? "IPv6" : "IPv4");
    PacketBuilder inner = roce4();
    if (v6)
      inner.ipv6("2001:db8:6::20", kOtherPeer6).flow_label(0x12345);
    else
      inner.ipv4("203.0.113.20", kOtherPeer4);
    inner.eth(kPeerMac, kDevMac).ttl(20).dscp(0);
    const Bytes enc = geneve_from(kPeer4, kLocal4, kVni4, inner.build()).build();
    const Verdict r = f.dp.xdp_at(enc, dev_ifindex());
    EXPECT_EQ(r.ret, kXdpRedirect);
    EXPECT_EQ(hex(r.out), hex(inner.eth(kOtherPeerMac, kOtherDevMac).ttl(19).dscp(46).build()));
  }
  EXPECT_EQ(f.dp.events(RG_DIR_INGRESS).at("decapsulated"), 2u);
  EXPECT_EQ(f.dp.events(RG_DIR_EGRESS).at("xdp_forwarded"), 2u);
  EXPECT_EQ(f.dp.events(RG_DIR_EGRESS).count("encapsulated"), 0u);
}

// What the fast path cannot send as the slow path would goes to the stack
// exactly as the ingress program without it leaves it.
TEST(XdpForward, LeavesEverythingElseToTheStack) {
  struct Case {
    const char* name;
    PacketBuilder in;
    std::function<void(KernelRoutes&)> routes;
    uint16_t tunnel_mtu = 1500;
    bool targets = true;
  };
  auto plain = [](KernelRoutes& r) { route_remote_nets(r); };
  PacketBuilder tagged = from_lan(tunneled4());
  tagged.vlan(100);
  std::vector<Case> cases = {
      {"TtlRunsOut", from_lan(tunneled4()).ttl(1), plain},
      {"HopLimitRunsOut", from_lan(tunneled6()).ttl(1), plain},
      {"NoKernelRoute", from_lan(tunneled4()), [](KernelRoutes&) {}},
      {"NeighbourUnresolved", from_lan(tunneled4()), [](KernelRoutes& r) { route_remote_nets(r, kNoNeigh4, kNoNeigh6); }},
      {"OverTheTunnelMtu", from_lan(tunneled4().payload(1200)), plain, 1200},
      {"EgressDeviceNotATarget", from_lan(tunneled6()), plain, 1500, false},
      {"VlanTagged", tagged, plain},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    KernelRoutes routes;
    c.routes(routes);
    Dataplane fast(forward_config()), off;
    fast.tunnels(c.tunnel_mtu);
    off.tunnels(c.tunnel_mtu);
    if (c.targets) fast.forward_to(dev_ifindex());
    fast.forward_to(other_dev_ifindex());
    const Bytes in = c.in.build();
    const Verdict got = fast.xdp_at(in, other_dev_ifindex());
    const Verdict want = off.xdp_at(in, other_dev_ifindex());
    EXPECT_EQ(got.ret, kXdpPass);
    EXPECT_EQ(hex(got.out), hex(want.out));
    EXPECT_EQ(fast.events(RG_DIR_EGRESS), Events{}) << "nothing counted as sent";
    EXPECT_EQ(fast.events(RG_DIR_INGRESS), off.events(RG_DIR_INGRESS));
  }
}

// What the stack would not forward, the fast path does not either: it goes
// to the stack as it came, which drops it (or, where rp_filter is off,
// forwards a source it has no route back to by the same device).
TEST(XdpForward, LeavesWhatTheStackWouldNotForwardToIt) {
  struct Case {
    const char* name;
    PacketBuilder in;
  };
  const Mac other_host = {0x02, 0x00, 0x00, 0x00, 0xdd, 0x01};
  const Mac broadcast = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  std::vector<Case> cases = {
      {"AnotherHostsMac", from_lan(tunneled4()).eth(other_host, kOtherPeerMac)},
      {"BroadcastMac", from_lan(tunneled4()).eth(broadcast, kOtherPeerMac)},
      {"BadIpv4HeaderChecksum", from_lan(tunneled4()).ip_checksum(0x1234)},
      {"Ipv4Options", from_lan(tunneled4()).ip_options({0x01, 0x01, 0x01, 0x01})},
      {"LoopbackSource", from_lan(tunneled4()).ipv4("127.0.0.1", "203.0.113.20")},
      {"MulticastDestination", from_lan(tunneled4()).ipv4("198.51.100.10", "239.1.2.3")},
      {"SpoofedSource", from_lan(tunneled4()).ipv4("192.0.2.50", "203.0.113.20")},
      {"NoRouteBackToTheSource", from_lan(tunneled4()).ipv4("198.51.100.100", "203.0.113.20")},
      {"Ipv6LinkLocalSource", from_lan(tunneled6()).ipv6("fe80::10", "2001:db8:6::20")},
      {"Ipv6SpoofedSource", from_lan(tunneled6()).ipv6("2001:db8::50", "2001:db8:6::20")},
  };
  KernelRoutes routes;
  route_remote_nets(routes);
  routes.add("-4 route", std::string("198.51.100.100/32 dev lo"));  // blackholed back
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ForwardPlane f;
    Dataplane off;
    off.tunnels();
    const Bytes in = c.in.build();
    const Verdict got = f.dp.xdp_at(in, other_dev_ifindex());
    const Verdict want = off.xdp_at(in, other_dev_ifindex());
    EXPECT_EQ(got.ret, kXdpPass);
    EXPECT_EQ(hex(got.out), hex(want.out));
    EXPECT_EQ(f.dp.events(RG_DIR_EGRESS), Events{}) << "nothing counted as sent";
  }
  // The same frames as they should be are forwarded.
  ForwardPlane f;
  EXPECT_EQ(f.dp.xdp_at(from_lan(tunneled4()).build(), other_dev_ifindex()).ret, kXdpRedirect);
  EXPECT_EQ(f.dp.xdp_at(from_lan(tunneled6()).build(), other_dev_ifindex()).ret, kXdpRedirect);
}

// Where a VLAN tag can reach XDP outside the frame (a VLAN device on the
// interface, receive VLAN offload on), a tagged frame looks untagged to the
// program, and the stack would hand it to the VLAN device: every frame
// received there goes to the stack, as it came; where no tag can hide, the
// same frame is forwarded.
TEST(XdpForward, LeavesFramesToTheStackWhereAVlanTagCanHide) {
  KernelRoutes routes;
  route_remote_nets(routes);
  ForwardPlane f;
  f.dp.iface(other_dev_ifindex(), kOtherDevMac, RG_IFACE_F_VLAN_UNSEEN);
  Dataplane off;
  off.tunnels();
  for (const PacketBuilder& frame : {from_lan(tunneled4()), from_lan(tunneled6())}) {
    const Bytes in = frame.build();
    const Verdict got = f.dp.xdp_at(in, other_dev_ifindex());
    EXPECT_EQ(got.ret, kXdpPass);
    EXPECT_EQ(hex(got.out), hex(off.xdp_at(in, other_dev_ifindex()).out));
  }
  EXPECT_EQ(f.dp.events(RG_DIR_EGRESS), Events{}) << "nothing counted as sent";
  f.dp.iface(other_dev_ifindex(), kOtherDevMac);
  EXPECT_EQ(f.dp.xdp_at(from_lan(tunneled4()).build(), other_dev_ifindex()).ret, kXdpRedirect);
}

// Off (the default), RoCE that the kernel would forward is passed to it.
TEST(XdpForward, OffByDefault) {
  KernelRoutes routes;
  route_remote_nets(routes);
  Dataplane dp;
  dp.tunnels();
  dp.forward_to(dev_ifindex());
  dp.forward_to(other_dev_ifindex());
  const Bytes in = from_lan(tunneled4().dscp(46)).build();
  const Verdict r = dp.xdp_at(in, other_dev_ifindex());
  EXPECT_EQ(r.ret, kXdpPass);
  EXPECT_EQ(hex(r.out), hex(in));
  EXPECT_EQ(dp.events(RG_DIR_EGRESS), Events{});
}

TEST(Names, TableCoversEveryEventInOrder) {
  std::set<std::string_view> seen;
  for (int ev = 0; ev < RG_EV_MAX; ++ev) {
    const EventName& n = event_name(static_cast<rg_event>(ev));
    EXPECT_EQ(n.event, ev) << "row " << ev << " is out of order";
    EXPECT_FALSE(n.name.empty());
    EXPECT_FALSE(n.help.empty());
    EXPECT_TRUE(seen.insert(n.name).second) << "duplicate name " << n.name;
    EXPECT_EQ(event_from_name(n.name), static_cast<rg_event>(ev));
  }
  EXPECT_THROW(event_name(RG_EV_MAX), std::out_of_range);
}

}  // namespace
}  // namespace rg::test
