// Liveness and readiness probes on a listening socket of their own, apart
// from the scrape server: a probe never waits behind a scrape, a client
// that holds a connection open, or a worker of the scrape server
// (docs/design.md, section 12).
#pragma once

#include <sys/socket.h>

#include <functional>
#include <memory>
#include <string>

namespace rg {

// What /readyz answers: 200 when ready, 503 when not, body the reason.
struct Readiness {
  bool ready = false;
  std::string text;
};

// GET /livez: 200 "ok" while the process serves. GET /readyz: ready().
// One thread answers every connection without blocking on any: a request
// is read as it arrives, the answer written as the socket takes it, and a
// connection that has not sent its request within kHealthClientMs, or the
// oldest one when kHealthMaxClients are open, is closed.
class HealthServer {
 public:
  // listen: host:port or [v6]:port, numeric; port 0 picks one. ready() is
  // called on the server's thread and must not block. Binds, or throws
  // rg::Error naming the address.
  HealthServer(const std::string& listen, std::function<Readiness()> ready);
  ~HealthServer();
  HealthServer(const HealthServer&) = delete;
  HealthServer& operator=(const HealthServer&) = delete;

  // host:port bound (the port filled in when 0 was asked for).
  std::string address() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// "host:port" or "[v6]:port", numeric, as a socket address; throws rg::Error
// (kExitUsage) "cannot serve <what> on <listen>: ..." otherwise.
sockaddr_storage listen_sockaddr(const std::string& listen, const std::string& what, socklen_t& len);

inline constexpr int kHealthClientMs = 5000;
inline constexpr size_t kHealthMaxClients = 64;

}  // namespace rg
