// Child processes: vendor tools for `nic apply`, iproute2, tshark and
// roceguard itself for the lab. argv goes to execvp as it is (no shell), so
// arguments never need quoting.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace rg {

struct RunResult {
  int status = -1;  // exit status, or 128 + signal
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs argv to completion, killed after timeout. Never throws for a non-zero
// exit: callers decide what a failure means. An argv[0] that cannot be
// executed exits 127, as in a shell.
RunResult run(const std::vector<std::string>& argv,
              std::chrono::milliseconds timeout = std::chrono::seconds(30));

// Runs argv and throws rg::Error quoting the command and its stderr unless it
// exits 0. Returns stdout.
std::string run_checked(const std::vector<std::string>& argv,
                        std::chrono::milliseconds timeout = std::chrono::seconds(30));

// Starts argv in a process group of its own, stdin from /dev/null, stdout
// and stderr to the given descriptors, and returns its pid; the caller
// reaps it.
pid_t spawn(const std::vector<std::string>& argv, int out_fd, int err_fd);

// Exit status from a waitpid() status: the code, 128 + signal, or -1.
int exit_status(int wait_status);

// argv as one line a shell would accept, for messages and dry runs.
std::string command_text(const std::vector<std::string>& argv);

}  // namespace rg
