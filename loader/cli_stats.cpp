// stats: the pinned counters, per-CPU values summed, read through MapReader.
#include <arpa/inet.h>
#include <net/if.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "maps.h"
#include "names.h"
#include "state.h"

namespace rg {
namespace {

std::string ifname_or_index(uint32_t ifindex) {
  char buf[IF_NAMESIZE] = {};
  // The counters may come from another network namespace's interface.
  return if_indextoname(ifindex, buf) ? std::string(buf) : "if" + std::to_string(ifindex);
}

std::string addr_text(const uint8_t* a, uint32_t family) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (!inet_ntop(family == AF_INET6 ? AF_INET6 : AF_INET, a, buf, sizeof(buf))) return "?";
  return buf;
}

uint64_t qp_badness(const QpRow& r) {
  uint64_t n = 0;
  for (const auto& d : r.state.dir) n += d.retransmits + d.lost;
  return n;
}

nlohmann::json qp_dir_json(const rg_qp_dir& d) {
  return {{"packets", d.packets},         {"bytes", d.bytes},         {"retransmits", d.retransmits},
          {"gaps", d.gaps},               {"lost", d.lost},           {"nak_seq_err", d.nak_seq_err},
          {"nak_other", d.nak_other},     {"rnr_nak", d.rnr_nak},     {"cnp", d.cnp},
          {"ecn_ce", d.ecn_ce},           {"max_psn", d.max_psn}};
}

void cmd_stats(const std::string& pin_path, bool json, bool qp, size_t top, bool all) {
  MapReader reader(pin_path);
  auto rows = reader.counters();
  std::sort(rows.begin(), rows.end(), [](const CounterRow& a, const CounterRow& b) {
    return a.ifindex != b.ifindex ? a.ifindex < b.ifindex : a.direction < b.direction;
  });
  std::vector<QpRow> qps;
  size_t qp_total = 0;
  if (qp) {
    qps = reader.qps();
    qp_total = qps.size();
    std::sort(qps.begin(), qps.end(), [](const QpRow& a, const QpRow& b) {
      uint64_t x = qp_badness(a), y = qp_badness(b);
      if (x != y) return x > y;
      return a.state.dir[0].packets + a.state.dir[1].packets > b.state.dir[0].packets + b.state.dir[1].packets;
    });
    if (qps.size() > top) qps.resize(top);
  }

  if (json) {
    nlohmann::json out;
    nlohmann::json counters = nlohmann::json::array();
    for (const auto& r : rows) {
      nlohmann::json events = nlohmann::json::object();
      for (size_t e = 0; e < RG_EV_MAX; ++e) {
        const auto& n = event_name(static_cast<rg_event>(e));
        events[std::string(n.name)] = {{"packets", r.ev[e].packets}, {"bytes", r.ev[e].bytes}};
      }
      counters.push_back({{"ifindex", r.ifindex},
                          {"interface", ifname_or_index(r.ifindex)},
                          {"direction", std::string(direction_name(r.direction))},
                          {"events", events}});
    }
    out["counters"] = counters;
    if (qp) {
      nlohmann::json list = nlohmann::json::array();
      for (const auto& q : qps)
        list.push_back({{"src", addr_text(q.key.src, q.key.family)},
                        {"dst", addr_text(q.key.dst, q.key.family)},
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
    std::printf("%s %s\n", ifname_or_index(r.ifindex).c_str(), std::string(direction_name(r.direction)).c_str());
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
                addr_text(q.key.src, q.key.family).c_str(), addr_text(q.key.dst, q.key.family).c_str(), q.key.dest_qp,
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
