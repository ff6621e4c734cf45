#include "lab/lab_gateway.h"

#include <spdlog/spdlog.h>

#include <sstream>

#include "common/error.h"
#include "daemon/congestion.h"
#include "daemon/shield_auto.h"
#include "dataplane/maps.h"
#include "dataplane/nexthop_lease.h"
#include "metrics/presentation.h"

namespace rg::lab {

Config gateway_config(const std::string& local, const std::string& remote, const std::string& route,
                      bool tunnel, XdpMode xdp_mode, unsigned tunnel_mtu, const std::string& ingress_hook,
                      bool xdp_forward, bool sequence, const std::string& shield, const std::string& wan_interface,
                      bool congestion, const std::string& congestion_signal) {
  std::ostringstream toml;
  toml << "interfaces = [\"" << wan_interface << (xdp_forward ? "\", \"lan0\"]\n" : "\"]\n")
       << "[dataplane]\nxdp_mode = \"" << (xdp_mode == XdpMode::kSkb ? "skb" : "native") << "\"\n"
       << "ingress_hook = \"" << ingress_hook << "\"\n"
       << "xdp_forward = " << (xdp_forward ? "true" : "false") << "\n";
  if (tunnel) {
    toml << "[tunnel]\n";
    if (sequence) toml << "sequence = true\n";
    // "off" is tunnel.shield's default.
    if (shield != "off") toml << "shield = \"" << shield << "\"\n";
    if (congestion) toml << "congestion = \"on\"\ncongestion_signal = \"" << congestion_signal << "\"\n";
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
  try {
    run_daemon_work(cfg);
  } catch (...) {
    release();
    throw;
  }
}

void Gateway::run_daemon_work(const Config& cfg) {
  bool any_auto = false;
  for (const auto& p : cfg.peers) any_auto |= p.shield == Shield::kAuto;
  std::shared_ptr<ShieldAuto> shield;
  if (any_auto && cfg.tunnel_sequence)
    shield = std::make_shared<ShieldAuto>(cfg, dp_->peer_slots(), dp_->map_fd(kMapPeerCtl), dp_->map_fd(kMapPeerRx),
                                          pin_);
  std::shared_ptr<NexthopLeases> leases;
  if (!cfg.peers.empty() && dp_->map_fd(kMapNexthopLease) >= 0) {
    leases = std::make_shared<NexthopLeases>(dp_->map_fd(kMapNexthopLease), cfg.peers, dp_->peer_slots());
    NetnsGuard in(netns_);  // the routes asked about are the gateway's
    leases->invalidate();
  }
  std::shared_ptr<CongestionLoop> congestion;
  if (cfg.tunnel_congestion && cfg.tunnel_sequence && !cfg.peers.empty())
    congestion = std::make_shared<CongestionLoop>(cfg, dp_->peer_slots(), dp_->map_fd(kMapPeerCc),
                                                  dp_->map_fd(kMapPeerRx), dp_->map_fd(kMapPeerStats));
  if (!shield && !leases && !congestion) return;
  // Bounded by the gateway's life: release() stops it. The congestion
  // loop's tick sets the pace when it runs, as in `roceguard run`.
  const auto pace = congestion ? std::chrono::milliseconds(kCongestionTickNs / 1'000'000)
                               : std::chrono::milliseconds(250);
  daemon_thread_ = std::thread([this, shield, leases, congestion, pace] {
    std::unique_lock lock(mu_);
    uint64_t renewed = 0;
    while (!stop_) {
      lock.unlock();
      const uint64_t now = monotonic_now_ns();
      if (leases && now - renewed >= 250'000'000ull) {
        leases->renew();
        renewed = now;
      }
      std::vector<ShieldAutoPeer> peers;
      if (shield) {
        shield->tick(now);
        peers = shield->auto_peers();
      }
      std::vector<CongestionPeer> cc;
      if (congestion) {
        congestion->tick(now);
        cc = congestion->peers();
      }
      lock.lock();
      auto_peers_ = std::move(peers);
      congestion_peers_ = std::move(cc);
      stop_cv_.wait_for(lock, pace, [this] { return stop_; });
    }
    if (leases) leases->revoke();
  });
}

std::vector<ShieldAutoPeer> Gateway::shield_auto() const {
  std::lock_guard lock(mu_);
  return auto_peers_;
}

std::vector<CongestionPeer> Gateway::congestion() const {
  std::lock_guard lock(mu_);
  return congestion_peers_;
}

Gateway::~Gateway() { release(); }

void Gateway::release() noexcept {
  if (daemon_thread_.joinable()) {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    stop_cv_.notify_all();
    daemon_thread_.join();
  }
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
