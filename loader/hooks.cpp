#include "hooks.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/if_link.h>
#include <spdlog/spdlog.h>
#include <unistd.h>
#include <xdp/libxdp.h>

#include <cerrno>
#include <cstdio>
#include <optional>

#include "error.h"

namespace rg {
namespace {

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

enum xdp_attach_mode libxdp_mode(XdpMode mode) { return mode == XdpMode::kSkb ? XDP_MODE_SKB : XDP_MODE_NATIVE; }

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
                  xdp_error_text(err) + " (roceguard needs CAP_NET_ADMIN and CAP_SYS_ADMIN)");
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

  // Takes the directly attached program off the hook.
  void detach_direct(const std::string& ifname) const {
    int err = xdp_multiprog__detach(mp);
    if (err) throw Error("cannot detach XDP program " + main_name() + " from " + ifname + ": " + xdp_error_text(err));
  }

  // Takes every rg_xdp_ingress out of the dispatcher chain, telling
  // removed() the id of each as soon as it is out.
  void remove_ours(int ifindex, const std::string& ifname, const std::function<void(uint32_t)>& removed) const {
    const enum xdp_attach_mode mode = xdp_multiprog__attach_mode(mp);
    for (xdp_program* p : ours()) {
      uint32_t id = xdp_program__id(p);
      int err = xdp_program__detach(p, ifindex, mode, 0);
      if (err)
        throw Error("cannot remove " + std::string(kProgXdp) + " from the dispatcher on " + ifname + ": " +
                    xdp_error_text(err));
      removed(id);
    }
  }

  xdp_multiprog* mp = nullptr;
};

Error xdp_conflict(const std::string& ifname, const std::string& owner, uint32_t id) {
  return Error("interface " + ifname + " already runs XDP program " + owner + " (id " + std::to_string(id) +
                   ") attached directly, without the libxdp dispatcher; roceguard will not replace it. "
                   "Remove it, or give --force to replace it",
               kExitConflict);
}

Error tc_conflict(const std::string& ifname, uint32_t handle, uint32_t priority, const std::string& owner) {
  return Error("interface " + ifname + " already has a TC egress filter at handle " + std::to_string(handle) +
                   " priority " + std::to_string(priority) + " (program " + owner +
                   "); choose another --tc-handle/--tc-priority, or --force",
               kExitConflict);
}

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

void tc_remove(int ifindex, uint32_t handle, uint32_t priority) {
  LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = BPF_TC_EGRESS);
  LIBBPF_OPTS(bpf_tc_opts, o, .handle = handle, .priority = priority);
  bpf_tc_detach(&hook, &o);
}

}  // namespace

void Rollback::run() noexcept {
  for (auto it = steps_.rbegin(); it != steps_.rend(); ++it) {
    try {
      (*it)();
    } catch (const std::exception& e) {
      spdlog::error("rollback: {}", e.what());
    }
  }
  steps_.clear();
}

void refuse_foreign_hooks(int ifindex, const std::string& name, uint32_t tc_handle, uint32_t tc_priority) {
  Multiprog cur(ifindex);
  if (cur.legacy() && cur.main_name() != kProgXdp) throw xdp_conflict(name, cur.main_name(), cur.main_id());
  auto tc = tc_query(ifindex, tc_handle, tc_priority);
  if (tc && tc->name != kProgTc) throw tc_conflict(name, tc_handle, tc_priority, tc->name);
}

XdpAttachment attach_xdp(BpfObject& obj, int ifindex, const std::string& name, XdpMode xdp_mode, bool force,
                         Rollback& undo) {
  const enum xdp_attach_mode mode = libxdp_mode(xdp_mode);
  {
    Multiprog cur(ifindex);
    if (cur.legacy()) {
      std::string owner = cur.main_name();
      uint32_t old_id = cur.main_id();
      enum xdp_attach_mode old_mode = xdp_multiprog__attach_mode(cur.mp);
      if (owner != kProgXdp) {
        if (!force) throw xdp_conflict(name, owner, old_id);
        spdlog::warn("--force: replacing XDP program {} (id {}) on {}", owner, old_id, name);
      }
      // Same mode and a program that can be attached directly: swap it in
      // one netlink request, so ingress never runs without a program.
      if (old_mode == mode && obj.load_direct()) {
        int old_fd = bpf_prog_get_fd_by_id(old_id);
        int new_fd = obj.xdp_prog_fd();
        LIBBPF_OPTS(bpf_xdp_attach_opts, o, .old_prog_fd = old_fd);
        int err = old_fd < 0 ? -errno : bpf_xdp_attach(ifindex, new_fd, legacy_flags(mode) | XDP_FLAGS_REPLACE, &o);
        if (old_fd >= 0) close(old_fd);
        if (err) throw Error("cannot replace XDP program " + owner + " on " + name + ": " + errno_text(err));
        undo.add([ifindex, old_id, new_fd, mode] {
          int fd = bpf_prog_get_fd_by_id(old_id);
          if (fd < 0) return;
          LIBBPF_OPTS(bpf_xdp_attach_opts, back, .old_prog_fd = new_fd);
          bpf_xdp_attach(ifindex, fd, legacy_flags(mode) | XDP_FLAGS_REPLACE, &back);
          close(fd);
        });
        bpf_prog_info info{};
        uint32_t len = sizeof(info);
        bpf_obj_get_info_by_fd(new_fd, &info, &len);
        spdlog::debug("replaced XDP program id {} on {} atomically", old_id, name);
        return {"direct", info.id, false};
      }
      // Otherwise it cannot share the hook: take it off first (libxdp
      // refuses to replace it), put it back on rollback.
      cur.detach_direct(name);
      undo.add([ifindex, old_id, old_mode] {
        int fd = bpf_prog_get_fd_by_id(old_id);
        if (fd < 0) return;
        bpf_xdp_attach(ifindex, fd, legacy_flags(old_mode), nullptr);
        close(fd);
      });
    } else if (cur.mp) {
      enum xdp_attach_mode old_mode = xdp_multiprog__attach_mode(cur.mp);
      cur.remove_ours(ifindex, name, [&undo, ifindex, old_mode](uint32_t old_id) {
        undo.add([ifindex, old_id, old_mode] {
          xdp_program* prev = xdp_program__from_id(old_id);
          if (libxdp_get_error(prev)) return;
          xdp_program__attach(prev, ifindex, old_mode, 0);
          xdp_program__close(prev);
        });
      });
    }
  }

  int err = xdp_program__attach(obj.xdp(), ifindex, mode, 0);
  if (err)
    throw Error("cannot attach " + std::string(kProgXdp) + " to " + name + ": " + xdp_error_text(err) +
                (mode == XDP_MODE_NATIVE ? " (driver without native XDP? try --xdp-mode skb)" : "") +
                " (rerun with --verbose for the libxdp log)");
  // Directly attached: remove it only if it is still this very program
  // (needs no CAP_SYS_ADMIN, so it works when reading the chain did not).
  undo.add([ifindex, name, mode, fd = xdp_program__fd(obj.xdp())] {
    LIBBPF_OPTS(bpf_xdp_attach_opts, opts, .old_prog_fd = fd);
    if (bpf_xdp_detach(ifindex, legacy_flags(mode) | XDP_FLAGS_REPLACE, &opts) == 0) return;
    detach_interface(ifindex, name, 0, 0);
  });

  Multiprog now(ifindex);
  if (now.legacy()) return {"direct", now.main_id(), true};
  auto ours = now.ours();
  if (ours.empty())
    throw Error("attached " + std::string(kProgXdp) + " to " + name + " but cannot find it there afterwards");
  return {"dispatcher", xdp_program__id(ours.front()), false};
}

uint32_t attach_tc(const BpfObject& obj, int ifindex, const std::string& name, uint32_t handle,
                   uint32_t priority, bool force, Rollback& undo) {
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
      if (!force) throw tc_conflict(name, handle, priority, cur->name);
      spdlog::warn("--force: replacing TC filter {} on {}", cur->name, name);
    }
  }
  LIBBPF_OPTS(bpf_tc_opts, o, .prog_fd = obj.tc_prog_fd(), .flags = BPF_TC_F_REPLACE, .handle = handle,
              .priority = priority);
  err = bpf_tc_attach(&hook, &o);
  if (err) throw Error("cannot attach " + std::string(kProgTc) + " to " + name + " egress: " + errno_text(err));
  undo.add([ifindex, handle, priority, old_id] {
    if (!old_id) {
      tc_remove(ifindex, handle, priority);
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

bool xdp_present(const IfaceState& st) {
  if (!st.ifindex) return false;
  Multiprog cur(st.ifindex);
  if (cur.legacy()) return cur.main_name() == kProgXdp;
  return !cur.ours().empty();
}

bool tc_present(const IfaceState& st) {
  if (!st.ifindex) return false;
  auto tc = tc_query(st.ifindex, st.tc_handle, st.tc_priority);
  return tc && tc->name == kProgTc;
}

uint32_t detach_tc(int ifindex, uint32_t handle, uint32_t priority) {
  auto tc = tc_query(ifindex, handle, priority);
  if (!tc || tc->name != kProgTc) return 0;
  tc_remove(ifindex, handle, priority);
  return tc->prog_id;
}

std::vector<std::string> detach_interface(int ifindex, const std::string& name, uint32_t tc_handle,
                                          uint32_t tc_priority) {
  std::vector<std::string> done;
  {
    Multiprog cur(ifindex);
    if (cur.legacy() && cur.main_name() == kProgXdp) {
      uint32_t id = cur.main_id();
      cur.detach_direct(name);
      done.push_back(name + ": removed XDP program " + kProgXdp + " (id " + std::to_string(id) + ")");
    } else if (cur.mp) {
      cur.remove_ours(ifindex, name, [&done, &name](uint32_t id) {
        done.push_back(name + ": removed " + kProgXdp + " (id " + std::to_string(id) + ") from the libxdp dispatcher");
      });
    }
  }
  if (tc_handle && tc_priority) {
    if (uint32_t id = detach_tc(ifindex, tc_handle, tc_priority)) {
      char handle[16];
      std::snprintf(handle, sizeof(handle), "%#x", tc_handle);
      done.push_back(name + ": removed TC egress filter " + kProgTc + " (handle " + handle + ", priority " +
                     std::to_string(tc_priority) + ", id " + std::to_string(id) + ")");
    }
  }
  return done;
}

}  // namespace rg
