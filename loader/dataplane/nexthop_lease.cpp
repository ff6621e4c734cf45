#include "dataplane/nexthop_lease.h"

#include <bpf/bpf.h>
#include <linux/rtnetlink.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <ctime>

#include "common/error.h"
#include "common/netlink.h"
#include "roceguard/roceguard.h"

namespace rg {

namespace {

// The clock of bpf_ktime_get_coarse_ns(): CLOCK_MONOTONIC, coarse.
uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

bool single_path_route(const Address& local, const Address& remote) {
  const size_t alen = remote.family == AF_INET ? 4 : 16;
  NetlinkRequest req("RTM_GETROUTE (RTM_F_FIB_MATCH) of the route to a peer", RTM_GETROUTE);
  auto* rt = req.header<rtmsg>();
  rt->rtm_family = static_cast<unsigned char>(remote.family);
  rt->rtm_dst_len = static_cast<unsigned char>(alen * 8);
  rt->rtm_src_len = static_cast<unsigned char>(alen * 8);
  rt->rtm_flags = RTM_F_FIB_MATCH;
  req.put(RTA_DST, remote.bytes.data(), alen);
  req.put(RTA_SRC, local.bytes.data(), alen);
  req.put_u8(RTA_IP_PROTO, IPPROTO_UDP);
  req.put_u16(RTA_DPORT, htons(RG_GENEVE_UDP_PORT));
  bool single = false;
  try {
    NetlinkSocket nl(NETLINK_ROUTE);
    nl.request(req, [&](const nlmsghdr& m) {
      if (m.nlmsg_type != RTM_NEWROUTE) return;
      bool oif = false, spread = false;
      for_each_attr(m, sizeof(rtmsg), [&](const nlattr& a) {
        const uint16_t t = attr_type(a);
        oif |= t == RTA_OIF;
        spread |= t == RTA_MULTIPATH || t == RTA_NH_ID;
        return true;
      });
      single = oif && !spread;
    });
  } catch (const NetlinkError&) {
    // No route (the kernel's error answer), or no answer: no single path,
    // so no lease and the peer's packets take the lookup.
    return false;
  }
  return single;
}

NexthopLeases::NexthopLeases(int lease_fd, std::vector<PeerConfig> peers, std::vector<uint32_t> slots)
    : fd_(lease_fd), peers_(std::move(peers)), slots_(std::move(slots)) {
  if (slots_.empty())
    for (uint32_t i = 0; i < peers_.size() && i < RG_MAX_PEERS; ++i) slots_.push_back(i);
  std::vector<bool> held(RG_MAX_PEERS, false);
  for (size_t i = 0; i < peers_.size() && i < slots_.size(); ++i)
    if (slots_[i] < RG_MAX_PEERS) held[slots_[i]] = true;
  for (uint32_t slot = 0; slot < RG_MAX_PEERS; ++slot) {
    rg_nexthop_lease l{};
    if (bpf_map_lookup_elem(fd_, &slot, &l) == 0) gen_ = std::max(gen_, l.gen);
    if (held[slot] || !l.until_ns) continue;
    const rg_nexthop_lease none{};
    if (bpf_map_update_elem(fd_, &slot, &none, BPF_ANY) != 0)
      spdlog::warn("cannot write {}[{}]: {}", "rg_nh_leases", slot, errno_text(errno));
  }
}

void NexthopLeases::invalidate() {
  // 0 means "no lease" to the data plane: skipped when the counter wraps.
  if (++gen_ == 0) gen_ = 1;
  cacheable_.assign(peers_.size(), false);
  for (size_t i = 0; i < peers_.size() && i < slots_.size(); ++i)
    cacheable_[i] = single_path_route(peers_[i].local, peers_[i].remote);
  write(monotonic_ns() + kLeaseNs);
}

void NexthopLeases::renew() {
  if (gen_) write(monotonic_ns() + kLeaseNs);
}

void NexthopLeases::revoke() {
  cacheable_.assign(peers_.size(), false);
  write(0);
}

size_t NexthopLeases::granted() const {
  size_t n = 0;
  for (bool c : cacheable_) n += c;
  return n;
}

void NexthopLeases::write(uint64_t until_ns) const {
  for (size_t i = 0; i < cacheable_.size() && i < slots_.size(); ++i) {
    const uint32_t slot = slots_[i];
    rg_nexthop_lease l{};
    if (cacheable_[i] && until_ns) {
      l.until_ns = until_ns;
      l.gen = gen_;
    }
    // One 16-byte value: a program reading it during the write may see one
    // field old and the other new; every such mix is no lease, or the old
    // one for that instant longer.
    if (bpf_map_update_elem(fd_, &slot, &l, BPF_ANY) != 0)
      spdlog::warn("cannot write {}[{}]: {}", "rg_nh_leases", slot, errno_text(errno));
  }
}

}  // namespace rg
