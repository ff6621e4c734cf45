// Whether roceguard's pins outlive the process. They do when the bpffs
// holding them is the host's; they do not when roceguard runs in a mount
// namespace of its own (`ip netns exec`, a container without the host's
// bpffs mounted in) and the bpffs there was mounted for it: that mount, and
// every pin on it, goes away with the namespace when the process exits, so
// counters restart at zero and a restart cannot find its programs.
#pragma once

#include <string>

namespace rg {

struct PinScope {
  // false only when shown to be private to this mount namespace; true too
  // when it cannot be told (PID 1's mount table is not readable).
  bool outlives_process = true;
  std::string why;  // for the warning, when !outlives_process
};

// Looks for the filesystem under pin_path's parent among the mounts of
// PID 1 (the host's init, or the container's).
PinScope pin_scope(const std::string& pin_path);

}  // namespace rg
