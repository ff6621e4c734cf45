// Attaching roceguard as configured: the BPF object (bpf_object.h) on every
// configured interface's hooks (hooks.h), the tunnel maps written
// (map_writer.h), the attach record stored beside the pinned maps.
// Attachments outlive the process: XDP and TC hold the programs, the maps
// stay pinned, and a later attach or run replaces exactly its own programs.
#pragma once

#include <string>

#include "bpf_object.h"
#include "config.h"
#include "hooks.h"
#include "state.h"

namespace rg {

class Dataplane {
 public:
  // Opens the BPF object for cfg; see BpfObject for the pinned-map policy.
  Dataplane(const Config& cfg, const std::string& pin_path, bool reset_state);

  // Attaches to every configured interface, all or nothing: on any failure
  // everything this call changed is undone and rg::Error is thrown. Foreign
  // XDP programs (direct attach) or TC filters at our handle/priority are
  // refused with kExitConflict unless force. Writes the tunnel maps, pins
  // and the attach record, and detaches interfaces the previous record had
  // but cfg no longer lists. With skip_absent (`run`), an interface that
  // does not exist yet is no failure: it is recorded unattached (ifindex 0)
  // for the caller to attach when it appears.
  State attach_all(bool force, bool skip_absent = false);

  // (Re-)attaches one configured interface, e.g. after it came back.
  IfaceState attach_interface(const std::string& name, bool force);

  const Config& config() const { return cfg_; }
  const std::string& pin_path() const { return pin_path_; }

 private:
  // Removes what the previous record attached and this configuration does
  // not: an interface it dropped, or our filter at a handle/priority it
  // moved.
  void detach_unconfigured(const State& prev) const;

  Config cfg_;
  std::string pin_path_;
  BpfObject obj_;
  bool warned_no_dispatcher_ = false;
};

}  // namespace rg
