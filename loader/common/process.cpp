#include "common/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "common/error.h"

namespace rg {

namespace {

using Clock = std::chrono::steady_clock;

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

pid_t spawn(const std::vector<std::string>& argv, int out_fd, int err_fd) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) throw Error("fork: " + errno_text(errno));
  if (pid == 0) exec_child(args, out_fd, err_fd);
  // Also from the parent: no window in which a signal misses the group.
  setpgid(pid, pid);
  return pid;
}

int exit_status(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return -1;
}

std::string command_text(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) {
    bool quote = a.find_first_of(" ,=\"'") != std::string::npos && a.find('\'') == std::string::npos;
    s += (s.empty() ? "" : " ") + (quote ? "'" + a + "'" : a);
  }
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
  pid_t pid;
  try {
    pid = spawn(argv, out[1], err[1]);
  } catch (...) {
    for (int fd : {out[0], out[1], err[0], err[1]}) close(fd);
    throw;
  }
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
  r.status = exit_status(st);
  if (killed) r.err += "\n(killed after " + std::to_string(timeout.count()) + " ms)";
  return r;
}

std::string run_checked(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
  RunResult r = run(argv, timeout);
  if (r.status != 0)
    throw Error("`" + command_text(argv) + "` failed (status " + std::to_string(r.status) + "): " + r.err);
  return r.out;
}

}  // namespace rg
