#include "bench_util.h"

#include "dataplane/maps.h"
#include "test_run.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <net/if.h>
#include <sched.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <random>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "lab/proc.h"
#include "roceguard.skel.h"

namespace rg::bench {

int enter_private_netns() {
  if (unshare(CLONE_NEWNET) != 0)
    throw std::runtime_error(std::string("unshare(CLONE_NEWNET): ") + std::strerror(errno) +
                             " (run as root)");
  const std::string dev = kDev;
  for (const std::vector<std::string>& argv : std::vector<std::vector<std::string>>{
           {"ip", "link", "set", "lo", "up"},
           {"ip", "link", "add", dev, "address", kDevMacText, "type", "veth", "peer", "name", dev + "p"},
           {"ip", "link", "set", dev + "p", "up"},
           {"ip", "link", "set", dev, "up"},
           {"ip", "addr", "add", std::string(kLocal4) + "/24", "dev", dev},
           {"ip", "neigh", "replace", kPeer4, "lladdr", "02:00:00:00:0b:02", "dev", dev, "nud", "permanent"}})
    lab::run_checked(argv);
  // bpf_fib_lookup() without BPF_FIB_LOOKUP_OUTPUT answers only where the
  // namespace forwards, as a gateway does.
  std::ofstream("/proc/sys/net/ipv4/ip_forward") << "1";
  return static_cast<int>(if_nametoindex(kDev));
}

rg_config config(uint32_t flags) {
  rg_config c{};
  c.dscp = RG_DEFAULT_DSCP;
  c.cnp_dscp = RG_DEFAULT_CNP_DSCP;
  c.mtu_policy = RG_MTU_PASS;
  c.outer_ttl = RG_DEFAULT_OUTER_TTL;
  c.psn_jump_max = RG_DEFAULT_PSN_JUMP_MAX;
  c.qp_idle_ms = RG_DEFAULT_QP_IDLE_MS;
  c.tunnel_opt_class = RG_TUNNEL_OPT_CLASS_DEFAULT;
  c.tunnel_opt_type = RG_TUNNEL_OPT_TYPE_DEFAULT;
  c.flags = flags;
  return c;
}

Object::Object(const rg_config& cfg, uint32_t qp_entries) {
  skel_ = roceguard__open();
  if (!skel_) throw std::runtime_error("roceguard__open: " + std::string(std::strerror(errno)));
  skel_->rodata->rg_cfg = cfg;
  rg::set_qp_entries(skel_->obj, qp_entries);
  if (int err = roceguard__load(skel_)) {
    roceguard__destroy(skel_);
    throw std::runtime_error("roceguard__load: " + std::string(std::strerror(-err)));
  }
  try {
    rg::link_xdp_forward(skel_->obj);  // as the loader does for the fast path
  } catch (...) {
    roceguard__destroy(skel_);
    throw;
  }
  rg_peer p{};
  p.vni = kVni;
  p.mtu = 9000;
  p.family = AF_INET;
  auto l = test::ip_addr(kLocal4), r = test::ip_addr(kPeer4);
  std::memcpy(p.local, l.data(), 4);
  std::memcpy(p.remote, r.data(), 4);
  uint32_t idx = 0;
  rg_route4_key rk{};
  rk.prefixlen = 24;
  auto net = test::ip_addr("203.0.113.0");
  std::memcpy(rk.addr, net.data(), 4);
  rg_decap_key dk{};
  std::memcpy(dk.remote, r.data(), 4);
  dk.family = AF_INET;
  dk.vni = kVni;
  if (bpf_map__update_elem(skel_->maps.rg_peers, &idx, sizeof(idx), &p, sizeof(p), 0) ||
      bpf_map__update_elem(skel_->maps.rg_route4, &rk, sizeof(rk), &idx, sizeof(idx), 0) ||
      bpf_map__update_elem(skel_->maps.rg_decap, &dk, sizeof(dk), &idx, sizeof(idx), 0)) {
    roceguard__destroy(skel_);
    throw std::runtime_error("writing the tunnel maps: " + std::string(std::strerror(errno)));
  }
  // As the loader registers every interface before attaching to it: the
  // XDP program decapsulates only on an interface it has an address for
  // (rg_ifaces), and counts anything else as an unknown tunnel.
  if (uint32_t ifindex = if_nametoindex(kDev)) {
    rg_iface iface{};
    std::memcpy(iface.mac, kDevMac.data(), kDevMac.size());
    if (bpf_map__update_elem(skel_->maps.rg_ifaces, &ifindex, sizeof(ifindex), &iface, sizeof(iface), 0)) {
      roceguard__destroy(skel_);
      throw std::runtime_error("writing rg_ifaces: " + std::string(std::strerror(errno)));
    }
  }
}

Object::~Object() { roceguard__destroy(skel_); }
int Object::tc_fd() const { return bpf_program__fd(skel_->progs.rg_tc_egress); }
int Object::xdp_fd() const { return bpf_program__fd(skel_->progs.rg_xdp_ingress); }

static RunResult run_frame(int prog_fd, bool xdp, int ifindex, const test::Bytes& in, uint32_t repeat) {
  static thread_local test::Bytes out(16384);
  test::TestRun r = test::test_run_frame(prog_fd, xdp, static_cast<uint32_t>(ifindex), in, out, repeat);
  if (r.err)
    throw std::runtime_error(std::string("BPF_PROG_TEST_RUN (") + (xdp ? "xdp" : "tc") +
                             "): " + std::strerror(-r.err));
  return {r.retval, r.duration, r.size_out};
}

RunResult test_run_tc(int prog_fd, int ifindex, const test::Bytes& in, uint32_t repeat) {
  return run_frame(prog_fd, false, ifindex, in, repeat);
}

RunResult test_run_xdp(int prog_fd, int ifindex, const test::Bytes& in, uint32_t repeat) {
  return run_frame(prog_fd, true, ifindex, in, repeat);
}

size_t bth_offset(bool geneve) {
  constexpr size_t kEthIpUdp = 14 + 20 + 8;
  return geneve ? kEthIpUdp + 8 + kEthIpUdp : kEthIpUdp;
}

void set_psn(test::Bytes& f, size_t bth, uint32_t psn) {
  f[bth + 9] = static_cast<uint8_t>(psn >> 16);
  f[bth + 10] = static_cast<uint8_t>(psn >> 8);
  f[bth + 11] = static_cast<uint8_t>(psn);
}

void set_dest_qp(test::Bytes& f, size_t bth, uint32_t qp) {
  f[bth + 5] = static_cast<uint8_t>(qp >> 16);
  f[bth + 6] = static_cast<uint8_t>(qp >> 8);
  f[bth + 7] = static_cast<uint8_t>(qp);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

std::pair<double, double> median_ci95(const std::vector<double>& v, unsigned resamples) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (v.empty() || resamples == 0) return {nan, nan};
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<size_t> pick(0, v.size() - 1);
  std::vector<double> medians, s(v.size());
  medians.reserve(resamples);
  for (unsigned b = 0; b < resamples; ++b) {
    for (auto& x : s) x = v[pick(rng)];
    medians.push_back(median(s));
  }
  std::sort(medians.begin(), medians.end());
  auto at = [&](double q) { return medians[static_cast<size_t>(q * (medians.size() - 1) + 0.5)]; };
  return {at(0.025), at(0.975)};
}

CpuTimes cpu_times() {
  std::ifstream f("/proc/stat");
  std::string cpu;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  f >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
  if (!f || cpu != "cpu") throw std::runtime_error("cannot read /proc/stat");
  const double hz = static_cast<double>(sysconf(_SC_CLK_TCK));
  return {(user + nice + system + irq + softirq) / hz, softirq / hz, steal / hz};
}

double trimmed_mean(std::vector<double> v, double cut) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t k = static_cast<size_t>(v.size() * cut);
  return std::accumulate(v.begin() + k, v.end() - k, 0.0) / (v.size() - 2 * k);
}

void quiet_libbpf() {
  libbpf_set_print([](libbpf_print_level level, const char* f, va_list ap) {
    return level == LIBBPF_WARN ? std::vfprintf(stderr, f, ap) : 0;
  });
}

double mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / v.size();
}

uint64_t map_memlock(int map_fd) {
  std::ifstream f("/proc/self/fdinfo/" + std::to_string(map_fd));
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("memlock:", 0) == 0) return std::stoull(line.substr(8));
  return 0;
}

Table::Table(std::vector<std::string> header) : header_(std::move(header)) {}
void Table::row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }

void Table::print() const {
  std::vector<size_t> w(header_.size());
  for (size_t i = 0; i < header_.size(); ++i) w[i] = header_[i].size();
  for (const auto& r : rows_)
    for (size_t i = 0; i < r.size() && i < w.size(); ++i) w[i] = std::max(w[i], r[i].size());
  auto line = [&](const std::vector<std::string>& cells) {
    for (size_t i = 0; i < w.size(); ++i) {
      const std::string c = i < cells.size() ? cells[i] : "";
      // First column left-aligned (names), the rest right-aligned (figures).
      if (i == 0) std::cout << c << std::string(w[i] - c.size(), ' ');
      else std::cout << "  " << std::string(w[i] - c.size(), ' ') << c;
    }
    std::cout << "\n";
  };
  line(header_);
  size_t total = 0;
  for (auto x : w) total += x + 2;
  std::cout << std::string(total - 2, '-') << "\n";
  for (const auto& r : rows_) line(r);
  std::cout << std::flush;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

nlohmann::json machine() {
  utsname u{};
  uname(&u);
  std::string model;
  std::ifstream cpu("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpu, line))
    if (line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  double load = 0;
  std::ifstream("/proc/loadavg") >> load;
  return {{"kernel", u.release},
          {"cpu", model},
          {"cpus", std::thread::hardware_concurrency()},
          {"loadavg_1m", load}};
}

void write_json(const std::string& path, nlohmann::json j) {
  j["machine"] = machine();
  std::ofstream f(path);
  f << j.dump(2) << "\n";
  if (!f) throw std::runtime_error("cannot write " + path);
  std::cout << "wrote " << path << "\n";
}

}  // namespace rg::bench
