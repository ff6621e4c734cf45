// libroceguard_qp.so under the ways applications reach ibv_modify_qp (linked,
// dlopened module RTLD_LOCAL/RTLD_GLOBAL, libibverbs dlopened RTLD_GLOBAL),
// against a stand-in libibverbs.so.1 that prints what it was given, so no
// RDMA device is needed. Each case runs a fresh program with LD_PRELOAD set
// in its environment only.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

struct ProgramRun {
  int exit_status = -1;
  std::string out;
  std::string err;
};

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

size_t count_of(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos; at = haystack.find(needle, at + 1)) n++;
  return n;
}

// What the profile in ProfileFile() below asks for, and what the
// application sets itself (tests/preload/qp_transitions.h).
constexpr const char* kProfileRtr = "libibverbs: QP 7 RTR traffic_class=184\n";
constexpr const char* kProfileRts = "libibverbs: QP 7 RTS timeout=18 retry_cnt=3\n";
constexpr const char* kApplicationRtr = "libibverbs: QP 7 RTR traffic_class=32\n";
constexpr const char* kApplicationRts = "libibverbs: QP 7 RTS timeout=14 retry_cnt=7\n";
constexpr const char* kBothSucceeded = "app: RTR returned 0\napp: RTS returned 0\n";

class PreloadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char templ[] = "/tmp/roceguard-preload-XXXXXX";
    ASSERT_NE(mkdtemp(templ), nullptr) << strerror(errno);
    dir_ = templ;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  fs::path write_file(const std::string& name, const std::string& text) {
    fs::path path = dir_ / name;
    std::ofstream(path) << text;
    return path;
  }

  // A profile the way `roceguard nic env` writes it (DSCP 46, ACK timeout
  // exponent 18, retry count 3), other consumers' lines included.
  std::string profile_file() {
    return write_file("rdma.env",
                      "# roceguard nic env: RoCE retransmit/QoS profile (systemd EnvironmentFile)\n"
                      "NCCL_IB_TC=184\nNCCL_IB_TIMEOUT=18\nNCCL_IB_RETRY_CNT=3\n"
                      "UCX_IB_TRAFFIC_CLASS=184\nUCX_RC_TIMEOUT=1.07s\nUCX_RC_RETRY_COUNT=3\n"
                      "ROCEGUARD_TC=184\nROCEGUARD_TIMEOUT=18\nROCEGUARD_RETRY_CNT=3\n")
        .string();
  }

  // Runs program with exactly env (nothing inherited from the test's own
  // environment), its output captured in files so neither stream can block.
  ProgramRun run(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
    ProgramRun r;
    const fs::path out = dir_ / "stdout", err = dir_ / "stderr";
    std::vector<char*> cargv, cenv;
    for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
    cargv.push_back(nullptr);
    for (const auto& e : env) cenv.push_back(const_cast<char*>(e.c_str()));
    cenv.push_back(nullptr);
    pid_t pid = fork();
    if (pid < 0) return r;
    if (pid == 0) {
      FILE* o = freopen(out.c_str(), "w", stdout);
      FILE* e = freopen(err.c_str(), "w", stderr);
      if (o && e) execve(cargv[0], cargv.data(), cenv.data());
      _exit(127);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) == pid && WIFEXITED(status)) r.exit_status = WEXITSTATUS(status);
    r.out = read_text(out);
    r.err = read_text(err);
    return r;
  }

  ProgramRun run_preloaded(const std::vector<std::string>& argv, std::vector<std::string> env) {
    env.push_back(std::string("LD_PRELOAD=") + RG_PRELOAD_LIB);
    return run(argv, env);
  }

  fs::path dir_;
};

TEST_F(PreloadTest, LinkedApplicationGetsTheProfile) {
  ProgramRun r = run_preloaded({RG_LINKED_APP}, {"ROCEGUARD_PROFILE=" + profile_file()});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  EXPECT_NE(r.out.find(kBothSucceeded), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.out.find(kProfileRtr), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(kProfileRts), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("app: attr after the calls traffic_class=32 timeout=14 retry_cnt=7\n"),
            std::string::npos)
      << "the caller's attributes were written: " << r.out;
}

TEST_F(PreloadTest, WithoutAProfileEveryValueIsTheApplications) {
  ProgramRun r = run_preloaded({RG_LINKED_APP}, {});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  EXPECT_NE(r.out.find(kBothSucceeded), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.out.find(kApplicationRtr), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(kApplicationRts), std::string::npos) << r.out;
}

TEST_F(PreloadTest, EnvironmentWinsOverTheProfile) {
  ProgramRun r = run_preloaded({RG_LINKED_APP}, {"ROCEGUARD_PROFILE=" + profile_file(), "ROCEGUARD_TC=0",
                                                 "ROCEGUARD_TIMEOUT=20", "ROCEGUARD_RETRY_CNT=0"});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  EXPECT_NE(r.out.find("libibverbs: QP 7 RTR traffic_class=0\n"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.out.find("libibverbs: QP 7 RTS timeout=20 retry_cnt=0\n"), std::string::npos) << r.out;
}

// Python extensions, UCX transports and MPI components bring libibverbs in
// with dlopen(), after LD_PRELOAD libraries are loaded; the call must still
// reach it, with the profile applied.
class PreloadRuntimeLoadTest : public PreloadTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(PreloadRuntimeLoadTest, CallReachesLibibverbsWithTheProfile) {
  std::vector<std::string> argv = {RG_DLOPEN_APP, GetParam()};
  if (std::string(GetParam()).rfind("module-", 0) == 0) argv.push_back(RG_MODULE);
  ProgramRun r = run_preloaded(argv, {"ROCEGUARD_PROFILE=" + profile_file()});
  ASSERT_EQ(r.exit_status, 0) << r.out << r.err;
  EXPECT_EQ(r.out.find("returned 38"), std::string::npos) << "ENOSYS from the interposer: " << r.out << r.err;
  EXPECT_NE(r.out.find(kBothSucceeded), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.out.find(kProfileRtr), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(kProfileRts), std::string::npos) << r.out;
}

INSTANTIATE_TEST_SUITE_P(LoadedAtRunTime, PreloadRuntimeLoadTest,
                         ::testing::Values("module-local", "module-global", "verbs-global"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string name = info.param;
                           for (auto& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

// With no libibverbs in the process there is nothing to call: the caller gets
// the error libibverbs gives for an operation its provider lacks, and one
// line on stderr however many calls fail.
TEST_F(PreloadTest, WithoutLibibverbsFailsWithOneMessage) {
  ProgramRun r = run_preloaded({RG_DLOPEN_APP, "no-verbs"}, {});
  ASSERT_EQ(r.exit_status, 0) << r.out << r.err;
  const std::string eopnotsupp = std::to_string(EOPNOTSUPP);
  EXPECT_NE(r.out.find("app: RTR returned " + eopnotsupp + "\napp: RTS returned " + eopnotsupp + "\n"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(count_of(r.err, "libroceguard_qp: "), 1u) << r.err;
  EXPECT_NE(r.err.find("ibv_modify_qp"), std::string::npos) << r.err;
}

// A comment longer than any line buffer must stay a comment: its tail is not
// a line of its own, and the lines after it are still read.
TEST_F(PreloadTest, LongCommentLineCannotSetAValue) {
  // One comment per split point: whatever line buffer a reader had (up to
  // 1 KiB), one of them would put the assignment at the start of a fragment.
  std::string profile = "ROCEGUARD_TC=184\n";
  for (size_t prefix = 1; prefix <= 1100; prefix++)
    profile += "#" + std::string(prefix, 'x') + "ROCEGUARD_TC=4\n";
  profile += "ROCEGUARD_TIMEOUT=18\nROCEGUARD_RETRY_CNT=3\n";
  ProgramRun r = run_preloaded({RG_LINKED_APP}, {"ROCEGUARD_PROFILE=" + write_file("long.env", profile).string()});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  EXPECT_NE(r.out.find(kProfileRtr), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.out.find(kProfileRts), std::string::npos) << r.out << r.err;
}

// 010 is 8 to strtol(..., 0) and to the shell, 10 to a person: a value with
// a leading zero is refused (the application's value stays), not guessed.
TEST_F(PreloadTest, LeadingZeroIsRefused) {
  ProgramRun r = run_preloaded({RG_LINKED_APP}, {"ROCEGUARD_TC=010", "ROCEGUARD_TIMEOUT=018"});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  EXPECT_NE(r.out.find(kApplicationRtr), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.out.find(kApplicationRts), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.err.find("ROCEGUARD_TC=010"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ROCEGUARD_TIMEOUT=018"), std::string::npos) << r.err;
}

TEST_F(PreloadTest, OnlyPlainDecimalIsAccepted) {
  for (const char* text : {"0xb8", "+184", " 184", "184 ", "-1", "256", "1e2", ""}) {
    ProgramRun r = run_preloaded({RG_LINKED_APP}, {std::string("ROCEGUARD_TC=") + text});
    ASSERT_EQ(r.exit_status, 0) << r.err;
    EXPECT_NE(r.out.find(kApplicationRtr), std::string::npos) << "ROCEGUARD_TC=" << text << ": " << r.out;
  }
}

// The library reads its environment with secure_getenv(): in a set-uid or
// file-capability program (AT_SECURE), a caller's environment must not steer
// the QPs the privileged program makes.
TEST_F(PreloadTest, ReadsTheEnvironmentOnlyThroughSecureGetenv) {
  ProgramRun r = run({RG_NM, "-D", "--undefined-only", RG_PRELOAD_LIB}, {});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  EXPECT_NE(r.out.find(" secure_getenv@"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(" getenv@"), std::string::npos) << r.out;
}

TEST_F(PreloadTest, SetUidProgramIgnoresTheEnvironment) {
  // LD_PRELOAD paths are ignored in secure-execution mode, so this program
  // links the library; it runs set-uid to nobody from a copy in dir_.
  ASSERT_EQ(geteuid(), 0u) << "needs root to make a set-uid program";
  struct statvfs fs_flags {};
  ASSERT_EQ(statvfs(dir_.c_str(), &fs_flags), 0) << strerror(errno);
  if (fs_flags.f_flag & ST_NOSUID) GTEST_SKIP() << dir_ << " is on a nosuid mount";
  ASSERT_EQ(chmod(dir_.c_str(), 0755), 0) << strerror(errno);
  const fs::path app = dir_ / "qp_setuid_app";
  fs::copy_file(RG_SETUID_APP, app);
  const std::vector<std::string> env = {"ROCEGUARD_TC=4", "ROCEGUARD_PROFILE=" + profile_file()};

  ProgramRun plain = run({app.string()}, env);
  ASSERT_EQ(plain.exit_status, 0) << plain.err;
  EXPECT_NE(plain.out.find("libibverbs: QP 7 RTR traffic_class=4\n"), std::string::npos)
      << "the linked library does not interpose: " << plain.out << plain.err;

  ASSERT_EQ(chown(app.c_str(), 65534, 65534), 0) << strerror(errno);
  ASSERT_EQ(chmod(app.c_str(), 04755), 0) << strerror(errno);
  ProgramRun setuid = run({app.string()}, env);
  ASSERT_EQ(setuid.exit_status, 0) << setuid.err;
  EXPECT_NE(setuid.out.find(kApplicationRtr), std::string::npos) << setuid.out << setuid.err;
  EXPECT_NE(setuid.out.find(kApplicationRts), std::string::npos) << setuid.out << setuid.err;
}

}  // namespace
