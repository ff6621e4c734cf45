// The lab WAN's delay line and loss models, measured through the lab's own
// path (host A -> gateway A -> WAN router -> gateway B -> host B, no
// roceguard): each datagram carries its number and send time, host B takes
// the one-way delay of each from the same clock.
//
// Bounds: a datagram never arrives before the delay asked for (exact: the
// line holds it at least that long); the median arrives within
// kMedianBound of it, what this host's timers and scheduler add (measured
// in bench/README.md, "Delay line").
#include <gtest/gtest.h>

#include <numeric>

#include "common/error.h"
#include "lab/path_probe.h"
#include "lab_fixture.h"

namespace rg::test {
namespace {

using namespace std::chrono_literals;

constexpr int64_t kMedianBound = 2'000'000;  // ns

class DelayLine : public LabTest {
 protected:
  void start(std::chrono::microseconds delay, std::chrono::microseconds jitter = 0us, double reorder_pct = 0) {
    lab::DelayLineConfig cfg;
    cfg.delay = delay;
    cfg.jitter = jitter;
    cfg.reorder_ppm = static_cast<uint32_t>(reorder_pct * 10000);
    wan_->start_delay_line({{"a_to_b", "to-a", "to-b", lab::parse_mac(topo_->mac(lab::Node::kGatewayB, "wan0"))},
                            {"b_to_a", "to-b", "to-a", lab::parse_mac(topo_->mac(lab::Node::kGatewayA, "wan0"))}},
                           cfg);
  }
  static void show(const char* what, const lab::ProbeResult& r) {
    report(what, {{"sent", r.sent},
                  {"received", r.received},
                  {"inversions", r.inversions},
                  {"delay_min_us", static_cast<uint64_t>(r.delay_quantile(0) / 1000)},
                  {"delay_p50_us", static_cast<uint64_t>(r.delay_quantile(0.5) / 1000)},
                  {"delay_p99_us", static_cast<uint64_t>(r.delay_quantile(0.99) / 1000)},
                  {"delay_max_us", static_cast<uint64_t>(r.delay_quantile(1) / 1000)}});
  }
};

TEST_F(DelayLine, HoldsEveryPacketForTheDelayAndKeepsTheirOrder) {
  const auto base = lab::probe_path(*topo_, {.count = 500, .interval = 100us});
  show("no delay line", base);
  start(5ms);
  topo_->check_path();  // both directions cross the line: replies come back through it
  const auto r = lab::probe_path(*topo_, {.count = 3000, .interval = 50us});
  show("delay 5 ms", r);
  EXPECT_EQ(r.received, r.sent);
  EXPECT_EQ(r.sent, 3000u);
  EXPECT_EQ(r.inversions, 0u);
  EXPECT_EQ(r.duplicates, 0u);
  EXPECT_GE(r.delay_quantile(0), 5'000'000) << "a datagram left the line before its time";
  EXPECT_LE(r.delay_quantile(0.5), 5'000'000 + base.delay_quantile(0.5) + kMedianBound);
  const auto st = wan_->delay_line()->stats(0);
  EXPECT_GE(st.frames, 3000u);
  EXPECT_EQ(st.reordered, 0u);
  EXPECT_EQ(st.send_errors, 0u);
  EXPECT_EQ(st.rx_dropped, 0u);
}

TEST_F(DelayLine, JitterVariesTheDelayButNeverTheOrder) {
  start(4ms, 2ms);
  const auto r = lab::probe_path(*topo_, {.count = 1500, .interval = 1ms});
  show("delay 4 ms +- 2 ms", r);
  EXPECT_EQ(r.received, r.sent);
  EXPECT_EQ(r.inversions, 0u);
  EXPECT_GE(r.delay_quantile(0), 2'000'000);
  // Uniform in 2..6 ms, each no earlier than the one ahead (1 ms ahead of
  // it): more than a millisecond between the fastest and slowest tenth.
  EXPECT_GT(r.delay_quantile(0.9) - r.delay_quantile(0.1), 1'000'000);
}

TEST_F(DelayLine, ReordersOnlyWhenAsked) {
  start(1ms, 0us, 5);
  const auto r = lab::probe_path(*topo_, {.count = 3000, .interval = 50us});
  show("reorder 5 %", r);
  EXPECT_EQ(r.received, r.sent);
  EXPECT_GT(r.inversions, 0u);
  EXPECT_GT(wan_->delay_line()->stats(0).reordered, 0u);
  EXPECT_GE(r.delay_quantile(0), 1'000'000) << "reordered by holding back, never by sending early";
}

// Loss runs per direction, with and without bursts: the WAN program alone.
struct LossRun {
  lab::ProbeResult probe;
  uint64_t dropped = 0;
  lab::LossRuns runs{};
  uint64_t mean_run_x10 = 0;  // dropped per run, times 10
};

// 20 000 datagrams host A -> host B through a WAN losing loss_pct in bursts
// of burst on average; the loss is off again on return.
LossRun lose(lab::Wan& wan, const lab::Topology& topo, const char* what, double loss_pct, double burst) {
  rg_wan_config cfg{};
  cfg.flags = RG_WAN_F_BLEACH;
  lab::set_loss(cfg, loss_pct, burst);
  wan.configure(cfg);
  LossRun r;
  r.probe = lab::probe_path(topo, {.count = 20000, .interval = 50us, .drain = 500ms});
  lab::set_loss(cfg, 0, 1);
  wan.configure(cfg);
  r.dropped = wan.stats("to-a", RG_WAN_UDP_OTHER).dropped;
  r.runs = wan.loss_runs("to-a");
  const uint64_t n = std::accumulate(r.runs.begin(), r.runs.end(), uint64_t{0});
  r.mean_run_x10 = n ? 10 * r.dropped / n : 0;
  report(what, {{"sent", r.probe.sent}, {"received", r.probe.received}, {"dropped", r.dropped},
                {"mean_run_x10", r.mean_run_x10}});
  return r;
}

TEST_F(DelayLine, BurstLossDropsInRunsOfTheMeanLength) {
  const LossRun r = lose(*wan_, *topo_, "burst 8", 5, 8);
  EXPECT_EQ(r.probe.received + r.dropped, r.probe.sent);
  // 5 % of 20000 in ~125 bursts: far inside 2.5..10 %.
  EXPECT_GT(r.dropped, 500u);
  EXPECT_LT(r.dropped, 2000u);
  EXPECT_GT(r.mean_run_x10, 30u) << "runs of 8 on average, not single drops";
  EXPECT_GT(r.runs[3] + r.runs[4] + r.runs[5] + r.runs[6] + r.runs[7], 0u) << "some runs longer than 4";
}

TEST_F(DelayLine, IndependentLossDropsAlone) {
  const LossRun r = lose(*wan_, *topo_, "independent", 5, 1);
  EXPECT_EQ(r.probe.received + r.dropped, r.probe.sent);
  EXPECT_GT(r.dropped, 500u);
  EXPECT_LT(r.dropped, 2000u);
  EXPECT_LT(r.mean_run_x10, 15u) << "5 % independent: runs average about 1.05";
}

TEST(WanLoss, BurstParametersFollowTheLossAndTheMeanBurst) {
  rg_wan_config cfg{};
  lab::set_loss(cfg, 1, 1);
  EXPECT_EQ(cfg.loss_ppm, 10000u);
  EXPECT_EQ(cfg.burst_leave_ppm, 0u);
  lab::set_loss(cfg, 1, 4);
  EXPECT_EQ(cfg.burst_leave_ppm, 250000u);
  // enter / (enter + leave) = 1 %: enter = 0.01 * 0.25 / 0.99.
  EXPECT_EQ(cfg.burst_enter_ppm, 2525u);
  EXPECT_THROW(lab::set_loss(cfg, 1, 0.5), Error);
  EXPECT_THROW(lab::set_loss(cfg, 100, 4), Error);
  EXPECT_THROW(lab::set_loss(cfg, 101, 1), Error);
}

}  // namespace
}  // namespace rg::test
