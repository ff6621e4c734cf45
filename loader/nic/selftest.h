// Verbs self-test: proves the device accepts the profile by driving an RC QP
// through RESET -> INIT -> RTR -> RTS with the profile's attributes.
#pragma once

#include <string>

#include "nic/devices.h"
#include "nic/profile.h"

namespace rg::nic {

struct SelfTestResult {
  bool ok = false;
  std::string step;     // "INIT", "RTR", "RTS" or the setup call that failed
  std::string refused;  // attribute the device refused, when one could be isolated
  std::string detail;   // errno text and what was tried
};

// The QP is connected to itself (its own QPN and the port's RoCE v2 GID), so
// nothing is sent and no peer is needed.
SelfTestResult self_test(const DeviceInfo& dev, const PortInfo& port, int gid_index,
                         const Profile& profile);

}  // namespace rg::nic
