#include "daemon/congestion.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>

#include "common/error.h"
#include "dataplane/maps.h"
#include "roceguard/roceguard.h"

namespace rg {

uint32_t encode_report(const CongestionReport& r) {
  constexpr uint32_t kMantMax = (1u << RG_REPORT_RATE_MANT_BITS) - 1, kExpMax = (1u << RG_REPORT_RATE_EXP_BITS) - 1;
  // Rounded down: the peer never learns a rate above the one measured.
  uint64_t mant = r.rate_kbps;
  uint32_t exp = 0;
  while (mant > kMantMax && exp < kExpMax) {
    mant >>= 1;
    ++exp;
  }
  mant = std::min<uint64_t>(mant, kMantMax);
  uint32_t word = RG_FEEDBACK_REPORT | (exp << (RG_REPORT_RATE_SHIFT + RG_REPORT_RATE_MANT_BITS)) |
                  (static_cast<uint32_t>(mant) << RG_REPORT_RATE_SHIFT);
  if (r.has_delay) {
    const uint32_t units = (r.delay_us + RG_REPORT_DELAY_UNIT_US / 2) / RG_REPORT_DELAY_UNIT_US;
    word |= RG_REPORT_F_DELAY | std::min<uint32_t>(units, RG_REPORT_DELAY_MASK);
  }
  return word;
}

std::optional<CongestionReport> decode_report(uint32_t word) {
  if (!(word & RG_FEEDBACK_REPORT) || (word & RG_FEEDBACK_VALID)) return std::nullopt;
  const uint32_t mant = (word >> RG_REPORT_RATE_SHIFT) & ((1u << RG_REPORT_RATE_MANT_BITS) - 1);
  const uint32_t exp =
      (word >> (RG_REPORT_RATE_SHIFT + RG_REPORT_RATE_MANT_BITS)) & ((1u << RG_REPORT_RATE_EXP_BITS) - 1);
  CongestionReport r;
  r.rate_kbps = static_cast<uint64_t>(mant) << exp;
  r.has_delay = word & RG_REPORT_F_DELAY;
  r.delay_us = r.has_delay ? (word & RG_REPORT_DELAY_MASK) * RG_REPORT_DELAY_UNIT_US : 0;
  return r;
}

uint32_t ArrivalMeter::update(uint64_t now_ns, const ArrivalCounts& c) {
  if (!snaps_.empty()) {
    const ArrivalCounts& b = snaps_.back().second;
    // Counters restart with a new object or --reset-state: start over.
    if (c.bytes < b.bytes || c.delay_n < b.delay_n || c.delay_sum_us < b.delay_sum_us) snaps_.clear();
  }
  snaps_.emplace_back(now_ns, c);
  while (snaps_.size() > 2 && now_ns - snaps_[1].first >= kWindowNs) snaps_.pop_front();
  const auto& [then, o] = snaps_.front();
  // Half a window at least, or the rate is a few packets' noise.
  if (now_ns - then < kWindowNs / 2) return 0;
  CongestionReport r;
  r.rate_kbps = (c.bytes - o.bytes) * 8'000'000 / (now_ns - then);
  const uint64_t n = c.delay_n - o.delay_n;
  if (n) {
    r.has_delay = true;
    r.delay_us = static_cast<uint32_t>(std::min<uint64_t>((c.delay_sum_us - o.delay_sum_us) / n, UINT32_MAX));
  }
  return encode_report(r);
}

const char* congestion_state_name(CongestionState s) {
  const auto i = static_cast<size_t>(s);
  return i < std::size(kCongestionStateNames) ? kCongestionStateNames[i] : "?";
}

void BottleneckModel::forget_estimates() {
  btl_kbps_ = 0;
  window_.clear();
}

void BottleneckModel::set_state(CongestionState s, uint64_t now_ns) {
  if (s == state_) return;
  state_ = s;
  phase_at_ = now_ns;
}

void BottleneckModel::update(uint64_t now_ns, const std::optional<CongestionReport>& report, uint64_t at_ns) {
  const bool fresh = report && at_ns && (at_ns >= now_ns || now_ns - at_ns < kReportLifetimeNs);
  if (!fresh) {
    if (state_ != CongestionState::kNoReport && state_ != CongestionState::kLearning) ++fallbacks_;
    // Competing, the estimates are the squeezed ones.
    if (state_ == CongestionState::kCompete) forget_estimates();
    set_state(CongestionState::kNoReport, now_ns);
    last_.reset();
    squeezed_at_ = 0;
    return;
  }
  const bool new_report = at_ns != last_at_;
  last_ = report;
  last_at_ = at_ns;
  if (state_ == CongestionState::kCompete) {
    if (now_ns - phase_at_ < kCompeteNs) return;
    // The cross traffic may have gone.
    forget_estimates();
    set_state(CongestionState::kLearning, now_ns);
  }
  if (state_ == CongestionState::kNoReport) set_state(CongestionState::kLearning, now_ns);

  const CongestionReport& r = *report;
  const bool queue = r.has_delay && r.delay_us >= kQueueUs;
  if (new_report && r.rate_kbps) {
    if (queue && state_ == CongestionState::kProbe) {
      // The probe filled the pipe: what came out is its rate, or more.
      btl_kbps_ = std::max(btl_kbps_, r.rate_kbps);
      btl_at_ = now_ns;
    } else if (queue) {
      // A queue outside a probe: the pipe is full at what came out of it,
      // less than the estimate when cross traffic took a share; and the
      // queue drains only below that rate.
      if (btl_kbps_ && r.rate_kbps < btl_kbps_) ++resets_;
      btl_kbps_ = r.rate_kbps;
      btl_at_ = now_ns;
      if (state_ == CongestionState::kCruise) set_state(CongestionState::kDrain, now_ns);
    } else if (btl_kbps_ && r.rate_kbps > btl_kbps_) {
      // More got through than the estimate said, without a queue.
      btl_kbps_ = r.rate_kbps;
      btl_at_ = now_ns;
    }
  }
  if (btl_kbps_ && now_ns - btl_at_ > kBandwidthWindowNs) btl_kbps_ = 0;  // nothing confirmed it
  if (!btl_kbps_) {
    set_state(CongestionState::kLearning, now_ns);
    return;
  }
  while (!window_.empty() && window_.back().second <= btl_kbps_) window_.pop_back();
  window_.emplace_back(now_ns, btl_kbps_);
  while (now_ns - window_.front().first > kBandwidthWindowNs) window_.pop_front();
  // Drained to under half of what the pipe gave, and the queue stands:
  // once that lasts, it is cross traffic's.
  if (!queue || state_ == CongestionState::kProbe ||
      static_cast<double>(btl_kbps_) >= kCompeteFraction * static_cast<double>(window_.front().second))
    squeezed_at_ = 0;
  else if (!squeezed_at_)
    squeezed_at_ = now_ns;
  if (squeezed_at_ && now_ns - squeezed_at_ >= kCompeteAfterNs) {
    squeezed_at_ = 0;
    ++competes_;
    set_state(CongestionState::kCompete, now_ns);
    return;
  }
  switch (state_) {
    case CongestionState::kNoReport:
    case CongestionState::kLearning:
      set_state(CongestionState::kCruise, now_ns);
      probe_at_ = now_ns;
      break;
    case CongestionState::kCruise:
      if (now_ns - probe_at_ >= kProbeEveryNs) {
        set_state(CongestionState::kProbe, now_ns);
        probe_at_ = now_ns;
        ++probes_;
      }
      break;
    case CongestionState::kProbe:
      if (now_ns - phase_at_ >= kPhaseNs) set_state(CongestionState::kDrain, now_ns);
      break;
    case CongestionState::kDrain:
      if (now_ns - phase_at_ >= kPhaseNs) set_state(CongestionState::kCruise, now_ns);
      break;
    case CongestionState::kCompete:  // handled above
      break;
  }
}

uint64_t BottleneckModel::rate_kbps() const {
  double gain = 0;
  switch (state_) {
    case CongestionState::kCruise: gain = kCruiseGain; break;
    case CongestionState::kProbe: gain = kProbeGain; break;
    case CongestionState::kDrain: gain = kDrainGain; break;
    default: return 0;
  }
  return std::max<uint64_t>(1, static_cast<uint64_t>(static_cast<double>(btl_kbps_) * gain));
}

CongestionLoop::CongestionLoop(const Config& cfg, const std::vector<uint32_t>& slots, int cc_fd, int rx_fd,
                               int stats_fd)
    : cc_fd_(cc_fd), rx_fd_(rx_fd), stats_fd_(stats_fd), signal_(cfg.congestion_signal) {
  for (size_t i = 0; i < cfg.peers.size() && i < slots.size(); ++i) {
    if (slots[i] >= RG_MAX_PEERS) continue;
    peers_.push_back(Peer{.name = cfg.peers[i].name, .slot = slots[i], .meter = {}, .model = {}, .sent = 0});
  }
  // Whatever a previous process left is not this one's decision.
  for (const Peer& p : peers_) write_cc(p, 0);
}

void CongestionLoop::write_cc(const Peer& p, uint64_t until_ns) const {
  rg_peer_cc v{};
  v.until_ns = until_ns;
  v.report = p.sent;
  if (const uint64_t rate = p.model.rate_kbps())
    v.ps_per_byte = static_cast<uint32_t>(std::clamp<uint64_t>(8'000'000'000ull / rate, 1, UINT32_MAX));
  v.mark_min_ns = kMarkMinNs;
  v.mark_max_ns = kMarkMaxNs;
  v.mark_scale = static_cast<uint32_t>((1ull << 32) / (kMarkMaxNs - kMarkMinNs));
  v.cap_ns = kPhantomCapNs;
  v.flags = signal_ | (pace_ ? RG_CC_F_PACE : 0);
  v.cnp_gap_ns = kCnpGapNs;
  if (bpf_map_update_elem(cc_fd_, &p.slot, &v, BPF_ANY) != 0)
    spdlog::warn("cannot write {}[{}]: {}", kMapPeerCc, p.slot, errno_text(errno));
}

void CongestionLoop::tick(uint64_t now_ns) {
  if (last_ns_ && now_ns - last_ns_ < kCongestionTickNs) return;
  last_ns_ = now_ns;
  const int ncpu = std::max(libbpf_num_possible_cpus(), 1);
  std::vector<rg_peer_rx> rx(static_cast<size_t>(ncpu));
  std::vector<rg_peer_stats> stats(static_cast<size_t>(ncpu));
  for (Peer& p : peers_) {
    ArrivalCounts counts;
    std::optional<CongestionReport> report;
    uint64_t report_at = 0;
    if (bpf_map_lookup_elem(stats_fd_, &p.slot, stats.data()) == 0)
      for (const auto& s : stats)
        counts.bytes += s.ev[RG_PEER_EV_DECAPSULATED].bytes + s.ev[RG_PEER_EV_SHIELD_ELIMINATED].bytes;
    if (bpf_map_lookup_elem(rx_fd_, &p.slot, rx.data()) == 0) {
      uint32_t word = 0;
      for (const auto& r : rx) {
        counts.delay_n += r.delay_n;
        counts.delay_sum_us += r.delay_sum_us;
        if (r.report_at_ns > report_at) {
          report_at = r.report_at_ns;
          word = r.report;
        }
      }
      report = decode_report(word);
    }
    p.sent = p.meter.update(now_ns, counts);
    const CongestionState before = p.model.state();
    p.model.update(now_ns, report, report_at);
    if ((before == CongestionState::kLearning || before == CongestionState::kNoReport) !=
        (p.model.state() == CongestionState::kLearning || p.model.state() == CongestionState::kNoReport))
      spdlog::info("peer {}: congestion loop {} (bottleneck {:.1f} Mbit/s)", p.name,
                   congestion_state_name(p.model.state()), static_cast<double>(p.model.bottleneck_kbps()) / 1000);
    write_cc(p, now_ns + kCcLifetimeNs);
  }
}

std::vector<CongestionPeer> CongestionLoop::peers() const {
  std::vector<CongestionPeer> out;
  for (const Peer& p : peers_) {
    CongestionPeer c;
    c.name = p.name;
    c.state = congestion_state_name(p.model.state());
    c.bottleneck_kbps = p.model.bottleneck_kbps();
    c.rate_kbps = p.model.rate_kbps();
    if (const auto& r = p.model.report()) {
      c.reported = true;
      c.reported_rate_kbps = r->rate_kbps;
      c.reported_has_delay = r->has_delay;
      c.reported_delay_us = r->delay_us;
    }
    if (const auto s = decode_report(p.sent)) {
      c.sent_rate_kbps = s->rate_kbps;
      c.sent_has_delay = s->has_delay;
      c.sent_delay_us = s->delay_us;
    }
    c.fallbacks = p.model.fallbacks();
    c.probes = p.model.probes();
    c.resets = p.model.resets();
    c.competes = p.model.competes();
    out.push_back(c);
  }
  return out;
}

}  // namespace rg
