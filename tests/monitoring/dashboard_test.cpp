// The shipped Grafana dashboard (grafana/roceguard.json) against a real
// Prometheus: it scrapes both gateways of `roceguard lab` and an exporter
// whose RDMA NICs are a sysfs tree with the counters rxe, mlx5 and bnxt_re
// have, and every panel's query, with the template variables filled in as
// Grafana does for "All", must evaluate without error and return series. Panels
// whose series no exporter serves yet are listed, with the reason, in
// kExpectedEmpty.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/mount.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "metrics/exporter.h"
#include "scrape.h"

namespace rg::test {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

const std::string kDashboard = std::string(ROCEGUARD_SOURCE_DIR) + "/grafana/roceguard.json";

// Panels that must come back empty, and why. A listed panel that returns
// data fails the test: its series exist now, so take it off the list.
const std::map<std::string, std::string> kExpectedEmpty = {
    {"Loss shield auto",
     "its series exist only while a peer's loss shield is \"auto\" under roceguard run; the lab runs it off"},
};

// Grafana's $__rate_interval is at least four scrape intervals; the test's
// Prometheus scrapes every second, and a wider window only adds samples.
constexpr int kRateWindowS = 10;

json load_dashboard() { return json::parse(read_file(kDashboard)); }

// Panels in rows (collapsed rows nest theirs) and at the top level alike.
void collect_panels(const json& panels, std::vector<json>& out) {
  for (const auto& p : panels) {
    out.push_back(p);
    if (p.contains("panels")) collect_panels(p["panels"], out);
  }
}

std::vector<json> all_panels(const json& dash) {
  std::vector<json> out;
  collect_panels(dash["panels"], out);
  return out;
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

// What Grafana sends for the dashboard's variables with "All" selected
// (their allValue) and for its interval macros.
std::string fill_variables(std::string expr) {
  replace_all(expr, "$__rate_interval", std::to_string(kRateWindowS) + "s");
  replace_all(expr, "$__interval", "1s");
  for (const char* var : {"$job", "$cluster", "$instance", "$interface", "$peer"}) replace_all(expr, var, ".*");
  return expr;
}

std::string url_encode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

TEST(Dashboard, DeclaresOnlyInputsItUses) {
  const json dash = load_dashboard();
  const std::string text = dash.dump();
  for (const auto& input : dash.value("__inputs", json::array())) {
    const std::string ref = "${" + input["name"].get<std::string>() + "}";
    EXPECT_NE(text.find(ref), std::string::npos) << "input " << ref << " is declared, never used";
  }
  // Every query goes to the data source the viewer picks.
  for (const auto& panel : all_panels(dash))
    for (const auto& target : panel.value("targets", json::array()))
      EXPECT_EQ(target["datasource"]["uid"], "${datasource}") << panel["title"];
}

// Every series a panel selects is narrowed by the variables that apply to
// it: job, cluster and instance everywhere, peer on the per-peer families.
TEST(Dashboard, EveryQueryIsFilteredByTheVariables) {
  const std::regex selector(R"((roceguard_[a-z0-9_]+)(\{[^}]*\})?)");
  size_t selectors = 0;
  for (const auto& panel : all_panels(load_dashboard())) {
    for (const auto& target : panel.value("targets", json::array())) {
      const std::string expr = target["expr"];
      for (std::sregex_iterator m(expr.begin(), expr.end(), selector), end; m != end; ++m) {
        const std::string metric = (*m)[1], matchers = (*m)[2];
        std::vector<std::string> wanted = {"job", "cluster", "instance"};
        if (metric.rfind("roceguard_tunnel_", 0) == 0) wanted.push_back("peer");
        for (const auto& var : wanted)
          EXPECT_NE(matchers.find(var + "=~\"$" + var + "\""), std::string::npos)
              << panel["title"] << ": " << metric << matchers << " is not filtered by $" << var;
        ++selectors;
      }
    }
  }
  EXPECT_GT(selectors, 40u);
}

// A dashboard left open refreshes no faster than Prometheus scrapes a
// gateway (30 s is kube-prometheus-stack's default interval).
TEST(Dashboard, RefreshesEvery30sOrSlower) {
  const std::string refresh = load_dashboard()["refresh"];
  EXPECT_TRUE(refresh == "30s" || refresh == "1m" || refresh == "5m") << refresh;
}

TEST(Dashboard, VersionStatShowsTheVersionLabel) {
  // roceguard_build_info is always 1: the stat must show the label, not the value.
  size_t found = 0;
  for (const auto& panel : all_panels(load_dashboard())) {
    for (const auto& target : panel.value("targets", json::array())) {
      if (target["expr"].get<std::string>().find("roceguard_build_info") == std::string::npos)
        continue;
      ++found;
      EXPECT_EQ(panel["type"], "stat") << panel["title"];
      EXPECT_EQ(panel["options"]["textMode"], "name") << panel["title"];
      EXPECT_EQ(target["legendFormat"], "{{version}}") << panel["title"];
    }
  }
  EXPECT_EQ(found, 1u);
}

TEST(Dashboard, ExpectedEmptyPanelsExist) {
  std::set<std::string> titles;
  for (const auto& panel : all_panels(load_dashboard())) titles.insert(panel["title"]);
  for (const auto& [title, why] : kExpectedEmpty) EXPECT_TRUE(titles.count(title)) << title;
}

void ensure_bpffs() {
  struct statfs st {};
  if (statfs("/sys/fs/bpf", &st) == 0 && st.f_type == BPF_FS_MAGIC) return;
  ASSERT_EQ(mount("bpf", "/sys/fs/bpf", "bpf", 0, nullptr), 0)
      << "bpffs is not mounted on /sys/fs/bpf and mounting it failed: " << strerror(errno);
}

// A host with three RDMA ports: rxe0 on rgdbr0, mlx5_0 on rgdbm0 and
// bnxt_re0 on rgdbb0, each with the counters its driver has (names from the
// drivers' counter tables) and bound to its driver as sysfs says it.
void write_rdma_sysfs(const std::string& root) {
  auto port_file = [&](const std::string& dev, const std::string& rel, const std::string& value) {
    write_file(root + "/class/infiniband/" + dev + "/ports/1/" + rel, value + "\n");
  };
  auto bind = [&](const std::string& dev, const std::string& driver) {
    const std::string dir = root + "/class/infiniband/" + dev + "/device";
    std::filesystem::create_directories(dir);
    std::filesystem::create_directory_symlink("../../../../bus/pci/drivers/" + driver, dir + "/driver");
  };
  write_file(root + "/class/infiniband/rxe0/parent", "rgdbr0\n");
  for (const char* name : {"sent_pkts", "rcvd_pkts", "duplicate_request", "out_of_seq_request",
                           "rcvd_seq_err", "completer_retry_err", "retry_exceeded_err",
                           "retry_rnr_exceeded_err", "rcvd_rnr_err", "send_rnr_err"})
    port_file("rxe0", std::string("hw_counters/") + name, "7");
  port_file("mlx5_0", "gid_attrs/ndevs/0", "rgdbm0");
  bind("mlx5_0", "mlx5_core");
  for (const char* name :
       {"out_of_sequence", "packet_seq_err", "local_ack_timeout_err", "duplicate_request",
        "implied_nak_seq_err", "rnr_nak_retry_err", "req_transport_retries_exceeded",
        "req_rnr_retries_exceeded", "np_cnp_sent", "rp_cnp_handled", "np_ecn_marked_roce_packets"})
    port_file("mlx5_0", std::string("hw_counters/") + name, "7");
  for (const char* name : {"port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets"})
    port_file("mlx5_0", std::string("counters/") + name, "7");
  port_file("bnxt_re0", "gid_attrs/ndevs/0", "rgdbb0");
  bind("bnxt_re0", "bnxt_en");
  for (const char* name : {"oos_drop_count", "seq_err_naks_rcvd", "missing_resp", "to_retransmits",
                           "dup_req", "rnr_naks_rcvd", "max_retry_exceeded", "tx_cnp_pkts",
                           "rx_cnp_pkts", "rx_ecn_marked_pkts", "active_qps", "watermark_qps"})
    port_file("bnxt_re0", std::string("hw_counters/") + name, "7");
}

// Sets every counter of the tree to 7 + round, so that rates are not all
// zero. Each file is replaced by a rename: a scrape never reads it half
// written (the exporter would skip it, and Prometheus mark the series stale).
void bump_rdma_sysfs(const std::string& root, int round) {
  const std::string scratch = root + "/../counter";
  for (const auto& e : std::filesystem::recursive_directory_iterator(root + "/class/infiniband")) {
    const std::string dir = e.path().parent_path().filename().string();
    if (!e.is_regular_file() || (dir != "hw_counters" && dir != "counters")) continue;
    write_file(scratch, std::to_string(7 + round) + "\n");
    std::filesystem::rename(scratch, e.path());
  }
}

bool port_is_free(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool free = bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0;
  close(fd);
  return free;
}

// Two consecutive free ports: the lab serves gateway B on gateway A's + 1.
uint16_t free_port_pair() {
  for (int i = 0; i < 50; ++i) {
    const uint16_t p = free_port();
    if (p < 65535 && port_is_free(p + 1)) return p;
  }
  throw std::runtime_error("no two consecutive free ports on 127.0.0.1");
}

class Prometheus {
 public:
  explicit Prometheus(uint16_t port) : port_(port) {}

  // /api/v1/<what>; nullopt while Prometheus does not answer yet.
  std::optional<json> api(const std::string& what) const {
    HttpReply r;
    try {
      r = http_get("127.0.0.1", port_, "/api/v1/" + what, 30);
    } catch (const std::exception&) {
      return std::nullopt;
    }
    if (r.body.empty()) return std::nullopt;
    return json::parse(r.body);
  }

  std::optional<json> query(const std::string& expr, double at) const {
    char t[32];
    std::snprintf(t, sizeof(t), "%.3f", at);
    return api("query?query=" + url_encode(expr) + "&time=" + t);
  }

  // The one value of a single-valued query now, with its evaluation time.
  struct Reading {
    bool ok = false;
    double at = 0;
    double value = 0;
  };
  Reading read_now(const std::string& expr) const {
    auto j = api("query?query=" + url_encode(expr));
    if (!j || (*j)["status"] != "success" || (*j)["data"]["result"].empty()) return {};
    const json& data = (*j)["data"];
    const json& v = data["resultType"] == "scalar" ? data["result"] : data["result"][0]["value"];
    return {true, v[0].get<double>(), std::stod(v[1].get<std::string>())};
  }

 private:
  uint16_t port_;
};

TEST(Dashboard, EveryPanelQueryReturnsDataFromTheLab) {
  ASSERT_EQ(geteuid(), 0u) << "the lab needs root (network namespaces, BPF)";
  ensure_bpffs();
  TempDir tmp("dashboard");

  write_rdma_sysfs(tmp.path() + "/sysfs");
  ExporterOptions nic_opts;
  nic_opts.listen = "127.0.0.1:0";
  nic_opts.pin_path = "/sys/fs/bpf/rgdb-" + std::to_string(getpid()) + "-absent";
  nic_opts.interfaces = {"rgdbr0", "rgdbm0", "rgdbb0"};
  nic_opts.sysfs_root = tmp.path() + "/sysfs";
  Exporter rdma_host(nic_opts);

  const uint16_t gw_a = free_port_pair();
  const std::string lab_log = tmp.path() + "/lab.log";
  // Long enough for a full rate window of scrapes while roceguard is
  // attached; the queries make do with less if the lab ends its phase early.
  // With the congestion loop on, so its panels have series too.
  Child lab({ROCEGUARD_BIN, "lab", "--mode", "with", "--duration", "20", "--pcap-seconds", "0", "--congestion", "on",
             "--report", tmp.path() + "/report", "--prefix", "rgdb" + std::to_string(getpid()),
             "--metrics-listen", "127.0.0.1:" + std::to_string(gw_a)},
            lab_log);

  // The shipped rules are loaded too: Prometheus refuses to start on a rule
  // it cannot parse, and evaluates the rest against the lab's series. The
  // gateways carry a cluster label (as behind a federating or multi-cluster
  // Prometheus) and the RDMA host none, so the $cluster variable has a value
  // and "All" is seen to keep series without the label.
  const uint16_t prom_port = free_port();
  write_file(tmp.path() + "/prometheus.yml",
             "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
             "rule_files: ['" ROCEGUARD_SOURCE_DIR "/packaging/prometheus/roceguard-rules.yml']\n"
             "scrape_configs:\n"
             "  - job_name: roceguard\n    static_configs:\n"
             "      - targets: ['127.0.0.1:" + std::to_string(gw_a) + "', '127.0.0.1:" +
                 std::to_string(gw_a + 1) + "']\n        labels: {role: gateway, cluster: lab}\n"
             "      - targets: ['" + rdma_host.listen_address() + "']\n        labels: {role: rdma-host}\n");
  const std::string prom_log = tmp.path() + "/prometheus.log";
  Child prom({"prometheus", "--config.file=" + tmp.path() + "/prometheus.yml",
              "--storage.tsdb.path=" + tmp.path() + "/data",
              "--web.listen-address=127.0.0.1:" + std::to_string(prom_port), "--log.level=warn"},
             prom_log);
  Prometheus api(prom_port);
  auto logs = [&] {
    return "\n--- lab:\n" + read_file(lab_log) + "\n--- prometheus:\n" + read_file(prom_log);
  };

  // Both gateways attached and their QPs carrying traffic. Bounded: the lab
  // builds its namespaces first; 240 polls half a second apart.
  const std::string ready_expr = "count(count by (instance) (roceguard_qp_packets_total))";
  Prometheus::Reading ready;
  for (int i = 0; i < 240 && !(ready.ok && ready.value == 2); ++i) {
    std::this_thread::sleep_for(500ms);
    bump_rdma_sysfs(tmp.path() + "/sysfs", i);
    ASSERT_TRUE(prom.running()) << "prometheus exited" << logs();
    ASSERT_TRUE(lab.running()) << "the lab ended before both gateways carried traffic" << logs();
    ready = api.read_now(ready_expr);
  }
  ASSERT_TRUE(ready.ok && ready.value == 2) << "the gateways' QP series never appeared" << logs();

  // Then a full rate window more of scrapes (at most 60 polls), or less if
  // the lab ends its phase early (it does once every QP has failed): the
  // queries are evaluated at the last second both gateways were attached.
  const std::string attached_expr = "sum(roceguard_maps_up)";
  const double wanted = ready.at + kRateWindowS + 3;
  Prometheus::Reading now;
  for (int i = 0; i < 60 && !(now.ok && now.at >= wanted); ++i) {
    std::this_thread::sleep_for(500ms);
    bump_rdma_sysfs(tmp.path() + "/sysfs", 240 + i);
    if (const auto attached = api.read_now(attached_expr); attached.ok && attached.value != 2) break;
    now = api.read_now("time()");
  }
  char range[96];
  std::snprintf(range, sizeof(range), "&start=%.3f&end=%.3f&step=1", ready.at, wanted);
  auto history = api.api("query_range?query=" + url_encode(attached_expr) + range);
  ASSERT_TRUE(history && (*history)["status"] == "success") << logs();
  double at = 0;
  for (const auto& series : (*history)["data"]["result"])
    for (const auto& point : series["values"])
      if (point[1] == "2") at = point[0].get<double>();
  // Two scrapes of every series in the window at the least, or rate() has
  // nothing to say.
  ASSERT_GE(at, ready.at + 2) << "the lab's gateways were attached for less than two scrapes"
                              << logs();
  std::printf("queries evaluated %.0f s after both gateways carried traffic\n", at - ready.at);

  const json dash = load_dashboard();
  size_t queries = 0, with_data = 0;
  for (const auto& panel : all_panels(dash)) {
    const std::string title = panel["title"];
    const bool expect_empty = kExpectedEmpty.count(title) > 0;
    for (const auto& target : panel.value("targets", json::array())) {
      const std::string expr = fill_variables(target["expr"]);
      SCOPED_TRACE(title + " / " + target["refId"].get<std::string>() + ": " + expr);
      ASSERT_EQ(expr.find('$'), std::string::npos) << "a variable the test does not fill";
      auto r = api.query(expr, at);
      ASSERT_TRUE(r) << "no answer" << logs();
      ++queries;
      ASSERT_EQ((*r)["status"], "success") << r->dump();
      const size_t series = (*r)["data"]["result"].size();
      std::printf("%-45s %s  %zu series\n", title.c_str(), target["refId"].get<std::string>().c_str(),
                  series);
      if (expect_empty) {
        EXPECT_EQ(series, 0u) << "listed as empty (" << kExpectedEmpty.at(title)
                              << ") but returns data: take it off kExpectedEmpty";
      } else {
        EXPECT_GT(series, 0u) << r->dump();
        with_data += series > 0;
      }
    }
  }
  EXPECT_GT(queries, 40u);
  std::printf("%zu queries, %zu with data\n", queries, with_data);

  // The variables' own queries: label_values(<selector>, <label>).
  for (const auto& var : dash["templating"]["list"]) {
    if (var["type"] != "query") continue;
    const std::string def = fill_variables(var["definition"]);
    SCOPED_TRACE(var["name"].get<std::string>() + ": " + def);
    const auto open = def.find('('), comma = def.rfind(','), close = def.rfind(')');
    ASSERT_EQ(def.substr(0, open), "label_values");
    const std::string selector = def.substr(open + 1, comma - open - 1);
    std::string label = def.substr(comma + 1, close - comma - 1);
    label.erase(0, label.find_first_not_of(' '));
    char window[64];
    std::snprintf(window, sizeof(window), "&start=%.3f&end=%.3f", at - kRateWindowS, at);
    auto r = api.api("series?match[]=" + url_encode(selector) + window);
    ASSERT_TRUE(r && (*r)["status"] == "success") << (r ? r->dump() : "no answer");
    std::set<std::string> values;
    for (const auto& s : (*r)["data"])
      if (s.contains(label)) values.insert(s[label]);
    EXPECT_FALSE(values.empty()) << r->dump();
  }

  // The lab ends by itself and cleans up; wait for it (bounded) rather than
  // interrupting it.
  for (int i = 0; i < 600 && lab.running(); ++i) std::this_thread::sleep_for(500ms);
}

}  // namespace
}  // namespace rg::test
