// config check: validates a file without touching the system. Interfaces
// that do not exist on this machine are errors, because the usual check is
// "will this start here"; --offline skips that for checking a fleet's
// files on a build host.
#include <iostream>

#include "cli.h"
#include "config.h"
#include "error.h"

namespace rg {
namespace {

void cmd_config_check(const std::string& file, bool offline, bool print) {
  ConfigProblems p;
  Config cfg = parse_config_file(file, p);
  if (!offline && p.ok()) check_host(cfg, p);
  for (const auto& w : p.warnings) std::cerr << file << ": warning: " << w << "\n";
  if (!p.ok()) {
    for (const auto& e : p.errors) std::cerr << file << ": " << e << "\n";
    std::cerr << file << ": " << p.errors.size() << " error(s)\n";
    exit_code() = kExitUsage;
    return;
  }
  if (print) std::cout << cfg.to_json().dump(2) << "\n";
  else std::cout << file << ": ok\n";
}

}  // namespace

void add_config_commands(CLI::App& app) {
  static std::string file;
  static bool offline = false, print = false;
  auto* config = app.add_subcommand("config", "configuration file tools");
  config->require_subcommand(1);
  auto* check = config->add_subcommand("check", "validate a configuration file; changes nothing");
  check->add_option("file", file, "TOML configuration file")->required()->check(CLI::ExistingFile);
  check->add_flag("--offline", offline, "do not check that the interfaces exist on this machine");
  check->add_flag("--print", print, "print the effective configuration (defaults filled in) as JSON");
  check->callback([] { cmd_config_check(file, offline, print); });
}

}  // namespace rg
