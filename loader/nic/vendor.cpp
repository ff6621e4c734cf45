#include "nic/vendor.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "process.h"

namespace fs = std::filesystem;

namespace rg::nic {

namespace {

std::optional<std::string> find_in_path(const std::string& tool) {
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/sbin:/usr/bin:/sbin:/bin");
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    fs::path p = fs::path(dir) / tool;
    if (access(p.c_str(), X_OK) == 0) return p.string();
  }
  return std::nullopt;
}

// mlxreg addresses the function by PCI address; rdma names are not enough.
std::string pci_address(const DeviceInfo& dev) {
  std::error_code ec;
  fs::path target = fs::read_symlink("/sys/class/infiniband/" + dev.name + "/device", ec);
  return ec ? dev.name : target.filename().string();
}

}  // namespace

std::vector<std::string> roce_accl_command(const DeviceInfo& dev, const Profile& p) {
  // ConnectX keeps its lossy-RoCE features in the ROCE_ACCL access register
  // (docs/design.md §10: there is no firmware "selective repeat" parameter to
  // set at run time). ACKs get the data class so they are not the ones dropped.
  std::string fields = "roce_adp_retrans_en=1,roce_tx_window_en=1,roce_slow_restart_en=1,"
                       "selective_repeat_forced_en=1,ack_dscp_force=1,ack_dscp=" +
                       std::to_string(p.dscp);
  return {"mlxreg", "-d", pci_address(dev), "--reg_name", "ROCE_ACCL", "--set", fields, "--yes"};
}

StepReport apply_vendor(const DeviceInfo& dev, const Profile& p, bool dry_run) {
  StepReport r;
  auto argv = roce_accl_command(dev, p);
  std::string cmd = command_text(argv);
  if (!dev.is_mlx5()) {
    r.status = StepReport::Status::kSkipped;
    r.lines.push_back(dev.name + ": skipped (" + (dev.driver.empty() ? "unknown" : dev.driver) +
                      " driver, ROCE_ACCL exists only on mlx5/ConnectX): on mlx5 this would run: " + cmd);
    return r;
  }
  if (!find_in_path("mlxreg")) {
    r.status = StepReport::Status::kSkipped;
    r.lines.push_back(dev.name + ": skipped (mlxreg from mstflint/MFT is not installed): would run: " + cmd);
    return r;
  }
  r.lines.push_back(cmd);
  if (dry_run) {
    r.status = StepReport::Status::kPlanned;
    return r;
  }
  RunResult run_result = run(argv);
  if (run_result.status != 0) {
    r.status = StepReport::Status::kFailed;
    r.lines.push_back("mlxreg exited with " + std::to_string(run_result.status) + ": " + run_result.out +
                      run_result.err);
  }
  return r;
}

}  // namespace rg::nic
