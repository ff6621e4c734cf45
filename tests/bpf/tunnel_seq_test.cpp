// The tunnel sequence option and per-peer counters: what gateway A writes
// into the Geneve header (option on and off, the MTU it takes), and what
// gateway B makes of arriving sequence numbers (gaps, late arrivals,
// duplicates, restarts), checked through the loader's own readers.
#include <gtest/gtest.h>

#include <sched.h>
#include <time.h>

#include <set>
#include <string>
#include <vector>

#include "harness.h"
#include "dataplane/names.h"
#include "metrics/presentation.h"

namespace rg::test {
namespace {

constexpr uint8_t kOpSendOnlyRc = 0x04;
constexpr size_t kOptLen = sizeof(rg_tunnel_opt);

rg_config seq_config() {
  rg_config c = test_config();
  c.flags |= RG_CFG_F_TUNNEL_SEQ;
  return c;
}

// RoCE v2 towards the inner prefix behind the IPv4 (or IPv6) peer.
PacketBuilder towards_peer(bool v6, uint32_t psn = 100, size_t payload = 64) {
  Bth b;
  b.opcode = kOpSendOnlyRc;
  b.dest_qp = 0x11;
  b.psn = psn;
  PacketBuilder p;
  p.eth(kPeerMac, kDevMac);
  if (v6)
    p.ipv6("2001:db8:5::10", "2001:db8:6::20");
  else
    p.ipv4("198.51.100.10", "203.0.113.20");
  p.dscp(46).udp(49200, kRoceV2Port).bth(b).payload(payload);
  return p;
}

// The option as roceguard writes it (struct rg_tunnel_opt), byte by byte.
Bytes seq_option(uint32_t stream, uint32_t seq, uint64_t sent_ns, uint16_t cls = RG_TUNNEL_OPT_CLASS_DEFAULT) {
  Bytes o = {static_cast<uint8_t>(cls >> 8), static_cast<uint8_t>(cls), RG_TUNNEL_OPT_TYPE_DEFAULT,
             static_cast<uint8_t>(RG_TUNNEL_OPT_WORDS)};
  auto be32 = [&o](uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) o.push_back(static_cast<uint8_t>(v >> s));
  };
  be32(stream);
  be32(seq);
  be32(static_cast<uint32_t>(sent_ns >> 32));
  be32(static_cast<uint32_t>(sent_ns));
  return o;
}

uint32_t be32_at(const Bytes& b, size_t at) {
  return (uint32_t{b[at]} << 24) | (uint32_t{b[at + 1]} << 16) | (uint32_t{b[at + 2]} << 8) | b[at + 3];
}

uint64_t tai_now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_TAI, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// Geneve from the IPv4 peer to us, carrying options.
Bytes geneve_with(const Bytes& options, const Bytes& inner) {
  PacketBuilder p;
  p.eth(kDevMac, kPeerMac).ipv4(kPeer4, kLocal4).tos(46 << 2).udp(51000, kGenevePort)
      .udp_csum(UdpCsum::kZero).geneve(kVni4, options).payload(inner);
  return p.build();
}

// The peers this gateway counts, by slot, as `stats` and /metrics see them.
std::vector<TunnelPeer> peers_of(const Dataplane& dp) {
  return tunnel_peers(read_peer_stats(bpf_map__fd(dp.skel()->maps.rg_peer_stats)),
                      read_tunnel_streams(bpf_map__fd(dp.skel()->maps.rg_tunnel_streams)), {},
                      monotonic_now_ns());
}

const TunnelPeer* peer_at(const std::vector<TunnelPeer>& peers, uint32_t slot) {
  for (const auto& p : peers)
    if (p.slot == slot) return &p;
  return nullptr;
}

using TunnelSeqEncap = OnOneCpu;

TEST_F(TunnelSeqEncap, OptionFirstNumberedPerCpuAndTimestamped) {
  for (bool v6 : {false, true}) {
    SCOPED_TRACE(v6 ? "IPv6 outer" : "IPv4 outer");
    Dataplane dp(seq_config());
    dp.tunnels();
    const Bytes in = towards_peer(v6).build();
    for (uint32_t n = 0; n < 3; ++n) {
      const uint64_t before = tai_now_ns();
      Verdict r = dp.tc(in);
      const uint64_t after = tai_now_ns();
      ASSERT_EQ(r.ret, kTcPass);
      const size_t base = v6 ? 14 + 40 + 8 + 8 : 14 + 20 + 8 + 8;
      ASSERT_EQ(r.out.size(), in.size() + base + kOptLen);
      View v = parse(r.out);
      ASSERT_TRUE(v.geneve);
      EXPECT_EQ(v.gnv_optlen, kOptLen);
      EXPECT_EQ(v.gnv_flags, 0) << "the option is not critical; neither is the packet";
      const size_t opt = base;  // right after the Geneve base header
      EXPECT_EQ(r.out[opt], 0xff);
      EXPECT_EQ(r.out[opt + 1], 0x52);
      EXPECT_EQ(r.out[opt + 2], RG_TUNNEL_OPT_TYPE_DEFAULT) << "type's critical bit clear";
      EXPECT_EQ(r.out[opt + 3], RG_TUNNEL_OPT_WORDS);
      EXPECT_EQ(be32_at(r.out, opt + 4), static_cast<uint32_t>(sched_getcpu())) << "stream = sending CPU";
      EXPECT_EQ(be32_at(r.out, opt + 8), n) << "numbered from 0, one by one";
      const uint64_t sent = (uint64_t{be32_at(r.out, opt + 12)} << 32) | be32_at(r.out, opt + 16);
      EXPECT_GE(sent, before);
      EXPECT_LE(sent, after);
      EXPECT_EQ(hex(slice(r.out, v.inner)), hex(in)) << "inner frame follows the option";
      // Byte for byte what a Geneve sender with this option would send.
      PacketBuilder want;
      want.eth(kPeerMac, kDevMac);
      if (v6)
        want.ipv6(kLocal6, kPeer6).flow_label(v.flow_label);
      else
        want.ipv4(kLocal4, kPeer4).ip_id(0).df(true);
      want.tos(46 << 2).ttl(RG_DEFAULT_OUTER_TTL).udp(v.sport, kGenevePort).udp_csum(UdpCsum::kZero)
          .geneve(v6 ? kVni6 : kVni4, seq_option(sched_getcpu(), n, sent)).payload(in);
      EXPECT_EQ(hex(r.out), hex(want.build()));
    }
    const TunnelPeer* p = peer_at(peers_of(dp), v6 ? kPeerSlot6 : kPeerSlot4);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p->ev[RG_PEER_EV_ENCAPSULATED].packets, 3u);
    EXPECT_EQ(p->ev[RG_PEER_EV_SEQ_SENT].packets, 3u);
    EXPECT_EQ(p->ev[RG_PEER_EV_SEQ_SENT].bytes, 3 * in.size());
  }
}

TEST_F(TunnelSeqEncap, OffLeavesTheHeaderWithoutOptions) {
  Dataplane dp;  // compiled-in default: off
  dp.tunnels();
  const Bytes in = towards_peer(false).build();
  Verdict r = dp.tc(in);
  ASSERT_EQ(r.out.size(), in.size() + 14 + 20 + 8 + 8);
  EXPECT_EQ(parse(r.out).gnv_optlen, 0);
  const TunnelPeer* p = peer_at(peers_of(dp), kPeerSlot4);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->ev[RG_PEER_EV_ENCAPSULATED].packets, 1u);
  EXPECT_EQ(p->ev[RG_PEER_EV_SEQ_SENT].packets, 0u);
}

// The option's 20 bytes count against the peer's MTU: a frame that fits
// without it is over the MTU with it.
TEST_F(TunnelSeqEncap, MtuGuardCountsTheOption) {
  const Bytes in = towards_peer(false, 100, 1000).build();
  const uint16_t fits_without = static_cast<uint16_t>(in.size() + 20 + 8 + 8);
  {
    Dataplane dp;
    dp.tunnels(fits_without);
    EXPECT_TRUE(parse(dp.tc(in).out).geneve) << "exactly the MTU without the option";
  }
  for (uint16_t mtu : {fits_without, static_cast<uint16_t>(fits_without + kOptLen - 1)}) {
    Dataplane dp(seq_config());
    dp.tunnels(mtu);
    Verdict r = dp.tc(in);
    EXPECT_EQ(hex(r.out), hex(in)) << "mtu " << mtu << ": sent unencapsulated (policy pass)";
    const TunnelPeer* p = peer_at(peers_of(dp), kPeerSlot4);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p->ev[RG_PEER_EV_OVERSIZE_PASSED].packets, 1u);
    EXPECT_EQ(p->ev[RG_PEER_EV_SEQ_SENT].packets, 0u);
    EXPECT_EQ(dp.events(RG_DIR_EGRESS)["oversize_passed"], 1u);
  }
  Dataplane dp(seq_config());
  dp.tunnels(static_cast<uint16_t>(fits_without + kOptLen));
  EXPECT_EQ(parse(dp.tc(in).out).gnv_optlen, kOptLen) << "exactly the MTU with it";
}

TEST_F(TunnelSeqEncap, PerPeerCountersKeepPeersApart) {
  Dataplane dp(seq_config());
  dp.tunnels();
  dp.peer(5, kLocal4, kUnreachable4, 77);
  dp.route("203.0.113.128", 25, 5);  // no route to this peer's outer address
  Bytes to4 = towards_peer(false).build();
  PacketBuilder unreachable = towards_peer(false);
  unreachable.ipv4("198.51.100.10", "203.0.113.200");
  for (int i = 0; i < 2; ++i) dp.tc(to4);
  dp.tc(towards_peer(true).build());
  dp.tc(unreachable.build());
  const auto peers = peers_of(dp);
  ASSERT_NE(peer_at(peers, kPeerSlot4), nullptr);
  ASSERT_NE(peer_at(peers, kPeerSlot6), nullptr);
  ASSERT_NE(peer_at(peers, 5), nullptr);
  EXPECT_EQ(peer_at(peers, kPeerSlot4)->ev[RG_PEER_EV_ENCAPSULATED].packets, 2u);
  EXPECT_EQ(peer_at(peers, kPeerSlot6)->ev[RG_PEER_EV_ENCAPSULATED].packets, 1u);
  EXPECT_EQ(peer_at(peers, 5)->ev[RG_PEER_EV_ENCAPSULATED].packets, 0u);
  EXPECT_EQ(peer_at(peers, 5)->ev[RG_PEER_EV_FIB_MISS].packets, 1u);
  EXPECT_EQ(peer_at(peers, kPeerSlot4)->ev[RG_PEER_EV_FIB_MISS].packets, 0u);
}

// ---------------------------------------------------------------------------
// Gateway B.

TEST(TunnelSeqDecap, RoundTripTracksTheStream) {
  Dataplane dp(seq_config());
  dp.tunnels();
  const Bytes in = towards_peer(false).dscp(0).build();
  for (int i = 0; i < 3; ++i) {
    Verdict enc = dp.tc(in);
    ASSERT_EQ(parse(enc.out).gnv_optlen, kOptLen);
    Verdict dec = dp.xdp(enc.out);
    ASSERT_EQ(dec.ret, kXdpPass);
    View v = parse(dec.out);
    EXPECT_EQ(v.family, 4);
    EXPECT_EQ(v.dscp(), 46) << "decapsulated and re-marked";
    EXPECT_EQ(dec.out.size(), in.size()) << "option stripped with the outer headers";
  }
  const TunnelPeer* far = peer_at(peers_of(dp), kFarEnd4);
  ASSERT_NE(far, nullptr);
  EXPECT_EQ(far->ev[RG_PEER_EV_DECAPSULATED].packets, 3u);
  EXPECT_EQ(far->streams, 1u);
  EXPECT_EQ(far->received, 3u);
  EXPECT_EQ(far->lost + far->unsettled + far->reordered + far->duplicated, 0u);
  uint64_t arrivals = 0;
  for (uint64_t n : far->delay) arrivals += n;
  EXPECT_EQ(arrivals, 3u);
}

// Interop the other way: Geneve without options, or with someone else's
// option first, is decapsulated as before and tracks nothing.
TEST(TunnelSeqDecap, OptionlessAndForeignOptionsDecapsulateUntracked) {
  Dataplane dp(seq_config());
  dp.tunnels();
  const Bytes inner = towards_peer(false).build();
  const Bytes foreign = {0x01, 0x02, 0x03, 0x01, 0xde, 0xad, 0xbe, 0xef};
  Bytes other_class = seq_option(0, 0, 1, 0xff53);
  for (const Bytes& opts : {Bytes{}, foreign, other_class}) {
    Verdict r = dp.xdp(geneve_with(opts, inner));
    EXPECT_EQ(r.ret, kXdpPass);
    EXPECT_EQ(parse(r.out).family, 4);
    EXPECT_EQ(r.out.size(), inner.size());
  }
  EXPECT_EQ(dp.events(RG_DIR_INGRESS)["decapsulated"], 3u);
  const TunnelPeer* p = peer_at(peers_of(dp), kPeerSlot4);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->ev[RG_PEER_EV_DECAPSULATED].packets, 3u);
  EXPECT_EQ(p->streams, 0u);
}

struct SeqCase {
  std::string name;
  std::vector<uint32_t> seqs;  // arrival order, one stream
  uint64_t received, lost, unsettled, reordered, duplicated, resyncs;
};

std::vector<SeqCase> seq_cases() {
  std::vector<uint32_t> long_gap{0, 1, 3};
  for (uint32_t s = 4; s < 4 + RG_TUNNEL_WINDOW; ++s) long_gap.push_back(s);
  return {
      {"InOrder", {0, 1, 2, 3, 4, 5, 6, 7}, 8, 0, 0, 0, 0, 0},
      {"GapStillInWindow", {0, 1, 3, 4}, 4, 0, 1, 0, 0, 0},
      {"GapLeftTheWindow", long_gap, 2 + RG_TUNNEL_WINDOW + 1, 1, 0, 0, 0, 0},
      {"LateArrivalFillsTheHole", {0, 2, 1, 3}, 4, 0, 0, 1, 0, 0},
      {"Duplicates", {0, 1, 1, 2, 0}, 3, 0, 0, 0, 2, 0},
      {"FirstPacketsLost", {3, 4, 5}, 3, 0, 3, 0, 0, 0},
      {"JumpBeyondTheWindow", {0, 100}, 2, 100 - RG_TUNNEL_WINDOW, RG_TUNNEL_WINDOW - 1, 0, 0, 0},
      {"LaterThanTheWindow", {0, 1, 100, 2}, 3 + 1, 100 - 2 - RG_TUNNEL_WINDOW + 1, RG_TUNNEL_WINDOW - 1, 1, 0, 0},
      {"SenderRestarted", {5000000, 5000001, 0, 1}, 4, 0, 0, 0, 0, 1},
      {"StartedMidStream", {1000, 1001, 1003}, 3, 0, 1, 0, 0, 0},
      {"Wraps", {0xfffffffe, 0xffffffff, 1}, 3, 0, 1, 0, 0, 0},
  };
}

void PrintTo(const SeqCase& c, std::ostream* os) { *os << c.name; }

class TunnelSeqTracking : public ::testing::TestWithParam<SeqCase> {};

TEST_P(TunnelSeqTracking, CountsAsTheWindowSays) {
  const SeqCase& tc = GetParam();
  Dataplane dp(seq_config());
  dp.tunnels();
  const Bytes inner = towards_peer(false).build();
  const uint64_t sent = tai_now_ns();
  for (uint32_t s : tc.seqs) ASSERT_EQ(dp.xdp(geneve_with(seq_option(7, s, sent), inner)).ret, kXdpPass);
  const TunnelPeer* p = peer_at(peers_of(dp), kPeerSlot4);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->streams, 1u);
  EXPECT_EQ(p->received, tc.received);
  EXPECT_EQ(p->lost, tc.lost);
  EXPECT_EQ(p->unsettled, tc.unsettled);
  EXPECT_EQ(p->reordered, tc.reordered);
  EXPECT_EQ(p->duplicated, tc.duplicated);
  EXPECT_EQ(p->resyncs, tc.resyncs);
}

INSTANTIATE_TEST_SUITE_P(, TunnelSeqTracking, ::testing::ValuesIn(seq_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(TunnelSeqStreams, StreamsOfOnePeerAreApart) {
  Dataplane dp(seq_config());
  dp.tunnels();
  const Bytes inner = towards_peer(false).build();
  const uint64_t sent = tai_now_ns();
  // Each sending CPU numbers from 0: the same numbers on two streams are no duplicates.
  for (uint32_t s = 0; s < 4; ++s)
    for (uint32_t stream : {0u, 1u}) dp.xdp(geneve_with(seq_option(stream, s, sent), inner));
  const TunnelPeer* p = peer_at(peers_of(dp), kPeerSlot4);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->streams, 2u);
  EXPECT_EQ(p->received, 8u);
  EXPECT_EQ(p->duplicated, 0u);
}

// The delay histogram: a timestamp d in the past lands in the first bucket
// whose bound (2^k us) is at least d; one from the future counts as 0.
TEST(TunnelSeqStreams, DelayLandsInItsBucket) {
  Dataplane dp(seq_config());
  dp.tunnels();
  const Bytes inner = towards_peer(false).build();
  uint32_t seq = 0;
  dp.xdp(geneve_with(seq_option(1, seq++, tai_now_ns() - 3000000000ull), inner));  // 3 s ago
  dp.xdp(geneve_with(seq_option(1, seq++, tai_now_ns() + 60000000000ull), inner));  // clock ahead
  const TunnelPeer* p = peer_at(peers_of(dp), kPeerSlot4);
  ASSERT_NE(p, nullptr);
  // 3 s is over 2^21 us (2.1 s) and at most 2^22 us (4.2 s): bucket 22.
  EXPECT_EQ(p->delay[22], 1u);
  EXPECT_EQ(p->delay[0], 1u);
  EXPECT_GE(p->delay_sum_ns, 3000000000ull);
  EXPECT_LT(p->delay_sum_ns, 4194304000ull);
  EXPECT_DOUBLE_EQ(tunnel_delay_bucket_le(22), 4.194304);
}

// What the readers add once a stream has been silent: its open holes are
// lost, as the data path would count them on the next arrival.
TEST(TunnelSeqStreams, SilentStreamSettlesItsHoles) {
  rg_tunnel_stream s{};
  s.received = 3;
  s.lost = 2;
  s.last_ns = 1000;
  s.window = ~0ull & ~(1ull << 1) & ~(1ull << 5);
  EXPECT_EQ(tunnel_window_holes(s), 2u);
  EXPECT_EQ(tunnel_stream_lost(s, 1000 + RG_TUNNEL_SETTLE_NS - 1), 2u);
  EXPECT_EQ(tunnel_stream_lost(s, 1000 + RG_TUNNEL_SETTLE_NS), 4u);
  EXPECT_EQ(tunnel_stream_lost(s, 999), 2u) << "an arrival newer than the reader's clock";
}

// tshark decodes the numbered packets as Geneve with one option of our
// class, the inner RoCE intact behind it, and nothing malformed.
TEST(OracleTables, EncapWithSequenceOption) {
  Dataplane dp(seq_config());
  dp.tunnels();
  std::vector<Bytes> emitted;
  std::vector<TsharkRow> want;
  for (bool v6 : {false, true}) {
    emitted.push_back(dp.tc(towards_peer(v6).build()).out);
    TsharkRow w;
    w["frame.protocols"] = std::string("eth:ethertype:") + (v6 ? "ipv6" : "ip") + ":udp:geneve:eth:ethertype:" +
                           (v6 ? "ipv6" : "ip") + ":udp:infiniband";
    w["geneve.option.class"] = "0xff52";
    // The base header's option length, then the option's own; both in bytes.
    w["geneve.option.length"] = "20,20";
    w["geneve.option.type"] = "0x01";
    w["geneve.proto_type"] = "0x6558";
    w["infiniband.bth.psn"] = "100";
    want.push_back(w);
  }
  std::vector<TsharkRow> rows = tshark(emitted, "encap-seq");
  ASSERT_EQ(rows.size(), want.size());
  for (size_t i = 0; i < rows.size(); ++i) expect_tshark_row(rows[i], want[i], i);
}

TEST(Names, PeerTableCoversEveryEventInOrder) {
  std::set<std::string_view> seen;
  for (int ev = 0; ev < RG_PEER_EV_MAX; ++ev) {
    const PeerEventName& n = peer_event_name(static_cast<rg_peer_event>(ev));
    EXPECT_EQ(n.event, ev) << "row " << ev << " is out of order";
    EXPECT_FALSE(n.help.empty());
    EXPECT_TRUE(n.metric.starts_with("roceguard_tunnel_")) << n.metric;
    EXPECT_TRUE(seen.insert(n.name).second) << "duplicate name " << n.name;
  }
  EXPECT_THROW(peer_event_name(RG_PEER_EV_MAX), std::out_of_range);
}

}  // namespace
}  // namespace rg::test
