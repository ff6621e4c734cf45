// `roceguard lab`: builds the namespace topology with its lossy WAN, runs the
// RoCE v2 generator across it without and with roceguard on the gateways,
// shows each second as it happens and writes a report directory. Everything
// it creates (namespaces, attachments, pins, captures) is removed on return,
// on error and on SIGINT/SIGTERM.
#pragma once

#include <cstddef>
#include <string>

namespace rg::lab {

struct LabOptions {
  std::string mode = "both";  // "without", "with" or "both" (without first)
  unsigned duration_s = 10;   // per phase
  double loss_pct = 0.1;      // WAN loss, percent of RoCE/Geneve packets
  double ce_pct = 0.0;        // WAN ECN CE marks, percent of ECN-capable packets
  unsigned qps = 4;
  size_t payload = 1024;      // RoCE path MTU 1024
  bool tunnel = true;         // Geneve between the gateways; false: DSCP only
  std::string report_dir;     // empty: ./roceguard-lab-<UTC timestamp>
  // Gateway A's exporter; gateway B's listens on the next port (port 0:
  // both pick a free one).
  std::string metrics_listen = "127.0.0.1:9741";
  std::string prefix = "rglab";  // namespaces <prefix>-<pid>-<node>, pins likewise
  unsigned pcap_seconds = 3;     // capture at every hop for the phase's first seconds
  bool verbose = false;
};

// Pin directories <prefix>-<pid>-<node> of runs that died without cleaning
// up (SIGKILL): their namespaces, and so their interfaces and programs, are
// gone with Topology::cleanup_stale; only the pins remain.
void remove_stale_pins(const std::string& prefix);

// Returns the process exit code; throws rg::Error on failure (after
// cleaning up).
int run_lab(const LabOptions& opts);

}  // namespace rg::lab
