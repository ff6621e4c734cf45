// roceguard nic show | apply | revert | env: the NIC half, for RDMA hosts
// themselves.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "common/error.h"
#include "common/text.h"
#include "config/config.h"
#include "nic/apply.h"
#include "nic/devices.h"
#include "nic/env.h"
#include "nic/profile.h"

namespace rg {

namespace {

// Flags shared by the three subcommands; each overrides the [nic] table.
struct NicOptions {
  std::string config;
  OptionFlags flags;
  bool dry_run = false;
  std::string output;
  std::string state_dir = nic::kDefaultNicStateDir;
  std::string rtt;  // nic env: the path's round trip, as a duration
};

void add_profile_flags(CLI::App* cmd, NicOptions& o) {
  cmd->add_option("-c,--config", o.config, "config file; its [nic] table is the profile")
      ->check(CLI::ExistingFile);
  o.flags.add(cmd, FlagOf::kNic);
}

// The profile through the same reader as run: the whole file is checked,
// then ROCEGUARD_* variables and the flags override it.
nic::Profile build_profile(const NicOptions& o) {
  ConfigProblems problems;
  Config cfg = resolve_config({o.config, o.flags.given(), true}, problems);
  if (!problems.ok()) {
    std::string msg = o.config.empty() ? "invalid options:" : "invalid configuration " + o.config + ":";
    for (const auto& e : problems.errors) msg += "\n  " + e;
    throw Error(msg, kExitUsage);
  }
  nic::Profile p = cfg.nic;
  // The data plane's interfaces are the default set of NIC interfaces.
  if (p.interfaces.empty()) p.interfaces = cfg.interfaces;
  return p;
}

void cmd_show(const NicOptions& o) {
  nic::Profile p = build_profile(o);
  auto devices = nic::select(nic::discover(), p.interfaces);
  if (json_output()) {
    print_json(nic::to_json(devices));
    if (devices.empty()) std::cerr << "roceguard: " << nic::no_device_message(p.interfaces) << "\n";
    return;
  }
  if (devices.empty()) {
    std::cout << nic::no_device_message(p.interfaces) << "\n";
    return;
  }
  for (const auto& line : nic::to_text(devices)) std::cout << line << "\n";
}

const char* status_tag(nic::StepReport::Status s) {
  switch (s) {
    case nic::StepReport::Status::kDone: return "done";
    case nic::StepReport::Status::kPlanned: return "would";
    case nic::StepReport::Status::kSkipped: return "skipped";
    case nic::StepReport::Status::kNotSupported: return "not supported";
    case nic::StepReport::Status::kFailed: return "FAILED";
  }
  return "?";
}

nlohmann::json outcome_json(const std::string& device, const nic::NicOutcome& outcome) {
  nlohmann::json steps = nlohmann::json::array();
  for (const auto& step : outcome.steps) {
    nlohmann::json lines = nlohmann::json::array();
    for (const auto& l : step.report.lines) lines.push_back(printable(l));  // they may quote a name
    steps.push_back({{"step", step.what}, {"status", status_tag(step.report.status)}, {"lines", lines}});
  }
  return {{"device", printable(device)}, {"steps", steps}, {"exit_code", outcome.exit_code}};
}

void report(const nic::NicOutcome& outcome) {
  for (const auto& step : outcome.steps) {
    std::cout << "  " << step.what << ": " << status_tag(step.report.status) << "\n";
    for (const auto& l : step.report.lines) std::cout << "    " << l << "\n";
  }
}

void cmd_apply(const NicOptions& o) {
  nic::Profile p = build_profile(o);
  auto devices = nic::select(nic::discover(), p.interfaces);
  if (devices.empty())
    throw Error(nic::no_device_message(p.interfaces) + "; nothing to apply", kExitNotFound);
  nic::NicSystem sys;
  sys.state_dir = o.state_dir;
  if (json_output()) {
    nlohmann::json out = {{"dry_run", o.dry_run}, {"profile", nic::describe(p)}, {"devices", nlohmann::json::array()}};
    for (const auto& dev : devices) {
      nic::NicOutcome outcome = nic::apply_device(dev, p, o.dry_run, sys);
      out["devices"].push_back(outcome_json(dev.name, outcome));
      if (outcome.exit_code) {
        exit_code() = outcome.exit_code;
        break;  // the next device waits until this one is sorted out
      }
    }
    print_json(out);
    return;
  }
  std::cout << (o.dry_run ? "dry run: nothing is changed\n" : "") << "profile:\n";
  for (const auto& line : nic::describe(p)) std::cout << "  " << line << "\n";
  for (const auto& dev : devices) {
    std::cout << dev.name << " (" << (dev.driver.empty() ? "?" : dev.driver) << "):\n";
    nic::NicOutcome outcome = nic::apply_device(dev, p, o.dry_run, sys);
    report(outcome);
    if (outcome.exit_code) {
      exit_code() = outcome.exit_code;
      return;  // the next device waits until this one is sorted out
    }
  }
  if (!o.dry_run) std::cout << "the values replaced are saved in " << o.state_dir << "; `roceguard nic revert` restores them\n";
}

void cmd_revert(const NicOptions& o, const std::vector<std::string>& only) {
  nic::NicSystem sys;
  sys.state_dir = o.state_dir;
  std::vector<std::string> names = only.empty() ? nic::saved_devices(sys) : only;
  if (names.empty()) throw Error("nothing to revert: no saved NIC values in " + o.state_dir, kExitNotFound);
  nlohmann::json out = nlohmann::json::array();
  for (const auto& name : names) {
    if (!json_output()) std::cout << name << ":\n";
    nic::NicOutcome outcome = nic::revert_device(name, sys);
    if (json_output()) out.push_back(outcome_json(name, outcome));
    else report(outcome);
    if (outcome.exit_code) exit_code() = outcome.exit_code;
  }
  if (json_output()) print_json({{"devices", out}});
}

// --rtt as microseconds; a usage error when it is no duration or longer
// than any ACK timeout can cover.
std::optional<double> rtt_of(const NicOptions& o) {
  if (o.rtt.empty()) return std::nullopt;
  std::string why;
  const auto us = nic::parse_duration_us(o.rtt, &why);
  if (!us || !nic::ack_timeout_for_rtt(*us, &why)) throw Error("--rtt: " + why, kExitUsage);
  return us;
}

void cmd_env(const NicOptions& o) {
  const std::optional<double> rtt = rtt_of(o);
  nic::Profile p = build_profile(o);
  // --rtt never changes the profile: it says what fits, and warns.
  if (rtt)
    if (auto warning = nic::ack_timeout_below_path(p, *rtt)) std::cerr << "roceguard: warning: " << *warning << "\n";
  auto devices = nic::select(nic::discover(), p.interfaces);
  std::string text = nic::render_env(p, devices, rtt);
  if (json_output()) {
    // The variables render_env() writes, as an object; its comments stay out.
    nlohmann::json vars = nlohmann::json::object();
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      const auto eq = line.find('=');
      if (line.empty() || line[0] == '#' || eq == std::string::npos) continue;
      vars[line.substr(0, eq)] = line.substr(eq + 1);
    }
    text = json_text(vars) + "\n";
  }
  if (o.output.empty() || o.output == "-") {
    std::cout << text;
    return;
  }
  std::ofstream f(o.output);
  f << text;
  f.flush();
  if (!f) throw Error("cannot write " + o.output + ": " + errno_text(errno));
  std::cerr << "roceguard: wrote " << o.output << "\n";
}

}  // namespace

void add_nic_commands(CLI::App& app) {
  auto opts = std::make_shared<NicOptions>();
  CLI::App* nic = app.add_subcommand("nic", "RDMA NIC: devices, retransmit/QoS profile, environment");
  nic->require_subcommand(1);

  CLI::App* show = nic->add_subcommand("show", "RDMA devices, ports, netdevs and GID tables");
  add_profile_flags(show, *opts);
  show->callback([opts] { cmd_show(*opts); });

  CLI::App* apply = nic->add_subcommand(
      "apply", "verbs self-test, then rdma_cm defaults, vendor lossy-RoCE features, PFC off, each gated on the last");
  add_profile_flags(apply, *opts);
  apply->add_flag("--dry-run", opts->dry_run, "print every change, touch nothing");
  apply->add_option("--state-dir", opts->state_dir, "where the values apply replaces are saved for `nic revert`")
      ->capture_default_str();
  apply->callback([opts] { cmd_apply(*opts); });

  static std::vector<std::string> revert_devices;
  CLI::App* revert = nic->add_subcommand("revert", "put back what `nic apply` changed: PFC, vendor features, rdma_cm defaults");
  revert->add_option("device", revert_devices, "RDMA devices (default: every device apply changed)");
  revert->add_option("--state-dir", opts->state_dir, "where `nic apply` saved the values it replaced")
      ->capture_default_str();
  revert->callback([opts] { cmd_revert(*opts, revert_devices); });

  CLI::App* env = nic->add_subcommand("env", "environment for NCCL, UCX and libroceguard_qp.so");
  add_profile_flags(env, *opts);
  env->add_option("-o,--output", opts->output, "write to this file (systemd EnvironmentFile)");
  env->add_option("--rtt", opts->rtt,
                  "the path's round trip (e.g. 10ms): say which ACK timeout fits it, warn when the profile's "
                  "is shorter; the profile is kept");
  env->callback([opts] { cmd_env(*opts); });
}

}  // namespace rg
