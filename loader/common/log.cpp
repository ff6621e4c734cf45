#include "common/log.h"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/sinks/systemd_sink.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <nlohmann/json.hpp>

namespace rg {
namespace {

spdlog::level::level_enum g_level = spdlog::level::info;
thread_local LogFieldList t_fields;

// Writes json_log_line() of every message to stderr.
class JsonLineSink : public spdlog::sinks::base_sink<std::mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    const std::string line =
        json_log_line(msg.level, std::string_view(msg.payload.data(), msg.payload.size()), msg.time, t_fields) +
        "\n";
    std::fwrite(line.data(), 1, line.size(), stderr);
  }
  void flush_() override { std::fflush(stderr); }
};

}  // namespace

LogFormat log_format_from_name(std::string_view name) {
  if (name == "text") return LogFormat::kText;
  if (name == "json") return LogFormat::kJson;
  if (name == "journal") return LogFormat::kJournal;
  return LogFormat::kAuto;
}

spdlog::level::level_enum log_level_from_name(std::string_view name) {
  return spdlog::level::from_str(std::string(name));
}

bool stderr_is_journal(int stderr_fd, const GetEnv& getenv_fn) {
  const char* stream = getenv_fn ? getenv_fn("JOURNAL_STREAM") : std::getenv("JOURNAL_STREAM");
  if (!stream) return false;
  unsigned long long dev = 0, ino = 0;
  if (std::sscanf(stream, "%llu:%llu", &dev, &ino) != 2) return false;
  struct stat st {};
  if (fstat(stderr_fd, &st) != 0) return false;
  return st.st_dev == dev && st.st_ino == ino;
}

LogFormat effective_log_format(LogFormat requested, bool journal_stream) {
  if (requested != LogFormat::kAuto) return requested;
  return journal_stream ? LogFormat::kJournal : LogFormat::kText;
}

std::string json_log_line(spdlog::level::level_enum level, std::string_view message,
                          std::chrono::system_clock::time_point when, const LogFieldList& fields) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(when.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm utc{};
  gmtime_r(&secs, &utc);
  char stamp[80];  // room for any int the compiler cannot rule out
  std::snprintf(stamp, sizeof(stamp), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900, utc.tm_mon + 1,
                utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, static_cast<int>(ms % 1000));
  const auto level_name = spdlog::level::to_string_view(level);
  nlohmann::json line = {{"time", stamp},
                         {"level", std::string(level_name.data(), level_name.size())},
                         {"message", std::string(message)}};
  for (const auto& [key, value] : fields)
    if (!line.contains(key)) line[key] = value;
  // A message with invalid UTF-8 (an interface name from the kernel) is
  // still one line of JSON.
  return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void setup_logging(const LogSettings& settings) {
  spdlog::sink_ptr sink;
  switch (effective_log_format(settings.format, stderr_is_journal(STDERR_FILENO))) {
    case LogFormat::kJournal:
      // The journal stamps each entry itself; the message alone, with the
      // level as PRIORITY, is what journalctl -p filters on.
      sink = std::make_shared<spdlog::sinks::systemd_sink_mt>("roceguard");
      break;
    case LogFormat::kJson:
      sink = std::make_shared<JsonLineSink>();
      break;
    case LogFormat::kText:
    case LogFormat::kAuto:
      sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
      break;
  }
  // Unnamed, as spdlog's default logger: text lines keep their "[time] [level]" form.
  auto logger = std::make_shared<spdlog::logger>("", sink);
  g_level = settings.level;
  logger->set_level(g_level);
  logger->flush_on(spdlog::level::trace);
  spdlog::set_default_logger(logger);
}

LogFields::LogFields(LogFieldList fields) : outer_(t_fields.size()) {
  t_fields.insert(t_fields.end(), std::make_move_iterator(fields.begin()), std::make_move_iterator(fields.end()));
}

LogFields::~LogFields() { t_fields.resize(outer_); }

void raise_log_level_for_verbose(bool verbose) {
  if (verbose && g_level > spdlog::level::debug) spdlog::set_level(spdlog::level::debug);
}

}  // namespace rg
