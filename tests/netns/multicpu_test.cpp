// One QP's packets handled on several CPUs at once through a real gateway:
// a sender namespace whose threads, each pinned to its own CPU, send one
// QP's RoCE packets through a veth pair with one queue per CPU (XPS maps
// each CPU to its queue) into a gateway namespace, where `roceguard attach`
// runs XDP on the way in and TC egress on the way out. Both hooks run in the
// sending CPU's softirq, so they update the same QP entry from every CPU
// concurrently. The entry's totals must be exact, and the per-CPU counters
// must show that more than one CPU carried the traffic (else the test has
// proved nothing, and fails).
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "dataplane/maps.h"
#include "lab/proc.h"
#include "lab/topology.h"
#include "lab_fixture.h"
#include "packet.h"
#include "roceguard/roceguard.h"

namespace rg::test {
namespace {

using namespace std::chrono_literals;

constexpr const char* kTxAddr = "192.0.2.1";
constexpr const char* kGwInAddr = "192.0.2.254";
constexpr const char* kGwOutAddr = "203.0.113.254";
constexpr const char* kRxAddr = "203.0.113.1";
constexpr const char* kTxMac = "02:00:00:00:3c:01";
constexpr const char* kGwInMac = "02:00:00:00:3c:02";
constexpr const char* kGwOutMac = "02:00:00:00:3c:03";
constexpr const char* kRxMac = "02:00:00:00:3c:04";
constexpr uint32_t kDestQp = 0x3c0011;
constexpr uint32_t kFirstPsn = 0x100000;
constexpr size_t kPayload = 256;  // after the BTH
constexpr int kPerThread = 20000;
constexpr int kBurst = 32;
// Ethernet, IPv4 and UDP in front of the UDP payload the sender writes.
constexpr uint64_t kL2ToL4 = 14 + 20 + 8;

// A cpumask as sysfs writes it: hex, 32-bit groups separated by commas.
std::string cpumask_of(int cpu) {
  std::string out;
  for (int group = cpu / 32; group >= 0; --group) {
    char buf[16];
    std::snprintf(buf, sizeof(buf), group == cpu / 32 ? "%x" : "%08x", group == cpu / 32 ? 1u << (cpu % 32) : 0u);
    out += buf;
    if (group) out += ",";
  }
  return out;
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE && cpus.size() < 8; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

// tx --(tx0 == gin)-- gw --(gout == rx0)-- rx, every veth end with one queue
// per CPU, static neighbours (no packet waits for ARP), removed however the
// test ends.
class ThreeNamespaces {
 public:
  explicit ThreeNamespaces(const std::vector<int>& cpus) {
    const size_t queues = cpus.size();
    const std::string base = std::string(kTag) + "-" + std::to_string(getpid()) + "-mcpu-";
    tx_ = base + "tx";
    gw_ = base + "gw";
    rx_ = base + "rx";
    for (const auto& ns : {tx_, gw_, rx_}) {
      lab::run_checked({"ip", "netns", "add", ns});
      created_.push_back(ns);
      lab::run_checked({"ip", "-n", ns, "link", "set", "lo", "up"});
    }
    const std::string q = std::to_string(queues);
    lab::run_checked({"ip", "-n", tx_, "link", "add", "tx0", "numtxqueues", q, "numrxqueues", q, "address", kTxMac,
                      "type", "veth", "peer", "name", "gin", "netns", gw_, "numtxqueues", q, "numrxqueues", q,
                      "address", kGwInMac});
    lab::run_checked({"ip", "-n", gw_, "link", "add", "gout", "numtxqueues", q, "numrxqueues", q, "address",
                      kGwOutMac, "type", "veth", "peer", "name", "rx0", "netns", rx_, "numtxqueues", q,
                      "numrxqueues", q, "address", kRxMac});
    addr(tx_, "tx0", std::string(kTxAddr) + "/24");
    addr(gw_, "gin", std::string(kGwInAddr) + "/24");
    addr(gw_, "gout", std::string(kGwOutAddr) + "/24");
    addr(rx_, "rx0", std::string(kRxAddr) + "/24");
    lab::run_checked({"ip", "-n", tx_, "route", "add", "default", "via", kGwInAddr});
    lab::run_checked({"ip", "-n", rx_, "route", "add", "default", "via", kGwOutAddr});
    neigh(tx_, "tx0", kGwInAddr, kGwInMac);
    neigh(gw_, "gin", kTxAddr, kTxMac);
    neigh(gw_, "gout", kRxAddr, kRxMac);
    neigh(rx_, "rx0", kGwOutAddr, kGwOutMac);
    lab::run_checked(lab::netns_exec_argv(gw_, {"sysctl", "-q", "-w", "net.ipv4.ip_forward=1"}));
    // A full veth ring stops the queue; a qdisc holds what waits (noqueue would drop it).
    lab::run_checked({"ip", "netns", "exec", tx_, "tc", "qdisc", "replace", "dev", "tx0", "root", "mq"});
    // XPS: a packet sent on the n-th CPU leaves by queue n, so gin's NAPI n runs there.
    for (size_t n = 0; n < queues; ++n)
      lab::run_checked(lab::netns_exec_argv(
          tx_, {"sh", "-c", "echo " + cpumask_of(cpus[n]) + " > /sys/class/net/tx0/queues/tx-" + std::to_string(n) +
                                "/xps_cpus"}));
  }
  ~ThreeNamespaces() {
    for (const auto& ns : created_) lab::run({"ip", "netns", "del", ns});
  }
  ThreeNamespaces(const ThreeNamespaces&) = delete;
  ThreeNamespaces& operator=(const ThreeNamespaces&) = delete;

  const std::string& tx() const { return tx_; }
  const std::string& gw() const { return gw_; }
  const std::string& rx() const { return rx_; }

 private:
  static void addr(const std::string& ns, const std::string& dev, const std::string& a) {
    lab::run_checked({"ip", "-n", ns, "addr", "add", a, "dev", dev});
    lab::run_checked({"ip", "-n", ns, "link", "set", dev, "up"});
  }
  static void neigh(const std::string& ns, const std::string& dev, const std::string& ip, const std::string& mac) {
    lab::run_checked({"ip", "-n", ns, "neigh", "replace", ip, "lladdr", mac, "dev", dev, "nud", "permanent"});
  }
  std::string tx_, gw_, rx_;
  std::vector<std::string> created_;
};

// `roceguard attach` on both of the gateway's devices (XDP and TC egress on
// each), detached and its pins removed however the test ends.
class AttachedGateway {
 public:
  explicit AttachedGateway(const std::string& netns) : netns_(netns), pin_("/sys/fs/bpf/" + netns) {
    result_ = lab::run(lab::netns_exec_argv(
        netns_, {ROCEGUARD_BIN, "attach", "-i", "gin", "-i", "gout", "--xdp-mode", "native", "--pin-path", pin_}));
  }
  ~AttachedGateway() {
    lab::run(lab::netns_exec_argv(netns_, {ROCEGUARD_BIN, "detach", "--pin-path", pin_}));
    lab::run({"rm", "-rf", pin_});
  }
  AttachedGateway(const AttachedGateway&) = delete;
  AttachedGateway& operator=(const AttachedGateway&) = delete;
  bool ok() const { return result_.status == 0; }
  std::string output() const { return result_.out + result_.err; }
  const std::string& pin_path() const { return pin_; }

 private:
  std::string netns_, pin_;
  lab::RunResult result_;
};

// roce_packets per CPU and direction, over every counter key: which CPUs ran
// the programs.
std::vector<std::array<uint64_t, RG_DIR_MAX>> roce_packets_per_cpu(const std::string& pin_path) {
  const int ncpu = libbpf_num_possible_cpus();
  std::vector<std::array<uint64_t, RG_DIR_MAX>> per_cpu(ncpu > 0 ? ncpu : 0);
  int fd = bpf_obj_get((pin_path + "/" + kMapCounters).c_str());
  if (fd < 0 || ncpu <= 0) {
    if (fd >= 0) close(fd);
    return per_cpu;
  }
  std::vector<rg_counters> values(static_cast<size_t>(ncpu));
  rg_counter_key key{}, next{};
  const void* prev = nullptr;
  while (bpf_map_get_next_key(fd, prev, &next) == 0) {
    key = next;
    prev = &key;
    if (bpf_map_lookup_elem(fd, &key, values.data()) != 0) continue;
    for (int c = 0; c < ncpu; ++c)
      per_cpu[c][key.direction & 1] += values[c].ev[RG_EV_ROCE_PACKETS].packets;
  }
  close(fd);
  return per_cpu;
}

TEST(MultiCpu, OneQpFromEveryCpuThroughAGatewayCountsExactly) {
  ASSERT_EQ(geteuid(), 0u) << "network namespaces need root";
  const std::vector<int> cpus = allowed_cpus();
  if (cpus.size() < 2) GTEST_SKIP() << "one CPU: nothing runs concurrently";
  ensure_bpffs();
  ThreeNamespaces net(cpus);
  AttachedGateway rg(net.gw());
  ASSERT_TRUE(rg.ok()) << rg.output();

  // A socket on the receiver's RoCE port, never read: no ICMP comes back,
  // and whatever it cannot hold is dropped after both hooks.
  int sink;
  {
    lab::NetnsGuard in(net.rx());
    sink = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(wire::kRoceV2Port);
    inet_pton(AF_INET, kRxAddr, &a.sin_addr);
    ASSERT_EQ(bind(sink, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << strerror(errno);
  }
  std::vector<int> fds;
  {
    lab::NetnsGuard in(net.tx());
    for (size_t t = 0; t < cpus.size(); ++t) {
      int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
      ASSERT_GE(fd, 0) << strerror(errno);
      fds.push_back(fd);
    }
  }

  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(wire::kRoceV2Port);
  inet_pton(AF_INET, kRxAddr, &dst.sin_addr);
  // The QP's first PSN goes alone, and is counted by both hooks before the
  // threads start: every later PSN is then ahead of it.
  {
    std::vector<uint8_t> buf(wire::kBthLen + kPayload, 0x5a);
    wire::Bth bth;
    bth.opcode = wire::kOpSendOnly;
    bth.dest_qp = kDestQp;
    bth.psn = kFirstPsn;
    wire::put_bth(buf.data(), bth);
    ASSERT_GT(sendto(fds[0], buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&dst), sizeof(dst)), 0);
    bool seen = false;
    for (int i = 0; i < 100 && !seen; ++i) {
      std::vector<QpRow> q = MapReader(rg.pin_path()).qps();
      seen = q.size() == 1 && q[0].state.dir[RG_DIR_INGRESS].packets == 1 && q[0].state.dir[RG_DIR_EGRESS].packets == 1;
      if (!seen) std::this_thread::sleep_for(50ms);
    }
    ASSERT_TRUE(seen) << "the first packet did not cross both hooks";
  }

  // Every thread sends its share of one QP's PSNs, taken from one counter,
  // so the QP sees unique PSNs in an order the CPUs interleave.
  std::atomic<uint32_t> next_psn{kFirstPsn + 1};
  std::atomic<uint64_t> sent{1}, refused{0};
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (size_t t = 0; t < cpus.size(); ++t) {
    threads.emplace_back([&, t] {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpus[t], &one);
      pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
      std::vector<uint8_t> buf(wire::kBthLen + kPayload, 0x5a);
      ready++;
      while (ready.load() < static_cast<int>(cpus.size())) std::this_thread::yield();
      const auto deadline = std::chrono::steady_clock::now() + 60s;
      for (int i = 0; i < kPerThread && std::chrono::steady_clock::now() < deadline;) {
        wire::Bth bth;
        bth.opcode = wire::kOpSendOnly;
        bth.dest_qp = kDestQp;
        bth.psn = next_psn.fetch_add(1) & 0xffffff;
        wire::put_bth(buf.data(), bth);
        // Bounded retry of a send the full qdisc refused (before any hook).
        int tries = 0;
        while (sendto(fds[t], buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&dst), sizeof(dst)) < 0) {
          refused++;
          if (++tries > 1000) return;
          std::this_thread::sleep_for(100us);
        }
        sent++;
        if (++i % kBurst == 0) std::this_thread::sleep_for(50us);
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int fd : fds) close(fd);
  close(sink);
  const uint64_t n = sent.load();
  const uint64_t frame = kL2ToL4 + wire::kBthLen + kPayload;
  ASSERT_EQ(n, 1 + cpus.size() * kPerThread) << "every thread sent its share";

  MapReader reader(rg.pin_path());
  std::vector<QpRow> qps = reader.qps();
  ASSERT_EQ(qps.size(), 1u) << "one QP";
  const QpState& st = qps[0].state;
  std::vector<CounterRow> rows = reader.counters();
  auto per_cpu = roce_packets_per_cpu(rg.pin_path());
  int cpus_in = 0, cpus_out = 0;
  std::string spread;
  for (size_t c = 0; c < per_cpu.size(); ++c) {
    cpus_in += per_cpu[c][RG_DIR_INGRESS] > 0;
    cpus_out += per_cpu[c][RG_DIR_EGRESS] > 0;
    if (per_cpu[c][RG_DIR_INGRESS] || per_cpu[c][RG_DIR_EGRESS])
      spread += " cpu" + std::to_string(c) + " " + std::to_string(per_cpu[c][RG_DIR_INGRESS]) + "/" +
                std::to_string(per_cpu[c][RG_DIR_EGRESS]);
  }
  std::printf("[figures] %zu threads sent %llu packets (%llu sends refused and retried); per CPU XDP/TC:%s\n",
              cpus.size(), (unsigned long long)n, (unsigned long long)refused.load(), spread.c_str());
  for (int d : {RG_DIR_INGRESS, RG_DIR_EGRESS}) {
    const rg_qp_dir& q = st.dir[d];
    std::printf("[figures] %s: packets %llu bytes %llu retransmits %llu lost %llu gaps %llu max_psn 0x%06x\n",
                d == RG_DIR_INGRESS ? "XDP ingress" : "TC egress", (unsigned long long)q.packets,
                (unsigned long long)q.bytes, (unsigned long long)q.retransmits, (unsigned long long)q.lost,
                (unsigned long long)q.gaps, q.max_psn);
  }

  // Without concurrency the rest proves nothing.
  EXPECT_GE(cpus_in, 2) << "XDP ran on one CPU only:" << spread;
  EXPECT_GE(cpus_out, 2) << "TC egress ran on one CPU only:" << spread;
  for (int d : {RG_DIR_INGRESS, RG_DIR_EGRESS}) {
    const rg_qp_dir& q = st.dir[d];
    SCOPED_TRACE(d == RG_DIR_INGRESS ? "XDP ingress" : "TC egress");
    EXPECT_EQ(q.packets, n);
    EXPECT_EQ(q.bytes, n * frame);
    EXPECT_EQ(sum_packets(rows, static_cast<rg_direction>(d), RG_EV_ROCE_PACKETS), n);
    // Unique PSNs from first to first + n - 1, in whatever order: the
    // highest is the last, and every PSN that arrived behind it was counted
    // as a resend exactly when a jump past it counted it lost, so the two
    // sums agree.
    EXPECT_EQ(q.max_psn, (kFirstPsn + n - 1) & 0xffffff);
    EXPECT_EQ(q.lost, q.retransmits);
  }
  EXPECT_EQ(sum_packets(rows, RG_DIR_INGRESS, RG_EV_QP_NEW), 1u) << "one entry per direction, created once";
  EXPECT_EQ(sum_packets(rows, RG_DIR_EGRESS, RG_EV_QP_NEW), 1u) << "one entry per direction, created once";
  EXPECT_EQ(sum_packets(rows, RG_DIR_INGRESS, RG_EV_PSN_RESYNC) + sum_packets(rows, RG_DIR_EGRESS, RG_EV_PSN_RESYNC),
            0u);
}

}  // namespace
}  // namespace rg::test
