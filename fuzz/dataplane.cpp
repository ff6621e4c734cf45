#include "dataplane.h"

#include "test_run.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <net/if.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>

#include "roceguard.skel.h"

namespace rg::fuzz {
namespace {

constexpr const char* kDev = "rgfz0";
const test::Mac kDevMac = {0x02, 0x00, 0x00, 0x00, 0xfa, 0x01};
const test::Mac kPeerMac = {0x02, 0x00, 0x00, 0x00, 0xfb, 0x02};

[[noreturn]] void fail(const std::string& what, int err) {
  throw std::runtime_error(what + ": " + std::strerror(err));
}

void sh(const std::string& cmd) {
  int st = std::system((cmd + " >/dev/null").c_str());
  if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
    throw std::runtime_error("`" + cmd + "` failed");
}

void write_file(const std::string& path, const std::string& value) {
  std::ofstream f(path);
  f << value;
  if (!f.flush()) throw std::runtime_error("cannot write " + path);
}

std::string mac_text(const test::Mac& m) {
  char buf[18];
  std::snprintf(buf, sizeof(buf), "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4],
                m[5]);
  return buf;
}

Tunnels fuzz_tunnels() {
  using test::ip_addr;
  Tunnels t;
  t.dev_mac = kDevMac;
  t.peer_mac = kPeerMac;
  t.peers = {
      // Tunnel MTU above the device's: the device's MTU is the limit.
      {ip_addr("192.0.2.1"), ip_addr("192.0.2.2"), 0x00abcd, 9000, Reach::kNeighbour},
      {ip_addr("2001:db8::1"), ip_addr("2001:db8::2"), 0x123456, 1400, Reach::kNeighbour},
      {ip_addr("192.0.2.1"), ip_addr("198.51.100.99"), 0x000999, 1500, Reach::kNoRoute},
      {ip_addr("192.0.2.1"), ip_addr("192.0.2.3"), 0x000777, 1500, Reach::kNoNeighbour},
      // The far ends' view of peers 0, 1 and 3 (never routed to): what the
      // egress program encapsulates, fed back, is addressed to them.
      {ip_addr("192.0.2.2"), ip_addr("192.0.2.1"), 0x00abcd, 9000, Reach::kNeighbour},
      {ip_addr("2001:db8::2"), ip_addr("2001:db8::1"), 0x123456, 1400, Reach::kNeighbour},
      {ip_addr("192.0.2.3"), ip_addr("192.0.2.1"), 0x000777, 1500, Reach::kNeighbour},
  };
  t.routes = {
      {ip_addr("203.0.113.0"), 24, 0},   {ip_addr("203.0.113.128"), 25, 1},
      {ip_addr("198.51.100.0"), 24, 2},  {ip_addr("2001:db8:6::"), 48, 1},
      {ip_addr("2001:db8:7::"), 48, 3},
  };
  // Geneve from the peers, and from our own address so that what the
  // egress program encapsulates decapsulates here too (as the far end).
  t.decap = {
      {ip_addr("192.0.2.2"), 0x00abcd, 0},   {ip_addr("192.0.2.1"), 0x00abcd, 4},
      {ip_addr("2001:db8::2"), 0x123456, 1}, {ip_addr("2001:db8::1"), 0x123456, 5},
      {ip_addr("192.0.2.1"), 0x000777, 6},
  };
  return t;
}

void private_topology() {
  if (unshare(CLONE_NEWNET) != 0) fail("unshare(CLONE_NEWNET) (needs root)", errno);
  const std::string dev = kDev;
  sh("ip link set lo up");
  sh("ip link add " + dev + " address " + mac_text(kDevMac) + " type veth peer name " + dev +
     "p address " + mac_text(kPeerMac));
  sh("ip link set " + dev + "p up");
  sh("ip link set " + dev + " up");
  sh("ip addr add 192.0.2.1/24 dev " + dev);
  sh("ip addr add 2001:db8::1/64 dev " + dev + " nodad");
  sh("ip neigh replace 192.0.2.2 lladdr " + mac_text(kPeerMac) + " dev " + dev +
     " nud permanent");
  sh("ip -6 neigh replace 2001:db8::2 lladdr " + mac_text(kPeerMac) + " dev " + dev +
     " nud permanent");
  write_file("/proc/sys/net/ipv4/ip_forward", "1");
  write_file("/proc/sys/net/ipv6/conf/all/forwarding", "1");
}

template <typename Key>
void update(bpf_map* map, const Key& key, const void* value, size_t value_size) {
  if (bpf_map__update_elem(map, &key, sizeof(key), value, value_size, 0))
    fail(std::string("update ") + bpf_map__name(map), errno);
}

}  // namespace

Dataplane::Dataplane() : tunnels_(fuzz_tunnels()) {
  private_topology();
  ifindex_ = static_cast<int>(if_nametoindex(kDev));
  if (!ifindex_) fail("if_nametoindex", errno);

  skel_ = roceguard__open();
  if (!skel_) fail("roceguard__open", errno);
  rg_config cfg{};
  cfg.dscp = tunnels_.dscp;
  cfg.cnp_dscp = tunnels_.cnp_dscp;
  cfg.mtu_policy = RG_MTU_PASS;
  cfg.outer_ttl = tunnels_.outer_ttl;
  // Poisoned headroom: a header field the program forgets to set shows as 0xff.
  cfg.flags = RG_CFG_F_DEFAULT | RG_CFG_F_POISON;
  cfg.psn_jump_max = RG_DEFAULT_PSN_JUMP_MAX;
  cfg.qp_idle_ms = RG_DEFAULT_QP_IDLE_MS;
  skel_->rodata->rg_cfg = cfg;
  // Small enough that the fuzzer's random QPs keep the LRU evicting.
  rg::set_qp_entries(skel_->obj, 4096);
  if (int err = roceguard__load(skel_)) fail("roceguard__load", -err);

  for (uint32_t i = 0; i < tunnels_.peers.size(); ++i) {
    const Peer& p = tunnels_.peers[i];
    rg_peer v{};
    v.vni = p.vni;
    v.mtu = p.mtu;
    v.family = p.local.size() == 4 ? AF_INET : AF_INET6;
    std::memcpy(v.local, p.local.data(), p.local.size());
    std::memcpy(v.remote, p.remote.data(), p.remote.size());
    update(skel_->maps.rg_peers, i, &v, sizeof(v));
  }
  for (const Route& r : tunnels_.routes) {
    if (r.prefix.size() == 4) {
      rg_route4_key k{r.len, {}};
      std::memcpy(k.addr, r.prefix.data(), 4);
      update(skel_->maps.rg_route4, k, &r.peer, sizeof(r.peer));
    } else {
      rg_route6_key k{r.len, {}};
      std::memcpy(k.addr, r.prefix.data(), 16);
      update(skel_->maps.rg_route6, k, &r.peer, sizeof(r.peer));
    }
  }
  for (const DecapKey& d : tunnels_.decap) {
    rg_decap_key k{};
    std::memcpy(k.remote, d.remote.data(), d.remote.size());
    k.family = d.remote.size() == 4 ? AF_INET : AF_INET6;
    k.vni = d.vni;
    update(skel_->maps.rg_decap, k, &d.peer, sizeof(d.peer));
  }
  // The device's address, as the loader registers it at attach.
  rg_iface iface{};
  std::memcpy(iface.mac, tunnels_.dev_mac.data(), sizeof(iface.mac));
  update(skel_->maps.rg_ifaces, static_cast<uint32_t>(ifindex_), &iface, sizeof(iface));
  reader_ = std::make_unique<MapReader>(bpf_map__fd(skel_->maps.rg_counters),
                                        QpMaps{bpf_map__fd(skel_->maps.rg_qp4), bpf_map__fd(skel_->maps.rg_qp6)});
}

Dataplane::~Dataplane() {
  reader_.reset();
  roceguard__destroy(skel_);
}

// False when the kernel refuses the frame itself (EINVAL: too short for
// the hook), which is no finding.
static bool run_frame(int prog_fd, bool xdp, uint32_t ifindex, const Bytes& in, Run& r) {
  r.out.resize(in.size() + 256);
  test::TestRun t = test::test_run_frame(prog_fd, xdp, ifindex, in, r.out);
  if (t.err) {
    if (t.err == -EINVAL) return false;
    fail(xdp ? "BPF_PROG_TEST_RUN xdp" : "BPF_PROG_TEST_RUN tc", -t.err);
  }
  r.out.resize(t.size_out);
  r.verdict = t.retval;
  return true;
}

bool Dataplane::tc(const Bytes& in, Run& r) {
  return run_frame(bpf_program__fd(skel_->progs.rg_tc_egress), false, ifindex_, in, r);
}

bool Dataplane::xdp(const Bytes& in, Run& r) {
  return run_frame(bpf_program__fd(skel_->progs.rg_xdp_ingress), true, ifindex_, in, r);
}

}  // namespace rg::fuzz
