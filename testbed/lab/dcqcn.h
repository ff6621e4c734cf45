// DCQCN (Zhu et al., SIGCOMM 2015) as a ConnectX NIC runs it, for the
// generator: the reaction point of one QP (DcqcnRp, a pure state machine
// driven by the caller's clock) and the settings of both ends by their mlx5
// names (/sys/class/net/<if>/ecn/roce_rp/* and roce_np/*) with mlx5's
// defaults. The choices where the vendor's documentation is silent are
// stated at each field and in testbed/README.md, "Congestion control".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace rg::lab {

struct DcqcnSettings {
  // roce_rp: the reaction point (the requester).
  // Target rate := current rate at every cut (1), or only when the rate was
  // raised since the last cut: by the byte counter always, by the timer when
  // clamp_tgt_rate_after_time_inc is 1 (mlx5's default). Without a clamp
  // the target stays where it was, above the rate, and recovery returns there.
  uint32_t clamp_tgt_rate = 0;
  uint32_t clamp_tgt_rate_after_time_inc = 1;
  uint32_t dce_tcp_g = 1019;               // g, in 1/1024: alpha's gain
  uint32_t dce_tcp_rtt = 1;                // us between alpha updates
  uint32_t initial_alpha_value = 1023;     // alpha at the first CNP, in 1/1024
  uint32_t rate_reduce_monitor_period = 4; // us between cuts (at most one cut per period with a CNP)
  uint32_t rate_to_set_on_first_cnp = 0;   // Mb/s when the limiter is allocated; 0: the line rate
  uint32_t rpg_ai_rate = 5;                // Mb/s added to the target per additive increase
  // Bytes sent between byte-counter increases, in units of 64 bytes (not
  // documented by the vendor): 32767 is 2 MiB, 168 us at 100 Gb/s, so the
  // byte counter and the 300 us timer pace recovery alike; in bytes it
  // would fire every 2.6 us and recover from a 50 % cut in some 20 us,
  // where ConnectX takes milliseconds.
  uint32_t rpg_byte_reset = 32767;
  uint32_t rpg_gd = 11;                    // cut = rate * alpha >> rpg_gd (11: alpha / 2)
  uint32_t rpg_hai_rate = 50;              // Mb/s added to the target per hyper increase
  uint32_t rpg_max_rate = 0;               // Mb/s ceiling; 0: the line rate
  // A cut leaves at least this percentage of the rate (rate -= min(rate *
  // alpha >> rpg_gd, rate * (100 - rpg_min_dec_fac) / 100)): 50 allows
  // halving, 95 at most 5 % per cut.
  uint32_t rpg_min_dec_fac = 50;
  uint32_t rpg_min_rate = 1;               // Mb/s floor of a cut
  uint32_t rpg_threshold = 1;              // increase stages of fast recovery
  uint32_t rpg_time_reset = 300;           // us between timer increases
  // roce_np: the notification point (the responder).
  uint32_t min_time_between_cnps = 4;      // us: at most one CNP per QP per this
};

// "KEY=VALUE[,KEY=VALUE...]" into s, keys by their mlx5 names, values
// integers in each key's range; "" when done, else why (the first bad
// pair), s then unchanged.
std::string apply_dcqcn_settings(std::string_view text, DcqcnSettings& s);
// The same, throwing rg::Error (kExitUsage) "--dcqcn: <why>".
DcqcnSettings parse_dcqcn_settings(const std::vector<std::string>& texts);
// Every key with its value in s, "clamp_tgt_rate=0,...", in the table's order.
std::string dcqcn_settings_text(const DcqcnSettings& s);
// The keys that differ from mlx5's defaults, "rpg_time_reset=5000,...", or "".
std::string dcqcn_changed_text(const DcqcnSettings& s);
// {"clamp_tgt_rate": 0, ...}: every key, for the lab's counters.json.
nlohmann::json to_json(const DcqcnSettings& s);

// How the requester reacts to congestion: "dcqcn" / "none".
enum class CongestionControl { kNone, kDcqcn };
bool parse_congestion_control(std::string_view text, CongestionControl* cc);
const char* congestion_control_name(CongestionControl cc);

struct DcqcnCounters {
  uint64_t cnps = 0;
  uint64_t limiter_allocations = 0;  // first CNPs: from the line rate to a rate limiter
  uint64_t limiter_releases = 0;     // back to the line rate, limiter freed
  uint64_t cuts = 0;
  uint64_t fast_recovery = 0;        // increases, by kind
  uint64_t additive = 0;
  uint64_t hyper = 0;
};

// The reaction point of one QP. Rates in kbit/s, times in microseconds of
// the caller's clock, which must not go backwards. Nothing runs by itself:
// each call first advances the timers to now, in time order (at one
// instant: alpha's update, then the cut, then the timer's increase, which
// a cut at that instant restarts instead), so a trajectory is a function
// of the calls alone.
//
// Without a limiter the QP sends at the line rate. The first CNP allocates
// one: rate and target := rate_to_set_on_first_cnp (or the ceiling),
// alpha := initial_alpha_value, and the timers start from that instant;
// that CNP counts for alpha's first period and for the first cut like any
// other. Every dce_tcp_rtt: alpha := g * alpha / 1024, + 1024 - g when a
// CNP arrived in the period (at most 1023). Every
// rate_reduce_monitor_period in which a CNP arrived: the clamp (above),
// rate -= min(rate * alpha >> rpg_gd, rate * (100 - rpg_min_dec_fac) /
// 100), at least rpg_min_rate; the increase stages, the byte counter and
// the timer restart. An increase, every rpg_time_reset since the last cut
// (timer stage T) or every rpg_byte_reset * 64 bytes sent since it (byte
// stage B): hyper (target += rpg_hai_rate) when min(T, B) > rpg_threshold,
// additive (target += rpg_ai_rate) when max(T, B) >= rpg_threshold, else
// fast recovery (target kept); target at most the ceiling; then rate :=
// (rate + target) / 2 rounded up, so the rate reaches the target rather
// than stalling a kbit/s below it; then the stage counts. When rate and
// target reach the ceiling the limiter is released: the next CNP is a
// first CNP again.
class DcqcnRp {
 public:
  DcqcnRp(const DcqcnSettings& s, uint64_t line_kbps);

  void on_cnp(uint64_t now_us);
  void on_bytes_sent(uint64_t bytes, uint64_t now_us);
  void advance(uint64_t now_us);

  bool limited() const { return limited_; }
  uint64_t rate_kbps() const { return rate_; }
  uint64_t target_kbps() const { return target_; }
  uint32_t alpha() const { return alpha_; }
  uint64_t max_kbps() const { return max_; }
  uint64_t lowest_kbps() const { return lowest_; }  // the lowest a cut left, 0 before any
  unsigned timer_stage() const { return timer_stage_; }
  unsigned byte_stage() const { return byte_stage_; }
  const DcqcnCounters& counters() const { return counters_; }

 private:
  void alpha_update();
  void cut(uint64_t at_us);
  void increase();

  DcqcnSettings s_;
  uint64_t max_ = 0;        // the ceiling: rpg_max_rate or the line rate
  uint64_t min_ = 0;        // rpg_min_rate
  uint64_t first_ = 0;      // rate_to_set_on_first_cnp or the ceiling
  bool limited_ = false;
  uint64_t rate_ = 0, target_ = 0;
  uint32_t alpha_ = 0;
  bool cnp_for_alpha_ = false, cnp_for_cut_ = false;
  uint64_t next_alpha_ = 0, next_cut_ = 0, next_increase_ = 0;
  unsigned timer_stage_ = 0, byte_stage_ = 0;
  uint64_t byte_count_ = 0;
  uint64_t now_ = 0;
  uint64_t lowest_ = 0;
  DcqcnCounters counters_;
};

}  // namespace rg::lab
