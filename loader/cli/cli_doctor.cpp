// doctor: the host checks of doctor.h, as a list with fixes or as JSON.
#include <cctype>
#include <cstdio>
#include <iostream>

#include "cli/cli.h"
#include "common/error.h"
#include "config/config.h"
#include "dataplane/bpf_object.h"
#include "dataplane/state.h"
#include "doctor/doctor.h"
#include "nic/apply.h"

namespace rg {
namespace {

struct DoctorFlags {
  std::string config;
  std::vector<std::string> interfaces;
  std::string pin_path = kDefaultPinPath;
  std::string nic_state_dir = nic::kDefaultNicStateDir;
};

void cmd_doctor(const DoctorFlags& f) {
  setup_bpf_logging();  // libbpf's notes on opening the object: debug, not stderr
  DoctorInput in;
  in.pin_path = f.pin_path;
  in.nic_state_dir = f.nic_state_dir;
  if (!f.config.empty()) {
    ConfigProblems problems;
    in.config = resolve_config({f.config, {}, true}, problems);
    if (!problems.errors.empty()) {
      std::string msg = "invalid configuration " + f.config + ":";
      for (const auto& e : problems.errors) msg += "\n  " + e;
      throw Error(msg, kExitUsage);
    }
    in.interfaces_given = !in.config.interfaces.empty();
    in.config_given = true;
  }
  if (!f.interfaces.empty()) {
    in.config.interfaces = f.interfaces;
    in.interfaces_given = true;
  }
  const auto findings = run_doctor(in);
  exit_code() = doctor_exit_code(findings);
  if (json_output()) {
    print_json({{"findings", findings_json(findings)}, {"exit_code", exit_code()}});
    return;
  }
  for (const auto& x : findings) {
    std::string tag(verdict_name(x.verdict));
    for (auto& c : tag) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    std::printf("[%-4s] %s%s: %s\n", tag.c_str(), x.check.c_str(), x.subject.empty() ? "" : (" " + x.subject).c_str(),
                x.what.c_str());
    if (!x.fix.empty()) std::printf("       fix: %s\n", x.fix.c_str());
  }
}

}  // namespace

void add_doctor_command(CLI::App& app) {
  static DoctorFlags flags;
  auto* doctor = app.add_subcommand("doctor", "check this host: what will and will not work, each with its fix; "
                                              "changes nothing");
  doctor->add_option("-c,--config", flags.config, "configuration file: its interfaces, peers and XDP mode")
      ->check(CLI::ExistingFile);
  doctor->add_option("-i,--interface", flags.interfaces, "look at these interfaces (default: the configuration's, "
                                                          "else every one but lo)");
  doctor->add_option("--pin-path", flags.pin_path, "bpffs directory of roceguard's maps")->capture_default_str();
  doctor->add_option("--nic-state-dir", flags.nic_state_dir, "where `nic apply` saves what it replaced")
      ->capture_default_str();
  doctor->footer("exit code 0: nothing fails (warnings may remain); 5: something will not work");
  doctor->callback([] { cmd_doctor(flags); });
}

}  // namespace rg
