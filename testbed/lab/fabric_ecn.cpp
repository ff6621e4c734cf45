// The far fabric's ECN marker: its program at TC egress of gateway B's port
// and the sampler that feeds it the port's class backlogs.
#include "lab/fabric_ecn.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/pkt_cls.h>
#include <net/if.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/error.h"
#include "common/netlink.h"
#include "fabric_ecn.skel.h"
#include "lab/bottleneck.h"
#include "lab/topology.h"

namespace rg::lab {

namespace {

using namespace std::chrono_literals;

// After every other filter of the clsact (a smaller number runs first).
constexpr uint32_t kTcPriority = 0xfff0;
constexpr uint32_t kTcHandle = 1;
constexpr uint64_t kFullFrame = 1514;

const char* const kClassNames[RG_ECN_CLASSES] = {"priority", "best_effort"};
const char* const kRegionNames[RG_ECN_REGIONS] = {"below_kmin", "between", "at_kmax"};

}  // namespace

FabricEcnConfig fabric_ecn_profile(unsigned queue_packets) {
  const uint64_t buffer = uint64_t{queue_packets} * kFullFrame;
  return {static_cast<uint32_t>(buffer / 4), static_cast<uint32_t>(buffer * 3 / 4), 0.2};
}

std::optional<FabricEcnConfig> parse_fabric_ecn(const std::string& text, unsigned queue_packets) {
  if (text == "off") return std::nullopt;
  FabricEcnConfig c;
  if (text == "on") {
    c = fabric_ecn_profile(queue_packets);
  } else {
    unsigned long kmin = 0, kmax = 0;
    double pmax = 0;
    int used = 0;
    if (std::sscanf(text.c_str(), "%lu,%lu,%lf%n", &kmin, &kmax, &pmax, &used) != 3 ||
        static_cast<size_t>(used) != text.size() || kmin > UINT32_MAX || kmax > UINT32_MAX)
      throw Error("lab: --fabric-ecn is off, on or KMIN,KMAX,PMAX (bytes, bytes, a fraction): " + text, kExitUsage);
    c = {static_cast<uint32_t>(kmin), static_cast<uint32_t>(kmax), pmax};
  }
  if (c.kmin_bytes >= c.kmax_bytes || !(c.pmax > 0 && c.pmax <= 1))
    throw Error("lab: --fabric-ecn needs Kmin below Kmax and Pmax in (0, 1]: " + text, kExitUsage);
  return c;
}

uint64_t FabricEcnStats::marked(rg_ecn_class cls) const {
  uint64_t n = 0;
  for (const auto& r : of[cls]) n += r.marked;
  return n;
}

FabricEcnStats operator-(const FabricEcnStats& a, const FabricEcnStats& b) {
  FabricEcnStats d = a;
  for (size_t c = 0; c < RG_ECN_CLASSES; ++c)
    for (size_t r = 0; r < RG_ECN_REGIONS; ++r) {
      FabricEcnRegion& x = d.of[c][r];
      const FabricEcnRegion& y = b.of[c][r];
      x.ect -= y.ect;
      x.marked -= y.marked;
      x.ce -= y.ce;
      x.not_ect -= y.not_ect;
      x.expected -= y.expected;
    }
  return d;
}

nlohmann::json to_json(const FabricEcnStats& s) {
  nlohmann::json j = nlohmann::json::object();
  for (size_t c = 0; c < RG_ECN_CLASSES; ++c)
    for (size_t r = 0; r < RG_ECN_REGIONS; ++r) {
      const FabricEcnRegion& x = s.of[c][r];
      j[kClassNames[c]][kRegionNames[r]] = {{"ect", x.ect},
                                            {"marked", x.marked},
                                            {"expected", std::round(x.expected * 10) / 10},
                                            {"ce", x.ce},
                                            {"not_ect", x.not_ect}};
    }
  return j;
}

nlohmann::json to_json(const FabricEcnConfig& c) {
  return {{"kmin_bytes", c.kmin_bytes},
          {"kmax_bytes", c.kmax_bytes},
          {"pmax", c.pmax},
          {"sample_us", FabricEcn::kSamplePeriod.count()}};
}

FabricEcn::FabricEcn(const FabricEcnConfig& cfg) : cfg_(cfg) {
  if (cfg.kmin_bytes >= cfg.kmax_bytes || !(cfg.pmax > 0 && cfg.pmax <= 1))
    throw Error("the fabric's ECN profile needs Kmin below Kmax and Pmax in (0, 1]", kExitUsage);
  skel_ = fabric_ecn__open_and_load();
  if (!skel_) throw Error("cannot load the fabric's ECN marker: " + errno_text(errno));
  rg_ecn_config c{};
  c.kmin_bytes = cfg.kmin_bytes;
  c.kmax_bytes = cfg.kmax_bytes;
  c.pmax = static_cast<uint32_t>(std::lround(cfg.pmax * RG_ECN_P_ONE));
  const uint32_t zero = 0;
  if (bpf_map_update_elem(bpf_map__fd(skel_->maps.rg_ecn_config), &zero, &c, BPF_ANY) != 0) {
    const int e = errno;
    fabric_ecn__destroy(skel_);
    throw Error("cannot configure the fabric's ECN marker: " + errno_text(e));
  }
}

FabricEcn::~FabricEcn() {
  detach();
  fabric_ecn__destroy(skel_);
}

void FabricEcn::attach(const std::string& netns, const std::string& ifname,
                       const std::array<uint32_t, RG_ECN_CLASSES>& classes, bool sample) {
  if (ifindex_) throw Error("the fabric's ECN marker is attached already");
  classes_ = classes;
  stop_ = false;  // a failed attach before stopped the sampler it never started
  {
    NetnsGuard in(netns);
    const int ifindex = static_cast<int>(if_nametoindex(ifname.c_str()));
    if (ifindex == 0) throw Error("interface " + ifname + " does not exist in " + netns, kExitNotFound);
    // Opened here, it stays in the namespace.
    nl_ = std::make_unique<NetlinkSocket>(NETLINK_ROUTE);
    LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = BPF_TC_EGRESS);
    int rc = bpf_tc_hook_create(&hook);
    if (rc != 0 && rc != -EEXIST) throw Error("cannot create clsact on " + ifname + ": " + errno_text(rc));
    netns_ = netns;
    ifindex_ = ifindex;
    created_qdisc_ = rc == 0;
    LIBBPF_OPTS(bpf_tc_opts, opts, .prog_fd = prog_fd(), .flags = BPF_TC_F_REPLACE, .handle = kTcHandle,
                .priority = kTcPriority);
    rc = bpf_tc_attach(&hook, &opts);
    if (rc != 0) {
      detach();
      throw Error("cannot attach the fabric's ECN marker to " + ifname + ": " + errno_text(rc));
    }
  }
  sample_once();
  if (sample)
    sampler_ = std::thread([this] {
      // A bounded loop: it ends with the lab, at the latest after a day.
      const auto until = std::chrono::steady_clock::now() + 24h;
      try {
        while (!stop_ && std::chrono::steady_clock::now() < until) {
          sample_once();
          std::this_thread::sleep_for(kSamplePeriod);
        }
      } catch (const std::exception& e) {
        // The marker keeps the last depths; the lab goes on without samples.
        std::fprintf(stderr, "the fabric's ECN sampler stopped: %s\n", e.what());
      }
    });
}

std::array<uint64_t, RG_ECN_CLASSES> FabricEcn::sample_once() {
  std::vector<QdiscPlace> places;
  for (uint32_t cls : classes_) places.push_back({ifindex_, cls});
  std::vector<QdiscCounters> now;
  {
    std::lock_guard<std::mutex> lock(nl_mu_);
    if (!nl_) throw Error("the fabric's ECN marker samples only once attached");
    now = dump_qdisc_counters(*nl_, places);
  }
  std::array<uint64_t, RG_ECN_CLASSES> depths{};
  for (size_t c = 0; c < RG_ECN_CLASSES; ++c) {
    const auto cls = static_cast<rg_ecn_class>(c);
    // A queue not found (the namespace going away) keeps its last depth.
    if (now[c].found)
      set_depth(cls, now[c].backlog);
    depths[c] = depth(cls);
  }
  return depths;
}

void FabricEcn::set_depth(rg_ecn_class cls, uint64_t bytes) {
  const uint32_t key = cls;
  const rg_ecn_depth d{bytes};
  if (bpf_map_update_elem(bpf_map__fd(skel_->maps.rg_ecn_depth), &key, &d, BPF_ANY) != 0)
    throw Error("cannot write the fabric's queue depth: " + errno_text(errno));
}

uint64_t FabricEcn::depth(rg_ecn_class cls) const {
  const uint32_t key = cls;
  rg_ecn_depth d{};
  if (bpf_map_lookup_elem(bpf_map__fd(skel_->maps.rg_ecn_depth), &key, &d) != 0)
    throw Error("cannot read the fabric's queue depth: " + errno_text(errno));
  return d.bytes;
}

int FabricEcn::prog_fd() const { return bpf_program__fd(skel_->progs.fabric_ecn); }

FabricEcnStats FabricEcn::stats() const {
  const int ncpus = libbpf_num_possible_cpus();
  if (ncpus <= 0) throw Error("cannot count the possible CPUs: " + errno_text(-ncpus));
  std::vector<rg_ecn_stats> per_cpu(static_cast<size_t>(ncpus));
  FabricEcnStats out;
  for (uint32_t c = 0; c < RG_ECN_CLASSES; ++c)
    for (uint32_t r = 0; r < RG_ECN_REGIONS; ++r) {
      const uint32_t key = c * RG_ECN_REGIONS + r;
      if (bpf_map_lookup_elem(bpf_map__fd(skel_->maps.rg_ecn_stats), &key, per_cpu.data()) != 0)
        throw Error("cannot read the fabric's ECN counters: " + errno_text(errno));
      FabricEcnRegion& x = out.of[c][r];
      uint64_t expected = 0;
      for (const rg_ecn_stats& s : per_cpu) {
        x.ect += s.ect;
        x.marked += s.marked;
        x.ce += s.ce;
        x.not_ect += s.not_ect;
        expected += s.expected;
      }
      x.expected = static_cast<double>(expected) / RG_ECN_P_ONE;
    }
  return out;
}

void FabricEcn::detach() noexcept {
  stop_ = true;
  if (sampler_.joinable()) sampler_.join();
  if (!ifindex_) return;
  try {
    NetnsGuard in(netns_);
    LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex_, .attach_point = BPF_TC_EGRESS);
    LIBBPF_OPTS(bpf_tc_opts, opts, .handle = kTcHandle, .priority = kTcPriority);
    bpf_tc_detach(&hook, &opts);
    if (created_qdisc_) {
      hook.attach_point = static_cast<bpf_tc_attach_point>(BPF_TC_INGRESS | BPF_TC_EGRESS);
      bpf_tc_hook_destroy(&hook);
    }
  } catch (...) {
    // The namespace is already gone, and with it everything attached there.
  }
  ifindex_ = 0;
}

}  // namespace rg::lab
