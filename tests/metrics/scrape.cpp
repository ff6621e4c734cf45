#include "scrape.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace rg::test {

namespace {

std::runtime_error sys_error(const std::string& what) {
  return std::runtime_error(what + ": " + std::strerror(errno));
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

sockaddr_storage resolve(const std::string& host, uint16_t port, socklen_t* len) {
  sockaddr_storage ss{};
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  std::string h = host;
  if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (inet_pton(AF_INET, h.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    *len = sizeof(*v4);
  } else if (inet_pton(AF_INET6, h.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    *len = sizeof(*v6);
  } else {
    throw std::runtime_error("not a numeric address: " + host);
  }
  return ss;
}

// Reads a label value after its opening quote; handles \\ \" \n.
std::string read_quoted(const std::string& line, size_t& i) {
  std::string out;
  while (i < line.size() && line[i] != '"') {
    if (line[i] == '\\' && i + 1 < line.size()) {
      ++i;
      out += line[i] == 'n' ? '\n' : line[i];
    } else {
      out += line[i];
    }
    ++i;
  }
  if (i >= line.size()) throw std::runtime_error("unterminated label value: " + line);
  ++i;  // closing quote
  return out;
}

}  // namespace

HttpReply http_get(const std::string& host, uint16_t port, const std::string& path,
                   int timeout_s) {
  socklen_t len = 0;
  sockaddr_storage ss = resolve(host, port, &len);
  Fd fd(socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) throw sys_error("socket");
  timeval tv{timeout_s, 0};
  setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0)
    throw sys_error("connect " + host + ":" + std::to_string(port));
  // HTTP/1.0: the reply ends at EOF, never chunked.
  const std::string req = "GET " + path + " HTTP/1.0\r\nHost: " + host + "\r\n\r\n";
  if (send(fd.get(), req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size()))
    throw sys_error("send");
  std::string raw;
  char buf[65536];
  for (;;) {
    ssize_t n = recv(fd.get(), buf, sizeof(buf), 0);
    if (n < 0) throw sys_error("recv from " + host + ":" + std::to_string(port));
    if (n == 0) break;
    raw.append(buf, static_cast<size_t>(n));
  }
  HttpReply r;
  if (raw.compare(0, 5, "HTTP/") != 0) throw std::runtime_error("not an HTTP reply: " + raw);
  r.status = std::stoi(raw.substr(raw.find(' ') + 1, 3));
  auto body = raw.find("\r\n\r\n");
  if (body != std::string::npos) r.body = raw.substr(body + 4);
  return r;
}

std::vector<Sample> parse_exposition(const std::string& text) {
  std::vector<Sample> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    Sample s;
    size_t i = line.find_first_of("{ ");
    if (i == std::string::npos) throw std::runtime_error("no value: " + line);
    s.name = line.substr(0, i);
    if (line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        size_t eq = line.find('=', i);
        if (eq == std::string::npos || eq + 1 >= line.size() || line[eq + 1] != '"')
          throw std::runtime_error("bad label: " + line);
        std::string key = line.substr(i, eq - i);
        i = eq + 2;
        s.labels[key] = read_quoted(line, i);
        if (i < line.size() && line[i] == ',') ++i;
      }
      ++i;  // closing brace
    }
    std::istringstream rest(line.substr(i));
    std::string value;
    rest >> value;
    if (value.empty()) throw std::runtime_error("no value: " + line);
    s.value = std::stod(value);
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<Sample> find(const std::vector<Sample>& samples, const std::string& name,
                         const std::map<std::string, std::string>& match) {
  std::vector<Sample> out;
  for (const auto& s : samples) {
    if (s.name != name) continue;
    bool ok = true;
    for (const auto& [k, v] : match) {
      auto it = s.labels.find(k);
      if (it == s.labels.end() || it->second != v) ok = false;
    }
    if (ok) out.push_back(s);
  }
  return out;
}

std::optional<double> value_of(const std::vector<Sample>& samples, const std::string& name,
                               const std::map<std::string, std::string>& match) {
  auto found = find(samples, name, match);
  if (found.empty()) return std::nullopt;
  if (found.size() > 1)
    throw std::runtime_error(std::to_string(found.size()) + " samples of " + name + " match");
  return found.front().value;
}

CommandResult run_command(const std::vector<std::string>& argv, const std::string& stdin_path,
                          int timeout_s) {
  TempDir tmp("cmd");
  const std::string out_path = tmp.path() + "/out";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, stdin_path.c_str(), O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  int err = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (err != 0) {
    errno = err;
    throw sys_error("spawn " + argv[0]);
  }
  CommandResult r;
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  for (;;) {
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      r.output = read_file(out_path);
      r.output += "\n(killed after " + std::to_string(timeout_s) + " s)";
      return r;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.output = read_file(out_path);
  return r;
}

Child::Child(const std::vector<std::string>& argv, const std::string& log_path) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int err = posix_spawnp(&pid_, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (err != 0) {
    errno = err;
    throw sys_error("spawn " + argv[0]);
  }
}

bool Child::running() {
  if (pid_ < 0) return false;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    pid_ = -1;
    return false;
  }
  return true;
}

Child::~Child() {
  if (pid_ < 0) return;
  kill(pid_, SIGTERM);
  int status = 0;
  for (int i = 0; i < 500; ++i) {  // 10 s
    if (waitpid(pid_, &status, WNOHANG) == pid_) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, &status, 0);
}

TempDir::TempDir(const std::string& what) {
  std::string tmpl = "/tmp/rgex-" + std::to_string(getpid()) + "-" + what + "-XXXXXX";
  if (!mkdtemp(tmpl.data())) throw sys_error("mkdtemp " + tmpl);
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void write_file(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::trunc);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

uint16_t free_port() {
  Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0)
    throw sys_error("bind 127.0.0.1:0");
  return ntohs(a.sin_port);
}

CommandResult promtool_check_metrics(const std::string& body) {
  char path[] = "/tmp/rg-promtool-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) throw std::runtime_error(std::string("mkstemp: ") + std::strerror(errno));
  const bool written = write(fd, body.data(), body.size()) == static_cast<ssize_t>(body.size());
  close(fd);
  CommandResult r;
  if (written) r = run_command({"promtool", "check", "metrics"}, path);
  else r.output = "cannot write the scrape to a temporary file";
  unlink(path);
  return r;
}

CurlReply curl_get(const std::string& url, const std::vector<std::string>& args, int timeout_s) {
  TempDir tmp("curl");
  std::vector<std::string> argv{"curl", "-sS", "--max-time", std::to_string(timeout_s),
                                "-o", tmp.path() + "/body", "-D", tmp.path() + "/head",
                                "-w", "\n%{http_code}"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back(url);
  const CommandResult r = run_command(argv, "/dev/null", timeout_s + 10);
  CurlReply out;
  const auto nl = r.output.rfind('\n');
  const std::string code = nl == std::string::npos ? r.output : r.output.substr(nl + 1);
  out.status = std::atoi(code.c_str());
  out.error = nl == std::string::npos ? "" : r.output.substr(0, nl);
  if (std::filesystem::exists(tmp.path() + "/body")) out.body = read_file(tmp.path() + "/body");
  if (std::filesystem::exists(tmp.path() + "/head")) out.headers = read_file(tmp.path() + "/head");
  return out;
}

}  // namespace rg::test
