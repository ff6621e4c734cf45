// rdma_cm's configfs defaults: the RoCE mode and ToS that connections made
// through rdma_cm get when the application sets none.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "nic/devices.h"
#include "nic/step_report.h"

namespace rg::nic {

// Sets default_roce_mode = "RoCE v2" and default_roce_tos = tos for every
// port of dev under <configfs>/rdma_cm/<dev>, mounting configfs and creating
// the device directory when needed.
// prepare=false skips loading rdma_cm and mounting configfs: configfs is
// then a directory standing in for it (tests).
StepReport set_rdma_cm_defaults(const DeviceInfo& dev, uint8_t tos, bool dry_run,
                                const std::string& configfs = "/sys/kernel/config", bool prepare = true);

// Port number -> attribute -> value of the attributes set_rdma_cm_defaults
// writes, as they are now; ports whose directory does not exist yet are
// left out (rdma_cm's built-in defaults apply to them).
using RdmaCmDefaults = std::map<int, std::map<std::string, std::string>>;
RdmaCmDefaults read_rdma_cm_defaults(const DeviceInfo& dev, const std::string& configfs = "/sys/kernel/config");
// Writes saved values back, for `nic revert`.
StepReport restore_rdma_cm_defaults(const std::string& dev_name, const RdmaCmDefaults& saved,
                                    const std::string& configfs = "/sys/kernel/config");

}  // namespace rg::nic
