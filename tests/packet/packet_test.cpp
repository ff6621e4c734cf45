// The packet builder is the yardstick of every other test: check it against
// frames produced by real RoCE hardware and against its own decoder.
#include "packet.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iterator>

namespace rg::test {
namespace {

// A CNP captured on a ConnectX-4 Lx (published with scapy's RoCE tests):
// the ICRC was computed by the NIC, so it pins our CRC, masking and byte order.
const char* kConnectXCnp =
    "e41d 2dab 2bc2 7cfe 9064 3b32 0800 45c2"
    "003c 718c 4000 4011 9161 0a00 1101 0a00"
    "1201 0000 12b7 0028 0000 8100 ffff 4000"
    "0118 0000 0000 0000 0000 0000 0000 0000"
    "0000 0000 0000 82fd 002a";

TEST(PacketIcrc, MatchesConnectXCapturedCnp) {
  Bth b;
  b.opcode = kOpCnp;
  b.mig_req = false;
  b.resv8a = 0x40;  // BECN
  b.dest_qp = 0x118;
  Bytes built = PacketBuilder()
                    .eth(mac("e4:1d:2d:ab:2b:c2"), mac("7c:fe:90:64:3b:32"))
                    .ipv4("10.0.17.1", "10.0.18.1")
                    .tos(0xc2)
                    .ip_id(0x718c)
                    .ttl(64)
                    .udp(0, kRoceV2Port)
                    .udp_csum(UdpCsum::kZero)
                    .bth(b)
                    .payload(Bytes(16, 0))
                    .build();
  EXPECT_EQ(hex(built), hex(from_hex(kConnectXCnp)));
  View v = parse(built);
  EXPECT_TRUE(v.icrc_ok);
  EXPECT_TRUE(v.ipv4_csum_ok);
}

TEST(PacketIcrc, VariantFieldsAreMasked) {
  auto base = [] {
    PacketBuilder p;
    p.ipv4("192.0.2.1", "198.51.100.1").udp(50000, kRoceV2Port).bth(Bth{}).payload(32);
    return p;
  };
  Bytes a = base().build();
  Bytes b = base().tos(0xbb).ttl(3).udp_csum(UdpCsum::kZero).build();
  Bytes c = base().payload(32, 1).build();
  auto icrc = [](const Bytes& f) { return slice(f, f.size() - 4); };
  EXPECT_EQ(icrc(a), icrc(b)) << "TOS, TTL and UDP checksum are not covered";
  EXPECT_NE(icrc(a), icrc(c)) << "payload is covered";
  Bth resv;
  resv.resv8a = 0xc0;
  EXPECT_EQ(icrc(a), icrc(base().bth(resv).build()));
  EXPECT_TRUE(parse(b).icrc_ok);

  auto base6 = [] {
    PacketBuilder p;
    p.ipv6("2001:db8::1", "2001:db8::2").udp(50000, kRoceV2Port).bth(Bth{}).payload(32);
    return p;
  };
  Bytes d = base6().build(), e = base6().tos(0xb9).flow_label(0xabcde).ttl(7).build();
  EXPECT_EQ(icrc(d), icrc(e));
  EXPECT_TRUE(parse(e).icrc_ok);
}

TEST(PacketBuilder, Ipv4RoceFieldsRoundTrip) {
  Bth b;
  b.opcode = kOpWriteOnly;
  b.dest_qp = 0xabcdef;
  b.psn = 0xfffffe;
  b.ack_req = true;
  Bytes f = PacketBuilder()
                .ipv4("192.0.2.1", "198.51.100.7")
                .dscp(26)
                .ecn(2)
                .udp(51234, kRoceV2Port)
                .bth(b)
                .reth(0x1122334455667788ull, 0xaabbccdd, 64)
                .payload(64)
                .build();
  View v = parse(f);
  ASSERT_TRUE(v.ok);
  EXPECT_EQ(f.size(), 14u + 20 + 8 + 12 + 16 + 64 + 4);
  EXPECT_EQ(v.family, 4);
  EXPECT_EQ(v.dscp(), 26);
  EXPECT_EQ(v.ecn(), 2);
  EXPECT_TRUE(v.df);
  EXPECT_TRUE(v.ipv4_csum_ok);
  EXPECT_TRUE(v.udp_csum_ok);
  EXPECT_NE(v.udp_csum, 0);
  EXPECT_EQ(v.ip_len, f.size() - 14);
  EXPECT_EQ(v.udp_len, f.size() - 34);
  EXPECT_EQ(v.sport, 51234);
  ASSERT_TRUE(v.roce);
  EXPECT_EQ(v.bth.opcode, kOpWriteOnly);
  EXPECT_EQ(v.bth.dest_qp, 0xabcdefu);
  EXPECT_EQ(v.bth.psn, 0xfffffeu);
  EXPECT_TRUE(v.bth.ack_req);
  EXPECT_TRUE(v.icrc_ok);
  f[f.size() - 10] ^= 1;
  EXPECT_FALSE(parse(f).icrc_ok);
}

TEST(PacketBuilder, Ipv6TrafficClassAndFlowLabel) {
  Bytes f = PacketBuilder()
                .ipv6("2001:db8::1", "2001:db8::2")
                .tos(0xb9)
                .flow_label(0x12345)
                .ttl(17)
                .udp(49152, kRoceV2Port)
                .bth(Bth{})
                .aeth(kSynNakSeqErr, 77)
                .build();
  View v = parse(f);
  ASSERT_TRUE(v.ok);
  EXPECT_EQ(v.family, 6);
  EXPECT_EQ(v.tos, 0xb9);
  EXPECT_EQ(v.flow_label, 0x12345u);
  EXPECT_EQ(v.ttl, 17);
  EXPECT_EQ(v.ip_len, f.size() - 54);
  EXPECT_TRUE(v.udp_csum_ok);
  EXPECT_EQ(v.syndrome, 0);  // not an ACK opcode: no AETH decoded
  Bth ack;
  ack.opcode = kOpAck;
  View a = parse(PacketBuilder()
                     .ipv6("2001:db8::1", "2001:db8::2")
                     .udp(49152, kRoceV2Port)
                     .bth(ack)
                     .aeth(kSynNakSeqErr, 77)
                     .build());
  EXPECT_EQ(a.syndrome, kSynNakSeqErr);
  EXPECT_EQ(a.msn, 77u);
  EXPECT_TRUE(a.icrc_ok);
}

TEST(PacketBuilder, VlanQinQAndIpv4Options) {
  Bytes f = PacketBuilder()
                .vlan(100, kEthQinQ)
                .vlan(200, kEthVlan, 3)
                .ipv4("192.0.2.1", "192.0.2.2")
                .ip_options({0x94, 0x04, 0x00, 0x00, 0x01, 0x01, 0x01, 0x00})
                .udp(1, kRoceV2Port)
                .bth(Bth{})
                .build();
  View v = parse(f);
  ASSERT_TRUE(v.ok);
  EXPECT_EQ(v.vlans, 2);
  EXPECT_EQ(v.vlan_tpid[0], kEthQinQ);
  EXPECT_EQ(v.vlan_tpid[1], kEthVlan);
  EXPECT_EQ(f[18], 3 << 5);  // PCP of the inner tag
  EXPECT_EQ(v.l3, 22u);
  EXPECT_EQ(f[v.l3] & 0x0f, 7);
  EXPECT_EQ(v.l4, 22u + 28);
  EXPECT_TRUE(v.ipv4_csum_ok);
  EXPECT_TRUE(v.icrc_ok);
}

TEST(PacketBuilder, Ipv6ExtensionHeaderAndFragments) {
  Bytes f = PacketBuilder()
                .ipv6("2001:db8::1", "2001:db8::2")
                .ipv6_ext(60)
                .udp(1, kRoceV2Port)
                .bth(Bth{})
                .build();
  EXPECT_EQ(f[14 + 6], 60);
  View v = parse(f);
  ASSERT_TRUE(v.ok);
  EXPECT_EQ(v.l4, 14u + 40 + 8);
  EXPECT_TRUE(v.udp_csum_ok);
  EXPECT_TRUE(v.icrc_ok);

  View frag = parse(PacketBuilder().ipv4("192.0.2.1", "192.0.2.2").fragment(true, 0)
                        .udp(1, kRoceV2Port).bth(Bth{}).build());
  EXPECT_FALSE(frag.ok);
  EXPECT_EQ(frag.family, 4);
}

TEST(PacketBuilder, GeneveWrapsAnInnerFrame) {
  Bytes inner = PacketBuilder().ipv4("192.0.2.1", "198.51.100.1").dscp(46)
                    .udp(50000, kRoceV2Port).bth(Bth{}).payload(8).build();
  Bytes opts = {0x01, 0x02, 0x03, 0x01, 0xde, 0xad, 0xbe, 0xef};  // class, type, len=1 word
  Bytes f = PacketBuilder()
                .eth(mac("02:00:00:00:00:aa"), mac("02:00:00:00:00:bb"))
                .ipv6("2001:db8::a", "2001:db8::b")
                .udp(55555, kGenevePort)
                .udp_csum(UdpCsum::kZero)
                .geneve(0x123456, opts, 0x80)
                .payload(inner)
                .build();
  View v = parse(f);
  ASSERT_TRUE(v.geneve);
  EXPECT_EQ(v.vni, 0x123456u);
  EXPECT_EQ(v.gnv_optlen, 8);
  EXPECT_EQ(v.gnv_flags, 0x80);
  EXPECT_EQ(v.gnv_proto, 0x6558);
  EXPECT_FALSE(v.udp_csum_ok) << "zero UDP checksum is not valid IPv6 without RFC 6935";
  EXPECT_EQ(v.inner, 14u + 40 + 8 + 8 + 8);
  EXPECT_EQ(slice(f, v.inner), inner);
  View in = parse_inner(f);
  EXPECT_TRUE(in.roce);
  EXPECT_EQ(in.dscp(), 46);
}

TEST(PacketBuilder, NonIpFrames) {
  Bytes arp = PacketBuilder().ethertype(kEthArp).payload(28).build();
  EXPECT_EQ(arp.size(), 42u);
  EXPECT_EQ(parse(arp).ethertype, kEthArp);
  EXPECT_FALSE(parse(arp).ok);
  Bytes tcp = PacketBuilder().ipv4("192.0.2.1", "192.0.2.2").ip_proto(6).payload(20).build();
  View v = parse(tcp);
  EXPECT_EQ(v.proto, 6);
  EXPECT_TRUE(v.ipv4_csum_ok);
  EXPECT_FALSE(v.ok);
}

TEST(PcapWriter, WritesClassicPcap) {
  char dir[] = "/tmp/rgdp-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string path = std::string(dir) + "/t.pcap";
  Bytes f = PacketBuilder().ipv4("192.0.2.1", "192.0.2.2").udp(1, 2).payload(10).build();
  {
    PcapWriter w(path);
    w.write(f);
    w.write(f);
    EXPECT_EQ(w.count(), 2u);
  }
  std::ifstream in(path, std::ios::binary);
  Bytes all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  unlink(path.c_str());
  rmdir(dir);
  ASSERT_EQ(all.size(), 24 + 2 * (16 + f.size()));
  uint32_t magic, linktype, caplen;
  std::memcpy(&magic, all.data(), 4);
  std::memcpy(&linktype, all.data() + 20, 4);
  std::memcpy(&caplen, all.data() + 24 + 8, 4);
  EXPECT_EQ(magic, 0xa1b2c3d4u);
  EXPECT_EQ(linktype, 1u);
  EXPECT_EQ(caplen, f.size());
  EXPECT_EQ(slice(all, 24 + 16, f.size()), f);
}

}  // namespace
}  // namespace rg::test
