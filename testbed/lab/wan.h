// User side of the lab's lossy WAN (testbed/wan/wan.bpf.c): loads it,
// attaches it at TC ingress of the WAN router's interfaces, changes its
// loss/CE rates while it runs and reads its counters.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lab/delay_line.h"
#include "wan/wan.h"

struct wan;  // the generated skeleton

namespace rg::lab {

struct WanStats {
  uint64_t packets = 0;
  uint64_t bytes = 0;
  uint64_t dropped = 0;
  uint64_t bleached = 0;
  uint64_t ce_marked = 0;
  uint64_t seq_all_dropped = 0;  // see rg_wan_stats
  uint64_t seq_late = 0;
  uint64_t seq_untracked = 0;
};

// One direction's sequence numbers of the tunnel option (roceguard's, with
// the class and type of rg_wan_config) every copy of which the WAN dropped.
struct WanSeqLoss {
  // Finished numbers (a newer one of their stream came) and each stream's
  // newest number if none of its copies passed: at the end of a run, when
  // nothing is left to come, every number every copy of which was lost.
  uint64_t all_copies_dropped = 0;
  // Of those, the ones after the last number of their stream a copy of
  // which passed: the receiver never saw a later number, so it cannot know
  // they were sent.
  uint64_t after_last_arrival = 0;
  uint64_t streams = 0;
  uint64_t late = 0;       // copies that came after a newer number: not counted
  uint64_t untracked = 0;  // packets of streams the WAN had no room for
};

// Loss runs of one direction by length (RG_WAN_RUN_BUCKETS buckets: runs
// of at most 1, 2, 4, ... 64 packets, then longer ones).
using LossRuns = std::array<uint64_t, RG_WAN_RUN_BUCKETS>;
// The upper bound of bucket i, "+Inf" for the last.
std::string loss_run_bound(size_t i);

// A direction the delay line holds: what arrives at in_ifname leaves by
// out_ifname towards next_hop_mac.
struct WanPath {
  std::string name;  // "a_to_b"
  std::string in_ifname;
  std::string out_ifname;
  Mac next_hop_mac{};
};

// Loss rate and mean burst length as the WAN program's parameters: the
// independent loss_ppm when burst <= 1, else the Gilbert-Elliott chain's
// transition rates. Throws rg::Error (kExitUsage) for a burst below 1 or a
// loss of 100 % with bursts.
void set_loss(rg_wan_config& cfg, double loss_pct, double burst);

class Wan {
 public:
  // Attaches to every interface of ifnames in netns; detaches on destruction
  // (and on failure part-way).
  Wan(const std::string& netns, const std::vector<std::string>& ifnames, const rg_wan_config& cfg);
  ~Wan();
  Wan(const Wan&) = delete;
  Wan& operator=(const Wan&) = delete;

  void configure(const rg_wan_config& cfg);
  // Holds the UDP packets of each path for cfg's delay (and jitter,
  // reordering) in a delay line; the other traffic crosses at once. Creates
  // a hold veth per path in the WAN's namespace.
  void start_delay_line(const std::vector<WanPath>& paths, const DelayLineConfig& cfg);
  const DelayLine* delay_line() const { return delay_.get(); }
  LossRuns loss_runs(const std::string& ifname) const;
  // Packets that arrived on ifname (so: travelling away from its peer).
  WanStats stats(const std::string& ifname, rg_wan_class cls) const;
  WanStats total(rg_wan_class cls) const;
  // The sequence numbers of the Geneve packets that arrived on ifname.
  WanSeqLoss seq_loss(const std::string& ifname) const;

 private:
  std::map<std::pair<uint32_t, uint32_t>, WanStats> read() const;
  void detach_all() noexcept;
  void stop_delay_line() noexcept;
  int hook_ifindex(const std::string& ifname) const;

  struct Hook {
    std::string ifname;
    int ifindex;
    bool created_qdisc;
  };
  std::string netns_;
  std::vector<Hook> hooks_;
  rg_wan_config cfg_{};
  std::vector<std::string> hold_links_;  // created by start_delay_line
  std::unique_ptr<DelayLine> delay_;
  ::wan* skel_ = nullptr;
};

const char* wan_class_name(rg_wan_class cls);

}  // namespace rg::lab
