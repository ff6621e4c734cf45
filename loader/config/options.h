// The configuration options, each declared once: TOML path, command-line
// flag, environment variable, type, range, default and help. The file
// reader, the environment and flag overrides, `--help`, `to_json` and the
// README's option table are all derived from this table, so an option
// cannot be known to one of them and missing from another.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

namespace rg {

struct Config;
struct PeerConfig;
struct ConfigProblems;

enum class OptionType { kInteger, kBoolean, kString, kStringList, kTableList };

// A value as a file, a variable or a flag gave it, once its type is right.
using OptionValue = std::variant<int64_t, bool, std::string, std::vector<std::string>, toml::array>;

// What a value may be. An integer range with min > max is not checked here
// (the setter owns it); an empty choice list allows any string.
struct ValueSpec {
  OptionType type = OptionType::kString;
  int64_t min = 1, max = 0;
  std::vector<std::string_view> choices;
  // Strings refused with a reason of their own instead of "is not one of":
  // a value people will try because it is announced, but not available yet.
  std::vector<std::pair<std::string_view, std::string_view>> refused;
  bool hex = false;  // shown as 0x.. in help and docs
};

// Which subcommands take the flag: `--dscp` of run/attach sets the data
// plane's class, `--dscp` of `nic` the NIC profile's.
enum class FlagOf { kNone, kDaemon, kNic };

struct Option {
  std::string_view path;  // "dataplane.dscp"
  std::string_view flag;  // CLI11 spelling, "-i,--interface"; empty when none
  FlagOf flag_of = FlagOf::kNone;
  ValueSpec spec;
  std::string_view help;
  // Stores a value whose type, range and choices passed; reports anything
  // else under key (the file key, variable or flag it came from).
  std::function<void(Config&, const OptionValue&, const std::string& key, ConfigProblems&)> set;
  std::function<nlohmann::json(const Config&)> get;

  std::string env() const;          // ROCEGUARD_DATAPLANE_DSCP
  std::string long_flag() const;    // "--interface", or ""
  std::string range_text() const;   // "0..63", "pass, drop", or ""
  std::string default_text() const; // from a default-constructed Config
};

// One field of a [[tunnel.peer]] table, declared the same way.
struct PeerField {
  std::string_view key;
  ValueSpec spec;
  std::string_view missing;  // the message when absent; empty when optional
  std::string_view help;
  std::function<void(PeerConfig&, const OptionValue&, const std::string& key, ConfigProblems&)> set;
  std::function<nlohmann::json(const PeerConfig&)> get;
};

const std::vector<Option>& options();
const std::vector<PeerField>& peer_fields();
const Option* find_option(std::string_view path);
// True when some option lives under this table ("dataplane", "tunnel").
bool is_section(std::string_view name);

// A TOML node as a value of spec; problems name key. nullopt when refused.
std::optional<OptionValue> value_from_toml(const ValueSpec& spec, const toml::node& node,
                                           const std::string& key, ConfigProblems& p);
// Text from a variable or flags as a value of spec: integers in decimal or
// 0x/0o/0b, booleans true/false/1/0, lists one item per text (a variable's
// text is split at commas and blanks), tables as a TOML inline array.
std::optional<OptionValue> value_from_text(const ValueSpec& spec, const std::vector<std::string>& texts,
                                           const std::string& key, ConfigProblems& p);
// Checks range and choices, then stores the value.
void assign(const Option& opt, Config& cfg, const OptionValue& value, const std::string& key,
            ConfigProblems& p);

// ROCEGUARD_<PATH> variables on top of cfg; lookup is getenv unless a test
// passes its own.
using EnvLookup = std::function<const char*(const char*)>;
void apply_environment(Config& cfg, ConfigProblems& p, const EnvLookup& lookup = {});
// Flags given on the command line, by option path, each one's texts.
using FlagValues = std::map<std::string, std::vector<std::string>>;
void apply_flags(Config& cfg, const FlagValues& flags, ConfigProblems& p);

// The option list for `--help` and `config options`.
std::string options_text();
// The README's table (`config options --markdown`).
std::string options_markdown();
// The same table as JSON (`config options -j`): one object per key.
nlohmann::json options_json();
// The same table as troff (.TP items), for the roceguard.toml(5) page.
std::string options_man();
// Text for a troff page: backslashes, hyphens and a leading control
// character escaped.
std::string troff_text(std::string_view in);

}  // namespace rg
