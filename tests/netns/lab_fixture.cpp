#include "lab_fixture.h"

#include <arpa/inet.h>
#include <linux/magic.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/mount.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <signal.h>

#include <cerrno>
#include <chrono>
#include <regex>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

namespace rg::test {

using namespace std::chrono_literals;

void ensure_bpffs() {
  struct statfs st {};
  if (statfs("/sys/fs/bpf", &st) == 0 && st.f_type == BPF_FS_MAGIC) return;
  if (mount("bpf", "/sys/fs/bpf", "bpf", 0, nullptr) != 0)
    throw std::runtime_error(std::string("cannot mount bpffs on /sys/fs/bpf: ") + strerror(errno));
}

TempDir::TempDir() {
  std::string tmpl = "/tmp/" + std::string(kTag) + "-" + std::to_string(getpid()) + "-XXXXXX";
  if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

namespace {

constexpr uint16_t kProbePort = 9;  // discard

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// One UDP datagram from src (an address of node) to dst:port.
void send_probe(const lab::Topology& topo, lab::Node node, const std::string& src,
                const std::string& dst) {
  lab::NetnsGuard in(topo.netns(node));
  const bool v6 = src.find(':') != std::string::npos;
  int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("probe socket");
  sockaddr_storage a{}, b{};
  socklen_t len;
  if (v6) {
    auto *x = reinterpret_cast<sockaddr_in6*>(&a), *y = reinterpret_cast<sockaddr_in6*>(&b);
    x->sin6_family = y->sin6_family = AF_INET6;
    inet_pton(AF_INET6, src.c_str(), &x->sin6_addr);
    inet_pton(AF_INET6, dst.c_str(), &y->sin6_addr);
    y->sin6_port = htons(kProbePort);
    len = sizeof(sockaddr_in6);
  } else {
    auto *x = reinterpret_cast<sockaddr_in*>(&a), *y = reinterpret_cast<sockaddr_in*>(&b);
    x->sin_family = y->sin_family = AF_INET;
    inet_pton(AF_INET, src.c_str(), &x->sin_addr);
    inet_pton(AF_INET, dst.c_str(), &y->sin_addr);
    y->sin_port = htons(kProbePort);
    len = sizeof(sockaddr_in);
  }
  const char msg[] = "capture-probe";
  bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), len) == 0 &&
            sendto(fd, msg, sizeof(msg), 0, reinterpret_cast<sockaddr*>(&b), len) > 0;
  close(fd);
  if (!ok) throw std::runtime_error("cannot send a capture probe from " + src);
}

}  // namespace

Capture::Capture(const lab::Topology& topo, bool v6, const std::string& dir) {
  static int seq = 0;
  pcap_ = dir + "/capture" + std::to_string(seq) + ".pcapng";
  log_ = dir + "/capture" + std::to_string(seq++) + ".log";
  const auto& a = topo.addr();
  const std::string host_a = v6 ? a.host_a6 : a.host_a4, gw_a = v6 ? a.gw_a_wan6 : a.gw_a_wan4;
  // -P -l: a summary line per packet as it is captured, which is how the
  // probe is seen. Headers are all that is decoded: a short snapshot keeps
  // the capture buffer from overflowing.
  child_ = std::make_unique<lab::Child>(
      std::vector<std::string>{"ip", "netns", "exec", topo.netns(lab::Node::kWan), "tshark", "-n",
                               "-l", "-P", "-i", "to-a", "-s", "256", "-B", "16", "-f",
                               "udp and (src host " + host_a + " or src host " + gw_a + ")",
                               "-a", "duration:180", "-w", pcap_},
      log_);
  for (int i = 0; i < 400; ++i) {  // 20 s
    std::string log = slurp(log_);
    auto started = log.find("Capturing on");
    if (started != std::string::npos) {
      if (log.find(" UDP ", started) != std::string::npos) return;
      send_probe(topo, lab::Node::kGatewayA, gw_a, v6 ? a.wan_a6 : a.wan_a4);
    }
    if (!child_->running()) throw std::runtime_error("tshark exited: " + log);
    std::this_thread::sleep_for(50ms);
  }
  throw std::runtime_error("tshark did not start capturing: " + slurp(log_));
}

Capture::~Capture() { child_.reset(); }

std::vector<CapturedPacket> Capture::packets() {
  // SIGINT: tshark finishes the file and exits.
  child_->signal(SIGINT);
  if (child_->wait(20s) < 0) child_->stop();
  auto out = lab::run_checked({"tshark", "-n", "-r", pcap_, "-T", "fields", "-E", "occurrence=a",
                               "-E", "aggregator=,", "-e", "ip.dsfield.dscp", "-e", "ipv6.tclass",
                               "-e", "udp.dstport"});
  std::vector<CapturedPacket> pkts;
  std::istringstream lines(out);
  std::string line;
  auto ints = [](const std::string& field, bool tclass) {
    std::vector<int> v;
    std::istringstream f(field);
    std::string item;
    while (std::getline(f, item, ','))
      if (!item.empty()) {
        int x = std::stoi(item, nullptr, 0);
        v.push_back(tclass ? x >> 2 : x);
      }
    return v;
  };
  while (std::getline(lines, line)) {
    std::vector<std::string> cols;
    std::istringstream l(line);
    std::string col;
    while (std::getline(l, col, '\t')) cols.push_back(col);
    cols.resize(3);
    CapturedPacket p;
    p.dscp = ints(cols[0], false);
    auto v6 = ints(cols[1], true);
    p.dscp.insert(p.dscp.end(), v6.begin(), v6.end());
    p.dports = ints(cols[2], false);
    if (!p.dports.empty() && p.dports[0] == kProbePort) continue;
    pkts.push_back(p);
  }
  return pkts;
}

// Pin directories <tag>-<pid>-<node> of runs that died before cleaning up.
// Their namespaces, and with them the attachments, are already gone.
void remove_stale_pins() {
  const std::regex re("^" + std::string(kTag) + "-([0-9]+)-[A-Za-z]+$");
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/sys/fs/bpf", ec)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (!std::regex_match(name, m, re)) continue;
    if (kill(static_cast<pid_t>(std::stol(m[1])), 0) == 0 || errno == EPERM) continue;
    std::filesystem::remove_all(e.path(), ec);
  }
}

void LabTest::SetUp() {
  ASSERT_EQ(geteuid(), 0u) << "the network namespace tests need root (BPF, netns)";
  ensure_bpffs();
  lab::Topology::cleanup_stale(kTag);
  remove_stale_pins();
  tmp_ = std::make_unique<TempDir>();
  topo_ = std::make_unique<lab::Topology>(kTag);
  topo_->check_path();
  rg_wan_config wan_cfg{};
  wan_cfg.flags = RG_WAN_F_BLEACH;
  wan_ = std::make_unique<lab::Wan>(topo_->netns(lab::Node::kWan), std::vector<std::string>{"to-a", "to-b"},
                                    wan_cfg);
}

void LabTest::TearDown() {
  wan_.reset();
  topo_.reset();
  tmp_.reset();
}

std::string LabTest::sender_addr(bool v6) const {
  return v6 ? topo_->addr().host_a6 : topo_->addr().host_a4;
}
std::string LabTest::receiver_addr(bool v6) const {
  return v6 ? topo_->addr().host_b6 : topo_->addr().host_b4;
}

Traffic LabTest::run_traffic(lab::SenderConfig cfg, lab::ReceiverConfig rcfg,
                             const std::function<uint64_t(const lab::SenderStats&)>& expected_at_b) {
  rcfg.qps = cfg.qps;
  auto rx = start_receiver(rcfg);
  auto tx = make_sender(cfg);
  Traffic t;
  t.sent = tx->run();
  // Packets still in flight when the last ACK came back (Go-Back-N resends)
  // land shortly after; wait for them, bounded, then take the figures.
  for (int i = 0; i < 150; ++i) {
    t.received = rx->stats();
    if (expected_at_b && t.received.packets >= expected_at_b(t.sent)) break;
    if (!expected_at_b && i >= 10) break;
    std::this_thread::sleep_for(20ms);
  }
  rx->stop();
  t.received = rx->stats();
  return t;
}

std::unique_ptr<lab::Receiver> LabTest::start_receiver(const lab::ReceiverConfig& rcfg) {
  std::unique_ptr<lab::Receiver> rx;
  {
    lab::NetnsGuard in(topo_->netns(lab::Node::kHostB));
    rx = std::make_unique<lab::Receiver>(rcfg);
  }
  rx->start();
  return rx;
}

std::unique_ptr<lab::Sender> LabTest::make_sender(const lab::SenderConfig& cfg) {
  lab::NetnsGuard in(topo_->netns(lab::Node::kHostA));
  return std::make_unique<lab::Sender>(cfg);
}

LossyTunnel LabTest::run_lossy_tunnel(const CounterSource& gw_a, const CounterSource& gw_b) {
  // Everything host A or gateway A sends towards B, as it leaves gateway A.
  Capture cap(*topo_, false, tmp_->path());
  wan_->configure({20000, 0, RG_WAN_F_BLEACH | RG_WAN_F_ROCE_ONLY, 0, 0, 0, 0, 0});  // 2 %

  LossyTunnel run;
  run.cfg.peer = receiver_addr(false);
  run.cfg.messages = 1000;
  run.cfg.qps.count = 4;
  run.cfg.payload = 1024;
  run.cfg.tos = 0;
  run.cfg.duration = 60s;
  // Generous: on a loaded machine a short timer only adds spurious resends.
  run.cfg.timeout = 100ms;
  run.t = run_traffic(run.cfg, {}, [this](const lab::SenderStats& s) {
    return s.packets - wan_->stats("to-a", RG_WAN_GENEVE).dropped;
  });
  run.dropped = wan_->stats("to-a", RG_WAN_GENEVE).dropped;
  run.gw_a = gw_a();
  run.gw_b = gw_b();
  run.captured = cap.packets();
  return run;
}

void expect_lossy_tunnel_delivered(const LossyTunnel& run) {
  const Traffic& t = run.t;

  // The generator finished, across the loss.
  EXPECT_EQ(t.sent.qps_done, run.cfg.qps.count);
  EXPECT_EQ(t.received.delivered, run.cfg.qps.count * run.cfg.messages);
  EXPECT_GT(run.dropped, 0u);

  // On the wire between gateway A and the WAN: Geneve only, outer DSCP 46,
  // inner RoCE v2 with DSCP 46.
  EXPECT_GE(run.captured.size(), 100u);  // thousands were sent while it ran
  EXPECT_LE(run.captured.size(), t.sent.packets);
  for (const auto& p : run.captured) {
    ASSERT_EQ(p.dports.size(), 2u);
    EXPECT_EQ(p.dports[0], RG_GENEVE_UDP_PORT);
    EXPECT_EQ(p.dports[1], RG_ROCE_UDP_PORT);
    ASSERT_EQ(p.dscp.size(), 2u);
    EXPECT_EQ(p.dscp[0], RG_DEFAULT_DSCP);
    EXPECT_EQ(p.dscp[1], RG_DEFAULT_DSCP);
  }

  // Host B: DSCP 46 on every packet although the WAN bleached every outer header.
  EXPECT_EQ(t.received.dscp[RG_DEFAULT_DSCP], t.received.packets) << dscp_histogram(t.received.dscp);

  // Gateway A saw exactly what host A sent, resends included; gateway B
  // what the WAN let through, and what host B got.
  EXPECT_EQ(run.egress_a(RG_EV_ROCE_PACKETS), t.sent.packets);
  EXPECT_EQ(run.egress_a(RG_EV_ENCAPSULATED), t.sent.packets);
  EXPECT_EQ(run.egress_a(RG_EV_RETRANSMITS), t.sent.retransmits);
  EXPECT_EQ(run.ingress_b(RG_EV_DECAPSULATED), t.sent.packets - run.dropped);
  EXPECT_EQ(run.ingress_b(RG_EV_ROCE_PACKETS), t.received.packets);

  // Loss accounting. A gap at gateway B is a PSN that was skipped, so sent
  // and not seen: dropped by the WAN. Drops that never show as a gap are
  // resends (their PSN is behind the highest seen) and the tail of a burst
  // (no higher PSN follows before the resend). So lost <= dropped, exactly
  // what host B's own tracker counts, and every drop cost a resend.
  const uint64_t lost = run.ingress_b(RG_EV_LOST_ESTIMATE);
  EXPECT_EQ(lost, t.received.lost_estimate);
  EXPECT_LE(lost, run.dropped);
  EXPECT_GE(t.sent.retransmits, run.dropped);
}

std::string dscp_histogram(const std::array<uint64_t, 64>& h) {
  std::string s;
  for (size_t d = 0; d < h.size(); ++d)
    if (h[d]) s += (s.empty() ? "" : " ") + std::to_string(d) + ":" + std::to_string(h[d]);
  return "{" + s + "}";
}

void report(const std::string& test, const std::map<std::string, uint64_t>& figures) {
  std::cout << "[figures] " << test;
  for (const auto& [k, v] : figures) std::cout << " " << k << "=" << v;
  std::cout << std::endl;
}

}  // namespace rg::test
