#include "lab/lab_run.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "config/config.h"
#include "dataplane/attach.h"
#include "dataplane/maps.h"
#include "dataplane/state.h"
#include "lab/congestion.h"
#include "lab/fabric_ecn.h"
#include "lab/kernel_vxlan.h"
#include "lab/lab_gateway.h"
#include "lab/lab_report.h"
#include "lab/proc.h"
#include "lab/roce_gen.h"
#include "lab/topology.h"
#include "lab/wan.h"
#include "metrics/exporter.h"
#include "metrics/presentation.h"
#include "nic/profile.h"

namespace rg::lab {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

// What a RoCE host marks before anything touches it: DSCP 26 (AF31, the
// usual RoCE class) with ECT(0), so the WAN can mark CE.
constexpr uint8_t kHostTos = 26 << 2 | 0x02;
constexpr const char* kBpffs = "/sys/fs/bpf";
// Bulk TCP runs this long before the RoCE traffic starts, so the RoCE
// traffic meets a best-effort queue in its steady state, not TCP's slow start.
constexpr auto kBulkWarmup = 2s;

std::atomic<bool> g_stop{false};
std::atomic<Sender*> g_sender{nullptr};

void on_signal(int) {
  g_stop = true;
  if (Sender* s = g_sender.load()) s->stop();
}

// SIGINT, SIGTERM and SIGHUP stop the run instead of the process, so every
// destructor runs; SIGPIPE (output piped into `head`) is ignored for the
// same reason. The previous handlers come back on return.
class SignalScope {
 public:
  SignalScope() {
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < kStopSignals.size(); ++i) sigaction(kStopSignals[i], &sa, &old_[i]);
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ignore, &old_pipe_);
  }
  ~SignalScope() {
    for (size_t i = 0; i < kStopSignals.size(); ++i) sigaction(kStopSignals[i], &old_[i], nullptr);
    sigaction(SIGPIPE, &old_pipe_, nullptr);
  }

 private:
  static constexpr std::array<int, 3> kStopSignals{SIGINT, SIGTERM, SIGHUP};
  std::array<struct sigaction, 3> old_{};
  struct sigaction old_pipe_ {};
};

void check_stop() {
  if (g_stop) throw Error("interrupted; everything the lab created was removed", 130);
}

std::string timestamp() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

std::string pin_path(const std::string& prefix, Node n) {
  return std::string(kBpffs) + "/" + prefix + "-" + std::to_string(getpid()) + "-" +
         std::string(node_suffix(n));
}

// A bounded dumpcap at one hop; its log says when the capture runs.
struct Capture {
  std::string file;
  std::string log;
  std::unique_ptr<Child> child;
};

struct Hop {
  Node node;
  const char* ifname;
  const char* label;
};

// Where a packet from host A to host B can be seen: leaving host A, leaving
// gateway A (after roceguard's egress program), entering and leaving the
// WAN (before and after its bleach/loss), arriving at host B.
constexpr Hop kHops[] = {{Node::kHostA, "eth0", "1-host-a"},
                         {Node::kGatewayA, "wan0", "2-gw-a-wan0"},
                         {Node::kWan, "to-a", "3-wan-in"},
                         {Node::kWan, "to-b", "4-wan-out"},
                         {Node::kHostB, "eth0", "5-host-b"}};

std::vector<Capture> start_captures(const Topology& topo, const std::string& dir, const std::string& phase,
                                    unsigned seconds) {
  std::vector<Capture> caps;
  if (!seconds) return caps;
  std::filesystem::create_directories(dir + "/pcap");
  for (const auto& h : kHops) {
    Capture c;
    c.file = dir + "/pcap/" + phase + "-" + h.label + ".pcapng";
    c.log = dir + "/pcap/." + phase + "-" + h.label + ".log";
    // Bounded in time and packets; headers only (256 bytes) keep the files small.
    c.child = std::make_unique<Child>(
        topo.exec_argv(h.node, {"dumpcap", "-q", "-i", h.ifname, "-f", "udp port 4791 or udp port 6081 or udp port 4789",
                                "-s", "256", "-a", "duration:" + std::to_string(seconds), "-c", "5000",
                                "-w", c.file}),
        c.log);
    caps.push_back(std::move(c));
  }
  // Traffic sent before dumpcap says it captures would be missed. Bounded: 30 s.
  for (auto& c : caps) {
    for (int i = 0;; ++i) {
      std::ifstream f(c.log);
      std::stringstream ss;
      ss << f.rdbuf();
      if (ss.str().find("Capturing on") != std::string::npos) break;
      if (!c.child->running()) throw Error("dumpcap exited before capturing: " + ss.str());
      if (i >= 600) throw Error("dumpcap did not start capturing for " + c.file);
      check_stop();
      std::this_thread::sleep_for(50ms);
    }
  }
  return caps;
}

std::vector<std::string> finish_captures(std::vector<Capture>& caps, const std::string& dir) {
  std::vector<std::string> files;
  for (auto& c : caps) {
    if (c.child->wait(10s) < 0) c.child->stop();
    std::error_code ec;
    std::filesystem::remove(c.log, ec);
    if (std::filesystem::exists(c.file)) files.push_back(std::filesystem::relative(c.file, dir).string());
  }
  caps.clear();
  return files;
}

json counter_rows(const std::vector<CounterRow>& rows, const Topology& topo, Node node,
                  const std::string& wan_if) {
  json out = json::array();
  for (const auto& r : rows) {
    std::string ifname = std::to_string(r.ifindex);
    for (const std::string& name : {std::string("wan0"), std::string("lan0"), wan_if})
      if (topo.ifindex(node, name) == static_cast<int>(r.ifindex)) ifname = name;
    out.push_back(counter_row_json(r, ifname, false));
  }
  return out;
}

std::string scrape(const std::string& address) {
  auto r = run({"curl", "-sS", "--max-time", "10", "http://" + address + "/metrics"}, 15s);
  if (r.status != 0) throw Error("final scrape of http://" + address + "/metrics failed: " + r.err);
  return r.out;
}

struct Lab {
  const LabOptions& opts;
  // Where roceguard attaches towards the far gateway: wan0, or the kernel's
  // VXLAN device when it carries the traffic.
  std::string wan_if;
  LabSettings settings;
  std::string dir;
  Topology& topo;
  Wan& wan;
  std::array<Exporter*, 2> exporters;  // gateway A, gateway B
  std::vector<std::string> files;
  HtbScheduler* scheduler = nullptr;  // congestion scenario only: gateway B's port to host B
  SchedulerStats scheduler_base{};    // the scheduler's counters when the phase's RoCE traffic started
  FabricEcn* fabric_ecn = nullptr;    // the marking at that port (--fabric-ecn)
  FabricEcnStats fabric_ecn_base{};
  HtbScheduler* uplink_scheduler = nullptr;  // congestion scenario only: gateway A's uplink
  SchedulerStats uplink_scheduler_base{};
  WanBottleneck* bottleneck = nullptr;  // --wan-rate: on to-b (A to B) and to-a (B to A)
};

Snapshot take_snapshot(Lab& lab, unsigned second, const SenderStats& tx, const ReceiverStats& rx,
                       const Snapshot& wan_base, const Gateway* gw_a, const Gateway* gw_b) {
  Snapshot s;
  s.second = second;
  s.sent_packets = tx.packets;
  s.retransmits_a = tx.retransmits;
  s.naks_a = tx.naks;
  s.received_b = rx.packets;
  s.goodput_bytes_b = rx.goodput_bytes;
  s.lost_b = rx.lost_estimate;
  s.cnps_b = rx.cnps;
  s.cnps_a = tx.cnps;
  s.ecn_ce_b = rx.ecn_ce;
  s.dscp_b = rx.dscp;
  for (auto cls : {RG_WAN_ROCE, RG_WAN_GENEVE, RG_WAN_VXLAN}) {
    WanStats w = lab.wan.total(cls);
    s.wan_dropped += w.dropped;
    s.wan_bleached += w.bleached;
    s.wan_ce_marked += w.ce_marked;
  }
  s.wan_dropped -= wan_base.wan_dropped;
  s.wan_bleached -= wan_base.wan_bleached;
  s.wan_ce_marked -= wan_base.wan_ce_marked;
  if (lab.scheduler) s.scheduler = lab.scheduler->stats() - lab.scheduler_base;
  if (lab.fabric_ecn) s.fabric_ecn = lab.fabric_ecn->stats() - lab.fabric_ecn_base;
  if (lab.uplink_scheduler) s.uplink_scheduler = lab.uplink_scheduler->stats() - lab.uplink_scheduler_base;
  if (gw_a) {
    auto rows = MapReader(gw_a->pin()).counters();
    s.rg_remarked_a = sum_packets(rows, RG_DIR_EGRESS, RG_EV_DSCP_REWRITTEN);
    s.rg_encapsulated_a = sum_packets(rows, RG_DIR_EGRESS, RG_EV_ENCAPSULATED);
    s.rg_retransmits_a = sum_packets(rows, RG_DIR_EGRESS, RG_EV_RETRANSMITS);
  }
  if (gw_b) {
    auto rows = MapReader(gw_b->pin()).counters();
    s.rg_decapsulated_b = sum_packets(rows, RG_DIR_INGRESS, RG_EV_DECAPSULATED);
    s.rg_repaired_b = sum_packets(rows, RG_DIR_INGRESS, RG_EV_DSCP_REPAIRED);
    s.rg_lost_b = sum_packets(rows, RG_DIR_INGRESS, RG_EV_LOST_ESTIMATE);
  }
  return s;
}

// Geneve packets the WAN dropped, by direction: what arrived on "to-a"
// came from gateway A.
std::array<uint64_t, 2> wan_geneve_drops(const Wan& wan) {
  return {wan.stats("to-a", RG_WAN_GENEVE).dropped, wan.stats("to-b", RG_WAN_GENEVE).dropped};
}

// Geneve bytes that entered the WAN, by direction: whole frames, as the
// gateways count the shield's copies.
std::array<uint64_t, 2> wan_geneve_bytes(const Wan& wan) {
  return {wan.stats("to-a", RG_WAN_GENEVE).bytes, wan.stats("to-b", RG_WAN_GENEVE).bytes};
}

// The tunnel's sequence numbers every copy of which the WAN dropped, by
// direction.
std::array<WanSeqLoss, 2> wan_seq_loss(const Wan& wan) { return {wan.seq_loss("to-a"), wan.seq_loss("to-b")}; }

WanSeqLoss operator-(WanSeqLoss a, const WanSeqLoss& b) {
  a.all_copies_dropped -= b.all_copies_dropped;
  a.after_last_arrival -= b.after_last_arrival;
  a.streams -= b.streams;
  a.late -= b.late;
  a.untracked -= b.untracked;
  return a;
}

// RoCE and tunnel packets the WAN dropped of those that arrived on ifname.
uint64_t wan_roce_drops(const Wan& wan, const std::string& ifname) {
  return wan.stats(ifname, RG_WAN_ROCE).dropped + wan.stats(ifname, RG_WAN_GENEVE).dropped +
         wan.stats(ifname, RG_WAN_VXLAN).dropped;
}

// Packets that entered the WAN on ifname, by class.
std::array<uint64_t, RG_WAN_CLASS_MAX> wan_packets(const Wan& wan, const std::string& ifname) {
  std::array<uint64_t, RG_WAN_CLASS_MAX> out{};
  for (size_t c = 0; c < out.size(); ++c) out[c] = wan.stats(ifname, static_cast<rg_wan_class>(c)).packets;
  return out;
}

TunnelPeer one_peer(const std::string& pin) {
  MapReader reader(pin);
  auto peers = tunnel_peers(reader.peer_stats(), reader.tunnel_streams(), peer_names(pin), monotonic_now_ns());
  TunnelPeer sum;
  for (const auto& p : peers) {
    for (size_t e = 0; e < RG_PEER_EV_MAX; ++e) {
      sum.ev[e].packets += p.ev[e].packets;
      sum.ev[e].bytes += p.ev[e].bytes;
    }
    sum.streams += p.streams;
    sum.received += p.received;
    sum.lost += p.lost;
    sum.unsettled += p.unsettled;
    sum.reordered += p.reordered;
    sum.duplicated += p.duplicated;
    add_tunnel_delays(sum, p);
    sum.pq.packets += p.pq.packets;
    sum.pq.bytes += p.pq.bytes;
    sum.pq.marked += p.pq.marked;
    sum.pq.not_ect += p.pq.not_ect;
    sum.pq.capped += p.pq.capped;
    sum.pq.cnps += p.pq.cnps;
    sum.pq.cnp_errors += p.pq.cnp_errors;
  }
  return sum;
}

// Once the senders stopped: waits until no stream of either gateway has a
// hole left to settle (its stream silent for RG_TUNNEL_SETTLE_NS), so the
// tunnel's loss is final, then compares it with the WAN's drops.
std::vector<TunnelDirection> measure_tunnel(const Gateway& gw_a, const Gateway& gw_b,
                                            const std::array<uint64_t, 2>& wan_base,
                                            const std::array<uint64_t, 2>& bytes_base,
                                            const std::array<WanSeqLoss, 2>& seq_base, const Wan& wan) {
  TunnelPeer a, b;
  // Bounded: the settle time and 5 s more.
  const auto limit = std::chrono::nanoseconds(RG_TUNNEL_SETTLE_NS) + 5s;
  for (auto waited = 0ms; waited < limit; waited += 100ms) {
    a = one_peer(gw_a.pin());
    b = one_peer(gw_b.pin());
    if (a.unsettled == 0 && b.unsettled == 0 && waited >= std::chrono::nanoseconds(RG_TUNNEL_SETTLE_NS)) break;
    std::this_thread::sleep_for(100ms);
  }
  const auto drops = wan_geneve_drops(wan);
  const auto seq = wan_seq_loss(wan);
  const auto bytes = wan_geneve_bytes(wan);
  auto direction = [](const char* name, const TunnelPeer& from, const TunnelPeer& to, uint64_t dropped,
                      uint64_t wan_bytes, const WanSeqLoss& seq) {
    TunnelDirection d;
    d.name = name;
    d.sent = from.ev[RG_PEER_EV_SEQ_SENT].packets;
    d.received = to.received;
    d.lost = to.lost;
    d.unsettled = to.unsettled;
    d.reordered = to.reordered;
    d.duplicated = to.duplicated;
    d.wan_dropped = dropped;
    // The lab's gateways share one clock: the floor is the one-way delay.
    if (const auto mean = tunnel_one_way_mean_us(to)) {
      d.delay_arrivals = tunnel_delay_count(to);
      d.delay_avg_s = *mean * 1e-6;
    }
    d.tunnel_bytes = wan_bytes;
    // The copies as the sending gateway counts them, their elimination as the receiving one does.
    const TunnelShield sent = tunnel_shield(from);
    d.shield_copies = sent.copies;
    d.shield_copy_bytes = sent.extra_wan_bytes;
    d.shield_eliminated = tunnel_shield(to).eliminated;
    d.shield_copy_errors = sent.copy_errors;
    d.shield_uncopied = sent.uncopied;
    d.wan_all_copies_dropped = seq.all_copies_dropped;
    d.wan_after_last_arrival = seq.after_last_arrival;
    d.cc_marked = from.pq.marked;
    d.cc_unmarkable = from.pq.not_ect;
    d.cc_capped = from.pq.capped;
    d.cc_queued = from.pq.packets;
    d.cc_cnps = from.pq.cnps;
    d.cc_cnp_errors = from.pq.cnp_errors;
    return d;
  };
  std::vector<TunnelDirection> out{
      direction("a_to_b", a, b, drops[0] - wan_base[0], bytes[0] - bytes_base[0], seq[0] - seq_base[0]),
      direction("b_to_a", b, a, drops[1] - wan_base[1], bytes[1] - bytes_base[1], seq[1] - seq_base[1])};
  // The "auto" shield as each sending gateway's daemon would export it.
  for (auto [d, gw] : {std::pair{&out[0], &gw_a}, std::pair{&out[1], &gw_b}})
    for (const ShieldAutoPeer& s : gw->shield_auto()) {
      d->shield_auto_on = s.on ? 1 : 0;
      d->shield_auto_turned_on = s.turned_on;
      d->shield_auto_turned_off = s.turned_off;
    }
  // The congestion loop's model as each sending gateway's daemon would export it.
  for (auto [d, gw] : {std::pair{&out[0], &gw_a}, std::pair{&out[1], &gw_b}})
    for (const CongestionPeer& c : gw->congestion()) {
      d->congestion = true;
      d->cc_state = c.state;
      d->cc_bottleneck_kbps = c.bottleneck_kbps;
      d->cc_rate_kbps = c.rate_kbps;
      d->cc_fallbacks = c.fallbacks;
      d->cc_probes = c.probes;
      d->cc_resets = c.resets;
      d->cc_competes = c.competes;
    }
  return out;
}

PhaseResult run_phase(Lab& lab, bool with, unsigned index, unsigned count) {
  PhaseResult p;
  p.name = with ? "with" : "without";
  p.roceguard = with;
  p.duration_s = lab.opts.duration_s;
  std::cout << view_banner(lab.settings, p, index, count) << std::flush;

  const Addresses& a = lab.topo.addr();
  std::optional<Gateway> gw_a, gw_b;
  std::array<std::string, 2> ingress_series{"xdp_ingress", "xdp_ingress"};  // per exporter
  for (Exporter* e : lab.exporters) e->set_congestion({});  // no loop runs until the gateways attach
  if (with) {
    // The lab measures the tunnel's exact loss against the WAN's drops: the
    // sequence option is on in both gateways (the loss shield needs it too).
    // On the kernel's VXLAN device auto plans TC ingress, as on a veth.
    const std::string& hook = lab.opts.ingress_hook;
    Config cfg_a = gateway_config(a.gw_a_wan4, a.gw_b_wan4, "203.0.113.0/24", lab.opts.tunnel, XdpMode::kNative,
                                  RG_DEFAULT_TUNNEL_MTU, hook, lab.opts.xdp_forward, true, lab.opts.shield,
                                  lab.wan_if, lab.opts.congestion == "on", lab.opts.congestion_signal);
    Config cfg_b = gateway_config(a.gw_b_wan4, a.gw_a_wan4, "192.0.2.0/24", lab.opts.tunnel, XdpMode::kNative,
                                  RG_DEFAULT_TUNNEL_MTU, hook, lab.opts.xdp_forward, true, lab.opts.shield,
                                  lab.wan_if, lab.opts.congestion == "on", lab.opts.congestion_signal);
    // RoCE into the uplink's priority class; gateway B's egress on wan0
    // (ACKs, NAKs, CNPs) gets the same, as a symmetric deployment would.
    if (lab.uplink_scheduler) cfg_a.skb_priority = cfg_b.skb_priority = HtbScheduler::kPriorityClassId;
    gw_a.emplace(lab.topo, Node::kGatewayA, pin_path(lab.opts.prefix, Node::kGatewayA), cfg_a);
    gw_b.emplace(lab.topo, Node::kGatewayB, pin_path(lab.opts.prefix, Node::kGatewayB), cfg_b);
    for (size_t i = 0; i < lab.exporters.size(); ++i)
      for (const auto& is : (i == 0 ? *gw_a : *gw_b).state().interfaces) {
        ingress_series[i] = is.ingress_hook == kIngressTc ? "tc_ingress" : "xdp_ingress";
        lab.exporters[i]->set_ingress_hook(is.name, ingress_series[i]);
        for (const std::string& hook : {std::string("tc_egress"), ingress_series[i]})
          lab.exporters[i]->set_attach_state(is.name, hook, true);
      }
    for (const auto* g : {&*gw_a, &*gw_b})
      for (const auto& is : g->state().interfaces)
        std::cout << "   attached in " << (g == &*gw_a ? "gateway A" : "gateway B") << ": " << is.name << " "
                  << describe_ingress(is) << ", tc egress (id " << is.tc_prog_id << "), maps pinned at "
                  << g->pin() << "\n";
  }
  check_stop();

  std::unique_ptr<BulkTraffic> bulk, uplink_bulk_traffic, cross;
  if (lab.opts.wan_cross) {
    std::filesystem::create_directories(lab.dir + "/bulk");
    const auto warmup_s = std::chrono::duration_cast<std::chrono::seconds>(kBulkWarmup).count();
    cross = std::make_unique<BulkTraffic>(lab.topo, wan_cross_bulk(lab.topo), lab.dir + "/bulk", p.name + "-wan-cross",
                                          lab.opts.wan_cross, lab.opts.duration_s + static_cast<unsigned>(warmup_s),
                                          lab.opts.wan_cross_cc);
    std::cout << "   cross traffic: iperf3, " << lab.opts.wan_cross
              << " TCP streams from bulk sender A to the bulk sender through the WAN's bottleneck, " << warmup_s
              << " s ahead of the RoCE traffic\n"
              << std::flush;
    for (auto waited = 0ms; waited < kBulkWarmup; waited += 100ms) {
      check_stop();
      std::this_thread::sleep_for(100ms);
    }
  }
  if (lab.scheduler) {
    std::filesystem::create_directories(lab.dir + "/bulk");
    const auto warmup_s = std::chrono::duration_cast<std::chrono::seconds>(kBulkWarmup).count();
    const unsigned bulk_s = lab.opts.duration_s + static_cast<unsigned>(warmup_s);
    bulk = std::make_unique<BulkTraffic>(lab.topo, far_side_bulk(lab.topo), lab.dir + "/bulk", p.name,
                                         lab.opts.bulk_streams, bulk_s);
    uplink_bulk_traffic = std::make_unique<BulkTraffic>(lab.topo, uplink_bulk(lab.topo), lab.dir + "/bulk",
                                                        p.name + "-uplink", lab.opts.bulk_streams, bulk_s);
    std::cout << "   bulk TCP: iperf3, " << lab.opts.bulk_streams << " streams from the bulk namespace to host B and "
              << lab.opts.bulk_streams << " from bulk sender A to the WAN router, " << warmup_s
              << " s ahead of the RoCE traffic\n"
              << std::flush;
    for (auto waited = 0ms; waited < kBulkWarmup; waited += 100ms) {
      check_stop();
      std::this_thread::sleep_for(100ms);
    }
    lab.scheduler_base = lab.scheduler->stats();
    if (lab.fabric_ecn) lab.fabric_ecn_base = lab.fabric_ecn->stats();
    lab.uplink_scheduler_base = lab.uplink_scheduler->stats();
  }
  Snapshot wan_base = take_snapshot(lab, 0, {}, {}, {}, nullptr, nullptr);
  const std::array<LossRuns, 2> runs_base{lab.wan.loss_runs("to-a"), lab.wan.loss_runs("to-b")};
  const std::array<uint64_t, 2> dropped_base{wan_roce_drops(lab.wan, "to-a"), wan_roce_drops(lab.wan, "to-b")};
  const std::array<std::array<uint64_t, RG_WAN_CLASS_MAX>, 2> packets_base{wan_packets(lab.wan, "to-a"),
                                                                          wan_packets(lab.wan, "to-b")};
  if (lab.bottleneck) lab.bottleneck->start_phase();
  size_t queue_cursor = 0;  // the bottleneck's A->B samples the seconds so far took
  std::vector<DelayLineStats> delay_base;
  if (const DelayLine* dl = lab.wan.delay_line())
    for (size_t i = 0; i < dl->directions(); ++i) delay_base.push_back(dl->stats(i));
  const auto wan_geneve_base = wan_geneve_drops(lab.wan);
  const auto wan_seq_base = wan_seq_loss(lab.wan);
  const auto wan_bytes_base = wan_geneve_bytes(lab.wan);
  auto captures = start_captures(lab.topo, lab.dir, p.name, lab.opts.pcap_seconds);

  QpPlan plan;
  plan.count = lab.opts.qps;
  ReceiverConfig rcfg;
  rcfg.qps = plan;
  rcfg.retransmit = lab.settings.retransmit;
  rcfg.transport = lab.settings.transport;
  rcfg.ooo_window = lab.settings.window;
  rcfg.cnp_interval = std::chrono::microseconds(lab.settings.dcqcn.min_time_between_cnps);
  std::unique_ptr<Receiver> rx;
  {
    NetnsGuard in(lab.topo.netns(Node::kHostB));
    rx = std::make_unique<Receiver>(rcfg);
  }
  rx->start();

  std::mutex mu;
  SenderStats latest;
  SenderConfig scfg;
  scfg.peer = a.host_b4;
  scfg.qps = plan;
  // Far more than fits in the phase: the duration ends it. Below 2^23 so
  // PSN arithmetic (mod 2^24) never wraps past the window.
  scfg.messages = 4000000;
  scfg.payload = lab.opts.payload;
  scfg.tos = kHostTos;
  scfg.window = lab.settings.window;
  scfg.timeout = lab.settings.ack_timeout.wait;
  scfg.retry_cnt = lab.settings.retry_cnt;
  scfg.retransmit = lab.settings.retransmit;
  scfg.transport = lab.settings.transport;
  scfg.burst = lab.opts.burst;
  // DCQCN's ceiling is host A's line: each QP may fill it, as on a NIC.
  scfg.cc = lab.settings.cc;
  scfg.dcqcn = lab.settings.dcqcn;
  scfg.line_mbit = lab.settings.window_mbit;
  // UC waits on no window: host A's line rate paces it, as an RNIC's line does.
  if (lab.settings.transport == Transport::kUc)
    scfg.pace_pps = static_cast<double>(lab.settings.window_mbit) * 1e6 /
                    (8.0 * static_cast<double>(lab_wire_bytes(lab.opts.payload)));
  scfg.duration = std::chrono::seconds(lab.opts.duration_s);
  unsigned reports = 0;  // seconds the sender has reported
  std::condition_variable reported;
  scfg.on_second = [&](const SenderStats& s) {
    std::lock_guard lock(mu);
    latest = s;
    ++reports;
    reported.notify_all();
  };
  std::unique_ptr<Sender> tx;
  {
    NetnsGuard in(lab.topo.netns(Node::kHostA));
    tx = std::make_unique<Sender>(scfg);
  }
  std::atomic<bool> done{false};
  SenderStats final_tx;
  g_sender = tx.get();
  std::thread sender([&] {
    final_tx = tx->run();
    done = true;
  });
  // The sender thread must be joined on every path out of here.
  struct Joiner {
    std::thread& t;
    Sender& s;
    ~Joiner() {
      s.stop();
      if (t.joinable()) t.join();
      g_sender = nullptr;
    }
  } joiner{sender, *tx};

  std::cout << view_header(lab.scheduler != nullptr) << std::flush;
  Snapshot prev;
  // Each row is taken when the sender reports a second, so its counters
  // and the receiver's cover the same interval. Bounded by the sender's own
  // duration; the extra seconds only cover a slow start.
  for (unsigned sec = 1; sec <= lab.opts.duration_s + 5 && !done; ++sec) {
    SenderStats tx_now;
    {
      std::unique_lock lock(mu);
      const auto deadline = std::chrono::steady_clock::now() + 3s;
      while (reports < sec && !done && !g_stop && std::chrono::steady_clock::now() < deadline)
        reported.wait_for(lock, 20ms);
      tx_now = latest;
    }
    check_stop();
    if (done) break;
    Snapshot cur = take_snapshot(lab, sec, tx_now, rx->stats(), wan_base, gw_a ? &*gw_a : nullptr,
                                 gw_b ? &*gw_b : nullptr);
    if (lab.bottleneck) {
      const BottleneckStats q = lab.bottleneck->delay_since(0, &queue_cursor);
      cur.wan_queue_samples = q.samples;
      cur.wan_queue_p99_us = q.delay_p99_us;
      cur.wan_queue_max_us = q.delay_max_us;
    }
    std::cout << view_row(prev, cur, lab.opts.duration_s, lab.scheduler != nullptr) << std::flush;
    p.seconds.push_back(cur);
    // The congestion loop's model, as each gateway's daemon would export it.
    if (gw_a && gw_b) {
      lab.exporters[0]->set_congestion(gw_a->congestion());
      lab.exporters[1]->set_congestion(gw_b->congestion());
    }
    prev = cur;
  }
  sender.join();
  check_stop();
  // Resends still in flight when the sender stopped land within a few
  // round trips.
  std::this_thread::sleep_for(300ms);
  rx->stop();
  p.sent = final_tx;
  p.received = rx->stats();
  p.final = take_snapshot(lab, static_cast<unsigned>(p.seconds.size()), p.sent, p.received, wan_base,
                          gw_a ? &*gw_a : nullptr, gw_b ? &*gw_b : nullptr);
  // The last (partial) second, up to the sender's end and the stragglers.
  Snapshot last = p.final;
  last.second = prev.second + 1;
  if (last.received_b != prev.received_b || last.sent_packets != prev.sent_packets) {
    std::cout << view_row(prev, last, lab.opts.duration_s, lab.scheduler != nullptr) << std::flush;
    p.seconds.push_back(last);
  }

  if (with && lab.opts.tunnel) p.tunnel = measure_tunnel(*gw_a, *gw_b, wan_geneve_base, wan_bytes_base, wan_seq_base, lab.wan);
  // The WAN during the phase: loss runs, the delay line's lateness.
  for (size_t d = 0; d < 2; ++d) {
    const LossRuns now = lab.wan.loss_runs(d == 0 ? "to-a" : "to-b");
    for (size_t i = 0; i < now.size(); ++i) p.wan_runs[d][i] = now[i] - runs_base[d][i];
    p.wan_dropped[d] = wan_roce_drops(lab.wan, d == 0 ? "to-a" : "to-b") - dropped_base[d];
    const auto packets = wan_packets(lab.wan, d == 0 ? "to-a" : "to-b");
    for (size_t c = 0; c < packets.size(); ++c) p.wan_packets[d][c] = packets[c] - packets_base[d][c];
  }
  // After measure_tunnel's wait, when it ran: nothing is left to come.
  const auto seq_now = wan_seq_loss(lab.wan);
  for (size_t d = 0; d < 2; ++d) p.wan_seq[d] = seq_now[d] - wan_seq_base[d];
  if (const DelayLine* dl = lab.wan.delay_line())
    for (size_t i = 0; i < dl->directions() && i < delay_base.size(); ++i) {
      DelayLineStats x = dl->stats(i);
      const DelayLineStats& b = delay_base[i];
      x.frames -= b.frames;
      x.bytes -= b.bytes;
      x.reordered -= b.reordered;
      x.send_errors -= b.send_errors;
      x.queue_dropped -= b.queue_dropped;
      for (size_t c = 0; c < x.queue_dropped_by_class.size(); ++c)
        x.queue_dropped_by_class[c] -= b.queue_dropped_by_class[c];
      x.rx_dropped -= b.rx_dropped;
      x.late_sum_ns -= b.late_sum_ns;
      x.gap_in -= b.gap_in;
      x.gap_out -= b.gap_out;
      x.squeezed -= b.squeezed;
      p.delay_line.push_back(x);  // max_held and late_max_ns: over the whole run so far
    }
  if (lab.bottleneck)
    for (size_t d = 0; d < 2; ++d) p.bottleneck.push_back(lab.bottleneck->phase_stats(d));
  if (with) {
    p.counters["gw_a"] = counter_rows(MapReader(gw_a->pin()).counters(), lab.topo, Node::kGatewayA, lab.wan_if);
    p.counters["gw_b"] = counter_rows(MapReader(gw_b->pin()).counters(), lab.topo, Node::kGatewayB, lab.wan_if);
    // The final scrape, while the maps are still pinned.
    lab.exporters[0]->set_congestion(gw_a->congestion());
    lab.exporters[1]->set_congestion(gw_b->congestion());
    for (auto [addr, name] : {std::pair{lab.settings.metrics_a, "prometheus-gw-a.txt"},
                              std::pair{lab.settings.metrics_b, "prometheus-gw-b.txt"}}) {
      std::ofstream(lab.dir + "/" + name) << scrape(addr);
      lab.files.push_back(name);
    }
  }
  p.pcaps = finish_captures(captures, lab.dir);
  // The clients end on their own about when the RoCE traffic did.
  // Bounded: the phase's duration and 15 s more, for both.
  auto bulk_deadline = std::chrono::steady_clock::now() + lab.opts.duration_s * 1000ms + 15s;
  auto finish_bulk = [&](std::unique_ptr<BulkTraffic>& b, std::optional<BulkResult>& result, std::string& log) {
    if (!b) return;
    while (std::chrono::steady_clock::now() < bulk_deadline && !b->wait(100ms)) check_stop();
    result = b->result();
    log = "bulk/" + b->client_log();
    if (!std::filesystem::exists(lab.dir + "/" + log)) log.clear();
    b.reset();
  };
  finish_bulk(bulk, p.bulk, p.bulk_log);
  finish_bulk(uplink_bulk_traffic, p.uplink_bulk, p.uplink_bulk_log);
  finish_bulk(cross, p.wan_cross, p.wan_cross_log);
  if (with)
    for (size_t i = 0; i < lab.exporters.size(); ++i)
      for (const std::string& hook : {std::string("tc_egress"), ingress_series[i]})
        lab.exporters[i]->set_attach_state(lab.wan_if, hook, false);
  return p;
}

}  // namespace

std::chrono::microseconds parse_wan_duration(const std::string& option, const std::string& text) {
  if (text == "0") return std::chrono::microseconds{0};
  std::string why;
  auto us = nic::parse_duration_us(text, &why);
  if (!us) throw Error("lab: " + option + " " + text + ": " + why, kExitUsage);
  return std::chrono::microseconds{static_cast<int64_t>(std::llround(*us))};
}

std::chrono::microseconds lab_round_trip(std::chrono::microseconds wan_delay) { return 2 * wan_delay + kLabBaseRtt; }

size_t lab_wire_bytes(size_t payload) {
  constexpr size_t kEthernet = 14, kIpv4 = 20, kUdp = 8;
  return kEthernet + kIpv4 + kUdp + wire::kBthLen + payload + wire::kIcrcLen;
}

void remove_stale_pins(const std::string& prefix) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(kBpffs, ec)) {
    const pid_t pid = Topology::run_pid_of(e.path().filename().string(), prefix);
    if (!pid) continue;
    if (kill(pid, 0) == 0 || errno == EPERM) continue;
    remove_pins(e.path().string());
  }
}

int run_lab(const LabOptions& opts) {
  if (geteuid() != 0) throw Error("lab: run as root (network namespaces and BPF programs)", kExitUsage);
  if (opts.mode != "with" && opts.mode != "without" && opts.mode != "both")
    throw Error("lab: --mode is one of with, without, both", kExitUsage);
  if (opts.loss_pct < 0 || opts.loss_pct > 100 || opts.ce_pct < 0 || opts.ce_pct > 100 || opts.reorder_pct < 0 ||
      opts.reorder_pct > 100)
    throw Error("lab: --loss, --ce and --reorder are percentages, 0..100", kExitUsage);
  if (opts.wan_delay.count() < 0 || opts.wan_jitter > opts.wan_delay || opts.wan_delay > std::chrono::seconds(1))
    throw Error("lab: --wan-delay is 0..1s and --wan-jitter at most --wan-delay", kExitUsage);
  rg_wan_config wan_cfg{};
  set_loss(wan_cfg, opts.loss_pct, opts.loss_burst);
  if (opts.scenario != "congestion" && opts.scenario != "bleach")
    throw Error("lab: --scenario is congestion or bleach", kExitUsage);
  const bool congestion = opts.scenario == "congestion";
  const SchedulerConfig scheduler_cfg{opts.link_mbit, opts.priority_mbit, opts.queue_packets};
  const SchedulerConfig uplink_cfg{opts.uplink_mbit, opts.uplink_priority_mbit, opts.queue_packets};
  if (congestion && (opts.priority_mbit == 0 || opts.priority_mbit >= opts.link_mbit))
    throw Error("lab: --priority-rate is above 0 and below --link-rate", kExitUsage);
  if (congestion && (opts.uplink_priority_mbit == 0 || opts.uplink_priority_mbit >= opts.uplink_mbit))
    throw Error("lab: --uplink-priority-rate is above 0 and below --uplink-rate", kExitUsage);
  if (congestion && (opts.queue_packets == 0 || opts.bulk_streams == 0 || opts.sender_mbit == 0))
    throw Error("lab: --queue, --bulk-streams and --host-rate are at least 1", kExitUsage);
  // Throws a usage error for a profile that is no RED line.
  const std::optional<FabricEcnConfig> fabric_ecn = parse_fabric_ecn(opts.fabric_ecn, opts.queue_packets);
  if (!congestion && opts.fabric_ecn != "on" && opts.fabric_ecn != "off")
    throw Error("lab: --fabric-ecn marks at gateway B's port of the congestion scenario", kExitUsage);
  if (opts.wan_cross && (congestion || opts.wan_rate_mbit == 0))
    throw Error("lab: --wan-cross needs --scenario bleach and --wan-rate (a bottleneck to share)", kExitUsage);
  if (opts.wan_cross > 128) throw Error("lab: --wan-cross is 0..128 streams", kExitUsage);
  if (!opts.wan_cross_cc.empty()) {
    // iperf3 would only fail later.
    std::string offered;
    if (!tcp_congestion_control_offered(opts.wan_cross_cc, &offered))
      throw Error("lab: --wan-cross-cc " + opts.wan_cross_cc + " is not one of this kernel's TCP congestion controls (" +
                      offered + ")",
                  kExitUsage);
  }
  if (opts.retry_cnt > 7) throw Error("lab: --retry-cnt is 0..7", kExitUsage);
  if (opts.shield != "off" && opts.shield != "control" && opts.shield != "all" && opts.shield != "auto")
    throw Error("lab: --shield is off, control, all or auto", kExitUsage);
  if (opts.tunnel_kind != "geneve" && opts.tunnel_kind != "vxlan")
    throw Error("lab: --tunnel-kind is geneve or vxlan", kExitUsage);
  const bool vxlan = opts.tunnel_kind == "vxlan";
  if (vxlan && opts.tunnel)
    throw Error("lab: --tunnel-kind vxlan puts the kernel's VXLAN in the place of roceguard's Geneve", kExitUsage);
  if (opts.congestion != "off" && opts.congestion != "on")
    throw Error("lab: --congestion is off or on", kExitUsage);
  if (opts.congestion_signal != "both" && opts.congestion_signal != "cnp" && opts.congestion_signal != "ce")
    throw Error("lab: --congestion-signal is both, cnp or ce", kExitUsage);
  if (opts.congestion == "on" && !opts.tunnel)
    throw Error(std::string("lab: --congestion needs roceguard's tunnel: its reports ride in the Geneve option (drop ") +
                    (vxlan ? "--tunnel-kind vxlan)" : "--no-tunnel)"),
                kExitUsage);
  if (opts.shield != "off" && !opts.tunnel)
    throw Error(std::string("lab: --shield needs roceguard's tunnel: the copies are Geneve packets (drop ") +
                    (vxlan ? "--tunnel-kind vxlan)" : "--no-tunnel)"),
                kExitUsage);
  if (vxlan && opts.xdp_forward)
    throw Error("lab: --xdp-forward forwards between wan0 and lan0; with --tunnel-kind vxlan roceguard is on vx0",
                kExitUsage);
  const auto retransmit = parse_retransmit(opts.retransmit);
  if (!retransmit) throw Error("lab: --retransmit is gbn or sr", kExitUsage);
  const auto transport = parse_transport(opts.transport);
  if (!transport) throw Error("lab: --transport is rc or uc", kExitUsage);
  const AckTimeoutSetting ack_timeout = ack_timeout_setting(opts.ack_timeout);  // throws a usage error
  CongestionControl cc;
  if (!parse_congestion_control(opts.cc, &cc)) throw Error("lab: --cc is dcqcn or none", kExitUsage);
  const DcqcnSettings dcqcn = parse_dcqcn_settings(opts.dcqcn);  // throws a usage error
  spdlog::set_level(opts.verbose ? spdlog::level::debug : spdlog::level::warn);
  setup_bpf_logging();
  g_stop = false;
  SignalScope signals;

  LabSettings settings;
  settings.scenario = opts.scenario;
  if (congestion) {
    settings.scheduler = scheduler_cfg;
    settings.fabric_ecn = fabric_ecn;
    settings.uplink_scheduler = uplink_cfg;
    settings.bulk_streams = opts.bulk_streams;
    settings.sender_mbit = opts.sender_mbit;
  }
  settings.mode = opts.mode;
  settings.duration_s = opts.duration_s;
  settings.loss_pct = opts.loss_pct;
  settings.loss_burst = opts.loss_burst;
  settings.wan_delay_ms = static_cast<double>(opts.wan_delay.count()) / 1000.0;
  settings.wan_jitter_ms = static_cast<double>(opts.wan_jitter.count()) / 1000.0;
  if (opts.wan_rate_mbit > 0) {
    // One bandwidth-delay product over the lab's round trip unless given.
    // The buffer as the queue will hold it (at least bottleneck_limit_bytes's
    // few frames), so that the report says what ran.
    BottleneckConfig b{opts.wan_rate_mbit, opts.wan_buffer.count() ? opts.wan_buffer : lab_round_trip(opts.wan_delay)};
    b.buffer = std::chrono::microseconds{static_cast<int64_t>(bottleneck_limit_bytes(b) * 8 / b.mbit)};
    settings.bottleneck = b;
  }
  settings.wan_cross = opts.wan_cross;
  settings.reorder_pct = opts.reorder_pct;
  settings.ce_pct = opts.ce_pct;
  settings.qps = opts.qps;
  settings.payload = opts.payload;
  // Enough in flight to fill host A's line over the round trip, as an RNIC
  // keeps its send queue busy (window_for_path). The bleach scenario does
  // not shape host A's line; the window assumes --host-rate all the same.
  settings.window_mbit = opts.sender_mbit;
  settings.rtt = lab_round_trip(opts.wan_delay);
  settings.window = window_for_path(opts.sender_mbit, settings.rtt, lab_wire_bytes(opts.payload), opts.qps);
  settings.ack_timeout = ack_timeout;
  settings.retry_cnt = opts.retry_cnt;
  settings.retransmit = *retransmit;
  settings.transport = *transport;
  settings.cc = cc;
  settings.dcqcn = dcqcn;
  settings.tunnel = opts.tunnel;
  settings.tunnel_kind = vxlan ? "vxlan" : opts.tunnel ? "geneve" : "none";
  settings.shield = opts.shield;
  settings.congestion = opts.congestion;
  settings.congestion_signal = opts.congestion_signal;
  settings.xdp_forward = opts.xdp_forward;
  settings.burst = opts.burst;
  settings.gro_forwarding = opts.gro_forwarding;
  settings.host_tos = kHostTos;

  const std::string dir = opts.report_dir.empty() ? "roceguard-lab-" + timestamp() : opts.report_dir;
  std::filesystem::create_directories(dir);

  ensure_bpffs(pin_path(opts.prefix, Node::kGatewayA));
  if (int n = Topology::cleanup_stale(opts.prefix)) std::cout << "removed " << n << " namespaces of an earlier run\n";
  remove_stale_pins(opts.prefix);

  std::cout << "roceguard lab: host A -- gateway A == lossy WAN == gateway B -- host B"
            << (congestion ? ", bulk TCP at both gateways" : "") << " (network namespaces " << opts.prefix << "-" << getpid()
            << "-*)\n"
            << std::flush;
  Topology topo(opts.prefix, congestion || opts.wan_cross);
  // Before the path is proved: the proof then crosses the VXLAN too.
  std::optional<KernelVxlan> kernel_vxlan;
  if (vxlan) {
    kernel_vxlan.emplace(topo, RG_DEFAULT_TUNNEL_MTU);
    std::cout << "the kernel's VXLAN between the gateways: " << kVxlanDevice << ", VNI " << kLabVni << ", UDP "
              << kVxlanPort << ", tos inherit, MTU " << kernel_vxlan->mtu() << " (" << RG_DEFAULT_TUNNEL_MTU
              << " on the WAN), carrying host A to host B in both phases\n";
  }
  const std::string wan_if = vxlan ? kVxlanDevice : "wan0";
  topo.check_path();
  if (opts.xdp_forward) topo.accept_xdp_redirects();
  if (opts.gro_forwarding) {
    settings.gro_forwarding_on = topo.forward_udp_gro();
    std::cout << "UDP GRO for forwarding on the gateways' lan0: "
              << (settings.gro_forwarding_on ? "on" : "requested, but ethtool does not report it on") << "\n";
  }
  if (opts.burst > 1 || opts.gro_forwarding) topo.segment_like_nics();
  if (opts.burst > 1)
    std::cout << "host A sends up to " << opts.burst
              << " packets of a QP per UDP_SEGMENT send; its eth0 puts them on the link one by one\n";
  check_stop();
  std::optional<HtbScheduler> scheduler, uplink_scheduler;
  std::optional<FabricEcn> fabric_marker;
  std::optional<SenderLineRate> line_rate;
  if (congestion) {
    scheduler.emplace(topo, Node::kGatewayB, kFarSidePort, scheduler_cfg, PriorityMatch::kDscp46);
    if (settings.fabric_ecn) {
      fabric_marker.emplace(*settings.fabric_ecn);
      fabric_marker->attach(topo.netns(Node::kGatewayB), kFarSidePort,
                            {HtbScheduler::kPriorityClassId, HtbScheduler::kBestEffortClassId});
    }
    uplink_scheduler.emplace(topo, Node::kGatewayA, kUplink, uplink_cfg, PriorityMatch::kSkbPriority);
    line_rate.emplace(topo, opts.sender_mbit, opts.qps * settings.window);
    std::cout << "host A sends at up to " << opts.sender_mbit << " Mbit/s (its line rate); congestion at gateway B's " << scheduler->interface() << " (towards host B): "
              << scheduler_cfg.link_mbit << " Mbit/s, DSCP 46 guaranteed " << scheduler_cfg.priority_mbit
              << " Mbit/s, best effort " << scheduler_cfg.link_mbit - scheduler_cfg.priority_mbit
              << " Mbit/s, each may borrow up to the link rate; " << scheduler_cfg.queue_packets
              << "-packet buffer per class; ";
    if (settings.fabric_ecn)
      std::cout << "each class marks ECN-capable packets CE by its queue's depth, as a datacenter switch does: Kmin "
                << settings.fabric_ecn->kmin_bytes << " B, Kmax " << settings.fabric_ecn->kmax_bytes << " B, Pmax "
                << settings.fabric_ecn->pmax << "\n";
    else
      std::cout << "no ECN marking (--fabric-ecn off)\n";
    std::cout << "and at gateway A's " << uplink_scheduler->interface() << " (its uplink): " << uplink_cfg.link_mbit
              << " Mbit/s, class 1:10 (skb->priority 0x10010, what roceguard sets for RoCE) guaranteed "
              << uplink_cfg.priority_mbit << " Mbit/s, best effort " << uplink_cfg.link_mbit - uplink_cfg.priority_mbit
              << " Mbit/s, same buffers, no marking\n"
              << std::flush;
  }

  // Both exporters read the pinned maps of their gateway at every scrape:
  // up for the whole run, reporting roceguard_maps_up 0 while nothing is
  // attached.
  const auto colon = opts.metrics_listen.rfind(':');
  if (colon == std::string::npos) throw Error("lab: --metrics-listen is host:port", kExitUsage);
  const std::string host = opts.metrics_listen.substr(0, colon);
  const unsigned port = static_cast<unsigned>(std::stoul(opts.metrics_listen.substr(colon + 1)));
  ExporterOptions eo;
  eo.per_qp = true;
  eo.interfaces = {wan_if};
  eo.listen = opts.metrics_listen;
  eo.pin_path = pin_path(opts.prefix, Node::kGatewayA);
  for (const std::string& ifname : {std::string("wan0"), std::string("lan0"), wan_if})
    eo.interface_names[static_cast<uint32_t>(topo.ifindex(Node::kGatewayA, ifname))] = ifname;
  Exporter exporter_a(eo);
  eo.listen = host + ":" + std::to_string(port ? port + 1 : 0);
  eo.pin_path = pin_path(opts.prefix, Node::kGatewayB);
  eo.interface_names.clear();
  for (const std::string& ifname : {std::string("wan0"), std::string("lan0"), wan_if})
    eo.interface_names[static_cast<uint32_t>(topo.ifindex(Node::kGatewayB, ifname))] = ifname;
  Exporter exporter_b(eo);
  settings.metrics_a = exporter_a.listen_address();
  settings.metrics_b = exporter_b.listen_address();

  std::cout << "metrics while it runs: gateway A http://" << settings.metrics_a
            << "/metrics, gateway B http://" << settings.metrics_b << "/metrics\n"
            << "report: " << std::filesystem::absolute(dir).string() << "\n"
            << "the WAN: " << wan_text(settings) << "\n"
            << std::flush;

  wan_cfg.ce_ppm = static_cast<uint32_t>(opts.ce_pct * RG_WAN_PPM / 100.0 + 0.5);
  // Loss and CE only on RoCE and the tunnels (Geneve, VXLAN): the lab's
  // control traffic (ARP, neighbour discovery) stays intact, but for what
  // crosses inside the kernel's VXLAN, which the WAN sees as VXLAN only.
  wan_cfg.flags = RG_WAN_F_BLEACH | RG_WAN_F_ROCE_ONLY;
  // The cross traffic takes the WAN's delay as the RoCE traffic does.
  if (opts.wan_cross) wan_cfg.flags |= RG_WAN_F_HOLD_TCP;
  // The sequence option as the gateways write it (gateway_config keeps the
  // defaults), so the WAN counts the numbers every copy of which it dropped.
  const rg_config gateway_rodata = Config{}.rodata();
  wan_cfg.seq_opt_class = gateway_rodata.tunnel_opt_class;
  wan_cfg.seq_opt_type = gateway_rodata.tunnel_opt_type;
  Wan wan(topo.netns(Node::kWan), {"to-a", "to-b"}, wan_cfg);
  if (opts.wan_delay.count() || opts.reorder_pct > 0) {
    DelayLineConfig dl;
    dl.delay = opts.wan_delay;
    dl.jitter = opts.wan_jitter;
    dl.reorder_ppm = static_cast<uint32_t>(opts.reorder_pct * RG_WAN_PPM / 100.0 + 0.5);
    wan.start_delay_line({{"a_to_b", "to-a", "to-b", parse_mac(topo.mac(Node::kGatewayB, "wan0"))},
                          {"b_to_a", "to-b", "to-a", parse_mac(topo.mac(Node::kGatewayA, "wan0"))}},
                         dl);
    // Neighbours resolved again through the line: the first measured
    // packets find it running.
    topo.check_path();
  }

  // After the delay line: its frames leave through the WAN's ports, where
  // the bottleneck's queues are.
  std::optional<WanBottleneck> bottleneck;
  if (settings.bottleneck) bottleneck.emplace(topo.netns(Node::kWan), std::vector<std::string>{"to-b", "to-a"}, *settings.bottleneck);
  Lab lab{opts, wan_if, settings, dir, topo, wan, {&exporter_a, &exporter_b}, {}, scheduler ? &*scheduler : nullptr, {},
          fabric_marker ? &*fabric_marker : nullptr, {}, uplink_scheduler ? &*uplink_scheduler : nullptr, {}, bottleneck ? &*bottleneck : nullptr};
  std::vector<bool> phases;
  if (opts.mode != "with") phases.push_back(false);
  if (opts.mode != "without") phases.push_back(true);
  std::vector<PhaseResult> results;
  for (size_t i = 0; i < phases.size(); ++i)
    results.push_back(run_phase(lab, phases[i], static_cast<unsigned>(i + 1),
                                static_cast<unsigned>(phases.size())));

  if (opts.mode == "without")  // nothing was attached: the scrape shows roceguard_maps_up 0
    for (auto [addr, name] : {std::pair{settings.metrics_a, "prometheus-gw-a.txt"},
                              std::pair{settings.metrics_b, "prometheus-gw-b.txt"}}) {
      std::ofstream(dir + "/" + name) << scrape(addr);
      lab.files.push_back(name);
    }

  std::cout << summary_table(settings, results);
  for (const auto& f : write_report(dir, settings, results)) lab.files.push_back(f);
  for (const auto& p : results) {
    if (!p.bulk_log.empty()) lab.files.push_back(p.bulk_log);
    if (!p.uplink_bulk_log.empty()) lab.files.push_back(p.uplink_bulk_log);
    if (!p.wan_cross_log.empty()) lab.files.push_back(p.wan_cross_log);
    for (const auto& f : p.pcaps) lab.files.push_back(f);
  }
  std::cout << "\nreport in " << std::filesystem::absolute(dir).string() << ":\n";
  for (const auto& f : lab.files) std::cout << "  " << f << "\n";
  return kExitOk;
}

}  // namespace rg::lab
