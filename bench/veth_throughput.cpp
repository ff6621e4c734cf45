// Throughput through the lab's namespaces (host A -> gateway A -> WAN router
// -> gateway B -> host B, veth links, no loss), as ratios to the same path
// with no program, all cases interleaved in one run:
//
//   baseline  no program anywhere
//   dscp-xdp  roceguard on both gateways, DSCP re-mark and accounting, no
//             tunnel, the ingress program at XDP (dataplane.ingress_hook xdp)
//   dscp-tc   the same with the ingress program at TC ingress (ingress_hook tc)
//   geneve-xdp roceguard on both gateways, DSCP + Geneve encap at A, XDP decap at B
//   geneve-tc the same, decapsulated at gateway B's TC ingress
//   geneve-fwd the XDP fast path (dataplane.xdp_forward): both gateways
//             attach lan0 and wan0, encapsulate at gateway A's lan0 XDP
//             hook and decapsulate at gateway B's wan0 XDP hook, each
//             redirecting straight to the other device (no skb). A veth
//             takes redirected frames only while its peer runs NAPI, so a
//             run with this case turns GRO on at the far end of every
//             gateway veth for every case (said in the output).
//   xdp-floor empty XDP and TC programs at the hooks roceguard uses (both
//             gateways' wan0): what merely having programs there costs. On
//             veth it is much: a native XDP program makes the receiving veth
//             copy every skb the stack hands it into a page with XDP
//             headroom, a cost a physical NIC's driver does not have.
//   tc-floor  empty TC programs at TC ingress and TC egress of both
//             gateways' wan0: the floor of an ingress program at the TC
//             hook instead of XDP (no copy: TC runs on the skb as it is).
//   vxlan     what a user would do instead: the kernel's VXLAN device with
//             `tos inherit` between the gateways (this kernel has no geneve
//             module, so the kernel tunnel compared is VXLAN)
//
// roceguard is attached by the loader's own code (lab::Gateway). Traffic is
// RoCE v2 shaped UDP (BTH + payload + ICRC to port 4791, PSN counting up)
// from several sender threads with sendmmsg (pktgen is not available on
// this kernel) to SO_REUSEPORT receivers at host B; the figure is what host B
// received. Two payload sizes: 1024 and 4096 bytes (RoCE path MTUs). For
// 4096 every link gets MTU 9000, which native XDP on veth does not accept
// (one page per frame), so at that size roceguard's XDP runs in generic
// (skb) mode: said in the output.
//
// Each run also records the machine's CPU time over its window
// (/proc/stat): the senders spin, so busy time is the window times the
// CPUs in every case, and the figure that tells cases apart is host B's
// packets per softirq second (the forwarding, the programs and the
// tunnels all run in softirq). Against vxlan, each round's ratio is taken
// and their median given with a 95 % bootstrap interval; steal time is in
// the JSON.
//
// With --bpf-stats the kernel times every program run (BPF_ENABLE_STATS,
// on while the benchmark holds its fd, so it ends with the process) and
// each case adds the in-situ cost of its programs, run_time_ns / run_cnt
// over the case's runs: what each program costs on real traffic, next to
// bench_prog_cost's BPF_PROG_TEST_RUN figures. The timing itself costs
// every program run (two clock reads), so the throughput of such a run is
// not the one to quote.
//
// With --headroom a tracing probe (bench/headroom.bpf.c) watches gateway
// A, where the encapsulating program makes its room: each skb's headroom
// as it arrives on lan0 and as it is queued on wan0 after TC egress, per
// case (an encapsulating program that finds too little room gets a new
// head from the kernel, a copy). Here the skbs are
// host A's UDP socket's, forwarded through veth without a copy: a socket
// reserves only the link layer's 16 bytes, where a NIC's receive buffer
// leaves 64 and more. --lan-xdp puts an empty XDP program on gateway A's
// lan0, and veth then copies every skb it hands that device into a page
// with XDP's 256 bytes of headroom: the condition of a NIC's buffers, the
// copy paid before roceguard's programs run (and outside their timing).
//
//   bench_veth_throughput [--seconds S] [--rounds N] [--senders N] [--cases a,b] [--bpf-stats]
//                         [--headroom] [--lan-xdp] [--json FILE]
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include "bench_util.h"
#include "common/error.h"
#include "headroom.skel.h"
#include "dataplane/attach.h"
#include "dataplane/maps.h"
#include "lab/kernel_vxlan.h"
#include "lab/lab_gateway.h"
#include "lab/proc.h"
#include "lab/roce_gen.h"
#include "lab/topology.h"

namespace {

using namespace rg::bench;
using namespace rg::lab;
using rg::XdpMode;
using namespace std::chrono_literals;

constexpr uint8_t kHostTos = 26 << 2 | 2;  // AF31 + ECT(0), as a RoCE host marks
constexpr unsigned kBatch = 64;

struct Measure {
  double rx_pps = 0, rx_gbps = 0, tx_pps = 0;
  // The machine's CPU seconds over the measured window (bench_util.h):
  // packets received per softirq second is what the path costs, the
  // senders' own system time aside (they spin, so busy time is the
  // window times the CPUs whatever the case).
  rg::bench::CpuTimes cpu;
  double rx_per_softirq_s = 0;
  std::map<int, uint64_t> dscp;  // at host B
};

int udp_socket(const std::string& netns, uint16_t bind_port, bool reuseport) {
  NetnsGuard in(netns);
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw rg::Error("socket: " + rg::errno_text(errno));
  int one = 1, buf = 8 << 20;
  if (reuseport) setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &buf, sizeof(buf));
  setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &buf, sizeof(buf));
  setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &one, sizeof(one));
  int tos = kHostTos;
  setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof(tos));
  timeval tv{0, 100000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(bind_port);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    throw rg::Error("bind: " + rg::errno_text(errno));
  }
  return fd;
}

Measure blast(const Topology& topo, size_t payload, unsigned senders, unsigned receivers, double seconds) {
  const std::string host_a = topo.netns(Node::kHostA), host_b = topo.netns(Node::kHostB);
  std::vector<int> rx_fds, tx_fds;
  struct Fds {
    std::vector<int>& a;
    std::vector<int>& b;
    ~Fds() {
      for (int fd : a) close(fd);
      for (int fd : b) close(fd);
    }
  } fds{rx_fds, tx_fds};
  for (unsigned i = 0; i < receivers; ++i) rx_fds.push_back(udp_socket(host_b, kRoceV2Port, true));
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(kRoceV2Port);
  inet_pton(AF_INET, topo.addr().host_b4, &dst.sin_addr);
  for (unsigned i = 0; i < senders; ++i) {
    tx_fds.push_back(udp_socket(host_a, static_cast<uint16_t>(49152 + i), false));
    if (connect(tx_fds.back(), reinterpret_cast<sockaddr*>(&dst), sizeof(dst)) != 0)
      throw rg::Error("connect: " + rg::errno_text(errno));
  }

  std::atomic<bool> stop{false}, counting{false};
  std::atomic<uint64_t> rx_pkts{0}, rx_bytes{0}, tx_pkts{0};
  std::vector<std::map<int, uint64_t>> dscp(receivers);
  const size_t len = 12 + payload + 4;  // BTH + payload + ICRC
  std::vector<std::thread> threads;
  for (unsigned i = 0; i < receivers; ++i)
    threads.emplace_back([&, i] {
      std::vector<std::vector<uint8_t>> bufs(kBatch, std::vector<uint8_t>(len + 64));
      std::vector<std::array<uint8_t, 64>> ctrl(kBatch);
      std::vector<iovec> iov(kBatch);
      std::vector<mmsghdr> msgs(kBatch);
      while (!stop) {
        for (unsigned k = 0; k < kBatch; ++k) {
          iov[k] = {bufs[k].data(), bufs[k].size()};
          msgs[k] = {};
          msgs[k].msg_hdr.msg_iov = &iov[k];
          msgs[k].msg_hdr.msg_iovlen = 1;
          msgs[k].msg_hdr.msg_control = ctrl[k].data();
          msgs[k].msg_hdr.msg_controllen = ctrl[k].size();
        }
        int n = recvmmsg(rx_fds[i], msgs.data(), kBatch, 0, nullptr);
        if (n <= 0 || !counting) continue;
        uint64_t bytes = 0;
        for (int k = 0; k < n; ++k) {
          bytes += msgs[k].msg_len;
          for (cmsghdr* c = CMSG_FIRSTHDR(&msgs[k].msg_hdr); c; c = CMSG_NXTHDR(&msgs[k].msg_hdr, c))
            if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS) dscp[i][*CMSG_DATA(c) >> 2]++;
        }
        rx_pkts += static_cast<uint64_t>(n);
        rx_bytes += bytes;
      }
    });
  for (unsigned i = 0; i < senders; ++i)
    threads.emplace_back([&, i] {
      std::vector<std::vector<uint8_t>> bufs(kBatch, std::vector<uint8_t>(len, 0));
      std::vector<iovec> iov(kBatch);
      std::vector<mmsghdr> msgs(kBatch);
      for (unsigned k = 0; k < kBatch; ++k) {
        iov[k] = {bufs[k].data(), len};
        msgs[k] = {};
        msgs[k].msg_hdr.msg_iov = &iov[k];
        msgs[k].msg_hdr.msg_iovlen = 1;
      }
      Bth bth;
      bth.dest_qp = 0x200 + i;
      uint32_t psn = 0;
      while (!stop) {
        for (unsigned k = 0; k < kBatch; ++k) {
          bth.psn = psn++ & kPsnMask;
          put_bth(bufs[k].data(), bth);
        }
        int n = sendmmsg(tx_fds[i], msgs.data(), kBatch, 0);
        if (n > 0 && counting) tx_pkts += static_cast<uint64_t>(n);
      }
    });
  // Half a second to fill queues and caches, then the measured window.
  std::this_thread::sleep_for(500ms);
  const rg::bench::CpuTimes c0 = rg::bench::cpu_times();
  counting = true;
  const auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  counting = false;
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const rg::bench::CpuTimes c1 = rg::bench::cpu_times();
  stop = true;
  for (auto& t : threads) t.join();
  Measure m;
  m.rx_pps = rx_pkts / dt;
  m.rx_gbps = rx_bytes * 8.0 / dt / 1e9;
  m.tx_pps = tx_pkts / dt;
  m.cpu = {c1.busy - c0.busy, c1.softirq - c0.softirq, c1.steal - c0.steal};
  m.rx_per_softirq_s = m.cpu.softirq > 0 ? static_cast<double>(rx_pkts) / m.cpu.softirq : 0;
  for (const auto& d : dscp)
    for (const auto& [k, v] : d) m.dscp[k] += v;
  return m;
}

void ip(const Topology& topo, Node n, std::vector<std::string> args) {
  args.insert(args.begin(), {"ip", "-n", topo.netns(n)});
  run_checked(args);
}

// Empty programs (bench/empty.bpf.c) where roceguard attaches: TC egress
// on both gateways' wan0, and XDP there (xdp-floor) or TC ingress
// (tc-floor). Removed on destruction.
class EmptyPrograms {
 public:
  enum class Ingress { kXdp, kTc };
  EmptyPrograms(const Topology& topo, Ingress ingress, XdpMode mode) : topo_(topo) {
    try {
      for (Node n : {Node::kGatewayA, Node::kGatewayB}) {
        done_.push_back(n);
        if (ingress == Ingress::kXdp)
          ip(topo, n, {"link", "set", "dev", "wan0", mode == XdpMode::kSkb ? "xdpgeneric" : "xdpdrv", "object",
                       EMPTY_BPF_OBJECT, "section", "xdp"});
        run_checked({"tc", "-n", topo.netns(n), "qdisc", "replace", "dev", "wan0", "clsact"});
        std::vector<const char*> dirs{"egress"};
        if (ingress == Ingress::kTc) dirs.push_back("ingress");
        for (const char* dir : dirs)
          run_checked({"tc", "-n", topo.netns(n), "filter", "add", "dev", "wan0", dir, "bpf", "da", "obj",
                       EMPTY_BPF_OBJECT, "sec", "tc"});
      }
    } catch (...) {
      remove();
      throw;
    }
  }
  ~EmptyPrograms() { remove(); }

  // The attached programs' ids, labelled like the roceguard cases'.
  std::vector<std::pair<std::string, uint32_t>> programs() const {
    std::vector<std::pair<std::string, uint32_t>> out;
    for (Node n : done_) {
      const std::string gw = n == Node::kGatewayA ? "gw A " : "gw B ";
      auto link = nlohmann::json::parse(run_checked({"ip", "-j", "-n", topo_.netns(n), "link", "show", "dev", "wan0"}));
      if (link.at(0).contains("xdp"))
        out.emplace_back(gw + "xdp", link.at(0)["xdp"]["prog"]["id"].get<uint32_t>());
      for (const char* dir : {"ingress", "egress"}) {
        auto filters = nlohmann::json::parse(
            run_checked({"tc", "-j", "-n", topo_.netns(n), "filter", "show", "dev", "wan0", dir}));
        for (const auto& f : filters)
          if (f.contains("options") && f["options"].contains("prog"))
            out.emplace_back(gw + "tc " + dir, f["options"]["prog"]["id"].get<uint32_t>());
      }
    }
    return out;
  }

 private:
  void remove() noexcept {
    for (Node n : done_) {
      // "xdp off" only removes a native program; generic ones need their own word.
      for (const char* mode : {"xdpdrv", "xdpgeneric"})
        run({"ip", "-n", topo_.netns(n), "link", "set", "dev", "wan0", mode, "off"});
      run({"tc", "-n", topo_.netns(n), "qdisc", "del", "dev", "wan0", "clsact"});
    }
    done_.clear();
  }
  const Topology& topo_;
  std::vector<Node> done_;
};

// A program's cumulative run count and run time, as the kernel keeps them
// while statistics are enabled.
struct ProgStats {
  uint64_t run_cnt = 0, run_time_ns = 0;
};

ProgStats prog_stats(uint32_t id) {
  int fd = bpf_prog_get_fd_by_id(id);
  if (fd < 0) throw rg::Error("program id " + std::to_string(id) + ": " + rg::errno_text(errno));
  bpf_prog_info info{};
  uint32_t len = sizeof(info);
  int err = bpf_obj_get_info_by_fd(fd, &info, &len);
  int saved = errno;
  close(fd);
  if (err) throw rg::Error("program id " + std::to_string(id) + " info: " + rg::errno_text(saved));
  return {info.run_cnt, info.run_time_ns};
}

void set_mtu(const Topology& topo, unsigned mtu) {
  const std::pair<Node, const char*> links[] = {{Node::kHostA, "eth0"},    {Node::kGatewayA, "lan0"},
                                                {Node::kGatewayA, "wan0"}, {Node::kWan, "to-a"},
                                                {Node::kWan, "to-b"},      {Node::kGatewayB, "wan0"},
                                                {Node::kGatewayB, "lan0"}, {Node::kHostB, "eth0"}};
  for (const auto& [n, ifname] : links) ip(topo, n, {"link", "set", "dev", ifname, "mtu", std::to_string(mtu)});
}

// The headroom probe (bench/headroom.bpf.c) on gateway A: skbs by
// headroom as they arrive on lan0 and as they are queued on wan0 after TC
// egress. Detached and unloaded on destruction.
class HeadroomProbe {
 public:
  static constexpr unsigned kStep = 16, kBuckets = 33;
  using Hist = std::array<uint64_t, kBuckets>;  // skbs by headroom, kStep bytes a bucket, the last open
  struct Counts {
    Hist receive{}, queue{};
  };

  explicit HeadroomProbe(const Topology& topo) : skel_(headroom__open()) {
    if (!skel_) throw rg::Error("headroom probe: open: " + rg::errno_text(errno));
    try {
      struct stat st{};
      const std::string ns = "/run/netns/" + topo.netns(Node::kGatewayA);
      if (stat(ns.c_str(), &st) != 0) throw rg::Error(ns + ": " + rg::errno_text(errno));
      skel_->rodata->target_netns = static_cast<uint32_t>(st.st_ino);
      skel_->rodata->receive_ifindex = static_cast<uint32_t>(topo.ifindex(Node::kGatewayA, "lan0"));
      skel_->rodata->queue_ifindex = static_cast<uint32_t>(topo.ifindex(Node::kGatewayA, "wan0"));
      if (headroom__load(skel_)) throw rg::Error("headroom probe: load: " + rg::errno_text(errno));
      if (headroom__attach(skel_)) throw rg::Error("headroom probe: attach: " + rg::errno_text(errno));
    } catch (...) {
      headroom__destroy(skel_);
      throw;
    }
  }
  ~HeadroomProbe() { headroom__destroy(skel_); }
  HeadroomProbe(const HeadroomProbe&) = delete;
  HeadroomProbe& operator=(const HeadroomProbe&) = delete;

  Counts read() const {
    Counts c;
    const int fd = bpf_map__fd(skel_->maps.headroom_hist);
    for (uint32_t k = 0; k < 2 * kBuckets; ++k)
      if (bpf_map_lookup_elem(fd, &k, k < kBuckets ? &c.receive[k] : &c.queue[k - kBuckets]))
        throw rg::Error("headroom probe: read: " + rg::errno_text(errno));
    return c;
  }

  // Adds what happened between two reads to `to`.
  static void add_since(Counts& to, const Counts& before, const Counts& after) {
    for (unsigned k = 0; k < kBuckets; ++k) {
      to.receive[k] += after.receive[k] - before.receive[k];
      to.queue[k] += after.queue[k] - before.queue[k];
    }
  }
  static uint64_t skbs(const Hist& h) {
    uint64_t n = 0;
    for (uint64_t v : h) n += v;
    return n;
  }
  // The bucket's lower bound, in bytes, holding the median skb (-1: none seen).
  static int median_bucket(const Hist& h) {
    const uint64_t n = skbs(h);
    uint64_t seen = 0;
    for (unsigned k = 0; k < kBuckets && n; ++k)
      if ((seen += h[k]) * 2 >= n) return static_cast<int>(k * kStep);
    return -1;
  }
  static std::string median_text(const Hist& h) {
    const int mb = median_bucket(h);
    if (mb < 0) return "-";
    if (mb >= static_cast<int>((kBuckets - 1) * kStep)) return std::to_string(mb) + " or more";
    return std::to_string(mb) + "-" + std::to_string(mb + kStep - 1);
  }
  // The share of skbs with less than `bytes` of headroom (a multiple of kStep).
  static double share_under(const Hist& h, unsigned bytes) {
    uint64_t under = 0;
    for (unsigned k = 0; k < bytes / kStep && k < kBuckets; ++k) under += h[k];
    const uint64_t n = skbs(h);
    return n ? double(under) / n : 0;
  }

 private:
  headroom* skel_;
};

// An empty XDP program on gateway A's lan0 (--lan-xdp): veth then hands
// that device every skb copied into a page with XDP's headroom. Removed on
// destruction.
class LanXdp {
 public:
  LanXdp(const Topology& topo, XdpMode mode) : topo_(topo) {
    ip(topo, Node::kGatewayA, {"link", "set", "dev", "lan0", mode == XdpMode::kSkb ? "xdpgeneric" : "xdpdrv",
                                "object", EMPTY_BPF_OBJECT, "section", "xdp"});
  }
  ~LanXdp() {
    for (const char* mode : {"xdpdrv", "xdpgeneric"})
      run({"ip", "-n", topo_.netns(Node::kGatewayA), "link", "set", "dev", "lan0", mode, "off"});
  }
  LanXdp(const LanXdp&) = delete;
  LanXdp& operator=(const LanXdp&) = delete;

 private:
  const Topology& topo_;
};

std::string pin_dir(Node n) {
  return "/sys/fs/bpf/rglb-" + std::to_string(getpid()) + "-bench-" + std::string(node_suffix(n));
}

struct CaseResult {
  std::vector<Measure> runs;
  std::string check;  // what showed the case did what it says
  // --bpf-stats: per program (label), run count and time summed over the runs.
  std::map<std::string, ProgStats> progs;
  // --headroom: gateway A's, summed over the runs.
  HeadroomProbe::Counts headroom;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"throughput through the lab namespaces: roceguard vs no program vs kernel VXLAN"};
  double seconds = 3;
  unsigned rounds = 3, senders = 2, receivers = 1;
  bool bpf_stats = false, headroom = false, lan_xdp = false;
  std::vector<size_t> payloads{1024, 4096};
  const std::vector<std::string> all_cases{"baseline", "xdp-floor", "tc-floor",   "dscp-xdp", "dscp-tc",
                                           "geneve-xdp", "geneve-tc", "geneve-fwd", "vxlan"};
  std::vector<std::string> names = all_cases;
  std::string json_path = "veth_throughput.json", prefix = "rglb";
  app.add_option("--seconds", seconds, "measured seconds per run")->check(CLI::Range(0.5, 60.0));
  app.add_option("--rounds", rounds, "interleaved rounds of every case")->check(CLI::Range(1u, 50u));
  app.add_option("--senders", senders, "sender threads at host A")->check(CLI::Range(1u, 64u));
  app.add_option("--receivers", receivers, "receiver threads at host B")->check(CLI::Range(1u, 64u));
  app.add_option("--payloads", payloads, "payload sizes")->delimiter(',');
  app.add_option("--cases", names, "cases to run, in this order each round (baseline first: the ratios need it)")
      ->delimiter(',')
      ->check(CLI::IsMember(all_cases));
  app.add_flag("--bpf-stats", bpf_stats,
               "time every program run (BPF_ENABLE_STATS) and report each program's ns per run; slows the runs");
  app.add_flag("--headroom", headroom,
               "trace gateway A: each skb's headroom as it arrives on lan0 and as it is queued on wan0 after TC egress");
  app.add_flag("--lan-xdp", lan_xdp,
               "an empty XDP program on gateway A's lan0, so veth copies each skb into a page with XDP's headroom "
               "(as a NIC's receive buffer has) before the gateway forwards it");
  app.add_option("--prefix", prefix, "namespace name prefix");
  app.add_option("--json", json_path, "JSON output");
  CLI11_PARSE(app, argc, argv);
  auto has = [&](const char* c) { return std::find(names.begin(), names.end(), c) != names.end(); };
  if (!has("baseline")) {
    std::cerr << "bench_veth_throughput: --cases needs baseline (every ratio is to it)\n";
    return 2;
  }

  int stats_fd = -1;
  try {
    if (bpf_stats) {
      // On while this fd is open: ends with the process, however it ends.
      stats_fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
      if (stats_fd < 0) throw rg::Error("BPF_ENABLE_STATS: " + rg::errno_text(errno));
    }
    // libbpf and libxdp narrate every attach; errors only.
    spdlog::set_level(spdlog::level::err);
    rg::setup_bpf_logging();
    Topology::cleanup_stale(prefix);
    Topology topo(prefix);
    topo.check_path();
    const bool redirects = has("geneve-fwd");
    if (redirects) topo.accept_xdp_redirects();
    if (lan_xdp && redirects) {
      std::cerr << "bench_veth_throughput: --lan-xdp and geneve-fwd both want gateway A's lan0 XDP hook\n";
      return 2;
    }
    std::optional<HeadroomProbe> probe;
    if (headroom) probe.emplace(topo);
    const Addresses& a = topo.addr();
    nlohmann::json out = nlohmann::json::array();
    for (size_t payload : payloads) {
      const unsigned mtu = payload > 1024 ? 9000 : 1500;
      const XdpMode xdp = mtu > 1500 ? XdpMode::kSkb : XdpMode::kNative;
      set_mtu(topo, mtu);
      std::optional<LanXdp> lan;
      if (lan_xdp) lan.emplace(topo, xdp);
      topo.check_path();
      std::map<std::string, CaseResult> res;
      for (unsigned r = 0; r < rounds; ++r)
        for (const std::string& c : names) {
          std::optional<Gateway> gw_a, gw_b;
          std::optional<KernelVxlan> vx;
          std::vector<std::pair<std::string, uint32_t>> progs;
          if (c.rfind("dscp-", 0) == 0 || c.rfind("geneve-", 0) == 0) {
            const bool tunnel = c.rfind("geneve-", 0) == 0;
            const bool forward = c == "geneve-fwd";
            // Named, never "auto": on veth auto picks TC.
            const std::string hook = forward ? "xdp" : c.substr(c.find('-') + 1);
            gw_a.emplace(topo, Node::kGatewayA, pin_dir(Node::kGatewayA),
                         gateway_config(a.gw_a_wan4, a.gw_b_wan4, "203.0.113.0/24", tunnel, xdp, mtu, hook, forward));
            gw_b.emplace(topo, Node::kGatewayB, pin_dir(Node::kGatewayB),
                         gateway_config(a.gw_b_wan4, a.gw_a_wan4, "192.0.2.0/24", tunnel, xdp, mtu, hook, forward));
            for (const auto* g : {&*gw_a, &*gw_b})
              for (const auto& is : g->state().interfaces) {
                const std::string gw = g == &*gw_a ? "gw A " : "gw B ";
                if (is.ingress_hook != hook)
                  throw rg::Error(c + ": " + gw + "runs its ingress program at " + is.ingress_hook);
                if (is.ingress_hook == rg::kIngressTc)
                  progs.emplace_back(gw + "tc ingress", is.tc_ingress_prog_id);
                else
                  progs.emplace_back(gw + "xdp", is.xdp_prog_id);
                progs.emplace_back(gw + "tc egress", is.tc_prog_id);
              }
          }
          std::optional<EmptyPrograms> empty;
          if (c == "xdp-floor") empty.emplace(topo, EmptyPrograms::Ingress::kXdp, xdp);
          if (c == "tc-floor") empty.emplace(topo, EmptyPrograms::Ingress::kTc, xdp);
          if (empty) progs = empty->programs();
          if (c == "vxlan") vx.emplace(topo, mtu);
          std::vector<ProgStats> before;
          if (bpf_stats)
            for (const auto& pr : progs) before.push_back(prog_stats(pr.second));
          const HeadroomProbe::Counts room_before = probe ? probe->read() : HeadroomProbe::Counts{};
          Measure m = blast(topo, payload, senders, receivers, seconds);
          if (probe) HeadroomProbe::add_since(res[c].headroom, room_before, probe->read());
          if (bpf_stats)
            for (size_t i = 0; i < progs.size(); ++i) {
              ProgStats after = prog_stats(progs[i].second);
              auto& acc = res[c].progs[progs[i].first];
              acc.run_cnt += after.run_cnt - before[i].run_cnt;
              acc.run_time_ns += after.run_time_ns - before[i].run_time_ns;
            }
          res[c].runs.push_back(m);
          if (r == 0) {
            std::string check = "dscp at host B:";
            for (const auto& [d, n] : m.dscp) check += " " + std::to_string(d) + "=" + std::to_string(n);
            if (gw_a) {
              auto rows = rg::MapReader(gw_a->pin()).counters();
              check += "; gw A re-marked " + std::to_string(rg::sum_packets(rows, RG_DIR_EGRESS, RG_EV_DSCP_REWRITTEN)) +
                       ", encapsulated " + std::to_string(rg::sum_packets(rows, RG_DIR_EGRESS, RG_EV_ENCAPSULATED));
              auto rows_b = rg::MapReader(gw_b->pin()).counters();
              check += "; gw B decapsulated " +
                       std::to_string(rg::sum_packets(rows_b, RG_DIR_INGRESS, RG_EV_DECAPSULATED));
              if (c == "geneve-fwd")
                check += "; forwarded from XDP: gw A " +
                         std::to_string(rg::sum_packets(rows, RG_DIR_EGRESS, RG_EV_XDP_FORWARDED)) + ", gw B " +
                         std::to_string(rg::sum_packets(rows_b, RG_DIR_EGRESS, RG_EV_XDP_FORWARDED));
            }
            if (vx) check += "; vx0 at gw A sent " + std::to_string(vx->tx_packets(Node::kGatewayA));
            if (!gw_a && !progs.empty()) {
              check += "; programs:";
              for (const auto& pr : progs) check += " " + pr.first + " id " + std::to_string(pr.second);
            }
            res[c].check = check;
          }
          std::cerr << "  " << payload << " B " << c << " round " << r + 1 << ": " << rg::bench::fmt("%.0f", m.rx_pps)
                    << " pps received\n";
        }

      auto med = [&](const std::string& c, auto field) {
        std::vector<double> v;
        for (const auto& m : res[c].runs) v.push_back(field(m));
        return median(v);
      };
      const double base = med("baseline", [](const Measure& m) { return m.rx_pps; });
      const double vxl = has("vxlan") ? med("vxlan", [](const Measure& m) { return m.rx_pps; }) : 0;
      std::cout << "\npayload " << payload << " B, link MTU " << mtu << ", XDP (the *-xdp cases, xdp-floor) "
                << (xdp == XdpMode::kSkb ? "generic (skb)" : "native") << ", " << senders << " senders, "
                << receivers << " receiver(s), median of " << rounds << " x " << seconds << " s"
                << (bpf_stats ? ", BPF statistics on (slower)" : "")
                << (headroom ? ", headroom traced at gateway A (slower)" : "")
                << (lan_xdp ? ", empty XDP on gateway A's lan0 (skbs copied with XDP headroom)" : "")
                << (redirects ? ", GRO on at the far end of every gateway veth (for geneve-fwd's redirects)" : "")
                << "\n";
      // Round by round against vxlan (every round ran every case): the
      // median of the per-round ratios, with its bootstrap interval.
      auto per_round = [&](const std::string& name, auto field) {
        std::vector<double> r;
        const auto& a = res[name].runs;
        const auto& v = res["vxlan"].runs;
        for (size_t i = 0; i < std::min(a.size(), v.size()); ++i)
          if (field(v[i]) > 0) r.push_back(field(a[i]) / field(v[i]));
        return r;
      };
      auto ratio_text = [](const std::vector<double>& r) {
        if (r.empty()) return std::string("-");
        const auto [lo, hi] = rg::bench::median_ci95(r);
        return rg::bench::fmt("%.3f", median(r)) + " (" + rg::bench::fmt("%.2f", lo) + "-" +
               rg::bench::fmt("%.2f", hi) + ")";
      };
      auto pps_of = [](const Measure& m) { return m.rx_pps; };
      auto per_softirq_of = [](const Measure& m) { return m.rx_per_softirq_s; };
      Table t({"case", "rx pps", "rx Gbit/s", "tx pps", "x baseline", "x vxlan", "rx per softirq s",
               "x vxlan per round (95%)", "per softirq s x vxlan (95%)"});
      for (const std::string& name : names) {
        const double pps = med(name, [](const Measure& m) { return m.rx_pps; });
        const double gbps = med(name, [](const Measure& m) { return m.rx_gbps; });
        const double tx = med(name, [](const Measure& m) { return m.tx_pps; });
        const double per_softirq = med(name, per_softirq_of);
        const std::vector<double> pps_ratios = vxl ? per_round(name, pps_of) : std::vector<double>{};
        const std::vector<double> softirq_ratios = vxl ? per_round(name, per_softirq_of) : std::vector<double>{};
        t.row({name, rg::bench::fmt("%.0f", pps), rg::bench::fmt("%.3f", gbps), rg::bench::fmt("%.0f", tx),
               rg::bench::fmt("%.3f", pps / base), vxl ? rg::bench::fmt("%.3f", pps / vxl) : "-",
               rg::bench::fmt("%.0f", per_softirq), ratio_text(pps_ratios), ratio_text(softirq_ratios)});
        nlohmann::json runs = nlohmann::json::array();
        for (const auto& m : res[name].runs)
          runs.push_back({{"rx_pps", m.rx_pps}, {"rx_gbps", m.rx_gbps}, {"tx_pps", m.tx_pps},
                          {"cpu_busy_s", m.cpu.busy}, {"softirq_s", m.cpu.softirq}, {"steal_s", m.cpu.steal},
                          {"rx_per_softirq_s", m.rx_per_softirq_s}});
        nlohmann::json entry = {{"payload", payload},
                                {"mtu", mtu},
                                {"xdp_mode", xdp == XdpMode::kSkb ? "skb" : "native"},
                                {"peer_gro", redirects},
                                {"case", name},
                                {"rx_pps_median", pps},
                                {"rx_gbps_median", gbps},
                                {"tx_pps_median", tx},
                                {"ratio_to_baseline", pps / base},
                                {"runs", runs},
                                {"check", res[name].check}};
        entry["rx_per_softirq_s_median"] = per_softirq;
        if (vxl) {
          entry["ratio_to_vxlan"] = pps / vxl;
          const auto [plo, phi] = rg::bench::median_ci95(pps_ratios);
          const auto [slo, shi] = rg::bench::median_ci95(softirq_ratios);
          entry["ratio_to_vxlan_per_round"] = {{"median", median(pps_ratios)}, {"ci95", {plo, phi}},
                                               {"values", pps_ratios}};
          entry["per_softirq_s_ratio_to_vxlan_per_round"] = {
              {"median", median(softirq_ratios)}, {"ci95", {slo, shi}}, {"values", softirq_ratios}};
        }
        if (probe) {
          const auto& h = res[name].headroom;
          auto at = [](const HeadroomProbe::Hist& hist) {
            return nlohmann::json{{"skbs", HeadroomProbe::skbs(hist)},
                                  {"median_bucket_bytes", HeadroomProbe::median_bucket(hist)},
                                  {"under_64_bytes", HeadroomProbe::share_under(hist, 64)},
                                  {"skbs_by_headroom", hist}};
          };
          entry["headroom"] = {{"step_bytes", HeadroomProbe::kStep},
                               {"gw_a_lan0_receive", at(h.receive)},
                               {"gw_a_wan0_queue_after_tc_egress", at(h.queue)}};
        }
        if (bpf_stats) {
          entry["programs"] = nlohmann::json::object();
          for (const auto& [label, st] : res[name].progs)
            entry["programs"][label] = {{"run_cnt", st.run_cnt},
                                        {"run_time_ns", st.run_time_ns},
                                        {"ns_per_run", st.run_cnt ? double(st.run_time_ns) / st.run_cnt : 0.0}};
        }
        out.push_back(entry);
      }
      t.print();
      for (const std::string& name : names) std::cout << "  " << name << ": " << res[name].check << "\n";
      if (probe) {
        std::cout << "\ngateway A, all " << rounds << " rounds: skbs by headroom as they arrive on lan0 (at the "
                  << "network header) and as they are queued on wan0 after TC egress (at the frame's start)\n";
        Table ht({"case", "lan0 skbs", "lan0 median headroom, B", "under 64 B", "wan0 skbs",
                  "wan0 median headroom after TC egress, B", "under 64 B"});
        for (const std::string& name : names) {
          const auto& h = res[name].headroom;
          ht.row({name, std::to_string(HeadroomProbe::skbs(h.receive)), HeadroomProbe::median_text(h.receive),
                  rg::bench::fmt("%.3f", HeadroomProbe::share_under(h.receive, 64)),
                  std::to_string(HeadroomProbe::skbs(h.queue)), HeadroomProbe::median_text(h.queue),
                  rg::bench::fmt("%.3f", HeadroomProbe::share_under(h.queue, 64))});
        }
        ht.print();
      }
      if (bpf_stats) {
        std::cout << "\nin-situ program cost (run_time_ns / run_cnt over all " << rounds << " rounds)\n";
        Table pt({"case", "program", "runs", "ns/run"});
        for (const std::string& name : names)
          for (const auto& [label, st] : res[name].progs)
            pt.row({name, label, std::to_string(st.run_cnt),
                    st.run_cnt ? rg::bench::fmt("%.1f", double(st.run_time_ns) / st.run_cnt) : "-"});
        pt.print();
      }
    }
    write_json(json_path, {{"benchmark", "veth_throughput"},
                           {"seconds", seconds},
                           {"rounds", rounds},
                           {"senders", senders},
                           {"receivers", receivers},
                           {"bpf_stats", bpf_stats},
                           {"headroom", headroom},
                           {"lan_xdp", lan_xdp},
                           {"geneve_module", "absent on this kernel: the kernel tunnel compared is VXLAN"},
                           {"results", out}});
  } catch (const std::exception& e) {
    std::cerr << "bench_veth_throughput: " << e.what() << "\n";
    if (stats_fd >= 0) close(stats_fd);
    return 1;
  }
  if (stats_fd >= 0) close(stats_fd);
  return 0;
}
