#include "lab/dcqcn.h"

#include <algorithm>
#include <charconv>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace rg::lab {

namespace {

// The settings by their mlx5 names, with the values each takes. Ranges keep
// the arithmetic meaningful: alpha and g are fractions of 1024 below one
// (g = 1024 would never decay), a period of 0 would never end, a rate
// floor of 0 would stop a QP for good.
struct Key {
  const char* name;
  uint32_t DcqcnSettings::*field;
  uint32_t min, max;
};
constexpr uint32_t kMaxMbit = 4000000;  // 4 Tb/s
constexpr uint32_t kMaxUs = 10000000;   // 10 s
constexpr Key kKeys[] = {
    {"clamp_tgt_rate", &DcqcnSettings::clamp_tgt_rate, 0, 1},
    {"clamp_tgt_rate_after_time_inc", &DcqcnSettings::clamp_tgt_rate_after_time_inc, 0, 1},
    {"dce_tcp_g", &DcqcnSettings::dce_tcp_g, 0, 1023},
    {"dce_tcp_rtt", &DcqcnSettings::dce_tcp_rtt, 1, kMaxUs},
    {"initial_alpha_value", &DcqcnSettings::initial_alpha_value, 0, 1023},
    {"rate_reduce_monitor_period", &DcqcnSettings::rate_reduce_monitor_period, 1, kMaxUs},
    {"rate_to_set_on_first_cnp", &DcqcnSettings::rate_to_set_on_first_cnp, 0, kMaxMbit},
    {"rpg_ai_rate", &DcqcnSettings::rpg_ai_rate, 0, kMaxMbit},
    {"rpg_byte_reset", &DcqcnSettings::rpg_byte_reset, 1, 1u << 26},
    {"rpg_gd", &DcqcnSettings::rpg_gd, 0, 31},
    {"rpg_hai_rate", &DcqcnSettings::rpg_hai_rate, 0, kMaxMbit},
    {"rpg_max_rate", &DcqcnSettings::rpg_max_rate, 0, kMaxMbit},
    {"rpg_min_dec_fac", &DcqcnSettings::rpg_min_dec_fac, 0, 100},
    {"rpg_min_rate", &DcqcnSettings::rpg_min_rate, 1, kMaxMbit},
    {"rpg_threshold", &DcqcnSettings::rpg_threshold, 1, 31},
    {"rpg_time_reset", &DcqcnSettings::rpg_time_reset, 1, kMaxUs},
    {"min_time_between_cnps", &DcqcnSettings::min_time_between_cnps, 0, kMaxUs},
};

std::string key_list() {
  std::string out;
  for (const Key& k : kKeys) out += std::string(out.empty() ? "" : ", ") + k.name;
  return out;
}

std::string settings_text(const DcqcnSettings& s, bool changed_only) {
  const DcqcnSettings defaults;
  std::string out;
  for (const Key& k : kKeys) {
    if (changed_only && s.*k.field == defaults.*k.field) continue;
    out += std::string(out.empty() ? "" : ",") + k.name + "=" + std::to_string(s.*k.field);
  }
  return out;
}

}  // namespace

std::string apply_dcqcn_settings(std::string_view text, DcqcnSettings& s) {
  DcqcnSettings out = s;
  size_t at = 0;
  // Bounded: every pass consumes at least the comma it stops at.
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string_view pair = text.substr(at, comma - at);
    at = comma + 1;
    const size_t eq = pair.find('=');
    if (pair.empty()) return "an empty setting (KEY=VALUE[,KEY=VALUE...])";
    if (eq == std::string_view::npos) return "\"" + std::string(pair) + "\" is not KEY=VALUE";
    const std::string_view name = pair.substr(0, eq), value = pair.substr(eq + 1);
    const Key* key = nullptr;
    for (const Key& k : kKeys)
      if (name == k.name) key = &k;
    if (!key) return "unknown key \"" + std::string(name) + "\" (keys: " + key_list() + ")";
    uint64_t v = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
    const std::string range = std::to_string(key->min) + ".." + std::to_string(key->max);
    if (value.empty() || ec == std::errc::invalid_argument || end != value.data() + value.size())
      return std::string(pair) + ": not an integer " + range;
    if (ec == std::errc::result_out_of_range || v < key->min || v > key->max)
      return std::string(pair) + ": out of range " + range;
    out.*key->field = static_cast<uint32_t>(v);
  }
  s = out;
  return "";
}

DcqcnSettings parse_dcqcn_settings(const std::vector<std::string>& texts) {
  DcqcnSettings s;
  for (const auto& t : texts)
    if (std::string why = apply_dcqcn_settings(t, s); !why.empty()) throw Error("--dcqcn: " + why, kExitUsage);
  return s;
}

std::string dcqcn_settings_text(const DcqcnSettings& s) { return settings_text(s, false); }
std::string dcqcn_changed_text(const DcqcnSettings& s) { return settings_text(s, true); }

nlohmann::json to_json(const DcqcnSettings& s) {
  nlohmann::json j = nlohmann::json::object();
  for (const Key& k : kKeys) j[k.name] = s.*k.field;
  return j;
}

bool parse_congestion_control(std::string_view text, CongestionControl* cc) {
  if (text == "dcqcn") *cc = CongestionControl::kDcqcn;
  else if (text == "none") *cc = CongestionControl::kNone;
  else return false;
  return true;
}

const char* congestion_control_name(CongestionControl cc) {
  return cc == CongestionControl::kDcqcn ? "dcqcn" : "none";
}

// ------------------------------------------------------------ the model

DcqcnRp::DcqcnRp(const DcqcnSettings& s, uint64_t line_kbps) : s_(s) {
  max_ = std::max<uint64_t>(1, line_kbps);
  if (s_.rpg_max_rate) max_ = std::min<uint64_t>(max_, uint64_t{s_.rpg_max_rate} * 1000);
  min_ = std::min<uint64_t>(max_, uint64_t{s_.rpg_min_rate} * 1000);
  first_ = s_.rate_to_set_on_first_cnp ? std::clamp<uint64_t>(uint64_t{s_.rate_to_set_on_first_cnp} * 1000, min_, max_)
                                       : max_;
  rate_ = target_ = max_;
}

void DcqcnRp::on_cnp(uint64_t now_us) {
  advance(now_us);
  counters_.cnps++;
  if (!limited_) {
    limited_ = true;
    counters_.limiter_allocations++;
    rate_ = target_ = first_;
    alpha_ = s_.initial_alpha_value;
    timer_stage_ = byte_stage_ = 0;
    byte_count_ = 0;
    next_alpha_ = now_ + s_.dce_tcp_rtt;
    next_cut_ = now_ + s_.rate_reduce_monitor_period;
    next_increase_ = now_ + s_.rpg_time_reset;
  }
  cnp_for_alpha_ = cnp_for_cut_ = true;
}

void DcqcnRp::on_bytes_sent(uint64_t bytes, uint64_t now_us) {
  advance(now_us);
  if (!limited_) return;
  byte_count_ += bytes;
  const uint64_t unit = uint64_t{s_.rpg_byte_reset} * 64;
  // Bounded by bytes / unit; a release ends it.
  while (limited_ && byte_count_ >= unit) {
    byte_count_ -= unit;
    increase();
    byte_stage_++;
  }
}

void DcqcnRp::advance(uint64_t now_us) {
  now_ = std::max(now_, now_us);
  // Bounded: every pass moves at least one timer past an instant <= now_,
  // and stretches without a CNP, where alpha only decays and no cut can
  // come, are skipped in one step up to the next increase.
  while (limited_) {
    if (!cnp_for_alpha_ && !cnp_for_cut_) {
      const uint64_t horizon = std::min(now_, next_increase_);
      if (next_alpha_ <= horizon) {
        const uint64_t ticks = (horizon - next_alpha_) / s_.dce_tcp_rtt + 1;
        // g < 1024 takes at least 1 off a positive alpha per update: at most 1023 passes.
        for (uint64_t i = 0; i < ticks && alpha_; ++i) alpha_update();
        next_alpha_ += ticks * s_.dce_tcp_rtt;
      }
      if (next_cut_ <= horizon)
        next_cut_ += ((horizon - next_cut_) / s_.rate_reduce_monitor_period + 1) * s_.rate_reduce_monitor_period;
    }
    const uint64_t t = std::min({next_alpha_, next_cut_, next_increase_});
    if (t > now_) break;
    if (next_alpha_ == t) {
      alpha_update();
      next_alpha_ += s_.dce_tcp_rtt;
    }
    if (next_cut_ == t) {
      if (cnp_for_cut_) cut(t);
      next_cut_ += s_.rate_reduce_monitor_period;
    }
    if (next_increase_ == t) {
      increase();
      timer_stage_++;
      next_increase_ += s_.rpg_time_reset;
    }
  }
}

void DcqcnRp::alpha_update() {
  uint64_t a = uint64_t{s_.dce_tcp_g} * alpha_ / 1024;
  if (cnp_for_alpha_) a += 1024 - s_.dce_tcp_g;
  alpha_ = static_cast<uint32_t>(std::min<uint64_t>(a, 1023));
  cnp_for_alpha_ = false;
}

void DcqcnRp::cut(uint64_t at_us) {
  cnp_for_cut_ = false;
  if (s_.clamp_tgt_rate || byte_stage_ > 0 || (s_.clamp_tgt_rate_after_time_inc && timer_stage_ > 0))
    target_ = rate_;
  const uint64_t by_alpha = rate_ * alpha_ >> s_.rpg_gd;
  const uint64_t at_most = rate_ * (100 - s_.rpg_min_dec_fac) / 100;
  rate_ = std::max(min_, rate_ - std::min(by_alpha, at_most));
  lowest_ = lowest_ ? std::min(lowest_, rate_) : rate_;
  timer_stage_ = byte_stage_ = 0;
  byte_count_ = 0;
  next_increase_ = at_us + s_.rpg_time_reset;
  counters_.cuts++;
}

void DcqcnRp::increase() {
  if (std::min(timer_stage_, byte_stage_) > s_.rpg_threshold) {
    target_ += uint64_t{s_.rpg_hai_rate} * 1000;
    counters_.hyper++;
  } else if (std::max(timer_stage_, byte_stage_) >= s_.rpg_threshold) {
    target_ += uint64_t{s_.rpg_ai_rate} * 1000;
    counters_.additive++;
  } else {
    counters_.fast_recovery++;
  }
  target_ = std::min(target_, max_);
  if (rate_ < target_) rate_ += (target_ - rate_ + 1) / 2;
  else rate_ = target_;
  if (rate_ == max_) {
    limited_ = false;
    counters_.limiter_releases++;
  }
}

}  // namespace rg::lab
