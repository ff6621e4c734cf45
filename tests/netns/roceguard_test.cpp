// The same lab with the `roceguard` binary on both gateways, started the way
// an operator does (`roceguard run --config ...`), each gateway both
// encapsulating towards and decapsulating from the other. Its counters are
// read four ways: the pinned maps, `roceguard stats --json`, `bpftool map
// dump` and a real Prometheus scraping both exporters; all must agree with
// the generator and the WAN. Then the loader is killed with SIGKILL in the
// middle of traffic.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <iostream>

#include <atomic>
#include <set>
#include <sstream>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "dataplane/maps.h"
#include "dataplane/names.h"
#include "metrics/presentation.h"
#include "lab_fixture.h"
#include "roceguard_proc.h"

namespace rg::test {
namespace {

using lab::Node;
using nlohmann::json;
using namespace std::chrono_literals;

constexpr uint32_t kVni = 4242;
constexpr uint32_t kVni6 = 4243;
constexpr int kMetricsPort = 9741;
constexpr int kPrometheusPort = 9090;

struct Peer {
  std::string local, remote, route;
  uint32_t vni;
};

// tunnel: keys of the [tunnel] table ("" for none).
std::string gateway_config(const std::vector<Peer>& peers, const std::string& metrics_listen,
                           const std::string& tunnel = "") {
  std::string t = "interfaces = [\"wan0\"]\n";
  if (!tunnel.empty()) t += "\n[tunnel]\n" + tunnel;
  int i = 0;
  for (const auto& p : peers)
    t += "\n[[tunnel.peer]]\n"
         "name = \"far-gateway-" + std::to_string(i++) + "\"\n"
         "local = \"" + p.local + "\"\n"
         "remote = \"" + p.remote + "\"\n"
         "vni = " + std::to_string(p.vni) + "\n"
         "routes = [\"" + p.route + "\"]\n";
  return t + "\n[metrics]\nlisten = \"" + metrics_listen + "\"\n";
}

// The same figure from `roceguard stats --json`.
uint64_t stats_json_packets(const json& j, rg_direction dir, rg_event ev) {
  uint64_t sum = 0;
  for (const auto& row : j.at("counters"))
    if (row.at("direction") == std::string(direction_name(dir)))
      sum += row.at("events").at(std::string(event_name(ev).name)).at("packets").get<uint64_t>();
  return sum;
}

// And from `bpftool -j map dump pinned .../rg_counters`: BTF names every field.
uint64_t bpftool_packets(const json& dump, rg_direction dir, rg_event ev) {
  uint64_t sum = 0;
  for (const auto& elem : dump) {
    const json& f = elem.at("formatted");
    if (f.at("key").at("direction").get<uint32_t>() != static_cast<uint32_t>(dir)) continue;
    for (const auto& cpu : f.at("values"))
      sum += cpu.at("value").at("ev").at(static_cast<size_t>(ev)).at("packets").get<uint64_t>();
  }
  return sum;
}

class RoceguardBinary : public LabTest {
 protected:
  void SetUp() override {
    LabTest::SetUp();
    if (HasFatalFailure()) return;
    const auto& a = topo_->addr();
    // One IPv4 and one IPv6 tunnel between the gateways.
    gw_a_ = std::make_unique<RoceguardRun>(
        *topo_, Node::kGatewayA,
        gateway_config({{a.gw_a_wan4, a.gw_b_wan4, "203.0.113.0/24", kVni},
                        {a.gw_a_wan6, a.gw_b_wan6, "2001:db8:2::/64", kVni6}},
                       "127.0.0.1:" + std::to_string(kMetricsPort)),
        tmp_->path());
    // Gateway B's exporter listens on its WAN address so one Prometheus (in
    // gateway A) scrapes both.
    gw_b_ = std::make_unique<RoceguardRun>(
        *topo_, Node::kGatewayB,
        gateway_config({{a.gw_b_wan4, a.gw_a_wan4, "192.0.2.0/24", kVni},
                        {a.gw_b_wan6, a.gw_a_wan6, "2001:db8:1::/64", kVni6}},
                       std::string(a.gw_b_wan4) + ":" + std::to_string(kMetricsPort)),
        tmp_->path());
    gw_a_->start();
    gw_b_->start();
  }
  void TearDown() override {
    prometheus_.reset();
    gw_a_.reset();
    gw_b_.reset();
    LabTest::TearDown();
  }

  std::vector<CounterRow> counters(const RoceguardRun& gw) const {
    return MapReader(gw.pin_path()).counters();
  }

  void start_prometheus() {
    const std::string dir = tmp_->path() + "/prometheus";
    std::filesystem::create_directories(dir + "/data");
    std::ofstream(dir + "/prometheus.yml")
        << "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
           "scrape_configs:\n  - job_name: roceguard\n    static_configs:\n"
           "      - targets: ['127.0.0.1:" << kMetricsPort << "', '" << topo_->addr().gw_b_wan4 << ":"
        << kMetricsPort << "']\n";
    prometheus_ = std::make_unique<lab::Child>(
        std::vector<std::string>{"ip", "netns", "exec", topo_->netns(Node::kGatewayA), "prometheus",
                                 "--config.file=" + dir + "/prometheus.yml",
                                 "--storage.tsdb.path=" + dir + "/data",
                                 "--web.listen-address=127.0.0.1:" + std::to_string(kPrometheusPort)},
        dir + "/prometheus.log");
    for (int i = 0; i < 120; ++i) {  // 60 s
      auto r = lab::run({"ip", "netns", "exec", topo_->netns(Node::kGatewayA), "curl", "-sf",
                         "http://127.0.0.1:" + std::to_string(kPrometheusPort) + "/-/ready"});
      if (r.status == 0) return;
      ASSERT_TRUE(prometheus_->running()) << "prometheus exited; see " << dir << "/prometheus.log";
      std::this_thread::sleep_for(500ms);
    }
    FAIL() << "prometheus did not become ready";
  }

  // Instant query; the sum over matching series, or nullopt if none yet.
  std::optional<uint64_t> prom_query(const std::string& q) const {
    auto r = lab::run({"ip", "netns", "exec", topo_->netns(Node::kGatewayA), "curl", "-sf", "--get",
                       "--data-urlencode", "query=sum(" + q + ")",
                       "http://127.0.0.1:" + std::to_string(kPrometheusPort) + "/api/v1/query"});
    if (r.status != 0) return std::nullopt;
    auto j = json::parse(r.out, nullptr, false);
    if (j.is_discarded() || j.value("status", "") != "success") return std::nullopt;
    const auto& res = j.at("data").at("result");
    if (res.empty()) return std::nullopt;
    return static_cast<uint64_t>(std::stod(res.at(0).at("value").at(1).get<std::string>()));
  }

  // Waits (bounded) until Prometheus has scraped the value the maps hold now.
  uint64_t prom_until(const std::string& q, uint64_t want) const {
    std::optional<uint64_t> v;
    for (int i = 0; i < 60; ++i) {  // 30 s
      v = prom_query(q);
      if (v && *v == want) break;
      std::this_thread::sleep_for(500ms);
    }
    return v.value_or(~0ull);
  }

  std::unique_ptr<RoceguardRun> gw_a_, gw_b_;
  std::unique_ptr<lab::Child> prometheus_;
};

TEST_F(RoceguardBinary, CarriesDscpAndEveryCounterViewAgrees) {
  start_prometheus();
  ASSERT_FALSE(HasFatalFailure());
  const LossyTunnel run =
      run_lossy_tunnel([this] { return counters(*gw_a_); }, [this] { return counters(*gw_b_); });
  expect_lossy_tunnel_delivered(run);
  const Traffic& t = run.t;
  const uint64_t dropped = run.dropped;
  const uint64_t lost = run.ingress_b(RG_EV_LOST_ESTIMATE);
  const auto& a = run.gw_a;
  const auto& b = run.gw_b;

  // Both directions cross the WAN bleached and tunnelled, and come out 46.
  EXPECT_EQ(t.sent.ack_dscp[RG_DEFAULT_DSCP], t.sent.acks + t.sent.naks + t.sent.cnps)
      << dscp_histogram(t.sent.ack_dscp);
  EXPECT_EQ(wan_->stats("to-b", RG_WAN_ROCE).packets, 0u);  // ACKs tunnelled too

  // The NAKs host B sent and host A received, as each gateway saw them.
  EXPECT_EQ(sum_packets(b, RG_DIR_EGRESS, RG_EV_NAK_SEQ_ERR), t.received.naks);
  EXPECT_EQ(sum_packets(a, RG_DIR_INGRESS, RG_EV_NAK_SEQ_ERR), t.sent.naks);

  // `roceguard stats --json` and bpftool say the same.
  const json sa = json::parse(gw_a_->cli({"stats", "--json"}));
  const json sb = json::parse(gw_b_->cli({"stats", "--json"}));
  const json da = json::parse(lab::run_checked(
      {"bpftool", "-j", "map", "dump", "pinned", gw_a_->pin_path() + "/" + kMapCounters}));
  const json db = json::parse(lab::run_checked(
      {"bpftool", "-j", "map", "dump", "pinned", gw_b_->pin_path() + "/" + kMapCounters}));
  for (rg_event ev : {RG_EV_ROCE_PACKETS, RG_EV_ENCAPSULATED, RG_EV_RETRANSMITS}) {
    SCOPED_TRACE(std::string(event_name(ev).name));
    EXPECT_EQ(stats_json_packets(sa, RG_DIR_EGRESS, ev), sum_packets(a, RG_DIR_EGRESS, ev));
    EXPECT_EQ(bpftool_packets(da, RG_DIR_EGRESS, ev), sum_packets(a, RG_DIR_EGRESS, ev));
  }
  for (rg_event ev : {RG_EV_ROCE_PACKETS, RG_EV_DECAPSULATED, RG_EV_LOST_ESTIMATE, RG_EV_PSN_GAPS}) {
    SCOPED_TRACE(std::string(event_name(ev).name));
    EXPECT_EQ(stats_json_packets(sb, RG_DIR_INGRESS, ev), sum_packets(b, RG_DIR_INGRESS, ev));
    EXPECT_EQ(bpftool_packets(db, RG_DIR_INGRESS, ev), sum_packets(b, RG_DIR_INGRESS, ev));
  }

  // And Prometheus, scraping both exporters.
  const std::string gw_b_instance =
      "instance=\"" + std::string(topo_->addr().gw_b_wan4) + ":" + std::to_string(kMetricsPort) + "\"";
  const std::string gw_a_instance = "instance=\"127.0.0.1:" + std::to_string(kMetricsPort) + "\"";
  EXPECT_EQ(prom_until("roceguard_roce_packets_total{" + gw_a_instance + ",direction=\"egress\"}",
                       t.sent.packets),
            t.sent.packets);
  EXPECT_EQ(prom_until("roceguard_retransmitted_packets_total{" + gw_a_instance +
                           ",direction=\"egress\"}",
                       t.sent.retransmits),
            t.sent.retransmits);
  EXPECT_EQ(prom_until("roceguard_estimated_lost_packets_total{" + gw_b_instance +
                           ",direction=\"ingress\"}",
                       lost),
            lost);

  std::cout << "[figures] DSCP at host B " << dscp_histogram(t.received.dscp) << std::endl;
  report("roceguard_binary",
         {{"sent", t.sent.packets},
          {"retransmits", t.sent.retransmits},
          {"wan_dropped_requests", dropped},
          {"wan_dropped_acks", wan_->stats("to-b", RG_WAN_GENEVE).dropped},
          {"lost_estimate_gw_b", lost},
          {"received", t.received.packets},
          {"received_dscp46", t.received.dscp[RG_DEFAULT_DSCP]},
          {"naks", t.sent.naks},
          {"timeouts", t.sent.timeouts}});
}

// SIGKILL of `roceguard run` while RoCE flows: the programs stay attached
// through the kill, nothing goes uncounted, and a restarted loader continues
// the counters instead of starting over.
TEST_F(RoceguardBinary, KillDashNineKeepsTrafficAndCounters) {
  wan_->configure({10000, 0, RG_WAN_F_BLEACH | RG_WAN_F_ROCE_ONLY, 0, 0, 0, 0, 0});  // 1 %
  lab::SenderConfig cfg;
  cfg.peer = receiver_addr(false);
  cfg.messages = 4000;
  cfg.duration = 120s;
  cfg.timeout = 100ms;
  auto rx = start_receiver({});
  auto tx = make_sender(cfg);
  lab::SenderStats sent;
  std::thread traffic([&] { sent = tx->run(); });

  // Kill once traffic is demonstrably under way (bounded wait).
  for (int i = 0; i < 1000 && rx->stats().delivered < cfg.qps.count * cfg.messages / 4; ++i)
    std::this_thread::sleep_for(10ms);
  const uint64_t delivered_at_kill = rx->stats().delivered;
  gw_a_->kill9();
  EXPECT_FALSE(gw_a_->running());
  traffic.join();
  for (int i = 0; i < 150; ++i) {
    if (rx->stats().packets + wan_->stats("to-a", RG_WAN_GENEVE).dropped >= sent.packets) break;
    std::this_thread::sleep_for(20ms);
  }
  rx->stop();
  const lab::ReceiverStats received = rx->stats();

  EXPECT_LT(delivered_at_kill, cfg.qps.count * cfg.messages);  // killed mid-run
  EXPECT_EQ(sent.qps_done, cfg.qps.count);
  EXPECT_EQ(received.delivered, cfg.qps.count * cfg.messages);
  EXPECT_EQ(received.dscp[RG_DEFAULT_DSCP], received.packets) << dscp_histogram(received.dscp);
  const auto after_kill = counters(*gw_a_);
  EXPECT_EQ(sum_packets(after_kill, RG_DIR_EGRESS, RG_EV_ROCE_PACKETS), sent.packets);
  EXPECT_EQ(sum_packets(after_kill, RG_DIR_EGRESS, RG_EV_ENCAPSULATED), sent.packets);
  EXPECT_EQ(sum_packets(after_kill, RG_DIR_EGRESS, RG_EV_RETRANSMITS), sent.retransmits);

  // Restart: the same pinned counters, never lower. (Non-RoCE events may
  // still move: the links carry IPv6 neighbour traffic meanwhile.)
  gw_a_->start();
  const auto restarted = counters(*gw_a_);
  for (size_t e = 0; e < RG_EV_MAX; ++e)
    for (rg_direction dir : {RG_DIR_EGRESS, RG_DIR_INGRESS})
      EXPECT_GE(sum_packets(restarted, dir, static_cast<rg_event>(e)),
                sum_packets(after_kill, dir, static_cast<rg_event>(e)))
          << event_name(static_cast<rg_event>(e)).name;
  for (rg_event ev : {RG_EV_ROCE_PACKETS, RG_EV_ENCAPSULATED, RG_EV_RETRANSMITS})
    EXPECT_EQ(sum_packets(restarted, RG_DIR_EGRESS, ev), sum_packets(after_kill, RG_DIR_EGRESS, ev))
        << event_name(ev).name;

  // And they keep counting from there.
  lab::SenderConfig more = cfg;
  more.messages = 100;
  more.qps.first_psn = cfg.messages;  // the QPs carry on where they stopped
  Traffic t2 = run_traffic(more, {}, [this](const lab::SenderStats& s) {
    return s.packets;  // bounded wait; the assertion below is exact
  });
  EXPECT_EQ(t2.sent.qps_done, more.qps.count);
  EXPECT_EQ(sum_packets(counters(*gw_a_), RG_DIR_EGRESS, RG_EV_ROCE_PACKETS),
            sent.packets + t2.sent.packets);

  report("kill9", {{"sent_before_restart", sent.packets},
                   {"delivered_at_kill", delivered_at_kill},
                   {"roce_packets_gw_a_after_kill",
                    sum_packets(after_kill, RG_DIR_EGRESS, RG_EV_ROCE_PACKETS)},
                   {"sent_after_restart", t2.sent.packets},
                   {"roce_packets_gw_a_final",
                    sum_packets(counters(*gw_a_), RG_DIR_EGRESS, RG_EV_ROCE_PACKETS)}});
}

// A map of the program with id prog_id, by name, opened by id (-1 if none).
int prog_map_fd(uint32_t prog_id, const std::string& name) {
  const json prog = json::parse(lab::run_checked({"bpftool", "-j", "prog", "show", "id", std::to_string(prog_id)}));
  for (const auto& id : prog.at("map_ids")) {
    const int fd = bpf_map_get_fd_by_id(id.get<uint32_t>());
    if (fd < 0) continue;
    bpf_map_info info{};
    uint32_t len = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0 && name == info.name) return fd;
    close(fd);
  }
  return -1;
}

// Gateway A's next hop towards gateway B is the WAN router. When its MAC
// changes, `roceguard run` reads the neighbour event and moves the
// next-hop cache to a new generation: the next frames are routed by the
// lookup again and cached with the new MAC, none with the old one. When
// the daemon stops, the leases end, and the programs it leaves attached
// route every packet by the lookup.
TEST_F(RoceguardBinary, NextHopCacheFollowsANeighbourChange) {
  EXPECT_NE(gw_a_->log().find("next-hop cache: 2 of 2 peer(s) on a single-path route"), std::string::npos)
      << gw_a_->log();
  const json st = json::parse(gw_a_->cli({"status", "--json"}));
  const uint32_t tc_id = st.at("interfaces").at(0).at("tc").at("prog_id").get<uint32_t>();
  const int cache_fd = prog_map_fd(tc_id, "rg_nexthops");
  const int lease_fd = prog_map_fd(tc_id, "rg_nh_leases");
  ASSERT_GE(cache_fd, 0);
  ASSERT_GE(lease_fd, 0);
  const uint32_t slot = 0;  // the IPv4 tunnel
  auto lease = [&] {
    rg_nexthop_lease l{};
    EXPECT_EQ(bpf_map_lookup_elem(lease_fd, &slot, &l), 0);
    return l;
  };
  // The MACs of the IPv4 tunnel's cache entries filled at generation
  // `since` or later. Any other rtnetlink event (IPv6 neighbour discovery
  // on these links, say) may start a generation too, so entries are
  // taken from a generation on, not at one.
  auto cached_macs = [&](uint32_t since) {
    std::vector<rg_nexthop> v(static_cast<size_t>(libbpf_num_possible_cpus()));
    EXPECT_EQ(bpf_map_lookup_elem(cache_fd, &slot, v.data()), 0);
    std::set<std::string> macs;
    for (const auto& nh : v)
      if (nh.gen != 0 && nh.gen >= since) {
        char text[18];
        std::snprintf(text, sizeof(text), "%02x:%02x:%02x:%02x:%02x:%02x", nh.dmac[0], nh.dmac[1], nh.dmac[2],
                      nh.dmac[3], nh.dmac[4], nh.dmac[5]);
        macs.insert(text);
      }
    return macs;
  };
  const std::string gw_a = topo_->netns(Node::kGatewayA), router = topo_->addr().wan_a4;
  const json neigh = json::parse(
      lab::run_checked({"ip", "netns", "exec", gw_a, "ip", "-j", "neigh", "show", router, "dev", "wan0"}));
  ASSERT_FALSE(neigh.empty());
  const std::string router_mac = neigh.at(0).at("lladdr").get<std::string>();

  const rg_nexthop_lease l0 = lease();
  ASSERT_NE(l0.gen, 0u);
  lab::SenderConfig cfg;
  cfg.peer = receiver_addr(false);
  cfg.messages = 50;
  Traffic t = run_traffic(cfg);
  ASSERT_EQ(t.sent.qps_done, cfg.qps.count);
  EXPECT_EQ(cached_macs(l0.gen), (std::set<std::string>{router_mac}));

  const std::string moved = "02:00:00:00:de:ad";
  const rg_nexthop_lease l1 = lease();
  lab::run_checked({"ip", "netns", "exec", gw_a, "ip", "neigh", "replace", router, "lladdr", moved, "dev", "wan0",
                    "nud", "permanent"});
  const auto changed = std::chrono::steady_clock::now();
  rg_nexthop_lease l2 = lease();
  for (int i = 0; i < 10000 && l2.gen == l1.gen; ++i) {  // 10 s
    std::this_thread::sleep_for(1ms);
    l2 = lease();
  }
  ASSERT_NE(l2.gen, l1.gen) << "no new generation after the neighbour event";
  // How long packets could still take the old next hop (a figure, not a bound).
  std::cout << "[figures] new next-hop generation "
            << std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - changed).count()
            << " ms after `ip neigh replace` returned" << std::endl;
  // The frames now go to a MAC nobody has: they are lost, and the sender gives up.
  lab::SenderConfig lost = cfg;
  lost.messages = 5;
  lost.duration = 3s;
  lost.retry_cnt = 1;
  make_sender(lost)->run();
  EXPECT_EQ(cached_macs(l2.gen), (std::set<std::string>{moved}));

  // Stopped: no lease, and the programs stay attached.
  gw_a_.reset();
  const rg_nexthop_lease l3 = lease();
  EXPECT_EQ(l3.gen, 0u);
  EXPECT_EQ(l3.until_ns, 0u);
  close(cache_fd);
  close(lease_fd);
}

// The loader's resident set in KiB, from /proc (0 if it is gone).
uint64_t rss_kib(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6));
  return 0;
}

// Sum of roceguard_roce_packets_total{direction="egress"} in a scrape.
std::optional<uint64_t> scraped_egress_roce(const std::string& text) {
  std::optional<uint64_t> sum;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("roceguard_roce_packets_total{", 0) == 0 &&
        line.find("direction=\"egress\"") != std::string::npos)
      sum = sum.value_or(0) + static_cast<uint64_t>(std::stod(line.substr(line.rfind(' ') + 1)));
  return sum;
}

// Soak: RoCE across the lossy WAN (0.1 %) while gateway A's loader is killed
// with SIGKILL and restarted every restart period and its /metrics scraped
// every second. Nothing may be lost beyond what the WAN dropped, nothing may
// go uncounted, and no scraped counter may go down. CI runs it for 45 s
// (restarts every 15 s); the long run is
//   ROCEGUARD_SOAK_SECONDS=600 build/tests/netns/netns_e2e_test --gtest_filter='*Soak*'
// (restarts every 30 s), whose figures go in the report line.
TEST_F(RoceguardBinary, SoakRestartsAndScrapesUnderLoss) {
  const char* env = std::getenv("ROCEGUARD_SOAK_SECONDS");
  const int seconds = env ? std::max(10, std::atoi(env)) : 45;
  const int restart_every = seconds >= 120 ? 30 : 15;
  wan_->configure({1000, 0, RG_WAN_F_BLEACH | RG_WAN_F_ROCE_ONLY, 0, 0, 0, 0, 0});  // 0.1 %
  lab::SenderConfig cfg;
  cfg.peer = receiver_addr(false);
  // Per QP, the most one PSN window allows; more QPs for long runs, so the
  // duration ends first.
  cfg.messages = (1u << 23) - 1;
  cfg.qps.count = seconds >= 120 ? 16 : 4;
  cfg.duration = std::chrono::seconds(seconds);
  cfg.timeout = 100ms;
  lab::ReceiverConfig rcfg;
  rcfg.qps = cfg.qps;  // the responder must know every QP
  auto rx = start_receiver(rcfg);
  auto tx = make_sender(cfg);
  lab::SenderStats sent;
  std::atomic<bool> done{false};
  std::thread traffic([&] {
    sent = tx->run();
    done = true;
  });

  uint64_t last = 0, scrapes_ok = 0, scrapes_failed = 0, restarts = 0, decreases = 0;
  // Resident set of each loader incarnation at the end of its life: flat
  // means the last one is no larger than the first.
  uint64_t rss_first = 0, rss_last = 0;
  for (int s = 1; !done && s <= seconds + 60; ++s) {
    std::this_thread::sleep_for(1s);
    auto r = lab::run(topo_->exec_argv(Node::kGatewayA, {"curl", "-sf", "--max-time", "5",
                                                         "http://127.0.0.1:9741/metrics"}),
                      10s);
    auto v = r.status == 0 ? scraped_egress_roce(r.out) : std::nullopt;
    if (v) {
      ++scrapes_ok;
      if (*v < last) ++decreases;
      EXPECT_GE(*v, last) << "a scraped counter went down at second " << s;
      last = std::max(last, *v);
    } else {
      ++scrapes_failed;  // the loader is restarting: nothing serves for a moment
    }
    if (s % restart_every == 0 && s < seconds) {
      rss_last = rss_kib(gw_a_->pid());
      if (!rss_first) rss_first = rss_last;
      gw_a_->kill9();
      gw_a_->start();
      ++restarts;
    }
  }
  traffic.join();
  rss_last = rss_kib(gw_a_->pid());
  const uint64_t wan_dropped = wan_->stats("to-a", RG_WAN_GENEVE).dropped;
  for (int i = 0; i < 250 && rx->stats().packets + wan_dropped < sent.packets; ++i)
    std::this_thread::sleep_for(20ms);
  rx->stop();
  const lab::ReceiverStats received = rx->stats();
  const auto rows = counters(*gw_a_);

  EXPECT_GE(restarts, 2u);
  EXPECT_GT(scrapes_ok, static_cast<uint64_t>(seconds) / 2);
  EXPECT_EQ(sent.qps_failed, 0u);
  // Every packet host A sent either reached host B or was dropped by the WAN.
  EXPECT_EQ(received.packets + wan_dropped, sent.packets);
  // Every message host A saw acknowledged was delivered, in order.
  EXPECT_GE(received.delivered, sent.completed);
  EXPECT_EQ(received.dscp[RG_DEFAULT_DSCP], received.packets) << dscp_histogram(received.dscp);
  // Gateway A counted (and encapsulated) every one of them across the restarts.
  EXPECT_EQ(sum_packets(rows, RG_DIR_EGRESS, RG_EV_ROCE_PACKETS), sent.packets);
  EXPECT_EQ(sum_packets(rows, RG_DIR_EGRESS, RG_EV_ENCAPSULATED), sent.packets);
  EXPECT_EQ(sum_packets(rows, RG_DIR_EGRESS, RG_EV_RETRANSMITS), sent.retransmits);

  report("soak", {{"seconds", static_cast<uint64_t>(seconds)},
                  {"restarts", restarts},
                  {"scrapes_ok", scrapes_ok},
                  {"scrapes_failed_during_restart", scrapes_failed},
                  {"scrape_decreases", decreases},
                  {"sent_packets", sent.packets},
                  {"messages_completed", sent.completed},
                  {"received_packets", received.packets},
                  {"wan_dropped", wan_dropped},
                  {"retransmits", sent.retransmits},
                  {"roce_packets_gw_a", sum_packets(rows, RG_DIR_EGRESS, RG_EV_ROCE_PACKETS)},
                  {"loader_rss_kib_first", rss_first},
                  {"loader_rss_kib_last", rss_last}});
}

// The IPv6 tunnel: IPv6 RoCE inside IPv6 Geneve, the traffic class bleached
// outside and 46 inside.
// Gateway A's two peers (gateway B over IPv4 and over IPv6, each a tunnel
// of its own) reordered in A's configuration: applied by SIGHUP, then by a
// restart on the same pins. A peer's numbering is its own, whatever its
// place: gateway B takes every numbered packet of both tunnels as new, none
// eliminated as a duplicate, none missing (the WAN loses nothing here), and
// host B gets every message. (When numbering followed the place, each
// tunnel went on with the other's numbers in the same epoch, and B dropped
// them as duplicates or counted losses that never were.)
TEST_F(RoceguardBinary, ReorderedPeersKeepTheirNumbering) {
  const auto& a = topo_->addr();
  const std::vector<Peer> a_peers{{a.gw_a_wan4, a.gw_b_wan4, "203.0.113.0/24", kVni},
                                  {a.gw_a_wan6, a.gw_b_wan6, "2001:db8:2::/64", kVni6}};
  const std::vector<Peer> a_reordered{a_peers[1], a_peers[0]};
  const std::string numbered = "sequence = true\n";
  const std::string listen_a = "127.0.0.1:" + std::to_string(kMetricsPort);
  gw_a_.reset();
  gw_b_.reset();
  gw_a_ = std::make_unique<RoceguardRun>(*topo_, Node::kGatewayA, gateway_config(a_peers, listen_a, numbered),
                                         tmp_->path());
  gw_b_ = std::make_unique<RoceguardRun>(
      *topo_, Node::kGatewayB,
      gateway_config({{a.gw_b_wan4, a.gw_a_wan4, "192.0.2.0/24", kVni},
                      {a.gw_b_wan6, a.gw_a_wan6, "2001:db8:1::/64", kVni6}},
                     std::string(a.gw_b_wan4) + ":" + std::to_string(kMetricsPort), numbered),
      tmp_->path());
  gw_a_->start();
  gw_b_->start();

  constexpr uint32_t kMessages = 100;
  uint32_t phase = 0;
  auto traffic = [&](const std::string& when) {
    SCOPED_TRACE(when);
    for (bool v6 : {false, true}) {
      lab::SenderConfig cfg;
      cfg.peer = receiver_addr(v6);
      cfg.messages = kMessages;
      cfg.qps.first_psn = phase * kMessages;  // the QPs carry on where they stopped
      cfg.duration = 60s;
      cfg.timeout = 100ms;
      const Traffic t = run_traffic(cfg, {}, [](const lab::SenderStats& s) { return s.packets; });
      EXPECT_EQ(t.sent.qps_done, cfg.qps.count) << (v6 ? "IPv6" : "IPv4");
      EXPECT_EQ(t.received.delivered, cfg.qps.count * cfg.messages) << (v6 ? "IPv6" : "IPv4");
    }
    ++phase;
    // What B counted of each tunnel from A, against what A numbered.
    uint64_t sent = 0, received = 0;
    for (const auto& t : tunnel_peers(MapReader(gw_a_->pin_path()).peer_stats(), {}, {}, monotonic_now_ns()))
      sent += t.ev[RG_PEER_EV_SEQ_SENT].packets;
    const MapReader b(gw_b_->pin_path());
    for (const auto& t : tunnel_peers(b.peer_stats(), b.tunnel_streams(), {}, monotonic_now_ns())) {
      EXPECT_EQ(t.ev[RG_PEER_EV_SHIELD_ELIMINATED].packets, 0u) << "B's slot " << t.slot << ": taken for copies";
      EXPECT_EQ(t.lost + t.unsettled, 0u) << "B's slot " << t.slot << ": numbers missing that were never lost";
      EXPECT_EQ(t.duplicated, 0u) << "B's slot " << t.slot;
      received += t.received;
    }
    EXPECT_GT(sent, 0u);
    EXPECT_EQ(received, sent) << "every number A sent arrived once, as a new one";
  };

  traffic("before");
  std::ofstream(gw_a_->config_path()) << gateway_config(a_reordered, listen_a, numbered);
  ASSERT_EQ(kill(gw_a_->pid(), SIGHUP), 0) << strerror(errno);
  for (int i = 0; i < 200 && gw_a_->log().find("SIGHUP: tunnel.peer applied") == std::string::npos; ++i)
    std::this_thread::sleep_for(50ms);  // bounded: 10 s
  ASSERT_NE(gw_a_->log().find("SIGHUP: tunnel.peer applied"), std::string::npos) << gw_a_->log();
  traffic("reordered by SIGHUP");

  std::ofstream(gw_a_->config_path()) << gateway_config(a_peers, listen_a, numbered);
  gw_a_->start();  // stops the running one first; the same pins
  traffic("reordered back by a restart");
}

TEST_F(RoceguardBinary, Ipv6TunnelCarriesTrafficClass) {
  Capture cap(*topo_, true, tmp_->path());
  wan_->configure({20000, 0, RG_WAN_F_BLEACH | RG_WAN_F_ROCE_ONLY, 0, 0, 0, 0, 0});
  lab::SenderConfig cfg;
  cfg.peer = receiver_addr(true);
  cfg.messages = 300;
  cfg.duration = 60s;
  cfg.timeout = 100ms;
  Traffic t = run_traffic(cfg, {}, [this](const lab::SenderStats& s) {
    return s.packets - wan_->stats("to-a", RG_WAN_GENEVE).dropped;
  });
  const uint64_t dropped = wan_->stats("to-a", RG_WAN_GENEVE).dropped;
  const auto a = counters(*gw_a_), b = counters(*gw_b_);

  EXPECT_EQ(t.sent.qps_done, cfg.qps.count);
  EXPECT_EQ(t.received.dscp[RG_DEFAULT_DSCP], t.received.packets) << dscp_histogram(t.received.dscp);
  EXPECT_EQ(wan_->stats("to-a", RG_WAN_GENEVE).packets, t.sent.packets);
  EXPECT_EQ(sum_packets(a, RG_DIR_EGRESS, RG_EV_ENCAPSULATED), t.sent.packets);
  EXPECT_EQ(sum_packets(b, RG_DIR_INGRESS, RG_EV_DECAPSULATED), t.sent.packets - dropped);
  EXPECT_EQ(sum_packets(b, RG_DIR_INGRESS, RG_EV_LOST_ESTIMATE), t.received.lost_estimate);
  auto pkts = cap.packets();
  EXPECT_GE(pkts.size(), 100u);
  EXPECT_LE(pkts.size(), t.sent.packets);
  for (const auto& p : pkts) {
    ASSERT_EQ(p.dports.size(), 2u);
    EXPECT_EQ(p.dports[0], RG_GENEVE_UDP_PORT);
    EXPECT_EQ(p.dports[1], RG_ROCE_UDP_PORT);
    ASSERT_EQ(p.dscp.size(), 2u);
    EXPECT_EQ(p.dscp[0], RG_DEFAULT_DSCP);
    EXPECT_EQ(p.dscp[1], RG_DEFAULT_DSCP);
  }
  report("roceguard_ipv6", {{"sent", t.sent.packets},
                            {"qps_failed", t.sent.qps_failed},
                            {"timeouts", t.sent.timeouts},
                            {"acks", t.sent.acks},
                            {"naks", t.sent.naks},
                            {"completed", t.sent.completed},
                            {"elapsed_ms", static_cast<uint64_t>(t.sent.elapsed.count())},
                            {"wan_dropped_requests", dropped},
                            {"received_dscp46", t.received.dscp[RG_DEFAULT_DSCP]},
                            {"lost_estimate_gw_b", sum_packets(b, RG_DIR_INGRESS, RG_EV_LOST_ESTIMATE)}});
}

}  // namespace
}  // namespace rg::test
