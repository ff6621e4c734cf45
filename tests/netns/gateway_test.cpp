// The data plane on a real gateway: the lab's namespaces, veth devices and
// the host kernel's routing and UDP GSO, where BPF_PROG_TEST_RUN's single
// linear buffers cannot go. Each case is a way a gateway differs from a
// test buffer: the route to the peer through another device, an outer frame
// not addressed to the gateway, and GSO batches of RoCE packets.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "dataplane/maps.h"
#include "direct_attach.h"
#include "lab_fixture.h"
#include "packet.h"

namespace rg::test {
namespace {

using lab::Node;
using namespace std::chrono_literals;

constexpr uint32_t kVni = 4343;

// A second link between gateway A and the WAN router, 198.51.100.12/30.
constexpr const char* kGwAWan1 = "198.51.100.13";
constexpr const char* kWanA1 = "198.51.100.14";

// A UDP socket opened in a node's namespace, closed however the test ends.
class UdpSocket {
 public:
  UdpSocket(const lab::Topology& topo, Node node, const std::string& addr, uint16_t port) {
    lab::NetnsGuard in(topo.netns(node));
    fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw std::runtime_error("socket: " + std::string(strerror(errno)));
    sockaddr_in a = sockaddr_of(addr, port);
    if (bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0)
      throw std::runtime_error("bind " + addr + ": " + std::string(strerror(errno)));
  }
  ~UdpSocket() { close(fd_); }
  UdpSocket(const UdpSocket&) = delete;
  UdpSocket& operator=(const UdpSocket&) = delete;

  static sockaddr_in sockaddr_of(const std::string& addr, uint16_t port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    if (inet_pton(AF_INET, addr.c_str(), &a.sin_addr) != 1) throw std::runtime_error("bad address " + addr);
    return a;
  }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

class Gateway : public LabTest {
 protected:
  TunnelPeer peer_a() const {
    return {topo_->addr().gw_a_wan4, topo_->addr().gw_b_wan4, kVni, "203.0.113.0/24"};
  }
  TunnelPeer peer_b() const {
    return {topo_->addr().gw_b_wan4, topo_->addr().gw_a_wan4, kVni, "192.0.2.0/24"};
  }
  void in(Node n, std::vector<std::string> argv) const {
    argv.insert(argv.begin(), {"ip", "netns", "exec", topo_->netns(n)});
    lab::run_checked(argv);
  }
  uint64_t link_stat(Node n, const std::string& ifname, const std::string& stat) const {
    auto out = lab::run_checked({"ip", "netns", "exec", topo_->netns(n), "cat",
                                 "/sys/class/net/" + ifname + "/statistics/" + stat});
    return std::stoull(out);
  }
  lab::SenderConfig sender(uint64_t messages) const {
    lab::SenderConfig c;
    c.peer = receiver_addr(false);
    c.messages = messages;
    c.qps.count = 2;
    c.payload = 1024;
    c.duration = 60s;
    // Generous: on a loaded machine a short timer only adds spurious resends.
    c.timeout = 100ms;
    return c;
  }
};

uint64_t egress(const DirectAttach& gw, rg_event ev) {
  return sum_packets(MapReader(gw.counters_fd(), gw.qp_maps()).counters(), RG_DIR_EGRESS, ev);
}
uint64_t ingress(const DirectAttach& gw, rg_event ev) {
  return sum_packets(MapReader(gw.counters_fd(), gw.qp_maps()).counters(), RG_DIR_INGRESS, ev);
}

// Gateway A reaches everything through wan0, except gateway B's WAN address:
// a host route sends it through wan1. The outer packet follows the kernel's
// route, as a Linux geneve device's would, so no Geneve may leave by wan0.
TEST_F(Gateway, EncapsulatedPacketsLeaveByTheRouteToThePeer) {
  lab::run_checked({"ip", "-n", topo_->netns(Node::kGatewayA), "link", "add", "wan1", "type", "veth", "peer",
                    "name", "to-a1", "netns", topo_->netns(Node::kWan)});
  lab::run_checked({"ip", "-n", topo_->netns(Node::kGatewayA), "addr", "add", std::string(kGwAWan1) + "/30",
                    "dev", "wan1"});
  lab::run_checked({"ip", "-n", topo_->netns(Node::kWan), "addr", "add", std::string(kWanA1) + "/30", "dev",
                    "to-a1"});
  lab::run_checked({"ip", "-n", topo_->netns(Node::kGatewayA), "link", "set", "wan1", "up"});
  lab::run_checked({"ip", "-n", topo_->netns(Node::kWan), "link", "set", "to-a1", "up"});
  // Gateway A's outer source stays its wan0 address: the WAN router must
  // take it on the other link.
  in(Node::kWan, {"sysctl", "-q", "-w", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.to-a1.rp_filter=0"});
  lab::run_checked({"ip", "-n", topo_->netns(Node::kGatewayA), "route", "add",
                    std::string(topo_->addr().gw_b_wan4) + "/32", "via", kWanA1, "dev", "wan1"});

  DirectAttach gw_a(topo_->netns(Node::kGatewayA), "wan0", DirectAttach::Hook::kTcEgress, peer_a());
  DirectAttach gw_b(topo_->netns(Node::kGatewayB), "wan0", DirectAttach::Hook::kXdp, peer_b());
  const uint64_t wan1_before = link_stat(Node::kGatewayA, "wan1", "tx_packets");
  auto cfg = sender(200);
  Traffic t = run_traffic(cfg, {}, [](const lab::SenderStats& s) { return s.packets; });
  const uint64_t wan1_sent = link_stat(Node::kGatewayA, "wan1", "tx_packets") - wan1_before;

  EXPECT_EQ(t.sent.qps_done, cfg.qps.count);
  EXPECT_EQ(t.received.delivered, cfg.qps.count * cfg.messages);
  EXPECT_EQ(egress(gw_a, RG_EV_ENCAPSULATED), t.sent.packets);
  EXPECT_EQ(egress(gw_a, RG_EV_FIB_MISS), 0u);
  EXPECT_EQ(ingress(gw_b, RG_EV_DECAPSULATED), t.received.packets);
  // Nothing towards B on wan0 (the WAN router counts what arrives on to-a).
  EXPECT_EQ(wan_->stats("to-a", RG_WAN_GENEVE).packets, 0u);
  EXPECT_EQ(wan_->stats("to-a", RG_WAN_ROCE).packets, 0u);
  EXPECT_GE(wan1_sent, t.sent.packets);
  report("gateway_route", {{"sent", t.sent.packets}, {"wan1_tx", wan1_sent}});
}

// The WAN router sends every frame for gateway B to the broadcast address
// (a flooded segment does much the same). The outer packet is still gateway
// B's, so it is decapsulated; the inner frame must then be addressed to
// gateway B's wan0, or its stack refuses to forward it. Generic XDP: a
// driver builds its skb after the program ran, so the stack classifies the
// frame by the address the program wrote; on veth only the generic path
// does so (native veth XDP keeps the skb's earlier broadcast class).
TEST_F(Gateway, DecapsulatedFrameIsAddressedToTheGateway) {
  lab::run_checked({"ip", "-n", topo_->netns(Node::kWan), "neigh", "replace", topo_->addr().gw_b_wan4, "lladdr",
                    "ff:ff:ff:ff:ff:ff", "dev", "to-b", "nud", "permanent"});
  DirectAttach gw_a(topo_->netns(Node::kGatewayA), "wan0", DirectAttach::Hook::kTcEgress, peer_a());
  DirectAttach gw_b(topo_->netns(Node::kGatewayB), "wan0", DirectAttach::Hook::kXdp, peer_b(),
                    DirectAttach::XdpMode::kGeneric);
  auto cfg = sender(100);
  cfg.retry_cnt = 2;
  Traffic t = run_traffic(cfg, {}, [](const lab::SenderStats& s) { return s.packets; });

  EXPECT_EQ(t.sent.qps_done, cfg.qps.count);
  EXPECT_EQ(t.received.delivered, cfg.qps.count * cfg.messages);
  EXPECT_EQ(ingress(gw_b, RG_EV_DECAPSULATED), t.received.packets);
  report("gateway_broadcast_outer", {{"sent", t.sent.packets}, {"received", t.received.packets}});
}

// Host A sends RoCE v2 in UDP_SEGMENT batches: each sendmsg is one GSO skb of
// kSegments datagrams, each with its own BTH and consecutive PSNs, and it
// reaches gateway A's TC egress whole (veth forwards GSO skbs as they are).
// The tunnel MTU applies to each datagram, every datagram is a packet of
// its QP, and consecutive PSNs are no loss.
TEST_F(Gateway, GsoBatchesAreCountedAndEncapsulatedPerDatagram) {
  constexpr uint16_t kSrcPort = 49400;
  constexpr uint32_t kQp = 0x000321;
  constexpr size_t kSegments = 16, kBatches = 8, kPayload = 1024;
  const std::string host_a = topo_->addr().host_a4, host_b = topo_->addr().host_b4;

  DirectAttach gw_a(topo_->netns(Node::kGatewayA), "wan0", DirectAttach::Hook::kTcEgress, peer_a());
  DirectAttach gw_b(topo_->netns(Node::kGatewayB), "wan0", DirectAttach::Hook::kXdp, peer_b());
  UdpSocket rx(*topo_, Node::kHostB, host_b, RG_ROCE_UDP_PORT);
  UdpSocket tx(*topo_, Node::kHostA, host_a, kSrcPort);
  // Room for every datagram: they are read only once all are sent.
  const int rcvbuf = 8 << 20;
  ASSERT_EQ(setsockopt(rx.fd(), SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof(rcvbuf)), 0) << strerror(errno);

  // One datagram's UDP payload (BTH, payload, ICRC), cut from the frame the
  // packet builder makes of it.
  constexpr size_t kHeaders = 14 + 20 + 8;
  auto datagram = [&](uint32_t psn) {
    lab::Bth b;
    b.opcode = lab::kOpWriteOnly;
    b.dest_qp = kQp;
    b.psn = psn;
    Bytes frame = PacketBuilder().ipv4(host_a, host_b).udp(kSrcPort, RG_ROCE_UDP_PORT).bth(b)
                      .reth(0x1000, 0x77, kPayload).payload(kPayload).build();
    return slice(frame, kHeaders);
  };
  const size_t seg_size = datagram(0).size();
  const int gso = static_cast<int>(seg_size);
  ASSERT_EQ(setsockopt(tx.fd(), SOL_UDP, UDP_SEGMENT, &gso, sizeof(gso)), 0) << strerror(errno);
  sockaddr_in to = UdpSocket::sockaddr_of(host_b, RG_ROCE_UDP_PORT);
  // ARP on the way first, so no batch waits in a neighbour queue.
  topo_->check_path();

  uint32_t psn = 1000;
  for (size_t b = 0; b < kBatches; ++b) {
    Bytes batch;
    for (size_t s = 0; s < kSegments; ++s) {
      Bytes d = datagram(psn++);
      batch.insert(batch.end(), d.begin(), d.end());
    }
    ASSERT_EQ(sendto(tx.fd(), batch.data(), batch.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)),
              static_cast<ssize_t>(batch.size()))
        << strerror(errno);
  }
  const uint64_t sent = kSegments * kBatches;

  // Every datagram arrives at host B as sent (bounded wait).
  uint64_t received = 0, wrong_size = 0;
  std::vector<uint8_t> buf(65536);
  for (int idle = 0; received < sent && idle < 50;) {
    pollfd p{rx.fd(), POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) {
      ++idle;
      continue;
    }
    ssize_t n = recv(rx.fd(), buf.data(), buf.size(), MSG_DONTWAIT);
    if (n < 0) continue;
    ++received;
    wrong_size += static_cast<size_t>(n) != seg_size;
  }
  EXPECT_EQ(received, sent);
  EXPECT_EQ(wrong_size, 0u);

  MapReader a(gw_a.counters_fd(), gw_a.qp_maps());
  auto rows = a.counters();
  EXPECT_EQ(sum_packets(rows, RG_DIR_EGRESS, RG_EV_ROCE_PACKETS), sent);
  EXPECT_EQ(sum_packets(rows, RG_DIR_EGRESS, RG_EV_ENCAPSULATED), sent);
  EXPECT_EQ(sum_packets(rows, RG_DIR_EGRESS, RG_EV_DSCP_REWRITTEN), sent);
  EXPECT_EQ(sum_packets(rows, RG_DIR_EGRESS, RG_EV_OVERSIZE_PASSED), 0u);
  EXPECT_EQ(sum_packets(rows, RG_DIR_EGRESS, RG_EV_OVERSIZE_DROPPED), 0u);
  EXPECT_EQ(sum_packets(rows, RG_DIR_EGRESS, RG_EV_PSN_GAPS), 0u);
  EXPECT_EQ(sum_packets(rows, RG_DIR_EGRESS, RG_EV_LOST_ESTIMATE), 0u);
  EXPECT_EQ(sum_packets(rows, RG_DIR_EGRESS, RG_EV_RETRANSMITS), 0u);
  auto qps = a.qps();
  ASSERT_EQ(qps.size(), 1u);
  const rg_qp_dir& d = qps[0].state.dir[RG_DIR_EGRESS];
  EXPECT_EQ(qps[0].key.dest_qp, kQp);
  EXPECT_EQ(d.packets, sent);
  EXPECT_EQ(d.bytes, sent * (kHeaders + seg_size));
  EXPECT_EQ(d.lost, 0u);
  EXPECT_EQ(d.gaps, 0u);
  EXPECT_EQ(d.max_psn, psn - 1);

  // Gateway B sees the datagrams one by one after the tunnel: same figures.
  EXPECT_EQ(ingress(gw_b, RG_EV_DECAPSULATED), sent);
  EXPECT_EQ(ingress(gw_b, RG_EV_ROCE_PACKETS), sent);
  EXPECT_EQ(ingress(gw_b, RG_EV_LOST_ESTIMATE), 0u);
  report("gateway_gso", {{"sent", sent}, {"received", received}});
}

}  // namespace
}  // namespace rg::test
