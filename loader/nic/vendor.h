// Vendor tools for what no kernel interface sets: ConnectX's lossy-RoCE
// features through mlxreg.
#pragma once

#include <string>
#include <vector>

#include "nic/devices.h"
#include "nic/profile.h"
#include "nic/step_report.h"

namespace rg::nic {

// The mlxreg command enabling ConnectX's lossy-RoCE features in ROCE_ACCL.
std::vector<std::string> roce_accl_command(const DeviceInfo& dev, const Profile& p);
// Runs it only on mlx5 with mlxreg installed; otherwise says why not.
StepReport apply_vendor(const DeviceInfo& dev, const Profile& p, bool dry_run);

}  // namespace rg::nic
