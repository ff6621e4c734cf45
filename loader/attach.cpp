#include "attach.h"

#include <net/if.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <fstream>

#include "error.h"
#include "map_writer.h"
#include "maps.h"

namespace rg {
namespace {

// Some kernels (Debian 12's 6.1 among them) answer bpf_fib_lookup with
// "forwarding disabled" on an interface that does not forward, output
// lookups included: every encapsulation would then fall back to sending the
// packet as it is (counted as fib_miss). Gateways forward anyway; say so
// where one does not.
void warn_if_not_forwarding(const Config& cfg) {
  bool v4 = false, v6 = false;
  for (const auto& p : cfg.peers) (p.remote.family == AF_INET ? v4 : v6) = true;
  auto forwarding = [](const std::string& family, const std::string& ifname) {
    std::ifstream f("/proc/sys/net/" + family + "/conf/" + ifname + "/forwarding");
    int on = 1;
    return !(f >> on) || on != 0;  // unreadable: assume fine, say nothing
  };
  for (const auto& name : cfg.interfaces) {
    if (v4 && !forwarding("ipv4", name))
      spdlog::warn("{}: net.ipv4.conf.{}.forwarding is 0; on some kernels bpf_fib_lookup then refuses to route "
                   "to IPv4 tunnel peers and packets leave unencapsulated (counted as fib_miss): enable forwarding",
                   name, name);
    if (v6 && !forwarding("ipv6", name))
      spdlog::warn("{}: net.ipv6.conf.{}.forwarding is 0; on some kernels bpf_fib_lookup then refuses to route "
                   "to IPv6 tunnel peers and packets leave unencapsulated (counted as fib_miss): enable forwarding",
                   name, name);
  }
}

int ifindex_of(const std::string& name) {
  int ifindex = static_cast<int>(if_nametoindex(name.c_str()));
  if (!ifindex) throw Error("interface " + name + " does not exist", kExitNotFound);
  return ifindex;
}

}  // namespace

Dataplane::Dataplane(const Config& cfg, const std::string& pin_path, bool reset_state)
    : cfg_(cfg), pin_path_(pin_path), obj_(cfg_, pin_path_, reset_state) {}

IfaceState Dataplane::attach_interface(const std::string& name, bool force) {
  IfaceState st;
  st.name = name;
  st.ifindex = ifindex_of(name);
  Rollback undo;
  try {
    XdpAttachment xdp = attach_xdp(obj_, st.ifindex, name, cfg_.xdp_mode, force, undo);
    st.xdp_mode = xdp.mode;
    st.xdp_prog_id = xdp.prog_id;
    if (xdp.no_dispatcher && !warned_no_dispatcher_)
      spdlog::warn(
          "libxdp dispatcher unavailable on this kernel: attached {} directly to {}; other XDP "
          "programs cannot coexist on it",
          kProgXdp, name);
    warned_no_dispatcher_ |= xdp.no_dispatcher;
    obj_.ensure_loaded();
    st.tc_prog_id = attach_tc(obj_, st.ifindex, name, cfg_.tc_handle, cfg_.tc_priority, force, undo);
    st.tc_handle = cfg_.tc_handle;
    st.tc_priority = cfg_.tc_priority;
  } catch (...) {
    undo.run();
    throw;
  }
  return st;
}

State Dataplane::attach_all(bool force, bool skip_absent) {
  auto absent = [&](const std::string& name) { return skip_absent && !if_nametoindex(name.c_str()); };
  auto prev = read_state(pin_path_);
  bool fresh_pins = !any_map_pinned(pin_path_);

  // Refuse conflicts before changing anything.
  for (const auto& name : cfg_.interfaces) {
    if (absent(name)) continue;
    int ifindex = ifindex_of(name);
    if (!force) refuse_foreign_hooks(ifindex, name, cfg_.tc_handle, cfg_.tc_priority);
  }

  State st;
  st.version = ROCEGUARD_VERSION;
  st.config = cfg_.to_json();
  st.config_hash = cfg_.hash();
  Rollback undo;
  try {
    for (const auto& name : cfg_.interfaces) {
      if (absent(name)) {
        st.interfaces.emplace_back().name = name;
        continue;
      }
      IfaceState is = attach_interface(name, force);
      undo.add([is] { detach_interface(is.ifindex, is.name, is.tc_handle, is.tc_priority); });
      spdlog::info("attached to {} (ifindex {}): xdp {} id {}, tc egress handle {:#x} prio {} id {}", name,
                   is.ifindex, is.xdp_mode, is.xdp_prog_id, is.tc_handle, is.tc_priority, is.tc_prog_id);
      st.interfaces.push_back(is);
    }
    MapWriter(obj_.map_fd(kMapPeers), obj_.map_fd(kMapRoute4), obj_.map_fd(kMapRoute6), obj_.map_fd(kMapDecap))
        .write_tunnels(cfg_.peers);
    restrict_pins(pin_path_);
    write_state(pin_path_, st);
    warn_if_not_forwarding(cfg_);
  } catch (...) {
    undo.run();
    if (fresh_pins) remove_pins(pin_path_);
    spdlog::error("attach failed: everything attached in this run was removed again");
    throw;
  }
  if (prev) detach_unconfigured(*prev);
  return st;
}

void Dataplane::detach_unconfigured(const State& prev) const {
  for (const auto& old : prev.interfaces) {
    bool kept = false;
    for (const auto& n : cfg_.interfaces) kept |= n == old.name;
    char buf[IF_NAMESIZE] = {};
    if (!old.ifindex || !if_indextoname(static_cast<unsigned>(old.ifindex), buf) || old.name != buf) continue;
    if (!kept) {
      for (const auto& line : detach_interface(old.ifindex, old.name, old.tc_handle, old.tc_priority))
        spdlog::info("{} (no longer configured)", line);
    } else if ((old.tc_handle != cfg_.tc_handle || old.tc_priority != cfg_.tc_priority) &&
               detach_tc(old.ifindex, old.tc_handle, old.tc_priority)) {
      spdlog::info("{}: removed the TC filter at the previous handle {:#x} priority {}", old.name, old.tc_handle,
                   old.tc_priority);
    }
  }
}

}  // namespace rg
