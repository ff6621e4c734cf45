#include "nic/vendor.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "common/process.h"

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

// ConnectX keeps its lossy-RoCE features in the ROCE_ACCL access register
// (docs/design.md §10: there is no firmware "selective repeat" parameter to
// set at run time). ACKs get the data class so they are not the ones dropped.
std::vector<std::pair<std::string, std::string>> roce_accl_fields(const Profile& p) {
  return {{"roce_adp_retrans_en", "1"},        {"roce_tx_window_en", "1"}, {"roce_slow_restart_en", "1"},
          {"selective_repeat_forced_en", "1"}, {"ack_dscp_force", "1"},    {"ack_dscp", std::to_string(p.dscp)}};
}

std::vector<std::string> set_command(const DeviceInfo& dev, const std::string& fields) {
  return {"mlxreg", "-d", pci_address(dev), "--reg_name", "ROCE_ACCL", "--set", fields, "--yes"};
}

}  // namespace

std::vector<std::string> roce_accl_command(const DeviceInfo& dev, const Profile& p) {
  std::string fields;
  for (const auto& [name, value] : roce_accl_fields(p)) fields += (fields.empty() ? "" : ",") + name + "=" + value;
  return set_command(dev, fields);
}

std::string missing_vendor_tool(const DeviceInfo& dev) {
  if (!dev.is_mlx5() || find_in_path("mlxreg")) return "";
  return dev.name + ": mlxreg (mstflint or MFT) is not installed, and this ConnectX device needs it for its "
                    "lossy-RoCE features (ROCE_ACCL) before PFC may go off";
}

std::optional<std::map<std::string, std::string>> read_roce_accl(const DeviceInfo& dev, std::string& why) {
  std::map<std::string, std::string> fields;
  if (!dev.is_mlx5()) return fields;
  const std::vector<std::string> argv{"mlxreg", "-d", pci_address(dev), "--reg_name", "ROCE_ACCL", "--get"};
  RunResult res = run(argv);
  if (res.status != 0) {
    why = command_text(argv) + " exited with " + std::to_string(res.status) + ": " + res.out + res.err;
    return std::nullopt;
  }
  // mlxreg prints a table, one "field_name | 0x00000001" line per field.
  std::istringstream in(res.out);
  std::map<std::string, std::string> all;
  for (std::string line; std::getline(in, line);) {
    auto bar = line.find('|');
    if (bar == std::string::npos) continue;
    auto trim = [](std::string t) {
      t.erase(0, t.find_first_not_of(" \t"));
      t.erase(t.find_last_not_of(" \t\r") + 1);
      return t;
    };
    all[trim(line.substr(0, bar))] = trim(line.substr(bar + 1));
  }
  for (const auto& [name, value] : roce_accl_fields(Profile{})) {
    auto it = all.find(name);
    if (it == all.end()) {
      why = command_text(argv) + " does not show field " + name;
      return std::nullopt;
    }
    fields[name] = it->second;
  }
  return fields;
}

StepReport restore_roce_accl(const DeviceInfo& dev, const std::map<std::string, std::string>& fields) {
  StepReport r;
  if (fields.empty()) {
    r.status = StepReport::Status::kSkipped;
    r.lines.push_back(dev.name + ": no ROCE_ACCL fields were saved");
    return r;
  }
  std::string text;
  for (const auto& [name, value] : fields) text += (text.empty() ? "" : ",") + name + "=" + value;
  auto argv = set_command(dev, text);
  r.lines.push_back(command_text(argv));
  RunResult res = run(argv);
  if (res.status != 0) {
    r.status = StepReport::Status::kFailed;
    r.lines.push_back("mlxreg exited with " + std::to_string(res.status) + ": " + res.out + res.err);
  }
  return r;
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
