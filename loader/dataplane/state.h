// What roceguard keeps under its pin path (a bpffs directory, mode 0700):
// the persistent maps and rg_state, a one-element array map holding the
// attach record as JSON. bpffs holds only BPF objects, so the record is a
// map too; it lives and dies with the pinned maps it describes.
//
// The record carries its layout version ("layout"). A later roceguard reads
// every earlier layout (a field it lacks takes its default) and writes its
// own; a record from a later layout, or one that is not a record at all, is
// refused by name with the way out: --reset-state removes it with the maps.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace rg {

inline constexpr const char* kDefaultPinPath = "/sys/fs/bpf/roceguard";
inline constexpr const char* kMapState = "rg_state";
// Where an attach pins its rg_xdp_next before renaming it over the previous
// one (bpffs refuses names with a dot).
inline constexpr const char* kMapXdpNextStaging = "rg_xdp_next_new";
inline constexpr size_t kStateValueSize = 16384;
// Layout of the record: 1 = before versioning (no "layout" field), 2 = now.
// Raise it when a field changes meaning; a new field with a default does
// not need it.
inline constexpr int kStateLayout = 2;

inline constexpr const char* kIngressXdp = "xdp";
inline constexpr const char* kIngressTc = "tc";
inline constexpr const char* kTcAttachTcx = "tcx";
inline constexpr const char* kTcAttachClsact = "clsact";
// Prefix of the pinned tcx links, one per hook and interface
// ("tcx_egress_7"): a tcx link detaches when nothing holds it.
inline constexpr const char* kTcxPinPrefix = "tcx_";

// Attach record of one interface.
struct IfaceState {
  std::string name;
  int ifindex = 0;
  // Where the ingress program runs: kIngressXdp or kIngressTc (records
  // written before the choice existed say nothing: XDP).
  std::string ingress_hook = kIngressXdp;
  std::string xdp_mode;  // "dispatcher", "direct" or "" (not attached)
  uint32_t xdp_prog_id = 0;
  uint32_t tc_prog_id = 0;
  uint32_t tc_ingress_prog_id = 0;
  uint32_t tc_handle = 0;
  uint32_t tc_priority = 0;
  // How the TC programs are attached: kTcAttachTcx (links pinned beside the
  // maps) or kTcAttachClsact (filters at tc_handle/tc_priority; records
  // written before tcx say nothing: clsact).
  std::string tc_attach = kTcAttachClsact;
};

struct State {
  int layout = kStateLayout;  // of the record read; written as kStateLayout
  std::string version;
  std::string config_hash;
  nlohmann::json config;
  std::vector<IfaceState> interfaces;

  nlohmann::json to_json() const;
  // Throws rg::Error naming the field that has the wrong type, or a layout
  // later than kStateLayout.
  static State from_json(const nlohmann::json& j);
};

// Whether path is on a bpffs; the directory holding a pin path.
bool is_bpffs(const std::string& path);
std::string parent_of(const std::string& path);

// Mounts bpffs on /sys/fs/bpf when the pin path lives there and nothing is
// mounted (a fresh boot, or a new mount namespace); fails if the pin path's
// parent is not bpffs otherwise.
void ensure_bpffs(const std::string& pin_path);

// Exclusive lock on the pin directory (created 0700 if missing): one
// roceguard manages one pin path at a time. Released on close or death.
// The directory stays while the lock is held (a failed attach removes the
// pins, not the directory); the lock holder that created it removes it on
// release when it is empty.
class PinLock {
 public:
  // create=false: fail with kExitNotFound when the directory is missing.
  PinLock(const std::string& pin_path, bool create);
  ~PinLock();
  PinLock(const PinLock&) = delete;
  PinLock& operator=(const PinLock&) = delete;

 private:
  // Opens and locks the directory (creating it when create).
  void lock(bool create);

  std::string path_;
  int fd_ = -1;
  bool created_ = false;
};

bool pin_dir_exists(const std::string& pin_path);
// nullopt when nothing is recorded (no rg_state, or an empty one). A
// record this roceguard cannot read (a map of another layout, text that is
// not a record, a later layout) throws rg::Error (kExitConflict) naming it
// and --reset-state; nothing is read into a buffer of the wrong size.
std::optional<State> read_state(const std::string& pin_path);
// What is wrong with the pinned rg_state map itself ("value_size 65536,
// expected 16384"), or "" when it is absent or has the layout written here.
std::string state_map_mismatch(const std::string& pin_path);
// Size of the record s would be stored as; at most kStateValueSize - 1.
size_t state_record_size(const State& s);
void write_state(const std::string& pin_path, const State& s);
// Pinned files are root's alone: counters reveal traffic, and write access
// to rg_peers/rg_route* would let anyone redirect it.
void restrict_pins(const std::string& pin_path);
// Removes the persistent map pins, rg_state, the tcx link pins and the
// directory if empty.
void remove_pins(const std::string& pin_path);

}  // namespace rg
