// What the lab WAN's delay line holds on this machine: numbered,
// timestamped UDP from host A to host B through the lab's path (no
// roceguard), without the line and with it, at several offered rates. Per
// case: datagrams offered and received per second, the one-way delay
// (median, 99th percentile, maximum), the delay the line added beyond what
// was asked (median minus the no-line median), inversions. Cases run
// interleaved, round by round, in one lab.
//   bench_delay_line [--delay-us 2000] [--rates 5000,10000,20000,40000,0] [--count 20000] [--rounds 3]
//                    [--json FILE]
// A rate of 0 sends as fast as the socket takes datagrams.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <fstream>
#include <iostream>

#include "lab/path_probe.h"
#include "lab/topology.h"
#include "lab/wan.h"

int main(int argc, char** argv) {
  CLI::App app{"the lab WAN's delay line: rate held, added delay, order"};
  unsigned delay_us = 2000, count = 20000, rounds = 3;
  std::vector<unsigned> rates{5000, 10000, 20000, 40000, 0};
  std::string json_out;
  app.add_option("--delay-us", delay_us, "one-way delay asked of the line")->check(CLI::Range(1u, 1000000u));
  app.add_option("--rates", rates, "offered datagrams per second (0: as fast as possible)")->delimiter(',');
  app.add_option("--count", count, "datagrams per case and round")->check(CLI::Range(100u, 1000000u));
  app.add_option("--rounds", rounds)->check(CLI::Range(1u, 100u));
  app.add_option("--json", json_out);
  CLI11_PARSE(app, argc, argv);

  using namespace rg::lab;
  try {
    Topology topo("rgbdl");
    topo.check_path();
    rg_wan_config cfg{};  // no loss, no bleaching: the WAN program only forwards or holds
    nlohmann::json out = {{"delay_us", delay_us}, {"count", count}, {"rounds", rounds}, {"cases", nlohmann::json::array()}};
    struct Case {
      bool line;
      unsigned rate;
      std::vector<ProbeResult> runs;
    };
    std::vector<Case> cases;
    for (unsigned r : rates) cases.push_back({false, r, {}});
    for (unsigned r : rates) cases.push_back({true, r, {}});
    auto probe = [&](const Case& c) {
      ProbeConfig p;
      p.count = count;
      p.interval = c.rate ? std::chrono::nanoseconds(1000000000 / c.rate) : std::chrono::nanoseconds(0);
      return probe_path(topo, p);
    };
    // Round by round: all no-line cases, then the line started and all its
    // cases, then stopped again (a fresh Wan per round keeps rounds alike).
    for (unsigned round = 0; round < rounds; ++round) {
      {
        Wan plain(topo.netns(Node::kWan), {"to-a", "to-b"}, cfg);
        for (auto& c : cases)
          if (!c.line) c.runs.push_back(probe(c));
      }
      {
        Wan held(topo.netns(Node::kWan), {"to-a", "to-b"}, cfg);
        DelayLineConfig dl;
        dl.delay = std::chrono::microseconds(delay_us);
        held.start_delay_line({{"a_to_b", "to-a", "to-b", parse_mac(topo.mac(Node::kGatewayB, "wan0"))},
                               {"b_to_a", "to-b", "to-a", parse_mac(topo.mac(Node::kGatewayA, "wan0"))}},
                              dl);
        for (auto& c : cases)
          if (c.line) c.runs.push_back(probe(c));
      }
    }
    // The median of rounds for each figure.
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v.empty() ? 0.0 : v[v.size() / 2];
    };
    std::map<unsigned, double> base_p50;
    std::printf("%-8s %10s %12s %12s %10s %10s %10s %12s %10s\n", "line", "offered/s", "sent/s", "received/s",
                "p50 us", "p99 us", "max us", "added us", "inversions");
    for (const auto& c : cases) {
      std::vector<double> sent, recv, p50, p99, mx, inv, loss;
      for (const auto& r : c.runs) {
        sent.push_back(r.send_time.count() ? r.sent * 1e9 / static_cast<double>(r.send_time.count()) : 0);
        recv.push_back(r.received_per_second());
        p50.push_back(r.delay_quantile(0.5) / 1e3);
        p99.push_back(r.delay_quantile(0.99) / 1e3);
        mx.push_back(r.delay_quantile(1) / 1e3);
        inv.push_back(r.inversions);
        loss.push_back(r.sent - r.received);
      }
      const double m50 = median(p50);
      if (!c.line) base_p50[c.rate] = m50;
      const double added = c.line ? m50 - base_p50[c.rate] - delay_us : 0;
      std::printf("%-8s %10s %12.0f %12.0f %10.0f %10.0f %10.0f %12s %10.0f\n", c.line ? "2 ms" : "none",
                  c.rate ? std::to_string(c.rate).c_str() : "max", median(sent), median(recv), m50, median(p99),
                  median(mx), c.line ? std::to_string(static_cast<long>(added)).c_str() : "-", median(inv));
      out["cases"].push_back({{"delay_line", c.line},
                              {"offered_per_s", c.rate},
                              {"sent_per_s", median(sent)},
                              {"received_per_s", median(recv)},
                              {"lost", median(loss)},
                              {"delay_p50_us", m50},
                              {"delay_p99_us", median(p99)},
                              {"delay_max_us", median(mx)},
                              {"added_beyond_delay_us", added},
                              {"inversions", median(inv)}});
    }
    if (!json_out.empty()) std::ofstream(json_out) << out.dump(2) << "\n";
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_delay_line: %s\n", e.what());
    return 1;
  }
  return 0;
}
