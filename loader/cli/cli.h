// Subcommands of the `roceguard` binary. Each group lives in its own
// cli_*.cpp and adds itself to the CLI11 app; main.cpp only wires them up.
#pragma once

#include <CLI/CLI.hpp>
#include <list>

#include <nlohmann/json.hpp>

#include "config/options.h"

namespace rg {

// The option table's flags of one kind on subcommands (help, range and
// default from the table); given() is what the command line set, by option
// path, for apply_flags.
class OptionFlags {
 public:
  void add(CLI::App* sub, FlagOf which);
  FlagValues given() const;

 private:
  struct Bound {
    const Option* option;
    CLI::Option* flag;
    std::vector<std::string> texts;
  };
  std::list<Bound> bound_;  // stable addresses: CLI11 keeps pointers to texts
};

// The global -j/--json and -p/--pretty (cli_output.cpp): accepted before
// or after the subcommand, as bpftool's. Every command that prints data
// prints it through print_json when json_output() is set: one line by
// default, indented with -p (which implies -j).
void add_output_flags(CLI::App& app);
bool json_output();
void print_json(const nlohmann::json& value);
std::string json_text(const nlohmann::json& value);  // what print_json prints, without the newline
// Sets the flags from argv's exact -j/--json/-p/--pretty words and says
// whether JSON is wanted: for --version, which stands alone, and for the
// errors CLI11 reports before it has set the flags (a bad command line).
bool argv_wants_json(int argc, char** argv);

// run, attach, detach, status (cli_daemon.cpp)
void add_daemon_commands(CLI::App& app);
// stats (cli_stats.cpp)
void add_stats_commands(CLI::App& app);
// config check (cli_config.cpp)
void add_config_commands(CLI::App& app);
// nic show | apply | env (cli_nic.cpp)
void add_nic_commands(CLI::App& app);
// doctor: host checks (cli_doctor.cpp)
void add_doctor_command(CLI::App& app);
// lab: execs the test bed's roceguard-lab (cli_lab_exec.cpp)
void add_lab_command(CLI::App& app);

// man: the manual pages as troff, hidden (cli_man.cpp); added last, it
// describes every command added before it.
void add_man_command(CLI::App& app);

// Exit code a subcommand's callback leaves for main() to return.
int& exit_code();

}  // namespace rg
