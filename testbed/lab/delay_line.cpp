#include "lab/delay_line.h"

#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <netinet/ether.h>
#include <net/if.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <random>

#include "common/error.h"
#include "lab/topology.h"

namespace rg::lab {

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// A GRO aggregate (64 KiB, what TCP cross traffic arrives as: the line
// sends it on whole, and the kernel splits it where it leaves) and the
// Ethernet header, with room, after the virtio-net header every frame
// carries (see packet_socket); the hold veths' MTU (9000) is less.
// (struct virtio_net_hdr: flags, gso_type, hdr_len, gso_size, csum_start,
// csum_offset; <linux/virtio_net.h> itself does not compile as C++.)
constexpr size_t kVnet = 10;

// The WAN program's class of an untagged Ethernet frame: by the UDP
// destination port (rg_wan_udp_class), RG_WAN_NOT_UDP for the rest.
rg_wan_class frame_class(const uint8_t* f, size_t len) {
  if (len < 14) return RG_WAN_NOT_UDP;
  const uint16_t type = static_cast<uint16_t>(f[12] << 8 | f[13]);
  size_t l4 = 0;
  if (type == ETHERTYPE_IP && len >= 14 + 20 && (f[14] & 0x0f) >= 5 && f[14 + 9] == IPPROTO_UDP &&
      !((f[14 + 6] & 0x1f) | f[14 + 7]))  // a later fragment has no UDP header
    l4 = 14 + size_t{f[14] & 0x0fu} * 4;
  else if (type == ETHERTYPE_IPV6 && len >= 14 + 40 && f[14 + 6] == IPPROTO_UDP)
    l4 = 14 + 40;
  if (!l4 || len < l4 + 8) return RG_WAN_NOT_UDP;
  return rg_wan_udp_class(static_cast<uint16_t>(f[l4 + 2] << 8 | f[l4 + 3]));
}
constexpr size_t kFrameMax = kVnet + 65536 + 256;
constexpr unsigned kBatch = 64;
// Room for the receive timestamp's control message (struct timespec).
constexpr size_t kControl = 64;
// The longest a thread sleeps without looking at its stop flag.
constexpr auto kMaxSleep = 20ms;
std::chrono::nanoseconds paced_gap(std::chrono::nanoseconds gap) {
  return std::min<std::chrono::nanoseconds>(gap, kPacedGap);
}
// The longest pacing wait spun rather than slept: a longer one outlasts a
// timer's wake-up several times over.
constexpr auto kMaxSpin = 100us;
// A receive timestamp further back than this is the realtime clock stepped,
// not a frame that waited: the socket's buffer holds about a second.
constexpr auto kMaxStampAge = 1s;

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
  // Each frame's own arrival time: a batch read together arrived over the
  // whole time the thread was away, and one stamp for all of it would send
  // it on as a burst.
  if (ok && receive) ok = setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof(one)) == 0;
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

// The frame's receive timestamp (CLOCK_REALTIME), if the kernel gave one.
std::optional<std::chrono::nanoseconds> receive_stamp(msghdr& h) {
  for (cmsghdr* c = CMSG_FIRSTHDR(&h); c; c = CMSG_NXTHDR(&h, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS && c->cmsg_len >= CMSG_LEN(sizeof(timespec))) {
      timespec t;
      std::memcpy(&t, CMSG_DATA(c), sizeof(t));
      return std::chrono::seconds(t.tv_sec) + std::chrono::nanoseconds(t.tv_nsec);
    }
  return std::nullopt;
}

std::chrono::nanoseconds realtime_now() {
  timespec t{};
  clock_gettime(CLOCK_REALTIME, &t);
  return std::chrono::seconds(t.tv_sec) + std::chrono::nanoseconds(t.tv_nsec);
}

}  // namespace

namespace {

size_t gap_bucket(std::chrono::nanoseconds gap) {
  const uint64_t g = static_cast<uint64_t>(std::max<int64_t>(gap.count(), 0));
  if (g < 16) return g;
  const unsigned octave = std::bit_width(g) - 1;  // >= 4
  return std::min<size_t>(16 + (octave - 4) * 8 + ((g >> (octave - 3)) & 7), GapHistogram::kBuckets - 1);
}

std::chrono::nanoseconds gap_bucket_floor(size_t i) {
  if (i < 16) return std::chrono::nanoseconds(i);
  const size_t octave = 4 + (i - 16) / 8, sub = (i - 16) % 8;
  return std::chrono::nanoseconds(static_cast<int64_t>((8 + sub) << (octave - 3)));
}

}  // namespace

void GapHistogram::add(std::chrono::nanoseconds gap) { count[gap_bucket(gap)]++; }

std::chrono::nanoseconds GapHistogram::floor(std::chrono::nanoseconds gap) { return gap_bucket_floor(gap_bucket(gap)); }

uint64_t GapHistogram::total() const {
  uint64_t n = 0;
  for (uint64_t c : count) n += c;
  return n;
}

std::chrono::nanoseconds GapHistogram::quantile(double q) const {
  const uint64_t n = total();
  if (n == 0) return std::chrono::nanoseconds(0);
  // The smallest bucket with more than q of the gaps at or below it.
  const auto rank = static_cast<uint64_t>(std::clamp(q, 0.0, 1.0) * static_cast<double>(n - 1));
  uint64_t seen = 0;
  size_t i = 0;
  for (; i < kBuckets - 1; ++i) {
    seen += count[i];
    if (seen > rank) break;
  }
  return gap_bucket_floor(i);
}

GapHistogram& GapHistogram::operator-=(const GapHistogram& base) {
  for (size_t i = 0; i < kBuckets; ++i) count[i] -= std::min(count[i], base.count[i]);
  return *this;
}

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
    std::chrono::nanoseconds gap{0};  // after the frame that arrived before it
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
  std::array<std::array<uint8_t, kControl>, kBatch> control{};
  std::array<iovec, kBatch> iov{};
  std::array<mmsghdr, kBatch> msgs{};
  Clock::time_point last_due{}, last_arrival{};
  std::optional<Clock::time_point> last_sent;
  DelayLineStats local;  // published under the lock after each round
  auto next_stats = Clock::now();

  // The pacing rule: a frame leaves at its due time, and no sooner than half
  // its arrival gap (at most kPacedGap, delay_line.h) after the frame sent before it. Late
  // frames catch up at twice the rate they arrived; no gap closes by more
  // than half.
  auto release_at = [&](const Direction::Frame& f) {
    return last_sent ? std::max(f.due, *last_sent + paced_gap(f.gap) / 2) : f.due;
  };

  while (!stop_) {
    // Sleep until the first frame may leave or another arrives.
    auto now = Clock::now();
    std::chrono::nanoseconds wait = kMaxSleep;
    if (!held.empty())
      wait = std::min<std::chrono::nanoseconds>(kMaxSleep, std::max(release_at(held.front()) - now, 0ns));
    pollfd p{d.rx, POLLIN, 0};
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(wait).count();
    timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    if (wait > 0ns) ppoll(&p, 1, &ts, nullptr);

    // Everything that arrived, each frame stamped with its own due time.
    for (;;) {
      for (unsigned i = 0; i < kBatch; ++i) {
        iov[i] = {bufs[i].data(), bufs[i].size()};
        msgs[i] = {};
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
        msgs[i].msg_hdr.msg_control = control[i].data();
        msgs[i].msg_hdr.msg_controllen = control[i].size();
      }
      int n = recvmmsg(d.rx, msgs.data(), kBatch, MSG_DONTWAIT, nullptr);
      if (n <= 0) break;
      // The kernel stamps in CLOCK_REALTIME, the line runs on the steady
      // clock: both read here, each stamp becomes "this long before now".
      const auto read_at = Clock::now();
      const auto read_at_real = realtime_now();
      for (int i = 0; i < n; ++i) {
        const size_t len = msgs[i].msg_len;
        if (msgs[i].msg_hdr.msg_flags & MSG_TRUNC) {
          local.rx_dropped++;  // longer than kFrameMax: lost here, counted as the socket's own drops are
          continue;
        }
        if (len < kVnet + sizeof(ether_header) ||
            std::memcmp(bufs[i].data() + kVnet, d.where.arrival_mac.data(), 6) != 0)
          continue;
        Direction::Frame f;
        if (!spare.empty()) {
          f.data = std::move(spare.back());
          spare.pop_back();
        }
        f.data.assign(bufs[i].begin(), bufs[i].begin() + static_cast<long>(len));
        auto arrived = read_at;
        if (const auto stamp = receive_stamp(msgs[i].msg_hdr))
          arrived -= std::clamp<std::chrono::nanoseconds>(read_at_real - *stamp, 0ns, kMaxStampAge);
        arrived = std::max(arrived, last_arrival);  // one clock's step back is no reason to reorder
        if (last_arrival != Clock::time_point{}) {
          f.gap = arrived - last_arrival;
          local.gap_in.add(f.gap);
        }
        last_arrival = arrived;
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

    // Everything that may leave, in order, paced.
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
      if (const auto at = release_at(f); at > now) {
        // Due but too close behind the frame sent last: the line is behind
        // and catching up. Sleeping the wait would add a timer's wake-up
        // (tens of microseconds on this host, bench/README.md section 8) to
        // every frame, as long as the gaps being paced: the line would never
        // catch up. Short waits are spun; on time (waiting for the due time)
        // the line sleeps as before.
        if (at - now > kMaxSpin) break;
        while ((now = Clock::now()) < at) {
        }
      }
      std::memcpy(f.data.data() + kVnet, d.where.next_hop_mac.data(), 6);
      std::memcpy(f.data.data() + kVnet + 6, d.where.out_mac.data(), 6);
      ssize_t sent = send(d.tx, f.data.data(), f.data.size(), MSG_DONTWAIT);
      // The socket's buffer is full: the frame was not taken, next round.
      if (sent < 0 && errno == EAGAIN) break;
      if (sent < 0 && errno == ENOBUFS) {
        // Taken and dropped by the interface's queue (NET_XMIT_DROP): the
        // WAN's bottleneck is full. Sent again it would be a second frame,
        // and the bottleneck a queue without a limit.
        local.queue_dropped++;
        local.queue_dropped_by_class[frame_class(f.data.data() + kVnet, f.data.size() - kVnet)]++;
      } else if (sent == static_cast<ssize_t>(f.data.size())) {
        local.frames++;
        local.bytes += f.data.size() - kVnet;
        const auto late = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(now - f.due).count());
        local.late_sum_ns += late;
        local.late_max_ns = std::max(local.late_max_ns, late);
        if (last_sent) {
          local.gap_out.add(now - *last_sent);
          if (now - *last_sent < paced_gap(f.gap) / 2) local.squeezed++;
        }
        last_sent = now;
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
