#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "error.h"
#include "nic/system.h"

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

std::string join_command(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) {
    bool quote = a.find_first_of(" ,=\"'") != std::string::npos && a.find('\'') == std::string::npos;
    s += (s.empty() ? "" : " ") + (quote ? "'" + a + "'" : a);
  }
  return s;
}

int run_command(const std::vector<std::string>& argv, std::string* output) {
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC)) return -1;
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    dup2(pipefd[1], STDOUT_FILENO);
    dup2(pipefd[1], STDERR_FILENO);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(pipefd[1]);
  char buf[4096];
  ssize_t n;
  while ((n = read(pipefd[0], buf, sizeof(buf))) > 0)
    if (output) output->append(buf, n);
  close(pipefd[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

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
  std::string cmd = join_command(argv);
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
  std::string out;
  int rc = run_command(argv, &out);
  if (rc != 0) {
    r.status = StepReport::Status::kFailed;
    r.lines.push_back("mlxreg exited with " + std::to_string(rc) + ": " + out);
  }
  return r;
}

}  // namespace rg::nic
