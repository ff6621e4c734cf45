// Subcommands of the `roceguard` binary. Each group lives in its own
// cli_*.cpp and adds itself to the CLI11 app; main.cpp only wires them up.
#pragma once

#include <CLI/CLI.hpp>
#include <list>

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

// Exit code a subcommand's callback leaves for main() to return.
int& exit_code();

}  // namespace rg
