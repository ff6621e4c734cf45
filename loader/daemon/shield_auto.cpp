#include "daemon/shield_auto.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/error.h"
#include "common/log.h"
#include "dataplane/maps.h"
#include "metrics/presentation.h"
#include "roceguard/roceguard.h"

namespace rg {
namespace {

constexpr uint64_t kTickNs = 1'000'000'000ull;

std::string percent(double ratio) { return fmt::format("{:.3f} %", ratio * 100); }

}  // namespace

bool report_fresh(uint64_t now_ns, uint64_t at_ns) {
  return at_ns != 0 && (at_ns >= now_ns || now_ns - at_ns < kReportLifetimeNs);
}

PeerReport PeerReports::update(uint64_t now_ns, uint64_t at_ns, uint32_t feedback, uint32_t flags) {
  // An extension without a measure (too few numbers, or a peer whose
  // daemon stopped) leaves the last measure to age, not renewed.
  if (at_ns && (feedback & RG_FEEDBACK_VALID) && at_ns >= measured_at_) {
    measured_at_ = at_ns;
    measure_ = feedback;
  }
  PeerReport r;
  r.fresh = report_fresh(now_ns, measured_at_);
  r.feedback = r.fresh ? measure_ : 0;
  r.eliminates = report_fresh(now_ns, at_ns) && (flags & RG_TUNNEL_F_ELIMINATES);
  return r;
}

double feedback_loss(uint32_t feedback) {
  if (!(feedback & RG_FEEDBACK_VALID)) return -1;
  return static_cast<double>(feedback & RG_FEEDBACK_LOSS_MASK) / 1e6;
}

uint32_t LossMeter::update(uint64_t now_ns, const PeerRxCounts& c) {
  snaps_.emplace_back(now_ns, c);
  while (snaps_.size() > 1 && now_ns - snaps_.front().first > kWindowNs) snaps_.pop_front();
  const PeerRxCounts& o = snaps_.front().second;
  // Counters restart with the pinned maps (--reset-state): start over.
  if (c.received < o.received || c.lost < o.lost || c.eliminated < o.eliminated || c.copied < o.copied ||
      c.delay_samples < o.delay_samples) {
    snaps_.clear();
    means_.clear();
    snaps_.emplace_back(now_ns, c);
    return 0;
  }
  const uint64_t received = c.received - o.received, lost = c.lost - o.lost;
  const uint64_t eliminated = c.eliminated - o.eliminated, copied = c.copied - o.copied;

  uint32_t word = 0;
  double loss = -1;
  if (copied >= kMinPairs) {
    const uint64_t e = std::min(eliminated, copied);
    loss = static_cast<double>(copied - e) / static_cast<double>(copied + e);
  } else if (received + lost >= kMinNumbers) {
    loss = static_cast<double>(lost) / static_cast<double>(received + lost);
  }
  if (loss >= 0) {
    const auto ppm = static_cast<uint32_t>(std::min(loss, 1.0) * 1e6 + 0.5);
    word = RG_FEEDBACK_VALID | std::min<uint32_t>(ppm, RG_FEEDBACK_LOSS_MASK);
  }

  const uint64_t samples = c.delay_samples - o.delay_samples;
  if (samples >= kMinDelaySamples) {
    const uint64_t mean = (c.delay_sum_ns - o.delay_sum_ns) / samples;
    while (!means_.empty() && now_ns - means_.front().first > kBaselineNs) means_.pop_front();
    uint64_t baseline = mean;
    for (const auto& m : means_) baseline = std::min(baseline, m.second);
    means_.emplace_back(now_ns, mean);
    if (word && mean > baseline + std::max(baseline / 4, kCongestionMinRiseNs)) word |= RG_FEEDBACK_CONGESTED;
  }
  return word;
}

bool ShieldDecider::evaluate(const PeerReport& r, std::string& reason) {
  const bool valid = r.fresh && (r.feedback & RG_FEEDBACK_VALID);
  const bool congested = valid && (r.feedback & RG_FEEDBACK_CONGESTED);
  const uint32_t ppm = valid ? (r.feedback & RG_FEEDBACK_LOSS_MASK) : 0;
  const std::string loss = percent(ppm / 1e6);

  if (hold_ > 0) --hold_;
  if (!on_) {
    above_ = valid && !congested && r.eliminates && ppm >= on_ppm_ && hold_ == 0 ? above_ + 1 : 0;
    if (above_ < kOnAfter) return false;
    on_ = true;
    above_ = below_ = 0;
    reason = "the peer reports " + loss + " raw loss for " + std::to_string(kOnAfter) + " s (threshold " +
             percent(on_ppm_ / 1e6) + ") and eliminates copies";
    return true;
  }
  if (congested) {
    reason = "the peer's queueing delay rose with its " + loss +
             " loss: congestion, which copies make worse; off for at least " + std::to_string(kCongestionHold) +
             " s";
    hold_ = kCongestionHold;
  } else if (r.fresh && !r.eliminates) {
    reason = "the peer no longer says it eliminates copies";
  } else if (!r.fresh) {
    reason = "no measure from the peer for " + std::to_string(kReportLifetimeNs / 1'000'000'000ull) + " s";
  } else {
    below_ = valid && ppm * 2 < on_ppm_ ? below_ + 1 : (valid ? 0 : below_);
    if (below_ < kOffAfter) return false;
    reason = "the peer reports " + loss + " raw loss, below half the threshold for " + std::to_string(kOffAfter) +
             " s";
  }
  on_ = false;
  above_ = below_ = 0;
  return true;
}

ShieldAuto::ShieldAuto(const Config& cfg, const std::vector<uint32_t>& slots, int ctl_fd, int rx_fd,
                       std::string pin_path)
    : ctl_fd_(ctl_fd), rx_fd_(rx_fd), pin_path_(std::move(pin_path)) {
  for (size_t i = 0; i < cfg.peers.size() && i < slots.size(); ++i) {
    const auto& p = cfg.peers[i];
    if (slots[i] >= RG_MAX_PEERS) continue;
    peers_.push_back(Peer{.name = p.name,
                          .slot = slots[i],
                          .is_auto = p.shield == Shield::kAuto,
                          .meter = LossMeter{},
                          .decider = ShieldDecider(cfg.shield_auto_loss_ppm),
                          .sent = 0,
                          .reports = PeerReports{},
                          .report = PeerReport{},
                          .turned_on = 0,
                          .turned_off = 0});
  }
  // Whatever a previous process left is not this one's decision.
  for (const Peer& p : peers_) write_ctl(p, 0);
}

void ShieldAuto::write_ctl(const Peer& p, uint64_t until_ns) const {
  rg_peer_ctl v{};
  v.until_ns = until_ns;
  v.feedback = p.sent;
  v.shield = p.is_auto && p.decider.on() ? RG_PEER_F_SHIELD_ALL : 0;
  if (bpf_map_update_elem(ctl_fd_, &p.slot, &v, BPF_ANY) != 0)
    spdlog::warn("cannot write {}[{}]: {}", kMapPeerCtl, p.slot, errno_text(errno));
}

void ShieldAuto::tick(uint64_t now_ns) {
  if (last_ns_ && now_ns - last_ns_ < kTickNs) return;
  last_ns_ = now_ns;

  std::vector<TunnelPeer> tunnels;
  try {
    MapReader reader(pin_path_);
    tunnels = tunnel_peers(reader.peer_stats(), reader.tunnel_streams(), {}, now_ns);
  } catch (const std::exception& e) {
    spdlog::debug("shield auto: {}", e.what());
    return;
  }
  const int ncpu = libbpf_num_possible_cpus();
  std::vector<rg_peer_rx> rx(ncpu > 0 ? static_cast<size_t>(ncpu) : 1);

  for (Peer& p : peers_) {
    const uint32_t slot = p.slot;
    const LogFields about({{"peer", p.name}});
    PeerRxCounts counts;
    for (const TunnelPeer& t : tunnels) {
      if (t.slot != slot) continue;
      counts.received = t.received;
      counts.lost = t.lost;
      counts.eliminated = t.ev[RG_PEER_EV_SHIELD_ELIMINATED].packets;
      for (uint64_t n : t.delay) counts.delay_samples += n;
      counts.delay_sum_ns = t.delay_sum_ns;
    }
    // What the peer's extensions said: the newest CPU's.
    std::fill(rx.begin(), rx.end(), rg_peer_rx{});
    uint64_t newest = 0;
    uint32_t feedback = 0, flags = 0;
    if (bpf_map_lookup_elem(rx_fd_, &slot, rx.data()) == 0) {
      for (const auto& r : rx) {
        counts.copied += r.copied;
        if (r.at_ns > newest) {
          newest = r.at_ns;
          feedback = r.feedback;
          flags = r.flags;
        }
      }
    }
    p.report = p.reports.update(now_ns, newest, feedback, flags);

    p.sent = p.meter.update(now_ns, counts);
    if (p.is_auto) {
      std::string reason;
      if (p.decider.evaluate(p.report, reason)) {
        ++(p.decider.on() ? p.turned_on : p.turned_off);
        spdlog::info("peer {}: loss shield {} (auto): {}", p.name, p.decider.on() ? "on" : "off", reason);
      }
    }
    write_ctl(p, now_ns + kCtlLifetimeNs);
  }
}

std::vector<ShieldAutoPeer> ShieldAuto::auto_peers() const {
  std::vector<ShieldAutoPeer> out;
  for (const Peer& p : peers_) {
    if (!p.is_auto) continue;
    ShieldAutoPeer s;
    s.name = p.name;
    s.on = p.decider.on();
    s.eliminates = p.report.fresh && p.report.eliminates;
    s.reported_loss = p.report.fresh ? feedback_loss(p.report.feedback) : -1;
    s.congested = p.report.fresh && (p.report.feedback & RG_FEEDBACK_VALID) &&
                  (p.report.feedback & RG_FEEDBACK_CONGESTED);
    s.turned_on = p.turned_on;
    s.turned_off = p.turned_off;
    out.push_back(s);
  }
  return out;
}

std::vector<PeerFeedback> ShieldAuto::feedback() const {
  std::vector<PeerFeedback> out;
  for (const Peer& p : peers_)
    out.push_back({p.name, feedback_loss(p.sent), (p.sent & RG_FEEDBACK_VALID) && (p.sent & RG_FEEDBACK_CONGESTED)});
  return out;
}

}  // namespace rg
