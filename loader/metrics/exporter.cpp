#include "metrics/exporter.h"

#include <microhttpd.h>
#include <zlib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <strings.h>
#include <optional>
#include <limits>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>

#include "common/error.h"
#include "common/pause_point.h"
#include "common/text.h"
#include "common/version.h"
#include "dataplane/maps.h"
#include "dataplane/names.h"
#include "metrics/health.h"
#include "metrics/presentation.h"
#include "metrics/process.h"
#include "metrics/web_config.h"
#include "nic/apply.h"
#include "nic/counters.h"

namespace rg {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<std::pair<std::string, std::string>>;

constexpr const char* kMetricsPath = "/metrics";
// What a new exporter reports for each interface until the loader says
// where its ingress program runs (one of kIngressHooks).
constexpr const char* kHooks[] = {"tc_egress", "xdp_ingress"};
constexpr const char* kIngressHooks[] = {"xdp_ingress", "tc_ingress"};

// Families in first-use order; samples of one family stay together, which
// the text format requires.
class FamilySet {
 public:
  void add(const std::string& name, const std::string& help, MetricType type,
           const Labels& labels, double value) {
    auto [it, fresh] = index_.try_emplace(name, families_.size());
    if (fresh) families_.push_back(MetricFamily{name, help, type, {}});
    ClientMetric m;
    for (const auto& [k, v] : labels) m.label.push_back({k, v});
    if (type == MetricType::Counter)
      m.counter.value = value;
    else
      m.gauge.value = value;
    families_[it->second].metric.push_back(std::move(m));
  }
  // buckets: (upper bound, cumulative count), +Inf last.
  void add_histogram(const std::string& name, const std::string& help, const Labels& labels,
                     const std::vector<std::pair<double, uint64_t>>& buckets, uint64_t count, double sum) {
    auto [it, fresh] = index_.try_emplace(name, families_.size());
    if (fresh) families_.push_back(MetricFamily{name, help, MetricType::Histogram, {}});
    ClientMetric m;
    for (const auto& [k, v] : labels) m.label.push_back({k, v});
    for (const auto& [le, n] : buckets) m.histogram.bucket.push_back({n, le});
    m.histogram.sample_count = count;
    m.histogram.sample_sum = sum;
    families_[it->second].metric.push_back(std::move(m));
  }
  std::vector<MetricFamily> take() { return std::move(families_); }

 private:
  std::vector<MetricFamily> families_;
  std::unordered_map<std::string, size_t> index_;
};

std::string counter_name(std::string_view metric) {
  return "roceguard_" + std::string(metric) + "_total";
}

// HELP of a family that several events share says what each label value
// counts, so one line documents the whole family.
const std::map<std::string, std::string>& family_help() {
  static const std::map<std::string, std::string> help = [] {
    std::map<std::string, std::string> h;
    auto append = [&h](std::string_view family, const EventName& e, std::string_view suffix) {
      std::string text = std::string(e.help) + std::string(suffix);
      if (!e.label.empty())
        text = std::string(e.label) + "=" + std::string(e.label_value) + ": " + text;
      auto& slot = h[std::string(family)];
      slot += slot.empty() ? text : "; " + text;
    };
    for (size_t i = 0; i < RG_EV_MAX; ++i) {
      const EventName& e = event_name(static_cast<rg_event>(i));
      append(e.metric, e, "");
      if (!e.bytes_metric.empty()) append(e.bytes_metric, e, ", in bytes");
    }
    return h;
  }();
  return help;
}

// Everything a scrape shows, gathered when it is asked for.
class MetricsCollector : public prometheus::Collectable {
 public:
  explicit MetricsCollector(ExporterOptions opts)
      : opts_(std::move(opts)), version_(running_version()), per_qp_(opts_.per_qp), top_qps_(opts_.top_qps) {
    for (const auto& ifname : opts_.interfaces)
      for (const char* hook : kHooks) attached_[{ifname, hook}] = false;
  }

  // A reload's per-QP settings, from the next scrape on.
  void set_qp_series(bool per_qp, size_t top_qps) {
    std::lock_guard lock(mu_);
    per_qp_ = per_qp;
    top_qps_ = top_qps;
  }

  void set_attach_state(const std::string& ifname, const std::string& hook, bool attached) {
    std::lock_guard lock(mu_);
    attached_[{ifname, hook}] = attached;
  }

  void set_ingress_hook(const std::string& ifname, const std::string& hook) {
    std::lock_guard lock(mu_);
    for (const char* h : kIngressHooks)
      if (hook != h) attached_.erase({ifname, h});
    attached_.try_emplace({ifname, hook}, false);
  }

  void set_congestion(std::vector<CongestionPeer> peers) {
    std::lock_guard lock(mu_);
    congestion_ = std::move(peers);
  }

  void set_shield_auto(std::vector<ShieldAutoPeer> peers, std::vector<PeerFeedback> feedback) {
    std::lock_guard lock(mu_);
    shield_auto_ = std::move(peers);
    feedback_ = std::move(feedback);
  }

  // Ready when an interface has a program at each of its hooks: what the
  // loader last reported, read without touching the maps. Exporter-only
  // mode attaches nothing by design and is ready as it serves.
  Readiness readiness() const {
    if (!opts_.dataplane) return {true, "ready: exporter only (dataplane.attach = false), nothing to attach"};
    std::map<std::string, bool> up;
    {
      std::lock_guard lock(mu_);
      for (const auto& [key, on] : attached_) {
        auto [it, fresh] = up.try_emplace(key.first, on);
        it->second = it->second && on;
      }
    }
    std::string attached, waiting;
    for (const auto& [ifname, on] : up) {
      std::string& list = on ? attached : waiting;
      list += (list.empty() ? "" : ", ") + printable(ifname);
    }
    if (attached.empty())
      return {false, "not ready: nothing attached" + (waiting.empty() ? std::string(" (no interface configured)")
                                                                      : " (not attached: " + waiting + ")")};
    return {true, "ready: attached to " + attached + (waiting.empty() ? "" : "; not attached: " + waiting)};
  }

  std::vector<MetricFamily> Collect() const override {
    const auto start = std::chrono::steady_clock::now();
    pause_point("scrape");
    FamilySet out;
    out.add("roceguard_build_info",
            "roceguard's release and the revision it was built from (as `roceguard --version`); the value is "
            "always 1",
            MetricType::Gauge, {{"version", version_.version}, {"revision", version_.revision}}, 1);
    add_process(out);
    {
      std::lock_guard lock(mu_);
      for (const auto& [key, on] : attached_)
        out.add("roceguard_attached",
                "1 when roceguard's program is attached to the interface at the hook",
                MetricType::Gauge, {{"interface", key.first}, {"hook", key.second}}, on ? 1 : 0);
    }
    add_shield_auto(out);
    add_congestion(out);
    out.add("roceguard_pins_persistent",
            "1 when the pinned maps outlive the loader; 0 when their bpffs is private to its mount namespace",
            MetricType::Gauge, {}, opts_.pins_outlive_process ? 1 : 0);

    bool per_qp = false;
    size_t top_qps = 0;
    {
      std::lock_guard lock(mu_);
      per_qp = per_qp_;
      top_qps = top_qps_;
    }
    bool maps_up = collect_maps(out, per_qp, top_qps);
    out.add("roceguard_maps_up",
            "1 when the pinned BPF maps were read in this scrape, 0 when they could not be",
            MetricType::Gauge, {}, maps_up ? 1 : 0);
    out.add("roceguard_scrape_errors_total",
            "Scrapes in which the pinned BPF maps could not be read, since the exporter started",
            MetricType::Counter, {}, static_cast<double>(scrape_errors_.load()));

    collect_nic(out);

    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    out.add("roceguard_scrape_duration_seconds",
            "Time this scrape took to read the maps and sysfs", MetricType::Gauge, {},
            took.count());
    return out.take();
  }

 private:
  // The series of every Prometheus client library, under their names.
  static void add_process(FamilySet& out) {
    const auto p = read_process_stats();
    if (!p) return;
    out.add("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", MetricType::Counter,
            {}, p->cpu_seconds);
    out.add("process_resident_memory_bytes", "Resident memory size in bytes.", MetricType::Gauge, {},
            p->resident_bytes);
    out.add("process_virtual_memory_bytes", "Virtual memory size in bytes.", MetricType::Gauge, {},
            p->virtual_bytes);
    out.add("process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
            MetricType::Gauge, {}, p->start_time_seconds);
    out.add("process_open_fds", "Number of open file descriptors.", MetricType::Gauge, {}, p->open_fds);
    out.add("process_max_fds", "Maximum number of open file descriptors.", MetricType::Gauge, {}, p->max_fds);
  }

  bool collect_maps(FamilySet& out, bool per_qp, size_t top_qps) const {
    if (!opts_.dataplane) return false;  // exporter-only: roceguard_maps_up stays 0
    std::vector<CounterRow> rows;
    std::vector<QpRow> qps;
    std::vector<MapUsage> usage;
    std::vector<TunnelPeer> tunnels;
    try {
      // Opened per scrape: a loader restarted with --reset-state replaces
      // the pinned maps, and an fd kept open would read the orphaned ones.
      MapReader reader(opts_.pin_path);
      // Each map is walked once per scrape, and a walk is bounded by the
      // map's capacity however fast the data path churns it.
      rows = reader.counters();
      const auto counter_entries = static_cast<uint32_t>(rows.size());
      if (per_qp) {
        // Only the exported rows are held, not the whole table.
        QpEntries qp_entries;
        qps = reader.top_qps(top_qps, qp_ranks_before, &qp_entries);
        usage = reader.usage_all(qp_entries, counter_entries);
      } else {
        usage = reader.usage_all(std::nullopt, counter_entries);
      }
      tunnels = tunnel_peers(reader.peer_stats(), reader.tunnel_streams(), peer_names(opts_.pin_path),
                             monotonic_now_ns());
    } catch (const std::exception& e) {
      ++scrape_errors_;
      if (!failing_.exchange(true)) spdlog::warn("metrics: {}", e.what());
      return false;
    }
    if (failing_.exchange(false)) spdlog::info("metrics: pinned maps under {} readable again",
                                               opts_.pin_path);

    for (const auto& u : usage) {
      out.add("roceguard_map_max_entries", "Capacity of the pinned BPF map", MetricType::Gauge,
              {{"map", u.name}}, u.max_entries);
      out.add("roceguard_map_entries", "Entries in the pinned BPF map", MetricType::Gauge,
              {{"map", u.name}}, u.entries);
    }
    add_counters(out, rows);
    if (per_qp) add_top_qps(out, qps, top_qps);
    add_tunnels(out, tunnels);
    return true;
  }

  // Per peer (bounded by RG_MAX_PEERS): its counters, and on the receiving
  // gateway what its sequence streams say about the WAN.
  void add_tunnels(FamilySet& out, const std::vector<TunnelPeer>& tunnels) const {
    for (const TunnelPeer& t : tunnels) {
      for (size_t e = 0; e < RG_PEER_EV_MAX; ++e) {
        const PeerEventName& n = peer_event_name(static_cast<rg_peer_event>(e));
        Labels labels{{"peer", t.name}};
        if (!n.label.empty()) labels.emplace_back(n.label, n.label_value);
        out.add(std::string(n.metric), std::string(n.help), MetricType::Counter, labels,
                static_cast<double>(t.ev[e].packets));
        if (!n.bytes_metric.empty())
          out.add(std::string(n.bytes_metric), std::string(n.bytes_help), MetricType::Counter, labels,
                  static_cast<double>(t.ev[e].bytes));
      }
      if (t.pq.packets) {
        out.add("roceguard_tunnel_congestion_marked_total",
                "RoCE packets to the peer whose inner IP header the congestion loop's phantom queue marked CE",
                MetricType::Counter, {{"peer", t.name}}, static_cast<double>(t.pq.marked));
        out.add("roceguard_tunnel_congestion_unmarkable_total",
                "RoCE packets to the peer the phantom queue chose to mark but left as they were: Not-ECT, or "
                "CE already",
                MetricType::Counter, {{"peer", t.name}}, static_cast<double>(t.pq.not_ect));
        out.add("roceguard_tunnel_congestion_queued_packets_total",
                "Packets through the peer's phantom queue (the loss shield's copies count)", MetricType::Counter,
                {{"peer", t.name}}, static_cast<double>(t.pq.packets));
        for (const auto& [result, n] : {std::pair{"sent", t.pq.cnps}, std::pair{"refused", t.pq.cnp_errors}})
          out.add("roceguard_tunnel_congestion_cnps_total",
                  "CNPs the congestion loop made from the peer's ACKs, NAKs and CNPs and sent to the QP's host "
                  "(TC ingress), by result: sent, or refused by the kernel",
                  MetricType::Counter, {{"peer", t.name}, {"result", result}}, static_cast<double>(n));
        out.add("roceguard_tunnel_congestion_capped_total",
                "Packets that found the peer's phantom queue at its bound (RoCE sent far above the modelled "
                "bottleneck, marked but not slowed)",
                MetricType::Counter, {{"peer", t.name}}, static_cast<double>(t.pq.capped));
        out.add("roceguard_tunnel_congestion_backlog_seconds",
                "The peer's phantom queue's backlog when scraped, in time at its drain rate: with pacing, how far "
                "ahead of now the next frame to the peer may leave",
                MetricType::Gauge, {{"peer", t.name}}, static_cast<double>(t.pq_backlog_ns) / 1e9);
      }
      {
        const char* help =
            "Sequence options from the peer ignored because the tunnel has a key and the option's MAC is not one "
            "of its keys' (bad_mac) or it carries none (no_mac); the packets were decapsulated without them";
        out.add("roceguard_tunnel_auth_rejected_total", help, MetricType::Counter,
                {{"peer", t.name}, {"reason", "bad_mac"}}, static_cast<double>(t.auth_bad));
        out.add("roceguard_tunnel_auth_rejected_total", help, MetricType::Counter,
                {{"peer", t.name}, {"reason", "no_mac"}}, static_cast<double>(t.auth_missing));
        out.add("roceguard_tunnel_auth_next_key_total",
                "Sequence options from the peer that the second key of its key_file verified: the peer signs with "
                "the next key (a rotation under way)",
                MetricType::Counter, {{"peer", t.name}}, static_cast<double>(t.auth_next));
      }
      // A peer whose streams all went untracked or evicted still has them.
      if (!t.streams && !t.evicted && !t.ev[RG_PEER_EV_SEQ_UNTRACKED].packets) continue;
      const Labels peer{{"peer", t.name}};
      const char* from = " from the peer's tunnel sequence option (receiving gateway)";
      out.add("roceguard_tunnel_streams_evicted_total",
              "Sequence streams from the peer evicted from the stream table after " +
                  std::to_string(RG_TUNNEL_STREAM_IDLE_NS / 1000000000ull) +
                  " s of silence (their counts stay in the peer's totals)",
              MetricType::Counter, peer, static_cast<double>(t.evicted));
      out.add("roceguard_tunnel_received_packets_total", std::string("Packets that arrived") + from,
              MetricType::Counter, peer, static_cast<double>(t.received));
      out.add("roceguard_tunnel_lost_packets_total",
              "Sequence numbers that never arrived (with the loss shield on: neither copy did): a hole counts "
              "once " + std::to_string(RG_TUNNEL_WINDOW) + " newer packets came, or once its stream was silent "
              "for a second" + from,
              MetricType::Counter, peer, static_cast<double>(t.lost));
      out.add("roceguard_tunnel_reordered_packets_total",
              std::string("Packets that arrived behind a newer one (a hole they fill)") + from,
              MetricType::Counter, peer, static_cast<double>(t.reordered));
      out.add("roceguard_tunnel_duplicated_packets_total", std::string("Sequence numbers that arrived twice") + from,
              MetricType::Counter, peer, static_cast<double>(t.duplicated));
      out.add("roceguard_tunnel_duplicates_delivered_packets_total",
              std::string("Duplicates handed to the host: from streams without an epoch (a sender that does not "
                          "know the loss shield), which are never eliminated, and second copies of streams the "
                          "stream table had no room for") + from,
              MetricType::Counter, peer, static_cast<double>(t.duplicates_delivered));
      out.add("roceguard_tunnel_peer_eliminates",
              "1 when the peer numbers its streams in an epoch: a roceguard that eliminates the loss shield's "
              "second copies, so this gateway may shield the tunnel towards it; 0 when it does not (an older "
              "roceguard would hand both copies to its host)",
              MetricType::Gauge, peer, t.epoch_streams ? 1.0 : 0.0);
      if (t.floor_streams) {
        out.add("roceguard_tunnel_delay_floor_seconds",
                "Floor of the one-way delay from the peer (the lowest of its streams'): the path's propagation "
                "delay when the two gateways' clocks agree, offset by their difference otherwise" + std::string(from),
                MetricType::Gauge, peer, static_cast<double>(t.floor_min_us) * 1e-6);
        out.add("roceguard_tunnel_clocks_comparable",
                "1 when the peer's send stamps and this gateway's clock can be compared (no stamp arrived before "
                "it was sent, a floor under 1 s): the floor is then the one-way delay, and the ACK timeout is "
                "fitted to it; 0 when not",
                MetricType::Gauge, peer, tunnel_clocks(t) == TunnelClocks::kComparable ? 1.0 : 0.0);
      }
      for (size_t k = 0; k < RG_TUNNEL_RUN_BUCKETS; ++k) {
        Labels run{{"peer", t.name}, {"length", tunnel_loss_run_label(k)}};
        out.add("roceguard_tunnel_loss_runs_total",
                std::string("Gaps of this many consecutive sequence numbers as they opened: the WAN's loss runs "
                            "(runs of 2 or more are correlated loss, which the loss shield's back-to-back copies "
                            "do not survive)") + from,
                MetricType::Counter, run, static_cast<double>(t.loss_runs[k]));
      }
      std::vector<std::pair<double, uint64_t>> buckets;
      uint64_t cumulative = 0;
      for (size_t k = 0; k < RG_TUNNEL_DELAY_BUCKETS; ++k) {
        cumulative += t.delay[k];
        buckets.emplace_back(k + 1 < RG_TUNNEL_DELAY_BUCKETS ? tunnel_delay_bucket_le(k)
                                                              : std::numeric_limits<double>::infinity(),
                             cumulative);
      }
      out.add_histogram("roceguard_tunnel_queueing_delay_seconds",
                        "Queueing delay from the peer: the one-way delay above its floor (the lowest of the "
                        "last 10 s of its stream), from the send timestamp one packet in " +
                            std::to_string(RG_TUNNEL_EXT_EVERY) +
                            " of each stream carries; a difference of two readings of each gateway's clock, "
                            "so right whether the two clocks agree or not",
                        peer, buckets, cumulative, static_cast<double>(t.delay_sum_ns) * 1e-9);
    }
  }

  // The congestion loop's model and reports (empty without it).
  void add_congestion(FamilySet& out) const {
    std::lock_guard lock(mu_);
    for (const CongestionPeer& p : congestion_) {
      const Labels peer{{"peer", p.name}};
      for (const char* state : kCongestionStateNames)
        out.add("roceguard_tunnel_congestion_state",
                "1 for the congestion loop's current phase towards the peer: no_report, learning and compete "
                "mark nothing (no fresh report from the peer; no bottleneck seen yet; the WAN's standing queue "
                "is cross traffic's), cruise, probe and drain hold the peer's RoCE to a share of the modelled "
                "bottleneck",
                MetricType::Gauge, {{"peer", p.name}, {"state", state}}, p.state == state ? 1 : 0);
      out.add("roceguard_tunnel_congestion_bottleneck_bits_per_second",
              "The modelled rate of the WAN's bottleneck towards the peer, in inner bits (0: none seen)",
              MetricType::Gauge, peer, static_cast<double>(p.bottleneck_kbps) * 1e3);
      out.add("roceguard_tunnel_congestion_rate_bits_per_second",
              "The rate at which the peer's phantom queue drains: RoCE sent faster is marked CE (0: no marks)",
              MetricType::Gauge, peer, static_cast<double>(p.rate_kbps) * 1e3);
      if (p.reported) {
        out.add("roceguard_tunnel_congestion_reported_delivery_bits_per_second",
                "The rate at which this gateway's packets reach the peer, as the peer reports it",
                MetricType::Gauge, peer, static_cast<double>(p.reported_rate_kbps) * 1e3);
        if (p.reported_has_delay)
          out.add("roceguard_tunnel_congestion_reported_queue_delay_seconds",
                  "The mean queueing delay (one-way delay above its floor) of this gateway's packets, as the "
                  "peer reports it",
                  MetricType::Gauge, peer, p.reported_delay_us * 1e-6);
      }
      out.add("roceguard_tunnel_congestion_measured_delivery_bits_per_second",
              "The rate at which the peer's packets arrive here, reported to the peer", MetricType::Gauge, peer,
              static_cast<double>(p.sent_rate_kbps) * 1e3);
      if (p.sent_has_delay)
        out.add("roceguard_tunnel_congestion_measured_queue_delay_seconds",
                "The mean queueing delay of the peer's packets here over the last report period, reported to "
                "the peer",
                MetricType::Gauge, peer, p.sent_delay_us * 1e-6);
      for (const auto& [what, n] : {std::pair{"fallback", p.fallbacks}, std::pair{"probe", p.probes},
                                    std::pair{"reset", p.resets}, std::pair{"compete", p.competes}})
        out.add("roceguard_tunnel_congestion_events_total",
                "Congestion loop events towards the peer: fallback (the peer's reports stopped: no marks), probe "
                "(a period above the bottleneck), reset (a standing queue replaced the bottleneck estimate), "
                "compete (a queue that outlasted the drains: cross traffic's; no marks for a while)",
                MetricType::Counter, {{"peer", p.name}, {"event", what}}, static_cast<double>(n));
    }
  }

  // What the daemon's "auto" mode decided and measured (empty without it).
  void add_shield_auto(FamilySet& out) const {
    std::lock_guard lock(mu_);
    for (const ShieldAutoPeer& p : shield_auto_) {
      const Labels peer{{"peer", p.name}};
      out.add("roceguard_tunnel_shield_auto_on",
              "1 while the loss shield set to \"auto\" is on towards the peer (every RoCE packet sent twice)",
              MetricType::Gauge, peer, p.on ? 1 : 0);
      for (const auto& [to, n] : {std::pair{"on", p.turned_on}, std::pair{"off", p.turned_off}})
        out.add("roceguard_tunnel_shield_auto_changes_total",
                "Times the \"auto\" loss shield turned on or off towards the peer (each is logged with its reason)",
                MetricType::Counter, {{"peer", p.name}, {"to", to}}, static_cast<double>(n));
      out.add("roceguard_tunnel_peer_reports_eliminates",
              "1 when the peer's tunnel option says it drops the loss shield's second copies (a current report)",
              MetricType::Gauge, peer, p.eliminates ? 1 : 0);
      if (p.reported_loss >= 0) {
        out.add("roceguard_tunnel_peer_reported_loss_ratio",
                "Raw WAN loss of this gateway's packets as the peer measures it (before its elimination), "
                "over its last 10 s, carried back in the tunnel option",
                MetricType::Gauge, peer, p.reported_loss);
        out.add("roceguard_tunnel_peer_reported_congestion",
                "1 when the peer reports that the one-way delay rose with the loss (congestion: the \"auto\" "
                "shield stays off)",
                MetricType::Gauge, peer, p.congested ? 1 : 0);
      }
    }
    for (const PeerFeedback& f : feedback_) {
      if (f.measured_loss < 0) continue;
      out.add("roceguard_tunnel_measured_loss_ratio",
              "Raw WAN loss of the peer's packets as this gateway measures it (before elimination), over the "
              "last 10 s; sent back to the peer for its \"auto\" shield",
              MetricType::Gauge, {{"peer", f.name}}, f.measured_loss);
    }
  }

  void add_counters(FamilySet& out, const std::vector<CounterRow>& rows) const {
    const auto& help = family_help();
    std::unordered_map<uint32_t, std::string> ifnames;
    for (const auto& row : rows) {
      auto [it, fresh] = ifnames.try_emplace(row.ifindex);
      if (fresh) it->second = interface_name(row.ifindex, opts_.interface_names);
      const std::string dir(direction_name(row.direction));
      for (size_t i = 0; i < RG_EV_MAX; ++i) {
        const EventName& e = event_name(static_cast<rg_event>(i));
        Labels labels{{"interface", it->second}, {"direction", dir}};
        if (!e.label.empty()) labels.emplace_back(e.label, e.label_value);
        out.add(counter_name(e.metric), help.at(std::string(e.metric)), MetricType::Counter,
                labels, static_cast<double>(row.ev[i].packets));
        if (!e.bytes_metric.empty())
          out.add(counter_name(e.bytes_metric), help.at(std::string(e.bytes_metric)),
                  MetricType::Counter, labels, static_cast<double>(row.ev[i].bytes));
      }
    }
  }

  void add_top_qps(FamilySet& out, std::vector<QpRow>& qps, size_t top_qps) const {
    keep_worst_qps(qps, top_qps);
    for (const QpRow& q : qps) {
      const std::string src = address_text(q.key.family, q.key.src);
      const std::string dst = address_text(q.key.family, q.key.dst);
      const std::string qpn = std::to_string(q.key.dest_qp);
      for (int d = 0; d < RG_DIR_MAX; ++d) {
        const rg_qp_dir& s = q.state.dir[d];
        if (!s.packets) continue;
        const Labels l{{"src", src}, {"dst", dst}, {"qp", qpn},
                       {"direction", std::string(direction_name(static_cast<rg_direction>(d)))}};
        for (const QpField& f : qp_fields()) {
          if (f.metric.empty()) continue;
          Labels labels = l;
          if (!f.label.empty()) labels.emplace_back(f.label, f.label_value);
          out.add(std::string(f.metric), std::string(f.help), MetricType::Counter, labels,
                  static_cast<double>(f.value(s)));
        }
      }
    }
  }

  void collect_nic(FamilySet& out) const {
    if (!opts_.nic_state_dir.empty()) {
      nic::NicSystem sys;
      sys.state_dir = opts_.nic_state_dir;
      for (const auto& device : nic::saved_devices(sys))
        out.add("roceguard_nic_profile_applied",
                "1 for each RDMA device the NIC profile is applied to (`roceguard nic apply` saved its values)",
                MetricType::Gauge, {{"device", device}}, 1);
    }
    for (const auto& c : nic::read_nic_counters(opts_.interfaces, opts_.sysfs_root)) {
      const Labels port{{"device", c.device}, {"port", std::to_string(c.port)},
                        {"interface", c.interface}, {"driver", c.driver}};
      const double value = static_cast<double>(c.value);
      if (c.dir != "hw_counters") {
        out.add("roceguard_nic_" + c.name + "_total",
                "RDMA NIC counter " + c.dir + "/" + c.file + " of the port (sysfs class/infiniband)" +
                    (c.scale != 1 ? ", times " + std::to_string(c.scale) + " to bytes" : ""),
                MetricType::Counter, port, value);
        continue;
      }
      // Every file under its own name, in one family per kind; a file with
      // a meaning in the family of that meaning too, whatever the driver
      // calls it.
      Labels raw = port;
      raw.emplace_back("file", c.file);
      if (c.kind == nic::NicValueKind::Gauge)
        out.add("roceguard_nic_hw_raw_level",
                "RDMA NIC hw_counters file that holds a level, not a count (sysfs class/infiniband "
                "<device>/ports/<port>/hw_counters/<file>, the driver's name)",
                MetricType::Gauge, raw, value);
      else
        out.add("roceguard_nic_hw_raw_total",
                "RDMA NIC hw_counters file (sysfs class/infiniband "
                "<device>/ports/<port>/hw_counters/<file>, the driver's name)",
                MetricType::Counter, raw, value);
      if (c.meaning)
        out.add("roceguard_nic_" + c.name + "_total", std::string(c.meaning->help), MetricType::Counter, port,
                value);
    }
  }

  const ExporterOptions opts_;  // per_qp and top_qps as started: per_qp_ and top_qps_ are in force
  const VersionInfo version_;
  mutable std::mutex mu_;
  bool per_qp_;
  size_t top_qps_;
  std::map<std::pair<std::string, std::string>, bool> attached_;
  std::vector<ShieldAutoPeer> shield_auto_;
  std::vector<CongestionPeer> congestion_;
  std::vector<PeerFeedback> feedback_;
  mutable std::atomic<uint64_t> scrape_errors_{0};
  mutable std::atomic<bool> failing_{false};
};

// prometheus-cpp's Exposer would add its own process-side series
// (exposer_scrapes_total, ...) that reset on every restart; serving the
// collector directly keeps every series under roceguard_ and process_.
//
// The HTTP server is libmicrohttpd: Debian 12's civetweb can neither serve
// TLS (it looks up OpenSSL 1.1 symbols that OpenSSL 3 no longer exports)
// nor listen on IPv6, and the endpoint needs both.
//
// One thread polls every connection and blocks on none (TLS handshakes,
// reading requests, writing answers); each request is handed, suspended,
// to a fixed pool of workers that check its credentials (bcrypt is slow by
// design) and collect the scrape, then resumed with the answer. A held
// scrape holds one worker, never the connections of others.
class MetricsServer {
 public:
  MetricsServer(const MetricsCollector& collector, const ExporterOptions& opts,
                std::optional<WebConfig> web)
      : collector_(collector), web_(std::move(web)) {
    socklen_t len = 0;
    const sockaddr_storage addr = listen_sockaddr(opts.listen, "metrics", len);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME;
    if (addr.ss_family == AF_INET6) flags |= MHD_USE_IPv6;
    std::vector<MHD_OptionItem> o;
    o.push_back({MHD_OPTION_SOCK_ADDR, 0, const_cast<sockaddr_storage*>(&addr)});
    o.push_back({MHD_OPTION_EXTERNAL_LOGGER, reinterpret_cast<intptr_t>(&MetricsServer::log), this});
    o.push_back({MHD_OPTION_NOTIFY_COMPLETED, reinterpret_cast<intptr_t>(&MetricsServer::completed), this});
    // A stalled client must not hold a connection for long: a scrape is
    // one small GET, answered well inside Prometheus's default 10 s
    // scrape timeout. (A suspended request, waiting for its worker, is
    // not timed out.)
    o.push_back({MHD_OPTION_CONNECTION_TIMEOUT, 2, nullptr});
    if (web_ && web_->tls) {
      flags |= MHD_USE_TLS;
      o.push_back({MHD_OPTION_HTTPS_MEM_CERT, 0, const_cast<char*>(web_->tls->cert_pem.c_str())});
      o.push_back({MHD_OPTION_HTTPS_MEM_KEY, 0, const_cast<char*>(web_->tls->key_pem.c_str())});
      priorities_ = web_->tls->priorities();
      o.push_back({MHD_OPTION_HTTPS_PRIORITIES, 0, const_cast<char*>(priorities_.c_str())});
    }
    o.push_back({MHD_OPTION_END, 0, nullptr});
    for (size_t i = 0; i < std::max<size_t>(1, opts.threads); ++i) workers_.emplace_back([this] { work(); });
    daemon_ = MHD_start_daemon(flags, 0, nullptr, nullptr, &MetricsServer::answer, this,
                               MHD_OPTION_ARRAY, o.data(), MHD_OPTION_END);
    if (!daemon_) {
      stop_workers();
      std::lock_guard lock(log_mu_);
      throw Error("cannot serve metrics on " + opts.listen + ": " +
                      (log_.empty() ? std::string("the HTTP server did not start") : log_) +
                      " (is the address local and the port free? set --metrics-listen)",
                  kExitFailure);
    }
    const MHD_DaemonInfo* info = MHD_get_daemon_info(daemon_, MHD_DAEMON_INFO_LISTEN_FD);
    sockaddr_storage bound{};
    socklen_t blen = sizeof(bound);
    if (info && getsockname(info->listen_fd, reinterpret_cast<sockaddr*>(&bound), &blen) == 0)
      port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    started_ = true;
  }
  ~MetricsServer() {
    // New requests are refused, the workers answer what they hold and
    // resume it, then the server stops with no connection suspended.
    const MHD_socket listening = MHD_quiesce_daemon(daemon_);
    if (listening != MHD_INVALID_SOCKET) close(listening);
    stop_workers();
    MHD_stop_daemon(daemon_);
  }
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  uint16_t port() const { return port_; }
  bool tls() const { return web_ && web_->tls; }

 private:
  // One request: what the worker needs from it, then its answer.
  struct Request {
    MHD_Connection* conn = nullptr;
    std::string method, url, user, password, accept_encoding;
    bool has_credentials = false;
    std::atomic<bool> answered{false};  // set by the worker before it resumes the connection
    unsigned status = 500;
    std::string body;
    const char* content_type = "text/plain; charset=utf-8";
    bool gzipped = false;
    ~Request() {
      if (!password.empty()) explicit_bzero(password.data(), password.size());
    }
  };

  static constexpr const char* kExposition = "text/plain; version=0.0.4; charset=utf-8";

  static void log(void* cls, const char* fmt, va_list ap) {
    auto* self = static_cast<MetricsServer*>(cls);
    char buf[512];
    std::vsnprintf(buf, sizeof(buf), fmt, ap);
    std::string text(buf);
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    if (!self->started_) {
      std::lock_guard lock(self->log_mu_);
      self->log_ += (self->log_.empty() ? "" : "; ") + text;
    } else {
      spdlog::debug("metrics: {}", text);
    }
  }

  static void completed(void*, MHD_Connection*, void** con_cls, MHD_RequestTerminationCode) {
    delete static_cast<Request*>(*con_cls);
    *con_cls = nullptr;
  }

  static MHD_Result queue(MHD_Connection* conn, const Request& r) {
    MHD_Response* resp =
        MHD_create_response_from_buffer(r.body.size(), const_cast<char*>(r.body.data()), MHD_RESPMEM_MUST_COPY);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, r.content_type);
    if (r.status == 200) MHD_add_response_header(resp, MHD_HTTP_HEADER_VARY, MHD_HTTP_HEADER_ACCEPT_ENCODING);
    if (r.gzipped) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_ENCODING, "gzip");
    if (r.status == 405) MHD_add_response_header(resp, "Allow", "GET, HEAD");
    const MHD_Result ret = r.status == 401 ? MHD_queue_basic_auth_fail_response(conn, "roceguard", resp)
                                           : MHD_queue_response(conn, r.status, resp);
    MHD_destroy_response(resp);
    return ret;
  }

  // On the polling thread: never blocks. The first call for a request
  // (headers read) hands it to a worker; the call after the worker resumed
  // it sends the answer.
  static MHD_Result answer(void* cls, MHD_Connection* conn, const char* url, const char* method,
                           const char*, const char*, size_t* upload_size, void** con_cls) {
    auto* self = static_cast<MetricsServer*>(cls);
    if (auto* r = static_cast<Request*>(*con_cls)) {
      if (upload_size && *upload_size) *upload_size = 0;  // a body is not read
      return r->answered ? queue(conn, *r) : MHD_YES;
    }
    auto r = std::make_unique<Request>();
    r->conn = conn;
    r->method = method;
    r->url = url;
    if (const char* ae = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT_ENCODING))
      r->accept_encoding = ae;
    char* password = nullptr;
    if (char* user = MHD_basic_auth_get_username_password(conn, &password)) {
      r->user = user;
      MHD_free(user);
      if (password) {
        r->password = password;
        r->has_credentials = true;
        explicit_bzero(password, std::strlen(password));
      }
    }
    if (password) MHD_free(password);
    Request* raw = r.release();
    *con_cls = raw;  // deleted by completed()
    MHD_suspend_connection(conn);
    {
      std::lock_guard lock(self->mu_);
      self->jobs_.push_back(raw);
    }
    self->cv_.notify_one();
    return MHD_YES;
  }

  void work() {
    for (;;) {
      Request* r = nullptr;
      bool stopping = false;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        r = jobs_.front();
        jobs_.pop_front();
        stopping = stopping_;
      }
      if (stopping) {
        r->status = 503;
        r->body = "roceguard is stopping\n";
      } else {
        decide(*r);
      }
      r->answered = true;
      MHD_resume_connection(r->conn);
    }
  }

  void stop_workers() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  void decide(Request& r) const {
    // Authentication first, on every path: what the server holds is not
    // shown to a client without credentials, not even its 404s.
    if (web_ && !web_->users.empty() &&
        !(r.has_credentials && basic_auth_matches(*web_, r.user, r.password))) {
      r.status = 401;
      r.body = "credentials required\n";
      return;
    }
    if (r.method != "GET" && r.method != "HEAD") {
      r.status = 405;
      r.body = "GET or HEAD\n";
      return;
    }
    // Only the exact path answers; probes are not answered here, where they
    // would queue behind scrapes for one of the few workers:
    // metrics.health_listen.
    if (r.url != kMetricsPath) {
      r.status = 404;
      r.body = "roceguard serves /metrics only here; /livez and /readyz are on metrics.health_listen\n";
      return;
    }
    try {
      r.body = prometheus::TextSerializer().Serialize(collector_.Collect());
      if (accepts_gzip(r.accept_encoding)) {
        r.body = gzip_body(r.body);
        r.gzipped = true;
      }
      r.status = 200;
      r.content_type = kExposition;
    } catch (const std::exception& e) {
      r.status = 500;
      r.body = std::string(e.what()) + "\n";
      r.gzipped = false;
    }
  }

  const MetricsCollector& collector_;
  const std::optional<WebConfig> web_;
  std::string priorities_;
  MHD_Daemon* daemon_ = nullptr;
  uint16_t port_ = 0;
  std::atomic<bool> started_{false};
  std::mutex log_mu_;
  std::string log_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Request*> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace

std::string gzip_body(std::string_view text) {
  z_stream z{};
  // windowBits 15 + 16: a gzip header and trailer around the deflate stream.
  if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw Error("metrics: zlib: deflateInit2 failed");
  std::string out(deflateBound(&z, text.size()) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  if (rc != Z_STREAM_END) throw Error("metrics: zlib: deflate failed");
  return out;
}

bool accepts_gzip(std::string_view accept_encoding) {
  auto trim = [](std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
  };
  while (!accept_encoding.empty()) {
    const auto comma = accept_encoding.find(',');
    std::string_view item = accept_encoding.substr(0, comma);
    accept_encoding = comma == std::string_view::npos ? std::string_view{} : accept_encoding.substr(comma + 1);
    const auto semi = item.find(';');
    const std::string_view coding = trim(item.substr(0, semi));
    if (coding.size() != 4 || strncasecmp(coding.data(), "gzip", 4) != 0) continue;
    if (semi == std::string_view::npos) return true;
    std::string_view q = trim(item.substr(semi + 1));
    if (q.size() < 2 || (q[0] != 'q' && q[0] != 'Q') || q[1] != '=') return true;
    q.remove_prefix(2);
    // q=0, q=0.0, q=0.000: refused; any other weight accepts.
    return q.find_first_not_of("0.") != std::string_view::npos;
  }
  return false;
}

struct Exporter::Impl {
  ExporterOptions opts;                   // in force
  std::optional<WebConfig> web;           // as the server in force serves it
  std::unique_ptr<MetricsCollector> collector;
  std::unique_ptr<MetricsServer> server;  // stops before what it calls
  std::unique_ptr<HealthServer> health;   // last: stops first
  bool serving = true;

  std::unique_ptr<MetricsServer> serve(const std::string& listen, const std::optional<WebConfig>& w) const {
    ExporterOptions o = opts;
    o.listen = listen;
    return std::make_unique<MetricsServer>(*collector, o, w);
  }
  std::unique_ptr<HealthServer> serve_health(const std::string& listen) const {
    if (listen.empty()) return nullptr;
    return std::make_unique<HealthServer>(listen, [c = collector.get()] { return c->readiness(); });
  }
};

namespace {

// held replaced by what make_new starts: first beside the old one, so
// that an endpoint that moves never stops; if that fails (the old one holds
// the address), after the old one let go, and the old one started again
// by make_old when the new one still fails. Throws rg::Error with the old
// one in place; lost is set when not even that could start again.
template <typename Server, typename MakeNew, typename MakeOld>
void rebind(std::unique_ptr<Server>& held, const MakeNew& make_new, const MakeOld& make_old, bool& lost) {
  try {
    held = make_new();
    return;
  } catch (const std::exception&) {
    // Tried again below, with the address free.
  }
  held.reset();
  try {
    held = make_new();
  } catch (const std::exception& e) {
    try {
      held = make_old();
    } catch (const std::exception& again) {
      lost = true;
      throw Error(std::string(e.what()) + "; the previous endpoint did not start again either: " + again.what(),
                  kExitFailure);
    }
    throw Error(e.what(), kExitFailure);
  }
}

}  // namespace

Exporter::Exporter(ExporterOptions opts) : impl_(std::make_unique<Impl>()) {
  impl_->opts = std::move(opts);
  if (!impl_->opts.web_config.empty()) impl_->web = load_web_config(impl_->opts.web_config);
  impl_->collector = std::make_unique<MetricsCollector>(impl_->opts);
  impl_->server = impl_->serve(impl_->opts.listen, impl_->web);
  impl_->health = impl_->serve_health(impl_->opts.health_listen);
}

std::vector<std::string> Exporter::reconfigure(const ExporterOptions& next) {
  Impl& im = *impl_;
  if (!im.serving) throw Error("the metrics endpoint is down since an earlier reload", kExitFailure);
  // Read before anything changes: a file that does not load changes nothing.
  std::optional<WebConfig> web;
  if (!next.web_config.empty()) web = load_web_config(next.web_config);
  std::vector<std::string> changed;
  // The per-QP series cannot fail: first, so an endpoint that does not
  // start leaves them applied.
  if (next.per_qp != im.opts.per_qp) changed.emplace_back("metrics.per_qp");
  if (next.top_qps != im.opts.top_qps) changed.emplace_back("metrics.top_qps");
  im.opts.per_qp = next.per_qp;
  im.opts.top_qps = next.top_qps;
  im.collector->set_qp_series(next.per_qp, next.top_qps);
  try {
    if (next.listen != im.opts.listen || web != im.web) {
      rebind(
          im.server, [&] { return im.serve(next.listen, web); }, [&] { return im.serve(im.opts.listen, im.web); },
          im.serving);
      if (next.listen != im.opts.listen) changed.emplace_back("metrics.listen");
      if (web != im.web) changed.emplace_back("metrics.web_config");
      im.opts.listen = next.listen;
      im.opts.web_config = next.web_config;
      im.web = std::move(web);
    }
    if (next.health_listen != im.opts.health_listen) {
      rebind(
          im.health, [&] { return im.serve_health(next.health_listen); },
          [&] { return im.serve_health(im.opts.health_listen); }, im.serving);
      changed.emplace_back("metrics.health_listen");
      im.opts.health_listen = next.health_listen;
    }
  } catch (const std::exception& e) {
    // What changed before it stays applied, and says so.
    std::string done;
    for (const auto& c : changed) done += (done.empty() ? "" : ", ") + c;
    throw Error(std::string(e.what()) + (done.empty() ? "" : " (applied before it: " + done + ")"), kExitFailure);
  }
  return changed;
}

bool Exporter::serving() const { return impl_->serving; }

Exporter::~Exporter() = default;

void Exporter::set_ingress_hook(const std::string& ifname, const std::string& hook) {
  impl_->collector->set_ingress_hook(ifname, hook);
}

void Exporter::set_congestion(std::vector<CongestionPeer> peers) {
  impl_->collector->set_congestion(std::move(peers));
}

void Exporter::set_shield_auto(std::vector<ShieldAutoPeer> peers, std::vector<PeerFeedback> feedback) {
  impl_->collector->set_shield_auto(std::move(peers), std::move(feedback));
}

void Exporter::set_attach_state(const std::string& ifname, const std::string& hook,
                                bool attached) {
  impl_->collector->set_attach_state(ifname, hook, attached);
}

std::string Exporter::health_address() const { return impl_->health ? impl_->health->address() : ""; }

std::string Exporter::metrics_url() const {
  return std::string(impl_->server->tls() ? "https://" : "http://") + listen_address() + kMetricsPath;
}

std::string Exporter::listen_address() const {
  const std::string& listen = impl_->opts.listen;
  const auto colon = listen.rfind(':');
  if (colon == std::string::npos) return listen;
  return listen.substr(0, colon) + ":" + std::to_string(impl_->server->port());
}

}  // namespace rg
