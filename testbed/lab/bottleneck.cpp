// The WAN's bottleneck: tbf queues on the WAN router's ports and a sampler
// of their backlog over rtnetlink (common/netlink.h).
#include "lab/bottleneck.h"

#include <linux/pkt_sched.h>
#include <linux/rtnetlink.h>
#include <net/if.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/netlink.h"
#include "lab/proc.h"
#include "lab/quantile.h"
#include "lab/topology.h"

namespace rg::lab {

namespace {

using namespace std::chrono_literals;

constexpr uint64_t kFullFrame = 1514;

}  // namespace

uint64_t bottleneck_limit_bytes(const BottleneckConfig& cfg) {
  const uint64_t at_rate = uint64_t{cfg.mbit} * static_cast<uint64_t>(cfg.buffer.count()) / 8;
  return std::max<uint64_t>(at_rate, WanBottleneck::kMinFrames * kFullFrame);
}

nlohmann::json to_json(const BottleneckStats& s) {
  return {{"sent_packets", s.sent_packets},
          {"sent_bytes", s.sent_bytes},
          {"dropped", s.dropped},
          {"queue_delay_us", {{"p50", s.delay_p50_us}, {"p99", s.delay_p99_us}, {"max", s.delay_max_us}}},
          {"queue_samples", s.samples}};
}

WanBottleneck::WanBottleneck(const std::string& netns, const std::vector<std::string>& ifnames,
                             const BottleneckConfig& cfg)
    : netns_(netns), ifnames_(ifnames), cfg_(cfg) {
  if (cfg.mbit == 0) throw Error("--wan-rate must be above 0", kExitUsage);
  const std::string limit = std::to_string(bottleneck_limit_bytes(cfg));
  {
    NetnsGuard in(netns_);
    // Opened here, it stays in the WAN's namespace.
    nl_ = std::make_unique<NetlinkSocket>(NETLINK_ROUTE);
    for (const auto& name : ifnames_) {
      const unsigned ifindex = if_nametoindex(name.c_str());
      if (ifindex == 0) throw Error("the WAN has no interface " + name, kExitNotFound);
      ifindexes_.push_back(static_cast<int>(ifindex));
    }
  }
  // A bucket of ten full frames: a shaper lets a short burst through at the
  // link's speed, and the queue behind it takes the rest.
  size_t done = 0;
  try {
    for (const auto& name : ifnames_) {
      run_checked({"tc", "-n", netns_, "qdisc", "add", "dev", name, "root", "tbf", "rate",
                   std::to_string(cfg.mbit) + "mbit", "burst", std::to_string(10 * kFullFrame), "limit", limit});
      ++done;
    }
  } catch (...) {
    for (size_t i = 0; i < done; ++i) run({"tc", "-n", netns_, "qdisc", "del", "dev", ifnames_[i], "root"}, 10s);
    throw;
  }
  base_.resize(ifnames_.size());
  delays_us_.resize(ifnames_.size());
  start_phase();
  sampler_ = std::thread([this] { sample_loop(); });
}

WanBottleneck::~WanBottleneck() {
  stop_ = true;
  if (sampler_.joinable()) sampler_.join();
  for (const auto& name : ifnames_) {
    try {
      run({"tc", "-n", netns_, "qdisc", "del", "dev", name, "root"}, 10s);
    } catch (...) {
      // The namespace is already gone, and the qdisc with it.
    }
  }
}

std::vector<QdiscCounters> dump_qdisc_counters(NetlinkSocket& nl, const std::vector<QdiscPlace>& places) {
  std::vector<QdiscCounters> out(places.size());
  NetlinkRequest req("the qdiscs", RTM_GETQDISC, NLM_F_DUMP);
  req.header<tcmsg>()->tcm_family = AF_UNSPEC;
  try {
    nl.request(req, [&](const nlmsghdr& msg) {
      if (msg.nlmsg_type != RTM_NEWQDISC) return;
      const tcmsg* tc = payload<tcmsg>(msg);
      const auto at = std::find_if(places.begin(), places.end(), [&](const QdiscPlace& p) {
        return p.ifindex == tc->tcm_ifindex && p.parent == tc->tcm_parent;
      });
      if (at == places.end()) return;
      QdiscCounters& c = out[static_cast<size_t>(at - places.begin())];
      for_each_attr(msg, sizeof(tcmsg), [&](const nlattr& a) {
        if (attr_type(a) != TCA_STATS || attr_len(a) < sizeof(tc_stats)) return true;
        tc_stats s;
        std::memcpy(&s, attr_payload(a), sizeof(s));
        c.packets = s.packets;
        c.bytes = s.bytes;
        c.drops = s.drops;
        c.backlog = s.backlog;
        c.found = true;
        return false;
      });
    });
  } catch (const NetlinkError&) {
    // A sample missed (the namespace going away at the end): nothing found.
    out.assign(places.size(), QdiscCounters{});
  }
  return out;
}

// One dump of the namespace's qdiscs; the root qdisc of each of ours.
std::vector<WanBottleneck::Counters> WanBottleneck::read_counters() const {
  std::vector<QdiscPlace> places;
  for (int ifindex : ifindexes_) places.push_back({ifindex, TC_H_ROOT});
  std::lock_guard<std::mutex> lock(nl_mu_);
  return dump_qdisc_counters(*nl_, places);
}

void WanBottleneck::sample_loop() {
  // A bounded loop: it ends with the lab, at the latest after a day.
  const auto until = std::chrono::steady_clock::now() + 24h;
  while (!stop_ && std::chrono::steady_clock::now() < until) {
    const std::vector<Counters> now = read_counters();
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t i = 0; i < now.size(); ++i)
        if (now[i].found)
          // bytes * 8 / (mbit * 10^6) seconds = bytes * 8 / mbit microseconds
          delays_us_[i].push_back(static_cast<uint32_t>(now[i].backlog * 8 / cfg_.mbit));
    }
    std::this_thread::sleep_for(kSamplePeriod);
  }
}

void WanBottleneck::start_phase() {
  const std::vector<Counters> now = read_counters();
  std::lock_guard<std::mutex> lock(mu_);
  base_ = now;
  for (auto& d : delays_us_) d.clear();
}

namespace {

void set_delays(BottleneckStats& s, const std::vector<uint32_t>& delays) {
  s.samples = delays.size();
  s.delay_max_us = delays.empty() ? 0 : *std::max_element(delays.begin(), delays.end());
  s.delay_p99_us = sample_quantile(delays, 0.99);
  s.delay_p50_us = sample_quantile(delays, 0.5);
}

}  // namespace

BottleneckStats WanBottleneck::delay_since(size_t i, size_t* cursor) {
  std::vector<uint32_t> delays;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (i >= delays_us_.size()) return {};
    const auto& all = delays_us_[i];
    if (*cursor < all.size()) delays.assign(all.begin() + static_cast<long>(*cursor), all.end());
    *cursor = all.size();
  }
  BottleneckStats s;
  set_delays(s, delays);
  return s;
}

BottleneckStats WanBottleneck::phase_stats(size_t i) {
  const std::vector<Counters> now = read_counters();
  std::vector<uint32_t> delays;
  Counters base;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (i >= delays_us_.size()) return {};
    delays = delays_us_[i];
    base = base_[i];
  }
  BottleneckStats s;
  s.sent_packets = now[i].packets - base.packets;
  s.sent_bytes = now[i].bytes - base.bytes;
  s.dropped = now[i].drops - base.drops;
  set_delays(s, delays);
  return s;
}

}  // namespace rg::lab
