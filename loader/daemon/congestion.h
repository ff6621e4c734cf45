// The congestion loop (tunnel.congestion = "on"), run by `roceguard run`
// every kCongestionTickNs; docs/design.md section 18.
//
// Each gateway measures what every peer's packets do on the way here — the
// rate at which they arrive (the WAN's delivery rate) and their mean
// queueing delay (the one-way delay above its floor) — and sends it back in
// the option's extension as a congestion report (RG_FEEDBACK_REPORT).
//
// From the peer's reports, each gateway models the WAN's bottleneck towards
// that peer, as BBR models a path: the bottleneck rate is the largest
// delivery rate seen while the WAN queued (a queue means the pipe is full,
// so what came out of it is its rate) or above the estimate, kept for
// kBandwidthWindowNs; the model probes above it now and then to learn a
// rate that grew, and takes the delivery rate as the new estimate when a
// queue stands outside a probe (cross traffic took a share). The model's
// rate — a little under the bottleneck, more while probing, less while
// draining — is the drain rate of the peer's phantom queue in the data path
// (struct rg_peer_cc), which marks inner CE on ECN-capable RoCE sent
// faster than that, so the hosts' DCQCN slows down before the WAN's own
// queue, which marks nothing, fills.
//
// Never worse than off: with no bottleneck seen yet, no fresh report from
// the peer (an older roceguard, the kernel's geneve, a stopped daemon), or
// this daemon stopped (the decision's lifetime), the data path marks
// nothing. Nor does it while the WAN's queue is someone else's: a queue
// that still stands after the model's drains took the estimate below
// kCompeteFraction of the most it saw in its window is held by cross
// traffic that does not yield (loss-based or BBR TCP), and marking more
// would only hand that traffic the pipe. When that has lasted
// kCompeteAfterNs (longer than a DCQCN cut takes to show as an emptier
// queue), the model competes (no marks, the RoCE traffic as without the
// loop) for kCompeteNs and learns again.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <iterator>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "metrics/exporter.h"

namespace rg {

inline constexpr uint64_t kCongestionTickNs = 10'000'000ull;

// One congestion report (RG_FEEDBACK_REPORT).
struct CongestionReport {
  uint64_t rate_kbps = 0;  // the delivery rate
  bool has_delay = false;  // no stamped arrival in the period: no delay
  uint32_t delay_us = 0;   // mean queueing delay, a multiple of RG_REPORT_DELAY_UNIT_US
};

// The word, and back (nullopt: not a report).
uint32_t encode_report(const CongestionReport& r);
std::optional<CongestionReport> decode_report(uint32_t word);

// What the receiving side counted of one peer's packets, cumulative.
struct ArrivalCounts {
  uint64_t bytes = 0;         // inner bytes that crossed the WAN (eliminated copies included)
  uint64_t delay_n = 0;       // stamped arrivals
  uint64_t delay_sum_us = 0;  // their queueing delays
};

// The report of one peer's arrivals over a sliding kWindowNs.
class ArrivalMeter {
 public:
  static constexpr uint64_t kWindowNs = 40'000'000ull;

  // Takes the counts at now_ns; returns the report word (0: no report yet).
  uint32_t update(uint64_t now_ns, const ArrivalCounts& c);

 private:
  std::deque<std::pair<uint64_t, ArrivalCounts>> snaps_;
};

// The model's phase.
enum class CongestionState {
  kNoReport,  // no fresh report from the peer: no marks
  kLearning,  // reports, but no bottleneck seen yet: no marks
  kCruise,    // at kCruiseGain of the bottleneck
  kProbe,     // above it, to learn a rate that grew
  kDrain,     // below it, to drain what the probe queued
  kCompete,   // the standing queue is cross traffic's: no marks for kCompeteNs
};
static_assert(std::size(kCongestionStateNames) == static_cast<size_t>(CongestionState::kCompete) + 1,
              "a name for every state");
const char* congestion_state_name(CongestionState s);

// The per-peer model, updated once a tick with the peer's newest report.
class BottleneckModel {
 public:
  static constexpr uint64_t kReportLifetimeNs = 500'000'000ull;
  static constexpr uint64_t kBandwidthWindowNs = 3'000'000'000ull;
  static constexpr uint64_t kProbeEveryNs = 1'000'000'000ull;
  static constexpr uint64_t kPhaseNs = 20'000'000ull;  // a probe, and the drain after it
  // A queue: mean queueing delay at or above this.
  static constexpr uint32_t kQueueUs = 500;
  static constexpr double kCruiseGain = 0.95, kProbeGain = 1.10, kDrainGain = 0.85;
  // A standing queue with the estimate below this share of the window's
  // largest: the queue is not this gateway's to drain.
  static constexpr double kCompeteFraction = 0.5;
  static constexpr uint64_t kCompeteAfterNs = 250'000'000ull, kCompeteNs = 3'000'000'000ull;

  // report: the peer's newest (nullopt: none), which arrived at at_ns.
  void update(uint64_t now_ns, const std::optional<CongestionReport>& report, uint64_t at_ns);

  CongestionState state() const { return state_; }
  uint64_t bottleneck_kbps() const { return btl_kbps_; }
  uint64_t rate_kbps() const;  // 0: no marks
  const std::optional<CongestionReport>& report() const { return last_; }
  uint64_t fallbacks() const { return fallbacks_; }  // entries into kNoReport after a model
  uint64_t probes() const { return probes_; }
  uint64_t resets() const { return resets_; }  // estimates replaced by a standing queue
  uint64_t competes() const { return competes_; }  // entries into kCompete

 private:
  void set_state(CongestionState s, uint64_t now_ns);
  // After competing: the next queue is the first estimate again.
  void forget_estimates();

  CongestionState state_ = CongestionState::kNoReport;
  std::optional<CongestionReport> last_;
  uint64_t last_at_ = 0;
  uint64_t btl_kbps_ = 0, btl_at_ = 0;  // the estimate, and when a sample last confirmed it
  // The estimates of the last kBandwidthWindowNs, each with its time, as a
  // sliding maximum: the front is the largest, each later one smaller than
  // the one before it.
  std::deque<std::pair<uint64_t, uint64_t>> window_;
  uint64_t squeezed_at_ = 0;  // since when a queue stands with the estimate under kCompeteFraction of max (0: not)
  uint64_t phase_at_ = 0, probe_at_ = 0;
  uint64_t fallbacks_ = 0, probes_ = 0, resets_ = 0, competes_ = 0;
};

// The loop for every peer of a loaded object: slots[i] is cfg.peers[i]'s
// rg_peers slot; the fds are the object's rg_peer_cc, rg_peer_rx and
// rg_peer_stats.
class CongestionLoop {
 public:
  CongestionLoop(const Config& cfg, const std::vector<uint32_t>& slots, int cc_fd, int rx_fd, int stats_fd);

  // At most once a kCongestionTickNs (earlier calls return at once).
  void tick(uint64_t now_ns);

  std::vector<CongestionPeer> peers() const;

  // Whether the frames to every peer are stamped with their departure
  // (RG_CC_F_PACE) from the next tick on: the daemon says so while the
  // attached interfaces' qdiscs honour the stamps.
  void set_pace(bool on) { pace_ = on; }
  bool pace() const { return pace_; }

 private:
  struct Peer {
    std::string name;
    uint32_t slot = 0;
    ArrivalMeter meter;
    BottleneckModel model;
    uint32_t sent = 0;  // the report written last
  };
  void write_cc(const Peer& p, uint64_t until_ns) const;

  int cc_fd_, rx_fd_, stats_fd_;
  uint32_t signal_;  // RG_CC_F_*
  bool pace_ = false;
  std::vector<Peer> peers_;
  uint64_t last_ns_ = 0;
};

// How long the decision written to rg_peer_cc holds without a renewal.
inline constexpr uint64_t kCcLifetimeNs = 20 * kCongestionTickNs;

// The phantom queue's marking thresholds, in time at its drain rate.
inline constexpr uint32_t kMarkMinNs = 200'000, kMarkMaxNs = 2'000'000, kPhantomCapNs = 20'000'000;
// At most one CNP per QP in this long, as DCQCN's notification point sends them.
inline constexpr uint32_t kCnpGapNs = 50'000;

}  // namespace rg
