// The far fabric's ECN marking (testbed/fabric/ecn.bpf.c): in the
// congestion scenario gateway B's port to host B marks ECN-capable packets
// CE as a datacenter switch's RED/ECN profile does, by the depth of the
// class queue each joins (Kmin, Kmax, Pmax; never below Kmin, always at or
// above Kmax). The host kernel has no red qdisc and a TC program cannot see
// a qdisc's backlog, so a sampler reads each class's backlog (its pfifo
// leaf's, over rtnetlink) every kSamplePeriod and writes it where the
// program reads it: the program marks by the depth of the last sample, as a
// switch that marks on an averaged queue does.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <nlohmann/json_fwd.hpp>

#include "fabric/ecn.h"

struct fabric_ecn;  // the generated skeleton

namespace rg {
class NetlinkSocket;
}

namespace rg::lab {

struct FabricEcnConfig {
  uint32_t kmin_bytes = 0;
  uint32_t kmax_bytes = 0;  // above kmin_bytes
  double pmax = 0;          // the marking probability at Kmax, (0, 1]
};

// The lab's profile for class queues of queue_packets full frames: Kmin at
// a quarter of the buffer, Kmax at three quarters, Pmax 0.2 (a switch's
// shape, scaled to the lab's shallow buffers).
FabricEcnConfig fabric_ecn_profile(unsigned queue_packets);

// "off", "on" (fabric_ecn_profile) or "KMIN,KMAX,PMAX" (bytes, bytes, a
// fraction) -> a profile, or none for "off"; throws rg::Error (kExitUsage)
// for anything else or a profile that is no RED line.
std::optional<FabricEcnConfig> parse_fabric_ecn(const std::string& text, unsigned queue_packets);

// What the marker saw of one class in one region of its profile.
struct FabricEcnRegion {
  uint64_t ect = 0;      // markable packets
  uint64_t marked = 0;   // of those, marked CE
  uint64_t ce = 0;       // already CE
  uint64_t not_ect = 0;  // never marked
  double expected = 0;   // the marks the profile predicts: the sum of each ECT packet's probability
};

// [class (rg_ecn_class)][region (rg_ecn_region)].
struct FabricEcnStats {
  std::array<std::array<FabricEcnRegion, RG_ECN_REGIONS>, RG_ECN_CLASSES> of{};
  uint64_t marked(rg_ecn_class cls) const;
};

FabricEcnStats operator-(const FabricEcnStats& a, const FabricEcnStats& b);
nlohmann::json to_json(const FabricEcnStats& s);
nlohmann::json to_json(const FabricEcnConfig& c);

class FabricEcn {
 public:
  static constexpr std::chrono::microseconds kSamplePeriod{250};

  // Loads the program with cfg; attach() puts it on a port.
  explicit FabricEcn(const FabricEcnConfig& cfg);
  ~FabricEcn();
  FabricEcn(const FabricEcn&) = delete;
  FabricEcn& operator=(const FabricEcn&) = delete;

  // At TC egress of ifname in netns (after the filters already there, so
  // it sees the packet as the queue will), marking by the backlog of the
  // qdiscs under classes[RG_ECN_PRIORITY] and classes[RG_ECN_BEST_EFFORT];
  // with sample, a thread samples them every kSamplePeriod. Detached (and
  // the sampler stopped) by the destructor.
  void attach(const std::string& netns, const std::string& ifname,
              const std::array<uint32_t, RG_ECN_CLASSES>& classes, bool sample = true);
  // One sample of the backlogs, written for the program: what the sampler
  // does every period. Returns the depths the program now marks by, by
  // class (a queue not found keeps its last).
  std::array<uint64_t, RG_ECN_CLASSES> sample_once();
  // The depth the program marks cls by (a test sets it without a port).
  void set_depth(rg_ecn_class cls, uint64_t bytes);
  uint64_t depth(rg_ecn_class cls) const;

  int prog_fd() const;
  const FabricEcnConfig& config() const { return cfg_; }
  // Cumulative, summed over CPUs.
  FabricEcnStats stats() const;

 private:
  void detach() noexcept;

  FabricEcnConfig cfg_;
  ::fabric_ecn* skel_ = nullptr;
  std::string netns_;
  int ifindex_ = 0;
  bool created_qdisc_ = false;
  std::array<uint32_t, RG_ECN_CLASSES> classes_{};
  std::unique_ptr<NetlinkSocket> nl_;  // rtnetlink, opened in netns_
  std::mutex nl_mu_;
  std::atomic<bool> stop_{false};
  std::thread sampler_;
};

}  // namespace rg::lab
