#include "lab/path_probe.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include "common/error.h"
#include "lab/quantile.h"

namespace rg::lab {

namespace {

using Clock = std::chrono::steady_clock;

int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

int udp_socket(const char* addr, uint16_t port, bool receive) {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw Error("probe: socket: " + errno_text(errno));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(receive ? port : 0);
  inet_pton(AF_INET, addr, &sa.sin_addr);
  int buf = 32 << 20;
  setsockopt(fd, SOL_SOCKET, receive ? SO_RCVBUFFORCE : SO_SNDBUFFORCE, &buf, sizeof(buf));
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    int err = errno;
    close(fd);
    throw Error(std::string("probe: bind ") + addr + ": " + errno_text(err));
  }
  return fd;
}

}  // namespace

int64_t ProbeResult::delay_quantile(double q) const { return sample_quantile(delay_ns, q); }

double ProbeResult::received_per_second() const {
  return receive_time.count() > 0 ? static_cast<double>(received) * 1e9 / static_cast<double>(receive_time.count())
                                  : 0;
}

ProbeResult probe_path(const Topology& topo, const ProbeConfig& cfg) {
  const Addresses& a = topo.addr();
  const unsigned payload = std::max(cfg.payload, 16u);
  int tx, rx;
  {
    NetnsGuard in(topo.netns(Node::kHostB));
    rx = udp_socket(a.host_b4, cfg.port, true);
  }
  try {
    NetnsGuard in(topo.netns(Node::kHostA));
    tx = udp_socket(a.host_a4, 0, false);
  } catch (...) {
    close(rx);
    throw;
  }
  ProbeResult r;
  std::atomic<bool> sending{true};
  std::atomic<int64_t> last_send_ns{0};
  int64_t first_arrival = 0, last_arrival = 0;
  std::thread receiver([&] {
    std::vector<uint8_t> buf(65536);
    int64_t highest = -1;
    std::vector<bool> seen(cfg.count, false);
    for (;;) {
      pollfd p{rx, POLLIN, 0};
      if (poll(&p, 1, 20) <= 0) {
        // Done once sending ended and the drain time has passed since.
        if (!sending && now_ns() - last_send_ns.load() > std::chrono::nanoseconds(cfg.drain).count()) break;
        continue;
      }
      ssize_t n = recv(rx, buf.data(), buf.size(), MSG_DONTWAIT);
      const int64_t t = now_ns();
      if (n < 16) continue;
      uint64_t seq = 0;
      int64_t sent = 0;
      std::memcpy(&seq, buf.data(), 8);
      std::memcpy(&sent, buf.data() + 8, 8);
      if (seq >= cfg.count) continue;
      if (seen[seq]) {
        r.duplicates++;
        continue;
      }
      seen[seq] = true;
      if (r.received == 0) first_arrival = t;
      last_arrival = t;
      r.received++;
      if (static_cast<int64_t>(seq) < highest) r.inversions++;
      highest = std::max(highest, static_cast<int64_t>(seq));
      r.delay_ns.push_back(t - sent);
    }
  });

  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(cfg.port);
  inet_pton(AF_INET, a.host_b4, &to.sin_addr);
  std::vector<uint8_t> msg(payload, 0);
  const auto start = Clock::now();
  int64_t first_send = 0;
  for (unsigned i = 0; i < cfg.count; ++i) {
    if (cfg.interval.count()) std::this_thread::sleep_until(start + cfg.interval * i);
    const uint64_t seq = i;
    const int64_t t = now_ns();
    std::memcpy(msg.data(), &seq, 8);
    std::memcpy(msg.data() + 8, &t, 8);
    // Blocking: a full socket buffer slows the sender rather than losing the datagram here.
    if (sendto(tx, msg.data(), msg.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)) ==
        static_cast<ssize_t>(msg.size()))
      r.sent++;
    if (i == 0) first_send = t;
    last_send_ns = t;
  }
  r.send_time = std::chrono::nanoseconds(last_send_ns.load() - first_send);
  sending = false;
  receiver.join();
  r.receive_time = std::chrono::nanoseconds(last_arrival - first_arrival);
  close(tx);
  close(rx);
  return r;
}

}  // namespace rg::lab
