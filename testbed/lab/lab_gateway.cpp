#include "lab/lab_gateway.h"

#include <spdlog/spdlog.h>

#include <sstream>

#include "common/error.h"

namespace rg::lab {

Config gateway_config(const std::string& local, const std::string& remote, const std::string& route,
                      bool tunnel, XdpMode xdp_mode, unsigned tunnel_mtu, const std::string& ingress_hook,
                      bool xdp_forward, bool sequence, const std::string& shield) {
  std::ostringstream toml;
  toml << (xdp_forward ? "interfaces = [\"wan0\", \"lan0\"]\n" : "interfaces = [\"wan0\"]\n")
       << "[dataplane]\nxdp_mode = \"" << (xdp_mode == XdpMode::kSkb ? "skb" : "native") << "\"\n"
       << "ingress_hook = \"" << ingress_hook << "\"\n"
       << "xdp_forward = " << (xdp_forward ? "true" : "false") << "\n";
  if (tunnel) {
    toml << "[tunnel]\n";
    if (sequence) toml << "sequence = true\n";
    // "off" is tunnel.shield's default.
    if (shield != "off") toml << "shield = \"" << shield << "\"\n";
    toml << "[[tunnel.peer]]\nname = \"far-gateway\"\nlocal = \"" << local << "\"\nremote = \""
         << remote << "\"\nvni = " << kLabVni << "\nmtu = " << tunnel_mtu << "\nroutes = [\"" << route << "\"]\n";
  }
  ConfigProblems problems;
  Config cfg = parse_config_string(toml.str(), problems);
  if (!problems.ok()) {
    std::string all;
    for (const auto& e : problems.errors) all += "\n  " + e;
    throw Error("lab gateway configuration rejected:" + all);
  }
  return cfg;
}

Gateway::Gateway(const Topology& topo, Node node, const std::string& pin, const Config& cfg)
    : netns_(topo.netns(node)), pin_(pin) {
  ensure_bpffs(pin_);
  lock_ = std::make_unique<PinLock>(pin_, true);
  try {
    NetnsGuard in(netns_);
    dp_ = std::make_unique<Dataplane>(cfg, pin_, true);
    state_ = dp_->attach_all(false);
  } catch (...) {
    release();
    throw;
  }
}

Gateway::~Gateway() { release(); }

void Gateway::release() noexcept {
  try {
    NetnsGuard in(netns_);
    for (const auto& is : state_.interfaces)
      detach_interface(dp_->owner(), is.ifindex, is.name);
  } catch (const std::exception& e) {
    spdlog::warn("lab: detaching in {}: {} (removing the namespace detaches it anyway)", netns_, e.what());
  }
  state_.interfaces.clear();
  dp_.reset();
  remove_pins(pin_);
  lock_.reset();
}

}  // namespace rg::lab
