// `roceguard --version`: the release and revision of this build and the
// libbpf, libxdp and kernel it runs with. A binary built on one Debian
// release runs with whatever libraries the host has, so the versions are
// read at run time, never taken from the build's headers.
#include "common/version.h"

#include <bpf/libbpf.h>
#include <dlfcn.h>
#include <sys/utsname.h>
#include <xdp/libxdp.h>

#include <cstdlib>
#include <memory>
#include <string>

#ifndef ROCEGUARD_GIT_REVISION
#define ROCEGUARD_GIT_REVISION "unknown"
#endif

namespace rg {
namespace {

// libxdp exports no version call (1.3), so the version is the one its
// shared object carries in its file name (libxdp.so.1.3.0). Debian's libxdp
// package 1.3.1 still ships libxdp.so.1.3.0: this is the library's own
// version, which is what decides its behaviour.
std::string loaded_libxdp_version() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&xdp_program__open_file), &info) == 0 || !info.dli_fname)
    return "unknown";
  std::unique_ptr<char, decltype(&std::free)> real(realpath(info.dli_fname, nullptr), &std::free);
  const std::string file = real ? real.get() : info.dli_fname;
  const std::string marker = ".so.";
  const auto at = file.rfind(marker);
  return at == std::string::npos ? "unknown" : file.substr(at + marker.size());
}

std::string running_kernel() {
  utsname u{};
  return uname(&u) == 0 ? u.release : "unknown";
}

}  // namespace

VersionInfo running_version() {
  VersionInfo v;
  v.version = ROCEGUARD_VERSION;
  v.revision = ROCEGUARD_GIT_REVISION;
  // libbpf_version_string() answers with the running library's "v1.1".
  v.libbpf = std::to_string(libbpf_major_version()) + "." + std::to_string(libbpf_minor_version());
  v.libxdp = loaded_libxdp_version();
  v.kernel = running_kernel();
  return v;
}

std::string version_text(const VersionInfo& v) {
  return "roceguard " + v.version + "\n" +
         "revision " + v.revision + "\n" +
         "libbpf " + v.libbpf + "\n" +
         "libxdp " + v.libxdp + "\n" +
         "kernel " + v.kernel + "\n";
}

nlohmann::json version_json(const VersionInfo& v) {
  return {{"version", v.version},
          {"revision", v.revision},
          {"libbpf", v.libbpf},
          {"libxdp", v.libxdp},
          {"kernel", v.kernel}};
}

}  // namespace rg
