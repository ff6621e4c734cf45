#include "dataplane/nexthop_lease.h"

#include <bpf/bpf.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include "common/error.h"
#include "roceguard/roceguard.h"

namespace rg {

namespace {

// The clock of bpf_ktime_get_coarse_ns(): CLOCK_MONOTONIC, coarse.
uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void put_attr(nlmsghdr* h, uint16_t type, const void* data, size_t n) {
  auto* a = reinterpret_cast<rtattr*>(reinterpret_cast<char*>(h) + NLMSG_ALIGN(h->nlmsg_len));
  a->rta_type = type;
  a->rta_len = static_cast<uint16_t>(RTA_LENGTH(n));
  std::memcpy(RTA_DATA(a), data, n);
  h->nlmsg_len = NLMSG_ALIGN(h->nlmsg_len) + RTA_ALIGN(a->rta_len);
}

}  // namespace

bool single_path_route(const Address& local, const Address& remote) {
  int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd < 0) return false;
  timeval tv{2, 0};  // the kernel answers at once; never hang on a lost reply
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  alignas(NLMSG_ALIGNTO) char req[256] = {};
  auto* h = reinterpret_cast<nlmsghdr*>(req);
  h->nlmsg_len = NLMSG_LENGTH(sizeof(rtmsg));
  h->nlmsg_type = RTM_GETROUTE;
  h->nlmsg_flags = NLM_F_REQUEST;
  h->nlmsg_seq = 1;
  auto* rt = static_cast<rtmsg*>(NLMSG_DATA(h));
  const size_t alen = remote.family == AF_INET ? 4 : 16;
  rt->rtm_family = static_cast<unsigned char>(remote.family);
  rt->rtm_dst_len = static_cast<unsigned char>(alen * 8);
  rt->rtm_src_len = static_cast<unsigned char>(alen * 8);
  rt->rtm_flags = RTM_F_FIB_MATCH;
  put_attr(h, RTA_DST, remote.bytes.data(), alen);
  put_attr(h, RTA_SRC, local.bytes.data(), alen);
  const uint8_t proto = IPPROTO_UDP;
  const uint16_t dport = htons(RG_GENEVE_UDP_PORT);
  put_attr(h, RTA_IP_PROTO, &proto, sizeof(proto));
  put_attr(h, RTA_DPORT, &dport, sizeof(dport));
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  bool single = false;
  if (sendto(fd, h, h->nlmsg_len, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof(kernel)) >= 0) {
    alignas(NLMSG_ALIGNTO) char buf[8192];
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    for (auto* m = reinterpret_cast<nlmsghdr*>(buf); n > 0 && NLMSG_OK(m, static_cast<size_t>(n));
         m = NLMSG_NEXT(m, n)) {
      if (m->nlmsg_type != RTM_NEWROUTE) break;  // NLMSG_ERROR: no route
      auto* r = static_cast<rtmsg*>(NLMSG_DATA(m));
      int len = static_cast<int>(RTM_PAYLOAD(m));
      bool oif = false, spread = false;
      for (auto* a = RTM_RTA(r); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
        oif |= a->rta_type == RTA_OIF;
        spread |= a->rta_type == RTA_MULTIPATH || a->rta_type == RTA_NH_ID;
      }
      single = oif && !spread;
      break;
    }
  }
  close(fd);
  return single;
}

void NexthopLeases::invalidate() {
  // 0 means "no lease" to the data plane: skipped when the counter wraps.
  if (++gen_ == 0) gen_ = 1;
  cacheable_.assign(peers_.size(), false);
  for (size_t i = 0; i < peers_.size() && i < RG_MAX_PEERS; ++i)
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
  for (uint32_t slot = 0; slot < cacheable_.size() && slot < RG_MAX_PEERS; ++slot) {
    rg_nexthop_lease l{};
    if (cacheable_[slot] && until_ns) {
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
