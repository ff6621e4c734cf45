// The congestion scenario's schedulers (DSCP-aware at gateway B, by
// skb->priority on gateway A's uplink) and the bulk TCP competing with RoCE
// in front of each.
#include "lab/congestion.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "common/error.h"

namespace rg::lab {

namespace {

using nlohmann::json;
using namespace std::chrono_literals;

constexpr const char* kPriorityLeaf = "10:";
constexpr const char* kBestEffortLeaf = "20:";

std::string mbit_text(unsigned v) { return std::to_string(v) + "mbit"; }

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

ClassStats leaf_stats(const json& qdiscs, const char* handle) {
  for (const auto& q : qdiscs)
    if (q.value("handle", "") == handle)
      return {q.value("packets", uint64_t{0}), q.value("bytes", uint64_t{0}), q.value("drops", uint64_t{0})};
  throw Error(std::string("the scheduler's leaf ") + handle + " is gone");
}

ClassStats minus(const ClassStats& a, const ClassStats& b) {
  return {a.packets - b.packets, a.bytes - b.bytes, a.dropped - b.dropped};
}

json class_json(const ClassStats& c) {
  return {{"packets", c.packets}, {"bytes", c.bytes}, {"dropped", c.dropped}};
}

}  // namespace

SchedulerStats operator-(const SchedulerStats& a, const SchedulerStats& b) {
  return {minus(a.priority, b.priority), minus(a.best_effort, b.best_effort)};
}

json to_json(const SchedulerStats& s) {
  return {{"priority", class_json(s.priority)}, {"best_effort", class_json(s.best_effort)}};
}

HtbScheduler::HtbScheduler(const Topology& topo, Node node, const std::string& ifname, const SchedulerConfig& cfg,
                           PriorityMatch match)
    : netns_(topo.netns(node)), ifname_(ifname), cfg_(cfg) {
  if (cfg.link_mbit == 0 || cfg.priority_mbit == 0 || cfg.priority_mbit >= cfg.link_mbit)
    throw Error("the priority class's rate must be above 0 and below the link rate", kExitUsage);
  if (cfg.queue_packets == 0) throw Error("each class needs a buffer of at least one packet", kExitUsage);
  const std::string link = mbit_text(cfg.link_mbit);
  // A quantum of one full frame: HTB's default (rate / r2q) is megabytes at
  // these rates and only matters when classes of one priority share.
  // The burst lets HTB catch up after a late timer on a busy 2-core host
  // without exceeding the rate on average.
  const std::vector<std::string> common{"quantum", "1514", "burst", "15k", "cburst", "15k"};
  const char* dev = ifname_.c_str();
  auto tc = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"tc", "-n", netns_});
    run_checked(args);
  };
  auto with_common = [&](std::vector<std::string> args) {
    args.insert(args.end(), common.begin(), common.end());
    return args;
  };
  try {
    tc({"qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "20"});
    tc(with_common({"class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate", link,
                    "ceil", link}));
    // prio 0: spare capacity goes to the priority class first.
    tc(with_common({"class", "add", "dev", dev, "parent", "1:1", "classid", "1:10", "htb", "rate",
                    mbit_text(cfg.priority_mbit), "ceil", link, "prio", "0"}));
    tc(with_common({"class", "add", "dev", dev, "parent", "1:1", "classid", "1:20", "htb", "rate",
                    mbit_text(cfg.link_mbit - cfg.priority_mbit), "ceil", link, "prio", "1"}));
    for (auto [cls, leaf] : {std::pair{"1:10", kPriorityLeaf}, {"1:20", kBestEffortLeaf}})
      tc({"qdisc", "add", "dev", dev, "parent", cls, "handle", leaf, "pfifo", "limit",
          std::to_string(cfg.queue_packets)});
    if (match == PriorityMatch::kDscp46) {
      // DSCP 46 is the top six bits of the IPv4 TOS / IPv6 traffic class:
      // 46 << 2 = 0xb8, ECN bits masked out.
      tc({"filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32", "match", "ip",
          "dsfield", "0xb8", "0xfc", "flowid", "1:10"});
      tc({"filter", "add", "dev", dev, "parent", "1:", "protocol", "ipv6", "prio", "2", "u32", "match", "ip6",
          "priority", "0xb8", "0xfc", "flowid", "1:10"});
    }
    // kSkbPriority needs no filter: htb_classify() takes a packet whose
    // skb->priority is the id of one of its leaf classes straight to that
    // class. The stack's own priorities (0..15, from the TOS when
    // forwarding) are no class id here, so everything else takes the default.
  } catch (...) {
    run({"tc", "-n", netns_, "qdisc", "del", "dev", dev, "root"});
    throw;
  }
}

HtbScheduler::~HtbScheduler() {
  try {
    run({"tc", "-n", netns_, "qdisc", "del", "dev", ifname_, "root"}, 10s);
  } catch (...) {
    // The namespace is already gone, and the qdisc with it.
  }
}

SchedulerStats HtbScheduler::stats() const {
  auto qdiscs = json::parse(run_checked({"tc", "-n", netns_, "-s", "-j", "qdisc", "show", "dev", ifname_}));
  return {leaf_stats(qdiscs, kPriorityLeaf), leaf_stats(qdiscs, kBestEffortLeaf)};
}

SenderLineRate::SenderLineRate(const Topology& topo, unsigned mbit, unsigned outstanding_packets)
    : netns_(topo.netns(Node::kHostA)) {
  if (mbit == 0) throw Error("host A's line rate must be above 0", kExitUsage);
  // Full-size frames, so the bucket holds the whole window whatever the payload;
  // tbf's limit is 32 bits.
  const uint64_t limit_bytes = std::min<uint64_t>(uint64_t{std::max(outstanding_packets, 64u)} * 1514, 1u << 31);
  run_checked({"tc", "-n", netns_, "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", mbit_text(mbit), "burst",
               "15k", "limit", std::to_string(limit_bytes)});
}

SenderLineRate::~SenderLineRate() {
  try {
    run({"tc", "-n", netns_, "qdisc", "del", "dev", "eth0", "root"}, 10s);
  } catch (...) {
  }
}

bool tcp_congestion_control_offered(const std::string& name, std::string* offered) {
  *offered = read_file("/proc/sys/net/ipv4/tcp_available_congestion_control");
  while (!offered->empty() && offered->back() == '\n') offered->pop_back();
  std::istringstream names(*offered);
  std::string n;
  while (names >> n)
    if (n == name) return true;
  return false;
}

BulkPath far_side_bulk(const Topology& topo) { return {Node::kBulk, Node::kHostB, topo.addr().host_b4}; }

BulkPath uplink_bulk(const Topology& topo) { return {Node::kBulkA, Node::kWan, topo.addr().wan_a4}; }

BulkPath wan_cross_bulk(const Topology& topo) { return {Node::kBulkA, Node::kBulk, topo.addr().bulk4}; }

BulkTraffic::BulkTraffic(const Topology& topo, const BulkPath& path, const std::string& log_dir,
                         const std::string& name, unsigned streams, unsigned seconds, const std::string& cc) {
  const std::string server_log = log_dir + "/." + name + "-server.log";
  const std::string where = topo.netns(path.server);
  client_log_name_ = name + ".json";
  client_log_path_ = log_dir + "/" + client_log_name_;
  // The log files are named on the command lines on purpose: a process
  // left running is then attributable to its report directory.
  server_ = std::make_unique<Child>(topo.exec_argv(path.server, {"iperf3", "--server", "--one-off", "--bind",
                                                                 path.server_address, "--forceflush",
                                                                 "--logfile", server_log}));
  // Bounded: 10 s for the server to listen.
  for (int i = 0;; ++i) {
    if (read_file(server_log).find("Server listening") != std::string::npos) break;
    if (!server_->running()) throw Error("iperf3 server in " + where + " exited: " + read_file(server_log));
    if (i >= 200) throw Error("iperf3 server in " + where + " did not start listening");
    std::this_thread::sleep_for(50ms);
  }
  std::remove(client_log_path_.c_str());
  std::vector<std::string> argv{"iperf3", "--client", path.server_address, "--time", std::to_string(seconds),
                                "--parallel", std::to_string(streams), "--json", "--logfile", client_log_path_};
  if (!cc.empty()) argv.insert(argv.end(), {"--congestion", cc});
  client_ = std::make_unique<Child>(topo.exec_argv(path.client, argv));
  std::remove(server_log.c_str());  // the server keeps it open; the name is no longer needed
}

BulkTraffic::~BulkTraffic() {
  client_.reset();
  server_.reset();
}

bool BulkTraffic::wait(std::chrono::milliseconds timeout) { return client_->wait(timeout) >= 0; }

std::optional<BulkResult> BulkTraffic::result() {
  if (client_->wait(0ms) != 0) return std::nullopt;
  try {
    auto j = json::parse(read_file(client_log_path_));
    if (j.contains("error")) return std::nullopt;
    const auto& end = j.at("end");
    BulkResult r;
    r.received_mbps = end.at("sum_received").at("bits_per_second").get<double>() / 1e6;
    r.retransmits = end.at("sum_sent").value("retransmits", uint64_t{0});
    r.congestion_control = end.value("sender_tcp_congestion", std::string());
    double rtt_sum = 0;
    unsigned rtt_n = 0;
    if (end.contains("streams"))
      for (const auto& st : end.at("streams"))
        if (st.contains("sender") && st.at("sender").contains("mean_rtt")) {
          rtt_sum += st.at("sender").at("mean_rtt").get<double>();
          ++rtt_n;
        }
    if (rtt_n) r.mean_rtt_us = rtt_sum / rtt_n;
    return r;
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

}  // namespace rg::lab
