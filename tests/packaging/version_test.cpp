// `roceguard --version` and `--version --json`: the build's version and
// revision and the libbpf, libxdp and kernel in use, in a form people
// (first line "roceguard VERSION") and scripts (JSON keys) can rely on.
#include <gtest/gtest.h>
#include <sys/utsname.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "common/version.h"
#include "scrape.h"

namespace {

using rg::test::run_command;

TEST(Version, TextIsOneNameVersionPairPerLine) {
  const rg::VersionInfo v{"1.2.3", "abc1234-dirty", "1.1", "1.3.0", "6.1.0-42-amd64"};
  EXPECT_EQ(rg::version_text(v),
            "roceguard 1.2.3\n"
            "revision abc1234-dirty\n"
            "libbpf 1.1\n"
            "libxdp 1.3.0\n"
            "kernel 6.1.0-42-amd64\n");
}

TEST(Version, JsonHasOneKeyPerComponent) {
  const rg::VersionInfo v{"1.2.3", "unknown", "1.1", "1.3.0", "6.1.0"};
  EXPECT_EQ(rg::version_json(v), (nlohmann::json{{"version", "1.2.3"},
                                                  {"revision", "unknown"},
                                                  {"libbpf", "1.1"},
                                                  {"libxdp", "1.3.0"},
                                                  {"kernel", "6.1.0"}}));
}

TEST(Version, RunningVersionsAreReadFromThisProcess) {
  const rg::VersionInfo v = rg::running_version();
  EXPECT_EQ(v.version, ROCEGUARD_VERSION);
  EXPECT_FALSE(v.revision.empty());
  EXPECT_TRUE(std::regex_match(v.libbpf, std::regex(R"(\d+\.\d+)"))) << v.libbpf;
  EXPECT_TRUE(std::regex_match(v.libxdp, std::regex(R"(\d+(\.\d+)+)"))) << v.libxdp;
  utsname u{};
  ASSERT_EQ(uname(&u), 0);
  EXPECT_EQ(v.kernel, u.release);
}

TEST(Version, BinaryPrintsTextAndJson) {
  const rg::VersionInfo v = rg::running_version();
  const auto text = run_command({RG_BIN, "--version"});
  EXPECT_EQ(text.exit_code, 0) << text.output;
  EXPECT_EQ(text.output, rg::version_text(v));

  for (const auto& args : {std::vector<std::string>{RG_BIN, "--version", "--json"},
                           std::vector<std::string>{RG_BIN, "--json", "--version"}}) {
    const auto json = run_command(args);
    EXPECT_EQ(json.exit_code, 0) << json.output;
    EXPECT_EQ(nlohmann::json::parse(json.output), rg::version_json(v)) << json.output;
  }
}

TEST(Version, ExtraArgumentsAreAUsageError) {
  const auto r = run_command({RG_BIN, "--version", "--bogus"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
}

}  // namespace
