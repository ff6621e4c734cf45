#include "lab/topology.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <nlohmann/json.hpp>
#include <algorithm>

#include "common/error.h"
#include "lab/proc.h"

namespace rg::lab {

namespace {

struct Link {
  Node a;
  const char* a_if;
  Node b;
  const char* b_if;
};

constexpr Link kLinks[] = {
    {Node::kHostA, "eth0", Node::kGatewayA, "lan0"},
    {Node::kGatewayA, "wan0", Node::kWan, "to-a"},
    {Node::kWan, "to-b", Node::kGatewayB, "wan0"},
    {Node::kGatewayB, "lan0", Node::kHostB, "eth0"},
};
constexpr Link kBulkLinks[] = {
    {Node::kBulk, "eth0", Node::kGatewayB, "bulk0"},
    {Node::kBulkA, "eth0", Node::kGatewayA, "bulk0"},
};

}  // namespace

std::string_view node_suffix(Node n) {
  switch (n) {
    case Node::kHostA: return "hA";
    case Node::kGatewayA: return "gwA";
    case Node::kWan: return "wan";
    case Node::kGatewayB: return "gwB";
    case Node::kHostB: return "hB";
    case Node::kBulk: return "bulk";
    case Node::kBulkA: return "bulkA";
  }
  return "?";
}

NetnsGuard::NetnsGuard(const std::string& netns) {
  saved_fd_ = open(("/proc/self/task/" + std::to_string(syscall(SYS_gettid)) + "/ns/net").c_str(),
                   O_RDONLY | O_CLOEXEC);
  if (saved_fd_ < 0) throw Error("cannot open this thread's netns: " + errno_text(errno));
  int fd = open(("/run/netns/" + netns).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    close(saved_fd_);
    throw Error("network namespace " + netns + " does not exist: " + errno_text(errno),
                kExitNotFound);
  }
  int rc = setns(fd, CLONE_NEWNET);
  int err = errno;
  close(fd);
  if (rc != 0) {
    close(saved_fd_);
    throw Error("cannot enter network namespace " + netns + ": " + errno_text(err));
  }
}

NetnsGuard::~NetnsGuard() {
  // Failing to return would leave the thread in a namespace about to vanish.
  if (setns(saved_fd_, CLONE_NEWNET) != 0) abort();
  close(saved_fd_);
}

Topology::Topology(const std::string& prefix, bool bulk_senders) : bulk_senders_(bulk_senders) {
  for (Node n : kNodes)
    names_[static_cast<size_t>(n)] =
        prefix + "-" + std::to_string(getpid()) + "-" + std::string(node_suffix(n));
  if (bulk_senders_)
    for (Node n : {Node::kBulk, Node::kBulkA})
      names_[static_cast<size_t>(n)] =
          prefix + "-" + std::to_string(getpid()) + "-" + std::string(node_suffix(n));
  try {
    build();
  } catch (...) {
    destroy();
    throw;
  }
}

Topology::~Topology() { destroy(); }

const std::string& Topology::netns(Node n) const {
  if ((n == Node::kBulk || n == Node::kBulkA) && !bulk_senders_)
    throw Error("this lab topology has no bulk senders");
  return names_[static_cast<size_t>(n)];
}

void Topology::build() {
  std::vector<Link> links(std::begin(kLinks), std::end(kLinks));
  if (bulk_senders_) links.insert(links.end(), std::begin(kBulkLinks), std::end(kBulkLinks));
  for (const auto& ns : names_) {
    if (ns.empty()) continue;
    run_checked({"ip", "netns", "add", ns});
    created_.push_back(ns);
  }
  for (const auto& ns : created_) run_checked({"ip", "-n", ns, "link", "set", "lo", "up"});
  // Each pair is created inside its namespaces: no name ever exists in the
  // caller's namespace, so parallel labs cannot collide on interface names.
  for (const auto& l : links)
    run_checked({"ip", "-n", netns(l.a), "link", "add", l.a_if, "type", "veth", "peer", "name",
                 l.b_if, "netns", netns(l.b)});

  const Addresses& a = addr_;
  struct IfAddr {
    Node n;
    const char* ifname;
    std::string v4, v6;
  };
  std::vector<IfAddr> addrs = {
      {Node::kHostA, "eth0", std::string(a.host_a4) + "/24", std::string(a.host_a6) + "/64"},
      {Node::kGatewayA, "lan0", std::string(a.gw_a_lan4) + "/24", std::string(a.gw_a_lan6) + "/64"},
      {Node::kGatewayA, "wan0", std::string(a.gw_a_wan4) + "/30", std::string(a.gw_a_wan6) + "/64"},
      {Node::kWan, "to-a", std::string(a.wan_a4) + "/30", std::string(a.wan_a6) + "/64"},
      {Node::kWan, "to-b", std::string(a.wan_b4) + "/30", std::string(a.wan_b6) + "/64"},
      {Node::kGatewayB, "wan0", std::string(a.gw_b_wan4) + "/30", std::string(a.gw_b_wan6) + "/64"},
      {Node::kGatewayB, "lan0", std::string(a.gw_b_lan4) + "/24", std::string(a.gw_b_lan6) + "/64"},
      {Node::kHostB, "eth0", std::string(a.host_b4) + "/24", std::string(a.host_b6) + "/64"},
  };
  if (bulk_senders_) {
    addrs.push_back({Node::kGatewayB, "bulk0", std::string(a.gw_b_bulk4) + "/30",
                     std::string(a.gw_b_bulk6) + "/64"});
    addrs.push_back({Node::kBulk, "eth0", std::string(a.bulk4) + "/30", std::string(a.bulk6) + "/64"});
    addrs.push_back({Node::kGatewayA, "bulk0", std::string(a.gw_a_bulk4) + "/30",
                     std::string(a.gw_a_bulk6) + "/64"});
    addrs.push_back({Node::kBulkA, "eth0", std::string(a.bulk_a4) + "/30", std::string(a.bulk_a6) + "/64"});
  }
  for (const auto& ia : addrs) {
    const std::string& ns = netns(ia.n);
    run_checked({"ip", "-n", ns, "addr", "add", ia.v4, "dev", ia.ifname});
    // No duplicate address detection: nothing else uses these links, and
    // tentative addresses would make the first packets fail.
    run_checked({"ip", "-n", ns, "addr", "add", ia.v6, "dev", ia.ifname, "nodad"});
    run_checked({"ip", "-n", ns, "link", "set", ia.ifname, "up"});
  }

  // No lab-made reordering: NAPI at both ends of every link of the path.
  // Without NAPI a veth queues each frame on the backlog of the CPU that
  // sent it; when a qdisc upstream (the shaped uplink, the shaped port to
  // host B, host A's line rate) is dequeued by one CPU and then another, the
  // frames of one stream sit on two backlogs and are processed on two CPUs
  // at once: reordered. With NAPI every frame goes through the receiving
  // veth's one ring, in the order it was sent. GRO turns NAPI on; a veth
  // uses it only for frames from a peer without TSO (veth_xmit), so TSO is
  // off too, as on the bulk links. UDP is not merged by GRO (no socket asks
  // for UDP GRO, forwarding does not) unless forward_udp_gro() turns on
  // rx-udp-gro-forwarding on the gateways' LAN side.
  for (const auto& l : kLinks)
    for (const auto& [n, ifname] : {std::pair{l.a, l.a_if}, std::pair{l.b, l.b_if}})
      run_checked({"ip", "netns", "exec", netns(n), "ethtool", "-K", ifname, "gro", "on", "tso", "off"});

  for (Node n : {Node::kGatewayA, Node::kWan, Node::kGatewayB})
    run_checked({"ip", "netns", "exec", netns(n), "sysctl", "-q", "-w", "net.ipv4.ip_forward=1",
                 "net.ipv6.conf.all.forwarding=1"});

  struct Route {
    Node n;
    std::string dst, via;
  };
  std::vector<Route> routes = {
      {Node::kHostA, "default", a.gw_a_lan4},
      {Node::kHostA, "default", a.gw_a_lan6},
      {Node::kGatewayA, "203.0.113.0/24", a.wan_a4},
      {Node::kGatewayA, "198.51.100.4/30", a.wan_a4},
      {Node::kGatewayA, "2001:db8:2::/64", a.wan_a6},
      {Node::kGatewayA, "2001:db8:b::/64", a.wan_a6},
      {Node::kWan, "192.0.2.0/24", a.gw_a_wan4},
      {Node::kWan, "2001:db8:1::/64", a.gw_a_wan6},
      {Node::kWan, "203.0.113.0/24", a.gw_b_wan4},
      {Node::kWan, "2001:db8:2::/64", a.gw_b_wan6},
      {Node::kGatewayB, "192.0.2.0/24", a.wan_b4},
      {Node::kGatewayB, "198.51.100.0/30", a.wan_b4},
      {Node::kGatewayB, "2001:db8:1::/64", a.wan_b6},
      {Node::kGatewayB, "2001:db8:a::/64", a.wan_b6},
      {Node::kHostB, "default", a.gw_b_lan4},
      {Node::kHostB, "default", a.gw_b_lan6},
  };
  if (bulk_senders_) {
    routes.push_back({Node::kBulk, "default", a.gw_b_bulk4});
    routes.push_back({Node::kBulk, "default", a.gw_b_bulk6});
    routes.push_back({Node::kBulkA, "default", a.gw_a_bulk4});
    routes.push_back({Node::kBulkA, "default", a.gw_a_bulk6});
    routes.push_back({Node::kWan, "198.51.100.12/30", a.gw_a_wan4});
    routes.push_back({Node::kWan, "2001:db8:d::/64", a.gw_a_wan6});
    // Bulk sender A and the bulk sender reach each other across the WAN
    // (the lab's cross traffic, --wan-cross).
    routes.push_back({Node::kGatewayA, "198.51.100.8/30", a.wan_a4});
    routes.push_back({Node::kGatewayA, "2001:db8:c::/64", a.wan_a6});
    routes.push_back({Node::kWan, "198.51.100.8/30", a.gw_b_wan4});
    routes.push_back({Node::kWan, "2001:db8:c::/64", a.gw_b_wan6});
    routes.push_back({Node::kGatewayB, "198.51.100.12/30", a.wan_b4});
    routes.push_back({Node::kGatewayB, "2001:db8:d::/64", a.wan_b6});
    // veth hands TCP to the next hop as 64 KB GSO/GRO aggregates; a queue
    // limited in packets would then hold megabytes. Segments of wire size
    // make the gateways' queues count what a switch port counts.
    for (const auto& l : kBulkLinks) {
      run_checked({"ip", "netns", "exec", netns(l.a), "ethtool", "-K", l.a_if, "tso", "off", "gso", "off",
                   "gro", "off"});
      run_checked({"ip", "netns", "exec", netns(l.b), "ethtool", "-K", l.b_if, "tso", "off", "gso", "off",
                   "gro", "off"});
    }
  }
  for (const auto& r : routes) {
    bool v6 = r.via.find(':') != std::string::npos;
    run_checked({"ip", v6 ? "-6" : "-4", "-n", netns(r.n), "route", "add", r.dst, "via", r.via});
  }
}

void Topology::destroy() noexcept {
  // Deleting a namespace deletes its veth ends and, with them, their peers,
  // attached programs and qdiscs.
  for (auto it = created_.rbegin(); it != created_.rend(); ++it) {
    try {
      run({"ip", "netns", "del", *it}, std::chrono::seconds(10));
    } catch (...) {
    }
  }
  created_.clear();
}

int Topology::ifindex(Node n, const std::string& ifname) const {
  NetnsGuard in(netns(n));
  unsigned idx = if_nametoindex(ifname.c_str());
  if (idx == 0)
    throw Error("interface " + ifname + " does not exist in " + netns(n), kExitNotFound);
  return static_cast<int>(idx);
}

std::string Topology::mac(Node n, const std::string& ifname) const { return link_mac(netns(n), ifname); }

std::string link_mac(const std::string& netns, const std::string& ifname) {
  auto j = nlohmann::json::parse(run_checked({"ip", "-j", "-n", netns, "link", "show", "dev", ifname}));
  return j.at(0).at("address").get<std::string>();
}

std::vector<std::string> Topology::exec_argv(Node n, const std::vector<std::string>& argv) const {
  return netns_exec_argv(netns(n), argv);
}

std::vector<std::string> netns_exec_argv(const std::string& netns, const std::vector<std::string>& argv) {
  // What `ip netns exec` does (own mount namespace, a sysfs of the
  // namespace on /sys) but keeping bpffs: it is grabbed as an fd before the
  // new sysfs hides it, then bound back from that fd.
  std::vector<std::string> v{
      "nsenter", "--net=/run/netns/" + netns, "unshare", "--mount", "--propagation", "slave",
      "sh", "-c",
      "exec 3</sys/fs/bpf && mount -t sysfs sysfs /sys && "
      "mount --no-canonicalize --bind /proc/self/fd/3 /sys/fs/bpf && exec 3<&- && exec \"$@\"",
      "sh"};
  v.insert(v.end(), argv.begin(), argv.end());
  return v;
}

namespace {

// A UDP socket bound to addr:port, non-blocking.
int probe_socket(const std::string& addr, uint16_t port) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  auto* in4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* in6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (inet_pton(AF_INET, addr.c_str(), &in4->sin_addr) == 1) {
    in4->sin_family = AF_INET;
    in4->sin_port = htons(port);
    len = sizeof(*in4);
  } else if (inet_pton(AF_INET6, addr.c_str(), &in6->sin6_addr) == 1) {
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(port);
    len = sizeof(*in6);
  } else {
    throw Error("not an address: " + addr);
  }
  int fd = socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    int err = errno;
    if (fd >= 0) close(fd);
    throw Error("probe socket on " + addr + ": " + errno_text(err));
  }
  return fd;
}

bool await(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, ms) == 1;
}

}  // namespace

void Topology::accept_xdp_redirects() const {
  // GRO (and with it NAPI) is on at every end of the path already (build).
  for (Node n : {Node::kHostA, Node::kHostB})
    run_checked({"ip", "netns", "exec", netns(n), "ethtool", "-K", "eth0", "tx", "off"});
}

bool Topology::forward_udp_gro() const {
  bool on = true;
  for (Node n : {Node::kGatewayA, Node::kGatewayB}) {
    run_checked({"ip", "netns", "exec", netns(n), "ethtool", "-K", "lan0", "gro", "on", "rx-udp-gro-forwarding", "on"});
    const std::string k = run_checked({"ip", "netns", "exec", netns(n), "ethtool", "-k", "lan0"});
    on = on && k.find("rx-udp-gro-forwarding: on") != std::string::npos;
  }
  return on;
}

void Topology::segment_like_nics() const {
  run_checked({"ip", "netns", "exec", netns(Node::kHostA), "ethtool", "-K", "eth0", "tx-udp-segmentation", "off"});
  for (Node n : {Node::kGatewayA, Node::kGatewayB})
    run_checked({"ip", "netns", "exec", netns(n), "ethtool", "-K", "wan0", "tx-udp_tnl-segmentation", "off",
                 "tx-udp_tnl-csum-segmentation", "off"});
}

void Topology::check_path() const {
  // A datagram there and one back: proves both directions and leaves every
  // neighbour on the path resolved before a test's first measured packet.
  constexpr uint16_t kProbePort = 9;  // discard
  for (auto [src, dst] : {std::pair{addr_.host_a4, addr_.host_b4}, {addr_.host_a6, addr_.host_b6}}) {
    int a, b;
    {
      NetnsGuard in(netns(Node::kHostA));
      a = probe_socket(src, kProbePort);
    }
    {
      NetnsGuard in(netns(Node::kHostB));
      try {
        b = probe_socket(dst, kProbePort);
      } catch (...) {
        close(a);
        throw;
      }
    }
    sockaddr_storage to{};
    socklen_t to_len = sizeof(to);
    getsockname(b, reinterpret_cast<sockaddr*>(&to), &to_len);
    bool ok = false;
    for (int attempt = 0; attempt < 10 && !ok; ++attempt) {
      const char probe[] = "roceguard-lab-probe";
      sendto(a, probe, sizeof(probe), 0, reinterpret_cast<sockaddr*>(&to), to_len);
      if (!await(b, 500)) continue;
      char buf[64];
      sockaddr_storage from{};
      socklen_t from_len = sizeof(from);
      if (recvfrom(b, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&from), &from_len) <= 0)
        continue;
      sendto(b, buf, 1, 0, reinterpret_cast<sockaddr*>(&from), from_len);
      ok = await(a, 500) && recv(a, buf, sizeof(buf), 0) > 0;
    }
    close(a);
    close(b);
    if (!ok)
      throw Error(std::string("host A cannot exchange UDP with ") + dst + " through the lab");
  }
}

pid_t Topology::run_pid_of(const std::string& name, const std::string& prefix) {
  if (name.size() <= prefix.size() + 1 || name.compare(0, prefix.size(), prefix) != 0 || name[prefix.size()] != '-')
    return 0;
  const std::string rest = name.substr(prefix.size() + 1);  // <pid>-<node>
  const auto dash = rest.find('-');
  if (dash == 0 || dash == std::string::npos || dash > 9 || dash + 1 == rest.size()) return 0;
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  auto letter = [](char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); };
  if (!std::all_of(rest.begin(), rest.begin() + static_cast<long>(dash), digit) ||
      !std::all_of(rest.begin() + static_cast<long>(dash) + 1, rest.end(), letter))
    return 0;
  return static_cast<pid_t>(std::stol(rest.substr(0, dash)));
}

int Topology::cleanup_stale(const std::string& prefix) {
  int removed = 0;
  auto out = run_checked({"ip", "netns", "list"});
  size_t pos = 0;
  while (pos < out.size()) {
    size_t eol = out.find('\n', pos);
    std::string line = out.substr(pos, eol == std::string::npos ? std::string::npos : eol - pos);
    pos = eol == std::string::npos ? out.size() : eol + 1;
    std::string name = line.substr(0, line.find(' '));
    const pid_t pid = run_pid_of(name, prefix);
    if (!pid) continue;
    if (kill(pid, 0) == 0 || errno == EPERM) continue;  // its owner still runs
    if (run({"ip", "netns", "del", name}).status == 0) ++removed;
  }
  return removed;
}

}  // namespace rg::lab
