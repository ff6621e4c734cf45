#include "dataplane/hooks.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/ethtool.h>
#include <linux/if_link.h>
#include <linux/pkt_cls.h>
#include <linux/pkt_sched.h>
#include <linux/rtnetlink.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <spdlog/spdlog.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>
#include <xdp/libxdp.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>

#include "common/error.h"
#include "common/netlink.h"
#include "dataplane/maps.h"
#include "dataplane/tcx_uapi.h"

namespace rg {
namespace {

bpf_tc_attach_point tc_point(TcHook h) { return h == TcHook::kIngress ? BPF_TC_INGRESS : BPF_TC_EGRESS; }

const char* tc_prog_name(TcHook h) { return h == TcHook::kIngress ? kProgTcIngress : kProgTc; }

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

std::vector<uint32_t> prog_map_ids(uint32_t id) {
  int fd = bpf_prog_get_fd_by_id(id);
  if (fd < 0) return {};
  bpf_prog_info info{};
  uint32_t len = sizeof(info);
  std::vector<uint32_t> ids;
  if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0 && info.nr_map_ids) {
    ids.resize(info.nr_map_ids);
    bpf_prog_info again{};
    again.nr_map_ids = info.nr_map_ids;
    again.map_ids = reinterpret_cast<uintptr_t>(ids.data());
    len = sizeof(again);
    if (bpf_obj_get_info_by_fd(fd, &again, &len) != 0) ids.clear();
    ids.resize(std::min<size_t>(ids.size(), again.nr_map_ids));
  }
  close(fd);
  return ids;
}

uint32_t prog_id_of_fd(int fd) {
  bpf_prog_info info{};
  uint32_t len = sizeof(info);
  return bpf_obj_get_info_by_fd(fd, &info, &len) == 0 ? info.id : 0;
}

// A reference on a program: the kernel frees a program once no hook and no
// fd holds it, so one replaced on a hook can only be put back while held.
using ProgRef = std::shared_ptr<const int>;
ProgRef hold_prog(uint32_t id) {
  int fd = bpf_prog_get_fd_by_id(id);
  if (fd < 0) return nullptr;
  return ProgRef(new int(fd), [](const int* p) {
    close(*p);
    delete p;
  });
}

// A tcx link's fd: the link stays attached while a pin or an fd holds it.
using LinkRef = std::shared_ptr<const int>;
LinkRef hold_fd(int fd) {
  return LinkRef(new int(fd), [](const int* p) {
    close(*p);
    delete p;
  });
}

uint32_t tcx_attach_type(TcHook h) { return h == TcHook::kIngress ? tcx::kAttachIngress : tcx::kAttachEgress; }

// A tcx hook's programs in the order they run, each with its link's id (0
// for a program attached without a link).
struct TcxChain {
  std::vector<uint32_t> progs;
  std::vector<uint32_t> links;
};

// nullopt (errno set) when the kernel has no tcx or refuses the query.
std::optional<TcxChain> tcx_chain(int ifindex, TcHook h) {
  // More programs than this on one hook are not read (the kernel answers
  // ENOSPC with the first ones).
  constexpr uint32_t kMax = 64;
  TcxChain c;
  c.progs.resize(kMax);
  c.links.resize(kMax);
  tcx::QueryAttr a{};
  a.target_ifindex = static_cast<uint32_t>(ifindex);
  a.attach_type = tcx_attach_type(h);
  a.prog_ids = reinterpret_cast<uintptr_t>(c.progs.data());
  a.link_ids = reinterpret_cast<uintptr_t>(c.links.data());
  a.count = kMax;
  if (syscall(__NR_bpf, BPF_PROG_QUERY, &a, sizeof(a)) != 0 && errno != ENOSPC) return std::nullopt;
  const size_t n = std::min(a.count, kMax);
  c.progs.resize(n);
  c.links.resize(n);
  return c;
}

// A new tcx link for prog_fd, first on hook h, pinned at path; throws.
LinkRef create_tcx_link(int prog_fd, int ifindex, TcHook h, const std::string& path) {
  tcx::LinkCreateAttr a{};
  a.prog_fd = static_cast<uint32_t>(prog_fd);
  a.target_ifindex = static_cast<uint32_t>(ifindex);
  a.attach_type = tcx_attach_type(h);
  a.flags = tcx::kFlagBefore;  // before no program in particular: first
  const int fd = static_cast<int>(syscall(__NR_bpf, BPF_LINK_CREATE, &a, sizeof(a)));
  if (fd < 0) throw Error(errno_text(errno));
  LinkRef link = hold_fd(fd);
  if (bpf_obj_pin(fd, path.c_str()) != 0) {
    const int err = errno;
    bpf_link_detach(fd);
    throw Error("cannot pin its link at " + path + ": " + errno_text(err));
  }
  chmod(path.c_str(), 0600);
  return link;
}

// Takes the tcx link link_id off its hook and unlinks its pin path.
void detach_tcx_link(uint32_t link_id, const std::string& path) {
  const int fd = bpf_link_get_fd_by_id(link_id);
  if (fd < 0) throw Error("cannot open tcx link id " + std::to_string(link_id) + ": " + errno_text(errno));
  const int rc = bpf_link_detach(fd);
  const int err = errno;
  close(fd);
  if (rc != 0) throw Error("cannot detach tcx link id " + std::to_string(link_id) + ": " + errno_text(err));
  unlink(path.c_str());
}

using XdpProgRef = std::shared_ptr<xdp_program>;
XdpProgRef hold_xdp_prog(uint32_t id) {
  xdp_program* p = xdp_program__from_id(id);
  if (libxdp_get_error(p)) return nullptr;
  return XdpProgRef(p, xdp_program__close);
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
  // owner's programs in a dispatcher chain (or the others named like ours).
  std::vector<xdp_program*> ours(const HookOwner& owner, bool owned = true) const {
    std::vector<xdp_program*> out;
    if (!mp || legacy()) return out;
    for (xdp_program* p = xdp_multiprog__next_prog(nullptr, mp); p; p = xdp_multiprog__next_prog(p, mp)) {
      std::string name = xdp_program__name(p);
      if (name == kProgXdp && owner.owns(xdp_program__id(p), name) == owned) out.push_back(p);
    }
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

  // Takes owner's rg_xdp_ingress out of the dispatcher chain (all but
  // keep_id), telling removed() the id of each as soon as it is out.
  void remove_ours(const HookOwner& owner, int ifindex, const std::string& ifname,
                   const std::function<void(uint32_t)>& removed, uint32_t keep_id = 0) const {
    const enum xdp_attach_mode mode = xdp_multiprog__attach_mode(mp);
    for (xdp_program* p : ours(owner)) {
      uint32_t id = xdp_program__id(p);
      if (id == keep_id) continue;
      int err = xdp_program__detach(p, ifindex, mode, 0);
      if (err)
        throw Error("cannot remove " + std::string(kProgXdp) + " from the dispatcher on " + ifname + ": " +
                    xdp_error_text(err));
      removed(id);
    }
  }

  xdp_multiprog* mp = nullptr;
};

// Two instances on one hook would replace each other's programs (and the
// maps behind them) on every attach: say which one is in the way.
const char* kOtherInstance =
    "another roceguard instance (another --pin-path) owns it; one interface takes one roceguard: detach that "
    "one with its --pin-path";

Error xdp_conflict(const std::string& ifname, const std::string& owner, uint32_t id) {
  if (owner == kProgXdp)
    return Error("interface " + ifname + " already runs XDP program " + owner + " (id " + std::to_string(id) +
                     "): " + kOtherInstance + ", or give --force to replace it",
                 kExitConflict);
  return Error("interface " + ifname + " already runs XDP program " + owner + " (id " + std::to_string(id) +
                   ") attached directly, without the libxdp dispatcher; roceguard will not replace it. "
                   "Remove it, or give --force to replace it",
               kExitConflict);
}

// What an XDP refusal depends on: the device's MTU and its driver.
struct LinkFacts {
  int mtu = 0;
  std::string driver;
};

LinkFacts link_facts(const std::string& ifname) {
  LinkFacts f;
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return f;
  ifreq ifr{};
  std::snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname.c_str());
  if (ioctl(fd, SIOCGIFMTU, &ifr) == 0) f.mtu = ifr.ifr_mtu;
  ethtool_drvinfo info{};
  info.cmd = ETHTOOL_GDRVINFO;
  ifr.ifr_data = reinterpret_cast<char*>(&info);
  if (ioctl(fd, SIOCETHTOOL, &ifr) == 0) f.driver = info.driver;
  close(fd);
  return f;
}

// Drivers whose limit for XDP that cannot use multi-buffer frames is known
// from their source; mlx5 names its own in the kernel's message.
struct SingleBufferLimit {
  const char* driver;
  int max_mtu;                 // with 4 KB pages
  const char* frags_since;     // first kernel whose driver takes xdp.frags
};
constexpr SingleBufferLimit kSingleBufferLimits[] = {
    // virtnet_xdp_set(): PAGE_SIZE less struct padded_vnet_hdr, 32 bytes in
    // Debian 12's 6.1 (16 in older kernels, where the limit was 4080).
    {"virtio_net", 4064, "6.3"},
    // veth_enable_xdp(): one page less XDP headroom, skb_shared_info and Ethernet.
    {"veth", 3504, nullptr},
};

bool mentions_mtu(const std::string& text) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  return lower.find("mtu") != std::string::npos;
}

// Beyond about 3.5 KB a frame no longer fits the one page a single-buffer
// XDP program is given, whatever the driver.
constexpr int kPageFrameMtu = 3500;

// Why a native attach failed, in the operator's terms: the kernel's own
// reason, then the MTU and driver it depends on and what to do about it.
std::string native_xdp_refusal(const std::string& ifname, bool dispatcher) {
  const std::string kernel = take_kernel_message();
  const LinkFacts link = link_facts(ifname);
  const std::string driver = link.driver.empty() ? "unknown driver" : "driver " + link.driver;
  std::string out;
  if (!kernel.empty()) out += "; the kernel says: \"" + kernel + "\"";
  if (!mentions_mtu(kernel) && link.mtu <= kPageFrameMtu)
    return out + " (" + ifname + ", " + driver +
           ": no native XDP in this driver? try --ingress-hook auto or tc (TC ingress), or --xdp-mode skb)";

  utsname uts{};
  uname(&uts);
  out += ". " + ifname + " (" + driver + ") has MTU " + std::to_string(link.mtu) +
         ", and rg_xdp_ingress takes multi-buffer frames (xdp.frags), but ";
  const SingleBufferLimit* known = nullptr;
  for (const auto& l : kSingleBufferLimits)
    if (link.driver == l.driver) known = &l;
  if (dispatcher)
    out += "the libxdp dispatcher on " + ifname +
           " passes them only when every program in it does, or ";
  out += "this driver on this kernel (" + std::string(uts.release) + ") does not";
  if (known && known->frags_since)
    out += std::string(" (") + known->driver + " has multi-buffer XDP from Linux " + known->frags_since + ")";
  out += ", so it refuses native XDP above ";
  out += known ? "MTU " + std::to_string(known->max_mtu) : "about " + std::to_string(kPageFrameMtu) + " bytes of MTU";
  const std::string limit = std::to_string(known ? known->max_mtu : kPageFrameMtu);
  out += ". Lower the MTU (ip link set dev " + ifname + " mtu " + limit +
         "), or take TC ingress (--ingress-hook auto or tc: any driver and MTU), or attach with --xdp-mode skb "
         "(generic XDP: any MTU, slower), or run a kernel and driver with multi-buffer XDP";
  return out;
}

Error tc_conflict(const std::string& ifname, TcHook h, uint32_t handle, uint32_t priority,
                  const std::string& owner) {
  const std::string dir = tc_hook_name(h);
  if (owner == tc_prog_name(h))
    return Error("interface " + ifname + " already has TC " + dir + " filter " + owner + " at handle " +
                     std::to_string(handle) + " priority " + std::to_string(priority) + ": " + kOtherInstance +
                     ", or choose another --tc-handle/--tc-priority, or --force",
                 kExitConflict);
  return Error("interface " + ifname + " already has a TC " + dir + " filter at handle " + std::to_string(handle) +
                   " priority " + std::to_string(priority) + " (program " + owner +
                   "); choose another --tc-handle/--tc-priority, or --force",
               kExitConflict);
}

struct TcFilter {
  uint32_t prog_id = 0;
  std::string name;
};

std::optional<TcFilter> tc_query(int ifindex, TcHook h, uint32_t handle, uint32_t priority) {
  LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = tc_point(h));
  LIBBPF_OPTS(bpf_tc_opts, q, .handle = handle, .priority = priority);
  if (bpf_tc_query(&hook, &q) != 0) return std::nullopt;
  return TcFilter{q.prog_id, prog_name_by_id(q.prog_id)};
}

// A BPF filter on one of an interface's clsact hooks.
struct TcFilterAt {
  uint32_t handle = 0;
  uint32_t priority = 0;
  TcFilter filter;
};

// Every BPF filter on hook h of ifindex, at any handle and priority (a
// dump: bpf_tc_query finds one filter whose handle and priority it is
// told); none without a clsact qdisc.
std::vector<TcFilterAt> tc_filters(int ifindex, TcHook h) {
  NetlinkSocket nl(NETLINK_ROUTE);
  NetlinkRequest req(std::string("TC ") + tc_hook_name(h) + " filter dump (RTM_GETTFILTER)", RTM_GETTFILTER,
                     NLM_F_DUMP);
  tcmsg* t = req.header<tcmsg>();
  t->tcm_family = AF_UNSPEC;
  t->tcm_ifindex = ifindex;
  t->tcm_parent = TC_H_MAKE(TC_H_CLSACT, h == TcHook::kIngress ? TC_H_MIN_INGRESS : TC_H_MIN_EGRESS);
  std::vector<TcFilterAt> out;
  try {
    nl.request(req, [&](const nlmsghdr& m) {
      if (m.nlmsg_type != RTM_NEWTFILTER) return;
      const tcmsg* f = payload<tcmsg>(m);
      std::string kind;
      uint32_t id = 0;
      for_each_attr(m, sizeof(tcmsg), [&](const nlattr& a) {
        if (attr_type(a) == TCA_KIND) kind = attr_string(a);
        if (attr_type(a) == TCA_OPTIONS)
          for_each_nested(a, [&](const nlattr& o) {
            if (attr_type(o) == TCA_BPF_ID && attr_len(o) >= sizeof(id)) std::memcpy(&id, attr_payload(o), sizeof(id));
            return true;
          });
        return true;
      });
      // The dump's first message of each priority is the classifier itself, without a program.
      if (kind == "bpf" && id) out.push_back({f->tcm_handle, TC_H_MAJ(f->tcm_info) >> 16, {id, prog_name_by_id(id)}});
    });
  } catch (const NetlinkError& e) {
    if (e.kernel() && (e.error() == EINVAL || e.error() == ENOENT)) return {};  // no clsact qdisc
    throw;
  }
  return out;
}

bool is_our_tc_name(const std::string& name) { return name == kProgTc || name == kProgTcIngress; }

std::string tc_handle_text(uint32_t handle) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%#x", handle);
  return buf;
}

void tc_remove(int ifindex, TcHook h, uint32_t handle, uint32_t priority) {
  LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = tc_point(h));
  LIBBPF_OPTS(bpf_tc_opts, o, .handle = handle, .priority = priority);
  bpf_tc_detach(&hook, &o);
}

// Puts a held program back on a TC hook at handle/priority.
void tc_put_back(int ifindex, TcHook h, uint32_t handle, uint32_t priority, int prog_fd) {
  LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = tc_point(h));
  LIBBPF_OPTS(bpf_tc_opts, back, .prog_fd = prog_fd, .flags = BPF_TC_F_REPLACE, .handle = handle,
              .priority = priority);
  int e = bpf_tc_attach(&hook, &back);
  if (e) throw Error(errno_text(e));
}


}  // namespace

bool qdisc_honours_edt(int ifindex, std::string* what) {
  NetlinkSocket nl(NETLINK_ROUTE);
  NetlinkRequest req("qdisc dump (RTM_GETQDISC)", RTM_GETQDISC, NLM_F_DUMP);
  req.header<tcmsg>()->tcm_family = AF_UNSPEC;
  std::string root;
  uint32_t root_handle = 0;
  std::vector<std::pair<uint32_t, std::string>> others;  // parent, kind
  nl.request(req, [&](const nlmsghdr& m) {
    if (m.nlmsg_type != RTM_NEWQDISC) return;
    const tcmsg* q = payload<tcmsg>(m);
    if (q->tcm_ifindex != ifindex) return;
    std::string kind;
    for_each_attr(m, sizeof(tcmsg), [&](const nlattr& a) {
      if (attr_type(a) == TCA_KIND) kind = attr_string(a);
      return true;
    });
    if (q->tcm_parent == TC_H_ROOT) {
      root = kind;
      root_handle = q->tcm_handle;
    } else {
      others.emplace_back(q->tcm_parent, kind);
    }
  });
  size_t children = 0, fq = 0;
  for (const auto& [parent, kind] : others)
    if (TC_H_MAJ(parent) == TC_H_MAJ(root_handle) && kind != "clsact" && kind != "ingress") {
      ++children;
      fq += kind == "fq";
    }
  const bool mq_of_fq = root == "mq" && children > 0 && fq == children;
  if (what) {
    *what = root.empty() ? "none" : root;
    if (root == "mq") *what += " of " + std::to_string(children) + (mq_of_fq ? " fq" : " queues, " + std::to_string(fq) + " fq");
  }
  return root == "fq" || mq_of_fq;
}

void Rollback::run() noexcept {
  for (auto it = steps_.rbegin(); it != steps_.rend(); ++it) {
    try {
      it->fn();
      spdlog::info("restored: {}", it->what);
    } catch (const std::exception& e) {
      spdlog::error("could not restore: {}: {}", it->what, e.what());
    }
  }
  steps_.clear();
}

void HookOwner::add_pinned(const std::string& pin_path) {
  for (const char* map : kPinnedMaps) {
    int fd = bpf_obj_get((pin_path + "/" + map).c_str());
    if (fd < 0) continue;
    bpf_map_info info{};
    uint32_t len = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0 && info.id) map_ids_.push_back(info.id);
    close(fd);
  }
}

bool HookOwner::owns(uint32_t prog_id, const std::string& name) const {
  if (name != kProgXdp && name != kProgTc && name != kProgTcIngress) return false;
  for (uint32_t id : prog_map_ids(prog_id))
    if (std::find(map_ids_.begin(), map_ids_.end(), id) != map_ids_.end()) return true;
  return false;
}

void refuse_foreign_hooks(const HookOwner& owner, int ifindex, const std::string& name, uint32_t tc_handle,
                          uint32_t tc_priority, IngressHook ingress, bool tcx) {
  if (ingress == IngressHook::kXdp) {
    Multiprog cur(ifindex);
    if (cur.legacy() && !owner.owns(cur.main_id(), cur.main_name()))
      throw xdp_conflict(name, cur.main_name(), cur.main_id());
    // In a dispatcher another instance's program would run beside ours, each
    // with its own maps: a packet would be re-marked and encapsulated twice.
    auto others = cur.ours(owner, false);
    if (!others.empty()) throw xdp_conflict(name, kProgXdp, xdp_program__id(others.front()));
  }
  const TcHook hooks[] = {TcHook::kEgress, TcHook::kIngress};
  for (TcHook h : hooks) {
    if (h == TcHook::kIngress && ingress != IngressHook::kTc) continue;
    if (tcx) {
      // Beside ours, another instance's program would re-mark and count
      // every packet a second time, with its own maps.
      if (auto chain = tcx_chain(ifindex, h))
        for (uint32_t id : chain->progs) {
          const std::string prog = prog_name_by_id(id);
          if (prog == tc_prog_name(h) && !owner.owns(id, prog))
            throw Error("interface " + name + " already runs tcx " + tc_hook_name(h) + " program " + prog + " (id " +
                            std::to_string(id) + "): " + kOtherInstance,
                        kExitConflict);
        }
      continue;
    }
    auto tc = tc_query(ifindex, h, tc_handle, tc_priority);
    if (tc && !owner.owns(tc->prog_id, tc->name)) throw tc_conflict(name, h, tc_handle, tc_priority, tc->name);
  }
}

const char* tc_hook_name(TcHook h) { return h == TcHook::kIngress ? "ingress" : "egress"; }

bool tcx_supported() {
  // Linux 6.1 does not know the attach type and answers EINVAL; a kernel
  // with tcx lists the (maybe empty) chain of the loopback device.
  static const bool supported = [] {
    const unsigned lo = if_nametoindex("lo");
    return tcx_chain(lo ? static_cast<int>(lo) : 1, TcHook::kEgress).has_value();
  }();
  return supported;
}

std::string tcx_pin(const HookOwner& owner, int ifindex, TcHook h) {
  return owner.pin_path() + "/" + kTcxPinPrefix + tc_hook_name(h) + "_" + std::to_string(ifindex);
}

size_t prune_defunct_tcx_pins(const std::string& pin_path) {
  size_t removed = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(pin_path, ec)) {
    const std::string path = e.path().string();
    if (e.path().filename().string().rfind(kTcxPinPrefix, 0) != 0) continue;
    const int fd = bpf_obj_get(path.c_str());
    if (fd < 0) continue;
    tcx::LinkInfo info{};
    uint32_t len = sizeof(info);
    const bool defunct = bpf_obj_get_info_by_fd(fd, &info, &len) == 0 && info.ifindex == 0;
    close(fd);
    if (defunct && unlink(path.c_str()) == 0) ++removed;
  }
  return removed;
}

std::optional<std::string> vlan_tags_unseen(int ifindex, const std::string& name) {
  // The VLAN devices whose lower device is ifindex, in this namespace (a
  // lower in another namespace comes with IFLA_LINK_NETNSID).
  std::vector<std::string> vlans;
  NetlinkSocket nl(NETLINK_ROUTE);
  NetlinkRequest req("link dump (RTM_GETLINK) for the VLAN devices on " + name, RTM_GETLINK, NLM_F_DUMP);
  req.header<ifinfomsg>()->ifi_family = AF_UNSPEC;
  nl.request(req, [&](const nlmsghdr& m) {
    if (m.nlmsg_type != RTM_NEWLINK) return;
    std::string kind, ifname;
    uint32_t link = 0;
    bool other_netns = false;
    for_each_attr(m, sizeof(ifinfomsg), [&](const nlattr& a) {
      switch (attr_type(a)) {
        case IFLA_IFNAME:
          ifname = attr_string(a);
          break;
        case IFLA_LINK:
          if (attr_len(a) >= sizeof(link)) std::memcpy(&link, attr_payload(a), sizeof(link));
          break;
        case IFLA_LINK_NETNSID:
          other_netns = true;
          break;
        case IFLA_LINKINFO:
          for_each_nested(a, [&](const nlattr& i) {
            if (attr_type(i) == IFLA_INFO_KIND) kind = attr_string(i);
            return true;
          });
          break;
        default:
          break;
      }
      return true;
    });
    if (kind == "vlan" && !other_netns && link == static_cast<uint32_t>(ifindex)) vlans.push_back(ifname);
  });
  if (vlans.empty()) return std::nullopt;
  std::sort(vlans.begin(), vlans.end());
  std::string on;
  for (const auto& v : vlans) on += (on.empty() ? "" : ", ") + v;
  // veth hands its peer's metadata tag on whatever its own features say.
  if (link_facts(name).driver == "veth")
    return "VLAN device " + on + " on it, and a veth receives its peer's tags outside the frame";
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw Error("socket: " + errno_text(errno));
  ifreq ifr{};
  std::snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name.c_str());
  ethtool_value flags{};
  flags.cmd = ETHTOOL_GFLAGS;
  ifr.ifr_data = reinterpret_cast<char*>(&flags);
  const int rc = ioctl(fd, SIOCETHTOOL, &ifr);
  const int err = errno;
  close(fd);
  // Unknown counts as on: the fast path then leaves frames to the stack.
  if (rc == 0 && !(flags.data & ETH_FLAG_RXVLAN)) return std::nullopt;
  return "VLAN device " + on + " on it, and receive VLAN offload " +
         (rc == 0 ? std::string("(rxvlan) is on") : "cannot be read (" + errno_text(err) + ")");
}

bool xdp_runs_on_skb(const std::string& ifname) {
  // veth_xdp_rcv_skb(): a native program on veth gets each skb copied into
  // a page with XDP headroom first, the skb then rebuilt around it. The
  // kernel's own tunnel devices have no native XDP at all: what they hand
  // up is an skb, which only generic XDP would run on.
  const std::string driver = link_facts(ifname).driver;
  return driver == "veth" || driver == "vxlan" || driver == "geneve";
}

XdpAttachment attach_xdp(BpfObject& obj, const HookOwner& owner, int ifindex, const std::string& name,
                         XdpMode xdp_mode, bool force, Rollback& undo) {
  const enum xdp_attach_mode mode = libxdp_mode(xdp_mode);
  bool dispatcher_before = false;
  {
    Multiprog cur(ifindex);
    if (cur.legacy()) {
      std::string owner_name = cur.main_name();
      uint32_t old_id = cur.main_id();
      enum xdp_attach_mode old_mode = xdp_multiprog__attach_mode(cur.mp);
      if (!owner.owns(old_id, owner_name)) {
        if (!force) throw xdp_conflict(name, owner_name, old_id);
        spdlog::warn("--force: replacing XDP program {} (id {}) on {}", owner_name, old_id, name);
      }
      ProgRef old = hold_prog(old_id);
      if (!old) throw Error("cannot open XDP program " + owner_name + " on " + name + ": " + errno_text(errno));
      const std::string what = name + ": XDP program " + owner_name + " (id " + std::to_string(old_id) + ")";
      // Same mode and a program that can be attached directly: swap it in
      // one netlink request, so ingress never runs without a program.
      if (old_mode == mode && obj.load_direct()) {
        int new_fd = obj.xdp_prog_fd();
        LIBBPF_OPTS(bpf_xdp_attach_opts, o, .old_prog_fd = *old);
        int err = bpf_xdp_attach(ifindex, new_fd, legacy_flags(mode) | XDP_FLAGS_REPLACE, &o);
        if (err) throw Error("cannot replace XDP program " + owner_name + " on " + name + ": " + errno_text(err));
        undo.add(what, [ifindex, old, new_fd, mode] {
          LIBBPF_OPTS(bpf_xdp_attach_opts, back, .old_prog_fd = new_fd);
          int e = bpf_xdp_attach(ifindex, *old, legacy_flags(mode) | XDP_FLAGS_REPLACE, &back);
          if (e) throw Error(errno_text(e));
        });
        uint32_t new_id = prog_id_of_fd(new_fd);
        spdlog::debug("replaced XDP program id {} on {} atomically", old_id, name);
        return {"direct", new_id, false};
      }
      // Otherwise it cannot share the hook: take it off first (libxdp
      // refuses to replace it), put it back on rollback.
      cur.detach_direct(name);
      undo.add(what, [ifindex, old, old_mode] {
        int e = bpf_xdp_attach(ifindex, *old, legacy_flags(old_mode), nullptr);
        if (e) throw Error(errno_text(e));
      });
    } else if (cur.mp) {
      dispatcher_before = true;
    }
  }

  take_kernel_message();
  int err = 0;
  // The fast path is a tail call from the ingress program, which Linux 6.1
  // refuses to a dispatcher's extension: with the hook to itself the
  // program goes on directly.
  const bool direct = !dispatcher_before && obj.forwards() && obj.load_direct();
  if (direct) {
    err = bpf_xdp_attach(ifindex, obj.xdp_prog_fd(), legacy_flags(mode), nullptr);
    if (!err) spdlog::info("{}: attached {} directly, for the XDP fast path", name, kProgXdp);
  } else {
    err = xdp_program__attach(obj.xdp(), ifindex, mode, 0);
  }
  if (err && !dispatcher_before && !obj.loaded()) {
    // libxdp loads the object as an extension of its dispatcher and, when
    // the kernel refuses that with anything but EPERM, gives up rather
    // than attach directly. Linux 6.12 refuses Debian 12's libxdp 1.3
    // dispatcher so ("Extension program changes packet data, while
    // original does not"): load the object as plain XDP, attach it directly.
    const std::string why = xdp_error_text(err);
    take_kernel_message();
    obj.reopen();
    obj.load_direct();
    err = bpf_xdp_attach(ifindex, obj.xdp_prog_fd(), legacy_flags(mode), nullptr);
    if (!err)
      spdlog::warn("{}: libxdp could not load {} into its dispatcher on this kernel ({}); attached it directly, so "
                   "other XDP programs cannot share the interface",
                   name, kProgXdp, why);
  }
  if (err)
    throw Error("cannot attach " + std::string(kProgXdp) + " to " + name + ": " + xdp_error_text(err) +
                (mode == XDP_MODE_NATIVE ? native_xdp_refusal(name, dispatcher_before) : "") +
                " (rerun with --verbose for the libxdp log)");
  const int new_fd = xdp_program__fd(obj.xdp());
  const uint32_t new_id = prog_id_of_fd(new_fd);
  // Directly attached: remove it only if it is still this very program
  // (needs no CAP_SYS_ADMIN, so it works when reading the chain did not);
  // in a dispatcher: take out this program's slot and no other.
  undo.add(name + ": XDP hook without this attach's " + kProgXdp, [ifindex, name, mode, new_fd, new_id] {
    LIBBPF_OPTS(bpf_xdp_attach_opts, opts, .old_prog_fd = new_fd);
    if (bpf_xdp_detach(ifindex, legacy_flags(mode) | XDP_FLAGS_REPLACE, &opts) == 0) return;
    Multiprog now(ifindex);
    if (!now.mp || now.legacy()) return;
    for (xdp_program* p = xdp_multiprog__next_prog(nullptr, now.mp); p; p = xdp_multiprog__next_prog(p, now.mp))
      if (xdp_program__id(p) == new_id) {
        int e = xdp_program__detach(p, ifindex, xdp_multiprog__attach_mode(now.mp), 0);
        if (e) throw Error("cannot remove it from the dispatcher: " + xdp_error_text(e));
      }
  });

  Multiprog now(ifindex);
  if (now.legacy()) return {"direct", now.main_id(), !direct};
  bool found = false;
  for (xdp_program* p : now.ours(owner)) found |= xdp_program__id(p) == new_id;
  if (!found)
    throw Error("attached " + std::string(kProgXdp) + " to " + name + " but cannot find it there afterwards");
  if (dispatcher_before) {
    // The new program runs; only now do the previous ones leave the chain.
    const enum xdp_attach_mode cur_mode = xdp_multiprog__attach_mode(now.mp);
    std::vector<std::pair<uint32_t, XdpProgRef>> held;
    for (xdp_program* p : now.ours(owner))
      if (xdp_program__id(p) != new_id) held.emplace_back(xdp_program__id(p), hold_xdp_prog(xdp_program__id(p)));
    for (const auto& [old_id, ref] : held)
      spdlog::debug("{}: {} id {} runs in the dispatcher beside id {}; removing id {}", name, kProgXdp, new_id,
                    old_id, old_id);
    now.remove_ours(owner, ifindex, name, [&](uint32_t old_id) {
      XdpProgRef prev;
      for (const auto& [id, ref] : held)
        if (id == old_id) prev = ref;
      if (!prev) return;
      undo.add(name + ": " + kProgXdp + " (id " + std::to_string(old_id) + ") in the libxdp dispatcher",
               [ifindex, prev, cur_mode] {
                 int e = xdp_program__attach(prev.get(), ifindex, cur_mode, 0);
                 if (e) throw Error(xdp_error_text(e));
               });
    }, new_id);
  }
  return {"dispatcher", new_id, false};
}

uint32_t attach_tc(const BpfObject& obj, const HookOwner& owner, int ifindex, const std::string& name, TcHook h,
                   uint32_t handle, uint32_t priority, bool force, Rollback& undo) {
  const std::string dir = tc_hook_name(h);
  LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = tc_point(h));
  // EEXIST: clsact is already there (ours from before, or another tool's);
  // it is shared and never destroyed by roceguard. One created here goes
  // again if the attach fails.
  int err = bpf_tc_hook_create(&hook);
  if (err && err != -EEXIST)
    throw Error("cannot create the clsact qdisc on " + name + ": " + errno_text(err));
  if (!err)
    undo.add(name + ": no clsact qdisc", [ifindex] {
      LIBBPF_OPTS(bpf_tc_hook, h, .ifindex = ifindex,
                  .attach_point = static_cast<bpf_tc_attach_point>(BPF_TC_INGRESS | BPF_TC_EGRESS));
      int e = bpf_tc_hook_destroy(&h);
      if (e && e != -ENOENT) throw Error(errno_text(e));
    });

  ProgRef old;
  std::string old_name;
  uint32_t old_id = 0;
  if (auto cur = tc_query(ifindex, h, handle, priority)) {
    old_id = cur->prog_id;
    old_name = cur->name;
    if (!owner.owns(cur->prog_id, cur->name)) {
      if (!force) throw tc_conflict(name, h, handle, priority, cur->name);
      spdlog::warn("--force: replacing TC filter {} on {}", cur->name, name);
    }
    old = hold_prog(old_id);
    if (!old) throw Error("cannot open TC program " + cur->name + " on " + name + ": " + errno_text(errno));
  }
  const int prog_fd = h == TcHook::kIngress ? obj.tc_ingress_prog_fd() : obj.tc_prog_fd();
  LIBBPF_OPTS(bpf_tc_opts, o, .prog_fd = prog_fd, .flags = BPF_TC_F_REPLACE, .handle = handle,
              .priority = priority);
  err = bpf_tc_attach(&hook, &o);
  if (err)
    throw Error("cannot attach " + std::string(tc_prog_name(h)) + " to " + name + " " + dir + ": " + errno_text(err));
  std::string what = old ? name + ": TC " + dir + " filter " + old_name + " (id " + std::to_string(old_id) + ")"
                         : name + ": TC " + dir + " without this attach's " + tc_prog_name(h);
  undo.add(what, [ifindex, h, handle, priority, old] {
    if (!old) {
      tc_remove(ifindex, h, handle, priority);
      return;
    }
    tc_put_back(ifindex, h, handle, priority, *old);
  });
  return o.prog_id;
}

uint32_t attach_tcx(const BpfObject& obj, const HookOwner& owner, int ifindex, const std::string& name, TcHook h,
                    Rollback& undo) {
  const std::string dir = tc_hook_name(h);
  const std::string path = tcx_pin(owner, ifindex, h);
  const int prog_fd = h == TcHook::kIngress ? obj.tc_ingress_prog_fd() : obj.tc_prog_fd();
  const uint32_t new_id = prog_id_of_fd(prog_fd);
  auto chain = tcx_chain(ifindex, h);
  if (!chain) throw Error("cannot list the tcx " + dir + " programs of " + name + ": " + errno_text(errno));
  const int pinned = bpf_obj_get(path.c_str());
  if (pinned >= 0) {
    LinkRef prev = hold_fd(pinned);
    bpf_link_info info{};
    uint32_t len = sizeof(info);
    const bool live = bpf_obj_get_info_by_fd(pinned, &info, &len) == 0 &&
                      std::find(chain->links.begin(), chain->links.end(), info.id) != chain->links.end();
    if (live) {
      // An earlier attach's link: the new program takes its place in one
      // step, so the hook never runs without one.
      const uint32_t old_id = info.prog_id;
      ProgRef old = hold_prog(old_id);
      if (!old) throw Error("cannot open TC program id " + std::to_string(old_id) + " on " + name + ": " +
                            errno_text(errno));
      LIBBPF_OPTS(bpf_link_update_opts, o, .flags = BPF_F_REPLACE, .old_prog_fd = static_cast<__u32>(*old));
      if (bpf_link_update(pinned, prog_fd, &o) != 0)
        throw Error("cannot replace the program of tcx link " + path + " on " + name + ": " + errno_text(errno));
      undo.add(name + ": TC " + dir + " tcx link with " + tc_prog_name(h) + " (id " + std::to_string(old_id) + ")",
               [prev, old, prog_fd] {
                 LIBBPF_OPTS(bpf_link_update_opts, back, .flags = BPF_F_REPLACE,
                             .old_prog_fd = static_cast<__u32>(prog_fd));
                 if (bpf_link_update(*prev, *old, &back) != 0) throw Error(errno_text(errno));
               });
      return new_id;
    }
    // A pin whose link no longer runs there (its interface went): a new
    // link takes its name.
    unlink(path.c_str());
    undo.add("the pin " + path, [prev, path] { bpf_obj_pin(*prev, path.c_str()); });
  }
  LinkRef link;
  try {
    link = create_tcx_link(prog_fd, ifindex, h, path);
  } catch (const Error& e) {
    throw Error("cannot attach " + std::string(tc_prog_name(h)) + " to " + name + " " + dir + " with tcx: " +
                e.what());
  }
  undo.add(name + ": TC " + dir + " without this attach's tcx link", [link, path] {
    unlink(path.c_str());
    if (bpf_link_detach(*link) != 0) throw Error(errno_text(errno));
  });
  return new_id;
}

void remove_other_tc(const HookOwner& owner, int ifindex, const std::string& name, TcHook h, bool tcx_kept,
                     uint32_t handle, uint32_t priority, Rollback& undo) {
  const std::string dir = tc_hook_name(h);
  if (tcx_kept) {
    auto tc = tc_query(ifindex, h, handle, priority);
    if (!tc || !owner.owns(tc->prog_id, tc->name)) return;
    ProgRef old = hold_prog(tc->prog_id);
    if (!old) throw Error("cannot open TC program " + tc->name + " on " + name + ": " + errno_text(errno));
    tc_remove(ifindex, h, handle, priority);
    spdlog::info("{}: removed TC {} filter {} (id {}): roceguard's program runs there from a tcx link now", name, dir,
                 tc->name, tc->prog_id);
    undo.add(name + ": TC " + dir + " filter " + tc->name + " (id " + std::to_string(tc->prog_id) + ")",
             [ifindex, h, handle, priority, old] { tc_put_back(ifindex, h, handle, priority, *old); });
    return;
  }
  auto chain = tcx_chain(ifindex, h);
  if (!chain) return;  // no tcx here, so none of ours
  const std::string path = tcx_pin(owner, ifindex, h);
  for (size_t i = 0; i < chain->progs.size(); ++i) {
    const uint32_t id = chain->progs[i];
    const std::string prog = prog_name_by_id(id);
    if (prog != tc_prog_name(h) || !owner.owns(id, prog) || !chain->links[i]) continue;
    ProgRef old = hold_prog(id);
    if (!old) throw Error("cannot open TC program " + prog + " on " + name + ": " + errno_text(errno));
    detach_tcx_link(chain->links[i], path);
    spdlog::info("{}: removed tcx {} program {} (id {}): roceguard's program runs there from a clsact filter now",
                 name, dir, prog, id);
    undo.add(name + ": tcx " + dir + " link with " + prog + " (id " + std::to_string(id) + ")",
             [ifindex, h, path, old] { create_tcx_link(*old, ifindex, h, path); });
  }
}

void remove_other_ingress(const HookOwner& owner, int ifindex, const std::string& name, IngressHook kept,
                          uint32_t handle, uint32_t priority, Rollback& undo) {
  if (kept == IngressHook::kXdp) {
    // Ours at TC ingress, whichever way an earlier attach put it there.
    remove_other_tc(owner, ifindex, name, TcHook::kIngress, true, handle, priority, undo);
    remove_other_tc(owner, ifindex, name, TcHook::kIngress, false, handle, priority, undo);
    return;
  }
  Multiprog cur(ifindex);
  if (cur.legacy()) {
    if (!owner.owns(cur.main_id(), cur.main_name())) return;
    const uint32_t id = cur.main_id();
    const enum xdp_attach_mode mode = xdp_multiprog__attach_mode(cur.mp);
    ProgRef old = hold_prog(id);
    if (!old) throw Error("cannot open XDP program " + cur.main_name() + " on " + name + ": " + errno_text(errno));
    cur.detach_direct(name);
    spdlog::info("{}: removed XDP program {} (id {}): TC ingress takes ingress now", name, kProgXdp, id);
    undo.add(name + ": XDP program " + std::string(kProgXdp) + " (id " + std::to_string(id) + ")",
             [ifindex, old, mode] {
               int e = bpf_xdp_attach(ifindex, *old, legacy_flags(mode), nullptr);
               if (e) throw Error(errno_text(e));
             });
    return;
  }
  if (!cur.mp) return;
  const enum xdp_attach_mode mode = xdp_multiprog__attach_mode(cur.mp);
  std::vector<std::pair<uint32_t, XdpProgRef>> held;
  for (xdp_program* p : cur.ours(owner)) held.emplace_back(xdp_program__id(p), hold_xdp_prog(xdp_program__id(p)));
  cur.remove_ours(owner, ifindex, name, [&](uint32_t id) {
    spdlog::info("{}: removed {} (id {}) from the libxdp dispatcher: TC ingress takes ingress now", name, kProgXdp,
                 id);
    for (const auto& [held_id, ref] : held)
      if (held_id == id && ref)
        undo.add(name + ": " + kProgXdp + " (id " + std::to_string(id) + ") in the libxdp dispatcher",
                 [ifindex, ref = ref, mode] {
                   int e = xdp_program__attach(ref.get(), ifindex, mode, 0);
                   if (e) throw Error(xdp_error_text(e));
                 });
  });
}

bool xdp_present(const HookOwner& owner, const IfaceState& st) {
  if (!st.ifindex) return false;
  Multiprog cur(st.ifindex);
  if (cur.legacy()) return owner.owns(cur.main_id(), cur.main_name());
  return !cur.ours(owner).empty();
}

bool tc_present(const HookOwner& owner, const IfaceState& st, TcHook h) {
  if (!st.ifindex) return false;
  if (st.tc_attach == kTcAttachTcx) {
    auto chain = tcx_chain(st.ifindex, h);
    if (!chain) return false;
    for (uint32_t id : chain->progs)
      if (prog_name_by_id(id) == tc_prog_name(h) && owner.owns(id, tc_prog_name(h))) return true;
    return false;
  }
  auto tc = tc_query(st.ifindex, h, st.tc_handle, st.tc_priority);
  return tc && owner.owns(tc->prog_id, tc->name) && tc->name == tc_prog_name(h);
}

bool ingress_present(const HookOwner& owner, const IfaceState& st) {
  return st.ingress_hook == kIngressTc ? tc_present(owner, st, TcHook::kIngress) : xdp_present(owner, st);
}

std::vector<NetInterface> interfaces_here() {
  std::vector<NetInterface> out;
  struct if_nameindex* all = if_nameindex();
  if (!all) throw Error("cannot list the network interfaces: " + errno_text(errno));
  for (const struct if_nameindex* i = all; i->if_index; ++i) out.push_back({static_cast<int>(i->if_index), i->if_name});
  if_freenameindex(all);
  return out;
}

DetachLines detach_interface(const HookOwner& owner, int ifindex, const std::string& name) {
  DetachLines done;
  auto left = [&](const std::string& what, uint32_t id) {
    done.left.push_back(name + ": left " + what + " (id " + std::to_string(id) +
                        ") alone: another roceguard instance (another --pin-path) owns it");
  };
  {
    Multiprog cur(ifindex);
    if (cur.legacy() && owner.owns(cur.main_id(), cur.main_name())) {
      uint32_t id = cur.main_id();
      cur.detach_direct(name);
      done.removed.push_back(name + ": removed XDP program " + kProgXdp + " (id " + std::to_string(id) + ")");
    } else if (cur.legacy() && cur.main_name() == kProgXdp) {
      left(std::string("XDP program ") + kProgXdp, cur.main_id());
    } else if (cur.mp) {
      for (xdp_program* p : cur.ours(owner, false)) left(kProgXdp, xdp_program__id(p));
      cur.remove_ours(owner, ifindex, name, [&done, &name](uint32_t id) {
        done.removed.push_back(name + ": removed " + kProgXdp + " (id " + std::to_string(id) +
                               ") from the libxdp dispatcher");
      });
    }
  }
  for (TcHook h : {TcHook::kEgress, TcHook::kIngress}) {
    auto chain = tcx_chain(ifindex, h);
    for (size_t i = 0; chain && i < chain->progs.size(); ++i) {
      const uint32_t id = chain->progs[i];
      const std::string prog = prog_name_by_id(id);
      if (!is_our_tc_name(prog)) continue;
      const std::string what = std::string("tcx ") + tc_hook_name(h) + " program " + prog;
      if (owner.owns(id, prog) && chain->links[i]) {
        detach_tcx_link(chain->links[i], tcx_pin(owner, ifindex, h));
        done.removed.push_back(name + ": removed " + what + " (id " + std::to_string(id) + ")");
      } else if (!owner.owns(id, prog)) {
        left(what, id);
      }
    }
    if (!chain) unlink(tcx_pin(owner, ifindex, h).c_str());
  }
  for (TcHook h : {TcHook::kEgress, TcHook::kIngress}) {
    for (const auto& f : tc_filters(ifindex, h)) {
      if (!is_our_tc_name(f.filter.name)) continue;
      const std::string what = std::string("TC ") + tc_hook_name(h) + " filter " + f.filter.name + " (handle " +
                               tc_handle_text(f.handle) + ", priority " + std::to_string(f.priority);
      if (owner.owns(f.filter.prog_id, f.filter.name)) {
        tc_remove(ifindex, h, f.handle, f.priority);
        done.removed.push_back(name + ": removed " + what + ", id " + std::to_string(f.filter.prog_id) + ")");
      } else {
        left(what + ")", f.filter.prog_id);
      }
    }
  }
  return done;
}

std::vector<std::string> remove_moved_tc(const HookOwner& owner, int ifindex, const std::string& name,
                                         uint32_t handle, uint32_t priority) {
  std::vector<std::string> removed;
  for (TcHook h : {TcHook::kEgress, TcHook::kIngress})
    for (const auto& f : tc_filters(ifindex, h)) {
      if ((f.handle == handle && f.priority == priority) || !owner.owns(f.filter.prog_id, f.filter.name)) continue;
      tc_remove(ifindex, h, f.handle, f.priority);
      removed.push_back(name + ": removed the TC " + tc_hook_name(h) + " filter at the previous handle " +
                        tc_handle_text(f.handle) + " priority " + std::to_string(f.priority));
    }
  return removed;
}

bool holds_programs(const HookOwner& owner, int ifindex) {
  {
    Multiprog cur(ifindex);
    if (cur.legacy() && owner.owns(cur.main_id(), cur.main_name())) return true;
    if (!cur.ours(owner).empty()) return true;
  }
  for (TcHook h : {TcHook::kEgress, TcHook::kIngress}) {
    if (auto chain = tcx_chain(ifindex, h))
      for (uint32_t id : chain->progs)
        if (owner.owns(id, prog_name_by_id(id))) return true;
    for (const auto& f : tc_filters(ifindex, h))
      if (owner.owns(f.filter.prog_id, f.filter.name)) return true;
  }
  return false;
}

std::vector<ProgramAhead> programs_ahead(const HookOwner& owner, int ifindex, uint32_t priority,
                                         bool ingress_at_tc) {
  std::vector<ProgramAhead> ahead;
  for (TcHook h : {TcHook::kEgress, TcHook::kIngress}) {
    if (h == TcHook::kIngress && !ingress_at_tc) continue;
    // tcx runs its programs in order, then the clsact filters.
    bool ours_in_tcx = false;
    if (auto chain = tcx_chain(ifindex, h))
      for (uint32_t id : chain->progs) {
        const std::string prog = prog_name_by_id(id);
        if (owner.owns(id, prog)) {
          ours_in_tcx = true;
          break;
        }
        ahead.push_back({h, "tcx", 0, id, prog});
      }
    if (ours_in_tcx) continue;
    for (const auto& f : tc_filters(ifindex, h))
      if (f.priority < priority && !owner.owns(f.filter.prog_id, f.filter.name))
        ahead.push_back({h, "clsact priority " + std::to_string(f.priority) + " handle " + tc_handle_text(f.handle),
                         f.priority, f.filter.prog_id, f.filter.name});
  }
  return ahead;
}

}  // namespace rg
