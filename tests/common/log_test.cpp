// The loader's log outside systemd: one JSON object per line, the level
// filter, and telling the journal's stream from any other stderr. The
// journal itself is checked under systemd as PID 1 (tests/vm/test_systemd.sh).
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/log.h"

namespace {

using nlohmann::json;

TEST(LogJson, LineHasTimeLevelAndMessage) {
  // 2026-03-04T05:06:07.089Z
  const auto when = std::chrono::system_clock::time_point(std::chrono::milliseconds(1772600767089LL));
  const std::string line = rg::json_log_line(spdlog::level::warn, "veth0: \"quoted\"\nnext", when);
  EXPECT_EQ(line.find('\n'), std::string::npos) << "one line per message";
  const json j = json::parse(line);
  EXPECT_EQ(j["time"], "2026-03-04T05:06:07.089Z");
  EXPECT_EQ(j["level"], "warning");
  EXPECT_EQ(j["message"], "veth0: \"quoted\"\nnext");
}

TEST(LogJson, InvalidUtf8StaysOneJsonLine) {
  const std::string line = rg::json_log_line(spdlog::level::info, "bad \xff byte", std::chrono::system_clock::now());
  EXPECT_FALSE(json::parse(line, nullptr, false).is_discarded()) << line;
}

TEST(LogJson, FieldsAreKeysOfTheirOwnAndNeverReplaceTheMessage) {
  const std::string line =
      rg::json_log_line(spdlog::level::info, "attached to veth0", std::chrono::system_clock::now(),
                        {{"interface", "veth0"}, {"peer", "west"}, {"message", "not this"}});
  EXPECT_EQ(line.find('\n'), std::string::npos);
  const json j = json::parse(line);
  EXPECT_EQ(j["interface"], "veth0");
  EXPECT_EQ(j["peer"], "west");
  EXPECT_EQ(j["message"], "attached to veth0");
  EXPECT_FALSE(json::parse(rg::json_log_line(spdlog::level::info, "m", std::chrono::system_clock::now()))
                   .contains("interface"));
}

TEST(LogFormat, AutoIsTheJournalOnlyOnItsStream) {
  EXPECT_EQ(rg::effective_log_format(rg::LogFormat::kAuto, true), rg::LogFormat::kJournal);
  EXPECT_EQ(rg::effective_log_format(rg::LogFormat::kAuto, false), rg::LogFormat::kText);
  EXPECT_EQ(rg::effective_log_format(rg::LogFormat::kJson, true), rg::LogFormat::kJson);
  EXPECT_EQ(rg::effective_log_format(rg::LogFormat::kText, true), rg::LogFormat::kText);
  EXPECT_EQ(rg::log_format_from_name("json"), rg::LogFormat::kJson);
  EXPECT_EQ(rg::log_format_from_name("journal"), rg::LogFormat::kJournal);
  EXPECT_EQ(rg::log_level_from_name("warn"), spdlog::level::warn);
  EXPECT_EQ(rg::log_level_from_name("off"), spdlog::level::off);
}

TEST(LogFormat, JournalStreamMustMatchStderr) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  struct stat st {};
  ASSERT_EQ(fstat(fds[1], &st), 0);
  const std::string mine = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
  const std::string other = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino + 1);
  auto env = [](const std::string& value) {
    return [value](const char* name) -> const char* {
      return std::string(name) == "JOURNAL_STREAM" ? value.c_str() : nullptr;
    };
  };
  EXPECT_TRUE(rg::stderr_is_journal(fds[1], env(mine)));
  EXPECT_FALSE(rg::stderr_is_journal(fds[1], env(other))) << "inherited by a child writing elsewhere";
  EXPECT_FALSE(rg::stderr_is_journal(fds[1], env("garbage")));
  EXPECT_FALSE(rg::stderr_is_journal(fds[1], [](const char*) -> const char* { return nullptr; }));
  close(fds[0]);
  close(fds[1]);
}

// stderr into a file while fn logs; the lines written.
std::vector<std::string> stderr_lines(const std::function<void()>& fn) {
  char path[] = "/tmp/rg-log-test-XXXXXX";
  const int fd = mkstemp(path);
  std::fflush(stderr);
  const int saved = dup(STDERR_FILENO);
  dup2(fd, STDERR_FILENO);
  fn();
  spdlog::default_logger()->flush();
  std::fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  close(fd);
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  unlink(path);
  return lines;
}

TEST(LogSetup, JsonAtWarnDropsInfoAndKeepsWarnings) {
  const auto lines = stderr_lines([] {
    rg::setup_logging({rg::LogFormat::kJson, spdlog::level::warn});
    spdlog::info("not shown");
    spdlog::warn("shown {}", 1);
    spdlog::error("shown {}", 2);
  });
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(json::parse(lines[0])["message"], "shown 1");
  EXPECT_EQ(json::parse(lines[0])["level"], "warning");
  EXPECT_EQ(json::parse(lines[1])["level"], "error");
}

TEST(LogSetup, VerboseRaisesToDebugButNeverLowers) {
  auto lines = stderr_lines([] {
    rg::setup_logging({rg::LogFormat::kJson, spdlog::level::info});
    spdlog::debug("hidden");
    rg::raise_log_level_for_verbose(true);
    spdlog::debug("now shown");
  });
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(json::parse(lines[0])["message"], "now shown");
  lines = stderr_lines([] {
    rg::setup_logging({rg::LogFormat::kJson, spdlog::level::trace});
    rg::raise_log_level_for_verbose(true);
    spdlog::trace("trace kept");
  });
  ASSERT_EQ(lines.size(), 1u);
}

TEST(LogSetup, TextHasItsOwnTimestamp) {
  const auto lines = stderr_lines([] {
    rg::setup_logging({rg::LogFormat::kText, spdlog::level::info});
    spdlog::info("plain");
  });
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].rfind("[20", 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find("[info] plain"), std::string::npos) << lines[0];
}

}  // namespace
