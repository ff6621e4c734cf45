// The kernel channels `roceguard nic apply` writes through: rdma_cm configfs
// defaults, DCB netlink, and external vendor tools.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nic/devices.h"
#include "nic/profile.h"

namespace rg::nic {

// What one apply step did (or, with dry_run, would do).
struct StepReport {
  enum class Status { kDone, kPlanned, kSkipped, kNotSupported, kFailed };
  Status status = Status::kDone;
  std::vector<std::string> lines;  // the changes, commands and reasons
};

// Sets default_roce_mode = "RoCE v2" and default_roce_tos = tos for every
// port of dev under <configfs>/rdma_cm/<dev>, mounting configfs and creating
// the device directory when needed.
StepReport set_rdma_cm_defaults(const DeviceInfo& dev, uint8_t tos, bool dry_run,
                                const std::string& configfs = "/sys/kernel/config");

// IEEE PFC off (pfc_en = 0) on ifname via RTM_SETDCB / DCB_CMD_IEEE_SET;
// kNotSupported when the driver has no DCB (IEEE PFC) operations.
StepReport set_pfc_off(const std::string& ifname, bool dry_run);

// The mlxreg command enabling ConnectX's lossy-RoCE features in ROCE_ACCL.
std::vector<std::string> roce_accl_command(const DeviceInfo& dev, const Profile& p);
// Runs it only on mlx5 with mlxreg installed; otherwise says why not.
StepReport apply_vendor(const DeviceInfo& dev, const Profile& p, bool dry_run);

// Runs argv (no shell); returns the exit status, -1 if it could not start.
int run_command(const std::vector<std::string>& argv, std::string* output = nullptr);
std::string join_command(const std::vector<std::string>& argv);

}  // namespace rg::nic
