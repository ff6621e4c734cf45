#include "lab/wan.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <net/if.h>

#include <cerrno>

#include "common/error.h"
#include "lab/topology.h"
#include "wan.skel.h"

namespace rg::lab {

namespace {

// A priority of its own so the WAN never replaces another tc filter.
constexpr uint32_t kTcPriority = 0x7e57;
constexpr uint32_t kTcHandle = 1;

}  // namespace

const char* wan_class_name(rg_wan_class cls) {
  switch (cls) {
    case RG_WAN_ROCE: return "roce";
    case RG_WAN_GENEVE: return "geneve";
    case RG_WAN_UDP_OTHER: return "udp_other";
    case RG_WAN_NOT_UDP: return "not_udp";
    default: return "?";
  }
}

Wan::Wan(const std::string& netns, const std::vector<std::string>& ifnames,
         const rg_wan_config& cfg)
    : netns_(netns) {
  skel_ = wan__open_and_load();
  if (!skel_) throw Error("cannot load the WAN program: " + errno_text(errno));
  try {
    configure(cfg);
    NetnsGuard in(netns_);
    for (const auto& ifname : ifnames) {
      int ifindex = static_cast<int>(if_nametoindex(ifname.c_str()));
      if (ifindex == 0)
        throw Error("interface " + ifname + " does not exist in " + netns_, kExitNotFound);
      LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = BPF_TC_INGRESS);
      int rc = bpf_tc_hook_create(&hook);
      if (rc != 0 && rc != -EEXIST)
        throw Error("cannot create clsact on " + ifname + ": " + errno_text(rc));
      hooks_.push_back({ifname, ifindex, rc == 0});
      LIBBPF_OPTS(bpf_tc_opts, opts, .prog_fd = bpf_program__fd(skel_->progs.wan_ingress),
                  .flags = BPF_TC_F_REPLACE, .handle = kTcHandle, .priority = kTcPriority);
      rc = bpf_tc_attach(&hook, &opts);
      if (rc != 0) throw Error("cannot attach the WAN program to " + ifname + ": " + errno_text(rc));
    }
  } catch (...) {
    detach_all();
    wan__destroy(skel_);
    throw;
  }
}

Wan::~Wan() {
  detach_all();
  wan__destroy(skel_);
}

void Wan::detach_all() noexcept {
  if (hooks_.empty()) return;
  try {
    NetnsGuard in(netns_);
    for (const auto& h : hooks_) {
      LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = h.ifindex, .attach_point = BPF_TC_INGRESS);
      LIBBPF_OPTS(bpf_tc_opts, opts, .handle = kTcHandle, .priority = kTcPriority);
      bpf_tc_detach(&hook, &opts);
      if (h.created_qdisc) {
        hook.attach_point = static_cast<bpf_tc_attach_point>(BPF_TC_INGRESS | BPF_TC_EGRESS);
        bpf_tc_hook_destroy(&hook);
      }
    }
  } catch (...) {
    // The namespace is already gone, and with it everything attached there.
  }
  hooks_.clear();
}

void Wan::configure(const rg_wan_config& cfg) {
  if (cfg.loss_ppm > RG_WAN_PPM || cfg.ce_ppm > RG_WAN_PPM)
    throw Error("WAN loss and CE rates are parts per million: 0.." + std::to_string(RG_WAN_PPM),
                kExitUsage);
  uint32_t key = 0;
  if (bpf_map__update_elem(skel_->maps.wan_config, &key, sizeof(key), &cfg, sizeof(cfg), BPF_ANY))
    throw Error("cannot configure the WAN: " + errno_text(errno));
}

std::map<std::pair<uint32_t, uint32_t>, WanStats> Wan::read() const {
  std::map<std::pair<uint32_t, uint32_t>, WanStats> out;
  int ncpu = libbpf_num_possible_cpus();
  if (ncpu <= 0) throw Error("cannot count possible CPUs: " + errno_text(ncpu));
  std::vector<rg_wan_stats> percpu(static_cast<size_t>(ncpu));
  int fd = bpf_map__fd(skel_->maps.wan_stats);
  rg_wan_key key{}, next{};
  const void* prev = nullptr;
  while (bpf_map_get_next_key(fd, prev, &next) == 0) {
    key = next;
    prev = &key;
    if (bpf_map_lookup_elem(fd, &key, percpu.data()) != 0) continue;
    WanStats& s = out[{key.ifindex, key.cls}];
    for (const auto& c : percpu) {
      s.packets += c.packets;
      s.bytes += c.bytes;
      s.dropped += c.dropped;
      s.bleached += c.bleached;
      s.ce_marked += c.ce_marked;
    }
  }
  return out;
}

WanStats Wan::stats(const std::string& ifname, rg_wan_class cls) const {
  for (const auto& h : hooks_)
    if (h.ifname == ifname) {
      auto all = read();
      auto it = all.find({static_cast<uint32_t>(h.ifindex), cls});
      return it == all.end() ? WanStats{} : it->second;
    }
  throw Error("the WAN is not attached to " + ifname, kExitNotFound);
}

WanStats Wan::total(rg_wan_class cls) const {
  WanStats t;
  for (const auto& [k, s] : read()) {
    if (k.second != static_cast<uint32_t>(cls)) continue;
    t.packets += s.packets;
    t.bytes += s.bytes;
    t.dropped += s.dropped;
    t.bleached += s.bleached;
    t.ce_marked += s.ce_marked;
  }
  return t;
}

}  // namespace rg::lab
