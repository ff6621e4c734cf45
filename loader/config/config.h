// The loader's configuration: defaults, the TOML file (toml++), ROCEGUARD_*
// variables and command-line flags, in that order of precedence; every
// option is declared in options.cpp. Reading never touches the system:
// check_config() (cli/config_check.h) is the one validation run, attach
// and `config check` share, and the only place that looks at this machine.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "config/options.h"
#include "nic/profile.h"
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

// The loss shield towards a peer (RG_PEER_F_SHIELD_*): which packets the
// sending gateway sends twice, for the far gateway to keep the first copy.
// kAuto: off until the peer reports a raw loss at or above
// tunnel.shield_auto_loss_ppm, then all (daemon/shield_auto.h).
enum class Shield { kOff, kControl, kAll, kAuto };
// Where the shield's copy goes: kSame, the original's outer 5-tuple (copies
// back to back keep their order); kPort, another outer UDP source port
// (RG_PEER_F_SHIELD_OTHER_PORT), which the WAN's ECMP may carry on another
// path.
enum class ShieldPath { kSame, kPort };

struct PeerConfig {
  std::string name;
  Address local;
  Address remote;
  uint32_t vni = 0;
  uint32_t mtu = RG_DEFAULT_TUNNEL_MTU;
  bool mtu_given = false;  // otherwise tunnel.mtu, whichever source set it
  std::vector<Prefix> routes;
  Shield shield = Shield::kOff;
  bool shield_given = false;  // otherwise tunnel.shield, whichever source set it
  ShieldPath shield_path = ShieldPath::kSame;
  bool shield_path_given = false;  // otherwise tunnel.shield_path
  // The tunnel's keys (dataplane/tunnel_auth.h); empty: the option is not
  // authenticated. A relative path is the configuration file's directory's.
  std::string key_file;
};

enum class XdpMode { kNative, kSkb };
// Where the ingress program runs. kAuto: native XDP where the driver runs
// it before an skb exists, TC ingress where XDP would run on an skb anyway
// (veth, generic XDP) or the driver refuses native XDP.
enum class IngressHook { kAuto, kXdp, kTc };
// How the TC programs attach. kAuto: tcx where the kernel has it (Linux
// 6.6+: a link, first on its hook), a clsact filter where it does not.
enum class TcAttach { kAuto, kTcx, kClsact };

struct Config {
  std::vector<std::string> interfaces;

  // [dataplane]
  uint32_t dscp = RG_DEFAULT_DSCP;
  uint32_t cnp_dscp = RG_DEFAULT_CNP_DSCP;
  uint32_t skb_priority = 0;  // 0: the stack's own
  uint32_t outer_ttl = RG_DEFAULT_OUTER_TTL;
  bool accounting = true;
  bool remark = true;
  bool repair = true;
  uint32_t qp_entries = RG_DEFAULT_QP_ENTRIES;
  uint32_t qp_idle_ms = RG_DEFAULT_QP_IDLE_MS;
  uint32_t psn_jump_max = RG_DEFAULT_PSN_JUMP_MAX;
  uint32_t tc_handle = kDefaultTcHandle;
  uint32_t tc_priority = kDefaultTcPriority;
  XdpMode xdp_mode = XdpMode::kNative;
  IngressHook ingress_hook = IngressHook::kAuto;
  TcAttach tc_attach = TcAttach::kAuto;
  // The XDP gateway fast path: RoCE forwarded between the attached
  // interfaces from their XDP hooks (docs/design.md, "The XDP fast path").
  bool xdp_forward = false;
  // false: `run` attaches nothing and exports the NIC half only (hosts whose
  // hardware RNIC sends RoCE past TC and XDP).
  bool attach_dataplane = true;

  // [tunnel]
  uint32_t tunnel_mtu = RG_DEFAULT_TUNNEL_MTU;
  rg_mtu_policy mtu_policy = RG_MTU_PASS;
  // Off by default: its measured cost is above the 30 ns budget (design.md section 12).
  bool tunnel_sequence = false;
  uint32_t tunnel_opt_class = RG_TUNNEL_OPT_CLASS_DEFAULT;
  // The peers' loss shield unless a peer sets its own; off by default, as
  // it doubles what it shields on the WAN.
  Shield tunnel_shield = Shield::kOff;
  ShieldPath tunnel_shield_path = ShieldPath::kSame;
  // "auto" turns the shield on towards a peer whose reported raw loss
  // stays at or above this (parts per million), and off again below half.
  uint32_t shield_auto_loss_ppm = 500;
  // The congestion loop (daemon/congestion.h): off until measured on the path.
  bool tunnel_congestion = false;
  // What its phantom queues send (RG_CC_F_*): inner CE, CNPs of their own, or both.
  uint32_t congestion_signal = RG_CC_F_CNP | RG_CC_F_MARK_CE;
  // tunnel.congestion_pace "auto": TC egress stamps each frame's earliest
  // departure (RG_CC_F_PACE) while every attached interface's qdisc holds
  // packets until then (fq); "off": never.
  bool congestion_pace = true;
  std::vector<PeerConfig> peers;

  // [metrics]
  std::string metrics_listen = "127.0.0.1:9741";
  // Liveness and readiness probes (/livez, /readyz) on an address of their
  // own, apart from the scrapes; "" serves none.
  std::string health_listen;
  // Web configuration file (TLS, basic authentication) of metrics.listen,
  // in the Prometheus exporters' format; "" serves plain HTTP.
  std::string web_config;
  bool per_qp = false;
  uint32_t top_qps = 50;

  // [nic]: the RDMA NIC profile `roceguard nic` applies.
  nic::Profile nic;

  // Read-only global of the BPF object, the same for the same configuration:
  // the load's sequence epoch (tunnel_epoch) is left 0 for the loader to
  // fill in (dataplane/bpf_object.cpp).
  rg_config rodata() const;
  // Canonical form: what `status` shows and what the state hash covers.
  nlohmann::json to_json() const;
  std::string hash() const;
};

// Every problem found, each naming its key: "tunnel.peer[1].vni: ...".
struct ConfigProblems {
  std::vector<std::string> errors;
  // Named things this machine does not have (an interface): the same
  // refusal, but `run` exits with "not found" rather than "usage".
  std::vector<std::string> missing;
  // Configured interfaces that do not exist (yet): refused like `missing`,
  // except by `run`, which waits for them.
  std::vector<std::string> absent_interfaces;
  std::vector<std::string> warnings;
  bool ok() const { return errors.empty() && missing.empty() && absent_interfaces.empty(); }
};

// Parses and validates a document; never throws for content problems.
Config parse_config(const toml::table& doc, ConfigProblems& problems);
// Reads a file; syntax errors are reported as "line L, column C: ...".
Config parse_config_file(const std::string& path, ConfigProblems& problems);
Config parse_config_string(std::string_view text, ConfigProblems& problems);
// The file's values on top of cfg, without the checks across options.
void read_config_file(const std::string& path, Config& cfg, ConfigProblems& problems);
// Checks across options (unique peers, routes, MTUs a peer inherits) once
// every source is in.
void finish_config(Config& cfg, ConfigProblems& problems);

// Where a configuration comes from: defaults < file < environment < flags.
struct ConfigSources {
  std::string file;  // none when empty
  FlagValues flags;
  bool environment = true;
};
Config resolve_config(const ConfigSources& sources, ConfigProblems& problems);

// RG_PEER_F_SHIELD_* of a shield setting and its path, for rg_peer.flags.
uint8_t shield_flags(Shield s, ShieldPath path = ShieldPath::kSame);
// "off", "control", "all": as the configuration spells it.
std::string_view shield_name(Shield s);

std::optional<Address> parse_address(const std::string& text);
// Why a tunnel endpoint address cannot be one ("is a multicast address"),
// "" when it can: a Geneve tunnel runs between two unicast hosts.
std::string unusable_tunnel_endpoint(const Address& a);
std::optional<Prefix> parse_prefix(const std::string& text, std::string& why);
bool valid_ifname(const std::string& name, std::string& why);
// host:port or [v6]:port with numeric addresses.
bool valid_listen(const std::string& text, std::string& why);
// Appends one interface name, refusing invalid names and repeats.
void add_interface(Config& cfg, const std::string& key, const std::string& name, ConfigProblems& p);
// The quoted form used in messages, and a node's type as messages name it.
std::string in_quotes(std::string_view s);
std::string_view toml_type_name(const toml::node& n);

}  // namespace rg
