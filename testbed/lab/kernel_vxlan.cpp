#include "lab/kernel_vxlan.h"

#include <nlohmann/json.hpp>
#include <string>

#include "lab/lab_gateway.h"
#include "lab/proc.h"
#include "roceguard/roceguard.h"

namespace rg::lab {

namespace {

void ip(const Topology& topo, Node n, std::vector<std::string> args) {
  args.insert(args.begin(), {"ip", "-n", topo.netns(n)});
  run_checked(args);
}

}  // namespace

KernelVxlan::KernelVxlan(const Topology& topo, unsigned wan_mtu) : topo_(topo), mtu_(wan_mtu - kVxlanOverhead) {
  const Addresses& a = topo.addr();
  struct End {
    Node n;
    const char *local, *remote, *addr, *peer, *far_net;
  };
  const End ends[] = {{Node::kGatewayA, a.gw_a_wan4, a.gw_b_wan4, a.gw_a_vx4, a.gw_b_vx4, "203.0.113.0/24"},
                      {Node::kGatewayB, a.gw_b_wan4, a.gw_a_wan4, a.gw_b_vx4, a.gw_a_vx4, "192.0.2.0/24"}};
  try {
    for (const auto& e : ends) {
      ip(topo, e.n, {"link", "add", kVxlanDevice, "type", "vxlan", "id", std::to_string(kLabVni), "local", e.local,
                     "remote", e.remote, "dstport", std::to_string(kVxlanPort), "dev", "wan0", "tos", "inherit",
                     "ttl", std::to_string(RG_DEFAULT_OUTER_TTL)});
      made_.push_back(e.n);
      ip(topo, e.n, {"link", "set", kVxlanDevice, "mtu", std::to_string(mtu_), "up"});
      ip(topo, e.n, {"addr", "add", std::string(e.addr) + "/30", "dev", kVxlanDevice});
      ip(topo, e.n, {"route", "replace", e.far_net, "via", e.peer, "dev", kVxlanDevice});
    }
  } catch (...) {
    restore();
    throw;
  }
}

KernelVxlan::~KernelVxlan() { restore(); }

uint64_t KernelVxlan::tx_packets(Node n) const {
  auto j = nlohmann::json::parse(
      run_checked({"ip", "-j", "-s", "-n", topo_.netns(n), "link", "show", "dev", kVxlanDevice}));
  return j.at(0).at("stats64").at("tx").at("packets").get<uint64_t>();
}

void KernelVxlan::restore() noexcept {
  const Addresses& a = topo_.addr();
  for (Node n : made_) {
    const bool is_a = n == Node::kGatewayA;
    try {
      run({"ip", "-n", topo_.netns(n), "route", "replace", is_a ? "203.0.113.0/24" : "192.0.2.0/24", "via",
           is_a ? a.wan_a4 : a.wan_b4});
      run({"ip", "-n", topo_.netns(n), "link", "del", kVxlanDevice});
    } catch (...) {
      // Deleting the namespace deletes the device all the same.
    }
  }
  made_.clear();
}

}  // namespace rg::lab
