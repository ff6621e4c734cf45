#include "lab/proc.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

#include "common/error.h"

namespace rg::lab {

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

Child::Child(const std::vector<std::string>& argv, const std::string& log_path) {
  int log_fd = open(log_path.empty() ? "/dev/null" : log_path.c_str(),
                    O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (log_fd < 0) throw Error("cannot open " + log_path + ": " + errno_text(errno));
  try {
    pid_ = spawn(argv, log_fd, log_fd);
  } catch (...) {
    close(log_fd);
    throw;
  }
  close(log_fd);
}

Child::~Child() {
  try {
    stop(std::chrono::seconds(5));
  } catch (...) {
  }
}

bool Child::running() { return wait(std::chrono::milliseconds(0)) < 0 && pid_ > 0; }

void Child::signal(int sig) {
  if (pid_ > 0 && status_ < 0) kill(-pid_, sig);
}

int Child::wait(std::chrono::milliseconds timeout) {
  if (pid_ <= 0 || status_ >= 0) return status_;
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    int st = 0;
    pid_t r = waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      status_ = exit_status(st);
      // Reap nothing else, but make sure processes it left behind go too.
      kill(-pid_, SIGKILL);
      return status_;
    }
    if (r < 0 && errno != EINTR) return status_;
    if (Clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

int Child::stop(std::chrono::milliseconds grace) {
  if (pid_ <= 0 || status_ >= 0) return status_;
  signal(SIGTERM);
  if (wait(grace) >= 0) return status_;
  signal(SIGKILL);
  return wait(std::chrono::seconds(10));
}

}  // namespace rg::lab
