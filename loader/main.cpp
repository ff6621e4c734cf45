// The roceguard binary: wires the subcommands of cli_*.cpp into one CLI11
// app and maps errors to the exit codes of error.h.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <set>
#include <string>

#include "cli.h"
#include "error.h"
#include "version.h"

namespace rg {
int& exit_code() {
  static int code = kExitOk;
  return code;
}
}  // namespace rg

namespace {

// `roceguard --version [--json]` stands alone: the app requires a
// subcommand, and CLI11's own version flag prints a fixed string only.
bool is_version_request(int argc, char** argv, bool& json) {
  const std::set<std::string> args(argv + 1, argv + argc);
  if (static_cast<size_t>(argc - 1) != args.size() || !args.contains("--version")) return false;
  json = args.contains("--json");
  return args.size() == (json ? 2u : 1u);
}

}  // namespace

int main(int argc, char** argv) {
  bool version_json = false;
  if (is_version_request(argc, argv, version_json)) {
    const rg::VersionInfo v = rg::running_version();
    const std::string out = version_json ? rg::version_json(v).dump(2) + "\n" : rg::version_text(v);
    std::fputs(out.c_str(), stdout);
    return rg::kExitOk;
  }
  CLI::App app{"roceguard: keeps RoCE v2 alive across lossy, DSCP-bleaching networks"};
  app.require_subcommand(1);
  // Listed for --help; answered by is_version_request() above.
  app.add_flag("--version")->description(
      "print the version, git revision, and the libbpf, libxdp and kernel versions in use "
      "(with --json: as JSON)");
  rg::add_daemon_commands(app);
  rg::add_stats_commands(app);
  rg::add_config_commands(app);
  rg::add_nic_commands(app);
  rg::add_lab_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : rg::kExitUsage;
  } catch (const rg::Error& e) {
    std::fprintf(stderr, "roceguard: %s\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "roceguard: %s\n", e.what());
    return rg::kExitFailure;
  }
  return rg::exit_code();
}
