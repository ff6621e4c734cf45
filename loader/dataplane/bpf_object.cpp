#include "dataplane/bpf_object.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <spdlog/spdlog.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xdp/libxdp.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "common/error.h"
#include "dataplane/maps.h"
#include "dataplane/state.h"
#include "roceguard.skel.h"

namespace rg {
namespace {

// The kernel's own reason for the last refused netlink request (its
// extended ack), which libbpf only logs: a driver refusing XDP says why here.
thread_local std::string last_kernel_message;
constexpr const char kKernelMessagePrefix[] = "Kernel error message: ";

int libbpf_log(enum libbpf_print_level level, const char* fmt, va_list ap) {
  // Whole: a verifier log comes as one message, and its reason is its last line.
  va_list len_ap;
  va_copy(len_ap, ap);
  const int len = vsnprintf(nullptr, 0, fmt, len_ap);
  va_end(len_ap);
  if (len < 0) return 0;
  std::string buf(static_cast<size_t>(len) + 1, '\0');
  vsnprintf(buf.data(), buf.size(), fmt, ap);
  buf.resize(static_cast<size_t>(len));
  while (!buf.empty() && buf.back() == '\n') buf.pop_back();
  if (const auto at = buf.find(kKernelMessagePrefix); at != std::string::npos)
    last_kernel_message = buf.substr(at + sizeof(kKernelMessagePrefix) - 1);
  // libxdp probes kernel features by trying them, and libbpf warns about
  // each probe that fails; only --verbose shows them.
  spdlog::debug("{}{}", level == LIBBPF_DEBUG ? "libbpf debug: " : "libbpf: ", buf);
  return 0;
}

int libxdp_log(enum libxdp_print_level level, const char* fmt, va_list ap) {
  char buf[1024];
  vsnprintf(buf, sizeof(buf), fmt, ap);
  size_t n = strlen(buf);
  while (n && buf[n - 1] == '\n') buf[--n] = '\0';
  spdlog::debug("{}{}", level == LIBXDP_DEBUG ? "libxdp debug: " : "libxdp: ", buf);
  return 0;
}

// Applies cfg to an opened (not loaded) object: rodata with the load's
// sequence epoch, the per-QP tables'
// size, and the pin path of each persistent map, which makes libbpf reuse a
// compatible pinned map (counters carry over) or create and pin a new one.
void configure(struct roceguard* skel, const Config& cfg, uint16_t tunnel_epoch, const std::string& pin_path) {
  skel->rodata->rg_cfg = cfg.rodata();
  skel->rodata->rg_cfg.tunnel_epoch = tunnel_epoch;
  set_qp_entries(skel->obj, cfg.qp_entries);
  // The fast path's program is verified only for a load that runs it.
  bpf_program__set_autoload(skel->progs.rg_xdp_forward, cfg.xdp_forward);
  for (const char* name : kPinnedMaps) {
    bpf_map* m = bpf_object__find_map_by_name(skel->obj, name);
    if (!m) throw Error(std::string("BPF object has no map ") + name);
    int err = bpf_map__set_pin_path(m, (pin_path + "/" + name).c_str());
    if (err) throw Error(std::string("cannot set pin path of ") + name + ": " + errno_text(err));
  }
}

}  // namespace

uint16_t new_tunnel_epoch() {
  uint16_t drawn = 0;
  while ((drawn & RG_TUNNEL_EPOCH_MASK) == 0) {
    const ssize_t n = getrandom(&drawn, sizeof(drawn), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof(drawn)))
      throw Error("cannot draw the tunnel sequence epoch: " + errno_text(n < 0 ? errno : EIO));
  }
  return drawn & RG_TUNNEL_EPOCH_MASK;
}

std::string take_kernel_message() {
  std::string m;
  m.swap(last_kernel_message);
  return m;
}

std::string xdp_error_text(long err) {
  char buf[256] = {};
  libxdp_strerror(static_cast<int>(err), buf, sizeof(buf));
  return buf;
}

void setup_bpf_logging() {
  libbpf_set_print(libbpf_log);
  libxdp_set_print(libxdp_log);
}

bool any_map_pinned(const std::string& pin_path) {
  struct stat st {};
  for (const char* name : kPinnedMaps)
    if (stat((pin_path + "/" + name).c_str(), &st) == 0) return true;
  return false;
}

std::vector<MapMismatch> check_pinned_maps(struct roceguard* skel, const std::string& pin_path) {
  std::vector<MapMismatch> out;
  bpf_map* map;
  bpf_object__for_each_map(map, skel->obj) {
    std::string name = bpf_map__name(map);
    bool persistent = false;
    for (const char* p : kPinnedMaps) persistent |= name == p;
    if (!persistent) continue;
    std::string path = pin_path + "/" + name;
    int fd = bpf_obj_get(path.c_str());
    if (fd < 0) continue;
    bpf_map_info info{};
    uint32_t len = sizeof(info);
    int err = bpf_obj_get_info_by_fd(fd, &info, &len);
    close(fd);
    if (err) continue;
    std::string diff;
    auto cmp = [&](const char* what, uint64_t pinned, uint64_t wanted) {
      if (pinned == wanted) return;
      if (!diff.empty()) diff += ", ";
      diff += std::string(what) + " " + std::to_string(pinned) + " pinned, " + std::to_string(wanted) +
              " wanted";
    };
    cmp("type", info.type, bpf_map__type(map));
    cmp("key_size", info.key_size, bpf_map__key_size(map));
    cmp("value_size", info.value_size, bpf_map__value_size(map));
    cmp("max_entries", info.max_entries, bpf_map__max_entries(map));
    cmp("map_flags", info.map_flags, bpf_map__map_flags(map));
    if (!diff.empty()) out.push_back({name, diff});
  }
  if (std::string diff = state_map_mismatch(pin_path); !diff.empty()) out.push_back({kMapState, diff});
  return out;
}

BpfObject::BpfObject(const Config& cfg, const std::string& pin_path, bool reset_state)
    : cfg_(cfg), pin_path_(pin_path), reset_state_(reset_state), tunnel_epoch_(new_tunnel_epoch()) {
  skel_ = roceguard__open();
  if (!skel_) throw Error("cannot open the embedded BPF object: " + errno_text(errno));
  try {
    configure(skel_, cfg, tunnel_epoch_, pin_path);
    auto mismatches = check_pinned_maps(skel_, pin_path);
    // An earlier build's maps that prepare_pins() carries over.
    std::erase_if(mismatches, [&](const MapMismatch& m) {
      if (reset_state) return false;
      return (m.name == kMapCounters && counters_need_migration(pin_path, bpf_map__value_size(skel_->maps.rg_counters))) ||
             (m.name == kMapPeerStats && peer_stats_need_migration(pin_path)) ||
             (m.name == kMapTunnelStreams && tunnel_streams_need_migration(pin_path)) ||
             ((m.name == kMapQp4 || m.name == kMapQp6) && qp_values_need_migration(pin_path, m.name, cfg.qp_entries));
    });
    if (!mismatches.empty()) {
      if (!reset_state) {
        std::string msg = "pinned maps under " + pin_path + " do not match this build/config:";
        for (const auto& m : mismatches) msg += "\n  " + m.name + ": " + m.differences;
        msg += "\nreusing them would corrupt state; rerun with --reset-state to replace them "
               "(their counters are lost), or restore the previous qp_entries";
        throw Error(msg, kExitConflict);
      }
      for (const auto& m : mismatches)
        spdlog::warn("--reset-state: replacing pinned map {} ({})", m.name, m.differences);
    }
    prepare_xdp();
  } catch (...) {
    roceguard__destroy(skel_);
    skel_ = nullptr;
    throw;
  }
}

void BpfObject::prepare_pins() {
  if (pins_prepared_) return;
  pins_prepared_ = true;
  const std::string& pin_path = pin_path_;
  if (reset_state_) {
    for (const char* name : kPinnedMaps) unlink((pin_path + "/" + name).c_str());
    unlink((pin_path + "/" + kMapQpLegacy).c_str());
    unlink((pin_path + "/" + kMapState).c_str());
    spdlog::info("--reset-state: removed the pinned maps and the attach record ({}) under {}; counters start at zero",
                 kMapState, pin_path);
    return;
  }
  // A build with new events only lengthens the counter value: carried
  // over rather than refused, so an upgrade keeps the counters.
  if (auto counters = migrate_counters(pin_path, bpf_map__value_size(skel_->maps.rg_counters))) {
    carried_.push_back({std::move(counters), kMapCounters, "counter entries"});
    spdlog::info("carried the counters in {}/{} over to this build's events (new events start at zero)", pin_path,
                 kMapCounters);
  }
  // Builds before the loss shield numbered one stream per CPU in a
  // 64-number window: their peer counters and stream counters carry
  // over; the numbering restarts, in this load's epoch.
  if (auto peers = migrate_peer_stats(pin_path)) {
    carried_.push_back({std::move(peers), kMapPeerStats, "peers"});
    spdlog::info("carried the peer counters in {}/{} over to this build's layout (tunnel sequence numbers "
                 "restart from 0)", pin_path, kMapPeerStats);
  }
  if (auto streams = migrate_tunnel_streams(pin_path, bpf_map__max_entries(skel_->maps.rg_tunnel_streams),
                                            bpf_map__map_flags(skel_->maps.rg_tunnel_streams))) {
    spdlog::info("carried {} tunnel sequence streams in {}/{} over to this build's layout (each as lane 0 "
                 "of its CPU)", streams->streams(), pin_path, kMapTunnelStreams);
    carried_.push_back({std::move(streams), kMapTunnelStreams, "streams"});
  }
  // A build before the per-family tables kept one rg_qp: its QPs carry
  // over into this build's tables (the old pin goes once the attach is
  // done).
  if (auto qps = migrate_qp_table(pin_path, cfg_.qp_entries)) {
    spdlog::info("carried {} QP directions in {}/{} over to {} and {}", qps->carried(), pin_path, kMapQpLegacy,
                 kMapQp4, kMapQp6);
    carried_.push_back({std::move(qps), "rg_qp4 and rg_qp6", "QP directions"});
  }
  // A build whose rg_qp4 and rg_qp6 were LRU hashes (of the 80- or the
  // 64-byte value): its tables carry over into slot tables, the counts now
  // kept in 32 or 16 bits by their low bits.
  if (auto qps = migrate_qp_values(pin_path, cfg_.qp_entries)) {
    spdlog::info("carried {} QP directions in {}/{} and {} over to this build's slot tables", qps->carried(),
                 pin_path, kMapQp4, kMapQp6);
    carried_.push_back({std::move(qps), "rg_qp4 and rg_qp6", "QP directions"});
  }
}

void BpfObject::finish_pins() {
  for (const Carried& c : carried_) {
    try {
      if (size_t n = c.map->carry_since_copy())
        spdlog::info("carried what the earlier build counted during the upgrade ({} {}) into {} under {}", n,
                     c.what, c.name, pin_path_);
    } catch (const std::exception& e) {
      spdlog::warn("cannot carry the earlier build's last counts into {} under {}: {}", c.name, pin_path_, e.what());
    }
  }
  carried_.clear();
  // Carried over into rg_qp4/rg_qp6 by prepare_pins(); kept until now so
  // that a failed upgrade leaves the earlier build its table.
  try {
    remove_legacy_qp_table(pin_path_);
  } catch (const std::exception& e) {
    spdlog::warn("{}", e.what());
  }
}

void BpfObject::prepare_xdp() {
  // libxdp loads the object itself so that, with a dispatcher, the XDP
  // program is loaded as an extension of it.
  DECLARE_LIBXDP_OPTS(xdp_program_opts, opts, .obj = skel_->obj, .prog_name = kProgXdp);
  xdp_ = xdp_program__create(&opts);
  if (long e = libxdp_get_error(xdp_)) {
    xdp_ = nullptr;
    throw Error("cannot prepare XDP program: " + xdp_error_text(e));
  }
  // libbpf adds SEC("xdp.frags")'s flag only when it loads the program,
  // but libxdp builds a dispatcher for multi-buffer frames only if every
  // program has the flag before: without it, veth refuses native XDP at a
  // jumbo MTU once the dispatcher is in front.
  if (int e = xdp_program__set_xdp_frags_support(xdp_, true))
    throw Error("cannot mark the XDP program multi-buffer capable: " + xdp_error_text(e));
}

void BpfObject::reopen() {
  if (loaded()) throw Error("internal: the BPF object is loaded already and cannot be opened again");
  open_fresh();
}

void BpfObject::discard() {
  open_fresh();
  pins_prepared_ = false;
  carried_.clear();
}

void BpfObject::open_fresh() {
  // libbpf loads an object once, even when that load failed.
  if (xdp_) xdp_program__close(xdp_);
  xdp_ = nullptr;
  roceguard__destroy(skel_);
  skel_ = roceguard__open();
  if (!skel_) throw Error("cannot open the embedded BPF object: " + errno_text(errno));
  configure(skel_, cfg_, tunnel_epoch_, pin_path_);
  prepare_xdp();
}

BpfObject::~BpfObject() {
  if (xdp_) xdp_program__close(xdp_);
  if (skel_) roceguard__destroy(skel_);
}

void BpfObject::pin_maps() {
  prepare_pins();
  struct stat st {};
  bool all = true;
  for (const char* name : kPinnedMaps) all &= stat((pin_path_ + "/" + name).c_str(), &st) == 0;
  if (all) return;
  // A second copy of the object, loaded without its programs: libbpf
  // creates the maps (with their BTF) and pins them; the copy goes, the
  // pins stay.
  struct roceguard* scratch = roceguard__open();
  if (!scratch) throw Error("cannot open the embedded BPF object: " + errno_text(errno));
  int err = 0;
  try {
    configure(scratch, cfg_, tunnel_epoch_, pin_path_);
    bpf_program* prog;
    bpf_object__for_each_program(prog, scratch->obj) bpf_program__set_autoload(prog, false);
    err = bpf_object__load(scratch->obj);
  } catch (...) {
    roceguard__destroy(scratch);
    throw;
  }
  roceguard__destroy(scratch);
  if (err) throw Error("cannot create the maps under " + pin_path_ + ": " + errno_text(err));
}

void BpfObject::link_forward() const {
  if (!cfg_.xdp_forward) throw Error("internal: the XDP fast path is off in this load");
  link_xdp_forward(skel_->obj);
}

void BpfObject::pin_forward() const {
  const std::string path = pin_path_ + "/" + kMapXdpNext;
  if (!cfg_.xdp_forward) {
    // An earlier attach's, whose programs no longer run.
    if (unlink(path.c_str()) == 0) spdlog::debug("removed {}: the XDP fast path is off", path);
    return;
  }
  // Under another name first, then in the old one's place: the path never
  // names no program array while the fast path runs.
  const std::string next = pin_path_ + "/" + kMapXdpNextStaging;
  unlink(next.c_str());
  if (bpf_obj_pin(map_fd(kMapXdpNext), next.c_str()) != 0)
    throw Error("cannot pin " + next + ": " + errno_text(errno));
  if (rename(next.c_str(), path.c_str()) != 0) {
    int err = errno;
    unlink(next.c_str());
    throw Error("cannot rename " + next + " to " + path + ": " + errno_text(err));
  }
  chmod(path.c_str(), 0600);
}

int BpfObject::xdp_prog_fd() const { return bpf_program__fd(skel_->progs.rg_xdp_ingress); }

int BpfObject::tc_prog_fd() const { return bpf_program__fd(skel_->progs.rg_tc_egress); }

int BpfObject::tc_ingress_prog_fd() const { return bpf_program__fd(skel_->progs.rg_tc_ingress); }

const rg_config& BpfObject::rodata() const { return skel_->rodata->rg_cfg; }

int BpfObject::map_fd(const char* name) const {
  bpf_map* m = bpf_object__find_map_by_name(skel_->obj, name);
  return m ? bpf_map__fd(m) : -1;
}

bool BpfObject::load_direct() {
  bpf_program* prog = skel_->progs.rg_xdp_ingress;
  if (bpf_program__fd(prog) >= 0) return bpf_program__type(prog) == BPF_PROG_TYPE_XDP;
  prepare_pins();
  // The hook already holds a directly attached program, so the dispatcher
  // is out of reach here; load the object as plain XDP ourselves and hand
  // libxdp the loaded program for any further interface.
  int err = roceguard__load(skel_);
  if (err) throw Error("cannot load the BPF object: " + errno_text(err) + " (rerun with --verbose for the verifier log)");
  xdp_program__close(xdp_);
  xdp_ = xdp_program__from_fd(dup(bpf_program__fd(prog)));
  if (long e = libxdp_get_error(xdp_)) {
    xdp_ = nullptr;
    throw Error("cannot hand the XDP program to libxdp: " + xdp_error_text(e));
  }
  return true;
}

void BpfObject::load() {
  if (loaded()) return;
  prepare_pins();
  reopen();  // in case libxdp tried and failed
  load_direct();
}

void BpfObject::ensure_loaded() const {
  if (tc_prog_fd() < 0) throw Error("BPF object was not loaded (rerun with --verbose for the libbpf log)");
}

}  // namespace rg
