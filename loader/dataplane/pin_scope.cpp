// See pin_scope.h. The test is on the filesystem, not on who mounted it or
// where: a bpffs mount copied into a new mount namespace (unshare -m) or
// bind-mounted into a container is the host's filesystem, and pins on it
// survive; a bpffs mounted afresh inside a namespace (the sysfs that
// `ip netns exec` mounts has no fs/bpf) is another one. PID 1's mount table
// is read from /proc/1/mountinfo, which needs no ptrace access (its
// /proc/1/ns and /proc/1/root links do, and are often refused).
#include "dataplane/pin_scope.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <fstream>
#include <sstream>

namespace rg {

PinScope pin_scope(const std::string& pin_path) {
  PinScope scope;
  const auto slash = pin_path.find_last_of('/');
  const std::string parent = slash == 0 || slash == std::string::npos ? "/" : pin_path.substr(0, slash);
  struct stat here {};
  if (stat(parent.c_str(), &here) != 0) return scope;
  const std::string dev = std::to_string(major(here.st_dev)) + ":" + std::to_string(minor(here.st_dev));

  std::ifstream init("/proc/1/mountinfo");
  if (!init) return scope;  // cannot tell: say nothing
  // Fields: mount ID, parent ID, major:minor, root, mount point, ...
  for (std::string line; std::getline(init, line);) {
    std::istringstream fields(line);
    std::string id, parent_id, major_minor;
    if (fields >> id >> parent_id >> major_minor && major_minor == dev) return scope;
  }
  scope.outlives_process = false;
  scope.why = "the bpffs at " + parent + " (device " + dev +
              ") is mounted only in this mount namespace, not in PID 1's: the pins under " + pin_path +
              " vanish with it when roceguard exits, so counters and the attach record do not survive a "
              "restart; run in the host's mount namespace (nsenter --net instead of ip netns exec) or mount "
              "the host's bpffs at " + parent;
  return scope;
}

}  // namespace rg
