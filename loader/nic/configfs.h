// rdma_cm's configfs defaults: the RoCE mode and ToS that connections made
// through rdma_cm get when the application sets none.
#pragma once

#include <cstdint>
#include <string>

#include "nic/devices.h"
#include "nic/step_report.h"

namespace rg::nic {

// Sets default_roce_mode = "RoCE v2" and default_roce_tos = tos for every
// port of dev under <configfs>/rdma_cm/<dev>, mounting configfs and creating
// the device directory when needed.
StepReport set_rdma_cm_defaults(const DeviceInfo& dev, uint8_t tos, bool dry_run,
                                const std::string& configfs = "/sys/kernel/config");

}  // namespace rg::nic
