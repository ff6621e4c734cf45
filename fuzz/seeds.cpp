// Writes the seed corpus of one data-plane fuzzer, one file per frame:
//   rg_fuzz_seeds tc|xdp <directory>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "frames.h"

int main(int argc, char** argv) {
  if (argc != 3 || (std::strcmp(argv[1], "tc") && std::strcmp(argv[1], "xdp"))) {
    std::fprintf(stderr, "usage: %s tc|xdp <directory>\n", argv[0]);
    return 2;
  }
  const auto target =
      std::strcmp(argv[1], "tc") == 0 ? rg::fuzz::Target::kTcEgress : rg::fuzz::Target::kXdpIngress;
  int n = 0;
  for (const auto& [name, frame] : rg::fuzz::seed_frames(target)) {
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
