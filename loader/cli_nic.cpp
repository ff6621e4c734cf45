// roceguard nic show | apply | env: the NIC half, for RDMA hosts themselves.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>

#include "cli.h"
#include "config.h"
#include "error.h"
#include "nic/configfs.h"
#include "nic/dcb.h"
#include "nic/devices.h"
#include "nic/env.h"
#include "nic/profile.h"
#include "nic/selftest.h"
#include "nic/vendor.h"

namespace rg {

namespace {

// Flags shared by the three subcommands; each overrides the [nic] table.
struct NicOptions {
  std::string config;
  OptionFlags flags;
  bool json = false;
  bool dry_run = false;
  std::string output;
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
  if (o.json) {
    std::cout << nic::to_json(devices).dump(2) << "\n";
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

bool report(const char* what, const nic::StepReport& r) {
  std::cout << "  " << what << ": " << status_tag(r.status) << "\n";
  for (const auto& l : r.lines) std::cout << "    " << l << "\n";
  return r.status != nic::StepReport::Status::kFailed;
}

void cmd_apply(const NicOptions& o) {
  nic::Profile p = build_profile(o);
  auto devices = nic::select(nic::discover(), p.interfaces);
  if (devices.empty())
    throw Error(nic::no_device_message(p.interfaces) + "; nothing to apply", kExitNotFound);
  const bool dry = o.dry_run;
  std::cout << (dry ? "dry run: nothing is changed\n" : "") << "profile:\n";
  for (const auto& line : nic::describe(p)) std::cout << "  " << line << "\n";
  bool ok = true;
  for (const auto& dev : devices) {
    std::cout << dev.name << " (" << (dev.driver.empty() ? "?" : dev.driver) << "):\n";
    for (const auto& port : dev.ports) {
      nic::StepReport st;
      auto gid = nic::roce_v2_gid_index(port);
      if (port.link_layer != "Ethernet") {
        st.status = nic::StepReport::Status::kSkipped;
        st.lines.push_back("port " + std::to_string(port.num) + " is InfiniBand, not RoCE");
      } else if (!gid) {
        st.status = nic::StepReport::Status::kFailed;
        st.lines.push_back("port " + std::to_string(port.num) + " (" + port.netdev +
                           ") has no RoCE v2 GID with an IPv4 address: is the netdev up and addressed?");
      } else if (dry) {
        st.status = nic::StepReport::Status::kPlanned;
        st.lines.push_back("RC QP on port " + std::to_string(port.num) + ", GID index " +
                           std::to_string(*gid) + ": RESET -> INIT -> RTR (traffic_class " +
                           std::to_string(p.tos()) + ", min_rnr_timer " +
                           std::to_string(p.min_rnr_timer) + ") -> RTS (timeout " +
                           std::to_string(p.ack_timeout.exponent) + ", retry_cnt " +
                           std::to_string(p.retry_cnt) + ", rnr_retry " +
                           std::to_string(p.rnr_retry) + ")");
      } else {
        auto res = nic::self_test(dev, port, *gid, p);
        st.status = res.ok ? nic::StepReport::Status::kDone : nic::StepReport::Status::kFailed;
        if (res.ok)
          st.lines.push_back("port " + std::to_string(port.num) + ", GID index " +
                             std::to_string(*gid) + ": RESET -> INIT -> RTR -> RTS accepted");
        else
          st.lines.push_back("port " + std::to_string(port.num) + ": refused at " + res.step +
                             (res.refused.empty() ? "" : ", attribute " + res.refused) + ": " +
                             res.detail);
      }
      ok &= report("verbs self-test", st);
    }
    ok &= report("rdma_cm defaults (configfs)", nic::set_rdma_cm_defaults(dev, p.tos(), dry));
    std::vector<std::string> seen;
    for (const auto& port : dev.ports) {
      if (port.netdev.empty() || std::find(seen.begin(), seen.end(), port.netdev) != seen.end())
        continue;
      seen.push_back(port.netdev);
      ok &= report("PFC off (DCB netlink)", nic::set_pfc_off(port.netdev, dry));
    }
    ok &= report("vendor lossy-RoCE features", nic::apply_vendor(dev, p, dry));
  }
  if (!ok) exit_code() = kExitFailure;
}

void cmd_env(const NicOptions& o) {
  nic::Profile p = build_profile(o);
  auto devices = nic::select(nic::discover(), p.interfaces);
  std::string text = nic::render_env(p, devices);
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
  show->add_flag("--json", opts->json, "machine-readable output");
  show->callback([opts] { cmd_show(*opts); });

  CLI::App* apply = nic->add_subcommand(
      "apply", "verbs self-test, rdma_cm defaults, PFC off, vendor lossy-RoCE features");
  add_profile_flags(apply, *opts);
  apply->add_flag("--dry-run", opts->dry_run, "print every change, touch nothing");
  apply->callback([opts] { cmd_apply(*opts); });

  CLI::App* env = nic->add_subcommand("env", "environment for NCCL, UCX and libroceguard_qp.so");
  add_profile_flags(env, *opts);
  env->add_option("-o,--output", opts->output, "write to this file (systemd EnvironmentFile)");
  env->callback([opts] { cmd_env(*opts); });
}

}  // namespace rg
