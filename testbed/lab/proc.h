// Background processes for the lab (tshark, roceguard itself), stopped when
// their owner goes; commands that run to completion use rg::run.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "common/process.h"

namespace rg::lab {

// The lab runs its commands through the loader's process runner.
using rg::run;
using rg::run_checked;
using rg::RunResult;

// A background child, stdout and stderr to log_path (or /dev/null). The
// destructor stops it: SIGTERM, then SIGKILL if it has not exited in time.
class Child {
 public:
  Child(const std::vector<std::string>& argv, const std::string& log_path = "");
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  bool running();
  void signal(int sig);
  // Waits for exit up to timeout; returns the exit status or -1 if still running.
  int wait(std::chrono::milliseconds timeout);
  // SIGTERM, bounded wait, SIGKILL. Returns the exit status.
  int stop(std::chrono::milliseconds grace = std::chrono::seconds(5));

 private:
  pid_t pid_ = -1;
  int status_ = -1;
};

}  // namespace rg::lab
