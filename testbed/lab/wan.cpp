#include "lab/wan.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <net/if.h>

#include <cerrno>

#include <cmath>

#include "common/error.h"
#include "lab/proc.h"
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
    case RG_WAN_VXLAN: return "vxlan";
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
  stop_delay_line();
  detach_all();
  wan__destroy(skel_);
}

std::string loss_run_bound(size_t i) {
  return i + 1 >= RG_WAN_RUN_BUCKETS ? "+Inf" : std::to_string(1u << i);
}

void set_loss(rg_wan_config& cfg, double loss_pct, double burst) {
  if (!(loss_pct >= 0 && loss_pct <= 100)) throw Error("WAN loss is a percentage, 0..100", kExitUsage);
  if (!(burst >= 1)) throw Error("WAN loss bursts are at least 1 packet long on average", kExitUsage);
  const double loss = loss_pct / 100.0;
  cfg.loss_ppm = static_cast<uint32_t>(std::lround(loss * RG_WAN_PPM));
  cfg.burst_enter_ppm = cfg.burst_leave_ppm = 0;
  if (burst == 1 || loss == 0) return;
  if (loss >= 1) throw Error("a WAN that loses every packet has no bursts: --loss below 100 with --loss-burst", kExitUsage);
  // Mean burst 1/leave; stationary loss enter / (enter + leave).
  const double leave = 1.0 / burst;
  const double enter = loss * leave / (1.0 - loss);
  if (enter > 1) throw Error("WAN loss too high for bursts that short: the chain would leave its good state more "
                             "often than every packet", kExitUsage);
  cfg.burst_leave_ppm = static_cast<uint32_t>(std::lround(leave * RG_WAN_PPM));
  cfg.burst_enter_ppm = std::max<uint32_t>(1, static_cast<uint32_t>(std::lround(enter * RG_WAN_PPM)));
}

int Wan::hook_ifindex(const std::string& ifname) const {
  for (const auto& h : hooks_)
    if (h.ifname == ifname) return h.ifindex;
  throw Error("the WAN is not attached to " + ifname, kExitNotFound);
}

void Wan::start_delay_line(const std::vector<WanPath>& paths, const DelayLineConfig& dcfg) {
  if (delay_) throw Error("the WAN's delay line already runs");
  std::vector<DelayDirection> dirs;
  try {
    for (const auto& p : paths) {
      const int in_ifindex = hook_ifindex(p.in_ifname);
      hook_ifindex(p.out_ifname);
      // hold-<in> is where the program redirects; the delay line reads its
      // peer held-<in>. Jumbo-sized, so any frame the WAN's ports take fits;
      // no IPv6, so the kernel's own neighbour and listener messages never
      // enter the line; GRO on the reading end (and TSO off on the other,
      // see Topology's build) gives it NAPI, so frames redirected from
      // several CPUs queue in the order they were sent.
      const std::string hold = "hold-" + p.in_ifname, held = "held-" + p.in_ifname;
      run_checked({"ip", "-n", netns_, "link", "add", hold, "mtu", "9000", "type", "veth", "peer", "name", held,
                   "mtu", "9000"});
      hold_links_.push_back(hold);
      for (const auto& ifname : {hold, held}) {
        run_checked({"ip", "netns", "exec", netns_, "sysctl", "-q", "-w",
                     "net.ipv6.conf." + ifname + ".disable_ipv6=1"});
        run_checked({"ip", "-n", netns_, "link", "set", ifname, "up"});
      }
      run_checked({"ip", "netns", "exec", netns_, "ethtool", "-K", held, "gro", "on"});
      run_checked({"ip", "netns", "exec", netns_, "ethtool", "-K", hold, "tso", "off"});
      DelayDirection d;
      d.name = p.name;
      d.in_ifname = held;
      d.out_ifname = p.out_ifname;
      d.arrival_mac = parse_mac(link_mac(netns_, p.in_ifname));
      d.out_mac = parse_mac(link_mac(netns_, p.out_ifname));
      d.next_hop_mac = p.next_hop_mac;
      dirs.push_back(d);
      rg_wan_hold h{};
      {
        NetnsGuard in(netns_);
        h.ifindex = if_nametoindex(hold.c_str());
      }
      const uint32_t key = static_cast<uint32_t>(in_ifindex);
      if (!h.ifindex || bpf_map__update_elem(skel_->maps.wan_hold, &key, sizeof(key), &h, sizeof(h), BPF_ANY))
        throw Error("cannot point the WAN at its delay line: " + errno_text(errno));
    }
    delay_ = std::make_unique<DelayLine>(netns_, dirs, dcfg);
    cfg_.flags |= RG_WAN_F_HOLD;
    configure(cfg_);
  } catch (...) {
    stop_delay_line();
    throw;
  }
}

void Wan::stop_delay_line() noexcept {
  try {
    // The kernel forwards again before the line stops: nothing is handed to
    // a line that no longer reads.
    if (cfg_.flags & RG_WAN_F_HOLD) {
      cfg_.flags &= ~RG_WAN_F_HOLD;
      configure(cfg_);
    }
    delay_.reset();
    for (const auto& l : hold_links_) run({"ip", "-n", netns_, "link", "del", l}, std::chrono::seconds(10));
  } catch (...) {
    // The namespace is already gone, and with it the hold links.
  }
  hold_links_.clear();
}

LossRuns Wan::loss_runs(const std::string& ifname) const {
  LossRuns out{};
  const uint32_t key = static_cast<uint32_t>(hook_ifindex(ifname));
  rg_wan_direction d{};
  if (bpf_map__lookup_elem(skel_->maps.wan_directions, &key, sizeof(key), &d, sizeof(d), 0) == 0)
    for (size_t i = 0; i < out.size(); ++i) out[i] = d.runs[i];
  return out;
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
  if (cfg.loss_ppm > RG_WAN_PPM || cfg.ce_ppm > RG_WAN_PPM || cfg.burst_enter_ppm > RG_WAN_PPM ||
      cfg.burst_leave_ppm > RG_WAN_PPM)
    throw Error("WAN loss and CE rates are parts per million: 0.." + std::to_string(RG_WAN_PPM),
                kExitUsage);
  // The hold flag is the delay line's to set: it follows the line, not the caller.
  rg_wan_config c = cfg;
  c.flags = (c.flags & ~RG_WAN_F_HOLD) | (delay_ ? (cfg_.flags & RG_WAN_F_HOLD) : 0u);
  uint32_t key = 0;
  if (bpf_map__update_elem(skel_->maps.wan_config, &key, sizeof(key), &c, sizeof(c), BPF_ANY))
    throw Error("cannot configure the WAN: " + errno_text(errno));
  cfg_ = c;
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
      s.seq_all_dropped += c.seq_all_dropped;
      s.seq_late += c.seq_late;
      s.seq_untracked += c.seq_untracked;
    }
  }
  return out;
}

WanSeqLoss Wan::seq_loss(const std::string& ifname) const {
  const uint32_t ifindex = static_cast<uint32_t>(hook_ifindex(ifname));
  const WanStats st = stats(ifname, RG_WAN_GENEVE);
  WanSeqLoss out;
  out.all_copies_dropped = st.seq_all_dropped;
  out.late = st.seq_late;
  out.untracked = st.seq_untracked;
  // Each stream's newest number is finished here, without changing the
  // stream: a copy of it may still arrive while the run goes on.
  const int fd = bpf_map__fd(skel_->maps.wan_seq);
  rg_wan_seq_key key{}, next{};
  const void* prev = nullptr;
  while (bpf_map_get_next_key(fd, prev, &next) == 0) {
    key = next;
    prev = &key;
    rg_wan_seq s{};
    if (key.ifindex != ifindex || bpf_map_lookup_elem_flags(fd, &key, &s, BPF_F_LOCK) != 0 || !s.started) continue;
    ++out.streams;
    const uint64_t pending = s.passed ? 0 : 1;
    out.all_copies_dropped += pending;
    out.after_last_arrival += s.unseen + pending;
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
    t.seq_all_dropped += s.seq_all_dropped;
    t.seq_late += s.seq_late;
    t.seq_untracked += s.seq_untracked;
  }
  return t;
}

}  // namespace rg::lab
