#include "daemon/daemon.h"

#include <linux/netfilter/nfnetlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include <spdlog/spdlog.h>
#include <systemd/sd-daemon.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "common/error.h"
#include "common/log.h"
#include "common/netlink.h"
#include "common/pause_point.h"
#include "common/text.h"
#include "config/options.h"
#include "dataplane/attach.h"
#include "dataplane/hooks.h"
#include "dataplane/maps.h"
#include "dataplane/nexthop_lease.h"
#include "daemon/congestion.h"
#include "daemon/shield_auto.h"
#include "daemon/stream_eviction.h"
#include "metrics/presentation.h"
#include "dataplane/pin_scope.h"
#include "metrics/exporter.h"
#include "nic/apply.h"

namespace rg {
namespace {

// Hooks someone else removed raise no link event (an XDP detach sends none
// on every kernel), so the interfaces are also re-checked this often.
constexpr int kRecheckMs = 5000;

// How often, at least, netfilter is probed again with the XDP fast path on
// (Dataplane::recheck_fast_path), besides on every nftables change event:
// legacy iptables announces no change, so a rule added there reaches the
// fast path's slot within about this long.
constexpr int kNetfilterRecheckMs = 1000;

// How often the next-hop leases are renewed; a lease runs
// NexthopLeases::kLeaseNs, three of these.
constexpr int kLeaseRenewMs = 1000;

// Notifications from rtnetlink: link and TC (a link added, deleted, renamed
// or changed, a TC filter changed), which wake the watch, and besides them
// every other input of the kernel's route lookup that announces its
// changes (routes, nexthop objects, policy rules, neighbours, the
// forwarding switches in netconf), which with every other message end the
// next-hop cache's generation. What changed is read back from the system,
// so a lost message (ENOBUFS when the socket overflows) costs one pass and
// one generation done anyway.
struct Drained {
  std::map<int, std::string> links;  // names by ifindex of the links announced
  bool link_or_tc = false;
  bool any = false;  // any message, or some lost
};

// The bit of rtnetlink multicast group g (RTNLGRP_*) in a bind's group mask.
constexpr unsigned group_bit(unsigned g) { return 1u << (g - 1); }

class LinkEvents {
 public:
  static constexpr unsigned kGroups =
      group_bit(RTNLGRP_LINK) | group_bit(RTNLGRP_TC) | group_bit(RTNLGRP_NEIGH) |
      group_bit(RTNLGRP_IPV4_ROUTE) | group_bit(RTNLGRP_IPV6_ROUTE) | group_bit(RTNLGRP_NEXTHOP) |
      group_bit(RTNLGRP_IPV4_RULE) | group_bit(RTNLGRP_IPV6_RULE) | group_bit(RTNLGRP_IPV4_NETCONF) |
      group_bit(RTNLGRP_IPV6_NETCONF);

  LinkEvents() {
    try {
      nl_ = std::make_unique<NetlinkSocket>(NETLINK_ROUTE, kGroups);
    } catch (const NetlinkError& e) {
      spdlog::warn("no rtnetlink link events ({}): interfaces are re-checked every {} s only", e.what(),
                   kRecheckMs / 1000);
    }
  }

  int fd() const { return nl_ ? nl_->fd() : -1; }

  // Reads every queued message; the links' names serve telling a rename
  // apart from a deletion.
  Drained drain() {
    Drained d;
    if (!nl_) return d;
    auto on_message = [&](const nlmsghdr& h) {
      const auto t = h.nlmsg_type;
      d.link_or_tc |= t == RTM_NEWLINK || t == RTM_DELLINK || t == RTM_NEWTFILTER || t == RTM_DELTFILTER ||
                      t == RTM_NEWQDISC || t == RTM_DELQDISC;
      if (t != RTM_NEWLINK) return;
      const int ifindex = payload<ifinfomsg>(h)->ifi_index;
      for_each_attr(h, sizeof(ifinfomsg), [&](const nlattr& a) {
        if (attr_type(a) != IFLA_IFNAME) return true;
        d.links[ifindex] = attr_string(a);
        return false;
      });
    };
    // Bounded: a socket refilled faster than it is read waits for the next wake.
    for (int reads = 0; reads < 4096; ++reads) {
      EventRead r = EventRead::kNone;
      try {
        r = nl_->read_events(on_message);
      } catch (const NetlinkError& e) {
        spdlog::debug("{}", e.what());
      }
      if (r == EventRead::kLost) {  // messages lost: whatever they said, both passes run
        d.any = d.link_or_tc = true;
        continue;
      }
      if (r == EventRead::kNone) break;  // drained
      d.any = true;
    }
    return d;
  }

 private:
  std::unique_ptr<NetlinkSocket> nl_;
};

// nftables announces every change of its ruleset (iptables-nft's too) to
// NFNLGRP_NFTABLES; with the XDP fast path on, a change probes netfilter
// again at once. Legacy iptables announces none: kNetfilterRecheckMs.
class NetfilterEvents {
 public:
  explicit NetfilterEvents(bool wanted) {
    if (!wanted) return;
    try {
      nl_ = std::make_unique<NetlinkSocket>(NETLINK_NETFILTER, group_bit(NFNLGRP_NFTABLES));
    } catch (const NetlinkError& e) {
      spdlog::debug("no nftables change events ({}): netfilter is probed every {} ms only", e.what(),
                    kNetfilterRecheckMs);
    }
  }

  int fd() const { return nl_ ? nl_->fd() : -1; }

  // Reads what is queued; true when anything was, or was lost.
  bool drain() {
    if (!nl_) return false;
    bool any = false;
    for (int reads = 0; reads < 4096; ++reads) {
      EventRead r = EventRead::kNone;
      try {
        r = nl_->read_events([](const nlmsghdr&) {});
      } catch (const NetlinkError& e) {
        spdlog::debug("{}", e.what());
      }
      if (r == EventRead::kNone) break;
      any = true;
    }
    return any;
  }

 private:
  std::unique_ptr<NetlinkSocket> nl_;
};

// One descriptor the main loop waits on, readable when any of the event
// sockets is (epoll); the single socket itself where there is one, or
// epoll is refused.
class EventWait {
 public:
  explicit EventWait(std::initializer_list<int> fds) {
    std::vector<int> have;
    for (int fd : fds)
      if (fd >= 0) have.push_back(fd);
    if (have.size() == 1) fd_ = have.front();
    if (have.size() < 2) return;
    fd_ = have.front();  // without epoll: the first one's events alone wake the loop
    const int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) return;
    for (int fd : have) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.fd = fd;
      if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
        close(ep);
        return;
      }
    }
    fd_ = epoll_ = ep;
  }
  ~EventWait() {
    if (epoll_ >= 0) close(epoll_);
  }
  EventWait(const EventWait&) = delete;
  EventWait& operator=(const EventWait&) = delete;

  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  int epoll_ = -1;
};

class Runner {
 public:
  // st lists every configured interface, those not there yet with ifindex
  // 0; attached is false when none existed, so nothing is loaded yet.
  Runner(Dataplane& dp, Exporter& ex, State st, bool attached, bool force)
      : dp_(dp), ex_(ex), st_(std::move(st)), loaded_(attached), force_(force) {
    for (const auto& i : st_.interfaces) {
      const LogFields about({{"interface", i.name}});
      set_state(i, i.ifindex != 0);
      if (!i.ifindex)
        spdlog::warn("interface {} does not exist yet: roceguard attaches it when it appears", i.name);
    }
  }

  // The configuration in force changed in place (a reload): the record
  // says so, for `status` (written at the first attach when none is yet).
  void record_config(const Config& cfg) {
    st_.config = cfg.to_json();
    st_.config_hash = cfg.hash();
    if (loaded_) write_state(dp_.pin_path(), st_);
  }

  // Says which configured interface was renamed: the watch pass then sees
  // the old name gone (and the new one, if configured, appear).
  void note_links(const std::map<int, std::string>& links) {
    for (const auto& is : st_.interfaces) {
      if (!is.ifindex || !up_[is.name]) continue;
      const LogFields about({{"interface", is.name}});
      auto it = links.find(is.ifindex);
      if (it != links.end() && it->second != is.name)
        spdlog::info("interface {} (ifindex {}) was renamed to {}", is.name, is.ifindex, printable(it->second));
    }
  }

  // Keeps every configured interface attached: one that appears is
  // attached, one that vanished is reported once and re-attached when it
  // (or a namesake) comes back; a hook someone removed is put back.
  void watch() {
    if (!loaded_) {
      first_attach();
      return;
    }
    bool changed = false;
    for (auto& is : st_.interfaces) {
      const LogFields about({{"interface", is.name}});
      unsigned idx = if_nametoindex(is.name.c_str());
      if (!idx) {
        if (up_[is.name]) {
          spdlog::warn("interface {} disappeared; roceguard keeps running and re-attaches when it returns",
                       is.name);
          set_state(is, false);
        }
        continue;
      }
      check_mtu(is.name);
      try {
        if (static_cast<int>(idx) == is.ifindex && ingress_present(dp_.owner(), is) && tc_present(dp_.owner(), is)) {
          // A MAC address change leaves the hooks in place; the address
          // decapsulated frames are given must follow it.
          dp_.refresh_address(is);
          // Renamed away and back: the hooks stayed on the device.
          if (!up_[is.name]) {
            spdlog::info("interface {} is back (ifindex {}), its hooks still attached", is.name, is.ifindex);
            set_state(is, true);
          }
          continue;
        }
        const bool first_time = is.ifindex == 0 && is.xdp_prog_id == 0;
        IfaceState fresh = dp_.attach_interface(is.name, false);
        spdlog::info("{} {} (ifindex {}): {}, tc id {}", first_time ? "interface appeared: attached to"
                     : "re-attached to", is.name, fresh.ifindex, describe_ingress(fresh), fresh.tc_prog_id);
        // A namesake took the name: the device that had it, renamed, is no
        // longer the configured one and keeps none of our programs.
        if (fresh.ifindex != is.ifindex) dp_.let_go_renamed(is);
        is = fresh;
        changed = true;
        last_error_[is.name].clear();
        set_state(is, true);
      } catch (const std::exception& e) {
        // A link event can wake this pass while the device is being
        // deleted: it was there for the check above and is gone for the
        // attach. That is a disappearance, not an attach failure.
        if (!if_nametoindex(is.name.c_str())) {
          if (up_[is.name])
            spdlog::warn("interface {} disappeared; roceguard keeps running and re-attaches when it returns",
                         is.name);
          set_state(is, false);
          continue;
        }
        if (last_error_[is.name] != e.what()) spdlog::error("cannot re-attach to {}: {}", is.name, e.what());
        last_error_[is.name] = e.what();
        set_state(is, false);
      }
    }
    if (changed) {
      try {
        write_state(dp_.pin_path(), st_);
      } catch (const Error& e) {
        spdlog::error("{}", e.what());
      }
      // A re-attach under a new ifindex means the old one is gone for good.
      dp_.prune_gone_interfaces(st_);
    }
  }

 private:
  // No configured interface existed at start, so the object was never
  // loaded nor the tunnel maps written: the first to appear gets the whole
  // attach, all or nothing as at start.
  void first_attach() {
    bool any = false;
    for (const auto& is : st_.interfaces) any |= if_nametoindex(is.name.c_str()) != 0;
    if (!any) return;
    try {
      st_ = dp_.attach_all(force_, true);
      loaded_ = true;
      last_error_.clear();
      for (const auto& is : st_.interfaces) {
        if (is.ifindex) check_mtu(is.name);
        set_state(is, is.ifindex != 0);
      }
    } catch (const std::exception& e) {
      if (last_error_[""] != e.what()) spdlog::error("cannot attach: {}", e.what());
      last_error_[""] = e.what();
    }
  }

  // A device MTU below the tunnel's means full-size packets can no longer be
  // encapsulated: the data plane applies the oversize policy to them (pass
  // unencapsulated, or drop). Said once per change of the device's MTU.
  void check_mtu(const std::string& name) {
    const LogFields about({{"interface", name}});
    uint32_t tunnel_mtu = 0;
    std::string peer;
    for (const auto& p : dp_.config().peers)
      if (p.mtu > tunnel_mtu) tunnel_mtu = p.mtu, peer = p.name;
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
    if (seen) spdlog::info("interface {} MTU changed from {} to {}", name, seen, mtu);
    // The two below are about the peer with the largest tunnel MTU too.
    const LogFields of_peer(peer.empty() ? LogFieldList{} : LogFieldList{{"peer", peer}});
    if (tunnel_mtu && mtu < tunnel_mtu)
      spdlog::warn("interface {} has MTU {}, below the tunnel MTU {} of peer {}: larger encapsulated packets "
                   "follow the oversize policy ({}); raise the interface MTU or lower tunnel.mtu",
                   name, mtu, tunnel_mtu, peer, dp_.config().mtu_policy == RG_MTU_DROP ? "drop" : "pass");
    else if (tunnel_mtu && seen && seen < tunnel_mtu)
      spdlog::info("interface {} has MTU {} again: the tunnel MTU {} fits", name, mtu, tunnel_mtu);
    seen = mtu;
  }

  // The ingress series is the hook the interface uses (or, before its
  // first attach, the one it is planned to use); the other is not exported.
  void set_state(const IfaceState& is, bool up) {
    up_[is.name] = up;
    const bool tc = is.ifindex ? is.ingress_hook == kIngressTc
                               : planned_ingress_hook(dp_.config(), is.name) == IngressHook::kTc;
    ex_.set_ingress_hook(is.name, tc ? "tc_ingress" : "xdp_ingress");
    ex_.set_attach_state(is.name, tc ? "tc_ingress" : "xdp_ingress", up);
    ex_.set_attach_state(is.name, "tc_egress", up);
  }

  Dataplane& dp_;
  Exporter& ex_;
  State st_;
  bool loaded_;
  bool force_;
  std::map<std::string, bool> up_;
  std::map<std::string, std::string> last_error_;
  std::map<std::string, uint32_t> mtu_seen_;
};

// Makes room in the stream table: streams silent RG_TUNNEL_STREAM_IDLE_NS
// go, their counts kept (daemon/stream_eviction.h).
void evict_streams(Dataplane& dp) {
  const int streams = dp.map_fd(kMapTunnelStreams), retired = dp.map_fd(kMapTunnelRetired);
  if (streams < 0 || retired < 0) return;
  try {
    if (const size_t n = evict_idle_streams(streams, retired, monotonic_now_ns()))
      spdlog::info("evicted {} tunnel sequence stream(s) silent for {} s", n,
                   RG_TUNNEL_STREAM_IDLE_NS / 1000000000ull);
  } catch (const std::exception& e) {
    spdlog::warn("cannot evict idle tunnel sequence streams: {}", e.what());
  }
}

void log_health(const Exporter& exporter) {
  if (!exporter.health_address().empty())
    spdlog::info("serving liveness and readiness on http://{0}/livez and http://{0}/readyz", exporter.health_address());
}

// The exporter's options: the metrics settings from cfg, what a reload
// changes; the interfaces, the pins and the mode are the process's own.
ExporterOptions exporter_options(const Config& cfg, ExporterOptions base) {
  base.listen = cfg.metrics_listen;
  base.health_listen = cfg.health_listen;
  base.web_config = cfg.web_config;
  base.per_qp = cfg.per_qp;
  base.top_qps = cfg.top_qps;
  return base;
}

// The metrics settings of from, into to.
void take_metrics_settings(Config& to, const Config& from) {
  to.metrics_listen = from.metrics_listen;
  to.health_listen = from.health_listen;
  to.web_config = from.web_config;
  to.per_qp = from.per_qp;
  to.top_qps = from.top_qps;
}

// A reload's metrics settings: the exporter applies them (its web
// configuration file read again) and cfg takes them once applied. Logs
// what changed; returns how many settings changed, nothing when they
// could not be applied.
std::optional<size_t> reload_metrics(Config& cfg, const Config& next, Exporter& exporter,
                                     const ExporterOptions& base) {
  std::vector<std::string> applied;
  try {
    applied = exporter.reconfigure(exporter_options(next, base));
  } catch (const std::exception& e) {
    spdlog::error("SIGHUP: metrics settings not applied: {}", e.what());
    return std::nullopt;
  }
  take_metrics_settings(cfg, next);
  if (applied.empty()) return 0;
  std::string names;
  for (const auto& a : applied) names += (names.empty() ? "" : ", ") + a;
  spdlog::info("SIGHUP: {} applied: serving metrics on {}", names, exporter.metrics_url());
  log_health(exporter);
  return applied.size();
}

}  // namespace

StopSignals::StopSignals() {
  sigemptyset(&set_);
  sigaddset(&set_, SIGTERM);
  sigaddset(&set_, SIGINT);
  sigaddset(&set_, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
  fd_ = signalfd(-1, &set_, SFD_CLOEXEC | SFD_NONBLOCK);
}

StopSignals::~StopSignals() {
  if (fd_ >= 0) close(fd_);
}

int StopSignals::wait(int other_fd, int timeout_ms, bool& other_ready) const {
  other_ready = false;
  if (fd_ < 0) {  // no signalfd: signals alone, as sigtimedwait allows
    timespec t{timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
    int sig = sigtimedwait(&set_, nullptr, &t);
    return sig > 0 ? sig : 0;
  }
  pollfd fds[2] = {{fd_, POLLIN, 0}, {other_fd, POLLIN, 0}};
  if (poll(fds, other_fd >= 0 ? 2 : 1, timeout_ms) <= 0) return 0;
  if (fds[0].revents & POLLIN) {
    signalfd_siginfo info{};
    if (read(fd_, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) return static_cast<int>(info.ssi_signo);
  }
  other_ready = other_fd >= 0 && (fds[1].revents & POLLIN);
  return 0;
}

State attach(const Config& cfg, const std::string& pin_path, bool reset_state, bool force) {
  ensure_bpffs(pin_path);
  PinLock lock(pin_path, true);
  Dataplane dp(cfg, pin_path, reset_state);
  return dp.attach_all(force);
}

namespace {

// The option table's keys whose values differ between a and b.
std::vector<std::string> changed_keys(const Config& a, const Config& b) {
  std::vector<std::string> out;
  for (const auto& opt : options())
    if (opt.get && opt.get(a) != opt.get(b)) out.emplace_back(opt.path);
  return out;
}

// SIGHUP: the configuration again. The metrics settings and tunnel.peer
// (slots, routes, decap keys) change in place; every other key needs the
// programs loaded again, and is only logged. A peer inherits from
// [tunnel]: when a key there changed too, the peers wait for the restart
// as well. Exporter-only mode (no dp) applies the metrics settings only.
// Returns true when the peers in force changed.
bool reload_config(Config& cfg, const std::function<Config()>& reload, Exporter& exporter,
                   const ExporterOptions& base, Dataplane* dp, Runner* runner) {
  Config next;
  try {
    next = reload();
  } catch (const std::exception& e) {
    spdlog::error("SIGHUP: configuration refused, the one in force stays: {}", e.what());
    return false;
  }
  // Even with the same settings: the web configuration file is read again.
  const std::vector<std::string> before = changed_keys(cfg, next);
  const std::optional<size_t> metrics = reload_metrics(cfg, next, exporter, base);
  // The state record says what is in force.
  auto record = [&] {
    if (!runner) return;
    Config in_force = dp->config();
    take_metrics_settings(in_force, cfg);
    try {
      runner->record_config(in_force);
    } catch (const std::exception& e) {
      spdlog::error("SIGHUP: {}", e.what());
    }
  };
  if (before.empty()) {
    if (metrics == 0u) spdlog::info("SIGHUP: configuration read again, nothing changed");
    if (metrics > 0u) record();
    return false;
  }
  bool peers = false, tunnel_defaults = false;
  for (const auto& key : before) {
    if (key == "tunnel.peer" && dp) {
      peers = true;
      continue;
    }
    if (key.rfind("metrics.", 0) == 0) continue;  // applied, or said why not
    tunnel_defaults |= key.rfind("tunnel.", 0) == 0;
    spdlog::warn("SIGHUP: {} changed: restart roceguard to apply it (not applied)", key);
  }
  if (metrics > 0u) record();
  if (!peers) return false;
  if (tunnel_defaults) {
    spdlog::warn("SIGHUP: tunnel.peer changed along with [tunnel] keys its peers inherit: restart roceguard to "
                 "apply them (not applied)");
    return false;
  }
  try {
    dp->replace_peers(next.peers);
  } catch (const std::exception& e) {
    spdlog::error("SIGHUP: cannot apply tunnel.peer, the peers in force stay: {}", e.what());
    return false;
  }
  cfg.peers = next.peers;
  record();
  spdlog::info("SIGHUP: tunnel.peer applied: {} peer(s) with their routes", cfg.peers.size());
  return true;
}

// `run` with dataplane.attach = false: nothing attached, nothing pinned, no
// bpffs needed; the exporter serves the NIC counters and profile state.
void run_exporter_only(Config cfg, const StopSignals& signals, const std::function<Config()>& reload) {
  ExporterOptions base;
  base.interfaces = cfg.interfaces;
  base.dataplane = false;
  base.nic_state_dir = nic::kDefaultNicStateDir;
  Exporter exporter(exporter_options(cfg, base));
  spdlog::info("exporter only (dataplane.attach = false): no program attached; NIC counters and profile state on {}",
               exporter.metrics_url());
  log_health(exporter);
  sd_notifyf(0, "READY=1\nSTATUS=exporter only, metrics on %s", exporter.listen_address().c_str());
  for (;;) {
    bool unused = false;
    const int sig = signals.wait(-1, kRecheckMs, unused);
    if (sig == SIGTERM || sig == SIGINT) {
      sd_notify(0, "STOPPING=1");
      spdlog::info("{}: exiting", strsignal(sig));
      return;
    }
    if (sig == SIGHUP && !reload) spdlog::info("SIGHUP: restart the service to apply a new configuration");
    if (sig == SIGHUP && reload) reload_config(cfg, reload, exporter, base, nullptr, nullptr);
    if (!exporter.serving()) throw Error("the metrics endpoint is down: a reload could not start it again", kExitFailure);
  }
}

}  // namespace

void run_daemon(const Config& initial, const std::string& pin_path, bool reset_state, bool force,
                const StopSignals& signals, const std::function<Config()>& reload) {
  // The configuration in force: a reload changes its peers.
  Config cfg = initial;
  if (!cfg.attach_dataplane) return run_exporter_only(cfg, signals, reload);
  ensure_bpffs(pin_path);
  PinLock lock(pin_path, true);
  const PinScope scope = pin_scope(pin_path);
  if (!scope.outlives_process) spdlog::warn("PINS DO NOT SURVIVE THIS PROCESS: {}", scope.why);

  // Bind the exporter before touching the interfaces: a busy port fails
  // the start without side effects.
  ExporterOptions base;
  base.pin_path = pin_path;
  base.interfaces = cfg.interfaces;
  base.pins_outlive_process = scope.outlives_process;
  base.nic_state_dir = nic::kDefaultNicStateDir;
  Exporter exporter(exporter_options(cfg, base));

  Dataplane dp(cfg, pin_path, reset_state);
  // Link events from before the first attach are not lost: the socket
  // queues them until the loop reads it.
  LinkEvents links;
  size_t present = 0;
  for (const auto& name : cfg.interfaces) present += if_nametoindex(name.c_str()) != 0;
  State st;
  if (present) {
    st = dp.attach_all(force, true);
  } else {
    for (const auto& name : cfg.interfaces) st.interfaces.emplace_back().name = name;
  }
  Runner runner(dp, exporter, st, present != 0, force);
  // Granted once the object is loaded (the first interface attached); on
  // every event after that, a new generation. Without the rtnetlink
  // socket no event would end a generation: no lease then, and every
  // packet is routed by the lookup.
  std::unique_ptr<NexthopLeases> leases;
  if (links.fd() < 0) spdlog::warn("next-hop cache off: no rtnetlink events to follow route changes by");
  auto start_leases = [&] {
    if (leases || links.fd() < 0 || dp.map_fd(kMapNexthopLease) < 0) return;
    leases = std::make_unique<NexthopLeases>(dp.map_fd(kMapNexthopLease), cfg.peers, dp.peer_slots());
    leases->invalidate();
    if (!cfg.peers.empty())
      spdlog::info("next-hop cache: {} of {} peer(s) on a single-path route, cached while this process runs",
                   leases->granted(), cfg.peers.size());
  };
  start_leases();
  // The shield's "auto" mode and the loss every peer is told it meets:
  // from the first attach on, with the sequence option only.
  std::unique_ptr<ShieldAuto> shield_auto;
  std::pair<int, int> shield_auto_fds{-1, -1};
  auto run_shield_auto = [&] {
    if (!cfg.tunnel_sequence || cfg.peers.empty()) return;
    // A failed attach starts the next try from a fresh object: its maps
    // are new, and the old descriptors may name something else by then.
    const std::pair<int, int> fds{dp.map_fd(kMapPeerCtl), dp.map_fd(kMapPeerRx)};
    if (fds != shield_auto_fds) shield_auto.reset();
    if (!shield_auto) {
      if (fds.first < 0 || fds.second < 0) return;
      shield_auto = std::make_unique<ShieldAuto>(cfg, dp.peer_slots(), fds.first, fds.second, pin_path);
      shield_auto_fds = fds;
    }
    shield_auto->tick(monotonic_now_ns());
    exporter.set_shield_auto(shield_auto->auto_peers(), shield_auto->feedback());
  };
  run_shield_auto();
  // The congestion loop: every kCongestionTickNs, from the first attach on.
  std::unique_ptr<CongestionLoop> congestion;
  std::array<int, 3> congestion_fds{-1, -1, -1};
  // Pacing while every attached interface's qdisc holds a packet until its
  // stamp; looked at again on every watch pass (a qdisc change is a TC event).
  std::optional<bool> pace_logged;  // what the log said last: the first look is always said
  auto set_pace = [&] {
    if (!congestion) return;
    bool all = cfg.congestion_pace;
    std::string seen;
    for (const auto& name : cfg.interfaces) {
      const int ifindex = static_cast<int>(if_nametoindex(name.c_str()));
      if (!ifindex) continue;
      std::string what;
      try {
        all = qdisc_honours_edt(ifindex, &what) && all;
      } catch (const Error& e) {
        all = false;
        what = e.what();
      }
      seen += (seen.empty() ? "" : ", ") + name + ": " + what;
    }
    if (seen.empty()) all = false;
    if (pace_logged != all)
      spdlog::info("congestion loop: pacing by departure time {} ({})", all ? "on" : "off",
                   cfg.congestion_pace ? (seen.empty() ? "no attached interface" : seen)
                                       : "tunnel.congestion_pace off");
    pace_logged = all;
    congestion->set_pace(all);
  };
  auto run_congestion = [&] {
    if (!cfg.tunnel_congestion || !cfg.tunnel_sequence || cfg.peers.empty()) return;
    const std::array<int, 3> fds{dp.map_fd(kMapPeerCc), dp.map_fd(kMapPeerRx), dp.map_fd(kMapPeerStats)};
    if (fds != congestion_fds) congestion.reset();
    if (!congestion) {
      if (fds[0] < 0 || fds[1] < 0 || fds[2] < 0) return;
      congestion = std::make_unique<CongestionLoop>(cfg, dp.peer_slots(), fds[0], fds[1], fds[2]);
      congestion_fds = fds;
      set_pace();
    }
    congestion->tick(monotonic_now_ns());
    exporter.set_congestion(congestion->peers());
  };
  run_congestion();
  spdlog::info("serving metrics on {}", exporter.metrics_url());
  log_health(exporter);
  sd_notifyf(0, "READY=1\nSTATUS=attached to %zu of %zu interface(s), metrics on %s", present,
             cfg.interfaces.size(), exporter.listen_address().c_str());

  // Bounded by signals only: this is the daemon's main loop: a new
  // next-hop generation per rtnetlink event, the leases renewed every
  // kLeaseRenewMs, a watch pass per link event and at least every
  // kRecheckMs.
  timespec last_watch{};
  clock_gettime(CLOCK_MONOTONIC, &last_watch);
  timespec last_netfilter = last_watch;
  NetfilterEvents nft(cfg.xdp_forward);
  const EventWait events({links.fd(), nft.fd()});
  auto ms_since = [](const timespec& then, const timespec& now) {
    return (now.tv_sec - then.tv_sec) * 1000 + (now.tv_nsec - then.tv_nsec) / 1000000;
  };
  timespec last_renew = last_watch;
  for (;;) {
    bool readable = false;
    // The congestion loop's tick sets the pace when it runs; the rest keeps its own.
    const int wait_ms = cfg.tunnel_congestion ? static_cast<int>(kCongestionTickNs / 1'000'000) : kLeaseRenewMs;
    int sig = signals.wait(events.fd(), wait_ms, readable);
    if (sig == SIGTERM || sig == SIGINT) {
      sd_notify(0, "STOPPING=1");
      if (leases) leases->revoke();
      spdlog::info("{}: exiting; programs stay attached and maps pinned (`roceguard detach` removes them)",
                   strsignal(sig));
      return;
    }
    if (sig == SIGHUP && !reload) spdlog::info("SIGHUP: restart the service to apply a new configuration");
    if (sig == SIGHUP && reload && reload_config(cfg, reload, exporter, base, &dp, &runner)) {
      // Both follow the peers: new ones from the next pass on.
      leases.reset();
      start_leases();
      shield_auto.reset();
      shield_auto_fds = {-1, -1};
      congestion.reset();
      congestion_fds = {-1, -1, -1};
    }
    if (!exporter.serving()) {
      if (leases) leases->revoke();
      throw Error("the metrics endpoint is down: a reload could not start it again; programs stay attached",
                  kExitFailure);
    }
    Drained d;
    bool nft_changed = false;
    if (readable) {
      d = links.drain();
      nft_changed = nft.drain();
    }
    run_shield_auto();
    run_congestion();
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (leases && (d.any || ms_since(last_renew, now) >= kLeaseRenewMs)) {
      last_renew = now;
      const size_t before = leases->granted();
      if (d.any)
        leases->invalidate();
      else
        leases->renew();
      if (leases->granted() != before)
        spdlog::info("next-hop cache: {} of {} peer(s) on a single-path route now", leases->granted(),
                     cfg.peers.size());
    }
    if (cfg.xdp_forward && (nft_changed || ms_since(last_netfilter, now) >= kNetfilterRecheckMs)) {
      last_netfilter = now;
      dp.recheck_fast_path();
    }
    const long since_ms = ms_since(last_watch, now);
    if (!d.link_or_tc && since_ms < kRecheckMs) continue;
    last_watch = now;
    runner.note_links(d.links);
    runner.watch();
    set_pace();
    start_leases();
    evict_streams(dp);
  }
}

DetachResult detach(const std::string& pin_path, const std::vector<std::string>& only,
                    const std::function<void(const std::string&)>& say) {
  if (!pin_dir_exists(pin_path) && only.empty())
    throw Error("nothing attached with pin path " + pin_path, kExitNotFound);
  std::unique_ptr<PinLock> lock;
  if (pin_dir_exists(pin_path)) lock = std::make_unique<PinLock>(pin_path, false);
  // A record that cannot be read names no interface, but the programs are
  // still found: by the maps they use, on every interface.
  std::optional<State> st;
  std::string unreadable;  // why the record cannot be read
  try {
    st = read_state(pin_path);
  } catch (const Error& e) {
    if (e.exit_code() != kExitConflict) throw;
    unreadable = e.what();
  }
  const bool readable = unreadable.empty();
  if (!st) st = State{};
  // Ours are the programs using the maps pinned here: never another
  // instance's (another pin path) on the same interface.
  HookOwner owner(pin_path);
  const auto here = interfaces_here();
  auto name_of = [&](int ifindex) -> std::string {
    for (const auto& n : here)
      if (n.ifindex == ifindex) return n.name;
    return "";
  };
  auto ifindex_of_name = [&](const std::string& name) {
    for (const auto& n : here)
      if (n.name == name) return n.ifindex;
    return 0;
  };

  // The interfaces to clear: every one of the namespace, or those named
  // (by their name now, and, for one the record has, the device it
  // recorded, which may carry another name since).
  std::vector<NetInterface> targets;
  std::vector<IfaceState> remaining;
  auto add_target = [&](int ifindex, const std::string& name) {
    for (const auto& t : targets)
      if (t.ifindex == ifindex) return;
    targets.push_back({ifindex, name});
  };
  if (only.empty()) {
    targets = here;
    for (const auto& is : st->interfaces)
      if (!ifindex_of_name(is.name) && name_of(is.ifindex).empty()) say(is.name + ": gone (nothing to remove)");
  } else {
    for (const auto& is : st->interfaces) {
      bool selected = false;
      for (const auto& n : only) selected |= n == is.name;
      if (!selected) remaining.push_back(is);
    }
    for (const auto& n : only) {
      const IfaceState* recorded = nullptr;
      for (const auto& is : st->interfaces)
        if (is.name == n) recorded = &is;
      if (int ifindex = ifindex_of_name(n)) add_target(ifindex, n);
      if (recorded && recorded->ifindex) {
        const std::string now = name_of(recorded->ifindex);
        if (!now.empty() && now != n) add_target(recorded->ifindex, now + " (was " + n + ")");
      }
      if (!ifindex_of_name(n) && !recorded && readable) throw Error("interface " + n + " does not exist", kExitNotFound);
      if (!ifindex_of_name(n) && (!recorded || name_of(recorded->ifindex).empty()))
        say(n + ": gone (nothing to remove)");
    }
  }

  DetachResult result;
  for (const auto& t : targets) {
    if (&t != &targets.front()) pause_point("detach-between-interfaces");
    DetachLines lines = detach_interface(owner, t.ifindex, t.name);
    for (const auto& line : lines.removed) {
      say(line);
      ++result.programs_removed;
    }
    for (const auto& line : lines.left) say(line);
  }
  // The programs are gone, but pins that cannot be accounted for stay, and
  // the refusal says so: what they hold is for --reset-state to replace.
  if (!readable)
    throw Error(unreadable + "; removed the " + std::to_string(result.programs_removed) +
                    " program(s) of this pin path found by their maps, and kept the pins", kExitConflict);
  // The pins go once no program of theirs is left anywhere: a program
  // whose maps are no longer pinned belongs to no pin path, and no
  // roceguard command could find it again.
  std::vector<std::string> still;
  if (!only.empty())
    for (const auto& n : interfaces_here())
      if (holds_programs(owner, n.ifindex)) still.push_back(n.name);
  if (remaining.empty() && still.empty()) {
    remove_pins(pin_path);
    result.pins_removed = true;
    return result;
  }
  st->interfaces = remaining;
  write_state(pin_path, *st);
  if (remaining.empty()) {
    std::string names;
    for (const auto& n : still) names += (names.empty() ? "" : ", ") + n;
    say("kept the pins under " + pin_path + ": " + names + " still run(s) this pin path's programs (`roceguard "
        "detach` without --interface removes them all)");
  }
  return result;
}

}  // namespace rg
