// `roceguard lab`: builds the namespace topology with its lossy WAN, runs the
// RoCE v2 generator across it without and with roceguard on the gateways,
// shows each second as it happens and writes a report directory. In the
// congestion scenario gateway B's port to host B is a rate-limited,
// DSCP-scheduled link shared with bulk TCP, and so is gateway A's uplink,
// scheduled by skb->priority (lab/congestion.h). Everything
// it creates (namespaces, attachments, pins, captures, iperf3) is removed on
// return, on error and on SIGINT/SIGTERM/SIGHUP.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

namespace rg::lab {

struct LabOptions {
  std::string scenario = "congestion";  // or "bleach": the WAN only, no scheduler, no bulk traffic
  std::string mode = "both";  // "without", "with" or "both" (without first)
  unsigned duration_s = 10;   // per phase
  double loss_pct = 0.1;      // WAN loss, percent of RoCE/Geneve packets
  double loss_burst = 1;      // mean length of a loss burst, packets; 1: independent loss
  // One way, each direction: a metro or inter-zone path (README, "The lab").
  std::chrono::microseconds wan_delay{2000};
  std::chrono::microseconds wan_jitter{0};
  // The WAN's own bottleneck (lab/bottleneck.h), each direction: its rate
  // (0: none) and its drop-tail buffer in time at that rate (0: one
  // bandwidth-delay product over the lab's round trip).
  unsigned wan_rate_mbit = 0;
  std::chrono::microseconds wan_buffer{0};
  // Bulk TCP streams from bulk sender A to the bulk sender through the
  // WAN's bottleneck and delay (0: none; needs wan_rate_mbit and the bleach
  // scenario): what the RoCE traffic shares the pipe with.
  unsigned wan_cross = 0;
  std::string wan_cross_cc;  // their TCP congestion control (empty: the namespace's default)
  double reorder_pct = 0;     // WAN reordering, percent of UDP packets (off: the lab never reorders)
  double ce_pct = 0.0;        // WAN ECN CE marks, percent of ECN-capable packets
  unsigned qps = 4;
  size_t payload = 1024;      // RoCE path MTU 1024
  // Host A's NIC, as `roceguard nic` sets it up (nic::Profile{}'s defaults):
  // the local ACK timeout as text (rounded up to 4.096 us x 2^t), the retry
  // count, and how it recovers losses ("gbn" or "sr", see lab/roce_gen.h).
  std::string ack_timeout = "67ms";
  unsigned retry_cnt = 7;
  std::string retransmit = "gbn";
  // The QPs' transport: "rc", or "uc" (Unreliable Connected: every PSN sent
  // once, no ACKs or resends, paced at sender_mbit; see lab/roce_gen.h).
  std::string transport = "rc";
  // Host A's congestion control: "dcqcn" (each QP paced at its DCQCN rate,
  // at most sender_mbit, lab/dcqcn.h) or "none" (CNPs only counted); the
  // DCQCN settings as --dcqcn takes them, KEY=VALUE,... by mlx5 name, over
  // mlx5's defaults (min_time_between_cnps goes to host B's responder).
  std::string cc = "dcqcn";
  std::vector<std::string> dcqcn;
  bool tunnel = true;         // Geneve between the gateways; false: DSCP only
  // "geneve": roceguard's tunnel as tunnel says; "vxlan": the kernel's
  // VXLAN device between the gateways (lab/kernel_vxlan.h) carries host A's
  // traffic in both phases and roceguard, attached to it, re-marks and
  // counts without its own tunnel (tunnel must be false).
  std::string tunnel_kind = "geneve";
  // The gateways' loss shield (tunnel.shield): "off", "control" (a second
  // copy of what Go-Back-N waits for), "all" (of every RoCE packet) or
  // "auto" (all while the far gateway reports loss).
  std::string shield = "off";
  // The congestion loop (tunnel.congestion) of both gateways: "off" or "on".
  std::string congestion = "off";
  // What the loop sends (tunnel.congestion_signal): "both", "cnp" or "ce".
  std::string congestion_signal = "both";
  std::string ingress_hook = "auto";  // the gateways' dataplane.ingress_hook
  bool xdp_forward = false;  // the gateways' dataplane.xdp_forward (LAN and WAN attached)
  // Host A's generator hands up to this many consecutive packets of one QP
  // to the kernel as one UDP_SEGMENT send (a GSO skb), as an RNIC's burst
  // arrives; 1: one send per packet.
  unsigned burst = 1;
  // rx-udp-gro-forwarding on the gateways' lan0 (Topology::forward_udp_gro).
  bool gro_forwarding = false;
  std::string report_dir;     // empty: ./roceguard-lab-<UTC timestamp>
  // Gateway A's exporter; gateway B's listens on the next port (port 0:
  // both pick a free one).
  std::string metrics_listen = "127.0.0.1:9741";
  std::string prefix = "rglab";  // namespaces <prefix>-<pid>-<node>, pins likewise
  unsigned pcap_seconds = 3;     // capture at every hop for the phase's first seconds
  bool verbose = false;
  // Congestion scenario: gateway B's port to host B (see README, "The lab").
  unsigned sender_mbit = 100;  // host A's line rate: the RoCE traffic's offered load
  unsigned link_mbit = 200;
  unsigned priority_mbit = 125;
  unsigned queue_packets = 32;
  // The far fabric's ECN marking at that port (lab/fabric_ecn.h): "on" (the
  // profile for queue_packets), "off", or "KMIN,KMAX,PMAX".
  std::string fabric_ecn = "on";
  unsigned bulk_streams = 4;  // each bulk sender's
  // Congestion scenario: gateway A's uplink, HTB class 1:10 chosen by skb->priority.
  unsigned uplink_mbit = 200;
  unsigned uplink_priority_mbit = 125;
};

// "0", "500us", "2ms", "1.5s" (the durations the NIC profile takes, or 0)
// -> microseconds; throws rg::Error (kExitUsage) naming option otherwise.
std::chrono::microseconds parse_wan_duration(const std::string& option, const std::string& text);

// The lab's round trip between host A and host B: twice the WAN's one-way
// delay and kLabBaseRtt, the round trip of the namespaces' veths and
// gateways without added delay (about 70 us, a ping from host A to host B).
inline constexpr std::chrono::microseconds kLabBaseRtt{70};
std::chrono::microseconds lab_round_trip(std::chrono::microseconds wan_delay);

// What one request packet of payload bytes occupies on host A's line:
// Ethernet, IPv4, UDP, BTH, payload, ICRC.
size_t lab_wire_bytes(size_t payload);

// Pin directories <prefix>-<pid>-<node> of runs that died without cleaning
// up (SIGKILL): their namespaces, and so their interfaces and programs, are
// gone with Topology::cleanup_stale; only the pins remain.
void remove_stale_pins(const std::string& prefix);

// Returns the process exit code; throws rg::Error on failure (after
// cleaning up).
int run_lab(const LabOptions& opts);

}  // namespace rg::lab
