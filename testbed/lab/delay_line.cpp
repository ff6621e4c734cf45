#include "lab/delay_line.h"

#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <netinet/ether.h>
#include <net/if.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>

#include "common/error.h"
#include "lab/topology.h"

namespace rg::lab {

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// The hold veths' MTU (9000) and the Ethernet header, with room, after the
// virtio-net header every frame carries (see packet_socket).
// (struct virtio_net_hdr: flags, gso_type, hdr_len, gso_size, csum_start,
// csum_offset; <linux/virtio_net.h> itself does not compile as C++.)
constexpr size_t kVnet = 10;
constexpr size_t kFrameMax = kVnet + 9216;
constexpr unsigned kBatch = 64;
// The longest a thread sleeps without looking at its stop flag.
constexpr auto kMaxSleep = 20ms;

// A raw socket bound to ifname, seeing every protocol; the caller is in the
// right namespace.
int packet_socket(const std::string& ifname, bool receive) {
  const unsigned ifindex = if_nametoindex(ifname.c_str());
  if (ifindex == 0) throw Error("delay line: no interface " + ifname, kExitNotFound);
  int fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, receive ? htons(ETH_P_ALL) : 0);
  if (fd < 0) throw Error("delay line: AF_PACKET socket: " + errno_text(errno));
  sockaddr_ll sll{};
  sll.sll_family = AF_PACKET;
  sll.sll_protocol = receive ? htons(ETH_P_ALL) : 0;
  sll.sll_ifindex = static_cast<int>(ifindex);
  // Room for a second of the lab's rates: no frame is lost while the thread
  // is not scheduled. Root may exceed rmem_max/wmem_max.
  int buf = 32 << 20, one = 1;
  bool ok = bind(fd, reinterpret_cast<sockaddr*>(&sll), sizeof(sll)) == 0;
  ok = ok && setsockopt(fd, SOL_SOCKET, receive ? SO_RCVBUFFORCE : SO_SNDBUFFORCE, &buf, sizeof(buf)) == 0;
  if (ok && receive) ok = setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof(one)) == 0;
  // Each frame travels with its skb's offload state (a virtio-net header):
  // a local sender's UDP checksum is still unfinished (CHECKSUM_PARTIAL)
  // when it reaches the WAN, and only that state says where to finish it.
  // The frame leaves with the same state, as the kernel would forward it.
  if (ok) ok = setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof(one)) == 0;
  if (!ok) {
    int err = errno;
    close(fd);
    throw Error("delay line: socket on " + ifname + ": " + errno_text(err));
  }
  return fd;
}

}  // namespace

Mac parse_mac(const std::string& text) {
  ether_addr a{};
  if (text.size() != 17 || !ether_aton_r(text.c_str(), &a)) throw Error("not a MAC address: " + text);
  Mac m;
  std::memcpy(m.data(), a.ether_addr_octet, m.size());
  return m;
}

struct DelayLine::Direction {
  DelayDirection where;
  int rx = -1, tx = -1;
  struct Frame {
    Clock::time_point due;
    std::vector<uint8_t> data;
    bool passed = false;  // already let the frame behind it go first
  };
  mutable std::mutex mu;  // guards st
  DelayLineStats st;
  ~Direction() {
    if (rx >= 0) close(rx);
    if (tx >= 0) close(tx);
  }
};

DelayLine::DelayLine(const std::string& netns, const std::vector<DelayDirection>& directions,
                     const DelayLineConfig& cfg)
    : cfg_(cfg) {
  if (cfg_.delay.count() < 0 || cfg_.jitter.count() < 0 || cfg_.jitter > cfg_.delay)
    throw Error("delay line: the jitter is at most the delay", kExitUsage);
  {
    NetnsGuard in(netns);
    for (const auto& w : directions) {
      auto d = std::make_unique<Direction>();
      d->where = w;
      d->rx = packet_socket(w.in_ifname, true);
      d->tx = packet_socket(w.out_ifname, false);
      dirs_.push_back(std::move(d));
    }
  }
  for (auto& d : dirs_) threads_.emplace_back([this, p = d.get()] { run(*p); });
}

DelayLine::~DelayLine() {
  stop_ = true;
  for (auto& t : threads_) t.join();
}

const std::string& DelayLine::direction_name(size_t i) const { return dirs_.at(i)->where.name; }

DelayLineStats DelayLine::stats(size_t i) const {
  const Direction& d = *dirs_.at(i);
  std::lock_guard lock(d.mu);
  return d.st;
}

void DelayLine::run(Direction& d) {
  // Wake-ups as close to the due time as the kernel's timers allow; the
  // default slack (50 us) would add itself to every frame's delay.
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_int_distribution<int64_t> jitter(-cfg_.jitter.count(), cfg_.jitter.count());
  std::uniform_int_distribution<uint32_t> ppm(0, 999999);

  std::deque<Direction::Frame> held;
  std::vector<std::vector<uint8_t>> spare;  // buffers of frames sent, for reuse
  std::array<std::vector<uint8_t>, kBatch> bufs;
  for (auto& b : bufs) b.resize(kFrameMax);
  std::array<iovec, kBatch> iov{};
  std::array<mmsghdr, kBatch> msgs{};
  Clock::time_point last_due{};
  DelayLineStats local;  // published under the lock after each round
  auto next_stats = Clock::now();

  while (!stop_) {
    // Sleep until the first frame is due or another arrives.
    auto now = Clock::now();
    std::chrono::nanoseconds wait = kMaxSleep;
    if (!held.empty()) wait = std::min<std::chrono::nanoseconds>(kMaxSleep, std::max(held.front().due - now, 0ns));
    pollfd p{d.rx, POLLIN, 0};
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(wait).count();
    timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    if (wait > 0ns) ppoll(&p, 1, &ts, nullptr);

    // Everything that arrived, stamped with its due time.
    for (;;) {
      for (unsigned i = 0; i < kBatch; ++i) {
        iov[i] = {bufs[i].data(), bufs[i].size()};
        msgs[i] = {};
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
      }
      int n = recvmmsg(d.rx, msgs.data(), kBatch, MSG_DONTWAIT, nullptr);
      if (n <= 0) break;
      const auto arrived = Clock::now();
      for (int i = 0; i < n; ++i) {
        const size_t len = msgs[i].msg_len;
        if (len < kVnet + sizeof(ether_header) || (msgs[i].msg_hdr.msg_flags & MSG_TRUNC) ||
            std::memcmp(bufs[i].data() + kVnet, d.where.arrival_mac.data(), 6) != 0)
          continue;
        Direction::Frame f;
        if (!spare.empty()) {
          f.data = std::move(spare.back());
          spare.pop_back();
        }
        f.data.assign(bufs[i].begin(), bufs[i].begin() + static_cast<long>(len));
        auto due = arrived + cfg_.delay;
        if (cfg_.jitter.count()) due += std::chrono::nanoseconds(jitter(rng));
        // Never ahead of the frame in front: jitter keeps the order.
        due = std::max(due, last_due);
        last_due = due;
        f.due = due;
        held.push_back(std::move(f));
      }
      local.max_held = std::max<uint64_t>(local.max_held, held.size());
      if (n < static_cast<int>(kBatch)) break;
    }

    // Everything due, in order.
    now = Clock::now();
    while (!held.empty() && held.front().due <= now) {
      if (cfg_.reorder_ppm && held.size() > 1 && !held[0].passed && ppm(rng) < cfg_.reorder_ppm) {
        // The frame behind goes first, when it is due, and this one right
        // after it: late, never early.
        std::swap(held[0], held[1]);
        held[1].due = held[0].due;
        held[1].passed = true;
        local.reordered++;
        continue;
      }
      auto& f = held.front();
      std::memcpy(f.data.data() + kVnet, d.where.next_hop_mac.data(), 6);
      std::memcpy(f.data.data() + kVnet + 6, d.where.out_mac.data(), 6);
      ssize_t sent = send(d.tx, f.data.data(), f.data.size(), MSG_DONTWAIT);
      if (sent < 0 && (errno == EAGAIN || errno == ENOBUFS)) break;  // the interface's queue is full: next round
      if (sent == static_cast<ssize_t>(f.data.size())) {
        local.frames++;
        local.bytes += f.data.size() - kVnet;
        const auto late = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(now - f.due).count());
        local.late_sum_ns += late;
        local.late_max_ns = std::max(local.late_max_ns, late);
      } else {
        local.send_errors++;
      }
      spare.push_back(std::move(f.data));
      held.pop_front();
      now = Clock::now();
    }

    if (now >= next_stats) {  // a syscall: ten times a second is enough
      tpacket_stats tp{};
      socklen_t tp_len = sizeof(tp);
      if (getsockopt(d.rx, SOL_PACKET, PACKET_STATISTICS, &tp, &tp_len) == 0) local.rx_dropped += tp.tp_drops;
      next_stats = now + 100ms;
    }
    std::lock_guard lock(d.mu);
    d.st = local;
  }
}

}  // namespace rg::lab
