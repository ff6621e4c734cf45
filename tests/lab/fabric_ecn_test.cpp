// The far fabric's ECN marker (testbed/fabric/ecn.bpf.c, lab/fabric_ecn.h):
// it marks at the depths its profile says, and in a namespace it marks by
// the backlog of the class queue a packet joins, sampled from the kernel.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <linux/pkt_cls.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"
#include "lab/congestion.h"
#include "lab/fabric_ecn.h"
#include "lab/topology.h"
#include "packet.h"
#include "test_run.h"

namespace {

using namespace std::chrono_literals;
using rg::lab::FabricEcn;
using rg::lab::FabricEcnConfig;
using rg::test::Bytes;
using rg::test::PacketBuilder;

constexpr uint32_t kKmin = 10000, kKmax = 30000;
constexpr uint8_t kNotEct = 0, kEct1 = 1, kEct0 = 2, kCe = 3;

Bytes roce(int family, uint8_t dscp, uint8_t ecn) {
  PacketBuilder b;
  if (family == 4)
    b.ipv4("192.0.2.1", "203.0.113.1");
  else
    b.ipv6("2001:db8:1::1", "2001:db8:2::1").flow_label(0xabcde);
  rg::test::Bth bth{};
  bth.opcode = rg::test::kOpWriteOnly;
  bth.dest_qp = 0x12;
  bth.psn = 7;
  return b.dscp(dscp).ecn(ecn).udp(49152, rg::test::kRoceV2Port).bth(bth).payload(64).build();
}

struct Marked {
  bool marked = false;
  Bytes frame;
  rg::test::View out;
};

// One frame through the marker; whether it left CE where it came ECT.
Marked run_once(const FabricEcn& m, const Bytes& in) {
  Bytes out(in.size() + 64);
  const rg::test::TestRun r = rg::test::test_run_frame(m.prog_fd(), false, 1, in, out);
  EXPECT_EQ(r.err, 0);
  EXPECT_EQ(r.retval, static_cast<uint32_t>(TC_ACT_UNSPEC)) << "the marker never ends the filter chain";
  out.resize(r.size_out);
  Marked run;
  run.frame = out;
  run.out = rg::test::parse(out);
  run.marked = run.out.ecn() == kCe && rg::test::parse(in).ecn() != kCe;
  return run;
}

unsigned marks_of(const FabricEcn& m, const Bytes& in, unsigned n) {
  unsigned marked = 0;
  for (unsigned i = 0; i < n; ++i) marked += run_once(m, in).marked;
  return marked;
}

// Below Kmin nothing, at and above Kmax every ECT packet; the rest keep
// their bytes. The mark keeps the IPv4 header checksum right (checked by
// the packet library's own sum), the DSCP and the ICRC (which masks ECN).
TEST(FabricEcn, MarksNothingBelowKminAndEveryEctPacketAtKmax) {
  FabricEcn m(FabricEcnConfig{kKmin, kKmax, 0.2});
  const Bytes ect0 = roce(4, 0, kEct0);
  m.set_depth(RG_ECN_BEST_EFFORT, kKmin - 1);
  EXPECT_EQ(marks_of(m, ect0, 200), 0u);
  EXPECT_EQ(run_once(m, ect0).frame, ect0) << "left as it came";

  for (uint64_t depth : {uint64_t{kKmax}, uint64_t{kKmax} * 10}) {
    m.set_depth(RG_ECN_BEST_EFFORT, depth);
    EXPECT_EQ(marks_of(m, ect0, 200), 200u) << depth;
    EXPECT_EQ(marks_of(m, roce(4, 0, kEct1), 50), 50u) << "ECT(1) is ECN-capable too";
    const Marked at = run_once(m, ect0);
    EXPECT_EQ(at.out.ecn(), kCe);
    EXPECT_EQ(at.out.dscp(), 0);
    EXPECT_TRUE(at.out.ipv4_csum_ok);
    EXPECT_TRUE(at.out.icrc_ok);
    // Not-ECT is never marked; CE stays CE.
    const Bytes not_ect = roce(4, 0, kNotEct);
    EXPECT_EQ(run_once(m, not_ect).out.tos, 0) << "Not-ECT left alone";
    EXPECT_EQ(run_once(m, roce(4, 0, kCe)).out.ecn(), kCe);
  }
  const auto s = m.stats().of[RG_ECN_BEST_EFFORT];
  EXPECT_EQ(s[RG_ECN_BELOW_KMIN].ect, 201u);
  EXPECT_EQ(s[RG_ECN_BELOW_KMIN].marked, 0u);
  EXPECT_EQ(s[RG_ECN_BELOW_KMIN].expected, 0.0);
  EXPECT_EQ(s[RG_ECN_AT_KMAX].ect, 2u * (200 + 50 + 1));
  EXPECT_EQ(s[RG_ECN_AT_KMAX].marked, s[RG_ECN_AT_KMAX].ect);
  EXPECT_EQ(s[RG_ECN_AT_KMAX].expected, static_cast<double>(s[RG_ECN_AT_KMAX].ect));
  EXPECT_EQ(s[RG_ECN_AT_KMAX].not_ect, 2u);
  EXPECT_EQ(s[RG_ECN_AT_KMAX].ce, 2u);
  EXPECT_EQ(m.stats().of[RG_ECN_PRIORITY][RG_ECN_AT_KMAX].ect, 0u);
}

// Between Kmin and Kmax the probability rises linearly to Pmax: half-way
// with Pmax 1 it is 1/2. The program sums each packet's probability (the
// expected marks, exactly 2000 of 4000 here) and the marks it drew lie
// within 9.5 standard deviations of it (a binomial's, 31.6): a random
// failure has a probability below 1e-20.
TEST(FabricEcn, BetweenKminAndKmaxMarksWithTheProbabilityOfItsLine) {
  FabricEcn m(FabricEcnConfig{kKmin, kKmax, 1.0});
  m.set_depth(RG_ECN_BEST_EFFORT, (kKmin + kKmax) / 2);
  const unsigned marked = marks_of(m, roce(4, 0, kEct0), 4000);
  EXPECT_GE(marked, 1700u);
  EXPECT_LE(marked, 2300u);
  // A quarter of the way at Pmax 0.5: 1/8.
  FabricEcn q(FabricEcnConfig{kKmin, kKmax, 0.5});
  q.set_depth(RG_ECN_BEST_EFFORT, kKmin + (kKmax - kKmin) / 4);
  const unsigned eighth = marks_of(q, roce(4, 0, kEct0), 4000);
  EXPECT_GE(eighth, 500u - 200);
  EXPECT_LE(eighth, 500u + 200);
  const auto s = m.stats().of[RG_ECN_BEST_EFFORT][RG_ECN_BETWEEN];
  EXPECT_EQ(s.ect, 4000u);
  EXPECT_EQ(s.marked, marked);
  EXPECT_EQ(s.expected, 2000.0);
  EXPECT_EQ(q.stats().of[RG_ECN_BEST_EFFORT][RG_ECN_BETWEEN].expected, 500.0);
}

// DSCP 46 joins the priority class and is marked by its depth alone; IPv6
// gets CE in its traffic class with the DSCP and flow label kept.
TEST(FabricEcn, EachClassIsMarkedByItsOwnQueueAndIpv6ByItsTrafficClass) {
  FabricEcn m(FabricEcnConfig{kKmin, kKmax, 0.2});
  m.set_depth(RG_ECN_BEST_EFFORT, kKmax);
  m.set_depth(RG_ECN_PRIORITY, 0);
  for (int family : {4, 6}) {
    SCOPED_TRACE(family);
    EXPECT_EQ(marks_of(m, roce(family, 46, kEct0), 100), 0u) << "the priority queue is empty";
    const Marked be = run_once(m, roce(family, 10, kEct0));
    EXPECT_TRUE(be.marked);
    EXPECT_EQ(be.out.dscp(), 10);
    if (family == 6) {
      EXPECT_EQ(be.out.flow_label, 0xabcdeu);
    }
    EXPECT_TRUE(be.out.icrc_ok);
  }
  m.set_depth(RG_ECN_PRIORITY, kKmax);
  m.set_depth(RG_ECN_BEST_EFFORT, 0);
  EXPECT_EQ(marks_of(m, roce(6, 46, kEct0), 100), 100u);
  EXPECT_EQ(marks_of(m, roce(4, 0, kEct0), 100), 0u);
  const auto s = m.stats();
  EXPECT_EQ(s.of[RG_ECN_PRIORITY][RG_ECN_BELOW_KMIN].ect, 200u);
  EXPECT_EQ(s.of[RG_ECN_PRIORITY][RG_ECN_AT_KMAX].marked, 100u);
  EXPECT_EQ(s.marked(RG_ECN_PRIORITY), 100u);
  EXPECT_EQ(s.marked(RG_ECN_BEST_EFFORT), 2u);
}

TEST(FabricEcn, ProfilesAreParsedAndRefused) {
  const auto on = rg::lab::parse_fabric_ecn("on", 32);
  ASSERT_TRUE(on);
  EXPECT_EQ(on->kmin_bytes, 32u * 1514 / 4);
  EXPECT_EQ(on->kmax_bytes, 32u * 1514 * 3 / 4);
  EXPECT_EQ(on->pmax, 0.2);
  EXPECT_FALSE(rg::lab::parse_fabric_ecn("off", 32));
  const auto given = rg::lab::parse_fabric_ecn("5000,200000,0.01", 32);
  ASSERT_TRUE(given);
  EXPECT_EQ(given->kmin_bytes, 5000u);
  EXPECT_EQ(given->kmax_bytes, 200000u);
  EXPECT_EQ(given->pmax, 0.01);
  for (const char* bad : {"", "yes", "5000,200000", "5000,200000,0.01,1", "200000,5000,0.1", "5000,5000,0.1",
                          "5000,200000,0", "5000,200000,1.5", "5000,200000,0.1x", "-1,200000,0.1"})
    EXPECT_THROW(rg::lab::parse_fabric_ecn(bad, 32), rg::Error) << bad;
  EXPECT_THROW(FabricEcn(FabricEcnConfig{kKmax, kKmin, 0.2}), rg::Error);
}

// A UDP socket in netns.
int udp_socket_in(const std::string& netns) {
  rg::lab::NetnsGuard in(netns);
  return socket(AF_INET, SOCK_DGRAM, 0);
}

// In the lab's namespaces, at gateway B's port to host B with the lab's
// scheduler at 2 Mbit/s (so a burst queues): gateway B sends ECT(0)
// datagrams to host B, three best effort and one DSCP 46 in turn, each
// after one sample of the class backlogs (the sampler's one step, taken
// here so the depth each packet met is known). The best-effort queue grows
// past Kmax, the priority queue less; host B reads each datagram's ECN:
// nothing marked that met less than Kmin in its class's queue, every one
// that met Kmax or more. The marks host B sees are the ones the program
// counted.
TEST(FabricEcnNetns, MarksByTheSampledBacklogOfTheClassQueueEachPacketJoins) {
  rg::lab::Topology topo("rgecn");
  rg::lab::HtbScheduler sched(topo, rg::lab::Node::kGatewayB, rg::lab::kFarSidePort, {2, 1, 200},
                              rg::lab::PriorityMatch::kDscp46);
  const uint32_t kmin = 8000, kmax = 24000;
  FabricEcn m(FabricEcnConfig{kmin, kmax, 0.5});
  m.attach(topo.netns(rg::lab::Node::kGatewayB), rg::lab::kFarSidePort,
           {rg::lab::HtbScheduler::kPriorityClassId, rg::lab::HtbScheduler::kBestEffortClassId}, false);

  const int rx = udp_socket_in(topo.netns(rg::lab::Node::kHostB));
  const int tx = udp_socket_in(topo.netns(rg::lab::Node::kGatewayB));
  ASSERT_GE(rx, 0);
  ASSERT_GE(tx, 0);
  const int one = 1;
  ASSERT_EQ(setsockopt(rx, IPPROTO_IP, IP_RECVTOS, &one, sizeof(one)), 0);
  const int rcvbuf = 4 << 20;
  setsockopt(rx, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(40000);
  inet_pton(AF_INET, topo.addr().host_b4, &to.sin_addr);
  sockaddr_in any = to;
  any.sin_addr.s_addr = htonl(INADDR_ANY);
  ASSERT_EQ(bind(rx, reinterpret_cast<const sockaddr*>(&any), sizeof(any)), 0);

  constexpr unsigned kPackets = 80;
  struct Sent {
    bool priority;
    uint64_t depth;
  };
  std::vector<Sent> sent;
  std::array<uint64_t, RG_ECN_CLASSES> deepest{};
  for (unsigned i = 0; i < kPackets; ++i) {
    const bool priority = i % 4 == 3;
    const auto depths = m.sample_once();
    const uint64_t met = depths[priority ? RG_ECN_PRIORITY : RG_ECN_BEST_EFFORT];
    for (size_t c = 0; c < RG_ECN_CLASSES; ++c) deepest[c] = std::max(deepest[c], depths[c]);
    const int tos = (priority ? 46 << 2 : 0) | kEct0;
    ASSERT_EQ(setsockopt(tx, IPPROTO_IP, IP_TOS, &tos, sizeof(tos)), 0);
    std::vector<uint8_t> payload(1000, 0);
    std::memcpy(payload.data(), &i, sizeof(i));
    ASSERT_EQ(sendto(tx, payload.data(), payload.size(), 0, reinterpret_cast<const sockaddr*>(&to), sizeof(to)),
              static_cast<ssize_t>(payload.size()))
        << strerror(errno);
    sent.push_back({priority, met});
  }
  EXPECT_GE(deepest[RG_ECN_BEST_EFFORT], kmax) << "the best-effort queue grew past Kmax";
  // A quarter of the packets, and served first: the priority queue stays
  // shorter, and its packets are judged by it.
  EXPECT_LT(deepest[RG_ECN_PRIORITY], deepest[RG_ECN_BEST_EFFORT]);

  // 80 kB at 2 Mbit/s drains in about 0.3 s; bounded at 10 s.
  unsigned received = 0, marked = 0, below = 0, at_kmax = 0;
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (received < kPackets && std::chrono::steady_clock::now() < until) {
    pollfd p{rx, POLLIN, 0};
    if (poll(&p, 1, 200) <= 0) continue;
    uint8_t buf[2048];
    char control[64];
    iovec iov{buf, sizeof(buf)};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = recvmsg(rx, &msg, 0);
    ASSERT_GE(n, static_cast<ssize_t>(sizeof(unsigned)));
    unsigned index = 0;
    std::memcpy(&index, buf, sizeof(index));
    ASSERT_LT(index, kPackets);
    int tos = -1;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
      if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS) tos = *reinterpret_cast<uint8_t*>(CMSG_DATA(c));
    ASSERT_GE(tos, 0);
    ++received;
    const bool ce = (tos & 3) == kCe;
    marked += ce;
    const Sent& s = sent[index];
    EXPECT_EQ(tos >> 2, s.priority ? 46 : 0) << index;
    if (s.depth < kmin) {
      ++below;
      EXPECT_FALSE(ce) << "packet " << index << " met " << s.depth << " bytes, below Kmin";
    } else if (s.depth >= kmax) {
      ++at_kmax;
      EXPECT_TRUE(ce) << "packet " << index << " met " << s.depth << " bytes, at or above Kmax";
    }
  }
  close(rx);
  close(tx);
  EXPECT_EQ(received, kPackets);
  EXPECT_GT(below, 0u);
  EXPECT_GT(at_kmax, 0u);
  const auto st = m.stats();
  EXPECT_EQ(st.marked(RG_ECN_PRIORITY) + st.marked(RG_ECN_BEST_EFFORT), marked);
  EXPECT_EQ(st.of[RG_ECN_PRIORITY][RG_ECN_AT_KMAX].marked + st.of[RG_ECN_BEST_EFFORT][RG_ECN_AT_KMAX].marked, at_kmax);
  EXPECT_EQ(st.of[RG_ECN_PRIORITY][RG_ECN_BELOW_KMIN].marked + st.of[RG_ECN_BEST_EFFORT][RG_ECN_BELOW_KMIN].marked, 0u);
  EXPECT_EQ(st.of[RG_ECN_PRIORITY][RG_ECN_BELOW_KMIN].ect + st.of[RG_ECN_BEST_EFFORT][RG_ECN_BELOW_KMIN].ect, below);
}

}  // namespace
