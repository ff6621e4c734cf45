// roceguard nic show | apply | env: the NIC half, for RDMA hosts themselves.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>

#include "cli.h"
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
  std::vector<std::string> interfaces;
  std::optional<std::string> ack_timeout;
  std::optional<int64_t> retry_cnt, rnr_retry, min_rnr_timer, dscp, cnp_dscp, ecn, gid_index;
  bool json = false;
  bool dry_run = false;
  std::string output;
};

void add_profile_flags(CLI::App* cmd, NicOptions& o) {
  cmd->add_option("-c,--config", o.config, "config file; its [nic] table is the profile")
      ->check(CLI::ExistingFile);
  cmd->add_option("-i,--interface", o.interfaces, "netdev whose RDMA devices to use (repeatable)");
  cmd->add_option("--ack-timeout", o.ack_timeout, "local ACK timeout as a duration (500us, 8ms)");
  cmd->add_option("--retry-cnt", o.retry_cnt, "transport retries 0..7");
  cmd->add_option("--rnr-retry", o.rnr_retry, "RNR retries 0..7 (7 = infinite)");
  cmd->add_option("--min-rnr-timer", o.min_rnr_timer, "IBA RNR timer code 0..31");
  cmd->add_option("--dscp", o.dscp, "data DSCP 0..63 (default 46)");
  cmd->add_option("--cnp-dscp", o.cnp_dscp, "CNP DSCP 0..63 (default 48)");
  cmd->add_option("--ecn", o.ecn, "ECN bits of the ToS byte: 0, 1 or 2");
  cmd->add_option("--gid-index", o.gid_index, "GID index for the environment profile");
}

nic::Profile build_profile(const NicOptions& o) {
  nic::Profile p;
  if (!o.config.empty()) {
    toml::table doc;
    try {
      doc = toml::parse_file(o.config);
    } catch (const toml::parse_error& e) {
      throw Error(o.config + ": " + std::string(e.description()), kExitUsage);
    }
    if (const toml::table* t = doc["nic"].as_table()) p = nic::profile_from_table(*t);
    // The data plane's interfaces are the default set of NIC interfaces.
    if (p.interfaces.empty())
      if (const toml::array* a = doc["interfaces"].as_array())
        for (const auto& e : *a)
          if (auto s = e.value<std::string>()) p.interfaces.push_back(*s);
  }
  std::vector<std::string> errors;
  auto put = [&](const char* key, const nic::Value& v) {
    if (auto err = nic::set(p, key, v)) errors.push_back(*err);
  };
  if (o.ack_timeout) put("ack_timeout", *o.ack_timeout);
  if (o.retry_cnt) put("retry_cnt", *o.retry_cnt);
  if (o.rnr_retry) put("rnr_retry", *o.rnr_retry);
  if (o.min_rnr_timer) put("min_rnr_timer", *o.min_rnr_timer);
  if (o.dscp) put("dscp", *o.dscp);
  if (o.cnp_dscp) put("cnp_dscp", *o.cnp_dscp);
  if (o.ecn) put("ecn", *o.ecn);
  if (o.gid_index) put("gid_index", *o.gid_index);
  if (!o.interfaces.empty()) put("interfaces", o.interfaces);
  if (!errors.empty()) {
    std::string msg = errors.front();
    for (size_t i = 1; i < errors.size(); i++) msg += "\n" + errors[i];
    throw Error(msg, kExitUsage);
  }
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
