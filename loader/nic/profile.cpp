#include "nic/profile.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "common/error.h"

namespace rg::nic {

namespace {

constexpr std::array<std::string_view, 9> kKeys{
    "ack_timeout", "retry_cnt", "rnr_retry", "min_rnr_timer", "dscp",
    "cnp_dscp",    "ecn",       "gid_index", "interfaces"};

// Milliseconds of the IBA RNR NAK timer codes (IBA 1.4, table 45).
constexpr std::array<double, 32> kRnrTimerMs{
    655.36, 0.01,  0.02,  0.03,  0.04,  0.06,  0.08,   0.12,   0.16,   0.24,  0.32,
    0.48,   0.64,  0.96,  1.28,  1.92,  2.56,  3.84,   5.12,   7.68,   10.24, 15.36,
    20.48,  30.72, 40.96, 61.44, 81.92, 122.88, 163.84, 245.76, 327.68, 491.52};

std::string key_msg(std::string_view key, const std::string& what) {
  return "nic." + std::string(key) + ": " + what;
}

std::optional<std::string> int_in(std::string_view key, const Value& v, int64_t lo, int64_t hi,
                                  uint8_t& out, const char* meaning) {
  const int64_t* n = std::get_if<int64_t>(&v);
  if (!n) return key_msg(key, "must be an integer " + std::to_string(lo) + ".." + std::to_string(hi));
  if (*n < lo || *n > hi)
    return key_msg(key, std::to_string(*n) + " is out of range " + std::to_string(lo) + ".." +
                            std::to_string(hi) + " (" + meaning + ")");
  out = static_cast<uint8_t>(*n);
  return std::nullopt;
}

}  // namespace

std::optional<double> parse_duration_us(std::string_view text, std::string* why) {
  auto fail = [&](const std::string& w) -> std::optional<double> {
    if (why) *why = w;
    return std::nullopt;
  };
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    i++;
  if (i == 0) return fail("\"" + std::string(text) + "\" is not a duration (e.g. 500us, 8ms)");
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + i, v);
  if (ec != std::errc() || end != text.data() + i)
    return fail("\"" + std::string(text) + "\" is not a number followed by a unit");
  std::string_view unit = text.substr(i);
  double scale;
  if (unit == "ns")
    scale = 1e-3;
  else if (unit == "us" || unit == "µs")
    scale = 1;
  else if (unit == "ms")
    scale = 1e3;
  else if (unit == "s")
    scale = 1e6;
  else if (unit.empty())
    return fail("\"" + std::string(text) + "\" has no unit (ns, us, ms or s)");
  else
    return fail("unknown unit \"" + std::string(unit) + "\" (ns, us, ms or s)");
  if (v <= 0) return fail("must be positive (0 would mean \"never time out\")");
  return v * scale;
}

double ack_timeout_us(uint8_t exponent) { return kAckTimeoutUnitUs * std::ldexp(1.0, exponent); }

std::optional<AckTimeout> ack_timeout_from_us(double us, std::string* why) {
  for (int t = kAckTimeoutMinExp; t <= kAckTimeoutMaxExp; t++) {
    // A tolerance of one part in 1e9 so "524.288us" maps to its own t.
    if (ack_timeout_us(t) >= us * (1 - 1e-9))
      return AckTimeout{static_cast<uint8_t>(t), ack_timeout_us(t)};
  }
  if (why)
    *why = format_us(us) + " is longer than the largest local ACK timeout, " +
           format_us(ack_timeout_us(kAckTimeoutMaxExp)) + " (t = 31)";
  return std::nullopt;
}

double ack_timeout_floor_us(double rtt_us) {
  return std::max(kAckTimeoutRttFactor * rtt_us, rtt_us + kAckTimeoutAllowanceUs);
}

std::optional<AckTimeout> ack_timeout_for_rtt(double rtt_us, std::string* why) {
  std::string reason;
  auto t = ack_timeout_from_us(ack_timeout_floor_us(rtt_us), &reason);
  if (!t && why)
    *why = "a " + format_us(rtt_us) + " round trip needs a timeout of " + format_us(ack_timeout_floor_us(rtt_us)) +
           ": " + reason;
  return t;
}

std::string format_us(double us) {
  char buf[64];
  auto fmt = [&](double v, const char* unit) {
    std::snprintf(buf, sizeof(buf), "%.3f", v);
    std::string s(buf);
    while (!s.empty() && s.back() == '0') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s + unit;
  };
  if (us < 1000) return fmt(us, "us");
  if (us < 1e6) return fmt(us / 1e3, "ms");
  return fmt(us / 1e6, "s");
}

double min_rnr_timer_ms(uint8_t code) { return kRnrTimerMs[code & 31]; }

std::optional<std::string> set(Profile& p, std::string_view key, const Value& v) {
  if (key == "ack_timeout") {
    const std::string* s = std::get_if<std::string>(&v);
    if (!s) return key_msg(key, "must be a duration string such as \"500us\" or \"8ms\"");
    std::string why;
    auto us = parse_duration_us(*s, &why);
    if (!us) return key_msg(key, why);
    auto t = ack_timeout_from_us(*us, &why);
    if (!t) return key_msg(key, why);
    p.ack_timeout_text = *s;
    p.ack_timeout = *t;
    return std::nullopt;
  }
  if (key == "retry_cnt")
    return int_in(key, v, 0, 7, p.retry_cnt, "a 3-bit count; 7 is seven retries, not infinite");
  if (key == "rnr_retry")
    return int_in(key, v, 0, 7, p.rnr_retry, "7 = retry forever");
  if (key == "min_rnr_timer")
    return int_in(key, v, 0, 31, p.min_rnr_timer, "IBA RNR timer code, 12 = 0.64 ms");
  if (key == "dscp") return int_in(key, v, 0, 63, p.dscp, "6-bit DSCP");
  if (key == "cnp_dscp") return int_in(key, v, 0, 63, p.cnp_dscp, "6-bit DSCP");
  if (key == "ecn") {
    if (auto err = int_in(key, v, 0, 2, p.ecn, "0 Not-ECT, 1 ECT(1), 2 ECT(0)")) {
      if (const int64_t* n = std::get_if<int64_t>(&v); n && *n == 3)
        return key_msg(key, "3 is CE: a sender must never mark its own packets as congested");
      return err;
    }
    return std::nullopt;
  }
  if (key == "gid_index") {
    uint8_t g = 0;
    if (auto err = int_in(key, v, 0, 255, g, "GID table index")) return err;
    p.gid_index = g;
    return std::nullopt;
  }
  if (key == "interfaces") {
    const auto* list = std::get_if<std::vector<std::string>>(&v);
    if (!list) return key_msg(key, "must be an array of interface names");
    for (const auto& name : *list)
      if (name.empty() || name.size() >= 16 || name.find('/') != std::string::npos)
        return key_msg(key, "\"" + name + "\" is not a valid interface name");
    p.interfaces = *list;
    return std::nullopt;
  }
  std::string known;
  for (auto k : kKeys) {
    known += known.empty() ? "" : ", ";
    known += k;
  }
  return key_msg(key, "unknown key (known: " + known + ")");
}

namespace {

std::string type_name(toml::node_type t) {
  switch (t) {
    case toml::node_type::table: return "table";
    case toml::node_type::array: return "array";
    case toml::node_type::string: return "string";
    case toml::node_type::integer: return "integer";
    case toml::node_type::floating_point: return "float";
    case toml::node_type::boolean: return "boolean";
    default: return "date/time";
  }
}

}  // namespace

std::optional<std::string> ack_timeout_below_path(const Profile& p, double rtt_us) {
  const auto need = ack_timeout_for_rtt(rtt_us);
  if (need && p.ack_timeout.exponent >= need->exponent) return std::nullopt;
  std::string msg = "nic.ack_timeout " + p.ack_timeout_text + " (exponent " +
                    std::to_string(p.ack_timeout.exponent) + ", " + format_us(p.ack_timeout.effective_us) +
                    ") is too short for a " + format_us(rtt_us) + " round trip: ";
  if (need)
    msg += "it takes exponent " + std::to_string(need->exponent) + " (" + format_us(need->effective_us) +
           ") or more";
  else
    msg += "no local ACK timeout fits it, the longest is exponent " + std::to_string(kAckTimeoutMaxExp) + " (" +
           format_us(ack_timeout_us(kAckTimeoutMaxExp)) + ")";
  return msg + "; with less, ACKs come after the timer and the sender resends what was not lost";
}

std::vector<std::string> read_table(Profile& p, const toml::table& nic) {
  std::vector<std::string> errors;
  for (const auto& [k, node] : nic) {
    Value v;
    if (auto i = node.value_exact<int64_t>())
      v = *i;
    else if (auto s = node.value_exact<std::string>())
      v = *s;
    else if (const toml::array* a = node.as_array()) {
      std::vector<std::string> names;
      bool ok = true;
      for (const auto& e : *a) {
        if (auto s = e.value_exact<std::string>())
          names.push_back(*s);
        else
          ok = false;
      }
      if (!ok) {
        errors.push_back(key_msg(k.str(), "array elements must be strings"));
        continue;
      }
      v = names;
    } else {
      // A float, bool, date or table: name the type rather than guess.
      errors.push_back(key_msg(k.str(), "has the wrong type (" + type_name(node.type()) + ")"));
      continue;
    }
    if (auto err = set(p, k.str(), v)) errors.push_back(*err);
  }
  return errors;
}

std::vector<std::string> validate_nic_table(const toml::table& nic) {
  Profile p;
  return read_table(p, nic);
}

Profile profile_from_table(const toml::table& nic) {
  Profile p;
  auto errors = read_table(p, nic);
  if (!errors.empty()) {
    std::string msg = "invalid [nic] table:";
    for (const auto& e : errors) msg += "\n  " + e;
    throw Error(msg, kExitUsage);
  }
  return p;
}

std::vector<std::string> describe(const Profile& p) {
  char buf[160];
  std::vector<std::string> out;
  std::snprintf(buf, sizeof(buf), "ack_timeout    %s -> t = %u (effective %s)",
                p.ack_timeout_text.c_str(), p.ack_timeout.exponent,
                format_us(p.ack_timeout.effective_us).c_str());
  out.emplace_back(buf);
  std::snprintf(buf, sizeof(buf), "retry_cnt      %u (fails after %u x %s = %s without an ACK)",
                p.retry_cnt, p.retry_cnt + 1, format_us(p.ack_timeout.effective_us).c_str(),
                format_us(p.ack_timeout.effective_us * (p.retry_cnt + 1)).c_str());
  out.emplace_back(buf);
  std::snprintf(buf, sizeof(buf), "rnr_retry      %u%s", p.rnr_retry,
                p.rnr_retry == 7 ? " (infinite)" : "");
  out.emplace_back(buf);
  std::snprintf(buf, sizeof(buf), "min_rnr_timer  %u (%.2f ms)", p.min_rnr_timer,
                min_rnr_timer_ms(p.min_rnr_timer));
  out.emplace_back(buf);
  std::snprintf(buf, sizeof(buf), "dscp           %u, ecn %u -> ToS/traffic class %u", p.dscp,
                p.ecn, p.tos());
  out.emplace_back(buf);
  std::snprintf(buf, sizeof(buf), "cnp_dscp       %u", p.cnp_dscp);
  out.emplace_back(buf);
  return out;
}

}  // namespace rg::nic
