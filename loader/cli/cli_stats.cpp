// stats: the pinned counters, per-CPU values summed, read through MapReader;
// per interface, per tunnel peer (with the loss shield's work, the round
// trip measured and the ACK timeout fitting it), and optionally per QP.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "common/error.h"
#include "config/config.h"
#include "dataplane/maps.h"
#include "dataplane/names.h"
#include "dataplane/state.h"
#include "metrics/presentation.h"
#include "nic/profile.h"

namespace rg {
namespace {

// The NIC profile the tunnels' round trips are held against: the [nic] table
// of the file given, else of the configuration the gateway runs (the attach
// record), else the defaults; and where it came from.
struct StatsProfile {
  nic::Profile profile;
  std::string source;
};

StatsProfile stats_profile(const std::string& config, const std::string& pin_path) {
  if (!config.empty()) {
    ConfigProblems problems;
    Config cfg = resolve_config({config, {}, true}, problems);
    if (!problems.errors.empty()) {
      std::string msg = "invalid configuration " + config + ":";
      for (const auto& e : problems.errors) msg += "\n  " + e;
      throw Error(msg, kExitUsage);
    }
    return {cfg.nic, config};
  }
  if (auto p = recorded_nic_profile(pin_path)) return {*p, "the running configuration"};
  return {nic::Profile{}, "the default profile"};
}

void cmd_stats(const std::string& pin_path, const std::string& config, bool qp, size_t top, bool all) {
  const StatsProfile nic_profile = stats_profile(config, pin_path);
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
  // Per peer: the warning when the profile's ACK timeout is shorter than its
  // round trip calls for, on stderr whatever the output.
  std::vector<std::optional<std::string>> warnings;
  for (const auto& t : tunnels) {
    const auto rtt = tunnel_rtt_us(t);
    warnings.push_back(rtt ? nic::ack_timeout_below_path(nic_profile.profile, *rtt) : std::nullopt);
    if (warnings.back())
      std::cerr << "roceguard: warning: tunnel " << t.name << ": " << *warnings.back() << " (profile: "
                << nic_profile.source << ")\n";
  }

  if (json_output()) {
    nlohmann::json out;
    nlohmann::json counters = nlohmann::json::array();
    for (const auto& r : rows) counters.push_back(counter_row_json(r, interface_name(r.ifindex), true));
    out["counters"] = counters;
    nlohmann::json peers = nlohmann::json::array();
    for (size_t i = 0; i < tunnels.size(); ++i) {
      nlohmann::json peer = tunnel_peer_json(tunnels[i]);
      peer["ack_timeout_warning"] = warnings[i] ? nlohmann::json(*warnings[i]) : nlohmann::json(nullptr);
      peers.push_back(peer);
    }
    out["tunnels"] = peers;
    const nic::Profile& p = nic_profile.profile;
    out["nic_profile"] = {{"source", nic_profile.source},
                          {"ack_timeout", p.ack_timeout_text},
                          {"ack_timeout_exponent", p.ack_timeout.exponent},
                          {"ack_timeout_seconds", p.ack_timeout.effective_us * 1e-6}};
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
    print_json(out);
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
                "RECEIVED", "LOST", "REORDERED", "DUPS", "FIB_MISS", "QUEUE_AVG_US");
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
    // The loss shield, where it works in either direction: copies count
    // where the shield is on (towards the peer), eliminated and residual
    // loss where the copies arrive (from it).
    if (all || std::any_of(tunnels.begin(), tunnels.end(), [](const TunnelPeer& t) { return tunnel_shield(t).active(); })) {
      std::printf("\nloss shield: per peer (copies sent to it; duplicates eliminated and residual loss from it)\n");
      std::printf("%-20s %12s %16s %12s %12s %10s %14s\n", "PEER", "COPIES", "EXTRA_WAN_BYTES", "ELIMINATED",
                  "COPY_ERRORS", "UNCOPIED", "RESIDUAL_LOST");
      for (const auto& t : tunnels) {
        const TunnelShield sh = tunnel_shield(t);
        std::printf("%-20s %12llu %16llu %12llu %12llu %10llu %14llu\n", t.name.c_str(),
                    (unsigned long long)sh.copies, (unsigned long long)sh.extra_wan_bytes,
                    (unsigned long long)sh.eliminated, (unsigned long long)sh.copy_errors,
                    (unsigned long long)sh.uncopied, (unsigned long long)sh.residual_lost);
      }
    }
    // The congestion loop, where it worked towards a peer: what went through
    // the phantom queue, what it marked CE, and the CNPs made from the
    // peer's ACKs. The model's rate and state live in `roceguard run` (its
    // exporter); these are what the programs did with them.
    if (all || std::any_of(tunnels.begin(), tunnels.end(),
                           [](const TunnelPeer& t) { return t.pq.packets || t.pq.cnps || t.pq.cnp_errors; })) {
      std::printf("\ncongestion loop: per peer (the phantom queue towards it; CNPs made from its ACKs)\n");
      std::printf("%-20s %12s %16s %12s %12s %10s %12s %12s\n", "PEER", "QUEUED", "QUEUED_BYTES", "MARKED_CE",
                  "UNMARKABLE", "CAPPED", "CNPS_SENT", "CNPS_REFUSED");
      for (const auto& t : tunnels)
        std::printf("%-20s %12llu %16llu %12llu %12llu %10llu %12llu %12llu\n", t.name.c_str(),
                    (unsigned long long)t.pq.packets, (unsigned long long)t.pq.bytes,
                    (unsigned long long)t.pq.marked, (unsigned long long)t.pq.not_ect,
                    (unsigned long long)t.pq.capped, (unsigned long long)t.pq.cnps,
                    (unsigned long long)t.pq.cnp_errors);
    }
    // The round trip through each tunnel, and the local ACK timeout of the
    // RDMA hosts whose traffic takes it.
    const nic::Profile& p = nic_profile.profile;
    std::printf("\nACK timeout per tunnel: round trip = 2 x p99 one-way delay; profile (%s): %s, exponent %u (%s)\n",
                nic_profile.source.c_str(), p.ack_timeout_text.c_str(), unsigned(p.ack_timeout.exponent),
                nic::format_us(p.ack_timeout.effective_us).c_str());
    for (size_t i = 0; i < tunnels.size(); ++i) {
      std::string clocks;
      if (tunnel_clocks(tunnels[i], &clocks) == TunnelClocks::kNotComparable) {
        std::printf("  %-20s clocks not comparable: %s; no round trip from the one-way delay, no advice\n",
                    tunnels[i].name.c_str(), clocks.c_str());
        continue;
      }
      const auto rtt = tunnel_rtt_us(tunnels[i]);
      if (!rtt) {
        std::printf("  %-20s no delay measured (tunnel.sequence off, or nothing arrived from the peer)\n",
                    tunnels[i].name.c_str());
        continue;
      }
      std::string why;
      const auto fit = nic::ack_timeout_for_rtt(*rtt, &why);
      std::printf("  %-20s round trip %s; ACK timeout fitting this path: %s%s\n", tunnels[i].name.c_str(),
                  nic::format_us(*rtt).c_str(),
                  fit ? ("exponent " + std::to_string(fit->exponent) + " (" + nic::format_us(fit->effective_us) + ")")
                            .c_str()
                      : why.c_str(),
                  warnings[i] ? "; the profile's is shorter" : "");
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
                (unsigned long long)rx.nak_seq_err + rx.nak_other + rx.rnr_nak,  // 32-bit counts, summed in 64
                (unsigned long long)tx.cnp + rx.cnp);
  }
}

}  // namespace

void add_stats_commands(CLI::App& app) {
  static std::string pin_path = kDefaultPinPath;
  static std::string config;
  static bool qp = false, all = false;
  static size_t top = 20;
  auto* stats = app.add_subcommand("stats", "counters from the pinned maps (per-CPU values summed)");
  stats->add_option("--pin-path", pin_path, "bpffs directory of roceguard's maps")->capture_default_str();
  auto* qp_flag = stats->add_flag("--qp", qp, "also list queue pairs, worst first");
  stats->add_option("--top", top, "how many queue pairs --qp lists")->capture_default_str()->needs(qp_flag)
      ->check(CLI::Range(size_t{1}, size_t{1} << 24));
  stats->add_flag("--all", all, "table: show events that are zero too");
  stats->add_option("-c,--config", config,
                    "configuration file whose [nic] table the tunnels' round trips are held against "
                    "(default: the running configuration's)")
      ->check(CLI::ExistingFile);
  stats->callback([] { cmd_stats(pin_path, config, qp, top, all); });
}

}  // namespace rg
