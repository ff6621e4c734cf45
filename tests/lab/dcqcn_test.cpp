// The generator's DCQCN reaction point (testbed/lab/dcqcn.h) against
// trajectories computed by hand from its rules, and the parser of
// `--dcqcn KEY=VALUE,...`. Pure: no namespace, socket or clock; the model
// runs on the microseconds each call passes.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "lab/dcqcn.h"

namespace rg::test {
namespace {

using lab::DcqcnRp;
using lab::DcqcnSettings;

constexpr uint64_t k100G = 100000000;  // kbit/s
// rpg_byte_reset's unit, 64 bytes: 32767 x 64.
constexpr uint64_t kByteStage = 2097088;

TEST(Dcqcn, DefaultsAreMlx5s) {
  const DcqcnSettings s;
  EXPECT_EQ(s.rpg_time_reset, 300u);
  EXPECT_EQ(s.rpg_byte_reset, 32767u);
  EXPECT_EQ(s.rpg_ai_rate, 5u);
  EXPECT_EQ(s.rpg_hai_rate, 50u);
  EXPECT_EQ(s.rpg_gd, 11u);
  EXPECT_EQ(s.rpg_min_dec_fac, 50u);
  EXPECT_EQ(s.rpg_threshold, 1u);
  EXPECT_EQ(s.dce_tcp_g, 1019u);
  EXPECT_EQ(s.dce_tcp_rtt, 1u);
  EXPECT_EQ(s.rate_reduce_monitor_period, 4u);
  EXPECT_EQ(s.initial_alpha_value, 1023u);
  EXPECT_EQ(s.clamp_tgt_rate, 0u);
  EXPECT_EQ(s.clamp_tgt_rate_after_time_inc, 1u);
  EXPECT_EQ(s.min_time_between_cnps, 4u);
  EXPECT_EQ(lab::dcqcn_changed_text(s), "");
}

// Before any CNP the QP sends at the line rate; nothing moves it.
TEST(Dcqcn, WithoutCnpsTheRateIsTheLineRate) {
  DcqcnRp rp({}, k100G);
  rp.on_bytes_sent(100 * kByteStage, 10);
  rp.advance(1000000);
  EXPECT_FALSE(rp.limited());
  EXPECT_EQ(rp.rate_kbps(), k100G);
  EXPECT_EQ(rp.counters().cuts + rp.counters().fast_recovery + rp.counters().additive, 0u);
}

// mlx5's defaults, 100 Gb/s, one CNP at t = 0 us:
//   the limiter: rate = target = 100 000 000 kbit/s, alpha = 1023.
//   alpha, every 1 us (g = 1019): t=1, with the CNP: 1019*1023/1024 = 1018
//   (1 042 437 / 1024, floor) + 5 = 1023; t=2: 1018; t=3: 1019*1018/1024 =
//   1013; t=4: 1019*1013/1024 = 1008; t=5: 1003.
//   the cut at t=4 (the monitor period, after alpha's update at that
//   instant): min(100 000 000 * 1008 >> 11, 100 000 000 * 50 / 100) =
//   min(100 800 000 000 / 2048 = 49 218 750, 50 000 000) = 49 218 750,
//   rate 50 781 250; no clamp (no increase yet): target stays 100 000 000.
TEST(Dcqcn, FirstCnpCutsAtTheEndOfItsMonitorPeriod) {
  DcqcnRp rp({}, k100G);
  rp.on_cnp(0);
  EXPECT_TRUE(rp.limited());
  EXPECT_EQ(rp.alpha(), 1023u);
  EXPECT_EQ(rp.rate_kbps(), k100G);
  const uint32_t alphas[] = {1023, 1018, 1013};
  for (uint64_t t = 1; t <= 3; ++t) {
    rp.advance(t);
    EXPECT_EQ(rp.alpha(), alphas[t - 1]) << "t=" << t;
    EXPECT_EQ(rp.rate_kbps(), k100G) << "no cut before the period ends, t=" << t;
  }
  rp.advance(4);
  EXPECT_EQ(rp.alpha(), 1008u);
  EXPECT_EQ(rp.rate_kbps(), 50781250u);
  EXPECT_EQ(rp.target_kbps(), k100G);
  EXPECT_EQ(rp.lowest_kbps(), 50781250u);
  rp.advance(5);
  EXPECT_EQ(rp.alpha(), 1003u);
  EXPECT_EQ(rp.counters().cnps, 1u);
  EXPECT_EQ(rp.counters().cuts, 1u);
  EXPECT_EQ(rp.counters().limiter_allocations, 1u);
}

// Without CNPs alpha only decays: g * alpha / 1024, floored, takes at least
// 1 off each update, so from 1008 at t=4 it is 0 within 1008 updates
// (the floor makes it far sooner: 163 at t=304, 0 by t=604), and a CNP
// then brings it back to 1024 - g = 5, no more: alpha forgets in
// hundreds of microseconds.
TEST(Dcqcn, AlphaDecaysWithoutCnpsAndForgets) {
  DcqcnRp rp({}, k100G);
  rp.on_cnp(0);
  rp.advance(4);
  EXPECT_EQ(rp.alpha(), 1008u);
  rp.advance(304);
  EXPECT_EQ(rp.alpha(), 163u);
  rp.advance(4 + 1008);
  EXPECT_EQ(rp.alpha(), 0u);
  rp.on_cnp(1100);
  rp.advance(1101);
  EXPECT_EQ(rp.alpha(), 5u);
  rp.advance(1102);
  EXPECT_EQ(rp.alpha(), 4u);  // 1019 * 5 / 1024
}

// After the first cut (rate 50 781 250, target 100 000 000), the timer
// restarted at t=4 increases every 300 us: t=304 fast recovery (stage 0 <
// rpg_threshold 1): rate = 50 781 250 + ceil(49 218 750 / 2) = 75 390 625;
// t=604 additive (timer stage 1): target + 5 Mb/s, capped at the line,
// rate = 75 390 625 + ceil(24 609 375 / 2) = 87 695 313; t=904:
// 93 847 657. The distance to the line halves (rounded down) with each
// increase: 49 218 750 < 2^26 takes 26 increases to reach 0, the last at
// t = 304 + 25 x 300 = 7804, where the limiter is released.
TEST(Dcqcn, RecoveryHalvesTheDistanceToTheTargetAndReleasesAtTheLine) {
  DcqcnRp rp({}, k100G);
  rp.on_cnp(0);
  rp.advance(303);
  EXPECT_EQ(rp.rate_kbps(), 50781250u);
  rp.advance(304);
  EXPECT_EQ(rp.rate_kbps(), 75390625u);
  EXPECT_EQ(rp.counters().fast_recovery, 1u);
  rp.advance(604);
  EXPECT_EQ(rp.rate_kbps(), 87695313u);
  EXPECT_EQ(rp.target_kbps(), k100G);
  EXPECT_EQ(rp.counters().additive, 1u);
  rp.advance(904);
  EXPECT_EQ(rp.rate_kbps(), 93847657u);
  rp.advance(7803);
  EXPECT_TRUE(rp.limited());
  EXPECT_EQ(rp.rate_kbps(), 99999999u);
  rp.advance(7804);
  EXPECT_FALSE(rp.limited());
  EXPECT_EQ(rp.rate_kbps(), k100G);
  EXPECT_EQ(rp.counters().limiter_releases, 1u);
  EXPECT_EQ(rp.counters().fast_recovery + rp.counters().additive, 26u);
  rp.advance(100000);  // released: nothing more happens
  EXPECT_EQ(rp.counters().fast_recovery + rp.counters().additive, 26u);
  // The next CNP is a first CNP again: alpha from initial_alpha_value.
  rp.on_cnp(100000);
  EXPECT_EQ(rp.alpha(), 1023u);
  EXPECT_EQ(rp.counters().limiter_allocations, 2u);
}

// A target below the line shows the increases: rate_to_set_on_first_cnp
// 50 000 Mb/s on a 100 Gb/s line. Cut at t=4 (alpha 1008): 50 000 000 *
// 1008 >> 11 = 24 609 375, rate 25 390 625, target 50 000 000.
//   t=304 fast recovery: 25 390 625 + ceil(24 609 375 / 2) = 37 695 313
//   t=604 additive, target 50 005 000: + ceil(12 309 687 / 2) = 43 850 157
//   t=904 additive, target 50 010 000: + ceil(6 159 843 / 2) = 46 930 079
// then rpg_byte_reset x 64 = 2 097 088 bytes at a time (timer stage T=3):
//   byte stage B=0: additive (max(T, B) >= 1), target 50 015 000: 48 472 540
//   B=1: additive (min(T, B) = 1, not above 1), target 50 020 000: 49 246 270
//   B=2: hyper (min(T, B) = 2 > 1), target 50 070 000: + ceil(823 730 / 2) = 49 658 135
// and the timer at t=1204 (T=3, B=3): hyper, target 50 120 000: 49 889 068.
TEST(Dcqcn, AdditiveThenHyperIncreaseOnTimerAndByteStages) {
  DcqcnSettings s;
  s.rate_to_set_on_first_cnp = 50000;
  DcqcnRp rp(s, k100G);
  rp.on_cnp(0);
  EXPECT_EQ(rp.rate_kbps(), 50000000u);
  rp.advance(4);
  EXPECT_EQ(rp.rate_kbps(), 25390625u);
  EXPECT_EQ(rp.target_kbps(), 50000000u);
  struct Step {
    uint64_t t;
    uint64_t rate, target;
  };
  for (const Step& x : {Step{304, 37695313, 50000000}, Step{604, 43850157, 50005000}, Step{904, 46930079, 50010000}}) {
    rp.advance(x.t);
    EXPECT_EQ(rp.rate_kbps(), x.rate) << "t=" << x.t;
    EXPECT_EQ(rp.target_kbps(), x.target) << "t=" << x.t;
  }
  EXPECT_EQ(rp.timer_stage(), 3u);
  rp.on_bytes_sent(kByteStage - 1, 905);
  EXPECT_EQ(rp.byte_stage(), 0u) << "one byte short of a stage";
  rp.on_bytes_sent(1, 905);
  EXPECT_EQ(rp.rate_kbps(), 48472540u);
  EXPECT_EQ(rp.target_kbps(), 50015000u);
  rp.on_bytes_sent(kByteStage, 906);
  EXPECT_EQ(rp.rate_kbps(), 49246270u);
  EXPECT_EQ(rp.target_kbps(), 50020000u);
  EXPECT_EQ(rp.counters().hyper, 0u);
  rp.on_bytes_sent(kByteStage, 907);
  EXPECT_EQ(rp.rate_kbps(), 49658135u);
  EXPECT_EQ(rp.target_kbps(), 50070000u);
  EXPECT_EQ(rp.counters().hyper, 1u);
  rp.advance(1204);
  EXPECT_EQ(rp.rate_kbps(), 49889068u);
  EXPECT_EQ(rp.target_kbps(), 50120000u);
  EXPECT_EQ(rp.counters().fast_recovery, 1u);
  EXPECT_EQ(rp.counters().additive, 4u);
  EXPECT_EQ(rp.counters().hyper, 2u);
}

// clamp_tgt_rate: two cuts in a row, no increase between. dce_tcp_rtt 4
// puts alpha's update at the cut's instants: with a CNP in each period
// alpha stays 1019 * 1023 / 1024 + 5 = 1023.
//   t=4: 100 000 000 * 1023 >> 11 = 49 951 171, rate 50 048 829
//   t=8: 50 048 829 * 1023 >> 11 = 51 199 952 067 / 2048 = 24 999 976
//        (below 50 % = 25 024 414), rate 25 048 853
// Without the clamp the target stays at the line, 100 000 000; with
// clamp_tgt_rate 1 it is the rate before each cut: 50 048 829 after the
// second. Fast recovery at t=308 then heads for each:
//   without: 25 048 853 + ceil(74 951 147 / 2) = 62 524 427
//   with:    25 048 853 + ceil(24 999 976 / 2) = 37 548 841
TEST(Dcqcn, ClampTgtRateSetsTheTargetAtEveryCut) {
  for (uint32_t clamp : {0u, 1u}) {
    SCOPED_TRACE("clamp_tgt_rate=" + std::to_string(clamp));
    DcqcnSettings s;
    s.dce_tcp_rtt = 4;
    s.clamp_tgt_rate = clamp;
    DcqcnRp rp(s, k100G);
    rp.on_cnp(0);
    rp.advance(4);
    EXPECT_EQ(rp.alpha(), 1023u);
    EXPECT_EQ(rp.rate_kbps(), 50048829u);
    rp.on_cnp(5);
    rp.advance(8);
    EXPECT_EQ(rp.alpha(), 1023u);
    EXPECT_EQ(rp.rate_kbps(), 25048853u);
    EXPECT_EQ(rp.target_kbps(), clamp ? 50048829u : k100G);
    rp.advance(308);
    EXPECT_EQ(rp.rate_kbps(), clamp ? 37548841u : 62524427u);
    EXPECT_EQ(rp.counters().cuts, 2u);
  }
}

// Without clamp_tgt_rate, a timer increase since the last cut clamps the
// target all the same (clamp_tgt_rate_after_time_inc 1, mlx5's default);
// with it 0, only the byte counter's would. From the first cut (rate
// 50 781 250) and the fast recovery at t=304 (75 390 625), a CNP at t=305
// cuts at t=308.
TEST(Dcqcn, ClampAfterTimeIncreaseFollowsItsSetting) {
  for (uint32_t after_time : {0u, 1u}) {
    SCOPED_TRACE("clamp_tgt_rate_after_time_inc=" + std::to_string(after_time));
    DcqcnSettings s;
    s.clamp_tgt_rate_after_time_inc = after_time;
    DcqcnRp rp(s, k100G);
    rp.on_cnp(0);
    rp.advance(304);
    EXPECT_EQ(rp.rate_kbps(), 75390625u);
    rp.on_cnp(305);
    rp.advance(308);
    EXPECT_EQ(rp.counters().cuts, 2u);
    EXPECT_EQ(rp.target_kbps(), after_time ? 75390625u : k100G);
  }
}

// The long-haul tuning operators use across 50-500 km:
// rpg_time_reset=5000, rpg_min_dec_fac=95, clamp_tgt_rate=1. The first
// cut is bounded to 5 %: min(49 218 750, 100 000 000 * 5 / 100) =
// 5 000 000, rate 95 000 000; nothing recovers before t = 4 + 5000, then
// fast recovery: 95 000 000 + 2 500 000 = 97 500 000. By then alpha is
// 0; a CNP at t=5010 makes it 5 at t=5011 and 1019 * 5 / 1024 = 4 at
// t=5012, whose cut is 97 500 000 * 4 >> 11 = 190 429: rate 97 309 571,
// target clamped to 97 500 000.
TEST(Dcqcn, LongHaulSettingsCutLessAndRecoverLater) {
  DcqcnSettings s = lab::parse_dcqcn_settings({"rpg_time_reset=5000,rpg_min_dec_fac=95,clamp_tgt_rate=1"});
  EXPECT_EQ(lab::dcqcn_changed_text(s), "clamp_tgt_rate=1,rpg_min_dec_fac=95,rpg_time_reset=5000");
  DcqcnRp rp(s, k100G);
  rp.on_cnp(0);
  rp.advance(4);
  EXPECT_EQ(rp.rate_kbps(), 95000000u);
  EXPECT_EQ(rp.target_kbps(), k100G);
  rp.advance(5003);
  EXPECT_EQ(rp.rate_kbps(), 95000000u);
  EXPECT_EQ(rp.counters().fast_recovery, 0u);
  rp.advance(5004);
  EXPECT_EQ(rp.rate_kbps(), 97500000u);
  EXPECT_EQ(rp.alpha(), 0u);
  rp.on_cnp(5010);
  rp.advance(5012);
  EXPECT_EQ(rp.alpha(), 4u);
  EXPECT_EQ(rp.rate_kbps(), 97309571u);
  EXPECT_EQ(rp.target_kbps(), 97500000u);
}

// A cut never goes below rpg_min_rate; the ceiling is rpg_max_rate when it
// is below the line. Many CNPs, one per monitor period, from 10 Mb/s:
// each cut at most halves, and the floor of 1 Mb/s holds.
TEST(Dcqcn, RatesStayBetweenMinAndMax) {
  DcqcnSettings s;
  s.rpg_max_rate = 10;  // Mb/s
  DcqcnRp rp(s, k100G);
  EXPECT_EQ(rp.max_kbps(), 10000u);
  for (uint64_t t = 0; t < 400; t += 4) rp.on_cnp(t);
  rp.advance(400);
  EXPECT_EQ(rp.counters().cuts, 100u);
  EXPECT_EQ(rp.rate_kbps(), 1000u);
  EXPECT_EQ(rp.lowest_kbps(), 1000u);
}

// `--dcqcn`: keys by their mlx5 names, several per text and several
// texts, the last value of a key wins; an unknown key, a value that is no
// integer or out of its range, or a pair without '=' is refused with the
// pair named, and leaves the settings as they were.
TEST(Dcqcn, SettingsParserTakesMlx5NamesAndRefusesTheRest) {
  DcqcnSettings s = lab::parse_dcqcn_settings({"rpg_time_reset=5000,rpg_min_dec_fac=95", "rpg_time_reset=7000",
                                               "min_time_between_cnps=0"});
  EXPECT_EQ(s.rpg_time_reset, 7000u);
  EXPECT_EQ(s.rpg_min_dec_fac, 95u);
  EXPECT_EQ(s.min_time_between_cnps, 0u);
  EXPECT_EQ(s.rpg_gd, 11u);
  EXPECT_NE(lab::dcqcn_settings_text(s).find("rpg_time_reset=7000"), std::string::npos);
  struct Case {
    const char* text;
    const char* why;
  } cases[] = {
      {"rpg_time=5", "unknown key \"rpg_time\" (keys: clamp_tgt_rate, "},
      {"rpg_gd=x", "rpg_gd=x: not an integer 0..31"},
      {"rpg_gd=", "rpg_gd=: not an integer 0..31"},
      {"rpg_gd=-1", "rpg_gd=-1: not an integer 0..31"},
      {"rpg_gd=12abc", "rpg_gd=12abc: not an integer 0..31"},
      {"rpg_gd=32", "rpg_gd=32: out of range 0..31"},
      {"dce_tcp_g=1024", "dce_tcp_g=1024: out of range 0..1023"},
      {"rpg_time_reset=0", "rpg_time_reset=0: out of range 1..10000000"},
      {"rpg_min_dec_fac=101", "rpg_min_dec_fac=101: out of range 0..100"},
      {"rpg_ai_rate=99999999999999999999", "out of range 0..4000000"},
      {"rpg_gd", "\"rpg_gd\" is not KEY=VALUE"},
      {"rpg_gd=10,", "an empty setting"},
      {"", "an empty setting"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    DcqcnSettings t;
    t.rpg_gd = 7;
    const std::string why = lab::apply_dcqcn_settings(c.text, t);
    EXPECT_NE(why.find(c.why), std::string::npos) << why;
    EXPECT_EQ(t.rpg_gd, 7u) << "a refused text changes nothing";
    try {
      lab::parse_dcqcn_settings({c.text});
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), kExitUsage);
      EXPECT_EQ(std::string(e.what()).rfind("--dcqcn: ", 0), 0u) << e.what();
    }
  }
  lab::CongestionControl cc{};
  EXPECT_TRUE(lab::parse_congestion_control("dcqcn", &cc));
  EXPECT_EQ(cc, lab::CongestionControl::kDcqcn);
  EXPECT_TRUE(lab::parse_congestion_control("none", &cc));
  EXPECT_EQ(cc, lab::CongestionControl::kNone);
  EXPECT_FALSE(lab::parse_congestion_control("DCQCN", &cc));
}

}  // namespace
}  // namespace rg::test
