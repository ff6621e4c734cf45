#include "daemon.h"

#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>
#include <spdlog/spdlog.h>
#include <systemd/sd-daemon.h>

#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>

#include "attach.h"
#include "error.h"
#include "exporter.h"
#include "hooks.h"

namespace rg {
namespace {

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
        if (static_cast<int>(idx) == is.ifindex && xdp_present(dp_.owner(), is) && tc_present(dp_.owner(), is)) {
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
      // A re-attach under a new ifindex means the old one is gone for good.
      dp_.prune_stale_counters(st_);
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

}  // namespace

StopSignals::StopSignals() {
  sigemptyset(&set_);
  sigaddset(&set_, SIGTERM);
  sigaddset(&set_, SIGINT);
  sigaddset(&set_, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
}

int StopSignals::wait_one_second() const {
  timespec tick{1, 0};
  int sig = sigtimedwait(&set_, nullptr, &tick);
  return sig > 0 ? sig : 0;
}

State attach(const Config& cfg, const std::string& pin_path, bool reset_state, bool force) {
  ensure_bpffs(pin_path);
  PinLock lock(pin_path, true);
  Dataplane dp(cfg, pin_path, reset_state);
  return dp.attach_all(force);
}

void run_daemon(const Config& cfg, const std::string& pin_path, bool reset_state, bool force,
                const StopSignals& signals) {
  ensure_bpffs(pin_path);
  PinLock lock(pin_path, true);

  // Bind the exporter before touching the interfaces: a busy port fails
  // the start without side effects.
  ExporterOptions eo;
  eo.listen = cfg.metrics_listen;
  eo.pin_path = pin_path;
  eo.interfaces = cfg.interfaces;
  eo.per_qp = cfg.per_qp;
  eo.top_qps = cfg.top_qps;
  Exporter exporter(eo);

  Dataplane dp(cfg, pin_path, reset_state);
  State st = dp.attach_all(force);
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
    int sig = signals.wait_one_second();
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

DetachResult detach(const std::string& pin_path, const std::vector<std::string>& only,
                    const std::function<void(const std::string&)>& say) {
  if (!pin_dir_exists(pin_path) && only.empty())
    throw Error("nothing attached with pin path " + pin_path, kExitNotFound);
  std::unique_ptr<PinLock> lock;
  if (pin_dir_exists(pin_path)) lock = std::make_unique<PinLock>(pin_path, false);
  State st = read_state(pin_path).value_or(State{});
  // Ours are the programs using the maps pinned here: never another
  // instance's (another pin path) on the same interface.
  HookOwner owner(pin_path);

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

  DetachResult result;
  for (auto& is : targets) {
    // The record's ifindex is only trusted while it still carries the name.
    char buf[IF_NAMESIZE] = {};
    if (!is.ifindex || !if_indextoname(static_cast<unsigned>(is.ifindex), buf) || is.name != buf)
      is.ifindex = static_cast<int>(if_nametoindex(is.name.c_str()));
    if (!is.ifindex) {
      say(is.name + ": gone (nothing to remove)");
      continue;
    }
    DetachLines lines = detach_interface(owner, is.ifindex, is.name, is.tc_handle, is.tc_priority);
    for (const auto& line : lines.removed) {
      say(line);
      ++result.programs_removed;
    }
    for (const auto& line : lines.left) say(line);
  }
  if (remaining.empty()) {
    remove_pins(pin_path);
    result.pins_removed = true;
  } else {
    st.interfaces = remaining;
    write_state(pin_path, st);
  }
  return result;
}

}  // namespace rg
