// The roceguard binary: wires the subcommands of cli_*.cpp into one CLI11
// app, sets up logging from the global --log-* options, and maps errors to
// the exit codes of common/error.h (as a JSON object on stdout when -j/--json
// or -p/--pretty was given, so a script reading stdout always gets JSON).
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "common/error.h"
#include "common/log.h"
#include "common/pause_point.h"
#include "common/version.h"

namespace rg {
int& exit_code() {
  static int code = kExitOk;
  return code;
}
}  // namespace rg

namespace {

// `roceguard --version [-j|-p]` stands alone: the app requires a
// subcommand, and CLI11's own version flag prints a fixed string only.
bool is_version_request(int argc, char** argv) {
  const std::set<std::string> args(argv + 1, argv + argc);
  if (static_cast<size_t>(argc - 1) != args.size() || !args.contains("--version")) return false;
  for (const auto& a : args)
    if (a != "--version" && a != "-j" && a != "--json" && a != "-p" && a != "--pretty") return false;
  return true;
}

void print_version() {
  const rg::VersionInfo v = rg::running_version();
  if (rg::json_output()) rg::print_json(rg::version_json(v));
  else std::fputs(rg::version_text(v).c_str(), stdout);
}

#ifdef ROCEGUARD_PAUSE_POINTS
// Test build only (roceguard_pausable): at the pause point named by
// ROCEGUARD_PAUSE_AT, create the file ROCEGUARD_PAUSE_MARK and wait there
// (bounded) so a test can send a signal in the middle of the section.
void pause_for_test(const char* point) {
  const char* at = std::getenv("ROCEGUARD_PAUSE_AT");
  const char* mark = std::getenv("ROCEGUARD_PAUSE_MARK");
  if (!at || !mark || std::string(at) != point) return;
  if (FILE* f = std::fopen(mark, "w")) std::fclose(f);
  for (int i = 0; i < 100; ++i) usleep(50 * 1000);
}
#endif

// Prints a failure the way the command line asked for, returns its code.
int fail(bool json, const std::string& message, int code) {
  if (json || rg::json_output()) {
    rg::print_json({{"error", {{"message", message}, {"exit_code", code}}}});
  } else {
    std::fprintf(stderr, "roceguard: %s\n", message.c_str());
  }
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  const bool json = rg::argv_wants_json(argc, argv);
  if (is_version_request(argc, argv)) {
    print_version();
    return rg::kExitOk;
  }
#ifdef ROCEGUARD_PAUSE_POINTS
  rg::set_pause_handler(pause_for_test);
#endif
  CLI::App app{"roceguard: keeps RoCE v2 alive across lossy, DSCP-bleaching networks"};
  app.require_subcommand(1);
  // Listed for --help; answered by is_version_request() above.
  app.add_flag("--version")->description(
      "print the version, git revision, and the libbpf, libxdp and kernel versions in use "
      "(with --json: as JSON)");
  rg::add_output_flags(app);
  // Global options, accepted after the subcommand too (`run --log-format json`).
  app.fallthrough();
  static std::string log_level = "info", log_format = "auto";
  app.add_option("--log-level", log_level, "least severe message logged")
      ->check(CLI::IsMember(std::vector<std::string>(std::begin(rg::kLogLevelNames), std::end(rg::kLogLevelNames))))
      ->capture_default_str();
  app.add_option("--log-format", log_format,
                 "auto: the journal (with priorities) when stderr is systemd's journal stream, else text; "
                 "text, json (one object per line on stderr) or journal")
      ->check(CLI::IsMember(std::vector<std::string>(std::begin(rg::kLogFormatNames), std::end(rg::kLogFormatNames))))
      ->capture_default_str();
  // Before any subcommand's callback: their first message already goes to
  // the chosen place.
  app.parse_complete_callback([] {
    rg::setup_logging({rg::log_format_from_name(log_format), rg::log_level_from_name(log_level)});
  });
  rg::add_daemon_commands(app);
  rg::add_stats_commands(app);
  rg::add_config_commands(app);
  rg::add_nic_commands(app);
  rg::add_doctor_command(app);
  rg::add_lab_command(app);
  app.add_subcommand("version", "the same as --version")->callback(print_version);
  rg::add_man_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and friends are successes CLI11 reports as exceptions.
    if (e.get_exit_code() == 0 || !json) return app.exit(e) == 0 ? 0 : rg::kExitUsage;
    return fail(json, e.what(), rg::kExitUsage);
  } catch (const rg::Error& e) {
    return fail(json, e.what(), e.exit_code());
  } catch (const std::exception& e) {
    return fail(json, e.what(), rg::kExitFailure);
  }
  return rg::exit_code();
}
