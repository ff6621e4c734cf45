// Where the loader's log goes and how it looks: the journal (with syslog
// priorities, no timestamp of our own) when systemd runs us, else stderr as
// text or one JSON object per line, at the level the operator chose.
#pragma once

#include <spdlog/common.h>

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rg {

enum class LogFormat { kAuto, kText, kJson, kJournal };

struct LogSettings {
  LogFormat format = LogFormat::kAuto;
  spdlog::level::level_enum level = spdlog::level::info;
};

// The choices of --log-format and --log-level, as the CLI offers them.
inline constexpr std::string_view kLogFormatNames[] = {"auto", "text", "json", "journal"};
inline constexpr std::string_view kLogLevelNames[] = {"trace", "debug", "info", "warn", "error", "off"};
LogFormat log_format_from_name(std::string_view name);
spdlog::level::level_enum log_level_from_name(std::string_view name);

// Whether stderr is connected to the journal: systemd sets JOURNAL_STREAM
// to "<dev>:<inode>" of the stream it gives a service (systemd.exec(5));
// a child that inherits the variable but writes elsewhere does not match.
using GetEnv = std::function<const char*(const char*)>;
bool stderr_is_journal(int stderr_fd, const GetEnv& getenv_fn = {});

// kAuto resolved: the journal when stderr is the journal stream, else text.
LogFormat effective_log_format(LogFormat requested, bool journal_stream);

// Structured fields of a log line ("interface", "peer"), in order.
using LogFieldList = std::vector<std::pair<std::string, std::string>>;

// One JSON log line (no newline): {"time","level","message"} and fields;
// time in UTC with milliseconds, RFC 3339.
std::string json_log_line(spdlog::level::level_enum level, std::string_view message,
                          std::chrono::system_clock::time_point when, const LogFieldList& fields = {});

// While one lives, the messages this thread logs are about these: JSON log
// lines carry them as fields of their own ({"interface":"veth0"}) besides
// the message, which names them too; text and journal lines are unchanged.
// Nested scopes add to the outer one's fields.
class LogFields {
 public:
  explicit LogFields(LogFieldList fields);
  ~LogFields();
  LogFields(const LogFields&) = delete;
  LogFields& operator=(const LogFields&) = delete;

 private:
  size_t outer_;  // how many fields there were before
};

// Replaces the default logger accordingly; libbpf/libxdp messages follow
// through setup_bpf_logging(). Called once, before any subcommand runs.
void setup_logging(const LogSettings& settings);
// The level setup_logging() chose, and `-v` raising it to debug.
void raise_log_level_for_verbose(bool verbose);

}  // namespace rg
