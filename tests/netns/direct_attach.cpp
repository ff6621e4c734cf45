#include "direct_attach.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/if_link.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "dataplane/maps.h"
#include "lab/topology.h"
#include "roceguard/roceguard.h"
#include "roceguard.skel.h"

namespace rg::test {

namespace {

constexpr uint32_t kTcPriority = 0x7e58;
constexpr uint32_t kTcHandle = 1;

void v4(const std::string& text, uint8_t* out) {
  if (inet_pton(AF_INET, text.c_str(), out) != 1)
    throw std::runtime_error("not an IPv4 address: " + text);
}

void check(int rc, const std::string& what) {
  if (rc != 0) throw std::runtime_error(what + ": " + std::strerror(rc < 0 ? -rc : errno));
}

}  // namespace

DirectAttach::DirectAttach(const std::string& netns, const std::string& ifname, Hook hook,
                           const std::optional<TunnelPeer>& peer, XdpMode xdp_mode)
    : netns_(netns),
      hook_(hook),
      xdp_flags_(xdp_mode == XdpMode::kGeneric ? XDP_FLAGS_SKB_MODE : XDP_FLAGS_DRV_MODE) {
  skel_ = roceguard__open();
  if (!skel_) throw std::runtime_error("roceguard__open failed");
  try {
    rg::set_qp_entries(skel_->obj, 1024);  // as the tests' harness sizes its tables
    check(roceguard__load(skel_), "roceguard__load");
    if (peer) {
      const uint32_t idx = 0;
      rg_peer p{};
      p.vni = peer->vni;
      p.mtu = RG_DEFAULT_TUNNEL_MTU;
      p.family = AF_INET;
      v4(peer->local, p.local);
      v4(peer->remote, p.remote);
      check(bpf_map__update_elem(skel_->maps.rg_peers, &idx, sizeof(idx), &p, sizeof(p), BPF_ANY),
            "rg_peers");
      if (hook == Hook::kTcEgress) {
        rg_route4_key k{};
        auto slash = peer->route.find('/');
        v4(peer->route.substr(0, slash), k.addr);
        k.prefixlen = static_cast<uint32_t>(std::stoul(peer->route.substr(slash + 1)));
        check(bpf_map__update_elem(skel_->maps.rg_route4, &k, sizeof(k), &idx, sizeof(idx), BPF_ANY),
              "rg_route4");
      } else {
        rg_decap_key k{};
        v4(peer->remote, k.remote);
        k.family = AF_INET;
        k.vni = peer->vni;
        check(bpf_map__update_elem(skel_->maps.rg_decap, &k, sizeof(k), &idx, sizeof(idx), BPF_ANY),
              "rg_decap");
      }
    }
    rg::lab::NetnsGuard in(netns_);
    ifindex_ = static_cast<int>(if_nametoindex(ifname.c_str()));
    if (ifindex_ == 0) throw std::runtime_error("no interface " + ifname + " in " + netns_);
    if (hook == Hook::kXdp) {
      // The device's own address, which decapsulated frames are given; the
      // loader writes it the same way before attaching.
      const uint32_t key = static_cast<uint32_t>(ifindex_);
      rg_iface iface{};
      int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
      ifreq req{};
      ifname.copy(req.ifr_name, IFNAMSIZ - 1);
      int rc = fd < 0 ? -errno : (ioctl(fd, SIOCGIFHWADDR, &req) == 0 ? 0 : -errno);
      if (fd >= 0) close(fd);
      check(rc, "SIOCGIFHWADDR " + ifname);
      std::memcpy(iface.mac, req.ifr_hwaddr.sa_data, sizeof(iface.mac));
      check(bpf_map__update_elem(skel_->maps.rg_ifaces, &key, sizeof(key), &iface, sizeof(iface), BPF_ANY),
            "rg_ifaces");
      check(bpf_xdp_attach(ifindex_, bpf_program__fd(skel_->progs.rg_xdp_ingress), xdp_flags_, nullptr),
            "bpf_xdp_attach " + ifname);
    } else {
      LIBBPF_OPTS(bpf_tc_hook, h, .ifindex = ifindex_, .attach_point = BPF_TC_EGRESS);
      int rc = bpf_tc_hook_create(&h);
      if (rc != 0 && rc != -EEXIST) check(rc, "clsact on " + ifname);
      created_qdisc_ = rc == 0;
      LIBBPF_OPTS(bpf_tc_opts, o, .prog_fd = bpf_program__fd(skel_->progs.rg_tc_egress),
                  .handle = kTcHandle, .priority = kTcPriority);
      check(bpf_tc_attach(&h, &o), "tc attach " + ifname);
    }
    attached_ = true;
  } catch (...) {
    roceguard__destroy(skel_);
    throw;
  }
}

DirectAttach::~DirectAttach() {
  if (attached_) {
    try {
      rg::lab::NetnsGuard in(netns_);
      if (hook_ == Hook::kXdp) {
        bpf_xdp_detach(ifindex_, xdp_flags_, nullptr);
      } else {
        LIBBPF_OPTS(bpf_tc_hook, h, .ifindex = ifindex_, .attach_point = BPF_TC_EGRESS);
        LIBBPF_OPTS(bpf_tc_opts, o, .handle = kTcHandle, .priority = kTcPriority);
        bpf_tc_detach(&h, &o);
        if (created_qdisc_) {
          h.attach_point = static_cast<bpf_tc_attach_point>(BPF_TC_INGRESS | BPF_TC_EGRESS);
          bpf_tc_hook_destroy(&h);
        }
      }
    } catch (...) {
      // Namespace already gone: so is the attachment.
    }
  }
  roceguard__destroy(skel_);
}

int DirectAttach::counters_fd() const { return bpf_map__fd(skel_->maps.rg_counters); }
rg::QpMaps DirectAttach::qp_maps() const {
  return {bpf_map__fd(skel_->maps.rg_qp4), bpf_map__fd(skel_->maps.rg_qp6)};
}

}  // namespace rg::test
