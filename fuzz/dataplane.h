// The data plane under fuzzing: the roceguard object loaded once, fed one
// frame at a time with BPF_PROG_TEST_RUN. The process first moves into a
// network namespace of its own holding one veth pair with documentation
// addresses and permanent neighbours, so the encapsulation's fib lookups
// resolve without a packet leaving the process; the namespace dies with it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "dataplane/maps.h"
#include "model.h"

struct roceguard;

namespace rg::fuzz {

struct Run {
  uint32_t verdict = 0;
  Bytes out;
};

class Dataplane {
 public:
  // Throws std::runtime_error when the namespace or the object cannot be set up.
  Dataplane();
  ~Dataplane();
  Dataplane(const Dataplane&) = delete;
  Dataplane& operator=(const Dataplane&) = delete;

  // false when the kernel refuses the frame itself (below ETH_HLEN, over a page).
  bool tc(const Bytes& in, Run& r);
  bool xdp(const Bytes& in, Run& r);

  std::vector<CounterRow> counters() const { return reader_->counters(); }
  const Tunnels& tunnels() const { return tunnels_; }
  int ifindex() const { return ifindex_; }

 private:
  roceguard* skel_ = nullptr;
  std::unique_ptr<MapReader> reader_;
  Tunnels tunnels_;
  int ifindex_ = 0;
};

}  // namespace rg::fuzz
