// libFuzzer target: arbitrary text through the loader's config parser
// (TOML -> validated Config). It must not crash, throw or hang; every
// rejection names the key it is about (or the line and column of a syntax
// error); whatever it accepts is within the documented ranges, and parsing
// the same text twice gives the same configuration.
#include <sys/socket.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/text.h"
#include "config/config.h"

namespace {

[[noreturn]] void violation(const std::string& why, std::string_view text) {
  std::fprintf(stderr, "\n*** invariant broken (config): %s\n--- input\n%.*s\n", why.c_str(),
               static_cast<int>(text.size()), text.data());
  std::abort();
}

bool starts_with_key(const std::string& msg, std::string_view key) {
  if (key.empty() || msg.size() <= key.size() || msg.compare(0, key.size(), key) != 0)
    return false;
  char next = msg[key.size()];
  return next == '.' || next == '[' || next == ':';
}

// "line L, column C: ..." from the TOML parser.
bool is_syntax_error(const std::string& msg) {
  unsigned line = 0, col = 0;
  int used = 0;
  return std::sscanf(msg.c_str(), "line %u, column %u: %n", &line, &col, &used) == 2 && used > 0 &&
         static_cast<size_t>(used) < msg.size();
}

void check_names_a_key(const std::string& msg, const toml::table* doc, std::string_view text) {
  if (msg.find(": ") == std::string::npos || msg.size() < msg.find(": ") + 3)
    violation("rejection without an explanation: \"" + msg + "\"", text);
  if (is_syntax_error(msg)) return;
  static constexpr std::string_view kSections[] = {"interfaces", "interface", "dataplane",
                                                   "tunnel",     "metrics",   "nic"};
  for (auto s : kSections)
    if (starts_with_key(msg, s)) return;
  // An unknown top-level key is named as it was written, quoted unless bare,
  // and as text (rg::printable: a control character shows as \xNN).
  if (doc)
    for (const auto& [k, v] : *doc) {
      const std::string key = rg::printable(k.str());
      if (starts_with_key(msg, key) || starts_with_key(msg, "\"" + key + "\"")) return;
    }
  violation("rejection does not name a key: \"" + msg + "\"", text);
}

void check_accepted(const rg::Config& c, std::string_view text) {
  auto in = [&](uint64_t v, uint64_t lo, uint64_t hi, const char* what) {
    if (v < lo || v > hi)
      violation(std::string("accepted ") + what + " = " + std::to_string(v), text);
  };
  in(c.dscp, 0, 63, "dscp");
  in(c.cnp_dscp, 0, 63, "cnp_dscp");
  in(c.outer_ttl, 1, 255, "outer_ttl");
  in(c.qp_entries, rg::kMinQpEntries, rg::kMaxQpEntries, "qp_entries");
  in(c.tunnel_mtu, rg::kMinMtuV4, rg::kMaxMtu, "tunnel.mtu");
  in(c.peers.size(), 0, RG_MAX_PEERS, "peer count");
  for (const auto& p : c.peers) {
    in(p.vni, 0, rg::kMaxVni, "peer vni");
    in(p.mtu, p.remote.family == AF_INET6 ? rg::kMinMtuV6 : rg::kMinMtuV4, rg::kMaxMtu, "peer mtu");
    if (p.local.family != p.remote.family) violation("accepted a peer mixing families", text);
    // The far gateway tells a shield's copy from a loss by its number.
    if (p.shield != rg::Shield::kOff && !c.tunnel_sequence)
      violation("accepted a shielded peer without tunnel.sequence", text);
    for (const auto& r : p.routes)
      in(r.len, 0, r.addr.family == AF_INET ? 32 : 128, "route prefix length");
  }
  const rg_config ro = c.rodata();
  in(ro.dscp, 0, 63, "rodata dscp");
  (void)c.to_json().dump();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  rg::ConfigProblems first, second;
  rg::Config a, b;
  try {
    a = rg::parse_config_string(text, first);
    b = rg::parse_config_string(text, second);
  } catch (const std::exception& e) {
    violation(std::string("parse_config_string threw: ") + e.what(), text);
  }
  std::optional<toml::table> doc;
  try {
    doc = toml::parse(text);
  } catch (const toml::parse_error&) {
  }
  for (const auto& msg : first.errors) check_names_a_key(msg, doc ? &*doc : nullptr, text);
  if (first.errors != second.errors || first.warnings != second.warnings)
    violation("two parses of the same text disagree", text);
  if (first.ok()) {
    check_accepted(a, text);
    if (a.hash() != b.hash()) violation("two parses of the same text hash differently", text);
  }
  return 0;
}
