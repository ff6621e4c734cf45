#include "lab/proc.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

#include "error.h"

namespace rg::lab {

namespace {

using Clock = std::chrono::steady_clock;

std::vector<char*> c_argv(const std::vector<std::string>& argv) {
  std::vector<char*> v;
  for (const auto& a : argv) v.push_back(const_cast<char*>(a.c_str()));
  v.push_back(nullptr);
  return v;
}

int decode_status(int st) {
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
  return -1;
}

// In the child after fork: only async-signal-safe calls until exec.
[[noreturn]] void exec_child(const std::vector<char*>& argv, int out_fd, int err_fd) {
  int null_fd = open("/dev/null", O_RDONLY);
  if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
  dup2(out_fd, STDOUT_FILENO);
  dup2(err_fd, STDERR_FILENO);
  // Own process group, so stopping the child also stops what it spawned.
  setpgid(0, 0);
  execvp(argv[0], argv.data());
  static const char msg[] = "exec failed\n";
  (void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
  _exit(127);
}

}  // namespace

std::string join(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

RunResult run(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) throw Error("pipe: " + errno_text(errno));
  if (pipe2(err, O_CLOEXEC) != 0) {
    close(out[0]);
    close(out[1]);
    throw Error("pipe: " + errno_text(errno));
  }
  auto args = c_argv(argv);
  pid_t pid = fork();
  if (pid < 0) throw Error("fork: " + errno_text(errno));
  if (pid == 0) exec_child(args, out[1], err[1]);
  close(out[1]);
  close(err[1]);

  RunResult r;
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  std::string* sinks[2] = {&r.out, &r.err};
  int open_fds = 2;
  const auto deadline = Clock::now() + timeout;
  bool killed = false;
  while (open_fds > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      kill(-pid, SIGKILL);
      killed = true;
      break;
    }
    if (poll(fds, 2, static_cast<int>(left.count())) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[4096];
      ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        sinks[i]->append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (auto& f : fds)
    if (f.fd >= 0) close(f.fd);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  r.status = decode_status(st);
  if (killed) r.err += "\n(killed after " + std::to_string(timeout.count()) + " ms)";
  return r;
}

std::string run_checked(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
  RunResult r = run(argv, timeout);
  if (r.status != 0)
    throw Error("`" + join(argv) + "` failed (status " + std::to_string(r.status) + "): " + r.err);
  return r.out;
}

Child::Child(const std::vector<std::string>& argv, const std::string& log_path) {
  int log_fd = open(log_path.empty() ? "/dev/null" : log_path.c_str(),
                    O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (log_fd < 0) throw Error("cannot open " + log_path + ": " + errno_text(errno));
  auto args = c_argv(argv);
  pid_ = fork();
  if (pid_ < 0) {
    close(log_fd);
    throw Error("fork: " + errno_text(errno));
  }
  if (pid_ == 0) exec_child(args, log_fd, log_fd);
  // Also from the parent: no window in which a signal misses the group.
  setpgid(pid_, pid_);
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
      status_ = decode_status(st);
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
