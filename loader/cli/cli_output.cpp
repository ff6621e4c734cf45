// The global -j/--json and -p/--pretty, and the one JSON printer every
// command's output goes through.
#include <cstdio>
#include <string>

#include "cli/cli.h"

namespace rg {
namespace {

bool g_json = false, g_pretty = false;

}  // namespace

void add_output_flags(CLI::App& app) {
  app.add_flag("-j,--json", g_json, "print data and errors as JSON, one object on one line");
  app.add_flag("-p,--pretty", g_pretty, "JSON as with --json, indented over several lines (implies --json)");
}

bool json_output() { return g_json || g_pretty; }

std::string json_text(const nlohmann::json& value) {
  return value.dump(g_pretty ? 2 : -1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void print_json(const nlohmann::json& value) {
  std::fputs((json_text(value) + "\n").c_str(), stdout);
  std::fflush(stdout);
}

bool argv_wants_json(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--" || a == "lab") break;  // the lab's arguments are its own
    if (a == "-j" || a == "--json") g_json = true;
    if (a == "-p" || a == "--pretty") g_pretty = true;
  }
  return json_output();
}

}  // namespace rg
