// The NIC profile without a device: ACK timeout rounding (4.096 us * 2^t),
// the IBA RNR timer table, [nic] validation, the environment file, and the
// configfs, DCB and ROCE_ACCL steps as planned on a machine without RDMA.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <ostream>

#include "common/error.h"
#include "nic/configfs.h"
#include "nic/dcb.h"
#include "nic/env.h"
#include "nic/profile.h"
#include "nic/vendor.h"

namespace fs = std::filesystem;
using namespace rg::nic;

namespace {

struct AckCase {
  const char* text;
  int exponent;          // 0: rejected
  const char* effective; // format_us of the effective value
};

void PrintTo(const AckCase& c, std::ostream* os) { *os << '"' << c.text << '"'; }

// "500us" -> "d500us", "524.288us" -> "d524_288us", "" -> "empty".
std::string case_name(const ::testing::TestParamInfo<AckCase>& info) {
  std::string n = info.param.text[0] ? "d" : "empty";
  for (const char* c = info.param.text; *c; c++)
    n += std::isalnum(static_cast<unsigned char>(*c)) ? *c : '_';
  return n;
}

class AckTimeoutTable : public ::testing::TestWithParam<AckCase> {};

TEST_P(AckTimeoutTable, ConvertsDurationToExponent) {
  const AckCase& c = GetParam();
  Profile p;
  auto err = set(p, "ack_timeout", std::string(c.text));
  if (c.exponent == 0) {
    ASSERT_TRUE(err.has_value()) << c.text << " was accepted";
    EXPECT_EQ(err->rfind("nic.ack_timeout: ", 0), 0u) << *err;
    return;
  }
  ASSERT_FALSE(err.has_value()) << *err;
  EXPECT_EQ(p.ack_timeout.exponent, c.exponent) << c.text;
  EXPECT_EQ(format_us(p.ack_timeout.effective_us), c.effective) << c.text;
  // Rounding is up: the device never waits less than asked.
  std::string why;
  EXPECT_GE(p.ack_timeout.effective_us, *parse_duration_us(c.text, &why) * (1 - 1e-9));
}

INSTANTIATE_TEST_SUITE_P(
    Durations, AckTimeoutTable,
    ::testing::Values(AckCase{"500us", 7, "524.288us"},
                      AckCase{"524.288us", 7, "524.288us"},  // exactly representable
                      AckCase{"524.289us", 8, "1.049ms"},    // just above: next step up
                      AckCase{"8ms", 11, "8.389ms"},
                      AckCase{"67ms", 14, "67.109ms"},
                      AckCase{"1ns", 1, "8.192us"},          // t = 0 (never) is not a duration
                      AckCase{"8.192us", 1, "8.192us"},
                      AckCase{"2s", 19, "2.147s"},
                      AckCase{"8796s", 31, "8796.093s"},     // the largest, t = 31
                      AckCase{"8797s", 0, ""},               // beyond t = 31
                      AckCase{"0us", 0, ""},
                      AckCase{"500", 0, ""},                 // no unit
                      AckCase{"500 us", 0, ""},
                      AckCase{"5min", 0, ""},
                      AckCase{"-1ms", 0, ""},
                      AckCase{"", 0, ""}),
    case_name);

TEST(AckTimeout, ExponentFormula) {
  for (int t = 1; t <= 31; t++) {
    auto a = ack_timeout_from_us(ack_timeout_us(t));
    ASSERT_TRUE(a);
    EXPECT_EQ(a->exponent, t);
  }
  EXPECT_DOUBLE_EQ(ack_timeout_us(14), 67108.864);
}

// The timeout a round trip calls for: at least 4x the round trip and at
// least the round trip plus 1 ms, rounded up to an exponent.
TEST(AckTimeoutForRtt, ExponentsOfWanRoundTrips) {
  struct {
    double rtt_us;
    int exponent;
    const char* effective;
  } cases[] = {
      {300, 9, "2.097ms"},      // 1.3 ms (the allowance) > 1.2 ms; t = 8 is 1.049 ms
      {1000, 10, "4.194ms"},    // 4 ms
      {10000, 14, "67.109ms"},  // 40 ms; t = 13 is 33.554 ms: the default profile just fits
      {100000, 17, "536.871ms"},  // 400 ms
  };
  for (const auto& c : cases) {
    auto t = ack_timeout_for_rtt(c.rtt_us);
    ASSERT_TRUE(t) << c.rtt_us;
    EXPECT_EQ(t->exponent, c.exponent) << c.rtt_us;
    EXPECT_EQ(format_us(t->effective_us), c.effective) << c.rtt_us;
    EXPECT_GE(t->effective_us, 4 * c.rtt_us);
    EXPECT_GE(t->effective_us, c.rtt_us + 1000);
  }
  EXPECT_DOUBLE_EQ(ack_timeout_floor_us(300), 1300);
  EXPECT_DOUBLE_EQ(ack_timeout_floor_us(1000), 4000);
  // The advice of 500 us (t = 7) fits no round trip: the allowance alone is longer.
  EXPECT_EQ(ack_timeout_for_rtt(0.001)->exponent, 8);
}

TEST(AckTimeoutForRtt, PowerOfTwoBoundaries) {
  // 4 x 4194.304 us is exactly t = 12 (16.777216 ms); a nanosecond more is t = 13.
  EXPECT_EQ(ack_timeout_for_rtt(4194.304)->exponent, 12);
  EXPECT_EQ(ack_timeout_for_rtt(4194.305)->exponent, 13);
  // 48.576 us + 1 ms is exactly t = 8 (1.048576 ms).
  EXPECT_EQ(ack_timeout_for_rtt(48.576)->exponent, 8);
  EXPECT_EQ(ack_timeout_for_rtt(48.577)->exponent, 9);
}

TEST(AckTimeoutForRtt, NoExponentFitsARoundTripBeyondT31) {
  std::string why;
  EXPECT_FALSE(ack_timeout_for_rtt(2200e6, &why));  // 4 x 2200 s > 2^31 x 4.096 us = 8796 s
  EXPECT_NE(why.find("2200s round trip"), std::string::npos) << why;
  EXPECT_NE(why.find("t = 31"), std::string::npos) << why;
  Profile p;
  auto w = ack_timeout_below_path(p, 2200e6);
  ASSERT_TRUE(w);
  EXPECT_NE(w->find("no local ACK timeout fits it"), std::string::npos) << *w;
}

TEST(AckTimeoutBelowPath, WarnsWithTheFiguresWhenTheProfileIsShorter) {
  Profile p;
  ASSERT_FALSE(set(p, "ack_timeout", std::string("500us")));
  auto w = ack_timeout_below_path(p, 10000);
  ASSERT_TRUE(w);
  EXPECT_EQ(*w,
            "nic.ack_timeout 500us (exponent 7, 524.288us) is too short for a 10ms round trip: it takes exponent 14 "
            "(67.109ms) or more; with less, ACKs come after the timer and the sender resends what was not lost");
  EXPECT_TRUE(ack_timeout_below_path(p, 300));  // 500 us is below any path
}

TEST(AckTimeoutBelowPath, NothingWhenTheProfileFits) {
  Profile p;  // 67 ms, t = 14
  EXPECT_FALSE(ack_timeout_below_path(p, 300));
  EXPECT_FALSE(ack_timeout_below_path(p, 10000));   // exactly t = 14
  EXPECT_FALSE(ack_timeout_below_path(p, 16777.216));  // 4x is t = 14 exactly
  auto w = ack_timeout_below_path(p, 16777.3);
  ASSERT_TRUE(w);
  EXPECT_NE(w->find("exponent 15 (134.218ms)"), std::string::npos) << *w;
}

TEST(MinRnrTimer, IbaTable) {
  EXPECT_DOUBLE_EQ(min_rnr_timer_ms(0), 655.36);
  EXPECT_DOUBLE_EQ(min_rnr_timer_ms(1), 0.01);
  EXPECT_DOUBLE_EQ(min_rnr_timer_ms(12), 0.64);
  EXPECT_DOUBLE_EQ(min_rnr_timer_ms(31), 491.52);
}

TEST(Profile, Defaults) {
  Profile p;
  EXPECT_EQ(p.dscp, 46);
  EXPECT_EQ(p.cnp_dscp, 48);
  EXPECT_EQ(p.tos(), 184);
  EXPECT_EQ(p.ack_timeout.exponent, 14);
}

toml::table parse(std::string_view text) { return toml::parse(text); }

TEST(ValidateNicTable, ValidTableHasNoMessages) {
  auto t = parse(R"(
ack_timeout = "500us"
retry_cnt = 7
rnr_retry = 7
min_rnr_timer = 12
dscp = 46
cnp_dscp = 48
ecn = 2
gid_index = 3
interfaces = ["eth0"]
)");
  EXPECT_TRUE(validate_nic_table(t).empty());
}

TEST(ValidateNicTable, EveryMessageNamesItsKey) {
  const std::pair<const char*, const char*> cases[] = {
      {"ack_timeout = \"500\"", "nic.ack_timeout: "},
      {"ack_timeout = 500", "nic.ack_timeout: "},
      {"ack_timeout = \"9000s\"", "nic.ack_timeout: "},
      {"retry_cnt = 8", "nic.retry_cnt: 8 is out of range 0..7"},
      {"rnr_retry = -1", "nic.rnr_retry: -1 is out of range 0..7"},
      {"min_rnr_timer = 32", "nic.min_rnr_timer: 32 is out of range 0..31"},
      {"dscp = 64", "nic.dscp: 64 is out of range 0..63"},
      {"cnp_dscp = \"cs6\"", "nic.cnp_dscp: must be an integer"},
      {"ecn = 3", "nic.ecn: 3 is CE"},
      {"dscp = 46.0", "nic.dscp: has the wrong type (float)"},
      {"interfaces = [1]", "nic.interfaces: "},
      {"interfaces = [\"a/b\"]", "nic.interfaces: \"a/b\" is not a valid interface name"},
      {"retry_count = 3", "nic.retry_count: unknown key"},
  };
  for (const auto& [text, expect] : cases) {
    auto msgs = validate_nic_table(parse(text));
    ASSERT_EQ(msgs.size(), 1u) << text;
    EXPECT_EQ(msgs[0].rfind(expect, 0), 0u) << text << " -> " << msgs[0];
  }
  // All problems are reported at once, not only the first.
  EXPECT_EQ(validate_nic_table(parse("retry_cnt = 9\ndscp = 99\nbogus = 1")).size(), 3u);
}

TEST(ValidateNicTable, ProfileFromTableThrowsWithEveryProblem) {
  try {
    profile_from_table(parse("retry_cnt = 9\ndscp = 99"));
    FAIL() << "accepted";
  } catch (const rg::Error& e) {
    EXPECT_EQ(e.exit_code(), rg::kExitUsage);
    EXPECT_NE(std::string(e.what()).find("nic.retry_cnt"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("nic.dscp"), std::string::npos);
  }
}

TEST(Env, NcclTcIsTheWholeTosByte) {
  Profile p;
  ASSERT_FALSE(set(p, "dscp", int64_t{46}));
  ASSERT_FALSE(set(p, "ack_timeout", std::string("500us")));
  std::string env = render_env(p, {});
  EXPECT_NE(env.find("\nNCCL_IB_TC=184\n"), std::string::npos) << env;
  EXPECT_NE(env.find("\nNCCL_IB_TIMEOUT=7\n"), std::string::npos) << env;
  EXPECT_NE(env.find("\nNCCL_IB_RETRY_CNT=7\n"), std::string::npos) << env;
  EXPECT_NE(env.find("\nUCX_IB_TRAFFIC_CLASS=184\n"), std::string::npos) << env;
  EXPECT_NE(env.find("\nUCX_RC_TIMEOUT=524.288us\n"), std::string::npos) << env;
  EXPECT_NE(env.find("\nROCEGUARD_TC=184\n"), std::string::npos) << env;
}

TEST(Env, DeviceVariablesFromDiscovery) {
  DeviceInfo d;
  d.name = "rxe0";
  PortInfo port;
  port.num = 1;
  port.gids = {{0, "fe80::1", "IB/RoCE v1", "eth0", ""},
               {1, "fe80::1", "RoCE v2", "eth0", ""},
               {2, "::ffff:192.0.2.1", "IB/RoCE v1", "eth0", "192.0.2.1"},
               {3, "::ffff:192.0.2.1", "RoCE v2", "eth0", "192.0.2.1"}};
  d.ports = {port};
  std::string env = render_env(Profile{}, {d});
  EXPECT_NE(env.find("\nNCCL_IB_GID_INDEX=3\n"), std::string::npos) << env;
  EXPECT_NE(env.find("\nNCCL_IB_HCA==rxe0:1\n"), std::string::npos) << env;
  EXPECT_NE(env.find("\nUCX_NET_DEVICES=rxe0:1\n"), std::string::npos) << env;
  EXPECT_NE(env.find("\nUCX_IB_GID_INDEX=3\n"), std::string::npos) << env;
}

// A scratch directory named after this process; removed however the test ends.
struct TempDir {
  fs::path path = fs::temp_directory_path() / ("rgvm-" + std::to_string(getpid()) + "-nic");
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
};

TEST(DryRun, RdmaCmDefaultsTouchNothing) {
  TempDir tmp;
  DeviceInfo d;
  d.name = "rxe9";
  d.ports = {PortInfo{}};
  d.ports[0].num = 1;
  auto r = set_rdma_cm_defaults(d, 184, /*dry_run=*/true, tmp.path.string());
  EXPECT_EQ(r.status, StepReport::Status::kPlanned);
  std::string all;
  for (const auto& l : r.lines) all += l + "\n";
  EXPECT_NE(all.find("mount -t configfs configfs " + tmp.path.string()), std::string::npos) << all;
  EXPECT_NE(all.find("mkdir " + (tmp.path / "rdma_cm/rxe9").string()), std::string::npos) << all;
  EXPECT_NE(all.find("'RoCE v2' > " + (tmp.path / "rdma_cm/rxe9/ports/1/default_roce_mode").string()),
            std::string::npos) << all;
  EXPECT_NE(all.find("'184' > " + (tmp.path / "rdma_cm/rxe9/ports/1/default_roce_tos").string()),
            std::string::npos) << all;
  EXPECT_TRUE(fs::is_empty(tmp.path)) << "dry run created files";
}

TEST(Vendor, RoceAcclPlanWithoutMlx5) {
  DeviceInfo d;
  d.name = "rxe0";
  d.driver = "rxe";
  auto r = apply_vendor(d, Profile{}, /*dry_run=*/false);
  EXPECT_EQ(r.status, StepReport::Status::kSkipped);
  ASSERT_EQ(r.lines.size(), 1u);
  EXPECT_NE(r.lines[0].find("mlxreg -d "), std::string::npos) << r.lines[0];
  EXPECT_NE(r.lines[0].find("--reg_name ROCE_ACCL --set"), std::string::npos) << r.lines[0];
  EXPECT_NE(r.lines[0].find("selective_repeat_forced_en=1"), std::string::npos) << r.lines[0];
  EXPECT_NE(r.lines[0].find("ack_dscp_force=1,ack_dscp=46"), std::string::npos) << r.lines[0];
  EXPECT_NE(r.lines[0].find("only on mlx5"), std::string::npos) << r.lines[0];
}

TEST(Dcb, LoopbackHasNoDcbSupport) {
  // lo has no dcbnl_ops: the kernel answers EOPNOTSUPP to the IEEE get, so
  // nothing is ever set.
  auto r = set_pfc_off("lo", /*dry_run=*/false);
  EXPECT_EQ(r.status, StepReport::Status::kNotSupported);
  ASSERT_FALSE(r.lines.empty());
  EXPECT_NE(r.lines[0].find("not supported by this driver"), std::string::npos) << r.lines[0];
}

}  // namespace
