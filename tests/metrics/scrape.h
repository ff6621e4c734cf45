// What the exporter tests need around the exporter: an HTTP/1.0 GET over a
// plain socket, curl for HTTPS, authentication and compression, a reader of the Prometheus text format, external commands
// (promtool, prometheus) with bounded lifetimes, and self-removing temp dirs.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace rg::test {

struct HttpReply {
  int status = 0;
  std::string body;
};

// GET host:port/path; throws on connection or timeout errors (bounded by
// timeout_s for connect, send and every receive).
HttpReply http_get(const std::string& host, uint16_t port, const std::string& path,
                   int timeout_s = 10);

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// Samples of a text-format exposition, in order; throws on a malformed line.
std::vector<Sample> parse_exposition(const std::string& text);

// Samples named `name` whose labels include every pair of `match`.
std::vector<Sample> find(const std::vector<Sample>& samples, const std::string& name,
                         const std::map<std::string, std::string>& match = {});
// The one such sample's value; nullopt when there is none, throws if several.
std::optional<double> value_of(const std::vector<Sample>& samples, const std::string& name,
                               const std::map<std::string, std::string>& match = {});

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};
// Runs argv with stdin from stdin_path (or /dev/null) and waits at most
// timeout_s, then kills it.
CommandResult run_command(const std::vector<std::string>& argv,
                          const std::string& stdin_path = "/dev/null", int timeout_s = 60);

// GET url with curl and extra arguments (--cacert, --user, --compressed,
// ...), each call bounded to timeout_s. status 0: no HTTP answer (refused
// connection, failed TLS handshake); curl's message is then in error.
struct CurlReply {
  int status = 0;
  std::string body;     // as curl wrote it (decoded with --compressed)
  std::string headers;  // the response head, as received
  std::string error;
};
CurlReply curl_get(const std::string& url, const std::vector<std::string>& args = {}, int timeout_s = 20);

// `promtool check metrics` on an exposition text (written to a temporary
// file, removed after): exit code 0 and no output is a clean scrape.
CommandResult promtool_check_metrics(const std::string& body);

// A background process killed (SIGTERM, then SIGKILL) and reaped on scope exit.
class Child {
 public:
  Child(const std::vector<std::string>& argv, const std::string& log_path);
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  bool running();
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

// mkdtemp under /tmp named rgex-<pid>-<what>-XXXXXX, removed with its contents.
class TempDir {
 public:
  explicit TempDir(const std::string& what);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void write_file(const std::string& path, const std::string& text);
std::string read_file(const std::string& path);

// A free TCP port on 127.0.0.1 at the time of the call.
uint16_t free_port();

}  // namespace rg::test
