// roceguard on one of the lab's gateways, attached by the loader's own code
// path (Dataplane::attach_all) inside the gateway's network namespace, with
// its maps pinned under a directory of its own. Used by `roceguard lab` and
// the throughput benchmark.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "config/config.h"
#include "dataplane/attach.h"
#include "dataplane/state.h"
#include "metrics/exporter.h"
#include "lab/topology.h"

namespace rg::lab {

inline constexpr uint32_t kLabVni = 4242;

// The configuration a gateway runs with: its WAN interface, and with
// tunnel a Geneve peer (the far gateway) carrying route; tunnel_mtu is the
// largest outer packet the WAN link takes; ingress_hook is
// dataplane.ingress_hook (auto: TC ingress on the lab's veths). With
// xdp_forward the gateway runs the XDP fast path between its LAN and WAN
// interfaces, both attached (the lab's topology then lets the far ends of
// its veths take redirected frames: Topology::accept_xdp_redirects).
// sequence is tunnel.sequence; shield is tunnel.shield ("off", "control",
// "all", "auto"), which needs the sequence option, as congestion
// (tunnel.congestion) does. wan_interface is where
// the gateway attaches towards the far gateway: wan0, or the kernel VXLAN
// device (lab/kernel_vxlan.h) when that carries the traffic instead of
// roceguard's tunnel.
Config gateway_config(const std::string& local, const std::string& remote, const std::string& route,
                      bool tunnel, XdpMode xdp_mode = XdpMode::kNative,
                      unsigned tunnel_mtu = RG_DEFAULT_TUNNEL_MTU, const std::string& ingress_hook = "auto",
                      bool xdp_forward = false, bool sequence = false, const std::string& shield = "off",
                      const std::string& wan_interface = "wan0", bool congestion = false,
                      const std::string& congestion_signal = "both");

class Gateway {
 public:
  // Attaches or throws rg::Error, leaving nothing behind.
  Gateway(const Topology& topo, Node node, const std::string& pin, const Config& cfg);
  // Detaches and removes the pins.
  ~Gateway();
  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;

  const std::string& pin() const { return pin_; }
  const State& state() const { return state_; }
  // The "auto" shield's peers as this gateway's daemon would export them
  // (empty unless a peer's shield is "auto").
  std::vector<ShieldAutoPeer> shield_auto() const;
  // The congestion loop's peers as this gateway's daemon would export them
  // (empty unless tunnel.congestion is on).
  std::vector<CongestionPeer> congestion() const;

 private:
  void release() noexcept;
  // What `roceguard run` does while the gateway lives (a gateway of the
  // lab runs no daemon): the tunnel peers' next-hop leases, granted once
  // (the lab's routes do not change once it runs) and renewed, and the
  // "auto" shield's evaluation.
  void run_daemon_work(const Config& cfg);

  std::string netns_, pin_;
  std::unique_ptr<PinLock> lock_;
  std::unique_ptr<Dataplane> dp_;
  State state_;
  mutable std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::vector<ShieldAutoPeer> auto_peers_;
  std::vector<CongestionPeer> congestion_peers_;
  std::thread daemon_thread_;
};

}  // namespace rg::lab
