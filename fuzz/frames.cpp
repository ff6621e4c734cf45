#include "frames.h"

#include <algorithm>
#include <array>
#include <stdexcept>

#include "model.h"

namespace rg::fuzz {
namespace {

using test::Bth;
using test::PacketBuilder;

template <typename T, size_t N>
const T& pick(std::mt19937& rng, const std::array<T, N>& a) {
  return a[rng() % N];
}

bool chance(std::mt19937& rng, unsigned percent) { return rng() % 100 < percent; }

// Inner destinations: each tunnel route (both halves of the IPv4 /24), the
// no-route and no-neighbour peers, and addresses outside every route.
const std::array<const char*, 5> kDst4 = {"203.0.113.5", "203.0.113.200", "198.51.100.7",
                                          "192.0.2.50", "10.0.0.1"};
const std::array<const char*, 4> kDst6 = {"2001:db8:6::5", "2001:db8:7::5", "2001:db8:9::1",
                                          "fe80::1"};
const std::array<const char*, 2> kSrc4 = {"192.0.2.10", "198.51.100.10"};
const std::array<const char*, 2> kSrc6 = {"2001:db8:1::10", "2001:db8:2::10"};
// Outer sources of Geneve: the configured peers, ourselves, and a stranger.
const std::array<const char*, 3> kGeneveSrc4 = {"192.0.2.2", "192.0.2.1", "192.0.2.99"};
const std::array<const char*, 3> kGeneveSrc6 = {"2001:db8::2", "2001:db8::1", "2001:db8::99"};
const std::array<uint32_t, 4> kVnis = {0x00abcd, 0x123456, 0x000777, 0x000001};

const std::array<uint8_t, 12> kOpcodes = {0x00, 0x04, 0x06, 0x0a, 0x0c, 0x10,
                                          0x11, 0x11, 0x12, 0x24, 0x81, 0x64};
const std::array<uint8_t, 6> kSyndromes = {0x1f, 0x00, 0x2e, 0x60, 0x62, 0x7f};

Bytes roce_frame(std::mt19937& rng) {
  PacketBuilder b;
  const unsigned tags = chance(rng, 80) ? 0 : rng() % 3 + 1;  // three: over the limit
  for (unsigned i = 0; i < tags; ++i)
    b.vlan(rng() % 4095 + 1, i == 0 && tags > 1 ? test::kEthQinQ : test::kEthVlan);
  const bool v6 = chance(rng, 40);
  if (v6) {
    b.ipv6(pick(rng, kSrc6), pick(rng, kDst6)).flow_label(rng());
    if (chance(rng, 5)) b.ipv6_ext(60);
  } else {
    b.ipv4(pick(rng, kSrc4), pick(rng, kDst4));
    if (chance(rng, 15)) b.ip_options(Bytes(rng() % 41 & ~3u, 0x01));
    if (chance(rng, 5)) b.fragment(true, rng() % 8);
  }
  b.tos(static_cast<uint8_t>(rng()));
  if (chance(rng, 5)) {
    b.ip_proto(6).payload(20);
    return b.build();
  }
  const uint16_t dport = chance(rng, 90) ? test::kRoceV2Port : static_cast<uint16_t>(rng());
  b.udp(49152 + rng() % 16384, dport);
  Bth bth;
  bth.opcode = chance(rng, 90) ? pick(rng, kOpcodes) : static_cast<uint8_t>(rng());
  // A few QPs and a narrow PSN window: the accounting sees in-order
  // packets, gaps, duplicates and wraps rather than only noise.
  bth.dest_qp = chance(rng, 90) ? 0x11 + rng() % 8 : rng() & 0xffffff;
  bth.psn = chance(rng, 90) ? (0xfffff0 + rng() % 48) & 0xffffff : rng() & 0xffffff;
  b.bth(bth);
  if (bth.opcode == test::kOpAck) b.aeth(pick(rng, kSyndromes), rng() & 0xffffff);
  if (bth.opcode == test::kOpReadRequest) b.reth(rng(), rng(), rng() % 65536);
  b.payload(chance(rng, 70) ? rng() % 64 : rng() % 1400, static_cast<uint8_t>(rng()));
  return b.build();
}

Bytes geneve_frame(std::mt19937& rng) {
  Bytes inner = chance(rng, 90) ? roce_frame(rng)
                                : PacketBuilder().ethertype(test::kEthArp).payload(28).build();
  PacketBuilder b;
  b.eth(test::mac("02:00:00:00:fa:01"), test::mac("02:00:00:00:fb:02"));
  const bool v6 = chance(rng, 35);
  if (v6)
    b.ipv6(pick(rng, kGeneveSrc6), "2001:db8::1");
  else
    b.ipv4(pick(rng, kGeneveSrc4), "192.0.2.1");
  b.tos(static_cast<uint8_t>(rng()));  // every outer/inner ECN pairing of RFC 6040
  Bytes opts;
  if (chance(rng, 20)) opts.assign((rng() % 4 + 1) * 4, 0x5a);
  uint8_t flags = chance(rng, 10) ? (chance(rng, 50) ? 0x40 : 0x80) : 0;
  b.udp(49152 + rng() % 16384, test::kGenevePort)
      .geneve(v6 ? 0x123456 : pick(rng, kVnis), opts, flags)
      .payload(inner);
  return b.build();
}

}  // namespace

Bytes random_frame(std::mt19937& rng, Target target) {
  Bytes f = target == Target::kXdpIngress && chance(rng, 50) ? geneve_frame(rng)
                                                             : roce_frame(rng);
  if (f.size() > kMaxFrame) f.resize(kMaxFrame);
  return f;
}

void break_one_field(std::mt19937& rng, Bytes& f) {
  Headers h = classify(f);
  // Offsets of the fields every exit of the parser depends on.
  std::vector<size_t> at = {12, 13};
  if (h.l3) {
    at.insert(at.end(), {h.l3, h.l3 + 1});
    if (h.family == 4) at.insert(at.end(), {h.l3 + 6, h.l3 + 7, h.l3 + 9, h.l3 + 10});
    if (h.family == 6) at.insert(at.end(), {h.l3 + 4, h.l3 + 6});
  }
  if (h.l4) at.insert(at.end(), {h.l4 + 2, h.l4 + 3, h.l4 + 4, h.l4 + 5});
  if (h.cls == Class::kRoce) at.insert(at.end(), {h.l5, h.l5 + 9, h.l5 + 11, h.l5 + 12});
  if (h.cls == Class::kGeneve)
    at.insert(at.end(), {h.l5, h.l5 + 1, h.l5 + 2, h.l5 + 3, h.l5 + 6});
  switch (rng() % 4) {
    case 0:  // cut anywhere, most often inside the headers
      f.resize(rng() % (chance(rng, 80) ? std::min<size_t>(f.size(), 100) : f.size() + 1));
      break;
    case 1: {  // one field to a random value
      size_t i = at[rng() % at.size()];
      if (i < f.size()) f[i] = static_cast<uint8_t>(rng());
      break;
    }
    case 2: {  // one bit
      size_t i = at[rng() % at.size()];
      if (i < f.size()) f[i] ^= static_cast<uint8_t>(1u << (rng() % 8));
      break;
    }
    default:  // left valid
      break;
  }
}

std::vector<std::pair<std::string, Bytes>> seed_frames(Target target) {
  std::vector<std::pair<std::string, Bytes>> s;
  auto roce4 = [](const char* dst) {
    return PacketBuilder().ipv4("192.0.2.10", dst).udp(49152, test::kRoceV2Port);
  };
  Bth bth;
  s.emplace_back("roce4_send", roce4("192.0.2.50").bth(bth).payload(64).build());
  s.emplace_back("roce4_ect0", roce4("192.0.2.50").ecn(2).bth(bth).payload(16).build());
  s.emplace_back("roce4_ce", roce4("192.0.2.50").ecn(3).bth(bth).build());
  s.emplace_back("roce4_options",
                 roce4("192.0.2.50").ip_options(Bytes(8, 1)).bth(bth).payload(8).build());
  s.emplace_back("roce4_vlan", roce4("203.0.113.5").vlan(100).bth(bth).build());
  s.emplace_back("roce4_qinq",
                 roce4("203.0.113.5").vlan(10, test::kEthQinQ).vlan(20).bth(bth).build());
  s.emplace_back("roce4_tunnel", roce4("203.0.113.5").ecn(1).bth(bth).payload(256).build());
  s.emplace_back("roce4_tunnel_v6_outer", roce4("203.0.113.200").bth(bth).payload(32).build());
  s.emplace_back("roce4_no_route_peer", roce4("198.51.100.7").bth(bth).build());
  s.emplace_back("roce4_oversize", roce4("203.0.113.5").bth(bth).payload(1460).build());
  Bth cnp;
  cnp.opcode = test::kOpCnp;
  s.emplace_back("roce4_cnp", roce4("192.0.2.50").bth(cnp).payload(16).build());
  Bth ack;
  ack.opcode = test::kOpAck;
  s.emplace_back("roce4_ack", roce4("192.0.2.50").bth(ack).aeth(test::kSynAck, 1).build());
  s.emplace_back("roce4_nak_seq",
                 roce4("192.0.2.50").bth(ack).aeth(test::kSynNakSeqErr, 1).build());
  s.emplace_back("roce4_rnr", roce4("192.0.2.50").bth(ack).aeth(test::kSynRnrNak, 1).build());
  s.emplace_back("roce4_ack_no_aeth", roce4("192.0.2.50").bth(ack).icrc(false).build());
  Bth read;
  read.opcode = test::kOpReadRequest;
  s.emplace_back("roce4_read", roce4("192.0.2.50").bth(read).reth(0x1000, 7, 4096).build());
  s.emplace_back("roce4_fragment", roce4("192.0.2.50").fragment(true, 0).bth(bth).build());
  s.emplace_back("roce6_send", PacketBuilder()
                                   .ipv6("2001:db8:1::10", "2001:db8:9::1")
                                   .flow_label(0x12345)
                                   .udp(49152, test::kRoceV2Port)
                                   .bth(bth)
                                   .payload(64)
                                   .build());
  s.emplace_back("roce6_tunnel", PacketBuilder()
                                     .ipv6("2001:db8:1::10", "2001:db8:6::5")
                                     .tos(0x02)
                                     .udp(49152, test::kRoceV2Port)
                                     .bth(bth)
                                     .build());
  s.emplace_back("roce6_tunnel_no_neigh", PacketBuilder()
                                              .ipv6("2001:db8:1::10", "2001:db8:7::5")
                                              .udp(49152, test::kRoceV2Port)
                                              .bth(bth)
                                              .build());
  s.emplace_back("roce6_ext", PacketBuilder()
                                  .ipv6("2001:db8:1::10", "2001:db8:6::5")
                                  .ipv6_ext(60)
                                  .udp(49152, test::kRoceV2Port)
                                  .bth(bth)
                                  .build());
  s.emplace_back("udp_other", roce4("192.0.2.50").udp(49152, 53).payload(32).build());
  s.emplace_back("tcp", PacketBuilder().ipv4("192.0.2.10", "203.0.113.5").ip_proto(6).payload(20).build());
  s.emplace_back("arp", PacketBuilder().ethertype(test::kEthArp).payload(28).build());
  s.emplace_back("truncated_bth", test::slice(roce4("192.0.2.50").bth(bth).build(), 0, 48));
  // Ethernet pads to 60 bytes: room in the frame that the datagram lacks.
  auto padded = [](Bytes f) {
    f.resize(std::max<size_t>(f.size(), 60), 0);
    return f;
  };
  s.emplace_back("udp4791_short_padded",
                 padded(roce4("192.0.2.50").icrc(false).payload(4).build()));
  s.emplace_back("ack_without_aeth_padded",
                 padded(roce4("192.0.2.50").bth(ack).icrc(false).build()));
  if (target == Target::kXdpIngress) {
    Bytes inner = roce4("203.0.113.5").ecn(2).bth(bth).payload(32).build();
    auto gnv4 = [&](const char* src, uint32_t vni, uint8_t ecn, const Bytes& opts = {},
                    uint8_t flags = 0) {
      return PacketBuilder()
          .ipv4(src, "192.0.2.1")
          .ecn(ecn)
          .udp(50000, test::kGenevePort)
          .geneve(vni, opts, flags)
          .payload(inner)
          .build();
    };
    s.emplace_back("geneve4", gnv4("192.0.2.2", 0x00abcd, 2));
    s.emplace_back("geneve4_outer_ce", gnv4("192.0.2.2", 0x00abcd, 3));
    s.emplace_back("geneve4_outer_ect1", gnv4("192.0.2.2", 0x00abcd, 1));
    s.emplace_back("geneve4_options", gnv4("192.0.2.2", 0x00abcd, 2, Bytes(8, 0x5a)));
    s.emplace_back("geneve4_critical", gnv4("192.0.2.2", 0x00abcd, 2, Bytes(4, 0), 0x40));
    s.emplace_back("geneve4_unknown_vni", gnv4("192.0.2.2", 0x000001, 2));
    s.emplace_back("geneve4_unknown_peer", gnv4("192.0.2.99", 0x00abcd, 2));
    s.emplace_back("geneve6", PacketBuilder()
                                  .ipv6("2001:db8::2", "2001:db8::1")
                                  .ecn(3)
                                  .udp(50000, test::kGenevePort)
                                  .geneve(0x123456)
                                  .payload(inner)
                                  .build());
    Bytes not_ect = roce4("203.0.113.5").bth(bth).build();
    s.emplace_back("geneve4_ce_over_not_ect", PacketBuilder()
                                                  .ipv4("192.0.2.2", "192.0.2.1")
                                                  .ecn(3)
                                                  .udp(50000, test::kGenevePort)
                                                  .geneve(0x00abcd)
                                                  .payload(not_ect)
                                                  .build());
  }
  return s;
}

}  // namespace rg::fuzz
