#include "dataplane/attach.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <spdlog/spdlog.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <optional>
#include <fstream>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/log.h"
#include "common/pause_point.h"
#include "dataplane/map_writer.h"
#include "dataplane/maps.h"
#include "dataplane/tunnel_auth.h"

namespace rg {
namespace {

// Why the fast path's slot stays empty, for the log.
std::string fast_path_off_text(const NetfilterProbe& p) {
  return "XDP fast path off: " + p.summary() +
         "; forwarded RoCE must pass netfilter, so the stack forwards it (a frame the fast path redirects "
         "passes no netfilter hook)";
}

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

// The device's own MAC address (SIOCGIFHWADDR); nullopt for a device
// without an Ethernet address.
std::optional<rg_iface> iface_address(const std::string& name) {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw Error("socket: " + errno_text(errno));
  ifreq req{};
  name.copy(req.ifr_name, IFNAMSIZ - 1);
  int rc = ioctl(fd, SIOCGIFHWADDR, &req);
  int err = errno;
  close(fd);
  if (rc != 0) throw Error("cannot read the address of " + name + ": " + errno_text(err));
  if (req.ifr_hwaddr.sa_family != ARPHRD_ETHER) return std::nullopt;
  rg_iface value{};
  std::memcpy(value.mac, req.ifr_hwaddr.sa_data, sizeof(value.mac));
  return value;
}

// Writes ifindex's entry of rg_ifaces: the address the XDP program gives
// the frames it decapsulates there, and whether a VLAN tag can reach XDP
// outside the frames received there (vlan_unseen says why).
struct IfaceAddressWrite {
  std::optional<rg_iface> before, now;
  std::optional<std::string> vlan_unseen;
};

IfaceAddressWrite write_iface_address(const std::string& pin_path, int ifindex, const std::string& name) {
  const std::string path = pin_path + "/" + kMapIfaces;
  IfaceAddressWrite w{rg_iface{}, iface_address(name), std::nullopt};
  if (w.now) {
    w.vlan_unseen = vlan_tags_unseen(ifindex, name);
    if (w.vlan_unseen) w.now->flags |= RG_IFACE_F_VLAN_UNSEEN;
  }
  int fd = bpf_obj_get(path.c_str());
  if (fd < 0) throw Error("cannot open " + path + ": " + errno_text(errno));
  const uint32_t key = static_cast<uint32_t>(ifindex);
  if (bpf_map_lookup_elem(fd, &key, &*w.before) != 0) w.before.reset();
  int rc = 0;
  if (w.now)
    rc = bpf_map_update_elem(fd, &key, &*w.now, BPF_ANY);
  else if (w.before)
    rc = bpf_map_delete_elem(fd, &key);
  int err = errno;
  close(fd);
  if (rc != 0) throw Error("cannot write the address of " + name + " to " + path + ": " + errno_text(err));
  return w;
}

void restore_iface_address(const std::string& pin_path, int ifindex, const std::optional<rg_iface>& before) {
  const std::string path = pin_path + "/" + kMapIfaces;
  int fd = bpf_obj_get(path.c_str());
  if (fd < 0) throw Error("cannot open " + path + ": " + errno_text(errno));
  const uint32_t key = static_cast<uint32_t>(ifindex);
  if (before)
    bpf_map_update_elem(fd, &key, &*before, BPF_ANY);
  else
    bpf_map_delete_elem(fd, &key);
  close(fd);
}

// The four tunnel maps, opened from their pins, and the per-peer state a
// slot's change of occupant clears (absent pins of an earlier build: -1).
class TunnelMaps {
 public:
  explicit TunnelMaps(const std::string& pin_path) {
    for (size_t i = 0; i < kNames.size(); ++i) {
      fds_[i] = bpf_obj_get((pin_path + "/" + kNames[i]).c_str());
      if (fds_[i] < 0 && i < kRequired) {
        int err = errno;
        close_all();
        throw Error("cannot open " + pin_path + "/" + kNames[i] + ": " + errno_text(err));
      }
    }
  }
  ~TunnelMaps() { close_all(); }
  TunnelMaps(const TunnelMaps&) = delete;
  TunnelMaps& operator=(const TunnelMaps&) = delete;

  MapWriter writer() const {
    return MapWriter(fds_[0], fds_[1], fds_[2], fds_[3], fds_[4], fds_[5], fds_[6], fds_[7]);
  }

 private:
  static constexpr size_t kRequired = 4;
  static constexpr std::array<const char*, 8> kNames{kMapPeers,     kMapRoute4,        kMapRoute6,
                                                     kMapDecap,     kMapPeerStats,     kMapTunnelStreams,
                                                     kMapPeerGuard, kMapTunnelRetired};
  void close_all() {
    for (int& fd : fds_)
      if (fd >= 0) close(fd), fd = -1;
  }
  std::array<int, 8> fds_{-1, -1, -1, -1, -1, -1, -1, -1};
};

// Every pin an attach may replace or create, held as it was before: a
// failed attach pins each old map again (an earlier build's counters, the
// record --reset-state dropped) and unlinks what it created.
class PinSnapshot {
 public:
  explicit PinSnapshot(const std::string& pin_path) : pin_path_(pin_path) {
    std::vector<const char*> names(kPinnedMaps.begin(), kPinnedMaps.end());
    names.insert(names.end(), {kMapQpLegacy, kMapXdpNext, kMapState});
    for (const char* name : names) held_.emplace_back(name, bpf_obj_get((pin_path + "/" + name).c_str()));
  }
  ~PinSnapshot() {
    for (auto& [name, fd] : held_)
      if (fd >= 0) close(fd);
  }
  PinSnapshot(const PinSnapshot&) = delete;
  PinSnapshot& operator=(const PinSnapshot&) = delete;

  void restore() const {
    for (const auto& [name, fd] : held_) {
      const std::string path = pin_path_ + "/" + name;
      if (fd >= 0)
        pin_replacing(fd, path);
      else
        unlink(path.c_str());
    }
    restrict_pins(pin_path_);
  }

 private:
  std::string pin_path_;
  std::vector<std::pair<std::string, int>> held_;
};

}  // namespace

IngressHook planned_ingress_hook(const Config& cfg, const std::string& ifname) {
  if (cfg.ingress_hook != IngressHook::kAuto) return cfg.ingress_hook;
  // The fast path forwards from the XDP hook: where XDP copies the frame
  // first, skipping the stack still wins.
  if (cfg.xdp_forward) return IngressHook::kXdp;
  // Generic XDP is an skb hook already; on veth native XDP first copies
  // the skb into a page. TC ingress sees the same skb for less.
  if (cfg.xdp_mode == XdpMode::kSkb || xdp_runs_on_skb(ifname)) return IngressHook::kTc;
  return IngressHook::kXdp;
}

std::string describe_ingress(const IfaceState& is) {
  if (is.ingress_hook == kIngressTc)
    return "tc ingress (" + is.tc_attach + ") id " + std::to_string(is.tc_ingress_prog_id);
  return "xdp " + is.xdp_mode + " id " + std::to_string(is.xdp_prog_id);
}

Dataplane::Dataplane(const Config& cfg, const std::string& pin_path, bool reset_state)
    : cfg_(cfg), pin_path_(pin_path), reset_state_(reset_state), owner_(pin_path_), obj_(cfg_, pin_path_, reset_state) {}

IfaceState Dataplane::attach_interface(const std::string& name, bool force) {
  Rollback undo;
  try {
    return attach_interface(name, force, undo);
  } catch (...) {
    undo.run();
    throw;
  }
}

IfaceState Dataplane::attach_interface(const std::string& name, bool force, Rollback& undo) {
  IfaceState st;
  st.name = name;
  st.ifindex = ifindex_of(name);
  // Before the programs, like the tunnel maps: the first Geneve frame
  // decapsulated here already gets this device's address.
  const IfaceAddressWrite written = write_iface_address(pin_path_, st.ifindex, name);
  const auto before = written.before;
  if (cfg_.xdp_forward && written.vlan_unseen)
    spdlog::info("{}: the XDP fast path leaves the frames received here to the stack: {}", name,
                 *written.vlan_unseen);
  undo.add(name + "'s previous entry in " + std::string(kMapIfaces),
           [pin = pin_path_, ifindex = st.ifindex, before] { restore_iface_address(pin, ifindex, before); });
  IngressHook ingress = planned_ingress_hook(cfg_, name);
  if (ingress == IngressHook::kXdp) {
    try {
      XdpAttachment xdp = attach_xdp(obj_, owner_, st.ifindex, name, cfg_.xdp_mode, force, undo);
      st.xdp_mode = xdp.mode;
      st.xdp_prog_id = xdp.prog_id;
      if (xdp.no_dispatcher && !warned_no_dispatcher_)
        spdlog::warn(
            "libxdp dispatcher unavailable on this kernel: attached {} directly to {}; other XDP "
            "programs cannot coexist on it",
            kProgXdp, name);
      warned_no_dispatcher_ |= xdp.no_dispatcher;
    } catch (const Error& e) {
      // TC ingress takes any driver and any MTU; only a configured "xdp"
      // makes the refusal final.
      if (cfg_.ingress_hook != IngressHook::kAuto || e.exit_code() == kExitConflict) throw;
      spdlog::warn("{}; ingress_hook is auto: using TC ingress on {} instead", e.what(), name);
      ingress = IngressHook::kTc;
    }
  }
  obj_.load();
  obj_.ensure_loaded();
  write_keys();
  if (cfg_.xdp_forward) {
    if (fast_path_open_) link_forward(st, name);
    set_forward_target(st.ifindex, name, ingress == IngressHook::kXdp, undo);
  }
  st.tc_handle = cfg_.tc_handle;
  st.tc_priority = cfg_.tc_priority;
  const bool tcx = use_tcx();
  st.tc_attach = tcx ? kTcAttachTcx : kTcAttachClsact;
  auto attach_hook = [&](TcHook h) {
    return tcx ? attach_tcx(obj_, owner_, st.ifindex, name, h, undo)
               : attach_tc(obj_, owner_, st.ifindex, name, h, cfg_.tc_handle, cfg_.tc_priority, force, undo);
  };
  if (ingress == IngressHook::kTc) {
    st.ingress_hook = kIngressTc;
    st.tc_ingress_prog_id = attach_hook(TcHook::kIngress);
  }
  // Only now that the new hook runs does the other one give its program up.
  remove_other_ingress(owner_, st.ifindex, name, ingress, cfg_.tc_handle, cfg_.tc_priority, undo);
  st.tc_prog_id = attach_hook(TcHook::kEgress);
  // The same for an earlier attach's programs attached the other way.
  remove_other_tc(owner_, st.ifindex, name, TcHook::kEgress, tcx, cfg_.tc_handle, cfg_.tc_priority, undo);
  if (ingress == IngressHook::kTc)
    remove_other_tc(owner_, st.ifindex, name, TcHook::kIngress, tcx, cfg_.tc_handle, cfg_.tc_priority, undo);
  return st;
}

bool Dataplane::use_tcx() const {
  if (cfg_.tc_attach == TcAttach::kClsact) return false;
  const bool have = tcx_supported();
  if (!have && cfg_.tc_attach == TcAttach::kTcx)
    throw Error("dataplane.tc_attach is tcx, but this kernel has no tcx (Linux 6.6 or later): use auto or clsact",
                kExitUsage);
  return have;
}

void Dataplane::link_forward(const IfaceState& st, const std::string& name) const {
  try {
    obj_.link_forward();
  } catch (const Error& e) {
    if (st.xdp_mode != "dispatcher") throw;
    // Linux 6.1 takes a program array's owner type as the extension's own,
    // not its dispatcher's, and refuses an XDP program there.
    throw Error(std::string(e.what()) + ": this kernel does not let " + kProgXdp +
                    ", loaded into the libxdp dispatcher on " + name +
                    " (another XDP program runs there, or roceguard's ran there before), tail-call the XDP fast "
                    "path; with " + name + "'s XDP hook to itself roceguard attaches directly: detach the other "
                    "program (or `roceguard detach`, then attach again), or turn dataplane.xdp_forward off",
                kExitConflict);
  }
}

void Dataplane::set_forward_target(int ifindex, const std::string& name, bool xdp, Rollback& undo) {
  int fd = obj_.map_fd(kMapXdpTx);
  if (fd < 0) throw Error(std::string("internal: the loaded object has no ") + kMapXdpTx);
  const uint32_t key = static_cast<uint32_t>(ifindex);
  if (!xdp) {
    // A device without XDP of its own has no XDP transmit either (a bridge,
    // a VLAN device, virtio-net above a page on Linux 6.1): what the fast
    // path redirected there would be dropped.
    bpf_map_delete_elem(fd, &key);
    spdlog::warn("{}: no XDP on this interface, so the XDP fast path does not send to it: RoCE forwarded "
                 "out of {} takes the slow path (the stack and TC egress)",
                 name, name);
    return;
  }
  if (bpf_map_update_elem(fd, &key, &key, BPF_ANY) != 0)
    throw Error("cannot make " + name + " a target of the XDP fast path (" + kMapXdpTx + "): " + errno_text(errno));
  undo.add(name + "'s entry in " + std::string(kMapXdpTx), [fd, key] { bpf_map_delete_elem(fd, &key); });
}

State Dataplane::attach_all(bool force, bool skip_absent) {
  auto absent = [&](const std::string& name) { return skip_absent && !if_nametoindex(name.c_str()); };
  std::optional<State> prev;
  try {
    prev = read_state(pin_path_);
  } catch (const Error& e) {
    // --reset-state replaces a record that cannot be read; nothing else may.
    if (!reset_state_ || e.exit_code() != kExitConflict) throw;
    spdlog::warn("--reset-state: {}", e.what());
  }

  if (cfg_.xdp_forward) {
    netfilter_ = probe_netfilter();
    fast_path_open_ = !netfilter_.applies();
    if (!fast_path_open_) spdlog::warn("{}", fast_path_off_text(netfilter_));
  }

  // Refuse conflicts before changing anything.
  for (const auto& name : cfg_.interfaces) {
    if (absent(name)) continue;
    int ifindex = ifindex_of(name);
    if (!force)
      refuse_foreign_hooks(owner_, ifindex, name, cfg_.tc_handle, cfg_.tc_priority, planned_ingress_hook(cfg_, name),
                           use_tcx());
  }

  State st;
  st.version = ROCEGUARD_VERSION;
  st.config = cfg_.to_json();
  st.config_hash = cfg_.hash();
  Rollback undo;
  auto pins = std::make_shared<PinSnapshot>(pin_path_);
  try {
    // Reopened on rollback: the pins as they were, whatever this attach
    // replaced, migrated or created.
    undo.add("the pins under " + pin_path_, [pins] { pins->restore(); });
    // Every check passed: only now the pins change (--reset-state, an
    // earlier build's maps carried over), then the maps are created, so
    // that a program attached from here on finds its peers and routes from
    // its first packet.
    obj_.prepare_pins();
    obj_.pin_maps();
    owner_.add_pinned(pin_path_);
    // The intent, before any interface is touched: the configured ones, and
    // the previous record's others, which keep their programs until the
    // attach is done.
    State intent = st;
    for (const auto& name : cfg_.interfaces) {
      IfaceState& is = intent.interfaces.emplace_back();
      is.name = name;
      is.ifindex = static_cast<int>(if_nametoindex(name.c_str()));
      is.ingress_hook = planned_ingress_hook(cfg_, name) == IngressHook::kTc ? kIngressTc : kIngressXdp;
      is.tc_handle = cfg_.tc_handle;
      is.tc_priority = cfg_.tc_priority;
      is.tc_attach = use_tcx() ? kTcAttachTcx : kTcAttachClsact;
    }
    if (prev)
      for (const auto& old : prev->interfaces)
        if (!configured(old.name)) intent.interfaces.push_back(old);
    write_state(pin_path_, intent);
    undo.add("the attach record", [pin = pin_path_, prev] {
      if (prev) write_state(pin, *prev);  // without one before, the pins' restore removes it
    });
    {
      TunnelMaps maps(pin_path_);
      MapWriter writer = maps.writer();
      auto before = std::make_shared<MapWriter::Snapshot>(writer.snapshot());
      // Reopened on rollback: this scope's fds are closed by then.
      undo.add("the tunnel maps' previous entries", [pin = pin_path_, before] {
        TunnelMaps again(pin);
        again.writer().restore(*before);
      });
      place_peers(writer.write_tunnels(cfg_.peers));
    }
    // Loaded by an earlier step (a reattach of a loaded object): the keys
    // now; else each interface's attach writes them once it loads.
    write_keys();
    for (const auto& name : cfg_.interfaces) {
      const LogFields about({{"interface", name}});
      if (absent(name)) {
        st.interfaces.emplace_back().name = name;
        continue;
      }
      if (!st.interfaces.empty()) pause_point("attach-between-interfaces");
      IfaceState is = attach_interface(name, force, undo);
      if (is.tc_attach == kTcAttachTcx)
        spdlog::info("attached to {} (ifindex {}): {}, tc egress (tcx) id {}", name, is.ifindex,
                     describe_ingress(is), is.tc_prog_id);
      else
        spdlog::info("attached to {} (ifindex {}): {}, tc egress clsact handle {:#x} prio {} id {}", name,
                     is.ifindex, describe_ingress(is), is.tc_handle, is.tc_priority, is.tc_prog_id);
      st.interfaces.push_back(is);
    }
    // Attached is not the same as seeing the packets: a program another
    // tool put ahead of ours (a tcx link in front keeps its place across
    // this attach) may end their path first.
    for (const auto& is : st.interfaces) {
      if (!is.ifindex) continue;
      for (const auto& a : programs_ahead(owner_, is.ifindex, is.tc_priority, is.ingress_hook == kIngressTc))
        spdlog::warn("{}: {} (id {}, {}) runs ahead of roceguard on TC {} and can end the packet's path there: "
                     "roceguard then never sees it (`roceguard doctor` says what to do)",
                     is.name, a.name, a.prog_id, a.where, tc_hook_name(a.hook));
    }
    // Every interface runs this load's programs now.
    obj_.pin_forward();
    restrict_pins(pin_path_);
    write_state(pin_path_, st);
  } catch (const std::exception& e) {
    spdlog::error("attach failed: {}; putting every interface back as it was", e.what());
    undo.run();
    // The next attempt (run retries) loads afresh on the pins put back.
    obj_.discard();
    throw;
  }
  obj_.finish_pins();
  prune_gone_interfaces(st);
  warn_if_not_forwarding(cfg_);
  detach_unconfigured();
  return st;
}

void Dataplane::write_keys() {
  if (keys_written_ || !obj_.loaded()) return;
  if (const int auth = obj_.map_fd(kMapPeerAuth); auth >= 0) write_peer_auth(auth, cfg_.peers, peer_slots_);
  keys_written_ = true;
}

void Dataplane::replace_peers(const std::vector<PeerConfig>& peers) {
  // A key rotation is a reload: the key files are read again. A slot whose
  // peer changes may check the new peer's options with the old keys until
  // its entry is written: those count as bad, none is taken.
  const int auth = obj_.loaded() ? obj_.map_fd(kMapPeerAuth) : -1;
  if (access((pin_path_ + "/" + kMapPeers).c_str(), F_OK) == 0) {
    TunnelMaps maps(pin_path_);
    MapWriter writer = maps.writer();
    const MapWriter::Snapshot before = writer.snapshot();
    if (auth >= 0) write_peer_auth(auth, peers, writer.place(peers).slots);
    try {
      place_peers(writer.write_tunnels(peers));
    } catch (...) {
      writer.restore(before);
      throw;
    }
  }
  cfg_.peers = peers;
}

void Dataplane::place_peers(const MapWriter::Placement& placed) {
  peer_slots_ = placed.slots;
  // What the loaded object's own maps hold for a slot's previous occupant
  // (its reports, the decision on it, its cached next hop, its untracked
  // arrivals) is not the new
  // one's. A fresh object's are empty already.
  struct Own {
    const char* name;
    bool per_cpu;
  };
  for (const Own& m : {Own{kMapPeerRx, true}, Own{kMapPeerCtl, false}, Own{kMapPeerCc, false},
                       Own{kMapPeerPq, false}, Own{kMapNexthops, true}, Own{kMapPeerUntracked, false}}) {
    const int fd = obj_.map_fd(m.name);
    if (fd < 0) continue;
    bpf_map_info info{};
    uint32_t len = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd, &info, &len) != 0) continue;
    const int ncpu = m.per_cpu ? libbpf_num_possible_cpus() : 1;
    std::vector<uint8_t> zero((info.value_size + 7) / 8 * 8 * static_cast<size_t>(std::max(ncpu, 1)));
    for (uint32_t slot : placed.changed)
      if (bpf_map_update_elem(fd, &slot, zero.data(), BPF_ANY) != 0)
        spdlog::warn("cannot clear {}[{}]: {}", m.name, slot, errno_text(errno));
  }
}

void Dataplane::recheck_fast_path() {
  if (!cfg_.xdp_forward || !obj_.loaded()) return;
  NetfilterProbe now = probe_netfilter();
  const bool open = !now.applies();
  const bool changed = open != fast_path_open_ || now.found != netfilter_.found;
  netfilter_ = std::move(now);
  if (!changed) return;
  const int fd = obj_.map_fd(kMapXdpNext);
  const uint32_t key = 0;
  if (!open) {
    if (fd >= 0 && bpf_map_delete_elem(fd, &key) != 0 && errno != ENOENT) {
      spdlog::error("cannot empty {}: {}; the XDP fast path still runs past netfilter", kMapXdpNext,
                    errno_text(errno));
      return;  // tried again on the next check
    }
    fast_path_open_ = false;
    spdlog::warn("{}", fast_path_off_text(netfilter_));
    return;
  }
  try {
    obj_.link_forward();
  } catch (const Error& e) {
    spdlog::error("no netfilter rule applies to forwarded packets any more, but the XDP fast path stays off: {}",
                  e.what());
    return;
  }
  fast_path_open_ = true;
  spdlog::info("XDP fast path on: no netfilter rule applies to forwarded packets any more");
}

void Dataplane::refresh_address(const IfaceState& is) const {
  try {
    auto w = write_iface_address(pin_path_, is.ifindex, is.name);
    if (w.before && w.now && std::memcmp(w.before->mac, w.now->mac, sizeof(w.now->mac)) != 0)
      spdlog::info("{}: address changed; decapsulated frames now go to the new one", is.name);
    const bool was = w.before && (w.before->flags & RG_IFACE_F_VLAN_UNSEEN);
    if (cfg_.xdp_forward && w.now && was != bool(w.vlan_unseen)) {
      if (w.vlan_unseen)
        spdlog::info("{}: the XDP fast path leaves the frames received here to the stack: {}", is.name,
                     *w.vlan_unseen);
      else
        spdlog::info("{}: no VLAN tag can hide outside its frames any more; the XDP fast path takes them again",
                     is.name);
    }
  } catch (const std::exception& e) {
    spdlog::warn("{}: {}", is.name, e.what());
  }
}

void Dataplane::prune_gone_interfaces(const State& st) const {
  std::set<uint32_t> keep;
  for (const auto& is : st.interfaces) keep.insert(static_cast<uint32_t>(is.ifindex));
  try {
    if (size_t n = prune_counters(obj_.map_fd(kMapCounters), keep))
      spdlog::info("removed the counters of {} interface/direction pair(s) whose interface no longer exists", n);
  } catch (const std::exception& e) {
    spdlog::warn("cannot prune {}: {}", kMapCounters, e.what());
  }
  if (size_t n = prune_defunct_tcx_pins(pin_path_))
    spdlog::info("removed {} tcx link pin(s) whose interface no longer exists", n);
}

bool Dataplane::configured(const std::string& name) const {
  for (const auto& n : cfg_.interfaces)
    if (n == name) return true;
  return false;
}

void Dataplane::detach_unconfigured() const {
  try {
    for (const auto& net : interfaces_here()) {
      if (configured(net.name)) {
        for (const auto& line : remove_moved_tc(owner_, net.ifindex, net.name, cfg_.tc_handle, cfg_.tc_priority))
          spdlog::info("{}", line);
        continue;
      }
      auto lines = detach_interface(owner_, net.ifindex, net.name);
      for (const auto& line : lines.removed) spdlog::info("{} (not configured)", line);
    }
  } catch (const std::exception& e) {
    spdlog::warn("cannot remove roceguard's programs from the interfaces no longer configured: {}", e.what());
  }
}

void Dataplane::let_go_renamed(const IfaceState& st) const {
  char buf[IF_NAMESIZE] = {};
  if (!st.ifindex || !if_indextoname(static_cast<unsigned>(st.ifindex), buf) || configured(buf)) return;
  try {
    auto lines = detach_interface(owner_, st.ifindex, buf);
    for (const auto& line : lines.removed)
      spdlog::info("{} (renamed from {}, which names another interface now)", line, st.name);
  } catch (const std::exception& e) {
    spdlog::warn("{} (renamed from {}): cannot remove roceguard's programs: {}", buf, st.name, e.what());
  }
}

}  // namespace rg
