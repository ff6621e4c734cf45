// The congestion scenario has two bottlenecks, each shared with bulk TCP
// (iperf3) that keeps its best-effort class busy:
// * gateway B's lan0, the port towards host B, rate-limited and scheduled by
//   DSCP the way a datacenter switch port is (a priority class for DSCP 46
//   with a guaranteed rate, a best-effort class for everything else,
//   shallow buffers), with bulk TCP from the bulk namespace to host B. RoCE
//   whose DSCP was bleached on the way lands in the best-effort class;
//   RoCE that arrives as 46 does not.
// * gateway A's wan0, its uplink, with the same two classes chosen by
//   skb->priority, as a gateway's own qdisc sees packets, with bulk TCP from
//   bulk sender A to the WAN router. RoCE reaches the priority class only
//   when roceguard's TC egress program sets skb->priority to its class id.
// Host A's line rate bounds what the RoCE traffic offers.
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

// What puts a packet into the priority class.
enum class PriorityMatch {
  kDscp46,       // u32 filters on DSCP 46, IPv4 and IPv6: a switch port
  kSkbPriority,  // no filter: HTB takes an skb->priority equal to a class id as that class
};

// HTB on one interface: classes 1:10 (the priority class, prio 0) and 1:20
// (the rest, the default), both allowed to borrow up to the link rate, each
// with a pfifo leaf. Removed by the destructor (or with the namespace).
class HtbScheduler {
 public:
  HtbScheduler(const Topology& topo, Node node, const std::string& ifname, const SchedulerConfig& cfg,
               PriorityMatch match);
  ~HtbScheduler();
  HtbScheduler(const HtbScheduler&) = delete;
  HtbScheduler& operator=(const HtbScheduler&) = delete;

  const SchedulerConfig& config() const { return cfg_; }
  const std::string& interface() const { return ifname_; }
  // Cumulative since the scheduler was installed.
  SchedulerStats stats() const;

  // The priority class 1:10 as an skb->priority: (major << 16) | minor.
  static constexpr uint32_t kPriorityClassId = (1u << 16) | 0x10;
  // The best-effort class 1:20 (each class's pfifo leaf hangs under it).
  static constexpr uint32_t kBestEffortClassId = (1u << 16) | 0x20;

 private:
  std::string netns_, ifname_;
  SchedulerConfig cfg_;
};

// Where the schedulers are: gateway B's port to host B, gateway A's uplink.
inline constexpr const char* kFarSidePort = "lan0";
inline constexpr const char* kUplink = "wan0";

// Host A's eth0 sends at most mbit, like a NIC at its line rate: a token
// bucket whose queue holds every packet the QPs may have outstanding
// (qps x window, the window sized by window_for_path), so the sender is
// paced, never dropped. Removed by the
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
  double received_mbps = 0;  // TCP goodput at the receiver over the run
  uint64_t retransmits = 0;  // TCP segments the bulk sender resent
  std::string congestion_control;  // the sender's TCP congestion control, as iperf3 reports it
  double mean_rtt_us = 0;    // the sender's smoothed RTT, the mean over its streams (0: not reported)
};

// Who sends bulk TCP to whom.
struct BulkPath {
  Node client;
  Node server;
  std::string server_address;  // one of server's addresses
};
// The bulk sender to host B, through gateway B's port to host B.
BulkPath far_side_bulk(const Topology& topo);
// Bulk sender A to the WAN router, through gateway A's uplink only.
BulkPath uplink_bulk(const Topology& topo);
// Bulk sender A to the bulk sender, across the WAN and its bottleneck (the
// cross traffic, --wan-cross).
BulkPath wan_cross_bulk(const Topology& topo);

// Whether the kernel offers every namespace the TCP congestion control
// name; *offered: the names it does.
bool tcp_congestion_control_offered(const std::string& name, std::string* offered);

// iperf3: a one-off server and a client with `streams` TCP connections for
// `seconds`, along path, with TCP congestion control cc (empty: the
// namespace's default). Their JSON logs go to log_dir, the client's as
// <name>.json. Both processes stop with the object.
class BulkTraffic {
 public:
  BulkTraffic(const Topology& topo, const BulkPath& path, const std::string& log_dir, const std::string& name,
              unsigned streams, unsigned seconds, const std::string& cc = {});
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
