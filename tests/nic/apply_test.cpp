// `nic apply` and `nic revert` against stand-ins: a directory for configfs,
// a DCB that keeps pfc_en in memory, a verbs self-test that answers as told
// and an mlxreg script on PATH that keeps ROCE_ACCL in a file. Checks the
// gating (nothing changes after a refused self-test or without mlxreg on
// ConnectX), the order (PFC goes off last), the saved values and revert.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "common/error.h"
#include "nic/apply.h"

namespace fs = std::filesystem;

namespace {

using namespace rg::nic;

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// mlxreg's table for --get, the fields updated by --set; every call and the
// DCB calls go to one journal, so their order can be checked.
constexpr const char* kFakeMlxreg = R"(#!/bin/sh
echo "mlxreg $*" >> "$RG_FAKE_JOURNAL"
case " $* " in
  *" --get "*)
    echo "Field Name                  | Data"
    echo "====================================="
    sed 's/=/ | /' "$RG_FAKE_ROCE_ACCL" ;;
  *" --set "*)
    [ -n "$RG_FAKE_MLXREG_FAIL" ] && { echo "-E- register access failed"; exit 1; }
    fields=$(echo "$*" | sed 's/.*--set \([^ ]*\).*/\1/')
    for kv in $(echo "$fields" | tr , ' '); do
      grep -v "^${kv%%=*}=" "$RG_FAKE_ROCE_ACCL" > "$RG_FAKE_ROCE_ACCL.new"
      echo "$kv" >> "$RG_FAKE_ROCE_ACCL.new"
      mv "$RG_FAKE_ROCE_ACCL.new" "$RG_FAKE_ROCE_ACCL"
    done ;;
esac
)";

class NicApply : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("rgnic-" + std::to_string(getpid()) + "-" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_ / "bin");
    fs::create_directories(root_ / "configfs/rdma_cm/mlx5_7/ports/1");
    write(root_ / "configfs/rdma_cm/mlx5_7/ports/1/default_roce_mode", "IB/RoCE v1\n");
    write(root_ / "configfs/rdma_cm/mlx5_7/ports/1/default_roce_tos", "0\n");
    write(roce_accl(), "roce_adp_retrans_en=0x00000000\nroce_tx_window_en=0x00000000\nroce_slow_restart_en=0x00000000\n"
                       "selective_repeat_forced_en=0x00000000\nack_dscp_force=0x00000000\nack_dscp=0x00000000\n");
    write(root_ / "bin/mlxreg", kFakeMlxreg);
    fs::permissions(root_ / "bin/mlxreg", fs::perms::owner_all);
    old_path_ = std::getenv("PATH") ? std::getenv("PATH") : "";
    setenv("PATH", ((root_ / "bin").string() + ":" + old_path_).c_str(), 1);
    setenv("RG_FAKE_JOURNAL", journal().c_str(), 1);
    setenv("RG_FAKE_ROCE_ACCL", roce_accl().c_str(), 1);
    unsetenv("RG_FAKE_MLXREG_FAIL");

    dev_.name = "mlx5_7";
    dev_.driver = "mlx5_core";
    PortInfo port;
    port.num = 1;
    port.link_layer = "Ethernet";
    port.netdev = "rgnic0";
    port.gids = {GidEntry{3, "::ffff:192.0.2.1", "RoCE v2", "rgnic0", "192.0.2.1"}};
    dev_.ports = {port};

    sys_.configfs = (root_ / "configfs").string();
    sys_.prepare_configfs = false;
    sys_.state_dir = (root_ / "state").string();
    sys_.self_test = [this](const DeviceInfo&, const PortInfo&, int, const Profile&) {
      SelfTestResult r;
      r.ok = self_test_ok_;
      if (!r.ok) r.step = "RTR", r.detail = "Invalid argument";
      return r;
    };
    sys_.dcb.get = [this](const std::string& ifname) {
      PfcState st;
      st.supported = ifname == "rgnic0";
      st.pfc_en = pfc_en_;
      return st;
    };
    sys_.dcb.set = [this](const std::string&, uint8_t mask) {
      std::ofstream(journal(), std::ios::app) << "dcb pfc_en=" << int(mask) << "\n";
      if (pfc_set_error_) return pfc_set_error_;
      pfc_en_ = mask;
      return 0;
    };
  }

  void TearDown() override {
    setenv("PATH", old_path_.c_str(), 1);
    fs::remove_all(root_);
  }

  static void write(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }
  std::string journal() const { return (root_ / "journal").string(); }
  std::string roce_accl() const { return (root_ / "roce_accl").string(); }
  std::string configfs_attr(const std::string& name) const {
    return slurp(root_ / "configfs/rdma_cm/mlx5_7/ports/1" / name);
  }
  fs::path state_file() const { return root_ / "state/nic-mlx5_7.json"; }

  static std::string text_of(const NicOutcome& o) {
    std::string s;
    for (const auto& st : o.steps) {
      s += st.what + ":";
      for (const auto& l : st.report.lines) s += " " + l;
      s += "\n";
    }
    return s;
  }

  fs::path root_;
  std::string old_path_;
  DeviceInfo dev_;
  NicSystem sys_;
  bool self_test_ok_ = true;
  uint8_t pfc_en_ = 0x08;  // PFC on priority 3, as a lossless RoCE fabric has it
  int pfc_set_error_ = 0;
};

TEST_F(NicApply, RefusedSelfTestChangesNothing) {
  self_test_ok_ = false;
  NicOutcome o = apply_device(dev_, Profile{}, false, sys_);
  EXPECT_EQ(o.exit_code, rg::kExitFailure) << text_of(o);
  EXPECT_EQ(configfs_attr("default_roce_mode"), "IB/RoCE v1\n");
  EXPECT_EQ(pfc_en_, 0x08);
  EXPECT_FALSE(fs::exists(journal())) << slurp(journal());
  EXPECT_FALSE(fs::exists(state_file()));
  EXPECT_NE(text_of(o).find("not run"), std::string::npos) << text_of(o);
}

TEST_F(NicApply, ConnectXWithoutMlxregFailsAndChangesNothing) {
  fs::remove(root_ / "bin/mlxreg");
  setenv("PATH", (root_ / "bin").string().c_str(), 1);
  NicOutcome o = apply_device(dev_, Profile{}, false, sys_);
  EXPECT_EQ(o.exit_code, rg::kExitNotFound) << text_of(o);
  EXPECT_NE(text_of(o).find("mlxreg (mstflint or MFT) is not installed"), std::string::npos) << text_of(o);
  EXPECT_EQ(configfs_attr("default_roce_tos"), "0\n");
  EXPECT_EQ(pfc_en_, 0x08) << "PFC stays on without the lossy-RoCE features";
  EXPECT_FALSE(fs::exists(state_file()));
}

TEST_F(NicApply, SavesWhatItChangesTurnsPfcOffLastAndRevertRestores) {
  Profile p;
  p.dscp = 46;
  NicOutcome o = apply_device(dev_, p, false, sys_);
  ASSERT_EQ(o.exit_code, 0) << text_of(o);
  EXPECT_EQ(configfs_attr("default_roce_mode"), "RoCE v2\n");
  EXPECT_EQ(configfs_attr("default_roce_tos"), "184\n");
  EXPECT_EQ(pfc_en_, 0);
  EXPECT_NE(slurp(roce_accl()).find("selective_repeat_forced_en=1"), std::string::npos) << slurp(roce_accl());
  const std::string j = slurp(journal());
  const auto vendor_set = j.find("--set");
  ASSERT_NE(vendor_set, std::string::npos) << j;
  EXPECT_LT(vendor_set, j.find("dcb pfc_en=0")) << "PFC went off before the lossy-RoCE features:\n" << j;

  const std::string saved = slurp(state_file());
  EXPECT_NE(saved.find("\"rgnic0\": 8"), std::string::npos) << saved;
  EXPECT_NE(saved.find("IB/RoCE v1"), std::string::npos) << saved;
  EXPECT_NE(saved.find("\"ack_dscp\": \"0x00000000\""), std::string::npos) << saved;

  ASSERT_EQ(saved_devices(sys_), std::vector<std::string>{"mlx5_7"});
  NicOutcome r = revert_device("mlx5_7", sys_);
  ASSERT_EQ(r.exit_code, 0) << text_of(r);
  EXPECT_EQ(configfs_attr("default_roce_mode"), "IB/RoCE v1\n");
  EXPECT_EQ(configfs_attr("default_roce_tos"), "0\n");
  EXPECT_EQ(pfc_en_, 0x08);
  EXPECT_NE(slurp(roce_accl()).find("selective_repeat_forced_en=0x00000000"), std::string::npos) << slurp(roce_accl());
  EXPECT_FALSE(fs::exists(state_file())) << "a completed revert forgets the saved values";
  EXPECT_EQ(revert_device("mlx5_7", sys_).exit_code, rg::kExitNotFound);
}

TEST_F(NicApply, SecondApplyKeepsTheOriginalValues) {
  ASSERT_EQ(apply_device(dev_, Profile{}, false, sys_).exit_code, 0);
  ASSERT_EQ(apply_device(dev_, Profile{}, false, sys_).exit_code, 0);
  ASSERT_EQ(revert_device("mlx5_7", sys_).exit_code, 0);
  EXPECT_EQ(configfs_attr("default_roce_mode"), "IB/RoCE v1\n");
  EXPECT_EQ(pfc_en_, 0x08);
}

TEST_F(NicApply, VendorFailurePutsBackAndKeepsPfc) {
  setenv("RG_FAKE_MLXREG_FAIL", "1", 1);
  NicOutcome o = apply_device(dev_, Profile{}, false, sys_);
  EXPECT_EQ(o.exit_code, rg::kExitFailure) << text_of(o);
  EXPECT_EQ(pfc_en_, 0x08) << text_of(o);
  EXPECT_EQ(slurp(journal()).find("dcb pfc_en=0"), std::string::npos) << slurp(journal());
  EXPECT_EQ(configfs_attr("default_roce_mode"), "IB/RoCE v1\n") << text_of(o);
}

TEST_F(NicApply, PfcFailurePutsBackTheEarlierSteps) {
  pfc_set_error_ = -EIO;
  NicOutcome o = apply_device(dev_, Profile{}, false, sys_);
  EXPECT_EQ(o.exit_code, rg::kExitFailure) << text_of(o);
  pfc_set_error_ = 0;
  EXPECT_EQ(configfs_attr("default_roce_tos"), "0\n") << text_of(o);
  EXPECT_NE(slurp(roce_accl()).find("roce_adp_retrans_en=0x00000000"), std::string::npos) << slurp(roce_accl());
}

TEST_F(NicApply, DryRunTouchesNothing) {
  NicOutcome o = apply_device(dev_, Profile{}, true, sys_);
  EXPECT_EQ(o.exit_code, 0) << text_of(o);
  EXPECT_EQ(configfs_attr("default_roce_mode"), "IB/RoCE v1\n");
  EXPECT_EQ(pfc_en_, 0x08);
  EXPECT_FALSE(fs::exists(state_file()));
  EXPECT_EQ(slurp(journal()).find("--set"), std::string::npos);
}

}  // namespace
