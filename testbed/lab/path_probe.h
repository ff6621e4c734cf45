// Measures the lab's path from host A to host B with numbered, timestamped
// UDP datagrams: one-way delay of each (both ends share this host's
// CLOCK_MONOTONIC), order, loss, and the rate that arrived. The delay
// line's test and its benchmark (bench/delay_line) use it.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "lab/topology.h"

namespace rg::lab {

struct ProbeConfig {
  unsigned count = 1000;                  // datagrams
  std::chrono::nanoseconds interval{0};   // between sends; 0: as fast as the socket takes them
  unsigned payload = 64;                  // bytes (at least the 16 of sequence number and time)
  uint16_t port = 9;                      // at host B
  std::chrono::milliseconds drain{1000};  // how long after the last send arrivals are awaited
};

struct ProbeResult {
  unsigned sent = 0;
  unsigned received = 0;
  unsigned inversions = 0;  // arrivals with a lower number than one before them
  unsigned duplicates = 0;
  std::vector<int64_t> delay_ns;  // one per arrival, in arrival order
  std::chrono::nanoseconds send_time{0};     // first send to last send
  std::chrono::nanoseconds receive_time{0};  // first arrival to last arrival

  // q in [0, 1] of delay_ns (0 when empty).
  int64_t delay_quantile(double q) const;
  double received_per_second() const;
};

// Host A's IPv4 address to host B's, port cfg.port. Bounded: count sends and
// the drain time.
ProbeResult probe_path(const Topology& topo, const ProbeConfig& cfg);

}  // namespace rg::lab
