// The loader's configuration: the TOML file (toml++), defaults, and the
// command-line flags that override it. Parsing never touches the system;
// check_host() is the one place that looks at this machine.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "roceguard/roceguard.h"

namespace rg {

// TC filter identity: detach removes exactly this handle/priority on clsact
// egress. The priority is low so roceguard re-marks before most other
// egress filters; both are configurable when they collide with another tool.
inline constexpr uint32_t kDefaultTcHandle = 0x52;
inline constexpr uint32_t kDefaultTcPriority = 0x52;

inline constexpr uint32_t kMaxVni = 0xffffff;
inline constexpr uint32_t kMinQpEntries = 256;
inline constexpr uint32_t kMaxQpEntries = 1u << 24;
inline constexpr uint32_t kMinMtuV4 = 576;   // RFC 791 minimum reassembly size
inline constexpr uint32_t kMinMtuV6 = 1280;  // RFC 8200 §5
inline constexpr uint32_t kMaxMtu = 65535;

struct Address {
  int family = 0;  // AF_INET or AF_INET6
  std::array<uint8_t, 16> bytes{};
  std::string text;
};

struct Prefix {
  Address addr;
  uint8_t len = 0;
  std::string text;
};

struct PeerConfig {
  std::string name;
  Address local;
  Address remote;
  uint32_t vni = 0;
  uint32_t mtu = RG_DEFAULT_TUNNEL_MTU;
  std::vector<Prefix> routes;
};

enum class XdpMode { kNative, kSkb };

struct Config {
  std::vector<std::string> interfaces;

  // [dataplane]
  uint32_t dscp = RG_DEFAULT_DSCP;
  uint32_t cnp_dscp = RG_DEFAULT_CNP_DSCP;
  uint32_t outer_ttl = RG_DEFAULT_OUTER_TTL;
  bool accounting = true;
  bool remark = true;
  bool repair = true;
  uint32_t qp_entries = RG_DEFAULT_QP_ENTRIES;
  uint32_t tc_handle = kDefaultTcHandle;
  uint32_t tc_priority = kDefaultTcPriority;
  XdpMode xdp_mode = XdpMode::kNative;

  // [tunnel]
  uint32_t tunnel_mtu = RG_DEFAULT_TUNNEL_MTU;
  rg_mtu_policy mtu_policy = RG_MTU_PASS;
  std::vector<PeerConfig> peers;

  // [metrics]
  std::string metrics_listen = "127.0.0.1:9741";
  bool per_qp = false;
  uint32_t top_qps = 50;

  // [nic], validated by rg::nic::validate_nic_table and kept for the NIC half.
  std::optional<toml::table> nic;

  // Read-only global of the BPF object.
  rg_config rodata() const;
  // Canonical form: what `status` shows and what the state hash covers.
  nlohmann::json to_json() const;
  std::string hash() const;
};

// Flags of run/attach; unset ones leave the file (or default) value.
struct ConfigOverrides {
  std::vector<std::string> interfaces;
  std::optional<uint32_t> dscp;
  std::optional<uint32_t> cnp_dscp;
  std::optional<uint32_t> qp_entries;
  std::optional<std::string> mtu_policy;
  std::optional<std::string> metrics_listen;
  std::optional<uint32_t> tc_handle;
  std::optional<uint32_t> tc_priority;
  std::optional<std::string> xdp_mode;
};

// Every problem found, each naming its key: "tunnel.peer[1].vni: ...".
struct ConfigProblems {
  std::vector<std::string> errors;
  std::vector<std::string> warnings;
  bool ok() const { return errors.empty(); }
};

// Parses and validates a document; never throws for content problems.
Config parse_config(const toml::table& doc, ConfigProblems& problems);
// Reads a file; syntax errors are reported as "<file>:<line>:<col>: ...".
Config parse_config_file(const std::string& path, ConfigProblems& problems);
Config parse_config_string(std::string_view text, ConfigProblems& problems);
// Applies flags on top of cfg with the same checks as the file.
void apply_overrides(Config& cfg, const ConfigOverrides& ov, ConfigProblems& problems);
// Problems only this machine can show: interfaces that do not exist.
void check_host(const Config& cfg, ConfigProblems& problems);

// Loads file (optional) + overrides; throws rg::Error(kExitUsage) listing
// every problem. Used by run and attach.
Config load_config(const std::string& file, const ConfigOverrides& ov);

std::optional<Address> parse_address(const std::string& text);
std::optional<Prefix> parse_prefix(const std::string& text, std::string& why);

}  // namespace rg
