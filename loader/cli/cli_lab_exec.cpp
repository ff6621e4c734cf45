// roceguard lab: hands the command line to roceguard-lab, the test bed's
// demonstration in network namespaces. The generator and the WAN emulator
// live in that binary so that the daemon, which runs as root on every
// gateway, ships neither; exec keeps the process id, so signals sent to
// `roceguard lab` (Ctrl-C) reach the lab itself.
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "common/error.h"

namespace rg {
namespace {

// Next to this binary first (the build tree puts both in one directory),
// then where `cmake --install` puts it.
std::vector<std::string> lab_binary_candidates() {
  std::vector<std::string> candidates;
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back((self.parent_path() / "roceguard-lab").string());
  candidates.push_back(ROCEGUARD_LIBEXEC_DIR "/roceguard-lab");
  return candidates;
}

[[noreturn]] void exec_lab(const std::vector<std::string>& args) {
  const auto candidates = lab_binary_candidates();
  for (const auto& path : candidates) {
    if (access(path.c_str(), X_OK) != 0) continue;
    std::vector<char*> argv{const_cast<char*>(path.c_str())};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(path.c_str(), argv.data());
    throw Error("cannot run " + path + ": " + errno_text(errno));
  }
  std::string tried;
  for (const auto& path : candidates) tried += (tried.empty() ? "" : " nor ") + path;
  throw Error("lab needs roceguard-lab, which is at neither " + tried +
                  ": build the roceguard-lab target, or install it",
              kExitNotFound);
}

}  // namespace

void add_lab_command(CLI::App& app) {
  auto* lab = app.add_subcommand(
      "lab", "RoCE v2 across a lossy, DSCP-bleaching WAN in network namespaces, without and with roceguard");
  // Every argument after `lab`, --help included, belongs to roceguard-lab.
  lab->prefix_command();
  lab->set_help_flag();
  // Not even the global --log-* options: the app's fallthrough would hand
  // --help and the rest to roceguard's own parser instead of the lab.
  lab->fallthrough(false);
  lab->callback([lab] { exec_lab(lab->remaining()); });
}

}  // namespace rg
