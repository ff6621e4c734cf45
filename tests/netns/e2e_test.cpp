// End to end through the lab: host A - gateway A - lossy WAN - gateway B -
// host B, with the RoCE v2 generator as traffic. The four steps of a tunnel
// test: the plain path works (and the WAN bleaches DSCP); roceguard's encap
// plus decap carries DSCP 46 across it and its counters agree with what the
// generator sent and the WAN dropped; encap without decap does not deliver.
#include <gtest/gtest.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "dataplane/maps.h"
#include "dataplane/state.h"
#include "direct_attach.h"
#include "lab_fixture.h"
#include "roceguard_proc.h"

namespace rg::test {
namespace {

using lab::Node;
using nlohmann::json;

constexpr uint32_t kVni = 4242;
constexpr uint8_t kDscpAf31 = 26;  // what host A marks on the plain path

lab::SenderConfig sender(const std::string& peer, uint64_t messages) {
  lab::SenderConfig c;
  c.peer = peer;
  c.messages = messages;
  c.qps.count = 4;
  c.payload = 1024;
  c.duration = std::chrono::seconds(60);
  // Generous: on a loaded machine a short timer only adds spurious resends.
  c.timeout = std::chrono::milliseconds(100);
  return c;
}

uint64_t wan_seen_ab(const lab::Wan& wan, rg_wan_class cls) { return wan.stats("to-a", cls).packets; }
uint64_t wan_dropped_ab(const lab::Wan& wan, rg_wan_class cls) {
  return wan.stats("to-a", cls).dropped;
}

class E2e : public LabTest {
 protected:
  TunnelPeer peer_a() const {
    return {topo_->addr().gw_a_wan4, topo_->addr().gw_b_wan4, kVni, "203.0.113.0/24"};
  }
  // What gateway B's decap must accept: Geneve from gateway A.
  TunnelPeer peer_b() const {
    return {topo_->addr().gw_b_wan4, topo_->addr().gw_a_wan4, kVni, "192.0.2.0/24"};
  }
};

// Without roceguard RoCE gets through, with whatever DSCP the WAN leaves: 0.
TEST_F(E2e, PlainPathWorksAndWanBleachesDscp) {
  for (bool v6 : {false, true}) {
    SCOPED_TRACE(v6 ? "IPv6" : "IPv4");
    auto cfg = sender(receiver_addr(v6), 200);
    cfg.tos = kDscpAf31 << 2;
    const auto before = wan_->stats("to-a", RG_WAN_ROCE);
    Traffic t = run_traffic(cfg, {}, [](const lab::SenderStats& s) { return s.packets; });
    const auto after = wan_->stats("to-a", RG_WAN_ROCE);

    EXPECT_EQ(t.sent.qps_done, cfg.qps.count);
    EXPECT_EQ(t.sent.completed, cfg.qps.count * cfg.messages);
    // Nothing is lost; a resend after a late ACK arrives as a duplicate.
    EXPECT_EQ(t.received.duplicates, t.sent.retransmits);
    EXPECT_EQ(t.received.delivered, cfg.qps.count * cfg.messages);
    EXPECT_EQ(t.received.packets, t.sent.packets);
    EXPECT_EQ(t.received.dscp[0], t.received.packets) << dscp_histogram(t.received.dscp);
    EXPECT_EQ(after.packets - before.packets, t.sent.packets);
    EXPECT_EQ(after.bleached - before.bleached, t.sent.packets);
    EXPECT_EQ(t.sent.ack_dscp[0], t.sent.acks + t.sent.naks + t.sent.cnps);
    std::cout << "[figures] DSCP at host B " << dscp_histogram(t.received.dscp) << std::endl;
    report(std::string("plain_") + (v6 ? "v6" : "v4"),
           {{"sent", t.sent.packets}, {"received", t.received.packets},
            {"received_dscp0", t.received.dscp[0]}, {"wan_bleached", after.bleached - before.bleached},
            {"acks", t.sent.acks}});
  }
}

// The generator's own recovery, no roceguard: Go-Back-N gets every message
// through a lossy WAN, and every loss is paid for with a resend.
TEST_F(E2e, PlainPathRecoversFromWanLoss) {
  wan_->configure({30000, 0, RG_WAN_F_BLEACH | RG_WAN_F_ROCE_ONLY, 0, 0, 0, 0, 0});  // 3 %
  auto cfg = sender(receiver_addr(false), 500);
  Traffic t = run_traffic(cfg, {}, [this](const lab::SenderStats& s) {
    return s.packets - wan_dropped_ab(*wan_, RG_WAN_ROCE);
  });
  const uint64_t dropped = wan_dropped_ab(*wan_, RG_WAN_ROCE);

  EXPECT_EQ(t.sent.qps_done, cfg.qps.count);
  EXPECT_EQ(t.received.delivered, cfg.qps.count * cfg.messages);
  EXPECT_GT(dropped, 0u);
  EXPECT_EQ(t.received.packets, t.sent.packets - dropped);
  EXPECT_GE(t.sent.retransmits, dropped);
  EXPECT_LE(t.received.lost_estimate, dropped);
  EXPECT_GT(t.sent.naks + t.sent.timeouts, 0u);
  report("plain_loss", {{"sent", t.sent.packets},
                        {"wan_dropped_requests", dropped},
                        {"wan_dropped_acks", wan_->stats("to-b", RG_WAN_ROCE).dropped},
                        {"retransmits", t.sent.retransmits},
                        {"naks", t.sent.naks},
                        {"timeouts", t.sent.timeouts},
                        {"receiver_lost_estimate", t.received.lost_estimate}});
}

// Encapsulation alone: gateway B has nothing that takes Geneve apart, so
// nothing reaches host B and every QP gives up after its retries.
TEST_F(E2e, EncapWithoutDecapDoesNotDeliver) {
  DirectAttach gw_a(topo_->netns(Node::kGatewayA), "wan0", DirectAttach::Hook::kTcEgress, peer_a());
  auto cfg = sender(receiver_addr(false), 50);
  cfg.retry_cnt = 2;
  Traffic t = run_traffic(cfg);

  EXPECT_EQ(t.received.packets, 0u);
  EXPECT_EQ(t.sent.qps_failed, cfg.qps.count);
  EXPECT_EQ(t.sent.completed, 0u);
  EXPECT_GT(wan_seen_ab(*wan_, RG_WAN_GENEVE), 0u);
  EXPECT_EQ(wan_seen_ab(*wan_, RG_WAN_ROCE), 0u);
  MapReader a(gw_a.counters_fd(), gw_a.qp_maps());
  EXPECT_EQ(sum_packets(a.counters(), RG_DIR_EGRESS, RG_EV_ENCAPSULATED), t.sent.packets);
  report("encap_only", {{"sent", t.sent.packets},
                        {"received", t.received.packets},
                        {"wan_geneve", wan_seen_ab(*wan_, RG_WAN_GENEVE)}});
}

// The XDP fast path (dataplane.xdp_forward) on both gateways, attached to
// lan0 and wan0 by `roceguard attach`, which exits (the fast path must
// outlive the loader as the programs do): the lossy-tunnel scenario holds
// on wan0 exactly as on the slow path (tshark decodes what gateway A's XDP
// program built), and every RoCE frame took the fast path, both ways: what
// was encapsulated out of a wan0 was forwarded there by XDP, and every
// frame decapsulated on a wan0 left by its lan0 from XDP too.
TEST_F(E2e, XdpFastPathCarriesTheLossyTunnel) {
  topo_->accept_xdp_redirects();
  const auto& a = topo_->addr();
  auto config = [](const std::string& local, const std::string& remote, const std::string& route) {
    return "interfaces = [\"wan0\", \"lan0\"]\n[dataplane]\nxdp_forward = true\n"
           "[[tunnel.peer]]\nname = \"far-gateway\"\nlocal = \"" + local + "\"\nremote = \"" + remote +
           "\"\nvni = " + std::to_string(kVni) + "\nroutes = [\"" + route + "\"]\n";
  };
  RoceguardRun gw_a(*topo_, Node::kGatewayA, config(a.gw_a_wan4, a.gw_b_wan4, "203.0.113.0/24"), tmp_->path());
  RoceguardRun gw_b(*topo_, Node::kGatewayB, config(a.gw_b_wan4, a.gw_a_wan4, "192.0.2.0/24"), tmp_->path());
  for (const RoceguardRun* gw : {&gw_a, &gw_b}) {
    gw->cli({"attach", "--config", gw->config_path()});
    const json st = json::parse(gw->cli({"status", "--json"}));
    ASSERT_EQ(st.at("interfaces").size(), 2u) << st.dump(2);
    for (const auto& is : st.at("interfaces")) EXPECT_EQ(is.at("ingress_hook"), kIngressXdp) << is.dump();
  }
  // One interface's rows of a gateway's counters.
  auto rows_of = [this](const RoceguardRun& gw, Node n, const std::string& ifname) -> CounterSource {
    const uint32_t ifindex = static_cast<uint32_t>(topo_->ifindex(n, ifname));
    return [&gw, ifindex] {
      std::vector<CounterRow> rows;
      for (const CounterRow& r : MapReader(gw.pin_path()).counters())
        if (r.ifindex == ifindex) rows.push_back(r);
      return rows;
    };
  };
  const LossyTunnel run =
      run_lossy_tunnel(rows_of(gw_a, Node::kGatewayA, "wan0"), rows_of(gw_b, Node::kGatewayB, "wan0"));
  expect_lossy_tunnel_delivered(run);

  const auto lan_a = rows_of(gw_a, Node::kGatewayA, "lan0")();
  const auto lan_b = rows_of(gw_b, Node::kGatewayB, "lan0")();
  const auto wan_b = rows_of(gw_b, Node::kGatewayB, "wan0")();
  // Requests: host A -> gateway A's wan0 (encapsulated there by XDP) ...
  EXPECT_EQ(run.egress_a(RG_EV_XDP_FORWARDED), run.t.sent.packets);
  // ... gateway B's wan0 -> its lan0 -> host B.
  EXPECT_EQ(sum_packets(lan_b, RG_DIR_EGRESS, RG_EV_XDP_FORWARDED), run.t.received.packets);
  // Responses: host B -> gateway B's wan0 (encapsulated by XDP) ...
  const uint64_t responses = sum_packets(wan_b, RG_DIR_EGRESS, RG_EV_ENCAPSULATED);
  EXPECT_GT(responses, 0u);
  EXPECT_EQ(sum_packets(wan_b, RG_DIR_EGRESS, RG_EV_XDP_FORWARDED), responses);
  EXPECT_EQ(sum_packets(lan_b, RG_DIR_INGRESS, RG_EV_ROCE_PACKETS), responses);
  // ... gateway A's wan0 -> its lan0 -> host A.
  const uint64_t back = run.ingress_a(RG_EV_DECAPSULATED);
  EXPECT_GT(back, 0u);
  EXPECT_EQ(sum_packets(lan_a, RG_DIR_EGRESS, RG_EV_XDP_FORWARDED), back);
  EXPECT_EQ(sum_packets(lan_a, RG_DIR_INGRESS, RG_EV_ROCE_PACKETS), run.t.sent.packets);
  report("xdp_fast_path", {{"sent", run.t.sent.packets},
                           {"dropped", run.dropped},
                           {"responses", responses},
                           {"responses_at_a", back},
                           {"retransmits", run.t.sent.retransmits}});
}

// The full data plane: TC egress on gateway A re-marks and encapsulates,
// the WAN bleaches the outer header and loses packets, XDP on gateway B
// decapsulates. Host B gets DSCP 46 and every counter adds up.
TEST_F(E2e, EncapDecapCarriesDscpAcrossLossyWan) {
  DirectAttach gw_a(topo_->netns(Node::kGatewayA), "wan0", DirectAttach::Hook::kTcEgress, peer_a());
  DirectAttach gw_b(topo_->netns(Node::kGatewayB), "wan0", DirectAttach::Hook::kXdp, peer_b());
  auto counters_of = [](const DirectAttach& gw) -> CounterSource {
    return [&gw] { return MapReader(gw.counters_fd(), gw.qp_maps()).counters(); };
  };
  const LossyTunnel run = run_lossy_tunnel(counters_of(gw_a), counters_of(gw_b));
  expect_lossy_tunnel_delivered(run);
  const Traffic& t = run.t;
  const uint64_t dropped = run.dropped;
  const uint64_t lost = run.ingress_b(RG_EV_LOST_ESTIMATE);

  // The WAN bleached every outer header it let through, and saw nothing but
  // Geneve from gateway A: exactly what host A sent, resends included.
  EXPECT_EQ(wan_->stats("to-a", RG_WAN_GENEVE).bleached, wan_seen_ab(*wan_, RG_WAN_GENEVE) - dropped);
  EXPECT_EQ(wan_seen_ab(*wan_, RG_WAN_GENEVE), t.sent.packets);
  EXPECT_EQ(wan_seen_ab(*wan_, RG_WAN_ROCE), 0u);
  EXPECT_EQ(run.egress_a(RG_EV_DSCP_REWRITTEN), t.sent.packets);
  EXPECT_EQ(t.received.packets, t.sent.packets - dropped);

  // Gateway B's tracker agrees with host B's packet for packet, and the
  // loss shows: at least one gap, each paid for by a resend at gateway A.
  EXPECT_EQ(run.ingress_b(RG_EV_PSN_GAPS), t.received.gaps);
  EXPECT_EQ(run.ingress_b(RG_EV_RETRANSMITS), t.received.seen_retransmits);
  EXPECT_GT(lost, 0u);
  EXPECT_GE(run.egress_a(RG_EV_RETRANSMITS), lost);

  std::cout << "[figures] DSCP at host B " << dscp_histogram(t.received.dscp) << std::endl;
  report("encap_decap", {{"sent", t.sent.packets},
                         {"retransmits_generator", t.sent.retransmits},
                         {"retransmits_gw_a", run.egress_a(RG_EV_RETRANSMITS)},
                         {"wan_dropped_requests", dropped},
                         {"wan_dropped_acks", wan_->stats("to-b", RG_WAN_ROCE).dropped},
                         {"lost_estimate_gw_b", lost},
                         {"gaps_gw_b", run.ingress_b(RG_EV_PSN_GAPS)},
                         {"received", t.received.packets},
                         {"received_dscp46", t.received.dscp[RG_DEFAULT_DSCP]},
                         {"naks", t.sent.naks},
                         {"timeouts", t.sent.timeouts},
                         {"captured", run.captured.size()}});
}

// No tunnel, XDP on gateway B only: the WAN bleaches RoCE, gateway B puts
// the class back before host B sees it.
TEST_F(E2e, XdpRepairsBleachedDscpWithoutTunnel) {
  DirectAttach gw_b(topo_->netns(Node::kGatewayB), "wan0", DirectAttach::Hook::kXdp, std::nullopt);
  auto cfg = sender(receiver_addr(false), 300);
  cfg.tos = RG_DEFAULT_DSCP << 2;
  Traffic t = run_traffic(cfg, {}, [](const lab::SenderStats& s) { return s.packets; });
  auto b = MapReader(gw_b.counters_fd(), gw_b.qp_maps()).counters();

  EXPECT_EQ(t.sent.qps_done, cfg.qps.count);
  EXPECT_EQ(wan_->stats("to-a", RG_WAN_ROCE).bleached, t.sent.packets);
  EXPECT_EQ(t.received.dscp[RG_DEFAULT_DSCP], t.received.packets) << dscp_histogram(t.received.dscp);
  EXPECT_EQ(sum_packets(b, RG_DIR_INGRESS, RG_EV_DSCP_REPAIRED), t.received.packets);
  EXPECT_EQ(sum_packets(b, RG_DIR_INGRESS, RG_EV_ROCE_PACKETS), t.received.packets);
  report("xdp_repair", {{"sent", t.sent.packets},
                        {"received_dscp46", t.received.dscp[RG_DEFAULT_DSCP]},
                        {"repaired_gw_b", sum_packets(b, RG_DIR_INGRESS, RG_EV_DSCP_REPAIRED)}});
}

// Congestion marks made in the WAN reach host B through the tunnel (RFC
// 6040: outer CE over inner ECT becomes inner CE), are counted at gateway B
// and answered with CNPs that reach host A.
TEST_F(E2e, WanCongestionMarksSurviveDecapAndTriggerCnps) {
  DirectAttach gw_a(topo_->netns(Node::kGatewayA), "wan0", DirectAttach::Hook::kTcEgress, peer_a());
  DirectAttach gw_b(topo_->netns(Node::kGatewayB), "wan0", DirectAttach::Hook::kXdp, peer_b());
  wan_->configure({0, 100000, RG_WAN_F_BLEACH | RG_WAN_F_ROCE_ONLY, 0, 0, 0, 0, 0});  // 10 % CE
  auto cfg = sender(receiver_addr(false), 300);
  cfg.tos = 0x02;  // ECT(0)
  lab::ReceiverConfig rcfg;
  rcfg.cnp_interval = std::chrono::microseconds(0);  // one CNP per CE packet: countable
  Traffic t = run_traffic(cfg, rcfg, [](const lab::SenderStats& s) { return s.packets; });
  auto b = MapReader(gw_b.counters_fd(), gw_b.qp_maps()).counters();
  const uint64_t marked = wan_->stats("to-a", RG_WAN_GENEVE).ce_marked;

  EXPECT_EQ(t.sent.qps_done, cfg.qps.count);
  EXPECT_GT(marked, 0u);
  EXPECT_EQ(sum_packets(b, RG_DIR_INGRESS, RG_EV_ECN_CE), marked);
  EXPECT_EQ(t.received.ecn_ce, marked);
  EXPECT_EQ(t.received.cnps, marked);
  EXPECT_EQ(t.sent.cnps, t.received.cnps);
  report("ecn_cnp", {{"sent", t.sent.packets},
                     {"wan_ce_marked", marked},
                     {"ecn_ce_gw_b", sum_packets(b, RG_DIR_INGRESS, RG_EV_ECN_CE)},
                     {"cnps_sent_b", t.received.cnps},
                     {"cnps_received_a", t.sent.cnps}});
}

// PSNs are 24-bit serial numbers: start just below 2^24 so every QP wraps
// while the WAN loses packets, with RDMA WRITEs (BTH + RETH) this time. The
// trackers on the path and at host B must still agree packet for packet.
TEST_F(E2e, PsnWrapWithWritesKeepsAccountingExact) {
  DirectAttach gw_a(topo_->netns(Node::kGatewayA), "wan0", DirectAttach::Hook::kTcEgress, peer_a());
  DirectAttach gw_b(topo_->netns(Node::kGatewayB), "wan0", DirectAttach::Hook::kXdp, peer_b());
  wan_->configure({20000, 0, RG_WAN_F_BLEACH | RG_WAN_F_ROCE_ONLY, 0, 0, 0, 0, 0});
  auto cfg = sender(receiver_addr(false), 600);
  cfg.opcode = lab::kOpWriteOnly;
  cfg.qps.first_psn = lab::kPsnMask - 300;
  Traffic t = run_traffic(cfg, {}, [this](const lab::SenderStats& s) {
    return s.packets - wan_dropped_ab(*wan_, RG_WAN_GENEVE);
  });
  const uint64_t dropped = wan_dropped_ab(*wan_, RG_WAN_GENEVE);
  auto a = MapReader(gw_a.counters_fd(), gw_a.qp_maps()).counters();
  auto b = MapReader(gw_b.counters_fd(), gw_b.qp_maps()).counters();

  EXPECT_EQ(t.sent.qps_done, cfg.qps.count);
  EXPECT_EQ(t.received.delivered, cfg.qps.count * cfg.messages);
  EXPECT_EQ(sum_packets(a, RG_DIR_EGRESS, RG_EV_RETRANSMITS), t.sent.retransmits);
  EXPECT_EQ(sum_packets(b, RG_DIR_INGRESS, RG_EV_LOST_ESTIMATE), t.received.lost_estimate);
  EXPECT_EQ(sum_packets(b, RG_DIR_INGRESS, RG_EV_RETRANSMITS), t.received.seen_retransmits);
  EXPECT_LE(t.received.lost_estimate, dropped);
  EXPECT_GE(t.sent.retransmits, dropped);
  report("psn_wrap_write", {{"sent", t.sent.packets},
                            {"retransmits", t.sent.retransmits},
                            {"wan_dropped_requests", dropped},
                            {"lost_estimate_gw_b", sum_packets(b, RG_DIR_INGRESS, RG_EV_LOST_ESTIMATE)}});
}

}  // namespace
}  // namespace rg::test
