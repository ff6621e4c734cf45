// NIC counters against a sysfs tree built in a temp dir with the files rxe
// and mlx5 really have, each device bound to its netdev in one of the three
// ways sysfs says it; and the mapping of each driver's hw_counters to one
// metric per meaning against the trees recorded in data/hw_counters/.
#include "nic/counters.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "metrics/exporter.h"
#include "scrape.h"

namespace rg::test {
namespace {

namespace fs = std::filesystem;
using nic::nic_counter_name;
using nic::rdma_ports_of;

const std::string kTrees = std::string(ROCEGUARD_TEST_DATA) + "/hw_counters";

class FakeSysfs {
 public:
  FakeSysfs() : dir_("sysfs") {
    // rxe0 is found through a GID of its port (gid_attrs/ndevs); slot 1 is
    // unpopulated, which on real sysfs reads as EINVAL and here as empty.
    port("rxe0", 1, "gid_attrs/ndevs/0", "rgexr0");
    port("rxe0", 1, "gid_attrs/ndevs/1", "");
    for (auto [name, v] : std::initializer_list<std::pair<const char*, const char*>>{
             {"sent_pkts", "1000"},          {"rcvd_pkts", "990"},
             {"duplicate_request", "3"},     {"out_of_seq_request", "4"},
             {"rcvd_seq_err", "5"},          {"retry_exceeded_err", "1"},
             {"retry_rnr_exceeded_err", "0"}, {"rcvd_rnr_err", "2"},
             {"send_rnr_err", "6"},          {"completer_retry_err", "7"},
             {"ack_deferred", "8"},          {"send_err", "0"},
             {"link_downed", "0"},           {"rdma_sends", "11"},
             {"rdma_recvs", "12"},           {"lifespan", "10"}})
      port("rxe0", 1, std::string("hw_counters/") + name, v);

    // rxe1 only names its parent netdev (no GID yet).
    file("class/infiniband/rxe1/parent", "rgexr1");
    port("rxe1", 1, "hw_counters/rcvd_seq_err", "42");

    // mlx5_0 hangs off the netdev's PCI function, bound to mlx5_core, and
    // has both directories; link_downed is in both.
    std::filesystem::create_directories(root() + "/class/net/rgexm0/device/infiniband/mlx5_0");
    driver("mlx5_0", "mlx5_core");
    for (auto [name, v] : std::initializer_list<std::pair<const char*, const char*>>{
             {"out_of_sequence", "21"},        {"packet_seq_err", "22"},
             {"local_ack_timeout_err", "23"},  {"np_cnp_sent", "24"},
             {"rp_cnp_handled", "25"},         {"roce_adp_retrans", "26"},
             {"duplicate_request", "27"},      {"implied_nak_seq_err", "28"},
             {"rnr_nak_retry_err", "29"},      {"np_ecn_marked_roce_packets", "30"},
             {"roce_slow_restart", "31"},      {"link_downed", "99"},
             {"lifespan", "12"},               {"broken", "n/a"}})
      port("mlx5_0", 1, std::string("hw_counters/") + name, v);
    for (auto [name, v] : std::initializer_list<std::pair<const char*, const char*>>{
             {"port_xmit_data", "1000"},   {"port_rcv_data", "250"},
             {"port_xmit_packets", "40"},  {"port_rcv_packets", "41"},
             {"port_rcv_errors", "1"},     {"port_xmit_discards", "2"},
             {"port_xmit_wait", "3"},      {"unicast_xmit_packets", "4"},
             {"link_downed", "5"},         {"symbol_error", "6"},
             {"VL15_dropped", "7"}})
      port("mlx5_0", 1, std::string("counters/") + name, v);

    // A device of an interface nobody asked about.
    port("mlx5_1", 1, "gid_attrs/ndevs/0", "rgexother");
    port("mlx5_1", 1, "hw_counters/out_of_sequence", "1");
  }
  const std::string& root() const { return dir_.path(); }

 private:
  // class/infiniband/<dev>/device/driver, a link as sysfs has it (its
  // name is all that is read).
  void driver(const std::string& dev, const std::string& name) {
    const std::string dir = root() + "/class/infiniband/" + dev + "/device";
    std::filesystem::create_directories(dir);
    std::filesystem::create_directory_symlink("../../../../bus/pci/drivers/" + name, dir + "/driver");
  }
  void file(const std::string& rel, const std::string& text) {
    write_file(root() + "/" + rel, text.empty() ? text : text + "\n");
  }
  void port(const std::string& dev, int p, const std::string& rel, const std::string& text) {
    file("class/infiniband/" + dev + "/ports/" + std::to_string(p) + "/" + rel, text);
  }
  TempDir dir_;
};

TEST(NicCounters, FindsTheRdmaPortsOfAnInterfaceEveryWaySysfsSaysIt) {
  FakeSysfs fs;
  auto one = [&](const std::string& ifname) {
    auto ports = rdma_ports_of(ifname, fs.root());
    return ports.size() == 1 ? ports[0].device + "/" + std::to_string(ports[0].port) : "none";
  };
  EXPECT_EQ(one("rgexr0"), "rxe0/1");
  EXPECT_EQ(one("rgexr1"), "rxe1/1");
  EXPECT_EQ(one("rgexm0"), "mlx5_0/1");
  EXPECT_EQ(one("rgexnone"), "none");
  EXPECT_TRUE(rdma_ports_of("rgexr0", fs.root() + "/absent").empty());
}

TEST(NicCounters, NamesFollowNodeExporter) {
  EXPECT_EQ(nic_counter_name("counters", "port_xmit_data").name, "port_data_transmitted_bytes");
  EXPECT_EQ(nic_counter_name("counters", "port_xmit_data").scale, 4u);
  EXPECT_EQ(nic_counter_name("counters", "port_rcv_data").name, "port_data_received_bytes");
  EXPECT_EQ(nic_counter_name("counters", "port_rcv_packets").name, "port_packets_received");
  EXPECT_EQ(nic_counter_name("counters", "VL15_dropped").name, "vl15_dropped");
  EXPECT_EQ(nic_counter_name("hw_counters", "out_of_sequence").name, "out_of_sequence");
  EXPECT_EQ(nic_counter_name("hw_counters", "rcvd_seq_err").name, "rcvd_seq_err");
  EXPECT_EQ(nic_counter_name("hw_counters", "lifespan").name, "");
}

TEST(NicCounters, ExporterShowsRxeAndMlx5CountersByInterface) {
  FakeSysfs fs;
  ExporterOptions o;
  o.listen = "127.0.0.1:0";
  o.pin_path = "/sys/fs/bpf/rgex-" + std::to_string(getpid()) + "-absent";
  o.sysfs_root = fs.root();
  o.interfaces = {"rgexr0", "rgexr1", "rgexm0", "rgexnone"};
  Exporter ex(o);
  const std::string addr = ex.listen_address();
  HttpReply r = http_get("127.0.0.1", static_cast<uint16_t>(std::stoi(addr.substr(addr.rfind(':') + 1))),
                         "/metrics");
  ASSERT_EQ(r.status, 200);
  auto s = parse_exposition(r.body);
  auto at = [&](const std::string& name, const std::string& dev, const std::string& ifname) {
    return value_of(s, "roceguard_nic_" + name + "_total",
                    {{"device", dev}, {"port", "1"}, {"interface", ifname}});
  };
  // hw_counters under the driver's own file name.
  auto raw = [&](const std::string& file, const std::string& dev, const std::string& ifname) {
    return value_of(s, "roceguard_nic_hw_raw_total",
                    {{"device", dev}, {"port", "1"}, {"interface", ifname}, {"file", file}});
  };
  // rxe's names.
  EXPECT_EQ(raw("rcvd_seq_err", "rxe0", "rgexr0"), 5);
  EXPECT_EQ(raw("duplicate_request", "rxe0", "rgexr0"), 3);
  EXPECT_EQ(raw("retry_exceeded_err", "rxe0", "rgexr0"), 1);
  EXPECT_EQ(raw("out_of_seq_request", "rxe0", "rgexr0"), 4);
  EXPECT_EQ(raw("sent_pkts", "rxe0", "rgexr0"), 1000);
  EXPECT_EQ(raw("link_downed", "rxe0", "rgexr0"), 0);
  EXPECT_EQ(raw("rcvd_seq_err", "rxe1", "rgexr1"), 42);
  // mlx5's names.
  EXPECT_EQ(raw("out_of_sequence", "mlx5_0", "rgexm0"), 21);
  EXPECT_EQ(raw("packet_seq_err", "mlx5_0", "rgexm0"), 22);
  EXPECT_EQ(raw("local_ack_timeout_err", "mlx5_0", "rgexm0"), 23);
  EXPECT_EQ(raw("np_cnp_sent", "mlx5_0", "rgexm0"), 24);
  EXPECT_EQ(raw("rp_cnp_handled", "mlx5_0", "rgexm0"), 25);
  EXPECT_EQ(raw("roce_adp_retrans", "mlx5_0", "rgexm0"), 26);
  EXPECT_EQ(raw("implied_nak_seq_err", "mlx5_0", "rgexm0"), 28);
  EXPECT_EQ(raw("rnr_nak_retry_err", "mlx5_0", "rgexm0"), 29);
  // One name per meaning, whichever driver: rxe's rcvd_seq_err and mlx5's
  // packet_seq_err are both packet_seq_err, told apart by the driver label.
  EXPECT_EQ(value_of(s, "roceguard_nic_packet_seq_err_total",
                     {{"device", "rxe0"}, {"interface", "rgexr0"}, {"driver", "rxe"}}),
            5);
  EXPECT_EQ(value_of(s, "roceguard_nic_packet_seq_err_total",
                     {{"device", "rxe1"}, {"interface", "rgexr1"}, {"driver", "rxe"}}),
            42);
  EXPECT_EQ(value_of(s, "roceguard_nic_packet_seq_err_total",
                     {{"device", "mlx5_0"}, {"interface", "rgexm0"}, {"driver", "mlx5"}}),
            22);
  EXPECT_EQ(at("out_of_sequence", "rxe0", "rgexr0"), 4);
  EXPECT_EQ(at("out_of_sequence", "mlx5_0", "rgexm0"), 21);
  EXPECT_EQ(at("req_transport_retries_exceeded", "rxe0", "rgexr0"), 1);
  EXPECT_EQ(at("rnr_nak_retry_err", "rxe0", "rgexr0"), 2);
  EXPECT_EQ(at("rnr_nak_retry_err", "mlx5_0", "rgexm0"), 29);
  // IBA port counters: data in 4-byte words exported as bytes.
  EXPECT_EQ(at("port_data_transmitted_bytes", "mlx5_0", "rgexm0"), 4000);
  EXPECT_EQ(at("port_data_received_bytes", "mlx5_0", "rgexm0"), 1000);
  EXPECT_EQ(at("port_packets_transmitted", "mlx5_0", "rgexm0"), 40);
  EXPECT_EQ(at("port_packets_received", "mlx5_0", "rgexm0"), 41);
  EXPECT_EQ(at("vl15_dropped", "mlx5_0", "rgexm0"), 7);
  // The IBA port counter and the driver's file of the same name apart.
  EXPECT_EQ(at("link_downed", "mlx5_0", "rgexm0"), 5);
  EXPECT_EQ(raw("link_downed", "mlx5_0", "rgexm0"), 99);
  // Not counters, not numbers, not asked for: absent.
  EXPECT_TRUE(find(s, "roceguard_nic_lifespan_total").empty());
  EXPECT_TRUE(find(s, "roceguard_nic_hw_raw_total", {{"file", "lifespan"}}).empty());
  EXPECT_TRUE(find(s, "roceguard_nic_hw_raw_total", {{"file", "broken"}}).empty());
  EXPECT_TRUE(find(s, "roceguard_nic_hw_raw_total", {{"device", "mlx5_1"}}).empty());
  EXPECT_TRUE(find(s, "roceguard_nic_out_of_sequence_total", {{"device", "mlx5_1"}}).empty());
  EXPECT_TRUE(find(s, "roceguard_nic_out_of_sequence_total", {{"interface", "rgexnone"}}).empty());
  EXPECT_EQ(value_of(s, "roceguard_attached", {{"interface", "rgexnone"}, {"hook", "xdp_ingress"}}),
            0);

  CommandResult check = promtool_check_metrics(r.body);
  EXPECT_EQ(check.exit_code, 0) << check.output << "\n--- scraped:\n" << r.body;
  EXPECT_EQ(check.output, "") << "promtool has lint remarks";
}

// One recorded tree (data/hw_counters/<tree>) as port 1 of an RDMA device
// on netdev rgexn0, bound the way its driver binds (rxe: its parent; the
// others: the PCI function's driver).
struct RecordedTree {
  const char* tree;
  const char* device;
  const char* kernel_driver;  // the driver link's name; "" for rxe
  const char* driver;         // the driver label
  // meaning metric -> the file it must come from; nothing else.
  std::map<std::string, std::string> meanings;
  std::set<std::string> gauges;  // files exported as gauges; nothing else
};

std::set<std::string> bnxt_re_gauges() {
  std::set<std::string> out{"db_fifo_register"};
  for (const char* what : {"pds", "ahs", "qps", "rc_qps", "ud_qps", "srqs", "cqs", "mrs", "mws"}) {
    out.insert(std::string("active_") + what);
    out.insert(std::string("watermark_") + what);
  }
  return out;
}

const std::vector<RecordedTree>& recorded_trees() {
  static const std::vector<RecordedTree> trees = {
      {"mlx5", "mlx5_0", "mlx5_core", "mlx5",
       {{"out_of_sequence", "out_of_sequence"},
        {"packet_seq_err", "packet_seq_err"},
        {"implied_nak_seq_err", "implied_nak_seq_err"},
        {"local_ack_timeout_err", "local_ack_timeout_err"},
        {"duplicate_request", "duplicate_request"},
        {"rnr_nak_retry_err", "rnr_nak_retry_err"},
        {"np_cnp_sent", "np_cnp_sent"},
        {"rp_cnp_handled", "rp_cnp_handled"},
        {"np_ecn_marked_roce_packets", "np_ecn_marked_roce_packets"},
        {"req_transport_retries_exceeded", "req_transport_retries_exceeded"},
        {"req_rnr_retries_exceeded", "req_rnr_retries_exceeded"}},
       {}},
      {"rxe", "rxe0", "", "rxe",
       {{"out_of_sequence", "out_of_seq_request"},
        {"packet_seq_err", "rcvd_seq_err"},
        {"duplicate_request", "duplicate_request"},
        {"rnr_nak_retry_err", "rcvd_rnr_err"},
        {"req_transport_retries_exceeded", "retry_exceeded_err"},
        {"req_rnr_retries_exceeded", "retry_rnr_exceeded_err"}},
       {}},
      {"bnxt_re", "bnxt_re0", "bnxt_en", "bnxt_re",
       {{"out_of_sequence", "oos_drop_count"},
        {"packet_seq_err", "seq_err_naks_rcvd"},
        {"implied_nak_seq_err", "missing_resp"},
        {"local_ack_timeout_err", "to_retransmits"},
        {"duplicate_request", "dup_req"},
        {"rnr_nak_retry_err", "rnr_naks_rcvd"},
        {"np_cnp_sent", "tx_cnp_pkts"},
        {"rp_cnp_handled", "rx_cnp_pkts"},
        {"np_ecn_marked_roce_packets", "rx_ecn_marked_pkts"},
        {"req_transport_retries_exceeded", "max_retry_exceeded"}},
       bnxt_re_gauges()},
      {"bnxt_re-2025", "bnxt_re1", "bnxt_en", "bnxt_re",
       {{"out_of_sequence", "out_of_sequence"},
        {"packet_seq_err", "packet_seq_err"},
        {"implied_nak_seq_err", "implied_nak_seq_err"},
        {"local_ack_timeout_err", "local_ack_timeout_err"},
        {"duplicate_request", "duplicate_request"},
        {"rnr_nak_retry_err", "rnr_nak_retry_err"},
        {"np_cnp_sent", "np_cnp_pkts"},
        {"rp_cnp_handled", "rp_cnp_handled"},
        {"np_ecn_marked_roce_packets", "np_ecn_marked_roce_packets"},
        {"req_transport_retries_exceeded", "max_retry_exceeded"}},
       bnxt_re_gauges()},
  };
  return trees;
}

double file_value(const std::string& path) { return std::stod(read_file(path)); }

TEST(NicCounters, RecordedTreesYieldOneSeriesPerMeaningWithTheirDriver) {
  for (const auto& t : recorded_trees()) {
    SCOPED_TRACE(t.tree);
    TempDir dir("sysfs");
    const std::string dev = dir.path() + "/class/infiniband/" + t.device;
    const std::string src = kTrees + "/" + t.tree;
    ASSERT_TRUE(fs::is_directory(src)) << src;
    fs::create_directories(dev + "/ports/1");
    fs::copy(src, dev + "/ports/1/hw_counters", fs::copy_options::recursive);
    if (*t.kernel_driver) {
      write_file(dev + "/ports/1/gid_attrs/ndevs/0", "rgexn0\n");
      fs::create_directories(dev + "/device");
      fs::create_directory_symlink(std::string("../../../../bus/pci/drivers/") + t.kernel_driver,
                                   dev + "/device/driver");
    } else {
      write_file(dev + "/parent", "rgexn0\n");
    }

    ExporterOptions o;
    o.listen = "127.0.0.1:0";
    o.pin_path = "/sys/fs/bpf/rgex-" + std::to_string(getpid()) + "-absent";
    o.sysfs_root = dir.path();
    o.interfaces = {"rgexn0"};
    Exporter ex(o);
    const std::string addr = ex.listen_address();
    HttpReply r = http_get("127.0.0.1", static_cast<uint16_t>(std::stoi(addr.substr(addr.rfind(':') + 1))),
                           "/metrics");
    ASSERT_EQ(r.status, 200);
    const auto s = parse_exposition(r.body);
    const std::map<std::string, std::string> port{
        {"device", t.device}, {"port", "1"}, {"interface", "rgexn0"}, {"driver", t.driver}};

    // Exactly the expected meanings, each from its file.
    std::map<std::string, double> meanings;
    for (const auto& sample : s) {
      if (!sample.name.starts_with("roceguard_nic_") || sample.name == "roceguard_nic_hw_raw_total" ||
          sample.name == "roceguard_nic_hw_raw_level")
        continue;
      EXPECT_EQ(sample.labels, port) << sample.name;
      EXPECT_TRUE(sample.name.ends_with("_total")) << sample.name << " is not a counter";
      const std::string meaning =
          sample.name.substr(14, sample.name.size() - 14 - std::string("_total").size());
      EXPECT_TRUE(meanings.emplace(meaning, sample.value).second) << sample.name << " twice";
    }
    std::map<std::string, double> expected;
    for (const auto& [meaning, file] : t.meanings) expected[meaning] = file_value(src + "/" + file);
    EXPECT_EQ(meanings, expected);

    // Every file under its own name, in the family of its kind; lifespan
    // (a cache time) in none.
    std::map<std::string, double> counters, gauges;
    for (const auto& sample : find(s, "roceguard_nic_hw_raw_total", port))
      counters[sample.labels.at("file")] = sample.value;
    for (const auto& sample : find(s, "roceguard_nic_hw_raw_level", port))
      gauges[sample.labels.at("file")] = sample.value;
    size_t files = 0;
    for (const auto& e : fs::directory_iterator(src)) {
      const std::string name = e.path().filename().string();
      if (name == "lifespan") {
        EXPECT_FALSE(counters.count(name) || gauges.count(name));
        continue;
      }
      ++files;
      const double v = file_value(e.path().string());
      if (t.gauges.count(name))
        EXPECT_EQ(gauges[name], v) << name;
      else
        EXPECT_EQ(counters[name], v) << name;
    }
    EXPECT_EQ(counters.size() + gauges.size(), files);
    EXPECT_EQ(gauges.size(), t.gauges.size());
    if (!t.gauges.empty()) {
      EXPECT_NE(r.body.find("# TYPE roceguard_nic_hw_raw_level gauge\n"), std::string::npos) << r.body;
    }

    CommandResult check = promtool_check_metrics(r.body);
    EXPECT_EQ(check.exit_code, 0) << check.output << "\n--- scraped:\n" << r.body;
    EXPECT_EQ(check.output, "") << "promtool has lint remarks";
  }
}

// A port with two files of one meaning (bnxt_re's old and new name side by
// side, which no kernel has but a driver back-port might) still gives the
// meaning once, from the alternative the table lists first; both files stay
// available under their own names.
TEST(NicCounters, AMeaningComesOncePerPortFromItsFirstAlternative) {
  TempDir dir("sysfs");
  const std::string dev = dir.path() + "/class/infiniband/bnxt_re0";
  write_file(dev + "/ports/1/gid_attrs/ndevs/0", "rgexb0\n");
  write_file(dev + "/ports/1/hw_counters/to_retransmits", "5\n");
  write_file(dev + "/ports/1/hw_counters/local_ack_timeout_err", "6\n");
  fs::create_directories(dev + "/device");
  fs::create_directory_symlink("../../../../bus/pci/drivers/bnxt_en", dev + "/device/driver");
  size_t meant = 0, raw = 0;
  for (const auto& c : nic::read_nic_counters({"rgexb0"}, dir.path())) {
    EXPECT_EQ(c.driver, "bnxt_re");
    ++raw;
    if (c.name == "local_ack_timeout_err") {
      ++meant;
      EXPECT_EQ(c.file, "to_retransmits");
      EXPECT_EQ(c.value, 5u);
    }
  }
  EXPECT_EQ(meant, 1u);
  EXPECT_EQ(raw, 2u);
}

TEST(NicCounters, MeaningTableIsOneWayToEachThing) {
  std::set<std::string> metrics;
  const std::set<std::string> port_names = [] {
    std::set<std::string> out;
    for (const char* f : {"port_rcv_data", "port_xmit_data", "port_rcv_packets", "port_xmit_packets",
                          "port_rcv_errors", "port_xmit_discards", "port_rcv_constraint_errors",
                          "port_xmit_constraint_errors", "port_xmit_wait", "unicast_rcv_packets",
                          "unicast_xmit_packets", "multicast_rcv_packets", "multicast_xmit_packets",
                          "symbol_error", "link_error_recovery", "link_downed",
                          "local_link_integrity_errors", "excessive_buffer_overrun_errors",
                          "VL15_dropped", "port_rcv_remote_physical_errors",
                          "port_rcv_switch_relay_errors"})
      out.insert(nic_counter_name("counters", f).name);
    return out;
  }();
  for (const auto& m : nic::nic_meanings()) {
    if (m.metric.empty()) {
      EXPECT_EQ(m.kind, nic::NicValueKind::Gauge) << "a row without a metric only gives a kind";
      continue;
    }
    EXPECT_TRUE(metrics.insert(std::string(m.metric)).second) << m.metric << " twice";
    EXPECT_FALSE(m.help.empty()) << m.metric;
    // Not a name the port counters or the raw families take.
    EXPECT_FALSE(port_names.count(std::string(m.metric))) << m.metric;
    EXPECT_NE(m.metric, "hw_raw");
  }
  // Each file of each recorded tree means one thing at most: the row that
  // names it is the row the lookup finds.
  for (const auto& t : recorded_trees())
    for (const auto& e : fs::directory_iterator(kTrees + "/" + t.tree)) {
      const std::string file = e.path().filename().string();
      size_t rows = 0;
      for (const auto& m : nic::nic_meanings()) {
        std::string_view list = t.driver == std::string("mlx5")  ? m.mlx5
                                : t.driver == std::string("rxe") ? m.rxe
                                                                 : m.bnxt_re;
        while (!list.empty()) {
          const size_t bar = list.find('|');
          std::string_view alt = list.substr(0, bar);
          list = bar == std::string_view::npos ? std::string_view{} : list.substr(bar + 1);
          if (alt.ends_with('*') ? std::string_view(file).starts_with(alt.substr(0, alt.size() - 1))
                                 : alt == file)
            ++rows;
        }
      }
      EXPECT_LE(rows, 1u) << t.tree << "/" << file;
    }
  EXPECT_EQ(nic::rdma_driver_name("mlx5_core"), "mlx5");
  EXPECT_EQ(nic::rdma_driver_name("bnxt_en"), "bnxt_re");
  EXPECT_EQ(nic::rdma_driver_name("rxe"), "rxe");
  EXPECT_EQ(nic::rdma_driver_name("irdma"), "irdma");
  EXPECT_EQ(nic::nic_meaning_of("irdma", "out_of_sequence"), nullptr);
}

}  // namespace
}  // namespace rg::test
