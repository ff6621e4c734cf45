// The embedded BPF object: opened with the configuration applied, its
// persistent maps pinned under the pin path. A compatible pinned map is
// reused, so counters carry over a restart; an incompatible one is refused
// unless the caller resets the state. libxdp loads the object, so that the
// XDP program can become an extension of its dispatcher.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "dataplane/maps.h"

struct roceguard;
struct xdp_program;

namespace rg {

inline constexpr const char* kProgTc = "rg_tc_egress";
inline constexpr const char* kProgXdp = "rg_xdp_ingress";
inline constexpr const char* kProgTcIngress = "rg_tc_ingress";

// A pinned map that cannot be reused by this build/config.
struct MapMismatch {
  std::string name;
  std::string differences;  // "max_entries 1024 pinned, 2048 wanted"
};

// Compares the pinned maps under pin_path with what the object would create.
std::vector<MapMismatch> check_pinned_maps(struct roceguard* skel, const std::string& pin_path);

// Is any of roceguard's maps pinned under pin_path?
bool any_map_pinned(const std::string& pin_path);

// A random sequence epoch for one load (rg_config.tunnel_epoch), 1 to
// RG_TUNNEL_EPOCH_MASK (12 bits of the option):
// the sending gateway's streams restart from 0 whenever rg_peer_stats is
// created anew, and a fresh epoch is how the far gateway tells that restart
// from a late packet, however close the new numbers are to the old ones.
uint16_t new_tunnel_epoch();

class BpfObject {
 public:
  // Opens the embedded object and applies cfg (rodata, qp_entries, pin
  // paths). Incompatible pinned maps are refused (kExitConflict) unless
  // reset_state; maps of an earlier build that an upgrade carries over are
  // not incompatible. Nothing under the pin path changes here: see
  // prepare_pins().
  BpfObject(const Config& cfg, const std::string& pin_path, bool reset_state);
  ~BpfObject();
  BpfObject(const BpfObject&) = delete;
  BpfObject& operator=(const BpfObject&) = delete;

  // The first change to the pins, made once the caller's checks have all
  // passed: with reset_state every roceguard pin (maps and record) is
  // unlinked; otherwise an earlier build's maps are carried over to this
  // build's layout, each new map pinned in place of its old one. Once per
  // load; pin_maps() and the loads do it themselves when not done yet.
  void prepare_pins();
  // Once this load's programs run on every hook the earlier build's did:
  // adds what those counted since prepare_pins() copied their counters,
  // and removes the earlier build's per-QP table. Never throws.
  void finish_pins();

  // Creates and pins the maps that are not pinned yet, without loading any
  // program, so that they can be filled before a program runs: libxdp
  // loads the object only while attaching it (as a dispatcher extension
  // when it can). The object's own load then reuses the pins.
  void pin_maps();

  // libxdp's handle of the XDP program, for attaching it.
  struct xdp_program* xdp() const { return xdp_; }
  // Loads the object without libxdp (XDP type, for a direct attach);
  // false when libxdp already loaded it as a dispatcher extension.
  bool load_direct();
  // Throws unless the object is loaded (libxdp loads it on first attach).
  void ensure_loaded() const;
  // Loads the object unless libxdp already did: an attach with no XDP
  // program (every ingress at TC) has no XDP attach to load it.
  void load();
  bool loaded() const { return tc_prog_fd() >= 0; }
  // Opens the object afresh, configured as before, when no load succeeded:
  // libbpf refuses a second load of an object whose first one failed (as
  // libxdp's does when a kernel refuses its dispatcher).
  void reopen();
  // Drops this load after a failed attach put the pins back as they were:
  // the object is opened afresh and prepare_pins() runs again with the next
  // attempt (a loaded object would keep using the maps it was loaded with,
  // which no longer are the pinned ones).
  void discard();

  // The XDP fast path (dataplane.xdp_forward) is on in this load.
  bool forwards() const { return cfg_.xdp_forward; }
  // Puts rg_xdp_forward into this load's rg_xdp_next (again: idempotent).
  void link_forward() const;
  // With the fast path on, pins this load's rg_xdp_next in place of an
  // earlier attach's (the pin keeps its slot filled once the loader
  // exits); with it off, removes an earlier attach's. For when this load's
  // programs run.
  void pin_forward() const;

  int xdp_prog_fd() const;
  int tc_prog_fd() const;
  int tc_ingress_prog_fd() const;
  int map_fd(const char* name) const;
  // The read-only configuration the programs run with: cfg.rodata() and
  // this load's tunnel_epoch.
  const rg_config& rodata() const;

 private:
  void prepare_xdp();
  void open_fresh();

  Config cfg_;
  std::string pin_path_;
  bool reset_state_ = false;
  bool pins_prepared_ = false;
  // The maps prepare_pins() carried over, whose earlier programs' last
  // counts finish_pins() carries too.
  struct Carried {
    std::unique_ptr<CarriedMap> map;
    const char* name;
    const char* what;
  };
  std::vector<Carried> carried_;
  // One epoch for the object's life: a reopen() is the same load retried.
  uint16_t tunnel_epoch_ = 0;
  struct roceguard* skel_ = nullptr;
  struct xdp_program* xdp_ = nullptr;
};

// Routes libbpf and libxdp messages into spdlog.
void setup_bpf_logging();

// libxdp's text for one of its (negative) error codes.
std::string xdp_error_text(long err);
// The kernel's message for the last netlink request libbpf saw refused on
// this thread ("" when none), cleared by the call.
std::string take_kernel_message();

}  // namespace rg
