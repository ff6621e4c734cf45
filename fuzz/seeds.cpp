// Writes the seed corpus of one fuzzer, one file per input:
//   rg_fuzz_seeds tc|xdp|config <directory>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "frames.h"

namespace {

// Configurations a gateway would use, plus the mistakes the parser must name.
const std::pair<const char*, const char*> kConfigs[] = {
    {"minimal", "interfaces = [\"eth1\"]\n"},
    {"tunnel", R"(interfaces = ["eth1"]
[dataplane]
dscp = 46
cnp_dscp = 48
qp_entries = 65536
xdp_mode = "skb"
ingress_hook = "tc"
[tunnel]
mtu = 1500
mtu_policy = "drop"
[[tunnel.peer]]
name = "west"
local = "192.0.2.1"
remote = "203.0.113.1"
vni = 4791
routes = ["198.51.100.0/24", "2001:db8:2::/48"]
[[tunnel.peer]]
name = "east"
local = "2001:db8::1"
remote = "2001:db8::2"
vni = 7
mtu = 1400
routes = ["2001:db8:3::/48"]
[metrics]
listen = "[::1]:9741"
per_qp = true
top_qps = 10
)"},
    {"interface_tables", "[[interface]]\nname = \"eth1\"\n[[interface]]\nname = \"eth2\"\n"},
    {"errors", R"(interfaces = ["eth1", "eth1"]
[dataplane]
dscp = 64
qp_entries = "many"
bogus = 1
[[tunnel.peer]]
local = "192.0.2.1"
remote = "2001:db8::2"
vni = 16777216
routes = ["203.0.113.0/33"]
)"},
    {"nic", "interfaces = [\"eth1\"]\n[nic]\n"},
    {"syntax", "[dataplane\ndscp = = 1\n"},
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || (std::strcmp(argv[1], "tc") && std::strcmp(argv[1], "xdp") &&
                    std::strcmp(argv[1], "config"))) {
    std::fprintf(stderr, "usage: %s tc|xdp|config <directory>\n", argv[0]);
    return 2;
  }
  std::vector<std::pair<std::string, rg::fuzz::Bytes>> seeds;
  if (std::strcmp(argv[1], "config") == 0) {
    for (const auto& [name, text] : kConfigs)
      seeds.emplace_back(name, rg::fuzz::Bytes(text, text + std::strlen(text)));
  } else {
    seeds = rg::fuzz::seed_frames(std::strcmp(argv[1], "tc") == 0 ? rg::fuzz::Target::kTcEgress
                                                                   : rg::fuzz::Target::kXdpIngress);
  }
  int n = 0;
  for (const auto& [name, frame] : seeds) {
    std::ofstream f(std::string(argv[2]) + "/" + name, std::ios::binary);
    f.write(reinterpret_cast<const char*>(frame.data()), static_cast<std::streamsize>(frame.size()));
    if (!f.flush()) {
      std::fprintf(stderr, "cannot write %s/%s\n", argv[2], name.c_str());
      return 1;
    }
    ++n;
  }
  std::printf("%d seeds in %s\n", n, argv[2]);
  return 0;
}
