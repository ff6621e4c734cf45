// The NIC retransmit/QoS profile ([nic] table of the config file, or flags).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <toml++/toml.h>

#include "roceguard/roceguard.h"

namespace rg::nic {

// IBA local ACK timeout: 4.096 us * 2^t. t = 0 means "wait forever" and is
// never produced from a duration.
inline constexpr double kAckTimeoutUnitUs = 4.096;
inline constexpr int kAckTimeoutMinExp = 1;
inline constexpr int kAckTimeoutMaxExp = 31;

struct AckTimeout {
  uint8_t exponent = 0;
  double effective_us = 0;  // 4.096 us * 2^exponent
};

// "500us", "8ms", "1.5s", "250000ns" -> microseconds. nullopt (and *why set)
// when the text is not a positive duration with a unit.
std::optional<double> parse_duration_us(std::string_view text, std::string* why = nullptr);
// Smallest t in 1..31 with 4.096 us * 2^t >= us: the device waits at least
// what was asked. nullopt (and *why) when us is beyond 4.096 us * 2^31.
std::optional<AckTimeout> ack_timeout_from_us(double us, std::string* why = nullptr);
double ack_timeout_us(uint8_t exponent);
// "524.288us", "8.389ms", "2.199s": the shortest exact-enough rendering.
std::string format_us(double us);
// The ACK timeout a path's round trip calls for (docs/design.md section 10).
// A timeout fits a round trip when it is at least kAckTimeoutRttFactor times
// the round trip and at least the round trip plus kAckTimeoutAllowanceUs:
// the factor covers queues that grow under load beyond the delay measured
// (and the one-way figure taken twice for a path that is not symmetric); the
// allowance what a round trip measured between the gateways leaves out, the
// two LAN legs, the responder's ACK coalescing and its host's scheduling
// (software RoCE acknowledges from the kernel), which on a short path is
// more than the path itself. A timeout that is too short costs a resend and
// one of retry_cnt's tries for every ACK it misses: retry_cnt + 1 in a row
// kill the QP. One too long only delays recovering a lost tail that no NAK
// reports.
inline constexpr double kAckTimeoutRttFactor = 4;
inline constexpr double kAckTimeoutAllowanceUs = 1000;
// The shortest timeout that fits a round trip of rtt_us.
double ack_timeout_floor_us(double rtt_us);
// The smallest t whose timeout fits a round trip of rtt_us. nullopt (and
// *why) when even t = 31 is too short.
std::optional<AckTimeout> ack_timeout_for_rtt(double rtt_us, std::string* why = nullptr);

// IBA RNR NAK timer table (o9-7): code 0..31 -> milliseconds (0 = 655.36).
double min_rnr_timer_ms(uint8_t code);

struct Profile {
  std::string ack_timeout_text = "67ms";
  AckTimeout ack_timeout{14, 67108.864};
  uint8_t retry_cnt = 7;      // 0..7; 7 is a count, not "infinite"
  uint8_t rnr_retry = 7;      // 0..7; 7 = retry forever
  uint8_t min_rnr_timer = 12; // IBA code, 12 = 0.64 ms
  uint8_t dscp = RG_DEFAULT_DSCP;
  uint8_t cnp_dscp = RG_DEFAULT_CNP_DSCP;
  uint8_t ecn = 0;            // ECN bits of the ToS byte the application sets
  std::optional<int> gid_index;        // overrides discovery for `nic env`
  std::vector<std::string> interfaces; // netdevs whose RDMA devices are managed

  // The whole IPv4 ToS / IPv6 traffic class byte: what NCCL_IB_TC,
  // default_roce_tos and the GRH traffic_class take.
  uint8_t tos() const { return static_cast<uint8_t>(dscp << 2 | ecn); }
};

// One setting as written in TOML or on the command line.
using Value = std::variant<int64_t, std::string, std::vector<std::string>>;

// Sets key (as named in the [nic] table) from value; returns the reason when
// the value is rejected ("nic.<key>: ..."), nothing when accepted.
std::optional<std::string> set(Profile& p, std::string_view key, const Value& value);

// The [nic] table's values on top of p; one message per problem, each
// naming its key. The one reader of the table's keys.
std::vector<std::string> read_table(Profile& p, const toml::table& nic);

// Validates a [nic] table; returns one message per problem, each naming the
// key (`nic.ack_timeout: ...`). Empty when valid.
std::vector<std::string> validate_nic_table(const toml::table& nic);

// Profile from a [nic] table; throws rg::Error (kExitUsage) listing every
// problem.
Profile profile_from_table(const toml::table& nic);

// The warning when p's ACK timeout is shorter than what a round trip of
// rtt_us calls for, naming the configured value and exponent, the round trip
// and the exponent and value that fit it; nothing when p's timeout fits.
std::optional<std::string> ack_timeout_below_path(const Profile& p, double rtt_us);

// Human-readable summary, one setting per line, with effective values.
std::vector<std::string> describe(const Profile& p);

}  // namespace rg::nic
