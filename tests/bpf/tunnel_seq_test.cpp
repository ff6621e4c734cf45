// The tunnel sequence option and per-peer counters: what gateway A writes
// into the Geneve header (option on and off, the MTU it takes), and what
// gateway B makes of arriving sequence numbers (gaps, late arrivals,
// duplicates, restarts), checked through the loader's own readers.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <fcntl.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

#include <set>
#include <string>
#include <vector>

#include "harness.h"
#include "daemon/stream_eviction.h"
#include "dataplane/names.h"
#include "metrics/presentation.h"

namespace rg::test {
namespace {

constexpr uint8_t kOpSendOnlyRc = 0x04;
constexpr size_t kOptLen = sizeof(rg_tunnel_opt);
constexpr size_t kExtLen = sizeof(rg_tunnel_opt_ext);
// The option of number n of a stream: the extension on one in RG_TUNNEL_EXT_EVERY.
constexpr size_t opt_len_of(uint32_t n) { return kOptLen + (n % RG_TUNNEL_EXT_EVERY ? 0 : kExtLen); }

// With the tunnel key's code loaded: a slot without a key (rg_peer_auth)
// sends and takes options unsigned, as a configuration without keys does.
rg_config seq_config() {
  rg_config c = test_config();
  c.flags |= RG_CFG_F_TUNNEL_SEQ | RG_CFG_F_TUNNEL_AUTH;
  return c;
}

// RoCE v2 towards the inner prefix behind the IPv4 (or IPv6) peer.
PacketBuilder towards_peer(bool v6, uint32_t psn = 100, size_t payload = 64, uint32_t dest_qp = 0x11) {
  Bth b;
  b.opcode = kOpSendOnlyRc;
  b.dest_qp = dest_qp;
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

// The option as roceguard writes it (struct rg_tunnel_opt), byte by byte:
// with the extension (sent at sent_ns, CLOCK_TAI), or without (short).
Bytes seq_option(uint32_t stream, uint32_t seq, uint64_t sent_ns, uint16_t cls = RG_TUNNEL_OPT_CLASS_DEFAULT,
                 uint32_t feedback = 0) {
  return tunnel_seq_option(stream, seq, TunnelOptExt{static_cast<uint32_t>(sent_ns / 1000), feedback}, cls,
                           RG_TUNNEL_OPT_TYPE_DEFAULT);
}
Bytes seq_option_short(uint32_t stream, uint32_t seq) {
  return tunnel_seq_option(stream, seq, std::nullopt, RG_TUNNEL_OPT_CLASS_DEFAULT, RG_TUNNEL_OPT_TYPE_DEFAULT);
}

uint32_t be32_at(const Bytes& b, size_t at) {
  return (uint32_t{b[at]} << 24) | (uint32_t{b[at + 1]} << 16) | (uint32_t{b[at + 2]} << 8) | b[at + 3];
}

// The outer UDP source port of every flow of a lane: 16 distinct ports.
uint16_t lane_port(uint32_t lane) {
  return static_cast<uint16_t>(RG_ENTROPY_PORT_MIN | (((lane + 1) * 0x9e3779b1u) & RG_ENTROPY_PORT_MASK));
}

// A stream field as a sender with epochs writes it.
uint32_t stream_of(uint32_t epoch, uint32_t cpu, uint32_t lane, uint32_t flags = 0) {
  return flags | (epoch << RG_TUNNEL_EPOCH_SHIFT) | (cpu << RG_TUNNEL_LANE_BITS) | lane;
}

// Where the option's stream and sequence number sit in an encapsulated IPv4 frame.
constexpr size_t kOpt4 = 14 + 20 + 8 + 8;

uint64_t tai_now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_TAI, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// Geneve from the IPv4 peer to us (the IPv6 peer with outer6), carrying options.
Bytes geneve_with(const Bytes& options, const Bytes& inner, bool outer6 = false) {
  PacketBuilder p;
  p.eth(kDevMac, kPeerMac);
  if (outer6)
    p.ipv6(kPeer6, kLocal6);
  else
    p.ipv4(kPeer4, kLocal4);
  p.tos(46 << 2).udp(51000, kGenevePort).udp_csum(UdpCsum::kZero).geneve(outer6 ? kVni6 : kVni4, options)
      .payload(inner);
  return p.build();
}

// The peers this gateway counts, by slot, as `stats` and /metrics see them.
std::vector<TunnelPeer> peers_of(const Dataplane& dp) {
  return tunnel_peers(read_peer_stats(bpf_map__fd(dp.skel()->maps.rg_peer_stats),
                                     bpf_map__fd(dp.skel()->maps.rg_peer_guard),
                                     bpf_map__fd(dp.skel()->maps.rg_tunnel_retired)),
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
      ASSERT_EQ(r.out.size(), in.size() + base + opt_len_of(n));
      View v = parse(r.out);
      ASSERT_TRUE(v.geneve);
      EXPECT_EQ(v.gnv_optlen, opt_len_of(n)) << "12 bytes; 20 with the send time on number 0";
      EXPECT_EQ(v.gnv_flags, 0) << "the option is not critical; neither is the packet";
      const size_t opt = base;  // right after the Geneve base header
      EXPECT_EQ(r.out[opt], 0xff);
      EXPECT_EQ(r.out[opt + 1], 0x52);
      EXPECT_EQ(r.out[opt + 2], RG_TUNNEL_OPT_TYPE_DEFAULT) << "type's critical bit clear";
      EXPECT_EQ(r.out[opt + 3], n ? RG_TUNNEL_OPT_WORDS : RG_TUNNEL_OPT_EXT_WORDS);
      const uint32_t stream = be32_at(r.out, opt + 4);
      EXPECT_EQ((stream >> RG_TUNNEL_EPOCH_SHIFT) & RG_TUNNEL_EPOCH_MASK, kTestEpoch) << "the load's epoch";
      EXPECT_EQ(stream & RG_TUNNEL_F_MASK, RG_TUNNEL_F_ELIMINATES) << "it decapsulates: it eliminates";
      EXPECT_EQ((stream >> RG_TUNNEL_LANE_BITS) & RG_TUNNEL_CPU_MASK, static_cast<uint32_t>(sched_getcpu()))
          << "the sending CPU";
      EXPECT_EQ(v.sport, lane_port(stream & (RG_TUNNEL_LANES - 1))) << "the lane's source port";
      EXPECT_EQ(be32_at(r.out, opt + 8), n) << "numbered from 0, one by one";
      uint64_t sent = 0;
      if (n == 0) {
        const uint32_t sent_us = be32_at(r.out, opt + 12);
        EXPECT_GE(sent_us, static_cast<uint32_t>(before / 1000));
        EXPECT_LE(sent_us, static_cast<uint32_t>(after / 1000));
        EXPECT_EQ(be32_at(r.out, opt + 16), 0u) << "no feedback: nobody measured yet";
        sent = uint64_t{sent_us} * 1000;
      }
      EXPECT_EQ(hex(slice(r.out, v.inner)), hex(in)) << "inner frame follows the option";
      // Byte for byte what a Geneve sender with this option would send.
      PacketBuilder want;
      want.eth(kPeerMac, kDevMac);
      if (v6)
        want.ipv6(kLocal6, kPeer6).flow_label(v.flow_label);
      else
        want.ipv4(kLocal4, kPeer4).ip_id(0).df(true);
      want.tos(46 << 2).ttl(RG_DEFAULT_OUTER_TTL).udp(v.sport, kGenevePort).udp_csum(UdpCsum::kZero)
          .geneve(v6 ? kVni6 : kVni4, n ? seq_option_short(stream, n) : seq_option(stream, n, sent)).payload(in);
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

// The option's 12 bytes count against the peer's MTU: a frame that fits
// without it is over the MTU with it. The extension's 8 never do: a frame
// it would not fit with leaves without it.
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
  EXPECT_EQ(parse(dp.tc(in).out).gnv_optlen, kOptLen) << "exactly the MTU with it; number 0 without its extension";
  Dataplane roomy(seq_config());
  roomy.tunnels(static_cast<uint16_t>(fits_without + kOptLen + kExtLen));
  EXPECT_EQ(parse(roomy.tc(in).out).gnv_optlen, kOptLen + kExtLen) << "room for the extension";
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
  for (uint32_t i = 0; i < 3; ++i) {
    Verdict enc = dp.tc(in);
    ASSERT_EQ(parse(enc.out).gnv_optlen, opt_len_of(i));
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
  EXPECT_EQ(arrivals, 1u) << "number 0 carried the send time";
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
  constexpr uint32_t kFar = RG_TUNNEL_WINDOW + 36;  // a jump past the window
  std::vector<uint32_t> long_gap{0, 1, 3};
  for (uint32_t s = 4; s < 4 + RG_TUNNEL_WINDOW; ++s) long_gap.push_back(s);
  return {
      {"InOrder", {0, 1, 2, 3, 4, 5, 6, 7}, 8, 0, 0, 0, 0, 0},
      {"GapStillInWindow", {0, 1, 3, 4}, 4, 0, 1, 0, 0, 0},
      {"GapLeftTheWindow", long_gap, 2 + RG_TUNNEL_WINDOW + 1, 1, 0, 0, 0, 0},
      {"LateArrivalFillsTheHole", {0, 2, 1, 3}, 4, 0, 0, 1, 0, 0},
      {"Duplicates", {0, 1, 1, 2, 0}, 3, 0, 0, 0, 2, 0},
      {"FirstPacketsLost", {3, 4, 5}, 3, 0, 3, 0, 0, 0},
      {"JumpBeyondTheWindow", {0, kFar}, 2, kFar - RG_TUNNEL_WINDOW, RG_TUNNEL_WINDOW - 1, 0, 0, 0},
      {"LaterThanTheWindow", {0, 1, kFar, 2}, 3 + 1, kFar - 2 - RG_TUNNEL_WINDOW + 1, RG_TUNNEL_WINDOW - 1, 1, 0, 0},
      {"HoleAtTheWindowsFarEdge", {0, 2, RG_TUNNEL_WINDOW + 1}, 3, 1, RG_TUNNEL_WINDOW - 2, 0, 0, 0},
      // Numbers 3068..3074 take ring positions 1020..1023 and then 0..2.
      {"HolesAcrossTheRingsEnd", {3068, 3069, 3071, 3072, 3074, 3070, 3073}, 7, 0, 0, 2, 0, 0},
      {"DuplicateAtTheWindowsFarEdge", {2053, 2054, 2053 + RG_TUNNEL_WINDOW - 1, 2053}, 3, 0,
       RG_TUNNEL_WINDOW - 3, 0, 1, 0},
      {"SenderRestarted", {5000000, 5000001, 0, 1}, 4, 0, 0, 0, 0, 1},
      {"StartedMidStream", {5000, 5001, 5003}, 3, 0, 1, 0, 0, 0},
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

// The delay histogram holds the queueing delay: what a stamped arrival
// spent above its stream's floor (the lowest arrival minus send stamp, the
// path's delay plus the offset between the two gateways' clocks), in the
// first bucket whose bound (2^k us) is at least that. A difference, so the
// same whether the sender's clock is the receiver's, 37 s ahead (its stamps
// arrive from the future) or 37 s behind; the floor shows the offset.
TEST(TunnelSeqStreams, QueueingDelayAboveTheFloorWhateverTheClocks) {
  for (int64_t ahead_s : {0, 37, -37}) {
    SCOPED_TRACE("the sender's clock " + std::to_string(ahead_s) + " s ahead");
    Dataplane dp(seq_config());
    dp.tunnels();
    const Bytes inner = towards_peer(false).build();
    const int64_t ahead_ns = ahead_s * 1000000000ll;
    auto stamp = [&](int64_t ago_ns) { return static_cast<uint64_t>(static_cast<int64_t>(tai_now_ns()) + ahead_ns - ago_ns); };
    uint32_t seq = 0;
    dp.xdp(geneve_with(seq_option(1, seq++, stamp(100000000)), inner));   // 100 ms on the way: the floor
    dp.xdp(geneve_with(seq_option(1, seq++, stamp(3000000000)), inner));  // 3 s: 2.9 s above the floor
    dp.xdp(geneve_with(seq_option(1, seq++, stamp(0)), inner));           // below the floor: the new one
    const TunnelPeer* p = peer_at(peers_of(dp), kPeerSlot4);
    ASSERT_NE(p, nullptr);
    // 2.9 s is over 2^21 us (2.1 s) and at most 2^22 us (4.2 s): bucket 22.
    EXPECT_EQ(p->delay[22], 1u);
    EXPECT_EQ(p->delay[0], 2u) << "each floor spent nothing above itself";
    EXPECT_GT(p->delay_sum_ns, 2097152000ull);
    EXPECT_LE(p->delay_sum_ns, 4194304000ull);
    ASSERT_EQ(p->floor_streams, 1u);
    EXPECT_GE(p->floor_min_us, -ahead_s * 1000000) << "the last stamp's arrival: a floor of the offset";
    EXPECT_LT(p->floor_min_us, -ahead_s * 1000000 + 1000000);
    EXPECT_EQ(tunnel_clocks(*p), ahead_s ? TunnelClocks::kNotComparable : TunnelClocks::kComparable);
  }
  EXPECT_DOUBLE_EQ(tunnel_delay_bucket_le(22), 4.194304);
}

// Each gap is counted by its length as it opens: the WAN's loss runs.
TEST(TunnelSeqStreams, GapsCountAsLossRunsByLength) {
  Dataplane dp(seq_config());
  dp.tunnels();
  const Bytes inner = towards_peer(false).build();
  const uint64_t sent = tai_now_ns();
  // Gaps of 1, 2, 4, 89 and 999 numbers; then one filled late, still counted.
  for (uint32_t s : {0u, 2u, 5u, 10u, 100u, 1100u, 1101u, 1103u, 1102u})
    ASSERT_EQ(dp.xdp(geneve_with(seq_option(stream_of(9, 0, 0), s, sent), inner)).ret, kXdpPass);
  const auto rows = read_tunnel_streams(bpf_map__fd(dp.skel()->maps.rg_tunnel_streams));
  ASSERT_EQ(rows.size(), 1u);
  const std::vector<uint64_t> runs(std::begin(rows[0].state.loss_runs), std::end(rows[0].state.loss_runs));
  EXPECT_EQ(runs, (std::vector<uint64_t>{2, 1, 1, 0, 0, 0, 1, 1})) << "1 and 1, 2, 4, 89, and 999 in the last";
}

// What the readers add once a stream has been silent: its open holes are
// lost, as the data path would count them on the next arrival.
TEST(TunnelSeqStreams, SilentStreamSettlesItsHoles) {
  rg_tunnel_stream s{};
  s.received = 3;
  s.lost = 2;
  s.last_ns = 1000;
  for (auto& w : s.window) w = ~0ull;
  s.window[0] &= ~(1ull << 1) & ~(1ull << 5);
  EXPECT_EQ(tunnel_window_holes(s), 2u);
  EXPECT_EQ(tunnel_stream_lost(s, 1000 + RG_TUNNEL_SETTLE_NS - 1), 2u);
  EXPECT_EQ(tunnel_stream_lost(s, 1000 + RG_TUNNEL_SETTLE_NS), 4u);
  EXPECT_EQ(tunnel_stream_lost(s, 999), 2u) << "an arrival newer than the reader's clock";
}


// ---------------------------------------------------------------------------
// Streams that follow one path, and restarts that show.

// The option's stream and sequence number of an encapsulated IPv4 frame.
struct Numbered {
  uint32_t stream = 0, seq = 0;
  uint16_t sport = 0;
};

Numbered numbered(const Bytes& out) {
  View v = parse(out);
  EXPECT_TRUE(v.geneve);
  EXPECT_TRUE(v.gnv_optlen == kOptLen || v.gnv_optlen == kOptLen + kExtLen) << v.gnv_optlen;
  if (out.size() < kOpt4 + kOptLen) return {};
  return {be32_at(out, kOpt4 + 4), be32_at(out, kOpt4 + 8), v.sport};
}

// Every flow of a lane leaves with the lane's one source port, and each
// lane numbers its own packets: a stream never spans two WAN paths.
TEST_F(TunnelSeqEncap, EachLaneHasOnePortAndItsOwnNumbers) {
  Dataplane dp(seq_config());
  dp.tunnels();
  std::map<uint32_t, uint32_t> next;       // lane -> next number expected
  std::map<uint32_t, uint32_t> lane_of_qp;
  for (int round = 0; round < 2; ++round)
    for (uint32_t qp = 1; qp <= 64; ++qp) {
      const Numbered n = numbered(dp.tc(towards_peer(false, 100, 64, qp).build()).out);
      const uint32_t lane = n.stream & (RG_TUNNEL_LANES - 1);
      if (round == 0)
        lane_of_qp[qp] = lane;
      else
        EXPECT_EQ(lane_of_qp[qp], lane) << "qp " << qp << " changed lanes";
      EXPECT_EQ(n.sport, lane_port(lane)) << "qp " << qp;
      EXPECT_EQ(n.seq, next[lane]++) << "qp " << qp << ", lane " << lane;
    }
  EXPECT_GE(next.size(), RG_TUNNEL_LANES / 2) << "64 QPs spread over the lanes";
  std::set<uint16_t> ports;
  for (uint32_t lane = 0; lane < RG_TUNNEL_LANES; ++lane) ports.insert(lane_port(lane));
  EXPECT_EQ(ports.size(), RG_TUNNEL_LANES) << "one port per lane";
}

// Two QPs on two WAN paths, one 70 packets behind the other (the paths'
// delays differ): with one stream per sending CPU this was counted as 967
// lost of 2000 with nothing dropped. Each lane is its own stream now.
TEST_F(TunnelSeqEncap, TwoPathsApartLoseNothing) {
  Dataplane dp(seq_config());
  dp.tunnels();
  // Two QPs whose flows take different lanes.
  uint32_t qp_b = 0;
  const uint32_t lane_a = numbered(dp.tc(towards_peer(false, 0, 64, 1).build()).out).stream & 0xf;
  for (uint32_t qp = 2; qp < 64 && !qp_b; ++qp)
    if ((numbered(dp.tc(towards_peer(false, 0, 64, qp).build()).out).stream & 0xf) != lane_a) qp_b = qp;
  ASSERT_NE(qp_b, 0u);
  Dataplane a(seq_config()), b(seq_config());
  a.tunnels();
  b.tunnels();
  std::vector<Bytes> fast, slow;
  for (uint32_t i = 0; i < 1000; ++i) {
    fast.push_back(a.tc(towards_peer(false, i, 64, 1).build()).out);
    slow.push_back(a.tc(towards_peer(false, i, 64, qp_b).build()).out);
  }
  constexpr size_t kBehind = 70;
  for (size_t i = 0; i < fast.size() + kBehind; ++i) {
    if (i < fast.size()) {
      ASSERT_EQ(b.xdp(fast[i]).ret, kXdpPass);
    }
    if (i >= kBehind) {
      ASSERT_EQ(b.xdp(slow[i - kBehind]).ret, kXdpPass);
    }
  }
  const TunnelPeer* p = peer_at(peers_of(b), kFarEnd4);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->streams, 2u);
  EXPECT_EQ(p->received, 2000u);
  EXPECT_EQ(p->lost + p->unsettled, 0u);
  EXPECT_EQ(p->reordered, 0u);
  EXPECT_EQ(p->duplicated, 0u);
}

// A slot takes the load's epoch with its first number; a load without
// one (0) numbers in epoch 1, never 0, which stands for a sender without
// epochs.
TEST_F(TunnelSeqEncap, NumbersInTheLoadsEpoch) {
  for (uint16_t epoch : {kTestEpoch, uint16_t{0}}) {
    rg_config c = seq_config();
    c.tunnel_epoch = epoch;
    Dataplane dp(c);
    dp.tunnels();
    const Numbered n = numbered(dp.tc(towards_peer(false).build()).out);
    EXPECT_EQ((n.stream >> RG_TUNNEL_EPOCH_SHIFT) & RG_TUNNEL_EPOCH_MASK, epoch ? epoch : 1u);
  }
}

// One number in RG_TUNNEL_EXT_EVERY of a stream carries the extension: the
// send time and what `roceguard run` wrote to be reported to the peer.
TEST_F(TunnelSeqEncap, EverySixteenthNumberCarriesTheFeedback) {
  Dataplane dp(seq_config());
  dp.tunnels();
  const uint32_t feedback = RG_FEEDBACK_VALID | RG_FEEDBACK_CONGESTED | 1234;
  dp.peer_ctl(kPeerSlot4, feedback);
  const Bytes in = towards_peer(false).build();
  size_t extended = 0;
  for (uint32_t n = 0; n < 2 * RG_TUNNEL_EXT_EVERY + 1; ++n) {
    const Bytes out = dp.tc(in).out;
    const Numbered num = numbered(out);
    EXPECT_EQ(num.seq, n);
    ASSERT_EQ(parse(out).gnv_optlen, opt_len_of(n)) << "number " << n;
    if (opt_len_of(n) == kOptLen) continue;
    ++extended;
    EXPECT_EQ(be32_at(out, kOpt4 + 16), feedback) << "number " << n;
    EXPECT_EQ(hex(slice(out, kOpt4 + kOptLen + kExtLen)), hex(in)) << "the inner frame behind the extension";
  }
  EXPECT_EQ(extended, 3u) << "numbers 0, 16 and 32";
}

// Gateway B at 999 of epoch 1; gateway A restarts (a new epoch) from 0 and
// sends 0..299 with 3 lost. Without epochs the 297 arrivals were counted
// as reordered, nothing lost and no restart.
TEST(TunnelSeqDecap, SenderRestartInANewEpochIsSeen) {
  Dataplane dp(seq_config());
  dp.tunnels();
  const Bytes inner = towards_peer(false).build();
  const uint64_t sent = tai_now_ns();
  for (uint32_t s = 0; s < 1000; ++s)
    ASSERT_EQ(dp.xdp(geneve_with(seq_option(stream_of(1, 0, 0), s, sent), inner)).ret, kXdpPass);
  for (uint32_t s = 0; s < 300; ++s) {
    if (s == 10 || s == 150 || s == 250) continue;
    ASSERT_EQ(dp.xdp(geneve_with(seq_option(stream_of(2, 0, 0), s, sent), inner)).ret, kXdpPass) << s;
  }
  const TunnelPeer* p = peer_at(peers_of(dp), kPeerSlot4);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->streams, 1u) << "one CPU and lane: the new epoch replaces the old";
  EXPECT_EQ(p->resyncs, 1u);
  EXPECT_EQ(p->received, 1297u);
  EXPECT_EQ(p->reordered, 0u);
  EXPECT_EQ(p->duplicated, 0u);
  EXPECT_EQ(p->lost + p->unsettled, 3u);
  EXPECT_EQ(p->ev[RG_PEER_EV_SHIELD_ELIMINATED].packets, 0u);
}

// ---------------------------------------------------------------------------
// The loss shield: gateway A's copies.

// A packet socket on one device: every frame the device sends or receives.
class Tap {
 public:
  explicit Tap(const std::string& name) {
    const int ifindex = static_cast<int>(if_nametoindex(name.c_str()));
    fd_ = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK, htons(ETH_P_ALL));
    sockaddr_ll sll{};
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = htons(ETH_P_ALL);
    sll.sll_ifindex = ifindex;
    if (ifindex <= 0 || fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&sll), sizeof(sll)) != 0)
      throw std::runtime_error("cannot listen on " + name + ": " + std::strerror(errno));
  }
  ~Tap() { close(fd_); }
  Tap(const Tap&) = delete;
  Tap& operator=(const Tap&) = delete;

 protected:
  int fd_ = -1;
};

// The frames that leave through the far end of kDev's veth: the shield's
// copies, sent by bpf_clone_redirect, arrive there (BPF_PROG_TEST_RUN
// itself sends nothing).
class WireTap : public Tap {
 public:
  WireTap() : Tap(std::string(kDev) + "p") {}

  // The Geneve frames that arrived before a marker this sends through kDev
  // now: a veth delivers one CPU's frames in order, so the marker closes
  // the list. At most 5 s of waiting.
  std::vector<Bytes> geneve_until_marker() {
    const Bytes marker = PacketBuilder().eth(kPeerMac, kDevMac).ethertype(0x88b5).payload(46, 0x5a).build();
    sockaddr_ll to{};
    to.sll_family = AF_PACKET;
    to.sll_ifindex = dev_ifindex();
    to.sll_halen = ETH_ALEN;
    const int tx = socket(AF_PACKET, SOCK_RAW, 0);
    EXPECT_GE(tx, 0);
    EXPECT_EQ(sendto(tx, marker.data(), marker.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)),
              static_cast<ssize_t>(marker.size()));
    close(tx);
    std::vector<Bytes> out;
    for (int waited_ms = 0; waited_ms < 5000;) {
      pollfd pfd{fd_, POLLIN, 0};
      if (poll(&pfd, 1, 100) <= 0) {
        waited_ms += 100;
        continue;
      }
      Bytes buf(65536);
      const ssize_t n = recv(fd_, buf.data(), buf.size(), 0);
      if (n <= 0) continue;
      buf.resize(static_cast<size_t>(n));
      if (buf == marker) return out;
      // The namespace forwards: an IPv6 copy comes back round the veth
      // until its hop limit runs out. Only the first pass is the copy sent.
      const View v = parse(buf);
      if (v.geneve && v.ttl == RG_DEFAULT_OUTER_TTL) out.push_back(buf);
    }
    ADD_FAILURE() << "the marker never arrived";
    return out;
  }
};

struct ShieldCase {
  std::string name;
  PacketBuilder inner;
  bool control;  // copied by `control` (`all` copies every one)
};

PacketBuilder roce_to_peer(uint8_t opcode, bool ack_req = false, uint32_t psn = 7) {
  Bth b;
  b.opcode = opcode;
  b.ack_req = ack_req;
  b.psn = psn;
  PacketBuilder p;
  p.eth(kPeerMac, kDevMac).ipv4("198.51.100.10", "203.0.113.20").dscp(46).udp(49200, kRoceV2Port).bth(b);
  return p;
}

// One QP, each case on the PSN after the one before: in order, so that no
// case is a retransmission (the first packet of a resend burst is copied
// for that alone: ControlCopiesTheHeadOfEachResendBurst).
std::vector<ShieldCase> shield_cases() {
  uint32_t psn = 7;
  auto next = [&](uint8_t opcode, bool ack_req = false) { return roce_to_peer(opcode, ack_req, psn++); };
  auto with_aeth = [&](uint8_t syndrome) {
    PacketBuilder p = next(0x11);
    p.aeth(syndrome, 1);
    return p;
  };
  auto read_request = [&] {
    PacketBuilder p = next(0x0c);
    p.reth(0x1000, 0x42, 4096);
    return p;
  };
  std::vector<ShieldCase> cases;
  cases.push_back({"SendOnly", next(0x04).payload(64), false});
  cases.push_back({"SendOnlyAskingForAnAck", next(0x04, true).payload(64), true});
  cases.push_back({"WriteMiddle", next(0x07).payload(64), false});
  cases.push_back({"WriteLastAskingForAnAck", next(0x08, true).payload(64), true});
  cases.push_back({"Ack", with_aeth(0x1f), true});
  cases.push_back({"NakSequenceError", with_aeth(RG_AETH_NAK_PSN_SEQ_ERR), true});
  cases.push_back({"ReadRequest", read_request(), true});
  cases.push_back({"ReadResponseFirst", next(0x0d).payload(64), false});
  cases.push_back({"ReadResponseLast", next(0x0f).payload(64), true});
  cases.push_back({"ReadResponseOnly", next(0x10).payload(64), true});
  cases.push_back({"Cnp", next(RG_BTH_OPCODE_CNP).payload(16), true});
  cases.push_back({"UdSendOnly", next(0x64).payload(64), false});
  return cases;
}

class TunnelShield : public OnOneCpu {};

// Each mode copies what it says, once, right behind the original: the
// copy is the original byte for byte, sequence number included.
TEST_F(TunnelShield, CopiesWhatTheModeSays) {
  WireTap tap;
  for (uint8_t mode : {uint8_t{0}, uint8_t{RG_PEER_F_SHIELD_CONTROL}, uint8_t{RG_PEER_F_SHIELD_ALL}}) {
    SCOPED_TRACE("mode flags " + std::to_string(mode));
    Dataplane dp(seq_config());
    dp.tunnels();
    dp.shield(kPeerSlot4, mode);
    std::vector<Bytes> want;
    uint64_t bytes = 0;
    for (const ShieldCase& c : shield_cases()) {
      const Verdict r = dp.tc(c.inner.build());
      ASSERT_EQ(r.ret, kTcPass) << c.name;
      ASSERT_TRUE(parse(r.out).geneve) << c.name;
      const bool copied = mode == RG_PEER_F_SHIELD_ALL || (mode == RG_PEER_F_SHIELD_CONTROL && c.control);
      if (copied) {
        want.push_back(r.out);
        bytes += r.out.size();
      }
    }
    const std::vector<Bytes> got = tap.geneve_until_marker();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(hex(got[i]), hex(want[i])) << "copy " << i;
    const TunnelPeer* p = peer_at(peers_of(dp), kPeerSlot4);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p->ev[RG_PEER_EV_SHIELD_COPIES].packets, want.size());
    EXPECT_EQ(p->ev[RG_PEER_EV_SHIELD_COPIES].bytes, bytes) << "the extra WAN bytes: whole outer frames";
    EXPECT_EQ(p->ev[RG_PEER_EV_SHIELD_COPY_ERROR].packets + p->ev[RG_PEER_EV_SHIELD_UNCOPIED].packets, 0u);
    EXPECT_EQ(p->ev[RG_PEER_EV_ENCAPSULATED].packets, shield_cases().size()) << "each original counted once";
  }
}

// A receiver NAKs a sequence gap once: the resend of the PSN it names is
// the packet whose second loss costs a whole retransmit timeout. `control`
// copies the first packet of each resend burst (the accounting's mark,
// cleared when the highest PSN moves on), not the rest of the burst, and
// nothing `all` would not; `off` copies none of them.
TEST_F(TunnelShield, ControlCopiesTheHeadOfEachResendBurst) {
  WireTap tap;
  for (uint8_t mode : {uint8_t{0}, uint8_t{RG_PEER_F_SHIELD_CONTROL}}) {
    SCOPED_TRACE("mode flags " + std::to_string(mode));
    Dataplane dp(seq_config());
    dp.tunnels();
    dp.shield(kPeerSlot4, mode);
    std::vector<Bytes> want;
    // 100..105 sent; Go-Back-N from 101, and again from 102 before it is
    // done (a second loss in one recovery: a second burst); 106 new, then
    // resent alone.
    const std::vector<std::pair<uint32_t, bool>> sent = {
        {100, false}, {101, false}, {102, false}, {103, false}, {104, false}, {105, false},
        {101, true},  {102, false}, {103, false}, {102, true},  {103, false}, {104, false},
        {105, false}, {106, false}, {106, true}};
    for (const auto& [psn, head] : sent) {
      const Verdict r = dp.tc(towards_peer(false, psn).build());
      ASSERT_TRUE(parse(r.out).geneve) << psn;
      const bool copied = mode == RG_PEER_F_SHIELD_CONTROL && head;
      EXPECT_EQ(numbered(r.out).stream & RG_TUNNEL_F_COPIED, copied ? RG_TUNNEL_F_COPIED : 0u) << psn;
      if (copied) want.push_back(r.out);
    }
    const std::vector<Bytes> got = tap.geneve_until_marker();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(hex(got[i]), hex(want[i])) << "copy " << i;
    EXPECT_EQ(dp.events(RG_DIR_EGRESS).at("retransmits"), 8u) << "the accounting as ever";
  }
}

// tunnel.shield_path = "port": the copy leaves with the outer entropy of
// the flow hash XOR RG_SHIELD_PORT_FLIP (another ECMP path): its source
// port, and on an IPv6 outer its flow label, which Linux's multipath hash
// for IPv6 takes instead of the ports. Byte for byte the original
// otherwise; the original keeps its own.
TEST_F(TunnelShield, PortPathSendsTheCopyWithAnotherSourcePort) {
  for (bool v6 : {false, true}) {
    SCOPED_TRACE(v6 ? "IPv6 peer" : "IPv4 peer");
    WireTap tap;
    Dataplane dp(seq_config());
    dp.tunnels();
    const uint32_t slot = v6 ? kPeerSlot6 : kPeerSlot4;
    dp.shield(slot, RG_PEER_F_SHIELD_ALL | RG_PEER_F_SHIELD_OTHER_PORT);
    const Verdict r = dp.tc(towards_peer(v6).build());
    const View orig = parse(r.out);
    ASSERT_TRUE(orig.geneve);
    EXPECT_GE(orig.sport, RG_ENTROPY_PORT_MIN) << "the original: its flow's port";
    const std::vector<Bytes> got = tap.geneve_until_marker();
    ASSERT_EQ(got.size(), 1u);
    const View copy = parse(got[0]);
    ASSERT_TRUE(copy.geneve);
    EXPECT_EQ(copy.sport, orig.sport ^ RG_SHIELD_PORT_FLIP);
    EXPECT_GE(copy.sport, RG_ENTROPY_PORT_MIN) << "still in the entropy range";
    if (v6) {
      EXPECT_EQ(copy.flow_label, orig.flow_label ^ RG_SHIELD_PORT_FLIP) << "the label varies with the port";
      EXPECT_EQ(copy.tos, orig.tos) << "the traffic class around it is the original's";
    }
    // Everything else is the original's, the sequence number included.
    ASSERT_EQ(got[0].size(), r.out.size());
    const size_t sport_at = 14 + (v6 ? 40 : 20);
    Bytes same = got[0];
    same[sport_at] = r.out[sport_at];
    same[sport_at + 1] = r.out[sport_at + 1];
    if (v6) {
      same[14 + 2] = r.out[14 + 2];
      same[14 + 3] = r.out[14 + 3];
    }
    EXPECT_EQ(hex(same), hex(r.out));
    // The original's entropy is its flow's, as if unshielded.
    Dataplane plain(seq_config());
    plain.tunnels();
    const View unshielded = parse(plain.tc(towards_peer(v6).build()).out);
    EXPECT_EQ(orig.sport, unshielded.sport);
    EXPECT_EQ(orig.flow_label, unshielded.flow_label);
    const TunnelPeer* p = peer_at(peers_of(dp), slot);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p->ev[RG_PEER_EV_SHIELD_COPIES].packets, 1u);
  }
}

// The device's queue behind the hook drops everything while it lives (a
// pfifo of no room): a full queue, where bpf_clone_redirect fails.
class FullQueue {
 public:
  FullQueue() { run_command(std::string("tc qdisc replace dev ") + kDev + " root pfifo limit 0"); }
  ~FullQueue() {
    try {
      run_command(std::string("tc qdisc del dev ") + kDev + " root");
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
    }
  }
  FullQueue(const FullQueue&) = delete;
  FullQueue& operator=(const FullQueue&) = delete;
};

// A copy the kernel refuses leaves the original to go alone, and then it
// must not say COPIED: the far gateway would take each such number,
// arrived once, for a copy lost on the way (100 % loss to "auto", which
// then keeps copying into the full queue). Its entropy is its own, on
// either path.
// A key for the failed-copy case (the authentication tests below have their own).
constexpr TunnelKey kFailedCopyKey{0x10, 0x21, 0x32, 0x43, 0x54, 0x65, 0x76, 0x87,
                                   0x98, 0xa9, 0xba, 0xcb, 0xdc, 0xed, 0xfe, 0x0f};

TEST_F(TunnelShield, AFailedCopyLeavesTheOriginalSayingSo) {
  for (bool keyed : {false, true})
  for (bool v6 : {false, true}) {
    for (uint8_t path : {uint8_t{0}, uint8_t{RG_PEER_F_SHIELD_OTHER_PORT}}) {
      SCOPED_TRACE(std::string(v6 ? "IPv6 peer" : "IPv4 peer") + (path ? ", port path" : ", same path") +
                   (keyed ? ", with a key" : ""));
      Dataplane dp(seq_config());
      dp.tunnels();
      const uint32_t slot = v6 ? kPeerSlot6 : kPeerSlot4, far = v6 ? kFarEnd6 : kFarEnd4;
      if (keyed) {
        dp.auth(slot, {kFailedCopyKey});
        dp.auth(far, {kFailedCopyKey});
      }
      dp.shield(slot, RG_PEER_F_SHIELD_ALL | path);
      Verdict r;
      {
        FullQueue full;
        r = dp.tc(towards_peer(v6).build());
      }
      ASSERT_EQ(r.ret, kTcPass);
      const View v = parse(r.out);
      ASSERT_TRUE(v.geneve);
      const size_t opt = 14 + (v6 ? 40 : 20) + 8 + 8;
      const uint32_t stream = be32_at(r.out, opt + 4);
      EXPECT_EQ(stream & RG_TUNNEL_F_MASK, RG_TUNNEL_F_ELIMINATES) << "not COPIED: it went once";
      EXPECT_EQ((stream >> RG_TUNNEL_EPOCH_SHIFT) & RG_TUNNEL_EPOCH_MASK, kTestEpoch) << "the rest as written";
      Dataplane plain(seq_config());
      plain.tunnels();
      const View unshielded = parse(plain.tc(towards_peer(v6).build()).out);
      EXPECT_EQ(v.sport, unshielded.sport);
      EXPECT_EQ(v.flow_label, unshielded.flow_label);
      const std::vector<TunnelPeer> peers = peers_of(dp);
      const TunnelPeer* p = peer_at(peers, slot);
      ASSERT_NE(p, nullptr);
      EXPECT_EQ(p->ev[RG_PEER_EV_SHIELD_COPY_ERROR].packets, 1u);
      EXPECT_EQ(p->ev[RG_PEER_EV_SHIELD_COPIES].packets, 0u);
      if (keyed) {
        // The flag cleared after signing leaves the MAC good: the far end
        // takes the number.
        ASSERT_EQ(dp.xdp(r.out).ret, kXdpPass);
        const std::vector<TunnelPeer> after = peers_of(dp);
        const TunnelPeer* f = peer_at(after, far);
        ASSERT_NE(f, nullptr);
        EXPECT_EQ(f->auth_bad, 0u);
        EXPECT_EQ(f->received, 1u);
      }
    }
  }
}

// A GSO skb whose segments the stack has not counted yet (gso_segs 0:
// virtio_net_hdr_to_skb, from a packet socket with PACKET_VNET_HDR as here,
// or a tap) stands for several packets all the same. One sequence number
// for all of them would make the far gateway drop segments 2..n as
// duplicates: it leaves unnumbered, counted as encapsulated (each segment)
// but not as sent with the option, and the shield does not copy it. Only a
// real skb carries gso_type (the test runner's has none, and
// bpf_skb_adjust_room refuses it): the program is attached to kDev and the
// frame sent through it.
class EgressAttached {
 public:
  explicit EgressAttached(const Dataplane& dp) {
    LIBBPF_OPTS(bpf_tc_hook, h, .ifindex = dev_ifindex(), .attach_point = BPF_TC_EGRESS);
    const int rc = bpf_tc_hook_create(&h);
    if (rc != 0 && rc != -EEXIST) throw std::runtime_error("clsact on " + std::string(kDev));
    LIBBPF_OPTS(bpf_tc_opts, o, .prog_fd = bpf_program__fd(dp.skel()->progs.rg_tc_egress), .handle = 1,
                .priority = 1);
    if (bpf_tc_attach(&h, &o) != 0) {
      bpf_tc_hook_destroy(&h);
      throw std::runtime_error("tc attach " + std::string(kDev));
    }
  }
  ~EgressAttached() {
    LIBBPF_OPTS(bpf_tc_hook, h, .ifindex = dev_ifindex(),
                .attach_point = static_cast<bpf_tc_attach_point>(BPF_TC_INGRESS | BPF_TC_EGRESS));
    bpf_tc_hook_destroy(&h);
  }
  EgressAttached(const EgressAttached&) = delete;
  EgressAttached& operator=(const EgressAttached&) = delete;
};

// struct virtio_net_hdr (linux/virtio_net.h, whose control structures C++
// cannot compile; the libc's copy may predate GSO_UDP_L4), in host order as
// a packet socket takes it.
struct VnetHdr {
  uint8_t flags;
  uint8_t gso_type;
  uint16_t hdr_len;
  uint16_t gso_size;
  uint16_t csum_start;
  uint16_t csum_offset;
};
constexpr uint8_t kVnetNeedsCsum = 1;  // VIRTIO_NET_HDR_F_NEEDS_CSUM
constexpr uint8_t kVnetGsoUdpL4 = 5;   // VIRTIO_NET_HDR_GSO_UDP_L4 (Linux 5.18)

TEST_F(TunnelShield, AGsoSkbOfUncountedSegmentsLeavesUnnumbered) {
  constexpr uint16_t kGsoSize = 1000;  // UDP payload of each segment: BTH, payload, ICRC
  constexpr uint32_t kSegs = 3;
  WireTap tap;
  Dataplane dp(seq_config());
  dp.tunnels();
  dp.shield(kPeerSlot4, RG_PEER_F_SHIELD_ALL);
  // Each segment's UDP payload starts with a BTH of the one QP, PSNs in order.
  Bytes udp_payload;
  for (uint32_t i = 0; i < kSegs; ++i) {
    const Bytes one = towards_peer(false, 100 + i, kGsoSize - 12 - 4).build();
    const Bytes l5 = slice(one, parse(one).l5);
    ASSERT_EQ(l5.size(), kGsoSize);
    udp_payload.insert(udp_payload.end(), l5.begin(), l5.end());
  }
  const Bytes frame = PacketBuilder()
                          .eth(kPeerMac, kDevMac)
                          .ipv4("198.51.100.10", "203.0.113.20")
                          .dscp(46)
                          .udp(49200, kRoceV2Port)
                          .udp_csum(UdpCsum::kZero)
                          .payload(udp_payload)
                          .build();
  const View inner = parse(frame);
  ASSERT_TRUE(inner.ok);
  VnetHdr vh{};
  vh.flags = kVnetNeedsCsum;
  vh.gso_type = kVnetGsoUdpL4;
  vh.hdr_len = static_cast<uint16_t>(inner.l5);
  vh.gso_size = kGsoSize;
  vh.csum_start = static_cast<uint16_t>(inner.l4);
  vh.csum_offset = 6;  // the UDP checksum
  Bytes msg(reinterpret_cast<const uint8_t*>(&vh), reinterpret_cast<const uint8_t*>(&vh) + sizeof(vh));
  msg.insert(msg.end(), frame.begin(), frame.end());

  {
    EgressAttached attached(dp);
    const int tx = socket(AF_PACKET, SOCK_RAW, 0);
    ASSERT_GE(tx, 0) << std::strerror(errno);
    const int on = 1;
    ASSERT_EQ(setsockopt(tx, SOL_PACKET, PACKET_VNET_HDR, &on, sizeof(on)), 0) << std::strerror(errno);
    sockaddr_ll to{};
    to.sll_family = AF_PACKET;
    to.sll_protocol = htons(ETH_P_IP);
    to.sll_ifindex = dev_ifindex();
    to.sll_halen = ETH_ALEN;
    const ssize_t sent = sendto(tx, msg.data(), msg.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to));
    const int err = errno;
    close(tx);
    ASSERT_EQ(sent, static_cast<ssize_t>(msg.size())) << std::strerror(err);
    const std::vector<Bytes> got = tap.geneve_until_marker();
    ASSERT_FALSE(got.empty()) << "nothing left encapsulated";
    size_t inner_bytes = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const View v = parse(got[i]);
      EXPECT_EQ(v.gnv_optlen, 0u) << "frame " << i << " of " << got.size() << " (" << got[i].size()
                                  << " bytes) carries a sequence option";
      inner_bytes += got[i].size() - v.inner;
    }
    // Whether the veth segmented it or not, all of it left, once.
    EXPECT_EQ(inner_bytes, frame.size() + (got.size() - 1) * inner.l5);
  }
  const TunnelPeer* p = peer_at(peers_of(dp), kPeerSlot4);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->ev[RG_PEER_EV_ENCAPSULATED].packets, kSegs) << "the program saw a GSO skb of 3 segments";
  EXPECT_EQ(p->ev[RG_PEER_EV_SEQ_SENT].packets, 0u) << "numbered";
  EXPECT_EQ(p->ev[RG_PEER_EV_SHIELD_UNCOPIED].packets, 1u);
  EXPECT_EQ(p->ev[RG_PEER_EV_SHIELD_COPIES].packets, 0u);
}

// The shield of one peer copies nothing sent to another.
TEST_F(TunnelShield, OnlyTheShieldedPeer) {
  WireTap tap;
  Dataplane dp(seq_config());
  dp.tunnels();
  dp.shield(kPeerSlot6, RG_PEER_F_SHIELD_ALL);
  dp.tc(towards_peer(false).build());
  const Verdict r6 = dp.tc(towards_peer(true).build());
  const std::vector<Bytes> got = tap.geneve_until_marker();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(hex(got[0]), hex(r6.out));
}

// Without numbers the far gateway could not tell a copy from a new packet:
// nothing is copied, and the peer's counters say so.
TEST_F(TunnelShield, UnnumberedFramesAreSentOnce) {
  WireTap tap;
  Dataplane dp;  // sequence option off
  dp.tunnels();
  dp.shield(kPeerSlot4, RG_PEER_F_SHIELD_ALL);
  ASSERT_TRUE(parse(dp.tc(towards_peer(false).build()).out).geneve);
  EXPECT_TRUE(tap.geneve_until_marker().empty());
  const TunnelPeer* p = peer_at(peers_of(dp), kPeerSlot4);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->ev[RG_PEER_EV_SHIELD_UNCOPIED].packets, 1u);
  EXPECT_EQ(p->ev[RG_PEER_EV_SHIELD_COPIES].packets, 0u);
}

// "auto" turns the shield on through rg_peer_ctl, on top of the
// configuration's; the option says which numbers are sent twice.
TEST_F(TunnelShield, AutoCopiesAndTheOptionSaysWhichNumbersAreCopied) {
  WireTap tap;
  Dataplane dp(seq_config());
  dp.tunnels();
  dp.shield(kPeerSlot4, RG_PEER_F_SHIELD_CONTROL);
  const Bytes plain = roce_to_peer(0x04).payload(64).build();
  const Bytes asks = roce_to_peer(0x04, true).payload(64).build();
  const Bytes once = dp.tc(plain).out, twice = dp.tc(asks).out;
  EXPECT_EQ(numbered(once).stream & RG_TUNNEL_F_COPIED, 0u) << "control does not copy it";
  EXPECT_EQ(numbered(twice).stream & RG_TUNNEL_F_COPIED, RG_TUNNEL_F_COPIED);
  std::vector<Bytes> got = tap.geneve_until_marker();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(hex(got[0]), hex(twice)) << "the copy says it too";

  dp.peer_ctl(kPeerSlot4, 0, RG_PEER_F_SHIELD_ALL);
  const Bytes now_twice = dp.tc(plain).out;
  EXPECT_EQ(numbered(now_twice).stream & RG_TUNNEL_F_COPIED, RG_TUNNEL_F_COPIED);
  got = tap.geneve_until_marker();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(hex(got[0]), hex(now_twice));

  dp.shield(kPeerSlot4, 0);
  dp.peer_ctl(kPeerSlot4, 0, 0);
  EXPECT_EQ(numbered(dp.tc(asks).out).stream & RG_TUNNEL_F_COPIED, 0u) << "off: nothing copied";
  EXPECT_TRUE(tap.geneve_until_marker().empty());
}

// What `roceguard run` decides holds only while it renews it: past the
// decision's lifetime (the daemon stopped, the programs stayed attached)
// the programs copy nothing for "auto" and report no measure, so neither
// gateway keeps a shield on that nobody decides on any more.
TEST_F(TunnelShield, AnExpiredDecisionIsNeitherCopiedNorReported) {
  const uint32_t feedback = RG_FEEDBACK_VALID | 10'590;
  for (bool expired : {false, true}) {
    SCOPED_TRACE(expired ? "the lifetime is over" : "the lifetime runs");
    WireTap tap;
    Dataplane dp(seq_config());
    dp.tunnels();
    dp.peer_ctl(kPeerSlot4, feedback, RG_PEER_F_SHIELD_ALL, expired ? 1 : UINT64_MAX);
    const Bytes out = dp.tc(roce_to_peer(0x04).payload(64).build()).out;
    ASSERT_EQ(parse(out).gnv_optlen, kOptLen + kExtLen) << "number 0 carries the extension";
    EXPECT_EQ(numbered(out).stream & RG_TUNNEL_F_COPIED, expired ? 0u : RG_TUNNEL_F_COPIED);
    EXPECT_EQ(tap.geneve_until_marker().size(), expired ? 0u : 1u) << "the copy";
    EXPECT_EQ(be32_at(out, kOpt4 + 16), expired ? 0u : feedback) << "the feedback word";
  }
}

// ---------------------------------------------------------------------------
// The loss shield: gateway B's elimination (both ingress hooks).

// What the peer's option says is kept for `roceguard run` (rg_peer_rx): the
// first arrivals of numbers it sent twice (never a second copy), and its
// extension's feedback and flags.
TEST(TunnelShieldDecap, ThePeersReportIsKept) {
  Dataplane dp(seq_config());
  dp.tunnels();
  const Bytes inner = towards_peer(false).build();
  const uint32_t copied = stream_of(5, 0, 0, RG_TUNNEL_F_COPIED | RG_TUNNEL_F_ELIMINATES);
  const uint32_t single = stream_of(5, 0, 0, RG_TUNNEL_F_ELIMINATES);
  const uint32_t feedback = RG_FEEDBACK_VALID | 4321;
  const Bytes first = geneve_with(seq_option(copied, 0, tai_now_ns(), RG_TUNNEL_OPT_CLASS_DEFAULT, feedback), inner);
  ASSERT_EQ(dp.xdp(first).ret, kXdpPass);
  rg_peer_rx rx = dp.peer_rx(kPeerSlot4);
  EXPECT_EQ(rx.copied, 1u);
  EXPECT_EQ(rx.feedback, feedback);
  EXPECT_EQ(rx.flags, RG_TUNNEL_F_COPIED | RG_TUNNEL_F_ELIMINATES);
  EXPECT_NE(rx.at_ns, 0u);
  ASSERT_EQ(dp.xdp(first).ret, kXdpDrop) << "its second copy";
  ASSERT_EQ(dp.xdp(geneve_with(seq_option_short(single, 1), inner)).ret, kXdpPass);
  ASSERT_EQ(dp.xdp(geneve_with(seq_option_short(copied, 2), inner)).ret, kXdpPass);
  rx = dp.peer_rx(kPeerSlot4);
  EXPECT_EQ(rx.copied, 2u) << "numbers 0 and 2; not the second copy of 0, not the single 1";
  EXPECT_EQ(rx.feedback, feedback) << "only an extension carries feedback";
  const TunnelPeer* p = peer_at(peers_of(dp), kPeerSlot4);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->received, 3u);
  EXPECT_EQ(p->ev[RG_PEER_EV_SHIELD_ELIMINATED].packets, 1u);
}

// A's numbered frames, each arriving twice (and a third time): B hands
// each to the host once, and counts the rest as eliminated.
TEST(TunnelShieldDecap, SecondAndThirdCopiesAreEliminated) {
  for (bool v6 : {false, true}) {
    SCOPED_TRACE(v6 ? "IPv6 outer" : "IPv4 outer");
    Dataplane dp(seq_config());
    dp.tunnels();
    dp.shield(v6 ? kPeerSlot6 : kPeerSlot4, RG_PEER_F_SHIELD_ALL);
    for (uint32_t psn = 0; psn < 5; ++psn) {
      const Bytes in = towards_peer(v6, psn).build();
      const Bytes out = dp.tc(in).out;
      const Verdict first = dp.xdp(out);
      ASSERT_EQ(first.ret, kXdpPass);
      EXPECT_EQ(first.out.size(), in.size()) << "decapsulated";
      EXPECT_EQ(dp.xdp(out).ret, kXdpDrop) << "the second copy";
      EXPECT_EQ(dp.xdp(out).ret, kXdpDrop) << "a copy of an eliminated copy";
    }
    const TunnelPeer* p = peer_at(peers_of(dp), v6 ? kFarEnd6 : kFarEnd4);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p->ev[RG_PEER_EV_SHIELD_ELIMINATED].packets, 10u);
    EXPECT_EQ(p->ev[RG_PEER_EV_DECAPSULATED].packets, 5u) << "what reached the host";
    EXPECT_EQ(p->received, 5u);
    EXPECT_EQ(p->duplicated, 10u);
    EXPECT_EQ(p->lost + p->unsettled, 0u);
    EXPECT_EQ(dp.events(RG_DIR_INGRESS)["roce_packets"], 5u) << "the host's RoCE, counted once";
  }
}

struct EliminationCase {
  std::string name;
  uint32_t epoch;
  std::vector<std::pair<uint32_t, bool>> arrivals;  // {seq, eliminated}
};

std::vector<EliminationCase> elimination_cases() {
  std::vector<std::pair<uint32_t, bool>> late;
  for (uint32_t s = 0; s <= RG_TUNNEL_WINDOW + 76; ++s) late.push_back({s, false});
  late.push_back({0, false});  // older than the window: cannot tell, delivered
  late.push_back({77, true});  // still inside it
  std::vector<std::pair<uint32_t, bool>> far_edge;
  for (uint32_t s = 5000; s < 5000 + RG_TUNNEL_WINDOW; ++s) far_edge.push_back({s, false});
  far_edge.push_back({5000, true});  // the oldest number the window holds
  return {
      {"CopiesInTheWindow", 9, {{0, false}, {1, false}, {0, true}, {1, true}, {2, false}, {2, true}}},
      {"UnderWrap", 9, {{0xfffffffe, false}, {0xffffffff, false}, {0, false}, {0xffffffff, true}, {0, true}}},
      {"LateCopyBeyondTheWindow", 9, late},
      {"AtTheWindowsFarEdge", 9, far_edge},
      {"ReorderedIsNoCopy", 9, {{0, false}, {2, false}, {1, false}, {1, true}}},
      {"SenderWithoutEpochsIsNeverEliminated", 0, {{0, false}, {1, false}, {1, false}, {0, false}}},
  };
}

void PrintTo(const EliminationCase& c, std::ostream* os) { *os << c.name; }

class TunnelShieldElimination : public ::testing::TestWithParam<EliminationCase> {};

TEST_P(TunnelShieldElimination, DropsExactlyTheSecondArrivals) {
  const EliminationCase& tc = GetParam();
  Dataplane dp(seq_config());
  dp.tunnels();
  const Bytes inner = towards_peer(false).build();
  const uint64_t sent = tai_now_ns();
  uint64_t eliminated = 0;
  for (size_t i = 0; i < tc.arrivals.size(); ++i) {
    const auto [seq, copy] = tc.arrivals[i];
    const Verdict r = dp.xdp(geneve_with(seq_option(stream_of(tc.epoch, 3, 5), seq, sent), inner));
    ASSERT_EQ(r.ret, copy ? kXdpDrop : kXdpPass) << "arrival " << i << ", seq " << seq;
    eliminated += copy;
  }
  const TunnelPeer* p = peer_at(peers_of(dp), kPeerSlot4);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->ev[RG_PEER_EV_SHIELD_ELIMINATED].packets, eliminated);
  EXPECT_EQ(p->ev[RG_PEER_EV_DECAPSULATED].packets, tc.arrivals.size() - eliminated);
}

INSTANTIATE_TEST_SUITE_P(, TunnelShieldElimination, ::testing::ValuesIn(elimination_cases()),
                         [](const auto& info) { return info.param.name; });

// Fills the stream table with streams of the peer in slot, as packets
// forged from its address would: epoch 1, number 0 arrived, last at last_ns
// (CLOCK_MONOTONIC). Their ids are below RG_MAX_TUNNEL_STREAMS.
void fill_streams(const Dataplane& dp, uint32_t slot, uint64_t last_ns) {
  const int fd = bpf_map__fd(dp.skel()->maps.rg_tunnel_streams);
  rg_tunnel_stream st{};
  st.epoch = 1;
  std::fill(std::begin(st.window), std::end(st.window), ~0ull);
  st.received = 1;
  st.last_ns = last_ns;
  for (uint32_t id = 0; id < RG_MAX_TUNNEL_STREAMS; ++id) {
    const rg_tunnel_stream_key key{slot, id};
    ASSERT_EQ(bpf_map_update_elem(fd, &key, &st, BPF_NOEXIST), 0) << "stream " << id << ": " << std::strerror(errno);
  }
}

// A stream id no filler uses: CPU 0x7ff, lane 0.
constexpr uint32_t kGenuineCpu = 0x7ff;

// The stream table full (of streams forged from the peer's address, say):
// a new genuine stream of the peer goes untracked, and both copies of each
// of its shielded numbers reach the host. They count as delivered
// duplicates, and what this gateway sends that peer stops saying it
// eliminates, so the peer's shield ("auto") stops copying to it.
TEST(TunnelSeqDecap, FullTableStopsEliminatingAndCountsDeliveredDuplicates) {
  Dataplane dp(seq_config());
  dp.tunnels();
  ASSERT_NO_FATAL_FAILURE(fill_streams(dp, kPeerSlot4, monotonic_now_ns()));
  const uint32_t before = numbered(dp.tc(towards_peer(false).build()).out).stream;
  ASSERT_EQ(before & RG_TUNNEL_F_ELIMINATES, RG_TUNNEL_F_ELIMINATES) << "nothing untracked yet";
  const Bytes inner = towards_peer(false).build();
  const uint32_t copied = stream_of(5, kGenuineCpu, 0, RG_TUNNEL_F_COPIED | RG_TUNNEL_F_ELIMINATES);
  constexpr uint32_t kNumbers = 200;
  for (uint32_t n = 0; n < kNumbers; ++n) {
    const Bytes both = geneve_with(seq_option_short(copied, n), inner);
    ASSERT_EQ(dp.xdp(both).ret, kXdpPass) << n;
    ASSERT_EQ(dp.xdp(both).ret, kXdpPass) << n << ": no stream, nothing eliminates the copy";
  }
  // Right after the arrivals: the option says it for RG_TUNNEL_UNTRACKED_HOLD_NS after the last.
  const uint32_t after = numbered(dp.tc(towards_peer(false).build()).out).stream;
  EXPECT_EQ(after & RG_TUNNEL_F_ELIMINATES, 0u) << "it does not eliminate that peer's copies";
  // The other peer's streams are tracked: towards it, it still does.
  const Bytes v6 = dp.tc(towards_peer(true).build()).out;
  ASSERT_GE(v6.size(), size_t{14 + 40 + 8 + 8 + 8});
  EXPECT_EQ(be32_at(v6, 14 + 40 + 8 + 8 + 4) & RG_TUNNEL_F_ELIMINATES, RG_TUNNEL_F_ELIMINATES);
  const std::vector<TunnelPeer> peers = peers_of(dp);
  const TunnelPeer* p = peer_at(peers, kPeerSlot4);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->ev[RG_PEER_EV_SEQ_UNTRACKED].packets, 2 * kNumbers);
  EXPECT_EQ(p->ev[RG_PEER_EV_SHIELD_ELIMINATED].packets, 0u);
  EXPECT_EQ(p->duplicates_delivered, kNumbers) << "the second copy of every number reached the host";
}

// Streams silent for RG_TUNNEL_STREAM_IDLE_NS are evicted (`roceguard run`
// does it on its periodic pass), a busy one stays: a table that streams
// sent once filled makes room for the genuine one, whose copies are then
// eliminated again, and the peer's totals keep the evicted streams' counts.
TEST(TunnelSeqStreams, IdleStreamsMakeRoomAndKeepTheirCounts) {
  Dataplane dp(seq_config());
  dp.tunnels();
  const int streams = bpf_map__fd(dp.skel()->maps.rg_tunnel_streams);
  const int retired = bpf_map__fd(dp.skel()->maps.rg_tunnel_retired);
  const uint64_t now = monotonic_now_ns();
  ASSERT_GT(now, RG_TUNNEL_STREAM_IDLE_NS);
  ASSERT_NO_FATAL_FAILURE(fill_streams(dp, kPeerSlot4, now - RG_TUNNEL_STREAM_IDLE_NS));
  rg_tunnel_stream busy{};
  const rg_tunnel_stream_key busy_key{kPeerSlot4, 7};
  ASSERT_EQ(bpf_map_lookup_elem_flags(streams, &busy_key, &busy, BPF_F_LOCK), 0);
  busy.last_ns = now;
  ASSERT_EQ(bpf_map_update_elem(streams, &busy_key, &busy, BPF_EXIST | BPF_F_LOCK), 0);

  const Bytes inner = towards_peer(false).build();
  const uint32_t genuine = stream_of(5, kGenuineCpu, 0, RG_TUNNEL_F_COPIED | RG_TUNNEL_F_ELIMINATES);
  const Bytes first = geneve_with(seq_option_short(genuine, 0), inner);
  ASSERT_EQ(dp.xdp(first).ret, kXdpPass);
  ASSERT_EQ(dp.xdp(first).ret, kXdpPass) << "the table is full: untracked";

  EXPECT_EQ(evict_idle_streams(streams, retired, monotonic_now_ns()), RG_MAX_TUNNEL_STREAMS - 1u);
  EXPECT_EQ(evict_idle_streams(streams, retired, monotonic_now_ns()), 0u) << "nothing idle is left";
  const Bytes next = geneve_with(seq_option_short(genuine, 1), inner);
  ASSERT_EQ(dp.xdp(next).ret, kXdpPass);
  EXPECT_EQ(dp.xdp(next).ret, kXdpDrop) << "tracked again: its copy is eliminated";

  const std::vector<TunnelPeer> peers = peers_of(dp);
  const TunnelPeer* p = peer_at(peers, kPeerSlot4);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->streams, 2u) << "the busy one and the genuine one";
  EXPECT_EQ(p->evicted, RG_MAX_TUNNEL_STREAMS - 1u);
  EXPECT_EQ(p->received, RG_MAX_TUNNEL_STREAMS + 1u) << "the evicted streams' arrivals count on";
  EXPECT_EQ(p->lost, 0u);
  EXPECT_EQ(p->ev[RG_PEER_EV_SHIELD_ELIMINATED].packets, 1u);
  EXPECT_EQ(p->duplicates_delivered, 1u) << "number 0, delivered twice while untracked";
}

// ---------------------------------------------------------------------------
// The option's authentication: a tunnel with a key.

constexpr TunnelKey kKey{0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07,
                         0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f};
constexpr TunnelKey kNextKey{0xf0, 0xe1, 0xd2, 0xc3, 0xb4, 0xa5, 0x96, 0x87,
                             0x78, 0x69, 0x5a, 0x4b, 0x3c, 0x2d, 0x1e, 0x0f};

// The ABI's 16 bytes of an address (IPv4 in the first 4).
std::array<uint8_t, 16> addr16(const char* text) { return parse_address(text)->bytes; }

// The option the IPv4 peer (kPeer4 to kLocal4) sends with key: its MAC over
// the option's words and the tunnel's addresses and VNI.
Bytes signed_option(const TunnelKey& key, uint32_t stream, uint32_t seq, std::optional<TunnelOptExt> ext = {}) {
  const auto src = addr16(kPeer4), dst = addr16(kLocal4);
  std::optional<TunnelOptWords> words;
  if (ext) words = TunnelOptWords{ext->sent_us, ext->feedback};
  const uint64_t mac = tunnel_option_mac(key, src.data(), dst.data(), kVni4, stream, seq, words);
  return tunnel_seq_option(stream, seq, ext, RG_TUNNEL_OPT_CLASS_DEFAULT, RG_TUNNEL_OPT_TYPE_DEFAULT, mac);
}

rg_peer_guard guard_of(const Dataplane& dp, uint32_t slot) {
  for (const auto& row : read_peer_stats(bpf_map__fd(dp.skel()->maps.rg_peer_stats),
                                         bpf_map__fd(dp.skel()->maps.rg_peer_guard), -1))
    if (row.slot == slot) return row.guard;
  return {};
}

// SipHash-2-4 itself: the reference vectors of its paper (key 00..0f; the
// empty message, and the 15 bytes 00..0e).
TEST(TunnelAuth, SipHashGivesTheReferenceVectors) {
  EXPECT_EQ(siphash24(kKey, nullptr, 0), 0x726fdb47dd0e0e31ull);
  uint8_t m[15];
  for (uint8_t i = 0; i < sizeof(m); ++i) m[i] = i;
  EXPECT_EQ(siphash24(kKey, m, sizeof(m)), 0xa129ca6149be45e5ull);
}

// With a key, what gateway A sends carries the MAC (the type says so), and
// the far end with the same key takes it: a stream, its numbers, its
// copies eliminated.
TEST(TunnelAuth, SignedOptionsRoundTrip) {
  Dataplane dp(seq_config());
  dp.tunnels();
  dp.auth(kPeerSlot4, {kKey});
  dp.auth(kFarEnd4, {kKey});
  const Bytes in = towards_peer(false).build();
  for (uint32_t n = 0; n < 2; ++n) {
    const Bytes out = dp.tc(in).out;
    const View v = parse(out);
    ASSERT_TRUE(v.geneve);
    ASSERT_EQ(v.gnv_optlen, opt_len_of(n) + sizeof(rg_tunnel_opt_mac)) << "8 bytes of MAC";
    EXPECT_EQ(out[kOpt4 + 2], RG_TUNNEL_OPT_TYPE_DEFAULT | RG_TUNNEL_OPT_TYPE_AUTH);
    const uint32_t stream = be32_at(out, kOpt4 + 4), seq = be32_at(out, kOpt4 + 8);
    std::optional<TunnelOptWords> ext;
    if (n == 0) ext = TunnelOptWords{be32_at(out, kOpt4 + 12), be32_at(out, kOpt4 + 16)};
    const auto src = addr16(kLocal4), dst = addr16(kPeer4);
    const uint64_t want = tunnel_option_mac(kKey, src.data(), dst.data(), kVni4, stream, seq, ext);
    const size_t mac_at = kOpt4 + opt_len_of(n);
    EXPECT_EQ((uint64_t{be32_at(out, mac_at)} << 32) | be32_at(out, mac_at + 4), want);
    EXPECT_EQ(hex(slice(out, v.inner)), hex(in)) << "the inner frame follows the MAC";
    ASSERT_EQ(dp.xdp(out).ret, kXdpPass);
    EXPECT_EQ(dp.xdp(out).ret, kXdpDrop) << "its copy, eliminated";
  }
  const std::vector<TunnelPeer> peers = peers_of(dp);
  const TunnelPeer* far = peer_at(peers, kFarEnd4);
  ASSERT_NE(far, nullptr);
  EXPECT_EQ(far->received, 2u);
  EXPECT_EQ(far->ev[RG_PEER_EV_SHIELD_ELIMINATED].packets, 2u);
  EXPECT_EQ(far->auth_bad + far->auth_missing, 0u);
}

// With a key, an option whose MAC is wrong (forged from the peer's address
// without the key) touches nothing: no stream, no number marked as
// arrived (the genuine packet with that number is delivered afterwards),
// no feedback taken. An option without a MAC is ignored the same way. The
// packet itself is decapsulated, as a peer without the option would have it.
TEST(TunnelAuth, AForgedOptionTouchesNoState) {
  Dataplane dp(seq_config());
  dp.tunnels();
  dp.auth(kPeerSlot4, {kKey});
  const Bytes inner = towards_peer(false).build();
  const uint32_t stream = stream_of(5, 1, 2, RG_TUNNEL_F_COPIED | RG_TUNNEL_F_ELIMINATES);
  const uint32_t forged_feedback = RG_FEEDBACK_VALID | 999999;
  const TunnelOptExt ext{static_cast<uint32_t>(tai_now_ns() / 1000), forged_feedback};
  const TunnelKey wrong{};
  for (const Bytes& forged : {signed_option(wrong, stream, 0, ext),
                              seq_option(stream, 0, tai_now_ns(), RG_TUNNEL_OPT_CLASS_DEFAULT, forged_feedback)}) {
    const Verdict r = dp.xdp(geneve_with(forged, inner));
    ASSERT_EQ(r.ret, kXdpPass);
    EXPECT_EQ(r.out.size(), inner.size()) << "decapsulated";
  }
  {
    const std::vector<TunnelPeer> before = peers_of(dp);
    ASSERT_NE(peer_at(before, kPeerSlot4), nullptr);
    EXPECT_EQ(peer_at(before, kPeerSlot4)->streams, 0u) << "no stream";
  }
  const rg_peer_rx rx = dp.peer_rx(kPeerSlot4);
  EXPECT_EQ(rx.feedback, 0u) << "the forged loss report is not taken";
  EXPECT_EQ(rx.at_ns, 0u);
  rg_peer_guard g = guard_of(dp, kPeerSlot4);
  EXPECT_EQ(g.auth_bad, 1u);
  EXPECT_EQ(g.auth_missing, 1u);

  // The genuine number 0 (feedback 0) and its copy; then a forged 1 before the genuine 1.
  const TunnelOptExt genuine_ext{ext.sent_us, 0};
  const Bytes first = geneve_with(signed_option(kKey, stream, 0, genuine_ext), inner);
  ASSERT_EQ(dp.xdp(first).ret, kXdpPass) << "number 0 was never marked as arrived";
  ASSERT_EQ(dp.xdp(first).ret, kXdpDrop) << "its copy";
  ASSERT_EQ(dp.xdp(geneve_with(signed_option(wrong, stream, 1), inner)).ret, kXdpPass);
  const Bytes second = geneve_with(signed_option(kKey, stream, 1), inner);
  ASSERT_EQ(dp.xdp(second).ret, kXdpPass) << "number 1 was never marked as arrived";
  ASSERT_EQ(dp.xdp(second).ret, kXdpDrop);
  const std::vector<TunnelPeer> peers = peers_of(dp);
  const TunnelPeer* p = peer_at(peers, kPeerSlot4);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->streams, 1u);
  EXPECT_EQ(p->received, 2u);
  EXPECT_EQ(p->ev[RG_PEER_EV_SHIELD_ELIMINATED].packets, 2u);
  EXPECT_EQ(dp.peer_rx(kPeerSlot4).feedback, 0u) << "the genuine report";
  EXPECT_EQ(dp.peer_rx(kPeerSlot4).copied, 2u);
  g = guard_of(dp, kPeerSlot4);
  EXPECT_EQ(g.auth_bad, 2u);
  EXPECT_EQ(p->auth_bad, 2u);
}

// A rotation: the receiver holds the current key and the next one and
// accepts either (the next counted apart); a key it does not hold is
// refused. The sender signs with its file's first key.
TEST(TunnelAuth, TheNextKeyIsAcceptedDuringARotation) {
  Dataplane dp(seq_config());
  dp.tunnels();
  dp.auth(kPeerSlot4, {kKey, kNextKey});
  const Bytes inner = towards_peer(false).build();
  const uint32_t stream = stream_of(5, 1, 2);
  EXPECT_EQ(dp.xdp(geneve_with(signed_option(kKey, stream, 0), inner)).ret, kXdpPass);
  EXPECT_EQ(dp.xdp(geneve_with(signed_option(kNextKey, stream, 1), inner)).ret, kXdpPass);
  EXPECT_EQ(dp.xdp(geneve_with(signed_option(kNextKey, stream, 1), inner)).ret, kXdpDrop) << "a copy";
  TunnelKey other = kNextKey;
  other[0] ^= 1;
  EXPECT_EQ(dp.xdp(geneve_with(signed_option(other, stream, 2), inner)).ret, kXdpPass);
  const rg_peer_guard g = guard_of(dp, kPeerSlot4);
  EXPECT_EQ(g.auth_next, 2u);
  EXPECT_EQ(g.auth_bad, 1u);
  const std::vector<TunnelPeer> peers = peers_of(dp);
  const TunnelPeer* p = peer_at(peers, kPeerSlot4);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->received, 2u) << "numbers 0 and 1; the unknown key's 2 never counted";

  // The other way: with the next key first, the sender signs with it.
  dp.auth(kPeerSlot4, {kNextKey, kKey});
  const Bytes out = dp.tc(towards_peer(false).build()).out;
  const uint32_t s = be32_at(out, kOpt4 + 4), n = be32_at(out, kOpt4 + 8);
  ASSERT_EQ(n, 0u);
  const auto src = addr16(kLocal4), dst = addr16(kPeer4);
  const uint64_t want = tunnel_option_mac(kNextKey, src.data(), dst.data(), kVni4, s, n,
                                          TunnelOptWords{be32_at(out, kOpt4 + 12), be32_at(out, kOpt4 + 16)});
  const size_t mac_at = kOpt4 + opt_len_of(0);
  EXPECT_EQ((uint64_t{be32_at(out, mac_at)} << 32) | be32_at(out, mac_at + 4), want);
}

// A tunnel without a key takes the option as before, signed or not: an
// older peer, or one whose key this gateway was not given.
TEST(TunnelAuth, WithoutAKeyTheMacIsNotRequired) {
  Dataplane dp(seq_config());
  dp.tunnels();
  const Bytes inner = towards_peer(false).build();
  const uint32_t stream = stream_of(5, 1, 2);
  EXPECT_EQ(dp.xdp(geneve_with(signed_option(kKey, stream, 0), inner)).ret, kXdpPass);
  EXPECT_EQ(dp.xdp(geneve_with(seq_option_short(stream, 1), inner)).ret, kXdpPass);
  EXPECT_EQ(dp.xdp(geneve_with(seq_option_short(stream, 1), inner)).ret, kXdpDrop);
  const std::vector<TunnelPeer> peers = peers_of(dp);
  const TunnelPeer* p = peer_at(peers, kPeerSlot4);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->received, 2u);
}

// A new epoch's numbers are new packets, even those the old epoch used.
TEST(TunnelShieldDecap, ARestartIsNoCopy) {
  Dataplane dp(seq_config());
  dp.tunnels();
  const Bytes inner = towards_peer(false).build();
  const uint64_t sent = tai_now_ns();
  for (uint32_t epoch : {7u, 8u})
    for (uint32_t s = 0; s < 10; ++s)
      ASSERT_EQ(dp.xdp(geneve_with(seq_option(stream_of(epoch, 0, 0), s, sent), inner)).ret, kXdpPass)
          << "epoch " << epoch << ", seq " << s;
}

// tshark decodes the numbered packets as Geneve with one option of our
// class, the inner RoCE intact behind it, and nothing malformed.
TEST(OracleTables, EncapWithSequenceOption) {
  Dataplane dp(seq_config());
  dp.tunnels();
  std::vector<Bytes> emitted;
  std::vector<TsharkRow> want;
  for (bool v6 : {false, true, false}) {
    // Number 0 of each peer's stream carries the extension; the second IPv4 one does not.
    const bool ext = emitted.size() < 2;
    emitted.push_back(dp.tc(towards_peer(v6).build()).out);
    TsharkRow w;
    w["frame.protocols"] = std::string("eth:ethertype:") + (v6 ? "ipv6" : "ip") + ":udp:geneve:eth:ethertype:" +
                           (v6 ? "ipv6" : "ip") + ":udp:infiniband";
    w["geneve.option.class"] = "0xff52";
    // The base header's option length, then the option's own; both in bytes.
    w["geneve.option.length"] = ext ? "20,20" : "12,12";
    w["geneve.option.type"] = "0x02";
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

// ---------------------------------------------------------------------------
// The congestion loop's data path (tunnel.congestion): the phantom queue's
// inner CE mark at TC egress, the report in the extension, and what
// gateway B keeps of the peer's reports and delays.

rg_config congestion_config() {
  rg_config c = seq_config();
  c.flags |= RG_CFG_F_CONGESTION;
  return c;
}


// The inner IPv4 header's checksum as RFC 1071 computes it, here, over the
// header the program left: 0 when the header is consistent.
uint16_t header_sum(const Bytes& frame, size_t at) {
  uint32_t sum = 0;
  for (size_t i = 0; i < 20; i += 2) sum += (uint32_t{frame[at + i]} << 8) | frame[at + i + 1];
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

// A queue above its threshold marks ECT(0) and ECT(1) CE on the inner IP
// header, IPv4 (checksum right, checked here by its own sum) and IPv6
// alike; Not-ECT and CE are left as they were and counted as unmarkable.
TEST(CongestionEncap, TheQueueMarksInnerCeOnEcnCapablePacketsOnly) {
  for (bool v6 : {false, true}) {
    SCOPED_TRACE(v6 ? "inner and outer IPv6" : "inner and outer IPv4");
    Dataplane dp(congestion_config());
    dp.tunnels();
    const uint32_t slot = v6 ? kPeerSlot6 : kPeerSlot4;
    dp.peer_cc(slot, cc_of(kSlowDrain, 0, 1));
    uint64_t marked = 0, unmarkable = 0;
    for (uint8_t ecn : {0, 1, 2, 3}) {
      SCOPED_TRACE("ECN " + std::to_string(ecn));
      const Bytes out = dp.tc(towards_peer(v6).ecn(ecn).build()).out;
      const View outer = parse(out);
      ASSERT_TRUE(outer.geneve);
      const View inner = parse_inner(out);
      ASSERT_TRUE(inner.roce);
      const bool capable = ecn == 1 || ecn == 2;
      EXPECT_EQ(inner.ecn(), capable ? 3 : ecn);
      EXPECT_EQ(inner.dscp(), 46) << "the class stays";
      EXPECT_TRUE(inner.icrc_ok) << "the ICRC leaves the traffic class out";
      if (!v6) {
        EXPECT_TRUE(inner.ipv4_csum_ok);
        EXPECT_EQ(header_sum(out, outer.inner + 14), 0);
      }
      (capable ? marked : unmarkable)++;
    }
    const rg_peer_pq q = dp.peer_pq(slot);
    EXPECT_EQ(q.packets, 4u);
    EXPECT_EQ(q.marked, marked);
    EXPECT_EQ(q.not_ect, unmarkable);
  }
}

// Below the threshold nothing is marked, but every frame counts, in inner
// bytes (the far gateway's measure of delivery); the shield's copy counts
// twice against the peer's rate.
TEST(CongestionEncap, BelowTheThresholdFramesCountButAreNotMarked) {
  WireTap tap;
  Dataplane dp(congestion_config());
  dp.tunnels();
  dp.peer_cc(kPeerSlot4, cc_of(1, 1'000'000'000, 1'000'000'001));
  const Bytes in = towards_peer(false).ecn(2).build();
  EXPECT_EQ(parse_inner(dp.tc(in).out).ecn(), 2);
  dp.shield(kPeerSlot4, RG_PEER_F_SHIELD_ALL);
  EXPECT_EQ(parse_inner(dp.tc(in).out).ecn(), 2);
  EXPECT_EQ(tap.geneve_until_marker().size(), 1u) << "the copy";
  const rg_peer_pq q = dp.peer_pq(kPeerSlot4);
  EXPECT_EQ(q.packets, 3u);
  EXPECT_EQ(q.bytes, 3 * in.size());
  EXPECT_EQ(q.marked, 0u);
  EXPECT_EQ(q.not_ect, 0u);
}

// The decision holds only while `roceguard run` renews it; without one,
// or with the configuration's loop off, nothing is marked or queued.
TEST(CongestionEncap, WithoutACurrentDecisionNothingIsMarked) {
  const Bytes in = towards_peer(false).ecn(2).build();
  {
    SCOPED_TRACE("the decision's lifetime is over");
    Dataplane dp(congestion_config());
    dp.tunnels();
    dp.peer_cc(kPeerSlot4, cc_of(kSlowDrain, 0, 1, 1));
    EXPECT_EQ(parse_inner(dp.tc(in).out).ecn(), 2);
    EXPECT_EQ(dp.peer_pq(kPeerSlot4).packets, 0u);
  }
  {
    SCOPED_TRACE("no rate: the model has not converged");
    Dataplane dp(congestion_config());
    dp.tunnels();
    dp.peer_cc(kPeerSlot4, cc_of(0, 0, 1));
    EXPECT_EQ(parse_inner(dp.tc(in).out).ecn(), 2);
    EXPECT_EQ(dp.peer_pq(kPeerSlot4).packets, 0u);
  }
  {
    SCOPED_TRACE("tunnel.congestion off");
    Dataplane dp(seq_config());
    dp.tunnels();
    dp.peer_cc(kPeerSlot4, cc_of(kSlowDrain, 0, 1));
    EXPECT_EQ(parse_inner(dp.tc(in).out).ecn(), 2);
    EXPECT_EQ(dp.peer_pq(kPeerSlot4).packets, 0u);
  }
}

// A phantom queue that drains a frame of in bytes in about frame_ns: its
// picoseconds per byte, and the frame's drain at that rate, exactly.
struct FrameDrain {
  uint32_t ps_per_byte;
  uint64_t frame_ns;
};
FrameDrain frame_drain(const Bytes& in, uint64_t frame_ns) {
  const auto ps = static_cast<uint32_t>(frame_ns * 1000 / in.size());
  return {ps, uint64_t{in.size()} * ps / 1000};
}

// Between its thresholds the queue marks a share that grows with its
// backlog. Drained so slowly that a frame takes 100 ms, frame k finds about
// k frames' time queued: with thresholds at 10 and 20 frames' time, frames
// 1-10 are never marked, and from frame 26 on every one is (unless the
// test took half a second to send them).
TEST(CongestionEncap, TheMarkingShareGrowsWithTheBacklog) {
  Dataplane dp(congestion_config());
  dp.tunnels();
  const Bytes in = towards_peer(false).ecn(2).build();
  const auto [ps_per_byte, frame_ns] = frame_drain(in, 100'000'000);
  rg_peer_cc cc = cc_of(ps_per_byte, static_cast<uint32_t>(10 * frame_ns), static_cast<uint32_t>(20 * frame_ns));
  cc.cap_ns = UINT32_MAX;
  ASSERT_LT(40 * frame_ns, uint64_t{UINT32_MAX});
  dp.peer_cc(kPeerSlot4, cc);
  std::vector<int> marks;
  for (int k = 1; k <= 40; ++k) marks.push_back(parse_inner(dp.tc(in).out).ecn() == 3);
  for (int k = 1; k <= 10; ++k) EXPECT_EQ(marks[k - 1], 0) << "frame " << k;
  for (int k = 26; k <= 40; ++k) EXPECT_EQ(marks[k - 1], 1) << "frame " << k;
  EXPECT_EQ(dp.peer_pq(kPeerSlot4).marked, static_cast<uint64_t>(std::count(marks.begin(), marks.end(), 1)));
  EXPECT_EQ(dp.peer_pq(kPeerSlot4).capped, 0u);
}

// With a report to send, every other extension of a stream carries it
// instead of the loss measure: numbers 0 and 32 the measure, 16 the report.
class CongestionEncapReport : public OnOneCpu {};

TEST_F(CongestionEncapReport, EveryOtherExtensionCarriesTheReport) {
  Dataplane dp(congestion_config());
  dp.tunnels();
  const uint32_t loss = RG_FEEDBACK_VALID | 1234;
  const uint32_t report = RG_FEEDBACK_REPORT | RG_REPORT_F_DELAY | (77u << RG_REPORT_RATE_SHIFT) | 5;
  dp.peer_ctl(kPeerSlot4, loss);
  dp.peer_cc(kPeerSlot4, cc_of(0, 0, 1, UINT64_MAX, report));
  const Bytes in = towards_peer(false).build();
  for (uint32_t n = 0; n <= 32; ++n) {
    const Bytes out = dp.tc(in).out;
    if (n % RG_TUNNEL_EXT_EVERY) continue;
    ASSERT_EQ(parse(out).gnv_optlen, kOptLen + kExtLen) << "number " << n;
    EXPECT_EQ(be32_at(out, kOpt4 + 16), n == 16 ? report : loss) << "number " << n;
  }
}

// CLOCK_MONOTONIC, bpf_ktime_get_ns()'s clock and an EDT stamp's.
uint64_t monotonic_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(t.tv_nsec);
}

// A decision that paces at ps_per_byte and marks only far above anything a
// test queues: pacing alone.
rg_peer_cc paced(uint32_t ps_per_byte, uint64_t until_ns = UINT64_MAX) {
  return cc_of(ps_per_byte, UINT32_MAX - 1, UINT32_MAX, until_ns, 0, RG_CC_F_MARK_CE | RG_CC_F_PACE);
}

// With RG_CC_F_PACE, TC egress stamps each frame to the peer with its
// earliest departure (skb->tstamp): when the phantom queue reaches it. The
// first finds the queue empty and may leave now; each later one at least a
// frame's drain after the one before it, two after a frame the shield sent
// twice. Bounds only, never a timing: a slow run only spaces the stamps
// further.
TEST(CongestionEncap, PacingStampsEachFrameWhenTheQueueReachesItNeverEarlier) {
  Dataplane dp(congestion_config());
  dp.tunnels();
  const Bytes in = towards_peer(false).ecn(2).build();
  const auto [ps_per_byte, frame_ns] = frame_drain(in, 10'000'000);
  rg_peer_cc cc = paced(ps_per_byte);
  cc.cap_ns = UINT32_MAX;
  dp.peer_cc(kPeerSlot4, cc);

  const uint64_t before = monotonic_ns();
  std::vector<uint64_t> stamps;
  for (int k = 0; k < 20; ++k) {
    if (k == 10) dp.shield(kPeerSlot4, RG_PEER_F_SHIELD_ALL);
    const Verdict v = dp.tc(in);
    EXPECT_EQ(parse_inner(v.out).ecn(), 2) << "frame " << k << ": paced, not marked";
    stamps.push_back(v.tstamp);
  }
  const uint64_t after = monotonic_ns();
  EXPECT_GE(stamps[0], before);
  EXPECT_LE(stamps[0], after);
  for (size_t k = 1; k < stamps.size(); ++k) {
    const uint64_t copies_before = k >= 11 ? 2 : 1;
    EXPECT_GE(stamps[k], stamps[k - 1] + copies_before * frame_ns) << "frame " << k;
    EXPECT_LE(stamps[k], after + (k + (k >= 11 ? k - 10 : 0)) * frame_ns) << "frame " << k;
  }
  EXPECT_EQ(dp.peer_pq(kPeerSlot4).capped, 0u);
}

// A bound of three frames' drain: from the fourth frame on, frames meet it
// and the backlog is cut, and still no stamp is earlier than the one
// before it, nor more than the bound ahead of the clock.
TEST(CongestionEncap, PacingStampsStayInOrderWhenTheQueueMeetsItsBound) {
  Dataplane dp(congestion_config());
  dp.tunnels();
  const Bytes in = towards_peer(false).ecn(2).build();
  const auto [ps_per_byte, frame_ns] = frame_drain(in, 10'000'000);
  rg_peer_cc cc = paced(ps_per_byte);
  cc.cap_ns = static_cast<uint32_t>(3 * frame_ns);
  dp.peer_cc(kPeerSlot4, cc);
  uint64_t last = 0;
  for (int k = 0; k < 10; ++k) {
    const uint64_t stamp = dp.tc(in).tstamp;
    EXPECT_GE(stamp, last) << "frame " << k;
    EXPECT_LE(stamp, monotonic_ns() + 3 * frame_ns) << "frame " << k;
    last = stamp;
  }
  EXPECT_GT(dp.peer_pq(kPeerSlot4).capped, 0u);
}

// No stamp without RG_CC_F_PACE, without a current decision or without a
// rate: the frame leaves as the stack sent it.
TEST(CongestionEncap, WithoutPacingOrADecisionNoFrameIsStamped) {
  const Bytes in = towards_peer(false).ecn(2).build();
  for (const auto& [what, cc] : {std::pair{"marks only", cc_of(kSlowDrain, UINT32_MAX - 1, UINT32_MAX)},
                                 std::pair{"the decision's lifetime is over", paced(kSlowDrain, 1)},
                                 std::pair{"no rate", paced(0)}}) {
    SCOPED_TRACE(what);
    Dataplane dp(congestion_config());
    dp.tunnels();
    dp.peer_cc(kPeerSlot4, cc);
    EXPECT_EQ(dp.tc(in).tstamp, 0u);
  }
}

// With the CNP signal only, the queue counts but marks nothing.
TEST(CongestionEncap, TheCnpSignalAloneMarksNothing) {
  Dataplane dp(congestion_config());
  dp.tunnels();
  dp.peer_cc(kPeerSlot4, cc_of(kSlowDrain, 0, 1, UINT64_MAX, 0, RG_CC_F_CNP));
  EXPECT_EQ(parse_inner(dp.tc(towards_peer(false).ecn(2).build()).out).ecn(), 2);
  EXPECT_EQ(dp.peer_pq(kPeerSlot4).packets, 1u);
  EXPECT_EQ(dp.peer_pq(kPeerSlot4).marked, 0u);
}

// Frames the programs send back into kDev's own ingress (a CNP of the
// congestion loop), as the stack sees them arrive there.
class IngressTap : public Tap {
 public:
  IngressTap() : Tap(kDev) {}

  // RoCE frames that arrived, within 200 ms (the clone is queued to the
  // CPU's backlog and delivered before the test run returns, or soon after).
  std::vector<Bytes> roce() {
    std::vector<Bytes> out;
    for (int waited_ms = 0; waited_ms < 200;) {
      pollfd pfd{fd_, POLLIN, 0};
      if (poll(&pfd, 1, 20) <= 0) {
        waited_ms += 20;
        continue;
      }
      Bytes buf(65536);
      sockaddr_ll from{};
      socklen_t len = sizeof(from);
      const ssize_t n = recvfrom(fd_, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&from), &len);
      if (n <= 0 || from.sll_pkttype == PACKET_OUTGOING) continue;
      buf.resize(static_cast<size_t>(n));
      if (parse(buf).roce) out.push_back(buf);
    }
    return out;
  }
};

// An ACK of host B's for host A's QP, through the IPv4 peer's tunnel; with
// v6 an IPv6 one (flow label 0xabcde) through the IPv6 peer's (an inner
// family other than the outer one takes Linux 6.3 to decapsulate at TC).
Bytes ack_from_peer(uint32_t qp, uint32_t psn, bool v6 = false) {
  Bth b;
  b.opcode = kOpAck;
  b.dest_qp = qp;
  b.psn = psn;
  PacketBuilder ack;
  ack.eth(kPeerMac, kDevMac);
  if (v6)
    ack.ipv6("2001:db8:6::20", "2001:db8:5::10").flow_label(0xabcde);
  else
    ack.ipv4("203.0.113.20", "198.51.100.10");
  ack.dscp(46).udp(49300, kRoceV2Port).bth(b).aeth(0, 7);
  return geneve_with(seq_option_short(stream_of(5, 0, 0), psn), ack.build(), v6);
}

// What TC ingress hands the stack of in without the loop.
Bytes decapsulated(const Bytes& in) {
  Dataplane dp(congestion_config());
  dp.tunnels();
  return dp.tc_ingress(in).out;
}

// cnp, made by the loop of ack (as TC ingress passed it on), towards QP qp:
// from host B to host A in ack's family, BECN set, PSN 0, the class of
// dataplane.cnp_dscp, its ICRC right by an ICRC computed here from the
// masked headers; over IPv4 its header checksum right and no UDP checksum,
// over IPv6 the UDP checksum right and ack's flow label; and tshark decodes
// it as a CNP with the same checksums.
void expect_cnp_of(const Bytes& cnp, const Bytes& ack, uint32_t qp) {
  const View c = parse(cnp), a = parse(ack);
  ASSERT_TRUE(c.roce);
  ASSERT_TRUE(a.roce);
  const bool v6 = a.family == 6;
  EXPECT_EQ(c.family, a.family);
  EXPECT_EQ(c.bth.opcode, RG_BTH_OPCODE_CNP);
  EXPECT_EQ(c.bth.dest_qp, qp);
  EXPECT_EQ(c.bth.psn, 0u);
  EXPECT_EQ(cnp[c.l5 + 4], 0x40) << "BECN";
  EXPECT_EQ(cnp.size(), c.l5 + 12 + 16 + 4) << "BTH, 16 reserved bytes, ICRC";
  EXPECT_TRUE(c.icrc_ok);
  EXPECT_EQ(c.dscp(), RG_DEFAULT_CNP_DSCP);
  EXPECT_EQ(c.ecn(), 0);
  EXPECT_EQ(hex(c.saddr), hex(a.saddr)) << "from host B";
  EXPECT_EQ(hex(c.daddr), hex(a.daddr)) << "to host A";
  EXPECT_EQ(c.sport, a.sport);
  EXPECT_EQ(c.dport, kRoceV2Port);
  if (v6) {
    EXPECT_NE(c.udp_csum, 0) << "IPv6 requires it";
    EXPECT_TRUE(c.udp_csum_ok);
    EXPECT_EQ(c.flow_label, a.flow_label);
  } else {
    EXPECT_TRUE(c.ipv4_csum_ok);
    EXPECT_EQ(c.udp_csum, 0);
  }
  // Independent of the library that parsed it: tshark.
  char destqp[16];
  std::snprintf(destqp, sizeof(destqp), "0x%06x", qp);
  const std::vector<TsharkRow> rows = tshark({cnp}, v6 ? "cnp6" : "cnp");
  ASSERT_EQ(rows.size(), 1u);
  TsharkRow want = {
      {"frame.protocols", v6 ? "eth:ethertype:ipv6:udp:infiniband" : "eth:ethertype:ip:udp:infiniband"},
      {"infiniband.bth.opcode", std::to_string(RG_BTH_OPCODE_CNP)},
      {"infiniband.bth.destqp", destqp},
      {"udp.checksum.status", v6 ? "1" : "3"}};
  if (!v6) want["ip.checksum.status"] = "1";
  expect_tshark_row(rows[0], want, 0);
}

// TC ingress on in, the ACK the peer in slot sent: it goes on as plain, byte
// for byte, and makes one CNP towards qp (expect_cnp_of), which tap reads
// and the peer's queue counts.
void expect_one_cnp(Dataplane& dp, IngressTap& tap, const Bytes& in, const Bytes& plain, uint32_t qp,
                    uint32_t slot) {
  const Verdict v = dp.tc_ingress(in);
  EXPECT_EQ(v.ret, kTcPass);
  EXPECT_EQ(hex(v.out), hex(plain)) << "the ACK, restored";
  const std::vector<Bytes> got = tap.roce();
  ASSERT_EQ(got.size(), 1u);
  expect_cnp_of(got[0], plain, qp);
  EXPECT_EQ(dp.peer_pq(slot).cnps, 1u);
  EXPECT_EQ(dp.peer_pq(slot).cnp_errors, 0u);
}

// With the CNP signal and the peer's phantom queue above its threshold,
// TC ingress makes a CNP of an ACK from the peer, towards the ACK's QP (the
// sending host's), as expect_cnp_of checks it. The ACK itself goes on byte
// for byte as it would have.
TEST(CongestionCnp, AnAckFromThePeerBecomesACnpTowardsItsQpAndGoesOnUnchanged) {
  const Bytes in = ack_from_peer(0x1234, 77);
  const Bytes plain = decapsulated(in);
  ASSERT_TRUE(parse(plain).roce);
  Dataplane dp(congestion_config());
  dp.tunnels();
  rg_peer_cc cc = cc_of(kSlowDrain, 0, 1, UINT64_MAX, 0, RG_CC_F_CNP);
  cc.cnp_gap_ns = 4'000'000'000u;  // longer than the test, so the gap alone decides below
  dp.peer_cc(kPeerSlot4, cc);
  // One frame through the phantom queue fills it far above its threshold
  // (150 ms of backlog; tshark below takes longer, so the queue is refilled).
  const Bytes data = towards_peer(false).build();
  dp.tc(data);
  IngressTap tap;
  expect_one_cnp(dp, tap, in, plain, 0x1234, kPeerSlot4);

  // One per QP in cnp_gap_ns: the next ACK of the same QP makes none, another QP's does.
  dp.tc(data);
  // (Both before the tap is read: reading it waits longer than the backlog lasts.)
  EXPECT_EQ(hex(dp.tc_ingress(in).out), hex(plain));
  dp.tc_ingress(ack_from_peer(0x1235, 78));
  const std::vector<Bytes> next = tap.roce();
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(parse(next[0]).bth.dest_qp, 0x1235u);
  EXPECT_EQ(dp.peer_pq(kPeerSlot4).cnps, 2u);
}

// An IPv6 ACK of host B's: the CNP is IPv6 too, with the UDP checksum IPv6
// requires and the ACK's flow label (expect_cnp_of); the ACK goes on byte
// for byte.
TEST(CongestionCnp, AnIpv6AckBecomesAnIpv6CnpWithItsUdpChecksum) {
  const Bytes in = ack_from_peer(0x4321, 77, true);
  const Bytes plain = decapsulated(in);
  ASSERT_TRUE(parse(plain).roce);
  EXPECT_EQ(parse(plain).flow_label, 0xabcdeu) << "a label for the CNP to keep";
  Dataplane dp(congestion_config());
  dp.tunnels();
  dp.peer_cc(kPeerSlot6, cc_of(kSlowDrain, 0, 1, UINT64_MAX, 0, RG_CC_F_CNP));
  dp.tc(towards_peer(true).build());
  IngressTap tap;
  expect_one_cnp(dp, tap, in, plain, 0x4321, kPeerSlot6);
}

// No CNP below the threshold, with the CE signal alone, without a current
// decision, or from a frame longer than a CNP (data).
TEST(CongestionCnp, OnlyAQueueAboveItsThresholdMakesOne) {
  enum Frame { kAck, kData };
  struct Case {
    const char* name;
    rg_peer_cc cc;
    Frame frame;
  };
  const rg_peer_cc above = cc_of(kSlowDrain, 0, 1, UINT64_MAX, 0, RG_CC_F_CNP);
  const Case cases[] = {
      {"below the threshold", cc_of(1, 1'000'000'000, 1'000'000'001, UINT64_MAX, 0, RG_CC_F_CNP), kAck},
      {"the CE signal alone", cc_of(kSlowDrain, 0, 1, UINT64_MAX, 0, RG_CC_F_MARK_CE), kAck},
      {"the decision's lifetime is over", cc_of(kSlowDrain, 0, 1, 1, 0, RG_CC_F_CNP), kAck},
      {"a data frame", above, kData},
  };
  const auto inner = [](Frame f) {
    PacketBuilder b;
    b.eth(kPeerMac, kDevMac);
    b.ipv4("203.0.113.20", "198.51.100.10");
    b.udp(49300, kRoceV2Port);
    if (f == kData)
      b.bth(Bth{.opcode = kOpSendOnlyRc, .dest_qp = 0x1234, .psn = 1}).payload(256);
    else
      b.bth(Bth{.opcode = kOpAck, .dest_qp = 0x1234, .psn = 77}).aeth(0, 7);
    return geneve_with(seq_option_short(stream_of(5, 0, 0), 1), b.build());
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    Dataplane dp(congestion_config());
    dp.tunnels();
    dp.peer_cc(kPeerSlot4, k.cc);
    dp.tc(towards_peer(false).build());
    IngressTap tap;
    const Bytes in = k.frame == kAck ? ack_from_peer(0x1234, 77) : inner(k.frame);
    EXPECT_EQ(dp.tc_ingress(in).ret, kTcPass);
    EXPECT_TRUE(tap.roce().empty());
    EXPECT_EQ(dp.peer_pq(kPeerSlot4).cnps, 0u);
  }
}

// Gateway B keeps the peer's report apart from its loss measure, and sums
// the queueing delay of its stamped first arrivals for its own report.
TEST(CongestionDecap, AReportIsKeptApartAndDelaysAreSummed) {
  Dataplane dp(seq_config());
  dp.tunnels();
  const Bytes inner = towards_peer(false).build();
  const uint32_t stream = stream_of(5, 0, 0);
  const uint32_t loss = RG_FEEDBACK_VALID | 4321;
  const uint32_t report = RG_FEEDBACK_REPORT | (1000u << RG_REPORT_RATE_SHIFT);
  // Each arrival's clock reading lies between the test's readings just
  // before and just after its run, so the delay above the floor is bounded
  // by those readings alone, however slow the machine (each side's
  // microseconds are truncated: 2 us either way).
  const uint64_t sent1 = tai_now_ns();
  const Bytes first = geneve_with(seq_option(stream, 0, sent1, RG_TUNNEL_OPT_CLASS_DEFAULT, loss), inner);
  const uint64_t before1 = tai_now_ns();
  EXPECT_EQ(dp.xdp(first).ret, kXdpPass);
  const uint64_t after1 = tai_now_ns();
  rg_peer_rx rx = dp.peer_rx(kPeerSlot4);
  EXPECT_EQ(rx.feedback, loss);
  EXPECT_EQ(rx.report_at_ns, 0u);
  EXPECT_EQ(rx.delay_n, 1u) << "the first stamp sets the floor: 0 us above it";
  EXPECT_EQ(rx.delay_sum_us, 0u);

  // Stamped 3 ms before it was built: about 3 ms above the floor.
  const uint64_t sent2 = tai_now_ns() - 3'000'000;
  const Bytes second = geneve_with(seq_option(stream, 16, sent2, RG_TUNNEL_OPT_CLASS_DEFAULT, report), inner);
  const uint64_t before2 = tai_now_ns();
  dp.xdp(second);
  const uint64_t after2 = tai_now_ns();
  rx = dp.peer_rx(kPeerSlot4);
  EXPECT_EQ(rx.feedback, loss) << "the measure stays";
  EXPECT_EQ(rx.report, report);
  EXPECT_NE(rx.report_at_ns, 0u);
  EXPECT_EQ(rx.delay_n, 2u);
  const auto us = [](uint64_t from, uint64_t to) { return (static_cast<int64_t>(to) - static_cast<int64_t>(from)) / 1000; };
  const int64_t lo = us(sent2, before2) - us(sent1, after1), hi = us(sent2, after2) - us(sent1, before1);
  EXPECT_GE(static_cast<int64_t>(rx.delay_sum_us), lo - 2) << "between " << lo << " and " << hi << " us";
  EXPECT_LE(static_cast<int64_t>(rx.delay_sum_us), hi + 2) << "between " << lo << " and " << hi << " us";

  // A duplicate adds no delay; an unstamped number none either.
  dp.xdp(geneve_with(seq_option(stream, 16, tai_now_ns(), RG_TUNNEL_OPT_CLASS_DEFAULT, report), inner));
  dp.xdp(geneve_with(seq_option_short(stream, 17), inner));
  EXPECT_EQ(dp.peer_rx(kPeerSlot4).delay_n, 2u);
}

}  // namespace
}  // namespace rg::test
