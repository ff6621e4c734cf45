// Child processes for the lab: iproute2, tshark, roceguard itself. argv is
// passed to execvp as it is (no shell), so names never need quoting.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace rg::lab {

struct RunResult {
  int status = -1;  // exit status, or 128 + signal
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs argv to completion, killed after timeout. Never throws for a non-zero
// exit: callers decide what a failure means.
RunResult run(const std::vector<std::string>& argv,
              std::chrono::milliseconds timeout = std::chrono::seconds(30));

// Runs argv and throws rg::Error quoting the command and its stderr unless it
// exits 0. Returns stdout.
std::string run_checked(const std::vector<std::string>& argv,
                        std::chrono::milliseconds timeout = std::chrono::seconds(30));

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

std::string join(const std::vector<std::string>& argv);

}  // namespace rg::lab
