// An external oracle: what the programs emit is written to pcap and decoded
// by tshark, which knows Geneve, IPv4/IPv6 checksums and the InfiniBand BTH
// independently of our packet builder and decoder.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "harness.h"

namespace rg::test {
namespace {

Bth bth(uint8_t opcode, uint32_t qp, uint32_t psn) {
  Bth b;
  b.opcode = opcode;
  b.dest_qp = qp;
  b.psn = psn;
  return b;
}

std::string hex24(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%06x", v);
  return buf;
}

struct Inner {
  PacketBuilder p;
  bool v6;
  uint8_t opcode, ecn, dscp;
  uint32_t qp, psn;
};

// RoCE traffic towards the tunnel prefixes, one of each kind.
std::vector<Inner> tunnel_traffic() {
  std::vector<Inner> v;
  uint32_t psn = 1000;
  for (bool v6 : {false, true}) {
    for (uint8_t ecn = 0; ecn < 4; ++ecn) {
      for (uint8_t op : {kOpSendOnly, kOpWriteOnly, kOpAck, kOpCnp}) {
        uint32_t qp = 0x100 + op;
        PacketBuilder p;
        p.eth(kPeerMac, kDevMac);
        if (v6)
          p.ipv6("2001:db8:5::10", "2001:db8:6::20").flow_label(0x12345);
        else
          p.ipv4("198.51.100.10", "203.0.113.20");
        p.dscp(0).ecn(ecn).udp(49200, kRoceV2Port).bth(bth(op, qp, psn));
        if (op == kOpWriteOnly) p.reth(0x1000, 0x42, 128).payload(128);
        if (op == kOpAck) p.aeth(ecn == 1 ? kSynNakSeqErr : kSynAck, 5);
        if (op == kOpCnp) p.payload(16);
        if (op == kOpSendOnly) p.payload(256);
        v.push_back({p, v6, op, ecn, static_cast<uint8_t>(op == kOpCnp ? 48 : 46), qp, psn});
        ++psn;
      }
    }
  }
  return v;
}

std::string protocols(bool outer_geneve, bool outer6, bool inner6) {
  std::string inner = std::string("eth:ethertype:") + (inner6 ? "ipv6" : "ip") + ":udp:infiniband";
  if (!outer_geneve) return inner;
  return std::string("eth:ethertype:") + (outer6 ? "ipv6" : "ip") + ":udp:geneve:" + inner;
}

TsharkRow inner_fields(const Inner& in) {
  TsharkRow r;
  r["infiniband.bth.opcode"] = std::to_string(in.opcode);
  r["infiniband.bth.destqp"] = hex24(in.qp);
  r["infiniband.bth.psn"] = std::to_string(in.psn);
  return r;
}

void check_encap(bool outer6) {
  Dataplane dp;
  dp.tunnels();
  std::vector<Inner> traffic = tunnel_traffic();
  std::vector<Bytes> emitted;
  for (auto& t : traffic) {
    if (outer6 != t.v6) continue;
    Verdict r = dp.tc(t.p.build());
    ASSERT_EQ(r.ret, kTcPass);
    emitted.push_back(r.out);
  }
  std::vector<TsharkRow> rows = tshark(emitted, outer6 ? "encap6" : "encap4");
  ASSERT_EQ(rows.size(), emitted.size());
  size_t i = 0;
  for (auto& t : traffic) {
    if (outer6 != t.v6) continue;
    TsharkRow want = inner_fields(t);
    want["frame.protocols"] = protocols(true, outer6, t.v6);
    std::string d = std::to_string(t.dscp), e = std::to_string(t.ecn);
    std::string fam = outer6 ? "ipv6.tclass." : "ip.dsfield.";
    want[fam + "dscp"] = d + "," + d;  // outer inherits the re-marked inner
    want[fam + "ecn"] = e + "," + e;
    want["geneve.vni"] = hex24(outer6 ? kVni6 : kVni4);
    want["geneve.proto_type"] = "0x6558";
    want["udp.checksum.status"] = "3,1";  // outer zero (not present), inner good
    if (!outer6) want["ip.checksum.status"] = "1,1";
    expect_tshark_row(rows[i], want, i);
    ++i;
  }
}

TEST(Oracle, EncapIpv4OuterDecodesToBth) { check_encap(false); }
TEST(Oracle, EncapIpv6OuterDecodesToBth) { check_encap(true); }

TEST(Oracle, RemarkAndRepairPlainRoce) {
  Dataplane dp;
  std::vector<Bytes> emitted;
  std::vector<TsharkRow> want;
  uint32_t psn = 1;
  for (int tags = 0; tags <= 2; ++tags) {
    for (bool v6 : {false, true}) {
      for (bool xdp : {false, true}) {
        PacketBuilder p;
        if (tags >= 1) p.vlan(100, tags == 2 ? kEthQinQ : kEthVlan);
        if (tags == 2) p.vlan(200);
        if (v6)
          p.ipv6("2001:db8:5::10", "2001:db8:5::20").flow_label(0xfedcb);
        else
          p.ipv4("198.51.100.10", "198.51.100.20").ip_options({0x94, 0x04, 0, 0});
        p.dscp(0).ecn(2).udp(49200, kRoceV2Port).bth(bth(kOpSendOnly, 0x33, psn)).payload(32);
        Verdict r = xdp ? dp.xdp(p.build()) : dp.tc(p.build());
        emitted.push_back(r.out);
        TsharkRow w;
        std::string vl;
        if (tags == 1) vl = "vlan:ethertype:";
        if (tags == 2) vl = "ieee8021ad:ethertype:vlan:ethertype:";
        w["frame.protocols"] = "eth:ethertype:" + vl + (v6 ? "ipv6" : "ip") + ":udp:infiniband";
        w[v6 ? "ipv6.tclass.dscp" : "ip.dsfield.dscp"] = "46";
        w[v6 ? "ipv6.tclass.ecn" : "ip.dsfield.ecn"] = "2";
        w["udp.checksum.status"] = "1";
        if (!v6) w["ip.checksum.status"] = "1";
        w["infiniband.bth.psn"] = std::to_string(psn);
        w["infiniband.bth.destqp"] = hex24(0x33);
        want.push_back(w);
        ++psn;
      }
    }
  }
  std::vector<TsharkRow> rows = tshark(emitted, "remark");
  ASSERT_EQ(rows.size(), want.size());
  for (size_t i = 0; i < rows.size(); ++i) expect_tshark_row(rows[i], want[i], i);
}

TEST(Oracle, DecapDeliversPlainRoce) {
  Dataplane dp;
  dp.tunnels();
  std::vector<Inner> traffic = tunnel_traffic();
  std::vector<Bytes> emitted;
  std::vector<TsharkRow> want;
  for (auto& t : traffic) {
    Verdict enc = dp.tc(t.p.build());
    // The WAN bleached the outer DSCP on the way; ECN travels untouched.
    Bytes wan = enc.out;
    View v = parse(wan);
    if (v.family == 4) {
      wan[v.l3 + 1] &= 3;
      wan[v.l3 + 10] = wan[v.l3 + 11] = 0;
      uint32_t sum = 0;
      for (int k = 0; k < 20; k += 2) sum += (wan[v.l3 + k] << 8) | wan[v.l3 + k + 1];
      while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
      wan[v.l3 + 10] = static_cast<uint8_t>(~sum >> 8);
      wan[v.l3 + 11] = static_cast<uint8_t>(~sum);
    } else {
      wan[v.l3] &= 0xf0;
      wan[v.l3 + 1] &= 0x3f;
    }
    Verdict r = dp.xdp(wan);
    ASSERT_EQ(r.ret, kXdpPass);
    emitted.push_back(r.out);
    TsharkRow w = inner_fields(t);
    w["frame.protocols"] = protocols(false, false, t.v6);
    w[t.v6 ? "ipv6.tclass.dscp" : "ip.dsfield.dscp"] = std::to_string(t.dscp);
    w[t.v6 ? "ipv6.tclass.ecn" : "ip.dsfield.ecn"] = std::to_string(t.ecn);
    w["udp.checksum.status"] = "1";
    if (!t.v6) w["ip.checksum.status"] = "1";
    want.push_back(w);
  }
  std::vector<TsharkRow> rows = tshark(emitted, "decap");
  ASSERT_EQ(rows.size(), want.size());
  for (size_t i = 0; i < rows.size(); ++i) expect_tshark_row(rows[i], want[i], i);
}

TEST(Oracle, BuilderGeneveWithOptions) {
  Bytes inner = PacketBuilder().ipv4("198.51.100.10", "198.51.100.20").dscp(46)
                    .udp(49200, kRoceV2Port).bth(bth(kOpSendOnly, 0x44, 77)).payload(8).build();
  Bytes opts = {0x01, 0x02, 0x03, 0x02, 1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<Bytes> frames;
  frames.push_back(PacketBuilder().ipv4(kPeer4, kLocal4).udp(51000, kGenevePort)
                       .udp_csum(UdpCsum::kValid).geneve(kVni4, opts).payload(inner).build());
  frames.push_back(PacketBuilder().ipv6(kPeer6, kLocal6).udp(51000, kGenevePort)
                       .geneve(kVni6).payload(inner).build());
  std::vector<TsharkRow> rows = tshark(frames, "builder");
  ASSERT_EQ(rows.size(), 2u);
  TsharkRow w;
  w["frame.protocols"] = protocols(true, false, false);
  w["geneve.vni"] = hex24(kVni4);
  w["udp.checksum.status"] = "1,1";
  w["ip.checksum.status"] = "1,1";
  w["infiniband.bth.psn"] = "77";
  expect_tshark_row(rows[0], w, 0);
  w["frame.protocols"] = protocols(true, true, false);
  w["geneve.vni"] = hex24(kVni6);
  w["ip.checksum.status"] = "1";
  expect_tshark_row(rows[1], w, 1);
}

}  // namespace
}  // namespace rg::test
