// The loss shield's "auto" mode without a data path: the raw loss the
// receiving side measures and reports (LossMeter), and the sending side's
// decision on those reports (ShieldDecider).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "daemon/shield_auto.h"
#include "roceguard/roceguard.h"

namespace rg {
namespace {

constexpr uint64_t kSecond = 1'000'000'000ull;

uint32_t ppm(uint32_t word) { return word & RG_FEEDBACK_LOSS_MASK; }

TEST(LossMeter, TooFewNumbersSayNothing) {
  LossMeter m;
  EXPECT_EQ(m.update(kSecond, {}), 0u);
  PeerRxCounts c;
  c.received = LossMeter::kMinNumbers - 2;
  c.lost = 1;
  EXPECT_EQ(m.update(2 * kSecond, c), 0u) << "999 numbers";
  c.received += 1;
  EXPECT_EQ(m.update(3 * kSecond, c), RG_FEEDBACK_VALID | 1000u) << "1 lost in 1000";
}

TEST(LossMeter, NumbersSentOnceLoseWhatNeverArrived) {
  LossMeter m;
  m.update(0, {});
  PeerRxCounts c;
  c.received = 99'000;
  c.lost = 1'000;
  EXPECT_EQ(m.update(kSecond, c), RG_FEEDBACK_VALID | 10'000u) << "1 %";
}

// With every number sent twice the host sees (almost) no loss; the pairs
// that arrived twice say what each copy met.
TEST(LossMeter, CopiedNumbersMeasureTheLossTheShieldHides) {
  for (double p : {0.001, 0.01, 0.05}) {
    LossMeter m;
    m.update(0, {});
    PeerRxCounts c;
    c.copied = 1'000'000;
    c.received = c.copied;
    c.eliminated = static_cast<uint64_t>(std::llround(c.copied * (1 - p) / (1 + p)));
    c.lost = static_cast<uint64_t>(std::llround(c.copied * p * p));
    const uint32_t w = m.update(kSecond, c);
    ASSERT_TRUE(w & RG_FEEDBACK_VALID);
    EXPECT_NEAR(ppm(w), p * 1e6, 1.0) << "p " << p;
  }
}

TEST(LossMeter, TheWindowSlides) {
  LossMeter m;
  m.update(0, {});
  PeerRxCounts c;
  c.received = 90'000;
  c.lost = 10'000;
  EXPECT_EQ(ppm(m.update(kSecond, c)), 100'000u);
  // Ten seconds of clean traffic later, the lossy second left the window.
  for (uint64_t s = 2; s <= 12; ++s) {
    c.received += 100'000;
    m.update(s * kSecond, c);
  }
  c.received += 100'000;
  EXPECT_EQ(m.update(13 * kSecond, c), RG_FEEDBACK_VALID);
}

TEST(LossMeter, CountersThatRestartRestartTheMeasure) {
  LossMeter m;
  PeerRxCounts c;
  c.received = 1'000'000;
  m.update(0, c);
  EXPECT_EQ(m.update(kSecond, PeerRxCounts{}), 0u) << "--reset-state: counts went back";
  PeerRxCounts after;
  after.received = 2'000;
  EXPECT_EQ(m.update(2 * kSecond, after), RG_FEEDBACK_VALID);
}

// The window's mean one-way delay against the lowest of the last minutes.
TEST(LossMeter, DelayThatRisesWithTheLossIsCongestion) {
  LossMeter m;
  PeerRxCounts c;
  m.update(0, c);
  auto second = [&](uint64_t s, uint64_t delay_ns, uint64_t lost) {
    c.received += 10'000;
    c.lost += lost;
    c.delay_samples += 100;
    c.delay_sum_ns += 100 * delay_ns;
    return m.update(s * kSecond, c);
  };
  for (uint64_t s = 1; s <= 20; ++s) EXPECT_FALSE(second(s, 10'000'000, 1) & RG_FEEDBACK_CONGESTED) << s;
  // The window's mean creeps up with each second of 40 ms; it is
  // congestion once it is 2.5 ms (a quarter) above the 10 ms baseline.
  bool congested = false;
  for (uint64_t s = 21; s <= 30 && !congested; ++s) congested = second(s, 40'000'000, 100) & RG_FEEDBACK_CONGESTED;
  EXPECT_TRUE(congested);

  LossMeter low;
  PeerRxCounts d;
  low.update(0, d);
  for (uint64_t s = 1; s <= 30; ++s) {
    d.received += 10'000;
    d.lost += 10;
    d.delay_samples += 100;
    d.delay_sum_ns += 100 * (s <= 20 ? 100'000 : 900'000);  // +0.8 ms: under the 1 ms floor
    EXPECT_FALSE(low.update(s * kSecond, d) & RG_FEEDBACK_CONGESTED) << s;
  }
}

PeerReport report(uint32_t loss_ppm, bool congested = false, bool eliminates = true) {
  PeerReport r;
  r.fresh = true;
  r.eliminates = eliminates;
  r.feedback = RG_FEEDBACK_VALID | loss_ppm | (congested ? RG_FEEDBACK_CONGESTED : 0);
  return r;
}

// Feeds n evaluations of r; returns how many changed the state.
int feed(ShieldDecider& d, const PeerReport& r, int n, std::string* reason = nullptr) {
  int changes = 0;
  for (int i = 0; i < n; ++i) {
    std::string why;
    if (d.evaluate(r, why)) {
      ++changes;
      EXPECT_FALSE(why.empty());
      if (reason) *reason = why;
    }
  }
  return changes;
}

TEST(ShieldDecider, OnAfterThreeSecondsAtTheThreshold) {
  ShieldDecider d(500);
  EXPECT_EQ(feed(d, report(500), ShieldDecider::kOnAfter - 1), 0);
  EXPECT_FALSE(d.on());
  std::string why;
  EXPECT_EQ(feed(d, report(500), 1, &why), 1);
  EXPECT_TRUE(d.on());
  EXPECT_NE(why.find("0.050 %"), std::string::npos) << why;
}

TEST(ShieldDecider, OneGoodSecondStartsTheCountAgain) {
  ShieldDecider d(500);
  feed(d, report(900), 2);
  feed(d, report(100), 1);
  feed(d, report(900), 2);
  EXPECT_FALSE(d.on());
  feed(d, report(900), 1);
  EXPECT_TRUE(d.on());
}

TEST(ShieldDecider, NeverOnWithoutACurrentReportOfAnEliminatingPeer) {
  ShieldDecider d(500);
  EXPECT_EQ(feed(d, report(5000, true), 20), 0) << "congestion: copies make it worse";
  EXPECT_EQ(feed(d, report(5000, false, false), 20), 0) << "a peer that does not eliminate";
  PeerReport stale = report(5000);
  stale.fresh = false;
  EXPECT_EQ(feed(d, stale, 20), 0) << "an old report";
  PeerReport none;
  none.fresh = true;
  none.eliminates = true;
  EXPECT_EQ(feed(d, none, 20), 0) << "a report without a measure";
  EXPECT_FALSE(d.on());
}

// Hysteresis: off only after 30 s below half the threshold.
TEST(ShieldDecider, OffAfterThirtySecondsBelowHalf) {
  ShieldDecider d(500);
  feed(d, report(800), ShieldDecider::kOnAfter);
  ASSERT_TRUE(d.on());
  EXPECT_EQ(feed(d, report(300), 100), 0) << "between half and the threshold: stays on";
  EXPECT_EQ(feed(d, report(200), ShieldDecider::kOffAfter - 1), 0);
  EXPECT_TRUE(d.on());
  std::string why;
  EXPECT_EQ(feed(d, report(200), 1, &why), 1);
  EXPECT_FALSE(d.on());
  EXPECT_NE(why.find("below half"), std::string::npos) << why;
}

TEST(ShieldDecider, CongestionTurnsItOffAndHoldsItOff) {
  ShieldDecider d(500);
  feed(d, report(800), ShieldDecider::kOnAfter);
  ASSERT_TRUE(d.on());
  std::string why;
  EXPECT_EQ(feed(d, report(800, true), 1, &why), 1);
  EXPECT_FALSE(d.on());
  EXPECT_NE(why.find("congestion"), std::string::npos) << why;
  EXPECT_EQ(feed(d, report(800), ShieldDecider::kCongestionHold - 1), 0) << "held off";
  EXPECT_EQ(feed(d, report(800), ShieldDecider::kOnAfter), 1) << "then free to come back";
}

TEST(ShieldDecider, OffWhenThePeerStopsReportingOrEliminating) {
  {
    ShieldDecider d(500);
    feed(d, report(800), ShieldDecider::kOnAfter);
    PeerReport stale = report(800);
    stale.fresh = false;
    std::string why;
    EXPECT_EQ(feed(d, stale, 1, &why), 1) << "at the first evaluation without a current measure";
    EXPECT_FALSE(d.on());
    EXPECT_NE(why.find("no measure from the peer for 10 s"), std::string::npos) << why;
  }
  {
    ShieldDecider d(500);
    feed(d, report(800), ShieldDecider::kOnAfter);
    EXPECT_EQ(feed(d, report(800, false, false), 1), 1) << "a peer replaced by one that does not eliminate";
    EXPECT_FALSE(d.on());
  }
}

// The data path stamps reports while a tick reads them: one stamped after
// the tick's clock reading is current, not stale. (Taken for stale, every
// other evaluation started the count of kOnAfter again, and a lossy peer's
// shield came on late or never.)
TEST(ShieldFeedback, AReportNewerThanTheTicksClockIsFresh) {
  const uint64_t now = 100 * kSecond;
  EXPECT_TRUE(report_fresh(now, now + 3'000'000)) << "stamped 3 ms after the tick read its clock";
  EXPECT_TRUE(report_fresh(now, now));
  EXPECT_TRUE(report_fresh(now, now - 9 * kSecond));
  EXPECT_FALSE(report_fresh(now, now - 10 * kSecond)) << "ten seconds old";
  EXPECT_FALSE(report_fresh(now, 0)) << "no report yet";
}

// A's daemon stops with its shield on: its programs go on numbering, their
// extensions say "no measure" once the decision lapsed. B's shield goes
// off at the first evaluation 10 s after the last measure (the one rule:
// a measure counts for 10 s), and B shows no report from then on.
TEST(ShieldFeedback, AMeasureCountsForTenSecondsWhateverFollowsIt) {
  ShieldDecider d(500);
  PeerReports reports;
  const uint32_t measure = RG_FEEDBACK_VALID | 10'590;
  auto evaluate = [&](uint64_t s, uint32_t word) {
    std::string why;
    const PeerReport r = reports.update(s * kSecond, s * kSecond - 1'000'000, word, RG_TUNNEL_F_ELIMINATES);
    d.evaluate(r, why);
    return r;
  };
  uint64_t s = 1;
  for (; s <= ShieldDecider::kOnAfter; ++s) evaluate(s, measure);
  ASSERT_TRUE(d.on());
  const uint64_t last_measure = s - 1;
  for (; s < 100 && d.on(); ++s) {
    const PeerReport r = evaluate(s, 0);
    if (d.on()) {
      EXPECT_TRUE(r.fresh) << s << " s";
      EXPECT_EQ(r.feedback, measure) << "the last measure stands in for a report without one";
    }
  }
  EXPECT_FALSE(d.on());
  EXPECT_EQ(s - 1 - last_measure, kReportLifetimeNs / kSecond) << "off 10 s after the last measure";
  const PeerReport after = reports.update(s * kSecond, s * kSecond, 0, RG_TUNNEL_F_ELIMINATES);
  EXPECT_FALSE(after.fresh);
  EXPECT_EQ(after.feedback, 0u) << "no report shown";
  EXPECT_TRUE(after.eliminates) << "the newest extension's flags are current";
}

TEST(ShieldFeedback, WordAsARatio) {
  EXPECT_EQ(feedback_loss(0), -1);
  EXPECT_DOUBLE_EQ(feedback_loss(RG_FEEDBACK_VALID | 500), 0.0005);
  EXPECT_DOUBLE_EQ(feedback_loss(RG_FEEDBACK_VALID | RG_FEEDBACK_CONGESTED | 1'000'000), 1.0);
}

}  // namespace
}  // namespace rg
