// Priority flow control through DCB netlink: off, since pause frames do not
// cross the lossy network roceguard is for.
#pragma once

#include <string>

#include "nic/step_report.h"

namespace rg::nic {

// IEEE PFC off (pfc_en = 0) on ifname via RTM_SETDCB / DCB_CMD_IEEE_SET;
// kNotSupported when the driver has no DCB (IEEE PFC) operations.
StepReport set_pfc_off(const std::string& ifname, bool dry_run);

}  // namespace rg::nic
