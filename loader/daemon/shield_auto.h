// The loss shield's "auto" mode (tunnel.shield = "auto"), run by
// `roceguard run` once a second.
//
// Each gateway measures the raw loss of what every peer sends it (before
// the shield's elimination) and sends it back in the option's extension
// (rg_peer_ctl.feedback, RG_FEEDBACK_*). Each gateway decides, for its
// "auto" peers, from what the peer sends back: the shield goes on (all)
// while the peer reports a loss at or above tunnel.shield_auto_loss_ppm,
// eliminates copies and sees no congestion, and off again with hysteresis.
// The decision is written to rg_peer_ctl.shield, which the programs add to
// the configured shield, with a lifetime (kCtlLifetimeNs) that every tick
// renews: without `roceguard run` the programs send no measure and no
// "auto" shield.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "metrics/exporter.h"

namespace rg {

// What the receiving side has counted of one peer's packets, cumulative.
struct PeerRxCounts {
  uint64_t received = 0;       // first arrivals of a number
  uint64_t lost = 0;           // numbers none of whose copies arrived (settled)
  uint64_t eliminated = 0;     // second copies dropped
  uint64_t copied = 0;         // first arrivals of numbers the peer sent twice
  uint64_t delay_samples = 0;  // arrivals with a send time
  uint64_t delay_sum_ns = 0;
};

// The raw loss of one peer's packets over a sliding window (receiving side).
//
// Numbers sent once: lost / (received + lost). Numbers sent twice (the
// peer's shield is on; the option says which): of those that arrived, a
// fraction (1 - p)^2 / (1 - p^2) = (1 - p) / (1 + p) arrived twice, so with
// C first arrivals of copied numbers and E second copies eliminated,
// p = (C - E) / (C + E): the loss each copy met, measured while the shield
// hides it from the host. That is what lets the sender turn it off again.
//
// Congestion: the window's mean queueing delay (the one-way delay above its
// floor, a difference that holds across two clocks) above the lowest window mean
// of the last kBaselineNs by more than a quarter of it and at least
// kCongestionMinRiseNs (a queue that fills).
class LossMeter {
 public:
  static constexpr uint64_t kWindowNs = 10'000'000'000ull;
  static constexpr uint64_t kBaselineNs = 300'000'000'000ull;
  static constexpr uint64_t kMinNumbers = 1000;  // fewer in the window: no measure
  static constexpr uint64_t kMinPairs = 200;
  static constexpr uint64_t kMinDelaySamples = 10;
  static constexpr uint64_t kCongestionMinRiseNs = 1'000'000;

  // Takes the counts at now_ns; returns the feedback word for the window
  // that ends now (0: too few packets to say).
  uint32_t update(uint64_t now_ns, const PeerRxCounts& counts);

 private:
  std::deque<std::pair<uint64_t, PeerRxCounts>> snaps_;
  std::deque<std::pair<uint64_t, uint64_t>> means_;  // (time, window's mean delay in ns)
};

// How long the decision written to rg_peer_ctl holds without a renewal:
// three ticks, as the next-hop lease three renewals.
inline constexpr uint64_t kCtlLifetimeNs = 3'000'000'000ull;
// How long a peer's measure counts: one older than this is no report (the
// peer stopped sending, stopped numbering, or its daemon stopped and its
// programs send no measure).
inline constexpr uint64_t kReportLifetimeNs = 10'000'000'000ull;

// What the sending side knows of a peer at one evaluation.
struct PeerReport {
  bool fresh = false;       // a measure arrived in the last kReportLifetimeNs
  bool eliminates = false;  // the peer drops second copies (RG_TUNNEL_F_ELIMINATES)
  uint32_t feedback = 0;    // its RG_FEEDBACK_* word, the last measure
};

// A peer's reports over time: the newest extension of each tick (what
// rg_peer_rx keeps), and the last one that carried a measure (VALID),
// which counts for kReportLifetimeNs after it arrived.
class PeerReports {
 public:
  // at_ns (0: none yet), feedback and flags: the newest extension's.
  PeerReport update(uint64_t now_ns, uint64_t at_ns, uint32_t feedback, uint32_t flags);

 private:
  uint64_t measured_at_ = 0;
  uint32_t measure_ = 0;
};

// The "auto" decision for one peer, evaluated once a second.
class ShieldDecider {
 public:
  static constexpr int kOnAfter = 3;            // evaluations at or above the threshold
  static constexpr int kOffAfter = 30;          // evaluations below half of it
  static constexpr int kCongestionHold = 60;    // evaluations off after congestion

  explicit ShieldDecider(uint32_t on_ppm) : on_ppm_(on_ppm) {}

  // Returns true when the state changed; reason then says why.
  bool evaluate(const PeerReport& r, std::string& reason);
  bool on() const { return on_; }

 private:
  uint32_t on_ppm_;
  bool on_ = false;
  int above_ = 0, below_ = 0, hold_ = 0;
};

// The mode for every peer of a loaded object: slots[i] is cfg.peers[i]'s
// rg_peers slot (as the map writer placed it), ctl_fd and rx_fd are its
// rg_peer_ctl and rg_peer_rx, pin_path where its counters are pinned.
class ShieldAuto {
 public:
  ShieldAuto(const Config& cfg, const std::vector<uint32_t>& slots, int ctl_fd, int rx_fd, std::string pin_path);

  // At most once a second (earlier calls return at once).
  void tick(uint64_t now_ns);

  std::vector<ShieldAutoPeer> auto_peers() const;
  std::vector<PeerFeedback> feedback() const;

 private:
  struct Peer {
    std::string name;
    uint32_t slot = 0;
    bool is_auto = false;
    LossMeter meter;
    ShieldDecider decider;
    uint32_t sent = 0;  // the feedback written last
    PeerReports reports;
    PeerReport report;
    uint64_t turned_on = 0, turned_off = 0;
  };

  // until_ns: when the decision lapses (0: at once).
  void write_ctl(const Peer& p, uint64_t until_ns) const;

  int ctl_fd_, rx_fd_;
  std::string pin_path_;
  std::vector<Peer> peers_;
  uint64_t last_ns_ = 0;
};

// Whether the peer's newest report, stamped at_ns by the data path (0: none
// yet), is current at now_ns. The data path keeps stamping while a tick
// reads the maps, so a report newer than now_ns is the freshest there is.
bool report_fresh(uint64_t now_ns, uint64_t at_ns);

// The feedback word as a loss ratio (0..1); -1 when it carries no measure.
double feedback_loss(uint32_t feedback);

}  // namespace rg
