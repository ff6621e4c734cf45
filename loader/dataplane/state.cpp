#include "dataplane/state.h"

#include <bpf/bpf.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/error.h"
#include "dataplane/maps.h"

namespace rg {

bool is_bpffs(const std::string& path) {
  struct statfs st {};
  return statfs(path.c_str(), &st) == 0 && static_cast<unsigned long>(st.f_type) == BPF_FS_MAGIC;
}

std::string parent_of(const std::string& path) {
  auto p = std::filesystem::path(path).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  return p.parent_path().string();
}

nlohmann::json State::to_json() const {
  nlohmann::json ifs = nlohmann::json::array();
  for (const auto& i : interfaces)
    ifs.push_back({{"name", i.name},
                   {"ifindex", i.ifindex},
                   {"ingress_hook", i.ingress_hook},
                   {"xdp_mode", i.xdp_mode},
                   {"xdp_prog_id", i.xdp_prog_id},
                   {"tc_prog_id", i.tc_prog_id},
                   {"tc_ingress_prog_id", i.tc_ingress_prog_id},
                   {"tc_handle", i.tc_handle},
                   {"tc_priority", i.tc_priority},
                   {"tc_attach", i.tc_attach}});
  return {{"layout", kStateLayout},
          {"version", version},
          {"config_hash", config_hash},
          {"config", config},
          {"interfaces", ifs}};
}

namespace {

// A field of the record, or its default when an earlier layout lacked it.
template <typename T>
T field(const nlohmann::json& j, const char* key, T fallback, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    throw Error(where + "." + key + " is " + it->type_name() + ", not what roceguard records there",
                kExitConflict);
  }
}

}  // namespace

State State::from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw Error(std::string("the record is a JSON ") + j.type_name() + ", not an object",
                                  kExitConflict);
  State s;
  s.layout = field(j, "layout", 1, "record");
  if (s.layout < 1 || s.layout > kStateLayout)
    throw Error("the record has layout " + std::to_string(s.layout) + "; this roceguard reads layouts 1 to " +
                    std::to_string(kStateLayout) + " (a later roceguard wrote it: run that version again)",
                kExitConflict);
  s.version = field<std::string>(j, "version", "", "record");
  s.config_hash = field<std::string>(j, "config_hash", "", "record");
  s.config = field(j, "config", nlohmann::json::object(), "record");
  const auto ifs = field(j, "interfaces", nlohmann::json::array(), "record");
  if (!ifs.is_array()) throw Error(std::string("record.interfaces is ") + ifs.type_name() + ", not an array",
                                   kExitConflict);
  for (size_t n = 0; n < ifs.size(); ++n) {
    const auto& i = ifs[n];
    const std::string where = "record.interfaces[" + std::to_string(n) + "]";
    if (!i.is_object()) throw Error(where + " is " + i.type_name() + ", not an object", kExitConflict);
    IfaceState st;
    st.name = field<std::string>(i, "name", "", where);
    st.ifindex = field(i, "ifindex", 0, where);
    st.ingress_hook = field<std::string>(i, "ingress_hook", kIngressXdp, where);
    if (st.ingress_hook != kIngressXdp && st.ingress_hook != kIngressTc)
      throw Error(where + ".ingress_hook is \"" + st.ingress_hook + "\", not \"xdp\" or \"tc\"", kExitConflict);
    st.xdp_mode = field<std::string>(i, "xdp_mode", "", where);
    st.xdp_prog_id = field(i, "xdp_prog_id", 0u, where);
    st.tc_prog_id = field(i, "tc_prog_id", 0u, where);
    st.tc_ingress_prog_id = field(i, "tc_ingress_prog_id", 0u, where);
    st.tc_handle = field(i, "tc_handle", 0u, where);
    st.tc_priority = field(i, "tc_priority", 0u, where);
    st.tc_attach = field<std::string>(i, "tc_attach", kTcAttachClsact, where);
    if (st.tc_attach != kTcAttachTcx && st.tc_attach != kTcAttachClsact)
      throw Error(where + ".tc_attach is \"" + st.tc_attach + "\", not \"tcx\" or \"clsact\"", kExitConflict);
    s.interfaces.push_back(st);
  }
  return s;
}

void ensure_bpffs(const std::string& pin_path) {
  std::string parent = parent_of(pin_path);
  if (is_bpffs(parent)) return;
  const std::string bpffs = "/sys/fs/bpf";
  if (pin_path.rfind(bpffs + "/", 0) == 0 && !is_bpffs(bpffs)) {
    if (mount("bpf", bpffs.c_str(), "bpf", 0, "mode=0700") != 0)
      throw Error("cannot mount bpffs on " + bpffs + ": " + errno_text(errno) +
                  " (mount it first: mount -t bpf bpf " + bpffs + ")");
    if (is_bpffs(parent)) return;
  }
  throw Error("pin path " + pin_path + " is not on a bpffs (" + parent +
                  " is not bpf); choose a --pin-path under /sys/fs/bpf",
              kExitUsage);
}

bool pin_dir_exists(const std::string& pin_path) {
  struct stat st {};
  return stat(pin_path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Root may use a directory another uid owns when that uid can only have got
// it from root: its parent is root's and nobody else may write there (a
// sticky world-writable parent such as a 1777 /sys/fs/bpf does not count:
// anyone could have made the directory). This is how the package hands
// /sys/fs/bpf/roceguard to the service user (tmpfiles.d, under a 0710
// /sys/fs/bpf), so `sudo roceguard detach` works on the unit's pins.
static bool delegated_by_root(const std::string& pin_path) {
  if (geteuid() != 0) return false;
  struct stat parent {};
  if (lstat(parent_of(pin_path).c_str(), &parent) != 0 || !S_ISDIR(parent.st_mode)) return false;
  return parent.st_uid == 0 && !(parent.st_mode & (S_IWGRP | S_IWOTH));
}

// A pin directory someone else owns (or may write to) could hand us maps or
// a lock of theirs: refuse rather than trust or "fix" it (root could chmod
// it, which would only hide the problem).
static void check_pin_dir_owner(const std::string& pin_path) {
  struct stat st {};
  if (lstat(pin_path.c_str(), &st) != 0) return;  // open() reports it
  if (!S_ISDIR(st.st_mode))
    throw Error("pin path " + pin_path + " exists and is not a directory; remove it or choose another --pin-path",
                kExitConflict);
  if (st.st_uid != geteuid() && !delegated_by_root(pin_path))
    throw Error("pin directory " + pin_path + " is owned by uid " + std::to_string(st.st_uid) +
                    ", not by this user (uid " + std::to_string(geteuid()) +
                    "); another user could replace its maps: remove it or choose another --pin-path (root accepts a "
                    "directory of another user only below a directory that only root can write)",
                kExitConflict);
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    throw Error("pin directory " + pin_path + " is writable by group or others (mode " +
                    std::to_string((st.st_mode >> 6) & 7) + std::to_string((st.st_mode >> 3) & 7) +
                    std::to_string(st.st_mode & 7) +
                    "); another user could replace its maps: remove it or chmod 0700 it",
                kExitConflict);
}

PinLock::PinLock(const std::string& pin_path, bool create) : path_(pin_path) {
  // A directory removed (a detach that removed the pins, a failed first
  // attach) after it was opened here and before its lock was taken names
  // nothing any more: a lock on it would lock out no one. Take the lock on
  // the directory the path names now; bounded, as each round needs another
  // removal between the open and the lock.
  for (int round = 0; round < 8; ++round) {
    lock(create);
    struct stat held {}, named {};
    if (fstat(fd_, &held) == 0 && stat(path_.c_str(), &named) == 0 && held.st_dev == named.st_dev &&
        held.st_ino == named.st_ino)
      return;
    close(fd_);
    fd_ = -1;
    if (!create) throw Error("nothing pinned at " + pin_path + " (it was removed meanwhile)", kExitNotFound);
  }
  throw Error("cannot lock " + pin_path + ": it keeps being removed and created again");
}

void PinLock::lock(bool create) {
  const std::string& pin_path = path_;
  if (create) {
    if (mkdir(pin_path.c_str(), 0700) == 0) created_ = true;
    else if (errno != EEXIST)
      throw Error("cannot create pin directory " + pin_path + ": " + errno_text(errno));
  }
  check_pin_dir_owner(pin_path);
  if (create) chmod(pin_path.c_str(), 0700);
  fd_ = open(pin_path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd_ < 0) {
    if (errno == ENOENT)
      throw Error("nothing pinned at " + pin_path + " (nothing attached with this --pin-path)",
                  kExitNotFound);
    throw Error("cannot open pin directory " + pin_path + ": " + errno_text(errno));
  }
  if (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    close(fd_);
    fd_ = -1;
    if (created_) rmdir(path_.c_str());
    if (err == EWOULDBLOCK)
      throw Error("another roceguard is managing " + pin_path +
                      " (a running `roceguard run`? stop it first, or use another --pin-path)",
                  kExitConflict);
    throw Error("cannot lock " + pin_path + ": " + errno_text(err));
  }
}

PinLock::~PinLock() {
  if (fd_ >= 0) close(fd_);
  // A failed first attach leaves nothing behind; rmdir fails harmlessly
  // once something is pinned.
  if (created_) rmdir(path_.c_str());
}

namespace {

// The way out of a record that cannot be read, said with every refusal.
std::string state_way_out(const std::string& path) {
  return "; `roceguard attach --reset-state` (or `run --reset-state`) removes " + path +
         " with the pinned maps and writes a new one (counters start at zero)";
}

std::string state_map_diff(int fd) {
  bpf_map_info info{};
  uint32_t len = sizeof(info);
  if (bpf_obj_get_info_by_fd(fd, &info, &len) != 0) return "map info unreadable: " + errno_text(errno);
  std::string diff;
  auto cmp = [&diff](const char* what, uint64_t pinned, uint64_t wanted) {
    if (pinned == wanted) return;
    diff += (diff.empty() ? "" : ", ") + std::string(what) + " " + std::to_string(pinned) + ", expected " +
            std::to_string(wanted);
  };
  cmp("type", info.type, BPF_MAP_TYPE_ARRAY);
  cmp("key_size", info.key_size, sizeof(uint32_t));
  cmp("value_size", info.value_size, kStateValueSize);
  cmp("max_entries", info.max_entries, 1);
  return diff;
}

}  // namespace

std::string state_map_mismatch(const std::string& pin_path) {
  int fd = bpf_obj_get((pin_path + "/" + kMapState).c_str());
  if (fd < 0) return "";
  std::string diff = state_map_diff(fd);
  close(fd);
  return diff;
}

std::optional<State> read_state(const std::string& pin_path) {
  const std::string path = pin_path + "/" + kMapState;
  int fd = bpf_obj_get(path.c_str());
  if (fd < 0) return std::nullopt;
  // Checked before the lookup: the kernel copies value_size bytes into our
  // buffer whatever its size.
  std::string diff = state_map_diff(fd);
  if (!diff.empty()) {
    close(fd);
    throw Error("attach record " + path + " is not a map roceguard wrote (" + diff + ")" + state_way_out(path),
                kExitConflict);
  }
  std::string buf(kStateValueSize, '\0');
  uint32_t key = 0;
  int err = bpf_map_lookup_elem(fd, &key, buf.data()) ? errno : 0;
  close(fd);
  if (err) throw Error("cannot read attach record " + path + ": " + errno_text(err), kExitFailure);
  buf.resize(strnlen(buf.data(), buf.size()));
  if (buf.empty()) return std::nullopt;  // created, never written
  auto j = nlohmann::json::parse(buf, nullptr, false);
  if (j.is_discarded())
    throw Error("attach record " + path + " is not JSON" + state_way_out(path), kExitConflict);
  try {
    return State::from_json(j);
  } catch (const Error& e) {
    throw Error("attach record " + path + " cannot be read: " + e.what() + state_way_out(path), kExitConflict);
  }
}

size_t state_record_size(const State& s) { return s.to_json().dump().size(); }

void write_state(const std::string& pin_path, const State& s) {
  std::string path = pin_path + "/" + kMapState;
  std::string text = s.to_json().dump();
  if (text.size() >= kStateValueSize)
    throw Error("attach record is " + std::to_string(text.size()) + " bytes, more than " +
                std::to_string(kStateValueSize - 1) + "; use fewer interfaces or peers");
  int fd = bpf_obj_get(path.c_str());
  if (fd < 0) {
    LIBBPF_OPTS(bpf_map_create_opts, opts);
    fd = bpf_map_create(BPF_MAP_TYPE_ARRAY, kMapState, sizeof(uint32_t), kStateValueSize, 1, &opts);
    if (fd < 0) throw Error("cannot create map " + std::string(kMapState) + ": " + errno_text(errno));
    if (bpf_obj_pin(fd, path.c_str()) != 0) {
      int err = errno;
      close(fd);
      throw Error("cannot pin " + path + ": " + errno_text(err));
    }
    chmod(path.c_str(), 0600);
  }
  std::string diff = state_map_diff(fd);
  if (!diff.empty()) {
    close(fd);
    throw Error("attach record " + path + " is not a map roceguard wrote (" + diff + ")" + state_way_out(path),
                kExitConflict);
  }
  std::string value(kStateValueSize, '\0');
  std::memcpy(value.data(), text.data(), text.size());
  uint32_t key = 0;
  int err = bpf_map_update_elem(fd, &key, value.data(), BPF_ANY);
  int saved = errno;
  close(fd);
  if (err) throw Error("cannot write " + path + ": " + errno_text(saved));
}

void restrict_pins(const std::string& pin_path) {
  chmod(pin_path.c_str(), 0700);
  for (const char* name : kPinnedMaps) chmod((pin_path + "/" + name).c_str(), 0600);
  chmod((pin_path + "/" + kMapState).c_str(), 0600);
}

void remove_pins(const std::string& pin_path) {
  for (const char* name : kPinnedMaps) unlink((pin_path + "/" + name).c_str());
  unlink((pin_path + "/" + kMapQpLegacy).c_str());
  unlink((pin_path + "/" + kMapXdpNext).c_str());
  unlink((pin_path + "/" + kMapXdpNextStaging).c_str());
  unlink((pin_path + "/" + kMapState).c_str());
  // The tcx links are detached by now (detach_interface); their pins would
  // keep the directory.
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(pin_path, ec))
    if (e.path().filename().string().rfind(kTcxPinPrefix, 0) == 0) unlink(e.path().c_str());
  rmdir(pin_path.c_str());  // fails, harmlessly, if someone else put files there
}

}  // namespace rg
