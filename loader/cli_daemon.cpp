// run, attach, detach, status.
//
// Lifetime: programs stay attached and maps stay pinned when `run` exits,
// on SIGTERM as on kill -9, so RoCE keeps its priority while the loader is
// restarted or upgraded; the next run/attach replaces exactly its own
// programs and continues the pinned counters. `detach` is the one way to
// remove them.
#include <net/if.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>
#include <spdlog/spdlog.h>
#include <systemd/sd-daemon.h>

#include <cstdio>
#include <ctime>
#include <iostream>
#include <map>
#include <memory>

#include "attach.h"
#include "cli.h"
#include "config.h"
#include "error.h"
#include "exporter.h"
#include "hooks.h"
#include "maps.h"
#include "state.h"

namespace rg {
namespace {

struct LoadFlags {
  std::string config;
  std::string pin_path = kDefaultPinPath;
  bool reset_state = false;
  bool force = false;
  bool verbose = false;
  std::vector<std::string> interfaces;
  uint32_t dscp = 0, cnp_dscp = 0, qp_entries = 0, tc_handle = 0, tc_priority = 0;
  std::string mtu_policy, metrics_listen, xdp_mode;
  std::map<std::string, CLI::Option*> opts;

  ConfigOverrides overrides() const {
    ConfigOverrides ov;
    ov.interfaces = interfaces;
    auto set = [&](const char* name, auto& dst, const auto& v) {
      if (opts.at(name)->count()) dst = v;
    };
    set("--dscp", ov.dscp, dscp);
    set("--cnp-dscp", ov.cnp_dscp, cnp_dscp);
    set("--qp-entries", ov.qp_entries, qp_entries);
    set("--tc-handle", ov.tc_handle, tc_handle);
    set("--tc-priority", ov.tc_priority, tc_priority);
    set("--tunnel-mtu-policy", ov.mtu_policy, mtu_policy);
    set("--metrics-listen", ov.metrics_listen, metrics_listen);
    set("--xdp-mode", ov.xdp_mode, xdp_mode);
    return ov;
  }
};

void add_pin_path(CLI::App* sub, std::string& pin_path) {
  sub->add_option("--pin-path", pin_path, "bpffs directory of roceguard's maps and attach record")
      ->capture_default_str();
}

void add_verbose(CLI::App* sub, bool& verbose) {
  sub->add_flag("-v,--verbose", verbose, "debug log, including libbpf and libxdp messages");
}

void add_load_flags(CLI::App* sub, LoadFlags& f, bool with_metrics) {
  sub->add_option("-c,--config", f.config, "TOML configuration file; flags override it")
      ->check(CLI::ExistingFile);
  sub->add_option("-i,--interface", f.interfaces, "interface to attach to (repeatable; replaces the file's list)");
  f.opts["--dscp"] = sub->add_option("--dscp", f.dscp, "DSCP for RoCE data and ACKs (default 46)");
  f.opts["--cnp-dscp"] = sub->add_option("--cnp-dscp", f.cnp_dscp, "DSCP for CNPs (default 48)");
  f.opts["--qp-entries"] = sub->add_option("--qp-entries", f.qp_entries, "capacity of the per-QP map (default 65536)");
  f.opts["--tunnel-mtu-policy"] =
      sub->add_option("--tunnel-mtu-policy", f.mtu_policy, "over the tunnel MTU: pass (unencapsulated) or drop");
  f.opts["--tc-handle"] = sub->add_option("--tc-handle", f.tc_handle, "TC filter handle (default 0x52)");
  f.opts["--tc-priority"] = sub->add_option("--tc-priority", f.tc_priority, "TC filter priority (default 0x52)");
  f.opts["--xdp-mode"] = sub->add_option("--xdp-mode", f.xdp_mode, "native (default) or skb");
  f.opts["--metrics-listen"] = sub->add_option("--metrics-listen", f.metrics_listen,
                                               "Prometheus exporter address (default 127.0.0.1:9741)");
  if (!with_metrics) f.opts["--metrics-listen"]->group("");  // accepted, unused by attach
  add_pin_path(sub, f.pin_path);
  sub->add_flag("--reset-state", f.reset_state, "drop the pinned maps first, counters restart at zero (needed when they are incompatible)");
  sub->add_flag("--force", f.force, "replace a foreign XDP program or TC filter in roceguard's place");
  add_verbose(sub, f.verbose);
}

void set_verbosity(bool verbose) {
  spdlog::set_level(verbose ? spdlog::level::debug : spdlog::level::info);
  setup_bpf_logging();
}

void cmd_attach(const LoadFlags& f) {
  set_verbosity(f.verbose);
  Config cfg = load_config(f.config, f.overrides());
  ensure_bpffs(f.pin_path);
  PinLock lock(f.pin_path, true);
  Dataplane dp(cfg, f.pin_path, f.reset_state);
  State st = dp.attach_all(f.force);
  std::cout << "attached to " << st.interfaces.size() << " interface(s); maps pinned under " << f.pin_path << "\n";
}

class Runner {
 public:
  Runner(Dataplane& dp, Exporter& ex, State st) : dp_(dp), ex_(ex), st_(std::move(st)) {
    for (const auto& i : st_.interfaces) up_[i.name] = true;
  }

  // Keeps every configured interface attached: an interface that vanished
  // is reported once and re-attached when it (or a namesake) comes back; a
  // hook someone removed is put back.
  void watch() {
    bool changed = false;
    for (auto& is : st_.interfaces) {
      unsigned idx = if_nametoindex(is.name.c_str());
      if (!idx) {
        if (up_[is.name]) {
          spdlog::warn("interface {} disappeared; roceguard keeps running and re-attaches when it returns",
                       is.name);
          set_state(is.name, false);
        }
        continue;
      }
      check_mtu(is.name);
      try {
        if (static_cast<int>(idx) == is.ifindex && xdp_present(is) && tc_present(is)) {
          if (!up_[is.name]) set_state(is.name, true);
          continue;
        }
        IfaceState fresh = dp_.attach_interface(is.name, false);
        spdlog::info("re-attached to {} (ifindex {}): xdp {} id {}, tc id {}", is.name, fresh.ifindex,
                     fresh.xdp_mode, fresh.xdp_prog_id, fresh.tc_prog_id);
        is = fresh;
        changed = true;
        last_error_[is.name].clear();
        set_state(is.name, true);
      } catch (const std::exception& e) {
        if (last_error_[is.name] != e.what()) spdlog::error("cannot re-attach to {}: {}", is.name, e.what());
        last_error_[is.name] = e.what();
        set_state(is.name, false);
      }
    }
    if (changed) {
      try {
        write_state(dp_.pin_path(), st_);
      } catch (const Error& e) {
        spdlog::error("{}", e.what());
      }
    }
  }

 private:
  // A device MTU below the tunnel's means full-size packets can no longer be
  // encapsulated: the data plane applies the oversize policy to them (pass
  // unencapsulated, or drop). Said once per change of the device's MTU.
  void check_mtu(const std::string& name) {
    uint32_t tunnel_mtu = 0;
    std::string peer;
    for (const auto& p : dp_.config().peers)
      if (p.mtu > tunnel_mtu) tunnel_mtu = p.mtu, peer = p.name;
    if (!tunnel_mtu) return;
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return;
    ifreq ifr{};
    std::snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name.c_str());
    int rc = ioctl(fd, SIOCGIFMTU, &ifr);
    close(fd);
    if (rc != 0) return;
    const auto mtu = static_cast<uint32_t>(ifr.ifr_mtu);
    auto& seen = mtu_seen_[name];
    if (seen == mtu) return;
    if (mtu < tunnel_mtu)
      spdlog::warn("interface {} has MTU {}, below the tunnel MTU {} of peer {}: larger encapsulated packets "
                   "follow the oversize policy ({}); raise the interface MTU or lower tunnel.mtu",
                   name, mtu, tunnel_mtu, peer, dp_.config().mtu_policy == RG_MTU_DROP ? "drop" : "pass");
    else if (seen && seen < tunnel_mtu)
      spdlog::info("interface {} has MTU {} again: the tunnel MTU {} fits", name, mtu, tunnel_mtu);
    seen = mtu;
  }

  void set_state(const std::string& name, bool up) {
    up_[name] = up;
    ex_.set_attach_state(name, "xdp_ingress", up);
    ex_.set_attach_state(name, "tc_egress", up);
  }

  Dataplane& dp_;
  Exporter& ex_;
  State st_;
  std::map<std::string, bool> up_;
  std::map<std::string, std::string> last_error_;
  std::map<std::string, uint32_t> mtu_seen_;
};

void cmd_run(const LoadFlags& f) {
  // Signals are taken synchronously in the main loop; blocked from the
  // start, a SIGTERM during the attach waits for it to complete (all) or
  // roll back (nothing) instead of cutting it in half.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  set_verbosity(f.verbose);
  Config cfg = load_config(f.config, f.overrides());
  ensure_bpffs(f.pin_path);
  PinLock lock(f.pin_path, true);


  // Bind the exporter before touching the interfaces: a busy port fails
  // the start without side effects.
  ExporterOptions eo;
  eo.listen = cfg.metrics_listen;
  eo.pin_path = f.pin_path;
  eo.interfaces = cfg.interfaces;
  eo.per_qp = cfg.per_qp;
  eo.top_qps = cfg.top_qps;
  Exporter exporter(eo);

  Dataplane dp(cfg, f.pin_path, f.reset_state);
  State st = dp.attach_all(f.force);
  for (const auto& i : st.interfaces) {
    exporter.set_attach_state(i.name, "xdp_ingress", true);
    exporter.set_attach_state(i.name, "tc_egress", true);
  }
  spdlog::info("serving metrics on http://{}/metrics", exporter.listen_address());
  sd_notifyf(0, "READY=1\nSTATUS=attached to %zu interface(s), metrics on %s", st.interfaces.size(),
             exporter.listen_address().c_str());

  Runner runner(dp, exporter, st);
  // Bounded by signals only: this is the daemon's main loop, one watch
  // pass per second.
  for (;;) {
    timespec tick{1, 0};
    int sig = sigtimedwait(&sigs, nullptr, &tick);
    if (sig == SIGTERM || sig == SIGINT) {
      sd_notify(0, "STOPPING=1");
      spdlog::info("{}: exiting; programs stay attached and maps pinned (`roceguard detach` removes them)",
                   strsignal(sig));
      return;
    }
    if (sig == SIGHUP) spdlog::info("SIGHUP: restart the service to apply a new configuration");
    runner.watch();
  }
}

void cmd_detach(const std::string& pin_path, const std::vector<std::string>& only, bool verbose) {
  set_verbosity(verbose);
  if (!pin_dir_exists(pin_path) && only.empty())
    throw Error("nothing attached with pin path " + pin_path, kExitNotFound);
  std::unique_ptr<PinLock> lock;
  if (pin_dir_exists(pin_path)) lock = std::make_unique<PinLock>(pin_path, false);
  State st = read_state(pin_path).value_or(State{});

  std::vector<IfaceState> targets, remaining;
  for (const auto& is : st.interfaces) {
    bool selected = only.empty();
    for (const auto& n : only) selected |= n == is.name;
    (selected ? targets : remaining).push_back(is);
  }
  // Interfaces named on the command line but missing from the record (it
  // was lost): still remove our programs, found by name and the default
  // (or recorded) TC handle/priority.
  for (const auto& n : only) {
    bool known = false;
    for (const auto& t : targets) known |= t.name == n;
    if (known) continue;
    IfaceState is;
    is.name = n;
    is.ifindex = static_cast<int>(if_nametoindex(n.c_str()));
    if (!is.ifindex) throw Error("interface " + n + " does not exist", kExitNotFound);
    is.tc_handle = kDefaultTcHandle;
    is.tc_priority = kDefaultTcPriority;
    targets.push_back(is);
  }

  size_t removed = 0;
  for (auto& is : targets) {
    // The record's ifindex is only trusted while it still carries the name.
    char buf[IF_NAMESIZE] = {};
    if (!is.ifindex || !if_indextoname(static_cast<unsigned>(is.ifindex), buf) || is.name != buf)
      is.ifindex = static_cast<int>(if_nametoindex(is.name.c_str()));
    if (!is.ifindex) {
      std::cout << is.name << ": gone (nothing to remove)\n";
      continue;
    }
    for (const auto& line : detach_interface(is.ifindex, is.name, is.tc_handle, is.tc_priority)) {
      std::cout << line << "\n";
      ++removed;
    }
  }
  if (remaining.empty()) {
    remove_pins(pin_path);
    std::cout << "removed the pinned maps under " << pin_path << "\n";
  } else {
    st.interfaces = remaining;
    write_state(pin_path, st);
  }
  if (!removed) std::cout << "no roceguard program was attached\n";
}

std::string ifname_of(int ifindex) {
  char buf[IF_NAMESIZE] = {};
  return if_indextoname(static_cast<unsigned>(ifindex), buf) ? buf : "";
}

void cmd_status(const std::string& pin_path, bool json) {
  auto st = read_state(pin_path);
  if (!st) throw Error("roceguard is not attached with pin path " + pin_path + " (no attach record)", kExitNotFound);
  nlohmann::json out;
  out["pin_path"] = pin_path;
  out["version"] = st->version;
  out["config_hash"] = st->config_hash;
  out["config"] = st->config;
  nlohmann::json ifs = nlohmann::json::array();
  for (const auto& is : st->interfaces) {
    bool exists = ifname_of(is.ifindex) == is.name;
    ifs.push_back({{"name", is.name},
                   {"ifindex", is.ifindex},
                   {"present", exists},
                   {"xdp", {{"mode", is.xdp_mode}, {"prog_id", is.xdp_prog_id}, {"attached", exists && xdp_present(is)}}},
                   {"tc", {{"handle", is.tc_handle}, {"priority", is.tc_priority}, {"prog_id", is.tc_prog_id},
                           {"attached", exists && tc_present(is)}}}});
  }
  out["interfaces"] = ifs;
  nlohmann::json maps = nlohmann::json::array();
  MapReader reader(pin_path);
  for (const auto& u : reader.usage_all())
    maps.push_back({{"name", u.name}, {"id", u.id}, {"entries", u.entries}, {"max_entries", u.max_entries},
                    {"key_size", u.key_size}, {"value_size", u.value_size}});
  out["maps"] = maps;
  if (json) {
    std::cout << out.dump(2) << "\n";
    return;
  }
  std::cout << "roceguard " << st->version << ", pin path " << pin_path << ", config " << st->config_hash << "\n\n";
  std::printf("%-16s %-8s %-8s %-11s %-8s %-8s %-13s %-8s\n", "INTERFACE", "IFINDEX", "XDP", "MODE", "XDP_ID",
              "TC", "HANDLE/PRIO", "TC_ID");
  for (const auto& i : ifs) {
    char hp[32];
    std::snprintf(hp, sizeof(hp), "%#x/%u", i["tc"]["handle"].get<unsigned>(), i["tc"]["priority"].get<unsigned>());
    std::printf("%-16s %-8d %-8s %-11s %-8u %-8s %-13s %-8u\n", i["name"].get<std::string>().c_str(),
                i["ifindex"].get<int>(), !i["present"].get<bool>() ? "gone" : i["xdp"]["attached"].get<bool>() ? "yes" : "NO",
                i["xdp"]["mode"].get<std::string>().c_str(), i["xdp"]["prog_id"].get<unsigned>(),
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
}

}  // namespace

void add_daemon_commands(CLI::App& app) {
  static LoadFlags run_flags, attach_flags;
  auto* run = app.add_subcommand("run", "attach and stay in the foreground serving metrics until SIGTERM");
  add_load_flags(run, run_flags, true);
  run->callback([] { cmd_run(run_flags); });

  auto* attach = app.add_subcommand("attach", "attach (or re-attach) and exit; programs stay attached");
  add_load_flags(attach, attach_flags, false);
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
  static bool status_json = false;
  auto* status = app.add_subcommand("status", "what is attached where, program ids, map fill, config in force");
  add_pin_path(status, status_pin);
  status->add_flag("--json", status_json, "machine-readable output");
  status->callback([] { cmd_status(status_pin, status_json); });
}

}  // namespace rg
