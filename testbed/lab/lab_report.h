// What `roceguard lab` measures and writes: per-second snapshots of one
// phase (without or with roceguard), the live view drawn from them, the
// side-by-side summary, and the report directory (JSON, CSV, Prometheus
// text, gnuplot charts).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lab/bottleneck.h"
#include "lab/congestion.h"
#include "lab/fabric_ecn.h"
#include "lab/roce_gen.h"
#include "lab/wan.h"

namespace rg::lab {

// Cumulative figures at the end of one second of a phase; the view and the
// CSV show differences between consecutive snapshots.
struct Snapshot {
  unsigned second = 0;
  uint64_t sent_packets = 0;     // host A, first copies and resends
  uint64_t retransmits_a = 0;    // host A's resends (Go-Back-N or selective repeat)
  uint64_t naks_a = 0;           // NAKs that reached host A
  uint64_t received_b = 0;       // request packets that reached host B
  uint64_t goodput_bytes_b = 0;  // payload delivered in order at host B
  uint64_t lost_b = 0;           // PSN-gap estimate at host B
  uint64_t cnps_b = 0;           // CNPs host B sent
  uint64_t cnps_a = 0;           // CNPs that reached host A (host B's, and its gateway's with the loop)
  uint64_t ecn_ce_b = 0;
  std::array<uint64_t, 64> dscp_b{};  // DSCP of request packets at host B
  uint64_t wan_dropped = 0;      // both directions, since the phase started
  uint64_t wan_bleached = 0;
  uint64_t wan_ce_marked = 0;
  // roceguard's own counters (zero without it): what the gateways saw.
  uint64_t rg_remarked_a = 0;
  uint64_t rg_encapsulated_a = 0;
  uint64_t rg_retransmits_a = 0;
  uint64_t rg_decapsulated_b = 0;
  uint64_t rg_repaired_b = 0;
  uint64_t rg_lost_b = 0;
  // Gateway B's port to host B, congestion scenario only: its classes, and
  // what the far fabric's ECN marker did there (with --fabric-ecn).
  SchedulerStats scheduler;
  FabricEcnStats fabric_ecn;
  // Gateway A's uplink, congestion scenario only.
  SchedulerStats uplink_scheduler;
  // The WAN bottleneck's A->B queue over this second alone (--wan-rate;
  // samples 0 without it): its delay's p99 and largest, us.
  uint64_t wan_queue_samples = 0;
  uint32_t wan_queue_p99_us = 0, wan_queue_max_us = 0;
};

// One direction of the tunnel after the phase, once it fell quiet: what
// the sending gateway numbered, what the receiving one counted from the
// numbers, and what the WAN itself dropped of the Geneve packets.
struct TunnelDirection {
  std::string name;              // "a_to_b" or "b_to_a"
  uint64_t sent = 0;             // sending gateway, with the sequence option
  uint64_t received = 0;         // receiving gateway
  uint64_t lost = 0;
  uint64_t unsettled = 0;        // holes not yet counted as lost (0 once quiet)
  uint64_t reordered = 0;
  uint64_t duplicated = 0;
  uint64_t wan_dropped = 0;      // Geneve packets the WAN dropped in this direction
  uint64_t delay_arrivals = 0;
  double delay_avg_s = 0;
  // The loss shield: the Geneve bytes that entered the WAN in this
  // direction (whole frames, copies included), the second copies the
  // sending gateway sent (their bytes: what the shield adds to the WAN),
  // the copies the receiving gateway dropped because the other copy came
  // first. lost above is then the residual loss: numbers every copy of
  // which was lost.
  uint64_t tunnel_bytes = 0;
  uint64_t shield_copies = 0;
  uint64_t shield_copy_bytes = 0;
  uint64_t shield_eliminated = 0;
  // Copies the kernel refused to send (the egress queue full, say), and
  // shielded packets sent once (unnumbered, or a neighbour to resolve).
  uint64_t shield_copy_errors = 0;
  uint64_t shield_uncopied = 0;
  // With --shield auto: whether the sending gateway's shield was on at the
  // end (-1: not "auto"), and how often it turned on and off.
  int shield_auto_on = -1;
  uint64_t shield_auto_turned_on = 0, shield_auto_turned_off = 0;
  // With --congestion on: the sending gateway's phantom queue (its inner
  // CE marks; chosen but Not-ECT; arrivals at its bound) and its model of
  // the WAN's bottleneck at the end.
  bool congestion = false;
  uint64_t cc_marked = 0, cc_unmarkable = 0, cc_capped = 0, cc_queued = 0, cc_cnps = 0, cc_cnp_errors = 0;
  std::string cc_state;
  uint64_t cc_bottleneck_kbps = 0, cc_rate_kbps = 0;
  uint64_t cc_fallbacks = 0, cc_probes = 0, cc_resets = 0, cc_competes = 0;
  // Numbers every copy of which the WAN dropped (WanSeqLoss), and of those
  // the ones after the stream's last arrival, which no receiver can count.
  uint64_t wan_all_copies_dropped = 0;
  uint64_t wan_after_last_arrival = 0;
};

struct PhaseResult {
  std::string name;  // "without" or "with"
  bool roceguard = false;
  unsigned duration_s = 0;
  std::vector<Snapshot> seconds;
  SenderStats sent;
  ReceiverStats received;
  Snapshot final;
  nlohmann::json counters = nlohmann::json::object();  // gateway -> counter rows
  std::vector<std::string> pcaps;
  std::optional<BulkResult> bulk;  // congestion scenario, when iperf3 finished its run
  std::string bulk_log;            // iperf3's JSON report, relative to the report directory
  std::optional<BulkResult> uplink_bulk;  // the same for bulk sender A, through gateway A's uplink
  std::string uplink_bulk_log;
  std::optional<BulkResult> wan_cross;  // --wan-cross: the TCP streams through the WAN's bottleneck
  std::string wan_cross_log;
  std::vector<TunnelDirection> tunnel;  // with roceguard and its tunnel only
  // The WAN during the phase, per direction (a_to_b, b_to_a): loss runs by
  // length, and what the delay line did (empty without one).
  std::array<LossRuns, 2> wan_runs{};
  std::array<uint64_t, 2> wan_dropped{};  // RoCE and tunnel packets, per direction
  // Packets that entered the WAN during the phase, per direction and class
  // (rg_wan_class): which tunnel, if any, carried the RoCE traffic.
  std::array<std::array<uint64_t, RG_WAN_CLASS_MAX>, 2> wan_packets{};
  std::array<WanSeqLoss, 2> wan_seq{};    // the tunnel's sequence numbers, per direction
  std::vector<DelayLineStats> delay_line;
  std::vector<BottleneckStats> bottleneck;  // a_to_b, b_to_a; empty without --wan-rate
};


struct LabSettings {
  std::string scenario;
  std::optional<SchedulerConfig> scheduler;  // congestion scenario only
  std::optional<FabricEcnConfig> fabric_ecn;  // the marking at gateway B's port; congestion scenario only
  std::optional<SchedulerConfig> uplink_scheduler;  // gateway A's uplink, congestion scenario only
  unsigned bulk_streams = 0;
  unsigned sender_mbit = 0;  // host A's line rate, congestion scenario only
  std::string mode;
  unsigned duration_s = 0;
  double loss_pct = 0;
  double loss_burst = 1;
  double wan_delay_ms = 0;   // one way
  double wan_jitter_ms = 0;
  std::optional<BottleneckConfig> bottleneck;  // --wan-rate
  unsigned wan_cross = 0;  // --wan-cross: TCP streams sharing the bottleneck
  double reorder_pct = 0;
  double ce_pct = 0;
  unsigned qps = 0;
  size_t payload = 0;
  // Host A's requesters: the window sized to the bandwidth-delay product
  // at window_mbit over rtt, and the NIC profile's retransmit settings.
  unsigned window = 0;
  unsigned window_mbit = 0;
  std::chrono::microseconds rtt{0};
  AckTimeoutSetting ack_timeout;
  unsigned retry_cnt = 0;
  Retransmit retransmit = Retransmit::kGoBackN;
  // RC, or UC: every PSN sent once, no ACKs, paced at window_mbit.
  Transport transport = Transport::kRc;
  // Host A's congestion control; with kDcqcn each QP is paced at its rate,
  // at most window_mbit, host A's line.
  CongestionControl cc = CongestionControl::kNone;
  DcqcnSettings dcqcn;
  bool tunnel = true;  // roceguard's Geneve between the gateways (with roceguard)
  // What carries host A's traffic across the WAN: "geneve" (roceguard's, with
  // roceguard only), "vxlan" (the kernel's device, both phases) or "none".
  std::string tunnel_kind = "geneve";
  std::string shield = "off";  // tunnel.shield of both gateways
  std::string congestion = "off";  // tunnel.congestion of both gateways
  std::string congestion_signal = "both";  // tunnel.congestion_signal of both gateways
  bool xdp_forward = false;
  unsigned burst = 1;             // packets per UDP_SEGMENT send at host A
  bool gro_forwarding = false;    // asked for: rx-udp-gro-forwarding on the gateways' lan0
  bool gro_forwarding_on = false; // what ethtool -k reported afterwards
  uint8_t host_tos = 0;
  std::string metrics_a, metrics_b;
};

// Live view: a phase banner, a column header, one row per second; with
// scheduler, the drops of each class of gateway B's port and gateway A's
// uplink too.
// "window 32 packets per QP = bandwidth-delay product at 100 Mbit/s and RTT
// 70us (at least 32); ACK timeout 67ms -> t = 14 (67.109ms), retry_cnt 7;
// Go-Back-N": the requesters' settings, one line each.
std::string sender_text(const LabSettings& s);

std::string view_banner(const LabSettings& s, const PhaseResult& phase, unsigned index, unsigned count);
std::string view_header(bool scheduler);
std::string view_row(const Snapshot& prev, const Snapshot& cur, unsigned duration_s, bool scheduler);

// The figures a reader looks for first, from one phase.
struct Headline {
  std::optional<double> goodput_share;     // of host A's line rate (congestion scenario: it has one)
  std::optional<double> resends_per_drop;  // host A's resends per packet the WAN dropped
};
Headline headline(const LabSettings& s, const PhaseResult& p);

// "off", "all: a second copy of every RoCE packet" ...: the loss shield as
// the banner and the summary name it.
std::string shield_text(const std::string& shield);

// What the WAN does: "one-way delay 2 ms each direction, loss 0.1 % (independent), no reordering, DSCP
// bleached".
std::string wan_text(const LabSettings& s);

// "46:100%" or "0:99.9% 46:0.1%": the classes of request packets at host B.
std::string dscp_text(const std::array<uint64_t, 64>& h);

std::string summary_table(const LabSettings& s, const std::vector<PhaseResult>& phases);

// Writes counters.json, counters.csv, summary.txt and the charts into dir
// (which exists). Returns the files written, relative to dir.
std::vector<std::string> write_report(const std::string& dir, const LabSettings& s,
                                      const std::vector<PhaseResult>& phases);

}  // namespace rg::lab
