// `nic apply` and `nic revert` for one RDMA device. apply goes step by step,
// each only after the one before succeeded: the verbs self-test (the device
// takes the profile at all), then, with what they replace saved first, the
// rdma_cm defaults, the vendor's lossy-RoCE features and only then PFC off,
// so a port never runs lossy without the features that make loss cheap. A
// step that fails puts back what the earlier ones changed. revert writes
// the saved values back.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "nic/dcb.h"
#include "nic/devices.h"
#include "nic/profile.h"
#include "nic/selftest.h"
#include "nic/step_report.h"

namespace rg::nic {

inline constexpr const char* kDefaultNicStateDir = "/var/lib/roceguard";

// The machine apply and revert act on; tests replace parts of it.
struct NicSystem {
  std::string configfs = "/sys/kernel/config";
  bool prepare_configfs = true;  // load rdma_cm and mount configfs when needed
  std::function<SelfTestResult(const DeviceInfo&, const PortInfo&, int, const Profile&)> self_test = nic::self_test;
  Dcb dcb = Dcb::kernel();
  // nic-<device>.json: what apply replaced, until revert puts it back.
  std::string state_dir = kDefaultNicStateDir;
};

struct NicStep {
  std::string what;  // "verbs self-test", "PFC off (DCB netlink)", ...
  StepReport report;
};

struct NicOutcome {
  std::vector<NicStep> steps;
  int exit_code = 0;  // 0, or the rg exit code of the step that stopped it
};

NicOutcome apply_device(const DeviceInfo& dev, const Profile& p, bool dry_run, const NicSystem& sys = {});

// Devices with saved values in sys.state_dir.
std::vector<std::string> saved_devices(const NicSystem& sys = {});
// Writes back what apply saved for the device (PFC first, so the port is
// lossless again before its lossy-RoCE features go), then removes the file.
NicOutcome revert_device(const std::string& dev_name, const NicSystem& sys = {});

}  // namespace rg::nic
