// Shared pieces of the benchmarks: a private network namespace for
// BPF_PROG_TEST_RUN (bpf_fib_lookup needs a route and a neighbour), the
// roceguard object loaded with a given configuration, BPF_PROG_TEST_RUN one
// packet at a time, and the table/JSON output every benchmark writes.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "packet.h"
#include "roceguard/roceguard.h"

struct roceguard;

namespace rg::bench {

// The private topology of the test_run benchmarks: one veth pair, the
// tunnel peer as a permanent neighbour.
inline constexpr const char* kDev = "rgb0";
// kDev's address: the fast path takes only frames sent to it, as the stack forwards only those.
inline constexpr std::array<uint8_t, 6> kDevMac = {0x02, 0x00, 0x00, 0x00, 0x0a, 0x01};
inline constexpr const char* kDevMacText = "02:00:00:00:0a:01";
inline constexpr std::array<uint8_t, 6> kHostMac = {0x02, 0x00, 0x00, 0x00, 0x0c, 0x0a};  // kHost4's
inline constexpr const char* kLocal4 = "192.0.2.1";
inline constexpr const char* kPeer4 = "192.0.2.2";
inline constexpr const char* kHost4 = "192.0.2.10";      // a RoCE host behind this gateway
inline constexpr const char* kRemoteHost4 = "203.0.113.1";  // behind the peer
inline constexpr uint32_t kVni = 4242;

// Moves the process into a fresh network namespace holding the topology
// above; it vanishes with the process. Returns kDev's ifindex.
int enter_private_netns();

// roceguard's object loaded with cfg and qp_entries, the standard tunnel
// (203.0.113.0/24 via kPeer4, Geneve accepted from kPeer4).
class Object {
 public:
  Object(const rg_config& cfg, uint32_t qp_entries = RG_DEFAULT_QP_ENTRIES);
  ~Object();
  Object(const Object&) = delete;
  Object& operator=(const Object&) = delete;
  roceguard* skel() const { return skel_; }
  int tc_fd() const;
  int xdp_fd() const;

 private:
  roceguard* skel_ = nullptr;
};

rg_config config(uint32_t flags);

struct RunResult {
  uint32_t retval = 0;
  uint32_t duration_ns = 0;  // the kernel's own measure of the program run
  uint32_t size_out = 0;
};

// One BPF_PROG_TEST_RUN of a TC (skb) or XDP program on a fresh copy of in.
RunResult test_run_tc(int prog_fd, int ifindex, const test::Bytes& in, uint32_t repeat = 1);
RunResult test_run_xdp(int prog_fd, int ifindex, const test::Bytes& in, uint32_t repeat = 1);

// Offset of the BTH in a frame built by test::PacketBuilder (Ethernet,
// IPv4, UDP, optionally Geneve + inner Ethernet/IPv4/UDP).
size_t bth_offset(bool geneve);
void set_psn(test::Bytes& frame, size_t bth, uint32_t psn);
void set_dest_qp(test::Bytes& frame, size_t bth, uint32_t qp);

double median(std::vector<double> v);
// The 95 % bootstrap interval of v's median: resamples of v (a fixed
// seed, so a run's figures can be recomputed), their medians' 2.5th and
// 97.5th percentiles. {nan, nan} for an empty v.
std::pair<double, double> median_ci95(const std::vector<double>& v, unsigned resamples = 2000);

// The machine's CPU time so far, all CPUs, from /proc/stat's "cpu" line,
// in seconds: busy is user + nice + system + irq + softirq; steal is what
// the hypervisor gave to others.
struct CpuTimes {
  double busy = 0, softirq = 0, steal = 0;
};
CpuTimes cpu_times();
double mean(const std::vector<double>& v);
// Mean of the middle (1 - 2 cut) share: the kernel's run durations come in
// coarse steps, which a median cannot resolve, and preemption adds a long
// tail, which a plain mean would follow.
double trimmed_mean(std::vector<double> v, double cut = 0.1);

// libbpf warnings only (not its notes on sections it skips).
void quiet_libbpf();

// Bytes of kernel memory charged to a map, as bpftool shows it
// (/proc/self/fdinfo "memlock").
uint64_t map_memlock(int map_fd);

// A fixed-width table on stdout.
class Table {
 public:
  explicit Table(std::vector<std::string> header);
  void row(std::vector<std::string> cells);
  void print() const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

std::string fmt(const char* f, double v);
// JSON written to path (and the path said on stdout), with the machine's
// description so figures carry their context.
void write_json(const std::string& path, nlohmann::json j);
nlohmann::json machine();

}  // namespace rg::bench
