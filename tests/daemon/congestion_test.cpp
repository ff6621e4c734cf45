// The congestion loop without a data path: the report's word, the receiving
// side's measure (ArrivalMeter) and the sending side's model of the WAN's
// bottleneck (BottleneckModel), fed with counts and reports; and the
// decision the loop writes, into maps of the object's shape.
#include <bpf/bpf.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "config/config.h"
#include "daemon/congestion.h"
#include "roceguard/roceguard.h"

namespace rg {
namespace {

constexpr uint64_t kMs = 1'000'000ull;

TEST(CongestionReport, TheWordKeepsRateAndDelay) {
  for (uint64_t kbps : {0ull, 1ull, 8191ull, 8192ull, 47'000ull, 100'000'000ull, 400'000'000ull}) {
    SCOPED_TRACE(kbps);
    const uint32_t w = encode_report({.rate_kbps = kbps, .has_delay = true, .delay_us = 480});
    EXPECT_EQ(w & RG_FEEDBACK_VALID, 0u) << "a gateway that knows no report reads no measure";
    const auto r = decode_report(w);
    ASSERT_TRUE(r);
    // Rounded down, within one part in 8192.
    EXPECT_LE(r->rate_kbps, kbps);
    EXPECT_GE(r->rate_kbps, kbps - kbps / 8192);
    EXPECT_TRUE(r->has_delay);
    EXPECT_EQ(r->delay_us, 480u);
  }
  const auto none = decode_report(encode_report({.rate_kbps = 5, .has_delay = false, .delay_us = 999}));
  ASSERT_TRUE(none);
  EXPECT_FALSE(none->has_delay);
  EXPECT_EQ(none->delay_us, 0u);
  const auto long_queue = decode_report(encode_report({.rate_kbps = 5, .has_delay = true, .delay_us = 1'000'000}));
  EXPECT_EQ(long_queue->delay_us, RG_REPORT_DELAY_MASK * RG_REPORT_DELAY_UNIT_US) << "that much or more";
  EXPECT_FALSE(decode_report(RG_FEEDBACK_VALID | 1234)) << "a loss measure is no report";
  EXPECT_FALSE(decode_report(0));
}

TEST(ArrivalMeter, RateAndMeanDelayOverItsWindow) {
  ArrivalMeter m;
  EXPECT_EQ(m.update(0, {}), 0u) << "no span yet";
  EXPECT_EQ(m.update(10 * kMs, {.bytes = 62'500, .delay_n = 0, .delay_sum_us = 0}), 0u) << "under half a window";
  // 250 000 bytes in 40 ms: 50 Mbit/s; 10 stamps of 2 ms mean.
  const auto r = decode_report(m.update(40 * kMs, {.bytes = 250'000, .delay_n = 10, .delay_sum_us = 20'000}));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->rate_kbps, 50'000u);
  EXPECT_TRUE(r->has_delay);
  EXPECT_EQ(r->delay_us, 2000u);
  // The window slides: from 40 ms on, 10 Mbit/s and no stamp.
  m.update(60 * kMs, {.bytes = 275'000, .delay_n = 10, .delay_sum_us = 20'000});
  const auto s = decode_report(m.update(80 * kMs, {.bytes = 300'000, .delay_n = 10, .delay_sum_us = 20'000}));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->rate_kbps, 10'000u);
  EXPECT_FALSE(s->has_delay);
  // Counters that restart (a new object) start the window over.
  EXPECT_EQ(m.update(90 * kMs, {}), 0u);
}

CongestionReport queued(uint64_t kbps) { return {.rate_kbps = kbps, .has_delay = true, .delay_us = 2000}; }
CongestionReport clear(uint64_t kbps) { return {.rate_kbps = kbps, .has_delay = true, .delay_us = 0}; }

TEST(BottleneckModel, NoMarksWithoutAReportOrABottleneck) {
  BottleneckModel m;
  m.update(0, std::nullopt, 0);
  EXPECT_EQ(m.state(), CongestionState::kNoReport);
  EXPECT_EQ(m.rate_kbps(), 0u);
  // Reports without a queue: an application-limited sender is never marked.
  for (uint64_t t = 10; t <= 500; t += 10) m.update(t * kMs, clear(10'000), t * kMs);
  EXPECT_EQ(m.state(), CongestionState::kLearning);
  EXPECT_EQ(m.bottleneck_kbps(), 0u);
  EXPECT_EQ(m.rate_kbps(), 0u);
}

TEST(BottleneckModel, AQueueShowsTheBottleneckAndTheModelHoldsUnderIt) {
  BottleneckModel m;
  m.update(10 * kMs, queued(47'000), 10 * kMs);
  EXPECT_EQ(m.bottleneck_kbps(), 47'000u);
  EXPECT_EQ(m.state(), CongestionState::kCruise);
  EXPECT_EQ(m.rate_kbps(), static_cast<uint64_t>(47'000 * BottleneckModel::kCruiseGain));
  // The queue still stands on the next report: drain below the bottleneck.
  m.update(20 * kMs, queued(46'000), 20 * kMs);
  EXPECT_EQ(m.bottleneck_kbps(), 46'000u);
  EXPECT_EQ(m.resets(), 1u);
  EXPECT_EQ(m.state(), CongestionState::kDrain);
  EXPECT_EQ(m.rate_kbps(), static_cast<uint64_t>(46'000 * BottleneckModel::kDrainGain));
  // Drained: back to cruise after its phase; the same report again changes nothing.
  const uint64_t back = 20 * kMs + BottleneckModel::kPhaseNs;
  m.update(back, clear(40'000), back);
  EXPECT_EQ(m.state(), CongestionState::kCruise);
  EXPECT_EQ(m.bottleneck_kbps(), 46'000u) << "less without a queue is the sender's choice";
}

TEST(BottleneckModel, ItProbesAndLearnsARateThatGrew) {
  BottleneckModel m;
  uint64_t t = 10 * kMs;
  m.update(t, queued(40'000), t);
  t += BottleneckModel::kProbeEveryNs;
  m.update(t, clear(38'000), t);
  EXPECT_EQ(m.state(), CongestionState::kProbe);
  EXPECT_EQ(m.probes(), 1u);
  EXPECT_EQ(m.rate_kbps(), static_cast<uint64_t>(40'000 * BottleneckModel::kProbeGain));
  // More got through while probing, without a queue: the pipe grew.
  t += 10 * kMs;
  m.update(t, clear(43'000), t);
  EXPECT_EQ(m.bottleneck_kbps(), 43'000u);
  // A queue in the probe confirms at least the estimate, never lowers it.
  t += 5 * kMs;
  m.update(t, queued(41'000), t);
  EXPECT_EQ(m.bottleneck_kbps(), 43'000u);
  t += BottleneckModel::kPhaseNs;
  m.update(t, clear(40'000), t);
  EXPECT_EQ(m.state(), CongestionState::kDrain);
}

// RoCE alone behind the bottleneck: the queue stands on report after report
// while the delivery rate stays at the pipe's, so every drain is its own and
// the model never competes.
TEST(BottleneckModel, ItsOwnStandingQueueIsDrainedNotCompetedWith) {
  BottleneckModel m;
  for (uint64_t t = 10; t <= 2000; t += 10) {
    m.update(t * kMs, queued(t % 20 ? 47'000 : 44'000), t * kMs);
    ASSERT_NE(m.state(), CongestionState::kCompete) << t << " ms";
    ASSERT_NE(m.rate_kbps(), 0u) << t << " ms";
  }
  EXPECT_EQ(m.competes(), 0u);
  EXPECT_GT(m.resets(), 0u);
}

// Cross traffic holds the queue: each drain leaves less of the pipe to the
// RoCE traffic and the queue stands all the same. Once the estimate is under
// kCompeteFraction of the largest in the window for kCompeteAfterNs, the
// model competes: no marks for kCompeteNs, whatever the reports say, then
// it learns again.
TEST(BottleneckModel, AQueueThatOutlastsTheDrainsIsCrossTrafficsAndTheModelCompetes) {
  BottleneckModel m;
  uint64_t t = 10 * kMs;
  m.update(t, queued(40'000), t);
  ASSERT_EQ(m.state(), CongestionState::kCruise);
  for (uint64_t kbps : {30'000u, 25'000u, 20'000u}) {
    t += 10 * kMs;
    m.update(t, queued(kbps), t);
    EXPECT_NE(m.state(), CongestionState::kCompete) << kbps;
    EXPECT_EQ(m.bottleneck_kbps(), kbps);
    EXPECT_NE(m.rate_kbps(), 0u);
  }
  EXPECT_EQ(m.competes(), 0u) << "half of 40 Mbit/s is not yet under half";
  // Under half: a DCQCN cut that has not shown in the queue yet, until it
  // lasts kCompeteAfterNs; a report without a queue in between starts it over.
  const uint64_t under = t + 10 * kMs;
  for (t = under; t < under + BottleneckModel::kCompeteAfterNs; t += 10 * kMs) {
    m.update(t, t == under + 100 * kMs ? clear(19'999) : queued(19'999), t);
    ASSERT_NE(m.state(), CongestionState::kCompete) << (t - under) / kMs << " ms under";
  }
  for (const uint64_t since = under + 110 * kMs; t < since + BottleneckModel::kCompeteAfterNs; t += 10 * kMs) {
    m.update(t, queued(19'999), t);
    ASSERT_NE(m.state(), CongestionState::kCompete) << (t - since) / kMs << " ms since the clear report";
  }
  m.update(t, queued(19'999), t);
  EXPECT_EQ(m.state(), CongestionState::kCompete);
  EXPECT_EQ(m.rate_kbps(), 0u) << "no marks: the RoCE traffic as without the loop";
  EXPECT_EQ(m.competes(), 1u);
  const uint64_t entered = t;
  for (t += 10 * kMs; t < entered + BottleneckModel::kCompeteNs; t += 100 * kMs) {
    m.update(t, t % 200 ? queued(60'000) : clear(60'000), t);
    ASSERT_EQ(m.state(), CongestionState::kCompete) << (t - entered) / kMs << " ms in";
    ASSERT_EQ(m.rate_kbps(), 0u);
  }
  // Its time is up: the estimate starts over from the next queue.
  t = entered + BottleneckModel::kCompeteNs;
  m.update(t, clear(35'000), t);
  EXPECT_EQ(m.state(), CongestionState::kLearning);
  EXPECT_EQ(m.bottleneck_kbps(), 0u);
  t += 10 * kMs;
  m.update(t, queued(45'000), t);
  EXPECT_EQ(m.state(), CongestionState::kCruise);
  EXPECT_EQ(m.bottleneck_kbps(), 45'000u);
  EXPECT_EQ(m.competes(), 1u);
  // A stale report still falls back from anywhere.
  m.update(t + BottleneckModel::kReportLifetimeNs, queued(45'000), t);
  EXPECT_EQ(m.state(), CongestionState::kNoReport);
}

// Reports that lapse while the model competes do not end the hold with the
// squeezed estimate: when they come back, it learns from nothing.
TEST(BottleneckModel, ReportsThatLapseWhileCompetingLeaveNothingToMarkBy) {
  BottleneckModel m;
  uint64_t t = 10 * kMs;
  m.update(t, queued(40'000), t);
  const uint64_t under = t + 10 * kMs;
  for (t = under; t <= under + BottleneckModel::kCompeteAfterNs; t += 10 * kMs) m.update(t, queued(10'000), t);
  ASSERT_EQ(m.state(), CongestionState::kCompete);
  const uint64_t last = t - 10 * kMs;
  t = last + BottleneckModel::kReportLifetimeNs;
  m.update(t, queued(10'000), last);
  EXPECT_EQ(m.state(), CongestionState::kNoReport);
  t += 10 * kMs;
  m.update(t, clear(10'000), t);
  EXPECT_EQ(m.state(), CongestionState::kLearning);
  EXPECT_EQ(m.bottleneck_kbps(), 0u);
  EXPECT_EQ(m.rate_kbps(), 0u) << "no marks by the squeezed estimate";
}

// The largest estimate the compete rule holds the current one against is
// the window's, not the one that happened to be largest when the window
// last began: a probe's 90 Mbit/s a second in still counts after the
// first 100 lapsed, so 44 is under half of it.
TEST(BottleneckModel, TheCompeteRuleHoldsTheEstimateAgainstTheWindowsLargest) {
  BottleneckModel m;
  uint64_t t = 10 * kMs;
  m.update(t, queued(100'000), t);
  t += 10 * kMs;
  m.update(t, queued(60'000), t);
  ASSERT_EQ(m.bottleneck_kbps(), 60'000u);
  // No queue until the probe (a standing one keeps the model draining).
  for (int i = 0; i < 300 && m.state() != CongestionState::kProbe; ++i) {
    t += 10 * kMs;
    m.update(t, clear(55'000), t);
  }
  ASSERT_EQ(m.state(), CongestionState::kProbe);
  t += 5 * kMs;
  m.update(t, queued(90'000), t);
  ASSERT_EQ(m.bottleneck_kbps(), 90'000u);
  const uint64_t probed = t;
  // The first estimate lapses from the window; 50 is not under half of 90.
  for (t += 10 * kMs; t < 10 * kMs + BottleneckModel::kBandwidthWindowNs + 200 * kMs; t += 10 * kMs) {
    m.update(t, queued(50'000), t);
    ASSERT_NE(m.state(), CongestionState::kCompete) << (t - probed) / kMs << " ms after the probe";
  }
  ASSERT_LT(t - probed, BottleneckModel::kBandwidthWindowNs) << "the probe's estimate is still in the window";
  // 44 is: once that lasts, the model competes.
  const uint64_t under = t;
  for (; t <= under + BottleneckModel::kCompeteAfterNs + 100 * kMs && m.state() != CongestionState::kCompete;
       t += 10 * kMs)
    m.update(t, queued(44'000), t);
  EXPECT_EQ(m.state(), CongestionState::kCompete);
}

TEST(BottleneckModel, StaleReportsFallBackAndAnUnconfirmedEstimateExpires) {
  BottleneckModel m;
  m.update(10 * kMs, queued(47'000), 10 * kMs);
  ASSERT_NE(m.rate_kbps(), 0u);
  // The peer's reports stop (its daemon died, an older peer): no marks.
  const uint64_t late = 10 * kMs + BottleneckModel::kReportLifetimeNs;
  m.update(late, queued(47'000), 10 * kMs);
  EXPECT_EQ(m.state(), CongestionState::kNoReport);
  EXPECT_EQ(m.rate_kbps(), 0u);
  EXPECT_EQ(m.fallbacks(), 1u);
  // Reports again, without a queue, long after: the estimate lapsed.
  const uint64_t much_later = 10 * kMs + BottleneckModel::kBandwidthWindowNs + kMs;
  m.update(much_later, clear(5'000), much_later);
  EXPECT_EQ(m.state(), CongestionState::kLearning);
  EXPECT_EQ(m.rate_kbps(), 0u);
}

}  // namespace
}  // namespace rg

namespace rg {
namespace {

// A map of the object's shape, closed with the test.
struct OwnMap {
  OwnMap(bpf_map_type type, uint32_t value_size) : fd(bpf_map_create(type, nullptr, 4, value_size, RG_MAX_PEERS, nullptr)) {}
  ~OwnMap() {
    if (fd >= 0) close(fd);
  }
  int fd;
};

// The loop writes every peer's decision at each tick: the signals
// configured and, while the daemon says the attached interfaces' qdiscs
// honour departure times, the pacing flag; without it again once told so.
TEST(CongestionLoopDecision, CarriesThePacingFlagOnlyWhileTheQdiscsHonourIt) {
  OwnMap cc(BPF_MAP_TYPE_ARRAY, sizeof(rg_peer_cc)), rx(BPF_MAP_TYPE_PERCPU_ARRAY, sizeof(rg_peer_rx)),
      stats(BPF_MAP_TYPE_PERCPU_ARRAY, sizeof(rg_peer_stats));
  if (cc.fd < 0 && errno == EPERM && geteuid() != 0) GTEST_SKIP() << "creating BPF maps needs root";
  ASSERT_GE(cc.fd, 0) << std::strerror(errno);
  ASSERT_GE(rx.fd, 0);
  ASSERT_GE(stats.fd, 0);
  Config cfg;
  cfg.congestion_signal = RG_CC_F_MARK_CE;
  PeerConfig p;
  p.name = "far";
  cfg.peers = {p};
  const uint32_t slot = 3;
  CongestionLoop loop(cfg, {slot}, cc.fd, rx.fd, stats.fd);
  auto flags_at = [&](uint64_t now_ns) {
    loop.tick(now_ns);
    rg_peer_cc v{};
    EXPECT_EQ(bpf_map_lookup_elem(cc.fd, &slot, &v), 0);
    EXPECT_EQ(v.until_ns, now_ns + kCcLifetimeNs);
    return v.flags;
  };
  EXPECT_FALSE(loop.pace());
  EXPECT_EQ(flags_at(1000 * kMs), RG_CC_F_MARK_CE);
  loop.set_pace(true);
  EXPECT_EQ(flags_at(2000 * kMs), RG_CC_F_MARK_CE | RG_CC_F_PACE);
  loop.set_pace(false);
  EXPECT_EQ(flags_at(3000 * kMs), RG_CC_F_MARK_CE);
}

}  // namespace
}  // namespace rg
