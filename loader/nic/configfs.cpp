#include "nic/configfs.h"

#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <linux/magic.h>

#include "common/error.h"
#include "common/process.h"
#include "nic/sysfs.h"

namespace fs = std::filesystem;

namespace rg::nic {

namespace {

#ifndef CONFIGFS_MAGIC
#define CONFIGFS_MAGIC 0x62656570
#endif

bool is_configfs(const std::string& path) {
  struct statfs st {};
  return statfs(path.c_str(), &st) == 0 && st.f_type == CONFIGFS_MAGIC;
}

bool write_attr(const fs::path& p, const std::string& value, std::string* why) {
  std::ofstream f(p);
  f << value << '\n';
  f.flush();
  if (!f) {
    *why = "cannot write " + p.string() + ": " + errno_text(errno);
    return false;
  }
  return true;
}

// What set_rdma_cm_defaults writes, per port.
constexpr const char* kRdmaCmAttrs[] = {"default_roce_mode", "default_roce_tos"};

}  // namespace

StepReport set_rdma_cm_defaults(const DeviceInfo& dev, uint8_t tos, bool dry_run, const std::string& configfs,
                                bool prepare) {
  StepReport r;
  fs::path cm = fs::path(configfs) / "rdma_cm";
  fs::path dir = cm / dev.name;
  auto fail = [&](const std::string& what) {
    r.status = StepReport::Status::kFailed;
    r.lines.push_back(what);
    return r;
  };

  std::error_code ec;
  // rdma_cm registers its configfs subsystem (and pulls in configfs, which
  // creates the mount point) only once it is loaded.
  if (prepare && !fs::is_directory(cm, ec) && !fs::exists(fs::path("/sys/module/rdma_cm"), ec)) {
    r.lines.push_back("modprobe rdma_cm");
    if (!dry_run && run({"modprobe", "rdma_cm"}).status != 0)
      return fail("modprobe rdma_cm failed: the rdma_cm module is not available");
  }
  if (prepare && !is_configfs(configfs)) {
    r.lines.push_back("mount -t configfs configfs " + configfs);
    if (!dry_run && mount("configfs", configfs.c_str(), "configfs", 0, nullptr))
      return fail("cannot mount configfs on " + configfs + ": " + errno_text(errno));
  }
  if (!dry_run && !fs::is_directory(cm, ec))
    return fail(cm.string() + " is missing although rdma_cm is loaded");
  if (!fs::is_directory(dir, ec)) {
    r.lines.push_back("mkdir " + dir.string());
    if (!dry_run && mkdir(dir.c_str(), 0755) && errno != EEXIST)
      return fail("cannot create " + dir.string() + ": " + errno_text(errno));
  }
  for (const auto& port : dev.ports) {
    fs::path pd = dir / "ports" / std::to_string(port.num);
    const std::pair<const char*, std::string> attrs[] = {
        {"default_roce_mode", "RoCE v2"}, {"default_roce_tos", std::to_string(tos)}};
    for (const auto& [name, value] : attrs) {
      std::string was = dry_run ? read_attr(pd / name).value_or("") : "";
      r.lines.push_back("echo '" + value + "' > " + (pd / name).string() +
                        (was.empty() ? "" : "   (now: " + was + ")"));
      if (dry_run) continue;
      std::string why;
      if (!write_attr(pd / name, value, &why)) return fail(why);
      std::string now = read_attr(pd / name).value_or("");
      if (now != value) return fail((pd / name).string() + " reads back \"" + now + "\"");
    }
  }
  r.status = dry_run ? StepReport::Status::kPlanned : StepReport::Status::kDone;
  return r;
}

RdmaCmDefaults read_rdma_cm_defaults(const DeviceInfo& dev, const std::string& configfs) {
  RdmaCmDefaults out;
  for (const auto& port : dev.ports) {
    fs::path pd = fs::path(configfs) / "rdma_cm" / dev.name / "ports" / std::to_string(port.num);
    for (const char* name : kRdmaCmAttrs)
      if (auto v = read_attr(pd / name)) out[port.num][name] = *v;
  }
  return out;
}

StepReport restore_rdma_cm_defaults(const std::string& dev_name, const RdmaCmDefaults& saved,
                                    const std::string& configfs) {
  StepReport r;
  for (const auto& [num, attrs] : saved)
    for (const auto& [name, value] : attrs) {
      fs::path p = fs::path(configfs) / "rdma_cm" / dev_name / "ports" / std::to_string(num) / name;
      r.lines.push_back("echo '" + value + "' > " + p.string());
      std::string why;
      if (!write_attr(p, value, &why)) {
        r.status = StepReport::Status::kFailed;
        r.lines.push_back(why);
        return r;
      }
    }
  if (saved.empty()) {
    r.status = StepReport::Status::kSkipped;
    r.lines.push_back(dev_name + ": rdma_cm had no per-port defaults before; nothing to write back");
  }
  return r;
}

}  // namespace rg::nic
