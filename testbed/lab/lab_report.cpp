#include "lab/lab_report.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/process.h"
#include "nic/profile.h"
#include "roceguard/roceguard.h"

namespace rg::lab {
namespace {

using nlohmann::json;

std::string fmt(const char* f, auto... args) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), f, args...);
  return buf;
}

uint64_t total(const std::array<uint64_t, 64>& h) {
  uint64_t n = 0;
  for (auto v : h) n += v;
  return n;
}

std::array<uint64_t, 64> minus(const std::array<uint64_t, 64>& a, const std::array<uint64_t, 64>& b) {
  std::array<uint64_t, 64> d{};
  for (size_t i = 0; i < d.size(); ++i) d[i] = a[i] - b[i];
  return d;
}

double mbps(uint64_t bytes, double seconds) { return seconds > 0 ? 8.0 * bytes / 1e6 / seconds : 0; }

double phase_seconds(const PhaseResult& p) {
  return p.sent.elapsed.count() ? p.sent.elapsed.count() / 1000.0 : p.seconds.size();
}

// The shield's extra WAN bytes as a share of what the gateway sent into
// the tunnel without them.
std::optional<double> extra_bytes_pct(const TunnelDirection& d) {
  if (d.tunnel_bytes <= d.shield_copy_bytes) return std::nullopt;
  return 100.0 * static_cast<double>(d.shield_copy_bytes) / static_cast<double>(d.tunnel_bytes - d.shield_copy_bytes);
}

json tunnel_json(const std::vector<TunnelDirection>& dirs) {
  json j = json::object();
  for (const auto& d : dirs) {
    const auto pct = extra_bytes_pct(d);
    j[d.name] = {{"sent", d.sent},
                 {"received", d.received},
                 {"lost", d.lost},
                 {"unsettled", d.unsettled},
                 {"reordered", d.reordered},
                 {"duplicated", d.duplicated},
                 {"wan_dropped", d.wan_dropped},
                 {"delay_arrivals", d.delay_arrivals},
                 {"delay_avg_s", d.delay_avg_s},
                 {"shield",
                  {{"copies_sent", d.shield_copies},
                   {"extra_wan_bytes", d.shield_copy_bytes},
                   {"extra_wan_bytes_pct", pct ? json(*pct) : json(nullptr)},
                   {"wan_geneve_bytes", d.tunnel_bytes},
                   {"copy_errors", d.shield_copy_errors},
                   {"uncopied", d.shield_uncopied},
                   {"duplicates_eliminated", d.shield_eliminated},
                   {"auto",
                    d.shield_auto_on < 0 ? json(nullptr)
                                         : json{{"on_at_end", d.shield_auto_on == 1},
                                                {"turned_on", d.shield_auto_turned_on},
                                                {"turned_off", d.shield_auto_turned_off}}},
                   {"residual_loss", d.lost},
                   {"wan_all_copies_dropped", d.wan_all_copies_dropped},
                   {"wan_all_copies_dropped_after_last_arrival", d.wan_after_last_arrival}}},
                 {"congestion",
                  !d.congestion ? json(nullptr)
                                : json{{"ce_marked", d.cc_marked},
                                       {"unmarkable", d.cc_unmarkable},
                                       {"cnps_made", d.cc_cnps},
                                       {"cnp_errors", d.cc_cnp_errors},
                                       {"capped", d.cc_capped},
                                       {"queued", d.cc_queued},
                                       {"state_at_end", d.cc_state},
                                       {"bottleneck_mbit", d.cc_bottleneck_kbps / 1e3},
                                       {"rate_mbit", d.cc_rate_kbps / 1e3},
                                       {"fallbacks", d.cc_fallbacks},
                                       {"probes", d.cc_probes},
                                       {"resets", d.cc_resets},
                                       {"competes", d.cc_competes}}}};
  }
  return j;
}

// p10, p50 and p90 of a delay line's inter-frame gaps, in microseconds
// (each the lower bound of a bucket 12.5 % wide).
json gap_quantiles(const GapHistogram& h) {
  json j = json::object();
  for (auto [name, q] : {std::pair{"p10", 0.1}, std::pair{"p50", 0.5}, std::pair{"p90", 0.9}})
    j[name] = h.quantile(q).count() / 1e3;
  j["gaps"] = h.total();
  return j;
}

json wan_json(const PhaseResult& p) {
  json j = {{"loss_runs", json::object()}, {"dropped", {{"a_to_b", p.wan_dropped[0]}, {"b_to_a", p.wan_dropped[1]}}}};
  const char* names[] = {"a_to_b", "b_to_a"};
  for (size_t d = 0; d < p.wan_packets.size(); ++d)
    for (size_t c = 0; c < p.wan_packets[d].size(); ++c)
      j["packets"][names[d]][wan_class_name(static_cast<rg_wan_class>(c))] = p.wan_packets[d][c];
  for (size_t d = 0; d < p.wan_runs.size(); ++d) {
    json runs = json::object();
    for (size_t i = 0; i < p.wan_runs[d].size(); ++i) runs[loss_run_bound(i)] = p.wan_runs[d][i];
    j["loss_runs"][names[d]] = runs;
    const WanSeqLoss& q = p.wan_seq[d];
    j["all_copies_dropped"][names[d]] = q.all_copies_dropped;
    j["all_copies_dropped_after_last_arrival"][names[d]] = q.after_last_arrival;
    j["sequence_streams"][names[d]] = q.streams;
    j["sequence_late"][names[d]] = q.late;
    j["sequence_untracked"][names[d]] = q.untracked;
  }
  if (!p.bottleneck.empty()) {
    j["bottleneck"] = json::object();
    for (size_t d = 0; d < p.bottleneck.size() && d < 2; ++d) {
      json b = to_json(p.bottleneck[d]);
      // By class, what the delay line sent into the queue and the queue
      // refused; the rest (unclassified) crossed the WAN without the line
      // (neighbour discovery, ICMP, TCP without --wan-cross).
      if (d < p.delay_line.size()) {
        uint64_t classified = 0;
        for (size_t c = 0; c < RG_WAN_CLASS_MAX; ++c) {
          const uint64_t n = p.delay_line[d].queue_dropped_by_class[c];
          b["dropped_by_class"][wan_class_name(static_cast<rg_wan_class>(c))] = n;
          classified += n;
        }
        b["dropped_by_class"]["unclassified"] = p.bottleneck[d].dropped > classified ? p.bottleneck[d].dropped - classified : 0;
      }
      j["bottleneck"][names[d]] = b;
    }
  }
  if (!p.delay_line.empty()) {
    j["delay_line"] = json::object();
    for (size_t d = 0; d < p.delay_line.size() && d < 2; ++d) {
      const auto& x = p.delay_line[d];
      j["delay_line"][names[d]] = {{"frames", x.frames},
                                   {"mean_late_us", x.frames ? x.late_sum_ns / 1e3 / x.frames : 0.0},
                                   {"max_late_us", x.late_max_ns / 1e3},
                                   {"max_held", x.max_held},
                                   {"reordered", x.reordered},
                                   {"send_errors", x.send_errors},
                                   {"queue_dropped", x.queue_dropped},
                                   {"rx_dropped", x.rx_dropped},
                                   {"gap_in_us", gap_quantiles(x.gap_in)},
                                   {"gap_out_us", gap_quantiles(x.gap_out)},
                                   {"squeezed", x.squeezed}};
    }
  }
  return j;
}

// "3.9 (longest <= 32)": the mean run of one direction and its longest
// bucket; counters.json has every bucket.
std::string runs_text(const LossRuns& runs, uint64_t dropped) {
  uint64_t n = 0;
  size_t longest = 0;
  for (size_t i = 0; i < runs.size(); ++i)
    if (runs[i]) {
      n += runs[i];
      longest = i;
    }
  if (!n) return "none";
  const std::string bound = longest + 1 < runs.size() ? "<= " + loss_run_bound(longest) : "> " + loss_run_bound(longest - 1);
  return fmt("%.1f (longest %s)", static_cast<double>(dropped) / static_cast<double>(n), bound.c_str());
}

json snapshot_json(const Snapshot& s, bool scheduler) {
  json j = {{"second", s.second},
          {"sent_packets_a", s.sent_packets},
          {"retransmits_a", s.retransmits_a},
          {"naks_a", s.naks_a},
          {"received_b", s.received_b},
          {"goodput_bytes_b", s.goodput_bytes_b},
          {"lost_estimate_b", s.lost_b},
          {"cnps_b", s.cnps_b},
          {"cnps_a", s.cnps_a},
          {"ecn_ce_b", s.ecn_ce_b},
          {"dscp_b", dscp_histogram_json(s.dscp_b)},
          {"wan_dropped", s.wan_dropped},
          {"wan_bleached", s.wan_bleached},
          {"wan_ce_marked", s.wan_ce_marked},
          {"roceguard",
           {{"dscp_rewritten_gw_a", s.rg_remarked_a},
            {"encapsulated_gw_a", s.rg_encapsulated_a},
            {"retransmits_gw_a", s.rg_retransmits_a},
            {"decapsulated_gw_b", s.rg_decapsulated_b},
            {"dscp_repaired_gw_b", s.rg_repaired_b},
            {"lost_estimate_gw_b", s.rg_lost_b}}}};
  if (s.wan_queue_samples)
    j["wan_queue_a_to_b_us"] = {
        {"samples", s.wan_queue_samples}, {"p99", s.wan_queue_p99_us}, {"max", s.wan_queue_max_us}};
  if (scheduler) {
    j["scheduler_gw_b"] = to_json(s.scheduler);
    j["scheduler_gw_a"] = to_json(s.uplink_scheduler);
    j["ecn_marked_gw_b"] = {{"priority", s.fabric_ecn.marked(RG_ECN_PRIORITY)},
                            {"best_effort", s.fabric_ecn.marked(RG_ECN_BEST_EFFORT)}};
  }
  return j;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  if (!f) throw Error("cannot write " + path);
}

std::string quote_gp(const std::string& path) { return "'" + path + "'"; }

// One data file per phase (second, Mbit/s, retransmits, WAN drops, lost at
// B); gnuplot reads them by column.
void write_chart_data(const std::string& path, const PhaseResult& p) {
  std::ostringstream out;
  out << "# second goodput_mbps retransmits_a wan_dropped lost_b\n";
  Snapshot prev;
  for (const auto& s : p.seconds) {
    out << s.second << " " << mbps(s.goodput_bytes_b - prev.goodput_bytes_b, 1.0) << " "
        << s.retransmits_a - prev.retransmits_a << " " << s.wan_dropped - prev.wan_dropped << " "
        << s.lost_b - prev.lost_b << "\n";
    prev = s;
  }
  write_file(path, out.str());
}

std::string phase_title(const PhaseResult& p) {
  return p.roceguard ? "with roceguard" : "without roceguard";
}

// At most this many QPs' rates in a DCQCN chart; counters.json has all.
constexpr size_t kDcqcnChartQps = 8;

// Per phase: each QP's DCQCN rate over time (its samples, all QPs sampled
// at the same instants), with the CNPs host B sent and the CE marks it saw
// per second on the right-hand axis. Writes the data files into cdir;
// returns the gnuplot commands and adds the charts to pngs.
std::string dcqcn_charts(const std::string& cdir, const std::vector<PhaseResult>& phases,
                         std::vector<std::string>& pngs) {
  std::ostringstream gp;
  for (const auto& p : phases) {
    const auto& qps = p.sent.dcqcn;
    if (qps.empty()) continue;
    const size_t shown = std::min(qps.size(), kDcqcnChartQps);
    std::ostringstream rates;
    rates << "# second";
    for (size_t q = 0; q < shown; ++q) rates << " qp" << q << "_mbps";
    rates << "\n";
    for (size_t i = 0; i < qps[0].samples.size(); ++i) {
      rates << static_cast<double>(qps[0].samples[i].first) / 1000.0;
      for (size_t q = 0; q < shown; ++q)
        rates << " " << (i < qps[q].samples.size() ? static_cast<double>(qps[q].samples[i].second) / 1000.0 : 0.0);
      rates << "\n";
    }
    std::ostringstream marks;
    marks << "# second cnps_b ecn_ce_b cnps_a\n";
    Snapshot prev;
    for (const auto& x : p.seconds) {
      marks << x.second << " " << x.cnps_b - prev.cnps_b << " " << x.ecn_ce_b - prev.ecn_ce_b << " "
            << x.cnps_a - prev.cnps_a << "\n";
      prev = x;
    }
    const std::string rates_data = cdir + "/dcqcn-" + p.name + ".dat";
    const std::string marks_data = cdir + "/dcqcn-marks-" + p.name + ".dat";
    write_file(rates_data, rates.str());
    write_file(marks_data, marks.str());
    const std::string png = "charts/dcqcn-rate-" + p.name + ".png";
    gp << "set output " << quote_gp(cdir + "/dcqcn-rate-" + p.name + ".png") << "\n"
       << "set title 'DCQCN rate per QP at host A, " << phase_title(p)
       << "; CNPs sent and CE marks seen by host B, CNPs received by host A'\nset xlabel 'second'\n"
       << "set ylabel 'Mbit/s'\n"
       << "set y2label 'packets per second'\nset y2tics\nset yrange [0:*]\nset y2range [0:*]\nplot ";
    for (size_t q = 0; q < shown; ++q)
      gp << quote_gp(rates_data) << " using 1:" << q + 2 << " with lines title 'QP " << q << "', ";
    gp << quote_gp(marks_data) << " using 1:2 axes x1y2 with impulses lw 3 title 'CNPs sent by host B (right axis)', "
       << quote_gp(marks_data) << " using 1:3 axes x1y2 with points pt 7 title 'CE marks at host B (right axis)', "
       << quote_gp(marks_data)
       << " using 1:4 axes x1y2 with points pt 5 title 'CNPs received by host A (right axis)'\n"
       << "unset y2tics\nunset y2label\n";
    pngs.push_back(png);
  }
  return gp.str();
}

// Per phase with --wan-rate: the WAN bottleneck's A->B queue delay, each
// second's p99 and largest.
std::string queue_charts(const std::string& cdir, const std::vector<PhaseResult>& phases,
                         std::vector<std::string>& pngs) {
  std::ostringstream gp;
  for (const auto& p : phases) {
    if (std::none_of(p.seconds.begin(), p.seconds.end(), [](const Snapshot& x) { return x.wan_queue_samples; }))
      continue;
    std::ostringstream data;
    data << "# second p99_ms max_ms\n";
    for (const auto& x : p.seconds)
      if (x.wan_queue_samples)  // a second without a sample has no point, not a zero
        data << x.second << " " << x.wan_queue_p99_us / 1000.0 << " " << x.wan_queue_max_us / 1000.0 << "\n";
    const std::string file = cdir + "/wan-queue-" + p.name + ".dat";
    write_file(file, data.str());
    gp << "set output " << quote_gp(cdir + "/wan-queue-" + p.name + ".png") << "\n"
       << "set title 'WAN bottleneck queue delay A->B, each second, " << phase_title(p)
       << "'\nset xlabel 'second'\nset ylabel 'ms'\nset yrange [0:*]\nplot " << quote_gp(file)
       << " using 1:2 with linespoints title 'p99', " << quote_gp(file) << " using 1:3 with lines title 'largest'\n";
    pngs.push_back("charts/wan-queue-" + p.name + ".png");
  }
  return gp.str();
}

std::vector<std::string> draw_charts(const std::string& dir, const std::vector<PhaseResult>& phases,
                                     bool scheduler, Retransmit retransmit) {
  const std::string cdir = dir + "/charts";
  std::filesystem::create_directories(cdir);
  std::ostringstream gp;
  gp << "set terminal pngcairo size 960,540 font 'sans,10'\n"
        "set grid\nset key outside bottom center horizontal\n";

  std::string goodput, retx;
  for (const auto& p : phases) {
    const std::string data = cdir + "/" + p.name + ".dat";
    write_chart_data(data, p);
    const std::string sep = goodput.empty() ? "" : ", ";
    goodput += sep + quote_gp(data) + " using 1:2 with linespoints title '" + phase_title(p) + "'";
    // The WAN's drops are tens per second against thousands of resends:
    // they get the right-hand axis, or they would draw a line at 0.
    retx += sep + quote_gp(data) + " using 1:3 axes x1y1 with linespoints title 'retransmits at host A, " +
            phase_title(p) + "', " + quote_gp(data) + " using 1:4 axes x1y2 with impulses lw 3 title 'WAN drops (right axis), " +
            phase_title(p) + "'";
  }
  gp << "set output " << quote_gp(cdir + "/goodput.png") << "\n"
     << "set title 'Goodput delivered in order at host B'\nset xlabel 'second'\n"
     << "set ylabel 'Mbit/s'\nset yrange [0:*]\nplot " << goodput << "\n";
  gp << "set output " << quote_gp(cdir + "/retransmits-vs-wan-drops.png") << "\n"
     << "set title '" << (retransmit == Retransmit::kSelectiveRepeat ? "Selective-repeat" : "Go-Back-N")
     << " retransmits at host A against packets the WAN dropped'\n"
     << "set ylabel 'retransmits per second'\nset y2label 'WAN drops per second'\nset y2tics\n"
     << "set yrange [0:*]\nset y2range [0:*]\nplot " << retx << "\n"
     << "unset y2tics\nunset y2label\n";

  // DSCP distribution: one cluster per class seen at host B, one bar per phase.
  std::array<bool, 64> seen{};
  for (const auto& p : phases)
    for (size_t d = 0; d < 64; ++d) seen[d] = seen[d] || p.received.dscp[d];
  std::ostringstream dscp;
  dscp << "# dscp";
  for (const auto& p : phases) dscp << " " << p.name;
  dscp << "\n";
  bool any = false;
  for (size_t d = 0; d < 64; ++d) {
    if (!seen[d]) continue;
    any = true;
    dscp << d;
    for (const auto& p : phases) {
      uint64_t n = total(p.received.dscp);
      dscp << " " << (n ? 100.0 * p.received.dscp[d] / n : 0.0);
    }
    dscp << "\n";
  }
  if (!any) {  // nothing arrived: an empty cluster keeps the chart drawable
    dscp << 0;
    for (size_t i = 0; i < phases.size(); ++i) dscp << " 0";
    dscp << "\n";
  }
  const std::string dscp_data = cdir + "/dscp.dat";
  write_file(dscp_data, dscp.str());
  gp << "set output " << quote_gp(cdir + "/dscp-at-host-b.png") << "\n"
     << "set title 'DSCP of RoCE packets arriving at host B'\nset xlabel 'DSCP'\n"
     << "set ylabel '% of packets'\nset yrange [0:105]\nset style data histograms\n"
     << "set style histogram clustered gap 1\nset style fill solid 0.8 border -1\nset boxwidth 0.9\nplot ";
  for (size_t i = 0; i < phases.size(); ++i)
    gp << (i ? ", " : "") << quote_gp(dscp_data) << " using " << i + 2 << (i ? "" : ":xtic(1)")
       << " title '" << phase_title(phases[i]) << "'";
  gp << "\n";

  std::vector<std::string> pngs{"charts/goodput.png", "charts/retransmits-vs-wan-drops.png",
                                 "charts/dscp-at-host-b.png"};
  gp << dcqcn_charts(cdir, phases, pngs);
  gp << queue_charts(cdir, phases, pngs);
  if (scheduler) {
    // Drops per scheduler class, gateway A's uplink and gateway B's port to
    // host B: one cluster per class, one bar per phase.
    std::ostringstream drops;
    drops << "# class";
    for (const auto& p : phases) drops << " " << p.name;
    drops << "\n";
    using Of = ClassStats SchedulerStats::*;
    struct DropClass {
      const char* label;
      SchedulerStats Snapshot::*scheduler;
      Of of;
    };
    for (const DropClass& c : {DropClass{"gw A uplink: priority (1:10)", &Snapshot::uplink_scheduler,
                                         &SchedulerStats::priority},
                               DropClass{"gw A uplink: best effort", &Snapshot::uplink_scheduler,
                                         &SchedulerStats::best_effort},
                               DropClass{"gw B: priority (DSCP 46)", &Snapshot::scheduler, &SchedulerStats::priority},
                               DropClass{"gw B: best effort", &Snapshot::scheduler, &SchedulerStats::best_effort}}) {
      drops << "\"" << c.label << "\"";
      for (const auto& p : phases) drops << " " << (p.final.*c.scheduler.*c.of).dropped;
      drops << "\n";
    }
    const std::string drops_data = cdir + "/drops-per-class.dat";
    write_file(drops_data, drops.str());
    gp << "set output " << quote_gp(cdir + "/drops-per-class.png") << "\n"
       << "set title 'Packets dropped per scheduler class, gateway A uplink and gateway B towards host B "
          "(RoCE and bulk TCP)'\n"
       << "set xlabel ''\nset ylabel 'packets dropped'\nset yrange [0:*]\n"
       << "set style data histograms\nset style histogram clustered gap 1\n"
       << "set style fill solid 0.8 border -1\nset boxwidth 0.9\nplot ";
    for (size_t i = 0; i < phases.size(); ++i)
      gp << (i ? ", " : "") << quote_gp(drops_data) << " using " << i + 2 << (i ? "" : ":xtic(1)")
         << " title '" << phase_title(phases[i]) << "'";
    gp << "\n";
    pngs.push_back("charts/drops-per-class.png");
  }

  const std::string script = cdir + "/charts.gp";
  write_file(script, gp.str());
  auto r = run({"gnuplot", script}, std::chrono::seconds(60));
  if (r.status != 0) throw Error("gnuplot failed on " + script + ": " + r.err);
  pngs.push_back("charts/charts.gp");
  return pngs;
}

}  // namespace

std::string dscp_text(const std::array<uint64_t, 64>& h) {
  const uint64_t n = total(h);
  if (!n) return "-";
  std::vector<std::pair<uint64_t, size_t>> classes;
  for (size_t d = 0; d < h.size(); ++d)
    if (h[d]) classes.push_back({h[d], d});
  std::sort(classes.rbegin(), classes.rend());
  std::string s;
  for (size_t i = 0; i < classes.size() && i < 2; ++i) {
    double pct = 100.0 * classes[i].first / n;
    s += (i ? " " : "") + std::to_string(classes[i].second) + ":" +
         (pct >= 99.95 || pct < 0.05 ? fmt("%.0f%%", pct) : fmt("%.1f%%", pct));
  }
  return s;
}

Headline headline(const LabSettings& s, const PhaseResult& p) {
  Headline h;
  if (s.sender_mbit) h.goodput_share = mbps(p.received.goodput_bytes, phase_seconds(p)) / s.sender_mbit;
  if (p.final.wan_dropped)
    h.resends_per_drop = static_cast<double>(p.sent.retransmits) / static_cast<double>(p.final.wan_dropped);
  return h;
}

std::string shield_text(const std::string& shield) {
  if (shield == "control") return "control: a second copy of ACK/NAK, CNP, READ, atomics and AckReq packets";
  if (shield == "all") return "all: a second copy of every RoCE packet";
  if (shield == "auto") return "auto: a second copy of every RoCE packet while the far gateway reports loss";
  return shield;
}

std::string wan_text(const LabSettings& s) {
  std::string t = s.wan_delay_ms > 0 ? fmt("one-way delay %.3g ms each direction", s.wan_delay_ms) : "no delay";
  if (s.wan_jitter_ms > 0) t += fmt(" (+- %.3g ms jitter, order kept)", s.wan_jitter_ms);
  t += fmt(", loss %.3g %% ", s.loss_pct);
  t += s.loss_burst > 1 ? fmt("in bursts of %.3g packets on average (Gilbert-Elliott)", s.loss_burst)
                        : std::string("(independent)");
  t += s.reorder_pct > 0 ? fmt(", %.3g %% of packets reordered", s.reorder_pct) : std::string(", no reordering");
  if (s.ce_pct > 0) t += fmt(", CE on %.3g %%", s.ce_pct);
  if (s.bottleneck)
    t += fmt(", a bottleneck of %u Mbit/s each direction with %.3g ms of drop-tail buffer", s.bottleneck->mbit,
             static_cast<double>(s.bottleneck->buffer.count()) / 1000.0);
  if (s.bottleneck && s.wan_cross) t += fmt(" shared with %u TCP streams", s.wan_cross);
  return t + ", DSCP bleached";
}

// "DCQCN per QP ..." or "no congestion control ...": the last line of sender_text.
std::string congestion_text(const LabSettings& s) {
  if (s.cc == CongestionControl::kNone) return "no congestion control: CNPs counted, no rate changes";
  const std::string changed = dcqcn_changed_text(s.dcqcn);
  return fmt("DCQCN (a model of ConnectX), each QP paced at its rate, at most %u Mbit/s; ", s.window_mbit) +
         (changed.empty() ? std::string("mlx5's defaults") : "mlx5's defaults but " + changed);
}

std::string sender_text(const LabSettings& s) {
  if (s.transport == Transport::kUc)
    return fmt("UC (Unreliable Connected): every PSN sent once, paced at %u Mbit/s, host A's line rate", s.window_mbit) +
           "\n" + "no ACKs, NAKs or resends; host B drops what a PSN gap cut off and counts the gaps" + "\n" +
           congestion_text(s);
  // Concatenated, not one fmt: the texts together outgrow its buffer.
  return fmt("window %u packets per QP = bandwidth-delay product at %u Mbit/s and RTT %s (x%u headroom, %u..%u)",
             s.window, s.window_mbit, nic::format_us(static_cast<double>(s.rtt.count())).c_str(), kWindowHeadroom,
             kMinWindow, kMaxWindow) +
         "\n" +
         fmt("ACK timeout %s -> t = %u (%s), retry_cnt %u (a QP fails after %u timeouts in a row); ",
             s.ack_timeout.text.c_str(), s.ack_timeout.exponent, nic::format_us(s.ack_timeout.effective_us).c_str(),
             s.retry_cnt, s.retry_cnt + 1) +
         retransmit_label(s.retransmit) + "\n" + congestion_text(s);
}

// sender_text with its second line indented under the first, as the
// banner and the summary print it.
std::string sender_lines(const LabSettings& s) {
  std::string t = sender_text(s);
  for (size_t at = t.find('\n'); at != std::string::npos; at = t.find('\n', at + 1)) t.insert(at + 1, "   ");
  return t;
}

std::string view_banner(const LabSettings& s, const PhaseResult& phase, unsigned index, unsigned count) {
  const bool vxlan = s.tunnel_kind == "vxlan";
  std::string what =
      phase.roceguard
          ? (s.tunnel ? "roceguard on both gateways: DSCP 46 + Geneve across the WAN, loss shield " +
                            shield_text(s.shield)
           : vxlan    ? std::string("roceguard on both gateways' vx0: DSCP re-mark and repair, no tunnel of its own; "
                                    "the kernel's VXLAN (tos inherit) across the WAN")
                      : std::string("roceguard on both gateways: DSCP re-mark and repair, no tunnel"))
          : (vxlan ? "no roceguard: RoCE crosses the WAN in the kernel's VXLAN (tos inherit)"
                   : "no roceguard: RoCE crosses the WAN as it is");
  return fmt("\n== phase %u/%u: %s roceguard (%u s, %u QPs; WAN: %s)\n   %s\n", index, count,
             phase.roceguard ? "with" : "without", s.duration_s, s.qps, wan_text(s).c_str(), what.c_str()) +
         "   host A: " + sender_lines(s) + "\n";
}

std::string view_header(bool scheduler) {
  return fmt("%-14s %9s %-14s %8s %8s %8s %6s %6s", "progress", "Mbit/s", "DSCP@B", "retx@A", "lost@B",
             "WANdrop", "CNP", "CE") +
         (scheduler ? fmt(" %8s %8s %8s %8s", "drop46", "dropBE", "upPrio", "upBE") : "") + "\n";
}

std::string view_row(const Snapshot& prev, const Snapshot& cur, unsigned duration_s, bool scheduler) {
  const unsigned width = 8;
  unsigned filled = duration_s ? std::min(width, cur.second * width / duration_s) : width;
  std::string bar = "[" + std::string(filled, '#') + std::string(width - filled, '.') + "]";
  std::string progress = bar + fmt("%3us", cur.second);
  const std::string drops =
      scheduler ? fmt(" %8" PRIu64 " %8" PRIu64 " %8" PRIu64 " %8" PRIu64,
                      cur.scheduler.priority.dropped - prev.scheduler.priority.dropped,
                      cur.scheduler.best_effort.dropped - prev.scheduler.best_effort.dropped,
                      cur.uplink_scheduler.priority.dropped - prev.uplink_scheduler.priority.dropped,
                      cur.uplink_scheduler.best_effort.dropped - prev.uplink_scheduler.best_effort.dropped)
                : "";
  return fmt("%-14s %9.1f %-14s %8" PRIu64 " %8" PRIu64 " %8" PRIu64 " %6" PRIu64 " %6" PRIu64, progress.c_str(),
             mbps(cur.goodput_bytes_b - prev.goodput_bytes_b, 1.0),
             dscp_text(minus(cur.dscp_b, prev.dscp_b)).c_str(), cur.retransmits_a - prev.retransmits_a,
             cur.lost_b - prev.lost_b, cur.wan_dropped - prev.wan_dropped, cur.cnps_b - prev.cnps_b,
             cur.ecn_ce_b - prev.ecn_ce_b) +
         drops + "\n";
}

std::string summary_table(const LabSettings& s, const std::vector<PhaseResult>& phases) {
  std::ostringstream out;
  out << "\n== summary (" << s.duration_s << " s per phase, " << s.qps << " QPs, " << s.payload
      << " B payload)\n   the WAN: " << wan_text(s) << "\n";
  out << "   host A: " << sender_lines(s) << "\n";
  out << "   tunnel across the WAN: "
      << (s.tunnel_kind == "vxlan"    ? "the kernel's VXLAN (vx0, UDP 4789, tos inherit), both phases"
          : s.tunnel_kind == "geneve" ? "roceguard's Geneve (UDP 6081), with roceguard"
                                      : "none")
      << "\n";
  if (s.tunnel) out << "   loss shield (with roceguard): " << shield_text(s.shield) << "\n";
  if (s.scheduler)
    out << "   host A's line rate " << s.sender_mbit << " Mbit/s; congestion at gateway B towards host B: " << s.scheduler->link_mbit << " Mbit/s, DSCP 46 guaranteed "
        << s.scheduler->priority_mbit << ", best effort " << s.scheduler->link_mbit - s.scheduler->priority_mbit
        << ", " << s.scheduler->queue_packets << "-packet buffers; " << s.bulk_streams
        << " bulk TCP streams\n";
  if (s.uplink_scheduler)
    out << "   and at gateway A's uplink: " << s.uplink_scheduler->link_mbit
        << " Mbit/s, class 1:10 (skb->priority 0x10010) guaranteed " << s.uplink_scheduler->priority_mbit
        << ", best effort " << s.uplink_scheduler->link_mbit - s.uplink_scheduler->priority_mbit << ", "
        << s.uplink_scheduler->queue_packets << "-packet buffers; " << s.bulk_streams
        << " bulk TCP streams from bulk sender A to the WAN router\n";
  out << fmt("%-40s", "");
  for (const auto& p : phases) out << fmt("%22s", phase_title(p).c_str());
  out << "\n";
  auto row = [&](const char* label, auto value) {
    out << fmt("%-40s", label);
    for (const auto& p : phases) out << fmt("%22s", value(p).c_str());
    out << "\n";
  };
  auto num = [](uint64_t v) { return std::to_string(v); };
  auto rg = [&](uint64_t v, const PhaseResult& p) { return p.roceguard ? num(v) : std::string("-"); };
  // What a reader looks for first: how much of the line RoCE gets, what
  // each WAN drop costs, whether the QPs survive, how long the path is.
  row("goodput, share of host A's line rate", [&](const PhaseResult& p) {
    auto h = headline(s, p);
    return h.goodput_share ? fmt("%.1f %%", 100 * *h.goodput_share) : std::string("- (no line rate)");
  });
  row("resends per WAN drop", [&](const PhaseResult& p) {
    auto h = headline(s, p);
    return h.resends_per_drop ? fmt("%.1f", *h.resends_per_drop) : std::string("- (no drop)");
  });
  row("retransmit timeouts at host A", [&](const PhaseResult& p) { return num(p.sent.timeouts); });
  row("QPs failed (retry count exceeded)", [&](const PhaseResult& p) { return num(p.sent.qps_failed); });
  row("tunnel one-way delay A->B, mean, ms", [&](const PhaseResult& p) {
    return !p.tunnel.empty() && p.tunnel[0].delay_arrivals ? fmt("%.2f", p.tunnel[0].delay_avg_s * 1e3)
                                                           : std::string("-");
  });
  row("WAN loss run A->B, mean packets", [&](const PhaseResult& p) { return runs_text(p.wan_runs[0], p.wan_dropped[0]); });
  row("WAN loss run B->A, mean packets", [&](const PhaseResult& p) { return runs_text(p.wan_runs[1], p.wan_dropped[1]); });
  row("delay line: mean lateness A->B, us", [&](const PhaseResult& p) {
    return p.delay_line.empty() || !p.delay_line[0].frames
               ? std::string("-")
               : fmt("%.0f", p.delay_line[0].late_sum_ns / 1e3 / p.delay_line[0].frames);
  });
  // The spacing the line received against the one it sent: a WAN that
  // closes the gaps makes bursts the next hop's queues drop.
  for (size_t d = 0; d < 2; ++d)
    for (bool in : {true, false}) {
      const std::string label = std::string("delay line ") + (d == 0 ? "A->B" : "B->A") + ": gaps " +
                                (in ? "in" : "out") + ", p10/p50, us";
      row(label.c_str(), [d, in](const PhaseResult& p) {
        if (d >= p.delay_line.size() || !p.delay_line[d].gap_out.total()) return std::string("-");
        const GapHistogram& h = in ? p.delay_line[d].gap_in : p.delay_line[d].gap_out;
        return fmt("%.1f/%.1f", h.quantile(0.1).count() / 1e3, h.quantile(0.5).count() / 1e3);
      });
    }
  // The WAN's own bottleneck (--wan-rate): its drop-tail drops and how long
  // its queue made packets wait.
  for (size_t d = 0; s.bottleneck && d < 2; ++d) {
    const std::string dir = d == 0 ? "A->B" : "B->A";
    row(("WAN queue " + dir + ": dropped / sent").c_str(), [d, &num](const PhaseResult& p) {
      if (d >= p.bottleneck.size()) return std::string("-");
      return num(p.bottleneck[d].dropped) + " / " + num(p.bottleneck[d].sent_packets);
    });
    row(("WAN queue " + dir + ": dropped RoCE+tunnel / TCP+other").c_str(), [d, &num](const PhaseResult& p) {
      if (d >= p.delay_line.size() || d >= p.bottleneck.size()) return std::string("-");
      const auto& by = p.delay_line[d].queue_dropped_by_class;
      const uint64_t roce = by[RG_WAN_ROCE] + by[RG_WAN_GENEVE] + by[RG_WAN_VXLAN];
      return num(roce) + " / " + num(p.bottleneck[d].dropped > roce ? p.bottleneck[d].dropped - roce : 0);
    });
    row(("WAN queue " + dir + ": delay p50/p99/max us").c_str(), [d, &num](const PhaseResult& p) {
      if (d >= p.bottleneck.size()) return std::string("-");
      const BottleneckStats& b = p.bottleneck[d];
      return num(b.delay_p50_us) + "/" + num(b.delay_p99_us) + "/" + num(b.delay_max_us);
    });
  }
  // The cross traffic (--wan-cross): each side's goodput as a share of the
  // bottleneck's rate.
  if (s.wan_cross && s.bottleneck) {
    const double rate = s.bottleneck->mbit;
    row("WAN share: RoCE goodput, Mbit/s (of the bottleneck)", [&, rate](const PhaseResult& p) {
      const double m = mbps(p.received.goodput_bytes, phase_seconds(p));
      return fmt("%.1f (%.0f %%)", m, 100 * m / rate);
    });
    row("WAN share: cross TCP goodput, Mbit/s (of the bottleneck)", [&, rate](const PhaseResult& p) {
      return p.wan_cross ? fmt("%.1f (%.0f %%)", p.wan_cross->received_mbps, 100 * p.wan_cross->received_mbps / rate)
                         : std::string("?");
    });
    row("WAN share: cross TCP retransmits, mean RTT ms", [&](const PhaseResult& p) {
      return p.wan_cross ? num(p.wan_cross->retransmits) + ", " + fmt("%.1f", p.wan_cross->mean_rtt_us / 1e3)
                         : std::string("?");
    });
  }
  out << "\n";
  row("goodput at host B, Mbit/s", [&](const PhaseResult& p) {
    return fmt("%.1f", mbps(p.received.goodput_bytes, phase_seconds(p)));
  });
  row("messages completed at host A", [&](const PhaseResult& p) { return num(p.sent.completed); });
  row("packets sent by host A", [&](const PhaseResult& p) { return num(p.sent.packets); });
  row("packets received at host B", [&](const PhaseResult& p) { return num(p.received.packets); });
  row("DSCP seen at host B", [&](const PhaseResult& p) { return dscp_text(p.received.dscp); });
  row("  packets with DSCP 46 at host B", [&](const PhaseResult& p) {
    return num(p.received.dscp[RG_DEFAULT_DSCP]);
  });
  row("DSCP of ACKs/NAKs seen at host A", [&](const PhaseResult& p) { return dscp_text(p.sent.ack_dscp); });
  row(s.retransmit == Retransmit::kSelectiveRepeat ? "retransmits at host A (selective repeat)"
                                                    : "retransmits at host A (Go-Back-N)",
      [&](const PhaseResult& p) { return num(p.sent.retransmits); });
  row("NAKs (sequence error) at host A", [&](const PhaseResult& p) { return num(p.sent.naks); });
  row("estimated lost at host B (PSN gaps)", [&](const PhaseResult& p) { return num(p.received.lost_estimate); });
  row("  PSNs sent after host B's last arrival", [&](const PhaseResult& p) {
    return num(psns_after_last_arrival(p.sent, p.received));
  });
  row("dropped by the WAN (both directions)", [&](const PhaseResult& p) { return num(p.final.wan_dropped); });
  row("bleached by the WAN (both directions)", [&](const PhaseResult& p) { return num(p.final.wan_bleached); });
  row("CE marked by the WAN (both directions)", [&](const PhaseResult& p) { return num(p.final.wan_ce_marked); });
  row("CNPs sent by host B", [&](const PhaseResult& p) { return num(p.received.cnps); });
  row("CNPs received at host A", [&](const PhaseResult& p) { return num(p.sent.cnps); });
  if (s.cc == CongestionControl::kDcqcn) {
    row("DCQCN rate cuts at host A (all QPs)", [&](const PhaseResult& p) {
      uint64_t n = 0;
      for (const auto& q : p.sent.dcqcn) n += q.counters.cuts;
      return num(n);
    });
    row("DCQCN lowest rate of a QP, Mbit/s", [&](const PhaseResult& p) {
      uint64_t lowest = 0;
      for (const auto& q : p.sent.dcqcn)
        if (q.lowest_kbps && (!lowest || q.lowest_kbps < lowest)) lowest = q.lowest_kbps;
      return lowest ? fmt("%.1f", static_cast<double>(lowest) / 1000.0) : std::string("- (no cut)");
    });
  }
  if (s.scheduler) {
    const ClassStats SchedulerStats::*classes[] = {&SchedulerStats::priority, &SchedulerStats::best_effort};
    const char* sent_labels[] = {"gw B priority class (46): packets sent", "gw B best-effort class: packets sent"};
    const char* drop_labels[] = {"gw B priority class (46): dropped", "gw B best-effort class: dropped"};
    for (size_t i = 0; i < 2; ++i) {
      row(sent_labels[i], [&](const PhaseResult& p) { return num((p.final.scheduler.*classes[i]).packets); });
      row(drop_labels[i], [&](const PhaseResult& p) { return num((p.final.scheduler.*classes[i]).dropped); });
    }
    if (s.fabric_ecn) {
      row("gw B ECN marks, priority class (46)",
          [&](const PhaseResult& p) { return num(p.final.fabric_ecn.marked(RG_ECN_PRIORITY)); });
      row("gw B ECN marks, best-effort class",
          [&](const PhaseResult& p) { return num(p.final.fabric_ecn.marked(RG_ECN_BEST_EFFORT)); });
    }
    row("bulk TCP goodput at host B, Mbit/s", [&](const PhaseResult& p) {
      return p.bulk ? fmt("%.1f", p.bulk->received_mbps) : std::string("?");
    });
    row("bulk TCP retransmits", [&](const PhaseResult& p) {
      return p.bulk ? num(p.bulk->retransmits) : std::string("?");
    });
  }
  if (s.uplink_scheduler) {
    const ClassStats SchedulerStats::*classes[] = {&SchedulerStats::priority, &SchedulerStats::best_effort};
    const char* sent_labels[] = {"gw A uplink priority (1:10): sent", "gw A uplink best effort: sent"};
    const char* drop_labels[] = {"gw A uplink priority (1:10): dropped", "gw A uplink best effort: dropped"};
    for (size_t i = 0; i < 2; ++i) {
      row(sent_labels[i], [&](const PhaseResult& p) { return num((p.final.uplink_scheduler.*classes[i]).packets); });
      row(drop_labels[i], [&](const PhaseResult& p) { return num((p.final.uplink_scheduler.*classes[i]).dropped); });
    }
    row("uplink bulk TCP goodput, Mbit/s", [&](const PhaseResult& p) {
      return p.uplink_bulk ? fmt("%.1f", p.uplink_bulk->received_mbps) : std::string("?");
    });
    row("uplink bulk TCP retransmits", [&](const PhaseResult& p) {
      return p.uplink_bulk ? num(p.uplink_bulk->retransmits) : std::string("?");
    });
  }
  row("roceguard gw A: DSCP re-marked", [&](const PhaseResult& p) { return rg(p.final.rg_remarked_a, p); });
  row("roceguard gw A: Geneve encapsulated", [&](const PhaseResult& p) { return rg(p.final.rg_encapsulated_a, p); });
  row("roceguard gw A: retransmits counted", [&](const PhaseResult& p) { return rg(p.final.rg_retransmits_a, p); });
  row("roceguard gw B: Geneve decapsulated", [&](const PhaseResult& p) { return rg(p.final.rg_decapsulated_b, p); });
  row("roceguard gw B: DSCP repaired", [&](const PhaseResult& p) { return rg(p.final.rg_repaired_b, p); });
  row("roceguard gw B: estimated lost", [&](const PhaseResult& p) { return rg(p.final.rg_lost_b, p); });
  // The tunnel's exact loss next to the WAN's own drop count: equal once
  // the tunnel is quiet, when no packet is left in flight, but for drops
  // after a stream's last arrival. "WAN dropped every copy": sequence
  // numbers the WAN dropped every copy of (the loss shield sends two).
  auto tunnel = [&](size_t dir, uint64_t TunnelDirection::*field) {
    return [dir, field, &num](const PhaseResult& p) {
      return dir < p.tunnel.size() ? num(p.tunnel[dir].*field) : std::string("-");
    };
  };
  const char* dirs[] = {"A->B", "B->A"};
  for (size_t d = 0; d < 2; ++d) {
    const std::string at = std::string("tunnel ") + dirs[d] + ": ";
    row((at + "sent (sequence option)").c_str(), tunnel(d, &TunnelDirection::sent));
    row((at + "received").c_str(), tunnel(d, &TunnelDirection::received));
    row((at + "lost (sequence numbers)").c_str(), tunnel(d, &TunnelDirection::lost));
    row((at + "dropped by the WAN").c_str(), tunnel(d, &TunnelDirection::wan_dropped));
    row((at + "WAN dropped every copy").c_str(), tunnel(d, &TunnelDirection::wan_all_copies_dropped));
    row((at + "reordered / duplicated").c_str(), [d](const PhaseResult& p) {
      return d < p.tunnel.size()
                 ? std::to_string(p.tunnel[d].reordered) + " / " + std::to_string(p.tunnel[d].duplicated)
                 : std::string("-");
    });
    row((at + "mean one-way delay, us").c_str(), [d](const PhaseResult& p) {
      return d < p.tunnel.size() && p.tunnel[d].delay_arrivals ? fmt("%.1f", p.tunnel[d].delay_avg_s * 1e6)
                                                               : std::string("-");
    });
  }
  // The loss shield per direction: what it cost (copies, extra WAN bytes)
  // and what it left (numbers every copy of which was lost).
  for (size_t d = 0; d < 2 && s.shield != "off"; ++d) {
    const std::string at = std::string("shield ") + dirs[d] + ": ";
    row((at + "copies sent").c_str(), tunnel(d, &TunnelDirection::shield_copies));
    row((at + "extra WAN bytes").c_str(), [d](const PhaseResult& p) {
      if (d >= p.tunnel.size()) return std::string("-");
      const auto pct = extra_bytes_pct(p.tunnel[d]);
      return std::to_string(p.tunnel[d].shield_copy_bytes) + (pct ? fmt(" (%.1f %%)", *pct) : std::string());
    });
    row((at + "copies refused / sent once").c_str(), [d](const PhaseResult& p) {
      return d < p.tunnel.size() ? std::to_string(p.tunnel[d].shield_copy_errors) + " / " +
                                       std::to_string(p.tunnel[d].shield_uncopied)
                                 : std::string("-");
    });
    row((at + "duplicates eliminated").c_str(), tunnel(d, &TunnelDirection::shield_eliminated));
    row((at + "residual loss").c_str(), tunnel(d, &TunnelDirection::lost));
  }
  // The congestion loop per direction: its marks and its model at the end.
  for (size_t d = 0; d < 2 && s.congestion == "on"; ++d) {
    const std::string at = std::string("loop ") + dirs[d] + ": ";
    row((at + "inner CE marks / unmarkable").c_str(), [d](const PhaseResult& p) {
      return d < p.tunnel.size() && p.tunnel[d].congestion
                 ? std::to_string(p.tunnel[d].cc_marked) + " / " + std::to_string(p.tunnel[d].cc_unmarkable)
                 : std::string("-");
    });
    row((at + "CNPs made / refused").c_str(), [d](const PhaseResult& p) {
      return d < p.tunnel.size() && p.tunnel[d].congestion
                 ? std::to_string(p.tunnel[d].cc_cnps) + " / " + std::to_string(p.tunnel[d].cc_cnp_errors)
                 : std::string("-");
    });
    row((at + "modelled bottleneck, Mbit/s").c_str(), [d](const PhaseResult& p) {
      return d < p.tunnel.size() && p.tunnel[d].congestion ? fmt("%.1f", p.tunnel[d].cc_bottleneck_kbps / 1e3)
                                                           : std::string("-");
    });
    row((at + "probes / resets / competes / fallbacks").c_str(), [d](const PhaseResult& p) {
      if (d >= p.tunnel.size() || !p.tunnel[d].congestion) return std::string("-");
      const TunnelDirection& t = p.tunnel[d];
      return std::to_string(t.cc_probes) + " / " + std::to_string(t.cc_resets) + " / " +
             std::to_string(t.cc_competes) + " / " + std::to_string(t.cc_fallbacks);
    });
  }
  return out.str();
}

std::vector<std::string> write_report(const std::string& dir, const LabSettings& s,
                                      const std::vector<PhaseResult>& phases) {
  std::vector<std::string> files;
  json j;
  j["settings"] = {{"scenario", s.scenario},
                   {"mode", s.mode},
                   {"duration_s", s.duration_s},
                   {"loss_pct", s.loss_pct},
                   {"loss_burst", s.loss_burst},
                   {"wan_delay_ms", s.wan_delay_ms},
                   {"wan_jitter_ms", s.wan_jitter_ms},
                   {"wan_rate_mbit", s.bottleneck ? s.bottleneck->mbit : 0},
                   {"wan_buffer_us", s.bottleneck ? s.bottleneck->buffer.count() : 0},
                   {"wan_cross_streams", s.wan_cross},
                   {"reorder_pct", s.reorder_pct},
                   {"ce_pct", s.ce_pct},
                   {"qps", s.qps},
                   {"payload", s.payload},
                   {"tunnel", s.tunnel},
                   {"tunnel_kind", s.tunnel_kind},
                   {"shield", s.shield},
                   {"congestion_loop", s.congestion},
                   {"congestion_signal", s.congestion_signal},
                   {"transport", transport_name(s.transport)},
                   {"xdp_forward", s.xdp_forward},
                   {"burst", s.burst},
                   {"gro_forwarding", {{"requested", s.gro_forwarding}, {"on", s.gro_forwarding_on}}},
                   {"host_tos", s.host_tos},
                   {"sender",
                    {{"window", s.window},
                     {"window_mbit", s.window_mbit},
                     {"rtt_us", s.rtt.count()},
                     {"ack_timeout",
                      {{"text", s.ack_timeout.text},
                       {"exponent", s.ack_timeout.exponent},
                       {"effective_us", s.ack_timeout.effective_us}}},
                     {"retry_cnt", s.retry_cnt},
                     {"retransmit", retransmit_name(s.retransmit)},
                     {"retransmit_model", retransmit_label(s.retransmit)},
                     {"congestion_control",
                      {{"cc", congestion_control_name(s.cc)},
                       {"line_mbit", s.window_mbit},
                       {"dcqcn", to_json(s.dcqcn)}}}}},
                   {"metrics", {{"gw_a", s.metrics_a}, {"gw_b", s.metrics_b}}}};
  if (s.scheduler)
    j["settings"]["congestion"] = {{"link_mbit", s.scheduler->link_mbit},
                                   {"priority_mbit", s.scheduler->priority_mbit},
                                   {"best_effort_mbit", s.scheduler->link_mbit - s.scheduler->priority_mbit},
                                   {"queue_packets", s.scheduler->queue_packets},
                                   {"bulk_streams", s.bulk_streams},
                                   {"sender_mbit", s.sender_mbit}};
  if (s.uplink_scheduler)
    j["settings"]["congestion"]["uplink"] = {
        {"link_mbit", s.uplink_scheduler->link_mbit},
        {"priority_mbit", s.uplink_scheduler->priority_mbit},
        {"best_effort_mbit", s.uplink_scheduler->link_mbit - s.uplink_scheduler->priority_mbit},
        {"queue_packets", s.uplink_scheduler->queue_packets},
        {"skb_priority", HtbScheduler::kPriorityClassId}};
  if (s.scheduler) j["settings"]["congestion"]["fabric_ecn"] = s.fabric_ecn ? to_json(*s.fabric_ecn) : json("off");
  const bool scheduler = s.scheduler.has_value();
  j["phases"] = json::object();
  for (const auto& p : phases) {
    json sec = json::array();
    for (const auto& x : p.seconds) sec.push_back(snapshot_json(x, scheduler));
    const Headline h = headline(s, p);
    j["phases"][p.name] = {{"roceguard", p.roceguard},
                           {"headline",
                            {{"goodput_share", h.goodput_share ? json(*h.goodput_share) : json(nullptr)},
                             {"resends_per_wan_drop", h.resends_per_drop ? json(*h.resends_per_drop) : json(nullptr)},
                             {"retransmit_timeouts", p.sent.timeouts},
                             {"qps_failed", p.sent.qps_failed}}},
                           {"sender", to_json(p.sent)},
                           {"receiver", to_json(p.received)},
                           // What host B's PSN tracker counted lost: PSNs a later one of
                           // their QP showed missing (the sum of forward jumps - 1), in
                           // psn_gap_events jumps; and the PSNs host A sent above the highest
                           // that arrived, which no later PSN can show.
                           {"host_b",
                            {{"psn_gaps", p.received.lost_estimate},
                             {"psn_gap_events", p.received.gaps},
                             {"psns_before_first_arrival", p.received.psns_before_first_arrival},
                             {"psns_after_last_arrival", psns_after_last_arrival(p.sent, p.received)}}},
                           {"totals", snapshot_json(p.final, scheduler)},
                           {"seconds", sec},
                           {"gateway_counters", p.counters},
                           {"tunnel", tunnel_json(p.tunnel)},
                           {"wan", wan_json(p)},
                           {"pcaps", p.pcaps}};
    if (scheduler) {
      auto bulk_json = [](const std::string& log, const std::optional<BulkResult>& r) {
        json bulk = {{"log", log}};
        if (r) {
          bulk["received_mbps"] = r->received_mbps;
          bulk["retransmits"] = r->retransmits;
        }
        return bulk;
      };
      j["phases"][p.name]["bulk"] = bulk_json(p.bulk_log, p.bulk);
      j["phases"][p.name]["bulk_uplink"] = bulk_json(p.uplink_bulk_log, p.uplink_bulk);
      // Per class and region of the profile: the packets the marker saw and
      // marked, and the marks its line predicts.
      if (s.fabric_ecn) j["phases"][p.name]["fabric_ecn_gw_b"] = to_json(p.final.fabric_ecn);
    }
    if (s.wan_cross && s.bottleneck) {
      const double rate = s.bottleneck->mbit;
      json cross = {{"streams", s.wan_cross},
                    {"log", p.wan_cross_log},
                    {"roce_goodput_mbps", mbps(p.received.goodput_bytes, phase_seconds(p))},
                    {"roce_share", mbps(p.received.goodput_bytes, phase_seconds(p)) / rate}};
      if (p.wan_cross) {
        cross["congestion_control"] = p.wan_cross->congestion_control;
        cross["tcp_goodput_mbps"] = p.wan_cross->received_mbps;
        cross["tcp_share"] = p.wan_cross->received_mbps / rate;
        cross["tcp_retransmits"] = p.wan_cross->retransmits;
        cross["tcp_mean_rtt_us"] = p.wan_cross->mean_rtt_us;
      }
      j["phases"][p.name]["wan"]["cross"] = cross;
    }
  }
  write_file(dir + "/counters.json", j.dump(2) + "\n");
  files.push_back("counters.json");

  // Per-second differences, one row per phase and second.
  std::ostringstream csv;
  csv << "phase,second,goodput_mbps,sent_a,retransmits_a,naks_a,received_b,dscp46_b,dscp_other_b,"
         "lost_estimate_b,wan_dropped,wan_bleached,wan_ce_marked,cnps_b,ecn_ce_b,"
         "rg_dscp_rewritten_gw_a,rg_encapsulated_gw_a,rg_retransmits_gw_a,rg_decapsulated_gw_b,"
         "rg_dscp_repaired_gw_b,rg_lost_estimate_gw_b,sched_priority_sent_gw_b,sched_priority_dropped_gw_b,"
         "sched_best_effort_sent_gw_b,sched_best_effort_dropped_gw_b,sched_priority_sent_gw_a,"
         "sched_priority_dropped_gw_a,sched_best_effort_sent_gw_a,sched_best_effort_dropped_gw_a,"
         "cnps_a,wan_queue_p99_us_a_to_b,wan_queue_max_us_a_to_b,ecn_marked_priority_gw_b,"
         "ecn_marked_best_effort_gw_b\n";
  for (const auto& p : phases) {
    Snapshot prev;
    for (const auto& x : p.seconds) {
      uint64_t d46 = x.dscp_b[RG_DEFAULT_DSCP] - prev.dscp_b[RG_DEFAULT_DSCP];
      uint64_t dall = total(x.dscp_b) - total(prev.dscp_b);
      csv << p.name << "," << x.second << "," << fmt("%.3f", mbps(x.goodput_bytes_b - prev.goodput_bytes_b, 1.0))
          << "," << x.sent_packets - prev.sent_packets << "," << x.retransmits_a - prev.retransmits_a << ","
          << x.naks_a - prev.naks_a << "," << x.received_b - prev.received_b << "," << d46 << ","
          << dall - d46 << "," << x.lost_b - prev.lost_b << "," << x.wan_dropped - prev.wan_dropped << ","
          << x.wan_bleached - prev.wan_bleached << "," << x.wan_ce_marked - prev.wan_ce_marked << ","
          << x.cnps_b - prev.cnps_b << "," << x.ecn_ce_b - prev.ecn_ce_b << ","
          << x.rg_remarked_a - prev.rg_remarked_a << "," << x.rg_encapsulated_a - prev.rg_encapsulated_a
          << "," << x.rg_retransmits_a - prev.rg_retransmits_a << ","
          << x.rg_decapsulated_b - prev.rg_decapsulated_b << "," << x.rg_repaired_b - prev.rg_repaired_b
          << "," << x.rg_lost_b - prev.rg_lost_b;
      // Empty in the bleach scenario: there is no scheduler to count.
      if (scheduler)
        csv << "," << x.scheduler.priority.packets - prev.scheduler.priority.packets << ","
            << x.scheduler.priority.dropped - prev.scheduler.priority.dropped << ","
            << x.scheduler.best_effort.packets - prev.scheduler.best_effort.packets << ","
            << x.scheduler.best_effort.dropped - prev.scheduler.best_effort.dropped << ","
            << x.uplink_scheduler.priority.packets - prev.uplink_scheduler.priority.packets << ","
            << x.uplink_scheduler.priority.dropped - prev.uplink_scheduler.priority.dropped << ","
            << x.uplink_scheduler.best_effort.packets - prev.uplink_scheduler.best_effort.packets << ","
            << x.uplink_scheduler.best_effort.dropped - prev.uplink_scheduler.best_effort.dropped;
      else
        csv << ",,,,,,,,";
      // The queue's delay is this second's already; empty without --wan-rate.
      csv << "," << x.cnps_a - prev.cnps_a << ",";
      if (x.wan_queue_samples)
        csv << x.wan_queue_p99_us << "," << x.wan_queue_max_us;
      else
        csv << ",";
      // Empty without the marker (the bleach scenario, --fabric-ecn off).
      if (s.scheduler && s.fabric_ecn)
        csv << "," << x.fabric_ecn.marked(RG_ECN_PRIORITY) - prev.fabric_ecn.marked(RG_ECN_PRIORITY) << ","
            << x.fabric_ecn.marked(RG_ECN_BEST_EFFORT) - prev.fabric_ecn.marked(RG_ECN_BEST_EFFORT);
      else
        csv << ",,";
      csv << "\n";
      prev = x;
    }
  }
  write_file(dir + "/counters.csv", csv.str());
  files.push_back("counters.csv");

  write_file(dir + "/summary.txt", summary_table(s, phases));
  files.push_back("summary.txt");

  for (auto& f : draw_charts(dir, phases, scheduler, s.retransmit)) files.push_back(f);
  return files;
}

}  // namespace rg::lab
