// What `roceguard --version` reports: this build, and the libraries and
// kernel it runs with, because the data plane's behaviour depends on all
// three (libxdp's dispatcher, libbpf's map reuse, the kernel's verifier).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace rg {

struct VersionInfo {
  std::string version;   // the project's release
  std::string revision;  // `git describe --always --dirty` at configure time, or "unknown"
  std::string libbpf;    // the libbpf loaded at run time
  std::string libxdp;    // the libxdp loaded at run time
  std::string kernel;    // uname -r
};

VersionInfo running_version();
// One "name version" per line, roceguard first.
std::string version_text(const VersionInfo& v);
nlohmann::json version_json(const VersionInfo& v);

}  // namespace rg
