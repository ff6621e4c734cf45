#include "metrics/health.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <deque>
#include <thread>
#include <vector>

#include "common/error.h"

namespace rg {
namespace {

using Clock = std::chrono::steady_clock;

// A probe's request is a request line and a few headers.
constexpr size_t kMaxRequestBytes = 4096;
// Connections taken from the backlog per wake: the open ones are served
// between batches.
constexpr int kAcceptBatch = 64;

struct Client {
  int fd = -1;
  Clock::time_point deadline;
  std::string in;
  std::string out;  // the whole answer, once the request is read
  size_t sent = 0;
  // Answered before the request was read to its end (too large): the rest
  // is read and dropped until the client closes, since closing with it
  // unread would reset the connection and could take the answer with it.
  bool drain = false;
  bool draining = false;
};

std::string response(int status, std::string_view reason, const std::string& body, bool with_body) {
  std::string r = "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason) +
                  "\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: " + std::to_string(body.size()) +
                  "\r\nCache-Control: no-store\r\nConnection: close\r\n";
  if (status == 405) r += "Allow: GET, HEAD\r\n";
  r += "\r\n";
  if (with_body) r += body;
  return r;
}

// The answer to a complete request head.
std::string answer(const std::string& head, const std::function<Readiness()>& ready) {
  const std::string line = head.substr(0, head.find_first_of("\r\n"));
  const auto sp1 = line.find(' ');
  const auto sp2 = sp1 == std::string::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string::npos || line.compare(sp2 + 1, 5, "HTTP/") != 0)
    return response(400, "Bad Request", "not an HTTP request line\n", true);
  const std::string method = line.substr(0, sp1);
  const std::string target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string path = target.substr(0, target.find('?'));
  const bool with_body = method != "HEAD";
  if (method != "GET" && method != "HEAD") return response(405, "Method Not Allowed", "GET or HEAD\n", true);
  if (path == "/livez") return response(200, "OK", "ok\n", with_body);
  if (path == "/readyz") {
    const Readiness r = ready();
    return response(r.ready ? 200 : 503, r.ready ? "OK" : "Service Unavailable", r.text + "\n", with_body);
  }
  return response(404, "Not Found", "roceguard's health address serves /livez and /readyz only\n", with_body);
}

bool head_complete(const std::string& in) {
  return in.find("\r\n\r\n") != std::string::npos || in.find("\n\n") != std::string::npos;
}

}  // namespace

sockaddr_storage listen_sockaddr(const std::string& listen, const std::string& what, socklen_t& len) {
  sockaddr_storage ss{};
  const auto colon = listen.rfind(':');
  std::string host = colon == std::string::npos ? "" : listen.substr(0, colon);
  const std::string port_text = colon == std::string::npos ? "" : listen.substr(colon + 1);
  unsigned port = 0;
  const auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  const bool port_ok = !port_text.empty() && ec == std::errc() && end == port_text.data() + port_text.size() &&
                       port <= 65535;
  const bool v6 = host.size() > 2 && host.front() == '[' && host.back() == ']';
  if (v6) host = host.substr(1, host.size() - 2);
  auto* a4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* a6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (port_ok && !v6 && inet_pton(AF_INET, host.c_str(), &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET;
    a4->sin_port = htons(static_cast<uint16_t>(port));
    len = sizeof(*a4);
  } else if (port_ok && v6 && inet_pton(AF_INET6, host.c_str(), &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons(static_cast<uint16_t>(port));
    len = sizeof(*a6);
  } else {
    throw Error("cannot serve " + what + " on " + listen + ": not host:port or [v6]:port", kExitUsage);
  }
  return ss;
}

struct HealthServer::Impl {
  std::function<Readiness()> ready;
  int listen_fd = -1;
  int stop_fd = -1;
  std::string address;
  std::thread thread;

  ~Impl() {
    if (listen_fd >= 0) close(listen_fd);
    if (stop_fd >= 0) close(stop_fd);
  }

  // False when the connection is done with: answered, closed by the
  // client, or failed.
  bool serve(Client& c) const {
    if (c.draining) {
      // Bounded per wake: a client that sends without end shares the
      // thread, and its deadline ends it.
      char buf[4096];
      for (int k = 0; k < 16; ++k) {
        const ssize_t n = recv(c.fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n > 0) continue;
        return n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK);
      }
      return true;
    }
    if (c.out.empty()) {
      char buf[1024];
      for (;;) {
        const ssize_t n = recv(c.fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n == 0) return false;
        if (n < 0) {
          if (errno == EINTR) continue;
          if (errno == EAGAIN || errno == EWOULDBLOCK) break;
          return false;
        }
        c.in.append(buf, static_cast<size_t>(n));
        if (c.in.size() > kMaxRequestBytes) {
          c.out = response(431, "Request Header Fields Too Large", "a probe's request is a few lines\n", true);
          c.drain = true;
          break;
        }
        if (head_complete(c.in)) {
          c.out = answer(c.in, ready);
          break;
        }
      }
      if (c.out.empty()) return true;  // more of the request to come
    }
    while (c.sent < c.out.size()) {
      const ssize_t n = send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        return errno == EAGAIN || errno == EWOULDBLOCK;  // the rest when the socket takes it
      }
      c.sent += static_cast<size_t>(n);
    }
    if (!c.drain) return false;
    shutdown(c.fd, SHUT_WR);
    c.draining = true;
    return true;
  }

  // Bounded by the stop eventfd only: the server's loop.
  void run() const {
    std::deque<Client> clients;  // oldest first
    loop(clients);
    for (const auto& c : clients) close(c.fd);
  }

  void loop(std::deque<Client>& clients) const {
    std::vector<pollfd> fds;
    Clock::time_point accept_again{};
    for (;;) {
      auto now = Clock::now();
      for (auto it = clients.begin(); it != clients.end();) {
        if (now < it->deadline) {
          ++it;
          continue;
        }
        close(it->fd);
        it = clients.erase(it);
      }
      int timeout_ms = -1;
      auto wake = [&](Clock::time_point t) {
        const auto ms = std::chrono::ceil<std::chrono::milliseconds>(t - now).count();
        const int m = static_cast<int>(std::max<decltype(ms)>(ms, 0));
        timeout_ms = timeout_ms < 0 ? m : std::min(timeout_ms, m);
      };
      for (const auto& c : clients) wake(c.deadline);
      const bool accepting = now >= accept_again;
      if (!accepting) wake(accept_again);

      fds.clear();
      fds.push_back({stop_fd, POLLIN, 0});
      fds.push_back({accepting ? listen_fd : -1, POLLIN, 0});
      for (const auto& c : clients)
        fds.push_back({c.fd, static_cast<short>(c.out.empty() || c.draining ? POLLIN : POLLOUT), 0});
      if (poll(fds.data(), fds.size(), timeout_ms) < 0) {
        if (errno == EINTR) continue;
        spdlog::error("health probes: poll: {}; no longer answering", std::strerror(errno));
        return;
      }
      if (fds[0].revents) return;

      std::deque<Client> open;
      for (size_t i = 0; i < clients.size(); ++i) {
        Client& c = clients[i];
        if (!fds[i + 2].revents || serve(c)) {
          open.push_back(std::move(c));
          continue;
        }
        close(c.fd);
      }
      clients.swap(open);

      if (!(fds[1].revents & POLLIN)) continue;
      now = Clock::now();
      for (int k = 0; k < kAcceptBatch; ++k) {
        const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
          if (errno == EINTR || errno == ECONNABORTED) continue;
          if (errno == EAGAIN || errno == EWOULDBLOCK) break;
          // Out of descriptors: make room from the oldest connection, or
          // wait a moment rather than spin on a backlog it cannot take.
          if (!clients.empty()) {
            close(clients.front().fd);
            clients.pop_front();
            continue;
          }
            accept_again = now + std::chrono::milliseconds(100);
          break;
        }
        // The oldest connection gives way: idle clients cannot crowd out
        // the next probe.
        if (clients.size() >= kHealthMaxClients) {
          close(clients.front().fd);
          clients.pop_front();
        }
        Client c;
        c.fd = fd;
        c.deadline = now + std::chrono::milliseconds(kHealthClientMs);
        clients.push_back(std::move(c));
      }
    }
  }
};

HealthServer::HealthServer(const std::string& listen, std::function<Readiness()> ready)
    : impl_(std::make_unique<Impl>()) {
  impl_->ready = std::move(ready);
  socklen_t len = 0;
  sockaddr_storage ss = listen_sockaddr(listen, "health probes", len);
  impl_->listen_fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  const int on = 1;
  if (impl_->listen_fd < 0 ||
      setsockopt(impl_->listen_fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) != 0 ||
      bind(impl_->listen_fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 ||
      ::listen(impl_->listen_fd, SOMAXCONN) != 0) {
    const int err = errno;
    throw Error("cannot serve health probes on " + listen + ": " + errno_text(err) +
                    " (is the address local and the port free? set --health-listen)",
                kExitFailure);
  }
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof(bound);
  getsockname(impl_->listen_fd, reinterpret_cast<sockaddr*>(&bound), &bound_len);
  char host[INET6_ADDRSTRLEN] = {};
  uint16_t port = 0;
  if (bound.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&bound);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    port = ntohs(a->sin6_port);
    impl_->address = "[" + std::string(host) + "]:" + std::to_string(port);
  } else {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&bound);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    port = ntohs(a->sin_port);
    impl_->address = std::string(host) + ":" + std::to_string(port);
  }
  impl_->stop_fd = eventfd(0, EFD_CLOEXEC);
  if (impl_->stop_fd < 0) throw Error("health probes: eventfd: " + errno_text(errno), kExitFailure);
  impl_->thread = std::thread([impl = impl_.get()] { impl->run(); });
}

HealthServer::~HealthServer() {
  const uint64_t one = 1;
  if (write(impl_->stop_fd, &one, sizeof(one)) < 0) {
    // An eventfd write fails only on overflow, which one write cannot reach.
  }
  impl_->thread.join();
}

std::string HealthServer::address() const { return impl_->address; }

}  // namespace rg
