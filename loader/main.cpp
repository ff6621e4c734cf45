#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli.h"
#include "error.h"

namespace rg {
int& exit_code() {
  static int code = kExitOk;
  return code;
}
}  // namespace rg

int main(int argc, char** argv) {
  CLI::App app{"roceguard: keeps RoCE v2 alive across lossy, DSCP-bleaching networks"};
  app.require_subcommand(1);
  app.set_version_flag("--version", ROCEGUARD_VERSION);
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
