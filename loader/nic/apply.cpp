// `nic apply` and `nic revert` (order and gating in apply.h), and the file
// keeping what apply replaced: one JSON document per device.
#include "nic/apply.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "nic/configfs.h"
#include "nic/vendor.h"

namespace fs = std::filesystem;

namespace rg::nic {

namespace {

using Status = StepReport::Status;

constexpr const char* kSelfTest = "verbs self-test";
constexpr const char* kRdmaCm = "rdma_cm defaults (configfs)";
constexpr const char* kVendor = "vendor lossy-RoCE features";
constexpr const char* kPfc = "PFC off (DCB netlink)";

fs::path state_file(const NicSystem& sys, const std::string& dev_name) {
  return fs::path(sys.state_dir) / ("nic-" + dev_name + ".json");
}

// Each netdev once: several ports may share one.
std::vector<std::string> netdevs_of(const DeviceInfo& dev) {
  std::vector<std::string> out;
  for (const auto& port : dev.ports)
    if (!port.netdev.empty() && std::find(out.begin(), out.end(), port.netdev) == out.end())
      out.push_back(port.netdev);
  return out;
}

StepReport failed(const std::string& line) {
  StepReport r;
  r.status = Status::kFailed;
  r.lines.push_back(line);
  return r;
}

StepReport not_run(const std::string& why) {
  StepReport r;
  r.status = Status::kSkipped;
  r.lines.push_back("not run: " + why);
  return r;
}

StepReport self_test_port(const DeviceInfo& dev, const PortInfo& port, const Profile& p, bool dry,
                          const NicSystem& sys) {
  StepReport st;
  auto gid = roce_v2_gid_index(port);
  if (port.link_layer != "Ethernet") {
    st.status = Status::kSkipped;
    st.lines.push_back("port " + std::to_string(port.num) + " is InfiniBand, not RoCE");
  } else if (!gid) {
    st.status = Status::kFailed;
    st.lines.push_back("port " + std::to_string(port.num) + " (" + port.netdev +
                       ") has no RoCE v2 GID with an IPv4 address: is the netdev up and addressed?");
  } else if (dry) {
    st.status = Status::kPlanned;
    st.lines.push_back("RC QP on port " + std::to_string(port.num) + ", GID index " + std::to_string(*gid) +
                       ": RESET -> INIT -> RTR (traffic_class " + std::to_string(p.tos()) + ", min_rnr_timer " +
                       std::to_string(p.min_rnr_timer) + ") -> RTS (timeout " +
                       std::to_string(p.ack_timeout.exponent) + ", retry_cnt " + std::to_string(p.retry_cnt) +
                       ", rnr_retry " + std::to_string(p.rnr_retry) + ")");
  } else {
    auto res = sys.self_test(dev, port, *gid, p);
    st.status = res.ok ? Status::kDone : Status::kFailed;
    if (res.ok)
      st.lines.push_back("port " + std::to_string(port.num) + ", GID index " + std::to_string(*gid) +
                         ": RESET -> INIT -> RTR -> RTS accepted");
    else
      st.lines.push_back("port " + std::to_string(port.num) + ": refused at " + res.step +
                         (res.refused.empty() ? "" : ", attribute " + res.refused) + ": " + res.detail);
  }
  return st;
}

// What apply replaces, read before it changes anything.
struct Saved {
  std::string device;
  std::string driver;
  RdmaCmDefaults rdma_cm;
  std::map<std::string, uint8_t> pfc_en;  // netdevs with DCB only
  std::map<std::string, std::string> roce_accl;

  nlohmann::json to_json() const {
    nlohmann::json cm = nlohmann::json::object();
    for (const auto& [num, attrs] : rdma_cm) cm[std::to_string(num)] = attrs;
    return {{"device", device}, {"driver", driver}, {"rdma_cm", cm}, {"pfc_en", pfc_en}, {"roce_accl", roce_accl}};
  }
  static Saved from_json(const nlohmann::json& j) {
    Saved s;
    s.device = j.at("device").get<std::string>();
    s.driver = j.value("driver", "");
    for (const auto& [num, attrs] : j.at("rdma_cm").items())
      s.rdma_cm[std::stoi(num)] = attrs.get<std::map<std::string, std::string>>();
    s.pfc_en = j.at("pfc_en").get<std::map<std::string, uint8_t>>();
    s.roce_accl = j.at("roce_accl").get<std::map<std::string, std::string>>();
    return s;
  }
};

// Reads the current values; "" on success, else why they cannot be saved.
std::string read_saved(const DeviceInfo& dev, const NicSystem& sys, Saved& s) {
  s.device = dev.name;
  s.driver = dev.driver;
  s.rdma_cm = read_rdma_cm_defaults(dev, sys.configfs);
  for (const auto& nd : netdevs_of(dev)) {
    PfcState pfc = sys.dcb.get(nd);
    if (pfc.error) return nd + ": DCB IEEE get: " + errno_text(pfc.error);
    if (pfc.supported) s.pfc_en[nd] = pfc.pfc_en;
  }
  std::string why;
  auto accl = read_roce_accl(dev, why);
  if (!accl) return why;
  s.roce_accl = *accl;
  return "";
}

// The saved values back, in the reverse order of apply.
std::vector<NicStep> restore(const DeviceInfo& dev, const Saved& s, const NicSystem& sys) {
  std::vector<NicStep> steps;
  for (const auto& [nd, mask] : s.pfc_en)
    steps.push_back({"PFC back (DCB netlink)", set_pfc(nd, mask, false, sys.dcb)});
  if (!s.roce_accl.empty()) steps.push_back({"ROCE_ACCL back (mlxreg)", restore_roce_accl(dev, s.roce_accl)});
  steps.push_back({"rdma_cm defaults back (configfs)", restore_rdma_cm_defaults(s.device, s.rdma_cm, sys.configfs)});
  return steps;
}

bool all_ok(const std::vector<NicStep>& steps) {
  return std::none_of(steps.begin(), steps.end(), [](const NicStep& s) { return s.report.status == Status::kFailed; });
}

}  // namespace

NicOutcome apply_device(const DeviceInfo& dev, const Profile& p, bool dry, const NicSystem& sys) {
  NicOutcome out;
  auto stop = [&](int code, const std::vector<const char*>& left, const std::string& why) {
    for (const char* what : left) out.steps.push_back({what, not_run(why)});
    out.exit_code = code;
    return out;
  };

  bool tested = true;
  for (const auto& port : dev.ports) {
    out.steps.push_back({kSelfTest, self_test_port(dev, port, p, dry, sys)});
    tested &= out.steps.back().report.status != Status::kFailed;
  }
  if (!tested)
    return stop(kExitFailure, {kRdmaCm, kVendor, kPfc}, "the device refused the profile in the verbs self-test");

  if (std::string missing = missing_vendor_tool(dev); !missing.empty()) {
    out.steps.push_back({kVendor, failed(missing + "; nothing was changed")});
    return stop(kExitNotFound, {kRdmaCm, kPfc}, "the vendor tool is missing");
  }

  Saved saved;
  const fs::path file = state_file(sys, dev.name);
  if (!dry) {
    std::error_code ec;
    if (fs::exists(file, ec)) {
      // The first apply saw the values before roceguard; keep those.
      std::ifstream in(file);
      saved = Saved::from_json(nlohmann::json::parse(in));
    } else {
      std::string why = read_saved(dev, sys, saved);
      if (!why.empty()) {
        out.steps.push_back({"save current values", failed(why + "; nothing was changed")});
        return stop(kExitFailure, {kRdmaCm, kVendor, kPfc}, "the current values could not be saved");
      }
      fs::create_directories(sys.state_dir, ec);
      std::ofstream f(file.string() + ".tmp");
      f << saved.to_json().dump(2) << "\n";
      f.flush();
      if (!f || (fs::rename(file.string() + ".tmp", file, ec), ec)) {
        out.steps.push_back({"save current values", failed("cannot write " + file.string() + "; nothing was changed")});
        return stop(kExitFailure, {kRdmaCm, kVendor, kPfc}, "the current values could not be saved");
      }
    }
  }

  // A failed step puts back what the earlier ones changed.
  auto undo = [&](std::vector<const char*> left) {
    auto back = restore(dev, saved, sys);
    out.steps.insert(out.steps.end(), back.begin(), back.end());
    std::error_code ec;
    if (all_ok(back)) fs::remove(file, ec);
    return stop(kExitFailure, left, "an earlier step failed");
  };

  out.steps.push_back({kRdmaCm, set_rdma_cm_defaults(dev, p.tos(), dry, sys.configfs, sys.prepare_configfs)});
  if (out.steps.back().report.status == Status::kFailed) return dry ? out : undo({kVendor, kPfc});
  out.steps.push_back({kVendor, apply_vendor(dev, p, dry)});
  if (out.steps.back().report.status == Status::kFailed) return dry ? out : undo({kPfc});
  for (const auto& nd : netdevs_of(dev)) {
    out.steps.push_back({kPfc, set_pfc_off(nd, dry, sys.dcb)});
    if (out.steps.back().report.status == Status::kFailed && !dry) return undo({});
  }
  if (!all_ok(out.steps)) out.exit_code = kExitFailure;
  return out;
}

std::vector<std::string> saved_devices(const NicSystem& sys) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(sys.state_dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("nic-", 0) == 0 && n.size() > 9 && n.substr(n.size() - 5) == ".json")
      out.push_back(n.substr(4, n.size() - 9));
  }
  std::sort(out.begin(), out.end());
  return out;
}

NicOutcome revert_device(const std::string& dev_name, const NicSystem& sys) {
  NicOutcome out;
  const fs::path file = state_file(sys, dev_name);
  std::ifstream in(file);
  if (!in) {
    out.steps.push_back({"read saved values", failed("no saved values for " + dev_name + " (" + file.string() +
                                                         "): `nic apply` did not change it")});
    out.exit_code = kExitNotFound;
    return out;
  }
  Saved saved;
  try {
    saved = Saved::from_json(nlohmann::json::parse(in));
  } catch (const std::exception& e) {
    out.steps.push_back({"read saved values", failed(file.string() + ": " + e.what())});
    out.exit_code = kExitFailure;
    return out;
  }
  DeviceInfo dev;
  dev.name = saved.device;
  dev.driver = saved.driver;
  out.steps = restore(dev, saved, sys);
  if (!all_ok(out.steps)) {
    out.exit_code = kExitFailure;  // the file stays for another try
    return out;
  }
  std::error_code ec;
  fs::remove(file, ec);
  return out;
}

}  // namespace rg::nic
