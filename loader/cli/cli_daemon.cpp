// run, attach, detach, status: their flags and what they print; the work
// itself is in daemon.h.
#include <net/if.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <iostream>
#include <map>

#include "cli/cli.h"
#include "cli/config_check.h"
#include "common/error.h"
#include "common/log.h"
#include "config/config.h"
#include "daemon/daemon.h"
#include "dataplane/bpf_object.h"
#include "dataplane/hooks.h"
#include "dataplane/maps.h"
#include "dataplane/netfilter.h"
#include "dataplane/pin_scope.h"
#include "dataplane/state.h"

namespace rg {
namespace {

struct LoadFlags {
  std::string config;
  std::string pin_path = kDefaultPinPath;
  bool reset_state = false;
  bool force = false;
  bool verbose = false;
  OptionFlags options;

  ConfigSources sources() const { return {config, options.given(), true}; }
};

void add_pin_path(CLI::App* sub, std::string& pin_path) {
  sub->add_option("--pin-path", pin_path, "bpffs directory of roceguard's maps and attach record")
      ->capture_default_str();
}

void add_verbose(CLI::App* sub, bool& verbose) {
  sub->add_flag("-v,--verbose", verbose, "debug log, including libbpf and libxdp messages");
}

void add_load_flags(CLI::App* sub, LoadFlags& f) {
  sub->add_option("-c,--config", f.config, "TOML configuration file; ROCEGUARD_* variables and flags override it")
      ->check(CLI::ExistingFile);
  f.options.add(sub, FlagOf::kDaemon);
  add_pin_path(sub, f.pin_path);
  sub->add_flag("--reset-state", f.reset_state, "drop the pinned maps first, counters restart at zero (needed when they are incompatible)");
  sub->add_flag("--force", f.force, "replace a foreign XDP program or TC filter in roceguard's place");
  add_verbose(sub, f.verbose);
  sub->footer(options_text());
}

void set_verbosity(bool verbose) {
  raise_log_level_for_verbose(verbose);
  setup_bpf_logging();
}

void cmd_attach(const LoadFlags& f) {
  StopSignals signals;
  set_verbosity(f.verbose);
  Config cfg = load_config(f.sources());
  if (!cfg.attach_dataplane)
    throw Error("dataplane.attach is false (exporter only): attach has nothing to do; `run` exports the NIC half",
                kExitUsage);
  State st = attach(cfg, f.pin_path, f.reset_state, f.force);
  if (json_output()) {
    nlohmann::json ifs = nlohmann::json::array();
    for (const auto& is : st.interfaces)
      ifs.push_back({{"name", is.name}, {"ifindex", is.ifindex}, {"ingress_hook", is.ingress_hook},
                     {"xdp", {{"mode", is.xdp_mode}, {"prog_id", is.xdp_prog_id}}},
                     {"tc", {{"attach", is.tc_attach}, {"handle", is.tc_handle}, {"priority", is.tc_priority},
                             {"prog_id", is.tc_prog_id}}},
                     {"tc_ingress", {{"prog_id", is.tc_ingress_prog_id}}}});
    print_json({{"pin_path", f.pin_path}, {"config_hash", st.config_hash}, {"interfaces", ifs}});
    return;
  }
  std::cout << "attached to " << st.interfaces.size() << " interface(s); maps pinned under " << f.pin_path << "\n";
}

void cmd_run(const LoadFlags& f) {
  StopSignals signals;
  set_verbosity(f.verbose);
  Config cfg = load_config(f.sources(), false, true);
  run_daemon(cfg, f.pin_path, f.reset_state, f.force, signals,
             [&f] { return load_config(f.sources(), false, true); });
}

void cmd_detach(const std::string& pin_path, const std::vector<std::string>& only, bool verbose) {
  const bool json = json_output();
  StopSignals signals;
  set_verbosity(verbose);
  nlohmann::json lines = nlohmann::json::array();
  DetachResult r = detach(pin_path, only, [&](const std::string& line) {
    if (json) lines.push_back(line);
    else std::cout << line << "\n";
  });
  if (json) {
    print_json({{"pin_path", pin_path}, {"removed", lines}, {"programs_removed", r.programs_removed},
                {"pins_removed", r.pins_removed}});
    return;
  }
  if (r.pins_removed) std::cout << "removed the pinned maps under " << pin_path << "\n";
  if (!r.programs_removed) std::cout << "no roceguard program was attached\n";
}

std::string ifname_of(int ifindex) {
  char buf[IF_NAMESIZE] = {};
  return if_indextoname(static_cast<unsigned>(ifindex), buf) ? buf : "";
}

// What keeps an interface's entry from being healthy, "" when nothing does.
std::string interface_problem(const nlohmann::json& i) {
  const std::string name = i["name"].get<std::string>();
  if (!i["present"].get<bool>()) return name + ": configured but not present";
  std::string missing;
  if (i["ingress_hook"] == kIngressTc ? !i["tc_ingress"]["attached"].get<bool>() : !i["xdp"]["attached"].get<bool>())
    missing = i["ingress_hook"] == kIngressTc ? "TC ingress" : "XDP ingress";
  if (!i["tc"]["attached"].get<bool>()) missing += (missing.empty() ? "" : " and ") + std::string("TC egress");
  return missing.empty() ? "" : name + ": " + missing + " program not attached";
}

// Exit code: 0 when every configured interface has both programs, 5
// (kExitUnhealthy) otherwise, 3 when nothing is recorded: a health check
// needs no parsing.
void cmd_status(const std::string& pin_path) {
  auto st = read_state(pin_path);
  if (!st) throw Error("roceguard is not attached with pin path " + pin_path + " (no attach record)", kExitNotFound);
  nlohmann::json out;
  out["pin_path"] = pin_path;
  const PinScope scope = pin_scope(pin_path);
  out["pins_outlive_process"] = scope.outlives_process;
  out["version"] = st->version;
  out["config_hash"] = st->config_hash;
  out["config"] = st->config;
  HookOwner owner(pin_path);
  nlohmann::json ifs = nlohmann::json::array();
  nlohmann::json problems = nlohmann::json::array();
  nlohmann::json warnings = nlohmann::json::array();
  for (const auto& is : st->interfaces) {
    bool exists = ifname_of(is.ifindex) == is.name;
    // Attached is not enough: a program ahead of ours may end the path first.
    nlohmann::json ahead = nlohmann::json::array();
    if (exists)
      for (const auto& a : programs_ahead(owner, is.ifindex, is.tc_priority, is.ingress_hook == kIngressTc)) {
        ahead.push_back({{"hook", tc_hook_name(a.hook)}, {"where", a.where}, {"prog_id", a.prog_id}, {"name", a.name}});
        warnings.push_back(is.name + ": " + a.name + " (id " + std::to_string(a.prog_id) + ", " + a.where +
                           ") runs ahead of roceguard on TC " + tc_hook_name(a.hook) +
                           " and can end the packet's path there: roceguard then never sees it");
      }
    ifs.push_back({{"name", is.name},
                   {"ifindex", is.ifindex},
                   {"present", exists},
                   {"ingress_hook", is.ingress_hook},
                   {"xdp", {{"mode", is.xdp_mode}, {"prog_id", is.xdp_prog_id}, {"attached", exists && xdp_present(owner, is)}}},
                   {"tc", {{"attach", is.tc_attach}, {"handle", is.tc_handle}, {"priority", is.tc_priority},
                           {"prog_id", is.tc_prog_id}, {"attached", exists && tc_present(owner, is)}}},
                   {"tc_ingress", {{"attach", is.tc_attach}, {"prog_id", is.tc_ingress_prog_id},
                                   {"attached", exists && tc_present(owner, is, TcHook::kIngress)}}},
                   {"ahead", ahead}});
    if (std::string why = interface_problem(ifs.back()); !why.empty()) problems.push_back(why);
  }
  out["interfaces"] = ifs;
  // The XDP fast path: configured, running (its pinned slot filled), and
  // the netfilter chains that keep it off (section 16).
  const bool forward_configured = st->config.contains("dataplane") &&
                                  st->config["dataplane"].value("xdp_forward", false);
  if (forward_configured) {
    const NetfilterProbe nf = probe_netfilter();
    const bool on = pinned_xdp_forward_linked(pin_path).value_or(false);
    out["fast_path"] = {{"configured", true}, {"on", on}, {"netfilter", nf.found}};
    if (nf.applies())
      warnings.push_back(on ? "the XDP fast path runs past netfilter rules that apply to forwarded packets (" +
                                  nf.summary() + "); `roceguard attach` again leaves it off"
                            : "XDP fast path off: " + nf.summary() + "; forwarded RoCE takes the stack");
  } else {
    out["fast_path"] = {{"configured", false}, {"on", false}, {"netfilter", nlohmann::json::array()}};
  }
  out["healthy"] = problems.empty();
  out["problems"] = problems;
  out["warnings"] = warnings;
  if (!problems.empty()) exit_code() = kExitUnhealthy;
  nlohmann::json maps = nlohmann::json::array();
  MapReader reader(pin_path);
  for (const auto& u : reader.usage_all())
    maps.push_back({{"name", u.name}, {"id", u.id}, {"entries", u.entries}, {"max_entries", u.max_entries},
                    {"key_size", u.key_size}, {"value_size", u.value_size}});
  out["maps"] = maps;
  if (json_output()) {
    print_json(out);
    return;
  }
  std::cout << "roceguard " << st->version << ", pin path " << pin_path << ", config " << st->config_hash << "\n";
  if (!scope.outlives_process) std::cout << "WARNING: pins do not survive roceguard: " << scope.why << "\n";
  std::cout << "\n";
  std::printf("%-16s %-8s %-8s %-8s %-11s %-8s %-8s %-18s %-8s\n", "INTERFACE", "IFINDEX", "INGRESS", "ATTACHED",
              "MODE", "ID", "TC", "TC_ATTACH", "TC_ID");
  for (const auto& i : ifs) {
    // tcx, or the clsact filter's handle/priority.
    char hp[40];
    if (i["tc"]["attach"] == kTcAttachTcx)
      std::snprintf(hp, sizeof(hp), "tcx");
    else
      std::snprintf(hp, sizeof(hp), "clsact %#x/%u", i["tc"]["handle"].get<unsigned>(),
                    i["tc"]["priority"].get<unsigned>());
    const bool tc_in = i["ingress_hook"] == kIngressTc;
    const auto& in = tc_in ? i["tc_ingress"] : i["xdp"];
    std::printf("%-16s %-8d %-8s %-8s %-11s %-8u %-8s %-18s %-8u\n", i["name"].get<std::string>().c_str(),
                i["ifindex"].get<int>(), tc_in ? "tc" : "xdp",
                !i["present"].get<bool>() ? "gone" : in["attached"].get<bool>() ? "yes" : "NO",
                tc_in ? "-" : i["xdp"]["mode"].get<std::string>().c_str(), in["prog_id"].get<unsigned>(),
                !i["present"].get<bool>() ? "gone" : i["tc"]["attached"].get<bool>() ? "yes" : "NO", hp,
                i["tc"]["prog_id"].get<unsigned>());
  }
  std::printf("\n%-12s %-8s %10s %12s %6s\n", "MAP", "ID", "ENTRIES", "MAX_ENTRIES", "FILL");
  for (const auto& m : maps) {
    double fill = m["max_entries"].get<unsigned>() ? 100.0 * m["entries"].get<unsigned>() / m["max_entries"].get<unsigned>() : 0;
    std::printf("%-12s %-8u %10u %12u %5.1f%%\n", m["name"].get<std::string>().c_str(), m["id"].get<unsigned>(),
                m["entries"].get<unsigned>(), m["max_entries"].get<unsigned>(), fill);
  }
  std::cout << "\nconfig in force:\n" << st->config.dump(2) << "\n";
  if (!warnings.empty()) {
    std::cout << "\nWARNING:\n";
    for (const auto& w : warnings) std::cout << "  " << w.get<std::string>() << "\n";
  }
  if (!problems.empty()) {
    std::cout << "\nUNHEALTHY (exit code " << kExitUnhealthy << "):\n";
    for (const auto& p : problems) std::cout << "  " << p.get<std::string>() << "\n";
  }
}

}  // namespace

void add_daemon_commands(CLI::App& app) {
  static LoadFlags run_flags, attach_flags;
  auto* run = app.add_subcommand("run", "attach and stay in the foreground serving metrics until SIGTERM");
  add_load_flags(run, run_flags);
  run->callback([] { cmd_run(run_flags); });

  auto* attach = app.add_subcommand("attach", "attach (or re-attach) and exit; programs stay attached");
  add_load_flags(attach, attach_flags);
  attach->callback([] { cmd_attach(attach_flags); });

  static std::string detach_pin = kDefaultPinPath;
  static std::vector<std::string> detach_ifs;
  static bool detach_verbose = false;
  auto* detach = app.add_subcommand("detach", "remove roceguard's programs and pinned maps (nothing else)");
  add_pin_path(detach, detach_pin);
  detach->add_option("-i,--interface", detach_ifs, "only these interfaces (keeps the maps)");
  add_verbose(detach, detach_verbose);
  detach->callback([] { cmd_detach(detach_pin, detach_ifs, detach_verbose); });

  static std::string status_pin = kDefaultPinPath;
  auto* status = app.add_subcommand("status", "what is attached where, program ids, map fill, config in force");
  add_pin_path(status, status_pin);
  status->footer("exit code 0: every configured interface has both programs; 5: one is missing or not "
                 "attached (see problems); 3: nothing attached with this pin path");
  status->callback([] { cmd_status(status_pin); });
}

}  // namespace rg
