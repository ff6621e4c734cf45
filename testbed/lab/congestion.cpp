// DSCP-aware scheduling at gateway B and the bulk TCP traffic competing with RoCE there.
#include "lab/congestion.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "error.h"

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

DscpScheduler::DscpScheduler(const Topology& topo, const SchedulerConfig& cfg)
    : netns_(topo.netns(Node::kGatewayB)), cfg_(cfg) {
  if (cfg.link_mbit == 0 || cfg.priority_mbit == 0 || cfg.priority_mbit >= cfg.link_mbit)
    throw Error("the priority class's rate must be above 0 and below the link rate", kExitUsage);
  if (cfg.queue_packets == 0) throw Error("each class needs a buffer of at least one packet", kExitUsage);
  const std::string link = mbit_text(cfg.link_mbit);
  // A quantum of one full frame: HTB's default (rate / r2q) is megabytes at
  // these rates and only matters when classes of one priority share.
  // The burst lets HTB catch up after a late timer on a busy 2-core host
  // without exceeding the rate on average.
  const std::vector<std::string> common{"quantum", "1514", "burst", "15k", "cburst", "15k"};
  auto tc = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"tc", "-n", netns_});
    run_checked(args);
  };
  auto with_common = [&](std::vector<std::string> args) {
    args.insert(args.end(), common.begin(), common.end());
    return args;
  };
  try {
    tc({"qdisc", "add", "dev", kInterface, "root", "handle", "1:", "htb", "default", "20"});
    tc(with_common({"class", "add", "dev", kInterface, "parent", "1:", "classid", "1:1", "htb", "rate", link,
                    "ceil", link}));
    // prio 0: spare capacity goes to the priority class first.
    tc(with_common({"class", "add", "dev", kInterface, "parent", "1:1", "classid", "1:10", "htb", "rate",
                    mbit_text(cfg.priority_mbit), "ceil", link, "prio", "0"}));
    tc(with_common({"class", "add", "dev", kInterface, "parent", "1:1", "classid", "1:20", "htb", "rate",
                    mbit_text(cfg.link_mbit - cfg.priority_mbit), "ceil", link, "prio", "1"}));
    for (auto [cls, leaf] : {std::pair{"1:10", kPriorityLeaf}, {"1:20", kBestEffortLeaf}})
      tc({"qdisc", "add", "dev", kInterface, "parent", cls, "handle", leaf, "pfifo", "limit",
          std::to_string(cfg.queue_packets)});
    // DSCP 46 is the top six bits of the IPv4 TOS / IPv6 traffic class:
    // 46 << 2 = 0xb8, ECN bits masked out.
    tc({"filter", "add", "dev", kInterface, "parent", "1:", "protocol", "ip", "prio", "1", "u32", "match",
        "ip", "dsfield", "0xb8", "0xfc", "flowid", "1:10"});
    tc({"filter", "add", "dev", kInterface, "parent", "1:", "protocol", "ipv6", "prio", "2", "u32", "match",
        "ip6", "priority", "0xb8", "0xfc", "flowid", "1:10"});
  } catch (...) {
    run({"tc", "-n", netns_, "qdisc", "del", "dev", kInterface, "root"});
    throw;
  }
}

DscpScheduler::~DscpScheduler() {
  try {
    run({"tc", "-n", netns_, "qdisc", "del", "dev", kInterface, "root"}, 10s);
  } catch (...) {
    // The namespace is already gone, and the qdisc with it.
  }
}

SchedulerStats DscpScheduler::stats() const {
  auto qdiscs = json::parse(run_checked({"tc", "-n", netns_, "-s", "-j", "qdisc", "show", "dev", kInterface}));
  return {leaf_stats(qdiscs, kPriorityLeaf), leaf_stats(qdiscs, kBestEffortLeaf)};
}

SenderLineRate::SenderLineRate(const Topology& topo, unsigned mbit, unsigned outstanding_packets)
    : netns_(topo.netns(Node::kHostA)) {
  if (mbit == 0) throw Error("host A's line rate must be above 0", kExitUsage);
  // Full-size frames, so the bucket holds the whole window whatever the payload.
  const unsigned limit_bytes = std::max(outstanding_packets, 64u) * 1514;
  run_checked({"tc", "-n", netns_, "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", mbit_text(mbit), "burst",
               "15k", "limit", std::to_string(limit_bytes)});
}

SenderLineRate::~SenderLineRate() {
  try {
    run({"tc", "-n", netns_, "qdisc", "del", "dev", "eth0", "root"}, 10s);
  } catch (...) {
  }
}

BulkTraffic::BulkTraffic(const Topology& topo, const std::string& log_dir, const std::string& name,
                         unsigned streams, unsigned seconds) {
  const std::string server_log = log_dir + "/." + name + "-server.log";
  client_log_name_ = name + ".json";
  client_log_path_ = log_dir + "/" + client_log_name_;
  // The log files are named on the command lines on purpose: a process
  // left running is then attributable to its report directory.
  server_ = std::make_unique<Child>(topo.exec_argv(Node::kHostB, {"iperf3", "--server", "--one-off",
                                                                  "--bind", topo.addr().host_b4,
                                                                  "--forceflush", "--logfile", server_log}));
  // Bounded: 10 s for the server to listen.
  for (int i = 0;; ++i) {
    if (read_file(server_log).find("Server listening") != std::string::npos) break;
    if (!server_->running()) throw Error("iperf3 server at host B exited: " + read_file(server_log));
    if (i >= 200) throw Error("iperf3 server at host B did not start listening");
    std::this_thread::sleep_for(50ms);
  }
  std::remove(client_log_path_.c_str());
  client_ = std::make_unique<Child>(topo.exec_argv(
      Node::kBulk, {"iperf3", "--client", topo.addr().host_b4, "--time", std::to_string(seconds), "--parallel",
                    std::to_string(streams), "--json", "--logfile", client_log_path_}));
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
    return r;
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

}  // namespace rg::lab
