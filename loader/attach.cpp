#include "attach.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/if_link.h>
#include <net/if.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xdp/libxdp.h>

#include <cerrno>
#include <cstdarg>
#include <cstring>
#include <fstream>
#include <set>

#include "error.h"
#include "maps.h"
#include "roceguard.skel.h"

namespace rg {
namespace {

std::string xdp_error(int err) {
  char buf[256] = {};
  libxdp_strerror(err, buf, sizeof(buf));
  return buf;
}

std::string prog_name_by_id(uint32_t id) {
  int fd = bpf_prog_get_fd_by_id(id);
  if (fd < 0) return {};
  bpf_prog_info info{};
  uint32_t len = sizeof(info);
  std::string name;
  if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0) name = info.name;
  close(fd);
  return name;
}

uint32_t legacy_flags(enum xdp_attach_mode mode) {
  return mode == XDP_MODE_SKB ? XDP_FLAGS_SKB_MODE : XDP_FLAGS_DRV_MODE;
}

// XDP program chain of an interface; nullptr when nothing is attached.
struct Multiprog {
  explicit Multiprog(int ifindex) {
    mp = xdp_multiprog__get_from_ifindex(ifindex);
    long err = libxdp_get_error(mp);
    if (!err) return;
    mp = nullptr;
    // Reading the chain opens programs by id, which needs CAP_SYS_ADMIN;
    // guessing "nothing attached" would let us replace a foreign program.
    if (err != -ENOENT)
      throw Error("cannot read the XDP programs of ifindex " + std::to_string(ifindex) + ": " +
                  xdp_error(static_cast<int>(err)) + " (roceguard needs CAP_NET_ADMIN and CAP_SYS_ADMIN)");
  }
  ~Multiprog() {
    if (mp) xdp_multiprog__close(mp);
  }
  Multiprog(const Multiprog&) = delete;
  Multiprog& operator=(const Multiprog&) = delete;

  bool legacy() const { return mp && xdp_multiprog__is_legacy(mp); }
  // Our programs in a dispatcher chain.
  std::vector<xdp_program*> ours() const {
    std::vector<xdp_program*> out;
    if (!mp || legacy()) return out;
    for (xdp_program* p = xdp_multiprog__next_prog(nullptr, mp); p; p = xdp_multiprog__next_prog(p, mp))
      if (std::string(xdp_program__name(p)) == kProgXdp) out.push_back(p);
    return out;
  }
  std::string main_name() const {
    xdp_program* m = mp ? xdp_multiprog__main_prog(mp) : nullptr;
    return m ? xdp_program__name(m) : "";
  }
  uint32_t main_id() const {
    xdp_program* m = mp ? xdp_multiprog__main_prog(mp) : nullptr;
    return m ? xdp_program__id(m) : 0;
  }

  xdp_multiprog* mp = nullptr;
};

struct TcFilter {
  uint32_t prog_id = 0;
  std::string name;
};

std::optional<TcFilter> tc_query(int ifindex, uint32_t handle, uint32_t priority) {
  LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = BPF_TC_EGRESS);
  LIBBPF_OPTS(bpf_tc_opts, q, .handle = handle, .priority = priority);
  if (bpf_tc_query(&hook, &q) != 0) return std::nullopt;
  return TcFilter{q.prog_id, prog_name_by_id(q.prog_id)};
}

void tc_detach(int ifindex, uint32_t handle, uint32_t priority) {
  LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = BPF_TC_EGRESS);
  LIBBPF_OPTS(bpf_tc_opts, o, .handle = handle, .priority = priority);
  bpf_tc_detach(&hook, &o);
}

int libbpf_log(enum libbpf_print_level level, const char* fmt, va_list ap) {
  char buf[1024];
  vsnprintf(buf, sizeof(buf), fmt, ap);
  size_t n = strlen(buf);
  while (n && buf[n - 1] == '\n') buf[--n] = '\0';
  // libxdp probes kernel features by trying them, and libbpf warns about
  // each probe that fails; only --verbose shows them.
  spdlog::debug("{}{}", level == LIBBPF_DEBUG ? "libbpf debug: " : "libbpf: ", buf);
  return 0;
}

int libxdp_log(enum libxdp_print_level level, const char* fmt, va_list ap) {
  char buf[1024];
  vsnprintf(buf, sizeof(buf), fmt, ap);
  size_t n = strlen(buf);
  while (n && buf[n - 1] == '\n') buf[--n] = '\0';
  spdlog::debug("{}{}", level == LIBXDP_DEBUG ? "libxdp debug: " : "libxdp: ", buf);
  return 0;
}

bool any_map_pinned(const std::string& pin_path) {
  struct stat st {};
  for (const char* name : kPinnedMaps)
    if (stat((pin_path + "/" + name).c_str(), &st) == 0) return true;
  return false;
}

// Rollback runs every step even when one fails: a step that throws must
// not leave the others' attachments behind.
void run_undo(std::vector<std::function<void()>>& undo) {
  for (auto it = undo.rbegin(); it != undo.rend(); ++it) {
    try {
      (*it)();
    } catch (const std::exception& e) {
      spdlog::error("rollback: {}", e.what());
    }
  }
  undo.clear();
}

}  // namespace

void setup_bpf_logging() {
  libbpf_set_print(libbpf_log);
  libxdp_set_print(libxdp_log);
}

std::vector<MapMismatch> check_pinned_maps(struct roceguard* skel, const std::string& pin_path) {
  std::vector<MapMismatch> out;
  bpf_map* map;
  bpf_object__for_each_map(map, skel->obj) {
    std::string name = bpf_map__name(map);
    bool persistent = false;
    for (const char* p : kPinnedMaps) persistent |= name == p;
    if (!persistent) continue;
    std::string path = pin_path + "/" + name;
    int fd = bpf_obj_get(path.c_str());
    if (fd < 0) continue;
    bpf_map_info info{};
    uint32_t len = sizeof(info);
    int err = bpf_obj_get_info_by_fd(fd, &info, &len);
    close(fd);
    if (err) continue;
    std::string diff;
    auto cmp = [&](const char* what, uint64_t pinned, uint64_t wanted) {
      if (pinned == wanted) return;
      if (!diff.empty()) diff += ", ";
      diff += std::string(what) + " " + std::to_string(pinned) + " pinned, " + std::to_string(wanted) +
              " wanted";
    };
    cmp("type", info.type, bpf_map__type(map));
    cmp("key_size", info.key_size, bpf_map__key_size(map));
    cmp("value_size", info.value_size, bpf_map__value_size(map));
    cmp("max_entries", info.max_entries, bpf_map__max_entries(map));
    cmp("map_flags", info.map_flags, bpf_map__map_flags(map));
    if (!diff.empty()) out.push_back({name, diff});
  }
  return out;
}

Dataplane::Dataplane(const Config& cfg, const std::string& pin_path, bool reset_state)
    : cfg_(cfg), pin_path_(pin_path) {
  skel_ = roceguard__open();
  if (!skel_) throw Error("cannot open the embedded BPF object: " + errno_text(errno));
  skel_->rodata->rg_cfg = cfg_.rodata();
  int err = bpf_map__set_max_entries(skel_->maps.rg_qp, cfg_.qp_entries);
  if (err) throw Error("cannot size rg_qp to " + std::to_string(cfg_.qp_entries) + ": " + errno_text(err));

  auto mismatches = check_pinned_maps(skel_, pin_path_);
  if (!mismatches.empty()) {
    if (!reset_state) {
      std::string msg = "pinned maps under " + pin_path_ + " do not match this build/config:";
      for (const auto& m : mismatches) msg += "\n  " + m.name + ": " + m.differences;
      msg += "\nreusing them would corrupt state; rerun with --reset-state to replace them "
             "(their counters are lost), or restore the previous qp_entries";
      throw Error(msg, kExitConflict);
    }
    for (const auto& m : mismatches)
      spdlog::warn("--reset-state: replacing pinned map {} ({})", m.name, m.differences);
  }
  if (reset_state) {
    for (const char* name : kPinnedMaps) unlink((pin_path_ + "/" + name).c_str());
    spdlog::info("--reset-state: removed the pinned maps under {}; counters start at zero", pin_path_);
  }

  // Set before load: libbpf then reuses a compatible pinned map (counters
  // carry over) or creates and pins a new one.
  for (const char* name : kPinnedMaps) {
    bpf_map* m = bpf_object__find_map_by_name(skel_->obj, name);
    if (!m) throw Error(std::string("BPF object has no map ") + name);
    err = bpf_map__set_pin_path(m, (pin_path_ + "/" + name).c_str());
    if (err) throw Error(std::string("cannot set pin path of ") + name + ": " + errno_text(err));
  }

  // libxdp loads the object itself so that, with a dispatcher, the XDP
  // program is loaded as an extension of it.
  DECLARE_LIBXDP_OPTS(xdp_program_opts, opts, .obj = skel_->obj, .prog_name = kProgXdp);
  xdp_ = xdp_program__create(&opts);
  if (libxdp_get_error(xdp_)) {
    long e = libxdp_get_error(xdp_);
    xdp_ = nullptr;
    throw Error("cannot prepare XDP program: " + xdp_error(static_cast<int>(e)));
  }
}

Dataplane::~Dataplane() {
  if (xdp_) xdp_program__close(xdp_);
  if (skel_) roceguard__destroy(skel_);
}

int Dataplane::map_fd(const char* name) const {
  bpf_map* m = bpf_object__find_map_by_name(skel_->obj, name);
  return m ? bpf_map__fd(m) : -1;
}

bool Dataplane::load_direct() {
  bpf_program* prog = skel_->progs.rg_xdp_ingress;
  if (bpf_program__fd(prog) >= 0) return bpf_program__type(prog) == BPF_PROG_TYPE_XDP;
  // The hook already holds a directly attached program, so the dispatcher
  // is out of reach here; load the object as plain XDP ourselves and hand
  // libxdp the loaded program for any further interface.
  int err = roceguard__load(skel_);
  if (err) throw Error("cannot load the BPF object: " + errno_text(err) + " (rerun with --verbose for the verifier log)");
  xdp_program__close(xdp_);
  xdp_ = xdp_program__from_fd(dup(bpf_program__fd(prog)));
  if (libxdp_get_error(xdp_)) {
    long e = libxdp_get_error(xdp_);
    xdp_ = nullptr;
    throw Error("cannot hand the XDP program to libxdp: " + xdp_error(static_cast<int>(e)));
  }
  return true;
}

void Dataplane::ensure_loaded() {
  if (bpf_program__fd(skel_->progs.rg_tc_egress) < 0)
    throw Error("BPF object was not loaded (rerun with --verbose for the libbpf log)");
}

std::string Dataplane::xdp_attach(int ifindex, const std::string& name, bool force, uint32_t& prog_id,
                                  std::vector<std::function<void()>>& undo) {
  const enum xdp_attach_mode mode = cfg_.xdp_mode == XdpMode::kSkb ? XDP_MODE_SKB : XDP_MODE_NATIVE;
  {
    Multiprog cur(ifindex);
    if (cur.legacy()) {
      std::string owner = cur.main_name();
      uint32_t old_id = cur.main_id();
      enum xdp_attach_mode old_mode = xdp_multiprog__attach_mode(cur.mp);
      if (owner != kProgXdp) {
        if (!force)
          throw Error("interface " + name + " already runs XDP program " + owner + " (id " +
                          std::to_string(old_id) +
                          ") attached directly, without the libxdp dispatcher; roceguard will not "
                          "replace it. Remove it, or give --force to replace it",
                      kExitConflict);
        spdlog::warn("--force: replacing XDP program {} (id {}) on {}", owner, old_id, name);
      }
      // Same mode and a program that can be attached directly: swap it in
      // one netlink request, so ingress never runs without a program.
      if (old_mode == mode && load_direct()) {
        int old_fd = bpf_prog_get_fd_by_id(old_id);
        int new_fd = bpf_program__fd(skel_->progs.rg_xdp_ingress);
        LIBBPF_OPTS(bpf_xdp_attach_opts, o, .old_prog_fd = old_fd);
        int err = old_fd < 0 ? -errno : bpf_xdp_attach(ifindex, new_fd, legacy_flags(mode) | XDP_FLAGS_REPLACE, &o);
        if (old_fd >= 0) close(old_fd);
        if (err) throw Error("cannot replace XDP program " + owner + " on " + name + ": " + errno_text(err));
        undo.push_back([ifindex, old_id, new_fd, mode] {
          int fd = bpf_prog_get_fd_by_id(old_id);
          if (fd < 0) return;
          LIBBPF_OPTS(bpf_xdp_attach_opts, back, .old_prog_fd = new_fd);
          bpf_xdp_attach(ifindex, fd, legacy_flags(mode) | XDP_FLAGS_REPLACE, &back);
          close(fd);
        });
        bpf_prog_info info{};
        uint32_t len = sizeof(info);
        bpf_obj_get_info_by_fd(new_fd, &info, &len);
        prog_id = info.id;
        spdlog::debug("replaced XDP program id {} on {} atomically", old_id, name);
        return "direct";
      }
      // Otherwise it cannot share the hook: take it off first (libxdp
      // refuses to replace it), put it back on rollback.
      int err = xdp_multiprog__detach(cur.mp);
      if (err) throw Error("cannot detach XDP program " + owner + " from " + name + ": " + xdp_error(err));
      undo.push_back([ifindex, old_id, old_mode] {
        int fd = bpf_prog_get_fd_by_id(old_id);
        if (fd < 0) return;
        bpf_xdp_attach(ifindex, fd, legacy_flags(old_mode), nullptr);
        close(fd);
      });
    } else if (cur.mp) {
      enum xdp_attach_mode old_mode = xdp_multiprog__attach_mode(cur.mp);
      for (xdp_program* p : cur.ours()) {
        uint32_t old_id = xdp_program__id(p);
        int err = xdp_program__detach(p, ifindex, old_mode, 0);
        if (err)
          throw Error("cannot remove the previous " + std::string(kProgXdp) + " from the dispatcher on " +
                      name + ": " + xdp_error(err));
        undo.push_back([ifindex, old_id, old_mode] {
          xdp_program* prev = xdp_program__from_id(old_id);
          if (libxdp_get_error(prev)) return;
          xdp_program__attach(prev, ifindex, old_mode, 0);
          xdp_program__close(prev);
        });
      }
    }
  }

  int err = xdp_program__attach(xdp_, ifindex, mode, 0);
  if (err)
    throw Error("cannot attach " + std::string(kProgXdp) + " to " + name + ": " + xdp_error(err) +
                (mode == XDP_MODE_NATIVE ? " (driver without native XDP? try --xdp-mode skb)" : "") +
                " (rerun with --verbose for the libxdp log)");
  // Directly attached: remove it only if it is still this very program
  // (needs no CAP_SYS_ADMIN, so it works when reading the chain did not).
  undo.push_back([ifindex, name, mode, fd = xdp_program__fd(xdp_)] {
    LIBBPF_OPTS(bpf_xdp_attach_opts, opts, .old_prog_fd = fd);
    if (bpf_xdp_detach(ifindex, legacy_flags(mode) | XDP_FLAGS_REPLACE, &opts) == 0) return;
    detach_interface(ifindex, name, 0, 0);
  });

  Multiprog now(ifindex);
  if (now.legacy()) {
    prog_id = now.main_id();
    if (!warned_direct_)
      spdlog::warn(
          "libxdp dispatcher unavailable on this kernel: attached {} directly to {}; other XDP "
          "programs cannot coexist on it",
          kProgXdp, name);
    warned_direct_ = true;
    return "direct";
  }
  auto ours = now.ours();
  if (ours.empty())
    throw Error("attached " + std::string(kProgXdp) + " to " + name + " but cannot find it there afterwards");
  prog_id = xdp_program__id(ours.front());
  return "dispatcher";
}

uint32_t Dataplane::tc_attach(int ifindex, const std::string& name, bool force,
                              std::vector<std::function<void()>>& undo) {
  const uint32_t handle = cfg_.tc_handle, priority = cfg_.tc_priority;
  LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = BPF_TC_EGRESS);
  // EEXIST: clsact is already there (ours from before, or another tool's);
  // it is shared and never destroyed by roceguard.
  int err = bpf_tc_hook_create(&hook);
  if (err && err != -EEXIST)
    throw Error("cannot create the clsact qdisc on " + name + ": " + errno_text(err));

  uint32_t old_id = 0;
  if (auto cur = tc_query(ifindex, handle, priority)) {
    old_id = cur->prog_id;
    if (cur->name != kProgTc) {
      if (!force)
        throw Error("interface " + name + " already has a TC egress filter at handle " +
                        std::to_string(handle) + " priority " + std::to_string(priority) + " (program " +
                        cur->name + "); choose another --tc-handle/--tc-priority, or --force",
                    kExitConflict);
      spdlog::warn("--force: replacing TC filter {} on {}", cur->name, name);
    }
  }
  LIBBPF_OPTS(bpf_tc_opts, o, .prog_fd = bpf_program__fd(skel_->progs.rg_tc_egress),
              .flags = BPF_TC_F_REPLACE, .handle = handle, .priority = priority);
  err = bpf_tc_attach(&hook, &o);
  if (err) throw Error("cannot attach " + std::string(kProgTc) + " to " + name + " egress: " + errno_text(err));
  undo.push_back([ifindex, handle, priority, old_id] {
    if (!old_id) {
      tc_detach(ifindex, handle, priority);
      return;
    }
    int fd = bpf_prog_get_fd_by_id(old_id);
    if (fd < 0) return;
    LIBBPF_OPTS(bpf_tc_hook, h, .ifindex = ifindex, .attach_point = BPF_TC_EGRESS);
    LIBBPF_OPTS(bpf_tc_opts, back, .prog_fd = fd, .flags = BPF_TC_F_REPLACE, .handle = handle,
                .priority = priority);
    bpf_tc_attach(&h, &back);
    close(fd);
  });
  return o.prog_id;
}

void Dataplane::write_maps() {
  // Peers first, so that no route or decap entry points at a slot that is
  // not filled in yet; stale routes point at zeroed (unused) slots at worst.
  int peers = map_fd(kMapPeers);
  for (uint32_t i = 0; i < RG_MAX_PEERS; ++i) {
    rg_peer v{};
    if (i < cfg_.peers.size()) {
      const auto& p = cfg_.peers[i];
      v.vni = p.vni;
      v.mtu = static_cast<__u16>(p.mtu);
      v.family = static_cast<__u8>(p.remote.family);
      std::memcpy(v.local, p.local.bytes.data(), 16);
      std::memcpy(v.remote, p.remote.bytes.data(), 16);
    }
    if (bpf_map_update_elem(peers, &i, &v, BPF_ANY) != 0)
      throw Error("cannot write rg_peers[" + std::to_string(i) + "]: " + errno_text(errno));
  }

  // Writes every wanted key, then deletes every other key: the map ends up
  // exactly as configured.
  auto sync = [](int fd, const char* name, size_t key_size,
                 const std::vector<std::pair<std::vector<uint8_t>, uint32_t>>& wanted) {
    std::set<std::vector<uint8_t>> keep;
    for (const auto& [k, v] : wanted) {
      if (bpf_map_update_elem(fd, k.data(), &v, BPF_ANY) != 0)
        throw Error(std::string("cannot write ") + name + ": " + errno_text(errno));
      keep.insert(k);
    }
    std::vector<std::vector<uint8_t>> stale;
    std::vector<uint8_t> key(key_size), next(key_size);
    const void* prev = nullptr;
    for (size_t guard = 0; guard < 1u << 20 && bpf_map_get_next_key(fd, prev, next.data()) == 0; ++guard) {
      key = next;
      prev = key.data();
      if (!keep.count(key)) stale.push_back(key);
    }
    for (const auto& k : stale) bpf_map_delete_elem(fd, k.data());
  };

  std::vector<std::pair<std::vector<uint8_t>, uint32_t>> r4, r6, decap;
  for (uint32_t i = 0; i < cfg_.peers.size(); ++i) {
    const auto& p = cfg_.peers[i];
    for (const auto& r : p.routes) {
      if (r.addr.family == AF_INET) {
        rg_route4_key k{};
        k.prefixlen = r.len;
        std::memcpy(k.addr, r.addr.bytes.data(), 4);
        r4.push_back({std::vector<uint8_t>(reinterpret_cast<uint8_t*>(&k), reinterpret_cast<uint8_t*>(&k + 1)), i});
      } else {
        rg_route6_key k{};
        k.prefixlen = r.len;
        std::memcpy(k.addr, r.addr.bytes.data(), 16);
        r6.push_back({std::vector<uint8_t>(reinterpret_cast<uint8_t*>(&k), reinterpret_cast<uint8_t*>(&k + 1)), i});
      }
    }
    rg_decap_key d{};
    std::memcpy(d.remote, p.remote.bytes.data(), 16);
    d.family = static_cast<__u32>(p.remote.family);
    d.vni = p.vni;
    decap.push_back({std::vector<uint8_t>(reinterpret_cast<uint8_t*>(&d), reinterpret_cast<uint8_t*>(&d + 1)), i});
  }
  sync(map_fd(kMapRoute4), kMapRoute4, sizeof(rg_route4_key), r4);
  sync(map_fd(kMapRoute6), kMapRoute6, sizeof(rg_route6_key), r6);
  sync(map_fd(kMapDecap), kMapDecap, sizeof(rg_decap_key), decap);
}

IfaceState Dataplane::attach_interface(const std::string& name, bool force) {
  IfaceState st;
  st.name = name;
  st.ifindex = static_cast<int>(if_nametoindex(name.c_str()));
  if (!st.ifindex) throw Error("interface " + name + " does not exist", kExitNotFound);
  std::vector<std::function<void()>> undo;
  try {
    st.xdp_mode = xdp_attach(st.ifindex, name, force, st.xdp_prog_id, undo);
    ensure_loaded();
    st.tc_prog_id = tc_attach(st.ifindex, name, force, undo);
    st.tc_handle = cfg_.tc_handle;
    st.tc_priority = cfg_.tc_priority;
  } catch (...) {
    run_undo(undo);
    throw;
  }
  return st;
}

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

}  // namespace

State Dataplane::attach_all(bool force) {
  auto prev = read_state(pin_path_);
  bool fresh_pins = !any_map_pinned(pin_path_);

  // Refuse conflicts before changing anything.
  for (const auto& name : cfg_.interfaces) {
    int ifindex = static_cast<int>(if_nametoindex(name.c_str()));
    if (!ifindex) throw Error("interface " + name + " does not exist", kExitNotFound);
    if (force) continue;
    Multiprog cur(ifindex);
    if (cur.legacy() && cur.main_name() != kProgXdp)
      throw Error("interface " + name + " already runs XDP program " + cur.main_name() + " (id " +
                      std::to_string(cur.main_id()) +
                      ") attached directly, without the libxdp dispatcher; roceguard will not replace "
                      "it. Remove it, or give --force to replace it",
                  kExitConflict);
    auto tc = tc_query(ifindex, cfg_.tc_handle, cfg_.tc_priority);
    if (tc && tc->name != kProgTc)
      throw Error("interface " + name + " already has a TC egress filter at handle " +
                      std::to_string(cfg_.tc_handle) + " priority " + std::to_string(cfg_.tc_priority) +
                      " (program " + tc->name + "); choose another --tc-handle/--tc-priority, or --force",
                  kExitConflict);
  }

  State st;
  st.version = ROCEGUARD_VERSION;
  st.config = cfg_.to_json();
  st.config_hash = cfg_.hash();
  std::vector<std::function<void()>> undo;
  try {
    for (const auto& name : cfg_.interfaces) {
      IfaceState is = attach_interface(name, force);
      undo.push_back([is] { detach_interface(is.ifindex, is.name, is.tc_handle, is.tc_priority); });
      spdlog::info("attached to {} (ifindex {}): xdp {} id {}, tc egress handle {:#x} prio {} id {}", name,
                   is.ifindex, is.xdp_mode, is.xdp_prog_id, is.tc_handle, is.tc_priority, is.tc_prog_id);
      st.interfaces.push_back(is);
    }
    write_maps();
    restrict_pins(pin_path_);
    write_state(pin_path_, st);
    warn_if_not_forwarding(cfg_);
  } catch (...) {
    run_undo(undo);
    if (fresh_pins) remove_pins(pin_path_);
    spdlog::error("attach failed: everything attached in this run was removed again");
    throw;
  }

  // What the previous record attached and this configuration does not: an
  // interface it dropped, or our filter at a handle/priority it moved.
  if (prev) {
    for (const auto& old : prev->interfaces) {
      bool kept = false;
      for (const auto& n : cfg_.interfaces) kept |= n == old.name;
      char buf[IF_NAMESIZE] = {};
      if (!old.ifindex || !if_indextoname(static_cast<unsigned>(old.ifindex), buf) || old.name != buf) continue;
      if (!kept) {
        for (const auto& line : detach_interface(old.ifindex, old.name, old.tc_handle, old.tc_priority))
          spdlog::info("{} (no longer configured)", line);
      } else if (old.tc_handle != cfg_.tc_handle || old.tc_priority != cfg_.tc_priority) {
        auto tc = tc_query(old.ifindex, old.tc_handle, old.tc_priority);
        if (tc && tc->name == kProgTc) {
          tc_detach(old.ifindex, old.tc_handle, old.tc_priority);
          spdlog::info("{}: removed the TC filter at the previous handle {:#x} priority {}", old.name,
                       old.tc_handle, old.tc_priority);
        }
      }
    }
  }
  return st;
}

bool Dataplane::xdp_present(const IfaceState& st) {
  if (!st.ifindex) return false;
  Multiprog cur(st.ifindex);
  if (cur.legacy()) return cur.main_name() == kProgXdp;
  return !cur.ours().empty();
}

bool Dataplane::tc_present(const IfaceState& st) {
  if (!st.ifindex) return false;
  auto tc = tc_query(st.ifindex, st.tc_handle, st.tc_priority);
  return tc && tc->name == kProgTc;
}

std::vector<std::string> detach_interface(int ifindex, const std::string& name, uint32_t tc_handle,
                                          uint32_t tc_priority) {
  std::vector<std::string> done;
  {
    Multiprog cur(ifindex);
    if (cur.legacy() && cur.main_name() == kProgXdp) {
      uint32_t id = cur.main_id();
      int err = xdp_multiprog__detach(cur.mp);
      if (err) throw Error("cannot detach XDP from " + name + ": " + xdp_error(err));
      done.push_back(name + ": removed XDP program " + kProgXdp + " (id " + std::to_string(id) + ")");
    } else if (cur.mp) {
      enum xdp_attach_mode mode = xdp_multiprog__attach_mode(cur.mp);
      for (xdp_program* p : cur.ours()) {
        uint32_t id = xdp_program__id(p);
        int err = xdp_program__detach(p, ifindex, mode, 0);
        if (err) throw Error("cannot remove " + std::string(kProgXdp) + " from the dispatcher on " + name + ": " + xdp_error(err));
        done.push_back(name + ": removed " + kProgXdp + " (id " + std::to_string(id) + ") from the libxdp dispatcher");
      }
    }
  }
  if (tc_handle && tc_priority) {
    auto tc = tc_query(ifindex, tc_handle, tc_priority);
    if (tc && tc->name == kProgTc) {
      tc_detach(ifindex, tc_handle, tc_priority);
      char handle[16];
      std::snprintf(handle, sizeof(handle), "%#x", tc_handle);
      done.push_back(name + ": removed TC egress filter " + kProgTc + " (handle " + handle + ", priority " +
                     std::to_string(tc_priority) + ", id " + std::to_string(tc->prog_id) + ")");
    }
  }
  return done;
}

}  // namespace rg
