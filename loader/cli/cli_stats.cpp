// stats: the pinned counters, per-CPU values summed, read through MapReader;
// per interface, per tunnel peer, and optionally per QP.
#include <algorithm>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "dataplane/maps.h"
#include "dataplane/names.h"
#include "dataplane/state.h"
#include "metrics/presentation.h"

namespace rg {
namespace {

void cmd_stats(const std::string& pin_path, bool json, bool qp, size_t top, bool all) {
  MapReader reader(pin_path);
  auto rows = reader.counters();
  std::sort(rows.begin(), rows.end(), [](const CounterRow& a, const CounterRow& b) {
    return a.ifindex != b.ifindex ? a.ifindex < b.ifindex : a.direction < b.direction;
  });
  std::vector<QpRow> qps;
  QpEntries qp_entries;
  if (qp) qps = reader.top_qps(top, qp_ranks_before, &qp_entries);
  const size_t qp_total = size_t{qp_entries.v4} + qp_entries.v6;
  const auto tunnels =
      tunnel_peers(reader.peer_stats(), reader.tunnel_streams(), peer_names(pin_path), monotonic_now_ns());

  if (json) {
    nlohmann::json out;
    nlohmann::json counters = nlohmann::json::array();
    for (const auto& r : rows) counters.push_back(counter_row_json(r, interface_name(r.ifindex), true));
    out["counters"] = counters;
    nlohmann::json peers = nlohmann::json::array();
    for (const auto& t : tunnels) peers.push_back(tunnel_peer_json(t));
    out["tunnels"] = peers;
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
  if (!tunnels.empty()) {
    // Sent and encapsulated count at this gateway towards the peer; the
    // sequence columns what arrived here from it.
    std::printf("\ntunnels: per peer\n");
    std::printf("%-20s %12s %12s %10s %12s %10s %10s %10s %10s %12s\n", "PEER", "ENCAP", "SENT", "OVERSIZE",
                "RECEIVED", "LOST", "REORDERED", "DUPS", "FIB_MISS", "DELAY_AVG_US");
    for (const auto& t : tunnels) {
      uint64_t arrivals = 0;
      for (uint64_t n : t.delay) arrivals += n;
      const double avg_us = arrivals ? static_cast<double>(t.delay_sum_ns) / 1e3 / static_cast<double>(arrivals) : 0;
      std::printf("%-20s %12llu %12llu %10llu %12llu %10llu %10llu %10llu %10llu %12.1f\n", t.name.c_str(),
                  (unsigned long long)t.ev[RG_PEER_EV_ENCAPSULATED].packets,
                  (unsigned long long)t.ev[RG_PEER_EV_SEQ_SENT].packets,
                  (unsigned long long)(t.ev[RG_PEER_EV_OVERSIZE_PASSED].packets +
                                       t.ev[RG_PEER_EV_OVERSIZE_DROPPED].packets),
                  (unsigned long long)t.received, (unsigned long long)t.lost, (unsigned long long)t.reordered,
                  (unsigned long long)t.duplicated, (unsigned long long)t.ev[RG_PEER_EV_FIB_MISS].packets, avg_us);
    }
  }
  if (!qp) return;
  std::printf("\nqueue pairs: %zu entries tracked (one per QP and direction), top %zu by retransmits + lost\n",
              qp_total, qps.size());
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
