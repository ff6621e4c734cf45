// Vendor tools for what no kernel interface sets: ConnectX's lossy-RoCE
// features through mlxreg.
#pragma once

#include <map>
#include <optional>
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

// Why dev cannot get its lossy-RoCE features here ("mlxreg ... is not
// installed"), "" when it can or needs none. Turning PFC off without them
// leaves a ConnectX port lossy with go-back-N retransmission.
std::string missing_vendor_tool(const DeviceInfo& dev);

// The ROCE_ACCL fields apply_vendor sets, as mlxreg --get reads them now
// ("0x00000000"); nullopt with why when they cannot be read. Empty on a
// device without ROCE_ACCL.
std::optional<std::map<std::string, std::string>> read_roce_accl(const DeviceInfo& dev, std::string& why);
// Writes fields back (what read_roce_accl returned), for `nic revert`.
StepReport restore_roce_accl(const DeviceInfo& dev, const std::map<std::string, std::string>& fields);

}  // namespace rg::nic
