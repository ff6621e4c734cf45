// User side of the lab's lossy WAN (testbed/wan/wan.bpf.c): loads it,
// attaches it at TC ingress of the WAN router's interfaces, changes its
// loss/CE rates while it runs and reads its counters.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "wan/wan.h"

struct wan;  // the generated skeleton

namespace rg::lab {

struct WanStats {
  uint64_t packets = 0;
  uint64_t bytes = 0;
  uint64_t dropped = 0;
  uint64_t bleached = 0;
  uint64_t ce_marked = 0;
};

class Wan {
 public:
  // Attaches to every interface of ifnames in netns; detaches on destruction
  // (and on failure part-way).
  Wan(const std::string& netns, const std::vector<std::string>& ifnames, const rg_wan_config& cfg);
  ~Wan();
  Wan(const Wan&) = delete;
  Wan& operator=(const Wan&) = delete;

  void configure(const rg_wan_config& cfg);
  // Packets that arrived on ifname (so: travelling away from its peer).
  WanStats stats(const std::string& ifname, rg_wan_class cls) const;
  WanStats total(rg_wan_class cls) const;

 private:
  std::map<std::pair<uint32_t, uint32_t>, WanStats> read() const;
  void detach_all() noexcept;

  struct Hook {
    std::string ifname;
    int ifindex;
    bool created_qdisc;
  };
  std::string netns_;
  std::vector<Hook> hooks_;
  ::wan* skel_ = nullptr;
};

const char* wan_class_name(rg_wan_class cls);

}  // namespace rg::lab
