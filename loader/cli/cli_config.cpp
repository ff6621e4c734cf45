// config check: runs exactly the validation run and attach run (file,
// ROCEGUARD_* variables and the same flags, then check_config), changing
// nothing. The checks against this machine (interfaces exist, each peer's
// local address is here, the metrics address is here) run by default,
// because the usual question is "will this start here"; --offline skips
// them for checking a fleet's files on a build host.
// config options: the option table, for people and for the README.
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "cli/config_check.h"
#include "common/error.h"
#include "config/config.h"

namespace rg {
namespace {

void cmd_config_check(const std::string& file, const FlagValues& flags, bool offline, bool print) {
  ConfigProblems p;
  Config cfg = resolve_config({file, flags, true}, p);
  check_config(cfg, offline, p);
  std::vector<std::string> problems = p.errors;
  for (const auto& e : p.absent_interfaces) problems.push_back(e + " (`run` waits for it)");
  problems.insert(problems.end(), p.missing.begin(), p.missing.end());
  if (json_output()) {
    // The same error object as every other command's, with the list.
    nlohmann::json out = {{"file", file}, {"ok", p.ok()}, {"warnings", p.warnings}, {"problems", problems}};
    if (p.ok()) out["config"] = cfg.to_json();
    else out["error"] = {{"message", std::to_string(problems.size()) + " error(s)"}, {"exit_code", kExitUsage}};
    print_json(out);
    if (!p.ok()) exit_code() = kExitUsage;
    return;
  }
  for (const auto& w : p.warnings) std::cerr << file << ": warning: " << w << "\n";
  if (!p.ok()) {
    for (const auto& e : problems) std::cerr << file << ": " << e << "\n";
    std::cerr << file << ": " << problems.size() << " error(s)\n";
    exit_code() = kExitUsage;
    return;
  }
  if (print) print_json(cfg.to_json());
  else std::cout << file << ": ok\n";
}

}  // namespace

void add_config_commands(CLI::App& app) {
  static std::string file;
  static bool offline = false, print = false, markdown = false;
  static OptionFlags flags;
  auto* config = app.add_subcommand("config", "configuration file tools");
  config->require_subcommand(1);
  auto* check = config->add_subcommand("check", "validate a configuration as run would; changes nothing");
  check->add_option("file", file, "TOML configuration file")->required()->check(CLI::ExistingFile);
  check->add_flag("--offline", offline,
                  "skip the checks against this machine: interfaces, peers' local addresses, metrics address");
  check->add_flag("--print", print, "print the effective configuration (defaults filled in) as JSON");
  flags.add(check, FlagOf::kDaemon);
  check->footer(options_text());
  check->callback([] { cmd_config_check(file, flags.given(), offline, print); });

  auto* list = config->add_subcommand("options", "every option: file key, environment variable, flag, default");
  list->add_flag("--markdown", markdown, "as the README's table");
  list->callback([] {
    if (json_output()) print_json({{"options", options_json()}});
    else std::cout << (markdown ? options_markdown() : options_text());
  });
}

}  // namespace rg
