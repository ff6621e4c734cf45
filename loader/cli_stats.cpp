// stats: the pinned counters, per-CPU values summed, read through MapReader.
#include <algorithm>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "maps.h"
#include "names.h"
#include "presentation.h"
#include "state.h"

namespace rg {
namespace {

void cmd_stats(const std::string& pin_path, bool json, bool qp, size_t top, bool all) {
  MapReader reader(pin_path);
  auto rows = reader.counters();
  std::sort(rows.begin(), rows.end(), [](const CounterRow& a, const CounterRow& b) {
    return a.ifindex != b.ifindex ? a.ifindex < b.ifindex : a.direction < b.direction;
  });
  std::vector<QpRow> qps;
  size_t qp_total = 0;
  if (qp) qps = reader.top_qps(top, qp_ranks_before, &qp_total);

  if (json) {
    nlohmann::json out;
    nlohmann::json counters = nlohmann::json::array();
    for (const auto& r : rows) counters.push_back(counter_row_json(r, interface_name(r.ifindex), true));
    out["counters"] = counters;
    if (qp) {
      nlohmann::json list = nlohmann::json::array();
      for (const auto& q : qps)
        list.push_back({{"src", address_text(q.key.family, q.key.src)},
                        {"dst", address_text(q.key.family, q.key.dst)},
                        {"dest_qp", q.key.dest_qp},
                        {"egress", qp_dir_json(q.state.dir[RG_DIR_EGRESS])},
                        {"ingress", qp_dir_json(q.state.dir[RG_DIR_INGRESS])}});
      out["qps"] = list;
      out["qp_entries"] = qp_total;
    }
    std::cout << out.dump(2) << "\n";
    return;
  }

  if (rows.empty()) std::cout << "no counters yet (no packet has reached the programs)\n";
  for (const auto& r : rows) {
    std::printf("%s %s\n", interface_name(r.ifindex).c_str(), std::string(direction_name(r.direction)).c_str());
    std::printf("  %-20s %16s %18s\n", "EVENT", "PACKETS", "BYTES");
    for (size_t e = 0; e < RG_EV_MAX; ++e) {
      if (!all && !r.ev[e].packets) continue;
      std::printf("  %-20s %16llu %18llu\n", std::string(event_name(static_cast<rg_event>(e)).name).c_str(),
                  static_cast<unsigned long long>(r.ev[e].packets), static_cast<unsigned long long>(r.ev[e].bytes));
    }
  }
  if (!qp) return;
  std::printf("\nqueue pairs: %zu tracked, top %zu by retransmits + lost\n", qp_total, qps.size());
  std::printf("%-40s %-40s %8s %10s %8s %8s %10s %8s %8s %6s\n", "SRC", "DST", "DEST_QP", "TX_PKTS", "TX_RETX",
              "RX_GAPS", "RX_PKTS", "RX_LOST", "RX_NAK", "CNP");
  for (const auto& q : qps) {
    const auto& tx = q.state.dir[RG_DIR_EGRESS];
    const auto& rx = q.state.dir[RG_DIR_INGRESS];
    std::printf("%-40s %-40s %8u %10llu %8llu %8llu %10llu %8llu %8llu %6llu\n",
                address_text(q.key.family, q.key.src).c_str(), address_text(q.key.family, q.key.dst).c_str(), q.key.dest_qp,
                (unsigned long long)tx.packets, (unsigned long long)tx.retransmits, (unsigned long long)rx.gaps,
                (unsigned long long)rx.packets, (unsigned long long)rx.lost,
                (unsigned long long)(rx.nak_seq_err + rx.nak_other + rx.rnr_nak),
                (unsigned long long)(tx.cnp + rx.cnp));
  }
}

}  // namespace

void add_stats_commands(CLI::App& app) {
  static std::string pin_path = kDefaultPinPath;
  static bool json = false, qp = false, all = false;
  static size_t top = 20;
  auto* stats = app.add_subcommand("stats", "counters from the pinned maps (per-CPU values summed)");
  stats->add_option("--pin-path", pin_path, "bpffs directory of roceguard's maps")->capture_default_str();
  stats->add_flag("--json", json, "machine-readable output (every event, zeros included)");
  auto* qp_flag = stats->add_flag("--qp", qp, "also list queue pairs, worst first");
  stats->add_option("--top", top, "how many queue pairs --qp lists")->capture_default_str()->needs(qp_flag)
      ->check(CLI::Range(size_t{1}, size_t{1} << 24));
  stats->add_flag("--all", all, "table: show events that are zero too");
  stats->callback([] { cmd_stats(pin_path, json, qp, top, all); });
}

}  // namespace rg
