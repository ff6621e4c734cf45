// `roceguard nic` through the real binary, as an operator runs it.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace fs = std::filesystem;

namespace {

struct CmdResult {
  int status = -1;
  std::string out;  // stdout and stderr
};

CmdResult roceguard(const std::string& args, bool with_stderr = true) {
  CmdResult r;
  std::string cmd = std::string(ROCEGUARD_BIN) + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null");
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

bool has_line(const std::string& text, const std::string& line) {
  return ("\n" + text).find("\n" + line + "\n") != std::string::npos;
}

// No RDMA device is bound to an interface that does not exist, whatever the
// machine has.
const std::string kNoSuchIf = "rgvm" + std::to_string(getpid() % 100000);

TEST(NicCli, EnvDscp46AckTimeout500us) {
  CmdResult r = roceguard("nic env --dscp 46 --ack-timeout 500us");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has_line(r.out, "NCCL_IB_TC=184")) << r.out;
  EXPECT_TRUE(has_line(r.out, "NCCL_IB_TIMEOUT=7")) << r.out;
  EXPECT_TRUE(has_line(r.out, "UCX_RC_TIMEOUT=524.288us")) << r.out;
  EXPECT_NE(r.out.find("exponent 7 (effective 524.288us)"), std::string::npos) << r.out;
}

TEST(NicCli, EnvWritesEnvironmentFile) {
  fs::path dir = fs::temp_directory_path() / ("rgvm-" + std::to_string(getpid()) + "-env");
  fs::create_directories(dir);
  struct Cleanup {
    fs::path p;
    ~Cleanup() { fs::remove_all(p); }
  } cleanup{dir};
  fs::path cfg = dir / "roceguard.toml";
  std::ofstream(cfg) << "[nic]\ndscp = 26\nack_timeout = \"8ms\"\nretry_cnt = 5\n";
  CmdResult r = roceguard("nic env -c " + cfg.string() + " -o " + (dir / "env").string());
  ASSERT_EQ(r.status, 0) << r.out;
  std::ifstream f(dir / "env");
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(has_line(text, "NCCL_IB_TC=104")) << text;
  EXPECT_TRUE(has_line(text, "NCCL_IB_TIMEOUT=11")) << text;
  EXPECT_TRUE(has_line(text, "NCCL_IB_RETRY_CNT=5")) << text;
  // Flags win over the file.
  r = roceguard("nic env -c " + cfg.string() + " --dscp 46");
  EXPECT_TRUE(has_line(r.out, "NCCL_IB_TC=184")) << r.out;
}

TEST(NicCli, RejectsOutOfRangeWithReason) {
  CmdResult r = roceguard("nic env --retry-cnt 8");
  EXPECT_EQ(r.status, 2) << r.out;
  // A problem is named after where it came from: here the flag.
  EXPECT_NE(r.out.find("--retry-cnt: 8 is out of range 0..7"), std::string::npos) << r.out;
  r = roceguard("nic env --ack-timeout 500");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("--ack-timeout: \"500\" has no unit"), std::string::npos) << r.out;
}

// --rtt says which ACK timeout fits the path, in a comment, and warns on
// stderr when the profile's is shorter; the variables keep the profile's.
TEST(NicCli, EnvRttNamesTheFittingExponentAndWarnsWhenTheProfileIsShorter) {
  CmdResult r = roceguard("nic env --ack-timeout 500us --rtt 10ms", false);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has_line(r.out, "# round trip 10ms: the ACK timeout fitting it is exponent 14 (67.109ms); the "
                              "profile's is shorter: nic.ack_timeout = \"67.109ms\" fits"))
      << r.out;
  EXPECT_TRUE(has_line(r.out, "NCCL_IB_TIMEOUT=7")) << r.out;
  EXPECT_TRUE(has_line(r.out, "ROCEGUARD_TIMEOUT=7")) << r.out;
  EXPECT_EQ(r.out.find("warning"), std::string::npos) << "the warning goes to stderr:\n" << r.out;
  r = roceguard("nic env --ack-timeout 500us --rtt 10ms");
  EXPECT_NE(r.out.find("roceguard: warning: nic.ack_timeout 500us (exponent 7, 524.288us) is too short for a 10ms "
                       "round trip: it takes exponent 14 (67.109ms) or more"),
            std::string::npos)
      << r.out;

  // The default profile (67 ms, t = 14) fits a 1 ms round trip: no warning.
  r = roceguard("nic env --rtt 1ms");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has_line(r.out, "# round trip 1ms: the ACK timeout fitting it is exponent 10 (4.194ms); the profile's "
                              "fits it"))
      << r.out;
  EXPECT_TRUE(has_line(r.out, "NCCL_IB_TIMEOUT=14")) << r.out;
  EXPECT_EQ(r.out.find("warning"), std::string::npos) << r.out;

  // --json keeps the variables only; the warning still reaches stderr.
  r = roceguard("nic env --json --ack-timeout 500us --rtt 300us", false);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("\"NCCL_IB_TIMEOUT\":\"7\""), std::string::npos) << r.out;  // -j: one line
  EXPECT_EQ(r.out.find("round trip"), std::string::npos) << r.out;
  r = roceguard("nic env --json --ack-timeout 500us --rtt 300us");
  EXPECT_NE(r.out.find("too short for a 300us round trip: it takes exponent 9 (2.097ms)"), std::string::npos)
      << r.out;
}

TEST(NicCli, EnvRejectsABadRttWithReason) {
  for (const auto& [arg, why] : std::vector<std::pair<std::string, std::string>>{
           {"10", "--rtt: \"10\" has no unit"},
           {"fast", "--rtt: \"fast\" is not a duration"},
           {"0ms", "--rtt: must be positive"},
           {"10parsecs", "--rtt: unknown unit \"parsecs\""},
           {"3000s", "--rtt: a 3000s round trip needs a timeout of 12000s"},
       }) {
    CmdResult r = roceguard("nic env --rtt " + arg);
    EXPECT_EQ(r.status, 2) << arg << ": " << r.out;
    EXPECT_NE(r.out.find(why), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("NCCL_IB"), std::string::npos) << "nothing written on a usage error: " << r.out;
  }
}

TEST(NicCli, ShowWithoutDeviceExitsZero) {
  CmdResult r = roceguard("nic show -i " + kNoSuchIf);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("no RDMA device found"), std::string::npos) << r.out;
  r = roceguard("nic show --json -i " + kNoSuchIf);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("\"devices\":[]"), std::string::npos) << r.out;  // -j: one line
  // Whatever this machine has, show itself succeeds.
  EXPECT_EQ(roceguard("nic show").status, 0);
}

TEST(NicCli, ApplyWithoutDeviceFails) {
  CmdResult r = roceguard("nic apply -i " + kNoSuchIf);
  EXPECT_EQ(r.status, 3) << r.out;
  EXPECT_NE(r.out.find("no RDMA device found on " + kNoSuchIf), std::string::npos) << r.out;
  r = roceguard("nic apply --dry-run -i " + kNoSuchIf);
  EXPECT_EQ(r.status, 3) << r.out;
}

}  // namespace
