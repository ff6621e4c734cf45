// The exporter against real pinned maps: the skeleton is loaded with its maps
// pinned under a private bpffs directory (as the loader pins them), packets
// run through both programs with BPF_PROG_TEST_RUN, and every scrape must
// say exactly what the maps hold.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <net/if.h>
#include <nlohmann/json.hpp>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>

#include "common/error.h"
#include "common/pause_point.h"
#include "common/version.h"
#include "dataplane/maps.h"
#include "dataplane/names.h"
#include "dataplane/state.h"
#include "doctor/doctor.h"
#include "metrics/exporter.h"
#include "metrics/presentation.h"
#include "packet.h"
#include "roceguard.skel.h"
#include "scrape.h"

namespace rg::test {
namespace {

using Labels = std::map<std::string, std::string>;

void ensure_bpffs() {
  struct statfs st{};
  if (statfs("/sys/fs/bpf", &st) == 0 && st.f_type == BPF_FS_MAGIC) return;
  ASSERT_EQ(mount("bpf", "/sys/fs/bpf", "bpf", 0, nullptr), 0)
      << "bpffs is not mounted on /sys/fs/bpf and mounting it failed: " << strerror(errno);
}

// A stream that received every number up to max_seq (its window all
// set), received packets in all, the last just now.
rg_tunnel_stream stream_received(uint64_t received, uint32_t max_seq) {
  rg_tunnel_stream v{};
  v.received = received;
  v.max_seq = max_seq;
  std::fill(std::begin(v.window), std::end(v.window), ~0ull);
  v.last_ns = monotonic_now_ns();
  return v;
}

// The BPF object loaded with its maps pinned under /sys/fs/bpf/rgex-<pid>-<n>,
// removed again (programs, maps, pins, directory) on destruction.
class PinnedDataPlane {
 public:
  PinnedDataPlane() : PinnedDataPlane(next_dir()) {}
  explicit PinnedDataPlane(std::string dir) : dir_(std::move(dir)) {
    if (mkdir(dir_.c_str(), 0700) != 0) throw std::runtime_error("mkdir " + dir_);
    try {
      skel_ = roceguard__open();
      if (!skel_) throw std::runtime_error("open the BPF object");
      for (const char* name : kPinnedMaps) {
        bpf_map* map = bpf_object__find_map_by_name(skel_->obj, name);
        if (!map || bpf_map__set_pin_path(map, (dir_ + "/" + name).c_str()) != 0)
          throw std::runtime_error(std::string("set pin path of ") + name);
      }
      rg::set_qp_entries(skel_->obj, 1024);  // as the tests' harness sizes its tables
      if (int err = roceguard__load(skel_); err != 0)
        throw std::runtime_error("load the BPF object: " + std::to_string(err));
    } catch (...) {
      remove();  // a constructor that throws runs no destructor: the directory goes here
      throw;
    }
  }
  ~PinnedDataPlane() { remove(); }
  PinnedDataPlane(const PinnedDataPlane&) = delete;
  PinnedDataPlane& operator=(const PinnedDataPlane&) = delete;

  static std::string next_dir() {
    static int seq = 0;
    return "/sys/fs/bpf/rgex-" + std::to_string(getpid()) + "-" + std::to_string(seq++);
  }
  const std::string& pin_path() const { return dir_; }
  int counters_fd() const { return bpf_map__fd(skel_->maps.rg_counters); }

  void egress(const Bytes& frame) { run(skel_->progs.rg_tc_egress, frame); }
  void ingress(const Bytes& frame) { run(skel_->progs.rg_xdp_ingress, frame); }

 private:
  static void run(bpf_program* prog, const Bytes& frame) {
    Bytes out(frame.size() + 256);
    LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = frame.data(),
                .data_out = out.data(), .data_size_in = static_cast<__u32>(frame.size()),
                .data_size_out = static_cast<__u32>(out.size()), .repeat = 1);
    if (bpf_prog_test_run_opts(bpf_program__fd(prog), &opts) != 0)
      throw std::runtime_error(std::string("test run of ") + bpf_program__name(prog) + ": " +
                               strerror(errno));
  }

  void remove() {
    if (skel_) roceguard__destroy(skel_);
    skel_ = nullptr;
    for (const char* name : kPinnedMaps) unlink((dir_ + "/" + name).c_str());
    rmdir(dir_.c_str());
  }

  std::string dir_;
  roceguard* skel_ = nullptr;
};

Bytes roce(uint32_t qp, uint32_t psn, uint8_t opcode = kOpSendOnly, uint8_t tos = 0,
           const std::string& src = "192.0.2.1", const std::string& dst = "198.51.100.1",
           std::optional<uint8_t> syndrome = std::nullopt) {
  Bth b;
  b.opcode = opcode;
  b.dest_qp = qp;
  b.psn = psn;
  PacketBuilder p;
  p.ipv4(src, dst).tos(tos).udp(49152, kRoceV2Port).bth(b);
  if (syndrome) p.aeth(*syndrome, 0);
  return p.payload(opcode == kOpSendOnly ? 64 : 0).build();
}

// Known traffic: egress QP 0x11 sends PSN 0..3 and resends 2; ingress QP
// 0x22 skips PSN 12..14, then gets a NAK, a CNP, a CE-marked packet and a
// frame cut short inside the BTH.
void send_traffic(PinnedDataPlane& dp) {
  for (uint32_t psn : {0u, 1u, 2u, 3u, 2u}) dp.egress(roce(0x11, psn));
  const std::string a = "198.51.100.1", b = "192.0.2.1";
  for (uint32_t psn : {10u, 11u, 15u, 16u}) dp.ingress(roce(0x22, psn, kOpSendOnly, 0, a, b));
  dp.ingress(roce(0x22, 17, kOpAck, 0, a, b, kSynNakSeqErr));
  dp.ingress(roce(0x22, 0, kOpCnp, 0, a, b));
  dp.ingress(roce(0x22, 17, kOpSendOnly, 0x03, a, b));
  Bytes cut = roce(0x22, 18, kOpSendOnly, 0, a, b);
  cut.resize(14 + 20 + 8 + 6);
  dp.ingress(cut);
}

std::string ifname_of(uint32_t ifindex) {
  char buf[IF_NAMESIZE] = {};
  return if_indextoname(ifindex, buf) ? buf : std::to_string(ifindex);
}

struct Scrape {
  int status = 0;
  std::string body;
  std::vector<Sample> samples;
};

Scrape scrape(const Exporter& ex, const std::string& path = "/metrics") {
  const std::string addr = ex.listen_address();
  const auto colon = addr.rfind(':');
  HttpReply r = http_get(addr.substr(0, colon),
                         static_cast<uint16_t>(std::stoi(addr.substr(colon + 1))), path);
  Scrape s{r.status, r.body, {}};
  if (r.status == 200) s.samples = parse_exposition(r.body);
  return s;
}

ExporterOptions options_for(const std::string& pin_path) {
  ExporterOptions o;
  o.listen = "127.0.0.1:0";
  o.pin_path = pin_path;
  return o;
}

// Every event of every {interface, direction} row, packets and bytes, as the
// exporter must show it.
void expect_matches_maps(const std::vector<Sample>& samples, const std::string& pin_path) {
  MapReader reader(pin_path);
  const auto rows = reader.counters();
  ASSERT_FALSE(rows.empty());
  for (const auto& row : rows) {
    for (size_t i = 0; i < RG_EV_MAX; ++i) {
      const EventName& e = event_name(static_cast<rg_event>(i));
      Labels l{{"interface", ifname_of(row.ifindex)},
               {"direction", std::string(direction_name(row.direction))}};
      if (!e.label.empty()) l[std::string(e.label)] = std::string(e.label_value);
      const std::string packets = "roceguard_" + std::string(e.metric) + "_total";
      EXPECT_EQ(value_of(samples, packets, l), static_cast<double>(row.ev[i].packets))
          << packets << " " << e.name << " " << l["interface"] << " " << l["direction"];
      if (e.bytes_metric.empty()) continue;
      const std::string bytes = "roceguard_" + std::string(e.bytes_metric) + "_total";
      EXPECT_EQ(value_of(samples, bytes, l), static_cast<double>(row.ev[i].bytes))
          << bytes << " " << e.name;
    }
  }
  for (const auto& u : reader.usage_all()) {
    EXPECT_EQ(value_of(samples, "roceguard_map_entries", {{"map", u.name}}), u.entries) << u.name;
    EXPECT_EQ(value_of(samples, "roceguard_map_max_entries", {{"map", u.name}}), u.max_entries)
        << u.name;
  }
}

class ExporterBpf : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ensure_bpffs(); }
  void SetUp() override {
    ASSERT_EQ(geteuid(), 0u) << "needs root: loads BPF programs and pins maps";
    dp_ = std::make_unique<PinnedDataPlane>();
  }
  void TearDown() override { dp_.reset(); }

  std::unique_ptr<PinnedDataPlane> dp_;
};

TEST_F(ExporterBpf, ScrapeShowsExactlyWhatTheMapsHold) {
  send_traffic(*dp_);
  ExporterOptions o = options_for(dp_->pin_path());
  o.interfaces = {"lo"};
  Exporter ex(o);
  ex.set_attach_state("lo", "tc_egress", true);

  Scrape s = scrape(ex);
  ASSERT_EQ(s.status, 200) << s.body;
  expect_matches_maps(s.samples, dp_->pin_path());

  // And the same figures worked out by hand from send_traffic().
  const Labels eg{{"interface", "lo"}, {"direction", "egress"}};
  const Labels in{{"interface", "lo"}, {"direction", "ingress"}};
  EXPECT_EQ(value_of(s.samples, "roceguard_roce_packets_total", eg), 5);
  EXPECT_EQ(value_of(s.samples, "roceguard_retransmitted_packets_total", eg), 1);
  EXPECT_EQ(value_of(s.samples, "roceguard_dscp_rewritten_packets_total", eg), 5);
  EXPECT_EQ(value_of(s.samples, "roceguard_roce_packets_total", in), 7);
  EXPECT_EQ(value_of(s.samples, "roceguard_psn_gaps_total", in), 1);
  EXPECT_EQ(value_of(s.samples, "roceguard_estimated_lost_packets_total", in), 3);
  Labels nak = in;
  nak["type"] = "seq_err";
  EXPECT_EQ(value_of(s.samples, "roceguard_naks_total", nak), 1);
  EXPECT_EQ(value_of(s.samples, "roceguard_cnp_packets_total", in), 1);
  EXPECT_EQ(value_of(s.samples, "roceguard_ecn_ce_packets_total", in), 1);
  Labels trunc = in;
  trunc["reason"] = "trunc_bth";
  EXPECT_EQ(value_of(s.samples, "roceguard_parse_errors_total", trunc), 1);
  EXPECT_EQ(value_of(s.samples, "roceguard_map_entries", {{"map", "rg_qp4"}}), 2);
  EXPECT_EQ(value_of(s.samples, "roceguard_map_entries", {{"map", "rg_qp6"}}), 0);
  EXPECT_EQ(value_of(s.samples, "roceguard_map_entries", {{"map", "rg_counters"}}), 2);
  EXPECT_EQ(value_of(s.samples, "roceguard_map_entries", {{"map", "rg_peers"}}), 0)
      << "unused peer slots of the array are not fill";
  EXPECT_EQ(value_of(s.samples, "roceguard_map_max_entries", {{"map", "rg_peers"}}), RG_MAX_PEERS);

  EXPECT_EQ(value_of(s.samples, "roceguard_maps_up"), 1);
  EXPECT_EQ(value_of(s.samples, "roceguard_scrape_errors_total"), 0);
  EXPECT_EQ(value_of(s.samples, "roceguard_build_info", {{"version", ROCEGUARD_VERSION}}), 1);
  EXPECT_EQ(value_of(s.samples, "roceguard_attached", {{"interface", "lo"}, {"hook", "tc_egress"}}),
            1);
  EXPECT_EQ(
      value_of(s.samples, "roceguard_attached", {{"interface", "lo"}, {"hook", "xdp_ingress"}}), 0);
  EXPECT_TRUE(value_of(s.samples, "roceguard_scrape_duration_seconds").has_value());
  EXPECT_TRUE(find(s.samples, "roceguard_qp_packets_total").empty()) << "per-QP is off by default";

  ex.set_attach_state("lo", "tc_egress", false);
  EXPECT_EQ(value_of(scrape(ex).samples, "roceguard_attached",
                     {{"interface", "lo"}, {"hook", "tc_egress"}}),
            0);

  int peers = bpf_obj_get((dp_->pin_path() + "/" + kMapPeers).c_str());
  ASSERT_GE(peers, 0);
  rg_peer peer{};
  peer.family = AF_INET;
  peer.vni = 7;
  uint32_t slot = 3;
  EXPECT_EQ(bpf_map_update_elem(peers, &slot, &peer, BPF_ANY), 0);
  close(peers);
  EXPECT_EQ(value_of(scrape(ex).samples, "roceguard_map_entries", {{"map", "rg_peers"}}), 1);
}

TEST_F(ExporterBpf, InterfaceWithoutNameIsLabelledByIndex) {
  uint32_t gone = 0x7ffffff0;
  char buf[IF_NAMESIZE];
  ASSERT_EQ(if_indextoname(gone, buf), nullptr);
  // A per-CPU value for every possible CPU, as the kernel expects it.
  const int ncpu = libbpf_num_possible_cpus();
  ASSERT_GT(ncpu, 0);
  std::vector<rg_counters> v(static_cast<size_t>(ncpu));
  v[0].ev[RG_EV_ROCE_PACKETS] = {7, 700};
  v[static_cast<size_t>(ncpu) - 1].ev[RG_EV_ROCE_PACKETS].packets += 3;
  rg_counter_key key{gone, RG_DIR_INGRESS};
  ASSERT_EQ(bpf_map_update_elem(dp_->counters_fd(), &key, v.data(), BPF_ANY), 0);

  Exporter ex(options_for(dp_->pin_path()));
  Scrape s = scrape(ex);
  ASSERT_EQ(s.status, 200);
  const Labels l{{"interface", std::to_string(gone)}, {"direction", "ingress"}};
  EXPECT_EQ(value_of(s.samples, "roceguard_roce_packets_total", l), 10) << "summed over CPUs";
  EXPECT_EQ(value_of(s.samples, "roceguard_roce_bytes_total", l), 700);

  // Programs in another network namespace: the loader names their ifindexes.
  ExporterOptions named = options_for(dp_->pin_path());
  named.interface_names[gone] = "rgexgw0";
  Exporter ex2(named);
  EXPECT_EQ(value_of(scrape(ex2).samples, "roceguard_roce_packets_total",
                     {{"interface", "rgexgw0"}, {"direction", "ingress"}}),
            10);
}

TEST_F(ExporterBpf, FollowsPinsThatComeGoAndAreReplaced) {
  const std::string dir = PinnedDataPlane::next_dir();
  Exporter ex(options_for(dir));
  const Labels eg{{"interface", "lo"}, {"direction", "egress"}};
  Scrape s = scrape(ex);
  EXPECT_EQ(value_of(s.samples, "roceguard_maps_up"), 0);
  EXPECT_EQ(value_of(s.samples, "roceguard_scrape_errors_total"), 1);
  {
    PinnedDataPlane late(dir);
    late.egress(roce(0x11, 0));
    s = scrape(ex);
    EXPECT_EQ(value_of(s.samples, "roceguard_maps_up"), 1);
    EXPECT_EQ(value_of(s.samples, "roceguard_roce_packets_total", eg), 1);
  }
  s = scrape(ex);
  EXPECT_EQ(value_of(s.samples, "roceguard_maps_up"), 0);
  EXPECT_EQ(value_of(s.samples, "roceguard_scrape_errors_total"), 2);
  // New maps under the same path (what --reset-state does): read, not the old ones.
  PinnedDataPlane fresh(dir);
  for (int i = 0; i < 3; ++i) fresh.egress(roce(0x11, static_cast<uint32_t>(i)));
  EXPECT_EQ(value_of(scrape(ex).samples, "roceguard_roce_packets_total", eg), 3);
}

TEST_F(ExporterBpf, PromtoolAcceptsTheOutput) {
  send_traffic(*dp_);
  ExporterOptions o = options_for(dp_->pin_path());
  o.interfaces = {"lo"};
  o.per_qp = true;
  Exporter ex(o);
  Scrape s = scrape(ex);
  ASSERT_EQ(s.status, 200);
  CommandResult r = promtool_check_metrics(s.body);
  EXPECT_EQ(r.exit_code, 0) << r.output << "\n--- scraped:\n" << s.body;
  EXPECT_EQ(r.output, "") << "promtool has lint remarks";
}

// Writes v into every CPU's slot of the pinned rg_peer_stats at slot.
void write_peer_stats(const std::string& pin, uint32_t slot, const rg_peer_stats& v) {
  const int ncpu = libbpf_num_possible_cpus();
  ASSERT_GT(ncpu, 0);
  const size_t stride = (sizeof(rg_peer_stats) + 7) & ~size_t{7};
  std::vector<uint8_t> per_cpu(stride * static_cast<size_t>(ncpu), 0);
  for (int cpu = 0; cpu < ncpu; ++cpu) std::memcpy(per_cpu.data() + stride * static_cast<size_t>(cpu), &v, sizeof(v));
  const int stats = bpf_obj_get((pin + "/" + kMapPeerStats).c_str());
  ASSERT_GE(stats, 0);
  EXPECT_EQ(bpf_map_update_elem(stats, &slot, per_cpu.data(), BPF_ANY), 0) << strerror(errno);
  close(stats);
}

// The attach record of a running configuration (json), as `attach` writes
// it beside the pins; removed with the object.
struct RecordedConfig {
  RecordedConfig(const std::string& pin, const char* json) : path(pin + "/" + kMapState) {
    State st;
    st.config = nlohmann::json::parse(json);
    write_state(pin, st);
  }
  ~RecordedConfig() { unlink(path.c_str()); }
  RecordedConfig(const RecordedConfig&) = delete;
  RecordedConfig& operator=(const RecordedConfig&) = delete;
  std::string path;
};

// Per-peer tunnel series: labelled with the configured peer name from the
// attach record, the counters summed over CPUs, the receiving side's
// stream figures and the delay histogram as the maps hold them.
TEST_F(ExporterBpf, TunnelSeriesPerPeerByConfiguredName) {
  const std::string pin = dp_->pin_path();
  const RecordedConfig recorded(pin, R"({"tunnel": {"peer": [{"name": "gw-x"}, {"name": "gw-b"}]}})");

  const int ncpu = libbpf_num_possible_cpus();
  ASSERT_GT(ncpu, 0);
  {
    rg_peer_stats v{};
    v.ev[RG_PEER_EV_SEQ_SENT].packets = 5;
    v.ev[RG_PEER_EV_ENCAPSULATED].packets = 6;
    v.ev[RG_PEER_EV_OVERSIZE_DROPPED].packets = 1;
    write_peer_stats(pin, 1, v);
  }

  // Two streams of peer 1; one silent for longer than the settle time, so
  // its open hole counts as lost already.
  const int streams = bpf_obj_get((pin + "/" + kMapTunnelStreams).c_str());
  ASSERT_GE(streams, 0);
  const uint64_t now = monotonic_now_ns();
  for (uint32_t cpu : {0u, 1u}) {
    rg_tunnel_stream_key k{1, cpu};
    rg_tunnel_stream v{};
    v.received = 10;
    v.lost = 2;
    v.reordered = 1;
    v.duplicated = 3;
    std::fill(std::begin(v.window), std::end(v.window), ~0ull);
    v.window[0] &= ~(1ull << 4);  // one hole
    v.last_ns = cpu == 0 ? now : now - 2 * RG_TUNNEL_SETTLE_NS;
    v.max_seq = 20;
    v.delay[3] = 10;  // up to 8 us
    v.delay_sum_ns = 50000;
    v.loss_runs[0] = 2;
    v.loss_runs[RG_TUNNEL_RUN_BUCKETS - 1] = 1;
    // The second stream's sender numbers in an epoch: it eliminates, and
    // its duplicates were dropped here; the first one's reached the host.
    if (cpu == 1) v.epoch = 7;
    ASSERT_EQ(bpf_map_update_elem(streams, &k, &v, BPF_ANY), 0) << strerror(errno);
  }
  close(streams);

  Exporter ex(options_for(pin));
  Scrape s = scrape(ex);
  ASSERT_EQ(s.status, 200) << s.body;
  const Labels peer{{"peer", "gw-b"}};
  EXPECT_EQ(value_of(s.samples, "roceguard_tunnel_sent_packets_total", peer), 5.0 * ncpu);
  EXPECT_EQ(value_of(s.samples, "roceguard_tunnel_encapsulated_packets_total", peer), 6.0 * ncpu);
  EXPECT_EQ(value_of(s.samples, "roceguard_tunnel_oversize_packets_total", {{"peer", "gw-b"}, {"policy", "drop"}}),
            1.0 * ncpu);
  EXPECT_EQ(value_of(s.samples, "roceguard_tunnel_received_packets_total", peer), 20);
  EXPECT_EQ(value_of(s.samples, "roceguard_tunnel_lost_packets_total", peer), 2 + 2 + 1);
  EXPECT_EQ(value_of(s.samples, "roceguard_tunnel_reordered_packets_total", peer), 2);
  EXPECT_EQ(value_of(s.samples, "roceguard_tunnel_duplicated_packets_total", peer), 6);
  EXPECT_EQ(value_of(s.samples, "roceguard_tunnel_duplicates_delivered_packets_total", peer), 3);
  EXPECT_EQ(value_of(s.samples, "roceguard_tunnel_peer_eliminates", peer), 1);
  EXPECT_EQ(value_of(s.samples, "roceguard_tunnel_loss_runs_total", {{"peer", "gw-b"}, {"length", "1"}}), 4);
  EXPECT_EQ(value_of(s.samples, "roceguard_tunnel_loss_runs_total", {{"peer", "gw-b"}, {"length", "2-3"}}), 0);
  EXPECT_EQ(value_of(s.samples, "roceguard_tunnel_loss_runs_total", {{"peer", "gw-b"}, {"length", "128+"}}), 2);
  EXPECT_EQ(find(s.samples, "roceguard_tunnel_loss_runs_total").size(), static_cast<size_t>(RG_TUNNEL_RUN_BUCKETS));
  EXPECT_EQ(value_of(s.samples, "roceguard_tunnel_queueing_delay_seconds_count", peer), 20);
  EXPECT_NEAR(*value_of(s.samples, "roceguard_tunnel_queueing_delay_seconds_sum", peer), 100e-6, 1e-12);
  EXPECT_EQ(value_of(s.samples, "roceguard_tunnel_queueing_delay_seconds_bucket", {{"peer", "gw-b"}, {"le", "+Inf"}}), 20);
  size_t buckets = 0;
  for (const auto& sample : find(s.samples, "roceguard_tunnel_queueing_delay_seconds_bucket")) {
    ++buckets;
    const double le = sample.labels.at("le") == "+Inf" ? 1e9 : std::stod(sample.labels.at("le"));
    EXPECT_EQ(sample.value, le >= 8e-6 * (1 - 1e-9) ? 20 : 0) << "le " << sample.labels.at("le");
  }
  EXPECT_EQ(buckets, static_cast<size_t>(RG_TUNNEL_DELAY_BUCKETS));
  EXPECT_TRUE(find(s.samples, "roceguard_tunnel_received_packets_total").size() == 1)
      << "peers without streams have no receiving-side series";

  CommandResult r = promtool_check_metrics(s.body);
  EXPECT_EQ(r.exit_code, 0) << r.output << "\n--- scraped:\n" << s.body;
  EXPECT_EQ(r.output, "") << "promtool has lint remarks";
}

// The loss shield per peer: what the sending side counted (copies, their
// bytes, refused copies, packets sent once) and what the receiving side
// counted (copies eliminated, and the residual loss: sequence numbers of
// which neither copy arrived), alike in /metrics, `stats --json` and the
// stats table.
TEST_F(ExporterBpf, ShieldFiguresPerPeerInMetricsAndStats) {
  const std::string pin = dp_->pin_path();
  const RecordedConfig recorded(pin, R"({"tunnel": {"peer": [{"name": "gw-a"}, {"name": "gw-b"}]}})");

  const int ncpu = libbpf_num_possible_cpus();
  ASSERT_GT(ncpu, 0);
  {
    rg_peer_stats v{};
    v.epoch = 0x1234;
    v.tx_seq[3] = 40;
    v.ev[RG_PEER_EV_SEQ_SENT] = {40, 40000};
    v.ev[RG_PEER_EV_SHIELD_COPIES] = {30, 3000};
    v.ev[RG_PEER_EV_SHIELD_ELIMINATED] = {25, 2500};
    v.ev[RG_PEER_EV_SHIELD_COPY_ERROR] = {2, 0};
    v.ev[RG_PEER_EV_SHIELD_UNCOPIED] = {5, 0};
    write_peer_stats(pin, 1, v);
  }
  // Two lanes of one CPU of peer 1: 4 numbers lost in all (neither copy came).
  const int streams = bpf_obj_get((pin + "/" + kMapTunnelStreams).c_str());
  ASSERT_GE(streams, 0);
  for (uint32_t lane : {0u, 1u}) {
    rg_tunnel_stream_key k{1, (3u << RG_TUNNEL_LANE_BITS) | lane};
    rg_tunnel_stream v = stream_received(100, 101);
    v.epoch = 0x4321;
    v.lost = 2;
    ASSERT_EQ(bpf_map_update_elem(streams, &k, &v, BPF_ANY), 0) << strerror(errno);
  }
  close(streams);

  Exporter ex(options_for(pin));
  Scrape s = scrape(ex);
  ASSERT_EQ(s.status, 200) << s.body;
  const Labels peer{{"peer", "gw-b"}};
  EXPECT_EQ(value_of(s.samples, "roceguard_tunnel_shield_copies_total", peer), 30.0 * ncpu);
  EXPECT_EQ(value_of(s.samples, "roceguard_tunnel_shield_copy_bytes_total", peer), 3000.0 * ncpu);
  EXPECT_EQ(value_of(s.samples, "roceguard_tunnel_shield_eliminated_packets_total", peer), 25.0 * ncpu);
  EXPECT_EQ(value_of(s.samples, "roceguard_tunnel_shield_copy_errors_total", peer), 2.0 * ncpu);
  EXPECT_EQ(value_of(s.samples, "roceguard_tunnel_shield_uncopied_packets_total", peer), 5.0 * ncpu);
  EXPECT_EQ(value_of(s.samples, "roceguard_tunnel_lost_packets_total", peer), 4);
  // Only the copies' bytes say something: no other peer event has a byte series.
  for (const auto& sample : s.samples) {
    if (sample.name.starts_with("roceguard_tunnel_") && sample.name.find("bytes") != std::string::npos) {
      EXPECT_EQ(sample.name, "roceguard_tunnel_shield_copy_bytes_total");
    }
  }
  CommandResult r = promtool_check_metrics(s.body);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "") << "promtool has lint remarks";

  const std::string cmd = std::string(ROCEGUARD_BIN) + " stats --pin-path " + pin;
  r = run_command({"sh", "-c", cmd + " --json 2>/dev/null"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  ASSERT_EQ(j["tunnels"].size(), 1u) << j.dump(2);
  const nlohmann::json& shield = j["tunnels"][0]["shield"];
  EXPECT_EQ(j["tunnels"][0]["peer"], "gw-b");
  EXPECT_EQ(shield["copies"], 30 * ncpu) << shield.dump();
  EXPECT_EQ(shield["extra_wan_bytes"], 3000 * ncpu);
  EXPECT_EQ(shield["eliminated"], 25 * ncpu);
  EXPECT_EQ(shield["copy_errors"], 2 * ncpu);
  EXPECT_EQ(shield["uncopied"], 5 * ncpu);
  EXPECT_EQ(shield["residual_lost"], 4);
  EXPECT_EQ(j["tunnels"][0]["events"]["shield_copies"]["bytes"], 3000 * ncpu);

  r = run_command({"sh", "-c", cmd + " 2>&1"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string row = [&] {
    char buf[256];
    std::snprintf(buf, sizeof(buf), "%-20s %12d %16d %12d %12d %10d %14d", "gw-b", 30 * ncpu, 3000 * ncpu, 25 * ncpu,
                  2 * ncpu, 5 * ncpu, 4);
    return std::string(buf);
  }();
  EXPECT_NE(r.output.find("loss shield: per peer"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(row), std::string::npos) << "want: " << row << "\n" << r.output;
}

// The congestion loop's phantom queue towards a peer (rg_peer_pq, pinned):
// the exporter's series and stats' table and JSON show the same counts,
// and without a packet through the queue stats has no congestion part.
TEST_F(ExporterBpf, CongestionLoopPerPeerInMetricsAndStats) {
  const std::string pin = dp_->pin_path();
  const RecordedConfig recorded(pin, R"({"tunnel": {"peer": [{"name": "gw-a"}, {"name": "gw-b"}]}})");
  const std::string cmd = std::string(ROCEGUARD_BIN) + " stats --pin-path " + pin;
  CommandResult r = run_command({"sh", "-c", cmd + " 2>&1"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("congestion loop"), std::string::npos) << r.output;

  const int pq = bpf_obj_get((pin + "/" + kMapPeerPq).c_str());
  ASSERT_GE(pq, 0) << strerror(errno);
  rg_peer_pq q{};
  q.empty_at_ns = 123456789;  // a time long past: no backlog
  q.packets = 1000;
  q.bytes = 1000 * 1100;
  q.marked = 70;
  q.not_ect = 3;
  q.capped = 2;
  q.cnps = 41;
  q.cnp_errors = 1;
  const uint32_t slot = 1;
  ASSERT_EQ(bpf_map_update_elem(pq, &slot, &q, BPF_ANY), 0) << strerror(errno);
  close(pq);

  Exporter ex(options_for(pin));
  Scrape s = scrape(ex);
  ASSERT_EQ(s.status, 200) << s.body;
  const Labels peer{{"peer", "gw-b"}};
  EXPECT_EQ(value_of(s.samples, "roceguard_tunnel_congestion_queued_packets_total", peer), 1000);
  EXPECT_EQ(value_of(s.samples, "roceguard_tunnel_congestion_marked_total", peer), 70);
  EXPECT_EQ(value_of(s.samples, "roceguard_tunnel_congestion_unmarkable_total", peer), 3);
  EXPECT_EQ(value_of(s.samples, "roceguard_tunnel_congestion_capped_total", peer), 2);
  EXPECT_EQ(value_of(s.samples, "roceguard_tunnel_congestion_cnps_total", {{"peer", "gw-b"}, {"result", "sent"}}), 41);
  EXPECT_EQ(value_of(s.samples, "roceguard_tunnel_congestion_cnps_total", {{"peer", "gw-b"}, {"result", "refused"}}),
            1);
  EXPECT_EQ(value_of(s.samples, "roceguard_tunnel_congestion_backlog_seconds", peer), 0) << "its end is long past";

  r = run_command({"sh", "-c", cmd + " --json 2>/dev/null"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  ASSERT_EQ(j["tunnels"].size(), 1u) << j.dump(2);
  EXPECT_EQ(j["tunnels"][0]["peer"], "gw-b");
  EXPECT_EQ(j["tunnels"][0]["congestion"],
            nlohmann::json({{"queued_packets", 1000}, {"queued_bytes", 1100000}, {"marked", 70}, {"unmarkable", 3},
                            {"capped", 2}, {"cnps_sent", 41}, {"cnps_refused", 1}, {"backlog_us", 0}}))
      << j.dump(2);

  r = run_command({"sh", "-c", cmd + " 2>&1"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  char row[256];
  std::snprintf(row, sizeof(row), "%-20s %12d %16d %12d %12d %10d %12d %12d", "gw-b", 1000, 1100000, 70, 3, 2, 41, 1);
  EXPECT_NE(r.output.find("congestion loop: per peer"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(row), std::string::npos) << "want: " << row << "\n" << r.output;

  // A queue whose end lies 1000 s ahead of the clock (CLOCK_MONOTONIC, the
  // programs' bpf_ktime_get_ns): its backlog, less the time the test took.
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  q.empty_at_ns = static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec) +
                  1000'000'000'000ull;
  const int pq2 = bpf_obj_get((pin + "/" + kMapPeerPq).c_str());
  ASSERT_GE(pq2, 0) << strerror(errno);
  ASSERT_EQ(bpf_map_update_elem(pq2, &slot, &q, BPF_ANY), 0) << strerror(errno);
  close(pq2);
  s = scrape(ex);
  ASSERT_EQ(s.status, 200) << s.body;
  const auto backlog = value_of(s.samples, "roceguard_tunnel_congestion_backlog_seconds", peer);
  ASSERT_TRUE(backlog);
  EXPECT_GT(*backlog, 0);
  EXPECT_LE(*backlog, 1000);
}

// Without any shield counter the stats table has no shield part.
TEST(TunnelShield, ActiveOnlyWhenACounterMoved) {
  TunnelPeer t;
  t.lost = 9;
  EXPECT_FALSE(tunnel_shield(t).active());
  EXPECT_EQ(tunnel_shield(t).residual_lost, 9u);
  for (rg_peer_event e : {RG_PEER_EV_SHIELD_COPIES, RG_PEER_EV_SHIELD_ELIMINATED, RG_PEER_EV_SHIELD_COPY_ERROR,
                          RG_PEER_EV_SHIELD_UNCOPIED}) {
    TunnelPeer one;
    one.ev[e].packets = 1;
    EXPECT_TRUE(tunnel_shield(one).active()) << peer_event_name(e).name;
  }
}

// The round trip from the delay histogram: twice the p99 one-way delay,
// linear within its bucket (bucket k holds up to 2^k us).
TEST(TunnelRtt, TwiceTheP99OfTheOneWayDelay) {
  TunnelPeer t;
  EXPECT_FALSE(tunnel_delay_quantile_us(t, 0.99));
  EXPECT_FALSE(tunnel_rtt_us(t));
  t.delay[13] = 100;  // 4.096 ms to 8.192 ms
  EXPECT_NEAR(*tunnel_delay_quantile_us(t, 0.99), 4096 + 0.99 * 4096, 1e-6);
  EXPECT_NEAR(*tunnel_rtt_us(t), 2 * (4096 + 0.99 * 4096), 1e-6);
  t.delay = {};
  t.delay[3] = 98;  // up to 8 us
  t.delay[10] = 2;  // 512 us to 1024 us: rank 99 is half way
  EXPECT_NEAR(*tunnel_delay_quantile_us(t, 0.99), 768, 1e-6);
  EXPECT_NEAR(*tunnel_delay_quantile_us(t, 0.5), 4 + 4 * 50.0 / 98, 1e-6);
  t.delay = {};
  t.delay[0] = 10;  // from 0
  EXPECT_NEAR(*tunnel_delay_quantile_us(t, 0.5), 0.5, 1e-9);
  t.delay = {};
  t.delay[RG_TUNNEL_DELAY_BUCKETS - 1] = 5;  // beyond 2^22 us: its lower bound
  EXPECT_DOUBLE_EQ(*tunnel_delay_quantile_us(t, 0.99), 4194304);
}

// Two clocks apart: the floor (the lowest arrival minus send stamp) carries
// their offset. A negative floor (stamps from the future) or one longer
// than any path says they are not comparable: no one-way delay, no round
// trip, so no ACK timeout advice; the queueing delay holds all the same.
TEST(TunnelRtt, ClocksApartGiveNoRoundTrip) {
  TunnelPeer t;
  t.delay[13] = 100;  // queueing 4.096 ms to 8.192 ms
  EXPECT_EQ(tunnel_clocks(t), TunnelClocks::kUnknown);
  t.floor_streams = 2;
  t.floor_min_us = 2000;  // two paths, 2 and 3 ms
  t.floor_max_us = 3000;
  EXPECT_EQ(tunnel_clocks(t), TunnelClocks::kComparable);
  EXPECT_NEAR(*tunnel_rtt_us(t), 2 * (3000 + 4096 + 0.99 * 4096), 1e-6) << "the highest floor, the p99 above it";
  t.delay_sum_ns = 100 * 6000000ull;
  EXPECT_NEAR(*tunnel_one_way_mean_us(t), 2000 + 6000, 1e-6);
  struct Apart {
    int64_t floor_us;
    const char* why;
  };
  for (const Apart& a : {Apart{-37'000'000 + 2000, "stamps from the peer arrive 36.998000 s before they were sent"},
                         Apart{37'000'000 + 2000, "the one-way delay's floor is 37.002000 s, longer than any path"}}) {
    SCOPED_TRACE(a.floor_us);
    t.floor_min_us = t.floor_max_us = a.floor_us;
    std::string why;
    EXPECT_EQ(tunnel_clocks(t, &why), TunnelClocks::kNotComparable);
    EXPECT_EQ(why.rfind(a.why, 0), 0u) << why;
    EXPECT_FALSE(tunnel_rtt_us(t));
    EXPECT_FALSE(tunnel_one_way_mean_us(t));
    EXPECT_NEAR(*tunnel_delay_quantile_us(t, 0.99), 4096 + 0.99 * 4096, 1e-6) << "the queueing delay holds";
    const nlohmann::json j = tunnel_peer_json(t);
    EXPECT_TRUE(j["rtt_estimate_seconds"].is_null()) << j.dump(2);
    EXPECT_TRUE(j["ack_timeout_fit"].is_null()) << j.dump(2);
    EXPECT_EQ(j["delay"]["clocks"], "not comparable");
    EXPECT_EQ(j["delay"]["clocks_why"], why);
  }
}

// stats and doctor hold each tunnel's round trip against the NIC profile:
// the running configuration's (the attach record), or that of -c FILE.
TEST_F(ExporterBpf, StatsAndDoctorFitTheAckTimeoutToTheTunnelRoundTrip) {
  const std::string pin = dp_->pin_path();
  const RecordedConfig recorded(pin, R"({"tunnel": {"peer": [{"name": "gw-b"}]},
                                        "nic": {"ack_timeout": "500us", "gid_index": null}})");
  ASSERT_TRUE(recorded_nic_profile(pin));
  EXPECT_EQ(recorded_nic_profile(pin)->ack_timeout.exponent, 7);

  // Peer 0 delivered 100 packets 4.096 ms to 8.192 ms after they were sent:
  // p99 8.151 ms, round trip 16.302 ms; 4x that is 65.208 ms, t = 14.
  const int streams = bpf_obj_get((pin + "/" + kMapTunnelStreams).c_str());
  ASSERT_GE(streams, 0);
  rg_tunnel_stream_key k{0, 0};
  rg_tunnel_stream v = stream_received(100, 99);
  v.delay[13] = 100;
  v.delay_sum_ns = 100 * 6000000ull;
  ASSERT_EQ(bpf_map_update_elem(streams, &k, &v, BPF_ANY), 0) << strerror(errno);
  close(streams);

  const std::string stats = std::string(ROCEGUARD_BIN) + " stats --pin-path " + pin;
  CommandResult r = run_command({"sh", "-c", stats + " --json 2>/dev/null"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["nic_profile"]["source"], "the running configuration");
  EXPECT_EQ(j["nic_profile"]["ack_timeout"], "500us");
  EXPECT_EQ(j["nic_profile"]["ack_timeout_exponent"], 7);
  ASSERT_EQ(j["tunnels"].size(), 1u) << j.dump(2);
  const nlohmann::json& t = j["tunnels"][0];
  EXPECT_EQ(t["peer"], "gw-b");
  EXPECT_NEAR(t["delay"]["p99_seconds"].get<double>(), 8151.04e-6, 1e-12);
  EXPECT_NEAR(t["rtt_estimate_seconds"].get<double>(), 16302.08e-6, 1e-12);
  EXPECT_EQ(t["ack_timeout_fit"]["exponent"], 14);
  EXPECT_NEAR(t["ack_timeout_fit"]["seconds"].get<double>(), 0.067108864, 1e-12);
  ASSERT_TRUE(t["ack_timeout_warning"].is_string()) << t.dump(2);
  EXPECT_NE(t["ack_timeout_warning"].get<std::string>().find(
                "nic.ack_timeout 500us (exponent 7, 524.288us) is too short for a 16.302ms round trip: it takes "
                "exponent 14 (67.109ms) or more"),
            std::string::npos)
      << t.dump(2);

  r = run_command({"sh", "-c", stats + " 2>&1"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("roceguard: warning: tunnel gw-b: nic.ack_timeout 500us"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("round trip 16.302ms; ACK timeout fitting this path: exponent 14 (67.109ms); the profile's "
                          "is shorter"),
            std::string::npos)
      << r.output;

  // A file whose profile is long enough: no warning.
  TempDir tmp("ack-rtt");
  write_file(tmp.path() + "/roceguard.toml", "[nic]\nack_timeout = \"67ms\"\n");
  r = run_command({"sh", "-c", stats + " --json -c " + tmp.path() + "/roceguard.toml 2>&1"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["nic_profile"]["source"], tmp.path() + "/roceguard.toml");
  EXPECT_TRUE(j["tunnels"][0]["ack_timeout_warning"].is_null()) << r.output;
  EXPECT_EQ(j["tunnels"][0]["ack_timeout_fit"]["exponent"], 14);

  // doctor: a warning with the figures from the running configuration's
  // profile; the file's passes.
  auto finding = [&](const DoctorInput& in) {
    std::vector<Finding> found;
    for (const auto& f : run_doctor(in))
      if (f.check == "nic.ack_timeout") found.push_back(f);
    return found;
  };
  DoctorInput in;
  in.pin_path = pin;
  in.nic_state_dir = tmp.path();
  auto f = finding(in);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].subject, "gw-b");
  EXPECT_EQ(f[0].verdict, Verdict::kWarn) << f[0].what;
  EXPECT_NE(f[0].what.find("too short for a 16.302ms round trip"), std::string::npos) << f[0].what;
  EXPECT_NE(f[0].what.find("it takes exponent 14 (67.109ms)"), std::string::npos) << f[0].what;
  EXPECT_NE(f[0].what.find("the running configuration's profile"), std::string::npos) << f[0].what;
  EXPECT_NE(f[0].fix.find("nic.ack_timeout = \"67.109ms\""), std::string::npos) << f[0].fix;
  in.config_given = true;  // the defaults: 67 ms, t = 14
  f = finding(in);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].verdict, Verdict::kOk) << f[0].what;
  EXPECT_NE(f[0].what.find("67ms (exponent 14) fits it; exponent 14 (67.109ms) would be enough"), std::string::npos)
      << f[0].what;

  // Without delay samples the check is skipped, saying why.
  in.pin_path = tmp.path() + "/none";
  f = finding(in);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].verdict, Verdict::kInfo);
  EXPECT_EQ(f[0].what.rfind("skipped: no tunnel has delay samples", 0), 0u) << f[0].what;
}

// A peer whose clock is 37 s ahead (TAI offset set on it only): its stamps
// arrive before they were sent. stats and doctor say the clocks are not
// comparable and give no ACK timeout advice from the delay.
TEST_F(ExporterBpf, StatsAndDoctorSayWhenTheClocksAreNotComparable) {
  const std::string pin = dp_->pin_path();
  const RecordedConfig recorded(pin, R"({"tunnel": {"peer": [{"name": "gw-b"}]},
                                        "nic": {"ack_timeout": "500us", "gid_index": null}})");
  const int streams = bpf_obj_get((pin + "/" + kMapTunnelStreams).c_str());
  ASSERT_GE(streams, 0);
  rg_tunnel_stream_key k{0, 0};
  rg_tunnel_stream v = stream_received(100, 99);
  v.delay[3] = 100;  // up to 8 us above the floor
  v.delay_sum_ns = 100 * 5000ull;
  v.delay_floor_us = -37'000'000 + 2000;
  v.delay_floor_at = RG_TUNNEL_FLOOR_SET | 1;
  ASSERT_EQ(bpf_map_update_elem(streams, &k, &v, BPF_ANY), 0) << strerror(errno);
  close(streams);

  const std::string stats = std::string(ROCEGUARD_BIN) + " stats --pin-path " + pin;
  CommandResult r = run_command({"sh", "-c", stats + " --json 2>/dev/null"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json t = nlohmann::json::parse(r.output)["tunnels"][0];
  EXPECT_EQ(t["delay"]["clocks"], "not comparable") << t.dump(2);
  EXPECT_NEAR(t["delay"]["floor"]["min_seconds"].get<double>(), -36.998, 1e-9);
  EXPECT_TRUE(t["rtt_estimate_seconds"].is_null()) << t.dump(2);
  EXPECT_TRUE(t["ack_timeout_fit"].is_null()) << t.dump(2);
  EXPECT_FALSE(t["ack_timeout_warning"].is_string()) << t.dump(2);
  r = run_command({"sh", "-c", stats + " 2>&1"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("gw-b                 clocks not comparable: stamps from the peer arrive 36.998000 s before "
                          "they were sent"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("ACK timeout fitting this path"), std::string::npos) << r.output;

  DoctorInput in;
  in.pin_path = pin;
  std::vector<Finding> found;
  for (const auto& f : run_doctor(in))
    if (f.check == "nic.ack_timeout") found.push_back(f);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].subject, "gw-b");
  EXPECT_EQ(found[0].verdict, Verdict::kWarn);
  EXPECT_EQ(found[0].what.rfind("clocks not comparable: stamps from the peer arrive 36.998000 s before", 0), 0u)
      << found[0].what;
  EXPECT_EQ(found[0].what.find("too short"), std::string::npos) << found[0].what;
}

// doctor's tunnel.shield: a shielded peer eliminates when its own numbers
// carry an epoch; without one (a roceguard before the shield) it would hand
// both copies to its host; with nothing numbered from it, nobody can tell.
TEST_F(ExporterBpf, DoctorSaysWhetherAShieldedPeerEliminates) {
  const std::string pin = dp_->pin_path();
  const RecordedConfig recorded(pin, R"({"tunnel": {"shield": "all", "peer": [{"name": "gw-new"}, {"name": "gw-old"},
                                        {"name": "gw-quiet"}, {"name": "gw-off", "shield": "off"}]}})");
  EXPECT_EQ(recorded_shielded_peers(pin), (std::vector<std::string>{"gw-new", "gw-old", "gw-quiet"}));

  const int streams = bpf_obj_get((pin + "/" + kMapTunnelStreams).c_str());
  ASSERT_GE(streams, 0);
  for (uint32_t slot : {0u, 1u}) {
    rg_tunnel_stream_key k{slot, 0};
    rg_tunnel_stream v = stream_received(10, 0);
    v.epoch = slot == 0 ? 9 : 0;
    ASSERT_EQ(bpf_map_update_elem(streams, &k, &v, BPF_ANY), 0) << strerror(errno);
  }
  close(streams);

  DoctorInput in;
  in.pin_path = pin;
  std::map<std::string, Verdict> verdicts;
  for (const auto& f : run_doctor(in))
    if (f.check == "tunnel.shield") verdicts[f.subject] = f.verdict;
  EXPECT_EQ(verdicts, (std::map<std::string, Verdict>{
                          {"gw-new", Verdict::kOk}, {"gw-old", Verdict::kWarn}, {"gw-quiet", Verdict::kInfo}}));
}

// The shield's "auto" mode acts on what the peer's option reports: doctor
// warns about a peer shielded "auto" whose tunnel has no key, from the
// configuration given or the running one's record.
TEST_F(ExporterBpf, DoctorWarnsOfAutoShieldWithoutAKey) {
  auto findings = [](const DoctorInput& in) {
    std::map<std::string, Verdict> verdicts;
    for (const auto& f : run_doctor(in))
      if (f.check == "tunnel.key") verdicts[f.subject] = f.verdict;
    return verdicts;
  };
  DoctorInput in;
  in.config_given = true;
  in.pin_path = dp_->pin_path();
  for (const auto& [name, shield, key] : {std::tuple{"gw-open", Shield::kAuto, ""},
                                          std::tuple{"gw-keyed", Shield::kAuto, "/etc/roceguard/gw.key"},
                                          std::tuple{"gw-static", Shield::kAll, ""}}) {
    PeerConfig& p = in.config.peers.emplace_back();
    p.name = name;
    p.shield = shield;
    p.key_file = key;
  }
  EXPECT_EQ(findings(in), (std::map<std::string, Verdict>{{"gw-open", Verdict::kWarn}, {"gw-keyed", Verdict::kOk}}));

  const RecordedConfig recorded(in.pin_path, R"({"tunnel": {"peer": [
      {"name": "gw-open", "shield": "auto", "key_file": null},
      {"name": "gw-keyed", "shield": "auto", "key_file": "/etc/roceguard/gw.key"},
      {"name": "gw-off", "shield": "off", "key_file": null}]}})");
  in.config_given = false;
  EXPECT_EQ(findings(in), (std::map<std::string, Verdict>{{"gw-open", Verdict::kWarn}, {"gw-keyed", Verdict::kOk}}));
}

TEST_F(ExporterBpf, RestartNeitherResetsNorDoubleCounts) {
  send_traffic(*dp_);
  std::vector<Sample> before;
  {
    Exporter ex(options_for(dp_->pin_path()));
    before = scrape(ex).samples;
    // Scraping twice must not add anything up in the process.
    EXPECT_EQ(value_of(scrape(ex).samples, "roceguard_roce_packets_total",
                       {{"interface", "lo"}, {"direction", "egress"}}),
              value_of(before, "roceguard_roce_packets_total",
                       {{"interface", "lo"}, {"direction", "egress"}}));
  }
  Exporter again(options_for(dp_->pin_path()));
  std::vector<Sample> after = scrape(again).samples;
  for (const auto& s : before) {
    // The scrape's own duration and the process_* series describe the
    // exporter's process, not what the maps counted.
    if (s.name.rfind("roceguard_scrape_duration", 0) == 0 || s.name.rfind("process_", 0) == 0) continue;
    EXPECT_EQ(value_of(after, s.name, s.labels), s.value) << s.name;
  }
  // Counting goes on from there.
  dp_->egress(roce(0x11, 4));
  EXPECT_EQ(value_of(scrape(again).samples, "roceguard_roce_packets_total",
                     {{"interface", "lo"}, {"direction", "egress"}}),
            6);
}

TEST_F(ExporterBpf, PerQpSeriesAreOffByDefaultAndCappedWhenOn) {
  // QP 0x100 + k resends k times: QPs 0x104 and 0x103 are the two worst.
  for (uint32_t k = 0; k < 5; ++k) {
    dp_->egress(roce(0x100 + k, 5));
    for (uint32_t i = 0; i < k; ++i) dp_->egress(roce(0x100 + k, 5));
  }
  {
    Exporter off(options_for(dp_->pin_path()));
    for (const auto& s : scrape(off).samples) EXPECT_FALSE(s.labels.count("qp")) << s.name;
  }
  ExporterOptions o = options_for(dp_->pin_path());
  o.per_qp = true;
  o.top_qps = 2;
  Exporter on(o);
  Scrape s = scrape(on);
  ASSERT_EQ(s.status, 200);
  std::set<std::string> qps;
  for (const auto& x : s.samples)
    if (x.labels.count("qp"))
      qps.insert(x.labels.at("src") + ">" + x.labels.at("dst") + "#" + x.labels.at("qp"));
  EXPECT_EQ(qps, (std::set<std::string>{"192.0.2.1>198.51.100.1#259",
                                        "192.0.2.1>198.51.100.1#260"}));
  const Labels worst{{"qp", "260"}, {"direction", "egress"}, {"src", "192.0.2.1"}};
  EXPECT_EQ(value_of(s.samples, "roceguard_qp_retransmitted_packets_total", worst), 4);
  EXPECT_EQ(value_of(s.samples, "roceguard_qp_packets_total", worst), 5);
  EXPECT_EQ(value_of(s.samples, "roceguard_map_entries", {{"map", "rg_qp4"}}), 5)
      << "fill counted from the one read of the QP map";
}

TEST_F(ExporterBpf, StatsAndMetricsPickTheSameWorstQps) {
  // Four QPs alike in everything but their number: only the ranking's last
  // tie-break (the key) decides which two are the "worst".
  for (uint32_t k = 0; k < 4; ++k) dp_->egress(roce(0x104 - k, 1));
  ExporterOptions o = options_for(dp_->pin_path());
  o.per_qp = true;
  o.top_qps = 2;
  Exporter ex(o);
  std::set<std::string> from_metrics;
  for (const auto& x : scrape(ex).samples)
    if (x.labels.count("qp")) from_metrics.insert(x.labels.at("qp"));

  CommandResult r =
      run_command({ROCEGUARD_BIN, "stats", "--pin-path", dp_->pin_path(), "--json", "--qp", "--top", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json stats = nlohmann::json::parse(r.output);
  std::set<std::string> from_stats;
  for (const auto& q : stats.at("qps"))
    from_stats.insert(std::to_string(q["dest_qp"].get<uint32_t>()));

  EXPECT_EQ(from_metrics, (std::set<std::string>{"257", "258"}));
  EXPECT_EQ(from_stats, from_metrics);
}

TEST_F(ExporterBpf, RealPrometheusScrapesTheSameNumbers) {
  send_traffic(*dp_);
  Exporter ex(options_for(dp_->pin_path()));
  TempDir tmp("prometheus");
  const uint16_t prom_port = free_port();
  write_file(tmp.path() + "/prometheus.yml",
             "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
             "scrape_configs:\n  - job_name: roceguard\n    static_configs:\n"
             "      - targets: ['" + ex.listen_address() + "']\n");
  const std::string log = tmp.path() + "/prometheus.log";
  Child prom({"prometheus", "--config.file=" + tmp.path() + "/prometheus.yml",
              "--storage.tsdb.path=" + tmp.path() + "/data",
              "--web.listen-address=127.0.0.1:" + std::to_string(prom_port), "--log.level=warn"},
             log);

  const auto rows = MapReader(dp_->pin_path()).counters();
  std::map<std::string, double> want;  // "<interface>/<direction>" -> packets
  for (const auto& r : rows)
    want[ifname_of(r.ifindex) + "/" + std::string(direction_name(r.direction))] =
        static_cast<double>(r.ev[RG_EV_ROCE_PACKETS].packets);

  std::map<std::string, double> got;
  std::string last;
  // Bounded: up to 240 polls half a second apart, while Prometheus starts
  // and scrapes its first samples.
  for (int i = 0; i < 240 && got != want; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    ASSERT_TRUE(prom.running()) << "prometheus exited:\n" << read_file(log);
    HttpReply r;
    try {
      r = http_get("127.0.0.1", prom_port, "/api/v1/query?query=roceguard_roce_packets_total");
    } catch (const std::exception&) {
      continue;  // not listening yet
    }
    last = r.body;
    if (r.status != 200) continue;
    auto j = nlohmann::json::parse(r.body);
    got.clear();
    for (const auto& res : j["data"]["result"])
      got[res["metric"]["interface"].get<std::string>() + "/" +
          res["metric"]["direction"].get<std::string>()] =
          std::stod(res["value"][1].get<std::string>());
  }
  EXPECT_EQ(got, want) << "last answer: " << last << "\nlog:\n" << read_file(log);
  EXPECT_EQ(got["lo/egress"], 5);
  EXPECT_EQ(got["lo/ingress"], 7);
}

TEST(Exporter, MissingPinsGiveNoBpfSeriesAndCountErrors) {
  Exporter ex(options_for("/sys/fs/bpf/rgex-" + std::to_string(getpid()) + "-absent"));
  for (int i = 1; i <= 2; ++i) {
    Scrape s = scrape(ex);
    ASSERT_EQ(s.status, 200) << s.body;
    EXPECT_EQ(value_of(s.samples, "roceguard_maps_up"), 0);
    EXPECT_EQ(value_of(s.samples, "roceguard_scrape_errors_total"), i);
    EXPECT_TRUE(find(s.samples, "roceguard_roce_packets_total").empty());
    EXPECT_TRUE(find(s.samples, "roceguard_map_entries").empty());
    EXPECT_EQ(value_of(s.samples, "roceguard_build_info", {{"version", ROCEGUARD_VERSION}}), 1);
  }
}

const double kLoadedAt = static_cast<double>(std::time(nullptr));

// The process_* series of every Prometheus client library, from
// /proc/self (the exporter runs in this test's process), and the build's
// revision as `roceguard --version` prints it.
TEST(Exporter, ProcessSeriesAndBuildRevision) {
  Exporter ex(options_for("/nonexistent"));
  Scrape s = scrape(ex);
  ASSERT_EQ(s.status, 200) << s.body;
  EXPECT_EQ(value_of(s.samples, "roceguard_build_info",
                     {{"version", ROCEGUARD_VERSION}, {"revision", running_version().revision}}),
            1);
  EXPECT_EQ(s.body.find("unknown\"}"), std::string::npos) << "this build is a git checkout: its revision is known";
  for (const char* name : {"process_cpu_seconds_total", "process_resident_memory_bytes",
                           "process_virtual_memory_bytes", "process_start_time_seconds", "process_open_fds",
                           "process_max_fds"})
    EXPECT_TRUE(value_of(s.samples, name).has_value()) << name << " missing";
  EXPECT_NE(s.body.find("# TYPE process_cpu_seconds_total counter"), std::string::npos);
  const double rss = *value_of(s.samples, "process_resident_memory_bytes");
  EXPECT_GT(rss, 1 << 20) << "a process with libbpf and a scrape server holds more than 1 MiB";
  EXPECT_GE(*value_of(s.samples, "process_virtual_memory_bytes"), rss);
  rlimit nofile{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &nofile), 0);
  EXPECT_EQ(*value_of(s.samples, "process_max_fds"), static_cast<double>(nofile.rlim_cur));
  // stdin, stdout, stderr, the listening socket and the scrape's own.
  EXPECT_GE(*value_of(s.samples, "process_open_fds"), 5);
  // This process started before its static objects were made, and not a
  // minute before (btime is in whole seconds: a second either way).
  const double start = *value_of(s.samples, "process_start_time_seconds");
  EXPECT_LE(start, kLoadedAt + 1);
  EXPECT_GE(start, kLoadedAt - 60);
  const CommandResult check = promtool_check_metrics(s.body);
  EXPECT_EQ(check.exit_code, 0) << check.output;
}

TEST(Exporter, ServesOnlyTheMetricsPath) {
  Exporter ex(options_for("/sys/fs/bpf/rgex-" + std::to_string(getpid()) + "-absent"));
  EXPECT_EQ(scrape(ex, "/metrics").status, 200);
  EXPECT_EQ(scrape(ex, "/metrics?debug=1").status, 200);
  for (const char* path : {"/", "/metrics/", "/metrics/x", "/metricsx", "/index.html", "/-/ready"})
    EXPECT_EQ(scrape(ex, path).status, 404) << path;
}

// Holds every scrape at the exporter's "scrape" pause point until opened:
// the HTTP workers then stay busy for as long as a test needs, however
// fast the machine. Installed for one test, removed (and opened) after.
class ScrapeGate {
 public:
  ScrapeGate() {
    gate_ = this;
    set_pause_handler(&ScrapeGate::hold);
  }
  ~ScrapeGate() {
    open();
    set_pause_handler(nullptr);
    gate_ = nullptr;
  }
  ScrapeGate(const ScrapeGate&) = delete;
  ScrapeGate& operator=(const ScrapeGate&) = delete;

  // True once n scrapes are held; waits at most 30 s.
  bool wait_held(size_t n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(30), [&] { return held_ >= n; });
  }
  void open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  static void hold(const char* point) {
    if (std::strcmp(point, "scrape") != 0 || !gate_) return;
    std::unique_lock lock(gate_->mu_);
    ++gate_->held_;
    gate_->cv_.notify_all();
    // Bounded: a test that forgets to open the gate fails, it does not hang.
    gate_->cv_.wait_for(lock, std::chrono::seconds(120), [] { return gate_->open_; });
  }

  static inline ScrapeGate* gate_ = nullptr;
  std::mutex mu_;
  std::condition_variable cv_;
  size_t held_ = 0;
  bool open_ = false;
};

// TCP connections to host:port that never send a byte, closed on scope exit.
class IdleClients {
 public:
  IdleClients(const std::string& host, uint16_t port, size_t n) {
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    inet_pton(AF_INET, host.c_str(), &sa.sin_addr);
    for (size_t i = 0; i < n; ++i) {
      int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) throw std::runtime_error("socket");
      fds_.push_back(fd);
      if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0)
        throw std::runtime_error("connect " + host + ":" + std::to_string(port) + ": " + strerror(errno));
    }
  }
  ~IdleClients() {
    for (int fd : fds_) close(fd);
  }
  IdleClients(const IdleClients&) = delete;
  IdleClients& operator=(const IdleClients&) = delete;

 private:
  std::vector<int> fds_;
};

std::pair<std::string, uint16_t> host_port(const std::string& addr) {
  const auto colon = addr.rfind(':');
  return {addr.substr(0, colon), static_cast<uint16_t>(std::stoi(addr.substr(colon + 1)))};
}

// Sends request as it is and returns everything answered until the server
// closes (each receive bounded to 10 s).
std::string raw_exchange(const std::string& host, uint16_t port, const std::string& request) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("socket");
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  inet_pton(AF_INET, host.c_str(), &sa.sin_addr);
  std::string in;
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0 &&
      send(fd, request.data(), request.size(), MSG_NOSIGNAL) >= 0) {
    char buf[4096];
    for (int i = 0; i < 64; ++i) {
      const ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      in.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  return in;
}

// Where the exporter answers health probes (ExporterOptions::health_listen),
// and its liveness path.
std::pair<std::string, uint16_t> health_endpoint(const Exporter& ex) { return host_port(ex.health_address()); }
constexpr const char* kLivenessPath = "/livez";

// Kubernetes probes hit /livez and /readyz every few seconds: they must
// answer without walking the maps, which is what a /metrics scrape with
// missing pins counts as an error (MissingPinsGiveNoBpfSeriesAndCountErrors),
// and on the probes' own address only: the scrape server answers them 404,
// since there they would wait for its workers.
TEST(Exporter, HealthAnswersWithoutCollecting) {
  ExporterOptions o = options_for("/sys/fs/bpf/rgex-" + std::to_string(getpid()) + "-absent");
  o.health_listen = "127.0.0.1:0";
  o.interfaces = {"lo"};
  Exporter ex(o);
  const auto [host, port] = host_port(ex.health_address());
  ASSERT_NE(port, host_port(ex.listen_address()).second);
  for (int i = 0; i < 3; ++i) {
    HttpReply live = http_get(host, port, "/livez");
    EXPECT_EQ(live.status, 200);
    EXPECT_EQ(live.body, "ok\n");
    HttpReply ready = http_get(host, port, "/readyz?verbose");
    EXPECT_EQ(ready.status, 503);
    EXPECT_EQ(ready.body, "not ready: nothing attached (not attached: lo)\n");
  }
  for (const char* path : {"/livez/", "/livezx", "/healthz", "/health", "/metrics", "/", "/readyz/x"})
    EXPECT_EQ(http_get(host, port, path).status, 404) << path;
  for (const char* path : {"/healthz", "/livez", "/readyz"})
    EXPECT_EQ(scrape(ex, path).status, 404) << path << " on the scrape server";
  Scrape s = scrape(ex);
  ASSERT_EQ(s.status, 200) << s.body;
  EXPECT_EQ(value_of(s.samples, "roceguard_scrape_errors_total"), 1);
}

// Readiness is what the loader reported last: ready once an interface has
// roceguard's program at every hook it uses (the one ingress hook in use and
// TC egress), not while only some are; exporter-only mode attaches nothing
// by design and is ready. Liveness answers all along.
TEST(Exporter, ReadyOnceAnInterfaceHasEveryHook) {
  ExporterOptions o = options_for("/sys/fs/bpf/rgex-" + std::to_string(getpid()) + "-absent");
  o.health_listen = "127.0.0.1:0";
  o.interfaces = {"lo", "rgex-absent0"};
  Exporter ex(o);
  const auto [host, port] = host_port(ex.health_address());
  auto ready = [&, host = host, port = port] { return http_get(host, port, "/readyz"); };
  EXPECT_EQ(ready().body, "not ready: nothing attached (not attached: lo, rgex-absent0)\n");
  ex.set_attach_state("lo", "tc_egress", true);
  EXPECT_EQ(ready().status, 503) << "the ingress hook is still missing";
  ex.set_attach_state("lo", "xdp_ingress", true);
  HttpReply r = ready();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "ready: attached to lo; not attached: rgex-absent0\n");
  ex.set_ingress_hook("lo", "tc_ingress");
  EXPECT_EQ(ready().status, 503) << "moved to TC ingress, not attached there yet";
  ex.set_attach_state("lo", "tc_ingress", true);
  EXPECT_EQ(ready().status, 200);
  ex.set_attach_state("lo", "tc_egress", false);
  EXPECT_EQ(ready().status, 503);
  EXPECT_EQ(http_get(host, port, "/livez").status, 200);

  // A probe's answer follows HTTP: HEAD has no body, other methods 405,
  // a request too large for a probe 431.
  const std::string reply = raw_exchange(host, port, "HEAD /livez HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(reply.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << reply;
  EXPECT_NE(reply.find("Content-Length: 3\r\n"), std::string::npos) << reply;
  EXPECT_EQ(reply.substr(reply.find("\r\n\r\n") + 4), "") << reply;
  EXPECT_EQ(raw_exchange(host, port, "POST /livez HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405", 0), 0u);
  EXPECT_EQ(raw_exchange(host, port, "GET /livez HTTP/1.1\r\nX: " + std::string(8192, 'x') + "\r\n\r\n")
                .rfind("HTTP/1.1 431", 0), 0u);
  EXPECT_EQ(raw_exchange(host, port, "nonsense\r\n\r\n").rfind("HTTP/1.1 400", 0), 0u);

  ExporterOptions exporter_only = o;
  exporter_only.dataplane = false;
  exporter_only.health_listen = "127.0.0.1:0";
  exporter_only.listen = "127.0.0.1:0";
  Exporter eo(exporter_only);
  const auto [eo_host, eo_port] = host_port(eo.health_address());
  EXPECT_EQ(http_get(eo_host, eo_port, "/readyz").status, 200);

  Exporter none(options_for("/nonexistent"));
  EXPECT_EQ(none.health_address(), "") << "no probes unless asked for";
}

TEST(Exporter, HealthAddressErrorsNameTheAddress) {
  ExporterOptions o = options_for("/nonexistent");
  o.health_listen = "127.0.0.1:0";
  Exporter first(o);
  ExporterOptions second = options_for("/nonexistent");
  second.health_listen = first.health_address();
  try {
    Exporter ex(second);
    ADD_FAILURE() << "a second exporter bound " << second.health_listen << " too";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(second.health_listen), std::string::npos) << e.what();
    EXPECT_EQ(e.exit_code(), kExitFailure);
  }
  second.health_listen = "localhost:1";
  try {
    Exporter ex(second);
    ADD_FAILURE() << "localhost:1 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), kExitUsage) << e.what();
  }
}

// A probe has a deadline (Kubernetes: 1 s by default) and the scrape
// server a few workers: health must not queue behind them. Every worker is
// held inside a scrape, and more idle connections than there are workers
// are open on the health endpoint, for as long as the test runs: the
// liveness and readiness answers must still come (within a client deadline
// far beyond anything a health answer itself needs).
TEST(Exporter, HealthAnswersWhileEveryScrapeWorkerIsHeld) {
  ScrapeGate gate;
  ExporterOptions o = options_for("/sys/fs/bpf/rgex-" + std::to_string(getpid()) + "-absent");
  o.threads = 2;
  o.health_listen = "127.0.0.1:0";
  o.interfaces = {"lo"};
  Exporter ex(o);
  const auto [mhost, mport] = host_port(ex.listen_address());
  std::vector<std::thread> scrapes;
  std::vector<int> statuses(o.threads, 0);
  for (size_t i = 0; i < o.threads; ++i)
    scrapes.emplace_back([&, i] {
      try {
        statuses[i] = http_get(mhost, mport, "/metrics", 60).status;
      } catch (const std::exception&) {
        statuses[i] = -1;
      }
    });
  ASSERT_TRUE(gate.wait_held(o.threads)) << "the scrapes never reached the exporter's workers";
  const auto [host, port] = health_endpoint(ex);
  IdleClients idle(host, port, 2 * o.threads + 2);

  std::string failure;
  try {
    HttpReply live = http_get(host, port, kLivenessPath, 10);
    EXPECT_EQ(live.status, 200);
    EXPECT_EQ(live.body, "ok\n");
    EXPECT_EQ(http_get(host, port, "/readyz", 10).status, 503) << "nothing attached yet";
    ex.set_attach_state("lo", "tc_egress", true);
    ex.set_attach_state("lo", "xdp_ingress", true);
    EXPECT_EQ(http_get(host, port, "/readyz", 10).status, 200);
  } catch (const std::exception& e) {
    failure = e.what();
  }
  gate.open();
  for (auto& t : scrapes) t.join();
  EXPECT_EQ(failure, "") << "no health answer within 10 s while " << o.threads
                         << " scrapes held every worker and " << 2 * o.threads + 2 << " clients sat idle";
  for (int status : statuses) EXPECT_EQ(status, 200) << "a held scrape must complete once released";
}

TEST(Exporter, BusyPortIsAnErrorNamingTheAddress) {
  Exporter first(options_for("/nonexistent"));
  ExporterOptions o = options_for("/nonexistent");
  o.listen = first.listen_address();
  try {
    Exporter second(o);
    FAIL() << "second exporter bound " << o.listen << " too";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(o.listen), std::string::npos) << e.what();
  }
}

// Both families are served: [v6]:port binds IPv6 only, and the address
// reported back keeps its brackets.
TEST(Exporter, Ipv6ListenServes) {
  ExporterOptions o = options_for("/nonexistent");
  o.listen = "[::1]:0";
  Exporter ex(o);
  EXPECT_EQ(ex.listen_address().rfind("[::1]:", 0), 0u) << ex.listen_address();
  Scrape s = scrape(ex);
  EXPECT_EQ(s.status, 200);
  EXPECT_EQ(value_of(s.samples, "roceguard_maps_up"), 0);
  const auto port = static_cast<uint16_t>(std::stoi(ex.listen_address().substr(ex.listen_address().rfind(':') + 1)));
  EXPECT_THROW(http_get("127.0.0.1", port, "/metrics", 5), std::exception) << "an IPv6 address serves IPv4 too";
}

}  // namespace
}  // namespace rg::test
