// Environment profile for RDMA applications (NCCL, UCX, libroceguard_qp.so),
// in systemd EnvironmentFile syntax.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "nic/devices.h"
#include "nic/profile.h"

namespace rg::nic {

// devices: those the profile applies to (may be empty: the device-specific
// variables are then left out with a comment saying why). rtt_us, when
// given, is the path's round trip: a comment names the ACK timeout fitting it
// (ack_timeout_for_rtt) and whether the profile's is shorter; the variables
// keep the profile's.
std::string render_env(const Profile& p, const std::vector<DeviceInfo>& devices,
                       std::optional<double> rtt_us = std::nullopt);

}  // namespace rg::nic
