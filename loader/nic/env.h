// Environment profile for RDMA applications (NCCL, UCX, libroceguard_qp.so),
// in systemd EnvironmentFile syntax.
#pragma once

#include <string>
#include <vector>

#include "nic/devices.h"
#include "nic/profile.h"

namespace rg::nic {

// devices: those the profile applies to (may be empty: the device-specific
// variables are then left out with a comment saying why).
std::string render_env(const Profile& p, const std::vector<DeviceInfo>& devices);

}  // namespace rg::nic
