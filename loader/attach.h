// Loading the BPF object and attaching it: XDP through libxdp (its
// multi-program dispatcher when the kernel allows, a direct attach when not),
// TC egress through libbpf's clsact hooks at a fixed handle/priority.
// Attachments outlive the process: XDP and TC hold the programs, the maps
// stay pinned, and a later attach or run replaces exactly its own programs.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "config.h"
#include "state.h"

struct roceguard;
struct xdp_program;

namespace rg {

inline constexpr const char* kProgTc = "rg_tc_egress";
inline constexpr const char* kProgXdp = "rg_xdp_ingress";

// A pinned map that cannot be reused by this build/config.
struct MapMismatch {
  std::string name;
  std::string differences;  // "max_entries 1024 pinned, 2048 wanted"
};

// Compares the pinned maps under pin_path with what the object would create.
std::vector<MapMismatch> check_pinned_maps(struct roceguard* skel, const std::string& pin_path);

class Dataplane {
 public:
  // Opens the embedded object and applies cfg (rodata, qp_entries, pin
  // paths). Incompatible pinned maps are refused (kExitConflict) unless
  // reset_state, which unlinks every roceguard map pin first.
  Dataplane(const Config& cfg, const std::string& pin_path, bool reset_state);
  ~Dataplane();
  Dataplane(const Dataplane&) = delete;
  Dataplane& operator=(const Dataplane&) = delete;

  // Attaches to every configured interface, all or nothing: on any failure
  // everything this call changed is undone and rg::Error is thrown. Foreign
  // XDP programs (direct attach) or TC filters at our handle/priority are
  // refused with kExitConflict unless force. Writes the tunnel maps, pins
  // and the attach record, and detaches interfaces the previous record had
  // but cfg no longer lists.
  State attach_all(bool force);

  // (Re-)attaches one configured interface, e.g. after it came back.
  IfaceState attach_interface(const std::string& name, bool force);

  // Are our programs still where st says they are?
  static bool xdp_present(const IfaceState& st);
  static bool tc_present(const IfaceState& st);

  const Config& config() const { return cfg_; }
  const std::string& pin_path() const { return pin_path_; }
  int map_fd(const char* name) const;

 private:
  void ensure_loaded();
  // Loads the object without libxdp (XDP type, for a direct attach);
  // false when libxdp already loaded it as a dispatcher extension.
  bool load_direct();
  void write_maps();
  std::string xdp_attach(int ifindex, const std::string& name, bool force, uint32_t& prog_id,
                         std::vector<std::function<void()>>& undo);
  uint32_t tc_attach(int ifindex, const std::string& name, bool force,
                     std::vector<std::function<void()>>& undo);

  Config cfg_;
  std::string pin_path_;
  struct roceguard* skel_ = nullptr;
  struct xdp_program* xdp_ = nullptr;
  bool warned_direct_ = false;
};

// Removes roceguard's programs from one interface: the XDP program named
// rg_xdp_ingress (direct, or its dispatcher slot) and the TC filter at
// handle/priority if it runs rg_tc_egress. Never touches anything else.
// Returns one line per thing removed.
std::vector<std::string> detach_interface(int ifindex, const std::string& name, uint32_t tc_handle,
                                          uint32_t tc_priority);

// Routes libbpf and libxdp messages into spdlog.
void setup_bpf_logging();

}  // namespace rg
