// NIC counters against a sysfs tree built in a temp dir with the files rxe
// and mlx5 really have, each device bound to its netdev in one of the three
// ways sysfs says it.
#include "nic/counters.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "metrics/exporter.h"
#include "scrape.h"

namespace rg::test {
namespace {

using nic::nic_counter_name;
using nic::rdma_ports_of;

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

    // mlx5_0 hangs off the netdev's PCI function and has both directories;
    // link_downed is in both (the IBA one keeps the plain name).
    std::filesystem::create_directories(root() + "/class/net/rgexm0/device/infiniband/mlx5_0");
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
  // rxe's names.
  EXPECT_EQ(at("rcvd_seq_err", "rxe0", "rgexr0"), 5);
  EXPECT_EQ(at("duplicate_request", "rxe0", "rgexr0"), 3);
  EXPECT_EQ(at("retry_exceeded_err", "rxe0", "rgexr0"), 1);
  EXPECT_EQ(at("out_of_seq_request", "rxe0", "rgexr0"), 4);
  EXPECT_EQ(at("sent_pkts", "rxe0", "rgexr0"), 1000);
  EXPECT_EQ(at("link_downed", "rxe0", "rgexr0"), 0);
  EXPECT_EQ(at("rcvd_seq_err", "rxe1", "rgexr1"), 42);
  // mlx5's names.
  EXPECT_EQ(at("out_of_sequence", "mlx5_0", "rgexm0"), 21);
  EXPECT_EQ(at("packet_seq_err", "mlx5_0", "rgexm0"), 22);
  EXPECT_EQ(at("local_ack_timeout_err", "mlx5_0", "rgexm0"), 23);
  EXPECT_EQ(at("np_cnp_sent", "mlx5_0", "rgexm0"), 24);
  EXPECT_EQ(at("rp_cnp_handled", "mlx5_0", "rgexm0"), 25);
  EXPECT_EQ(at("roce_adp_retrans", "mlx5_0", "rgexm0"), 26);
  EXPECT_EQ(at("implied_nak_seq_err", "mlx5_0", "rgexm0"), 28);
  EXPECT_EQ(at("rnr_nak_retry_err", "mlx5_0", "rgexm0"), 29);
  // IBA port counters: data in 4-byte words exported as bytes.
  EXPECT_EQ(at("port_data_transmitted_bytes", "mlx5_0", "rgexm0"), 4000);
  EXPECT_EQ(at("port_data_received_bytes", "mlx5_0", "rgexm0"), 1000);
  EXPECT_EQ(at("port_packets_transmitted", "mlx5_0", "rgexm0"), 40);
  EXPECT_EQ(at("port_packets_received", "mlx5_0", "rgexm0"), 41);
  EXPECT_EQ(at("vl15_dropped", "mlx5_0", "rgexm0"), 7);
  EXPECT_EQ(at("link_downed", "mlx5_0", "rgexm0"), 5);
  EXPECT_EQ(at("hw_link_downed", "mlx5_0", "rgexm0"), 99);
  // Not counters, not numbers, not asked for: absent.
  EXPECT_TRUE(find(s, "roceguard_nic_lifespan_total").empty());
  EXPECT_TRUE(find(s, "roceguard_nic_broken_total").empty());
  EXPECT_TRUE(find(s, "roceguard_nic_out_of_sequence_total", {{"device", "mlx5_1"}}).empty());
  EXPECT_TRUE(find(s, "roceguard_nic_out_of_sequence_total", {{"interface", "rgexnone"}}).empty());
  EXPECT_EQ(value_of(s, "roceguard_attached", {{"interface", "rgexnone"}, {"hook", "xdp_ingress"}}),
            0);

  TempDir tmp("scrape");
  write_file(tmp.path() + "/metrics.txt", r.body);
  CommandResult check =
      run_command({"promtool", "check", "metrics"}, tmp.path() + "/metrics.txt");
  EXPECT_EQ(check.exit_code, 0) << check.output << "\n--- scraped:\n" << r.body;
  EXPECT_EQ(check.output, "") << "promtool has lint remarks";
}

}  // namespace
}  // namespace rg::test
