// The loader's one exception type and the exit codes the binary ends with.
#pragma once

#include <stdexcept>
#include <string>

namespace rg {

// Every failure the loader reports: the message names the cause and, where
// there is one, the fix. exit_code follows the table in the README.
enum ExitCode : int {
  kExitOk = 0,
  kExitFailure = 1,      // runtime failure (kernel refused, I/O)
  kExitUsage = 2,        // bad command line or configuration
  kExitNotFound = 3,     // nothing attached / no pinned state / no device
  kExitConflict = 4,     // another owner: foreign XDP program, running instance
  kExitUnhealthy = 5,    // `status`: something configured is not attached
};

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what, int exit_code = kExitFailure)
      : std::runtime_error(what), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

// "<what>: <strerror(err)>" for a negative errno or errno value.
std::string errno_text(int err);

}  // namespace rg
