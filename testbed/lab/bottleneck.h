// The WAN's own bottleneck (`roceguard lab --wan-rate`): on each of the WAN
// router's two ports towards the gateways (to-b carries A to B, to-a B to
// A), a token bucket (tbf) at the given rate over a drop-tail buffer of the
// given duration, as a provider's shaper or policer is: it neither marks
// ECN nor pauses. Whatever crosses the WAN shares it (the delay line sends
// its frames out through these ports, so the queue builds after the delay).
// A sampler reads each queue's backlog from the kernel (rtnetlink, every
// kSamplePeriod) and turns it into the delay a packet joining it then waits:
// backlog bytes over the rate.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace rg {
class NetlinkSocket;
}

namespace rg::lab {

// One qdisc's counters, as the kernel keeps them (struct tc_stats).
struct QdiscCounters {
  uint64_t packets = 0, bytes = 0, drops = 0, backlog = 0;  // backlog: bytes queued now
  bool found = false;
};
// A qdisc by where it hangs: its interface and its parent (TC_H_ROOT, or a
// class's handle for the leaf under it).
struct QdiscPlace {
  int ifindex = 0;
  uint32_t parent = 0;
};
// One rtnetlink dump of the qdiscs of nl's namespace: the counters of each
// place's qdisc, in places' order (found false where there is none, and for
// all when the dump fails: the namespace going away).
std::vector<QdiscCounters> dump_qdisc_counters(NetlinkSocket& nl, const std::vector<QdiscPlace>& places);

struct BottleneckConfig {
  unsigned mbit = 0;                  // each direction's rate; 0: no bottleneck
  std::chrono::microseconds buffer{0};  // the queue's length in time at that rate
};

// The drop-tail limit of cfg's queue in bytes: the buffer at the rate, at
// least kMinFrames full frames (a shorter queue could not take one burst of
// the smallest window).
uint64_t bottleneck_limit_bytes(const BottleneckConfig& cfg);

// One direction over a phase.
struct BottleneckStats {
  uint64_t sent_packets = 0;
  uint64_t sent_bytes = 0;
  uint64_t dropped = 0;  // the buffer was full: drop-tail
  // The queue's delay, sampled: p50, p99 and the largest, microseconds.
  uint64_t samples = 0;
  uint32_t delay_p50_us = 0;
  uint32_t delay_p99_us = 0;
  uint32_t delay_max_us = 0;
};

nlohmann::json to_json(const BottleneckStats& s);

class WanBottleneck {
 public:
  static constexpr std::chrono::microseconds kSamplePeriod{1000};
  static constexpr unsigned kMinFrames = 4;

  // Installs the queues on ifnames (to-b, to-a) in netns and starts the
  // sampler; removes them on destruction (and on failure part-way).
  WanBottleneck(const std::string& netns, const std::vector<std::string>& ifnames, const BottleneckConfig& cfg);
  ~WanBottleneck();
  WanBottleneck(const WanBottleneck&) = delete;
  WanBottleneck& operator=(const WanBottleneck&) = delete;

  const BottleneckConfig& config() const { return cfg_; }
  // A phase starts: counters and delay samples from now on.
  void start_phase();
  // What direction i (the order of ifnames) did since start_phase.
  BottleneckStats phase_stats(size_t i);
  // The queue delay of direction i's samples since *cursor (a count of
  // samples since start_phase, 0 then), in samples, p50, p99 and max
  // (BottleneckStats' fields); moves *cursor past them.
  BottleneckStats delay_since(size_t i, size_t* cursor);

 private:
  using Counters = QdiscCounters;
  std::vector<Counters> read_counters() const;
  void sample_loop();

  std::string netns_;
  std::vector<std::string> ifnames_;
  std::vector<int> ifindexes_;
  BottleneckConfig cfg_;
  std::unique_ptr<NetlinkSocket> nl_;  // rtnetlink, opened in netns_
  mutable std::mutex nl_mu_;            // one dump at a time on nl_
  std::mutex mu_;
  std::vector<Counters> base_;
  std::vector<std::vector<uint32_t>> delays_us_;  // per direction, since start_phase
  std::atomic<bool> stop_{false};
  std::thread sampler_;
};

}  // namespace rg::lab
