// The congestion scenario: gateway B's lan0, the port towards host B,
// rate-limited and scheduled by DSCP the way a datacenter switch port is (a
// priority class for DSCP 46 with a guaranteed rate, a best-effort class for
// everything else, shallow buffers), bulk TCP (iperf3) from the bulk
// namespace to host B that keeps the best-effort class busy, and host A's
// line rate, which bounds what the RoCE traffic offers. RoCE whose DSCP was
// bleached on the way lands in the best-effort class with the bulk traffic;
// RoCE that arrives as 46 does not.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "lab/proc.h"
#include "lab/topology.h"

namespace rg::lab {

struct SchedulerConfig {
  unsigned link_mbit = 0;      // lan0's rate: what the port sends at most
  unsigned priority_mbit = 0;  // guaranteed to DSCP 46; best effort is guaranteed the rest
  unsigned queue_packets = 0;  // each class's buffer (pfifo limit)
};

struct ClassStats {
  uint64_t packets = 0;  // sent
  uint64_t bytes = 0;
  uint64_t dropped = 0;  // buffer full
};

struct SchedulerStats {
  ClassStats priority;
  ClassStats best_effort;
};

SchedulerStats operator-(const SchedulerStats& a, const SchedulerStats& b);
nlohmann::json to_json(const SchedulerStats& s);

// HTB on gateway B's lan0: classes 1:10 (DSCP 46, prio 0) and 1:20 (the
// rest, the default), both allowed to borrow up to the link rate, each with
// a pfifo leaf. Removed by the destructor (or with the namespace).
class DscpScheduler {
 public:
  DscpScheduler(const Topology& topo, const SchedulerConfig& cfg);
  ~DscpScheduler();
  DscpScheduler(const DscpScheduler&) = delete;
  DscpScheduler& operator=(const DscpScheduler&) = delete;

  const SchedulerConfig& config() const { return cfg_; }
  // Cumulative since the scheduler was installed.
  SchedulerStats stats() const;

  static constexpr const char* kInterface = "lan0";

 private:
  std::string netns_;
  SchedulerConfig cfg_;
};

// Host A's eth0 sends at most mbit, like a NIC at its line rate: a token
// bucket whose queue holds every packet the QPs may have outstanding
// (qps x window), so the sender is paced, never dropped. Removed by the
// destructor (or with the namespace).
class SenderLineRate {
 public:
  SenderLineRate(const Topology& topo, unsigned mbit, unsigned outstanding_packets);
  ~SenderLineRate();
  SenderLineRate(const SenderLineRate&) = delete;
  SenderLineRate& operator=(const SenderLineRate&) = delete;

 private:
  std::string netns_;
};

struct BulkResult {
  double received_mbps = 0;  // TCP goodput at host B over the run
  uint64_t retransmits = 0;  // TCP segments the bulk sender resent
};

// iperf3: a one-off server at host B and a client in the bulk namespace
// with `streams` TCP connections for `seconds`. Their JSON logs go to
// log_dir. Both processes stop with the object.
class BulkTraffic {
 public:
  BulkTraffic(const Topology& topo, const std::string& log_dir, const std::string& name, unsigned streams,
              unsigned seconds);
  ~BulkTraffic();
  BulkTraffic(const BulkTraffic&) = delete;
  BulkTraffic& operator=(const BulkTraffic&) = delete;

  // Waits up to timeout for the client to end its run; true once it has.
  bool wait(std::chrono::milliseconds timeout);
  // The client's report once it has ended; nothing if it has not, failed or
  // reported an error.
  std::optional<BulkResult> result();
  // The client's JSON report, relative to log_dir.
  const std::string& client_log() const { return client_log_name_; }

 private:
  std::string client_log_path_, client_log_name_;
  std::unique_ptr<Child> server_, client_;
};

}  // namespace rg::lab
